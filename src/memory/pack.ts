import { ARENA_RESERVED, Arena, MAX_ARENA_BYTES } from './arena.js';
import type { MemoryBudget } from './budget.js';
import { unsupported } from '../util/errors.js';

/**
 * Pack groups of allocations into as few arenas as possible, in order, never splitting a group:
 * what one kernel call touches (a layer's weights and its scratch) lives in one memory. Each arena
 * also gets `perArena` bytes (its scratch). `arenaBytes` caps an arena below the 4 GiB a memory
 * can address (tests use it to exercise many arenas on a small model). Returns the arenas and,
 * per group, its arena.
 */
export function packGroups(sizes: number[], perArena: number, arenaBytes = MAX_ARENA_BYTES, budget?: MemoryBudget): { arenas: Arena[]; of: Arena[] } {
  const limit = Math.min(arenaBytes, MAX_ARENA_BYTES) - ARENA_RESERVED - perArena;
  const plans: { bytes: number; groups: number[] }[] = [];
  let cur: { bytes: number; groups: number[] } | undefined;
  sizes.forEach((bytes, g) => {
    if (bytes > limit) throw unsupported(`a layer's resident weights (${bytes} bytes) must fit in one memory of ${limit} bytes`);
    if (!cur || cur.bytes + bytes > limit) plans.push((cur = { bytes: 0, groups: [] }));
    cur.bytes += bytes;
    cur.groups.push(g);
  });
  const arenas: Arena[] = [];
  const of: Arena[] = new Array(sizes.length);
  for (const p of plans) {
    const a = new Arena(p.bytes + perArena, budget);
    arenas.push(a);
    for (const g of p.groups) of[g] = a;
  }
  return { arenas, of };
}

/** Bytes an allocation of `n` takes at 64-byte alignment. */
export function aligned(n: number, align = 64): number {
  return Math.ceil(n / align) * align;
}
