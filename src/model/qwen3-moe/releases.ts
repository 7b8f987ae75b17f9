import type { KnownRelease } from '../release.js';

const GiB = 2 ** 30;

/**
 * Qwen3-MoE's releases. Checkpoint bytes are the parameter counts in bf16 (counted from the
 * configs by `waste info`: 30.53 B, 235.09 B, 480.15 B); shard counts as the repositories list them
 * (a dry run of the full repository name reads the real listing); container and floor measured on
 * full-shape sparse synthetic containers (`waste synth --shape … --sparse`, `waste plan --ctx 4096`,
 * docs/PERFORMANCE.md).
 */
export const QWEN3_MOE_RELEASES: KnownRelease[] = [
  {
    short: 'qwen3-30b-a3b',
    repo: 'Qwen/Qwen3-30B-A3B-Instruct-2507',
    checkpointBytes: 61.1e9,
    shards: 16,
    // 1.54 B parameters outside the routed experts, bf16
    trunkSourceBytes: 3.08e9,
    containerBytes: 12.03e9,
    floorBytes: 1.63 * GiB,
    parameters: '30.5 B, 3.3 B active',
  },
  {
    short: 'qwen3-235b-a22b',
    repo: 'Qwen/Qwen3-235B-A22B-Instruct-2507',
    checkpointBytes: 470.2e9,
    shards: 118,
    trunkSourceBytes: 16.0e9,
    containerBytes: 90.11e9,
    floorBytes: 5.66 * GiB,
    parameters: '235 B, 22 B active',
  },
  {
    short: 'qwen3-coder-480b',
    repo: 'Qwen/Qwen3-Coder-480B-A35B-Instruct',
    checkpointBytes: 960.3e9,
    shards: 241,
    trunkSourceBytes: 24.1e9,
    containerBytes: 182.94e9,
    floorBytes: 8.34 * GiB,
    parameters: '480 B, 35 B active',
  },
];
