/**
 * The GGUF fuzz cases' handler (run in test/fuzz-child.ts): read a damaged file's header; one that
 * is accepted must satisfy every invariant the reader promises, checked here apart from the
 * reader's own code (anything else is `invalid`).
 */
import { GGML_TYPES } from '../src/gguf/ggml-types.js';
import { readGgufHeader } from '../src/gguf/header.js';
import type { GgufArray, GgufValue } from '../src/gguf/values.js';
import { type CaseResult, refusal } from './fuzz-harness.js';

const TYPED: Record<string, unknown> = { u8: Uint8Array, i8: Int8Array, u16: Uint16Array, i16: Int16Array, u32: Uint32Array, i32: Int32Array, f32: Float32Array, f64: Float64Array, u64: BigUint64Array, i64: BigInt64Array };

function arrayFault(a: GgufArray, depth: number): string | undefined {
  if (depth > 4) return 'arrays nested past 4';
  if (a.of in TYPED) return a.values instanceof (TYPED[a.of] as typeof Uint8Array) ? undefined : `an array of ${a.of} held as ${a.values.constructor.name}`;
  for (const v of a.values as unknown[]) {
    if (a.of === 'string' && typeof v !== 'string') return 'a string array holds a non-string';
    if (a.of === 'bool' && typeof v !== 'boolean') return 'a bool array holds a non-bool';
    if (a.of === 'array') {
      const f = arrayFault(v as GgufArray, depth + 1);
      if (f) return f;
    }
  }
  return undefined;
}

function valueFault(v: GgufValue): string | undefined {
  switch (v.type) {
    case 'string':
      return typeof v.value === 'string' ? undefined : 'a string that is not one';
    case 'bool':
      return typeof v.value === 'boolean' ? undefined : 'a bool that is not one';
    case 'u64':
    case 'i64':
      return typeof v.value === 'bigint' ? undefined : `a ${(v as { type: string }).type} that is not a bigint`;
    case 'array':
      return arrayFault(v.value, 1);
    default:
      return typeof v.value === 'number' ? undefined : `a ${(v as { type: string }).type} that is not a number`;
  }
}

export async function ggufCase({ file }: { file: string }): Promise<CaseResult> {
  let h;
  try {
    h = await readGgufHeader(file);
  } catch (e) {
    return refusal(e);
  }
  const bad = (why: string): CaseResult => ({ outcome: 'invalid', detail: why });
  if (h.version !== 2 && h.version !== 3) return bad(`version ${h.version}`);
  const a = h.alignment;
  if (!(Number.isInteger(a) && a >= 8 && (a & (a - 1)) === 0)) return bad(`alignment ${a}`);
  if (h.dataStart % a !== 0) return bad(`the data starts at ${h.dataStart}, not aligned to ${a}`);
  if (h.tensors.length && h.dataStart > h.fileBytes) return bad(`the data starts at ${h.dataStart}, past the file's ${h.fileBytes} bytes`);
  for (const [k, v] of h.metadata) {
    if (!/^[\x20-\x7e]{1,65535}$/.test(k)) return bad(`key ${JSON.stringify(k.slice(0, 40))}`);
    const f = valueFault(v);
    if (f) return bad(`${JSON.stringify(k)}: ${f}`);
  }
  const names = new Set<string>();
  const spans: [number, number, string][] = [];
  for (const t of h.tensors) {
    const where = JSON.stringify(t.name);
    if (!t.name || Buffer.byteLength(t.name) > 64 || names.has(t.name)) return bad(`tensor name ${where}`);
    names.add(t.name);
    if (!(t.dims.length >= 1 && t.dims.length <= 4 && t.dims.every((d) => Number.isSafeInteger(d) && d >= 1))) return bad(`${where}: dimensions ${t.dims}`);
    const elements = t.dims.reduce((x, y) => x * y, 1);
    if (elements !== t.elements || !Number.isSafeInteger(elements)) return bad(`${where}: ${t.elements} elements for ${t.dims}`);
    const type = GGML_TYPES.get(t.type.id);
    if (!type || type.name !== t.type.name) return bad(`${where}: type ${t.type.id}`);
    if (t.dims[0] % type.blockElements !== 0) return bad(`${where}: a row of ${t.dims[0]} ${type.name}`);
    if (t.bytes !== (elements / type.blockElements) * type.blockBytes) return bad(`${where}: ${t.bytes} bytes`);
    if (t.offset % a !== 0 || t.start !== h.dataStart + t.offset) return bad(`${where}: offset ${t.offset}, start ${t.start}`);
    if (t.start + t.bytes > h.fileBytes) return bad(`${where}: ends at ${t.start + t.bytes}, past the file's ${h.fileBytes} bytes`);
    spans.push([t.start, t.start + t.bytes, t.name]);
  }
  spans.sort((x, y) => x[0] - y[0]);
  for (let i = 1; i < spans.length; i++) if (spans[i - 1][1] > spans[i][0]) return bad(`${spans[i - 1][2]} and ${spans[i][2]} overlap`);
  return { outcome: 'ok', detail: `${h.metadata.size} keys, ${h.tensors.length} tensors` };
}
