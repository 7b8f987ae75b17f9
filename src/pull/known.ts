/**
 * Short names for the models this engine was built for, with what their release weighs — so that
 * `waste pull --dry-run kimi-linear` answers before anything is fetched, the network included.
 * The figures are the published ones (checkpoint size and shard count from the repositories'
 * listings, container and floor as measured on full-shape synthetic containers; see
 * docs/PERFORMANCE.md); a dry run of the repository's full name reads the real listing and headers.
 */
export interface KnownModel {
  short: string;
  repo: string;
  checkpointBytes: number;
  shards: number;
  /** Source bytes of the trunk (everything but the routed experts), copied aside while streaming. */
  trunkSourceBytes: number;
  containerBytes: number;
  /** The RAM floor at a 4K context. */
  floorBytes: number;
  parameters: string;
}

const GiB = 2 ** 30;

export const KNOWN_MODELS: KnownModel[] = [
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

export function knownModel(nameOrRepo: string): KnownModel | undefined {
  return KNOWN_MODELS.find((k) => k.short === nameOrRepo || k.repo === nameOrRepo);
}

/**
 * Disk a pull needs at its peak from the published totals: the container, the trunk's copies,
 * two shards converting (a layer's experts may straddle two) and the next one downloading
 * meanwhile. Downloading everything first needs the checkpoint and the container.
 */
export function knownPeaks(k: KnownModel): { streaming: number; full: number } {
  return { streaming: k.containerBytes + k.trunkSourceBytes + (3 * k.checkpointBytes) / k.shards, full: k.checkpointBytes + k.containerBytes };
}
