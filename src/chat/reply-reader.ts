import type { ChatFormat } from './format.js';
import type { Tokenizer } from '../tokenizer/tokenizer.js';
import { markerIds } from './xtml/format.js';
import { type CallIdMaker, type ReplyEvent, ReplyParser, type ReplyReader } from './reply.js';
import { XtmlReplyReader } from './xtml/reply.js';

/** The text-driven parser of Kimi's and Hermes' markup as a reader (the token's id tells it nothing). */
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
export function replyReader(format: ChatFormat, tok: Tokenizer, prompt: readonly number[], opts: { tools: boolean; callId?: CallIdMaker }): ReplyReader {
  if (format.syntax.tools === 'xtml') {
    const ids = markerIds(tok);
    // the channel the prompt opened last: <|open|>think<|sep|> or <|open|>response<|sep|>
    const open = prompt.lastIndexOf(ids.open);
    const sep = prompt.lastIndexOf(ids.sep);
    const channel = open >= 0 && sep === prompt.length - 1 && tok.decode(prompt.slice(open + 1, sep)) === 'think' ? 'think' : 'response';
    return new XtmlReplyReader(ids, { channel, tools: opts.tools, callId: opts.callId });
  }
  const think = format.syntax.think;
  const reasoning = !!think && tok.decode(prompt.slice(-8)).trimEnd().endsWith(think.open);
  return new TextReader(new ReplyParser(format.syntax, { startInReasoning: reasoning, tools: opts.tools, callId: opts.callId }), reasoning);
}
