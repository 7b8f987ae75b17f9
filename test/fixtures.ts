import type { CheckpointOptions } from '../src/synth/checkpoint.js';
import type { SynthOptions } from '../src/synth/synth.js';

/**
 * Containers (and HuggingFace checkpoints, for the unquantized reference path) whose logits the Python reference (tools/reference/kimi_linear_ref.py) computed once;
 * the results are committed under test/golden/. Regenerate with `node dist/tools/make-goldens.js`.
 */
export interface GoldenCase {
  name: string;
  /** A synthetic container… */
  synth?: SynthOptions;
  /** …or a synthetic HuggingFace checkpoint, run by the f32 reference path. */
  checkpoint?: CheckpointOptions;
  ids: number[];
}

export const GOLDEN_CASES: GoldenCase[] = [
  {
    name: 'tiny-mixed',
    synth: { shape: 'tiny', seed: 1 },
    ids: [1, 7, 42, 299, 0, 123, 7, 7, 88, 250, 3],
  },
  {
    // nothing a multiple of anything convenient; two dense layers, two MLA layers at the end
    name: 'awkward',
    synth: {
      shape: 'tiny',
      seed: 2,
      layers: 5,
      experts: 11,
      config: {
        hidden_size: 104,
        vocab_size: 333,
        intermediate_size: 150,
        moe_intermediate_size: 40,
        num_experts_per_token: 4,
        num_shared_experts: 2,
        first_k_dense_replace: 2,
        num_attention_heads: 2,
        kv_lora_rank: 36,
        qk_nope_head_dim: 12,
        qk_rope_head_dim: 5,
        v_head_dim: 20,
        routed_scaling_factor: 1.7,
        linear_attn_config: { num_heads: 5, head_dim: 12, short_conv_kernel_size: 3 },
      },
    },
    ids: [5, 332, 17, 17, 200, 0, 64, 128, 1, 99, 300, 42, 11],
  },
  {
    // big enough that the converter's formats appear: Q8G embedding/head, Q4G matrices, F32 small ones
    name: 'converter-formats',
    synth: {
      shape: 'tiny',
      seed: 3,
      trunkFormats: 'converter',
      config: {
        hidden_size: 256,
        vocab_size: 512,
        intermediate_size: 384,
        moe_intermediate_size: 64,
        linear_attn_config: { num_heads: 4, head_dim: 64 },
        num_attention_heads: 4,
        kv_lora_rank: 64,
        qk_nope_head_dim: 32,
        qk_rope_head_dim: 16,
        v_head_dim: 32,
      },
    },
    ids: [10, 500, 3, 256, 77, 1, 2, 3, 4],
  },
  {
    // the checkpoint path: bf16 matrices, f32 small tensors, three shards
    name: 'checkpoint-sharded',
    checkpoint: { shape: 'tiny', seed: 4, shards: 3 },
    ids: [9, 1, 250, 33, 33, 0, 299, 128, 64, 5],
  },
];
