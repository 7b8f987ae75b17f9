#!/usr/bin/python3
"""Float64 reference forward passes for five MoE families (dev only; CI never runs Python).

One module for the HuggingFace `model_type`s qwen3_moe, mixtral, olmoe, glm4_moe and gpt_oss: it
reads a HuggingFace checkpoint folder (config.json + safetensors, single or sharded with
model.safetensors.index.json), decodes every tensor it needs to float64 (BF16, F16, F32, F64,
gpt-oss's MXFP4 `*_blocks`/`*_scales`, and F8_E4M3 weights with 2-D block scales `*_scale_inv` as in
DeepSeek-V3's and Qwen's FP8 releases, mixed freely with BF16 tensors: Checkpoint.weight), and runs
the decoder the plain way in float64: one position after another is never needed, the whole prompt
is one causal prefill, experts are evaluated only for the tokens routed to them. `moe_ref.py` is the
command line; `test_moe_refs.py` the self-checks (test_moe_refs2.py checks the FP8 reading). The
sibling modules deepseek_model.py (deepseek_v3, kimi_k2) and qwen_next_model.py (qwen3_next,
qwen3_5_moe) reuse this reader and the building blocks below.

Written from the published architecture (the HF definitions in huggingface/transformers,
src/transformers/models/<type>/{modeling,modular,configuration}_<type>.py and
src/transformers/modeling_rope_utils.py, src/transformers/masking_utils.py,
src/transformers/integrations/mxfp4.py), read for facts; the code is an independent formulation in
plain torch ops, not a translation of those files, and not of the TypeScript engine.

Where HF computes in float32 (RMSNorm, router softmax, RoPE tables, attention softmax) this module
computes in float64: it is the ideal the engine is measured against, not a bit-exact HF replica.

Shared pieces (every family)
----------------------------
  * Pre-norm decoder: x += attn(RMSNorm(x)); x += ffn(RMSNorm(x)); final RMSNorm; logits = x W^T with
    W = lm_head.weight, or model.embed_tokens.weight when `tie_word_embeddings` (default false in all
    five configuration classes). RMSNorm: x / sqrt(mean(x^2) + eps) * w, eps = `rms_norm_eps`.
  * RoPE, "neox"/rotate_half layout: the rotated part of a head is its first R = int(head_dim *
    partial_rotary_factor) dims, split in halves (x1 = [0, R/2), x2 = [R/2, R)); out = (x1 c - x2 s,
    x2 c + x1 s, rest unchanged) with c, s = cos/sin(pos * inv_freq) * attention_factor (HF multiplies
    the cos/sin tables by `attention_scaling`, so q and k are both scaled by it: scores by its
    square). None of the five families rotates interleaved pairs (HF's `glm` and `glm4` dense models
    do; glm4_moe does not, see below).
    inv_freq: default 1/theta^(2i/R); linear: /factor; llama3: the wavelength-banded formula
    (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings); dynamic: equal to
    default while the sequence is within max_position_embeddings (longer is refused); yarn
    (`_compute_yarn_parameters`): extrapolated 1/theta^(2i/R) and interpolated ones /factor blended by
    a linear ramp over i in [low, high], low/high = R ln(orig / (2 pi beta)) / (2 ln theta) for
    beta_fast (default 32) and beta_slow (default 1), floored/ceiled only when `truncate` (default
    true), clamped to [0, R-1], high += 0.001 if equal; orig = original_max_position_embeddings (else
    max_position_embeddings); factor from the config (only if absent: max_position_embeddings/orig);
    attention_factor = config's, else mscale/mscale_all_dim ratio, else 0.1 ln(factor) + 1 (1 if
    factor <= 1). Config keys: v4 `rope_theta` + `rope_scaling` ({rope_type|type, ...}), or v5
    `rope_parameters` ({rope_type, rope_theta, partial_rotary_factor, ...}); both are read.
  * Attention: scores = q k^T * head_dim^-0.5; GQA: query head h reads key/value head
    h // (heads / kv_heads) (HF's repeat_kv); causal; a sliding window W keeps keys with
    q - W < k <= q (masking_utils.sliding_window_overlay: kv_idx > q_idx - W), so W = 1 is the token
    itself; gpt-oss sinks are one extra logit per head in the softmax, dropped after it.
  * Top-k ties go to the lower expert id (a stable descending sort; torch.topk leaves ties unspecified).

qwen3_moe (modeling_qwen3_moe.py: Qwen3MoeAttention, Qwen3MoeSparseMoeBlock, Qwen3MoeDecoderLayer;
configuration_qwen3_moe.py)
  * q/k/v/o projections with bias iff `attention_bias` (o_proj too); head_dim from `head_dim` (the
    releases: 128 with hidden 2048/4096/6144, so heads*head_dim != hidden) else hidden/heads.
  * q_norm/k_norm: RMSNorm over each head's head_dim (weight [head_dim]), before RoPE.
  * Router `mlp.gate` (no bias): softmax over all experts, top-k, divided by their sum iff
    `norm_topk_prob` (class default false; the releases set true). No shared expert.
  * Layer L is MoE iff L not in `mlp_only_layers` and num_experts > 0 and (L+1) % decoder_sparse_step
    == 0; other layers are a dense SwiGLU of `intermediate_size`; experts use `moe_intermediate_size`.
  * Sliding window only when `use_sliding_window` (then `sliding_window` on every layer: the MoE
    class has no layer_types, `max_window_layers` is not read). Release configs (as recalled, not
    re-read here): use_sliding_window false, rope_scaling null, rope_theta set per release (read from
    config.json); Qwen's model cards add YaRN {rope_type yarn, factor 4,
    original_max_position_embeddings 32768} for long context: supported.
  * Defaults: rms_norm_eps 1e-6, rope_theta 10000.
mixtral (modeling_mixtral.py: MixtralSparseMoeBlock, MixtralBlockSparseTop2MLP, MixtralAttention)
  * No attention biases, no q/k norm. Router `block_sparse_moe.gate`: softmax over ALL logits, top-k
    (num_experts_per_tok, 2), always renormalised by the top-k sum (no flag). Experts
    `block_sparse_moe.experts.N.w1` (gate, SiLU side), `w3` (up), `w2` (down); width intermediate_size.
  * `sliding_window` (class default null; 8x7B and 8x22B configs: null) applies to every layer.
  * Defaults: rms_norm_eps 1e-5, rope_theta 1e6 (`default_theta`), num_local_experts 8.
olmoe (modeling_olmoe.py: OlmoeAttention, OlmoeSparseMoeBlock; configuration_olmoe.py)
  * q_norm is an RMSNorm over the WHOLE q projection (weight [heads*head_dim]), k_norm over the whole
    k projection (weight [kv_heads*head_dim]), applied before splitting into heads, then `clip_qkv`
    (if set) clamps q, k and v to [-c, c] (after the norms), then RoPE.
  * Biases on q/k/v/o iff `attention_bias`. Router `mlp.gate`: softmax over all, top-k, renormalised
    only iff `norm_topk_prob` (default false; OLMoE-1B-7B: false). Experts `mlp.experts.N.*_proj`
    of width `intermediate_size`; every layer is MoE; no shared expert.
  * Defaults: rms_norm_eps 1e-5, rope_theta 10000, num_experts 64, top-k 8.
glm4_moe (modeling_glm4_moe.py / modular_glm4_moe.py: Glm4MoeAttention, Glm4MoeMoE /
route_tokens_to_experts, Glm4MoeTopkRouter; configuration_glm4_moe.py)
  * q/k/v biases iff `attention_bias` (GLM-4.5: true); o_proj never has a bias. Optional per-head
    q_norm/k_norm (`use_qk_norm`, default false; GLM-4.5: true, Air: false), before RoPE.
  * Partial rotary: `partial_rotary_factor` (absent -> 0.5, set in Glm4MoeConfig.__post_init__),
    rotate_half over the FIRST R dims of each head, the rest passed through (the current modular
    imports gpt_neox's apply_rotary_pos_emb; the generated modeling file slices q[..., :R] and
    applies rotate_half). A pre-release draft of the modular inherited Glm4Attention, whose GLM-style
    rotate is interleaved (x[..., 0::2], x[..., 1::2]): not followed.
  * Router `mlp.gate.weight` (no bias) and buffer `mlp.gate.e_score_correction_bias` (absent -> zeros):
    s = sigmoid(logits); c = s + bias (selection only); group score = sum of the top-2 c in each of
    n_group groups of n_routed/n_group consecutive experts; keep topk_group groups; the other groups'
    c are replaced by 0.0 (masked_fill(..., 0.0)); top-k of that; weights = the chosen s, divided by
    (sum + 1e-20) iff norm_topk_prob, then times routed_scaling_factor (always).
    DISAGREEMENT (shared/docs/families.md): DeepSeek's own code and llama.cpp mask dropped groups
    with -inf; with 0.0 a dropped
    expert can be chosen when fewer than top_k kept experts have c > 0 (bias can make c negative).
    This module follows HF (0.0); the self-test shows a case where the two differ.
  * One shared expert `mlp.shared_experts.*` of width moe_intermediate_size * n_shared_experts added
    to every MoE layer's output. Layers L < first_k_dense_replace are a dense SwiGLU of
    intermediate_size. `num_nextn_predict_layers` MTP layers sit at model.layers.{num_hidden_layers+k}
    (eh_proj, enorm, hnorm, shared_head, and a decoder layer): never read.
  * Defaults: rms_norm_eps 1e-5, rope_theta 10000, n_group 1, topk_group 1, routed_scaling_factor
    1.0, norm_topk_prob true, n_shared_experts 1, first_k_dense_replace 1, n_routed_experts 128.
gpt_oss (modeling_gpt_oss.py: GptOssAttention, eager_attention_forward, GptOssTopKRouter,
GptOssExperts, GptOssRotaryEmbedding; configuration_gpt_oss.py; integrations/mxfp4.py)
  * q/k/v/o with biases (`attention_bias`, default true); `head_dim` 64 (64 heads: != hidden 2880).
  * Sinks `self_attn.sinks` [heads]: logits row = [scores..., sink]; softmax; drop the sink column.
  * `layer_types` (default: layer i sliding iff i is even) choose `sliding_window` (128) or full.
  * RoPE: yarn {factor 32, beta_fast 32, beta_slow 1, original_max_position_embeddings 4096,
    truncate false} (the class default when absent), rope_theta 150000; HF's gpt-oss applies it as
    halves (first*cos - second*sin, second*cos + first*sin): the same neox layout.
  * Router `mlp.router.weight` + `mlp.router.bias`: top-k of the raw logits, softmax over those k.
  * Experts stacked. Dense (bf16) parameters as HF holds them: gate_up_proj [E, H, 2I] used as
    x @ W (in x out), gate = columns 0::2, up = columns 1::2 (INTERLEAVED), gate_up_proj_bias [E, 2I]
    likewise; down_proj [E, I, H] used as x @ W; down_proj_bias [E, H].
    MXFP4 release: gate_up_proj_blocks u8 [E, 2I, H/32, 16], gate_up_proj_scales u8 [E, 2I, H/32],
    down_proj_blocks [E, H, I/32, 16], down_proj_scales [E, H, I/32]; biases stay dense (bf16).
    Decoding (convert_moe_packed_tensors): per byte j of a 16-byte block, element 2j = low nibble,
    2j+1 = high nibble; nibble -> {+0, .5, 1, 1.5, 2, 3, 4, 6, -0, -.5, -1, -1.5, -2, -3, -4, -6};
    times 2^(scale - 127); the row is [out, in] (HF transposes it into [E, in, out]). A scale byte of
    0xFF (E8M0 NaN) is refused (HF would produce 2^128).
  * Expert activation: g = min(gate, limit); u = clamp(up, -limit, limit);
    h = g * sigmoid(alpha g) * (u + 1); out = h @ down + down_bias; alpha = `swiglu_alpha` (1.702),
    limit = `swiglu_limit` (7.0). Tokens combine the top-k outputs with the router weights.
  * Defaults: rms_norm_eps 1e-5, rope_theta 150000, sliding_window 128, num_local_experts 128, top-k 4.

Other readings that differ (from shared/docs/families.md, not re-read here; this module follows HF):
llama.cpp's gpt-oss and
deepseek2 loaders use YaRN beta 32/1 whatever the config says and ggml rounds the YaRN correction
range to whole dims (gpt-oss says truncate false); llama.cpp's qwen3moe always renormalises the top-k
(HF only with norm_topk_prob); llama.cpp's olmoe assumes kv_heads == heads. transformers 4.5x's
_compute_yarn_parameters replaced `factor` by max_position_embeddings / original_max_position_embeddings
whenever the latter was present (read in stored 4.5x-era copies of modeling_rope_utils.py; same for
gpt-oss, 131072/4096 = 32; differs for a Qwen3 YaRN config whose max_position_embeddings was not
raised); the current code keeps the config's factor (and uses the ratio only when factor is absent),
as here.
"""
import json
import math
import os
import struct

import torch

DT = torch.float64
FAMILIES = ("qwen3_moe", "mixtral", "olmoe", "glm4_moe", "gpt_oss")


# ----------------------------------------------------------------------------------------------
# safetensors, read directly


_FLOAT = {"F64": (torch.float64, 8), "F32": (torch.float32, 4), "F16": (torch.float16, 2), "BF16": (None, 2)}
_INT = {"U8": (torch.uint8, 1), "I8": (torch.int8, 1), "I32": (torch.int32, 4)}


def _e4m3_values():
    """The 256 float8_e4m3fn (OCP FP8 E4M3, "fn": finite, no infinities) byte values: sign bit 7,
    exponent bits 6..3 (bias 7), mantissa bits 2..0; exponent 0 is subnormal (m/8 * 2^-6); 0x7F and
    0xFF are NaN (as NaN here, refused by decode), so the largest magnitude is 0x7E = 448."""
    vals = []
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        e, m = (b >> 3) & 15, b & 7
        if e == 15 and m == 7:
            vals.append(float("nan"))
        elif e == 0:
            vals.append(sign * m / 8.0 * 2.0 ** -6)
        else:
            vals.append(sign * (1.0 + m / 8.0) * 2.0 ** (e - 7))
    return torch.tensor(vals, dtype=DT)


E4M3 = _e4m3_values()


def decode(raw, dtype):
    """Bytes of a safetensors dtype -> a flat float64 (floats) or integer tensor. F8_E4M3 gives the
    raw FP8 values (no block scale: Checkpoint.weight applies it); a NaN byte (0x7F/0xFF) is refused."""
    if len(raw) == 0:
        return torch.zeros(0, dtype=DT)
    if dtype == "F8_E4M3":
        codes = torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(torch.int64)
        if bool(((codes & 0x7F) == 0x7F).any()):
            raise ValueError("F8_E4M3 NaN byte (0x7F/0xFF) in a weight")
        return E4M3[codes]
    if dtype == "BF16":
        return torch.frombuffer(bytearray(raw), dtype=torch.int16).to(torch.int32).bitwise_left_shift(16).view(torch.float32).to(DT)
    if dtype in _FLOAT:
        return torch.frombuffer(bytearray(raw), dtype=_FLOAT[dtype][0]).to(DT)
    if dtype in _INT:
        return torch.frombuffer(bytearray(raw), dtype=_INT[dtype][0]).clone()
    raise ValueError(f"safetensors dtype {dtype} not supported")


def itemsize(dtype):
    if dtype == "F8_E4M3":
        return 1
    if dtype in _FLOAT:
        return _FLOAT[dtype][1]
    if dtype in _INT:
        return _INT[dtype][1]
    raise ValueError(f"safetensors dtype {dtype} not supported")


class Checkpoint:
    """A HuggingFace checkpoint folder: config.json and its safetensors (an index names the shards;
    without one, every *.safetensors file in the folder). Tensors are read on demand."""

    def __init__(self, path):
        self.path = path
        with open(os.path.join(path, "config.json")) as f:
            self.cfg = json.load(f)
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        else:
            files = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
        if not files:
            raise FileNotFoundError(f"{path}: no safetensors")
        self.where = {}
        for fn in files:
            with open(os.path.join(path, fn), "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(n))
            for name, meta in header.items():
                if name != "__metadata__":
                    self.where[name] = (fn, 8 + n, meta)
        # compressed-tensors pack-quantized INT4 (Kimi K2-Thinking's routed experts): an I32
        # `X.weight_packed` with `X.weight_scale` and `X.weight_shape` stands for the matrix `X.weight`
        self.int4 = {}
        for name, (_, _, meta) in self.where.items():
            if name.endswith(".weight_packed") and meta["dtype"] == "I32":
                base = name[: -len("_packed")]
                if base + "_scale" not in self.where or base + "_shape" not in self.where:
                    raise ValueError(f"{name}: INT4 pack-quantized without its weight_scale and weight_shape")
                self.int4[base] = [int(v) for v in self.tensor(base + "_shape").tolist()]

    def names(self):
        parts = {b + x for b in self.int4 for x in ("_packed", "_scale", "_shape")}
        return [n for n in self.where if n not in parts] + list(self.int4)

    def has(self, name):
        return name in self.where or name in self.int4

    def meta(self, name):
        if name in self.int4:
            return {"dtype": "INT4", "shape": self.int4[name]}
        if name not in self.where:
            raise KeyError(f"{self.path}: tensor {name} not in the checkpoint")
        return self.where[name][2]

    def _no_fp8(self, name):
        if self.meta(name)["dtype"] == "F8_E4M3":
            raise ValueError(f"{name}: F8_E4M3 is read only as a whole 2-D weight with its block scales")

    def _bytes(self, name, start=0, count=None):
        fn, base, meta = self.where[name]
        b, e = meta["data_offsets"]
        count = e - b - start if count is None else count
        with open(os.path.join(self.path, fn), "rb") as f:
            f.seek(base + b + start)
            raw = f.read(count)
        if len(raw) != count:
            raise ValueError(f"{name}: short read")
        return raw

    def tensor(self, name):
        """The whole tensor, float64 (floats) or its integer dtype, in its stored shape."""
        m = self.meta(name)
        return decode(self._bytes(name), m["dtype"]).reshape(m["shape"])

    def slab(self, name, i):
        """Element i along the first dimension (one expert of a stacked tensor)."""
        self._no_fp8(name)
        m = self.meta(name)
        shape = m["shape"]
        per = itemsize(m["dtype"]) * math.prod(shape[1:])
        return decode(self._bytes(name, i * per, per), m["dtype"]).reshape(shape[1:])

    def fp8_block(self):
        """(rows, cols) of one FP8 scale block: quantization_config.weight_block_size (also looked
        for in text_config), default 128 x 128. Other quantization methods are refused."""
        q = self.cfg.get("quantization_config") or (self.cfg.get("text_config") or {}).get("quantization_config")
        if not q:
            return (128, 128)
        method = q.get("quant_method")
        if method not in (None, "fp8"):
            raise ValueError(f"quantization_config.quant_method {method!r} is not supported (only fp8 blocks)")
        if q.get("fmt", "e4m3") != "e4m3":
            raise ValueError(f"fp8 format {q.get('fmt')!r} is not supported (only e4m3)")
        b = q.get("weight_block_size") or [128, 128]
        return (int(b[0]), int(b[1]))

    def weight(self, name):
        """A weight, float64 in its stored shape; an F8_E4M3 one is dequantized with `<name>_scale_inv`
        (one scale per block of fp8_block() rows x cols, partial blocks at the right and bottom
        edges): W[i, j] = fp8[i, j] * scale_inv[i // b0, j // b1]. Other dtypes are read as stored,
        so a checkpoint may mix FP8 and BF16 tensors."""
        if name in self.int4:
            return int4_dequant(self.tensor(name + "_packed"), self.tensor(name + "_scale"), self.int4[name], name)
        m = self.meta(name)
        if m["dtype"] != "F8_E4M3":
            return self.tensor(name)
        sname = name + "_scale_inv"
        if not self.has(sname):
            raise ValueError(f"{name} is F8_E4M3 but {sname} is missing")
        return fp8_dequant(self.tensor(name), self.tensor(sname), self.fp8_block(), name)

    def rows(self, name, ids):
        """Rows `ids` of a 2-D float tensor (an embedding), float64 [len(ids), cols]."""
        self._no_fp8(name)
        m = self.meta(name)
        cols = m["shape"][1]
        per = itemsize(m["dtype"]) * cols
        return torch.stack([decode(self._bytes(name, i * per, per), m["dtype"]) for i in ids])

    def row_range(self, name, a, b):
        self._no_fp8(name)
        m = self.meta(name)
        cols = m["shape"][1]
        per = itemsize(m["dtype"]) * cols
        return decode(self._bytes(name, a * per, (b - a) * per), m["dtype"]).reshape(b - a, cols)


def int4_dequant(packed, scale, shape, name="weight"):
    """compressed-tensors pack-quantized, symmetric INT4: packed I32 [R, ceil(C/8)] (column j in bits
    4 * (j % 8) of word j // 8, stored as q + 8), scale [R, C / g] -> q * the scale of its group."""
    R, C = shape
    if tuple(packed.shape) != (R, -(-C // 8)) or scale.dim() != 2 or scale.shape[0] != R or C % scale.shape[1]:
        raise ValueError(f"{name}: INT4 packed {tuple(packed.shape)}, scale {tuple(scale.shape)} for [{R}, {C}]")
    p = packed.to(torch.int64) & 0xFFFFFFFF
    q = torch.stack([(p >> (4 * i)) & 15 for i in range(8)], -1).reshape(R, -1)[:, :C] - 8
    return q.to(DT) * scale.repeat_interleave(C // scale.shape[1], 1)


def fp8_dequant(q, scale, block, name="weight"):
    """q [R, C] FP8 values (float64), scale [ceil(R/b0), ceil(C/b1)] -> q * the scale of its block."""
    if q.dim() != 2 or scale.dim() != 2:
        raise ValueError(f"{name}: FP8 block dequantization needs 2-D tensors, got {tuple(q.shape)}, {tuple(scale.shape)}")
    (R, C), (b0, b1) = q.shape, block
    want = (-(-R // b0), -(-C // b1))
    if tuple(scale.shape) != want:
        raise ValueError(f"{name}: scale_inv {tuple(scale.shape)}, expected {want} for {R}x{C} in {b0}x{b1} blocks")
    return q * scale.repeat_interleave(b0, 0)[:R].repeat_interleave(b1, 1)[:, :C]


# ----------------------------------------------------------------------------------------------
# MXFP4 (OCP MX: E2M1 elements, E8M0 scale per 32)


FP4_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                           -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=DT)


def mxfp4_decode(blocks, scales):
    """blocks u8 [..., G, 16], scales u8 [..., G] -> float64 [..., G * 32]: element 2j of a block is
    byte j's low nibble, 2j+1 its high nibble, each times 2^(scale - 127)."""
    if tuple(blocks.shape[:-1]) != tuple(scales.shape) or blocks.shape[-1] != 16:
        raise ValueError(f"MXFP4 blocks {tuple(blocks.shape)} vs scales {tuple(scales.shape)}")
    if bool((scales == 255).any()):
        raise ValueError("MXFP4 scale 0xFF (E8M0 NaN)")
    b = blocks.to(torch.int64)
    vals = torch.stack([FP4_VALUES[b & 15], FP4_VALUES[b >> 4]], -1).reshape(*b.shape[:-1], 32)
    scale = torch.pow(torch.tensor(2.0, dtype=DT), scales.to(DT) - 127.0)
    return (vals * scale.unsqueeze(-1)).reshape(*b.shape[:-2], b.shape[-2] * 32)


# ----------------------------------------------------------------------------------------------
# configuration


_DEFAULTS = {
    # family: (rms_norm_eps, rope_theta, partial_rotary_factor, tie_word_embeddings)
    "qwen3_moe": (1e-6, 10000.0, 1.0, False),
    "mixtral": (1e-5, 1e6, 1.0, False),
    "olmoe": (1e-5, 10000.0, 1.0, False),
    "glm4_moe": (1e-5, 10000.0, 0.5, False),
    "gpt_oss": (1e-5, 150000.0, 1.0, False),
    # the sibling modules deepseek_model.py and qwen_next_model.py use rope_setup with these
    "deepseek_v3": (1e-6, 10000.0, 1.0, False),
    "kimi_k2": (1e-6, 10000.0, 1.0, False),
    "qwen3_next": (1e-6, 10000.0, 0.25, False),
    "qwen3_5_moe": (1e-6, 10000.0, 0.25, False),
}
_GPT_OSS_ROPE = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                 "truncate": False, "original_max_position_embeddings": 4096}


def get_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rope_setup(raw, head_dim, family):
    """(inv_freq float64 [R/2], attention_factor, R, rope_type, max_position_embeddings) from a
    config dict (v4 rope_theta/rope_scaling or v5 rope_parameters)."""
    _, theta0, prf0, _ = _DEFAULTS[family]
    rp = raw.get("rope_parameters")
    if isinstance(rp, dict) and rp and all(isinstance(v, dict) for v in rp.values()):
        raise ValueError("per-layer-type rope_parameters are not supported")
    params = dict(rp) if isinstance(rp, dict) and rp else dict(raw.get("rope_scaling") or {})
    if family == "gpt_oss" and not params:
        params = dict(_GPT_OSS_ROPE)
    theta = float(params.get("rope_theta", raw.get("rope_theta", theta0)))
    rtype = params.get("rope_type", params.get("type", "default"))
    prf = params.get("partial_rotary_factor", raw.get("partial_rotary_factor"))
    prf = prf0 if prf is None else float(prf)
    R = int(head_dim * prf)
    if R % 2 or R <= 0 or R > head_dim:
        raise ValueError(f"rotary dim {R} (head_dim {head_dim} x {prf}) must be even and in (0, head_dim]")
    max_pos = raw.get("max_position_embeddings", 0)
    i2 = torch.arange(0, R, 2, dtype=DT)
    base_inv = 1.0 / theta ** (i2 / R)
    af = 1.0
    if rtype == "default" or rtype == "dynamic":
        inv = base_inv                      # dynamic equals default up to max_position_embeddings
    elif rtype == "linear":
        inv = base_inv / float(params["factor"])
    elif rtype == "llama3":
        factor = float(params["factor"])
        lo_f, hi_f = float(params["low_freq_factor"]), float(params["high_freq_factor"])
        old = float(params["original_max_position_embeddings"])
        wavelen = 2 * math.pi / base_inv
        inv = torch.where(wavelen > old / lo_f, base_inv / factor, base_inv)
        smooth = (old / wavelen - lo_f) / (hi_f - lo_f)
        smoothed = (1 - smooth) * inv / factor + smooth * inv
        medium = (wavelen >= old / hi_f) & (wavelen <= old / lo_f)
        inv = torch.where(medium, smoothed, inv)
    elif rtype == "yarn":
        orig = params.get("original_max_position_embeddings") or max_pos
        factor = params.get("factor")
        factor = float(max_pos) / orig if factor is None else float(factor)
        af = params.get("attention_factor")
        if af is None:
            ms, msa = params.get("mscale"), params.get("mscale_all_dim")
            af = get_mscale(factor, ms) / get_mscale(factor, msa) if ms and msa else get_mscale(factor)
        af = float(af)
        beta_fast = params.get("beta_fast") or 32
        beta_slow = params.get("beta_slow") or 1

        def corr_dim(rot):
            return R * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))

        low, high = corr_dim(beta_fast), corr_dim(beta_slow)
        if params.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, R - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(R // 2, dtype=DT) - low) / (high - low)).clamp(0, 1)
        extrap = 1 - ramp
        inv = (base_inv / factor) * (1 - extrap) + base_inv * extrap
    else:
        raise ValueError(f"rope_type {rtype!r} not supported")
    return inv, af, R, rtype, max_pos


class Config:
    """The hyper-parameters of one of the five families, read from config.json with HF's defaults."""

    def __init__(self, raw):
        self.raw = raw
        fam = raw.get("model_type")
        if fam not in FAMILIES:
            raise ValueError(f"model_type {fam!r}: this reference knows {', '.join(FAMILIES)}")
        self.family = fam
        eps0, _, _, tie0 = _DEFAULTS[fam]
        g = raw.get
        self.vocab = g("vocab_size")
        self.hidden = g("hidden_size")
        self.layers = g("num_hidden_layers")
        self.heads = g("num_attention_heads")
        self.kv_heads = g("num_key_value_heads") or self.heads
        self.head_dim = g("head_dim") or self.hidden // self.heads
        if self.heads % self.kv_heads:
            raise ValueError(f"{self.heads} heads not a multiple of {self.kv_heads} key/value heads")
        self.eps = float(g("rms_norm_eps", eps0))
        tie = g("tie_word_embeddings")
        self.tie = tie0 if tie is None else bool(tie)
        self.inv_freq, self.attn_factor, self.rot_dim, self.rope_type, self.max_pos = rope_setup(raw, self.head_dim, fam)

        bias = bool(g("attention_bias", fam == "gpt_oss"))
        self.qkv_bias = bias and fam != "mixtral"
        self.o_bias = bias and fam in ("qwen3_moe", "olmoe", "gpt_oss")
        self.qk_norm = {"qwen3_moe": "head", "olmoe": "full"}.get(fam)
        if fam == "glm4_moe" and g("use_qk_norm", False):
            self.qk_norm = "head"
        self.clip_qkv = g("clip_qkv") if fam == "olmoe" else None
        self.sinks = fam == "gpt_oss"

        # sliding windows per layer
        if fam == "gpt_oss":
            window = g("sliding_window", 128)
            types = g("layer_types") or ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(self.layers)]
            if len(types) < self.layers:
                raise ValueError("layer_types shorter than num_hidden_layers")
            for t in types[:self.layers]:
                if t not in ("sliding_attention", "full_attention"):
                    raise ValueError(f"layer type {t!r}")
            self.windows = [window if t == "sliding_attention" else None for t in types[:self.layers]]
        elif fam == "mixtral":
            self.windows = [g("sliding_window")] * self.layers
        elif fam == "qwen3_moe":
            self.windows = [g("sliding_window", 4096) if g("use_sliding_window", False) else None] * self.layers
        else:
            self.windows = [None] * self.layers

        # feed-forward per layer
        self.inter = g("intermediate_size")
        self.act = "gptoss" if fam == "gpt_oss" else "swiglu"
        self.alpha = float(g("swiglu_alpha", 1.702))
        self.limit = float(g("swiglu_limit", 7.0))
        self.n_shared = 0
        self.n_group, self.topk_group, self.routed_scale = 1, 1, 1.0
        if fam == "qwen3_moe":
            self.n_experts = g("num_experts", 128)
            self.top_k = g("num_experts_per_tok", 8)
            self.moe_inter = g("moe_intermediate_size", 768)
            self.router = "softmax"
            self.renorm = bool(g("norm_topk_prob", False))
            step = g("decoder_sparse_step", 1)
            only = set(g("mlp_only_layers") or [])
            self.moe = [L not in only and self.n_experts > 0 and (L + 1) % step == 0 for L in range(self.layers)]
        elif fam == "mixtral":
            self.n_experts = g("num_local_experts", 8)
            self.top_k = g("num_experts_per_tok", 2)
            self.moe_inter = self.inter
            self.router = "softmax"
            self.renorm = True
            self.moe = [True] * self.layers
        elif fam == "olmoe":
            self.n_experts = g("num_experts", 64)
            self.top_k = g("num_experts_per_tok", 8)
            self.moe_inter = self.inter
            self.router = "softmax"
            self.renorm = bool(g("norm_topk_prob", False))
            self.moe = [True] * self.layers
        elif fam == "glm4_moe":
            self.n_experts = g("n_routed_experts", 128)
            self.top_k = g("num_experts_per_tok", 8)
            self.moe_inter = g("moe_intermediate_size", 1408)
            self.router = "sigmoid_group"
            self.renorm = bool(g("norm_topk_prob", True))
            self.n_group, self.topk_group = g("n_group", 1), g("topk_group", 1)
            self.routed_scale = float(g("routed_scaling_factor", 1.0))
            self.n_shared = g("n_shared_experts", 1)
            first = g("first_k_dense_replace", 1)
            self.moe = [L >= first for L in range(self.layers)]
            if self.n_experts % self.n_group or self.n_experts // self.n_group < 2:
                raise ValueError(f"{self.n_experts} experts in {self.n_group} groups: each group needs >= 2")
        else:
            self.n_experts = g("num_local_experts", 128)
            self.top_k = g("num_experts_per_tok", g("experts_per_token", 4))
            self.moe_inter = self.inter
            self.router = "softmax_of_topk"
            self.renorm = False
            self.moe = [True] * self.layers
        if self.top_k > self.n_experts and any(self.moe):
            raise ValueError(f"top-k {self.top_k} > {self.n_experts} experts")


# ----------------------------------------------------------------------------------------------
# building blocks


def rmsnorm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def silu(x):
    return x * torch.sigmoid(x)


def rope_tables(inv_freq, attn_factor, T):
    """cos, sin [T, R/2] for positions 0..T-1, both times attention_factor (as HF scales its tables)."""
    f = torch.arange(T, dtype=DT)[:, None] * inv_freq[None, :]
    return torch.cos(f) * attn_factor, torch.sin(f) * attn_factor


def apply_rope(x, cos, sin):
    """x [T, heads, D]; rotates the first R = 2 cos.shape[-1] dims in halves, leaves the rest."""
    h = cos.shape[-1]
    c, s = cos[:, None, :], sin[:, None, :]
    x1, x2, rest = x[..., :h], x[..., h:2 * h], x[..., 2 * h:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, rest], -1)


def attention(q, k, v, scale, window=None, sinks=None):
    """Causal prefill attention from position 0. q [T, H, D], k and v [T, KV, D]; query head h reads
    key/value head h // (H / KV). window W keeps keys q - W < j <= q; sinks [H] add one logit per
    head to each softmax row. Returns [T, H, D]."""
    T, H, _ = q.shape
    rep = H // k.shape[1]
    kk, vv = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    s = torch.einsum("thd,shd->hts", q, kk) * scale
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    keep = j <= i
    if window is not None:
        keep &= (i - j) < window
    s = s.masked_fill(~keep, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.to(DT).view(H, 1, 1).expand(H, T, 1)], -1)
    p = torch.softmax(s, -1)
    if sinks is not None:
        p = p[..., :-1]
    return torch.einsum("hts,shd->thd", p, vv)


def topk_ids(scores, k):
    """Indices of the k largest per row, ties to the lower id."""
    return torch.sort(scores, dim=-1, descending=True, stable=True).indices[:, :k]


def route_softmax(logits, k, renorm):
    """qwen3_moe / mixtral / olmoe: softmax over all experts, top-k, optionally renormalised."""
    p = torch.softmax(logits, -1)
    ids = topk_ids(p, k)
    w = p.gather(1, ids)
    if renorm:
        w = w / w.sum(-1, keepdim=True)
    return ids, w


def route_softmax_of_topk(logits, k):
    """gpt_oss: top-k of the raw logits (router bias included), softmax over those k."""
    ids = topk_ids(logits, k)
    return ids, torch.softmax(logits.gather(1, ids), -1)


def route_sigmoid_group(logits, bias, k, n_group, topk_group, renorm, scale):
    """glm4_moe (HF route_tokens_to_experts): sigmoid scores, bias for selection only, group-limited
    top-k with dropped groups' biased scores set to 0.0, weights the unbiased scores."""
    s = torch.sigmoid(logits)
    c = s + bias
    N, E = c.shape
    grouped = c.view(N, n_group, E // n_group)
    gscore = grouped.topk(2, dim=-1).values.sum(-1)                       # [N, n_group]
    keep_g = torch.zeros_like(gscore, dtype=torch.bool).scatter_(1, topk_ids(gscore, topk_group), True)
    keep = keep_g.unsqueeze(-1).expand(N, n_group, E // n_group).reshape(N, E)
    ids = topk_ids(c.masked_fill(~keep, 0.0), k)
    w = s.gather(1, ids)
    if renorm:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    return ids, w * scale


def swiglu(x, wg, wu, wd):
    return (silu(x @ wg.t()) * (x @ wu.t())) @ wd.t()


def gptoss_glu(x, e, alpha, limit):
    """e: dict gate [I,H], up [I,H], gate_bias, up_bias [I], down [H,I], down_bias [H]."""
    g = (x @ e["gate"].t() + e["gate_bias"]).clamp(max=limit)
    u = (x @ e["up"].t() + e["up_bias"]).clamp(-limit, limit)
    return (g * torch.sigmoid(alpha * g) * (u + 1)) @ e["down"].t() + e["down_bias"]


def moe_combine(x, ids, w, expert_fn):
    """sum_j w[:, j] * expert_{ids[:, j]}(x), each expert run only on its tokens."""
    out = torch.zeros_like(x)
    for e in torch.unique(ids).tolist():
        rows, slots = torch.where(ids == e)
        out.index_add_(0, rows, expert_fn(e, x[rows]) * w[rows, slots].unsqueeze(-1))
    return out


# ----------------------------------------------------------------------------------------------
# tensor names


def layer_tensors(c, L):
    """Every tensor name layer L of a checkpoint of config c holds (the names the engine's synth
    writer must produce), in release form (gpt-oss experts as MXFP4 blocks/scales)."""
    p = f"model.layers.{L}."
    n = [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
    for proj in ("q", "k", "v", "o"):
        n.append(p + f"self_attn.{proj}_proj.weight")
        if (proj != "o" and c.qkv_bias) or (proj == "o" and c.o_bias):
            n.append(p + f"self_attn.{proj}_proj.bias")
    if c.qk_norm:
        n += [p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"]
    if c.sinks:
        n.append(p + "self_attn.sinks")
    if c.family == "gpt_oss":
        n += [p + "mlp.router.weight", p + "mlp.router.bias"]
        for t in ("gate_up_proj", "down_proj"):
            n += [p + f"mlp.experts.{t}_blocks", p + f"mlp.experts.{t}_scales", p + f"mlp.experts.{t}_bias"]
    elif c.family == "mixtral":
        n.append(p + "block_sparse_moe.gate.weight")
        for e in range(c.n_experts):
            n += [p + f"block_sparse_moe.experts.{e}.{w}.weight" for w in ("w1", "w2", "w3")]
    elif c.moe[L]:
        n.append(p + "mlp.gate.weight")
        if c.family == "glm4_moe":
            n.append(p + "mlp.gate.e_score_correction_bias")
        for e in range(c.n_experts):
            n += [p + f"mlp.experts.{e}.{w}_proj.weight" for w in ("gate", "up", "down")]
        if c.n_shared:
            n += [p + f"mlp.shared_experts.{w}_proj.weight" for w in ("gate", "up", "down")]
    else:
        n += [p + f"mlp.{w}_proj.weight" for w in ("gate", "up", "down")]
    return n


def expected_tensors(c):
    n = ["model.embed_tokens.weight", "model.norm.weight"]
    if not c.tie:
        n.append("lm_head.weight")
    for L in range(c.layers):
        n += layer_tensors(c, L)
    return n


def fp8_scales(ck, names):
    """The `<name>_scale_inv` companions of those of `names` the checkpoint stores as F8_E4M3."""
    return {n + "_scale_inv" for n in names if ck.has(n) and ck.meta(n)["dtype"] == "F8_E4M3"}


def mtp_layer(name, c):
    """Whether a tensor belongs to a layer past num_hidden_layers (glm4_moe's MTP layers)."""
    parts = name.split(".")
    return len(parts) > 2 and parts[0] == "model" and parts[1] == "layers" and int(parts[2]) >= c.layers


# ----------------------------------------------------------------------------------------------
# the model


class Model:
    """A float64 forward pass over a Checkpoint. `raw_cfg` replaces its config.json (for tests)."""

    def __init__(self, ckpt, raw_cfg=None):
        self.ck = ckpt
        self.c = Config(raw_cfg if raw_cfg is not None else ckpt.cfg)
        self.disable_sinks = False           # tests: attention without sinks
        c = self.c
        # gpt-oss experts: dense parameters (HF's in x out layout) or the MXFP4 release form
        if c.family == "gpt_oss":
            p = "model.layers.0.mlp.experts."
            self.gptoss_dense = ckpt.has(p + "gate_up_proj") and not ckpt.has(p + "gate_up_proj_blocks")

    def check_names(self):
        """(missing, unexpected) tensor names against what this config needs; MTP layers (index >=
        num_hidden_layers) are expected extras and not listed."""
        c = self.c
        want = expected_tensors(c)
        if c.family == "gpt_oss" and self.gptoss_dense:
            want = [n.replace("_proj_blocks", "_proj") for n in want if not n.endswith("_scales")]
        have = set(self.ck.names())
        missing = [n for n in want if n not in have]
        want = set(want) | fp8_scales(self.ck, want)
        extra = sorted(n for n in have - want if not mtp_layer(n, c))
        return missing, extra

    def w(self, name):
        return self.ck.weight(name)

    def opt(self, name):
        return self.ck.weight(name) if self.ck.has(name) else None

    def linear(self, x, name, bias):
        y = x @ self.w(name + ".weight").t()
        return y + self.w(name + ".bias") if bias else y

    # -- attention -------------------------------------------------------------------------------

    def attn(self, L, h, cos, sin):
        c = self.c
        p = f"model.layers.{L}.self_attn."
        T = h.shape[0]
        q = self.linear(h, p + "q_proj", c.qkv_bias)
        k = self.linear(h, p + "k_proj", c.qkv_bias)
        v = self.linear(h, p + "v_proj", c.qkv_bias)
        if c.qk_norm == "full":                                   # olmoe: the whole projection
            q = rmsnorm(q, self.w(p + "q_norm.weight"), c.eps)
            k = rmsnorm(k, self.w(p + "k_norm.weight"), c.eps)
        if c.clip_qkv is not None:
            q, k, v = (t.clamp(-c.clip_qkv, c.clip_qkv) for t in (q, k, v))
        q = q.view(T, c.heads, c.head_dim)
        k = k.view(T, c.kv_heads, c.head_dim)
        v = v.view(T, c.kv_heads, c.head_dim)
        if c.qk_norm == "head":                                   # qwen3_moe, glm4_moe use_qk_norm
            q = rmsnorm(q, self.w(p + "q_norm.weight"), c.eps)
            k = rmsnorm(k, self.w(p + "k_norm.weight"), c.eps)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        sinks = self.w(p + "sinks") if c.sinks and not self.disable_sinks else None
        o = attention(q, k, v, c.head_dim ** -0.5, c.windows[L], sinks)
        return self.linear(o.reshape(T, c.heads * c.head_dim), p + "o_proj", c.o_bias)

    # -- feed-forward ----------------------------------------------------------------------------

    def dense(self, p, x):
        return swiglu(x, self.w(p + "gate_proj.weight"), self.w(p + "up_proj.weight"), self.w(p + "down_proj.weight"))

    def expert_fn(self, L):
        c = self.c
        p = f"model.layers.{L}."
        if c.family == "mixtral":
            q = p + "block_sparse_moe.experts."
            return lambda e, x: swiglu(x, self.w(f"{q}{e}.w1.weight"), self.w(f"{q}{e}.w3.weight"), self.w(f"{q}{e}.w2.weight"))
        if c.family == "gpt_oss":
            return lambda e, x: gptoss_glu(x, self.gptoss_expert(L, e), c.alpha, c.limit)
        return lambda e, x: self.dense(f"{p}mlp.experts.{e}.", x)

    def gptoss_expert(self, L, e):
        """One gpt-oss expert as [out, in] matrices: gate/up de-interleaved from gate_up."""
        p = f"model.layers.{L}.mlp.experts."
        ck = self.ck
        if self.gptoss_dense:
            gu = ck.slab(p + "gate_up_proj", e).t()               # [H, 2I] (x @ W) -> [2I, H]
            down = ck.slab(p + "down_proj", e).t()                # [I, H] -> [H, I]
        else:
            gu = mxfp4_decode(ck.slab(p + "gate_up_proj_blocks", e), ck.slab(p + "gate_up_proj_scales", e))
            down = mxfp4_decode(ck.slab(p + "down_proj_blocks", e), ck.slab(p + "down_proj_scales", e))
        gub = ck.slab(p + "gate_up_proj_bias", e)
        I2, H = gu.shape
        if (I2, H) != (2 * self.c.moe_inter, self.c.hidden) or tuple(down.shape) != (self.c.hidden, self.c.moe_inter):
            raise ValueError(f"layer {L} expert {e}: gate_up {tuple(gu.shape)}, down {tuple(down.shape)}")
        return {"gate": gu[0::2], "up": gu[1::2], "gate_bias": gub[0::2], "up_bias": gub[1::2],
                "down": down, "down_bias": ck.slab(p + "down_proj_bias", e)}

    def route(self, L, x):
        c = self.c
        p = f"model.layers.{L}."
        if c.family == "mixtral":
            return route_softmax(x @ self.w(p + "block_sparse_moe.gate.weight").t(), c.top_k, True)
        if c.family == "gpt_oss":
            logits = x @ self.w(p + "mlp.router.weight").t() + self.w(p + "mlp.router.bias")
            return route_softmax_of_topk(logits, c.top_k)
        logits = x @ self.w(p + "mlp.gate.weight").t()
        if c.router == "sigmoid_group":
            bias = self.opt(p + "mlp.gate.e_score_correction_bias")
            bias = torch.zeros(c.n_experts, dtype=DT) if bias is None else bias
            return route_sigmoid_group(logits, bias, c.top_k, c.n_group, c.topk_group, c.renorm, c.routed_scale)
        return route_softmax(logits, c.top_k, c.renorm)

    def ffn(self, L, x, routing=None):
        c = self.c
        p = f"model.layers.{L}."
        if not c.moe[L]:
            return self.dense(p + "mlp.", x)
        ids, w = self.route(L, x)
        if routing is not None:
            routing.append({"layer": L, "experts": ids.tolist(), "weights": w.tolist()})
        out = moe_combine(x, ids, w, self.expert_fn(L))
        if c.n_shared:
            out = out + self.dense(p + "mlp.shared_experts.", x)
        return out

    # -- the whole pass --------------------------------------------------------------------------

    def forward(self, ids, trace=None, routing=None):
        """ids: list of token ids -> logits float64 [T, vocab] of every position. `trace` (a list)
        receives x after every layer [T, hidden]; `routing` (a list) each MoE layer's choices."""
        c = self.c
        T = len(ids)
        if T == 0:
            raise ValueError("no token ids")
        if any(i < 0 or i >= c.vocab for i in ids):
            raise ValueError(f"token id out of range [0, {c.vocab})")
        if c.rope_type == "dynamic" and T > c.max_pos:
            raise ValueError("dynamic RoPE beyond max_position_embeddings is not supported")
        cos, sin = rope_tables(c.inv_freq, c.attn_factor, T)
        x = self.ck.rows("model.embed_tokens.weight", ids)
        for L in range(c.layers):
            p = f"model.layers.{L}."
            x = x + self.attn(L, rmsnorm(x, self.w(p + "input_layernorm.weight"), c.eps), cos, sin)
            x = x + self.ffn(L, rmsnorm(x, self.w(p + "post_attention_layernorm.weight"), c.eps), routing)
            if trace is not None:
                trace.append(x.clone())
        x = rmsnorm(x, self.w("model.norm.weight"), c.eps)
        head = "model.embed_tokens.weight" if c.tie else "lm_head.weight"
        outs, step = [], 8192
        for a in range(0, c.vocab, step):                          # the head a slice of rows at a time
            outs.append(x @ self.ck.row_range(head, a, min(c.vocab, a + step)).t())
        return torch.cat(outs, 1)
