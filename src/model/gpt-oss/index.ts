import { transformerArchitecture } from '../transformer/architecture.js';
import { parseGptOssConfig } from './config.js';
import { GPT_OSS_NAMES, GPT_OSS_STACKED, gptOssExpertLayerOf } from './names.js';
import { GPT_OSS_RELEASES } from './releases.js';
import { gptOssSynth } from './synth.js';

/** gpt-oss (`gpt_oss`): gpt-oss-20b, gpt-oss-120b. */
export const gptOss = transformerArchitecture({
  id: 'gpt-oss',
  modelTypes: ['gpt_oss'],
  parseConfig: parseGptOssConfig,
  moe: GPT_OSS_NAMES,
  expertLayerOf: gptOssExpertLayerOf,
  synth: gptOssSynth,
  releases: GPT_OSS_RELEASES,
  stacked: GPT_OSS_STACKED,
});
