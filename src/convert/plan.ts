import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { SafetensorsSet } from '../checkpoint/safetensors.js';
import type { CheckpointWeights } from '../checkpoint/weights.js';
import { CODEBOOK_HEADER_BYTES, type ExpertQuant, Fmt, type RecordLayout, recordLayout } from '../container/format.js';
import { storedSizes } from '../container/tensor.js';
import { type ModelConfig, moeLayers as moeLayersOf } from '../core/model-config.js';
import type { Architecture } from '../model/architecture.js';
import { WasteError } from '../util/errors.js';
import { readBytes } from '../util/read.js';

/**
 * What a conversion will write, decided from the checkpoint's headers and the options before a
 * byte of weights is read: each trunk tensor's stored format and size, each MoE layer's bank and
 * codebooks, the total (for the disk-space check) and an identity that a resumed run must match.
 */
export interface ConvertSettings {
  /** Bits of the bulk of the trunk: 4 (Q4G, the default), 8 (all Q8G) or 16 (all F16, for quality comparisons). */
  trunkBits: 4 | 8 | 16;
  /** Seed of every random choice (the same seed and input give the same bytes). */
  seed: number;
  /** Lloyd iterations per codebook stage. */
  iters: number;
  /** Experts per layer whose vectors train that layer's codebooks. */
  cbSample: number;
  /** Vectors k-means sees per (layer, matrix kind). */
  trainVectors: number;
}

export const DEFAULT_SETTINGS: ConvertSettings = { trunkBits: 4, seed: 0, iters: 10, cbSample: 12, trainVectors: 300_000 };

/** The expert format the converter writes: VQ3R, as the C engine's converter does. */
export const VQ3R: ExpertQuant = { name: 'VQ3R', stages: 3, vecDim: 8, entries: 256, indexBlock: 64, indexBits: 8 };

/** Bump when the bytes a conversion writes change for the same input and settings. */
export const CONVERTER_VERSION = 3;

/** Trunk values below this count (and every vector) stay F32: norms, biases, gate parameters, conv taps. */
const SMALL_TENSOR = 65536;
export const TRUNK_GROUP = 128;

export interface TrunkTensorPlan {
  /** Its name in trunk.bin (the checkpoint's own, prefix included). */
  name: string;
  fmt: number;
  /** As stored: a vision tower's 3-D and 4-D tensors as the 2-D matrices they act as. */
  shape: number[];
  /** Rows [row0, row0 + n) of it as f32. */
  read(row0: number, n: number, out: Float32Array): void;
  /** Bytes in trunk.bin (payload and scales). */
  bytes: number;
  /** Bytes of the source tensor (for progress). */
  sourceBytes: number;
}

export interface LayerPlan {
  layer: number;
  /** Its place among the MoE layers: codebooks [base, base + 3·stages) are its own. */
  ordinal: number;
  codebookBase: number;
  experts: number;
  bankBytes: number;
  booksBytes: number;
  sourceBytes: number;
}

export interface ConvertPlan {
  settings: ConvertSettings;
  q: ExpertQuant;
  layout: RecordLayout;
  trunk: TrunkTensorPlan[];
  trunkBytes: number;
  layers: LayerPlan[];
  /** Every byte the finished container holds (weights; the small files are not counted). */
  totalBytes: number;
  /** Source bytes the whole job reads once (the progress unit). */
  sourceBytes: number;
  /** Changes whenever the input checkpoint or a setting that shapes the output changes. */
  identity: string;
  /** A routed expert's matrix in the checkpoint, by name (the family's naming). */
  expertTensor: (layer: number, expert: number, kind: 0 | 1 | 2) => string;
}


export function trunkFormat(name: string, shape: number[], trunkBits: 4 | 8 | 16): number {
  const numel = shape.reduce((a, d) => a * d, 1);
  // biases stay F32 however many (gpt-oss's stacked expert biases are [E, 2·inter])
  if (shape.length <= 1 || numel < SMALL_TENSOR || /(^|[._])bias$/.test(name)) return Fmt.F32;
  if (trunkBits === 16) return Fmt.F16;
  // the embedding table and the output head keep 8 bits: they sit at both ends of the network,
  // where error is least forgiving (and the embedding stays on disk anyway)
  if (trunkBits === 8 || /(^|\.)(embed_tokens|lm_head)\.weight$/.test(name)) return Fmt.Q8G;
  return Fmt.Q4G;
}

/**
 * `stamp` says what a shard file is for the identity: by default its size and modification time;
 * a download passes the hub's hash, which outlives the shard (it is deleted once converted).
 */
export function planConversion(src: string, w: CheckpointWeights, arch: Architecture, cfg: ModelConfig, settings: ConvertSettings, stamp: (file: string) => string = fileStamp): ConvertPlan {
  const q = VQ3R;
  const W = cfg.expertWidth;
  const I = cfg.moe.inter;
  const moeLayers = moeLayersOf(cfg);
  const expertTensor = (layer: number, expert: number, kind: 0 | 1 | 2) => arch.expertTensor(layer, expert, kind);
  if (moeLayers.length && (W % q.vecDim || I % q.vecDim))
    throw new WasteError('E_UNSUPPORTED', `VQ3R needs the experts' width (${W}) and moe_intermediate_size (${I}) to be multiples of ${q.vecDim}`);
  const layout = recordLayout(W, I, q);

  const trunk: TrunkTensorPlan[] = [];
  let trunkBytes = 0;
  const add = (name: string, shape: number[], fmt: number, sourceBytes: number, read: TrunkTensorPlan['read']) => {
    const cols = shape[shape.length - 1];
    const rows = cols ? shape.reduce((a, d) => a * d, 1) / cols : 0;
    const s = storedSizes(fmt, rows, cols, TRUNK_GROUP);
    trunk.push({ name, fmt, shape, read, bytes: s.payload + s.scaleBytes, sourceBytes });
    trunkBytes += s.payload + s.scaleBytes;
  };
  for (const name of w.names().sort()) {
    // routed experts are the checkpoint tensors the trunk leaves out
    if (arch.expertLayerOf(name) !== undefined) continue;
    // layers after the last (DeepSeek-V3's multi-token prediction) are never run: left out
    const layer = /^model\.layers\.(\d+)\./.exec(name);
    if (layer && Number(layer[1]) >= cfg.layers) continue;
    // nor the layers the model never runs (MTP): their experts have no layer plan either
    if (arch.unread?.(name, cfg)) continue;
    const info = w.info(name);
    add(w.prefix + name, info.shape, trunkFormat(name, info.shape, settings.trunkBits), info.sourceBytes, (r, n, x) => w.readRows(name, r, n, x));
  }
  // the vision tower and its projector, outside the language model's prefix: 8 bits whatever the
  // trunk's (at 4 bits their error is 18 %, measured by the C engine), as the 2-D matrices they act as
  for (const full of [...w.outside].sort()) {
    const info = w.st.info(full);
    const shape = visionShape(full, info.shape.length ? info.shape : [1]);
    // the source counts rows of its own last dimension: a stored row of the convolution is 3·p of them
    const k = shape[shape.length - 1] / (info.shape.length ? info.shape[info.shape.length - 1] : 1);
    add(full, shape, visionFormat(shape), info.bytes, (r, n, x) => w.st.readRows(full, r * k, n * k, x));
  }

  const booksPerLayer = 3 * q.stages;
  const layers: LayerPlan[] = moeLayers.map((layer, ordinal) => {
    let sourceBytes = 0;
    for (let e = 0; e < cfg.moe.experts; e++) for (const k of [0, 1, 2] as const) sourceBytes += w.info(expertTensor(layer, e, k)).sourceBytes;
    return {
      layer,
      ordinal,
      codebookBase: ordinal * booksPerLayer,
      experts: cfg.moe.experts,
      bankBytes: cfg.moe.experts * layout.recordBytes,
      booksBytes: booksPerLayer * (CODEBOOK_HEADER_BYTES + q.entries * q.vecDim * 2),
      sourceBytes,
    };
  });
  if (layers.length * booksPerLayer > 0x10000) throw new WasteError('E_UNSUPPORTED', `${layers.length} MoE layers need more codebooks than format v0 can number`);

  const totalBytes = trunkBytes + layers.reduce((a, l) => a + l.bankBytes + l.booksBytes, 0);
  const sourceBytes = trunk.reduce((a, t) => a + t.sourceBytes, 0) + layers.reduce((a, l) => a + l.sourceBytes, 0);
  return { settings, q, layout, trunk, trunkBytes, layers, totalBytes, sourceBytes, identity: identityOf(src, w.st, settings, stamp), expertTensor };
}

/** A vision tensor's stored format: F32 when small (as the trunk's), else Q8G whatever the trunk's bits. */
export function visionFormat(shape: number[]): number {
  return shape.length <= 1 || shape.reduce((a, d) => a * d, 1) < SMALL_TENSOR ? Fmt.F32 : Fmt.Q8G;
}

/**
 * A vision tensor's shape as the tower reads it: the patch embedding's [out, 3, p, p] convolution as
 * the [out, 3·p·p] matrix it is over a flattened patch, the position grid [h, w, d] as [h·w, d]
 * rows (both row-major reshapes: the bytes do not move).
 */
export function visionShape(name: string, shape: number[]): number[] {
  if (shape.length <= 2) return shape;
  if (/patch_embed\.proj\.weight$/.test(name)) return [shape[0], shape.slice(1).reduce((a, d) => a * d, 1)];
  return [shape.slice(0, -1).reduce((a, d) => a * d, 1), shape[shape.length - 1]];
}

/**
 * The input as the conversion sees it — config.json's bytes, every tensor's dtype, shape and place,
 * each shard's size and modification time — and the settings. A partial conversion is resumed
 * only when this matches; anything else starts over.
 */
function identityOf(src: string, st: SafetensorsSet, settings: ConvertSettings, stamp: (file: string) => string): string {
  const h = crypto.createHash('sha256');
  h.update(`waste-convert ${CONVERTER_VERSION}\n${JSON.stringify(settings)}\n`);
  h.update(readBytes(path.join(src, 'config.json')));
  const files = new Set<string>();
  for (const name of st.names().sort()) {
    const t = st.info(name);
    files.add(t.file);
    h.update(`${name} ${t.dtype} ${t.shape.join('x')} ${path.basename(t.file)} ${t.offset} ${t.bytes}\n`);
  }
  for (const f of [...files].sort()) h.update(`${path.basename(f)} ${stamp(f)}\n`);
  return h.digest('hex');
}

function fileStamp(f: string): string {
  const s = fs.statSync(f);
  return `${s.size} ${s.mtimeMs}`;
}
