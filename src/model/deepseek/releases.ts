import type { KnownRelease } from '../release.js';

const GiB = 2 ** 30;

/**
 * DeepSeek-V3's and Kimi K2's releases, as released in FP8 (128 × 128 block scales). Checkpoint
 * bytes and shard counts as the repositories list them (a dry run of the full repository name
 * reads the real listing); container and floor measured on full-shape sparse synthetic containers
 * (`waste synth --shape … --sparse`, `waste plan --ctx 4096`).
 */
export const DEEPSEEK_RELEASES: KnownRelease[] = [
  {
    short: 'deepseek-v3',
    repo: 'deepseek-ai/DeepSeek-V3.1',
    checkpointBytes: 688.6e9,
    shards: 163,
    // 16.6 B parameters outside the routed experts (the MTP layer's included), FP8 inside the layers
    trunkSourceBytes: 17.4e9,
    containerBytes: 0,
    floorBytes: 0,
    parameters: '671 B, 37 B active',
  },
  {
    short: 'deepseek-r1',
    repo: 'deepseek-ai/DeepSeek-R1-0528',
    checkpointBytes: 688.6e9,
    shards: 163,
    trunkSourceBytes: 17.4e9,
    containerBytes: 0,
    floorBytes: 0,
    parameters: '671 B, 37 B active',
  },
  {
    short: 'kimi-k2',
    repo: 'moonshotai/Kimi-K2-Instruct-0905',
    checkpointBytes: 1029e9,
    shards: 62,
    trunkSourceBytes: 14.0e9,
    containerBytes: 0,
    floorBytes: 0,
    parameters: '1.04 T, 32 B active',
  },
];
