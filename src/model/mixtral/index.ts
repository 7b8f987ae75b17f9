import { transformerArchitecture } from '../transformer/architecture.js';
import { parseMixtralConfig } from './config.js';
import { MIXTRAL_NAMES, mixtralExpertLayerOf } from './names.js';
import { MIXTRAL_RELEASES } from './releases.js';
import { mixtralSynth } from './synth.js';

/** Mixtral (`mixtral`): Mixtral-8x7B, 8x22B. */
export const mixtral = transformerArchitecture({
  id: 'mixtral',
  modelTypes: ['mixtral'],
  parseConfig: parseMixtralConfig,
  moe: MIXTRAL_NAMES,
  expertLayerOf: mixtralExpertLayerOf,
  synth: mixtralSynth,
  releases: MIXTRAL_RELEASES,
});
