import { MessageChannel, type MessagePort, Worker } from 'node:worker_threads';
import type { Arena } from '../memory/arena.js';
import { WasteError } from '../util/errors.js';

/**
 * Reader threads: each takes the next queued record and reads it with one positional read straight
 * into its cache slot (synchronous reads on their own threads, so the thread that computes is never
 * waiting on an event loop), optionally checks its CRC, and marks the slot done. The computing
 * thread waits on the slot's status word, or on the count of completed reads, with Atomics.
 */
export const Q = {
  /** Demand reads: queued and taken. */
  TAIL: 0,
  HEAD: 1,
  DONE: 2,
  EXIT: 3,
  READY: 4,
  /** Speculative (lookahead) reads, taken only when no demand read is waiting. */
  SPEC_TAIL: 5,
  SPEC_HEAD: 6,
  /** Bumped on every enqueue of either kind: what idle readers sleep on. */
  WORK: 7,
  /** Bumped when memories are attached or detached (messages wait on each reader's port), and each reader's acknowledgements. */
  MEMS: 8,
  MEMS_ACK: 9,
  /** Reader threads that ended (each marks its own exit): an announcement would wait for them forever. */
  LOST: 10,
  SIZE: 11,
} as const;

export const Status = {
  EMPTY: 0,
  QUEUED: 1,
  READY: 2,
  ERR_IO: 3,
  ERR_SHORT: 4,
  ERR_CRC: 5,
} as const;

/** Per slot job fields in a Float64Array: fd, file position, arena id, byte offset, length. */
export const JOB_FIELDS = 5;
export const RING = 4096;

export interface ReaderInit {
  ctrl: SharedArrayBuffer;
  ring: SharedArrayBuffer;
  status: SharedArrayBuffer;
  jobs: SharedArrayBuffer;
  errno: SharedArrayBuffer;
  memories: { id: number; memory: WebAssembly.Memory }[];
  /** Where memories attached or detached later are announced (read synchronously when MEMS moves). */
  port: MessagePort;
  /** CRC32 over [48, payloadEnd) compared with the header's, when set. */
  verifyPayloadEnd: number;
}

export class ReaderPool {
  readonly threads: number;
  readonly ctrl: Int32Array;
  readonly status: Int32Array;
  private readonly ring: Int32Array;
  private readonly jobs: Float64Array;
  readonly errno: Int32Array;
  private readonly workers: Worker[] = [];
  private readonly ports: MessagePort[] = [];
  private epochs = 0;
  private lost = 0;
  private closing = false;

  private constructor(threads: number, slots: number, arenas: Arena[], verifyPayloadEnd: number) {
    this.threads = threads;
    this.ctrl = new Int32Array(new SharedArrayBuffer(Q.SIZE * 4));
    this.ring = new Int32Array(new SharedArrayBuffer(2 * RING * 4));
    this.status = new Int32Array(new SharedArrayBuffer(Math.max(1, slots) * 4));
    this.jobs = new Float64Array(new SharedArrayBuffer(Math.max(1, slots) * JOB_FIELDS * 8));
    this.errno = new Int32Array(new SharedArrayBuffer(Math.max(1, slots) * 4));
    const init: Omit<ReaderInit, 'port'> = {
      ctrl: this.ctrl.buffer as SharedArrayBuffer,
      ring: this.ring.buffer as SharedArrayBuffer,
      status: this.status.buffer as SharedArrayBuffer,
      jobs: this.jobs.buffer as SharedArrayBuffer,
      errno: this.errno.buffer as SharedArrayBuffer,
      memories: arenas.map((a) => ({ id: a.id, memory: a.memory })),
      verifyPayloadEnd,
    };
    for (let i = 0; i < threads; i++) {
      const { port1, port2 } = new MessageChannel();
      this.ports.push(port1);
      const w = new Worker(new URL('./reader.js', import.meta.url), { workerData: { ...init, port: port2 }, transferList: [port2] });
      w.unref();
      // a thread that died before an announcement (its exit seen by the event loop) fails it at once
      w.on('exit', () => void this.lost++);
      w.on('error', () => {});
      this.workers.push(w);
    }
  }

  static async create(threads: number, slots: number, arenas: Arena[], verifyPayloadEnd: number): Promise<ReaderPool> {
    const pool = new ReaderPool(threads, slots, arenas, verifyPayloadEnd);
    const failed = new Promise<never>((_, reject) => {
      for (const w of pool.workers) w.once('error', (e) => reject(new WasteError('E_STATE', `reader thread failed to start: ${e.message}`)));
    });
    const ready = (async () => {
      while (Atomics.load(pool.ctrl, Q.READY) < threads) await new Promise((r) => setTimeout(r, 1));
    })();
    await Promise.race([ready, failed]);
    return pool;
  }

  /**
   * Queue a read of `length` bytes at `pos` of `fd` into slot `slot` (arena `arenaId` at `off`).
   * Demand reads go before any speculative read still waiting, so a wrong guess never delays one.
   */
  enqueue(slot: number, fd: number, pos: number, arenaId: number, off: number, length: number, speculative = false): void {
    const j = slot * JOB_FIELDS;
    this.jobs[j] = fd;
    this.jobs[j + 1] = pos;
    this.jobs[j + 2] = arenaId;
    this.jobs[j + 3] = off;
    this.jobs[j + 4] = length;
    Atomics.store(this.status, slot, Status.QUEUED);
    const [TAIL, HEAD, base] = speculative ? [Q.SPEC_TAIL, Q.SPEC_HEAD, RING] : [Q.TAIL, Q.HEAD, 0];
    const tail = this.ctrl[TAIL];
    if (tail - Atomics.load(this.ctrl, HEAD) >= RING) throw new WasteError('E_STATE', 'the read queue is full');
    this.ring[base + (tail % RING)] = slot;
    Atomics.store(this.ctrl, TAIL, tail + 1);
    Atomics.add(this.ctrl, Q.WORK, 1);
    Atomics.notify(this.ctrl, Q.WORK, 1);
  }

  /** Make an arena created after the pool started a place reads can land. */
  attach(arena: Arena): void {
    this.announce({ type: 'attach', id: arena.id, memory: arena.memory });
  }

  /**
   * Forget an arena (no read into it may be queued or in flight): every reader drops its handle
   * and collects, so the memory can be unmapped. Returns when all have.
   */
  detach(arena: Arena): void {
    this.announce({ type: 'detach', id: arena.id });
  }

  private announce(msg: { type: 'attach' | 'detach'; id: number; memory?: WebAssembly.Memory }): void {
    for (const p of this.ports) p.postMessage(msg);
    this.epochs++;
    Atomics.add(this.ctrl, Q.MEMS, 1);
    Atomics.add(this.ctrl, Q.WORK, 1);
    Atomics.notify(this.ctrl, Q.WORK);
    const want = this.epochs * this.threads;
    for (;;) {
      const got = Atomics.load(this.ctrl, Q.MEMS_ACK);
      if (got >= want) return;
      // a dead reader never acknowledges: one error instead of a hang
      if (!this.closing && (this.lost > 0 || Atomics.load(this.ctrl, Q.LOST) > 0))
        throw new WasteError('E_STATE', `a reader thread has stopped, so the ${msg.type === 'attach' ? 'new memory cannot be shared with' : 'memory cannot be released by'} the readers; close the model and open it again`);
      Atomics.wait(this.ctrl, Q.MEMS_ACK, got, 1000);
    }
  }

  async close(): Promise<void> {
    this.closing = true;
    Atomics.store(this.ctrl, Q.EXIT, 1);
    Atomics.add(this.ctrl, Q.WORK, 1);
    Atomics.notify(this.ctrl, Q.WORK);
    await Promise.all(this.workers.map((w) => w.terminate()));
    for (const p of this.ports) p.close();
  }
}
