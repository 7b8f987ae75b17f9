/**
 * How a family's MoE router turns one token's logits into its experts and their weights. Every
 * family's HF definition is one of these:
 * - softmax over every expert, then the top k (Qwen3-MoE, Mixtral, OLMoE, Qwen3-Next), the k
 *   weights renormalised to sum to 1 when `renormalize`;
 * - the top k logits, then a softmax over those k only (gpt-oss);
 * - sigmoid scores, the top k of score + a correction bias that only selects, optionally within
 *   the best `groups.keep` of `groups.count` groups (DeepSeek-V3, GLM-4.5, Kimi), the k unbiased
 *   scores renormalised when `renormalize`.
 * `scale` (routed_scaling_factor) multiplies the weights last. Ties go to the lower expert id.
 */
export interface RouterConfig {
  scoring: 'softmax' | 'softmax-topk' | 'sigmoid';
  topK: number;
  renormalize: boolean;
  scale: number;
  /** Group-limited selection (sigmoid scoring): a group scores the sum of its two best biased scores. */
  groups?: { count: number; keep: number };
}

/**
 * Route one token: `logits` [E] → `ids` [K] in selection order and `w` [K] (f32). `bias` [E] is the
 * selection-only correction (sigmoid scoring). Computed in f64, each weight rounded to f32 once.
 */
export function route(c: RouterConfig, logits: ArrayLike<number>, ids: Int32Array, w: Float32Array, bias?: ArrayLike<number>): void {
  const E = logits.length;
  const K = c.topK;
  const score = new Float64Array(E);
  // what selects: the score (plus the bias), with dropped groups set to 0 as HF masks them
  const pick = new Float64Array(E);
  if (c.scoring === 'softmax') {
    let m = -Infinity;
    for (let e = 0; e < E; e++) m = Math.max(m, logits[e]);
    let z = 0;
    for (let e = 0; e < E; e++) z += score[e] = Math.exp(logits[e] - m);
    for (let e = 0; e < E; e++) pick[e] = score[e] /= z;
  } else if (c.scoring === 'softmax-topk') {
    for (let e = 0; e < E; e++) pick[e] = score[e] = logits[e];
  } else {
    for (let e = 0; e < E; e++) {
      score[e] = 1 / (1 + Math.exp(-logits[e]));
      pick[e] = bias ? score[e] + bias[e] : score[e];
    }
    if (c.groups && c.groups.count > 1) maskGroups(pick, c.groups.count, c.groups.keep);
  }
  const taken = new Uint8Array(E);
  const chosen = new Float64Array(K);
  for (let j = 0; j < K; j++) {
    let best = -1;
    for (let e = 0; e < E; e++) if (!taken[e] && (best < 0 || pick[e] > pick[best])) best = e;
    taken[best] = 1;
    ids[j] = best;
    chosen[j] = score[best];
  }
  if (c.scoring === 'softmax-topk') {
    const m = chosen[0];
    let z = 0;
    for (let j = 0; j < K; j++) z += chosen[j] = Math.exp(chosen[j] - m);
    for (let j = 0; j < K; j++) chosen[j] /= z;
  } else if (c.renormalize) {
    let z = 0;
    for (let j = 0; j < K; j++) z += chosen[j];
    // DeepSeek's and GLM's sigmoid weights add 1e-20 to the sum; a softmax's are never all zero
    if (c.scoring === 'sigmoid') z += 1e-20;
    for (let j = 0; j < K; j++) chosen[j] /= z;
  }
  for (let j = 0; j < K; j++) w[j] = chosen[j] * c.scale;
}

/** Keep the `keep` groups whose two best entries sum highest (ties to the lower group); zero the rest. */
function maskGroups(pick: Float64Array, count: number, keep: number): void {
  const size = pick.length / count;
  const groupScore = new Float64Array(count);
  for (let g = 0; g < count; g++) {
    let a = -Infinity;
    let b = -Infinity;
    for (let i = g * size; i < (g + 1) * size; i++) {
      const v = pick[i];
      if (v > a) (b = a), (a = v);
      else if (v > b) b = v;
    }
    groupScore[g] = size > 1 ? a + b : a;
  }
  const kept = new Uint8Array(count);
  for (let j = 0; j < keep; j++) {
    let best = -1;
    for (let g = 0; g < count; g++) if (!kept[g] && (best < 0 || groupScore[g] > groupScore[best])) best = g;
    kept[best] = 1;
  }
  for (let g = 0; g < count; g++) if (!kept[g]) pick.fill(0, g * size, (g + 1) * size);
}
