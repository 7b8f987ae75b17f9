import type { KnownRelease } from '../model/release.js';
import { ARCHITECTURES } from '../model/registry.js';

/** Short names for the releases of every family this build runs (each family lists its own). */
export type KnownModel = KnownRelease;

/** Every known release, in the registry's order (a family of several architectures lists each once). */
export function knownModels(): KnownModel[] {
  return [...new Set(ARCHITECTURES.flatMap((a) => a.releases ?? []))];
}

export function knownModel(nameOrRepo: string): KnownModel | undefined {
  return knownModels().find((k) => k.short === nameOrRepo || k.repo === nameOrRepo);
}

/**
 * Disk a pull needs at its peak from the published totals: the container, the trunk's copies,
 * two shards converting (a layer's experts may straddle two) and the next one downloading
 * meanwhile. Downloading everything first needs the checkpoint and the container.
 */
export function knownPeaks(k: KnownModel): { streaming: number; full: number } {
  return { streaming: k.containerBytes + k.trunkSourceBytes + (3 * k.checkpointBytes) / k.shards, full: k.checkpointBytes + k.containerBytes };
}
