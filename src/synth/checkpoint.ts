import * as fs from 'node:fs';
import * as path from 'node:path';
import { type RawTensor, toBf16, writeSafetensors } from '../checkpoint/write.js';
import { type KimiLinearConfig, parseKimiLinearConfig } from '../model/kimi-linear/config.js';
import { Fields } from '../util/fields.js';
import { Rng } from '../util/prng.js';
import { type SynthOptions, prepareDir, synthConfig } from './synth.js';

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
  const H = cfg.hidden;
  const inv = (n: number) => 1 / Math.sqrt(n);
  matrix('model.embed_tokens.weight', cfg.vocab, H, 1);
  for (let L = 0; L < cfg.layers; L++) {
    const p = `model.layers.${L}.`;
    const a = `${p}self_attn.`;
    vector(`${p}input_layernorm.weight`, [H], 0.8, 1.2);
    vector(`${p}post_attention_layernorm.weight`, [H], 0.8, 1.2);
    if (cfg.layerKinds[L].attn === 'kda') {
      const { heads: NH, headDim: D, convKernel: K } = cfg.kda;
      const C = NH * D;
      for (const x of ['q', 'k', 'v']) matrix(`${a}${x}_proj.weight`, C, H, inv(H));
      for (const x of ['q', 'k', 'v']) vector(`${a}${x}_conv1d.weight`, [C, 1, K], -0.6, 0.6);
      matrix(`${a}f_a_proj.weight`, D, H, inv(H));
      matrix(`${a}f_b_proj.weight`, C, D, inv(D));
      vector(`${a}dt_bias`, [C], -1, 1);
      vector(`${a}A_log`, [1, 1, NH, 1], -1.5, 0.5);
      matrix(`${a}b_proj.weight`, NH, H, inv(H));
      matrix(`${a}g_a_proj.weight`, D, H, inv(H));
      matrix(`${a}g_b_proj.weight`, C, D, inv(D));
      vector(`${a}o_norm.weight`, [D], 0.8, 1.2);
      matrix(`${a}o_proj.weight`, H, C, inv(C));
    } else {
      const m = cfg.mla;
      matrix(`${a}q_proj.weight`, m.heads * (m.qkNope + m.qkRope), H, inv(H));
      matrix(`${a}kv_a_proj_with_mqa.weight`, m.kvLoraRank + m.qkRope, H, inv(H));
      vector(`${a}kv_a_layernorm.weight`, [m.kvLoraRank], 0.8, 1.2);
      matrix(`${a}kv_b_proj.weight`, m.heads * (m.qkNope + m.vHead), m.kvLoraRank, inv(m.kvLoraRank));
      matrix(`${a}o_proj.weight`, H, m.heads * m.vHead, inv(m.heads * m.vHead));
    }
    if (cfg.layerKinds[L].ffn === 'dense') {
      const I = cfg.denseInter;
      matrix(`${p}mlp.gate_proj.weight`, I, H, inv(H));
      matrix(`${p}mlp.up_proj.weight`, I, H, inv(H));
      matrix(`${p}mlp.down_proj.weight`, H, I, inv(I));
    } else {
      const m = `${p}block_sparse_moe.`;
      const E = cfg.moe.experts;
      const I = cfg.moe.inter;
      matrix(`${m}gate.weight`, E, H, inv(H));
      vector(`${m}gate.e_score_correction_bias`, [E], -0.1, 0.1);
      for (let e = 0; e < E; e++) {
        matrix(`${m}experts.${e}.w1.weight`, I, H, inv(H));
        matrix(`${m}experts.${e}.w3.weight`, I, H, inv(H));
        matrix(`${m}experts.${e}.w2.weight`, H, I, inv(I));
      }
      const S = I * cfg.moe.shared;
      if (S > 0) {
        matrix(`${m}shared_experts.gate_proj.weight`, S, H, inv(H));
        matrix(`${m}shared_experts.up_proj.weight`, S, H, inv(H));
        matrix(`${m}shared_experts.down_proj.weight`, H, S, inv(S));
      }
    }
  }
  vector('model.norm.weight', [H], 0.8, 1.2);
  matrix('lm_head.weight', cfg.vocab, H, inv(H));
  writeSafetensors(dir, tensors, opts.shards ?? 1);
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(raw, null, 2) + '\n');
  // a byte-level vocabulary: enough for the converter to copy and for a tokenizer to load
  const lines: string[] = [];
  const byteTokens = Math.min(256, cfg.vocab);
  for (let b = 0; b < byteTokens; b++) lines.push(`${Buffer.from([b]).toString('base64')} ${b}`);
  fs.writeFileSync(path.join(dir, 'tiktoken.model'), lines.join('\n') + '\n');
  fs.writeFileSync(
    path.join(dir, 'tokenizer_config.json'),
    JSON.stringify(
      {
        added_tokens_decoder: Object.fromEntries(
          ['[BOS]', '[EOS]', '<|im_end|>'].map((t, i) => [String(cfg.vocab - 3 + i), { content: t, special: true }]),
        ),
        chat_template: "{% for m in messages %}<|im_{{ m.role }}|>{{ m.content }}<|im_end|>{% endfor %}",
      },
      null,
      2,
    ) + '\n',
  );
  return cfg;
}
