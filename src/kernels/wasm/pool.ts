import * as os from 'node:os';
import { Worker } from 'node:worker_threads';
import type { Arena } from '../../memory/arena.js';
import { WasteError } from '../../util/errors.js';
import { type KernelExports, PARALLEL_KERNELS, type ParallelKernel, instantiate } from './module.js';

/**
 * A pool of worker threads, each with the kernel module instantiated over every arena, that split
 * a kernel call by output rows. The call's rows are cut into a few chunks per thread, and each
 * thread, the calling one (the leader) included, takes the next chunk until none is left: a helper
 * that wakes late or runs slower takes fewer chunks, so the leader no longer waits for a whole
 * share of work behind it (it still waits for the helper to wake and count itself done). Jobs go
 * through a shared control block with Atomics; helpers spin briefly, then sleep. Chunks are fixed
 * by (rows, threads, alignment, kernel) alone, and every row is computed independently of which
 * thread computes it, so the result is bit-identical for any number of threads.
 */
export const C = {
  SEQ: 0,
  PENDING: 1,
  KERNEL: 2,
  ARENA: 3,
  NARGS: 4,
  N: 5,
  ALIGN: 6,
  PARTS: 7,
  CMD: 8,
  READY: 9,
  ERROR: 10,
  SPIN: 11,
  /** Helpers currently asleep in Atomics.wait (waking one costs tens of µs). */
  SLEEPING: 12,
  /** The next chunk to take, and how many the call has. */
  NEXT: 13,
  CHUNKS: 14,
  SIZE: 16,
} as const;
export const CMD_RUN = 0;
export const CMD_ATTACH = 1;
export const CMD_EXIT = 2;
export const MAX_ARGS = 60;
/** args[TMP_BASE], args[TMP_STRIDE]: each thread's scratch is base + index × stride. */
export const TMP_BASE = 62;
export const TMP_STRIDE = 63;

export interface WorkerInit {
  module: WebAssembly.Module;
  ctrl: SharedArrayBuffer;
  args: SharedArrayBuffer;
  index: number;
  memories: { id: number; memory: WebAssembly.Memory }[];
}

/** Chunks a call is cut into per thread taking part: enough to even out a late start, few enough that a chunk stays long next to taking it. */
export const CHUNKS_PER_THREAD = 4;
/** Kernels that stream data shared by all their rows once per call (MLA's latent cache, a vision layer's keys and values): one chunk per thread, or a long context would be read four times as often. */
const ONE_CHUNK_PER_THREAD: ReadonlySet<ParallelKernel> = new Set<ParallelKernel>(['mla_heads', 'vit_attn']);

/** How many chunks `kernel` over n rows (aligned to `align`) is cut into for `parts` threads: never more than there are aligned units, so none is empty. */
export function chunkCount(kernel: ParallelKernel, n: number, align: number, parts: number): number {
  return Math.min(Math.ceil(n / align), parts * (ONE_CHUNK_PER_THREAD.has(kernel) ? 1 : CHUNKS_PER_THREAD));
}

/** Rows [begin, end) of chunk `i` of `chunks`: the aligned units dealt out as evenly as they go, the last one short if n is not a multiple of `align`. */
export function chunkRows(n: number, chunks: number, i: number, align: number): [number, number] {
  const units = Math.ceil(n / align);
  return [Math.min(n, Math.floor((i * units) / chunks) * align), Math.min(n, Math.floor(((i + 1) * units) / chunks) * align)];
}

/** Takes chunks of the current call until none is left, running `fn(b, e)` on each. */
export function takeChunks(ctrl: Int32Array, fn: (b: number, e: number) => void): void {
  const chunks = ctrl[C.CHUNKS], n = ctrl[C.N], align = ctrl[C.ALIGN];
  for (;;) {
    const i = Atomics.add(ctrl, C.NEXT, 1);
    if (i >= chunks) return;
    const [b, e] = chunkRows(n, chunks, i, align);
    if (e > b) fn(b, e);
  }
}

export class KernelPool {
  readonly threads: number;
  private readonly ctrl: Int32Array;
  private readonly args: Float64Array;
  private readonly workers: Worker[] = [];
  private readonly attached = new Set<number>();
  private readonly spin: number;
  private closed = false;

  private constructor(
    module: WebAssembly.Module,
    threads: number,
    arenas: Arena[],
  ) {
    this.threads = threads;
    this.ctrl = new Int32Array(new SharedArrayBuffer(C.SIZE * 4));
    this.args = new Float64Array(new SharedArrayBuffer(64 * 8));
    // Spinning threads must never outnumber the cores: past that, sleep at once.
    this.spin = threads <= cpuCount() ? 4000 : 0;
    this.ctrl[C.SPIN] = this.spin;
    for (const a of arenas) this.attached.add(a.id);
    const memories = arenas.map((a) => ({ id: a.id, memory: a.memory }));
    for (let i = 1; i < threads; i++) {
      const init: WorkerInit = { module, ctrl: this.ctrl.buffer as SharedArrayBuffer, args: this.args.buffer as SharedArrayBuffer, index: i, memories };
      const w = new Worker(new URL('./worker.js', import.meta.url), { workerData: init });
      w.unref();
      this.workers.push(w);
    }
  }

  /** Start `threads` − 1 helper threads over `arenas` and wait until they are ready. */
  static async create(module: WebAssembly.Module, threads: number, arenas: Arena[]): Promise<KernelPool> {
    const pool = new KernelPool(module, threads, arenas);
    const failed = new Promise<never>((_, reject) => {
      for (const w of pool.workers) w.once('error', (e) => reject(new WasteError('E_STATE', `kernel worker failed to start: ${e.message}`)));
    });
    const ready = (async () => {
      while (Atomics.load(pool.ctrl, C.READY) < threads - 1) await new Promise((r) => setTimeout(r, 1));
    })();
    await Promise.race([ready, failed]);
    return pool;
  }

  /** True when some helper is asleep, so a job would pay for waking it. */
  get asleep(): boolean {
    return Atomics.load(this.ctrl, C.SLEEPING) > 0;
  }

  /** Make an arena created after the pool started usable by every helper. */
  attach(arena: Arena): void {
    if (this.attached.has(arena.id) || this.workers.length === 0) {
      this.attached.add(arena.id);
      return;
    }
    for (const w of this.workers) w.postMessage({ type: 'attach', id: arena.id, memory: arena.memory });
    this.dispatch(CMD_ATTACH);
    this.waitHelpers();
    this.attached.add(arena.id);
  }

  /**
   * Forget an arena (between calls): every helper drops its instance over the memory and collects,
   * so the memory can be unmapped once the caller drops it too.
   */
  detach(arena: Arena): void {
    if (!this.attached.delete(arena.id) || this.workers.length === 0 || this.closed) return;
    for (const w of this.workers) w.postMessage({ type: 'detach', id: arena.id });
    this.dispatch(CMD_ATTACH);
    this.waitHelpers();
  }

  /**
   * Run `kernel` over rows [0, n) split into `parts` shares (aligned to `align`); `args` are the
   * kernel's parameters before (tmp, begin, end). `leader` is the calling thread's instance.
   */
  run(leader: KernelExports, kernel: ParallelKernel, arena: Arena, args: number[], n: number, align: number, parts: number, tmpBase: number, tmpStride: number): void {
    if (this.closed) throw new WasteError('E_STATE', 'the kernel pool has been closed');
    parts = Math.max(1, Math.min(parts, this.threads, Math.ceil(n / align)));
    const fn = leader[kernel];
    if (parts === 1) {
      fn(...args, tmpBase, 0, n);
      return;
    }
    if (!this.attached.has(arena.id)) this.attach(arena);
    const c = this.ctrl;
    if (args.length > MAX_ARGS) throw new Error(`kernel ${kernel}: too many arguments`);
    for (let i = 0; i < args.length; i++) this.args[i] = args[i];
    this.args[TMP_BASE] = tmpBase;
    this.args[TMP_STRIDE] = tmpStride;
    c[C.KERNEL] = PARALLEL_KERNELS.indexOf(kernel);
    c[C.ARENA] = arena.id;
    c[C.NARGS] = args.length;
    c[C.N] = n;
    c[C.ALIGN] = align;
    c[C.PARTS] = parts;
    c[C.CHUNKS] = chunkCount(kernel, n, align, parts);
    Atomics.store(c, C.NEXT, 0);
    this.dispatch(CMD_RUN);
    let err: unknown;
    try {
      takeChunks(c, (b, e) => fn(...args, tmpBase, b, e));
    } catch (x) {
      err = x;
      // what is left is the helpers' to take; a failed call's rows are not used
    }
    this.waitHelpers();
    // cleared whatever failed, so a helper's failure is not reported again by the next call
    const helperFailed = Atomics.exchange(c, C.ERROR, 0);
    if (err) throw err;
    if (helperFailed) throw new WasteError('E_STATE', `kernel ${kernel} failed in a worker thread`);
  }

  private dispatch(cmd: number): void {
    const c = this.ctrl;
    c[C.CMD] = cmd;
    Atomics.store(c, C.PENDING, this.workers.length);
    Atomics.add(c, C.SEQ, 1);
    Atomics.notify(c, C.SEQ);
  }

  private waitHelpers(): void {
    const c = this.ctrl;
    for (let i = 0; i < this.spin && Atomics.load(c, C.PENDING) !== 0; i++);
    for (;;) {
      const p = Atomics.load(c, C.PENDING);
      if (p === 0) return;
      Atomics.wait(c, C.PENDING, p, 1000);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.workers.length) {
      this.dispatch(CMD_EXIT);
      await Promise.all(this.workers.map((w) => w.terminate()));
    }
  }
}

export function cpuCount(): number {
  return Math.max(1, typeof os.availableParallelism === 'function' ? os.availableParallelism() : os.cpus().length);
}

export { instantiate };
