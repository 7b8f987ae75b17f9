import type { KnownRelease } from '../release.js';

const GiB = 2 ** 30;

/**
 * gpt-oss's releases (MXFP4 experts, bf16 elsewhere). Checkpoint bytes and shards as the
 * repositories list them; container and floor measured on full-shape sparse synthetic containers
 * (`waste synth --shape … --sparse`, `waste plan --ctx 4096`).
 */
export const GPT_OSS_RELEASES: KnownRelease[] = [];
