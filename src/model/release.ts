/**
 * A release a family knows by a short name, with what it weighs — so that
 * `waste pull --dry-run NAME` answers before anything is fetched, the network included. The
 * figures are the published ones (checkpoint size and shard count from the repositories'
 * listings, container and floor as measured on full-shape synthetic containers; see
 * docs/PERFORMANCE.md); a dry run of the repository's full name reads the real listing and headers.
 */
export interface KnownRelease {
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

