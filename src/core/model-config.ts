/**
 * What every part of the engine may know of a model without knowing its architecture: its sizes,
 * which layers attend how and which route to experts, and the shape of a routed expert. An
 * architecture's own config extends this with what only its forward pass reads.
 */
export interface ModelConfig {
  /** The architecture that runs it (`kimi-linear`, `kimi-k3`). */
  arch: string;
  layers: number;
  hidden: number;
  vocab: number;
  /** RMSNorm epsilon. */
  eps: number;
  /** Per layer: which attention and which FFN it runs. */
  layerKinds: LayerKind[];
  moe: {
    experts: number;
    topK: number;
    /** A routed expert's intermediate width. */
    inter: number;
    shared: number;
    firstDense: number;
    routedScale: number;
    renormalize: boolean;
  };
  /** The width a routed expert reads and writes: the hidden size, or a latent width. */
  expertWidth: number;
  bosTokenId?: number;
  eosTokenIds: number[];
  /** `architectures[0]` or `model_type`, for display. */
  archName: string;
}

export interface LayerKind {
  /** The sequence mixer, as its family names it ('kda', 'mla', 'attention'…): the engine only tells them apart. */
  attn: string;
  ffn: 'dense' | 'moe';
}

/** The MoE layers of a model, in order. */
export function moeLayers(cfg: ModelConfig): number[] {
  return cfg.layerKinds.flatMap((k, i) => (k.ffn === 'moe' ? [i] : []));
}
