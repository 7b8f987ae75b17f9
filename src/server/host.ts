import { vocabOf } from '../constrain/vocab.js';
import type { TokenVocab } from '../constrain/vocab.js';
import { validator } from '../constrain/schema.js';
import type { CompileLimits } from '../constrain/compile-meter.js';
import type { SchemaNode } from '../constrain/schema-compile.js';
import type { TokenConstraint } from '../constrain/constraint.js';
import type { Model } from '../api/model.js';
import type { FinishReason, GenerateOptions, GeneratedToken, GenerationResult } from '../generate/generate.js';
import type { ReplyEvent } from '../chat/reply.js';
import { replyReader } from '../chat/reply-reader.js';
import { ReplyStream } from '../generate/reply-stream.js';
import { type SamplingOptions, Sampler } from '../generate/sampler.js';
import type { Session, SessionSnapshot } from '../api/session.js';
import { type ChatMessage, type EncodeOptions, type ToolCall, encodeSegments, messageImages } from '../chat/format.js';
import { type ImageRows, countPads, expandPads } from '../model/media.js';
import { markerIds } from '../chat/xtml/format.js';
import { linkedAbort } from '../util/abort.js';
import { relay } from '../util/relay.js';
import { newCallId } from './call-ids.js';
import { type ToolDecl, turnConstraint } from '../chat/tool-grammar.js';
import { ApiError, badRequest, fromClient, fromClientAsync } from './errors.js';
import { PromptThread } from './prompt-thread.js';
import { promptOptions } from './prompt-options.js';
import { FairQueue } from './queue.js';
import { Gate } from './gate.js';
import { compileRequestSchemas } from './request-schemas.js';
import { PromptFork, prefill } from './prompt-fork.js';
import { choiceSampling } from './run-turn.js';
import { type ImageCount, type ImageOptions, ServerImages } from './images.js';

/** Validators of the schemas replies are checked against, by schema (each compiled once). */
const validators = new WeakMap<object, (value: unknown) => string | null>();

/** One chat turn as both APIs ask for it. */
export interface TurnRequest {
  messages: ChatMessage[];
  tools: ToolDecl[];
  /** "auto" (default with tools), "none", "required", or the name of the one tool to call. */
  toolChoice: 'auto' | 'none' | 'required' | { name: string };
  parallelToolCalls: boolean;
  /** Structured output: the reply is a JSON document matching this schema. */
  schema?: unknown;
  /** How the client asked for it (formats that tell the model, K3's, name it). */
  responseType?: 'json_object' | 'json_schema';
  /** Reasoning on or off (undefined: the template's default) and its effort, handed to the template. */
  thinking?: boolean;
  effort?: string;
  /** Most tokens of reasoning; then the reasoning block is closed for the model. */
  reasoningBudget?: number;
  templateVars?: Record<string, unknown>;
  sampling: Omit<GenerateOptions, 'signal' | 'constraint' | 'stopTokens' | 'maxTokens'>;
  /** Most tokens to generate; undefined: as many as the server allows. */
  maxTokens?: number;
}

export interface TurnResult {
  reasoning: string;
  content: string;
  toolCalls: ToolCall[];
  /** OpenAI's finish reasons; "aborted" when the client went away. */
  finish: 'stop' | 'length' | 'tool_calls' | 'aborted';
  /** The client's stop string that ended the reply, if one did. */
  stopString?: string;
  promptTokens: number;
  /** Prompt tokens a session had already consumed, so they were not fed again. */
  cachedTokens: number;
  completionTokens: number;
  /** Of the completion tokens, those sampled inside the reasoning block (its closing marker included). */
  reasoningTokens?: number;
  prefillSeconds: number;
  generateSeconds: number;
  /** Expert-cache activity during the turn. */
  hits: number;
  misses: number;
  bytesRead: number;
  /** Each sampled token with its log-probability, when the request asked for them. */
  logprobs?: TokenLogprob[];
}

/**
 * A sampled token of the reply and its log-probability (with the most likely alternatives when
 * asked). Every sampled token is listed, reasoning and tool-call markup included; the end token
 * and a forced beginning (fed, not sampled) are not.
 */
export interface TokenLogprob {
  token: number;
  logprob: number;
  top: { token: number; logprob: number }[];
}

/** What a turn yields as it runs: the reply's pieces, and each token's log-probability when asked. */
export type TurnEvent = ReplyEvent | { kind: 'logprob'; entry: TokenLogprob };

/** A turn rendered and checked against the context, ready to run. */
export interface PreparedTurn {
  req: TurnRequest;
  /** The prompt, ending with the reply's forced beginning (if any). */
  ids: number[];
  reasoningFirst: boolean;
  maxTokens: number;
  /** Text the reply is made to begin with (a required tool call's opening markup), and its ids. */
  forced: string;
  forcedIds: number;
  constraint: TokenConstraint | undefined;
  endTokens: number[];
  toolsOffered: boolean;
  /** The conversation's images (their rows), in the order their placeholders come in `ids`. */
  images: ImageRows[];
  /** Shared by the choices of one request: the prompt is run for the first, its state copied for the others. */
  fork?: PromptFork;
}

export interface HostOptions {
  /** The name clients use for the model. */
  id: string;
  /** Cap on tokens per reply (a request asking more is clipped). */
  maxTokens: number;
  /** Requests that may wait for the engine; more get 429. */
  queueLimit: number;
  /** Conversations kept at once, each in its own session (default 1, at least `parallel`); the model must have room for them. */
  sessions?: number;
  /** Turns that run at once, their decode steps batched (default 1). */
  parallel?: number;
  /** How image parts are taken (sizes, URLs). */
  images?: ImageOptions;
  /** What a request's JSON Schemas may cost to compile (default: no bound). */
  compile?: CompileLimits;
  /** Parses and schema compiles in progress at once; more wait their turn (default 2). */
  compiles?: number;
}

/**
 * The engine behind the HTTP routes: one model, its sessions, requests taking turns through a fair
 * queue, up to `parallel` at once (each on a session of its own, their steps batched by the
 * engine). Each turn renders the conversation in the model's chat template; when the session has
 * already consumed a prefix of it (the conversation so far), only the rest is fed — the logits are
 * the same either way, so this changes speed, never the answer.
 */
/** Conversations (and completion prompts) with more characters of text than this are rendered off the server's thread (below it, tokenizing prose takes milliseconds; JSON counts JSON_WEIGHT a character). */
const THREAD_CHARS = 256 * 1024;

/**
 * The characters of JSON that `values` write (strings quoted, keys, brackets and separators),
 * counted until `enough`: what a prompt renders besides its messages' text — tool declarations and
 * their schemas, tool calls' arguments, template variables.
 */
function jsonChars(values: unknown[], enough: number): number {
  let n = 0;
  const stack = [...values];
  while (stack.length && n <= enough) {
    const v = stack.pop();
    if (v === undefined) continue;
    if (typeof v === 'string') n += v.length + 2;
    else if (Array.isArray(v)) {
      n += 2 + v.length;
      for (const x of v) stack.push(x);
    } else if (v && typeof v === 'object') {
      n += 2;
      for (const [k, x] of Object.entries(v)) {
        n += k.length + 4;
        stack.push(x);
      }
    } else n += 5;
  }
  return n;
}

/**
 * JSON costs more to tokenize than prose of its length: with the demo's tokenizer 234 K characters
 * of 128 tool declarations are 192 K tokens and 0.24-0.46 s, 176 K characters of prose 40 K tokens
 * and 20 ms. A character of it counts this many toward THREAD_CHARS.
 */
const JSON_WEIGHT = 4;

export class Host {
  readonly queue: FairQueue;
  /** The sessions, with when each was last used (a clock of turns) and whether a turn runs on it. */
  private pool: { session: Session; used: number; busy: boolean }[] = [];
  private clock = 0;
  private vocabCache: TokenVocab | undefined;
  readonly started = Date.now();
  readonly images: ServerImages;
  /** Parses and schema compiles: at most `compiles` at once, each run in slices. */
  readonly work: Gate;
  /** Request bodies being parsed, and requests whose schemas are being compiled, now. */
  parsing = 0;
  compiling = 0;
  /** Large conversations are rendered and tokenized on a thread of their own (made at the first). */
  private promptThread: PromptThread | undefined;

  constructor(
    readonly model: Model,
    readonly opts: HostOptions,
  ) {
    this.queue = new FairQueue(opts.queueLimit, opts.parallel ?? 1);
    this.images = new ServerImages(model, opts.images);
    this.work = new Gate(opts.compiles ?? 2);
  }

  /**
   * The session to run `ids` on, and what is left to feed: the session whose history is the
   * longest prefix of `ids` (with at least `minNew` tokens after it), so a conversation continues
   * where it left off; else a new session while there is room for one, else the least recently
   * used, started over. The logits are the same either way: this changes speed, never the answer.
   * With `images` (those of `ids`), a history is kept only where the same images sit, and the
   * images still to feed come back. A session another turn is running on is never picked; the
   * one picked is the caller's until it calls `done`.
   */
  sessionFor(ids: readonly number[], minNew: number, images: readonly ImageRows[] = []): { session: Session; fresh: number[]; images: ImageRows[]; done: () => void } {
    const p = this.claim(this.continuing(ids, minNew, images));
    const r = p.session.resume(ids, minNew, images);
    return { session: p.session, fresh: r.fresh, images: r.images, done: () => (p.busy = false) };
  }

  /**
   * An idle session set to `snapshot` (a new one while there is room, else the least recently
   * used, whose history it replaces): a choice that starts where the request's first choice was
   * after the prompt. The session is the caller's until it calls `done`.
   */
  sessionAt(snapshot: SessionSnapshot): { session: Session; done: () => void } {
    const p = this.claim(undefined);
    try {
      p.session.restore(snapshot);
    } catch (e) {
      p.busy = false;
      throw e;
    }
    return { session: p.session, done: () => (p.busy = false) };
  }

  /** `pick`, else a new session while there is room, else the least recently used idle one: now the caller's. */
  private claim(pick: (typeof this.pool)[number] | undefined): (typeof this.pool)[number] {
    if (!pick && this.pool.length < this.maxSessions) this.pool.push((pick = { session: this.model.newSession(), used: 0, busy: false }));
    const idle = this.pool.filter((p) => !p.busy);
    // the queue lets at most `parallel` turns run, and there are at least that many sessions
    if (!pick && !idle.length) throw new Error('every session is in use');
    pick ??= idle.reduce((a, b) => (b.used < a.used ? b : a));
    pick.used = ++this.clock;
    pick.busy = true;
    return pick;
  }

  /** Sessions kept: at least one per turn that may run at once. */
  private get maxSessions(): number {
    return Math.max(this.opts.sessions ?? 1, this.opts.parallel ?? 1);
  }

  /** The idle kept session with the longest history that `ids` extends by at least `minNew` tokens. */
  private continuing(ids: readonly number[], minNew: number, images: readonly ImageRows[]): (typeof this.pool)[number] | undefined {
    let pick: (typeof this.pool)[number] | undefined;
    for (const p of this.pool) if (!p.busy && p.session.continues(ids, minNew, images) && (!pick || p.session.position > pick.session.position)) pick = p;
    return pick;
  }

  /** The prompt tokens a turn on `ids` will not feed again (what `sessionFor` would keep), for a reply's headers. */
  cachedFor(ids: readonly number[], minNew: number, images: readonly ImageRows[] = []): number {
    return this.continuing(ids, minNew, images)?.session.position ?? 0;
  }

  /** How many sessions are kept (of at most `sessions`) and the tokens each holds. */
  sessionStats(): { max: number; kept: number; tokens: number[] } {
    return { max: this.maxSessions, kept: this.pool.length, tokens: this.pool.map((p) => p.session.position) };
  }

  get contextLength(): number {
    return this.model.net.maxContext;
  }

  private vocab(): TokenVocab {
    return (this.vocabCache ??= vocabOf(this.model.tokenizer()));
  }

  /**
   * Render a turn's prompt: the ids (each image's placeholder repeated once per row of it), and
   * whether the reply starts inside the reasoning block.
   */
  private async prompt(req: TurnRequest): Promise<{ ids: number[]; reasoningFirst: boolean }> {
    const format = this.model.chatFormat();
    const tok = this.model.tokenizer();
    const opts = promptOptions(req, format);
    // the template refusing or mangling this conversation is about the conversation
    const codes = ['E_UNSUPPORTED', 'E_FORMAT'] as const;
    const text = req.messages.reduce((a, m) => a + m.content.length + (m.reasoning?.length ?? 0), 0);
    const chars = text + JSON_WEIGHT * jsonChars([req.messages.map((m) => m.toolCalls), opts.tools, opts.vars], THREAD_CHARS / JSON_WEIGHT);
    const rendered =
      chars > THREAD_CHARS
        ? await fromClientAsync('messages', () => this.renderOnThread(req.messages, opts), codes)
        : fromClient('messages', () => format.encode(tok, req.messages, opts), [...codes]);
    const images = messageImages<ImageCount>(req.messages);
    const token = this.model.vision?.mediaToken;
    let ids = rendered;
    if (images.length && token !== undefined) {
      // a chat template of the model's own may have no place for images
      if (countPads(rendered, token) !== images.length) throw badRequest(`this model's chat format (${format.source}) has no place for images`, 'messages');
      ids = expandPads(rendered, token, images);
    }
    return { ids, reasoningFirst: replyReader(format, tok, ids, { tools: false }).startsInReasoning };
  }

  /** A large conversation rendered on the prompt thread (the same tokenizer and format, loaded there). */
  private async renderOnThread(messages: ChatMessage[], opts: EncodeOptions): Promise<number[]> {
    this.promptThread ??= this.newPromptThread();
    this.rendering++;
    try {
      return await this.promptThread.encode(messages, opts);
    } finally {
      this.rendering--;
    }
  }

  /** Conversations being rendered (and completion texts tokenized) on the prompt thread now. */
  rendering = 0;

  /**
   * A completion's text tokenized as plain text: a long one on the prompt thread (megabytes take
   * seconds, which on the server's thread would stall every request), the same ids either way.
   */
  async tokenizeText(text: string): Promise<number[]> {
    if (text.length <= THREAD_CHARS) return this.model.tokenizer().encode(text);
    this.promptThread ??= this.newPromptThread();
    this.rendering++;
    try {
      return await this.promptThread.encodeText(text);
    } finally {
      this.rendering--;
    }
  }

  private newPromptThread(): PromptThread {
    return new PromptThread({ dir: this.model.dir, native: this.model.arch.chatFormat, modelVocab: this.model.config.vocab });
  }

  /**
   * A request's sampling options against this model and the library's sampler: a 400 now, before
   * the queue, rather than a fault mid-reply (the request schemas bound every field already; the
   * sampler is asked too, so no value it would refuse gets past the edge).
   */
  checkSampling(sampling: SamplingOptions): void {
    const vocab = this.model.config.vocab;
    for (const id of Object.keys(sampling.logitBias ?? {}))
      if (Number(id) >= vocab) throw badRequest(`logit_bias: token ${id} is beyond this model's vocabulary of ${vocab}`, 'logit_bias');
    fromClient(null, () => new Sampler(sampling));
  }

  /**
   * Count a conversation's prompt tokens (Anthropic's count_tokens), refusing what the turn would
   * refuse, in the same order: a conversation longer than the context, then its schemas.
   */
  async countTokens(req: TurnRequest, signal?: AbortSignal): Promise<number> {
    const n = (await this.prompt(req)).ids.length;
    this.checkFits(n);
    await this.schemas(req, signal);
    return n;
  }

  /** A conversation of `n` tokens must leave room for a token of reply: else the client's 400, naming the count. */
  checkFits(n: number): void {
    const limit = this.contextLength;
    if (n + 1 > limit)
      throw new ApiError(400, `the conversation is ${n} tokens and this model's context is ${limit} (with room for at least one token of reply)`, 'invalid_request_error', 'context_length_exceeded', 'messages');
  }

  /**
   * Render a turn, check it fits the context and compile what its reply is held to — before it
   * waits for the engine, so a request that cannot run gets its 400 at once, streaming or not.
   */
  async prepare(req: TurnRequest, signal?: AbortSignal): Promise<PreparedTurn> {
    return (await this.prepareChoices(req, 1, signal))[0];
  }

  /**
   * prepare for `n` choices of one request, choice i drawing with its own seed (choiceSampling):
   * the conversation is rendered and its schemas compiled once for them all; each choice gets a
   * constraint of its own (a grammar's state is per reply).
   */
  async prepareChoices(req: TurnRequest, n: number, signal?: AbortSignal): Promise<PreparedTurn[]> {
    const choices = Array.from({ length: n }, (_, i) => ({ ...req, sampling: choiceSampling(req.sampling, i) }));
    for (const c of choices) this.checkSampling(c.sampling);
    const { ids, reasoningFirst } = await this.prompt(req);
    // before any schema is compiled: a conversation that cannot run costs no more than its tokenizing
    this.checkFits(ids.length);
    const schemas = await this.schemas(req, signal);
    const fork = n > 1 ? new PromptFork() : undefined;
    return choices.map((c) => ({ ...this.plan(c, ids, reasoningFirst, schemas), ...(fork ? { fork } : {}) }));
  }

  /**
   * The request's schemas compiled — every one it brings, its tools' whether or not they are
   * offered — in slices, within the server's bounds, at most `compiles` requests at a time.
   */
  private async schemas(req: TurnRequest, signal?: AbortSignal): Promise<Map<unknown, SchemaNode>> {
    const list = [...req.tools.map((t, i) => ({ schema: t.parameters, param: `tools[${i}]` })), ...(req.schema !== undefined ? [{ schema: req.schema, param: 'response_format' }] : [])];
    if (!list.length) return new Map();
    return this.work.run(signal, async () => {
      this.compiling++;
      try {
        return await compileRequestSchemas(list, this.opts.compile ?? {});
      } finally {
        this.compiling--;
      }
    });
  }

  /** A rendered turn's constraint and limits, from its compiled schemas. */
  private plan(req: TurnRequest, ids: number[], reasoningFirst: boolean, schemas: ReadonlyMap<unknown, SchemaNode>): PreparedTurn {
    const limit = this.contextLength;
    const format = this.model.chatFormat();
    const tok = this.model.tokenizer();
    const endId = tok.specialId(format.assistantEnd);
    const endTokens = [...this.model.stopIds(), ...(endId !== undefined ? [endId] : [])];
    const toolsOffered = req.toolChoice !== 'none' && req.tools.length > 0;
    const decls = typeof req.toolChoice === 'object' ? req.tools.filter((t) => t.name === (req.toolChoice as { name: string }).name) : req.tools;
    const plan = fromClient(
      req.schema !== undefined ? 'response_format' : 'tools',
      () =>
        turnConstraint({
          vocab: this.vocab(),
          syntax: format.syntax,
          endTokens,
          reasoningFirst,
          schema: req.schema,
          schemas,
          reasoningBudget: req.reasoningBudget,
          ...(format.syntax.tools === 'xtml' ? { markers: markerIds(tok) } : {}),
          tools: toolsOffered
            ? { decls, required: req.toolChoice === 'required' || typeof req.toolChoice === 'object', parallel: req.parallelToolCalls && typeof req.toolChoice !== 'object', base: req.messages.reduce((n, m) => n + (m.toolCalls?.length ?? 0), 0) }
            : undefined,
        }),
      ['E_ARG'],
      'the schema cannot be enforced: ',
    );
    const cap = Math.min(req.maxTokens ?? this.opts.maxTokens, this.opts.maxTokens);
    // the forced beginning counts against the reply's tokens: a max_tokens it does not fit in cuts
    // it there, and that is the whole reply (finish "length"), nothing sampled
    const forcedIds = (plan.forcedSegments ? encodeSegments(tok, plan.forcedSegments) : plan.forced ? tok.encode(plan.forced, { markup: true }) : []).slice(0, cap);
    const all = [...ids, ...forcedIds];
    this.checkFits(all.length);
    const maxTokens = Math.min(cap - forcedIds.length, limit - all.length);
    const images = messageImages<ImageRows>(req.messages);
    return { req, ids: all, reasoningFirst, maxTokens, forced: plan.forced, forcedIds: forcedIds.length, constraint: plan.constraint, endTokens, toolsOffered, images };
  }

  /**
   * Run one turn (the caller holds the queue): yields the reply's pieces as they stream, returns
   * the whole. `signal` stops it within one token.
   */
  async *turn(turn: PreparedTurn, signal: AbortSignal): AsyncGenerator<TurnEvent, TurnResult> {
    // a reply that is its forced beginning cut by max_tokens samples nothing: no session needed
    if (turn.maxTokens === 0) return yield* this.turnOn(turn, signal, undefined, [], []);
    const fork = turn.fork;
    if (fork?.state) {
      // a later choice: it starts where the first was after the prompt
      const { session, done } = this.sessionAt(fork.state);
      try {
        return yield* this.turnOn(turn, signal, session, [], [], turn.ids.length);
      } finally {
        done();
      }
    }
    // at least one new token: the reply needs the logits after the last prompt token
    const { session, fresh, images, done } = this.sessionFor(turn.ids, 1, turn.images);
    try {
      if (!fork || images.length) return yield* this.turnOn(turn, signal, session, fresh, images);
      // the first choice runs the prompt and leaves the state after it for the others (a prompt
      // with images still to feed is fed as generation feeds it, and each choice feeds it again)
      const t0 = performance.now();
      const rest = await prefill(session, fresh, signal);
      if (!rest.length) fork.state = session.snapshot();
      const r = yield* this.turnOn(turn, signal, session, rest, [], turn.ids.length - fresh.length);
      return { ...r, prefillSeconds: r.prefillSeconds + (performance.now() - t0) / 1000 };
    } finally {
      done();
    }
  }

  /**
   * The turn on its session, `fresh` (and `images`) still to feed; `kept` of the prompt's tokens
   * were not fed for it (a kept session's, or a fork's copy).
   */
  private async *turnOn(turn: PreparedTurn, signal: AbortSignal, session: Session | undefined, fresh: number[], images: ImageRows[], kept = turn.ids.length - fresh.length): AsyncGenerator<TurnEvent, TurnResult> {
    const { req, ids, maxTokens, constraint, endTokens } = turn;
    const format = this.model.chatFormat();
    const tok = this.model.tokenizer();
    const endId = tok.specialId(format.assistantEnd);
    const prompt = ids.slice(0, ids.length - turn.forcedIds);
    const reader = replyReader(format, tok, prompt, { tools: turn.toolsOffered, decls: req.tools, callId: newCallId });
    // stop strings: on what a person reads when the format's structure is in token ids (K3's), else on the text
    const stream = new ReplyStream(reader, reader.byToken ? (req.sampling.stop ?? []) : []);
    const forced = tok.decoder();
    for (const id of ids.slice(prompt.length)) yield* stream.push(id, forced.push(id));
    const before = this.model.stats();
    const local = linkedAbort(signal);
    const gen = session?.generate(fresh, {
      ...req.sampling,
      maxTokens,
      signal: local.controller.signal,
      constraint,
      ...(images.length ? { images } : {}),
      stop: [...(endId === undefined && format.assistantEnd ? [format.assistantEnd] : []), ...(reader.byToken ? [] : (req.sampling.stop ?? []))],
      stopTokens: endTokens,
    });
    const ends = new Set([...endTokens, ...(endId !== undefined ? [endId] : [])]);
    const logprobs: TokenLogprob[] | undefined = req.sampling.logprobs ? [] : undefined;
    const held: TokenLogprob[] = [];
    // a token's log-probability goes out when its text does (before it, so a stream sends them
    // together); tokens whose text a stop string cuts never show and are not listed
    function* release(): Generator<TurnEvent> {
      for (const entry of held.splice(0)) {
        logprobs!.push(entry);
        yield { kind: 'logprob', entry };
      }
    }
    let result: GenerationResult = { text: '', tokens: [], finish: 'length', promptTokens: ids.length, prefillSeconds: 0, generateSeconds: 0 };
    let reasoningTokens = 0;
    try {
      if (gen) result = yield* relay(gen, async function* (step: GeneratedToken): AsyncGenerator<TurnEvent> {
        // sampled inside the reasoning block: the state before the token is read
        if (step.token >= 0 && !ends.has(step.token) && reader.inReasoning) reasoningTokens++;
        if (logprobs && step.token >= 0 && !ends.has(step.token)) held.push({ token: step.token, logprob: step.logprob, top: step.top ?? [] });
        if (step.text) {
          yield* release();
          yield* stream.push(step.token, step.text);
          // a stop string the stream found ends the generation after this token
          if (stream.stopped !== undefined) local.controller.abort();
        }
      });
    } catch (e) {
      // whatever the engine's state is after a fault, the next turn starts from a clean one
      session?.reset();
      throw e;
    } finally {
      local.dispose();
    }
    if (stream.stopped !== undefined) result = { ...result, finish: 'stop', stopString: stream.stopped };
    if (result.stopString === undefined) yield* release();
    // a forced beginning cut by max_tokens is unfinished markup: held back, it is not the content
    if (gen) for (const ev of stream.flush()) yield ev;
    const after = this.model.stats();
    return {
      reasoning: stream.reasoning,
      content: stream.content,
      toolCalls: reader.calls,
      finish: this.finish(result.finish, reader.calls.length > 0),
      ...(result.stopString !== undefined && req.sampling.stop?.includes(result.stopString) ? { stopString: result.stopString } : {}),
      // the forced beginning is part of the reply, though it was fed with the prompt
      promptTokens: ids.length - turn.forcedIds,
      cachedTokens: session ? Math.min(kept, ids.length - turn.forcedIds) : 0,
      completionTokens: result.tokens.length + turn.forcedIds,
      reasoningTokens,
      prefillSeconds: result.prefillSeconds,
      generateSeconds: result.generateSeconds,
      hits: after.hits - before.hits,
      misses: after.misses - before.misses,
      bytesRead: after.bytesRead - before.bytesRead,
      ...(logprobs ? { logprobs } : {}),
    };
  }

  private finish(f: FinishReason, calls: boolean): TurnResult['finish'] {
    if (f === 'aborted') return 'aborted';
    if (calls && f === 'stop') return 'tool_calls';
    return f === 'stop' ? 'stop' : 'length';
  }

  /** Check a structured reply against its schema (the grammar should make this always pass). */
  static check(schema: unknown, content: string): string | null {
    let doc: unknown;
    try {
      doc = JSON.parse(content);
    } catch (e) {
      return `not JSON: ${(e as Error).message}`;
    }
    // the choices of one request share their schema: its validator is compiled once
    let v = schema !== null && typeof schema === 'object' ? validators.get(schema) : undefined;
    if (!v) {
      v = validator(schema);
      if (schema !== null && typeof schema === 'object') validators.set(schema, v);
    }
    return v(doc);
  }

  async close(): Promise<void> {
    for (const p of this.pool) p.session.close();
    this.pool = [];
    await this.images.close();
    await this.promptThread?.close();
    return this.model.close();
  }
}
