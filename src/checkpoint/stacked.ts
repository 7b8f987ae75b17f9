/**
 * Routed experts stacked per layer in one tensor per kind, as gpt-oss's release keeps them: under
 * `model.layers.L.`, a fused gate/up tensor whose output rows alternate (row 2i is the gate's row
 * i, row 2i + 1 the up projection's) and a down tensor, each either
 *   - MXFP4: `<name>_blocks` U8 [E, R, C/32, 16] and `<name>_scales` U8 [E, R, C/32] — each expert
 *     an [R, C] (out × in) matrix, two values a byte, the even column in the low nibble, one E8M0
 *     exponent per 32 columns (the same code as compressed-tensors' MXFP4: checkpoint/mxfp4.ts); or
 *   - dense: `<name>` [E, C, R] (in × out: the layer computes x·W, HF's parameter layout).
 * A checkpoint read with a family's StackedExperts shows each expert's matrices under the names the
 * family's expertTensor gives (the stacked tensors themselves are not listed), read as slices of
 * the stacked ones; the biases (`<name>_bias`) stay ordinary tensors of the trunk.
 */
export interface StackedExperts {
  /** The fused gate/up tensor under `model.layers.L.` (gpt-oss: `mlp.experts.gate_up_proj`). */
  gateUp: string;
  /** The down tensor under `model.layers.L.` (gpt-oss: `mlp.experts.down_proj`). */
  down: string;
  /** The name each expert's matrix is read by: kind 0 gate, 1 up, 2 down. */
  expert(layer: number, e: number, kind: 0 | 1 | 2): string;
}

/** One expert's matrix as a slice of a stacked tensor: rows first, first + step, … of expert `expert`'s [R, C]. */
export interface StackedSlice {
  /** The stacked tensor's name without the prefix: `…_blocks` (MXFP4) or the dense tensor. */
  source: string;
  mxfp4: boolean;
  expert: number;
  first: number;
  step: 1 | 2;
  /** R and C of one expert's whole (out × in) matrix. */
  outRows: number;
  cols: number;
}
