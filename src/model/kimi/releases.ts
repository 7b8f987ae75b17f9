import type { KnownRelease } from '../release.js';

const GiB = 2 ** 30;

/** Kimi-Linear's release. */
export const KIMI_LINEAR_RELEASES: KnownRelease[] = [
  {
    short: 'kimi-linear',
    repo: 'moonshotai/Kimi-Linear-48B-A3B-Instruct',
    // 49.1 B parameters in bf16
    checkpointBytes: 98.2e9,
    shards: 20,
    // 2.01 B trunk parameters in bf16 (the embedding and head included)
    trunkSourceBytes: 4.02e9,
    // 16.9 GiB of VQ3R experts + 0.99 GiB of trunk
    containerBytes: 17.9 * GiB,
    floorBytes: 1.71 * GiB,
    parameters: '49.1 B, 3 B active',
  },
];

/** Kimi K3's release. */
export const KIMI_K3_RELEASES: KnownRelease[] = [
  {
    short: 'kimi-k3',
    repo: 'moonshotai/Kimi-K3',
    checkpointBytes: 1.42e12,
    shards: 96,
    // 54.4 B Q4G-bound trunk parameters + embedding and head, bf16; the vision tower
    trunkSourceBytes: 114e9,
    containerBytes: 982e9,
    floorBytes: 29.16 * GiB,
    parameters: '2.78 T, 104 B active',
  },
];
