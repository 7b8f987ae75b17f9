import type { Container } from '../container/open.js';
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
