import { Fmt } from '../../../container/format.js';
import type { Tensor } from '../../../container/tensor.js';
import type { Patches } from '../../../image/preprocess.js';
import type { Kernels } from '../../../kernels/types.js';
import { aligned } from '../../../memory/align.js';
import type { Arena } from '../../../memory/arena.js';
import { WasteError } from '../../../util/errors.js';
import { yieldToLoop } from '../../../util/yield-to-loop.js';
import type { VisionTower } from '../../architecture.js';
import type { WeightSource } from '../../sources/source.js';
import type { VisionConfig } from './config.js';

/** Patches run together through each product: their activations stay in cache while a weight row is read. */
export const TILE = 32;
/** Multiply-adds of attention between turns of the event loop (about 0.1 s here). */
const ATTENTION_WORK = 64 * 1024 * 1536 * 8;

interface Block {
  norm0: Float32Array;
  norm1: Float32Array;
  wqkv: Tensor;
  wo: Tensor;
  fc0: Tensor;
  fc1: Tensor;
}

/** A tensor's shape as the tower needs it, whichever way its source stores it (the checkpoint's 3-D and 4-D ones included). */
function checkShape(src: WeightSource, name: string, rows: number, cols: number, vector: boolean): void {
  const shape = src.shape(name);
  const n = shape.reduce((a, d) => a * d, 1);
  if ((!vector && shape[0] !== rows) || n !== rows * cols) throw new WasteError('E_FORMAT', `${src.label}: vision tensor ${name} has shape [${shape}], expected [${rows}, ${cols}]`);
}

/** Whether a matrix is stored in rows other than the ones the tower reads (the convolution in rows of p). */
function reshaped(src: WeightSource, name: string, cols: number): boolean {
  const shape = src.shape(name);
  return shape[shape.length - 1] !== cols;
}

/** Names and shapes of every tower tensor: matrices [rows, cols], vectors [n]. */
function* tensors(v: VisionConfig): Generator<{ name: string; rows: number; cols: number; vector?: boolean }> {
  const { hidden: D, qkv: Q, inter: M, patch: p, textHidden: TH } = v;
  yield { name: 'vision_tower.patch_embed.proj.weight', rows: D, cols: 3 * p * p };
  yield { name: 'vision_tower.patch_embed.pos_emb.weight', rows: v.posH * v.posW, cols: D, vector: true };
  for (let b = 0; b < v.layers; b++) {
    const k = `vision_tower.encoder.blocks.${b}.`;
    yield { name: `${k}norm0.weight`, rows: D, cols: 1, vector: true };
    yield { name: `${k}norm1.weight`, rows: D, cols: 1, vector: true };
    yield { name: `${k}wqkv.weight`, rows: 3 * Q, cols: D };
    yield { name: `${k}wo.weight`, rows: D, cols: Q };
    yield { name: `${k}mlp.fc0.weight`, rows: M, cols: D };
    yield { name: `${k}mlp.fc1.weight`, rows: D, cols: M };
  }
  yield { name: 'vision_tower.encoder.final_layernorm.weight', rows: D, cols: 1, vector: true };
  yield { name: 'mm_projector.proj.0.weight', rows: 4 * D, cols: 4 * D };
  yield { name: 'mm_projector.proj.2.weight', rows: TH, cols: 4 * D };
  yield { name: 'mm_projector.post_norm.weight', rows: TH, cols: 1, vector: true };
}

/** Working memory for an image of `patches` patches (f32 buffers in the tower's arena). */
function scratchBytes(v: VisionConfig, patches: number): number {
  const L = patches;
  const T = TILE;
  const floats = L * 3 * v.patch * v.patch + L * v.hidden + 3 * L * v.qkv + L * v.qkv + T * v.hidden + T * Math.max(v.inter, 4 * v.hidden) + (L / 4) * 4 * v.hidden + T * v.textHidden;
  return aligned(floats * 4) + 8 * 4096;
}

/**
 * Kimi K3's vision tower and projector (docs/ARCHITECTURE.md, "The vision tower"): patches to
 * rows of the language model's width. Its weights and working memory live in an arena of their
 * own, made when the first image arrives.
 */
export class KimiK3Tower implements VisionTower {
  private scratch!: { px: Float32Array; x: Float32Array; qkv: Float32Array; ob: Float32Array; y: Float32Array; ff: Float32Array; mg: Float32Array; out: Float32Array };
  private patches = 0;

  private constructor(
    readonly cfg: VisionConfig,
    private readonly kernels: Kernels,
    private readonly arena: Arena,
    private readonly patchEmbed: Tensor,
    /** [posH][posW][D] */
    private readonly posGrid: Float32Array,
    private readonly blocks: Block[],
    private readonly finalNorm: Float32Array,
    private readonly proj0: Tensor,
    private readonly proj2: Tensor,
    private readonly postNorm: Float32Array,
  ) {}

  /** Whether a source holds a tower at all. */
  static present(src: WeightSource): boolean {
    return src.has('vision_tower.patch_embed.proj.weight');
  }

  /** The weights of the tower and its projector, counted from the config. */
  static parameters(v: VisionConfig): number {
    let n = 0;
    for (const t of tensors(v)) n += t.rows * t.cols;
    return n;
  }

  /** Check every tower tensor's shape (reading nothing) and return the bytes the tower takes loaded, with room for images of `v.towerLimit` patches. */
  static plan(src: WeightSource, v: VisionConfig): number {
    const patches = v.towerLimit;
    let bytes = 0;
    for (const t of tensors(v)) {
      checkShape(src, t.name, t.rows, t.cols, t.vector === true);
      bytes += t.vector || reshaped(src, t.name, t.cols) ? aligned(t.rows * t.cols * 4) : src.residentBytes(t.name);
    }
    return bytes + scratchBytes(v, patches);
  }

  /** Load the tower into `arena` (every shape checked first), a block at a time with a turn for the event loop between. */
  static async load(src: WeightSource, v: VisionConfig, kernels: Kernels, arena: Arena): Promise<KimiK3Tower> {
    KimiK3Tower.plan(src, v);
    const vector = (name: string, n: number) => {
      const out = arena.f32(arena.alloc(n * 4, 64), n);
      src.readVector(name, out);
      return out;
    };
    const matrix = (name: string, rows: number, cols: number): Tensor => {
      if (!reshaped(src, name, cols)) return src.loadMatrix(name, arena);
      // the convolution [D, 3, p, p] stored in rows of p (a checkpoint's; and the C engine's
      // converter quantizes it so, each row a padded group of its own): read once, at load, as the
      // [D, 3·p·p] f32 matrix it acts as (2.4 MB at K3's size)
      const f = arena.f32(arena.alloc(rows * cols * 4, 64), rows * cols);
      src.readVector(name, f);
      return { name, fmt: Fmt.F32, shape: [rows, cols], rows, cols, group: 0, groups: 0, rowBytes: cols * 4, arena, off: f.byteOffset, scaleOff: -1, f32: f };
    };
    const { hidden: D, qkv: Q, inter: M, patch: p, textHidden: TH } = v;
    const blocks: Block[] = [];
    for (let b = 0; b < v.layers; b++) {
      await yieldToLoop();
      const k = `vision_tower.encoder.blocks.${b}.`;
      blocks.push({
        norm0: vector(`${k}norm0.weight`, D),
        norm1: vector(`${k}norm1.weight`, D),
        wqkv: matrix(`${k}wqkv.weight`, 3 * Q, D),
        wo: matrix(`${k}wo.weight`, D, Q),
        fc0: matrix(`${k}mlp.fc0.weight`, M, D),
        fc1: matrix(`${k}mlp.fc1.weight`, D, M),
      });
    }
    const tower = new KimiK3Tower(
      v,
      kernels,
      arena,
      matrix('vision_tower.patch_embed.proj.weight', D, 3 * p * p),
      vector('vision_tower.patch_embed.pos_emb.weight', v.posH * v.posW * D),
      blocks,
      vector('vision_tower.encoder.final_layernorm.weight', D),
      matrix('mm_projector.proj.0.weight', 4 * D, 4 * D),
      matrix('mm_projector.proj.2.weight', TH, 4 * D),
      vector('mm_projector.post_norm.weight', TH),
    );
    tower.reserve(v.towerLimit);
    return tower;
  }

  /** Working memory for images of up to `patches` patches, once: the plan reserved exactly this. */
  private reserve(patches: number): void {
    const v = this.cfg;
    const a = this.arena;
    const buf = (n: number) => a.f32(a.alloc(n * 4, 64), n);
    const L = patches;
    this.scratch = {
      px: buf(L * 3 * v.patch * v.patch),
      x: buf(L * v.hidden),
      qkv: buf(3 * L * v.qkv),
      ob: buf(L * v.qkv),
      y: buf(TILE * v.hidden),
      ff: buf(TILE * Math.max(v.inter, 4 * v.hidden)),
      mg: buf((L / 4) * 4 * v.hidden),
      out: buf(TILE * v.textHidden),
    };
    this.patches = patches;
  }

  /** The rows an image's patches become: [(gh/2)·(gw/2)][textHidden]. Yields to the event loop between blocks; stops when `signal` aborts. */
  async encode(img: Patches, signal?: AbortSignal): Promise<Float32Array> {
    const v = this.cfg;
    const { gh, gw } = img;
    const L = gh * gw;
    if (!(gh >= 2 && gw >= 2 && gh % 2 === 0 && gw % 2 === 0)) throw new WasteError('E_ARG', `an image grid of ${gh} × ${gw} patches: both sides must be even and at least 2`);
    const P = 3 * v.patch * v.patch;
    if (img.pixels.length !== L * P) throw new WasteError('E_ARG', `an image of ${gh} × ${gw} patches needs ${L * P} values, got ${img.pixels.length}`);
    if (L > this.patches)
      throw new WasteError('E_ARG', `an image of ${gh} × ${gw} patches is more than the ${this.patches} the tower has room for (open the model with imagePatches, --image-patches, of at least ${L})`);
    const k = this.kernels;
    const { px, x, qkv, ob, y, ff, mg, out } = this.scratch;
    const { hidden: D, qkv: Q, inter: M, heads, headDim: hd, eps } = v;
    const turn = async () => {
      await yieldToLoop();
      signal?.throwIfAborted();
    };
    px.set(img.pixels);
    // patch embedding (the stride-p convolution as a product over 3·p·p), then the resized position grid
    for (let t0 = 0; t0 < L; t0 += TILE) {
      const T = Math.min(TILE, L - t0);
      k.matmul(this.patchEmbed, px.subarray(t0 * P, (t0 + T) * P), x.subarray(t0 * D, (t0 + T) * D), T);
    }
    addPositions(x, this.posGrid, v.posH, v.posW, D, gh, gw);
    const rope = ropeTable(gh, gw, hd);
    const scale = Math.fround(1 / Math.fround(Math.sqrt(hd)));
    for (const b of this.blocks) {
      await turn();
      for (let t0 = 0; t0 < L; t0 += TILE) {
        const T = Math.min(TILE, L - t0);
        for (let t = 0; t < T; t++) k.rmsnorm(x, b.norm0, eps, y, D, (t0 + t) * D, t * D);
        k.matmul(b.wqkv, y, qkv.subarray(t0 * 3 * Q, (t0 + T) * 3 * Q), T);
      }
      rotate(qkv, L, heads, hd, rope);
      // attention grows with the square of the patches: in slices of query rows, a turn between
      const slice = Math.max(TILE, Math.floor(ATTENTION_WORK / (L * Q)));
      for (let q0 = 0; q0 < L; q0 += slice) {
        await turn();
        k.attendAll(qkv, L, heads, hd, scale, ob, q0, Math.min(L, q0 + slice));
      }
      for (let t0 = 0; t0 < L; t0 += TILE) {
        // a block takes seconds at K3's widths: timers, signals and sockets get turns inside it
        if (t0 > 0 && t0 % (8 * TILE) === 0) await turn();
        const T = Math.min(TILE, L - t0);
        const xs = x.subarray(t0 * D, (t0 + T) * D);
        k.matmul(b.wo, ob.subarray(t0 * Q, (t0 + T) * Q), y, T);
        k.add(xs, y, T * D);
        for (let t = 0; t < T; t++) k.rmsnorm(xs, b.norm1, eps, y, D, t * D, t * D);
        k.matmul(b.fc0, y, ff, T);
        k.gelu(ff, T * M, false);
        k.matmul(b.fc1, ff, y, T);
        k.add(xs, y, T * D);
      }
    }
    await turn();
    // the final norm, written straight into the 2 × 2 merge: cell (a, c) holds patches (2a, 2c), (2a, 2c+1), (2a+1, 2c), (2a+1, 2c+1)
    const nw = gw / 2;
    const N = (gh / 2) * nw;
    for (let a = 0; a < gh / 2; a++)
      for (let c = 0; c < nw; c++)
        for (let q = 0; q < 4; q++) {
          const patch = (2 * a + (q >> 1)) * gw + 2 * c + (q & 1);
          k.rmsnorm(x, this.finalNorm, eps, mg, D, patch * D, ((a * nw + c) * 4 + q) * D);
        }
    const TH = v.textHidden;
    const rows = new Float32Array(N * TH);
    for (let t0 = 0; t0 < N; t0 += TILE) {
      const T = Math.min(TILE, N - t0);
      k.matmul(this.proj0, mg.subarray(t0 * 4 * D, (t0 + T) * 4 * D), ff, T);
      k.gelu(ff, T * 4 * D, true);
      k.matmul(this.proj2, ff, out, T);
      for (let t = 0; t < T; t++) k.rmsnorm(out, this.postNorm, v.projEps, out, TH, t * TH, t * TH);
      rows.set(out.subarray(0, T * TH), t0 * TH);
    }
    // a hostile config (a normalisation that overflows f32) must not pass as an image of zeros
    for (let i = 0; i < rows.length; i++)
      if (!Number.isFinite(rows[i])) throw new WasteError('E_FORMAT', `the vision tower's output is not finite (row ${Math.floor(i / TH)}): its weights or vision.json are damaged`);
    return rows;
  }
}

/**
 * x[r·gw + c] += the position grid resized to gh × gw: bilinear, align_corners false (source
 * coordinate (i + 0.5)·n/m − 0.5, clamped), in f32 as the C engine computes it. The grid as stored
 * when the sizes match.
 */
function addPositions(x: Float32Array, grid: Float32Array, sh: number, sw: number, D: number, gh: number, gw: number): void {
  const f = Math.fround;
  const same = sh === gh && sw === gw;
  for (let r = 0; r < gh; r++) {
    const fy = f(f(f(f(r + 0.5) * sh) / gh) - 0.5);
    const y0 = Math.floor(fy);
    const wy = f(fy - y0);
    const ya = Math.min(Math.max(y0, 0), sh - 1);
    const yb = Math.min(Math.max(y0 + 1, 0), sh - 1);
    for (let c = 0; c < gw; c++) {
      const o = (r * gw + c) * D;
      if (same) {
        for (let d = 0; d < D; d++) x[o + d] = f(x[o + d] + grid[o + d]);
        continue;
      }
      const fx = f(f(f(f(c + 0.5) * sw) / gw) - 0.5);
      const x0 = Math.floor(fx);
      const wx = f(fx - x0);
      const xa = Math.min(Math.max(x0, 0), sw - 1);
      const xb = Math.min(Math.max(x0 + 1, 0), sw - 1);
      const w00 = f(f(1 - wy) * f(1 - wx));
      const w01 = f(f(1 - wy) * wx);
      const w10 = f(wy * f(1 - wx));
      const w11 = f(wy * wx);
      const a = (ya * sw + xa) * D;
      const b = (ya * sw + xb) * D;
      const cc = (yb * sw + xa) * D;
      const e = (yb * sw + xb) * D;
      for (let d = 0; d < D; d++) {
        const pos = f(f(f(f(w00 * grid[a + d]) + f(w01 * grid[b + d])) + f(w10 * grid[cc + d])) + f(w11 * grid[e + d]));
        x[o + d] = f(x[o + d] + pos);
      }
    }
  }
}

/**
 * The 2-D rotary table for a gh × gw grid and heads of hd: for each patch and each of the hd/2
 * adjacent pairs j, cos and sin of (column when j is even, row when j is odd) · 10000^(−4⌊j/2⌋/hd).
 * [patch][pair][cos, sin].
 */
function ropeTable(gh: number, gw: number, hd: number): Float32Array {
  const f = Math.fround;
  const half = hd / 2;
  const freq = new Float32Array(half);
  for (let j = 0; j < half; j++) freq[j] = f(1 / f(Math.pow(10000, f((4 * (j >> 1)) / hd))));
  const t = new Float32Array(gh * gw * half * 2);
  for (let i = 0; i < gh * gw; i++) {
    const col = i % gw;
    const row = Math.floor(i / gw);
    for (let j = 0; j < half; j++) {
      const ang = f((j & 1 ? row : col) * freq[j]);
      t[(i * half + j) * 2] = Math.cos(ang);
      t[(i * half + j) * 2 + 1] = Math.sin(ang);
    }
  }
  return t;
}

/** Rotate every head's queries and keys in place ([L][3][heads][hd], values untouched). */
function rotate(qkv: Float32Array, L: number, heads: number, hd: number, rope: Float32Array): void {
  const f = Math.fround;
  const Q = heads * hd;
  const half = hd / 2;
  for (let i = 0; i < L; i++)
    for (let part = 0; part < 2; part++)
      for (let h = 0; h < heads; h++) {
        const base = i * 3 * Q + part * Q + h * hd;
        for (let j = 0; j < half; j++) {
          const cs = rope[(i * half + j) * 2];
          const sn = rope[(i * half + j) * 2 + 1];
          const a = qkv[base + 2 * j];
          const b = qkv[base + 2 * j + 1];
          qkv[base + 2 * j] = f(f(a * cs) - f(b * sn));
          qkv[base + 2 * j + 1] = f(f(a * sn) + f(b * cs));
        }
      }
}
