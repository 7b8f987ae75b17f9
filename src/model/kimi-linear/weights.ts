import type { Container } from '../../container/open.js';
import type { TrunkEntry } from '../../container/manifest.js';
import { type Tensor, makeViews, rowsCols, storedSizes } from '../../container/tensor.js';
import { Fmt, fmtName } from '../../container/format.js';
import type { Arena } from '../../memory/arena.js';
import { aligned } from '../../memory/align.js';
import { WasteError } from '../../util/errors.js';
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
  embed: TrunkEntry;
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
    };
  }
  return { inputNorm, postNorm, attn, ffn };
}

/** Names a trunk tensor, checked to exist. */
function entryOf(c: Container): (name: string) => TrunkEntry {
  const prefix = c.manifest.tensorPrefix;
  return (name: string): TrunkEntry => {
    const e = c.tensors.get(prefix + name);
    if (!e) throw new WasteError('E_FORMAT', `manifest.json: required tensor ${prefix + name} is missing from the trunk`);
    return e;
  };
}

const shapeError = (e: TrunkEntry, expected: string) =>
  new WasteError('E_FORMAT', `manifest.json: tensor ${e.name} has shape [${e.shape}], expected ${expected}`);

/**
 * Check every trunk tensor against the shapes the config implies (before anything is read) and
 * return the resident bytes of each group: one per layer, then the head (final norm + LM head).
 */
export function planWeights(c: Container, cfg: KimiLinearConfig): number[] {
  const prefix = c.manifest.tensorPrefix;
  const entry = entryOf(c);
  const embed = entry('model.embed_tokens.weight');
  if (embed.shape.length !== 2 || embed.shape[0] !== cfg.vocab || embed.shape[1] !== cfg.hidden)
    throw shapeError(embed, `[${cfg.vocab}, ${cfg.hidden}]`);
  const q = c.quant;
  const booksBytes = q ? 3 * aligned(q.stages * q.vecDim * q.entries * 4) : 0;
  const groupBytes: number[] = [];
  let bytes = 0;
  const planner: Binder<null> = {
    has: (name) => c.tensors.has(prefix + name),
    matrix(name, rows, cols) {
      const e = entry(name);
      if (e.shape.length !== 2 || e.shape[0] !== rows || e.shape[1] !== cols) throw shapeError(e, `[${rows}, ${cols}]`);
      if (e.fmt !== Fmt.F32 && e.fmt !== Fmt.F16 && e.fmt !== Fmt.Q8G && e.fmt !== Fmt.Q4G)
        throw new WasteError('E_UNSUPPORTED', `unsupported: tensor ${e.name} is stored as ${fmtName(e.fmt)}`);
      const s = storedSizes(e.fmt, rows, cols, e.group);
      bytes += aligned(s.payload) + aligned(s.scaleBytes);
      return null;
    },
    vector(name, n, shapes) {
      if (name) {
        const e = entry(name);
        const fits = (s: number[]) => s.length === e.shape.length && s.every((d, i) => d === e.shape[i]);
        if (!(shapes ? shapes.some(fits) : fits([n]))) throw shapeError(e, shapes ? shapes.map((s) => `[${s}]`).join(' or ') : `[${n}]`);
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
 * caller has sized from planWeights.
 */
export function loadWeights(c: Container, cfg: KimiLinearConfig, of: Arena[], arenas: Arena[]): KimiLinearWeights {
  const entry = entryOf(c);
  const embed = entry('model.embed_tokens.weight');
  const q = c.quant;
  const planner = { has: (name: string) => c.tensors.has(c.manifest.tensorPrefix + name) };
  let arena: Arena = of[0];
  const loader: Binder<Tensor> = {
    has: planner.has,
    matrix(name) {
      const e = entry(name);
      const { rows, cols } = rowsCols(e.shape);
      const s = storedSizes(e.fmt, rows, cols, e.group);
      const off = arena.alloc(s.payload, 64);
      const scaleOff = s.scaleBytes ? arena.alloc(s.scaleBytes, 64) : -1;
      c.trunk.readInto(arena.u8(off, s.payload), e.off, e.name);
      if (s.scaleBytes) c.trunk.readInto(arena.u8(scaleOff, s.scaleBytes), e.scaleOff, `${e.name} scales`);
      const t: Tensor = { name: e.name, fmt: e.fmt, shape: e.shape, rows, cols, group: e.group, groups: s.groups, rowBytes: s.rowBytes, arena, off, scaleOff };
      makeViews(t);
      checkFinite(t);
      return t;
    },
    vector(name, n) {
      const out = arena.allocF32(n);
      if (name) readVector(c, entry(name), out);
      return out;
    },
    books() {
      const per = q!.stages * q!.vecDim * q!.entries;
      return [0, 1, 2].map(() => arena.f32(arena.alloc(per * 4, 64), per)) as [Float32Array, Float32Array, Float32Array];
    },
  };
  const layers: LayerWeights[] = [];
  for (let L = 0; L < cfg.layers; L++) {
    arena = of[L];
    const lw = layerLayout(cfg, L, loader);
    if (lw.ffn.kind === 'moe') fillBooks(c, L, lw.ffn.booksT);
    layers.push({ ...lw, arena } as LayerWeights);
  }
  arena = of[cfg.layers];
  const finalNorm = loader.vector('model.norm.weight', cfg.hidden);
  const lmHead = loader.matrix('lm_head.weight', cfg.vocab, cfg.hidden);
  return { embed, finalNorm, lmHead, layers, headArena: arena, arenas };
}

/** Transpose layer L's codebooks, [entry][dim] per stage, into [stage][dim][entry] per kind. */
function fillBooks(c: Container, L: number, out: [Float32Array, Float32Array, Float32Array]): void {
  const q = c.quant!;
  const cb = c.codebooks!;
  const base = c.banks.get(L)!.codebookBase;
  const per = q.entries * q.vecDim;
  for (let kind = 0; kind < 3; kind++)
    for (let s = 0; s < q.stages; s++) {
      const book = (base + kind * q.stages + s) * per;
      for (let e = 0; e < q.entries; e++)
        for (let d = 0; d < q.vecDim; d++) out[kind][(s * q.vecDim + d) * q.entries + e] = cb.values[book + e * q.vecDim + d];
    }
}

function readVector(c: Container, e: TrunkEntry, out: Float32Array): void {
  const { rows, cols } = rowsCols(e.shape);
  for (let r = 0; r < rows; r++) c.trunk.readRow(e, r, out.subarray(r * cols, (r + 1) * cols));
  for (let i = 0; i < out.length; i++)
    if (!Number.isFinite(out[i])) throw new WasteError('E_FORMAT', `trunk.bin: tensor ${e.name} holds a non-finite value at index ${i}`);
}

/** A NaN or infinity in a weight would only show up as a silently wrong answer; refuse it at load. */
function checkFinite(t: Tensor): void {
  const bad = (what: string, i: number) => new WasteError('E_FORMAT', `trunk.bin: tensor ${t.name} holds a non-finite ${what} at index ${i}`);
  if (t.f32) {
    for (let i = 0; i < t.f32.length; i++) if (!Number.isFinite(t.f32[i])) throw bad('value', i);
  } else {
    const h = t.f16 ?? t.scales!;
    for (let i = 0; i < h.length; i++) if ((h[i] & 0x7c00) === 0x7c00) throw bad(t.f16 ? 'value' : 'group scale', i);
  }
}
