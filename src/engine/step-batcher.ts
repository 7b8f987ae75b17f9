import type { BatchEntry, Network, SequenceState } from '../model/architecture.js';
import { WasteError } from '../util/errors.js';

/** Tokens one session asked to run, and how far they have got. */
interface Request {
  state: SequenceState;
  ids: readonly number[];
  allLogits: boolean;
  /** Tokens of `ids` run so far. */
  done: number;
  /** [ids.length][vocab] with allLogits, else [vocab]. */
  out: Float32Array;
  /** Throws when the request may no longer run (its session closed while it waited). */
  check: () => void;
  resolve: (logits: Float32Array) => void;
  reject: (e: unknown) => void;
}

/**
 * Setting a pass waits for sessions of the last pass that have not asked again yet: each gets its
 * next token from its own continuation (sampling, a consumer writing to a socket), which may take
 * a few turns of the event loop; a session that has finished never asks, so the wait is bounded.
 */
const REJOIN_TURNS = 4;

/**
 * Continuous batching of one model's forward passes. Every session's forward goes through here;
 * whatever is waiting when the engine comes free runs as one batched pass (Network.forwardBatch):
 * every decode step waiting (one row each), then prompts filling the rows left, cut where the room
 * ends (the rest waits for the next pass). So one read of each weight and of each expert serves
 * every session in flight, a long prompt is prefilled in pieces between the others' steps, and a
 * session that stops asking (done, aborted, closed) is out of the next pass. Each session's logits
 * are bit-identical to what it gets alone.
 */
/**
 * Marks an error thrown by a forward pass that had begun: the sequences in it may have been advanced
 * through some layers and not others, so their sessions must be reset before they run again.
 */
export const STATE_LOST = Symbol('waste.stateLost');

export function markStateLost(e: unknown): unknown {
  if (e !== null && typeof e === 'object') (e as { [STATE_LOST]?: boolean })[STATE_LOST] = true;
  return e;
}

export class StepBatcher {
  private waiting: Request[] = [];
  private scheduled = false;
  private closed = false;
  /** States of the last pass that have not asked again yet, and how many turns were waited for them. */
  private expected = new Set<SequenceState>();
  private turns = 0;
  private idle: (() => void)[] = [];

  constructor(
    private readonly net: Network,
    /** Runs a pass when no other work (an image encoding) holds the model's scratch. */
    private readonly exclusive: <T>(fn: () => Promise<T>) => Promise<T>,
    /** Rows per pass: the prefill chunk (scratch is sized for it). */
    private readonly rows: number,
  ) {}

  /** Run `ids` on `state` in the next pass there is room in; the logits after the last (or every) token. */
  run(state: SequenceState, ids: readonly number[], allLogits: boolean, check: () => void): Promise<Float32Array> {
    if (this.closed) return Promise.reject(new WasteError('E_STATE', 'the model has been closed'));
    const V = this.net.cfg.vocab;
    return new Promise((resolve, reject) => {
      this.waiting.push({ state, ids, allLogits, done: 0, out: new Float32Array(allLogits ? ids.length * V : V), check, resolve, reject });
      this.schedule();
    });
  }

  /** Refuse new work and resolve once what was asked for has run. */
  close(): Promise<void> {
    this.closed = true;
    if (!this.waiting.length && !this.scheduled) return Promise.resolve();
    return new Promise((resolve) => this.idle.push(resolve));
  }

  private schedule(): void {
    if (this.scheduled || !this.waiting.length) {
      if (!this.scheduled) for (const f of this.idle.splice(0)) f();
      return;
    }
    this.scheduled = true;
    setImmediate(() => this.start());
  }

  private start(): void {
    const asked = new Set(this.waiting.map((r) => r.state));
    for (const s of this.expected) if (asked.has(s)) this.expected.delete(s);
    if (this.expected.size && this.turns < REJOIN_TURNS) {
      this.turns++;
      setImmediate(() => this.start());
      return;
    }
    this.expected.clear();
    this.turns = 0;
    void this.exclusive(() => this.pass()).finally(() => {
      this.scheduled = false;
      this.schedule();
    });
  }

  /** One batched pass over what is waiting now. */
  private async pass(): Promise<void> {
    const batch: { r: Request; n: number }[] = [];
    const taken = new Set<SequenceState>();
    let room = this.rows;
    const take = (r: Request, n: number) => {
      batch.push({ r, n });
      taken.add(r.state);
      room -= n;
    };
    // decode steps first (a row each), then prompts in the order they came; a session once per pass
    for (const want of ['step', 'prompt'] as const)
      for (const r of [...this.waiting]) {
        const left = r.ids.length - r.done;
        if (taken.has(r.state) || (want === 'step') !== (left === 1) || (room <= 0 && batch.length)) continue;
        try {
          r.check();
        } catch (e) {
          this.drop(r);
          r.reject(e);
          continue;
        }
        take(r, Math.min(left, Math.max(1, room)));
      }
    if (!batch.length) return;
    const entries: BatchEntry[] = batch.map(({ r, n }) => ({ state: r.state, tokens: r.ids.slice(r.done, r.done + n), allLogits: r.allLogits }));
    let logits: Float32Array[];
    try {
      logits = await this.net.forwardBatch(entries);
    } catch (e) {
      markStateLost(e);
      for (const { r } of batch) {
        this.drop(r);
        r.reject(e);
      }
      return;
    }
    const V = this.net.cfg.vocab;
    batch.forEach(({ r, n }, i) => {
      if (r.allLogits) r.out.set(logits[i], r.done * V);
      else r.out.set(logits[i]);
      r.done += n;
      if (r.done < r.ids.length) return;
      this.drop(r);
      this.expected.add(r.state);
      r.resolve(r.out);
    });
  }

  private drop(r: Request): void {
    const i = this.waiting.indexOf(r);
    if (i >= 0) this.waiting.splice(i, 1);
  }
}
