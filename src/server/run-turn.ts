import type { Context } from 'hono';
import { streamSSE } from 'hono/streaming';
import { ApiError, asApiError, openaiErrorBody } from './errors.js';
import type { Host, PreparedTurn, TurnEvent, TurnResult } from './host.js';
import { QueueFull } from './queue.js';
import type { RouteEnv } from './server.js';

/** What the request log line reports of a turn. */
export interface TurnLog {
  result?: TurnResult;
  stream: boolean;
  waitedSeconds: number;
  /** A streamed reply outlives its route handler: the log line waits for this. */
  done?: Promise<void>;
}

/** How long a streamed write may wait for the client to read before the turn is abandoned. */
export const STALL_MS = 60_000;

const busy = (e: QueueFull) => new ApiError(429, `${e.message}; retry in about ${e.retryAfter} s`, 'rate_limit_error', 'queue_full', null, { 'Retry-After': String(e.retryAfter) });

/** 429 at once when the queue is full, before the request is rendered or its grammar compiled. */
export function refuseIfBusy(host: Host): void {
  const full = host.queue.refusal();
  if (full) throw busy(full);
}

/**
 * A streamed write that does not drain within `ms` (a client that stopped reading but keeps the
 * connection) aborts the turn rather than holding the engine.
 */
export async function writeOrAbort(write: Promise<void>, ms: number, ac: AbortController): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const stalled = new Promise<void>((resolve) => {
    timer = setTimeout(() => {
      ac.abort();
      resolve();
    }, ms);
  });
  try {
    await Promise.race([write, stalled]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Wait for the engine in the fair queue (429 with Retry-After when it is full), then hand the turn
 * to `use`, releasing the engine when `use` is done — also when it throws or the client leaves.
 */
async function withEngine<T>(host: Host, client: string, signal: AbortSignal, use: () => Promise<T>): Promise<T> {
  let release: () => void;
  try {
    release = await host.queue.acquire(client, signal);
  } catch (e) {
    if (e instanceof QueueFull) throw busy(e);
    throw new ApiError(499, 'the client went away while waiting', 'invalid_request_error', 'client_closed');
  }
  try {
    return await use();
  } finally {
    release();
  }
}

/** Work run once the engine is free (the wait logged), the engine given back when it ends. */
export function queuedWork<T>(host: Host, client: string, signal: AbortSignal, log: TurnLog, work: () => Promise<T>): Promise<T> {
  const t0 = performance.now();
  return withEngine(host, client, signal, () => {
    log.waitedSeconds = (performance.now() - t0) / 1000;
    return work();
  });
}

/** A turn run to its end once the engine is free, its reply collected and logged. */
export async function queuedTurn(host: Host, client: string, signal: AbortSignal, turn: PreparedTurn, log: TurnLog): Promise<TurnResult> {
  const r = await queuedWork(host, client, signal, log, () => collectTurn(host, turn, signal));
  log.result = r;
  return r;
}

/** Drain a generator, handing each value to `onEvent`, and return what it returns. */
export async function drain<E, R>(it: AsyncGenerator<E, R>, onEvent: (e: E) => Promise<void> | void = () => {}): Promise<R> {
  for (;;) {
    const r = await it.next();
    if (r.done) return r.value;
    await onEvent(r.value);
  }
}

/**
 * The engine, held for a streamed turn: taken in the queue before the response starts (so "busy"
 * is still a real 429), given back — and the request's log line let out — by the function this
 * resolves with, which the stream calls when it ends.
 */
export async function holdEngine(host: Host, client: string, signal: AbortSignal, log: TurnLog): Promise<() => void> {
  const t0 = performance.now();
  let release!: () => void;
  await new Promise<void>((resolve, reject) => {
    withEngine(host, client, signal, () => {
      log.waitedSeconds = (performance.now() - t0) / 1000;
      resolve();
      return new Promise<void>((done) => (release = done));
    }).catch(reject);
  });
  let ended!: () => void;
  log.done = new Promise<void>((resolve) => (ended = resolve));
  return () => {
    release();
    ended();
  };
}

/** What stops a streamed turn: the client leaving, by either of the ways the server learns it. */
export function streamAbort(stream: { onAbort(f: () => void): void }, signal: AbortSignal): AbortController {
  const ac = new AbortController();
  stream.onAbort(() => ac.abort());
  signal.addEventListener('abort', () => ac.abort(), { once: true });
  return ac;
}

/** Run a turn to its end, collecting the reply. */
export function collectTurn(host: Host, req: PreparedTurn, signal: AbortSignal): Promise<TurnResult> {
  return drain(host.turn(req, signal));
}

/** Run a turn, handing each piece of the reply to `onEvent` as it streams. */
export function streamTurn(host: Host, req: PreparedTurn, signal: AbortSignal, onEvent: (e: TurnEvent) => Promise<void> | void): Promise<TurnResult> {
  return drain(host.turn(req, signal), onEvent);
}

/** The engine figures a response carries besides the reply (`waste` in our JSON). */
export function wasteStats(r: TurnResult): Record<string, number> {
  const demand = r.hits + r.misses;
  return {
    tokens: r.completionTokens,
    tokens_per_second: r.generateSeconds > 0 ? r.completionTokens / r.generateSeconds : 0,
    prefill_seconds: r.prefillSeconds,
    decode_seconds: r.generateSeconds,
    experts_hit: r.hits,
    experts_missed: r.misses,
    expert_hit_rate: demand ? r.hits / demand : 0,
    bytes_read: r.bytesRead,
  };
}

/**
 * The sampling of choice `i` of `n`: its own seed (the request's, plus its index), so choice 0 is
 * what the request gives with n = 1 and each choice is what a request with that seed gives alone.
 */
export function choiceSampling<T extends { seed?: number }>(sampling: T, i: number): T {
  return i === 0 ? sampling : { ...sampling, seed: ((sampling.seed ?? 0) + i) >>> 0 };
}

/** Several choices' results as one for the request's usage and log line: the prompt once, the rest summed. */
export function combined<R extends TurnResult>(results: R[]): R {
  const sum = (f: (r: R) => number) => results.reduce((t, r) => t + f(r), 0);
  return {
    ...results[0],
    finish: results.some((r) => r.finish === 'aborted') ? 'aborted' : results[results.length - 1].finish,
    completionTokens: sum((r) => r.completionTokens),
    reasoningTokens: sum((r) => r.reasoningTokens ?? 0),
    prefillSeconds: sum((r) => r.prefillSeconds),
    generateSeconds: sum((r) => r.generateSeconds),
    hits: sum((r) => r.hits),
    misses: sum((r) => r.misses),
    bytesRead: sum((r) => r.bytesRead),
  };
}

/** The choices of a request run in turn once the engine is free; a client that leaves stops the rest. */
export function queuedChoices<R extends TurnResult>(host: Host, client: string, signal: AbortSignal, log: TurnLog, count: number, run: (i: number) => Promise<R>): Promise<R[]> {
  return queuedWork(host, client, signal, log, async () => {
    const out: R[] = [];
    for (let i = 0; i < count && !signal.aborted; i++) out.push(await run(i));
    if (!out.length) throw new ApiError(499, 'the client went away while waiting', 'invalid_request_error', 'client_closed');
    log.result = combined(out);
    return out;
  });
}

/** How one OpenAI endpoint streams its choices (see streamChoices). */
export interface ChoiceStream<R extends TurnResult> {
  count: number;
  includeUsage: boolean;
  /** Run choice `i`, sending its pieces as they come. */
  run(i: number, send: (chunk: unknown) => Promise<void>, signal: AbortSignal): Promise<R>;
  /** The chunk that ends choice `i`. */
  finishChunk(i: number, r: R): Record<string, unknown>;
  /** The last chunk, with usage and no choices (sent only when the client asked for usage). */
  usageChunk(all: R): Record<string, unknown>;
}

/**
 * Stream a request's choices as server-sent events, one after another: each choice's pieces, then
 * its finishing chunk; usage once at the end when asked for, and the engine's figures on the last
 * chunk there is; then [DONE]. A client that leaves stops it within a token; a fault mid-stream is
 * sent as an OpenAI error event. `finished` gives the engine back when the stream ends.
 */
export function streamChoices<R extends TurnResult>(c: Context<RouteEnv>, signal: AbortSignal, log: TurnLog, finished: () => void, o: ChoiceStream<R>): Response {
  return streamSSE(c, async (stream) => {
    const ac = streamAbort(stream, signal);
    const send = (chunk: unknown) => writeOrAbort(stream.writeSSE({ data: JSON.stringify(chunk) }), STALL_MS, ac);
    try {
      const results: R[] = [];
      for (let i = 0; i < o.count; i++) {
        const r = await o.run(i, send, ac.signal);
        results.push(r);
        log.result = combined(results);
        if (r.finish === 'aborted' || ac.signal.aborted) return;
        const last = i === o.count - 1 && !o.includeUsage;
        await send({ ...o.finishChunk(i, r), ...(last ? { waste: wasteStats(log.result) } : {}) });
      }
      if (o.includeUsage) {
        const all = combined(results);
        await send({ ...o.usageChunk(all), waste: wasteStats(all) });
      }
      await stream.writeSSE({ data: '[DONE]' });
    } catch (e) {
      const err = asApiError(e);
      c.get('warn')(`stream failed: ${err.message}`);
      if (!ac.signal.aborted) await send(openaiErrorBody(err));
    } finally {
      finished();
    }
  });
}
