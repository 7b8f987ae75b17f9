import { WasteError } from '../util/errors.js';

/**
 * A bump allocator over one shared WebAssembly.Memory. Weights, expert-cache slots and scratch
 * all live in arenas, so kernels (and worker threads) can address them in place and O_DIRECT
 * reads can land in them at 4 KiB-aligned offsets (a memory's base is 64 KiB-aligned).
 */
export const WASM_PAGE = 65536;
export const MAX_ARENA_BYTES = 65536 * WASM_PAGE; // 4 GiB, the most one memory can address

export class Arena {
  readonly memory: WebAssembly.Memory;
  readonly capacity: number;
  readonly id: number;
  private top = 0;
  private static nextId = 0;

  constructor(capacityBytes: number) {
    if (!(capacityBytes > 0) || capacityBytes > MAX_ARENA_BYTES)
      throw new WasteError('E_ARG', `arena size ${capacityBytes} is outside 1..${MAX_ARENA_BYTES}`);
    const pages = Math.ceil(capacityBytes / WASM_PAGE);
    try {
      this.memory = new WebAssembly.Memory({ initial: pages, maximum: 65536, shared: true });
    } catch (e) {
      throw new WasteError('E_IO', `could not reserve ${pages * WASM_PAGE} bytes of memory: ${(e as Error).message}`);
    }
    this.capacity = pages * WASM_PAGE;
    this.id = Arena.nextId++;
  }

  /** The whole memory as bytes. Shared memories never detach, so this view stays valid. */
  get bytes(): Uint8Array {
    return new Uint8Array(this.memory.buffer, 0, this.capacity);
  }

  get used(): number {
    return this.top;
  }

  get free(): number {
    return this.capacity - this.top;
  }

  /** Reserve `n` bytes at an offset aligned to `align` (a power of two); returns the offset. */
  alloc(n: number, align = 64): number {
    const off = alignUp(this.top, align);
    if (off + n > this.capacity)
      throw new WasteError('E_STATE', `arena ${this.id} is full: ${n} bytes asked, ${this.capacity - off} left`);
    this.top = off + n;
    return off;
  }

  u8(off: number, n: number): Uint8Array {
    return new Uint8Array(this.memory.buffer, off, n);
  }
  f32(off: number, n: number): Float32Array {
    return new Float32Array(this.memory.buffer, off, n);
  }
  u16(off: number, n: number): Uint16Array {
    return new Uint16Array(this.memory.buffer, off, n);
  }
  i8(off: number, n: number): Int8Array {
    return new Int8Array(this.memory.buffer, off, n);
  }
}

export function alignUp(n: number, align: number): number {
  return Math.ceil(n / align) * align;
}
