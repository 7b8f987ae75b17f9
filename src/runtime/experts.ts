import type { Container } from '../container/open.js';
import type { Arena } from '../memory/arena.js';
import { WasteError } from '../util/errors.js';

/**
 * Where the forward pass gets an expert's record from: a view of the whole record, in the arena
 * of the layer that computes with it. The view stays valid until the next call to `get`.
 */
export interface ExpertSource {
  get(layer: number, expert: number): Uint8Array | Promise<Uint8Array>;
  readonly stats: ExpertStats;
}

export interface ExpertStats {
  /** Records read from disk. */
  reads: number;
  bytesRead: number;
}

/** The simplest source: one read per request, checked, into the layer's staging buffer; no cache. */
export class DirectExpertReader implements ExpertSource {
  readonly stats: ExpertStats = { reads: 0, bytesRead: 0 };

  constructor(
    private readonly container: Container,
    private readonly verify: boolean,
    private readonly staging: (layer: number) => Uint8Array,
  ) {}

  get(layer: number, expert: number): Uint8Array {
    const bank = this.container.banks.get(layer);
    if (!bank) throw new WasteError('E_STATE', `layer ${layer} has no expert bank`);
    const rec = bank.read(expert, this.staging(layer), this.verify);
    this.stats.reads++;
    this.stats.bytesRead += bank.stride;
    return rec;
  }
}

/**
 * Every expert of every layer read into memory at open, in the arena of its layer: "everything
 * cached", for benchmarks and for models small enough to hold whole. Each record is checked once.
 */
export class PreloadedExperts implements ExpertSource {
  readonly stats: ExpertStats = { reads: 0, bytesRead: 0 };
  private readonly records = new Map<number, Uint8Array>();
  private readonly strides = new Map<number, number>();

  constructor(container: Container, verify: boolean, arenaOf: (layer: number) => Arena) {
    for (const [layer, bank] of container.banks) {
      const arena = arenaOf(layer);
      const bytes = bank.stride * bank.experts;
      const all = arena.u8(arena.alloc(bytes, 4096), bytes);
      for (let e = 0; e < bank.experts; e++) bank.read(e, all.subarray(e * bank.stride, (e + 1) * bank.stride), verify);
      this.records.set(layer, all);
      this.strides.set(layer, bank.stride);
    }
  }

  get(layer: number, expert: number): Uint8Array {
    const all = this.records.get(layer);
    if (!all) throw new WasteError('E_STATE', `layer ${layer} has no expert bank`);
    const stride = this.strides.get(layer)!;
    return all.subarray(expert * stride, (expert + 1) * stride);
  }
}
