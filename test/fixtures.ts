import type { CheckpointOptions } from '../src/synth/checkpoint.js';
import type { SynthOptions } from '../src/synth/synth.js';

/**
 * Containers (and HuggingFace checkpoints, for the unquantized reference path) whose logits the
 * Python reference computed once (tools/reference/kimi_linear_ref.py for the Kimi family,
 * tools/reference/moe_ref.py for the others); the results are committed under test/golden/.
 * Regenerate with `node dist/tools/make-goldens.js`.
 */
export interface GoldenCase {
  name: string;
  /** A synthetic container… */
  synth?: SynthOptions;
  /** …or a synthetic HuggingFace checkpoint, run by the f32 reference path. */
  checkpoint?: CheckpointOptions;
  /** Ids; with `image`, the one `<|media_pad|>` among them stands for its rows. */
  ids: number[];
  /** A test picture (helpers.testPicture) spliced in at the placeholder, through the vision tower. */
  image?: { width: number; height: number; seed: number };
  /** How close the engine must be (max |Δ| / max |ref|; default 1e-4). */
  tolerance?: number;
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
  {
    // Kimi K3: attention residuals over several blocks and a partial one, the latent MoE, SiTU,
    // KDA's bounded gate and full-rank output gate, MLA's compressed query and output gate
    name: 'k3-tiny',
    synth: { shape: 'k3-tiny', seed: 5 },
    ids: [165, 77, 202, 24, 37, 48, 187, 29, 109, 19, 44, 222, 214, 35, 123, 46, 217, 30, 63, 114, 31, 203, 25, 113, 23, 68, 148, 214, 73, 60, 157, 92, 52, 96, 190, 49, 32, 30, 105, 1000],
    tolerance: 1e-5,
  },
  {
    // K3's features in other combinations and at awkward sizes: blocks of 2, a plain q_proj with
    // the output gate, no latent norm, no linear β, a latent wider than the experts' width, top-2
    // of 11, two dense layers, every trunk format (F16 included)
    name: 'k3-awkward',
    synth: {
      shape: 'k3-tiny',
      seed: 6,
      layers: 6,
      experts: 11,
      trunkFormats: 'mixed',
      config: {
        hidden_size: 104,
        vocab_size: 600,
        intermediate_size: 150,
        moe_intermediate_size: 40,
        routed_expert_hidden_size: 56,
        latent_moe_use_norm: false,
        activation_situ_linear_beta: null,
        activation_situ_beta: 3.0,
        num_experts_per_token: 2,
        num_shared_experts: 1,
        first_k_dense_replace: 2,
        num_attention_heads: 2,
        q_lora_rank: 0,
        kv_lora_rank: 36,
        qk_nope_head_dim: 12,
        qk_rope_head_dim: 5,
        v_head_dim: 20,
        attn_res_block_size: 2,
        linear_attn_config: { num_heads: 5, head_dim: 12, short_conv_kernel_size: 3, gate_lower_bound: -3.5 },
      },
    },
    ids: [5, 599, 17, 17, 200, 0, 64, 128, 1, 99, 300, 42, 11, 343, 344, 345],
    tolerance: 1e-5,
  },
  {
    // K3's checkpoint as its release lays it out: nested config, language_model. prefix, MXFP4
    // routed experts (decoded exactly), a vision tower beside it; run by the f32 reference path
    name: 'k3-checkpoint',
    checkpoint: { shape: 'k3-tiny', seed: 3, shards: 3 },
    ids: [5, 17, 200, 33, 250, 9, 120, 64, 700, 1000, 3],
    tolerance: 1e-5,
  },
  {
    // the same release layout with an image: the tower (mostly 8-bit sizes here, f32 in the
    // checkpoint path), a 4 x 6 patch grid resized from the 8 x 8 position grid, its 6 rows spliced in
    name: 'k3-vision',
    checkpoint: { shape: 'k3-tiny', seed: 3, shards: 2 },
    ids: [5, 17, 200, 789, 33, 250, 9, 120],
    image: { width: 100, height: 70, seed: 4 },
    tolerance: 2e-5,
  },
  {
    // Qwen3-MoE as released: GQA 2:1, q/k RMSNorm per head, RoPE θ 1e6, a dense first layer
    // (mlp_only_layers), a softmax router whose top 2 of 8 are renormalised
    name: 'qwen3-moe-checkpoint',
    checkpoint: { shape: 'qwen3-moe-tiny', seed: 7, shards: 2 },
    ids: [17, 300, 5, 5, 64, 128, 1, 250, 99, 42, 7, 319, 0, 200],
    tolerance: 2e-5,
  },
  {
    // Qwen3-MoE's other settings: every projection biased, the head tied to the embedding, one kv
    // head (MQA), a head_dim of 24 that is not hidden/heads, a sliding window of 5 shorter than the
    // ids, MoE every second layer (decoder_sparse_step), top 3 of 6 not renormalised
    name: 'qwen3-moe-awkward',
    checkpoint: {
      shape: 'qwen3-moe-tiny',
      seed: 8,
      layers: 5,
      experts: 6,
      config: {
        attention_bias: true,
        tie_word_embeddings: true,
        num_key_value_heads: 1,
        head_dim: 24,
        use_sliding_window: true,
        sliding_window: 5,
        decoder_sparse_step: 2,
        mlp_only_layers: [],
        norm_topk_prob: false,
        num_experts_per_tok: 3,
        rope_theta: 5000,
      },
    },
    ids: [3, 77, 160, 160, 21, 300, 8, 45, 2, 90, 111, 250, 6, 318, 12, 40],
    tolerance: 2e-5,
  },
  {
    // DeepSeek-V3 as released: FP8 weights with 128 x 128 block scales, q low rank, YaRN (factor 40,
    // beta 32/1, mscale_all_dim: the softmax scale times mscale^2), 2 of 4 groups kept, top-4 of 16,
    // a shared expert, a dense first layer, an MTP layer in the files that is never read
    name: 'deepseek-v3-checkpoint',
    checkpoint: { shape: 'deepseek-v3-tiny', seed: 9, shards: 2 },
    ids: [17, 300, 5, 5, 64, 128, 1, 250, 99, 42, 7, 319, 0, 200, 33, 34],
    tolerance: 2e-6,
  },
  {
    // every option elsewhere: FP8 matrices of several partial blocks (widths 136, 140, 150), 3
    // heads of odd sizes, half-split RoPE (rope_interleave false), YaRN beta 8/3 untruncated with
    // mscale 0.9 / mscale_all_dim 0.7, θ 5000, 2 of 3 groups, top-3 of 12 not renormalised, two
    // shared experts, two dense layers, routed scale 1.7, rms_norm_eps 0.05 (the latent norms keep
    // HF's 1e-6), a tied head, biases on q_a, kv_a and o (attention_bias)
    name: 'deepseek-v3-awkward',
    checkpoint: {
      shape: 'deepseek-v3-tiny',
      seed: 10,
      layers: 4,
      experts: 12,
      config: {
        vocab_size: 333,
        hidden_size: 136,
        num_attention_heads: 3,
        num_key_value_heads: 3,
        q_lora_rank: 140,
        kv_lora_rank: 36,
        qk_nope_head_dim: 10,
        qk_rope_head_dim: 6,
        v_head_dim: 14,
        intermediate_size: 150,
        moe_intermediate_size: 40,
        n_group: 3,
        topk_group: 2,
        num_experts_per_tok: 3,
        n_shared_experts: 2,
        routed_scaling_factor: 1.7,
        norm_topk_prob: false,
        first_k_dense_replace: 2,
        rope_interleave: false,
        rope_theta: 5000,
        rms_norm_eps: 0.05,
        tie_word_embeddings: true,
        attention_bias: true,
        max_position_embeddings: 32768,
        rope_scaling: { type: 'yarn', factor: 8, original_max_position_embeddings: 4096, beta_fast: 8, beta_slow: 3, truncate: false, mscale: 0.9, mscale_all_dim: 0.7 },
      },
    },
    ids: [3, 77, 160, 160, 21, 300, 8, 45, 2, 90, 111, 250, 6, 318, 12, 40, 332, 1],
    tolerance: 2e-6,
  },
  {
    // Kimi K2's settings: no group limit, YaRN beta 1/1 (not DeepSeek's 32/1), θ 50000, routed
    // scale 2.827; a plain q_proj, bf16 weights
    name: 'kimi-k2-checkpoint',
    checkpoint: { shape: 'kimi-k2-tiny', seed: 11 },
    ids: [9, 1, 250, 33, 33, 0, 299, 128, 64, 5, 7, 8],
    tolerance: 2e-6,
  },
  {
    // Kimi K2-Thinking's form: routed experts in compressed-tensors pack-quantized INT4 (symmetric,
    // groups of 32, bf16 scales), the rest bf16; decoded exactly
    name: 'kimi-k2-thinking-checkpoint',
    checkpoint: {
      shape: 'kimi-k2-tiny',
      seed: 12,
      config: {
        q_lora_rank: 48,
        quantization_config: {
          quant_method: 'compressed-tensors',
          format: 'pack-quantized',
          config_groups: {
            group_0: {
              targets: ['Linear'],
              weights: { num_bits: 4, type: 'int', symmetric: true, strategy: 'group', group_size: 32, dynamic: false, actorder: null, observer: 'minmax' },
              input_activations: null,
              output_activations: null,
            },
          },
          ignore: ['lm_head', 're:.*self_attn.*', 're:.*shared_experts.*', 're:.*mlp\\.(gate|up|gate_up|down)_proj.*'],
          kv_cache_scheme: null,
          quantization_status: 'compressed',
        },
      },
    },
    ids: [4, 300, 17, 17, 250, 1, 99, 128, 64, 5, 210, 8],
    tolerance: 2e-6,
  },
  {
    // Mixtral as released: GQA 2:1, no biases or q/k norms, RoPE θ 1e6, no window, a softmax
    // router whose top 2 of 8 are always renormalised, experts w1 (gate) / w3 (up) / w2 (down)
    name: 'mixtral-checkpoint',
    checkpoint: { shape: 'mixtral-tiny', seed: 9, shards: 2 },
    ids: [12, 301, 7, 7, 88, 160, 2, 250, 99, 41, 5, 319, 0, 210],
    tolerance: 2e-5,
  },
  {
    // Mixtral's other settings: a sliding window of 4 shorter than the ids, one kv head (MQA), a
    // head_dim of 24 that is not hidden/heads, the head tied to the embedding, top 3 of 5
    // renormalised, an expert width of 40, θ 5000
    name: 'mixtral-awkward',
    checkpoint: {
      shape: 'mixtral-tiny',
      seed: 10,
      layers: 3,
      experts: 5,
      config: {
        vocab_size: 333,
        intermediate_size: 40,
        num_key_value_heads: 1,
        head_dim: 24,
        sliding_window: 4,
        tie_word_embeddings: true,
        num_experts_per_tok: 3,
        rope_theta: 5000,
      },
    },
    ids: [3, 77, 160, 160, 21, 300, 8, 45, 2, 90, 111, 250, 6, 332, 12, 40],
    tolerance: 2e-5,
  },
  {
    // OLMoE as released: MHA, q/k RMSNorm over the whole projections, no clip, RoPE θ 10000, a
    // softmax router whose top 4 of 16 are NOT renormalised
    name: 'olmoe-checkpoint',
    checkpoint: { shape: 'olmoe-tiny', seed: 11, shards: 2 },
    ids: [19, 302, 6, 6, 70, 130, 1, 255, 98, 43, 8, 318, 0, 205],
    tolerance: 2e-5,
  },
  {
    // OLMoE's other settings: clip_qkv 0.5 (clamping many q, k and v entries), every projection
    // biased, GQA 2:1 (HF allows it; llama.cpp assumes MHA), the head tied to the embedding, a
    // head_dim of 18, top 3 of 7 renormalised (norm_topk_prob), θ 5000
    name: 'olmoe-awkward',
    checkpoint: {
      shape: 'olmoe-tiny',
      seed: 12,
      layers: 3,
      experts: 7,
      config: {
        vocab_size: 333,
        hidden_size: 72,
        intermediate_size: 40,
        num_key_value_heads: 2,
        clip_qkv: 0.5,
        attention_bias: true,
        tie_word_embeddings: true,
        num_experts_per_tok: 3,
        norm_topk_prob: true,
        rope_theta: 5000,
      },
    },
    ids: [4, 76, 161, 161, 22, 301, 9, 44, 3, 91, 110, 251, 7, 331, 13, 41],
    tolerance: 2e-5,
  },
  {
    // gpt-oss as released: experts stacked per layer in MXFP4 (gate and up rows interleaved) with
    // biases, a router with a bias (softmax over its top 2 of 8), q/k/v/o biases, a sink per head,
    // windows of 4 on even layers and full attention on odd ones, YaRN (factor 32, truncate false)
    name: 'gpt-oss-checkpoint',
    checkpoint: { shape: 'gpt-oss-tiny', seed: 9, shards: 2 },
    ids: [17, 300, 5, 5, 64, 128, 1, 250, 99, 42, 7, 319, 0, 200],
    tolerance: 2e-5,
  },
  {
    // gpt-oss's other settings: experts stacked as bf16 [E, in, out] (HF's parameter layout) at
    // widths MXFP4 cannot hold, a swiglu_limit of 0.5 that clamps, one kv head (MQA), head_dim 24,
    // the head tied, layer types out of the default order with a window of 3, top 3 of 5, YaRN
    // with its own factor and βs (truncate false), θ 5000
    name: 'gpt-oss-awkward',
    checkpoint: {
      shape: 'gpt-oss-tiny',
      seed: 10,
      layers: 5,
      experts: 5,
      config: {
        _experts: 'bf16',
        hidden_size: 40,
        intermediate_size: 24,
        num_attention_heads: 3,
        num_key_value_heads: 1,
        head_dim: 24,
        tie_word_embeddings: true,
        swiglu_limit: 0.5,
        sliding_window: 3,
        layer_types: ['full_attention', 'sliding_attention', 'sliding_attention', 'full_attention', 'sliding_attention'],
        num_experts_per_tok: 3,
        rope_theta: 5000,
        rope_scaling: { rope_type: 'yarn', factor: 8.0, beta_fast: 16.0, beta_slow: 2.0, truncate: false, original_max_position_embeddings: 64 },
      },
    },
    ids: [3, 77, 160, 160, 21, 300, 8, 45, 2, 90, 111, 250, 6, 318, 12, 40],
    tolerance: 2e-5,
  },
  {
    // GLM-4.5 as released: GQA 2:1 with q/k/v biases and per-head q/k norms, RoPE on 8 of 16 head
    // dims (rotate_half), a dense first layer, a sigmoid router choosing its top 2 of 8 on score +
    // e_score_correction_bias within the best 2 of 4 groups, renormalised and scaled by 2.5, one
    // shared expert; an MTP layer (model.layers.4) in the checkpoint, never read
    name: 'glm4-moe-checkpoint',
    checkpoint: { shape: 'glm4-moe-tiny', seed: 11, shards: 2 },
    ids: [17, 300, 5, 5, 64, 128, 1, 250, 99, 42, 7, 319, 0, 200],
    tolerance: 2e-5,
  },
  {
    // GLM-4.5's other settings: no q/k norm (Air), 12 experts in 3 groups of 4 of which 1 is kept
    // and top 4 chosen (a kept expert whose biased score is below 0 loses to a dropped one, as HF
    // masks dropped groups to 0), not renormalised, scale 1.7, two shared experts, two dense
    // layers, a partial rotary factor of 0.25 on a head_dim of 24 (6 rotated dims), one kv head,
    // a tied head, 2 MTP layers
    name: 'glm4-moe-awkward',
    checkpoint: {
      shape: 'glm4-moe-tiny',
      seed: 12,
      layers: 5,
      experts: 12,
      config: {
        use_qk_norm: false,
        n_group: 3,
        topk_group: 1,
        num_experts_per_tok: 4,
        norm_topk_prob: false,
        routed_scaling_factor: 1.7,
        n_shared_experts: 2,
        first_k_dense_replace: 2,
        partial_rotary_factor: 0.25,
        head_dim: 24,
        num_key_value_heads: 1,
        tie_word_embeddings: true,
        rope_theta: 5000,
        num_nextn_predict_layers: 2,
      },
    },
    ids: [3, 77, 160, 160, 21, 300, 8, 45, 2, 90, 111, 250, 6, 318, 12, 40],
    tolerance: 2e-5,
  },
  {
    // Qwen3-Next as released: 3 Gated DeltaNet layers then gated full attention (partial RoPE 0.25),
    // value heads 2 per key head, q/k/v/z and b/a packed per key-head group, zero-centred norms,
    // a dense layer (mlp_only_layers), softmax top 2 of 8 renormalised plus a sigmoid-gated shared expert
    name: 'qwen3-next-checkpoint',
    checkpoint: { shape: 'qwen3-next-tiny', seed: 9, shards: 2 },
    ids: [17, 300, 5, 5, 64, 128, 1, 250, 99, 42, 7, 319, 0, 200],
    tolerance: 2e-5,
  },
  {
    // Qwen3-Next's other settings: an irregular layer_types, 3 value heads per key head, a conv of
    // 3 taps, every projection biased, the head tied, one kv head, head_dim 24 rotated by half,
    // MoE every second layer, top 3 of 6 not renormalised
    name: 'qwen3-next-awkward',
    checkpoint: {
      shape: 'qwen3-next-tiny',
      seed: 10,
      layers: 6,
      experts: 6,
      config: {
        layer_types: ['linear_attention', 'full_attention', 'linear_attention', 'linear_attention', 'full_attention', 'linear_attention'],
        linear_num_key_heads: 1,
        linear_num_value_heads: 3,
        linear_key_head_dim: 12,
        linear_value_head_dim: 12,
        linear_conv_kernel_dim: 3,
        attention_bias: true,
        tie_word_embeddings: true,
        num_key_value_heads: 1,
        head_dim: 24,
        partial_rotary_factor: 0.5,
        decoder_sparse_step: 2,
        mlp_only_layers: [],
        norm_topk_prob: false,
        num_experts_per_tok: 3,
        rope_theta: 5000,
      },
    },
    ids: [3, 77, 160, 160, 21, 300, 8, 45, 2, 90, 111, 250, 6, 318, 12, 40],
    tolerance: 2e-5,
  },
  {
    // Qwen3.5 MoE as released: the config nested beside a vision config, the language model under
    // model.language_model. with its experts stacked (gate_up_proj, down_proj), a vision tower and
    // an MTP tensor beside it; in_proj_qkv / z / b / a apart, 3 value heads per key head, MQA,
    // every layer MoE (top 3 of 8, always renormalised), rope_parameters
    name: 'qwen3.5-moe-checkpoint',
    checkpoint: { shape: 'qwen3.5-moe-tiny', seed: 11, shards: 2 },
    ids: [9, 310, 44, 44, 0, 128, 1, 251, 98, 43, 8, 300, 2],
    tolerance: 2e-5,
  },
  {
    // Qwen3.5 MoE's text-only form (qwen3_5_moe_text, tensors under model., one tensor per expert
    // matrix), with a tied head and a 2-tap conv
    name: 'qwen3.5-moe-text',
    checkpoint: { shape: 'qwen3.5-moe-tiny', seed: 12, layers: 5, config: { _outer: null, tie_word_embeddings: true, linear_conv_kernel_dim: 2, num_experts_per_tok: 2 } },
    ids: [4, 300, 12, 12, 99, 1, 250, 7, 64, 128, 5],
    tolerance: 2e-5,
  },
];
