import type { SynthTensor } from '../synth.js';
import type { TransformerConfig } from './config.js';
import type { MoeNames } from './layout.js';

/** Every tensor of a transformer-family model by its HuggingFace name, in the order the synthetic writers draw them. */
export function* transformerTensors(cfg: TransformerConfig, moe: MoeNames): Generator<SynthTensor> {
  const matrix = (name: string, rows: number, cols: number, std: number, expert = false): SynthTensor => ({ kind: 'matrix', name, rows, cols, std, expert });
  const vector = (name: string, shape: number[], lo: number, hi: number): SynthTensor => ({ kind: 'vector', name, shape, lo, hi });
  const H = cfg.hidden;
  const { heads, kvHeads, headDim: D, qkNorm } = cfg.attention;
  const inv = (n: number) => 1 / Math.sqrt(n);
  yield matrix('model.embed_tokens.weight', cfg.vocab, H, 1);
  for (let L = 0; L < cfg.layers; L++) {
    const p = `model.layers.${L}.`;
    const a = `${p}self_attn.`;
    yield vector(`${p}input_layernorm.weight`, [H], 0.8, 1.2);
    yield vector(`${p}post_attention_layernorm.weight`, [H], 0.8, 1.2);
    yield matrix(`${a}q_proj.weight`, heads * D, H, inv(H));
    yield matrix(`${a}k_proj.weight`, kvHeads * D, H, inv(H));
    yield matrix(`${a}v_proj.weight`, kvHeads * D, H, inv(H));
    yield matrix(`${a}o_proj.weight`, H, heads * D, inv(heads * D));
    if (cfg.bias.qkv) {
      yield vector(`${a}q_proj.bias`, [heads * D], -0.1, 0.1);
      yield vector(`${a}k_proj.bias`, [kvHeads * D], -0.1, 0.1);
      yield vector(`${a}v_proj.bias`, [kvHeads * D], -0.1, 0.1);
    }
    if (cfg.bias.o) yield vector(`${a}o_proj.bias`, [H], -0.1, 0.1);
    if (qkNorm !== 'none') {
      yield vector(`${a}q_norm.weight`, [qkNorm === 'head' ? D : heads * D], 0.8, 1.2);
      yield vector(`${a}k_norm.weight`, [qkNorm === 'head' ? D : kvHeads * D], 0.8, 1.2);
    }
    if (cfg.sinks) yield vector(`${a}sinks`, [heads], -1, 1);
    if (cfg.layerKinds[L].ffn === 'dense') {
      const I = cfg.denseInter;
      yield matrix(`${p}mlp.gate_proj.weight`, I, H, inv(H));
      yield matrix(`${p}mlp.up_proj.weight`, I, H, inv(H));
      yield matrix(`${p}mlp.down_proj.weight`, H, I, inv(I));
      continue;
    }
    const E = cfg.moe.experts;
    const I = cfg.moe.inter;
    yield matrix(p + moe.router, E, H, inv(H));
    if (moe.routerBias) yield vector(p + moe.routerBias, [E], -0.1, 0.1);
    if (moe.selectionBias) yield vector(p + moe.selectionBias, [E], -0.1, 0.1);
    if (moe.expertBias && cfg.expertBias) {
      yield vector(p + moe.expertBias.gateUp, [E, 2 * I], -0.1, 0.1);
      yield vector(p + moe.expertBias.down, [E, H], -0.1, 0.1);
    }
    for (let e = 0; e < E; e++) {
      yield matrix(moe.expert(L, e, 0), I, H, inv(H), true);
      yield matrix(moe.expert(L, e, 1), I, H, inv(H), true);
      yield matrix(moe.expert(L, e, 2), H, I, inv(I), true);
    }
    if (moe.shared && cfg.sharedInter) {
      const S = cfg.sharedInter;
      yield matrix(`${p}${moe.shared}gate_proj.weight`, S, H, inv(H));
      yield matrix(`${p}${moe.shared}up_proj.weight`, S, H, inv(H));
      yield matrix(`${p}${moe.shared}down_proj.weight`, H, S, inv(S));
    }
  }
  yield vector('model.norm.weight', [H], 0.8, 1.2);
  if (!cfg.tieEmbeddings) yield matrix('lm_head.weight', cfg.vocab, H, inv(H));
}

/** ChatML, the turn format of Qwen's releases (synthetic models carry this much of it). */
export const CHATML_TEMPLATE =
  "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

export const CHATML_SPECIALS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'];
