import type { ExpertQuant } from '../../container/format.js';
import type { Tensor } from '../../container/tensor.js';
import type { ModelConfig } from '../../core/model-config.js';
import { aligned } from '../../memory/align.js';
import type { Arena } from '../../memory/arena.js';
import { WasteError } from '../../util/errors.js';
import type { WeightSource } from '../sources/source.js';
import type { TrunkWeights } from './network.js';

/**
 * How an architecture's layout asks for its tensors, by name without the container's prefix. It
 * is implemented twice — once to plan (check every shape, count the bytes, read nothing) and once
 * to load into arenas — so the two can never disagree. A correctly named tensor of the wrong shape
 * would be an out-of-bounds read in a kernel that takes its dimensions from the config, so every
 * one is checked before anything is read.
 */
export interface Binder {
  matrix(name: string, rows: number, cols: number): Tensor;
  /** A vector of n floats stored as any of `shapes` (default [n]); '' for n zeros. */
  vector(name: string, n: number, shapes?: number[][]): Float32Array;
  /** The first n values of a tensor of at least n, of any shape (K3 stores A_log padded, Kimi-Linear as [1, 1, n, 1]). */
  head(name: string, n: number): Float32Array;
  /** The elementwise product of two vectors of n floats stored as any of `shapes` (weights that only ever act together, fused at load). */
  product(a: string, b: string, n: number, shapes: number[][]): Float32Array;
  books(): [Float32Array, Float32Array, Float32Array];
  /** The routed experts as dense matrices, when the source has them so. */
  dense(): boolean;
  has(name: string): boolean;
}

/** An architecture's layout: each layer's tensors, then the head's (the final norm and LM head at least). */
export interface TrunkLayout<C, Layer, Head> {
  layer(cfg: C, L: number, b: Binder): Layer;
  head(cfg: C, b: Binder): Head & { finalNorm: Float32Array; lmHead: Tensor };
}

const shapeError = (label: string, name: string, shape: number[], expected: string) =>
  new WasteError('E_FORMAT', `${label}: tensor ${name} has shape [${shape}], expected ${expected}`);

/** Check every trunk tensor (before anything is read) and return the resident bytes of each group: one per layer, then the head. */
export function planTrunk<C extends ModelConfig>(src: WeightSource, cfg: C, q: ExpertQuant | undefined, layout: TrunkLayout<C, unknown, unknown>): number[] {
  const embed = src.shape('model.embed_tokens.weight');
  if (embed.length !== 2 || embed[0] !== cfg.vocab || embed[1] !== cfg.hidden)
    throw shapeError(src.label, 'model.embed_tokens.weight', embed, `[${cfg.vocab}, ${cfg.hidden}]`);
  const booksBytes = q && !src.denseExperts ? 3 * aligned(q.stages * q.vecDim * q.entries * 4) : 0;
  let bytes = 0;
  const fits = (name: string, shapes: number[][]) => {
    const shape = src.shape(name);
    if (!shapes.some((s) => s.length === shape.length && s.every((d, i) => d === shape[i])))
      throw shapeError(src.label, name, shape, shapes.map((s) => `[${s.join(', ')}]`).join(' or '));
  };
  // planning reads nothing: its "tensors" are never looked at, only the layout's calls are
  const planner: Binder = {
    has: (name) => src.has(name),
    dense: () => src.denseExperts,
    matrix(name, rows, cols) {
      fits(name, [[rows, cols]]);
      bytes += src.residentBytes(name);
      return null as unknown as Tensor;
    },
    vector(name, n, shapes) {
      if (name) fits(name, shapes ?? [[n]]);
      bytes += aligned(n * 4);
      return new Float32Array(0);
    },
    head(name, n) {
      const shape = src.shape(name);
      const numel = shape.reduce((a, d) => a * d, 1);
      if (numel < n || numel > 1 << 20) throw shapeError(src.label, name, shape, `at least ${n} values (at most 2^20)`);
      bytes += aligned(numel * 4);
      return new Float32Array(0);
    },
    product(a, b, n, shapes) {
      fits(a, shapes);
      fits(b, shapes);
      bytes += aligned(n * 4);
      return new Float32Array(0);
    },
    books() {
      bytes += booksBytes;
      return [new Float32Array(0), new Float32Array(0), new Float32Array(0)];
    },
  };
  const groups: number[] = [];
  for (let L = 0; L < cfg.layers; L++) {
    bytes = 0;
    layout.layer(cfg, L, planner);
    groups.push(bytes);
  }
  bytes = 0;
  layout.head(cfg, planner);
  groups.push(bytes);
  return groups;
}

/**
 * Load the trunk into arenas: group g (layers in order, then the head) into `of[g]`, which the
 * caller has sized from planTrunk. Each MoE layer's codebooks are filled by the source.
 */
export function loadTrunk<C extends ModelConfig, Layer extends { ffn: { kind: string; booksT?: [Float32Array, Float32Array, Float32Array] } }, Head>(
  src: WeightSource,
  cfg: C,
  of: Arena[],
  arenas: Arena[],
  q: ExpertQuant | undefined,
  layout: TrunkLayout<C, Layer, Head>,
  onLayer?: (done: number, total: number) => void,
): TrunkWeights<Layer> & { head: Head } {
  let arena: Arena = of[0];
  const per = q && !src.denseExperts ? q.stages * q.vecDim * q.entries : 0;
  const loader: Binder = {
    has: (name) => src.has(name),
    dense: () => src.denseExperts,
    matrix: (name) => src.loadMatrix(name, arena),
    vector(name, n) {
      const out = arena.allocF32(n);
      if (name) src.readVector(name, out);
      return out;
    },
    head(name, n) {
      const all = arena.allocF32(src.shape(name).reduce((a, d) => a * d, 1));
      src.readVector(name, all);
      return all.subarray(0, n);
    },
    product(a, b, n) {
      const out = arena.allocF32(n);
      // the second factor only passes through
      const other = new Float32Array(n);
      src.readVector(a, out);
      src.readVector(b, other);
      for (let i = 0; i < n; i++) out[i] *= other[i];
      return out;
    },
    books: () => [0, 1, 2].map(() => arena.allocF32(per)) as [Float32Array, Float32Array, Float32Array],
  };
  const layers: (Layer & { arena: Arena })[] = [];
  for (let L = 0; L < cfg.layers; L++) {
    arena = of[L];
    const lw = layout.layer(cfg, L, loader);
    if (lw.ffn.kind === 'moe' && per && lw.ffn.booksT) src.fillBooks?.(L, lw.ffn.booksT);
    layers.push({ ...lw, arena });
    onLayer?.(L + 1, cfg.layers + 1);
  }
  arena = of[cfg.layers];
  const head = layout.head(cfg, loader);
  onLayer?.(cfg.layers + 1, cfg.layers + 1);
  return { embedRow: (token, dst) => src.embedRow(token, dst), finalNorm: head.finalNorm, lmHead: head.lmHead, layers, headArena: arena, arenas, head };
}
