import * as fs from 'node:fs';
import * as path from 'node:path';
import { Template } from '@huggingface/jinja';
import { WasteError } from '../util/errors.js';
import { isObject } from '../util/fields.js';
import { checkModelLinks } from '../util/model-dir.js';
import { readJson, readText } from '../util/read.js';
import { KIMI_STYLE_TEMPLATE } from './kimi-template.js';
import type { Tokenizer } from '../tokenizer/tokenizer.js';
import { XtmlChatFormat } from './xtml/format.js';
import { type ReplySyntax, replySyntaxOf } from './syntax.js';

/**
 * Chat formats: how a conversation becomes token ids. Whatever the format, the markup it adds is
 * tokenized in markup mode (its control strings become control tokens) and what people wrote —
 * message contents — in plain mode, so no message can forge a turn marker. An assistant message
 * the model generated here keeps the exact ids it was sampled as.
 */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  /** For a tool result: the call it answers. */
  toolCallId?: string;
  /** Ids the model produced for this (assistant) message; used instead of re-tokenizing its text. */
  ids?: number[];
  /** An assistant's tool calls. */
  toolCalls?: ToolCall[];
  /** An assistant's reasoning, kept apart from its content. */
  reasoning?: string;
  /** The speaker's name (K3's format writes it as an attribute; the others leave it out). */
  name?: string;
  /**
   * The content's parts as the client sent them (`content` is the text ones joined): K3's format
   * tokenizes each text apart and puts a media block where each image is.
   */
  parts?: ContentPart[];
}

/** A text part, or an image by its source size in pixels (what a media block states). */
export type ContentPart = string | { image: { width: number; height: number } };

/** The images of a conversation, in the order a renderer meets them. */
export function messageImages<I extends { width: number; height: number }>(messages: readonly ChatMessage[]): I[] {
  const out: I[] = [];
  for (const m of messages) for (const p of m.parts ?? []) if (typeof p !== 'string') out.push(p.image as I);
  return out;
}

export interface ToolCall {
  id: string;
  name: string;
  /** The arguments as JSON text. */
  arguments: string;
}

export interface EncodeOptions {
  /** End with the hand-over to the assistant (default true). */
  open?: boolean;
  /**
   * The conversation ends with an assistant message to continue (a prefill of the reply): it is
   * rendered up to the end of its content and left open — nothing closes it and no hand-over
   * follows — so the reply goes on from its last character. Takes the place of `open`.
   */
  continueFinal?: boolean;
  /** Tool declarations (OpenAI shape) for templates that render them. */
  tools?: unknown[];
  /** More template variables: `thinking`, `reasoning_effort`, a client's chat_template_kwargs… */
  vars?: Record<string, unknown>;
  /** Reasoning on or off (undefined: the format's default) and how hard, for formats that take them as such (K3's). */
  thinking?: boolean;
  effort?: string;
  /** The request's tool_choice and response format, for formats that tell the model of them (K3's writes a system note). */
  toolChoice?: 'auto' | 'none' | 'required' | { name: string };
  responseFormat?: { type: 'json_object' } | { type: 'json_schema'; json_schema: { schema: unknown } };
}

/** How a model marks up its reply (decided in syntax.ts, for every front end). */
export type { ReplySyntax } from './syntax.js';

export interface ChatFormat {
  /** Where it came from: "chat_template.jinja", "chat.json", "Kimi default", "Kimi K3 XTML". */
  readonly source: string;
  /** The conversation as ids, ending with the hand-over to the assistant when `open`. */
  encode(tokenizer: Tokenizer, messages: ChatMessage[], opts?: EncodeOptions): number[];
  /**
   * The same conversation as the segments `encode` tokenizes, each on its own (what `waste template`
   * shows). Given the tokenizer, a generated message's ids stand where `encode` would use them.
   */
  render(messages: ChatMessage[], opts?: EncodeOptions, tokenizer?: Tokenizer): PromptSegment[];
  /** What ends an assistant turn: the markup after its content ("<|im_end|>" for Kimi). */
  readonly assistantEnd: string;
  readonly syntax: ReplySyntax;
}

/**
 * The message a rendering leaves open for the reply to continue (`continueFinal`): the final one,
 * which must be the assistant's, holding no tool calls (a call cannot be continued as text).
 */
export function continuedMessage(messages: readonly ChatMessage[], opts: EncodeOptions): ChatMessage | undefined {
  if (!opts.continueFinal) return undefined;
  const last = messages[messages.length - 1];
  if (last?.role !== 'assistant') throw new WasteError('E_FORMAT', 'only a final assistant message can be continued');
  if (last.toolCalls?.length) throw new WasteError('E_FORMAT', `messages[${messages.length - 1}]: a final assistant message is continued as the reply's beginning, and one with tool calls cannot be: send their results as tool messages`);
  return last;
}

/** A piece of rendered conversation: markup, a message's text, or a generated message's ids. */
export type PromptSegment = { kind: 'markup'; text: string } | { kind: 'text'; text: string } | { kind: 'ids'; ids: number[] };
type Segment = PromptSegment;

/** Each segment tokenized on its own: markup in markup mode, text in plain mode, ids as they are. */
export function encodeSegments(tokenizer: Tokenizer, segments: readonly PromptSegment[]): number[] {
  const out: number[] = [];
  // one id at a time: push(...ids) passes every id as an argument, and a long message's ids
  // overflow the stack
  const append = (ids: readonly number[]) => {
    for (const id of ids) out.push(id);
  };
  for (const s of segments) {
    if (s.kind === 'ids') append(s.ids);
    else if (s.text) append(tokenizer.encode(s.text, { markup: s.kind === 'markup' }));
  }
  return out;
}

/**
 * The C engine's `chat.json`: `system`, `user`, `assistant` (and optionally `tool`) as [prefix,
 * suffix] pairs, `open` the string that hands the turn to the model.
 */
export interface TurnFormat {
  system?: [string, string];
  user: [string, string];
  assistant: [string, string];
  tool?: [string, string];
  open: string;
  /** A system message put first when the conversation has none. */
  defaultSystem?: string;
}

/**
 * Kimi's turns (the K2 family's, which Kimi-Linear shares) as fixed pairs. A model that ships no
 * format gets KIMI_STYLE_TEMPLATE instead, because pairs cannot write tools; this stays as the
 * plain statement of the same turns that the tests hold the template to.
 */
export const KIMI_TURNS: TurnFormat = {
  system: ['<|im_system|>system<|im_middle|>', '<|im_end|>'],
  user: ['<|im_user|>user<|im_middle|>', '<|im_end|>'],
  assistant: ['<|im_assistant|>assistant<|im_middle|>', '<|im_end|>'],
  tool: ['<|im_system|>tool<|im_middle|>', '<|im_end|>'],
  open: '<|im_assistant|>assistant<|im_middle|>',
};

export class TurnChatFormat implements ChatFormat {
  readonly assistantEnd: string;
  readonly syntax: ReplySyntax = {};

  constructor(
    private readonly turns: TurnFormat,
    readonly source: string,
  ) {
    this.assistantEnd = turns.assistant[1];
  }

  encode(tokenizer: Tokenizer, messages: ChatMessage[], opts: EncodeOptions = {}): number[] {
    return encodeSegments(tokenizer, this.render(messages, opts));
  }

  render(messages: ChatMessage[], opts: EncodeOptions = {}): PromptSegment[] {
    if (opts.tools?.length || messages.some((m) => m.toolCalls?.length))
      throw new WasteError('E_UNSUPPORTED', `${this.source} has no way to write tools or tool calls; give the model a chat_template.jinja that does`);
    const t = this.turns;
    const segments: Segment[] = [];
    const all = t.defaultSystem !== undefined && messages[0]?.role !== 'system' ? [{ role: 'system' as const, content: t.defaultSystem }, ...messages] : messages;
    const continued = continuedMessage(messages, opts);
    for (const m of all) {
      const pair = m.role === 'system' ? (t.system ?? t.user) : m.role === 'tool' ? (t.tool ?? t.user) : t[m.role];
      segments.push({ kind: 'markup', text: pair[0] });
      segments.push(m.ids && m !== continued ? { kind: 'ids', ids: m.ids } : { kind: 'text', text: m.content });
      if (m !== continued) segments.push({ kind: 'markup', text: pair[1] });
    }
    if ((opts.open ?? true) && !continued) segments.push({ kind: 'markup', text: t.open });
    return segments;
  }
}

// Private-use characters mark where each message's content (and every other string a client
// wrote: tool declarations, call arguments, ids) sits in a rendered template, so it is tokenized as
// plain text and cannot become control tokens.
const OPEN = '\uE000';
const CLOSE = '\uE001';
const SENTINELS = /[\uE000\uE001]/g;
const plain = (s: string) => `${OPEN}s:${s.replace(SENTINELS, '')}${CLOSE}`;
// Letters, digits, _ . - only: no control token's text is made of these (they carry <| |> [ ] or
// the like), and a template may compare such strings (t.type == 'function', a tool's name), so they
// go in as they are. Everything else is wrapped.
const IDENTIFIER = /^[\p{L}\p{N}_.-]*$/u;
const guard = (s: string) => (IDENTIFIER.test(s) ? s : plain(s));

function wrapStrings(v: unknown): unknown {
  if (typeof v === 'string') return guard(v);
  if (Array.isArray(v)) return v.map(wrapStrings);
  if (isObject(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [guard(k), wrapStrings(x)]));
  return v;
}

/**
 * A Jinja chat template (chat_template.jinja, or tokenizer_config.json's chat_template), rendered
 * with @huggingface/jinja. Each message's content goes in wrapped in private-use sentinels, so the
 * rendered text can be cut back into markup and contents; a template that mangles contents beyond
 * recognition is refused rather than guessed at.
 */
export class JinjaChatFormat implements ChatFormat {
  private readonly template: Template;
  readonly assistantEnd: string;
  readonly syntax: ReplySyntax;

  constructor(
    text: string,
    readonly source: string,
    private readonly extra: Record<string, unknown> = {},
  ) {
    try {
      this.template = new Template(text);
    } catch (e) {
      throw new WasteError('E_FORMAT', `${source}: the chat template does not parse (${(e as Error).message})`);
    }
    this.syntax = replySyntaxOf(text);
    // what follows an assistant message's content, up to the next message (or the end)
    const probe = this.renderTemplate([
      { role: 'user', content: 'u' },
      { role: 'assistant', content: 'a' },
      { role: 'user', content: 'v' },
    ], false);
    const after = probe.segments.findIndex((s, i) => i > 0 && probe.segments[i - 1].kind === 'text' && (probe.segments[i - 1] as { text: string }).text === 'a');
    const next = probe.segments.findIndex((s) => s.kind === 'text' && s.text === 'v');
    const tail = after >= 0 ? probe.segments.slice(after, next >= 0 ? next : undefined).filter((s) => s.kind === 'markup') : [];
    const end = tail.map((s) => (s as { text: string }).text).join('');
    // the end marker is the first control-looking token of that markup, or the markup itself up to the next turn
    const marker = /<\|[^|]*\|>|\[[A-Z]+\]|<\/s>|<end_of_turn>/.exec(end);
    this.assistantEnd = marker ? marker[0] : end.trimEnd();
    // harmony closes a message with <|end|> and the assistant's turn with <|return|> (or <|call|>):
    // <|end|> after the reasoning is not the reply's end
    if (this.syntax.tools === 'harmony') this.assistantEnd = '<|return|>';
  }

  private renderTemplate(messages: ChatMessage[], open: boolean, tools?: unknown[], vars: Record<string, unknown> = {}, continueFinal = false): { segments: Segment[]; ids: Map<number, number[]> } {
    const ids = new Map<number, number[]>();
    const wrapped = messages.map((m, i) => {
      const content = m.content.replace(SENTINELS, '');
      if (m.ids) ids.set(i, m.ids);
      const out: Record<string, unknown> = { role: m.role, content: `${OPEN}${i}:${content}${CLOSE}` };
      if (m.toolCallId !== undefined) out.tool_call_id = guard(m.toolCallId);
      if (m.reasoning) out.reasoning_content = plain(m.reasoning);
      if (m.toolCalls?.length)
        out.tool_calls = m.toolCalls.map((c) => ({ id: guard(c.id), type: 'function', function: { name: guard(c.name), arguments: plain(c.arguments) } }));
      return out;
    });
    let text: string;
    try {
      text = this.template.render({
        bos_token: '',
        eos_token: '',
        ...this.extra,
        ...(wrapStrings(vars) as Record<string, unknown>),
        messages: wrapped,
        add_generation_prompt: open,
        ...(tools?.length ? { tools: wrapStrings(tools) } : {}),
      });
    } catch (e) {
      throw new WasteError('E_FORMAT', `${this.source}: the chat template failed (${(e as Error).message})`);
    }
    const segments: Segment[] = [];
    // the last segment that is the final message's content (where a continued message is cut)
    let finalAt = -1;
    let i = 0;
    while (i < text.length) {
      const o = text.indexOf(OPEN, i);
      const c = text.indexOf(CLOSE, i);
      if (o < 0) {
        if (c >= 0) throw this.mangled();
        segments.push({ kind: 'markup', text: text.slice(i) });
        break;
      }
      if (c >= 0 && c < o) throw this.mangled();
      segments.push({ kind: 'markup', text: text.slice(i, o) });
      const end = text.indexOf(CLOSE, o + 1);
      const m = /^(\d+|s):/.exec(text.slice(o + 1, end));
      if (end < 0 || !m || text.slice(o + 1, end).includes(OPEN)) throw this.mangled();
      const body = text.slice(o + 1 + m[0].length, end);
      const gen = m[1] === 's' ? undefined : ids.get(Number(m[1]));
      if (continueFinal && m[1] === String(messages.length - 1)) {
        finalAt = segments.length;
        segments.push({ kind: 'text', text: body });
      } else segments.push(gen && body === messages[Number(m[1])].content.replace(SENTINELS, '') ? { kind: 'ids', ids: gen } : { kind: 'text', text: body });
      i = end + 1;
    }
    if (continueFinal) {
      // as Hugging Face's continue_final_message: the conversation rendered closed, cut after the
      // final message's content
      if (finalAt < 0) throw new WasteError('E_UNSUPPORTED', `${this.source}: the chat template does not write the final assistant message's content, so it cannot be continued`);
      segments.length = finalAt + 1;
    }
    return { segments, ids };
  }

  private mangled(): WasteError {
    return new WasteError('E_UNSUPPORTED', `${this.source}: the chat template rewrites message contents in a way that cannot be kept apart from its markup`);
  }

  encode(tokenizer: Tokenizer, messages: ChatMessage[], opts: EncodeOptions = {}): number[] {
    return encodeSegments(tokenizer, this.render(messages, opts));
  }

  render(messages: ChatMessage[], opts: EncodeOptions = {}): PromptSegment[] {
    const continued = continuedMessage(messages, opts) !== undefined;
    return this.renderTemplate(messages, (opts.open ?? true) && !continued, opts.tools, opts.vars, continued).segments;
  }
}

/** A format a family's release speaks natively, in place of a template (the family says which). */
export type NativeChatFormat = 'xtml';

/**
 * The chat format of a model directory. A model whose family speaks a native format (K3: XTML)
 * speaks it, unless its directory has a chat_template.jinja (a template someone chose over it);
 * its chat.json, if any, is the C engine's CLI turns and is not read. Any other model: its
 * `chat.json` when present (a hand-written format for the CLI, as the C engine reads it), else its
 * Jinja template (chat_template.jinja, or tokenizer_config.json's chat_template), else Kimi's
 * default.
 */
export function loadChatFormat(dir: string, opts: { native?: NativeChatFormat } = {}): ChatFormat {
  checkModelLinks(dir);
  const at = (f: string) => path.join(dir, f);
  const jinja = fs.existsSync(at('chat_template.jinja'));
  if (opts.native === 'xtml') return jinja ? new JinjaChatFormat(readText(at('chat_template.jinja')), at('chat_template.jinja')) : new XtmlChatFormat();
  if (fs.existsSync(at('chat.json'))) return new TurnChatFormat(parseChatJson(at('chat.json')), at('chat.json'));
  if (jinja) return new JinjaChatFormat(readText(at('chat_template.jinja')), at('chat_template.jinja'));
  if (fs.existsSync(at('tokenizer_config.json'))) {
    const cfg = readJson(at('tokenizer_config.json'));
    const t = isObject(cfg) ? cfg.chat_template : undefined;
    const named = Array.isArray(t) ? t.filter(isObject) : [];
    const text = typeof t === 'string' ? t : (named.find((x) => x.name === 'default') ?? named[0])?.template;
    if (typeof text === 'string') return new JinjaChatFormat(text, `${at('tokenizer_config.json')} chat_template`);
  }
  return new JinjaChatFormat(KIMI_STYLE_TEMPLATE, 'Kimi default');
}

function parseChatJson(file: string): TurnFormat {
  const doc = readJson(file);
  if (!isObject(doc)) throw new WasteError('E_FORMAT', `${file}: not a JSON object`);
  const pair = (k: string, required: boolean): [string, string] | undefined => {
    const v = doc[k];
    if (v === undefined && !required) return undefined;
    if (!Array.isArray(v) || v.length !== 2 || typeof v[0] !== 'string' || typeof v[1] !== 'string')
      throw new WasteError('E_FORMAT', `${file}: "${k}" must be a [prefix, suffix] pair of strings`);
    return [v[0], v[1]];
  };
  if (typeof doc.open !== 'string') throw new WasteError('E_FORMAT', `${file}: "open" must be a string`);
  if (doc.system_default !== undefined && typeof doc.system_default !== 'string') throw new WasteError('E_FORMAT', `${file}: "system_default" must be a string`);
  return {
    system: pair('system', false),
    user: pair('user', true)!,
    assistant: pair('assistant', true)!,
    tool: pair('tool', false),
    open: doc.open,
    defaultSystem: doc.system_default as string | undefined,
  };
}
