/**
 * Load one byte from each 4 KiB page of `bytes` and return their XOR (returned so the loads are
 * not optimised away). On virtual machines with shadow paging (this repo's Firecracker/PVM test
 * machine) the first CPU access to a page that an O_DIRECT read has just filled costs ~6 µs, where
 * later accesses cost nothing extra; touching is how a caller chooses when that one-time cost is paid.
 */
export function touchPages(bytes: Uint8Array): number {
  let x = 0;
  for (let o = 0; o < bytes.length; o += 4096) x ^= bytes[o];
  return x;
}
