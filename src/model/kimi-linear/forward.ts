import type { ExpertQuant, RecordLayout } from '../../container/format.js';
import type { Kernels, VqGeometry } from '../../kernels/types.js';
import type { Arena } from '../../memory/arena.js';
import type { ExpertCache } from '../../runtime/cache.js';
import { WasteError } from '../../util/errors.js';
import type { KimiLinearConfig } from './config.js';
import { KimiLinearState } from './state.js';
import type { FfnWeights, KdaWeights, KimiLinearWeights, MlaWeights, MoeWeights } from './weights.js';

/** L2-norm epsilon inside the square root (fla's l2norm). */
const L2_EPS = 1e-6;

export interface ForwardOptions {
  /** Return the logits of every position, row after row, instead of only the last. */
  allLogits?: boolean;
}

/**
 * The Kimi-Linear forward pass over a chunk of tokens at a time. Prefill and decode are the same
 * code: a chunk of T tokens runs every projection as one T-row product and walks the recurrences
 * token by token, and since every kernel computes each output element independently of the batch,
 * prefill(T) followed by a step is bit-identical to T+1 single steps.
 *
 * Each layer computes in its own arena (where its weights live) with that arena's scratch; the
 * hidden state is copied when consecutive layers live in different arenas.
 */
export class KimiLinearModel {
  readonly cfg: KimiLinearConfig;
  readonly chunk: number;
  readonly maxContext: number;
  private readonly geom?: VqGeometry;
  private readonly scratch = new Map<Arena, Scratch>();
  /** When set, wall time in ms is added up per phase: "kda", "mla", "moe", "dense", "head". */
  profile?: Record<string, number>;
  /** Decode only: prefetch this many of the next MoE layer's likeliest experts (0 = off). */
  lookahead = 0;
  /** Replace the router's choice (a recorded routing trace, for benchmarks): ids for layer L. */
  routeOverride?: (layer: number) => number[] | undefined;
  /** Told the experts chosen for each token of a chunk at MoE layer L ([T][topK], selection order). */
  routeObserver?: (layer: number, route: Int32Array, T: number) => void;
  /** Lookahead guesses, and how many of them the real router then chose. */
  readonly lookaheadStats = { predicted: 0, correct: 0 };
  private predicted = new Map<number, number[]>();

  constructor(
    cfg: KimiLinearConfig,
    readonly weights: KimiLinearWeights,
    readonly kernels: Kernels,
    /** Where VQ expert records come from (a container); absent when the experts are dense. */
    readonly experts: ExpertCache | undefined,
    q: ExpertQuant | undefined,
    /** Where gate, up, down and the scales sit in every expert record. */
    private readonly record: RecordLayout | undefined,
    chunk: number,
    maxContext: number,
  ) {
    this.cfg = cfg;
    this.chunk = chunk;
    this.maxContext = maxContext;
    if (q) this.geom = { stages: q.stages, entries: q.entries, vecDim: q.vecDim, indexBlock: q.indexBlock };
    for (const a of weights.arenas) this.scratch.set(a, new Scratch(this.cfg, chunk, maxContext, q, arenaAllocator(a)));
  }

  /** Bytes of scratch each arena needs. */
  static scratchBytes(cfg: KimiLinearConfig, chunk: number, maxContext: number, q: ExpertQuant | undefined): number {
    let n = 0;
    const count = (bytes: number, align = 64) => (n = Math.ceil(n / align) * align + bytes);
    new Scratch(cfg, chunk, maxContext, q, {
      f32: (k) => (count(4 * k), new Float32Array(0)),
      i32: (k) => (count(4 * k), new Int32Array(0)),
    });
    return n;
  }

  newState(maxContext: number): KimiLinearState {
    if (maxContext > this.maxContext)
      throw new WasteError('E_ARG', `a session context of ${maxContext} exceeds the model's maximum of ${this.maxContext} (set when it was opened)`);
    return new KimiLinearState(this.cfg, maxContext, this.weights.layers.map((l) => l.arena));
  }

  /** Run `tokens` through the model from `state.pos`, advancing the state. */
  async forward(state: KimiLinearState, tokens: ArrayLike<number>, opts: ForwardOptions = {}): Promise<Float32Array> {
    const { vocab, hidden: H } = this.cfg;
    const n = tokens.length;
    if (n === 0) throw new WasteError('E_ARG', 'no tokens to run');
    for (let i = 0; i < n; i++) {
      const id = tokens[i];
      if (!(Number.isInteger(id) && id >= 0 && id < vocab))
        throw new WasteError('E_ARG', `token id ${id} is outside the vocabulary (0..${vocab - 1})`);
    }
    state.reserve(state.pos + n);
    const logits = new Float32Array(opts.allLogits ? n * vocab : vocab);
    for (let c0 = 0; c0 < n; c0 += this.chunk) {
      const T = Math.min(this.chunk, n - c0);
      let s = this.scratchOf(this.weights.layers[0].arena);
      for (let t = 0; t < T; t++) this.weights.embedRow(tokens[c0 + t], s.x.subarray(t * H, (t + 1) * H));
      for (let L = 0; L < this.cfg.layers; L++) {
        s = this.carry(s, this.weights.layers[L].arena, T);
        await this.layer(state, L, T, s);
      }
      state.pos += T;
      s = this.carry(s, this.weights.headArena, T);
      const t0 = this.profile ? performance.now() : 0;
      for (let t = 0; t < T; t++) {
        const pos = c0 + t;
        if (opts.allLogits) logits.set(this.head(t, s), pos * vocab);
        else if (pos === n - 1) logits.set(this.head(t, s));
      }
      if (this.profile) this.profile.head = (this.profile.head ?? 0) + performance.now() - t0;
    }
    return logits;
  }

  private scratchOf(a: Arena): Scratch {
    return this.scratch.get(a)!;
  }

  /** The scratch of arena `a`, holding the hidden state of the T tokens in flight. */
  private carry(from: Scratch, a: Arena, T: number): Scratch {
    const to = this.scratchOf(a);
    if (to !== from) to.x.set(from.x.subarray(0, T * this.cfg.hidden));
    return to;
  }

  private head(t: number, s: Scratch): Float32Array {
    const H = this.cfg.hidden;
    this.kernels.rmsnorm(s.x, this.weights.finalNorm, this.cfg.eps, s.norm, H, t * H, 0);
    this.kernels.matmul(this.weights.lmHead, s.norm, s.logits, 1);
    return s.logits;
  }

  private async layer(state: KimiLinearState, L: number, T: number, s: Scratch): Promise<void> {
    const { hidden: H, eps } = this.cfg;
    const w = this.weights.layers[L];
    const k = this.kernels;
    const prof = this.profile;
    let t0 = prof ? performance.now() : 0;
    for (let t = 0; t < T; t++) k.rmsnorm(s.x, w.inputNorm, eps, s.norm, H, t * H, t * H);
    if (w.attn.kind === 'kda') this.kda(state, L, w.attn, T, s);
    else this.mla(state, L, w.attn, T, s);
    k.add(s.x, s.out, T * H);
    if (prof) {
      const t1 = performance.now();
      prof[w.attn.kind] = (prof[w.attn.kind] ?? 0) + t1 - t0;
      t0 = t1;
    }
    for (let t = 0; t < T; t++) k.rmsnorm(s.x, w.postNorm, eps, s.norm, H, t * H, t * H);
    if (w.ffn.kind === 'dense') this.ffn(w.ffn, T, s, s.out);
    else await this.moe(L, w.ffn, T, s);
    k.add(s.x, s.out, T * H);
    if (prof) prof[w.ffn.kind] = (prof[w.ffn.kind] ?? 0) + performance.now() - t0;
  }

  /** Kimi Delta Attention: short convs, decay gate, β, L2-normalised q/k, the delta rule, gated norm. */
  private kda(state: KimiLinearState, L: number, w: KdaWeights, T: number, s: Scratch): void {
    const { heads: NH, headDim: D, convKernel: K } = this.cfg.kda;
    const C = NH * D;
    const k = this.kernels;
    const st = state.kda[L]!;
    k.matmul(w.qProj, s.norm, s.q, T);
    k.matmul(w.kProj, s.norm, s.k, T);
    k.matmul(w.vProj, s.norm, s.v, T);
    k.matmul(w.fA, s.norm, s.low, T);
    k.matmul(w.fB, s.low, s.g, T);
    k.matmul(w.bProj, s.norm, s.beta, T);
    k.matmul(w.gA, s.norm, s.low, T);
    k.matmul(w.gB, s.low, s.gate, T);
    for (let t = 0; t < T; t++) {
      const part = (b: Float32Array, n: number) => b.subarray(t * n, (t + 1) * n);
      const q = part(s.q, C);
      const kk = part(s.k, C);
      const v = part(s.v, C);
      const g = part(s.g, C);
      const beta = part(s.beta, NH);
      const o = part(s.o, C);
      k.kdaPrep({ q, k: kk, v, taps: w.conv, ring: st.conv, C, K, g, dtBias: w.dtBias, aLog: w.aLog, beta, H: NH, D, l2eps: L2_EPS });
      k.kdaStep(NH, D, q, kk, v, g, beta, st.S, o);
      k.kdaOut(o, part(s.gate, C), w.oNorm, NH, D, this.cfg.eps);
    }
    k.matmul(w.oProj, s.o, s.out, T);
  }

  /** Multi-head latent attention without RoPE, caching only the normalised latent and k_pe. */
  private mla(state: KimiLinearState, L: number, w: MlaWeights, T: number, s: Scratch): void {
    const { heads: NH, kvLoraRank: kvl, qkNope: nope, qkRope: rope, vHead: vh } = this.cfg.mla;
    const qd = nope + rope;
    const latd = kvl + rope;
    const k = this.kernels;
    const cache = state.mla[L]!.cache;
    k.matmul(w.qProj, s.norm, s.q, T);
    k.matmul(w.kvA, s.norm, s.kv, T);
    for (let t = 0; t < T; t++) {
      const pos = state.pos + t;
      const ckv = s.kv.subarray(t * latd, (t + 1) * latd);
      // The C engine and vLLM normalise the latent with the model's rms_norm_eps; HF's default is 1e-6.
      k.rmsnorm(ckv, w.kvNorm, this.cfg.eps, cache, kvl, 0, pos * latd);
      cache.set(ckv.subarray(kvl, latd), pos * latd + kvl);
      k.mlaHeads({
        kvB: w.kvB,
        q: s.q.subarray(t * NH * qd, (t + 1) * NH * qd),
        heads: NH,
        nope,
        rope,
        vh,
        kvl,
        cache,
        n: pos + 1,
        scale: 1 / Math.sqrt(qd),
        qLat: s.qLat,
        scores: s.scores,
        ctx: s.ctx,
        o: s.o.subarray(t * NH * vh, (t + 1) * NH * vh),
      });
    }
    k.matmul(w.oProj, s.o, s.out, T);
  }

  /** SwiGLU feed-forward of the T normed tokens, into `dst` [T][hidden]. */
  private ffn(w: FfnWeights, T: number, s: Scratch, dst: Float32Array): void {
    const k = this.kernels;
    const I = w.gate.rows;
    k.matmul(w.gate, s.norm, s.ffA, T);
    k.matmul(w.up, s.norm, s.ffB, T);
    k.siluMul(s.ffA, s.ffB, T * I);
    k.matmul(w.down, s.ffA, dst, T);
  }

  /**
   * Sigmoid router with a selection-only bias, top-k, renormalised and scaled weights; the routed
   * experts (VQ records through lookup tables, or dense matrices for a checkpoint); the shared
   * experts. Results are summed in selection order afterwards, so the order in which records land
   * changes nothing.
   */
  private async moe(L: number, w: MoeWeights, T: number, s: Scratch): Promise<void> {
    const { hidden: H } = this.cfg;
    const { experts: E, topK: K, renormalize, routedScale } = this.cfg.moe;
    const k = this.kernels;
    k.matmul(w.router, s.norm, s.router, T);
    for (let t = 0; t < T; t++)
      k.moeRoute(s.router.subarray(t * E, (t + 1) * E), w.bias, E, K, s.route.subarray(t * K, (t + 1) * K), s.routeW.subarray(t * K, (t + 1) * K), renormalize, routedScale);
    const forced = this.routeOverride?.(L);
    if (forced) for (let t = 0; t < T; t++) for (let j = 0; j < K; j++) s.route[t * K + j] = forced[j % forced.length];
    this.routeObserver?.(L, s.route.subarray(0, T * K), T);

    const guess = this.predicted.get(L);
    if (guess && T === 1) {
      const chosen = new Set(s.route.subarray(0, K));
      this.lookaheadStats.predicted += guess.length;
      for (const e of guess) if (chosen.has(e)) this.lookaheadStats.correct++;
    }
    this.predicted.delete(L);

    const used = [...new Set(s.route.subarray(0, T * K))].sort((a, b) => a - b);
    let sharedDone = false;
    if (w.dense) this.denseExperts(w.dense, used, T, s);
    else sharedDone = this.streamedExperts(L, w, used, T, s);
    if (w.shared && !sharedDone) this.ffn(w.shared, T, s, s.shared);

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
    if (T === 1 && this.lookahead > 0) this.lookAhead(L, s);
  }

  /** The unquantized reference: every routed expert as dense matrices, for each token routed to it. */
  private denseExperts(experts: FfnWeights[], used: number[], T: number, s: Scratch): void {
    const { hidden: H } = this.cfg;
    const { topK: K, inter: I } = this.cfg.moe;
    const k = this.kernels;
    for (const e of used) {
      const x = experts[e];
      for (let t = 0; t < T; t++)
        for (let j = 0; j < K; j++) {
          if (s.route[t * K + j] !== e) continue;
          const xin = s.norm.subarray(t * H, (t + 1) * H);
          k.matmul(x.gate, xin, s.ffA, 1);
          k.matmul(x.up, xin, s.ffB, 1);
          k.siluMul(s.ffA, s.ffB, I);
          k.matmul(x.down, s.ffA, s.expertOut.subarray((t * K + j) * H, (t * K + j + 1) * H), 1);
        }
    }
  }

  /**
   * Routed experts streamed from the cache: every distinct expert of the chunk requested at once
   * (in the order listed) and computed, for every token routed to it, as soon as its record lands;
   * the shared experts run while the first reads are in flight (returns true when they did).
   */
  private streamedExperts(L: number, w: MoeWeights, used: number[], T: number, s: Scratch): boolean {
    const cache = this.experts;
    if (!cache) throw new WasteError('E_STATE', 'this model has no expert cache');
    const prepared = new Map<Scratch, Uint8Array>();
    let sharedDone = false;
    for (let i = 0; i < used.length; ) {
      // as many as the cache can hold at once (a whole decode layer; prefill chunks in windows)
      const n = Math.max(1, Math.min(used.length - i, cache.available()));
      const ids = used.slice(i, i + n);
      i += n;
      const slots = cache.request(L, ids);
      if (!sharedDone && w.shared) this.ffn(w.shared, T, s, s.shared);
      sharedDone = true;
      while (slots.length) {
        const at = cache.waitAny(slots);
        const slot = slots.splice(at, 1)[0];
        const e = ids.splice(at, 1)[0];
        const rec = cache.record(slot);
        this.expert(L, w, e, rec, this.scratchOf(slot.arena), s, T, prepared);
        cache.release(slot);
      }
    }
    return sharedDone;
  }

  /**
   * One routed expert for every token of the chunk routed to it, computed in `sx` (the scratch of
   * the arena its record landed in) and left in the layer's scratch `s`. The gate/up tables depend
   * on the token, not the expert, so each token's are built once per arena and shared.
   */
  private expert(L: number, w: MoeWeights, e: number, rec: Uint8Array, sx: Scratch, s: Scratch, T: number, prepared: Map<Scratch, Uint8Array>): void {
    const { hidden: H } = this.cfg;
    const { topK: K, inter: I } = this.cfg.moe;
    const k = this.kernels;
    const geom = this.geom!;
    const lay = this.record!;
    const lutSize = (H / geom.vecDim) * geom.stages * geom.entries;
    let built = prepared.get(sx);
    if (!built) prepared.set(sx, (built = new Uint8Array(T)));
    const [bookG, bookU, bookD] = sx === s ? w.booksT : this.booksIn(L, w, sx);
    for (let t = 0; t < T; t++) {
      for (let j = 0; j < K; j++) {
        if (s.route[t * K + j] !== e) continue;
        const lutG = sx.lut.subarray(2 * t * lutSize, (2 * t + 1) * lutSize);
        const lutU = sx.lut.subarray((2 * t + 1) * lutSize, (2 * t + 2) * lutSize);
        if (!built[t]) {
          if (sx !== s) sx.norm.set(s.norm.subarray(t * H, (t + 1) * H), t * H);
          const xin = sx.norm.subarray(t * H, (t + 1) * H);
          k.vqLut(bookG, geom.stages, geom.entries, geom.vecDim, xin, H, lutG);
          k.vqLut(bookU, geom.stages, geom.entries, geom.vecDim, xin, H, lutU);
          built[t] = 1;
        }
        const sc = lay.scaleOff;
        k.vqApply(rec, lay.gateOff, sc, I, H, geom, lutG, sx.ffA);
        k.vqApply(rec, lay.upOff, sc + 2 * I, I, H, geom, lutU, sx.ffB);
        k.siluMul(sx.ffA, sx.ffB, I);
        k.vqLut(bookD, geom.stages, geom.entries, geom.vecDim, sx.ffA, I, sx.lutDown);
        const dst = sx.expertOut.subarray((t * K + j) * H, (t * K + j + 1) * H);
        k.vqApply(rec, lay.downOff, sc + 4 * I, H, I, geom, sx.lutDown, dst);
        if (sx !== s) s.expertOut.set(dst, (t * K + j) * H);
      }
    }
  }

  /** Layer L's transposed codebooks copied into another arena's scratch (for records cached there). */
  private booksIn(L: number, w: MoeWeights, sx: Scratch): [Float32Array, Float32Array, Float32Array] {
    if (sx.booksLayer !== L) {
      for (let kind = 0; kind < 3; kind++) sx.books[kind].set(w.booksT[kind]);
      sx.booksLayer = L;
    }
    return sx.books;
  }

  /** Run the next MoE layer's router on this layer's MoE input and prefetch its likeliest experts. */
  private lookAhead(L: number, s: Scratch): void {
    const next = this.weights.layers[L + 1];
    if (!next || next.ffn.kind !== 'moe' || !this.experts) return;
    const { hidden: H } = this.cfg;
    const { experts: E } = this.cfg.moe;
    const n = Math.min(this.lookahead, E, 64);
    const sn = this.scratchOf(next.arena);
    if (sn !== s) sn.norm.set(s.norm.subarray(0, H));
    this.kernels.matmul(next.ffn.router, sn.norm, sn.router, 1);
    this.kernels.moeRoute(sn.router.subarray(0, E), next.ffn.bias, E, n, sn.lookIds, sn.lookW, false, 1);
    const ids = [...sn.lookIds.subarray(0, n)];
    this.predicted.set(L + 1, ids);
    this.experts.prefetch(L + 1, ids);
  }
}

interface Allocator {
  f32(n: number): Float32Array;
  i32(n: number): Int32Array;
}

function arenaAllocator(a: Arena): Allocator {
  return { f32: (n) => a.allocF32(n), i32: (n) => a.i32(a.alloc(4 * n, 64), n) };
}

/** Working buffers for one chunk in one arena, sized once from the config. */
class Scratch {
  x: Float32Array;
  norm: Float32Array;
  out: Float32Array;
  q: Float32Array;
  k: Float32Array;
  v: Float32Array;
  g: Float32Array;
  gate: Float32Array;
  low: Float32Array;
  beta: Float32Array;
  o: Float32Array;
  kv: Float32Array;
  qLat: Float32Array;
  scores: Float32Array;
  ctx: Float32Array;
  ffA: Float32Array;
  ffB: Float32Array;
  shared: Float32Array;
  router: Float32Array;
  route: Int32Array;
  routeW: Float32Array;
  lut: Float32Array;
  lutDown: Float32Array;
  expertOut: Float32Array;
  logits: Float32Array;
  lookIds: Int32Array;
  lookW: Float32Array;
  /** A copy of one layer's codebooks, for experts cached in this arena but computed for another layer's. */
  books: [Float32Array, Float32Array, Float32Array];
  booksLayer = -1;

  constructor(cfg: KimiLinearConfig, T: number, maxContext: number, q: ExpertQuant | undefined, m: Allocator) {
    const H = cfg.hidden;
    const C = cfg.kda.heads * cfg.kda.headDim;
    const a = cfg.mla;
    const wide = Math.max(C, a.heads * (a.qkNope + a.qkRope), a.heads * a.vHead);
    const inter = Math.max(cfg.denseInter, cfg.moe.inter * Math.max(1, cfg.moe.shared));
    const E = cfg.moe.experts;
    const K = cfg.moe.topK;
    this.x = m.f32(T * H);
    this.norm = m.f32(T * H);
    this.out = m.f32(T * H);
    this.q = m.f32(T * wide);
    this.k = m.f32(T * C);
    this.v = m.f32(T * C);
    this.g = m.f32(T * C);
    this.gate = m.f32(T * C);
    this.low = m.f32(T * cfg.kda.headDim);
    this.beta = m.f32(T * cfg.kda.heads);
    this.o = m.f32(T * wide);
    this.kv = m.f32(T * (a.kvLoraRank + a.qkRope));
    this.qLat = m.f32(a.heads * a.kvLoraRank);
    this.scores = m.f32(a.heads * maxContext);
    this.ctx = m.f32(a.heads * a.kvLoraRank);
    this.ffA = m.f32(T * inter);
    this.ffB = m.f32(T * inter);
    this.shared = m.f32(T * H);
    this.router = m.f32(T * E);
    this.route = m.i32(T * K);
    this.routeW = m.f32(T * K);
    const lutSize = q ? (H / q.vecDim) * q.stages * q.entries : 0;
    this.lut = m.f32(2 * T * lutSize);
    this.lutDown = m.f32(q ? (cfg.moe.inter / q.vecDim) * q.stages * q.entries : 0);
    this.expertOut = m.f32(T * K * H);
    this.logits = m.f32(cfg.vocab);
    this.lookIds = m.i32(64);
    this.lookW = m.f32(64);
    const per = q ? q.stages * q.vecDim * q.entries : 0;
    this.books = [m.f32(per), m.f32(per), m.f32(per)];
  }
}
