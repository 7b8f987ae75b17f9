import type { KnownRelease } from '../release.js';

const GiB = 2 ** 30;

/**
 * gpt-oss's releases: routed experts in MXFP4 (4.25 bits a weight), everything else bf16.
 * Checkpoint bytes counted from the configs (`waste info` counts 20.91 B and 116.83 B parameters;
 * 19.11 B and 114.66 B of them expert weights), which agree with the repositories' listed 13.8 GB
 * and 65.3 GB; shard counts as the repositories list them (model-00000-of-00002 … and
 * model-00000-of-00014 …: three and fifteen files; a dry run of the full repository name reads the
 * real listing); container and floor measured on full-shape sparse synthetic containers
 * (`waste synth --shape … --sparse`, `waste plan --ctx 4096`).
 */
export const GPT_OSS_RELEASES: KnownRelease[] = [
  {
    short: 'gpt-oss-20b',
    repo: 'openai/gpt-oss-20b',
    checkpointBytes: 13.76e9,
    shards: 3,
    // 1.80 B parameters outside the routed experts' matrices (their biases included), bf16
    trunkSourceBytes: 3.61e9,
    containerBytes: 8.75e9,
    floorBytes: 1.31 * GiB,
    parameters: '20.9 B, 3.6 B active',
  },
  {
    short: 'gpt-oss-120b',
    repo: 'openai/gpt-oss-120b',
    checkpointBytes: 65.25e9,
    shards: 15,
    trunkSourceBytes: 4.33e9,
    containerBytes: 44.96e9,
    floorBytes: 1.69 * GiB,
    parameters: '116.8 B, 5.1 B active',
  },
];
