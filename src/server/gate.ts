import { ApiError } from './errors.js';

const gone = () => new ApiError(499, 'the client went away while waiting', 'invalid_request_error', 'client_closed');

/**
 * At most `slots` pieces of work at once, the rest waiting their turn in order: what bounds the
 * parses and schema compiles in progress (work that runs in slices, so several could otherwise
 * interleave, each holding its memory). A waiter whose signal aborts leaves the line.
 */
export class Gate {
  private busy = 0;
  private readonly waiters: (() => void)[] = [];

  constructor(readonly slots: number) {
    if (!(Number.isInteger(slots) && slots >= 1)) throw new Error(`a gate needs at least one slot (got ${slots})`);
  }

  /** Pieces of work running now. */
  get active(): number {
    return this.busy;
  }

  /** Pieces of work waiting for a slot. */
  get waiting(): number {
    return this.waiters.length;
  }

  /** Run `work` once a slot is free; a 499 if the signal aborts while it waits. */
  async run<T>(signal: AbortSignal | undefined, work: () => Promise<T>): Promise<T> {
    await this.enter(signal);
    try {
      return await work();
    } finally {
      this.leave();
    }
  }

  private enter(signal: AbortSignal | undefined): Promise<void> {
    if (signal?.aborted) return Promise.reject(gone());
    if (this.busy < this.slots) {
      this.busy++;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const start = () => {
        signal?.removeEventListener('abort', onAbort);
        this.busy++;
        resolve();
      };
      const onAbort = () => {
        const i = this.waiters.indexOf(start);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(gone());
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(start);
    });
  }

  private leave(): void {
    this.busy--;
    this.waiters.shift()?.();
  }
}
