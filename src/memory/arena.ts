import { WasteError } from '../util/errors.js';
import { type MemoryBudget, UNLIMITED_BUDGET } from './budget.js';

/**
 * A bump allocator over one shared WebAssembly.Memory. Weights, expert-cache slots, session state
 * and scratch all live in arenas, so kernels (and worker threads) address them in place and
 * O_DIRECT reads land in them at 4 KiB-aligned offsets (a memory's base is 64 KiB-aligned). An
 * arena grows in place up to 4 GiB; views made before a growth stay valid.
 */
export const WASM_PAGE = 65536;
export const MAX_ARENA_BYTES = 65536 * WASM_PAGE; // 4 GiB, the most one memory can address
/** The kernel module keeps its static data (math tables) below this offset in every arena. */
export const ARENA_RESERVED = WASM_PAGE;

const owners = new WeakMap<ArrayBufferLike, Arena>();

/** The arena a typed array views, if any. */
export function arenaOf(view: ArrayBufferView): Arena | undefined {
  return owners.get(view.buffer);
}

export class Arena {
  readonly memory: WebAssembly.Memory;
  readonly id: number;
  private top = ARENA_RESERVED;
  private pages: number;
  private static nextId = 0;

  /**
   * `capacityBytes` is reserved now; the arena can grow later (to 4 GiB) if asked for more. Every
   * page, now and later, is charged to `budget`.
   */
  constructor(capacityBytes: number, readonly budget: MemoryBudget = UNLIMITED_BUDGET) {
    const want = ARENA_RESERVED + capacityBytes;
    if (!(capacityBytes >= 0) || want > MAX_ARENA_BYTES)
      throw new WasteError('E_ARG', `arena size ${capacityBytes} is outside 0..${MAX_ARENA_BYTES - ARENA_RESERVED}`);
    this.pages = Math.ceil(want / WASM_PAGE);
    budget.charge(this.pages * WASM_PAGE, 'a new memory arena');
    try {
      this.memory = new WebAssembly.Memory({ initial: this.pages, maximum: 65536, shared: true });
    } catch (e) {
      throw new WasteError('E_IO', `could not reserve ${this.pages * WASM_PAGE} bytes of memory: ${(e as Error).message}`);
    }
    this.id = Arena.nextId++;
  }

  get capacity(): number {
    return this.pages * WASM_PAGE;
  }

  get used(): number {
    return this.top;
  }

  /** Bytes that can still be allocated, counting growth up to 4 GiB. */
  get room(): number {
    return MAX_ARENA_BYTES - this.top;
  }

  /** Bytes that can be allocated without growing. */
  get slack(): number {
    return this.capacity - this.top;
  }

  private buffer(): ArrayBufferLike {
    const b = this.memory.buffer;
    owners.set(b, this);
    return b;
  }

  /** Reserve `n` bytes at an offset aligned to `align` (a power of two), growing if needed. */
  alloc(n: number, align = 64): number {
    const off = Math.ceil(this.top / align) * align;
    const end = off + n;
    if (end > MAX_ARENA_BYTES) throw new WasteError('E_STATE', `arena ${this.id} cannot hold ${n} more bytes (it is limited to 4 GiB)`);
    if (end > this.capacity) {
      const pages = Math.ceil(end / WASM_PAGE);
      this.budget.charge((pages - this.pages) * WASM_PAGE, `${n} more bytes in arena ${this.id}`);
      try {
        this.memory.grow(pages - this.pages);
      } catch (e) {
        throw new WasteError('E_IO', `could not grow memory to ${pages * WASM_PAGE} bytes: ${(e as Error).message}`);
      }
      this.pages = pages;
    }
    this.top = end;
    return off;
  }

  u8(off: number, n: number): Uint8Array {
    return new Uint8Array(this.buffer(), off, n);
  }
  f32(off: number, n: number): Float32Array {
    return new Float32Array(this.buffer(), off, n);
  }
  i32(off: number, n: number): Int32Array {
    return new Int32Array(this.buffer(), off, n);
  }
  u16(off: number, n: number): Uint16Array {
    return new Uint16Array(this.buffer(), off, n);
  }

  /** A new zeroed f32 buffer in this arena. */
  allocF32(n: number): Float32Array {
    return this.f32(this.alloc(n * 4, 64), n);
  }
}
