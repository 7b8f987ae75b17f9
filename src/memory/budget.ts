import { WasteError } from '../util/errors.js';
import { formatSize } from '../util/size.js';

/**
 * The RAM budget: a ceiling on every byte the engine allocates for a model (arena memory: trunk,
 * scratch, session state, expert cache). Arenas charge it as they are created and grown; going
 * past it is refused, never done.
 */
export class MemoryBudget {
  private used_ = 0;

  constructor(readonly limit: number) {}

  get used(): number {
    return this.used_;
  }

  get remaining(): number {
    return this.limit - this.used_;
  }

  charge(bytes: number, what: string): void {
    if (this.used_ + bytes > this.limit)
      throw new WasteError(
        'E_STATE',
        `the RAM budget of ${formatSize(this.limit)} has no room for ${what} (${formatSize(bytes)}; ${formatSize(this.remaining)} left)`,
      );
    this.used_ += bytes;
  }

  /** Give back bytes charged before (an arena the elastic cache dropped). */
  release(bytes: number): void {
    this.used_ = Math.max(0, this.used_ - bytes);
  }

  /**
   * Set `bytes` of this budget aside now (charged at once) for a later use that only the returned
   * budget can draw on: the vision tower's room, kept from sessions and the cache until an image
   * loads the tower.
   */
  reserve(bytes: number, what: string): MemoryBudget {
    this.charge(bytes, what);
    return new MemoryBudget(bytes);
  }
}

/** No ceiling: for tools and tests that allocate arenas outside a model. */
export const UNLIMITED_BUDGET = new MemoryBudget(Number.MAX_SAFE_INTEGER);
