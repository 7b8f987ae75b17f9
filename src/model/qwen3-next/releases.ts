import type { KnownRelease } from '../release.js';

const GiB = 2 ** 30;

/**
 * Qwen3-Next's and Qwen3.5 MoE's releases. Qwen3-Next-80B's checkpoint bytes are its parameters
 * in bf16: 79.67 B counted from the config by `waste info`, plus about 1.64 B in the MTP layer the
 * model does not run (one MoE decoder layer and its projection, stored all the same); Qwen3.5-397B's
 * the published ~794 GB. Shard counts: Qwen3-Next's 41 as its repository lists them; Qwen3.5's an
 * estimate at Qwen's usual ~4 GB a shard (only the disk estimate of a streamed pull reads it; a dry
 * run of the full repository name reads the real listing). Container and floor measured on
 * full-shape sparse synthetic containers (`waste synth --shape qwen3-next-80b-a3b|qwen3.5-397b-a17b
 * --sparse`, `waste plan --ctx 4096`).
 */
const NEXT_80B = {
  checkpointBytes: 162.6e9,
  shards: 41,
  // 2.36 B parameters outside the routed experts, bf16
  trunkSourceBytes: 4.73e9,
  containerBytes: 30.73e9,
  floorBytes: 1.54 * GiB,
  parameters: '80 B, 3.9 B active',
};

export const QWEN3_NEXT_RELEASES: KnownRelease[] = [
  { short: 'qwen3-next-80b-a3b', repo: 'Qwen/Qwen3-Next-80B-A3B-Instruct', ...NEXT_80B },
  { short: 'qwen3-next-80b-a3b-thinking', repo: 'Qwen/Qwen3-Next-80B-A3B-Thinking', ...NEXT_80B },
  {
    short: 'qwen3.5-397b-a17b',
    repo: 'Qwen/Qwen3.5-397B-A17B',
    checkpointBytes: 794e9,
    shards: 200,
    // 9.8 B parameters outside the routed experts, bf16 (the vision tower and the MTP layer are
    // neither converted nor copied aside)
    trunkSourceBytes: 19.6e9,
    containerBytes: 151.54e9,
    floorBytes: 5.47 * GiB,
    parameters: '397 B, 17 B active',
  },
];
