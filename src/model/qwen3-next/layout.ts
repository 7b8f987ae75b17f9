import type { Tensor } from '../../container/tensor.js';
import type { Binder, TrunkLayout } from '../base/binder.js';
import type { AttentionWeights } from '../blocks/attention.js';
import type { FfnWeights } from '../blocks/ffn.js';
import { type GdnWeights, gdnChannels, gdnProjWidths } from '../blocks/gated-deltanet.js';
import type { MoeWeights } from '../blocks/moe.js';
import { ffnTensors } from '../transformer/layout.js';
import type { Qwen3NextConfig } from './config.js';
import { GDN_PROJ, QWEN3_NEXT_NAMES, SHARED_GATE } from './names.js';

/** One layer's weights: its two norms (stored as 1 + w), its sequence mixer `attn` (attention or Gated DeltaNet), its FFN. */
export interface Qwen3NextLayer {
  inputNorm: Float32Array;
  postNorm: Float32Array;
  attn: AttentionWeights | GdnWeights;
  ffn: ({ kind: 'dense' } & FfnWeights) | MoeWeights;
}

/** A zero-centred norm's weights as the kernels' RMSNorm multiplies: 1 + w, in f32 as HF computes it (planning reads nothing: an empty array). */
function centred(v: Float32Array): Float32Array {
  for (let i = 0; i < v.length; i++) v[i] = Math.fround(1 + v[i]);
  return v;
}

function attentionTensors(cfg: Qwen3NextConfig, L: number, b: Binder): AttentionWeights {
  const H = cfg.hidden;
  const { heads, kvHeads, headDim: D } = cfg.attention;
  const a = `model.layers.${L}.self_attn.`;
  const bias = (name: string, n: number) => (cfg.bias.qkv ? b.vector(`${a}${name}.bias`, n) : undefined);
  return {
    q: b.matrix(`${a}q_proj.weight`, 2 * heads * D, H),
    k: b.matrix(`${a}k_proj.weight`, kvHeads * D, H),
    v: b.matrix(`${a}v_proj.weight`, kvHeads * D, H),
    o: b.matrix(`${a}o_proj.weight`, H, heads * D),
    qBias: bias('q_proj', 2 * heads * D),
    kBias: bias('k_proj', kvHeads * D),
    vBias: bias('v_proj', kvHeads * D),
    oBias: cfg.bias.o ? b.vector(`${a}o_proj.bias`, H) : undefined,
    qNorm: centred(b.vector(`${a}q_norm.weight`, D)),
    kNorm: centred(b.vector(`${a}k_norm.weight`, D)),
    outputGate: true,
  };
}

function gdnTensors(cfg: Qwen3NextConfig, L: number, b: Binder): GdnWeights {
  const g = cfg.gdn;
  const a = `model.layers.${L}.linear_attn.`;
  const widths = gdnProjWidths(g);
  const C = gdnChannels(g);
  return {
    kind: 'gdn',
    proj: GDN_PROJ[g.packing].map((n, i) => b.matrix(`${a}${n}.weight`, widths[i], cfg.hidden)),
    conv: b.vector(`${a}conv1d.weight`, C * g.convKernel, [[C, 1, g.convKernel]]),
    dtBias: b.vector(`${a}dt_bias`, g.vHeads),
    aLog: b.vector(`${a}A_log`, g.vHeads),
    norm: b.vector(`${a}norm.weight`, g.headDim),
    out: b.matrix(`${a}out_proj.weight`, cfg.hidden, g.vHeads * g.headDim),
  };
}

function moeTensors(cfg: Qwen3NextConfig, L: number, b: Binder): MoeWeights {
  const n = QWEN3_NEXT_NAMES;
  const H = cfg.hidden;
  const E = cfg.moe.experts;
  const I = cfg.moe.inter;
  const p = `model.layers.${L}.`;
  return {
    kind: 'moe',
    router: b.matrix(p + n.router, E, H),
    bias: b.vector('', E),
    shared: ffnTensors(p + n.shared!, cfg.sharedInter, H, b),
    sharedGate: b.matrix(p + SHARED_GATE, 1, H),
    booksT: b.books(),
    dense: b.dense()
      ? Array.from({ length: E }, (_, e) => ({ gate: b.matrix(n.expert(L, e, 0), I, H), up: b.matrix(n.expert(L, e, 1), I, H), down: b.matrix(n.expert(L, e, 2), H, I) }))
      : undefined,
  };
}

/** Qwen3-Next's trunk: per layer the norms, the mixer its layer kind names, the FFN; then the final norm and the head. */
export const QWEN3_NEXT_LAYOUT: TrunkLayout<Qwen3NextConfig, Qwen3NextLayer, object> = {
  layer(cfg, L, b) {
    const H = cfg.hidden;
    const p = `model.layers.${L}.`;
    return {
      inputNorm: centred(b.vector(`${p}input_layernorm.weight`, H)),
      postNorm: centred(b.vector(`${p}post_attention_layernorm.weight`, H)),
      attn: cfg.layerKinds[L].attn === 'gdn' ? gdnTensors(cfg, L, b) : attentionTensors(cfg, L, b),
      ffn: cfg.layerKinds[L].ffn === 'dense' ? { kind: 'dense', ...ffnTensors(`${p}mlp.`, cfg.denseInter, H, b) } : moeTensors(cfg, L, b),
    };
  },
  head(cfg, b): { finalNorm: Float32Array; lmHead: Tensor } {
    return { finalNorm: centred(b.vector('model.norm.weight', cfg.hidden)), lmHead: b.matrix(cfg.tieEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight', cfg.vocab, cfg.hidden) };
  },
};
