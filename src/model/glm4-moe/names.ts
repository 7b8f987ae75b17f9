import type { MoeNames } from '../transformer/layout.js';

/**
 * GLM-4.5's MoE tensors: the router `mlp.gate.weight` with its selection-only
 * `mlp.gate.e_score_correction_bias`, the routed experts `mlp.experts.N.{gate,up,down}_proj`, the
 * shared expert(s) under `mlp.shared_experts.`.
 */
export const GLM4_MOE_NAMES: MoeNames = {
  router: 'mlp.gate.weight',
  selectionBias: 'mlp.gate.e_score_correction_bias',
  shared: 'mlp.shared_experts.',
  expert: (layer, e, kind) => `model.layers.${layer}.mlp.experts.${e}.${['gate_proj', 'up_proj', 'down_proj'][kind]}.weight`,
};

/** The layer whose routed experts a tensor holds, or undefined for any other tensor. */
export function glm4MoeExpertLayerOf(name: string): number | undefined {
  const m = /(?:^|\.)layers\.(\d+)\.mlp\.experts\.\d+\./.exec(name);
  return m ? Number(m[1]) : undefined;
}
