import type { Arena } from '../memory/arena.js';
import { Fmt, fmtName } from './format.js';

/**
 * A resident trunk tensor, viewed as a matrix of `rows` × `cols` (cols = the last dimension).
 * Its bytes live in an arena exactly as they are stored on disk; kernels read them in place.
 */
export interface Tensor {
  name: string;
  fmt: number;
  shape: number[];
  rows: number;
  cols: number;
  /** Quantization group (Q8G/Q4G), else 0. */
  group: number;
  /** Groups per row (Q8G/Q4G), else 0. */
  groups: number;
  /** Stored bytes per row of the payload. */
  rowBytes: number;
  arena: Arena;
  /** Byte offset of the payload in the arena. */
  off: number;
  /** Byte offset of the f16 group scales in the arena (Q8G/Q4G), else -1. */
  scaleOff: number;
  /** Views over the arena; which ones are set depends on fmt. */
  f32?: Float32Array;
  f16?: Uint16Array;
  q?: Uint8Array;
  scales?: Uint16Array;
}

/** Payload and scale sizes of a tensor as stored. */
export function storedSizes(fmt: number, rows: number, cols: number, group: number): { rowBytes: number; payload: number; scaleBytes: number; groups: number } {
  switch (fmt) {
    case Fmt.F32:
      return { rowBytes: cols * 4, payload: rows * cols * 4, scaleBytes: 0, groups: 0 };
    case Fmt.F16:
      return { rowBytes: cols * 2, payload: rows * cols * 2, scaleBytes: 0, groups: 0 };
    case Fmt.Q8G:
    case Fmt.Q4G: {
      const groups = Math.ceil(cols / group);
      const rowBytes = fmt === Fmt.Q8G ? groups * group : (groups * group) / 2;
      return { rowBytes, payload: rows * rowBytes, scaleBytes: rows * groups * 2, groups };
    }
    default:
      throw new Error(`storedSizes: ${fmtName(fmt)}`);
  }
}

export function rowsCols(shape: number[]): { rows: number; cols: number } {
  const cols = shape[shape.length - 1];
  let rows = 1;
  for (let i = 0; i < shape.length - 1; i++) rows *= shape[i];
  return { rows, cols };
}

export function makeViews(t: Tensor): void {
  const { payload, scaleBytes } = storedSizes(t.fmt, t.rows, t.cols, t.group);
  if (t.fmt === Fmt.F32) t.f32 = t.arena.f32(t.off, payload / 4);
  else if (t.fmt === Fmt.F16) t.f16 = t.arena.u16(t.off, payload / 2);
  else {
    t.q = t.arena.u8(t.off, payload);
    t.scales = t.arena.u16(t.scaleOff, scaleBytes / 2);
  }
}
