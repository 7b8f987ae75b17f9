import type { Fields } from '../../util/fields.js';
import { WasteError, unsupported } from '../../util/errors.js';

/**
 * Rotary position embeddings: how a family's config asks for them, and the rotation itself.
 * The frequencies and each position's cos/sin are computed in f64 and rounded to f32 once, so
 * the f32 path follows the float64 reference (HF computes its tables in f32).
 */
export type RopeScaling =
  | { type: 'default' }
  | { type: 'linear'; factor: number }
  | { type: 'llama3'; factor: number; lowFreqFactor: number; highFreqFactor: number; originalMax: number }
  | {
      type: 'yarn';
      factor: number;
      originalMax: number;
      betaFast: number;
      betaSlow: number;
      /** Round the correction range to whole dimensions (HF's default; gpt-oss says false). */
      truncate: boolean;
      /** Given outright, or from mscale / mscale_all_dim (DeepSeek), or 0.1·ln(factor) + 1. */
      attentionFactor: number;
    };

export interface RopeConfig {
  /** Dimensions rotated per head: ⌊head_dim · partial_rotary_factor⌋, even. */
  dims: number;
  theta: number;
  /** Which dimensions pair up: i and i + dims/2 ('half', HF's rotate_half), or 2i and 2i+1 ('interleaved', DeepSeek's). */
  pairs: 'half' | 'interleaved';
  scaling: RopeScaling;
}

/** YaRN's magnitude correction: 1 up to a factor of 1, then 0.1·m·ln(factor) + 1. */
export function yarnMscale(factor: number, m = 1): number {
  return factor <= 1 ? 1 : 0.1 * m * Math.log(factor) + 1;
}

/**
 * The rotary settings of a config: HF's v4 keys (`rope_theta`, `rope_scaling`) or v5's
 * (`rope_parameters`), with the family's defaults where HF's config class has them. A rope type
 * this build does not compute is refused by name.
 */
export function parseRope(cfg: Fields, headDim: number, defaults: { theta: number; partialRotary?: number; pairs?: 'half' | 'interleaved'; scaling?: Fields }): RopeConfig {
  const params = cfg.given('rope_parameters') ? cfg.object('rope_parameters') : cfg.given('rope_scaling') ? cfg.object('rope_scaling') : defaults.scaling;
  const theta = params?.given('rope_theta') ? params.num('rope_theta', 1, 1e12) : cfg.num('rope_theta', 1, 1e12, defaults.theta);
  const prf = params?.given('partial_rotary_factor')
    ? params.num('partial_rotary_factor', 0, 1, undefined, true)
    : cfg.num('partial_rotary_factor', 0, 1, defaults.partialRotary ?? 1, true);
  const dims = Math.floor(headDim * prf);
  if (dims < 2 || dims % 2) throw new WasteError('E_FORMAT', `${cfg.file}: the rotary dimensions (head_dim ${headDim} × partial_rotary_factor ${prf} = ${dims}) must be even and at least 2`);
  const type = params ? params.str('rope_type', params.given('type') ? params.str('type', 'default', 32) : 'default', 32) : 'default';
  const maxPos = cfg.int('max_position_embeddings', 1, 1 << 30, 1 << 20);
  let scaling: RopeScaling;
  if (!params || type === 'default' || type === 'dynamic') {
    // dynamic NTK scaling only acts past max_position_embeddings, which the context never is
    scaling = { type: 'default' };
  } else if (type === 'linear') {
    scaling = { type: 'linear', factor: params.num('factor', 1, 1e6) };
  } else if (type === 'llama3') {
    scaling = {
      type: 'llama3',
      factor: params.num('factor', 1, 1e6),
      lowFreqFactor: params.num('low_freq_factor', 0, 1e6, undefined, true),
      highFreqFactor: params.num('high_freq_factor', 0, 1e6, undefined, true),
      originalMax: params.int('original_max_position_embeddings', 1, 1 << 30),
    };
  } else if (type === 'yarn') {
    const originalMax = params.given('original_max_position_embeddings') ? params.int('original_max_position_embeddings', 1, 1 << 30) : maxPos;
    const factor = params.given('factor') ? params.num('factor', 1, 1e6) : maxPos / originalMax;
    let attentionFactor: number;
    if (params.given('attention_factor')) attentionFactor = params.num('attention_factor', 0, 1e3, undefined, true);
    else {
      const ms = params.given('mscale') ? params.num('mscale', 0, 1e3) : 0;
      const msa = params.given('mscale_all_dim') ? params.num('mscale_all_dim', 0, 1e3) : 0;
      attentionFactor = ms && msa ? yarnMscale(factor, ms) / yarnMscale(factor, msa) : yarnMscale(factor);
    }
    scaling = {
      type: 'yarn',
      factor,
      originalMax,
      // HF reads a falsy beta as its default
      betaFast: params.num('beta_fast', 0, 1e6, 32) || 32,
      betaSlow: params.num('beta_slow', 0, 1e6, 1) || 1,
      truncate: params.bool('truncate', true),
      attentionFactor,
    };
  } else throw unsupported(`${cfg.file}: rope type ${JSON.stringify(type)} (this build computes default, dynamic, linear, llama3 and yarn)`);
  return { dims, theta, pairs: defaults.pairs ?? 'half', scaling };
}

/** The inverse frequency of each rotated pair [dims/2], and the factor cos and sin are scaled by. */
export function ropeFrequencies(c: RopeConfig): { invFreq: Float64Array; attentionFactor: number } {
  const R = c.dims;
  const half = R / 2;
  const base = new Float64Array(half);
  for (let i = 0; i < half; i++) base[i] = 1 / Math.pow(c.theta, (2 * i) / R);
  const s = c.scaling;
  if (s.type === 'default') return { invFreq: base, attentionFactor: 1 };
  if (s.type === 'linear') return { invFreq: base.map((f) => f / s.factor), attentionFactor: 1 };
  if (s.type === 'llama3') {
    const lowWave = s.originalMax / s.lowFreqFactor;
    const highWave = s.originalMax / s.highFreqFactor;
    const inv = base.map((f) => {
      const wave = (2 * Math.PI) / f;
      if (wave > lowWave) return f / s.factor;
      if (wave < highWave) return f;
      const smooth = (s.originalMax / wave - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
      return (1 - smooth) * (f / s.factor) + smooth * f;
    });
    return { invFreq: inv, attentionFactor: 1 };
  }
  // YaRN: dimensions that turn fewer than beta_slow times over the original context are
  // interpolated (÷ factor), those that turn more than beta_fast times kept, a linear ramp between
  const corr = (rot: number) => (R * Math.log(s.originalMax / (rot * 2 * Math.PI))) / (2 * Math.log(c.theta));
  let low = corr(s.betaFast);
  let high = corr(s.betaSlow);
  if (s.truncate) (low = Math.floor(low)), (high = Math.ceil(high));
  low = Math.max(low, 0);
  high = Math.min(high, R - 1);
  if (low === high) high += 0.001;
  const inv = new Float64Array(half);
  for (let i = 0; i < half; i++) {
    const ramp = Math.min(1, Math.max(0, (i - low) / (high - low)));
    const keep = 1 - ramp;
    inv[i] = (base[i] / s.factor) * (1 - keep) + base[i] * keep;
  }
  return { invFreq: inv, attentionFactor: s.attentionFactor };
}

/** Rotates heads of one token at a time; the cos/sin of the last position asked are kept. */
export class Rope {
  private readonly invFreq: Float64Array;
  private readonly factor: number;
  private readonly cos: Float32Array;
  private readonly sin: Float32Array;
  private at = -1;

  constructor(readonly config: RopeConfig) {
    const f = ropeFrequencies(config);
    this.invFreq = f.invFreq;
    this.factor = f.attentionFactor;
    this.cos = new Float32Array(config.dims / 2);
    this.sin = new Float32Array(config.dims / 2);
  }

  private tables(pos: number): void {
    if (pos === this.at) return;
    for (let i = 0; i < this.invFreq.length; i++) {
      const a = pos * this.invFreq[i];
      this.cos[i] = Math.cos(a) * this.factor;
      this.sin[i] = Math.sin(a) * this.factor;
    }
    this.at = pos;
  }

  /**
   * Rotate `heads` heads of `headDim` at x[offset…] ([heads][headDim]) to position `pos`, in place:
   * each pair (a, b) becomes (a·cos − b·sin, b·cos + a·sin), in f32; dimensions past `dims` stay.
   */
  apply(x: Float32Array, offset: number, heads: number, headDim: number, pos: number): void {
    this.tables(pos);
    const half = this.config.dims / 2;
    const inter = this.config.pairs === 'interleaved';
    const { cos, sin } = this;
    for (let h = 0; h < heads; h++) {
      const b = offset + h * headDim;
      for (let i = 0; i < half; i++) {
        const ia = inter ? b + 2 * i : b + i;
        const ib = inter ? ia + 1 : ia + half;
        const x0 = x[ia];
        const x1 = x[ib];
        x[ia] = Math.fround(Math.fround(x0 * cos[i]) - Math.fround(x1 * sin[i]));
        x[ib] = Math.fround(Math.fround(x1 * cos[i]) + Math.fround(x0 * sin[i]));
      }
    }
  }
}
