import type { Tensor } from '../../container/tensor.js';
import type { ExpertQuant } from '../../container/format.js';
import type { Arena } from '../../memory/arena.js';
import { aligned } from '../../memory/align.js';
import { WasteError } from '../../util/errors.js';
import type { WeightSource } from '../sources/source.js';
import type { KimiLinearConfig } from './config.js';

/**
 * The trunk of a Kimi-Linear model, bound by name, checked against the shapes the config implies,
 * and loaded straight into arenas: each layer's tensors (and its codebooks) in one memory, so a
 * kernel call touches one arena. A correctly named tensor of the wrong shape would be an
 * out-of-bounds read in a kernel that takes its dimensions from the config, so every one is
 * checked before anything is read.
 */
export interface KdaWeights {
  kind: 'kda';
  qProj: Tensor;
  kProj: Tensor;
  vProj: Tensor;
  /** q, k, v depthwise conv taps [C][K], the last tap multiplying the current token. */
  conv: [Float32Array, Float32Array, Float32Array];
  fA: Tensor;
  fB: Tensor;
  dtBias: Float32Array;
  /** One log decay scale per head. */
  aLog: Float32Array;
  bProj: Tensor;
  gA: Tensor;
  gB: Tensor;
  oNorm: Float32Array;
  oProj: Tensor;
}

export interface MlaWeights {
  kind: 'mla';
  qProj: Tensor;
  kvA: Tensor;
  kvNorm: Float32Array;
  kvB: Tensor;
  oProj: Tensor;
}

export interface FfnWeights {
  gate: Tensor;
  up: Tensor;
  down: Tensor;
}

export interface MoeWeights {
  kind: 'moe';
  router: Tensor;
  /** Selection-only bias (zeros when the checkpoint has none). */
  bias: Float32Array;
  shared?: FfnWeights;
  /** Per matrix kind (gate, up, down): the layer's stage codebooks transposed, [stage][dim][entry]. */
  booksT: [Float32Array, Float32Array, Float32Array];
  /** Every routed expert as dense matrices (a checkpoint; a container streams VQ records instead). */
  dense?: FfnWeights[];
}

export interface LayerWeights {
  inputNorm: Float32Array;
  postNorm: Float32Array;
  attn: KdaWeights | MlaWeights;
  ffn: ({ kind: 'dense' } & FfnWeights) | MoeWeights;
  /** The arena holding this layer's weights (and its scratch). */
  arena: Arena;
}

export interface KimiLinearWeights {
  /** One row of the embedding table (it stays on disk), as f32. */
  embedRow(token: number, dst: Float32Array): void;
  finalNorm: Float32Array;
  lmHead: Tensor;
  layers: LayerWeights[];
  /** The arena of the final norm and the LM head. */
  headArena: Arena;
  arenas: Arena[];
}

/** How the layout asks for its tensors; implemented once to plan and once to load. */
interface Binder<M> {
  matrix(name: string, rows: number, cols: number): M;
  vector(name: string, n: number, shapes?: number[][]): Float32Array;
  books(): [Float32Array, Float32Array, Float32Array];
  /** The routed experts as dense matrices, when the source has them so. */
  dense(): boolean;
  has(name: string): boolean;
}

/** The model's tensor layout for one layer. */
function layerLayout<M>(cfg: KimiLinearConfig, L: number, b: Binder<M>) {
  const H = cfg.hidden;
  const kind = cfg.layerKinds[L];
  const p = `model.layers.${L}.`;
  const a = `${p}self_attn.`;
  const inputNorm = b.vector(`${p}input_layernorm.weight`, H);
  const postNorm = b.vector(`${p}post_attention_layernorm.weight`, H);
  let attn;
  if (kind.attn === 'kda') {
    const { heads: NH, headDim: D, convKernel: K } = cfg.kda;
    const C = NH * D;
    const conv = (x: string) => b.vector(`${a}${x}_conv1d.weight`, C * K, [[C, 1, K], [C, K]]);
    attn = {
      kind: 'kda' as const,
      qProj: b.matrix(`${a}q_proj.weight`, C, H),
      kProj: b.matrix(`${a}k_proj.weight`, C, H),
      vProj: b.matrix(`${a}v_proj.weight`, C, H),
      conv: [conv('q'), conv('k'), conv('v')] as [Float32Array, Float32Array, Float32Array],
      fA: b.matrix(`${a}f_a_proj.weight`, D, H),
      fB: b.matrix(`${a}f_b_proj.weight`, C, D),
      dtBias: b.vector(`${a}dt_bias`, C, [[C], [NH, D]]),
      aLog: b.vector(`${a}A_log`, NH, [[1, 1, NH, 1], [NH], [1, NH], [NH, 1]]),
      bProj: b.matrix(`${a}b_proj.weight`, NH, H),
      gA: b.matrix(`${a}g_a_proj.weight`, D, H),
      gB: b.matrix(`${a}g_b_proj.weight`, C, D),
      oNorm: b.vector(`${a}o_norm.weight`, D),
      oProj: b.matrix(`${a}o_proj.weight`, H, C),
    };
  } else {
    const m = cfg.mla;
    attn = {
      kind: 'mla' as const,
      qProj: b.matrix(`${a}q_proj.weight`, m.heads * (m.qkNope + m.qkRope), H),
      kvA: b.matrix(`${a}kv_a_proj_with_mqa.weight`, m.kvLoraRank + m.qkRope, H),
      kvNorm: b.vector(`${a}kv_a_layernorm.weight`, m.kvLoraRank),
      kvB: b.matrix(`${a}kv_b_proj.weight`, m.heads * (m.qkNope + m.vHead), m.kvLoraRank),
      oProj: b.matrix(`${a}o_proj.weight`, H, m.heads * m.vHead),
    };
  }
  let ffn;
  if (kind.ffn === 'dense') {
    const I = cfg.denseInter;
    ffn = {
      kind: 'dense' as const,
      gate: b.matrix(`${p}mlp.gate_proj.weight`, I, H),
      up: b.matrix(`${p}mlp.up_proj.weight`, I, H),
      down: b.matrix(`${p}mlp.down_proj.weight`, H, I),
    };
  } else {
    const E = cfg.moe.experts;
    const m = `${p}block_sparse_moe.`;
    const biasName = `${m}gate.e_score_correction_bias`;
    const S = cfg.moe.inter * cfg.moe.shared;
    ffn = {
      kind: 'moe' as const,
      router: b.matrix(`${m}gate.weight`, E, H),
      bias: b.has(biasName) ? b.vector(biasName, E, [[E], [1, E]]) : b.vector('', E),
      shared:
        S > 0
          ? {
              gate: b.matrix(`${m}shared_experts.gate_proj.weight`, S, H),
              up: b.matrix(`${m}shared_experts.up_proj.weight`, S, H),
              down: b.matrix(`${m}shared_experts.down_proj.weight`, H, S),
            }
          : undefined,
      booksT: b.books(),
      dense: b.dense()
        ? Array.from({ length: E }, (_, e) => ({
            gate: b.matrix(`${m}experts.${e}.w1.weight`, cfg.moe.inter, H),
            up: b.matrix(`${m}experts.${e}.w3.weight`, cfg.moe.inter, H),
            down: b.matrix(`${m}experts.${e}.w2.weight`, H, cfg.moe.inter),
          }))
        : undefined,
    };
  }
  return { inputNorm, postNorm, attn, ffn };
}

const shapeError = (label: string, name: string, shape: number[], expected: string) =>
  new WasteError('E_FORMAT', `${label}: tensor ${name} has shape [${shape}], expected ${expected}`);

/**
 * Check every trunk tensor against the shapes the config implies (before anything is read) and
 * return the resident bytes of each group: one per layer, then the head (final norm + LM head).
 */
export function planWeights(src: WeightSource, cfg: KimiLinearConfig, q?: ExpertQuant): number[] {
  const embed = src.shape('model.embed_tokens.weight');
  if (embed.length !== 2 || embed[0] !== cfg.vocab || embed[1] !== cfg.hidden)
    throw shapeError(src.label, 'model.embed_tokens.weight', embed, `[${cfg.vocab}, ${cfg.hidden}]`);
  const booksBytes = q && !src.denseExperts ? 3 * aligned(q.stages * q.vecDim * q.entries * 4) : 0;
  const groupBytes: number[] = [];
  let bytes = 0;
  const planner: Binder<null> = {
    has: (name) => src.has(name),
    dense: () => src.denseExperts,
    matrix(name, rows, cols) {
      const shape = src.shape(name);
      if (shape.length !== 2 || shape[0] !== rows || shape[1] !== cols) throw shapeError(src.label, name, shape, `[${rows}, ${cols}]`);
      bytes += src.residentBytes(name);
      return null;
    },
    vector(name, n, shapes) {
      if (name) {
        const shape = src.shape(name);
        const fits = (s: number[]) => s.length === shape.length && s.every((d, i) => d === shape[i]);
        if (!(shapes ? shapes.some(fits) : fits([n]))) throw shapeError(src.label, name, shape, shapes ? shapes.map((s) => `[${s}]`).join(' or ') : `[${n}]`);
      }
      bytes += aligned(n * 4);
      return new Float32Array(0);
    },
    books() {
      bytes += booksBytes;
      return [new Float32Array(0), new Float32Array(0), new Float32Array(0)];
    },
  };
  for (let L = 0; L < cfg.layers; L++) {
    bytes = 0;
    layerLayout(cfg, L, planner);
    groupBytes.push(bytes);
  }
  bytes = 0;
  planner.vector('model.norm.weight', cfg.hidden);
  planner.matrix('lm_head.weight', cfg.vocab, cfg.hidden);
  groupBytes.push(bytes);
  return groupBytes;
}

/**
 * Load the trunk into arenas: group g (layers in order, then the head) into `of[g]`, which the
 * caller has sized from planWeights. `fillBooks(L, out)` writes layer L's transposed codebooks.
 */
export function loadWeights(
  src: WeightSource,
  cfg: KimiLinearConfig,
  of: Arena[],
  arenas: Arena[],
  q?: ExpertQuant,
  fillBooks?: (layer: number, out: [Float32Array, Float32Array, Float32Array]) => void,
  /** Told after each layer (and the head) is in memory: loading a large trunk takes a while. */
  onLayer?: (done: number, total: number) => void,
): KimiLinearWeights {
  let arena: Arena = of[0];
  const per = q && !src.denseExperts ? q.stages * q.vecDim * q.entries : 0;
  const loader: Binder<Tensor> = {
    has: (name) => src.has(name),
    dense: () => src.denseExperts,
    matrix: (name) => src.loadMatrix(name, arena),
    vector(name, n) {
      const out = arena.allocF32(n);
      if (name) src.readVector(name, out);
      return out;
    },
    books: () => [0, 1, 2].map(() => arena.allocF32(per)) as [Float32Array, Float32Array, Float32Array],
  };
  const layers: LayerWeights[] = [];
  for (let L = 0; L < cfg.layers; L++) {
    arena = of[L];
    const lw = layerLayout(cfg, L, loader);
    if (lw.ffn.kind === 'moe' && fillBooks && per) fillBooks(L, lw.ffn.booksT);
    layers.push({ ...lw, arena } as LayerWeights);
    onLayer?.(L + 1, cfg.layers + 1);
  }
  arena = of[cfg.layers];
  const finalNorm = loader.vector('model.norm.weight', cfg.hidden);
  const lmHead = loader.matrix('lm_head.weight', cfg.vocab, cfg.hidden);
  onLayer?.(cfg.layers + 1, cfg.layers + 1);
  return { embedRow: (token, dst) => src.embedRow(token, dst), finalNorm, lmHead, layers, headArena: arena, arenas };
}
