import type { ExpertQuant } from '../../container/format.js';
import type { ArenaRole } from '../architecture.js';
import { type Allocator, allocatedBytes } from '../base/scratch.js';
import { type GdnScratch, gdnChannels, gdnProjWidths } from '../blocks/gated-deltanet.js';
import { TransformerScratch } from '../transformer/scratch.js';
import type { Qwen3NextConfig } from './config.js';

/**
 * The transformer's working buffers, with q wide enough for q_proj's query and gate, the gate
 * itself, and Gated DeltaNet's (an arena of expert slots gets none of these).
 */
export class Qwen3NextScratch extends TransformerScratch implements GdnScratch {
  gate: Float32Array;
  pA: Float32Array;
  pB: Float32Array;
  pC: Float32Array;
  pD: Float32Array;
  mixed: Float32Array;
  z: Float32Array;
  qx: Float32Array;
  kx: Float32Array;
  gx: Float32Array;
  vx: Float32Array;
  ox: Float32Array;
  beta: Float32Array;
  a: Float32Array;

  constructor(c: Qwen3NextConfig, maxContext: number, T: number, q: ExpertQuant | undefined, m: Allocator, role: ArenaRole) {
    super(c, maxContext, T, q, m, role);
    const L = role === 'layers' ? 1 : 0;
    const qw = c.attention.heads * c.attention.headDim;
    const g = c.gdn;
    const vw = g.vHeads * g.headDim;
    const widths = gdnProjWidths(g);
    this.q = m.f32(L * T * 2 * qw);
    this.gate = m.f32(L * T * qw);
    [this.pA, this.pB, this.pC, this.pD] = [0, 1, 2, 3].map((i) => m.f32(L * T * (widths[i] ?? 0)));
    this.mixed = m.f32(L * gdnChannels(g));
    this.z = m.f32(L * T * vw);
    this.qx = m.f32(L * vw);
    this.kx = m.f32(L * vw);
    this.gx = m.f32(L * vw);
    this.vx = m.f32(L * vw);
    this.ox = m.f32(L * vw);
    this.beta = m.f32(L * g.vHeads);
    this.a = m.f32(L * g.vHeads);
  }

  static override bytes(c: Qwen3NextConfig, maxContext: number, T: number, q: ExpertQuant | undefined, role: ArenaRole): number {
    return allocatedBytes((m) => new Qwen3NextScratch(c, maxContext, T, q, m, role));
  }
}
