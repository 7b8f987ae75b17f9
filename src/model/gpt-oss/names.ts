import type { StackedExperts } from '../../checkpoint/stacked.js';
import type { MoeNames } from '../transformer/layout.js';

const KINDS = ['gate_proj', 'up_proj', 'down_proj'];

/**
 * gpt-oss's MoE tensors: the router `mlp.router.{weight,bias}`, and the experts stacked per layer
 * (`mlp.experts.gate_up_proj` with gate and up alternating, `mlp.experts.down_proj`, MXFP4 in the
 * release, and their `_bias`). Each expert's matrix is known by the name below, a slice of the
 * stacked tensors (checkpoint/stacked.ts); the biases stay whole in the trunk.
 */
export const GPT_OSS_NAMES: MoeNames = {
  router: 'mlp.router.weight',
  routerBias: 'mlp.router.bias',
  expertBias: { gateUp: 'mlp.experts.gate_up_proj_bias', down: 'mlp.experts.down_proj_bias' },
  expert: (layer, e, kind) => `model.layers.${layer}.mlp.experts.${e}.${KINDS[kind]}.weight`,
};

export const GPT_OSS_STACKED: StackedExperts = {
  gateUp: 'mlp.experts.gate_up_proj',
  down: 'mlp.experts.down_proj',
  expert: GPT_OSS_NAMES.expert,
};

/**
 * The layer whose routed experts a tensor holds — an expert's slice or a stacked tensor (its
 * blocks and scales) — or undefined for any other tensor (the experts' biases are the trunk's).
 */
export function gptOssExpertLayerOf(name: string): number | undefined {
  const m = /(?:^|\.)layers\.(\d+)\.mlp\.experts\.(?:\d+\.(?:gate|up|down)_proj\.weight|(?:gate_up|down)_proj(?:_blocks|_scales)?)$/.exec(name);
  return m ? Number(m[1]) : undefined;
}
