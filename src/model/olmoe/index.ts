import { transformerArchitecture } from '../transformer/architecture.js';
import { parseOlmoeConfig } from './config.js';
import { OLMOE_NAMES, olmoeExpertLayerOf } from './names.js';
import { OLMOE_RELEASES } from './releases.js';
import { olmoeSynth } from './synth.js';

/** OLMoE (`olmoe`): OLMoE-1B-7B-0924, -0125. */
export const olmoe = transformerArchitecture({
  id: 'olmoe',
  modelTypes: ['olmoe'],
  parseConfig: parseOlmoeConfig,
  moe: OLMOE_NAMES,
  expertLayerOf: olmoeExpertLayerOf,
  synth: olmoeSynth,
  releases: OLMOE_RELEASES,
});
