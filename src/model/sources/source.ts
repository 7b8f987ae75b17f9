import type { Tensor } from '../../container/tensor.js';
import type { Arena } from '../../memory/arena.js';

/**
 * Where a model's trunk weights come from: a WASTE container (stored quantized, read as stored)
 * or a HuggingFace checkpoint (bf16/f16/f32, loaded as f32 — the unquantized reference).
 */
export interface WeightSource {
  /** Name shown in errors ("manifest.json", "the checkpoint"). */
  readonly label: string;
  has(name: string): boolean;
  /** Shape of a tensor; throws a clear error when it is missing. */
  shape(name: string): number[];
  /** Bytes the tensor takes resident (as it will be loaded), checking its format is computable. */
  residentBytes(name: string): number;
  /** Load a matrix into `arena` (its stored form for a container, f32 for a checkpoint). */
  loadMatrix(name: string, arena: Arena): Tensor;
  /** Read a (small) tensor as f32 into `out`. */
  readVector(name: string, out: Float32Array): void;
  /** One row of the embedding table, as f32. */
  embedRow(token: number, dst: Float32Array): void;
  /** True when routed experts come as dense matrices (a checkpoint), not as VQ records. */
  readonly denseExperts: boolean;
  /** The same weights by their full names, outside the language model's prefix (K3's vision tower lives there). */
  unprefixed(): WeightSource;
  /** MoE layer L's codebooks, transposed into [stage][dim][entry] per matrix kind (a container). */
  fillBooks?(L: number, out: [Float32Array, Float32Array, Float32Array]): void;
}
