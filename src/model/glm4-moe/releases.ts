import type { KnownRelease } from '../release.js';

/** GLM-4.5's releases (filled in once measured). */
export const GLM4_MOE_RELEASES: KnownRelease[] = [];
