import { yieldToLoop } from './yield-to-loop.js';

/**
 * An AbortController that also aborts when `parent` does: a caller ends its own work early (a stop
 * string found outside the loop) without owning the signal it was given. `dispose` detaches it, so
 * a signal reused for many calls does not gather listeners.
 */
export function linkedAbort(parent?: AbortSignal): { controller: AbortController; dispose: () => void } {
  const controller = new AbortController();
  if (!parent) return { controller, dispose: () => {} };
  const onAbort = () => controller.abort();
  if (parent.aborted) controller.abort();
  else parent.addEventListener('abort', onAbort, { once: true });
  return { controller, dispose: () => parent.removeEventListener('abort', onAbort) };
}

/**
 * A signal that aborts when any of `signals` does, with that one's reason: AbortSignal.any where
 * Node has it (≥ 20.3, which lets go of its listeners when the result is collected), else linked
 * by hand (the listeners then stay on the given signals until one aborts). A request's signal must
 * live as long as its body is read, so there is no earlier point at which to unlink it.
 */
export function eitherSignal(...signals: (AbortSignal | undefined)[]): AbortSignal | undefined {
  const given = signals.filter((s): s is AbortSignal => s !== undefined);
  if (given.length <= 1) return given[0];
  const any = (AbortSignal as unknown as { any?: (s: AbortSignal[]) => AbortSignal }).any;
  if (any) return any.call(AbortSignal, given);
  const ac = new AbortController();
  for (const s of given) {
    if (s.aborted) {
      ac.abort(s.reason);
      break;
    }
    s.addEventListener('abort', () => ac.abort(s.reason), { once: true, signal: ac.signal });
  }
  return ac.signal;
}

/**
 * A long synchronous job's safe point: the event loop gets a turn (timers, sockets, a Ctrl-C
 * handler), then the job stops with the signal's reason if it was aborted meanwhile.
 */
export async function safePoint(signal: AbortSignal | undefined): Promise<void> {
  await yieldToLoop();
  signal?.throwIfAborted();
}

/**
 * A promise that rejects with the signal's reason once it aborts, for a race against work that
 * cannot hear the signal itself; `done()` takes its listener off the signal.
 */
export function whenAborted(signal: AbortSignal | undefined): { aborted: Promise<never>; done: () => void } {
  const off = new AbortController();
  const aborted = new Promise<never>((_, reject) => {
    if (!signal) return;
    if (signal.aborted) return reject(signal.reason);
    signal.addEventListener('abort', () => reject(signal.reason), { once: true, signal: off.signal });
  });
  aborted.catch(() => {});
  return { aborted, done: () => off.abort() };
}

/** Wait `ms`, or less: rejects with the signal's reason as soon as it aborts. */
export async function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  signal?.throwIfAborted();
  const stop = whenAborted(signal);
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([new Promise<void>((resolve) => (timer = setTimeout(resolve, ms))), stop.aborted]);
  } finally {
    clearTimeout(timer);
    stop.done();
  }
}
