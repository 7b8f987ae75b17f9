import type { ChunkRows } from '../base/rows.js';
import type { KdaState } from '../blocks/kda.js';
import type { KimiState } from './state.js';

/** Layer L's KDA state: the sequence's, or each row's. */
export function kdaOf(rows: ChunkRows<KimiState>, L: number): KdaState | readonly KdaState[] {
  return rows.each((s) => s.kda[L]!);
}

/** Layer L's latent cache: the sequence's, or each row's. */
export function mlaOf(rows: ChunkRows<KimiState>, L: number): Float32Array | readonly Float32Array[] {
  return rows.each((s) => s.mla[L]!.cache);
}
