import type { KnownRelease } from '../release.js';

const GiB = 2 ** 30;

/**
 * GLM-4.5's releases (bf16; the FP8 repositories are not pulled). Checkpoint bytes are the
 * parameter counts in bf16, the MTP layer included (counted from the shapes' configs: 356.79 B for
 * GLM-4.5 and 4.6, of which 3.99 B MTP; 109.23 B for the Air, 2.38 B MTP); trunk source bytes leave
 * out the MTP layer, which is neither copied nor converted. Shard counts: 93 and 47 as index files
 * restated in public code show them; GLM-4.6's 92 is not re-read here (a dry run of the full
 * repository name reads the real listing). Container and floor measured on full-shape sparse
 * synthetic containers (`waste synth --shape glm-4.5|glm-4.5-air --sparse`, `waste plan --ctx 4096`);
 * GLM-4.6 is GLM-4.5's shape with a longer max_position_embeddings, so the same container and floor;
 * GLM-4.7 is published as the same architecture (`glm4_moe`, 355 B; the zai-org/GLM-4.5 repository
 * documents the three together), so its figures are 4.6's — its config and shard count are not
 * re-read here.
 */
export const GLM4_MOE_RELEASES: KnownRelease[] = [
  {
    short: 'glm-4.5',
    repo: 'zai-org/GLM-4.5',
    checkpointBytes: 713.6e9,
    shards: 93,
    // 16.83 B parameters outside the routed experts and the MTP layer, bf16
    trunkSourceBytes: 33.7e9,
    containerBytes: 135.75e9,
    floorBytes: 11.43 * GiB,
    parameters: '355 B, 32 B active',
  },
  {
    short: 'glm-4.5-air',
    repo: 'zai-org/GLM-4.5-Air',
    checkpointBytes: 218.5e9,
    shards: 47,
    trunkSourceBytes: 14.4e9,
    containerBytes: 41.80e9,
    floorBytes: 5.24 * GiB,
    parameters: '106 B, 12 B active',
  },
  {
    short: 'glm-4.6',
    repo: 'zai-org/GLM-4.6',
    checkpointBytes: 713.6e9,
    shards: 92,
    trunkSourceBytes: 33.7e9,
    containerBytes: 135.75e9,
    floorBytes: 11.43 * GiB,
    parameters: '355 B, 32 B active',
  },
  {
    short: 'glm-4.7',
    repo: 'zai-org/GLM-4.7',
    checkpointBytes: 713.6e9,
    shards: 92,
    trunkSourceBytes: 33.7e9,
    containerBytes: 135.75e9,
    floorBytes: 11.43 * GiB,
    parameters: '355 B, 32 B active',
  },
];
