import type { ExpertQuant } from '../../container/format.js';
import type { ArenaRole } from '../architecture.js';
import { type Allocator, allocatedBytes } from '../base/scratch.js';
import type { DeepseekConfig } from './config.js';

/**
 * Working buffers for one chunk of T tokens in one arena: an arena of trunk layers holds the
 * layers' activations (MLA's and the FFN's); an arena of expert slots only what computing an expert
 * takes (the tokens' inputs, their lookup tables, one expert's row, the experts' outputs).
 */
export class DeepseekScratch {
  x: Float32Array;
  norm: Float32Array;
  out: Float32Array;
  /** [T][heads][qk_nope + qk_rope] the queries. */
  q: Float32Array;
  /** [T][q_lora_rank] the compressed query. */
  qa: Float32Array;
  /** [T][kv_lora_rank + qk_rope] the latent and k_pe before the cache. */
  kv: Float32Array;
  /** No output gate: empty. */
  gate: Float32Array;
  /** [T][heads][v_head_dim] the heads' outputs. */
  o: Float32Array;
  qLat: Float32Array;
  scores: Float32Array;
  ctx: Float32Array;
  ffA: Float32Array;
  ffB: Float32Array;
  shared: Float32Array;
  router: Float32Array;
  route: Int32Array;
  routeW: Float32Array;
  xLat: Float32Array;
  yLat: Float32Array;
  lut: Float32Array;
  lutDown: Float32Array;
  expertOut: Float32Array;
  logits: Float32Array;
  lookIds: Int32Array;
  lookW: Float32Array;
  books: [Float32Array, Float32Array, Float32Array];
  booksLayer = -1;

  constructor(c: DeepseekConfig, maxContext: number, T: number, q: ExpertQuant | undefined, m: Allocator, role: ArenaRole) {
    const H = c.hidden;
    const a = c.mla;
    const E = c.moe.experts;
    const K = c.moe.topK;
    const W = c.expertWidth;
    const L = role === 'layers' ? 1 : 0;
    const X = 1 - L;
    this.x = m.f32(L * T * H);
    this.norm = m.f32(T * H);
    this.out = m.f32(L * T * H);
    this.q = m.f32(L * T * a.heads * (a.qkNope + a.qkRope));
    this.qa = m.f32(L * T * a.qLoraRank);
    this.kv = m.f32(L * T * (a.kvLoraRank + a.qkRope));
    this.gate = m.f32(0);
    this.o = m.f32(L * T * a.heads * a.vHead);
    this.qLat = m.f32(L * a.heads * a.kvLoraRank);
    this.scores = m.f32(L * a.heads * maxContext);
    this.ctx = m.f32(L * a.heads * a.kvLoraRank);
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

  static bytes(c: DeepseekConfig, maxContext: number, T: number, q: ExpertQuant | undefined, role: ArenaRole): number {
    return allocatedBytes((m) => new DeepseekScratch(c, maxContext, T, q, m, role));
  }
}
