import type { MoeNames } from '../transformer/layout.js';

/** OLMoE's MoE tensors: `mlp.gate` (the router) and `mlp.experts.N.{gate,up,down}_proj`. */
export const OLMOE_NAMES: MoeNames = {
  router: 'mlp.gate.weight',
  expert: (layer, e, kind) => `model.layers.${layer}.mlp.experts.${e}.${['gate_proj', 'up_proj', 'down_proj'][kind]}.weight`,
};

/** The layer whose routed experts a tensor holds, or undefined for any other tensor. */
export function olmoeExpertLayerOf(name: string): number | undefined {
  const m = /(?:^|\.)layers\.(\d+)\.mlp\.experts\.\d+\./.exec(name);
  return m ? Number(m[1]) : undefined;
}
