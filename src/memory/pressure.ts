import { formatSize } from '../util/size.js';

/** One look at the machine's memory. */
export interface MemorySample {
  /** Bytes available now (MemAvailable, or a cgroup's headroom when less); undefined when unknown. */
  available?: number;
  /** PSI "some avg10" of memory, in percent; undefined without PSI. */
  psiSome10?: number;
}

export type SizeDecision = { shrink: number; why: string } | { grow: 1; why: string } | undefined;

/** Polls at most this often: two small /proc reads, a few microseconds. */
export const POLL_MS = 500;
/** PSI at or above this (percent of the last 10 s with a task stalled on memory) is pressure… */
export const PSI_SHRINK = 10;
/** …and below this, calm. */
export const PSI_CALM = 1;
/** After a shrink, the next waits this long (a dropped arena takes ~0.5 s to show in MemAvailable), unless less than half the margin is left. */
export const SETTLE_MS = 2000;
/** Growth waits this long after any resize, and for this many calm polls in a row. */
export const GROW_AFTER_MS = 5000;
export const CALM_POLLS = 4;

/**
 * When the elastic cache should give arenas back or take one again: shrink as soon as available
 * RAM falls below the margin the default budget promised the system (or memory PSI says tasks are
 * stalling), by as many arenas as cover the shortfall; grow back one arena at a time, only after a
 * run of calm polls with room for the arena and a quarter arena to spare, so that a machine
 * hovering at the margin does not make the cache oscillate. The clock and the sample are given by
 * the caller, so tests drive it without time passing.
 */
export class MemoryPressure {
  private lastPoll = -Infinity;
  private lastResize = -Infinity;
  private lastShrink = -Infinity;
  private calm = 0;

  constructor(
    /** Bytes to keep available (the default budget's OS margin). */
    readonly marginBytes: number,
    /** Bytes one arena gives back or takes. */
    readonly stepBytes: number,
  ) {}

  /** Whether it is time to look again (at most every POLL_MS). */
  due(now: number): boolean {
    return now - this.lastPoll >= POLL_MS;
  }

  decide(now: number, s: MemorySample, room: { canShrink: boolean; canGrow: boolean }): SizeDecision {
    this.lastPoll = now;
    const avail = s.available;
    const psi = s.psiSome10;
    const short = avail !== undefined && avail < this.marginBytes;
    const stalled = psi !== undefined && psi >= PSI_SHRINK;
    if (short || stalled) {
      this.calm = 0;
      const urgent = avail !== undefined && avail < this.marginBytes / 2;
      if (!room.canShrink || (now - this.lastShrink < SETTLE_MS && !urgent)) return undefined;
      const n = short ? Math.max(1, Math.ceil((this.marginBytes - avail!) / this.stepBytes)) : 1;
      this.lastShrink = this.lastResize = now;
      return {
        shrink: n,
        why: short ? `${formatSize(avail!)} available, under the ${formatSize(this.marginBytes)} margin` : `memory pressure (PSI some avg10 ${psi!.toFixed(1)}%)`,
      };
    }
    // room for one more arena with the margin kept and a quarter arena to spare: a shrink leaves at
    // most the margin plus one arena, so growth comes only from memory freed since
    const roomy = avail === undefined || avail >= this.marginBytes + this.stepBytes + this.stepBytes / 4;
    const quiet = psi === undefined || psi < PSI_CALM;
    // without any reading there is nothing to grow back on
    if (avail === undefined && psi === undefined) return undefined;
    this.calm = roomy && quiet ? this.calm + 1 : 0;
    if (!room.canGrow || this.calm < CALM_POLLS || now - this.lastResize < GROW_AFTER_MS) return undefined;
    this.calm = 0;
    this.lastResize = now;
    return { grow: 1, why: avail !== undefined ? `${formatSize(avail)} available again` : 'memory pressure gone' };
  }
}
