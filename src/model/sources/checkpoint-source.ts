import { CheckpointWeights } from '../../checkpoint/weights.js';
import { Fmt } from '../../container/format.js';
import { type Tensor, makeViews } from '../../container/tensor.js';
import type { Arena } from '../../memory/arena.js';
import { aligned } from '../../memory/align.js';
import { WasteError } from '../../util/errors.js';
import type { WeightSource } from './source.js';

/**
 * Weights straight from a HuggingFace checkpoint, every tensor loaded as f32: the unquantized
 * reference that quality is measured against. Experts come as dense matrices.
 */
export class CheckpointSource implements WeightSource {
  readonly label = 'the checkpoint';
  readonly denseExperts = true;

  constructor(private readonly st: CheckpointWeights) {}

  unprefixed(): WeightSource {
    return new CheckpointSource(new CheckpointWeights(this.st.st, '', this.st.stacked));
  }

  has(name: string): boolean {
    return this.st.has(name);
  }

  shape(name: string): number[] {
    return this.st.info(name).shape;
  }

  residentBytes(name: string): number {
    return aligned(this.shape(name).reduce((a, d) => a * d, 1) * 4);
  }

  loadMatrix(name: string, arena: Arena): Tensor {
    const shape = this.shape(name);
    const cols = shape[shape.length - 1];
    const rows = shape.reduce((a, d) => a * d, 1) / cols;
    const off = arena.alloc(rows * cols * 4, 64);
    const t: Tensor = { name, fmt: Fmt.F32, shape, rows, cols, group: 0, groups: 0, rowBytes: cols * 4, arena, off, scaleOff: -1 };
    makeViews(t);
    const chunk = Math.max(1, Math.floor((32 << 20) / (cols * 4)));
    for (let r = 0; r < rows; r += chunk) {
      const n = Math.min(chunk, rows - r);
      this.st.readRows(name, r, n, t.f32!.subarray(r * cols, (r + n) * cols));
    }
    for (let i = 0; i < t.f32!.length; i++)
      if (!Number.isFinite(t.f32![i])) throw new WasteError('E_FORMAT', `the checkpoint's ${this.st.prefix}${name} holds a non-finite value at index ${i}`);
    return t;
  }

  readVector(name: string, out: Float32Array): void {
    const shape = this.shape(name);
    const cols = shape.length ? shape[shape.length - 1] : 1;
    this.st.readRows(name, 0, out.length / cols, out);
    for (let i = 0; i < out.length; i++)
      if (!Number.isFinite(out[i])) throw new WasteError('E_FORMAT', `the checkpoint's ${this.st.prefix}${name} holds a non-finite value at index ${i}`);
  }

  embedRow(token: number, dst: Float32Array): void {
    this.st.readRows('model.embed_tokens.weight', token, 1, dst);
  }
}
