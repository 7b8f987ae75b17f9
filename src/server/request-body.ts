import { yieldToLoop } from '../util/yield-to-loop.js';
import { ApiError } from './errors.js';

/**
 * Bytes of request bodies the server holds across all its connections: each request's body is
 * counted from its first byte (from its Content-Length when it declares one, before a byte is
 * read) until its answer is over, for what it becomes once parsed lives that long. A request that
 * would take the total past `max` is refused with 429 at once, its body left unread.
 */
export class BodyBudget {
  used = 0;

  constructor(readonly max: number) {}

  /** A request's share, empty until it takes bytes. */
  lease(): BodyLease {
    return new BodyLease(this);
  }
}

export class BodyLease {
  private held = 0;
  private released = false;

  constructor(private readonly budget: BodyBudget) {}

  /** Take n more bytes; false (nothing taken) when the budget has no room for them. */
  take(n: number): boolean {
    if (this.released) return false;
    if (this.budget.used + n > this.budget.max) return false;
    this.budget.used += n;
    this.held += n;
    return true;
  }

  /** Bytes this request holds. */
  get bytes(): number {
    return this.held;
  }

  /** Give every byte back (once). */
  release(): void {
    if (this.released) return;
    this.released = true;
    this.budget.used -= this.held;
    this.held = 0;
  }
}

export const tooLarge = (max: number) => new ApiError(413, `the request body is larger than this server accepts (${max} bytes, --max-body)`, 'invalid_request_error', 'request_too_large');

export const bodiesInFlight = (budget: BodyBudget) =>
  new ApiError(429, `this body does not fit beside the ${budget.used} bytes of request bodies the server holds: it takes at most ${budget.max} at once (--max-inflight); retry shortly`, 'rate_limit_error', 'bodies_in_flight', null, { 'Retry-After': '1' });

/**
 * Read a request body whole, counting it against its own bound (413) and, beyond what its lease
 * holds already, against the budget of bodies in flight (429). When it is refused part-way, the
 * rest is still read and dropped in the background: the answer goes out and the connection stays
 * in step, where stopping reading would leave the client writing into a reset.
 */
export async function readBody(body: ReadableStream<Uint8Array> | null, lease: BodyLease, maxBytes: number, budget: BodyBudget): Promise<string> {
  if (!body) return '';
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > maxBytes) throw discardRest(reader, tooLarge(maxBytes));
    if (total > lease.bytes && !lease.take(total - lease.bytes)) throw discardRest(reader, bodiesInFlight(budget));
    chunks.push(value);
  }
  return new TextDecoder().decode(Buffer.concat(chunks, total));
}

function discardRest(reader: ReadableStreamDefaultReader<Uint8Array>, e: ApiError): ApiError {
  void (async () => {
    try {
      // ends with the body, or when the connection goes (the server's request timeout closes a slow one)
      for (;;) if ((await reader.read()).done) return;
    } catch {
      /* the connection went: nothing left to read */
    }
  })();
  return e;
}

/** Values looked at between two turns of the event loop when walking a parsed body. */
export const WALK_SLICE = 65_536;

/**
 * Whether a parsed document nests deeper than `limit`, walked a slice at a time (a body of
 * millions of values is a long walk) and without recursion (a hostile body cannot overflow the
 * stack either).
 */
export async function nestedDeeperThan(doc: unknown, limit: number, pause: () => Promise<void> = yieldToLoop, slice = WALK_SLICE): Promise<boolean> {
  // each frame: a container's members, the next one to look at, and the container's depth
  const stack: { items: unknown[]; next: number; depth: number }[] = [];
  const enter = (v: unknown, depth: number): boolean => {
    if (v === null || typeof v !== 'object') return false;
    if (depth >= limit) return true;
    stack.push({ items: Array.isArray(v) ? v : Object.values(v), next: 0, depth });
    return false;
  };
  if (enter(doc, 0)) return true;
  let since = 0;
  while (stack.length) {
    const top = stack[stack.length - 1];
    if (top.next === top.items.length) {
      stack.pop();
      continue;
    }
    if (enter(top.items[top.next++], top.depth + 1)) return true;
    if (++since >= slice) {
      since = 0;
      await pause();
    }
  }
  return false;
}
