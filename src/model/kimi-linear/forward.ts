import type { Container } from '../../container/open.js';
import type { Kernels, VqGeometry } from '../../kernels/types.js';
import type { ExpertSource } from '../../runtime/experts.js';
import { WasteError } from '../../util/errors.js';
import type { KimiLinearConfig } from './config.js';
import { KimiLinearState } from './state.js';
import type { FfnWeights, KdaWeights, KimiLinearWeights, MlaWeights, MoeWeights } from './weights.js';

/** L2-norm epsilon inside the square root (fla's l2norm). */
const L2_EPS = 1e-6;
/** softplus(z) switches to the identity above this (fla / PyTorch threshold). */
const SOFTPLUS_THRESHOLD = 20;

const sigmoid = (z: number): number => 1 / (1 + Math.exp(-z));
const silu = (z: number): number => z / (1 + Math.exp(-z));
const softplus = (z: number): number => (z > SOFTPLUS_THRESHOLD ? z : Math.log1p(Math.exp(z)));

export interface ForwardOptions {
  /** Return the logits of every position, row after row, instead of only the last. */
  allLogits?: boolean;
}

/**
 * The Kimi-Linear forward pass over a chunk of tokens at a time. Prefill and decode are the same
 * code: a chunk of T tokens runs every projection as one T-row product and walks the recurrences
 * token by token, and since every kernel computes each output element independently of the batch,
 * prefill(T) followed by a step is bit-identical to T+1 single steps.
 */
export class KimiLinearModel {
  readonly cfg: KimiLinearConfig;
  readonly chunk: number;
  private readonly geom?: VqGeometry;
  private s: Scratch;

  constructor(
    readonly container: Container,
    readonly weights: KimiLinearWeights,
    readonly kernels: Kernels,
    readonly experts: ExpertSource,
    chunk = 16,
  ) {
    this.cfg = container.config;
    this.chunk = chunk;
    const q = container.quant;
    if (q) this.geom = { stages: q.stages, entries: q.entries, vecDim: q.vecDim, indexBlock: q.indexBlock };
    this.s = new Scratch(this.cfg, chunk, q?.stages ?? 0, q?.entries ?? 0, q?.vecDim ?? 1);
  }

  newState(maxContext: number): KimiLinearState {
    return new KimiLinearState(this.cfg, maxContext);
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
    const x = this.s.x;
    for (let c0 = 0; c0 < n; c0 += this.chunk) {
      const T = Math.min(this.chunk, n - c0);
      for (let t = 0; t < T; t++)
        this.container.trunk.readRow(this.weights.embed, tokens[c0 + t], x.subarray(t * H, (t + 1) * H));
      for (let L = 0; L < this.cfg.layers; L++) await this.layer(state, L, T);
      state.pos += T;
      for (let t = 0; t < T; t++) {
        const pos = c0 + t;
        if (opts.allLogits) this.head(t, logits.subarray(pos * vocab, (pos + 1) * vocab));
        else if (pos === n - 1) this.head(t, logits);
      }
    }
    return logits;
  }

  private head(t: number, out: Float32Array): void {
    const H = this.cfg.hidden;
    const { x, norm } = this.s;
    this.kernels.rmsnorm(x, this.weights.finalNorm, this.cfg.eps, norm, H, t * H, 0);
    this.kernels.matvec(this.weights.lmHead, norm.subarray(0, H), out);
  }

  private async layer(state: KimiLinearState, L: number, T: number): Promise<void> {
    const { hidden: H, eps } = this.cfg;
    const w = this.weights.layers[L];
    const { x, norm, out } = this.s;
    const k = this.kernels;
    for (let t = 0; t < T; t++) k.rmsnorm(x, w.inputNorm, eps, norm, H, t * H, t * H);
    if (w.attn.kind === 'kda') this.kda(state, L, w.attn, T);
    else this.mla(state, L, w.attn, T);
    for (let i = 0; i < T * H; i++) x[i] += out[i];
    for (let t = 0; t < T; t++) k.rmsnorm(x, w.postNorm, eps, norm, H, t * H, t * H);
    if (w.ffn.kind === 'dense') this.ffn(w.ffn, T, out);
    else await this.moe(L, w.ffn, T);
    for (let i = 0; i < T * H; i++) x[i] += out[i];
  }

  /** Kimi Delta Attention: short convs, decay gate, β, L2-normalised q/k, the delta rule, gated norm. */
  private kda(state: KimiLinearState, L: number, w: KdaWeights, T: number): void {
    const { heads: NH, headDim: D, convKernel: K } = this.cfg.kda;
    const C = NH * D;
    const k = this.kernels;
    const s = this.s;
    const st = state.kda[L]!;
    k.matmul(w.qProj, s.norm, s.q, T);
    k.matmul(w.kProj, s.norm, s.k, T);
    k.matmul(w.vProj, s.norm, s.v, T);
    k.matmul(w.fA, s.norm, s.low, T);
    k.matmul(w.fB, s.low, s.g, T);
    k.matmul(w.bProj, s.norm, s.beta, T);
    k.matmul(w.gA, s.norm, s.low, T);
    k.matmul(w.gB, s.low, s.gate, T);
    const R = K - 1;
    const qScale = 1 / Math.sqrt(D);
    for (let t = 0; t < T; t++) {
      const q = s.q.subarray(t * C, (t + 1) * C);
      const kk = s.k.subarray(t * C, (t + 1) * C);
      const v = s.v.subarray(t * C, (t + 1) * C);
      // causal depthwise conv over the last K inputs (history oldest first, the current token last), then SiLU
      const bufs = [q, kk, v];
      for (let which = 0; which < 3; which++) {
        const xv = bufs[which];
        const tap = w.conv[which];
        const ring = st.conv.subarray(which * C * R, (which + 1) * C * R);
        for (let c = 0; c < C; c++) {
          const r0 = c * R;
          const w0 = c * K;
          let acc = 0;
          for (let j = 0; j < R; j++) acc += ring[r0 + j] * tap[w0 + j];
          const cur = xv[c];
          acc += cur * tap[w0 + R];
          for (let j = 0; j + 1 < R; j++) ring[r0 + j] = ring[r0 + j + 1];
          if (R > 0) ring[r0 + R - 1] = cur;
          xv[c] = silu(Math.fround(acc));
        }
      }
      // per-head L2 normalisation of q and k; q also scaled by D^-1/2
      for (let h = 0; h < NH; h++) {
        let sq = 0;
        let sk = 0;
        for (let j = 0; j < D; j++) {
          sq += q[h * D + j] * q[h * D + j];
          sk += kk[h * D + j] * kk[h * D + j];
        }
        const rq = qScale / Math.sqrt(sq + L2_EPS);
        const rk = 1 / Math.sqrt(sk + L2_EPS);
        for (let j = 0; j < D; j++) {
          q[h * D + j] *= rq;
          kk[h * D + j] *= rk;
        }
      }
      // decay gate in log space: g = −exp(A_log[h]) · softplus(f + dt_bias)
      const g = s.g.subarray(t * C, (t + 1) * C);
      for (let h = 0; h < NH; h++) {
        const a = Math.exp(w.aLog[h]);
        for (let j = 0; j < D; j++) {
          const i = h * D + j;
          g[i] = -a * softplus(g[i] + w.dtBias[i]);
        }
      }
      const beta = s.beta.subarray(t * NH, (t + 1) * NH);
      for (let h = 0; h < NH; h++) beta[h] = sigmoid(beta[h]);
      const o = s.o.subarray(t * C, (t + 1) * C);
      k.kdaStep(NH, D, q, kk, v, g, beta, st.S, o);
      // per-head RMSNorm (weight shared by heads) times a sigmoid output gate
      const gate = s.gate.subarray(t * C, (t + 1) * C);
      for (let h = 0; h < NH; h++) {
        let ss = 0;
        for (let j = 0; j < D; j++) ss += o[h * D + j] * o[h * D + j];
        const r = 1 / Math.sqrt(ss / D + this.cfg.eps);
        for (let j = 0; j < D; j++) o[h * D + j] = o[h * D + j] * r * w.oNorm[j] * sigmoid(gate[h * D + j]);
      }
    }
    k.matmul(w.oProj, s.o, s.out, T);
  }

  /** Multi-head latent attention without RoPE, caching only the normalised latent and k_pe. */
  private mla(state: KimiLinearState, L: number, w: MlaWeights, T: number): void {
    const { heads: NH, kvLoraRank: kvl, qkNope: nope, qkRope: rope, vHead: vh } = this.cfg.mla;
    const qd = nope + rope;
    const latd = kvl + rope;
    const k = this.kernels;
    const s = this.s;
    const cache = state.mla[L]!.cache;
    const scale = 1 / Math.sqrt(qd);
    s.reserveScores(state.pos + T);
    k.matmul(w.qProj, s.norm, s.q, T);
    k.matmul(w.kvA, s.norm, s.kv, T);
    for (let t = 0; t < T; t++) {
      const pos = state.pos + t;
      const ckv = s.kv.subarray(t * latd, (t + 1) * latd);
      // The C engine and vLLM normalise the latent with the model's rms_norm_eps; HF's default is 1e-6.
      k.rmsnorm(ckv, w.kvNorm, this.cfg.eps, cache, kvl, 0, pos * latd);
      cache.set(ckv.subarray(kvl, latd), pos * latd + kvl);
      const q = s.q.subarray(t * NH * qd, (t + 1) * NH * qd);
      const o = s.o.subarray(t * NH * vh, (t + 1) * NH * vh);
      for (let h = 0; h < NH; h++) {
        const rows = h * (nope + vh);
        // absorb W_UK into the query: qLat = W_UK[h]ᵀ · q_nope
        k.matvecT(w.kvB, q.subarray(h * qd, h * qd + nope), s.qLat, rows, nope);
        k.attendLatent(s.qLat, q, h * qd + nope, cache, pos + 1, latd, kvl, rope, scale, s.scores, s.ctx);
        // and W_UV into the output: o = W_UV[h] · ctx
        k.matvec(w.kvB, s.ctx, o.subarray(h * vh, (h + 1) * vh), rows + nope, vh);
      }
    }
    k.matmul(w.oProj, s.o, s.out, T);
  }

  /** SwiGLU feed-forward, into `dst` [T][hidden]. */
  private ffn(w: FfnWeights, T: number, dst: Float32Array): void {
    const k = this.kernels;
    const s = this.s;
    const I = w.gate.rows;
    k.matmul(w.gate, s.norm, s.ffA, T);
    k.matmul(w.up, s.norm, s.ffB, T);
    for (let i = 0; i < T * I; i++) s.ffA[i] = silu(s.ffA[i]) * s.ffB[i];
    k.matmul(w.down, s.ffA, dst, T);
  }

  /**
   * Sigmoid router with a selection-only bias, top-k, renormalised and scaled weights, routed
   * experts through lookup tables (each distinct expert read once per chunk), plus shared experts.
   */
  private async moe(L: number, w: MoeWeights, T: number): Promise<void> {
    const { hidden: H } = this.cfg;
    const { experts: E, topK: K, inter: I, renormalize, routedScale } = this.cfg.moe;
    const k = this.kernels;
    const s = this.s;
    const geom = this.geom!;
    const books = this.container.codebooks!.values;
    const bank = this.container.banks.get(L)!;
    const lay = bank.layout;
    const base = bank.codebookBase;
    k.matmul(w.router, s.norm, s.router, T);

    const ids = s.route;
    const wts = s.routeW;
    for (let t = 0; t < T; t++) {
      const logits = s.router.subarray(t * E, (t + 1) * E);
      for (let e = 0; e < E; e++) logits[e] = sigmoid(logits[e]);
      // top-k by biased score; ties go to the lower expert id
      for (let j = 0; j < K; j++) {
        let best = -1;
        let bestV = -Infinity;
        for (let e = 0; e < E; e++) {
          let taken = false;
          for (let p = 0; p < j; p++) if (ids[t * K + p] === e) taken = true;
          if (taken) continue;
          const v = logits[e] + w.bias[e];
          if (v > bestV || best < 0) {
            bestV = v;
            best = e;
          }
        }
        ids[t * K + j] = best;
        wts[t * K + j] = logits[best]; // combine weights use the unbiased score
      }
      if (renormalize && K > 1) {
        let sum = 0;
        for (let j = 0; j < K; j++) sum += wts[t * K + j];
        for (let j = 0; j < K; j++) wts[t * K + j] /= sum + 1e-20;
      }
      for (let j = 0; j < K; j++) wts[t * K + j] *= routedScale;
    }

    // Distinct experts in ascending id order: each is read once and applied to all its tokens.
    const used = new Set<number>();
    for (let i = 0; i < T * K; i++) used.add(ids[i]);
    const order = [...used].sort((a, b) => a - b);
    const lutSize = (H / geom.vecDim) * geom.stages * geom.entries;
    const built = new Uint8Array(T);
    for (const e of order) {
      const rec = await this.experts.get(L, e);
      for (let t = 0; t < T; t++) {
        for (let j = 0; j < K; j++) {
          if (ids[t * K + j] !== e) continue;
          const lutG = s.lut.subarray(2 * t * lutSize, (2 * t + 1) * lutSize);
          const lutU = s.lut.subarray((2 * t + 1) * lutSize, (2 * t + 2) * lutSize);
          if (!built[t]) {
            // gate/up tables depend on the token, not the expert: built once, shared by its experts
            const xin = s.norm.subarray(t * H, (t + 1) * H);
            k.vqLut(books, base, geom.stages, geom.entries, geom.vecDim, xin, H, lutG);
            k.vqLut(books, base + geom.stages, geom.stages, geom.entries, geom.vecDim, xin, H, lutU);
            built[t] = 1;
          }
          const sc = lay.scaleOff;
          k.vqApply(rec, lay.gateOff, sc, I, H, geom, lutG, s.ffA);
          k.vqApply(rec, lay.upOff, sc + 2 * I, I, H, geom, lutU, s.ffB);
          for (let i = 0; i < I; i++) s.ffA[i] = silu(s.ffA[i]) * s.ffB[i];
          k.vqLut(books, base + 2 * geom.stages, geom.stages, geom.entries, geom.vecDim, s.ffA, I, s.lutDown);
          k.vqApply(rec, lay.downOff, sc + 4 * I, H, I, geom, s.lutDown, s.expertOut.subarray((t * K + j) * H, (t * K + j + 1) * H));
        }
      }
    }

    // Weighted sum in selection order, then the shared experts (unweighted).
    if (w.shared) this.ffn(w.shared, T, s.shared);
    for (let t = 0; t < T; t++) {
      for (let i = 0; i < H; i++) {
        let acc = 0;
        for (let j = 0; j < K; j++) acc += wts[t * K + j] * s.expertOut[(t * K + j) * H + i];
        s.out[t * H + i] = w.shared ? Math.fround(acc) + s.shared[t * H + i] : acc;
      }
    }
  }
}

/** Working buffers for one chunk, sized once from the config. */
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

  constructor(cfg: KimiLinearConfig, T: number, stages: number, entries: number, vecDim: number) {
    const H = cfg.hidden;
    const C = cfg.kda.heads * cfg.kda.headDim;
    const m = cfg.mla;
    const wide = Math.max(C, m.heads * (m.qkNope + m.qkRope), m.heads * m.vHead);
    const inter = Math.max(cfg.denseInter, cfg.moe.inter * Math.max(1, cfg.moe.shared));
    this.x = new Float32Array(T * H);
    this.norm = new Float32Array(T * H);
    this.out = new Float32Array(T * H);
    this.q = new Float32Array(T * wide);
    this.k = new Float32Array(T * C);
    this.v = new Float32Array(T * C);
    this.g = new Float32Array(T * C);
    this.gate = new Float32Array(T * C);
    this.low = new Float32Array(T * cfg.kda.headDim);
    this.beta = new Float32Array(T * cfg.kda.heads);
    this.o = new Float32Array(T * wide);
    this.kv = new Float32Array(T * (m.kvLoraRank + m.qkRope));
    this.qLat = new Float32Array(m.kvLoraRank);
    this.scores = new Float32Array(0);
    this.ctx = new Float32Array(m.kvLoraRank);
    this.ffA = new Float32Array(T * inter);
    this.ffB = new Float32Array(T * inter);
    this.shared = new Float32Array(T * H);
    const E = cfg.moe.experts;
    const K = cfg.moe.topK;
    this.router = new Float32Array(T * E);
    this.route = new Int32Array(T * K);
    this.routeW = new Float32Array(T * K);
    const lutSize = stages && vecDim ? (H / vecDim) * stages * entries : 0;
    this.lut = new Float32Array(2 * T * lutSize);
    this.lutDown = new Float32Array(stages && vecDim ? (cfg.moe.inter / vecDim) * stages * entries : 0);
    this.expertOut = new Float32Array(T * K * H);
  }

  /** Attention scores for one query over `n` positions. */
  reserveScores(n: number): void {
    if (this.scores.length < n) this.scores = new Float32Array(Math.max(n, 2 * this.scores.length));
  }
}
