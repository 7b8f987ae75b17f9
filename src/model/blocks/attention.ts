import type { Tensor } from '../../container/tensor.js';
import type { Kernels } from '../../kernels/types.js';
import type { Rope } from './rope.js';

/**
 * Softmax attention over a key/value cache, as the GQA families compute it (Qwen3-MoE, Mixtral,
 * OLMoE, GLM-4.5, gpt-oss): q, k, v projections (with biases where the family has them), q/k
 * RMSNorm per head (Qwen3, GLM) or over the whole projection (OLMoE), OLMoE's clip, rotary
 * embeddings on the first `rope.dims` of each head, the new keys and values written to the cache,
 * each token's heads attending over its window (gpt-oss's sinks in the normaliser), and o_proj.
 */
export interface AttentionShape {
  heads: number;
  kvHeads: number;
  headDim: number;
  /** q/k RMSNorm: none, per head (weights [headDim]), or over the whole projection (weights [heads·headDim], [kvHeads·headDim]). */
  qkNorm: 'none' | 'head' | 'whole';
  /** Clamp q, k and v to ±clip after the norms (OLMoE's clip_qkv); 0 = none. */
  clip: number;
  /** Score scale (1/√headDim unless the family says otherwise). */
  scale: number;
  /** The q/k norms' epsilon (the model's rms_norm_eps). */
  eps: number;
}

export interface AttentionWeights {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  o: Tensor;
  qBias?: Float32Array;
  kBias?: Float32Array;
  vBias?: Float32Array;
  oBias?: Float32Array;
  qNorm?: Float32Array;
  kNorm?: Float32Array;
  /** [heads] one logit per head that joins each softmax's normaliser (gpt-oss). */
  sinks?: Float32Array;
  /** q carries an output gate (Qwen3-Next): 2·heads·headDim rows, per head [query | gate]; o ← o·σ(gate) before o_proj. */
  outputGate?: boolean;
}

/** One sequence's cache for one layer: keys and values [slots][kvHeads][headDim], position j in slot j mod slots. */
export interface KvCache {
  k: Float32Array;
  v: Float32Array;
  slots: number;
}

/** The working buffers attention uses ([T][…] rows of the chunk in flight). */
export interface AttentionScratch {
  norm: Float32Array;
  out: Float32Array;
  /** [T][heads][headDim] */
  q: Float32Array;
  /** [T][kvHeads][headDim] */
  k: Float32Array;
  v: Float32Array;
  /** [T][heads][headDim] */
  o: Float32Array;
  /** [heads][context] */
  scores: Float32Array;
  /** [T][heads][headDim] the output gate (only with `outputGate`; then q holds [T][2·heads·headDim]). */
  gate?: Float32Array;
}

/**
 * Attention of the T normed tokens in `s.norm` (output in `s.out`): row t at position `pos(t)` of
 * cache `cache(t)` (one sequence's for a prefill chunk, each row's own in a batched step), over
 * the last `window` positions (0: all of them).
 */
export function attention(
  k: Kernels,
  c: AttentionShape,
  rope: Rope,
  window: number,
  w: AttentionWeights,
  T: number,
  row: (t: number) => { cache: KvCache; pos: number },
  s: AttentionScratch,
): void {
  const { heads: H, kvHeads: KV, headDim: D } = c;
  const qw = H * D;
  const kw = KV * D;
  k.matmulMany([w.q, w.k, w.v], s.norm, [s.q, s.k, s.v], T);
  const qr = w.q.rows;
  if (w.qBias) for (let t = 0; t < T; t++) k.add(s.q.subarray(t * qr, (t + 1) * qr), w.qBias, qr);
  if (w.outputGate) ungate(s.q, s.gate!, T, H, D);
  if (w.kBias) for (let t = 0; t < T; t++) k.add(s.k.subarray(t * kw, (t + 1) * kw), w.kBias, kw);
  if (w.vBias) for (let t = 0; t < T; t++) k.add(s.v.subarray(t * kw, (t + 1) * kw), w.vBias, kw);
  if (c.qkNorm === 'whole')
    for (let t = 0; t < T; t++) {
      k.rmsnorm(s.q, w.qNorm!, c.eps, s.q, qw, t * qw, t * qw);
      k.rmsnorm(s.k, w.kNorm!, c.eps, s.k, kw, t * kw, t * kw);
    }
  else if (c.qkNorm === 'head') {
    for (let i = 0; i < T * H; i++) k.rmsnorm(s.q, w.qNorm!, c.eps, s.q, D, i * D, i * D);
    for (let i = 0; i < T * KV; i++) k.rmsnorm(s.k, w.kNorm!, c.eps, s.k, D, i * D, i * D);
  }
  if (c.clip) for (const a of [s.q.subarray(0, T * qw), s.k.subarray(0, T * kw), s.v.subarray(0, T * kw)]) for (let i = 0; i < a.length; i++) a[i] = Math.min(c.clip, Math.max(-c.clip, a[i]));
  // row by row, each writes its key and value and then attends: a prefill chunk's later rows see
  // its earlier ones, and a sliding window's ring of `window` slots is overwritten only where no
  // later row looks
  for (let t = 0; t < T; t++) {
    const { cache, pos } = row(t);
    rope.apply(s.q, t * qw, H, D, pos);
    rope.apply(s.k, t * kw, KV, D, pos);
    const slot = (pos % cache.slots) * kw;
    cache.k.set(s.k.subarray(t * kw, (t + 1) * kw), slot);
    cache.v.set(s.v.subarray(t * kw, (t + 1) * kw), slot);
    const lo = window ? Math.max(0, pos - window + 1) : 0;
    k.attend({ q: s.q.subarray(t * qw, (t + 1) * qw), k: cache.k, v: cache.v, slots: cache.slots, heads: H, kvHeads: KV, headDim: D, lo, hi: pos, scale: c.scale, sinks: w.sinks, scores: s.scores, out: s.o.subarray(t * qw, (t + 1) * qw) });
  }
  if (w.outputGate) k.sigmoidMul(s.o, s.gate!, T * qw);
  k.matmul(w.o, s.o, s.out, T);
  if (w.oBias) for (let t = 0; t < T; t++) k.add(s.out.subarray(t * w.o.rows, (t + 1) * w.o.rows), w.oBias, w.o.rows);
}

/** q_proj's [T][heads][query | gate] split in place: the queries packed to [T][heads][headDim] in q, the gates into `gate`. */
function ungate(q: Float32Array, gate: Float32Array, T: number, H: number, D: number): void {
  // row i's gate is read before any later row's query lands on it (each moves to a lower index)
  for (let i = 0; i < T * H; i++) {
    gate.set(q.subarray(2 * i * D + D, 2 * i * D + 2 * D), i * D);
    q.copyWithin(i * D, 2 * i * D, 2 * i * D + D);
  }
}
