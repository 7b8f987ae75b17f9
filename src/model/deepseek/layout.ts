import type { Tensor } from '../../container/tensor.js';
import type { Binder, TrunkLayout } from '../base/binder.js';
import type { FfnWeights } from '../blocks/ffn.js';
import type { MlaWeights } from '../blocks/mla.js';
import type { MoeWeights } from '../blocks/moe.js';
import { ffnTensors } from '../transformer/layout.js';
import type { DeepseekConfig } from './config.js';
import { deepseekExpertTensor } from './names.js';

/** One layer's weights: its two norms, MLA, and a dense SwiGLU or the MoE block. */
export interface DeepseekLayer {
  inputNorm: Float32Array;
  postNorm: Float32Array;
  attn: MlaWeights;
  ffn: ({ kind: 'dense' } & FfnWeights) | MoeWeights;
}

function mlaTensors(c: DeepseekConfig, a: string, b: Binder): MlaWeights {
  const H = c.hidden;
  const m = c.mla;
  const qOut = m.heads * (m.qkNope + m.qkRope);
  return {
    kind: 'mla',
    q: m.qLoraRank
      ? { a: b.matrix(`${a}q_a_proj.weight`, m.qLoraRank, H), norm: b.vector(`${a}q_a_layernorm.weight`, m.qLoraRank), b: b.matrix(`${a}q_b_proj.weight`, qOut, m.qLoraRank) }
      : { proj: b.matrix(`${a}q_proj.weight`, qOut, H) },
    kvA: b.matrix(`${a}kv_a_proj_with_mqa.weight`, m.kvLoraRank + m.qkRope, H),
    kvNorm: b.vector(`${a}kv_a_layernorm.weight`, m.kvLoraRank),
    kvB: b.matrix(`${a}kv_b_proj.weight`, m.heads * (m.qkNope + m.vHead), m.kvLoraRank),
    oProj: b.matrix(`${a}o_proj.weight`, H, m.heads * m.vHead),
    bias: c.attentionBias
      ? { qA: m.qLoraRank ? b.vector(`${a}q_a_proj.bias`, m.qLoraRank) : undefined, kvA: b.vector(`${a}kv_a_proj_with_mqa.bias`, m.kvLoraRank + m.qkRope), o: b.vector(`${a}o_proj.bias`, H) }
      : undefined,
  };
}

function moeTensors(c: DeepseekConfig, L: number, b: Binder): MoeWeights {
  const H = c.hidden;
  const E = c.moe.experts;
  const I = c.moe.inter;
  const m = `model.layers.${L}.mlp.`;
  const bias = `${m}gate.e_score_correction_bias`;
  return {
    kind: 'moe',
    router: b.matrix(`${m}gate.weight`, E, H),
    // HF reads an absent correction bias as zeros
    bias: b.has(bias) ? b.vector(bias, E, [[E], [1, E]]) : b.vector('', E),
    shared: c.sharedInter ? ffnTensors(`${m}shared_experts.`, c.sharedInter, H, b) : undefined,
    booksT: b.books(),
    dense: b.dense()
      ? Array.from({ length: E }, (_, e) => ({ gate: b.matrix(deepseekExpertTensor(L, e, 0), I, H), up: b.matrix(deepseekExpertTensor(L, e, 1), I, H), down: b.matrix(deepseekExpertTensor(L, e, 2), H, I) }))
      : undefined,
  };
}

/** The DeepSeek-V3 trunk (the MTP layers after the last are never asked for). */
export const DEEPSEEK_LAYOUT: TrunkLayout<DeepseekConfig, DeepseekLayer, object> = {
  layer(c: DeepseekConfig, L: number, b: Binder): DeepseekLayer {
    const H = c.hidden;
    const p = `model.layers.${L}.`;
    return {
      inputNorm: b.vector(`${p}input_layernorm.weight`, H),
      postNorm: b.vector(`${p}post_attention_layernorm.weight`, H),
      attn: mlaTensors(c, `${p}self_attn.`, b),
      ffn: c.layerKinds[L].ffn === 'dense' ? { kind: 'dense', ...ffnTensors(`${p}mlp.`, c.denseInter, H, b) } : moeTensors(c, L, b),
    };
  },
  head(c: DeepseekConfig, b: Binder): { finalNorm: Float32Array; lmHead: Tensor } {
    return { finalNorm: b.vector('model.norm.weight', c.hidden), lmHead: b.matrix(c.tieEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight', c.vocab, c.hidden) };
  },
};
