import type { StackedExperts } from '../checkpoint/stacked.js';
import type { ModelConfig } from '../core/model-config.js';
import type { JsonObject } from '../util/fields.js';

/**
 * What a family gives the synthetic writers (`waste synth`, the tests' models): its shapes, its
 * configs as a container's manifest and a checkpoint's config.json hold them, and every tensor by
 * its HuggingFace name. The writers draw the values; the family says what there is to draw.
 */

/**
 * One tensor to draw: a matrix with the standard deviation its values get, or a vector (norms,
 * biases, gate parameters, conv taps) with the range its values are drawn from — `valid` of them
 * drawn and the rest zero, for tensors stored padded. Routed experts are marked: a checkpoint
 * holds them as matrices, a container as VQ records.
 */
export type SynthTensor =
  | { kind: 'matrix'; name: string; rows: number; cols: number; std: number; expert?: boolean }
  | { kind: 'vector'; name: string; shape: number[]; lo: number; hi: number; valid?: number };

/** A tensor outside the language model (a vision tower), drawn normal with a mean, stored as written. */
export interface SynthExtraTensor {
  name: string;
  shape: number[];
  std: number;
  mean?: number;
}

export interface SynthShapeOptions {
  /** Layers instead of the shape's (the family's layer pattern kept). */
  layers?: number;
  /** Routed experts instead of the shape's (top-k capped to it). */
  experts?: number;
  /** Extra or replaced config keys (e.g. awkward dimensions for a test). */
  config?: JsonObject;
}

/** A checkpoint in the release's form, beside the tensors drawn from `tensors()`. */
export interface SynthCheckpoint {
  /** config.json, nested as the release nests it. */
  config: JsonObject;
  /** Where the language model's tensors sit in the files. */
  prefix: string;
  /** A tensor's name in the files, when the release renames rather than prefixes (Qwen3.5's `model.language_model.`); the prefix is then unused. */
  rename?: (name: string) => string;
  /** Each layer's routed experts stacked as the release stores them: `….mlp.experts.gate_up_proj` [E, 2I, H] and `….mlp.experts.down_proj` [E, H, I]. */
  stackExperts?: boolean;
  /**
   * How routed experts are stored: bf16 matrices, compressed-tensors MXFP4 (K3's release) or INT4
   * pack-quantized (Kimi K2-Thinking's), or stacked per layer as `stacked` says
   * (checkpoint/stacked.ts) — MXFP4 blocks and scales (gpt-oss's release) or bf16 [E, in, out]
   * (HF's parameter layout).
   */
  experts: 'bf16' | 'mxfp4-packed' | 'int4-pack-quantized' | 'mxfp4-stacked' | 'bf16-stacked';
  stacked?: StackedExperts;
  /** The matrices stored as FP8 E4M3 with 128 × 128 block scales (`…weight_scale_inv`), as DeepSeek-V3 releases them; absent: none. */
  fp8?: (name: string) => boolean;
  /** Tensors outside the language model. */
  extra: Iterable<SynthExtraTensor>;
  /** Small files beside the weights, by name (JSON already serialized). */
  files: Record<string, string>;
  /** tokenizer_config.json's chat template, if the release ships one there. */
  chatTemplate?: string;
}

export interface FamilySynth<C extends ModelConfig = ModelConfig> {
  /** Shape names: small ones for tests, and the releases' real widths. */
  readonly shapes: readonly string[];
  /** The shapes at a release's real widths: their trunk is stored as the converter stores it by default. */
  readonly realShapes: readonly string[];
  /** The config a container's manifest holds (flat; a wrapper's own keys under `_outer`). */
  config(shape: string, o: SynthShapeOptions): JsonObject;
  /** Where the language model's tensors sit in a container (a wrapper's `language_model.`, or ''). */
  prefix(flat: JsonObject): string;
  /** Every tensor of the language model by name without the prefix, in the order they are drawn. */
  tensors(cfg: C): Iterable<SynthTensor>;
  /** The special tokens a synthetic tokenizer puts at the top of the vocabulary (the default: Kimi's chat tokens). */
  specials?(flat: JsonObject): readonly string[];
  /** The config's token ids once the tokenizer is drawn (`id` finds a special token's). */
  ids?(flat: JsonObject, id: ((text: string) => number | null) | undefined): void;
  /** Files a container holds beside its weights (a chat format), when it has a tokenizer. */
  containerFiles?(flat: JsonObject): Record<string, string>;
  /** Whether the codebooks keep clear of f16 subnormals (a model compared with the C engine, which flushes them). */
  normalBooks?(flat: JsonObject): boolean;
  /** The default trunk storage of a small shape: 'mixed' exercises every format, 'quantized' what the converter writes. */
  smallFormats?(flat: JsonObject): 'mixed' | 'quantized';
  /** The checkpoint form of a container config. */
  checkpoint(flat: JsonObject, o: { vision?: JsonObject }): SynthCheckpoint;
  /** The manifest's descriptive `arch`. */
  manifestArch(flat: JsonObject): string;
}
