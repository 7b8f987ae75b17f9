import type { ImageFeed, ImageRows } from '../model/media.js';
import type { TokenDecoder } from '../tokenizer/tokenizer.js';
import type { TokenConstraint } from '../constrain/constraint.js';
import { WasteError } from '../util/errors.js';
import { type SamplingOptions, Sampler, topLogprobs } from './sampler.js';
import { StopMatcher } from './stop.js';
import { logSumExp } from '../util/log-sum-exp.js';
import { yieldToLoop } from '../util/yield-to-loop.js';

export interface GenerateOptions extends SamplingOptions {
  /** Images for the prompt's placeholders (expanded: one per row), in order. */
  images?: readonly ImageRows[];
  /** Most tokens to generate (default 256). */
  maxTokens?: number;
  /** Stop when the text produces one of these (the stop string is not included). */
  stop?: string[];
  /** Ids that end generation besides the model's end-of-sequence ids (not included in the text). */
  stopTokens?: number[];
  /** Also report this many most likely tokens at each step, with log-probabilities (0 = off). */
  topLogprobs?: number;
  /** Keep every generated token with its log-probability (and `topLogprobs` alternatives) in the result. */
  logprobs?: boolean;
  /** Stops generation within one token; the session stays usable. */
  signal?: AbortSignal;
  /** Masks the tokens that cannot continue a grammar (structured output, tool calls) before each draw. */
  constraint?: TokenConstraint;
}

/** One generated token: its id, the text it completes (may be empty), its log-probability. */
export interface GeneratedToken {
  token: number;
  text: string;
  logprob: number;
  top?: { token: number; logprob: number }[];
}

export type FinishReason = 'stop' | 'length' | 'context' | 'aborted';

export interface GenerationResult {
  text: string;
  tokens: number[];
  finish: FinishReason;
  promptTokens: number;
  /** Seconds of prefill and of generation. */
  prefillSeconds: number;
  generateSeconds: number;
  /** Every generated token with its log-probability, when `logprobs` (or `topLogprobs`) was asked for. */
  logprobs?: GeneratedToken[];
  /** The stop string that ended the reply, when one did. */
  stopString?: string;
}

/** What the loop needs of a session: feed tokens and get the logits after the last. */
export interface Feedable {
  readonly position: number;
  readonly limit: number;
  readonly history: readonly number[];
  feed(ids: number[], images?: ImageFeed): Promise<Float32Array>;
  /** A prompt's images queued for feeding it in pieces (sessions of a model that takes images). */
  imageFeed?(ids: readonly number[], images: readonly ImageRows[]): ImageFeed;
  /** Logits after the last token fed (when the prompt is empty). */
  readonly lastLogits: Float32Array | undefined;
  /** Tokens the model runs together in prefill; a prompt is fed this many at a time. */
  readonly prefillChunk?: number;
}

/**
 * The generation loop. The prompt is fed, then each sampled token is reported and fed in turn, so
 * that when the loop ends the session has consumed every token it reported — a stop token, a
 * reply cut by a stop string, an aborted one — and the next call continues from there.
 */
export async function* generateTokens(
  session: Feedable,
  prompt: number[],
  opts: GenerateOptions,
  decoder: TokenDecoder,
  endIds: readonly number[],
): AsyncGenerator<GeneratedToken, GenerationResult> {
  const maxTokens = opts.maxTokens ?? 256;
  if (!(Number.isInteger(maxTokens) && maxTokens >= 1)) throw new WasteError('E_ARG', `max tokens must be a positive integer (got ${opts.maxTokens})`);
  const nTop = opts.topLogprobs ?? 0;
  if (!(Number.isInteger(nTop) && nTop >= 0 && nTop <= 100)) throw new WasteError('E_ARG', `top logprobs must be an integer in 0..100 (got ${opts.topLogprobs})`);
  if (session.position + prompt.length + 1 > session.limit)
    throw new WasteError('E_ARG', `the prompt (${prompt.length} tokens after ${session.position}) does not fit the context of ${session.limit} with room to answer`);
  const sampler = new Sampler(opts);
  const ends = new Set([...endIds, ...(opts.stopTokens ?? [])]);
  const stops = new StopMatcher(opts.stop ?? []);
  const t0 = performance.now();
  if (!prompt.length && !session.lastLogits) throw new WasteError('E_ARG', 'nothing to continue from: give a prompt');
  let logits = session.lastLogits!;
  // a chunk at a time (the model's own chunk boundaries, so the same arithmetic as all at once):
  // a long prefill can take minutes, and between chunks the event loop gets a turn — the kernels
  // compute on this thread, so without it no timer, signal, socket or /health probe is served —
  // and the signal is heard
  const piece = Math.max(1, session.prefillChunk ?? prompt.length);
  let images: ImageFeed | undefined;
  if (opts.images?.length) {
    if (!session.imageFeed) throw new WasteError('E_UNSUPPORTED', 'this session takes no images');
    images = session.imageFeed(prompt, opts.images);
  }
  for (let i = 0; i < prompt.length; i += piece) {
    if (i > 0) await yieldToLoop();
    if (opts.signal?.aborted) {
      const s = (performance.now() - t0) / 1000;
      return { text: '', tokens: [], finish: 'aborted', promptTokens: prompt.length, prefillSeconds: s, generateSeconds: 0, ...(opts.logprobs || nTop ? { logprobs: [] } : {}) };
    }
    logits = await session.feed(prompt.slice(i, i + piece), images);
  }
  const t1 = performance.now();

  const tokens: number[] = [];
  const records: GeneratedToken[] | undefined = opts.logprobs || nTop ? [] : undefined;
  let text = '';
  let finish: FinishReason = 'length';
  let unfed: number | undefined;
  try {
    for (let i = 0; i < maxTokens; i++) {
      // a turn for the event loop before each token (after the prefill's last chunk too)
      await yieldToLoop();
      if (opts.signal?.aborted) {
        finish = 'aborted';
        break;
      }
      const s = sampler.sample(opts.constraint ? opts.constraint.mask(logits) : logits, session.history, tokens);
      opts.constraint?.accept(s.token);
      tokens.push(s.token);
      const end = ends.has(s.token);
      const shown = end ? '' : stops.push(decoder.push(s.token));
      text += shown;
      unfed = s.token;
      // the model's own probability, as the alternatives are: a grammar's mask is not the model
      const logprob = opts.constraint ? logits[s.token] - logSumExp(logits) : s.logprob;
      const step: GeneratedToken = { token: s.token, text: shown, logprob, ...(nTop ? { top: topLogprobs(logits, nTop) } : {}) };
      records?.push(step);
      yield step;
      if (session.position + 1 > session.limit) {
        // no room to feed it: the reply ends here, the token reported but not consumed
        unfed = undefined;
        tokens.pop();
        records?.pop();
        finish = 'context';
        break;
      }
      unfed = undefined;
      logits = await session.feed([s.token]);
      if (end || stops.done) {
        finish = 'stop';
        break;
      }
    }
  } finally {
    // the consumer stopped early: consume the token it was shown, so the session matches what it saw
    if (unfed !== undefined) await session.feed([unfed]);
  }
  // tokens whose text a stop string cut show nothing: they are not part of the reply
  if (stops.done && records) while (records.length && records[records.length - 1].text === '') records.pop();
  if (!stops.done) {
    const tail = stops.push(decoder.flush()) + stops.flush();
    text += tail;
    if (tail) yield { token: -1, text: tail, logprob: 0 };
  }
  return { text, tokens, finish, promptTokens: prompt.length, prefillSeconds: (t1 - t0) / 1000, generateSeconds: (performance.now() - t1) / 1000, ...(records ? { logprobs: records } : {}), ...(stops.matched !== undefined ? { stopString: stops.matched } : {}) };
}
