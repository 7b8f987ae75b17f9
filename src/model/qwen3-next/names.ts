import type { MoeNames } from '../transformer/layout.js';

/** Qwen3-Next's MoE tensors: `mlp.gate` (the router), `mlp.experts.N.{gate,up,down}_proj`, `mlp.shared_expert.` and its gate `mlp.shared_expert_gate`. */
export const QWEN3_NEXT_NAMES: MoeNames = {
  router: 'mlp.gate.weight',
  shared: 'mlp.shared_expert.',
  expert: (layer, e, kind) => `model.layers.${layer}.mlp.experts.${e}.${['gate_proj', 'up_proj', 'down_proj'][kind]}.weight`,
};

/** The shared expert's gate, under `model.layers.L.`. */
export const SHARED_GATE = 'mlp.shared_expert_gate.weight';

/**
 * The layer whose routed experts a tensor holds (one expert's matrix, or a release's stacked
 * `mlp.experts.gate_up_proj` / `down_proj`), or undefined for any other tensor. (The MTP layer's,
 * `mtp.layers.0.…`, are `unread` before this is asked.)
 */
export function qwen3NextExpertLayerOf(name: string): number | undefined {
  const m = /(?:^|\.)layers\.(\d+)\.mlp\.experts\.(?:\d+\.|gate_up_proj|down_proj)/.exec(name);
  return m ? Number(m[1]) : undefined;
}

/** Gated DeltaNet's input projections under `linear_attn.`, by packing. */
export const GDN_PROJ = {
  grouped: ['in_proj_qkvz', 'in_proj_ba'],
  split: ['in_proj_qkv', 'in_proj_z', 'in_proj_b', 'in_proj_a'],
} as const;
