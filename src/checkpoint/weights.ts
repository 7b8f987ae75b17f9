import { WasteError } from '../util/errors.js';
import { FP8_BLOCK, decodeFp8 } from './fp8.js';
import { decodeInt4 } from './int4.js';
import { MXFP4_GROUP, decodeMxfp4 } from './mxfp4.js';
import type { SafetensorsSet, TensorInfo } from './safetensors.js';
import type { StackedExperts, StackedSlice } from './stacked.js';

/** One tensor as a model sees it: a plain one, or a matrix packed as MXFP4 (`…weight_packed` + `…weight_scale`). */
export interface CheckpointTensor {
  /** Its name without the checkpoint's prefix. */
  name: string;
  shape: number[];
  /** Bytes it takes in the checkpoint (both halves of an MXFP4 pair). */
  sourceBytes: number;
  mxfp4: boolean;
  /** Where its rows are stored when that is not under its own name: a renamed tensor, or one expert's rows of Qwen3.5's stacked experts (from row `row0`). */
  from?: { full: string; row0: number };
  /** An F8_E4M3 matrix with its 128 × 128 block scales (`…weight_scale_inv`, F32). */
  fp8?: boolean;
  /** A compressed-tensors pack-quantized INT4 matrix (I32 `…weight_packed`, `…weight_scale`, `…weight_shape`): its group size. */
  int4Group?: number;
  /** One expert's matrix read out of a tensor of the layer's stacked experts (gpt-oss). */
  slice?: StackedSlice;
}

/** Where a Qwen3.5 release keeps its language model. */
const WRAPPED = 'model.language_model.';

/**
 * A checkpoint's tensors by the names a model binds: under a prefix (K3's `language_model.`), with
 * MXFP4-packed matrices (K3's routed experts) read as the f32 matrices they stand for. Tensors
 * outside the prefix (K3's vision tower) are listed apart.
 */
export class CheckpointWeights {
  private readonly logical = new Map<string, CheckpointTensor>();
  /** Tensors outside the prefix, by their full names. */
  readonly outside: string[] = [];
  private bytes = new Uint8Array(0);
  private scales = new Uint8Array(0);
  /** The last dense stacked expert read whole ([C][R] in × out), for the slices of it that follow. */
  private slab: { source: string; expert: number; data: Float32Array } | undefined;

  constructor(
    readonly st: SafetensorsSet,
    readonly prefix: string,
    /** How the family stacks its routed experts, if it does (gpt-oss): each expert's matrices are then listed by their own names. */
    readonly stacked?: StackedExperts,
  ) {
    for (const full of st.names()) {
      if (!full.startsWith(prefix)) {
        this.outside.push(full);
        continue;
      }
      const name = full.slice(prefix.length);
      if (stacked && this.addStacked(name, stacked)) continue;
      if (name.endsWith('.weight_scale_inv')) {
        if (!st.has(full.slice(0, -'_scale_inv'.length))) throw new WasteError('E_FORMAT', `the checkpoint has ${full} but not ${full.slice(0, -'_scale_inv'.length)}`);
        continue;
      }
      const t8 = st.info(full);
      if (t8.dtype === 'F8_E4M3') {
        const scaleName = `${full}_scale_inv`;
        if (!st.has(scaleName)) throw new WasteError('E_FORMAT', `the checkpoint has ${full} stored as F8_E4M3 but not ${scaleName}`);
        const scale = st.info(scaleName);
        const [rows, cols] = t8.shape;
        if (t8.shape.length !== 2 || scale.dtype !== 'F32' || scale.shape.length !== 2 || scale.shape[0] !== Math.ceil(rows / FP8_BLOCK) || scale.shape[1] !== Math.ceil(cols / FP8_BLOCK))
          throw new WasteError('E_FORMAT', `${full} [${t8.shape}] F8_E4M3 and ${scaleName} [${scale.shape}] ${scale.dtype} are not an FP8 matrix with 128 × 128 block scales (F32 [⌈R/128⌉, ⌈C/128⌉])`);
        this.logical.set(name, { name, shape: [rows, cols], sourceBytes: t8.bytes + scale.bytes, mxfp4: false, fp8: true });
        continue;
      }
      if (name.endsWith('.weight_shape') && st.has(`${full.slice(0, -'_shape'.length)}_packed`)) continue;
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
      if (packed.dtype === 'I32') {
        const logical = this.int4Pair(full, packed, scaleName, scale, `${prefix}${m[1]}.weight_shape`);
        this.logical.set(`${m[1]}.weight`, { name: `${m[1]}.weight`, ...logical });
        continue;
      }
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
      if (!t.name.startsWith(WRAPPED)) continue;
      if (t.mxfp4 || t.fp8 || t.int4Group || t.slice) throw new WasteError('E_UNSUPPORTED', `the checkpoint's ${t.name}: Qwen3.5's release layout is read with bf16/f16/f32 tensors only (not FP8 or packed ones)`);
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

  /** Check an INT4 pack-quantized triple (headers, and the 8 bytes of its shape) and describe the matrix it stands for. */
  private int4Pair(full: string, packed: TensorInfo, scaleName: string, scale: TensorInfo, shapeName: string): Omit<CheckpointTensor, 'name'> {
    const bad = (what: string) => new WasteError('E_FORMAT', `${full} [${packed.shape}] I32, ${scaleName} [${scale.shape}] ${scale.dtype}: ${what}`);
    if (!this.st.has(shapeName)) throw bad(`no ${shapeName} (a pack-quantized INT4 matrix names its shape)`);
    const shapeT = this.st.info(shapeName);
    if (shapeT.dtype !== 'I32' || shapeT.shape.length !== 1 || shapeT.shape[0] !== 2) throw bad(`${shapeName} is [${shapeT.shape}] ${shapeT.dtype}, not I32 [2]`);
    const raw = new Uint8Array(8);
    this.st.readRaw(shapeName, 0, raw);
    const dv = new DataView(raw.buffer);
    const rows = dv.getInt32(0, true);
    const cols = dv.getInt32(4, true);
    if (packed.shape.length !== 2 || packed.shape[0] !== rows || packed.shape[1] !== Math.ceil(cols / 8) || cols < 1) throw bad(`not the packing of a [${rows}, ${cols}] matrix (I32 [R, ⌈C/8⌉])`);
    if (!['BF16', 'F16', 'F32'].includes(scale.dtype) || scale.shape.length !== 2 || scale.shape[0] !== rows || scale.shape[1] < 1 || cols % scale.shape[1]) throw bad('the scales are not [R, C/group] floats');
    return { shape: [rows, cols], sourceBytes: packed.bytes + scale.bytes + shapeT.bytes, mxfp4: false, int4Group: cols / scale.shape[1] };
  }

  /** A tensor of a layer's stacked experts: each expert's matrices listed in its place (true), or not one (false). */
  private addStacked(name: string, s: StackedExperts): boolean {
    const m = /^model\.layers\.(\d+)\.(.*)$/.exec(name);
    if (!m) return false;
    const L = Number(m[1]);
    const rest = m[2];
    const base = [s.gateUp, s.down].find((b) => rest === b || rest === `${b}_blocks` || rest === `${b}_scales`);
    if (base === undefined) return false;
    if (rest.endsWith('_scales')) {
      if (!this.st.has(this.prefix + name.replace(/_scales$/, '_blocks'))) throw new WasteError('E_FORMAT', `the checkpoint has ${this.prefix}${name} but not its _blocks`);
      return true;
    }
    const full = this.prefix + name;
    const t = this.st.info(full);
    let E: number, R: number, C: number, bytes: number;
    const mxfp4 = rest.endsWith('_blocks');
    if (mxfp4) {
      const scaleName = full.replace(/_blocks$/, '_scales');
      if (!this.st.has(scaleName)) throw new WasteError('E_FORMAT', `the checkpoint has ${full} but not ${scaleName}`);
      const sc = this.st.info(scaleName);
      [E, R] = t.shape;
      const G = t.shape[2];
      if (t.shape.length !== 4 || t.dtype !== 'U8' || t.shape[3] !== MXFP4_GROUP / 2 || sc.dtype !== 'U8' || sc.shape.length !== 3 || sc.shape[0] !== E || sc.shape[1] !== R || sc.shape[2] !== G)
        throw new WasteError('E_FORMAT', `${full} [${t.shape}] ${t.dtype} and ${scaleName} [${sc.shape}] ${sc.dtype} are not stacked MXFP4 experts (U8 [E, R, C/32, 16] and U8 [E, R, C/32])`);
      C = G * MXFP4_GROUP;
      bytes = t.bytes + sc.bytes;
    } else {
      if (t.shape.length !== 3) throw new WasteError('E_FORMAT', `${full} [${t.shape}] is not a stack of experts' matrices ([E, in, out])`);
      [E, C, R] = t.shape;
      bytes = t.bytes;
    }
    const fused = base === s.gateUp;
    if (fused && R % 2) throw new WasteError('E_FORMAT', `${full} [${t.shape}]: a fused gate/up projection needs an even number of output rows`);
    const kinds: (0 | 1 | 2)[] = fused ? [0, 1] : [2];
    for (let e = 0; e < E; e++)
      for (const kind of kinds) {
        const slice: StackedSlice = { source: name, mxfp4, expert: e, first: kind === 1 ? 1 : 0, step: fused ? 2 : 1, outRows: R, cols: C };
        const logical = s.expert(L, e, kind);
        this.logical.set(logical, { name: logical, shape: [R / slice.step, C], sourceBytes: bytes / E / slice.step, mxfp4, slice });
      }
    return true;
  }

  /** Rows [row0, row0 + n) of an expert's matrix held in a stacked tensor. */
  private readSlice(t: CheckpointTensor, row0: number, n: number, out: Float32Array): void {
    const s = t.slice!;
    const C = s.cols;
    const full = this.prefix + s.source;
    if (s.mxfp4) {
      // the stacked rows from the first wanted to the last (every other one is the other half of a fused pair)
      const first = s.expert * s.outRows + s.first + s.step * row0;
      const m = s.step * (n - 1) + 1;
      const G = C / MXFP4_GROUP;
      if (this.bytes.length < (m * C) / 2) this.bytes = new Uint8Array((m * C) / 2);
      if (this.scales.length < m * G) this.scales = new Uint8Array(m * G);
      this.st.readBytes(full, first * G, m * G, this.bytes);
      this.st.readBytes(full.replace(/_blocks$/, '_scales'), first, m, this.scales);
      for (let r = 0; r < n; r++) {
        const i = r * s.step;
        decodeMxfp4(this.bytes.subarray((i * C) / 2, ((i + 1) * C) / 2), this.scales.subarray(i * G, (i + 1) * G), 1, C, out.subarray(r * C, (r + 1) * C), `the checkpoint's ${full} (expert ${s.expert})`, row0 + r);
      }
      return;
    }
    // dense [E, C, R] (in × out): the expert's whole slab, then its columns as our rows
    const R = s.outRows;
    if (!this.slab || this.slab.source !== full || this.slab.expert !== s.expert) {
      const data = new Float32Array(C * R);
      this.st.readRows(full, s.expert * C, C, data);
      this.slab = { source: full, expert: s.expert, data };
    }
    const d = this.slab.data;
    for (let r = 0; r < n; r++) {
      const col = s.first + s.step * (row0 + r);
      for (let c = 0; c < C; c++) out[r * C + c] = d[c * R + col];
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
    if (t.fp8) return this.readFp8(name, t.shape[1], row0, n, out);
    if (t.int4Group) return this.readInt4(name, t.shape[1], t.int4Group, row0, n, out);
    if (t.slice) return this.readSlice(t, row0, n, out);
    if (!t.mxfp4) return this.st.readRows(this.prefix + name, row0, n, out);
    const cols = t.shape[1];
    const base = this.prefix + name.slice(0, -'.weight'.length);
    if (this.bytes.length < (n * cols) / 2) this.bytes = new Uint8Array((n * cols) / 2);
    if (this.scales.length < (n * cols) / MXFP4_GROUP) this.scales = new Uint8Array((n * cols) / MXFP4_GROUP);
    this.st.readBytes(`${base}.weight_packed`, row0, n, this.bytes);
    this.st.readBytes(`${base}.weight_scale`, row0, n, this.scales);
    decodeMxfp4(this.bytes, this.scales, n, cols, out, `the checkpoint's ${base}.weight_packed`, row0);
  }

  private fp8Scales = new Float32Array(0);

  /** Rows of an FP8 matrix, decoded exactly (each value times its block's scale, rounded to f32 once). */
  private readFp8(name: string, cols: number, row0: number, n: number, out: Float32Array): void {
    if (n <= 0) return;
    const full = this.prefix + name;
    if (this.bytes.length < n * cols) this.bytes = new Uint8Array(n * cols);
    this.st.readBytes(full, row0, n, this.bytes);
    const sc = Math.ceil(cols / FP8_BLOCK);
    const b0 = Math.floor(row0 / FP8_BLOCK);
    const nb = Math.floor((row0 + n - 1) / FP8_BLOCK) - b0 + 1;
    if (this.fp8Scales.length < nb * sc) this.fp8Scales = new Float32Array(nb * sc);
    this.st.readRows(`${full}_scale_inv`, b0, nb, this.fp8Scales);
    decodeFp8(this.bytes, this.fp8Scales, row0, n, cols, out, `the checkpoint's ${full}`);
  }

  private int4Scales = new Float32Array(0);

  /** Rows of an INT4 pack-quantized matrix, decoded exactly. */
  private readInt4(name: string, cols: number, group: number, row0: number, n: number, out: Float32Array): void {
    if (n <= 0) return;
    const base = this.prefix + name.slice(0, -'.weight'.length);
    const bytes = n * Math.ceil(cols / 8) * 4;
    if (this.bytes.length < bytes) this.bytes = new Uint8Array(bytes);
    this.st.readBytes(`${base}.weight_packed`, row0, n, this.bytes);
    if (this.int4Scales.length < (n * cols) / group) this.int4Scales = new Float32Array((n * cols) / group);
    this.st.readRows(`${base}.weight_scale`, row0, n, this.int4Scales);
    decodeInt4(this.bytes, this.int4Scales, n, cols, group, out);
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
