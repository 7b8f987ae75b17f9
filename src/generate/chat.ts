import type { Session, SessionGenerateOptions } from '../engine/session.js';
import type { SessionOptions } from '../engine/model.js';
import type { ChatFormat, ChatMessage } from '../tokenizer/chat.js';
import type { Tokenizer } from '../tokenizer/tokenizer.js';
import { WasteError } from '../util/errors.js';
import { relay } from '../util/relay.js';
import { isObject } from '../util/fields.js';
import type { GenerationResult } from './generate.js';

export interface ChatOptions extends SessionOptions {
  /** The system message that opens the conversation. */
  system?: string;
  /** Another chat format than the model's own. */
  format?: ChatFormat;
  /** Tool declarations handed to the template (for templates that render them). */
  tools?: unknown[];
}

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
   * Send a user message (or a tool result, with `role: 'tool'`) and stream the reply as pieces of
   * text. The reply is added to `messages` when it ends — also when `signal` aborts it, with what
   * was generated so far.
   */
  async *send(text: string, opts: SessionGenerateOptions & { role?: 'user' | 'tool'; toolCallId?: string } = {}): AsyncGenerator<string, GenerationResult> {
    this.messages.push({ role: opts.role ?? 'user', content: text, ...(opts.toolCallId !== undefined ? { toolCallId: opts.toolCallId } : {}) });
    const ids = this.format.encode(this.tokenizer, this.messages, { open: true, tools: this.opts.tools });
    const { fresh, reset } = this.session.resume(ids);
    if (reset) this.reprocessed++;
    const gen = this.session.generate(fresh, { ...opts, stop: [...this.stopText, ...(opts.stop ?? [])], stopTokens: [...this.ends, ...(opts.stopTokens ?? [])] });
    const result = yield* relay(gen, (step) => (step.text ? [step.text] : []));
    const tokens = result.tokens.length && this.ends.includes(result.tokens[result.tokens.length - 1]) ? result.tokens.slice(0, -1) : result.tokens;
    this.messages.push({ role: 'assistant', content: result.text, ids: tokens });
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
