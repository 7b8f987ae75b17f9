import { Fmt } from '../../container/format.js';
import type { Tensor } from '../../container/tensor.js';
import { type Arena, arenaOf } from '../../memory/arena.js';
import { WasteError } from '../../util/errors.js';
import type { Activations, Attend, KdaPrep, Kernels, MlaHeads, VqExpertJob, VqExpertShape, VqGeometry, VqMatrix } from '../types.js';
import { type KernelExports, type ParallelKernel, instantiate, kernelModule } from './module.js';
import { KernelPool } from './pool.js';

/** Bytes per token of prepared activations (mirrors prepStride in assembly/prep.ts). */
function prepStride(cols: number, G: number): number {
  const groups = Math.ceil(cols / G);
  return Math.ceil((groups * G * 4 + groups * 12) / 16) * 16;
}

/** Bytes per token of 16-bit activations (mirrors prep16Stride): within prepStride's, so one buffer serves both. */
function prep16Stride(cols: number, G: number): number {
  const groups = Math.ceil(cols / G);
  return Math.ceil((groups * G * 2 + groups * 20) / 16) * 16;
}

/** Per-thread scratch inside each arena (tile accumulators, the KDA update vector, a row). */
const TMP_STRIDE = 64 * 1024;
/** The last bytes of the calling thread's scratch hold matmulMany's descriptors (24 bytes a matrix). */
const FUSED_BYTES = 1024;
const MAX_FUSED = FUSED_BYTES / 24;

/** Prepared-activation bytes for `chunk` tokens of an input `widest` wide (any group size up to 1024). */
function prepBytesFor(widest: number, chunk: number): number {
  const cols = widest + 1024;
  return chunk * (cols * 4 + Math.ceil(cols / 32) * 12 + 16);
}

/** vqExperts' descriptors (16 bytes a job) share the end of the calling thread's scratch with matmulMany's. */
const MAX_EXPERT_JOBS = FUSED_BYTES / 16;

/** What the working rows' size depends on of a codebook's geometry (a VqGeometry or a container's ExpertQuant). */
type BookShape = Pick<VqGeometry, 'vecDim' | 'stages' | 'entries'>;

/** vqExperts' per-thread stride: [ffA | ffB | down table] of one expert, `inter` wide. */
function expertRowsStride(inter: number, q: BookShape): number {
  return Math.ceil((2 * inter + (inter / q.vecDim) * q.stages * q.entries) / 16) * 64;
}

/** vqExperts' working rows for a call of `jobs` experts: every thread's stride, then the output rows, at least 16 (a decode step's top-k). */
function expertWorkBytes(inter: number, width: number, q: BookShape, threads: number, jobs: number): number {
  return threads * expertRowsStride(inter, q) + Math.min(MAX_EXPERT_JOBS, Math.max(16, jobs)) * width * 4;
}

/**
 * What an expert arena sets aside for vqExperts' working rows (with the arena's alignment), for
 * the memory plan: the rows a decode step of `topK` experts allocates at first use.
 */
export function expertWorkArenaBytes(inter: number, width: number, q: BookShape | undefined, threads: number, topK: number): number {
  return q ? expertWorkBytes(inter, width, q, threads, topK) + 64 : 0;
}

/** Bytes the kernels take in each arena: per-thread scratch and prepared activations for inputs up to `widest`. */
export function kernelArenaBytes(widest: number, chunk: number, threads: number): number {
  return threads * TMP_STRIDE + 4096 + Math.ceil(prepBytesFor(widest, chunk) / 64) * 64 + 64;
}
/**
 * Below this much work (≈ multiply-adds) a call runs on the calling thread alone: handing rows to
 * a helper that is spinning costs about a microsecond…
 */
const PARALLEL_MIN_WORK = 1 << 16;
/** …but waking one that sleeps costs tens of microseconds, so then only big calls are split. */
const WAKE_MIN_WORK = 1 << 20;

/** What a WasmKernels keeps per arena: its instance there, the threads' scratch, prepared activations, vqExperts' working rows. */
interface Bound {
  ex: KernelExports;
  tmp: number;
  prep: number;
  prepBytes: number;
  /** vqExperts: each thread's [ffA | ffB | down table], then the jobs' output rows (allocated at first use). */
  work: number;
  workBytes: number;
}

/**
 * The WebAssembly SIMD kernels. Every call runs in the arena that holds its buffers, on the
 * calling thread, or split by output rows over the worker pool when it is big enough to pay for
 * the wake-up. Rows are computed independently, so the thread count never changes a result.
 */
export class WasmKernels implements Kernels {
  readonly name: string;
  private readonly module: WebAssembly.Module;
  private readonly local = new Map<number, Bound>();
  private readonly arenas = new Map<number, Arena>();

  private constructor(
    readonly threads: number,
    private readonly pool: KernelPool | undefined,
    private readonly prepBytes: number,
    readonly activations: Activations,
    /** Every parallel kernel's call split over the pool whatever its size (tests: small inputs then exercise the split too). */
    private readonly splitAll = false,
  ) {
    this.module = kernelModule();
    this.name = `wasm-simd128 × ${threads} thread${threads === 1 ? '' : 's'}${activations === 'exact' ? '' : `, ${activations} activations`}`;
  }

  /**
   * Kernels for `threads` threads (the caller counts as one) over the given arenas, with the given
   * activations for Q8G/Q4G products (default exact). Given the model's widest input and chunk, each
   * arena's prepared-activation buffer is sized for them up front (see kernelArenaBytes).
   */
  static async create(threads: number, arenas: Arena[], opts: { model?: { widest: number; chunk: number; prepIn?: (a: Arena) => boolean }; activations?: Activations; splitAll?: boolean } = {}): Promise<WasmKernels> {
    if (!(Number.isInteger(threads) && threads >= 1 && threads <= 256))
      throw new WasteError('E_ARG', `threads must be an integer in 1..256 (got ${threads})`);
    const activations = opts.activations ?? 'exact';
    if (activations !== 'exact' && activations !== 'a16') throw new WasteError('E_ARG', `activations must be exact or a16 (got ${String(activations)})`);
    const model = opts.model;
    const pool = threads > 1 ? await KernelPool.create(kernelModule(), threads, arenas) : undefined;
    const k = new WasmKernels(threads, pool, model ? prepBytesFor(model.widest, model.chunk) : 0, activations, opts.splitAll ?? false);
    // only arenas that run trunk products need prepared activations (expert arenas run lookups)
    for (const a of arenas) k.bind(a, model?.prepIn?.(a) ?? true);
    return k;
  }

  async close(): Promise<void> {
    await this.pool?.close();
  }

  private bind(arena: Arena, withPrep = true): Bound {
    let b = this.local.get(arena.id);
    if (!b) {
      const tmp = arena.alloc(this.threads * TMP_STRIDE, 4096);
      const prepBytes = withPrep ? this.prepBytes : 0;
      const prep = prepBytes ? arena.alloc(prepBytes, 64) : 0;
      b = { ex: instantiate(this.module, arena.memory), tmp, prep, prepBytes, work: 0, workBytes: 0 };
      this.local.set(arena.id, b);
      this.arenas.set(arena.id, arena);
      this.pool?.attach(arena);
    }
    return b;
  }

  /** Make an arena created after the kernels started usable (its per-thread scratch is allocated in it now). */
  attach(arena: Arena, withPrep = false): void {
    this.bind(arena, withPrep);
  }

  /** Forget an arena that will be dropped: no call may run in it afterwards. */
  detach(arena: Arena): void {
    this.local.delete(arena.id);
    this.arenas.delete(arena.id);
    this.pool?.detach(arena);
  }

  /** Byte offset of `view` in `arena`; every buffer of a call must live in the call's arena. */
  private at(view: ArrayBufferView, arena: Arena, what: string): number {
    const a = arenaOf(view);
    if (a !== arena)
      throw new WasteError('E_STATE', `kernel buffer ${what} is ${a ? `in arena ${a.id}` : 'not in an arena'}, the call runs in arena ${arena.id}`);
    return view.byteOffset;
  }

  private arenaOfView(view: ArrayBufferView, what: string): Arena {
    const a = arenaOf(view);
    if (!a) throw new WasteError('E_STATE', `kernel buffer ${what} is not in an arena`);
    return a;
  }

  private run(kernel: ParallelKernel, arena: Arena, args: number[], n: number, align: number, work: number): void {
    const b = this.bind(arena);
    if (!this.pool || (!this.splitAll && (work < PARALLEL_MIN_WORK || (work < WAKE_MIN_WORK && this.pool.asleep)))) {
      (b.ex[kernel] as (...a: number[]) => void)(...args, b.tmp, 0, n);
      return;
    }
    this.pool.run(b.ex, kernel, arena, args, n, align, this.threads, b.tmp, TMP_STRIDE);
  }

  private tensorArgs(w: Tensor): number[] {
    return [w.fmt, w.off, Math.max(0, w.scaleOff), w.rowBytes, w.groups, w.group];
  }

  matmul(w: Tensor, X: Float32Array, Y: Float32Array, T: number): void {
    const a = w.arena;
    const [fmt, W, S, rowBytes, groups, G] = this.tensorArgs(w);
    const x = this.at(X, a, 'X');
    const y = this.at(Y, a, 'Y');
    if (fmt !== Fmt.Q8G && fmt !== Fmt.Q4G) {
      this.run('mm', a, [fmt, W, S, x, 0, y, w.rows, w.cols, rowBytes, groups, G, T], w.rows, 4, w.rows * w.cols * T);
      return;
    }
    // the integer form of the activations, once per call, before the rows are split
    const b = this.bind(a);
    const a16 = this.activations === 'a16';
    const need = T * (a16 ? prep16Stride(w.cols, G) : prepStride(w.cols, G));
    if (need > b.prepBytes) {
      b.prepBytes = Math.max(need, 2 * b.prepBytes);
      b.prep = a.alloc(b.prepBytes, 64);
    }
    const q4 = fmt === Fmt.Q4G ? 1 : 0;
    if (a16) {
      b.ex.act_prep16(x, w.cols, G, q4, T, b.prep);
      this.run('mm16', a, [fmt, W, S, b.prep, y, w.rows, w.cols, rowBytes, groups, G, T], w.rows, 4, w.rows * w.cols * T);
    } else {
      b.ex.act_prep(x, w.cols, G, q4, T, b.prep);
      this.run('mm', a, [fmt, W, S, x, b.prep, y, w.rows, w.cols, rowBytes, groups, G, T], w.rows, 4, w.rows * w.cols * T);
    }
  }

  matmulMany(ws: readonly Tensor[], X: Float32Array, Ys: readonly Float32Array[], T: number): void {
    if (ws.length !== Ys.length) throw new WasteError('E_ARG', `matmulMany: ${ws.length} matrices and ${Ys.length} outputs`);
    // matrices that can share one preparation of X and one dispatch: Q8G/Q4G of one format, group
    // and width in X's arena (every other one runs alone, as matmul)
    const groups = new Map<string, number[]>();
    ws.forEach((w, i) => {
      const ok = (w.fmt === Fmt.Q8G || w.fmt === Fmt.Q4G) && w.arena === arenaOf(X) && w.cols === ws[0].cols;
      const key = ok ? `${w.fmt}:${w.group}` : `alone:${i}`;
      const g = groups.get(key);
      if (g) g.push(i);
      else groups.set(key, [i]);
    });
    for (const idx of groups.values()) {
      if (idx.length === 1 || idx.length > MAX_FUSED) {
        for (const i of idx) this.matmul(ws[i], X, Ys[i], T);
        continue;
      }
      const w0 = ws[idx[0]];
      const a = w0.arena;
      const b = this.bind(a);
      const x = this.at(X, a, 'X');
      const a16 = this.activations === 'a16';
      const need = T * (a16 ? prep16Stride(w0.cols, w0.group) : prepStride(w0.cols, w0.group));
      if (need > b.prepBytes) {
        b.prepBytes = Math.max(need, 2 * b.prepBytes);
        b.prep = a.alloc(b.prepBytes, 64);
      }
      const q4 = w0.fmt === Fmt.Q4G ? 1 : 0;
      if (a16) b.ex.act_prep16(x, w0.cols, w0.group, q4, T, b.prep);
      else b.ex.act_prep(x, w0.cols, w0.group, q4, T, b.prep);
      // the descriptors [fmt, W, S, rows, rowBytes, Y] sit at the end of the calling thread's scratch,
      // which no product uses; the helpers read them there
      const d = b.tmp + TMP_STRIDE - FUSED_BYTES;
      const desc = new Int32Array(a.memory.buffer, d, idx.length * 6);
      let rows = 0;
      idx.forEach((i, j) => {
        const w = ws[i];
        desc.set([w.fmt, w.off, Math.max(0, w.scaleOff), w.rows, w.rowBytes, this.at(Ys[i], a, 'Y')], j * 6);
        rows += w.rows;
      });
      this.run('mmn', a, [idx.length, d, a16 ? 1 : 0, x, b.prep, w0.cols, w0.groups, w0.group, T], rows, 4, rows * w0.cols * T);
    }
  }

  matvecT(w: Tensor, c: Float32Array, y: Float32Array, row0: number, n: number): void {
    const a = w.arena;
    const [fmt, W, S, rowBytes, groups, G] = this.tensorArgs(w);
    this.run('mvt', a, [fmt, W, S, this.at(c, a, 'c'), this.at(y, a, 'y'), row0, n, w.cols, rowBytes, groups, G], w.cols, 32, n * w.cols);
  }

  rmsnorm(x: Float32Array, w: Float32Array, eps: number, out: Float32Array, n: number, xOff = 0, outOff = 0): void {
    const a = this.arenaOfView(x, 'x');
    this.bind(a).ex.rmsnorm(this.at(x, a, 'x') + 4 * xOff, this.at(w, a, 'w'), this.at(out, a, 'out') + 4 * outOff, n, eps);
  }

  siluMul(x: Float32Array, y: Float32Array, n: number): void {
    const a = this.arenaOfView(x, 'a');
    this.bind(a).ex.silu_mul(this.at(x, a, 'a'), this.at(y, a, 'b'), n);
  }

  situMul(x: Float32Array, y: Float32Array, n: number, beta: number, linearBeta: number): void {
    const a = this.arenaOfView(x, 'a');
    this.bind(a).ex.situ_mul(this.at(x, a, 'a'), this.at(y, a, 'b'), n, beta, linearBeta);
  }

  sigmoidMul(x: Float32Array, g: Float32Array, n: number): void {
    const a = this.arenaOfView(x, 'a');
    this.bind(a).ex.sigmoid_mul(this.at(x, a, 'a'), this.at(g, a, 'g'), n);
  }

  attnRes(blocks: Float32Array, n: number, cur: Float32Array, w: Float32Array, H: number, eps: number, out: Float32Array): void {
    const a = this.arenaOfView(out, 'out');
    const b = this.bind(a);
    if (8 * (n + 1) > TMP_STRIDE) throw new WasteError('E_STATE', `an attention-residual mix of ${n + 1} candidates is more than the kernels' scratch holds`);
    // blocks may be empty (n = 0): then its offset is never read
    const bl = n > 0 ? this.at(blocks, a, 'blocks') : 0;
    b.ex.attn_res(bl, n, this.at(cur, a, 'cur'), this.at(w, a, 'w'), H, eps, this.at(out, a, 'out'), b.tmp);
  }

  attendAll(qkv: Float32Array, L: number, heads: number, hd: number, scale: number, out: Float32Array, from = 0, to = L): void {
    const a = this.arenaOfView(qkv, 'qkv');
    if (4 * L > TMP_STRIDE) throw new WasteError('E_STATE', `attention over ${L} positions is more than the kernels' scratch holds (at most ${TMP_STRIDE / 4})`);
    const n = to - from;
    this.run('vit_attn', a, [this.at(qkv, a, 'qkv'), L, heads, hd, scale, this.at(out, a, 'out'), from], n, 1, n * L * heads * hd * 2);
  }

  gelu(x: Float32Array, n: number, exact: boolean): void {
    const a = this.arenaOfView(x, 'a');
    this.bind(a).ex.gelu(this.at(x, a, 'a'), n, exact ? 1 : 0);
  }

  /** erf at x as the kernels compute it (a known-answer check of their GELU). */
  erfAt(x: number): number {
    const a = this.arenas.values().next().value;
    if (!a) throw new WasteError('E_STATE', 'no arena is bound');
    return this.bind(a).ex.erf_at(x);
  }

  add(x: Float32Array, y: Float32Array, n: number): void {
    const a = this.arenaOfView(x, 'x');
    this.bind(a).ex.add(this.at(x, a, 'x'), this.at(y, a, 'y'), n);
  }

  vqLut(booksT: Float32Array, stages: number, entries: number, vecDim: number, x: Float32Array, n: number, lut: Float32Array): void {
    const a = this.arenaOfView(lut, 'lut');
    const vectors = n / vecDim;
    this.run('vq_lut', a, [this.at(booksT, a, 'booksT'), this.at(x, a, 'x'), this.at(lut, a, 'lut'), stages, entries, vecDim], vectors, 4, vectors * stages * entries * vecDim);
  }

  vqApply(rec: Uint8Array, idxOff: number, scaleOff: number, rows: number, cols: number, g: VqGeometry, lut: Float32Array, y: Float32Array): void {
    const a = this.arenaOfView(rec, 'rec');
    const vectors = cols / g.vecDim;
    const align = g.indexBlock > 0 ? g.indexBlock : 16;
    this.run(
      'vq_apply',
      a,
      [this.at(rec, a, 'rec'), idxOff, scaleOff, this.at(lut, a, 'lut'), this.at(y, a, 'y'), vectors, g.stages, g.entries, g.indexBlock],
      rows,
      align,
      rows * vectors * g.stages * 4,
    );
  }

  vqLutPair(booksA: Float32Array, booksB: Float32Array, stages: number, entries: number, vecDim: number, x: Float32Array, n: number, lutA: Float32Array, lutB: Float32Array): void {
    const a = this.arenaOfView(lutA, 'lutA');
    const vectors = n / vecDim;
    this.run(
      'vq_lut2',
      a,
      [this.at(booksA, a, 'booksA'), this.at(booksB, a, 'booksB'), this.at(x, a, 'x'), this.at(lutA, a, 'lutA'), this.at(lutB, a, 'lutB'), vectors, stages, entries, vecDim],
      2 * vectors,
      4,
      2 * vectors * stages * entries * vecDim,
    );
  }

  vqApplyPair(rec: Uint8Array, ma: VqMatrix, mb: VqMatrix, rows: number, cols: number, g: VqGeometry): void {
    const a = this.arenaOfView(rec, 'rec');
    const vectors = cols / g.vecDim;
    // shares aligned to the index block fall on block boundaries of both halves when rows is a multiple of it
    const align = g.indexBlock > 0 ? g.indexBlock : 16;
    this.run(
      'vq_apply2',
      a,
      [this.at(rec, a, 'rec'), ma.idxOff, ma.scaleOff, this.at(ma.lut, a, 'lutA'), this.at(ma.y, a, 'yA'), mb.idxOff, mb.scaleOff, this.at(mb.lut, a, 'lutB'), this.at(mb.y, a, 'yB'), rows, vectors, g.stages, g.entries, g.indexBlock],
      2 * rows,
      align,
      2 * rows * vectors * g.stages * 4,
    );
  }

  vqExperts(jobs: readonly VqExpertJob[], x: VqExpertShape): boolean {
    if (jobs.length === 0) return true;
    const a = this.arenaOfView(jobs[0].rec, 'rec');
    const b = this.bind(a);
    const { inter: I, width: W, g } = x;
    const stride = expertRowsStride(I, g);
    const outs = this.threads * stride;
    // The working rows are charged to the budget when first needed, sized as the plan sets them
    // aside (a decode step's outputs) and never grown: an arena only grows, so rows sized for each
    // larger call would leave the smaller ones behind, outside the plan. A call with more jobs takes
    // them a few at a time. With no room for them, the caller computes expert by expert (the same values).
    const need = expertWorkBytes(I, W, g, this.threads, x.topK);
    if (need > b.workBytes) {
      try {
        b.work = a.alloc(need, 64);
      } catch (e) {
        if (e instanceof WasteError && e.code === 'E_STATE') return false;
        throw e;
      }
      b.workBytes = need;
    }
    const step = Math.min(MAX_EXPERT_JOBS, Math.floor((b.workBytes - outs) / (W * 4)));
    const d = b.tmp + TMP_STRIDE - FUSED_BYTES;
    const act = x.act.kind === 'silu' ? [0, 0, 0] : [1, x.act.beta, x.act.linearBeta];
    const lookups = g.stages * ((2 * I * W) / g.vecDim + (W * I) / g.vecDim);
    for (let j0 = 0; j0 < jobs.length; j0 += step) {
      const n = Math.min(step, jobs.length - j0);
      const desc = new Int32Array(a.memory.buffer, d, n * 4);
      for (let j = 0; j < n; j++) {
        const job = jobs[j0 + j];
        desc.set([this.at(job.rec, a, 'rec'), this.at(job.lutGate, a, 'lutGate'), this.at(job.lutUp, a, 'lutUp'), b.work + outs + j * W * 4], j * 4);
      }
      if (n < this.threads) {
        // fewer experts than threads (a streamed layer's records landing one by one): each split by rows instead
        for (let j = 0; j < n; j++) this.expertByRows(a, b.work, b.work + outs + j * W * 4, jobs[j0 + j], x);
      } else {
        const args = [d, x.gateOff, x.upOff, x.downOff, x.scaleOff, I, W, g.stages, g.entries, g.vecDim, g.indexBlock, this.at(x.booksDown, a, 'booksDown'), ...act, b.work, stride, b.tmp];
        this.run('vq_experts', a, args, n, 1, n * lookups * 4);
      }
      const rows = a.f32(b.work + outs, n * W);
      for (let j = 0; j < n; j++) jobs[j0 + j].y.set(rows.subarray(j * W, (j + 1) * W));
    }
    return true;
  }

  /** One vqExperts job with each of its products split by rows over the threads, in the first thread's working rows. */
  private expertByRows(a: Arena, work: number, y: number, job: VqExpertJob, x: VqExpertShape): void {
    const { inter: I, width: W, g } = x;
    const ffA = a.f32(work, I);
    const ffB = a.f32(work + 4 * I, I);
    const lutD = a.f32(work + 8 * I, (I / g.vecDim) * g.stages * g.entries);
    this.vqApplyPair(job.rec, { idxOff: x.gateOff, scaleOff: x.scaleOff, lut: job.lutGate, y: ffA }, { idxOff: x.upOff, scaleOff: x.scaleOff + 2 * I, lut: job.lutUp, y: ffB }, I, W, g);
    if (x.act.kind === 'silu') this.siluMul(ffA, ffB, I);
    else this.situMul(ffA, ffB, I, x.act.beta, x.act.linearBeta);
    this.vqLut(x.booksDown, g.stages, g.entries, g.vecDim, ffA, I, lutD);
    this.vqApply(job.rec, x.downOff, x.scaleOff + 4 * I, W, I, g, lutD, a.f32(y, W));
  }

  kdaPrep(p: KdaPrep): void {
    const a = this.arenaOfView(p.q, 'q');
    const at = (v: Float32Array, n: string) => this.at(v, a, n);
    this.bind(a).ex.kda_prep(
      at(p.q, 'q'), at(p.k, 'k'), at(p.v, 'v'), at(p.taps[0], 'taps'), at(p.taps[1], 'taps'), at(p.taps[2], 'taps'), at(p.ring, 'ring'),
      p.C, p.K, at(p.g, 'g'), at(p.dtBias, 'dtBias'), at(p.aLog, 'aLog'), at(p.beta, 'beta'), p.H, p.D, p.l2eps, p.lowerBound ?? 0,
    );
  }

  kdaStep(H: number, D: number, q: Float32Array, k: Float32Array, v: Float32Array, g: Float32Array, beta: Float32Array, S: Float32Array, o: Float32Array): void {
    const a = this.arenaOfView(S, 'S');
    const at = (x: Float32Array, n: string) => this.at(x, a, n);
    this.run('kda_step', a, [at(q, 'q'), at(k, 'k'), at(v, 'v'), at(g, 'g'), at(beta, 'beta'), at(S, 'S'), at(o, 'o'), D], H, 1, H * D * D * 4);
  }

  kdaOut(o: Float32Array, gate: Float32Array, w: Float32Array, H: number, D: number, eps: number): void {
    const a = this.arenaOfView(o, 'o');
    this.bind(a).ex.kda_out(this.at(o, a, 'o'), this.at(gate, a, 'gate'), this.at(w, a, 'w'), H, D, eps);
  }

  mlaHeads(p: MlaHeads): void {
    const w = p.kvB;
    const a = w.arena;
    const at = (x: Float32Array, n: string) => this.at(x, a, n);
    const [fmt, W, S, rowBytes, groups, G] = this.tensorArgs(w);
    const latd = p.kvl + p.rope;
    this.run(
      'mla_heads',
      a,
      [fmt, W, S, rowBytes, groups, G, at(p.q, 'q'), p.nope, p.rope, p.vh, p.kvl, at(p.cache, 'cache'), latd, p.n, p.scale, at(p.qLat, 'qLat'), at(p.scores, 'scores'), at(p.ctx, 'ctx'), at(p.o, 'o')],
      p.heads,
      1,
      p.heads * ((p.nope + p.vh) * p.kvl + p.n * (latd + p.kvl)),
    );
  }

  attend(p: Attend): void {
    const a = this.arenaOfView(p.q, 'q');
    const at = (x: Float32Array, n: string) => this.at(x, a, n);
    const n = p.hi - p.lo + 1;
    if (p.scores.length < p.heads * n) throw new WasteError('E_STATE', `attention scratch of ${p.scores.length} scores is less than ${p.heads} heads × ${n} positions`);
    this.run(
      'attend',
      a,
      [at(p.q, 'q'), at(p.k, 'k'), at(p.v, 'v'), p.slots, p.kvHeads, p.headDim, p.heads / p.kvHeads, p.lo, p.hi, p.scale, p.sinks ? at(p.sinks, 'sinks') : 0, at(p.scores, 'scores'), at(p.out, 'out')],
      p.heads,
      1,
      p.heads * n * p.headDim * 2,
    );
  }

  moeRoute(logits: Float32Array, bias: Float32Array, E: number, K: number, ids: Int32Array, w: Float32Array, renorm: boolean, scale: number): void {
    const a = this.arenaOfView(logits, 'logits');
    this.bind(a).ex.moe_route(this.at(logits, a, 'logits'), this.at(bias, a, 'bias'), E, K, this.at(ids, a, 'ids'), this.at(w, a, 'w'), renorm ? 1 : 0, scale);
  }

  moeCombine(out: Float32Array, eo: Float32Array, w: Float32Array, K: number, H: number, shared?: Float32Array): void {
    const a = this.arenaOfView(out, 'out');
    this.bind(a).ex.moe_combine(this.at(out, a, 'out'), this.at(eo, a, 'eo'), this.at(w, a, 'w'), K, H, shared ? this.at(shared, a, 'shared') : 0);
  }

  /**
   * Nearest centroid for each of `n` vectors X [n][dim]: the converter's assignment step. CT holds
   * the centroids transposed [dim][entries], cn their squared norms; ties go to the lower index.
   * `idx` receives the indices (bytes, or i32), `dist` (optional) the squared distances.
   */
  vqNearest(X: Float32Array, CT: Float32Array, cn: Float32Array, entries: number, dim: number, idx: Uint8Array | Int32Array, n: number, dist?: Float32Array): void {
    const a = this.arenaOfView(X, 'X');
    const args = [this.at(X, a, 'X'), this.at(CT, a, 'CT'), this.at(cn, a, 'cn'), entries, dim, this.at(idx, a, 'idx'), idx instanceof Uint8Array ? 1 : 0, dist ? this.at(dist, a, 'dist') : 0];
    this.run('vq_nearest', a, args, n, 64, n * entries * dim);
  }

  /** X[r] ← X[r] − c_{idx[r]} for n vectors of dim (idx bytes; CT the centroids transposed [dim][entries]): a residual stage's remainder. */
  vqSubtract(X: Float32Array, CT: Float32Array, entries: number, dim: number, idx: Uint8Array, n: number): void {
    const a = this.arenaOfView(X, 'X');
    this.run('vq_subtract', a, [this.at(X, a, 'X'), this.at(CT, a, 'CT'), entries, dim, this.at(idx, a, 'idx')], n, 256, n * dim * 16);
  }

  /** dmin[r] = min(dmin[r], ‖X[r] − c‖²) for n vectors (k-means++ seeding). */
  distUpdate(X: Float32Array, c: Float32Array, dim: number, dmin: Float32Array, n: number): void {
    const a = this.arenaOfView(X, 'X');
    this.run('dist_update', a, [this.at(X, a, 'X'), this.at(c, a, 'c'), dim, this.at(dmin, a, 'dmin')], n, 256, n * dim);
  }

  /** Memory read bandwidth probe: sums `rows` rows of `rowBytes` at `off` in `arena` (for the bench). */
  readBandwidth(arena: Arena, off: number, rowBytes: number, rows: number, out: Float32Array): void {
    this.run('read_bw', arena, [off, rowBytes, this.at(out, arena, 'out')], rows, 1, rows * rowBytes);
  }
}
