import * as fs from 'node:fs';
import * as path from 'node:path';
import { type ExpertQuant, Fmt, recordLayout } from '../container/format.js';
import { CODEBOOKS } from '../container/codebooks.js';
import { TRUNK } from '../container/trunk.js';
import { TrunkWriter, encodeCodebooks, encodeExpertRecord, writeManifest } from '../container/write.js';
import { writeFileAtomic } from '../util/write-atomic.js';
import { storedSizes } from '../container/tensor.js';
import { type ModelConfig, moeLayers as moeLayersOf } from '../core/model-config.js';
import type { Architecture } from '../model/architecture.js';
import { ARCHITECTURES, parseModelConfig } from '../model/registry.js';
import type { FamilySynth } from '../model/synth.js';
import { encodeF16 } from '../util/f16.js';
import { Fields, type JsonObject } from '../util/fields.js';
import { Rng } from '../util/prng.js';
import { rankFileText } from '../tokenizer/ranks.js';
import { synthVocabulary } from './tokenizer.js';
import { WasteError, fromSystemError, quoted } from '../util/errors.js';

/**
 * Synthetic containers of random weights, exactly as format v0 lays them out: the test suite's
 * generator, and `waste synth` for users who want to try the engine or benchmark realistic shapes
 * without downloading a model. The same seed gives the same bytes on every machine. What there is
 * to draw — shapes, configs, tensors by name — is the family's (its `synth`); this writes it.
 */
export type ShapeName = string;

export interface SynthOptions {
  /** A shape of any family (`synthShapes()`); default 'tiny'. */
  shape?: ShapeName;
  /** Override the number of layers (the family's layer pattern is kept). */
  layers?: number;
  /** Override the number of routed experts (top-k is capped to it). */
  experts?: number;
  seed?: number;
  /**
   * How trunk matrices are stored: 'converter' writes what `waste convert` writes (F32 below
   * 65,536 values, Q8G for the embedding and the head, Q4G for the rest); 'mixed' cycles every
   * matrix through F32, F16, Q8G and Q4G so each compute path is exercised; 'f32' stores every
   * matrix as F32 (a large resident trunk, e.g. to exceed 4 GiB); 'quantized' is what the converter
   * writes at full size — Q8G embedding and head, Q4G every other matrix, F32 vectors — whatever the
   * size (a small model then computes on the quantized paths the C engine reads too).
   */
  trunkFormats?: TrunkFormats;
  /**
   * Sizes only: trunk.bin and the banks are sparse files of the right length with nothing in
   * them, the manifest and codebooks real — for `plan` and `info` at a scale the disk cannot hold.
   * Such a container cannot run.
   */
  sparse?: boolean;
  /** Extra or replaced config keys (e.g. awkward dimensions for a test). */
  config?: JsonObject;
  /** Replace an existing non-empty directory. */
  force?: boolean;
  /** Also write a small tokenizer (tokenizer.model, specials.json) so the model takes text. */
  tokenizer?: boolean;
  onProgress?: (done: number, total: number) => void;
}

export type TrunkFormats = 'converter' | 'mixed' | 'f32' | 'quantized';

/** Every shape `waste synth --shape` takes, by family. */
export function synthShapes(): { families: string[]; shapes: readonly string[] }[] {
  // a family of several architectures (Kimi-Linear and K3) draws with one synth
  const by = new Map<FamilySynth, string[]>();
  for (const a of ARCHITECTURES) if (a.synth) by.set(a.synth, [...(by.get(a.synth) ?? []), a.id]);
  return [...by].map(([s, families]) => ({ families, shapes: s.shapes }));
}

/** The family that draws a shape, and its synth. */
export function synthFamily(shape: string): { arch: Architecture; synth: FamilySynth } {
  for (const arch of ARCHITECTURES) if (arch.synth?.shapes.includes(shape)) return { arch, synth: arch.synth };
  throw new WasteError('E_ARG', `unknown shape ${quoted(shape)} (expected ${synthShapes().flatMap((f) => f.shapes).join(', ')})`);
}

/** The config a synthetic container of these options holds in its manifest. */
export function synthConfig(opts: SynthOptions): JsonObject {
  const shape = opts.shape ?? 'tiny';
  return synthFamily(shape).synth.config(shape, opts);
}

const QUANT: ExpertQuant = { name: 'VQ3R', stages: 3, vecDim: 8, entries: 256, indexBlock: 64, indexBits: 8 };

/** Write a synthetic container into `dir`; returns its parsed config. */
export function writeSyntheticContainer(dir: string, opts: SynthOptions = {}): ModelConfig {
  const shape = opts.shape ?? 'tiny';
  const { synth } = synthFamily(shape);
  const rawCfg = synth.config(shape, opts);
  const vocab = rawCfg.vocab_size as number;
  const voc = opts.tokenizer ? synthVocabulary(vocab, synth.specials?.(rawCfg) ?? []) : undefined;
  synth.ids?.(rawCfg, voc ? (t: string) => voc.specials.find((s) => s.text === t)?.id ?? null : undefined);
  const cfg = parseModelConfig(Fields.root('synthetic config', rawCfg));
  const prefix = synth.prefix(rawCfg);
  const rng = new Rng(opts.seed ?? 0);
  const formats: TrunkFormats = opts.trunkFormats ?? (synth.realShapes.includes(shape) ? 'converter' : (synth.smallFormats?.(rawCfg) ?? 'mixed'));
  const normalBooks = synth.normalBooks?.(rawCfg) ?? false;
  const mixed = formats === 'mixed';
  const sparse = opts.sparse ?? false;
  prepareDir(dir, opts.force ?? false);

  const layout = recordLayout(cfg.expertWidth, cfg.moe.inter, QUANT);
  const moeLayers = moeLayersOf(cfg);
  const totalWork = 1 + moeLayers.length * cfg.moe.experts;
  let done = 0;
  const tick = (n = 1) => {
    done += n;
    opts.onProgress?.(done, totalWork);
  };

  // --- trunk ---
  const trunk = new TrunkWriter(path.join(dir, TRUNK));
  let matrixCount = 0;
  const matrix = (name: string, rows: number, cols: number, std: number) => {
    const fmt = mixed
      ? [Fmt.Q4G, Fmt.Q8G, Fmt.F16, Fmt.F32][matrixCount++ % 4]
      : formats === 'f32' || (formats === 'converter' && rows * cols < 65536)
        ? Fmt.F32
        : /(embed_tokens|lm_head)\.weight$/.test(name)
          ? Fmt.Q8G
          : Fmt.Q4G;
    if (sparse) trunk.reserve(prefix + name, fmt, [rows, cols]);
    else writeMatrix(trunk, rng, prefix + name, fmt, [rows, cols], std);
  };
  const vector = (name: string, shape: number[], lo: number, hi: number, valid = Infinity) => {
    name = prefix + name;
    const n = shape.reduce((a, b) => a * b, 1);
    if (sparse) return trunk.reserve(name, Fmt.F32, shape);
    const v = new Float32Array(n);
    for (let i = 0; i < Math.min(n, valid); i++) v[i] = rng.uniform(lo, hi);
    // mixed trunks store a few vectors as F16 to exercise that decode path
    if (mixed && (matrixCount++ % 7 === 0)) {
      const h = new Uint16Array(n);
      for (let i = 0; i < n; i++) h[i] = encodeF16(v[i]);
      trunk.add(name, Fmt.F16, shape, new Uint8Array(h.buffer));
    } else trunk.add(name, Fmt.F32, shape, new Uint8Array(v.buffer));
  };

  for (const t of synth.tensors(cfg)) {
    if (t.kind === 'vector') vector(t.name, t.shape, t.lo, t.hi, t.valid);
    else if (!t.expert) matrix(t.name, t.rows, t.cols, t.std);
  }
  trunk.close();
  tick();

  // --- codebooks and expert banks ---
  const layers: JsonObject = {};
  if (moeLayers.length) {
    const per = QUANT.entries * QUANT.vecDim;
    const count = moeLayers.length * 3 * QUANT.stages;
    const books = new Uint16Array(count * per);
    for (let b = 0; b < count; b++) {
      const stage = b % QUANT.stages;
      const amp = 1 / 2 ** stage; // later stages refine what earlier ones left
      for (let i = 0; i < per; i++) books[b * per + i] = encodeF16(normalBooks ? normalF16(rng.uniform(-amp, amp)) : rng.uniform(-amp, amp));
    }
    writeFileAtomic(path.join(dir, CODEBOOKS), encodeCodebooks(books, count, QUANT));

    const rec = new Uint8Array(layout.recordBytes);
    const idx = layout.shapes.map((s) => new Uint8Array(s.rows * (s.cols / QUANT.vecDim) * QUANT.stages)) as [Uint8Array, Uint8Array, Uint8Array];
    const scales = layout.shapes.map((s) => new Uint16Array(s.rows)) as [Uint16Array, Uint16Array, Uint16Array];
    moeLayers.forEach((L, li) => {
      const base = li * 3 * QUANT.stages;
      const file = `experts-L${L}.bin`;
      const fd = openForWrite(path.join(dir, file));
      try {
        if (sparse) fs.ftruncateSync(fd, cfg.moe.experts * layout.recordBytes);
        for (let e = 0; e < (sparse ? 0 : cfg.moe.experts); e++) {
          for (let m = 0; m < 3; m++) {
            rng.fillBytes(idx[m]);
            if (QUANT.entries < 256) for (let i = 0; i < idx[m].length; i++) idx[m][i] %= QUANT.entries;
            const cols = layout.shapes[m].cols;
            for (let r = 0; r < scales[m].length; r++) scales[m][r] = encodeF16(rng.uniform(0.5, 1.5) * 1.5 * (1 / Math.sqrt(cols)));
          }
          encodeExpertRecord(L, e, base, layout, QUANT, idx, scales, rec);
          writeAll(fd, rec, e * layout.recordBytes);
          tick();
        }
        fs.fsyncSync(fd);
      } finally {
        fs.closeSync(fd);
      }
      layers[String(L)] = { file, experts: cfg.moe.experts, bytes: cfg.moe.experts * layout.recordBytes, codebook_base: base };
    });
  }

  const manifest = {
    format_version: 0,
    // descriptive only (readers derive the architecture from the config); kept as it always was
    arch: synth.manifestArch(rawCfg),
    tensor_prefix: prefix,
    config: rawCfg,
    expert_quant: {
      fmt: QUANT.name,
      stages: QUANT.stages,
      vec_dim: QUANT.vecDim,
      entries: QUANT.entries,
      index_block: QUANT.indexBlock,
      index_bits: QUANT.indexBits,
      bits_per_weight: (QUANT.stages * QUANT.indexBits) / QUANT.vecDim,
    },
    layers,
    trunk: trunk.index,
    // a reader that runs models refuses this one before loading holes (the C engine ignores the key)
    ...(sparse ? { sparse: true } : {}),
  };
  const small: string[] = [];
  if (voc) {
    writeFileAtomic(path.join(dir, 'tokenizer.model'), rankFileText(voc.ranks));
    writeFileAtomic(path.join(dir, 'specials.json'), JSON.stringify(voc.specials, null, 1) + '\n');
    small.push('tokenizer.model', 'specials.json');
    for (const [name, text] of Object.entries(synth.containerFiles?.(rawCfg) ?? {})) {
      writeFileAtomic(path.join(dir, name), text);
      small.push(name);
    }
  }
  // a sparse trunk holds nothing worth a digest (and hashing 27 GiB of holes takes a while)
  writeManifest(dir, manifest, sparse ? small : [TRUNK, ...(moeLayers.length ? [CODEBOOKS] : []), ...small]);
  return cfg;
}

/** A random matrix in its stored form with roughly the given element standard deviation. */
function writeMatrix(trunk: TrunkWriter, rng: Rng, name: string, fmt: number, shape: number[], std: number): void {
  const [rows, cols] = shape;
  const G = 128;
  const s = storedSizes(fmt, rows, cols, G);
  const payload = new Uint8Array(s.payload);
  if (fmt === Fmt.F32 || fmt === Fmt.F16) {
    const a = std * Math.sqrt(3);
    const f = new Float32Array(rows * cols);
    for (let i = 0; i < f.length; i++) f[i] = rng.uniform(-a, a);
    if (fmt === Fmt.F32) payload.set(new Uint8Array(f.buffer));
    else {
      const h = new Uint16Array(payload.buffer);
      for (let i = 0; i < f.length; i++) h[i] = encodeF16(f[i]);
    }
    trunk.add(name, fmt, shape, payload);
    return;
  }
  rng.fillBytes(payload);
  // Zero-mean values: q uniform in [-127, 127] and [-7, 7], drawn by rejection. Plain uniform bytes
  // have a mean of -1/2, a bias every product adds up and the next one amplifies, until the hidden
  // state is one direction and every token routes alike.
  if (fmt === Fmt.Q8G) {
    for (let i = 0; i < payload.length; i++) while (payload[i] === 0x80) payload[i] = rng.u32() & 0xff;
  } else {
    for (let i = 0; i < payload.length; i++) {
      let b = payload[i];
      while (b >= 225) b = rng.u32() & 0xff;
      payload[i] = ((b % 15) + 1) | ((Math.floor(b / 15) + 1) << 4);
    }
  }
  const padded = s.groups * G;
  if (padded > cols)
    for (let r = 0; r < rows; r++)
      for (let c = cols; c < padded; c++) {
        // padding holds q = 0, as the converter writes it
        if (fmt === Fmt.Q8G) payload[r * s.rowBytes + c] = 0;
        else {
          const i = r * s.rowBytes + (c >> 1);
          payload[i] = c & 1 ? (payload[i] & 0x0f) | 0x80 : (payload[i] & 0xf0) | 0x08;
        }
      }
  // uniform q in [-127, 127] has std ≈ 73.6; in [-7, 7] ≈ 4.32
  const unit = fmt === Fmt.Q8G ? 73.6 : 4.32;
  const scales = new Uint16Array(rows * s.groups);
  for (let i = 0; i < scales.length; i++) scales[i] = encodeF16((std / unit) * rng.uniform(0.5, 1.5));
  trunk.add(name, fmt, shape, payload, scales, G);
}

/**
 * A codebook value clear of f16 subnormals: the C engine's codebook loader flushes them to zero
 * (its trunk decoder does not), which would make a comparison with it test that instead.
 */
function normalF16(x: number): number {
  const min = 2 ** -14;
  return x === 0 || Math.abs(x) >= min ? x : Math.sign(x) * min;
}

export function prepareDir(dir: string, force: boolean): void {
  try {
    if (fs.existsSync(dir)) {
      if (!fs.statSync(dir).isDirectory()) throw new WasteError('E_ARG', `${dir} exists and is not a directory`);
      const entries = fs.readdirSync(dir);
      if (entries.length && !force) throw new WasteError('E_ARG', `${dir} is not empty (use --force to replace it)`);
      for (const e of entries) fs.rmSync(path.join(dir, e), { recursive: true, force: true });
    } else fs.mkdirSync(dir, { recursive: true });
  } catch (e) {
    throw fromSystemError(dir, e);
  }
}

function openForWrite(file: string): number {
  try {
    return fs.openSync(file, 'w');
  } catch (e) {
    throw fromSystemError(file, e);
  }
}

function writeAll(fd: number, data: Uint8Array, pos: number): void {
  let done = 0;
  while (done < data.length) done += fs.writeSync(fd, data, done, data.length - done, pos + done);
}
