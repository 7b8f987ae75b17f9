import * as fs from 'node:fs';
import { fromSystemError } from '../util/errors.js';

const CHUNK = 1 << 20;

function readAt(fd: number, buf: Buffer, offset: number, length: number, position: number): Promise<number> {
  return new Promise((resolve, reject) => fs.read(fd, buf, offset, length, position, (e, n) => (e ? reject(e) : resolve(n))));
}

/**
 * Sequential reads of a file's first bytes through a window of about a megabyte, refilled from the
 * descriptor as parsing moves on: a header is read in bounded chunks, never the whole file, and
 * each refill is an await, so parsing a large header gives the event loop its turn a megabyte at a
 * time. Nothing is read past `limit`, and no field past the file's end.
 */
export class FileCursor {
  private buf = Buffer.alloc(0);
  /** The file offset of buf[0], and how many bytes of buf are the file's. */
  private start = 0;
  private filled = 0;
  /** The file offset of the next byte to parse. */
  pos = 0;

  constructor(
    private readonly fd: number,
    private readonly file: string,
    /** The file's size (fstat). */
    readonly size: number,
    /** The most of the file a header may take. */
    readonly limit: number,
    /** The error for a field that runs past the end (`where` names the field). */
    private readonly short: (where: string, what: string) => Error,
    private readonly signal?: AbortSignal,
  ) {}

  /** Bytes between the next byte and the end of the file. */
  get remaining(): number {
    return this.size - this.pos;
  }

  /** Whether the next `n` bytes are in the window already (then no await is needed). */
  has(n: number): boolean {
    return this.pos + n <= this.start + this.filled;
  }

  /** Bring the next `n` bytes into the window; `n` is bounded by the caller against `remaining` first. */
  async fill(n: number, where: string): Promise<void> {
    if (this.pos + n > this.size) throw this.short(where, `runs past the end of the file (byte ${this.pos + n} of ${this.size})`);
    if (this.pos + n > this.limit) throw this.short(where, `ends past byte ${this.limit}, the most of the file a header may take`);
    this.signal?.throwIfAborted();
    const keep = this.start + this.filled - this.pos;
    const want = Math.min(Math.max(n, CHUNK), this.limit - this.pos);
    const next = want > this.buf.length ? Buffer.allocUnsafe(want) : this.buf;
    if (keep > 0) this.buf.copy(next, 0, this.pos - this.start, this.pos - this.start + keep);
    this.buf = next;
    this.start = this.pos;
    this.filled = Math.max(0, keep);
    while (this.filled < want) {
      let got: number;
      try {
        got = await readAt(this.fd, this.buf, this.filled, want - this.filled, this.start + this.filled);
      } catch (e) {
        throw fromSystemError(this.file, e);
      }
      if (got === 0) throw this.short(where, `the file ended at byte ${this.start + this.filled}, before the ${this.size} bytes it had when opened`);
      this.filled += got;
    }
  }

  /** The next `n` bytes (in the window: `has(n)` or `fill(n)` first), and move past them. */
  take(n: number): Buffer {
    const at = this.pos - this.start;
    this.pos += n;
    return this.buf.subarray(at, at + n);
  }

  /** The 64-bit value at the next byte, without moving past it (in the window: `has(8)` first). */
  peekU64(): bigint {
    return this.buf.readBigUInt64LE(this.pos - this.start);
  }

  u8(): number {
    return this.take(1)[0];
  }

  u32(): number {
    return this.take(4).readUInt32LE(0);
  }

  /** A 64-bit count, length or offset, as a bigint (the caller bounds it before making it a number). */
  u64(): bigint {
    return this.take(8).readBigUInt64LE(0);
  }
}
