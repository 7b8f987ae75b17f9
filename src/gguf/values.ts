/**
 * GGUF metadata values: the 13 value types of the format (their numbers are part of it), and how a
 * value is held once read — numbers as numbers, 64-bit integers as bigints (exact), arrays of
 * numbers as typed arrays (their memory is their bytes), strings as strings.
 */
export type GgufScalarType = 'u8' | 'i8' | 'u16' | 'i16' | 'u32' | 'i32' | 'f32' | 'bool' | 'string' | 'u64' | 'i64' | 'f64';
export type GgufValueType = GgufScalarType | 'array';

/** The type numbers, in the file's order: index = number. */
export const VALUE_TYPES: readonly GgufValueType[] = ['u8', 'i8', 'u16', 'i16', 'u32', 'i32', 'f32', 'bool', 'string', 'array', 'u64', 'i64', 'f64'];

/** Bytes of one value of a fixed-size type (a string's length prefix for strings, an array's type and count for arrays). */
export const FIXED_BYTES: Record<GgufValueType, number> = { u8: 1, i8: 1, u16: 2, i16: 2, u32: 4, i32: 4, f32: 4, bool: 1, string: 8, array: 12, u64: 8, i64: 8, f64: 8 };

export type GgufArray =
  | { of: 'u8'; values: Uint8Array }
  | { of: 'i8'; values: Int8Array }
  | { of: 'u16'; values: Uint16Array }
  | { of: 'i16'; values: Int16Array }
  | { of: 'u32'; values: Uint32Array }
  | { of: 'i32'; values: Int32Array }
  | { of: 'f32'; values: Float32Array }
  | { of: 'f64'; values: Float64Array }
  | { of: 'u64'; values: BigUint64Array }
  | { of: 'i64'; values: BigInt64Array }
  | { of: 'bool'; values: boolean[] }
  | { of: 'string'; values: string[] }
  | { of: 'array'; values: GgufArray[] };

export type GgufValue =
  | { type: 'u8' | 'i8' | 'u16' | 'i16' | 'u32' | 'i32' | 'f32' | 'f64'; value: number }
  | { type: 'u64' | 'i64'; value: bigint }
  | { type: 'bool'; value: boolean }
  | { type: 'string'; value: string }
  | { type: 'array'; value: GgufArray };
