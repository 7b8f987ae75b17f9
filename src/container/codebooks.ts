import { f16 } from '../util/f16.js';
import { WasteError } from '../util/errors.js';
import { CODEBOOK_HEADER_BYTES, type ExpertQuant, MAGIC_CODEBOOK } from './format.js';

export const CODEBOOKS = 'codebooks.bin';

/**
 * codebooks.bin: a sequence of WCBK records (16-byte header, then entries × vec_dim f16 values,
 * entry-major). Decoded once at open into f32 [book][entry][dim].
 */
export interface Codebooks {
  count: number;
  entries: number;
  vecDim: number;
  /** [count][entries][vecDim] */
  values: Float32Array;
}

export function parseCodebooks(bytes: Uint8Array, q: ExpertQuant): Codebooks {
  const recBytes = CODEBOOK_HEADER_BYTES + q.entries * q.vecDim * 2;
  if (bytes.length % recBytes !== 0)
    throw new WasteError(
      'E_FORMAT',
      `${CODEBOOKS}: ${bytes.length} bytes is not a whole number of ${recBytes}-byte codebooks (${q.entries} entries × ${q.vecDim} dims)`,
    );
  const count = bytes.length / recBytes;
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  const per = q.entries * q.vecDim;
  const values = new Float32Array(count * per);
  for (let b = 0; b < count; b++) {
    const base = b * recBytes;
    const where = `${CODEBOOKS}: codebook ${b} (byte ${base})`;
    if (dv.getUint32(base, true) !== MAGIC_CODEBOOK) throw new WasteError('E_FORMAT', `${where} has a bad magic number`);
    const id = dv.getUint16(base + 4, true);
    if (id !== (b & 0xffff)) throw new WasteError('E_FORMAT', `${where} says it is codebook ${id}`);
    const vecDim = dv.getUint8(base + 7);
    const entries = dv.getUint32(base + 8, true);
    if (vecDim !== q.vecDim || entries !== q.entries)
      throw new WasteError(
        'E_FORMAT',
        `${where} has ${entries} entries of ${vecDim} dims; the manifest says ${q.entries} of ${q.vecDim}`,
      );
    for (let i = 0; i < per; i++) {
      const h = dv.getUint16(base + CODEBOOK_HEADER_BYTES + 2 * i, true);
      if ((h & 0x7c00) === 0x7c00) throw new WasteError('E_FORMAT', `${where} holds a non-finite value at entry ${Math.floor(i / q.vecDim)}`);
      values[b * per + i] = f16(h);
    }
  }
  return { count, entries: q.entries, vecDim: q.vecDim, values };
}
