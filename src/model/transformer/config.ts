import type { LayerKind, ModelConfig } from '../../core/model-config.js';
import type { Fields } from '../../util/fields.js';
import type { AttentionShape } from '../blocks/attention.js';
import type { Activation } from '../blocks/ffn.js';
import type { RopeConfig } from '../blocks/rope.js';
import type { RouterConfig } from '../blocks/router.js';

/**
 * The pre-norm decoder most MoE families are (Qwen3-MoE, Mixtral, OLMoE, GLM-4.5, gpt-oss): per
 * layer x += attention(norm(x)) over a key/value cache, then x += FFN(norm(x)) with a dense SwiGLU
 * or routed experts; what differs between them is a parameter here, read by each family's own
 * config parser.
 */
export interface TransformerConfig extends ModelConfig {
  attention: AttentionShape;
  rope: RopeConfig;
  /** [layers] the window each layer attends over (0: every position). */
  windows: number[];
  act: Activation;
  /** A dense layer's intermediate width (0 when there is none). */
  denseInter: number;
  router: RouterConfig;
  /** The shared experts' total intermediate width (0: none). */
  sharedInter: number;
  /** The LM head is the embedding matrix. */
  tieEmbeddings: boolean;
  /** Biases on the q/k/v projections, and on o_proj. */
  bias: { qkv: boolean; o: boolean };
  /** Learned per-head sinks in every softmax (gpt-oss). */
  sinks: boolean;
  /** Routed experts carry biases (gpt-oss). */
  expertBias: boolean;
  /** Layers of the checkpoint the model does not run (multi-token prediction), by index: their tensors are left unread. */
  skippedLayers: number;
}

/** The widest input of any product of a transformer config. */
export function transformerWidest(cfg: TransformerConfig): number {
  const a = cfg.attention;
  return Math.max(cfg.hidden, a.heads * a.headDim, cfg.denseInter, cfg.moe.inter, cfg.sharedInter);
}

/** Total and per-token parameters (embedding and head included; the head once if tied). */
export function countTransformerParams(cfg: TransformerConfig): { total: number; active: number } {
  const H = cfg.hidden;
  const a = cfg.attention;
  const attn = H * a.heads * a.headDim * 2 + H * a.kvHeads * a.headDim * 2;
  const expert = 3 * H * cfg.moe.inter + (cfg.expertBias ? 2 * cfg.moe.inter + H : 0);
  let total = cfg.vocab * H * (cfg.tieEmbeddings ? 1 : 2);
  let active = total;
  for (const k of cfg.layerKinds) {
    total += attn;
    active += attn;
    if (k.ffn === 'dense') {
      total += 3 * H * cfg.denseInter;
      active += 3 * H * cfg.denseInter;
    } else {
      const shared = 3 * H * cfg.sharedInter + H * cfg.moe.experts;
      total += cfg.moe.experts * expert + shared;
      active += cfg.moe.topK * expert + shared;
    }
  }
  return { total, active };
}

/** A config's token ids: bos, and eos as one id or a list (each within the vocabulary). */
export function tokenIds(cfg: { raw(key: string): unknown }, vocab: number): { bosTokenId?: number; eosTokenIds: number[] } {
  const ok = (x: unknown): x is number => typeof x === 'number' && Number.isInteger(x) && x >= 0 && x < vocab;
  const eos = cfg.raw('eos_token_id');
  const bos = cfg.raw('bos_token_id');
  return { bosTokenId: ok(bos) ? bos : undefined, eosTokenIds: (Array.isArray(eos) ? eos : [eos]).filter(ok) };
}

/** `architectures[0]`, else the model type: the name `info` shows. */
export function archNameOf(cfg: { raw(key: string): unknown }, fallback: string): string {
  const archs = cfg.raw('architectures');
  return Array.isArray(archs) && typeof archs[0] === 'string' ? archs[0].slice(0, 128) : fallback;
}

/** A boolean key whose absence would change the model (HF's default is not every release's): required by name. */
export function requiredBool(cfg: Fields, key: string, why: string): boolean {
  if (!cfg.given(key)) throw cfg.fail(key, `is required (true or false: ${why})`);
  return cfg.bool(key, false);
}

/** Layer kinds of a decoder, each layer MoE where `moeAt` says, dense elsewhere. */
export function moeLayerKinds(layers: number, moeAt: (L: number) => boolean): LayerKind[] {
  return Array.from({ length: layers }, (_, L) => ({ attn: 'attention', ffn: moeAt(L) ? 'moe' : 'dense' }));
}
