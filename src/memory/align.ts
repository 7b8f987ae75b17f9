/** Bytes an allocation of `n` takes at `align`-byte alignment (64 by default, a cache line). */
export function aligned(n: number, align = 64): number {
  return Math.ceil(n / align) * align;
}
