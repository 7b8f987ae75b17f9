/**
 * Distances between next-token distributions, in float64: the measures quality is reported in
 * (llama.cpp's --kl-divergence protocol — mean KL, its 99th percentile, same top-1 and both
 * perplexities).
 */
import { logSumExp } from '../util/log-sum-exp.js';

/** KL(P_ref ‖ P_q) in nats for one position, from the two rows of logits. */
export function klDivergence(ref: ArrayLike<number>, q: ArrayLike<number>): number {
  const lr = logSumExp(ref);
  const lq = logSumExp(q);
  let kl = 0;
  for (let i = 0; i < ref.length; i++) {
    const a = ref[i] - lr;
    kl += Math.exp(a) * (a - (q[i] - lq));
  }
  return Math.max(0, kl);
}

/** Index of the largest logit (the lowest index on ties). */
export function argmax(x: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < x.length; i++) if (x[i] > x[best]) best = i;
  return best;
}

/** −log P(token) under the row's distribution. */
export function nll(logits: ArrayLike<number>, token: number): number {
  return logSumExp(logits) - logits[token];
}

/** The p-th percentile (0..100) of values, by linear interpolation between order statistics. */
export function percentile(values: number[], p: number): number {
  if (!values.length) return NaN;
  const s = [...values].sort((a, b) => a - b);
  const at = (p / 100) * (s.length - 1);
  const lo = Math.floor(at);
  const hi = Math.min(s.length - 1, lo + 1);
  return s[lo] + (s[hi] - s[lo]) * (at - lo);
}
