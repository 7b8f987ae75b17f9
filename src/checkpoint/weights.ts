import { WasteError } from '../util/errors.js';
import { MXFP4_GROUP, decodeMxfp4 } from './mxfp4.js';
import type { SafetensorsSet } from './safetensors.js';

/** One tensor as a model sees it: a plain one, or a matrix packed as MXFP4 (`…weight_packed` + `…weight_scale`). */
export interface CheckpointTensor {
  /** Its name without the checkpoint's prefix. */
  name: string;
  shape: number[];
  /** Bytes it takes in the checkpoint (both halves of an MXFP4 pair). */
  sourceBytes: number;
  mxfp4: boolean;
  /** Where its rows are stored when that is not under its own name: a renamed tensor, or one expert's rows of stacked experts (from row `row0`). */
  from?: { full: string; row0: number };
}

/**
 * A checkpoint's tensors by the names a model binds: under a prefix (K3's `language_model.`), with
 * MXFP4-packed matrices (K3's routed experts) read as the f32 matrices they stand for. Tensors
 * outside the prefix (K3's vision tower) are listed apart.
 */
/** Where a Qwen3.5 release keeps its language model. */
const WRAPPED = 'model.language_model.';

export class CheckpointWeights {
  private readonly logical = new Map<string, CheckpointTensor>();
  /** Tensors outside the prefix, by their full names. */
  readonly outside: string[] = [];
  private bytes = new Uint8Array(0);
  private scales = new Uint8Array(0);

  constructor(
    readonly st: SafetensorsSet,
    readonly prefix: string,
  ) {
    for (const full of st.names()) {
      if (!full.startsWith(prefix)) {
        this.outside.push(full);
        continue;
      }
      const name = full.slice(prefix.length);
      const m = /^(.*)\.weight_(packed|scale)$/.exec(name);
      if (!m) {
        const t = st.info(full);
        this.logical.set(name, { name, shape: t.shape.length ? t.shape : [1], sourceBytes: t.bytes, mxfp4: false });
        continue;
      }
      if (m[2] === 'scale') continue;
      const packed = st.info(full);
      const scaleName = `${prefix}${m[1]}.weight_scale`;
      if (!st.has(scaleName)) throw new WasteError('E_FORMAT', `the checkpoint has ${full} but not ${scaleName}`);
      const scale = st.info(scaleName);
      const [rows, half] = packed.shape;
      if (packed.shape.length !== 2 || packed.dtype !== 'U8' || scale.dtype !== 'U8' || scale.shape.length !== 2 || scale.shape[0] !== rows || scale.shape[1] * MXFP4_GROUP !== 2 * half)
        throw new WasteError('E_FORMAT', `${full} [${packed.shape}] ${packed.dtype} and ${scaleName} [${scale.shape}] ${scale.dtype} are not an MXFP4 pair (U8 [R, N/2] and U8 [R, N/32])`);
      this.logical.set(`${m[1]}.weight`, { name: `${m[1]}.weight`, shape: [rows, 2 * half], sourceBytes: packed.bytes + scale.bytes, mxfp4: true });
    }
    for (const full of st.names()) {
      const m = /^(.*)\.weight_scale$/.exec(full);
      if (m && full.startsWith(prefix) && !st.has(`${m[1]}.weight_packed`)) throw new WasteError('E_FORMAT', `the checkpoint has ${full} but not ${m[1]}.weight_packed`);
    }
    if (prefix === '' && this.logical.has(`${WRAPPED}embed_tokens.weight`) && !this.logical.has('model.embed_tokens.weight')) this.unwrap();
  }

  /**
   * Qwen3.5's release layout, read as its text-only form: the language model's tensors under
   * `model.language_model.` named under `model.` (the head stays `lm_head.weight`), stacked experts
   * (`mlp.experts.gate_up_proj` [E, 2I, H], gate rows first; `mlp.experts.down_proj` [E, H, I]) as
   * one tensor per expert matrix, and what the text model does not run (the vision tower
   * `model.visual.*`, the MTP layer `mtp.*`) not listed.
   */
  private unwrap(): void {
    const entries = [...this.logical.values()];
    this.logical.clear();
    for (const t of entries) {
      if (t.name === 'lm_head.weight') this.logical.set(t.name, t);
      if (!t.name.startsWith(WRAPPED) || t.mxfp4) continue;
      const name = `model.${t.name.slice(WRAPPED.length)}`;
      const m = /^(.*\.mlp\.experts)\.(gate_up_proj|down_proj)(?:\.weight)?$/.exec(name);
      if (!m || t.shape.length !== 3) {
        this.logical.set(name, { ...t, name, from: { full: t.name, row0: 0 } });
        continue;
      }
      const [E, R, C] = t.shape;
      const half = R / 2;
      if (m[2] === 'gate_up_proj' && R % 2) throw new WasteError('E_FORMAT', `the checkpoint's ${t.name} [${t.shape}] has an odd number of rows (gate and up halves)`);
      const parts: [string, number, number][] = m[2] === 'gate_up_proj' ? [['gate_proj', 0, half], ['up_proj', half, half]] : [['down_proj', 0, R]];
      for (let e = 0; e < E; e++)
        for (const [kind, off, rows] of parts) {
          const en = `${m[1]}.${e}.${kind}.weight`;
          this.logical.set(en, { name: en, shape: [rows, C], sourceBytes: (t.sourceBytes * rows) / (E * R), mxfp4: false, from: { full: t.name, row0: e * R + off } });
        }
    }
  }

  /**
   * The prefix of the language model's tensors: what precedes `model.embed_tokens.weight`
   * (`language_model.` in a K3 checkpoint, nothing in Kimi-Linear's).
   */
  static prefixOf(st: SafetensorsSet): string {
    const embed = st.names().find((n) => n.endsWith('model.embed_tokens.weight') && (n === 'model.embed_tokens.weight' || n.endsWith('.model.embed_tokens.weight')));
    return embed ? embed.slice(0, -'model.embed_tokens.weight'.length) : '';
  }

  /** Every tensor under the prefix, by its name without it. */
  names(): string[] {
    return [...this.logical.keys()];
  }

  has(name: string): boolean {
    return this.logical.has(name);
  }

  info(name: string): CheckpointTensor {
    const t = this.logical.get(name);
    if (!t) throw new WasteError('E_FORMAT', `the checkpoint has no tensor ${this.prefix}${name}`);
    return t;
  }

  /** Rows [row0, row0 + n) as f32 (decoded exactly when packed) into `out`. */
  readRows(name: string, row0: number, n: number, out: Float32Array): void {
    const t = this.info(name);
    if (t.from) return this.st.readRows(t.from.full, t.from.row0 + row0, n, out);
    if (!t.mxfp4) return this.st.readRows(this.prefix + name, row0, n, out);
    const cols = t.shape[1];
    const base = this.prefix + name.slice(0, -'.weight'.length);
    if (this.bytes.length < (n * cols) / 2) this.bytes = new Uint8Array((n * cols) / 2);
    if (this.scales.length < (n * cols) / MXFP4_GROUP) this.scales = new Uint8Array((n * cols) / MXFP4_GROUP);
    this.st.readBytes(`${base}.weight_packed`, row0, n, this.bytes);
    this.st.readBytes(`${base}.weight_scale`, row0, n, this.scales);
    decodeMxfp4(this.bytes, this.scales, n, cols, out, `the checkpoint's ${base}.weight_packed`, row0);
  }

  /** The whole tensor as f32. */
  readF32(name: string): Float32Array {
    const t = this.info(name);
    const cols = t.shape[t.shape.length - 1];
    const rows = t.shape.reduce((a, d) => a * d, 1) / cols;
    const out = new Float32Array(rows * cols);
    const per = Math.max(1, Math.floor((64 << 20) / (cols * 4)));
    for (let r = 0; r < rows; r += per) {
      const k = Math.min(per, rows - r);
      this.readRows(name, r, k, out.subarray(r * cols, (r + k) * cols));
    }
    return out;
  }
}
