import type { RecordLayout } from '../../container/format.js';
import type { Tensor } from '../../container/tensor.js';
import type { ExpertStore, LandedRecord } from '../../core/expert-store.js';
import type { Kernels, VqExpertJob, VqGeometry } from '../../kernels/types.js';
import type { Arena } from '../../memory/arena.js';
import { WasteError } from '../../util/errors.js';
import { type Activation, type FfnScratch, type FfnWeights, activate, ffn } from './ffn.js';
import { type RouterConfig, route } from './router.js';

/** The working buffers the MoE block uses in an arena (of trunk layers, or of expert slots). */
export interface MoeScratch extends FfnScratch {
  out: Float32Array;
  shared: Float32Array;
  router: Float32Array;
  route: Int32Array;
  routeW: Float32Array;
  xLat: Float32Array;
  yLat: Float32Array;
  lut: Float32Array;
  lutDown: Float32Array;
  expertOut: Float32Array;
  lookIds: Int32Array;
  lookW: Float32Array;
  books: [Float32Array, Float32Array, Float32Array];
  booksLayer: number;
}

export interface MoeShape {
  experts: number;
  topK: number;
  inter: number;
  renormalize: boolean;
  routedScale: number;
}

export interface MoeWeights {
  kind: 'moe';
  router: Tensor;
  /** Selection-only bias (zeros when the checkpoint has none). */
  bias: Float32Array;
  /** The router's own bias, added to its logits (gpt-oss). */
  routerBias?: Float32Array;
  shared?: FfnWeights;
  /** [1][hidden] the shared expert's gate: its output scaled by σ(gate · x) (Qwen3-Next). */
  sharedGate?: Tensor;
  /** Per matrix kind (gate, up, down): the layer's stage codebooks transposed, [stage][dim][entry]. */
  booksT: [Float32Array, Float32Array, Float32Array];
  /** Every routed expert as dense matrices (a checkpoint; a container streams VQ records instead). */
  dense?: FfnWeights[];
  /** Latent MoE (K3): experts run on down·h; their weighted sum is normed (if `norm`) and brought back by `up`. */
  latent?: { down: Tensor; norm?: Float32Array; up: Tensor };
  /**
   * The routed experts' biases (gpt-oss): `gateUp` [E][inter][2] (gate's and up's bias of each
   * row, alternating, as the release stores them), `down` [E][width]; added to each product.
   */
  expertBias?: { gateUp: Float32Array; down: Float32Array };
}

/** Expert e's gate and up biases added to its products `a` and `b` (I values each), on the calling thread. */
function addGateUpBias(bias: Float32Array, e: number, a: Float32Array, b: Float32Array, I: number): void {
  const o = e * 2 * I;
  for (let i = 0; i < I; i++) {
    a[i] += bias[o + 2 * i];
    b[i] += bias[o + 2 * i + 1];
  }
}

function addDownBias(bias: Float32Array, e: number, y: Float32Array, W: number): void {
  for (let i = 0; i < W; i++) y[i] += bias[e * W + i];
}

/** What the MoE block needs of the network that runs it. */
export interface MoeHost {
  readonly kernels: Kernels;
  readonly eps: number;
  readonly hidden: number;
  readonly moe: MoeShape;
  readonly act: Activation;
  readonly experts: ExpertStore | undefined;
  readonly geom: VqGeometry | undefined;
  readonly record: RecordLayout | undefined;
  scratchOf(a: Arena): MoeScratch;
  readonly routeOverride?: (layer: number, row: number) => number[] | undefined;
  readonly routeObserver?: (layer: number, route: Int32Array, T: number) => void;
  /** The family's router; without one, Kimi's (sigmoid with a selection-only bias) on the kernels. */
  readonly router?: RouterConfig;
}

/**
 * The family's router (Kimi's: sigmoid with a selection-only bias, top-k, renormalised and scaled
 * weights); the routed
 * experts (VQ records through lookup tables from the store, or dense matrices for a checkpoint) on
 * the normed tokens — or, for a latent MoE, on their projection to the latent width; the shared
 * experts on the normed tokens. Results are summed in selection order afterwards, so the order in
 * which records land changes nothing. Output in `s.out`.
 */
export function moe(h: MoeHost, L: number, w: MoeWeights, T: number, s: MoeScratch): void {
  const H = h.hidden;
  const { experts: E, topK: K, renormalize, routedScale } = h.moe;
  const k = h.kernels;
  k.matmul(w.router, s.norm, s.router, T);
  if (w.routerBias) for (let t = 0; t < T; t++) k.add(s.router.subarray(t * E, (t + 1) * E), w.routerBias, E);
  for (let t = 0; t < T; t++) {
    const logits = s.router.subarray(t * E, (t + 1) * E);
    const ids = s.route.subarray(t * K, (t + 1) * K);
    const weights = s.routeW.subarray(t * K, (t + 1) * K);
    if (h.router) route(h.router, logits, ids, weights, w.bias);
    else k.moeRoute(logits, w.bias, E, K, ids, weights, renormalize, routedScale);
  }
  if (h.routeOverride)
    for (let t = 0; t < T; t++) {
      const forced = h.routeOverride(L, t);
      if (forced) for (let j = 0; j < K; j++) s.route[t * K + j] = forced[j % forced.length];
    }
  h.routeObserver?.(L, s.route.subarray(0, T * K), T);

  const lat = w.latent;
  const W = lat ? lat.down.rows : H;
  const xin = lat ? s.xLat : s.norm;
  if (lat) k.matmul(lat.down, s.norm, s.xLat, T);
  const used = [...new Set(s.route.subarray(0, T * K))].sort((a, b) => a - b);
  let sharedDone = false;
  const runShared = () => {
    if (w.shared) ffn(k, h.act, w.shared, T, s, s.shared);
    if (w.shared && w.sharedGate) {
      // the router's logits are spent (the experts are chosen): their first T floats take the gate's
      k.matmul(w.sharedGate, s.norm, s.router, T);
      for (let t = 0; t < T; t++) {
        const g = 1 / (1 + Math.exp(-s.router[t]));
        for (let i = t * H; i < (t + 1) * H; i++) s.shared[i] *= g;
      }
    }
    sharedDone = true;
  };
  if (w.dense) denseExperts(h, w.dense, used, W, xin, T, s, w.expertBias);
  else {
    const store = h.experts;
    if (!store) throw new WasteError('E_STATE', 'this model has no expert store');
    const prepared = new Map<MoeScratch, Uint8Array>();
    const one = (e: number, rec: Uint8Array, arena: Arena) => expert(h, L, w, e, rec, h.scratchOf(arena), s, W, xin, T, prepared);
    // the records that have landed are computed together, each (token, expert) pair whole on one
    // thread: a dispatch per decode step's worth of pairs where expert by expert took three per pair
    // experts with biases are computed a product at a time (vqExperts fuses the three)
    if (store.eachLanded && !w.expertBias) store.eachLanded(L, used, (landed) => together(h, L, w, landed, s, W, xin, T, prepared, one), runShared);
    else store.each(L, used, one, runShared);
  }
  if (!sharedDone) runShared();

  if (!lat) {
    // Weighted sum in selection order, then the shared experts (unweighted).
    for (let t = 0; t < T; t++)
      k.moeCombine(
        s.out.subarray(t * H, (t + 1) * H),
        s.expertOut.subarray(t * K * H, (t + 1) * K * H),
        s.routeW.subarray(t * K, (t + 1) * K),
        K,
        H,
        w.shared ? s.shared.subarray(t * H, (t + 1) * H) : undefined,
      );
    return;
  }
  // latent: the weighted sum at the latent width, its norm, back to the hidden width, then the shared experts
  for (let t = 0; t < T; t++) {
    const y = s.yLat.subarray(t * W, (t + 1) * W);
    k.moeCombine(y, s.expertOut.subarray(t * K * W, (t + 1) * K * W), s.routeW.subarray(t * K, (t + 1) * K), K, W, undefined);
    if (lat.norm) k.rmsnorm(y, lat.norm, h.eps, y, W);
  }
  k.matmul(lat.up, s.yLat, s.out, T);
  if (w.shared) k.add(s.out, s.shared, T * H);
}

/** The unquantized reference: every routed expert as dense matrices, for each token routed to it. */
function denseExperts(h: MoeHost, experts: FfnWeights[], used: number[], W: number, xin: Float32Array, T: number, s: MoeScratch, bias?: MoeWeights['expertBias']): void {
  const { topK: K, inter: I } = h.moe;
  const k = h.kernels;
  for (const e of used) {
    const x = experts[e];
    for (let t = 0; t < T; t++)
      for (let j = 0; j < K; j++) {
        if (s.route[t * K + j] !== e) continue;
        const v = xin.subarray(t * W, (t + 1) * W);
        k.matmul(x.gate, v, s.ffA, 1);
        k.matmul(x.up, v, s.ffB, 1);
        if (bias) addGateUpBias(bias.gateUp, e, s.ffA, s.ffB, I);
        activate(k, h.act, s.ffA, s.ffB, I);
        const y = s.expertOut.subarray((t * K + j) * W, (t * K + j + 1) * W);
        k.matmul(x.down, s.ffA, y, 1);
        if (bias) addDownBias(bias.down, e, y, W);
      }
  }
}

/**
 * One routed expert for every token of the chunk routed to it, computed in `sx` (the scratch of
 * the arena its record landed in) and left in the layer's scratch `s`. The gate/up tables depend
 * on the token, not the expert, so each token's are built once per arena and shared.
 */
function expert(h: MoeHost, L: number, w: MoeWeights, e: number, rec: Uint8Array, sx: MoeScratch, s: MoeScratch, W: number, xin: Float32Array, T: number, prepared: Map<MoeScratch, Uint8Array>): void {
  const { topK: K, inter: I } = h.moe;
  const k = h.kernels;
  const geom = h.geom!;
  const lay = h.record!;
  const [, , bookD] = sx === s ? w.booksT : booksIn(L, w, sx);
  for (let t = 0; t < T; t++) {
    for (let j = 0; j < K; j++) {
      if (s.route[t * K + j] !== e) continue;
      const [lutG, lutU] = tables(h, L, w, sx, s, W, xin, T, t, prepared);
      const sc = lay.scaleOff;
      // gate and up in one call: one dispatch to the pool where there were two
      k.vqApplyPair(rec, { idxOff: lay.gateOff, scaleOff: sc, lut: lutG, y: sx.ffA }, { idxOff: lay.upOff, scaleOff: sc + 2 * I, lut: lutU, y: sx.ffB }, I, W, geom);
      if (w.expertBias) addGateUpBias(w.expertBias.gateUp, e, sx.ffA, sx.ffB, I);
      activate(k, h.act, sx.ffA, sx.ffB, I);
      k.vqLut(bookD, geom.stages, geom.entries, geom.vecDim, sx.ffA, I, sx.lutDown);
      // an expert arena holds one output row at a time; the layer's scratch holds them all
      const dst = sx === s ? s.expertOut.subarray((t * K + j) * W, (t * K + j + 1) * W) : sx.expertOut.subarray(0, W);
      k.vqApply(rec, lay.downOff, sc + 4 * I, W, I, geom, sx.lutDown, dst);
      if (w.expertBias) addDownBias(w.expertBias.down, e, dst, W);
      if (sx !== s) s.expertOut.set(dst, (t * K + j) * W);
    }
  }
}

/**
 * Token t's gate and up tables in the scratch `sx` of the arena a record landed in, built the first
 * time a record there needs them: they depend on the token, not the expert, so every expert of the
 * layer in that arena shares them.
 */
function tables(h: MoeHost, L: number, w: MoeWeights, sx: MoeScratch, s: MoeScratch, W: number, xin: Float32Array, T: number, t: number, prepared: Map<MoeScratch, Uint8Array>): [Float32Array, Float32Array] {
  const geom = h.geom!;
  const lutSize = (W / geom.vecDim) * geom.stages * geom.entries;
  const lutG = sx.lut.subarray(2 * t * lutSize, (2 * t + 1) * lutSize);
  const lutU = sx.lut.subarray((2 * t + 1) * lutSize, (2 * t + 2) * lutSize);
  let built = prepared.get(sx);
  if (!built) prepared.set(sx, (built = new Uint8Array(T)));
  if (!built[t]) {
    const [bookG, bookU] = sx === s ? w.booksT : booksIn(L, w, sx);
    // the expert's input, where this arena's kernels can read it
    const xs = sx === s ? xin : xin === s.xLat ? sx.xLat : sx.norm;
    if (sx !== s) xs.set(xin.subarray(t * W, (t + 1) * W), t * W);
    h.kernels.vqLutPair(bookG, bookU, geom.stages, geom.entries, geom.vecDim, xs.subarray(t * W, (t + 1) * W), W, lutG, lutU);
    built[t] = 1;
  }
  return [lutG, lutU];
}

/**
 * The routed experts whose records have landed, for every token of the step routed to them,
 * computed by one vqExperts call per arena they are in (a job per token and expert): the values
 * `expert` gives, with one dispatch for all of them. An arena without room for the kernels'
 * working rows falls back to `one` (expert by expert).
 */
function together(h: MoeHost, L: number, w: MoeWeights, landed: readonly LandedRecord[], s: MoeScratch, W: number, xin: Float32Array, T: number, prepared: Map<MoeScratch, Uint8Array>, one: (e: number, rec: Uint8Array, arena: Arena) => void): void {
  const K = h.moe.topK;
  const lay = h.record!;
  const byArena = new Map<Arena, LandedRecord[]>();
  for (const r of landed) {
    const g = byArena.get(r.arena);
    if (g) g.push(r);
    else byArena.set(r.arena, [r]);
  }
  for (const [arena, group] of byArena) {
    const sx = h.scratchOf(arena);
    const [, , booksDown] = sx === s ? w.booksT : booksIn(L, w, sx);
    const jobs: VqExpertJob[] = [];
    for (const r of group)
      for (let t = 0; t < T; t++)
        for (let j = 0; j < K; j++) {
          if (s.route[t * K + j] !== r.expert) continue;
          const [lutGate, lutUp] = tables(h, L, w, sx, s, W, xin, T, t, prepared);
          jobs.push({ rec: r.record, lutGate, lutUp, y: s.expertOut.subarray((t * K + j) * W, (t * K + j + 1) * W) });
        }
    const act = h.act;
    // no kernel fuses gpt-oss's clamped GLU (nor its biases: such experts never come here)
    if (act.kind === 'clamped') {
      for (const r of group) one(r.expert, r.record, arena);
      continue;
    }
    const shape = { gateOff: lay.gateOff, upOff: lay.upOff, downOff: lay.downOff, scaleOff: lay.scaleOff, inter: h.moe.inter, width: W, g: h.geom!, booksDown, act, topK: K };
    if (!h.kernels.vqExperts(jobs, shape)) for (const r of group) one(r.expert, r.record, arena);
  }
}

/** Layer L's transposed codebooks copied into another arena's scratch (for records cached there). */
function booksIn(L: number, w: MoeWeights, sx: MoeScratch): [Float32Array, Float32Array, Float32Array] {
  if (sx.booksLayer !== L) {
    for (let kind = 0; kind < 3; kind++) sx.books[kind].set(w.booksT[kind]);
    sx.booksLayer = L;
  }
  return sx.books;
}

/**
 * Decode: at MoE layer L, guess what the next `store.lookaheadLayers` layers will ask for and name
 * their likeliest experts to the store, which reads them ahead if it has room. Layer L+d's guess
 * applies L+d's router to L's MoE input (in `s.norm`): the only hidden state there is yet. The
 * guesses are ranked by depth (L+1's first), the order the reads should be taken in. In a batched
 * decode step `s.norm` holds one row per sequence: each depth names every row's first choices before
 * any row's later ones.
 */
export function lookAhead(h: MoeHost, L: number, layers: readonly { arena: Arena; ffn: { kind: 'dense' } | MoeWeights }[], s: MoeScratch, T = 1): void {
  const store = h.experts;
  if (!store || store.lookahead <= 0) return;
  for (let d = 1; d <= store.lookaheadLayers; d++) {
    const next = layers[L + d];
    if (!next) return;
    if (next.ffn.kind === 'moe') guess(h, store, L + d, d, next.ffn, s, h.scratchOf(next.arena), T);
  }
}

/** Layer `layer`'s router on the hidden state in `s.norm`: its top experts, named to the store as a guess `depth` layers ahead. */
function guess(h: MoeHost, store: ExpertStore, layer: number, depth: number, w: MoeWeights, s: MoeScratch, sn: MoeScratch, T: number): void {
  const H = h.hidden;
  const E = h.moe.experts;
  const n = Math.min(store.lookahead, E, 64);
  if (sn !== s) sn.norm.set(s.norm.subarray(0, T * H));
  h.kernels.matmul(w.router, sn.norm, sn.router, T);
  if (w.routerBias) for (let t = 0; t < T; t++) h.kernels.add(sn.router.subarray(t * E, (t + 1) * E), w.routerBias, E);
  if (T === 1) {
    h.kernels.moeRoute(sn.router.subarray(0, E), w.bias, E, n, sn.lookIds, sn.lookW, false, 1);
    store.prefetch(layer, [...sn.lookIds.subarray(0, n)], depth);
    return;
  }
  const picks: number[][] = [];
  for (let t = 0; t < T; t++) {
    h.kernels.moeRoute(sn.router.subarray(t * E, (t + 1) * E), w.bias, E, n, sn.lookIds, sn.lookW, false, 1);
    picks.push([...sn.lookIds.subarray(0, n)]);
  }
  const ids = new Set<number>();
  for (let j = 0; j < n; j++) for (const p of picks) ids.add(p[j]);
  store.prefetch(layer, [...ids], depth);
}
