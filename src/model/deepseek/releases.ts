import type { KnownRelease } from '../release.js';

const GiB = 2 ** 30;

/**
 * DeepSeek-V3's and Kimi K2's releases, each in its released form: FP8 (E4M3 with 128 × 128 block
 * scales inside the layers, bf16 embedding, head, norms and routers), K2-Thinking's INT4 experts. Checkpoint and trunk bytes
 * computed from the configs in that form (DeepSeek's MTP layer left out of the trunk copied aside:
 * pull leaves it unread — its own embedding and head in bf16, its attention and shared expert in
 * FP8, about 4.1 GB counted from the config); shard counts as the repositories list them (a dry run of the full repository name
 * reads the real listing); container and floor measured on full-shape sparse synthetic containers
 * (`waste synth --shape deepseek-v3|kimi-k2 --sparse`, `waste plan --ctx 4096`).
 * Kimi K2-Thinking is released with its routed experts in compressed-tensors INT4 (groups of 32,
 * bf16 scales) and the rest in bf16; its container and floor are Kimi K2's (the same widths).
 */
export const DEEPSEEK_RELEASES: KnownRelease[] = [
  {
    short: 'deepseek-v3',
    repo: 'deepseek-ai/DeepSeek-V3.1',
    checkpointBytes: 684.8e9,
    shards: 163,
    trunkSourceBytes: 15.3e9,
    containerBytes: 255.34e9,
    floorBytes: 9.47 * GiB,
    parameters: '671 B, 37 B active',
  },
  {
    short: 'deepseek-r1',
    repo: 'deepseek-ai/DeepSeek-R1-0528',
    checkpointBytes: 684.8e9,
    shards: 163,
    trunkSourceBytes: 15.3e9,
    containerBytes: 255.34e9,
    floorBytes: 9.47 * GiB,
    parameters: '671 B, 37 B active',
  },
  {
    short: 'kimi-k2',
    repo: 'moonshotai/Kimi-K2-Instruct-0905',
    checkpointBytes: 1029.2e9,
    shards: 62,
    trunkSourceBytes: 14.2e9,
    containerBytes: 388.3e9,
    floorBytes: 6.82 * GiB,
    parameters: '1.03 T, 32 B active',
  },
  {
    short: 'kimi-k2-thinking',
    repo: 'moonshotai/Kimi-K2-Thinking',
    checkpointBytes: 594.2e9,
    shards: 62,
    trunkSourceBytes: 23.5e9,
    containerBytes: 388.3e9,
    floorBytes: 6.82 * GiB,
    parameters: '1.03 T, 32 B active',
  },
];
