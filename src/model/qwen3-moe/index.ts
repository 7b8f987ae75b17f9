import { transformerArchitecture } from '../transformer/architecture.js';
import { parseQwen3MoeConfig } from './config.js';
import { QWEN3_MOE_NAMES, qwen3MoeExpertLayerOf } from './names.js';
import { QWEN3_MOE_RELEASES } from './releases.js';
import { qwen3MoeSynth } from './synth.js';

/** Qwen3-MoE (`qwen3_moe`): Qwen3-30B-A3B, 235B-A22B, Qwen3-Coder-480B-A35B. */
export const qwen3Moe = transformerArchitecture({
  id: 'qwen3-moe',
  modelTypes: ['qwen3_moe'],
  parseConfig: parseQwen3MoeConfig,
  moe: QWEN3_MOE_NAMES,
  expertLayerOf: qwen3MoeExpertLayerOf,
  synth: qwen3MoeSynth,
  releases: QWEN3_MOE_RELEASES,
});
