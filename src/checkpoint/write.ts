import * as fs from 'node:fs';
import * as path from 'node:path';
import { fromSystemError } from '../util/errors.js';
import type { SafetensorsSet } from './safetensors.js';

/** A tensor to write: its dtype, shape and raw little-endian bytes. */
export interface RawTensor {
  name: string;
  dtype: 'BF16' | 'F16' | 'F32' | 'U8' | 'F8_E4M3' | 'I32';
  shape: number[];
  data: Uint8Array;
}

/**
 * Write tensors as safetensors: one `model.safetensors`, or `shards` files named
 * `model-0000i-of-0000n.safetensors` with a `model.safetensors.index.json`.
 */
export function writeSafetensors(dir: string, tensors: RawTensor[], shards = 1): void {
  const per = Math.ceil(tensors.length / shards);
  const weightMap: Record<string, string> = {};
  for (let s = 0; s < shards; s++) {
    const part = tensors.slice(s * per, (s + 1) * per);
    const file = shards === 1 ? 'model.safetensors' : `model-${String(s + 1).padStart(5, '0')}-of-${String(shards).padStart(5, '0')}.safetensors`;
    const header: Record<string, unknown> = { __metadata__: { format: 'pt' } };
    let off = 0;
    for (const t of part) {
      header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [off, off + t.data.length] };
      off += t.data.length;
      weightMap[t.name] = file;
    }
    let json = Buffer.from(JSON.stringify(header), 'utf8');
    const pad = (8 - (json.length % 8)) % 8;
    json = Buffer.concat([json, Buffer.alloc(pad, 0x20)]);
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(json.length));
    const p = path.join(dir, file);
    try {
      const fd = fs.openSync(p, 'w');
      try {
        fs.writeSync(fd, len);
        fs.writeSync(fd, json);
        for (const t of part) fs.writeSync(fd, t.data);
      } finally {
        fs.closeSync(fd);
      }
    } catch (e) {
      throw fromSystemError(p, e);
    }
  }
  if (shards > 1)
    fs.writeFileSync(path.join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: {}, weight_map: weightMap }, null, 1) + '\n');
}

/** f32 values → bf16 bytes, rounding to nearest even. */
export function toBf16(values: Float32Array): Uint8Array {
  const u = new Uint32Array(values.buffer, values.byteOffset, values.length);
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) {
    const x = u[i];
    out[i] = (x + 0x7fff + ((x >>> 16) & 1)) >>> 16;
  }
  return new Uint8Array(out.buffer);
}

/**
 * Copy tensors of a set, byte for byte, into one safetensors file at `file` (written to
 * `file.tmp`, fsynced and renamed: it exists only whole). Chunked: a 2 GB embedding is never whole
 * in memory.
 */
export function copyTensors(st: SafetensorsSet, names: string[], file: string): void {
  const { len, json } = copyHeader(st, names);
  const tmp = `${file}.tmp`;
  try {
    const fd = fs.openSync(tmp, 'w');
    try {
      let pos = 0;
      const put = (b: Uint8Array) => {
        let done = 0;
        while (done < b.length) done += fs.writeSync(fd, b, done, b.length - done, pos + done);
        pos += b.length;
      };
      put(len);
      put(json);
      const chunk = new Uint8Array(16 << 20);
      for (const name of names) {
        const bytes = st.info(name).bytes;
        for (let s = 0; s < bytes; s += chunk.length) {
          const part = chunk.subarray(0, Math.min(chunk.length, bytes - s));
          st.readRaw(name, s, part);
          put(part);
        }
      }
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, file);
  } catch (e) {
    throw fromSystemError(file, e);
  }
}

/** The file `copyTensors` writes for these tensors, in bytes (its header and theirs): known before it is written. */
export function copiedBytes(st: SafetensorsSet, names: string[]): number {
  const { len, json } = copyHeader(st, names);
  return len.length + json.length + names.reduce((a, n) => a + st.info(n).bytes, 0);
}

function copyHeader(st: SafetensorsSet, names: string[]): { len: Buffer; json: Buffer } {
  const header: Record<string, unknown> = { __metadata__: { format: 'pt' } };
  let off = 0;
  for (const name of names) {
    const t = st.info(name);
    header[name] = { dtype: t.dtype, shape: t.shape, data_offsets: [off, off + t.bytes] };
    off += t.bytes;
  }
  let json = Buffer.from(JSON.stringify(header), 'utf8');
  json = Buffer.concat([json, Buffer.alloc((8 - (json.length % 8)) % 8, 0x20)]);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  return { len, json };
}
