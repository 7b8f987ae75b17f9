import * as fs from 'node:fs';
import * as path from 'node:path';
import { type ExpertQuant, Fmt, recordLayout } from '../container/format.js';
import { CODEBOOKS } from '../container/codebooks.js';
import { TRUNK } from '../container/trunk.js';
import { TrunkWriter, encodeCodebooks, encodeExpertRecord, writeFileAtomic, writeManifest } from '../container/write.js';
import { storedSizes } from '../container/tensor.js';
import type { KimiConfig } from '../model/kimi/config.js';
import { parseModelConfig } from '../model/registry.js';
import { encodeF16 } from '../util/f16.js';
import { Fields, type JsonObject } from '../util/fields.js';
import { Rng } from '../util/prng.js';
import { kimiTensors } from './tensors.js';
import { rankFileText } from '../tokenizer/ranks.js';
import { k3Specials, synthVocabulary } from './tokenizer.js';
import { WasteError, fromSystemError } from '../util/errors.js';

/**
 * Synthetic containers of random weights, exactly as format v0 lays them out: the test suite's
 * generator, and `waste synth` for users who want to try the engine or benchmark realistic shapes
 * without downloading a model. The same seed gives the same bytes on every machine.
 */
export type ShapeName = 'tiny' | 'kimi-linear' | 'k3-tiny' | 'k3';

export interface SynthOptions {
  shape?: ShapeName;
  /** Override the number of layers (the 3:1 KDA:MLA pattern is kept, with MLA last). */
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

/** The attention-residual, latent-MoE, SiTU and gate settings of Kimi K3 (over COMMON). */
const K3_COMMON: JsonObject = {
  routed_scaling_factor: 1.0,
  latent_moe_use_norm: true,
  mla_use_output_gate: true,
  hidden_act: 'situ',
  activation_situ_beta: 4.0,
  activation_situ_linear_beta: 25.0,
  attn_res_block_size: 12,
};

export const SHAPES: Record<ShapeName, JsonObject> = {
  tiny: {
    vocab_size: 300,
    hidden_size: 96,
    num_hidden_layers: 4,
    intermediate_size: 160,
    moe_intermediate_size: 48,
    num_experts: 8,
    num_experts_per_token: 3,
    num_shared_experts: 1,
    num_attention_heads: 3,
    num_key_value_heads: 3,
    kv_lora_rank: 40,
    qk_nope_head_dim: 16,
    qk_rope_head_dim: 8,
    v_head_dim: 16,
    linear_attn_config: { num_heads: 3, head_dim: 16, short_conv_kernel_size: 4 },
  },
  'kimi-linear': {
    vocab_size: 163840,
    hidden_size: 2304,
    num_hidden_layers: 27,
    intermediate_size: 9216,
    moe_intermediate_size: 1024,
    num_experts: 256,
    num_experts_per_token: 8,
    num_shared_experts: 1,
    num_attention_heads: 32,
    num_key_value_heads: 32,
    kv_lora_rank: 512,
    qk_nope_head_dim: 128,
    qk_rope_head_dim: 64,
    v_head_dim: 128,
    linear_attn_config: { num_heads: 32, head_dim: 128, short_conv_kernel_size: 4 },
  },
  // several attention-residual blocks and a partial one (boundaries 0, 3, 6), MLA last, every K3
  // feature on at sizes a test runs in milliseconds
  'k3-tiny': {
    ...K3_COMMON,
    vocab_size: 1024,
    hidden_size: 128,
    num_hidden_layers: 7,
    intermediate_size: 256,
    moe_intermediate_size: 64,
    routed_expert_hidden_size: 64,
    num_experts: 8,
    num_experts_per_token: 3,
    num_shared_experts: 2,
    num_attention_heads: 4,
    num_key_value_heads: 4,
    q_lora_rank: 48,
    kv_lora_rank: 32,
    qk_nope_head_dim: 16,
    qk_rope_head_dim: 8,
    v_head_dim: 16,
    attn_res_block_size: 3,
    linear_attn_config: { num_heads: 3, head_dim: 32, short_conv_kernel_size: 4, use_full_rank_gate: true, gate_lower_bound: -5.0 },
  },
  // Kimi K3's real widths (93 layers, 896 experts of 3072 × 3584 latent, top-16)
  k3: {
    ...K3_COMMON,
    vocab_size: 163840,
    hidden_size: 7168,
    num_hidden_layers: 93,
    intermediate_size: 33792,
    moe_intermediate_size: 3072,
    routed_expert_hidden_size: 3584,
    num_experts: 896,
    num_experts_per_token: 16,
    num_shared_experts: 2,
    num_attention_heads: 96,
    num_key_value_heads: 96,
    q_lora_rank: 1536,
    kv_lora_rank: 512,
    qk_nope_head_dim: 128,
    qk_rope_head_dim: 64,
    v_head_dim: 128,
    max_position_embeddings: 1048576,
    linear_attn_config: { num_heads: 96, head_dim: 128, short_conv_kernel_size: 4, use_full_rank_gate: true, gate_lower_bound: -5.0 },
  },
};

const isK3 = (shape: ShapeName) => shape === 'k3-tiny' || shape === 'k3';

/** What K3's wrapper adds around its language model's config (`_outer` in a manifest): its name and its ids, at the top of its vocabulary. */
function k3Outer(vocab: number): JsonObject {
  const base = vocab - 256;
  return {
    architectures: ['KimiK3ForConditionalGeneration'],
    model_type: 'kimi_k3',
    bos_token_id: base,
    eos_token_id: base + 2,
    pad_token_id: base + 255,
    media_placeholder_token_id: base + 21,
    image_placeholder: '<|kimi_image_placeholder|>',
    tie_word_embeddings: false,
  };
}

/**
 * K3's turns for chat.json, as the C engine's CLI template writes them: XTML messages, the
 * assistant's reply in a response element (thinking off). The full XTML format is richer.
 */
const K3_CHAT = {
  system: ['<|open|>message role="system"<|sep|>', '<|close|>message<|sep|><|end_of_msg|>'],
  user: ['<|open|>message role="user"<|sep|>', '<|close|>message<|sep|><|end_of_msg|>'],
  assistant: ['<|open|>message role="assistant"<|sep|><|open|>response<|sep|>', '<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>'],
  open: '<|open|>message role="assistant"<|sep|><|open|>response<|sep|>',
};

const COMMON: JsonObject = {
  model_type: 'kimi_linear',
  architectures: ['KimiLinearForCausalLM'],
  first_k_dense_replace: 1,
  moe_layer_freq: 1,
  moe_renormalize: true,
  moe_router_activation_func: 'sigmoid',
  routed_scaling_factor: 2.446,
  use_grouped_topk: true,
  num_expert_group: 1,
  topk_group: 1,
  q_lora_rank: null,
  mla_use_nope: true,
  rms_norm_eps: 1e-5,
  hidden_act: 'silu',
  tie_word_embeddings: false,
  bos_token_id: 1,
  eos_token_id: 2,
};

const QUANT: ExpertQuant = { name: 'VQ3R', stages: 3, vecDim: 8, entries: 256, indexBlock: 64, indexBits: 8 };

/** Kimi's pattern: every fourth layer is MLA, and so is the last one. */
export function layerPattern(layers: number): { kda: number[]; full: number[] } {
  const kda: number[] = [];
  const full: number[] = [];
  for (let i = 0; i < layers; i++) (i % 4 === 3 || i === layers - 1 ? full : kda).push(i + 1);
  return { kda, full };
}

export function synthConfig(opts: SynthOptions): JsonObject {
  const base = SHAPES[opts.shape ?? 'tiny'];
  if (!base) throw new WasteError('E_ARG', `unknown shape "${opts.shape}" (expected ${Object.keys(SHAPES).join(', ')})`);
  const cfg: JsonObject = { ...COMMON, ...structuredClone(base) };
  if (opts.layers !== undefined) cfg.num_hidden_layers = opts.layers;
  if (opts.experts !== undefined) {
    cfg.num_experts = opts.experts;
    cfg.num_experts_per_token = Math.min(cfg.num_experts_per_token as number, opts.experts);
  }
  const extra = structuredClone(opts.config ?? {});
  const lac = { ...(cfg.linear_attn_config as JsonObject), ...((extra.linear_attn_config as JsonObject) ?? {}) };
  Object.assign(cfg, extra);
  const { kda, full } = layerPattern(cfg.num_hidden_layers as number);
  cfg.linear_attn_config = { kda_layers: kda, full_attn_layers: full, ...lac };
  if (isK3(opts.shape ?? 'tiny')) {
    cfg._outer = k3Outer(cfg.vocab_size as number);
    // a block longer than the model is one block, but the C engine refuses it: a model of fewer
    // layers than K3's block gets blocks of its whole length
    if (typeof cfg.attn_res_block_size === 'number' && !(extra.attn_res_block_size !== undefined)) cfg.attn_res_block_size = Math.min(cfg.attn_res_block_size, cfg.num_hidden_layers as number);
  }
  return cfg;
}

/** Write a synthetic container into `dir`; returns its parsed config. */
export function writeSyntheticContainer(dir: string, opts: SynthOptions = {}): KimiConfig {
  const shape = opts.shape ?? 'tiny';
  const k3 = isK3(shape);
  const rawCfg = synthConfig(opts);
  const vocab = rawCfg.vocab_size as number;
  const voc = opts.tokenizer ? synthVocabulary(vocab, k3 ? k3Specials() : undefined) : undefined;
  if (k3) {
    // the language model's ids are its wrapper's: the end of a message stops a reply
    const outer = rawCfg._outer as JsonObject;
    rawCfg.bos_token_id = outer.bos_token_id;
    rawCfg.eos_token_id = outer.eos_token_id;
    rawCfg.pad_token_id = outer.pad_token_id;
  } else if (voc) {
    const id = (t: string) => voc.specials.find((s) => s.text === t)?.id ?? null;
    rawCfg.bos_token_id = id('[BOS]');
    rawCfg.eos_token_id = id('[EOS]');
  }
  // every architecture this generator writes is of the Kimi family
  const cfg = parseModelConfig(Fields.root('synthetic config', rawCfg)) as KimiConfig;
  const prefix = k3 ? 'language_model.' : '';
  const rng = new Rng(opts.seed ?? 0);
  const formats: TrunkFormats = opts.trunkFormats ?? (shape === 'kimi-linear' || shape === 'k3' ? 'converter' : k3 ? 'quantized' : 'mixed');
  const mixed = formats === 'mixed';
  const sparse = opts.sparse ?? false;
  prepareDir(dir, opts.force ?? false);

  const layout = recordLayout(cfg.expertWidth, cfg.moe.inter, QUANT);
  const moeLayers = cfg.layerKinds.flatMap((k, i) => (k.ffn === 'moe' ? [i] : []));
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

  for (const t of kimiTensors(cfg)) {
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
      for (let i = 0; i < per; i++) books[b * per + i] = encodeF16(k3 ? normalF16(rng.uniform(-amp, amp)) : rng.uniform(-amp, amp));
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
    arch: k3 ? 'kimi-k3' : 'kimi_linear',
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
  if (voc) {
    writeFileAtomic(path.join(dir, 'tokenizer.model'), rankFileText(voc.ranks));
    writeFileAtomic(path.join(dir, 'specials.json'), JSON.stringify(voc.specials, null, 1) + '\n');
    if (k3) writeFileAtomic(path.join(dir, 'chat.json'), JSON.stringify(K3_CHAT, null, 1) + '\n');
  }
  // a sparse trunk holds nothing worth a digest (and hashing 27 GiB of holes takes a while)
  writeManifest(dir, manifest, sparse ? [] : moeLayers.length ? [TRUNK, CODEBOOKS] : [TRUNK]);
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
