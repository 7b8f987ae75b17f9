import type { Arena } from '../../memory/arena.js';

/** Where a family's working buffers come from: an arena, or a counter that only sizes them. */
export interface Allocator {
  f32(n: number): Float32Array;
  i32(n: number): Int32Array;
}

/** Buffers in an arena, each 64-byte aligned. */
export function arenaAllocator(a: Arena): Allocator {
  return { f32: (n) => a.allocF32(n), i32: (n) => a.i32(a.alloc(4 * n, 64), n) };
}

/** Bytes the buffers `make` asks for take in an arena (each allocation 64-byte aligned, as the arena does). */
export function allocatedBytes(make: (m: Allocator) => void): number {
  let n = 0;
  const count = (bytes: number, align = 64) => (n = Math.ceil(n / align) * align + bytes);
  make({ f32: (k) => (count(4 * k), new Float32Array(0)), i32: (k) => (count(4 * k), new Int32Array(0)) });
  return n;
}
