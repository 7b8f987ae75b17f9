import type { CheckpointWeights } from '../checkpoint/weights.js';
import { Fmt } from '../container/format.js';
import { encodeF16 } from '../util/f16.js';
import { type RowChunk, TrunkWriter, type TrunkIndexEntry } from '../container/write.js';
import { quantizeRows } from '../quant/trunk.js';
import { WasteError } from '../util/errors.js';
import { TRUNK_GROUP, type TrunkTensorPlan } from './plan.js';

/** Rows read and quantized at a time: the embedding table (1.5 GB in f32) is never whole in memory. */
const CHUNK_VALUES = 4 << 20;

/**
 * Write trunk.bin: every non-expert tensor, in name order, in its planned format. Returns the
 * trunk index for the manifest. `file` is written in place; the caller renames it when done.
 */
export async function writeTrunk(
  st: CheckpointWeights,
  plan: TrunkTensorPlan[],
  file: string,
  onTensor: (sourceBytes: number) => void,
  pause: () => Promise<void> = async () => {},
): Promise<TrunkIndexEntry[]> {
  const w = new TrunkWriter(file);
  try {
    for (const t of plan) {
      await pause();
      const cols = t.shape[t.shape.length - 1];
      const rows = cols ? t.shape.reduce((a, d) => a * d, 1) / cols : 0;
      const per = Math.max(1, Math.floor(CHUNK_VALUES / Math.max(1, cols)));
      const buf = new Float32Array(Math.min(rows, per) * cols);
      const what = `the checkpoint's ${t.name}`;
      // a chunk at a time, the event loop's turn between chunks: the embedding table is seconds of work
      await w.addRowsAsync(t.name, t.fmt, t.shape, chunks(), TRUNK_GROUP);
      onTensor(t.sourceBytes);

      async function* chunks(): AsyncGenerator<RowChunk> {
        for (let r = 0; r < rows; r += per) {
          if (r) await pause();
          const n = Math.min(per, rows - r);
          const x = buf.subarray(0, n * cols);
          t.read(r, n, x);
          if (t.fmt === Fmt.F32) {
            for (let i = 0; i < x.length; i++)
              if (!Number.isFinite(x[i])) throw new WasteError('E_FORMAT', `${what} holds a non-finite value at index ${r * cols + i}`);
            yield { payload: new Uint8Array(x.buffer, x.byteOffset, x.byteLength).slice() };
          } else if (t.fmt === Fmt.F16) {
            const h = new Uint16Array(x.length);
            for (let i = 0; i < x.length; i++) {
              h[i] = encodeF16(x[i]);
              if ((h[i] & 0x7c00) === 0x7c00) throw new WasteError('E_FORMAT', `${what} holds ${x[i]} at index ${r * cols + i}, which F16 cannot store`);
            }
            yield { payload: new Uint8Array(h.buffer) };
          } else {
            const fmt = t.fmt === Fmt.Q8G ? Fmt.Q8G : Fmt.Q4G;
            const { payload, scales } = quantizeRows(fmt, x, n, cols, TRUNK_GROUP, rowsLabel(what, r));
            yield { payload, scales };
          }
        }
      }
    }
    w.close();
    return w.index;
  } catch (e) {
    w.abandon();
    throw e;
  }
}

/** Errors name the row within the tensor, not within the chunk. */
function rowsLabel(what: string, row0: number): string {
  return row0 ? `${what} (from row ${row0})` : what;
}
