import * as fs from 'node:fs';
import * as path from 'node:path';
import { type RawTensor, toBf16, writeSafetensors } from '../checkpoint/write.js';
import { type KimiLinearConfig, parseKimiLinearConfig } from '../model/kimi-linear/config.js';
import { Fields } from '../util/fields.js';
import { Rng } from '../util/prng.js';
import { type SynthOptions, prepareDir, synthConfig } from './synth.js';
import { kimiTensors } from './tensors.js';
import { rankFileText } from '../tokenizer/ranks.js';
import { synthVocabulary } from './tokenizer.js';

export { KIMI_STYLE_TEMPLATE } from '../tokenizer/kimi-template.js';
import { KIMI_STYLE_TEMPLATE } from '../tokenizer/kimi-template.js';

/**
 * A random Kimi-Linear checkpoint in HuggingFace format — config.json, bf16 safetensors (one file
 * or sharded with an index) with the real tensor names, tiktoken.model, tokenizer_config.json — the
 * converter's test input. Matrices are bf16 with zero-mean values; A_log, dt_bias, the conv taps,
 * norms and the router bias are f32, as the released checkpoints keep them.
 */
export interface CheckpointOptions extends SynthOptions {
  shards?: number;
}

export function writeSyntheticCheckpoint(dir: string, opts: CheckpointOptions = {}): KimiLinearConfig {
  const raw = synthConfig(opts);
  const cfg = parseKimiLinearConfig(Fields.root('synthetic config', raw));
  const rng = new Rng(opts.seed ?? 0);
  prepareDir(dir, opts.force ?? false);
  const tensors: RawTensor[] = [];
  // Box-Muller normals, scaled: the shape of real weights rather than uniform noise
  const normal = () => Math.sqrt(-2 * Math.log(1 - rng.float())) * Math.cos(2 * Math.PI * rng.float());
  const matrix = (name: string, rows: number, cols: number, std: number) => {
    const v = new Float32Array(rows * cols);
    for (let i = 0; i < v.length; i++) v[i] = normal() * std;
    tensors.push({ name, dtype: 'BF16', shape: [rows, cols], data: toBf16(v) });
  };
  const vector = (name: string, shape: number[], lo: number, hi: number) => {
    const v = new Float32Array(shape.reduce((a, b) => a * b, 1));
    for (let i = 0; i < v.length; i++) v[i] = rng.uniform(lo, hi);
    tensors.push({ name, dtype: 'F32', shape, data: new Uint8Array(v.buffer) });
  };
  for (const t of kimiTensors(cfg)) {
    if (t.kind === 'matrix') matrix(t.name, t.rows, t.cols, t.std);
    else vector(t.name, t.shape, t.lo, t.hi);
  }
  writeSafetensors(dir, tensors, opts.shards ?? 1);
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(raw, null, 2) + '\n');
  const voc = synthVocabulary(cfg.vocab);
  fs.writeFileSync(path.join(dir, 'tiktoken.model'), rankFileText(voc.ranks));
  fs.writeFileSync(
    path.join(dir, 'tokenizer_config.json'),
    JSON.stringify(
      {
        added_tokens_decoder: Object.fromEntries(voc.specials.map((t) => [String(t.id), { content: t.text, special: true }])),
        chat_template: KIMI_STYLE_TEMPLATE,
      },
      null,
      2,
    ) + '\n',
  );
  return cfg;
}
