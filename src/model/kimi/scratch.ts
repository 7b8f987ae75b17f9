import type { ExpertQuant } from '../../container/format.js';
import { type Allocator, allocatedBytes } from '../base/scratch.js';
import type { ArenaRole } from '../architecture.js';

/** The widths a Kimi-family forward pass needs working memory for. */
export interface ScratchShape {
  hidden: number;
  vocab: number;
  maxContext: number;
  kda: { heads: number; headDim: number };
  mla: { heads: number; kvLoraRank: number; qkNope: number; qkRope: number; vHead: number; qLoraRank: number };
  /** The widest FFN intermediate: dense, shared experts or one routed expert. */
  inter: number;
  moe: { experts: number; topK: number; inter: number };
  /** The width routed experts read and write (the hidden size, or a latent width). */
  expertWidth: number;
  /** Latent MoE: the latent width (0 = none). */
  latent: number;
  /** Attention residuals: block summaries per token (0 = none). */
  blocks: number;
}

/**
 * Working buffers for one chunk of T tokens in one arena, sized once from the shape and from what
 * the arena holds: an arena of trunk layers needs the layers' activations; an arena of expert
 * slots needs only what computing an expert takes — the tokens' inputs, their lookup tables (built
 * once per token and arena, for every expert of the layer that lands there), one expert's
 * intermediate row, the experts' outputs — and the others are left empty.
 */
export class Scratch {
  /** [T][hidden] the hidden state of the tokens in flight. */
  x: Float32Array;
  /** [T][hidden] a sublayer's normed input. */
  norm: Float32Array;
  /** [T][hidden] a sublayer's output. */
  out: Float32Array;
  q: Float32Array;
  k: Float32Array;
  v: Float32Array;
  g: Float32Array;
  /** [T][max(KDA C, MLA heads × v)] an output gate's logits. */
  gate: Float32Array;
  low: Float32Array;
  beta: Float32Array;
  o: Float32Array;
  kv: Float32Array;
  /** [T][q_lora_rank] MLA's compressed query. */
  qa: Float32Array;
  qLat: Float32Array;
  scores: Float32Array;
  ctx: Float32Array;
  ffA: Float32Array;
  ffB: Float32Array;
  shared: Float32Array;
  router: Float32Array;
  route: Int32Array;
  routeW: Float32Array;
  /** [T][latent] latent MoE: the experts' input, then [T][latent] their weighted sum. */
  xLat: Float32Array;
  yLat: Float32Array;
  lut: Float32Array;
  lutDown: Float32Array;
  /** [T][topK][expertWidth] each routed expert's output. */
  expertOut: Float32Array;
  logits: Float32Array;
  lookIds: Int32Array;
  lookW: Float32Array;
  /** Attention residuals: [T][hidden] the partial sum of the current block, [T][blocks][hidden] the summaries. */
  ps: Float32Array;
  blocks: Float32Array;
  /** A copy of one layer's codebooks, for experts cached in this arena but computed for another layer's. */
  books: [Float32Array, Float32Array, Float32Array];
  booksLayer = -1;

  constructor(c: ScratchShape, T: number, q: ExpertQuant | undefined, m: Allocator, role: ArenaRole = 'layers') {
    const H = c.hidden;
    const C = c.kda.heads * c.kda.headDim;
    const a = c.mla;
    const wide = Math.max(C, a.heads * (a.qkNope + a.qkRope), a.heads * a.vHead);
    const E = c.moe.experts;
    const K = c.moe.topK;
    const W = c.expertWidth;
    const L = role === 'layers' ? 1 : 0;
    const X = 1 - L;
    this.x = m.f32(L * T * H);
    // an expert arena keeps the tokens' inputs here (or in xLat, for a latent MoE)
    this.norm = m.f32((L || !c.latent ? 1 : 0) * T * H);
    this.out = m.f32(L * T * H);
    this.q = m.f32(L * T * wide);
    this.k = m.f32(L * T * C);
    this.v = m.f32(L * T * C);
    this.g = m.f32(L * T * C);
    this.gate = m.f32(L * T * Math.max(C, a.heads * a.vHead));
    this.low = m.f32(L * T * c.kda.headDim);
    this.beta = m.f32(L * T * c.kda.heads);
    this.o = m.f32(L * T * wide);
    this.kv = m.f32(L * T * (a.kvLoraRank + a.qkRope));
    this.qa = m.f32(L * T * a.qLoraRank);
    this.qLat = m.f32(L * a.heads * a.kvLoraRank);
    this.scores = m.f32(L * a.heads * c.maxContext);
    this.ctx = m.f32(L * a.heads * a.kvLoraRank);
    // layers: a chunk's dense or shared FFN (and a dense expert's row); experts: one expert's row
    this.ffA = m.f32(L ? T * c.inter : c.moe.inter);
    this.ffB = m.f32(L ? T * c.inter : c.moe.inter);
    this.shared = m.f32(L * T * H);
    this.router = m.f32(L * T * E);
    this.route = m.i32(L * T * K);
    this.routeW = m.f32(L * T * K);
    this.xLat = m.f32(T * c.latent);
    this.yLat = m.f32(L * T * c.latent);
    const lutSize = q ? (W / q.vecDim) * q.stages * q.entries : 0;
    this.lut = m.f32(X * 2 * T * lutSize);
    this.lutDown = m.f32(X * (q ? (c.moe.inter / q.vecDim) * q.stages * q.entries : 0));
    this.expertOut = m.f32(L ? T * K * W : W);
    this.logits = m.f32(L * c.vocab);
    this.lookIds = m.i32(L * 64);
    this.lookW = m.f32(L * 64);
    this.ps = m.f32(L * (c.blocks ? T * H : 0));
    this.blocks = m.f32(L * T * c.blocks * H);
    const per = q ? q.stages * q.vecDim * q.entries : 0;
    this.books = [m.f32(X * per), m.f32(X * per), m.f32(X * per)];
  }

  /** Bytes the buffers take in an arena (each allocation 64-byte aligned, as the arena does). */
  static bytes(c: ScratchShape, T: number, q: ExpertQuant | undefined, role: ArenaRole): number {
    return allocatedBytes((m) => new Scratch(c, T, q, m, role));
  }
}
