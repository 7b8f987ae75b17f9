import type { Session, SessionGenerateOptions } from '../engine/session.js';
import type { SessionOptions } from '../engine/model.js';
import type { ChatFormat, ChatMessage } from '../tokenizer/chat.js';
import type { Tokenizer } from '../tokenizer/tokenizer.js';
import { WasteError } from '../util/errors.js';
import { relay } from '../util/relay.js';
import { isObject } from '../util/fields.js';
import { linkedAbort } from '../util/abort.js';
import type { GenerationResult } from './generate.js';
import type { ReplyEvent } from './reply.js';
import { replyReader } from './reply-reader.js';
import { ReplyStream } from './reply-stream.js';

export interface ChatOptions extends SessionOptions {
  /** The system message that opens the conversation. */
  system?: string;
  /** Another chat format than the model's own. */
  format?: ChatFormat;
  /** Tool declarations handed to the template (for templates that render them). */
  tools?: unknown[];
  /** Reasoning on or off (undefined: the format's default — on for K3) and its effort (K3: low, high, max; OpenAI's names are mapped). */
  thinking?: boolean;
  effort?: string;
}

export type SendOptions = SessionGenerateOptions & { role?: 'user' | 'tool'; toolCallId?: string };

/**
 * A conversation on one session. Each `send` renders the whole conversation in the chat format and
 * feeds the model only what it has not consumed yet, so the state carries over from turn to turn;
 * replies keep the ids they were sampled as. When the rendering does not extend what was fed (a
 * template that rewrites history), the session starts over from the full conversation.
 */
export class Chat {
  readonly messages: ChatMessage[] = [];
  /** The last reply's result (finish reason, tokens, timings). */
  last: GenerationResult | undefined;
  /** Turns for which the session had to start over. */
  reprocessed = 0;
  private readonly ends: number[];
  private readonly stopText: string[];

  constructor(
    readonly session: Session,
    private readonly tokenizer: Tokenizer,
    readonly format: ChatFormat,
    eos: readonly number[],
    private readonly opts: ChatOptions = {},
  ) {
    if (opts.system !== undefined) this.messages.push({ role: 'system', content: opts.system });
    // the end of an assistant turn stops a reply: as a token when it is one, else as text
    const endId = tokenizer.specialId(format.assistantEnd);
    this.ends = endId !== undefined ? [...eos, endId] : [...eos];
    this.stopText = endId === undefined && format.assistantEnd ? [format.assistantEnd] : [];
  }

  /**
   * Send a user message (or a tool result, with `role: 'tool'`) and stream the reply's content as
   * pieces of text (its reasoning and tool calls are in `reply`'s events and in the message kept;
   * markup never shows). The reply is added to `messages` when it ends — also when `signal` aborts
   * it, with what was generated so far.
   */
  async *send(text: string, opts: SendOptions = {}): AsyncGenerator<string, GenerationResult> {
    return yield* relay(this.reply(text, opts), (e) => (e.kind === 'content' && e.text ? [e.text] : []));
  }

  /** Like `send`, streaming every piece of the reply: reasoning, content and tool calls. */
  async *reply(text: string, opts: SendOptions = {}): AsyncGenerator<ReplyEvent, GenerationResult> {
    this.messages.push({ role: opts.role ?? 'user', content: text, ...(opts.toolCallId !== undefined ? { toolCallId: opts.toolCallId } : {}) });
    const { thinking, effort } = this.opts;
    const vars = { ...(thinking !== undefined ? { thinking, enable_thinking: thinking } : {}), ...(effort !== undefined ? { reasoning_effort: effort } : {}) };
    const ids = this.format.encode(this.tokenizer, this.messages, { open: true, tools: this.opts.tools, thinking, effort, vars });
    const { fresh, reset } = this.session.resume(ids);
    if (reset) this.reprocessed++;
    const reader = replyReader(this.format, this.tokenizer, ids, { tools: !!this.opts.tools?.length });
    // stop strings: on what a person reads when the format's structure is in token ids, else on the text
    const stream = new ReplyStream(reader, reader.byToken ? (opts.stop ?? []) : []);
    const stop = reader.byToken ? this.stopText : [...this.stopText, ...(opts.stop ?? [])];
    const { controller, dispose } = linkedAbort(opts.signal);
    let result: GenerationResult;
    try {
      const gen = this.session.generate(fresh, { ...opts, signal: controller.signal, stop, stopTokens: [...this.ends, ...(opts.stopTokens ?? [])] });
      result = yield* relay(gen, (step) => {
        const events = stream.push(step.token, step.text);
        if (stream.stopped !== undefined) controller.abort();
        return events;
      });
    } finally {
      dispose();
    }
    for (const e of stream.flush()) yield e;
    if (stream.stopped !== undefined) result = { ...result, finish: 'stop', stopString: stream.stopped };
    const tokens = result.tokens.length && this.ends.includes(result.tokens[result.tokens.length - 1]) ? result.tokens.slice(0, -1) : result.tokens;
    // a template format gets the reply's text back whole (its ids stand for it); K3's its parts
    if (reader.byToken)
      this.messages.push({
        role: 'assistant',
        content: stream.content,
        ...(stream.reasoning ? { reasoning: stream.reasoning } : {}),
        ...(reader.calls.length ? { toolCalls: reader.calls } : {}),
        ids: tokens,
      });
    else this.messages.push({ role: 'assistant', content: result.text, ids: tokens });
    this.last = result;
    return result;
  }

  /** Forget the conversation (the system message stays) and the session's state. */
  reset(): void {
    this.messages.splice(this.opts.system !== undefined ? 1 : 0);
    this.session.reset();
    this.last = undefined;
  }

  /** Give the session back to the model. */
  close(): void {
    this.session.close();
  }

  /** Save the session and the conversation to `file`. */
  save(file: string): void {
    this.session.save(file, { chat: 1, messages: this.messages });
  }

  /** Load a conversation saved by `save` (checked before anything changes). */
  load(file: string): void {
    let messages: ChatMessage[] = [];
    this.session.load(file, (data) => {
      messages = chatMessages(data, file);
    });
    // one at a time: splice(0, n, ...messages) passes a saved file's every message as an argument
    this.messages.length = 0;
    for (const m of messages) this.messages.push(m);
    this.last = undefined;
  }
}

function chatMessages(data: unknown, file: string): ChatMessage[] {
  const bad = () => new WasteError('E_FORMAT', `${file} holds a session but not a saved chat`);
  if (!isObject(data) || data.chat !== 1 || !Array.isArray(data.messages)) throw bad();
  return data.messages.map((m) => {
    if (!isObject(m) || !['system', 'user', 'assistant', 'tool'].includes(m.role as string) || typeof m.content !== 'string') throw bad();
    if (m.ids !== undefined && !(Array.isArray(m.ids) && m.ids.every((x) => typeof x === 'number' && Number.isInteger(x) && x >= 0))) throw bad();
    if (m.toolCallId !== undefined && typeof m.toolCallId !== 'string') throw bad();
    return m as unknown as ChatMessage;
  });
}
