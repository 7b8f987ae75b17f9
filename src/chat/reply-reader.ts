import type { ChatFormat } from './format.js';
import type { Tokenizer } from '../tokenizer/tokenizer.js';
import { markerIds } from './xtml/format.js';
import { type CallIdMaker, type ReplyEvent, ReplyParser, type ReplyReader } from './reply.js';
import { XtmlReplyReader } from './xtml/reply.js';
import { type CallMarkup, CallMarkupReader, DEEPSEEK_MARKUP, GLM_MARKUP, KIMI_MARKUP, MISTRAL_MARKUP, QWEN_JSON_MARKUP, QWEN_XML_MARKUP } from './call-reader.js';
import { HARMONY, HarmonyReplyReader } from './harmony-reply.js';
import type { ToolDecl } from './tool-decl.js';
import type { ReplySyntax } from './syntax.js';

/** The formats whose calls are delimited by text markers and read by CallMarkupReader. */
const CALL_MARKUP: Partial<Record<NonNullable<ReplySyntax['tools']>, CallMarkup>> = {
  kimi: KIMI_MARKUP,
  hermes: QWEN_JSON_MARKUP,
  'qwen-xml': QWEN_XML_MARKUP,
  glm: GLM_MARKUP,
  deepseek: DEEPSEEK_MARKUP,
  mistral: MISTRAL_MARKUP,
};

/**
 * The reader of a reply in `syntax`, given what the prompt left open: `startInReasoning` (the
 * prompt opened the think block), `harmonyPrompt` (for harmony, the prompt's text from its last
 * `<|start|>` on). `tools` false: tool-call markup is text; `decls`: the declared tools (a call of
 * any other is text; the XML formats type their values by these schemas).
 */
export function readerFor(
  syntax: ReplySyntax,
  opts: { startInReasoning?: boolean; harmonyPrompt?: string; tools: boolean; decls?: readonly ToolDecl[]; callId?: CallIdMaker },
): ReplyReader {
  const reasoning = !!opts.startInReasoning && !!syntax.think;
  if (syntax.tools === 'harmony') return new HarmonyReplyReader(opts.harmonyPrompt, { tools: opts.tools, decls: opts.decls, callId: opts.callId });
  const markup = syntax.tools ? CALL_MARKUP[syntax.tools] : undefined;
  if (markup) return new CallMarkupReader(markup, syntax.think, { startInReasoning: reasoning, tools: opts.tools, decls: opts.decls, callId: opts.callId });
  return new TextReader(new ReplyParser(syntax, { startInReasoning: reasoning, tools: opts.tools, callId: opts.callId }), reasoning);
}

/** The text-driven parser as a reader, for formats that write no tool calls (a `<think>` block at most; the token's id tells it nothing). */
class TextReader implements ReplyReader {
  readonly byToken = false;
  constructor(
    private readonly p: ReplyParser,
    readonly startsInReasoning: boolean,
  ) {}
  push(_token: number, text: string): ReplyEvent[] {
    return text ? this.p.push(text) : [];
  }
  flush(): ReplyEvent[] {
    return this.p.flush();
  }
  get reasoning(): string {
    return this.p.reasoning;
  }
  get content(): string {
    return this.p.content;
  }
  get calls() {
    return this.p.calls;
  }
  get inReasoning(): boolean {
    return this.p.inReasoning;
  }
}

/**
 * The reader for the reply to `prompt` (ids `format` encoded, ending with the hand-over), which
 * knows where the prompt left the reply: inside the reasoning block or not. With `tools` false,
 * tool-call markup is not read as calls; `callId` names the calls whose ids the model does not write.
 */
export function replyReader(format: ChatFormat, tok: Tokenizer, prompt: readonly number[], opts: { tools: boolean; decls?: readonly ToolDecl[]; callId?: CallIdMaker }): ReplyReader {
  if (format.syntax.tools === 'xtml') {
    const ids = markerIds(tok);
    // the channel the prompt opened last: <|open|>think<|sep|> or <|open|>response<|sep|>
    const open = prompt.lastIndexOf(ids.open);
    const sep = prompt.lastIndexOf(ids.sep);
    const channel = open >= 0 && sep === prompt.length - 1 && tok.decode(prompt.slice(open + 1, sep)) === 'think' ? 'think' : 'response';
    return new XtmlReplyReader(ids, { channel, tools: opts.tools, callId: opts.callId });
  }
  const think = format.syntax.think;
  const tail = tok.decode(prompt.slice(-64));
  const start = tail.lastIndexOf(HARMONY.start);
  return readerFor(format.syntax, {
    ...opts,
    startInReasoning: !!think && tok.decode(prompt.slice(-8)).trimEnd().endsWith(think.open),
    harmonyPrompt: start >= 0 ? tail.slice(start + HARMONY.start.length) : undefined,
  });
}

/**
 * Tool declarations in OpenAI's shape (`{type: "function", function: {name, parameters}}`, or the
 * bare function) as the reader takes them; what is not one is left out, and when any is not,
 * nothing is returned (no call is then refused for its name).
 */
export function declaredTools(tools: readonly unknown[] | undefined): ToolDecl[] | undefined {
  if (!tools?.length) return undefined;
  const out: ToolDecl[] = [];
  for (const t of tools) {
    const f = (t && typeof t === 'object' && 'function' in t ? (t as { function: unknown }).function : t) as { name?: unknown; parameters?: unknown } | null;
    if (!f || typeof f !== 'object' || typeof f.name !== 'string') return undefined;
    out.push({ name: f.name, parameters: f.parameters ?? { type: 'object' } });
  }
  return out;
}
