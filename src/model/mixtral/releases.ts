import type { KnownRelease } from '../release.js';

const GiB = 2 ** 30;

/**
 * Mixtral's releases. Checkpoint bytes are the parameter counts in bf16 (counted from the configs
 * by `waste info`: 46.70 B and 140.63 B); shard counts as recalled from the repositories' listings,
 * not re-read here (a dry run of the full repository name reads the real listing); container and
 * floor measured on full-shape sparse synthetic containers (`waste synth --shape mixtral-8x7b
 * --sparse`, `waste plan --ctx 4096`).
 */
export const MIXTRAL_RELEASES: KnownRelease[] = [
  {
    short: 'mixtral-8x7b',
    repo: 'mistralai/Mixtral-8x7B-Instruct-v0.1',
    checkpointBytes: 93.41e9,
    shards: 19,
    // 1.61 B parameters outside the routed experts, bf16
    trunkSourceBytes: 3.21e9,
    containerBytes: 17.89e9,
    floorBytes: 2.25 * GiB,
    parameters: '46.7 B, 12.9 B active',
  },
  {
    short: 'mixtral-8x22b',
    repo: 'mistralai/Mixtral-8x22B-Instruct-v0.1',
    checkpointBytes: 281.26e9,
    shards: 59,
    trunkSourceBytes: 10.68e9,
    containerBytes: 53.74e9,
    floorBytes: 5.10 * GiB,
    parameters: '141 B, 39 B active',
  },
];
