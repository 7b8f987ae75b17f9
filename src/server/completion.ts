import type { GenerateOptions, GeneratedToken, GenerationResult } from '../generate/generate.js';
import { topLogprobs } from '../generate/sampler.js';
import { logSumExp } from '../util/log-sum-exp.js';
import { relay } from '../util/relay.js';
import { yieldToLoop } from '../util/yield-to-loop.js';
import { ApiError, badRequest } from './errors.js';
import type { Host, TurnResult } from './host.js';
import { type PromptFork, prefill } from './prompt-fork.js';

/** A text completion as OpenAI's legacy API asks for it: text in, text out, no chat template. */
export interface CompletionRequest {
  /** Text (tokenized as plain text) or token ids. */
  prompt: string | number[];
  /** Return the prompt ahead of the completion (with `logprobs`, its tokens' log-probabilities too). */
  echo: boolean;
  /** Each token's log-probability with this many alternatives (0..20); undefined: none. */
  logprobs?: number;
  sampling: Omit<GenerateOptions, 'signal' | 'constraint' | 'stopTokens' | 'maxTokens' | 'logprobs' | 'topLogprobs'>;
  /** Most tokens to generate (default 16, as OpenAI's); 0 with `echo` scores the prompt only. */
  maxTokens?: number;
}

export interface PreparedCompletion {
  req: CompletionRequest;
  ids: number[];
  maxTokens: number;
  /** Shared by the choices of one request: the prompt is run for the first and copied for the others. */
  fork?: PromptFork;
}

/** A token of the returned text: the first prompt token has no log-probability (nothing precedes it). */
export interface CompletionToken {
  token: number;
  logprob: number | null;
  top: { token: number; logprob: number }[] | null;
  /** Where its text starts, in characters from the start of prompt + completion. */
  offset: number;
}

/** A token arrives just before its text, so a stream can send it with that text. */
export type CompletionEvent = { kind: 'text'; text: string } | { kind: 'token'; entry: CompletionToken };

export interface CompletionResult extends TurnResult {
  text: string;
  tokens?: CompletionToken[];
}

/** Rows of prompt logits computed at a time when scoring a prompt (memory: rows × vocabulary floats). */
const SCORE_CHUNK = 16;

/** Tokenize and check a completion request against the model and the server's limits. */
export async function prepareCompletion(host: Host, req: CompletionRequest): Promise<PreparedCompletion> {
  const vocab = host.model.config.vocab;
  const ids = typeof req.prompt === 'string' ? await host.tokenizeText(req.prompt) : req.prompt;
  for (const id of ids) if (id >= vocab) throw badRequest(`prompt: token ${id} is beyond this model's vocabulary of ${vocab}`, 'prompt');
  if (!ids.length) throw badRequest('prompt: there is nothing to complete (the prompt has no tokens)', 'prompt');
  host.checkSampling(req.sampling);
  const asked = Math.min(req.maxTokens ?? 16, host.opts.maxTokens);
  if (asked === 0 && !req.echo) throw badRequest('max_tokens: 0 generates nothing; it goes with echo (to score the prompt)', 'max_tokens');
  const limit = host.contextLength;
  const room = asked > 0 ? 1 : 0;
  if (ids.length + room > limit)
    throw new ApiError(400, `the prompt is ${ids.length} tokens and this model's context is ${limit}${room ? ' (with room for at least one token of completion)' : ''}`, 'invalid_request_error', 'context_length_exceeded', 'prompt');
  return { req, ids, maxTokens: Math.min(asked, limit - ids.length) };
}

/**
 * Run a completion (the caller holds the queue): yields its text and tokens as they come, returns
 * the whole. Scoring an echoed prompt feeds it from the start (every position's logits are needed);
 * otherwise the session picks up where it left off when the prompt extends what it has seen. With
 * a fork (choices of one request), only the first choice runs the prompt.
 */
export async function* runCompletion(host: Host, prep: PreparedCompletion, signal: AbortSignal): AsyncGenerator<CompletionEvent, CompletionResult> {
  const { req, ids, fork } = prep;
  const model = host.model;
  const tok = model.tokenizer();
  const V = model.config.vocab;
  const n = req.logprobs;
  const before = model.stats();
  const eos = new Set(model.stopIds());
  const tokens: CompletionToken[] | undefined = n !== undefined ? [] : undefined;
  let text = '';
  let aborted = false;
  let prefillSeconds = 0;
  let result: GenerationResult | undefined;
  const t0 = performance.now();
  // offsets count characters (code points) from the start of prompt + completion, as OpenAI's do
  let chars = req.echo ? 0 : [...tok.decode(ids)].length;
  // tokens wait here until their text is out (a character's bytes may span tokens)
  const held: CompletionToken[] = [];
  function* release(piece: string): Generator<CompletionEvent> {
    for (const entry of held.splice(0)) {
      entry.offset = chars;
      tokens!.push(entry);
      yield { kind: 'token', entry };
    }
    if (piece) {
      text += piece;
      chars += [...piece].length;
      yield { kind: 'text', text: piece };
    }
  }
  // scoring the prompt needs the logits after each of its tokens: it is fed from the start
  const scoring = req.echo && tokens !== undefined;
  const generating = prep.maxTokens > 0;
  // a later choice of a fork: the prompt has been run, its results are copied
  const copied = fork !== undefined && (generating ? fork.state !== undefined : fork.scored !== undefined);
  const first = fork !== undefined && !copied;
  const picked = copied
    ? generating
      ? { ...host.sessionAt(fork.state!), fresh: [] as number[] }
      : undefined
    : scoring || generating
      ? host.sessionFor(scoring ? [] : ids, scoring ? 0 : 1)
      : undefined;
  let fresh = scoring || !picked ? [] : picked.fresh;
  const cachedTokens = copied ? ids.length : picked && !scoring ? ids.length - fresh.length : 0;
  try {
    if (scoring && copied) {
      for (const { held: h, piece } of fork.scored!) {
        held.push(...h.map((e) => ({ ...e })));
        yield* release(piece);
      }
    } else if (scoring) {
      const session = picked!.session;
      session.reset();
      const dec = tok.decoder();
      // the first choice of a fork keeps what it gives out, for the others
      const scored: { held: CompletionToken[]; piece: string }[] = [];
      const out = function* (piece: string): Generator<CompletionEvent> {
        if (first) scored.push({ held: held.map((e) => ({ ...e })), piece });
        yield* release(piece);
      };
      held.push({ token: ids[0], logprob: null, top: null, offset: 0 });
      yield* out(dec.push(ids[0]));
      for (let i = 0; i < ids.length && !aborted; i += SCORE_CHUNK) {
        const chunk = ids.slice(i, i + SCORE_CHUNK);
        const rows = await session.forward(chunk, { allLogits: true });
        for (let j = 0; j < chunk.length && i + j + 1 < ids.length; j++) {
          const row = rows.subarray(j * V, (j + 1) * V);
          const next = ids[i + j + 1];
          held.push({ token: next, logprob: row[next] - logSumExp(row), top: n ? topLogprobs(row, n) : [], offset: 0 });
          yield* out(dec.push(next));
        }
        await yieldToLoop();
        aborted = signal.aborted;
      }
      yield* out(dec.flush());
      prefillSeconds = (performance.now() - t0) / 1000;
      if (first && !aborted) fork.scored = scored;
    } else if (req.echo) {
      yield* release(tok.decode(ids));
    }
    if (generating && !aborted && first) {
      // the first choice runs the prompt and leaves the state after it for the others
      if (!scoring) {
        const t1 = performance.now();
        aborted = (await prefill(picked!.session, fresh, signal)).length > 0;
        fresh = [];
        prefillSeconds += (performance.now() - t1) / 1000;
      }
      if (!aborted) fork.state = picked!.session.snapshot();
    }
    if (generating && !aborted) {
      const gen = picked!.session.generate(fresh, { ...req.sampling, maxTokens: prep.maxTokens, signal, ...(n !== undefined ? { logprobs: true, topLogprobs: n } : {}) });
      result = yield* relay(gen, async function* (step: GeneratedToken): AsyncGenerator<CompletionEvent> {
        if (tokens && step.token >= 0 && !eos.has(step.token)) held.push({ token: step.token, logprob: step.logprob, top: step.top ?? [], offset: 0 });
        if (step.text) yield* release(step.text);
      });
      // tokens whose text a stop string cut never show, and are not listed
      if (result.stopString === undefined) yield* release('');
    }
  } catch (e) {
    picked?.session.reset();
    throw e;
  } finally {
    picked?.done();
  }
  const after = model.stats();
  const finish = aborted || result?.finish === 'aborted' ? 'aborted' : result?.finish === 'stop' ? 'stop' : 'length';
  return {
    reasoning: '',
    content: text,
    toolCalls: [],
    text,
    finish,
    ...(result?.stopString !== undefined ? { stopString: result.stopString } : {}),
    promptTokens: ids.length,
    cachedTokens,
    completionTokens: result?.tokens.length ?? 0,
    prefillSeconds: prefillSeconds + (result?.prefillSeconds ?? 0),
    generateSeconds: result?.generateSeconds ?? 0,
    hits: after.hits - before.hits,
    misses: after.misses - before.misses,
    bytesRead: after.bytesRead - before.bytesRead,
    ...(tokens ? { tokens } : {}),
  };
}
