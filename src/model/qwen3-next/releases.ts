import type { KnownRelease } from '../release.js';

/** Qwen3-Next's and Qwen3.5 MoE's releases (filled in once measured). */
export const QWEN3_NEXT_RELEASES: KnownRelease[] = [];
