import type { Tensor } from '../../container/tensor.js';
import type { Binder, TrunkLayout } from '../base/binder.js';
import type { FfnWeights } from '../blocks/ffn.js';
import type { MoeWeights } from '../blocks/moe.js';
import type { TransformerConfig } from './config.js';
import type { TransformerLayer } from './network.js';

/**
 * Where a family keeps its MoE tensors under `model.layers.L.` (the rest — norms, attention, a
 * dense MLP, the head — is named alike in every transformer family).
 */
export interface MoeNames {
  /** The router: `mlp.gate.weight` (Qwen3, OLMoE, GLM), `block_sparse_moe.gate.weight` (Mixtral), `mlp.router.weight` (gpt-oss). */
  router: string;
  /** The router's own bias, added to its logits (gpt-oss). */
  routerBias?: string;
  /** A selection-only bias (GLM's e_score_correction_bias). */
  selectionBias?: string;
  /** The shared experts' FFN prefix (GLM's `mlp.shared_experts.`). */
  shared?: string;
  /** The routed experts' biases, stacked (gpt-oss): gate and up [E, 2·inter] alternating per row, down [E, width]. */
  expertBias?: { gateUp: string; down: string };
  /** Matrix `kind` (0 gate, 1 up, 2 down) of routed expert e: a checkpoint's name. */
  expert(layer: number, e: number, kind: 0 | 1 | 2): string;
}

/** A dense FFN's tensors under `p` (`model.layers.L.mlp.`, a shared expert's prefix…). */
export function ffnTensors(p: string, inter: number, hidden: number, b: Binder): FfnWeights {
  return {
    gate: b.matrix(`${p}gate_proj.weight`, inter, hidden),
    up: b.matrix(`${p}up_proj.weight`, inter, hidden),
    down: b.matrix(`${p}down_proj.weight`, hidden, inter),
  };
}

function moeTensors(cfg: TransformerConfig, L: number, n: MoeNames, b: Binder): MoeWeights {
  const H = cfg.hidden;
  const E = cfg.moe.experts;
  const I = cfg.moe.inter;
  const p = `model.layers.${L}.`;
  return {
    kind: 'moe',
    router: b.matrix(p + n.router, E, H),
    bias: n.selectionBias && b.has(p + n.selectionBias) ? b.vector(p + n.selectionBias, E, [[E], [1, E]]) : b.vector('', E),
    routerBias: n.routerBias ? b.vector(p + n.routerBias, E) : undefined,
    shared: n.shared && cfg.sharedInter ? ffnTensors(p + n.shared, cfg.sharedInter, H, b) : undefined,
    expertBias:
      cfg.expertBias && n.expertBias
        ? { gateUp: b.vector(p + n.expertBias.gateUp, E * 2 * I, [[E, 2 * I]]), down: b.vector(p + n.expertBias.down, E * cfg.expertWidth, [[E, cfg.expertWidth]]) }
        : undefined,
    booksT: b.books(),
    dense: b.dense()
      ? Array.from({ length: E }, (_, e) => ({ gate: b.matrix(n.expert(L, e, 0), I, H), up: b.matrix(n.expert(L, e, 1), I, H), down: b.matrix(n.expert(L, e, 2), H, I) }))
      : undefined,
  };
}

/** The transformer layout of a family whose MoE tensors are named by `moe`. */
export function transformerLayout(moe: MoeNames): TrunkLayout<TransformerConfig, TransformerLayer, object> {
  return {
    layer(cfg: TransformerConfig, L: number, b: Binder): TransformerLayer {
      const H = cfg.hidden;
      const { heads, kvHeads, headDim: D, qkNorm } = cfg.attention;
      const p = `model.layers.${L}.`;
      const a = `${p}self_attn.`;
      const bias = (name: string, n: number, on: boolean) => (on ? b.vector(`${a}${name}.bias`, n) : undefined);
      const normWidth = (heads_: number) => (qkNorm === 'head' ? D : heads_ * D);
      return {
        inputNorm: b.vector(`${p}input_layernorm.weight`, H),
        postNorm: b.vector(`${p}post_attention_layernorm.weight`, H),
        attn: {
          q: b.matrix(`${a}q_proj.weight`, heads * D, H),
          k: b.matrix(`${a}k_proj.weight`, kvHeads * D, H),
          v: b.matrix(`${a}v_proj.weight`, kvHeads * D, H),
          o: b.matrix(`${a}o_proj.weight`, H, heads * D),
          qBias: bias('q_proj', heads * D, cfg.bias.qkv),
          kBias: bias('k_proj', kvHeads * D, cfg.bias.qkv),
          vBias: bias('v_proj', kvHeads * D, cfg.bias.qkv),
          oBias: bias('o_proj', H, cfg.bias.o),
          qNorm: qkNorm === 'none' ? undefined : b.vector(`${a}q_norm.weight`, normWidth(heads)),
          kNorm: qkNorm === 'none' ? undefined : b.vector(`${a}k_norm.weight`, normWidth(kvHeads)),
          sinks: cfg.sinks ? b.vector(`${a}sinks`, heads) : undefined,
        },
        ffn: cfg.layerKinds[L].ffn === 'dense' ? { kind: 'dense', ...ffnTensors(`${p}mlp.`, cfg.denseInter, H, b) } : moeTensors(cfg, L, moe, b),
      };
    },
    head(cfg: TransformerConfig, b: Binder): { finalNorm: Float32Array; lmHead: Tensor } {
      return { finalNorm: b.vector('model.norm.weight', cfg.hidden), lmHead: b.matrix(cfg.tieEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight', cfg.vocab, cfg.hidden) };
    },
  };
}
