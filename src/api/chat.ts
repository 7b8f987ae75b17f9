import type { Session, SessionGenerateOptions } from './session.js';
import type { SessionOptions } from './model.js';
import { type ChatFormat, type ChatMessage, type ContentPart, messageImages } from '../chat/format.js';
import { type ImageRows, expandPads } from '../model/media.js';
import type { ImageRoute, RgbImage } from '../image/preprocess.js';
import type { Tokenizer } from '../tokenizer/tokenizer.js';
import { WasteError } from '../util/errors.js';
import { relay } from '../util/relay.js';
import { isObject } from '../util/fields.js';
import { linkedAbort } from '../util/abort.js';
import type { GenerationResult } from '../generate/generate.js';
import type { ReplyEvent } from '../chat/reply.js';
import { declaredTools, replyReader } from '../chat/reply-reader.js';
import { ReplyStream } from '../generate/reply-stream.js';

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
  /** How images become patches (default `waste`, the C engine's; `native`, the release processor's resolution). */
  imageRoute?: ImageRoute;
}

export type SendOptions = SessionGenerateOptions & { role?: 'user' | 'tool'; toolCallId?: string };

/** An image for a message: a file's path, its encoded bytes (PNG, JPEG, BMP, GIF), decoded pixels, or one the model has encoded. */
export type ImageInput = string | Uint8Array | RgbImage | ImageRows;

/** A message: its text, and images shown before it. */
export interface MessageInput {
  text: string;
  images?: readonly ImageInput[];
}

/** What a chat needs of its model to take images. */
export interface ChatImages {
  token: number;
  encode(image: ImageInput, signal?: AbortSignal): Promise<ImageRows>;
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
    private readonly media?: ChatImages,
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
  async *send(message: string | MessageInput, opts: SendOptions = {}): AsyncGenerator<string, GenerationResult> {
    return yield* relay(this.reply(message, opts), (e) => (e.kind === 'content' && e.text ? [e.text] : []));
  }

  /**
   * Like `send`, streaming every piece of the reply: reasoning, content and tool calls. A message's
   * images are put through the model's vision tower first (each is shown before the text).
   */
  async *reply(message: string | MessageInput, opts: SendOptions = {}): AsyncGenerator<ReplyEvent, GenerationResult> {
    const { text, images: given = [] } = typeof message === 'string' ? { text: message } : message;
    if (typeof text !== 'string') throw new WasteError('E_ARG', 'a message needs its text (a string)');
    let parts: ContentPart[] | undefined;
    if (given.length) {
      if (!this.media) throw new WasteError('E_UNSUPPORTED', 'this model takes no images (it has no vision tower, or it was opened with vision off)');
      const rows: ImageRows[] = [];
      const t0 = performance.now();
      try {
        for (const im of given) rows.push(await this.media.encode(im, opts.signal));
      } catch (e) {
        // stopped while the tower ran: as a reply stopped in its prefill, nothing added
        if (opts.signal?.aborted) return { text: '', tokens: [], finish: 'aborted', promptTokens: 0, prefillSeconds: (performance.now() - t0) / 1000, generateSeconds: 0 };
        throw e;
      }
      parts = [...rows.map((image) => ({ image })), ...(text ? [text] : [])];
    }
    const turn: ChatMessage = { role: opts.role ?? 'user', content: text, ...(parts ? { parts } : {}), ...(opts.toolCallId !== undefined ? { toolCallId: opts.toolCallId } : {}) };
    const messages = [...this.messages, turn];
    const { thinking, effort } = this.opts;
    const vars = { ...(thinking !== undefined ? { thinking, enable_thinking: thinking } : {}), ...(effort !== undefined ? { reasoning_effort: effort } : {}) };
    const rendered = this.format.encode(this.tokenizer, messages, { open: true, tools: this.opts.tools, thinking, effort, vars });
    const all = messageImages<ImageRows>(messages);
    if (all.some((im) => !im.rows)) throw new WasteError('E_STATE', "this conversation's images were not saved with it; start a new conversation to show them again");
    const ids = all.length ? expandPads(rendered, this.media!.token, all) : rendered;
    // only a message that renders joins the conversation: one that cannot would fail every later turn too
    this.messages.push(turn);
    const { fresh, reset, images } = this.session.resume(ids, 0, all);
    if (reset) this.reprocessed++;
    const reader = replyReader(this.format, this.tokenizer, ids, { tools: !!this.opts.tools?.length, decls: declaredTools(this.opts.tools) });
    // stop strings: on what a person reads when the format's structure is in token ids, else on the text
    const stream = new ReplyStream(reader, reader.byToken ? (opts.stop ?? []) : []);
    const stop = reader.byToken ? this.stopText : [...this.stopText, ...(opts.stop ?? [])];
    const { controller, dispose } = linkedAbort(opts.signal);
    let result: GenerationResult;
    try {
      const gen = this.session.generate(fresh, { ...opts, ...(images.length ? { images } : {}), signal: controller.signal, stop, stopTokens: [...this.ends, ...(opts.stopTokens ?? [])] });
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

  /** Save the session and the conversation to `file` (an image is saved as its size, not its pixels). */
  save(file: string): void {
    const messages = this.messages.map((m) => (m.parts ? { ...m, parts: m.parts.map((p) => (typeof p === 'string' ? p : { image: { width: p.image.width, height: p.image.height } })) } : m));
    this.session.save(file, { chat: 1, messages });
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
