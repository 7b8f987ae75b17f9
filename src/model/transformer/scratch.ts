import type { ExpertQuant } from '../../container/format.js';
import type { ArenaRole } from '../architecture.js';
import { type Allocator, allocatedBytes } from '../base/scratch.js';
import type { TransformerConfig } from './config.js';

/**
 * Working buffers for one chunk of T tokens in one arena: an arena of trunk layers holds the
 * layers' activations; an arena of expert slots only what computing an expert takes (the tokens'
 * inputs, their lookup tables, one expert's intermediate row, the experts' outputs).
 */
export class TransformerScratch {
  /** [T][hidden] the hidden state of the tokens in flight. */
  x: Float32Array;
  /** [T][hidden] a sublayer's normed input (an expert arena: the experts' inputs). */
  norm: Float32Array;
  /** [T][hidden] a sublayer's output. */
  out: Float32Array;
  /** [T][heads][headDim] the queries, then [T][heads][headDim] the heads' outputs. */
  q: Float32Array;
  o: Float32Array;
  /** [T][kvHeads][headDim] the new keys and values. */
  k: Float32Array;
  v: Float32Array;
  /** [heads][context] one token's attention weights. */
  scores: Float32Array;
  /** [T][inter] a dense FFN's (or the shared experts') gate and up; an expert arena: one expert's row. */
  ffA: Float32Array;
  ffB: Float32Array;
  /** [T][hidden] the shared experts' output. */
  shared: Float32Array;
  /** [T][experts] router logits, [T][topK] the experts chosen and their weights. */
  router: Float32Array;
  route: Int32Array;
  routeW: Float32Array;
  /** No latent MoE in these families: empty. */
  xLat: Float32Array;
  yLat: Float32Array;
  /** VQ lookup tables: the tokens' gate/up tables, one down table. */
  lut: Float32Array;
  lutDown: Float32Array;
  /** [T][topK][hidden] each routed expert's output (the head's rows, once the layers are done). */
  expertOut: Float32Array;
  /** [vocab] */
  logits: Float32Array;
  lookIds: Int32Array;
  lookW: Float32Array;
  /** A copy of one layer's codebooks, for experts cached in this arena but computed for another layer's. */
  books: [Float32Array, Float32Array, Float32Array];
  booksLayer = -1;

  constructor(c: TransformerConfig, maxContext: number, T: number, q: ExpertQuant | undefined, m: Allocator, role: ArenaRole) {
    const H = c.hidden;
    const a = c.attention;
    const qw = a.heads * a.headDim;
    const kw = a.kvHeads * a.headDim;
    const E = c.moe.experts;
    const K = c.moe.topK;
    const W = c.expertWidth;
    const L = role === 'layers' ? 1 : 0;
    const X = 1 - L;
    this.x = m.f32(L * T * H);
    this.norm = m.f32(T * H);
    this.out = m.f32(L * T * H);
    this.q = m.f32(L * T * qw);
    this.o = m.f32(L * T * qw);
    this.k = m.f32(L * T * kw);
    this.v = m.f32(L * T * kw);
    this.scores = m.f32(L * a.heads * maxContext);
    const inter = Math.max(c.denseInter, c.sharedInter, c.moe.inter);
    this.ffA = m.f32(L ? T * inter : c.moe.inter);
    this.ffB = m.f32(L ? T * inter : c.moe.inter);
    this.shared = m.f32(L * T * H);
    this.router = m.f32(L * T * E);
    this.route = m.i32(L * T * K);
    this.routeW = m.f32(L * T * K);
    this.xLat = m.f32(0);
    this.yLat = m.f32(0);
    const lutSize = q ? (W / q.vecDim) * q.stages * q.entries : 0;
    this.lut = m.f32(X * 2 * T * lutSize);
    this.lutDown = m.f32(X * (q ? (c.moe.inter / q.vecDim) * q.stages * q.entries : 0));
    this.expertOut = m.f32(L ? T * K * W : W);
    this.logits = m.f32(L * c.vocab);
    this.lookIds = m.i32(L * 64);
    this.lookW = m.f32(L * 64);
    const per = q ? q.stages * q.vecDim * q.entries : 0;
    this.books = [m.f32(X * per), m.f32(X * per), m.f32(X * per)];
  }

  static bytes(c: TransformerConfig, maxContext: number, T: number, q: ExpertQuant | undefined, role: ArenaRole): number {
    return allocatedBytes((m) => new TransformerScratch(c, maxContext, T, q, m, role));
  }
}
