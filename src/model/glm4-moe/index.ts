import { transformerArchitecture } from '../transformer/architecture.js';
import { parseGlm4MoeConfig } from './config.js';
import { GLM4_MOE_NAMES, glm4MoeExpertLayerOf } from './names.js';
import { GLM4_MOE_RELEASES } from './releases.js';
import { glm4MoeSynth } from './synth.js';

/** GLM-4.5 (`glm4_moe`): GLM-4.5 355B-A32B, GLM-4.5-Air 106B-A12B, GLM-4.6, GLM-4.7. */
export const glm4Moe = transformerArchitecture({
  id: 'glm4-moe',
  modelTypes: ['glm4_moe'],
  parseConfig: parseGlm4MoeConfig,
  moe: GLM4_MOE_NAMES,
  expertLayerOf: glm4MoeExpertLayerOf,
  synth: glm4MoeSynth,
  releases: GLM4_MOE_RELEASES,
});
