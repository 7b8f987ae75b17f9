import type { ExpertCache } from '../experts/cache.js';
import type { ReaderPool } from '../experts/readers.js';
import type { Kernels } from '../kernels/types.js';
import { ARENA_RESERVED, Arena } from '../memory/arena.js';
import type { MemoryBudget } from '../memory/budget.js';
import { collectGarbage } from '../memory/collect.js';
import { type MemorySample, MemoryPressure } from '../memory/pressure.js';
import type { Network } from '../model/architecture.js';
import { availableRam, memoryPressure } from './ram.js';

/** One resize of the elastic cache, as `bench` and `/health` report it. */
export interface CacheResize {
  /** ISO time. */
  at: string;
  fromBytes: number;
  toBytes: number;
  fromSlots: number;
  toSlots: number;
  why: string;
}

/** One of the cache's arenas: its share of slots (fixed at open), present or given back. */
interface Group {
  slots: number;
  /** Reader status index of its first slot. */
  indexBase: number;
  /** Bytes it is created with (whole pages, the module's reserve included). */
  bytes: number;
  arena: Arena | undefined;
}

export interface ElasticParts {
  cache: ExpertCache;
  kernels: Kernels;
  net: Network;
  readers: ReaderPool | undefined;
  budget: MemoryBudget;
  stride: number;
  /** The cache's arenas in slot order, as the plan laid them out, with their slot counts and bytes. */
  groups: { arena: Arena; slots: number; bytes: number }[];
  /** Slots that always stay (the floor's). */
  floorSlots: number;
  /** Bytes to keep available (the OS margin). */
  marginBytes: number;
  /** Where samples and time come from (tests simulate pressure with them). */
  sample?: () => MemorySample;
  now?: () => number;
}

/** How many resizes /health and bench keep. */
const KEEP = 32;

/**
 * The default budget's expert cache: its slots live in several arenas, and under memory pressure
 * it gives whole arenas back — every slot of the arena forgotten, the memory dropped by every
 * thread that held it and unmapped — and takes them again when the pressure goes, never beyond
 * the budget it opened with and never below the floor. Resizes happen only at a safe point, between
 * forward passes (`poll`), after the reads in flight have landed; no slot a computation holds is
 * ever taken. What the cache holds decides speed, never the answer.
 */
export class ElasticCache {
  private readonly groups: Group[];
  readonly pressure: MemoryPressure;
  readonly resizes: CacheResize[] = [];
  private readonly sample: () => MemorySample;
  private readonly now: () => number;
  /** Arenas to keep whatever the pressure (those holding the floor's slots). */
  private readonly keep: number;

  private readonly p: Omit<ElasticParts, 'groups'>;

  constructor(parts: ElasticParts) {
    // the groups given are not kept: they hold the arenas, which must go when dropped
    const { groups, ...p } = parts;
    this.p = p;
    let base = 0;
    this.groups = groups.map((g) => {
      const out = { slots: g.slots, indexBase: base, bytes: g.bytes, arena: g.arena };
      base += g.slots;
      return out;
    });
    let k = 0;
    for (let held = 0; k < this.groups.length && held < p.floorSlots; k++) held += this.groups[k].slots;
    this.keep = Math.max(1, k);
    const step = Math.max(...this.groups.map((g) => g.bytes));
    this.pressure = new MemoryPressure(p.marginBytes, step);
    this.sample = p.sample ?? (() => ({ available: availableRam()?.bytes, psiSome10: memoryPressure() }));
    this.now = p.now ?? (() => performance.now());
  }

  /** Bytes of the cache's arenas now. */
  get bytes(): number {
    return this.groups.reduce((s, g) => s + (g.arena ? g.bytes : 0), 0);
  }

  /** Bytes of the cache's arenas when all are present (what it grows back to). */
  get maxBytes(): number {
    return this.groups.reduce((s, g) => s + g.bytes, 0);
  }

  get slots(): number {
    return this.groups.reduce((s, g) => s + (g.arena ? g.slots : 0), 0);
  }

  get arenas(): number {
    return this.groups.filter((g) => g.arena).length;
  }

  /**
   * At a safe point (no forward pass running): look at the machine's memory if it is time, and
   * shrink or grow. Returns the resize made, if any.
   */
  poll(): CacheResize | undefined {
    const now = this.now();
    if (!this.pressure.due(now)) return undefined;
    const d = this.pressure.decide(now, this.sample(), { canShrink: this.arenas > this.keep, canGrow: this.arenas < this.groups.length });
    if (!d) return undefined;
    return 'shrink' in d ? this.shrink(d.shrink, d.why) : this.grow(d.why);
  }

  /** Give back up to `n` arenas (the last present first), keeping the floor's. */
  shrink(n: number, why: string): CacheResize | undefined {
    const from = { bytes: this.bytes, slots: this.slots };
    // lookahead reads may still be landing in any slot
    this.p.cache.drain();
    let dropped = 0;
    for (let i = this.groups.length - 1; i >= this.keep && dropped < n; i--) if (this.giveBack(this.groups[i])) dropped++;
    if (!dropped) return undefined;
    // the last handle to each dropped memory is this thread's: collect it so the memory is unmapped now
    collectGarbage();
    return this.record(from, why);
  }

  /**
   * Drop one arena from everything that holds it. In a function of its own so that no local of
   * the caller still points at the arena when the collection runs.
   */
  private giveBack(g: Group): boolean {
    const a = g.arena;
    const { cache, kernels, net, readers, budget } = this.p;
    if (!a || cache.busyIn(a) > 0) return false;
    cache.removeArena(a);
    net.removeExpertArena?.(a);
    kernels.detach?.(a);
    readers?.detach(a);
    budget.release(a.capacity);
    g.arena = undefined;
    return true;
  }

  /** Take back one arena given back before. */
  grow(why: string): CacheResize | undefined {
    const g = this.groups.find((x) => !x.arena);
    // a session opened since may have taken the room
    if (!g || this.p.budget.remaining < g.bytes) return undefined;
    const from = { bytes: this.bytes, slots: this.slots };
    const { cache, kernels, net, readers, budget, stride } = this.p;
    const a = new Arena(g.bytes - ARENA_RESERVED, budget);
    try {
      // the same order as at open, so the arena holds the same allocations in the same room
      kernels.attach?.(a);
      const base = a.alloc(g.slots * stride, 4096);
      net.addExpertArena?.(a);
      readers?.attach(a);
      cache.addSlots(Array.from({ length: g.slots }, (_, k) => ({ arena: a, off: base + k * stride, index: g.indexBase + k })));
    } catch (e) {
      // each step undone on its own: one that fails too (a reader thread gone) must not keep the
      // budget charged or hide the first error
      for (const undo of [() => net.removeExpertArena?.(a), () => kernels.detach?.(a), () => readers?.detach(a)])
        try {
          undo();
        } catch {
          /* the first error is the one reported */
        }
      budget.release(a.capacity);
      throw e;
    }
    g.arena = a;
    return this.record(from, why);
  }

  private record(from: { bytes: number; slots: number }, why: string): CacheResize {
    const r: CacheResize = { at: new Date().toISOString(), fromBytes: from.bytes, toBytes: this.bytes, fromSlots: from.slots, toSlots: this.slots, why };
    this.resizes.push(r);
    if (this.resizes.length > KEEP) this.resizes.shift();
    return r;
  }
}
