import type { MoeNames } from '../transformer/layout.js';

/**
 * Mixtral's MoE tensors: the router `block_sparse_moe.gate` and `block_sparse_moe.experts.N.w1`
 * (the gate, SiLU side), `w3` (the up) and `w2` (the down projection).
 */
export const MIXTRAL_NAMES: MoeNames = {
  router: 'block_sparse_moe.gate.weight',
  expert: (layer, e, kind) => `model.layers.${layer}.block_sparse_moe.experts.${e}.${['w1', 'w3', 'w2'][kind]}.weight`,
};

/** The layer whose routed experts a tensor holds, or undefined for any other tensor. */
export function mixtralExpertLayerOf(name: string): number | undefined {
  const m = /(?:^|\.)layers\.(\d+)\.block_sparse_moe\.experts\.\d+\./.exec(name);
  return m ? Number(m[1]) : undefined;
}
