import type { Container } from '../../container/open.js';
import type { TrunkEntry } from '../../container/manifest.js';
import { type Tensor, rowsCols } from '../../container/tensor.js';
import { Fmt, fmtName } from '../../container/format.js';
import { WasteError } from '../../util/errors.js';
import type { KimiLinearConfig } from './config.js';

/**
 * The trunk tensors of a Kimi-Linear model, bound by name and checked against the shapes the
 * config implies. A correctly named tensor of the wrong shape would be an out-of-bounds read in a
 * kernel that takes its dimensions from the config, so every one is checked before anything runs.
 */
export interface KdaWeights {
  kind: 'kda';
  qProj: Tensor;
  kProj: Tensor;
  vProj: Tensor;
  /** [3][C][K]: q, k, v depthwise conv taps, the last tap multiplying the current token. */
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
}

export interface LayerWeights {
  inputNorm: Float32Array;
  postNorm: Float32Array;
  attn: KdaWeights | MlaWeights;
  ffn: ({ kind: 'dense' } & FfnWeights) | MoeWeights;
}

export interface KimiLinearWeights {
  embed: TrunkEntry;
  finalNorm: Float32Array;
  lmHead: Tensor;
  layers: LayerWeights[];
}

/** How the layout asks for its tensors; implemented once to validate and once to resolve. */
interface Binder<M> {
  matrix(name: string, rows: number, cols: number): M;
  vector(name: string, n: number, shapes?: number[][]): Float32Array;
  has(name: string): boolean;
}

/** The model's tensor layout, written once and walked twice (validate + collect, then resolve). */
function layout<M>(cfg: KimiLinearConfig, b: Binder<M>) {
  const H = cfg.hidden;
  const finalNorm = b.vector('model.norm.weight', H);
  const lmHead = b.matrix('lm_head.weight', cfg.vocab, H);
  const layers = cfg.layerKinds.map((kind, L) => {
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
        bias: b.has(biasName) ? b.vector(biasName, E, [[E], [1, E]]) : new Float32Array(E),
        shared:
          S > 0
            ? {
                gate: b.matrix(`${m}shared_experts.gate_proj.weight`, S, H),
                up: b.matrix(`${m}shared_experts.up_proj.weight`, S, H),
                down: b.matrix(`${m}shared_experts.down_proj.weight`, H, S),
              }
            : undefined,
      };
    }
    return { inputNorm, postNorm, attn, ffn };
  });
  return { finalNorm, lmHead, layers };
}

export function bindWeights(c: Container, cfg: KimiLinearConfig): KimiLinearWeights {
  const prefix = c.manifest.tensorPrefix;
  const entry = (name: string): TrunkEntry => {
    const e = c.tensors.get(prefix + name);
    if (!e) throw new WasteError('E_FORMAT', `manifest.json: required tensor ${prefix + name} is missing from the trunk`);
    return e;
  };
  const shapeError = (e: TrunkEntry, expected: string) =>
    new WasteError('E_FORMAT', `manifest.json: tensor ${e.name} has shape [${e.shape}], expected ${expected}`);

  const embed = entry('model.embed_tokens.weight');
  if (embed.shape.length !== 2 || embed.shape[0] !== cfg.vocab || embed.shape[1] !== cfg.hidden)
    throw shapeError(embed, `[${cfg.vocab}, ${cfg.hidden}]`);

  // Pass 1: check every shape and collect what to load.
  const want = new Map<string, TrunkEntry>();
  layout<null>(cfg, {
    has: (name) => c.tensors.has(prefix + name),
    matrix(name, rows, cols) {
      const e = entry(name);
      if (e.shape.length !== 2 || e.shape[0] !== rows || e.shape[1] !== cols) throw shapeError(e, `[${rows}, ${cols}]`);
      if (e.fmt !== Fmt.F32 && e.fmt !== Fmt.F16 && e.fmt !== Fmt.Q8G && e.fmt !== Fmt.Q4G)
        throw new WasteError('E_UNSUPPORTED', `unsupported: tensor ${e.name} is stored as ${fmtName(e.fmt)}`);
      want.set(e.name, e);
      return null;
    },
    vector(name, n, shapes) {
      const e = entry(name);
      const fits = (s: number[]) => s.length === e.shape.length && s.every((d, i) => d === e.shape[i]);
      if (!(shapes ? shapes.some(fits) : fits([n])))
        throw shapeError(e, shapes ? shapes.map((s) => `[${s}]`).join(' or ') : `[${n}]`);
      return new Float32Array(0);
    },
  });

  // Pass 2: load the matrices into arenas and read the (small) vectors as f32.
  const loaded = c.trunk.load([...want.values()]);
  const bound = layout<Tensor>(cfg, {
    has: (name) => c.tensors.has(prefix + name),
    matrix: (name) => loaded.get(prefix + name)!,
    vector: (name) => readVector(c, entry(name)),
  });
  return { embed, ...bound };
}

function readVector(c: Container, e: TrunkEntry): Float32Array {
  const { rows, cols } = rowsCols(e.shape);
  const out = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) c.trunk.readRow(e, r, out.subarray(r * cols, (r + 1) * cols));
  for (let i = 0; i < out.length; i++)
    if (!Number.isFinite(out[i])) throw new WasteError('E_FORMAT', `trunk.bin: tensor ${e.name} holds a non-finite value at index ${i}`);
  return out;
}
