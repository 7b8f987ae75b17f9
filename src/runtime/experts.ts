import type { Container } from '../container/open.js';
import { WasteError } from '../util/errors.js';

/**
 * Where the forward pass gets an expert's record from. The record view it returns stays valid
 * until the next call to `get` (implementations may reuse one buffer).
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

/** The simplest source: one read per request, checked, into a reused buffer; no cache. */
export class DirectExpertReader implements ExpertSource {
  readonly stats: ExpertStats = { reads: 0, bytesRead: 0 };
  private buf: Uint8Array;

  constructor(
    private readonly container: Container,
    private readonly verify: boolean,
  ) {
    let max = 0;
    for (const b of container.banks.values()) max = Math.max(max, b.stride);
    this.buf = new Uint8Array(max);
  }

  get(layer: number, expert: number): Uint8Array {
    const bank = this.container.banks.get(layer);
    if (!bank) throw new WasteError('E_STATE', `layer ${layer} has no expert bank`);
    const rec = bank.read(expert, this.buf, this.verify);
    this.stats.reads++;
    this.stats.bytesRead += bank.stride;
    return rec;
  }
}
