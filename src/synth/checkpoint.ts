import * as fs from 'node:fs';
import * as path from 'node:path';
import { encodeFp8 } from '../checkpoint/fp8.js';
import { encodeInt4 } from '../checkpoint/int4.js';
import { encodeMxfp4 } from '../checkpoint/mxfp4.js';
import { type RawTensor, toBf16, writeSafetensors } from '../checkpoint/write.js';
import type { StackedExperts } from '../checkpoint/stacked.js';
import type { ModelConfig } from '../core/model-config.js';
import { parseModelConfig } from '../model/registry.js';
import type { JsonObject } from '../util/fields.js';
import { Fields } from '../util/fields.js';
import { Rng } from '../util/prng.js';
import { type SynthOptions, prepareDir, synthFamily } from './synth.js';
import { rankFileText } from '../tokenizer/ranks.js';
import { synthVocabulary } from './tokenizer.js';

/**
 * A random checkpoint in HuggingFace format — config.json, bf16 safetensors (one file or sharded
 * with an index) with the real tensor names, tiktoken.model, tokenizer_config.json — the
 * converter's test input. Matrices are bf16 with zero-mean values; A_log, dt_bias, the conv taps,
 * norms and the router bias are f32, as the released checkpoints keep them. The K3 shapes are laid
 * out as K3's release is: the config nested under `text_config` in its wrapper, the language model
 * under `language_model.`, its routed experts packed as MXFP4 (U8 `weight_packed` + E8M0
 * `weight_scale`), a small vision tower and projector beside it with their preprocessing config.
 */
export interface CheckpointOptions extends SynthOptions {
  shards?: number;
  /** A model with a vision tower: vision_config keys over the small tower's (e.g. the release's widths, for a benchmark). */
  vision?: JsonObject;
}

export function writeSyntheticCheckpoint(dir: string, opts: CheckpointOptions = {}): ModelConfig {
  const shape = opts.shape ?? 'tiny';
  const { synth } = synthFamily(shape);
  const flat = synth.config(shape, opts);
  const form = synth.checkpoint(flat, { vision: opts.vision });
  const raw = form.config;
  const prefix = form.prefix;
  const cfg = parseModelConfig(Fields.root('synthetic config', raw));
  const rng = new Rng(opts.seed ?? 0);
  prepareDir(dir, opts.force ?? false);
  const tensors: RawTensor[] = [];
  // Box-Muller normals, scaled: the shape of real weights rather than uniform noise
  const normal = () => Math.sqrt(-2 * Math.log(1 - rng.float())) * Math.cos(2 * Math.PI * rng.float());
  const values = (n: number, std: number) => {
    const v = new Float32Array(n);
    for (let i = 0; i < v.length; i++) v[i] = normal() * std;
    return v;
  };
  // stacked experts: each expert's matrices kept by name until its layer's last is drawn, then
  // the layer's stacked tensors written in its place (as the release orders them)
  const held = new Map<string, Float32Array>();
  const pending = cfg.layerKinds.flatMap((k, L) => (k.ffn === 'moe' ? [L] : []));
  const matrix = (name: string, rows: number, cols: number, std: number, expert = false) => {
    const v = values(rows * cols, std);
    if (form.stacked && expert) {
      held.set(name.slice(prefix.length), v);
      const s = form.stacked;
      if (pending.length && held.has(s.expert(pending[0], cfg.moe.experts - 1, 2))) tensors.push(...stackLayer(cfg, s, held, prefix, form.experts === 'mxfp4-stacked', pending.shift()!));
    } else if (form.experts === 'mxfp4-packed' && expert) {
      const { packed, scales } = encodeMxfp4(v, rows, cols);
      const base = name.replace(/\.weight$/, '');
      tensors.push({ name: `${base}.weight_packed`, dtype: 'U8', shape: [rows, cols / 2], data: packed });
      tensors.push({ name: `${base}.weight_scale`, dtype: 'U8', shape: [rows, cols / 32], data: scales });
    } else if (form.experts === 'int4-pack-quantized' && expert) {
      // compressed-tensors' pack-quantized INT4 (Kimi K2-Thinking): groups of 32 along a row, bf16 scales
      const { packed, scales } = encodeInt4(v, rows, cols, 32);
      const base = name.replace(/\.weight$/, '');
      tensors.push({ name: `${base}.weight_packed`, dtype: 'I32', shape: [rows, Math.ceil(cols / 8)], data: packed });
      tensors.push({ name: `${base}.weight_scale`, dtype: 'BF16', shape: [rows, cols / 32], data: toBf16(scales) });
      tensors.push({ name: `${base}.weight_shape`, dtype: 'I32', shape: [2], data: new Uint8Array(new Int32Array([rows, cols]).buffer) });
    } else if (form.fp8?.(name.slice(prefix.length))) {
      const { bytes, scales } = encodeFp8(v, rows, cols);
      tensors.push({ name, dtype: 'F8_E4M3', shape: [rows, cols], data: bytes });
      tensors.push({ name: `${name}_scale_inv`, dtype: 'F32', shape: [Math.ceil(rows / 128), Math.ceil(cols / 128)], data: new Uint8Array(scales.buffer) });
    } else tensors.push({ name, dtype: 'BF16', shape: [rows, cols], data: toBf16(v) });
  };
  const vector = (name: string, shape: number[], lo: number, hi: number, valid = Infinity) => {
    const v = new Float32Array(shape.reduce((a, b) => a * b, 1));
    for (let i = 0; i < Math.min(v.length, valid); i++) v[i] = rng.uniform(lo, hi);
    tensors.push({ name, dtype: 'F32', shape, data: new Uint8Array(v.buffer) });
  };
  const named = form.rename ?? ((n: string) => prefix + n);
  for (const t of synth.tensors(cfg)) {
    if (t.kind === 'matrix') matrix(named(t.name), t.rows, t.cols, t.std, t.expert);
    else vector(named(t.name), t.shape, t.lo, t.hi, t.valid);
  }
  if (form.stackExperts) stackExperts(tensors);
  for (const t of form.extra) {
    const v = values(t.shape.reduce((a, b) => a * b, 1), t.std);
    if (t.mean) for (let i = 0; i < v.length; i++) v[i] += t.mean;
    tensors.push({ name: t.name, dtype: 'BF16', shape: t.shape, data: toBf16(v) });
  }
  writeSafetensors(dir, tensors, opts.shards ?? 1);
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(raw, null, 2) + '\n');
  for (const [name, text] of Object.entries(form.files)) fs.writeFileSync(path.join(dir, name), text);
  const voc = synthVocabulary(cfg.vocab, synth.specials?.(flat) ?? []);
  fs.writeFileSync(path.join(dir, 'tiktoken.model'), rankFileText(voc.ranks));
  fs.writeFileSync(
    path.join(dir, 'tokenizer_config.json'),
    JSON.stringify(
      {
        added_tokens_decoder: Object.fromEntries(voc.specials.map((t) => [String(t.id), { content: t.text, special: true }])),
        ...(form.chatTemplate !== undefined ? { chat_template: form.chatTemplate } : {}),
      },
      null,
      2,
    ) + '\n',
  );
  return cfg;
}

/** Every layer's per-expert matrices (bf16, drawn as they are) replaced by the stacked pair a release stores: gate_up_proj [E, 2I, H] (gate rows first) and down_proj [E, H, I]. */
function stackExperts(tensors: RawTensor[]): void {
  const groups = new Map<string, Map<number, RawTensor[]>>();
  const rest: RawTensor[] = [];
  for (const t of tensors) {
    const m = /^(.*\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$/.exec(t.name);
    if (!m) {
      rest.push(t);
      continue;
    }
    const g = groups.get(m[1]) ?? new Map<number, RawTensor[]>();
    groups.set(m[1], g);
    const e = Number(m[2]);
    g.set(e, [...(g.get(e) ?? []), t]);
  }
  const cat = (parts: Uint8Array[]) => {
    const out = new Uint8Array(parts.reduce((a, p) => a + p.length, 0));
    let o = 0;
    for (const p of parts) {
      out.set(p, o);
      o += p.length;
    }
    return out;
  };
  for (const [base, g] of groups) {
    const es = [...g.keys()].sort((a, b) => a - b);
    const kind = (e: number, k: string) => g.get(e)!.find((t) => t.name.endsWith(`.${k}_proj.weight`))!;
    const [I, H] = kind(es[0], 'gate').shape;
    rest.push({ name: `${base}.gate_up_proj`, dtype: 'BF16', shape: [es.length, 2 * I, H], data: cat(es.flatMap((e) => [kind(e, 'gate').data, kind(e, 'up').data])) });
    rest.push({ name: `${base}.down_proj`, dtype: 'BF16', shape: [es.length, H, I], data: cat(es.map((e) => kind(e, 'down').data)) });
  }
  tensors.splice(0, tensors.length, ...rest);
}

/**
 * MoE layer L's experts stacked as `s` says (and let go of): the fused gate/up with gate and up
 * rows alternating and the down, as MXFP4 blocks and scales ([E, R, C/32, 16], [E, R, C/32]) or
 * bf16 [E, C, R] (in × out).
 */
function stackLayer(cfg: ModelConfig, s: StackedExperts, held: Map<string, Float32Array>, prefix: string, mxfp4: boolean, L: number): RawTensor[] {
  const out: RawTensor[] = [];
  const E = cfg.moe.experts;
  const I = cfg.moe.inter;
  const W = cfg.expertWidth;
  const take = (e: number, kind: 0 | 1 | 2) => {
    const v = held.get(s.expert(L, e, kind));
    if (!v) throw new Error(`synthetic checkpoint: no ${s.expert(L, e, kind)} to stack`);
    held.delete(s.expert(L, e, kind));
    return v;
  };
  // [E][R][C] out × in, the fused one's rows alternating gate, up
  const gu = new Float32Array(E * 2 * I * W);
  const down = new Float32Array(E * W * I);
  for (let e = 0; e < E; e++) {
    const [g, u, d] = [take(e, 0), take(e, 1), take(e, 2)];
    for (let i = 0; i < I; i++) {
      gu.set(g.subarray(i * W, (i + 1) * W), (e * 2 * I + 2 * i) * W);
      gu.set(u.subarray(i * W, (i + 1) * W), (e * 2 * I + 2 * i + 1) * W);
    }
    down.set(d, e * W * I);
  }
  const put = (name: string, x: Float32Array, R: number, C: number) => {
    const full = `${prefix}model.layers.${L}.${name}`;
    if (mxfp4) {
      const { packed, scales } = encodeMxfp4(x, E * R, C);
      out.push({ name: `${full}_blocks`, dtype: 'U8', shape: [E, R, C / 32, 16], data: packed });
      out.push({ name: `${full}_scales`, dtype: 'U8', shape: [E, R, C / 32], data: scales });
      return;
    }
    const t = new Float32Array(E * R * C);
    for (let e = 0; e < E; e++) for (let r = 0; r < R; r++) for (let c = 0; c < C; c++) t[(e * C + c) * R + r] = x[(e * R + r) * C + c];
    out.push({ name: full, dtype: 'BF16', shape: [E, C, R], data: toBf16(t) });
  };
  put(s.gateUp, gu, 2 * I, W);
  put(s.down, down, W, I);
  return out;
}
