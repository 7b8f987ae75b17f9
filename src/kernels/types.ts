import type { Arena } from '../memory/arena.js';
import type { Tensor } from '../container/tensor.js';

/**
 * Every numeric operation of the forward pass, behind one interface so implementations can be
 * swapped: the plain TypeScript reference, and the WebAssembly SIMD kernels with a worker pool.
 *
 * Contract for all of them: each output element is computed by arithmetic that depends only on
 * its own inputs, in a fixed order — never on how many rows, tokens or threads share the call — so
 * a batched call is bit-identical to the same rows one at a time, whatever the thread count.
 * Buffers are Float32Array views; the WebAssembly implementation requires all buffers of one call
 * to live in the same arena as its weights.
 */
export interface Kernels {
  readonly name: string;

  /** How the Q8G and Q4G products of `matmul` take their activations (fixed when the kernels are made). */
  readonly activations: Activations;
  /** An arena made after the kernels (the elastic cache growing back), and one about to be dropped. */
  attach?(arena: Arena): void;
  detach?(arena: Arena): void;

  /**
   * Y[t·rows + i] = W[i] · X[t·cols …], for t < T (T = 1: a matrix-vector product). Q8G and Q4G
   * rows see X through `activations`; F32 and F16 rows see it as it is.
   */
  matmul(w: Tensor, X: Float32Array, Y: Float32Array, T: number): void;

  /**
   * matmul of each w[i] with the same input X into Y[i]: the same values, with Q8G/Q4G matrices of
   * one format and group run as one call (one preparation of X, one dispatch to the pool).
   */
  matmulMany(ws: readonly Tensor[], X: Float32Array, Ys: readonly Float32Array[], T: number): void;

  /** y[j] = Σ_{i<n} c[i] · W[row0 + i][j], for j < cols (a product with transposed rows). */
  matvecT(w: Tensor, c: Float32Array, y: Float32Array, row0: number, n: number): void;

  /** out[outOff…] = w ⊙ x / sqrt(mean(x²) + eps) over n values from x[xOff…]. */
  rmsnorm(x: Float32Array, w: Float32Array, eps: number, out: Float32Array, n: number, xOff?: number, outOff?: number): void;

  /** a ← silu(a) ⊙ b over n values. */
  siluMul(a: Float32Array, b: Float32Array, n: number): void;

  /** a ← SiTU-GLU(a, b) = β·tanh(a/β)·σ(a) · β_l·tanh(b/β_l) over n values (b as it is when β_l is 0). */
  situMul(a: Float32Array, b: Float32Array, n: number, beta: number, linearBeta: number): void;

  /** a ← a ⊙ σ(g) over n values (an output gate). */
  sigmoidMul(a: Float32Array, g: Float32Array, n: number): void;

  /**
   * An attention-residual mix of H-wide vectors: candidates v_0..v_{n−1} (`blocks`, [n][H]) then
   * v_n = `cur`; s_i = (w · v_i) / sqrt(mean(v_i²) + eps); out = Σ softmax(s)_i v_i, in order.
   * `out` must be a buffer of its own.
   */
  attnRes(blocks: Float32Array, n: number, cur: Float32Array, w: Float32Array, H: number, eps: number, out: Float32Array): void;

  /**
   * Bidirectional softmax attention over L positions, every head (the vision tower's): qkv is
   * packed [L][3][heads][hd] (queries, keys, values), out [L][heads][hd];
   * out_i = Σ_j softmax_j(scale · q_i·k_j) v_j, for the query rows [from, to) (default all).
   */
  attendAll(qkv: Float32Array, L: number, heads: number, hd: number, scale: number, out: Float32Array, from?: number, to?: number): void;

  /** a ← gelu(a) over n values: the tanh approximation, or with `exact` 0.5·z·(1 + erf(z/√2)). */
  gelu(a: Float32Array, n: number, exact: boolean): void;

  /** x ← x + y over n values. */
  add(x: Float32Array, y: Float32Array, n: number): void;

  /**
   * Residual-VQ lookup table for one input vector x[n]:
   * lut[(v·stages + s)·entries + e] = Σ_d x[v·vecDim + d] · booksT[s][d][e]
   * (`booksT` holds the matrix kind's stage books transposed: [stage][dim][entry]).
   */
  vqLut(booksT: Float32Array, stages: number, entries: number, vecDim: number, x: Float32Array, n: number, lut: Float32Array): void;

  /**
   * y[r] = scale[r] · Σ_v Σ_s lut[(v·stages + s)·entries + idx(r, v, s)] for r < rows, reading the
   * blocked indices at rec[idxOff…] and the f16 row scales at rec[scaleOff…].
   */
  vqApply(rec: Uint8Array, idxOff: number, scaleOff: number, rows: number, cols: number, g: VqGeometry, lut: Float32Array, y: Float32Array): void;

  /** vqLut of one input x[n] with two books (an expert's gate and up kinds) into lutA and lutB, as one call. */
  vqLutPair(booksA: Float32Array, booksB: Float32Array, stages: number, entries: number, vecDim: number, x: Float32Array, n: number, lutA: Float32Array, lutB: Float32Array): void;

  /**
   * vqApply of two matrices of one record with the same shape (an expert's gate and up), each with
   * its own table and output, as one call: the same values as two vqApply calls.
   */
  vqApplyPair(rec: Uint8Array, a: VqMatrix, b: VqMatrix, rows: number, cols: number, g: VqGeometry): void;

  /**
   * Whole routed experts of one layer, each applied to one token whose gate and up tables are built:
   * per job, gate and up (vqApplyPair), the gated activation, the down table (vqLut) and down
   * (vqApply) into the job's `y` [width], with the same values as those calls. With threads, the
   * jobs are split between them (each expert whole on one thread: one dispatch for them all, not
   * three per expert). Every record and table must be in one arena (`y` may be anywhere). Returns
   * false, having computed nothing, when that arena has no room for the threads' working rows.
   */
  vqExperts(jobs: readonly VqExpertJob[], shape: VqExpertShape): boolean;

  /** One token of KDA preparation, in place: see KdaPrep. */
  kdaPrep(p: KdaPrep): void;

  /**
   * One gated delta-rule step for H heads of dimension D, in place on S [H][D][D] (key × value):
   * S ← diag(exp(g))·S; u = β(v − Sᵀk); S ← S + k⊗u; o = Sᵀq.
   */
  kdaStep(H: number, D: number, q: Float32Array, k: Float32Array, v: Float32Array, g: Float32Array, beta: Float32Array, S: Float32Array, o: Float32Array): void;

  /** Per head: o ← RMSNorm(o) · w · sigmoid(gate). */
  kdaOut(o: Float32Array, gate: Float32Array, w: Float32Array, H: number, D: number, eps: number): void;

  /**
   * MLA for one query over `n` cached latents, every head, with kv_b absorbed: see MlaHeads.
   */
  mlaHeads(p: MlaHeads): void;

  /** Causal attention of one token over a key/value cache, every head: see Attend. */
  attend(p: Attend): void;

  /**
   * Router for one token: logits → sigmoid scores (in place); top k of score + bias (ties to the
   * lower id) into ids; their unbiased scores, renormalised if asked, times scale, into w.
   */
  moeRoute(logits: Float32Array, bias: Float32Array, E: number, K: number, ids: Int32Array, w: Float32Array, renorm: boolean, scale: number): void;

  /** out[i] = Σ_j w[j]·eo[j·H + i] (j in order) + shared[i]. */
  moeCombine(out: Float32Array, eo: Float32Array, w: Float32Array, K: number, H: number, shared?: Float32Array): void;
}

/**
 * The two forms Q8G and Q4G products take their activations in, each group of G values scaled by
 * its largest magnitude m:
 * - 'exact': 30-bit integers round(x·(2^30 − 1)/m), split into two int16 halves: the error is below
 *   2^-31·m, as accurate as f32 arithmetic; two 16-bit multiplies per weight.
 * - 'a16': int16 round(x·32767/m) with one f32 factor per group: the error is up to 2^-16·m (an
 *   8-bit activation's is 2^-8·m); one multiply per weight, half the activation bytes.
 * Only `matmul` depends on it: F32/F16 products, VQ experts, KDA and MLA's absorbed attention
 * (whose kv_b products stay exact) are the same in both.
 */
export type Activations = 'exact' | 'a16';
export const ACTIVATIONS: readonly Activations[] = ['exact', 'a16'];

/** One matrix of an expert record for vqApplyPair: its indices and f16 row scales in the record, its table, its output. */
export interface VqMatrix {
  idxOff: number;
  scaleOff: number;
  lut: Float32Array;
  y: Float32Array;
}

/** One job of vqExperts: an expert record, one token's gate and up tables for it, and where its output row goes. */
export interface VqExpertJob {
  rec: Uint8Array;
  lutGate: Float32Array;
  lutUp: Float32Array;
  /** [width] */
  y: Float32Array;
}

/** What every job of one vqExperts call shares: the record layout, the widths, the down books and the activation. */
export interface VqExpertShape {
  gateOff: number;
  upOff: number;
  downOff: number;
  /** The f16 row scales: gate's, then up's at +2·inter, down's at +4·inter. */
  scaleOff: number;
  /** Rows of gate and up, columns of down. */
  inter: number;
  /** Columns of gate and up (the expert's input), rows of down. */
  width: number;
  g: VqGeometry;
  /** The down kind's stage books transposed, [stage][dim][entry], in the records' arena. */
  booksDown: Float32Array;
  act: GatedActivation;
  /**
   * The experts one decode step computes: the working rows hold that many outputs (what the memory
   * plan sets aside), and a call with more jobs (a batched step, a prefill chunk) takes them that
   * many at a time.
   */
  topK: number;
}

/** SiLU(g)·u, or SiTU-GLU with its two βs. */
export type GatedActivation = { kind: 'silu' } | { kind: 'situ'; beta: number; linearBeta: number };

export interface VqGeometry {
  stages: number;
  entries: number;
  vecDim: number;
  indexBlock: number;
}

/**
 * KDA preparation for one token, in place on q, k, v [C = H·D], g [C] and beta [H]:
 * causal depthwise conv over the history ring (K−1 past raw inputs per channel, oldest first; the
 * ring advances) then SiLU, for q, k and v; per-head L2 norm of q and k (eps inside the root), q
 * times D^-1/2; g ← −exp(A_log[h]) · softplus(g + dt_bias) — or, with a lower bound lb (K3's
 * bounded gate), g ← lb · sigmoid(exp(A_log[h]) · (g + dt_bias)); beta ← sigmoid(beta).
 */
export interface KdaPrep {
  q: Float32Array;
  k: Float32Array;
  v: Float32Array;
  taps: [Float32Array, Float32Array, Float32Array];
  /** [3][C][K−1] */
  ring: Float32Array;
  C: number;
  K: number;
  g: Float32Array;
  dtBias: Float32Array;
  aLog: Float32Array;
  beta: Float32Array;
  H: number;
  D: number;
  l2eps: number;
  /** The bounded decay gate's lower bound (below 0); absent: the softplus gate. */
  lowerBound?: number;
}

/**
 * For every head h, with kv_b = kvB (rows head-major: nope rows of W_UK, then vh rows of W_UV):
 * qLat[h] = W_UK[h]ᵀ q[h][0..nope); score_s = (qLat[h]·c_s + q[h][nope..]·k_pe_s) · scale;
 * ctx[h] = Σ_s softmax(score)_s c_s; o[h] = W_UV[h] · ctx[h].
 * The cache holds n latents of width latd = kvl + rope (normalised c, then k_pe).
 */
/**
 * Causal softmax attention of one token's query heads over a key/value cache (Kernels.attend):
 * positions lo..hi, position j in slot j mod slots of `k` and `v` ([slots][kvHeads][headDim]),
 * query head h reading kv head ⌊h / (heads / kvHeads)⌋; a sink logit per head (gpt-oss) joins the
 * softmax's normaliser only.
 */
export interface Attend {
  /** [heads][headDim], already rotated. */
  q: Float32Array;
  k: Float32Array;
  v: Float32Array;
  slots: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  lo: number;
  hi: number;
  scale: number;
  /** [heads] */
  sinks?: Float32Array;
  /** Scratch: [heads][hi − lo + 1]. */
  scores: Float32Array;
  /** [heads][headDim] */
  out: Float32Array;
}

export interface MlaHeads {
  kvB: Tensor;
  q: Float32Array;
  heads: number;
  nope: number;
  rope: number;
  vh: number;
  kvl: number;
  cache: Float32Array;
  n: number;
  scale: number;
  /** Scratch: [heads][kvl], [heads][n], [heads][kvl]. */
  qLat: Float32Array;
  scores: Float32Array;
  ctx: Float32Array;
  o: Float32Array;
}
