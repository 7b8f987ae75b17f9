/** Thrown when the queue is full: the client should come back after `retryAfter` seconds. */
export class QueueFull extends Error {
  constructor(readonly retryAfter: number) {
    super('the server is busy: too many requests are waiting');
  }
}

interface Waiter {
  client: string;
  start: () => void;
  fail: (e: Error) => void;
}

/**
 * One engine, many requests: up to `slots` turns run at a time (their decode steps batched in the
 * engine). Waiting requests are served round-robin by client (each client's requests in order), so
 * one client sending many cannot starve the others. Beyond `limit` waiting requests, `acquire`
 * refuses at once with a wait estimate from the recent turn times. A waiter whose signal aborts
 * (its client went away) leaves the queue.
 */
export class FairQueue {
  /** Turns running now. */
  private busy = 0;
  private readonly byClient = new Map<string, Waiter[]>();
  private order: string[] = [];
  private waiting = 0;
  private meanSeconds = 5;

  constructor(
    private readonly limit: number,
    /** Turns that may run at once. */
    readonly slots = 1,
  ) {}

  get queued(): number {
    return this.waiting;
  }

  /** Whether any turn is running. */
  get running(): boolean {
    return this.busy > 0;
  }

  /** How many turns are running. */
  get active(): number {
    return this.busy;
  }

  /** A request arriving now would be refused: checked before any work is spent on it. */
  refusal(): QueueFull | undefined {
    // turns run `slots` at a time: the wait is the queue ahead in rounds of that many
    return this.busy >= this.slots && this.waiting >= this.limit ? new QueueFull(Math.max(1, Math.ceil((this.meanSeconds * (this.waiting + 1)) / this.slots))) : undefined;
  }

  /** Wait until no turn runs (every slot taken in turn); resolves with the release of all of them. */
  async drain(client: string): Promise<() => void> {
    const all: (() => void)[] = [];
    for (let i = 0; i < this.slots; i++) all.push(await this.acquire(client, undefined, true));
    return () => all.forEach((r) => r());
  }

  /** Wait for the engine (`beyondLimit`: even when the queue is full); resolves with `release`, to be called when the turn is over. */
  acquire(client: string, signal?: AbortSignal, beyondLimit = false): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(new Error('aborted'));
    if (this.busy < this.slots) {
      this.busy++;
      return Promise.resolve(this.releaser());
    }
    const full = beyondLimit ? undefined : this.refusal();
    if (full) return Promise.reject(full);
    return new Promise((resolve, reject) => {
      const w: Waiter = {
        client,
        start: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve(this.releaser());
        },
        fail: reject,
      };
      const onAbort = () => {
        const list = this.byClient.get(client);
        const i = list ? list.indexOf(w) : -1;
        if (list && i >= 0) {
          list.splice(i, 1);
          this.waiting--;
          if (!list.length) this.dropClient(client);
          reject(new Error('aborted'));
        }
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      const list = this.byClient.get(client);
      if (list) list.push(w);
      else {
        this.byClient.set(client, [w]);
        this.order.push(client);
      }
      this.waiting++;
    });
  }

  private dropClient(client: string): void {
    this.byClient.delete(client);
    this.order = this.order.filter((c) => c !== client);
  }

  private releaser(): () => void {
    const t0 = performance.now();
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.meanSeconds = 0.8 * this.meanSeconds + 0.2 * ((performance.now() - t0) / 1000);
      this.next();
    };
  }

  private next(): void {
    const client = this.order.shift();
    if (client === undefined) {
      this.busy--;
      return;
    }
    const list = this.byClient.get(client)!;
    const w = list.shift()!;
    this.waiting--;
    if (list.length) this.order.push(client);
    else this.byClient.delete(client);
    w.start();
  }
}
