import * as fs from 'node:fs';
import * as path from 'node:path';
import { encodeMxfp4 } from '../checkpoint/mxfp4.js';
import { type RawTensor, toBf16, writeSafetensors } from '../checkpoint/write.js';
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
  const matrix = (name: string, rows: number, cols: number, std: number, expert = false) => {
    const v = values(rows * cols, std);
    if (form.experts === 'mxfp4-packed' && expert) {
      const { packed, scales } = encodeMxfp4(v, rows, cols);
      const base = name.replace(/\.weight$/, '');
      tensors.push({ name: `${base}.weight_packed`, dtype: 'U8', shape: [rows, cols / 2], data: packed });
      tensors.push({ name: `${base}.weight_scale`, dtype: 'U8', shape: [rows, cols / 32], data: scales });
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
