/**
 * Kimi's routed experts in a checkpoint: `block_sparse_moe.experts.N.w1|w3|w2` (Mixtral's names:
 * w1 the gate, w3 the up and w2 the down projection).
 */
export function kimiExpertTensor(layer: number, expert: number, kind: 0 | 1 | 2): string {
  return `model.layers.${layer}.block_sparse_moe.experts.${expert}.${['w1', 'w3', 'w2'][kind]}.weight`;
}

/** The layer whose routed experts a tensor holds, or undefined for any other tensor (a prefix before `model.` is allowed). */
export function kimiExpertLayerOf(name: string): number | undefined {
  const m = /(?:^|\.)layers\.(\d+)\.block_sparse_moe\.experts\.\d+\./.exec(name);
  return m ? Number(m[1]) : undefined;
}
