import type { KnownRelease } from '../release.js';

const GiB = 2 ** 30;

/**
 * OLMoE's releases (0125 and 0924 share one shape). Checkpoint bytes are the parameter counts in
 * bf16 (counted from the config by `waste info`: 6.92 B); shard counts as recalled from the
 * repositories' listings, not re-read here (a dry run of the full repository name reads the real
 * listing); container and floor measured on a full-shape sparse synthetic container (`waste synth
 * --shape olmoe-1b-7b --sparse`, `waste plan --ctx 4096`).
 */
export const OLMOE_RELEASES: KnownRelease[] = [
  {
    short: 'olmoe-1b-7b',
    repo: 'allenai/OLMoE-1B-7B-0125-Instruct',
    checkpointBytes: 13.84e9,
    shards: 3,
    // 0.48 B parameters outside the routed experts, bf16
    trunkSourceBytes: 0.95e9,
    containerBytes: 2.78e9,
    floorBytes: 1.37 * GiB,
    parameters: '6.9 B, 1.3 B active',
  },
  {
    short: 'olmoe-1b-7b-0924',
    repo: 'allenai/OLMoE-1B-7B-0924-Instruct',
    checkpointBytes: 13.84e9,
    shards: 3,
    trunkSourceBytes: 0.95e9,
    containerBytes: 2.78e9,
    floorBytes: 1.37 * GiB,
    parameters: '6.9 B, 1.3 B active',
  },
];
