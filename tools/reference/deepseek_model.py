#!/usr/bin/python3
"""Float64 reference forward pass for DeepSeek-V3 and Kimi K2 (dev only; CI never runs Python).

HuggingFace `model_type`s `deepseek_v3` (DeepSeek-V3, V3.1, R1) and `kimi_k2` (Kimi K2, K2-Instruct-0905,
K2-Thinking's bf16/fp8 form: Moonshot's config.json says "kimi_k2" and points its auto_map at a copy of
DeepSeek's modeling_deepseek.py; the architecture is DeepSeek-V3's). A sibling of
moe_families_model.py, whose Checkpoint (safetensors reader, FP8 block dequantization), rope_setup,
RMSNorm, SwiGLU and group-limited sigmoid router it reuses; moe_ref.py is the command line and
test_moe_refs2.py the self-checks.

Written from the published architecture, read for facts (no code translated):
  huggingface/transformers src/transformers/models/deepseek_v3/{modular,modeling,configuration}_deepseek_v3.py
  (DeepseekV3Attention, apply_rotary_pos_emb_interleave, yarn_get_mscale, DeepseekV3TopkRouter /
  DeepseekV3MoE.route_tokens_to_experts, DeepseekV3DecoderLayer, DeepseekV3Config),
  src/transformers/modeling_rope_utils.py (_compute_yarn_parameters); second readings: DeepSeek's own
  inference/model.py in deepseek-ai/DeepSeek-V3 (MLA naive and absorb paths, Gate,
  precompute_freqs_cis, apply_rotary_emb), its remote-code modeling_deepseek.py (MoEGate,
  DeepseekV3DecoderLayer with moe_layer_freq), vLLM/SGLang deepseek_v2.py (is_neox_style=False,
  yarn_get_mscale(factor, mscale_all_dim)^2).

Computed in float64 throughout (HF uses float32 for norms, router and softmax).

The decoder
-----------
  * Pre-norm: x += MLA(RMSNorm(x)); x += FFN(RMSNorm(x)); final RMSNorm `model.norm`; logits by
    `lm_head` (tie_word_embeddings default false). RMSNorm eps = rms_norm_eps (default 1e-6) for the
    layer norms; the two latent norms q_a_layernorm and kv_a_layernorm are built WITHOUT an eps
    argument in HF (DeepseekV3RMSNorm(q_lora_rank), default 1e-6) and in DeepSeek's remote code, so
    they use 1e-6 whatever rms_norm_eps says (vLLM/SGLang pass rms_norm_eps; the same for every
    release, which all say 1e-6).
  * MLA (DeepseekV3Attention), heads H, dn = qk_nope_head_dim, dr = qk_rope_head_dim,
    dv = v_head_dim, r = kv_lora_rank:
      q = q_b_proj(RMSNorm(q_a_proj(h), q_a_layernorm)) when q_lora_rank is set (HF default 1536),
          q_proj(h) when q_lora_rank is null; per head [q_nope (dn) | q_pe (dr)].
      c = kv_a_proj_with_mqa(h) = [latent (r) | k_pe (dr)]; latent = RMSNorm(latent, kv_a_layernorm);
      kv_b_proj(latent) per head = [k_nope (dn) | v (dv)]; k_pe is one key shared by every head.
      q_pe and k_pe are rotated by RoPE over dr dims; scores = (q_nope.k_nope + q_pe.k_pe) * scale;
      causal softmax; o = sum p v; o_proj.
      Biases on q_a_proj, kv_a_proj_with_mqa and o_proj iff attention_bias (default false; never on
      q_b_proj, q_proj, kv_b_proj). num_key_value_heads must equal num_attention_heads (HF feeds the
      per-head keys through repeat_kv; every release sets them equal).
    ABSORBED form (DeepSeek's attn_impl "absorb", the engine's decode): with kv_b_proj viewed as
    [H, dn + dv, r] = [W_k (dn x r) ; W_v (dv x r)] per head, q_lat = q_nope W_k (r per head);
    scores = (q_lat . latent_s + q_pe . k_pe_s) * scale against the cache of latents and k_pe;
    o = W_v (sum_s p_s latent_s). Equal to the naive form up to rounding (self-checked).
  * RoPE on q_pe / k_pe: `rope_interleave` (HF DeepseekV3Config default true; absent from the
    DeepSeek and Kimi release configs, so true) rotates ADJACENT pairs (2i, 2i+1) by pos * inv_freq[i]:
    HF permutes each vector to [even dims | odd dims] (view(d/2, 2).transpose) and applies
    rotate_half, leaving q and k in the permuted order; DeepSeek's own code multiplies the pairs
    as complex numbers in place. Both give the same dot products; this module keeps DeepSeek's
    in-place order. rope_interleave false: the rotate_half halves layout (i, i + dr/2).
    Tables: HF's DeepseekV3Config sets head_dim = qk_rope_head_dim, so R = dr; inv_freq and the
    cos/sin factor from rope_setup (YaRN: beta_fast/beta_slow from the config, default 32/1;
    floor/ceil of the correction range; attention_factor = yarn_get_mscale(factor, mscale) /
    yarn_get_mscale(factor, mscale_all_dim), 1 in every release since mscale = mscale_all_dim = 1).
    Kimi K2's configs say beta_fast 1, beta_slow 1 (DeepSeek-V3's 32/1): the config is followed.
  * Softmax scale = (dn + dr)^-0.5, times mscale^2 with mscale = 0.1 * mscale_all_dim * ln(factor) + 1
    when the rope type is not "default", `mscale_all_dim` is set (non-zero) and factor > 1
    (DeepSeek-V3: factor 40, mscale_all_dim 1 -> x 1.8686).
    DeepSeek's own inference applies YaRN (and this mscale) only when its max_seq_len exceeds
    original_seq_len and scales no cos/sin; HF (followed here) always applies the config's YaRN.
  * FFN: layer L is MoE iff L >= first_k_dense_replace (default 3) and L % moe_layer_freq == 0
    (default 1; DeepSeek's remote code tests moe_layer_freq, HF ignores it: the same for every
    release, where it is 1); other layers are a dense SwiGLU of intermediate_size.
    Router (DeepseekV3TopkRouter / route_tokens_to_experts): s = sigmoid(x W_gate^T) (mlp.gate.weight);
    c = s + e_score_correction_bias (selection only; HF buffer of zeros when absent);
    group-limited: n_group groups of n_routed_experts / n_group consecutive experts, group score =
    sum of its top-2 c, keep the topk_group best groups, the other groups' c set to 0.0
    (masked_fill 0.0), then top-k (num_experts_per_tok) of c; weights = the chosen s, divided by
    (sum + 1e-20) iff norm_topk_prob (default true), times routed_scaling_factor (default 2.5).
    DISAGREEMENTS (this module follows HF): DeepSeek's inference/model.py masks dropped groups with
    -inf (a dropped expert can win under 0.0 only when fewer than top_k kept experts have c > 0) and
    always renormalises sigmoid weights without the 1e-20; the remote-code MoEGate renormalises only
    when top_k > 1. scoring_func other than "sigmoid" or topk_method other than "noaux_tc" (DeepSeek-V2
    style configs) are refused. Ties go to the lower expert id.
    Experts `mlp.experts.N.{gate,up,down}_proj` (moe_intermediate_size) plus one shared SwiGLU
    `mlp.shared_experts.*` of moe_intermediate_size * n_shared_experts (default 1; 0/null: none),
    added to every MoE layer's output.
  * MTP: num_nextn_predict_layers extra layers at model.layers.{num_hidden_layers + k} (DeepSeek-V3:
    layer 61 with eh_proj, enorm, hnorm, shared_head) are never read.
  * FP8 releases (quantization_config {quant_method fp8, fmt e4m3, weight_block_size [128, 128]}):
    linear weights stored F8_E4M3 with `<name>_scale_inv` F32 [ceil(rows/128), ceil(cols/128)],
    W = fp8 * scale_inv of its block (moe_families_model.Checkpoint.weight); the router, norms,
    embeddings, lm_head and the correction bias stay BF16/F32. Any tensor may be either.
    Kimi K2-Thinking's routed experts are compressed-tensors pack-quantized INT4 (symmetric, groups
    of 32 along a row, bf16 scales; moe_families_model.Checkpoint reads them); other quant_methods
    are refused.
  * DeepSeek-V3.2 (model_type deepseek_v32, `index_*` config keys: the lightning indexer's sparse
    attention) is refused by name.
"""
import torch

import moe_families_model as base
from moe_families_model import DT, Checkpoint, fp8_scales, get_mscale, mtp_layer, rmsnorm, rope_setup, swiglu  # noqa: F401

FAMILIES = ("deepseek_v3", "kimi_k2")
LATENT_NORM_EPS = 1e-6


def rope_params(raw):
    """The RoPE parameter dict as rope_setup reads it (v5 rope_parameters, else v4 rope_scaling)."""
    rp = raw.get("rope_parameters")
    return dict(rp) if isinstance(rp, dict) and rp else dict(raw.get("rope_scaling") or {})


class Config:
    """DeepSeek-V3 / Kimi K2 hyper-parameters from config.json, with DeepseekV3Config's defaults."""

    def __init__(self, raw):
        fam = raw.get("model_type")
        if fam == "deepseek_v32" or any(str(k).startswith("index_") for k in raw):
            raise ValueError("DeepSeek-V3.2 sparse attention (model_type deepseek_v32 / index_* keys: "
                             "the lightning indexer) is not supported")
        if fam not in FAMILIES:
            raise ValueError(f"model_type {fam!r}: this module knows {', '.join(FAMILIES)}")
        self.raw, self.family = raw, fam
        g = raw.get
        self.vocab = g("vocab_size", 129280)
        self.hidden = g("hidden_size", 7168)
        self.layers = g("num_hidden_layers", 61)
        self.heads = g("num_attention_heads", 128)
        kvh = g("num_key_value_heads") or self.heads
        if kvh != self.heads:
            raise ValueError(f"MLA needs num_key_value_heads == num_attention_heads ({kvh} vs {self.heads})")
        self.q_lora = g("q_lora_rank", 1536)                    # null: plain q_proj
        self.kv_lora = g("kv_lora_rank", 512)
        self.dn = g("qk_nope_head_dim", 128)
        self.dr = g("qk_rope_head_dim", 64)
        self.dv = g("v_head_dim", 128)
        self.bias = bool(g("attention_bias", False))
        self.interleave = bool(g("rope_interleave", True))
        self.eps = float(g("rms_norm_eps", 1e-6))
        self.tie = bool(g("tie_word_embeddings", False))
        if g("hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act {g('hidden_act')!r}: only silu")
        for key, want in (("scoring_func", "sigmoid"), ("topk_method", "noaux_tc")):
            if g(key) not in (None, want):
                raise ValueError(f"{key} {g(key)!r}: only {want!r} (DeepSeek-V3's router)")
        qc = g("quantization_config")
        if qc and qc.get("quant_method") == "compressed-tensors":
            if qc.get("format") != "pack-quantized":
                raise ValueError(f"compressed-tensors format {qc.get('format')!r}: only pack-quantized INT4")
        elif qc and qc.get("quant_method") not in (None, "fp8"):
            raise ValueError(f"quantization_config.quant_method {qc.get('quant_method')!r}: only fp8 blocks and INT4 pack-quantized")

        self.inv_freq, self.attn_factor, self.rot_dim, self.rope_type, self.max_pos = rope_setup(raw, self.dr, fam)
        if self.rot_dim != self.dr:
            raise ValueError("partial rotary is not part of MLA")
        self.scale = (self.dn + self.dr) ** -0.5
        rp = rope_params(raw)
        msa = rp.get("mscale_all_dim", 0)
        if self.rope_type != "default" and msa and rp.get("factor") is not None:
            m = get_mscale(float(rp["factor"]), float(msa))
            self.scale *= m * m

        self.inter = g("intermediate_size", 18432)
        self.moe_inter = g("moe_intermediate_size", 2048)
        self.n_experts = g("n_routed_experts", 256)
        self.top_k = g("num_experts_per_tok", 8)
        self.n_group, self.topk_group = g("n_group", 8), g("topk_group", 4)
        self.renorm = bool(g("norm_topk_prob", True))
        self.routed_scale = float(g("routed_scaling_factor", 2.5))
        self.n_shared = g("n_shared_experts", 1) or 0
        first, freq = g("first_k_dense_replace", 3), g("moe_layer_freq", 1) or 1
        self.moe = [bool(self.n_experts) and L >= first and L % freq == 0 for L in range(self.layers)]
        if any(self.moe):
            if self.n_experts % self.n_group or self.n_experts // self.n_group < 2:
                raise ValueError(f"{self.n_experts} experts in {self.n_group} groups: each group needs >= 2")
            if not 1 <= self.topk_group <= self.n_group or self.top_k > self.topk_group * (self.n_experts // self.n_group):
                raise ValueError(f"top-k {self.top_k} from {self.topk_group} of {self.n_group} groups of "
                                 f"{self.n_experts // self.n_group} experts")


# ----------------------------------------------------------------------------------------------
# tensor names


def layer_tensors(c, L):
    """The tensors layer L needs, in their (BF16) release names; an FP8 release adds
    `<name>_scale_inv` beside those of fp8_eligible() it stores as F8_E4M3."""
    p = f"model.layers.{L}."
    a = p + "self_attn."
    n = [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
    if c.q_lora is None:
        n.append(a + "q_proj.weight")
    else:
        n += [a + "q_a_proj.weight"] + ([a + "q_a_proj.bias"] if c.bias else [])
        n += [a + "q_a_layernorm.weight", a + "q_b_proj.weight"]
    n += [a + "kv_a_proj_with_mqa.weight"] + ([a + "kv_a_proj_with_mqa.bias"] if c.bias else [])
    n += [a + "kv_a_layernorm.weight", a + "kv_b_proj.weight", a + "o_proj.weight"]
    n += [a + "o_proj.bias"] if c.bias else []
    m = p + "mlp."
    if c.moe[L]:
        n += [m + "gate.weight", m + "gate.e_score_correction_bias"]
        for e in range(c.n_experts):
            n += [m + f"experts.{e}.{w}_proj.weight" for w in ("gate", "up", "down")]
        if c.n_shared:
            n += [m + f"shared_experts.{w}_proj.weight" for w in ("gate", "up", "down")]
    else:
        n += [m + f"{w}_proj.weight" for w in ("gate", "up", "down")]
    return n


def expected_tensors(c):
    n = ["model.embed_tokens.weight", "model.norm.weight"] + ([] if c.tie else ["lm_head.weight"])
    for L in range(c.layers):
        n += layer_tensors(c, L)
    return n


def fp8_eligible(name):
    """Whether DeepSeek's FP8 release form stores this tensor as F8_E4M3 + scale_inv: the linear
    weights inside the layers (attention projections, dense MLP, experts, shared experts), not the
    router (mlp.gate.weight), norms, biases, embeddings or lm_head."""
    if not name.startswith("model.layers.") or not (name.endswith("_proj.weight") or name.endswith("_mqa.weight")):
        return False
    return ".mlp.gate." not in name


# ----------------------------------------------------------------------------------------------
# building blocks


def rope_interleaved(x, cos, sin):
    """x [T, n, R]: rotate adjacent pairs (2i, 2i+1) by the angle of frequency i, in place order."""
    c, s = cos[:, None, :], sin[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * c - b * s, b * c + a * s], -1).reshape(x.shape)


def causal_mask(scores, q_pos):
    """scores [H, Tq, S] over keys at positions 0..S-1; query t (at q_pos[t]) keeps keys j <= q_pos[t]."""
    S = scores.shape[-1]
    keep = torch.arange(S)[None, :] <= torch.as_tensor(q_pos)[:, None]
    return scores.masked_fill(~keep, float("-inf"))


def mla_naive(q_nope, q_pe, lat, k_pe, wkv_b, dn, dv, scale, q_pos):
    """Per-head keys and values from the latents: q_nope [T, H, dn], q_pe [T, H, dr], lat [S, r],
    k_pe [S, dr] (rotated), wkv_b [H * (dn + dv), r] -> o [T, H, dv]."""
    H, S = q_nope.shape[1], lat.shape[0]
    kv = (lat @ wkv_b.t()).view(S, H, dn + dv)
    k_nope, v = kv[..., :dn], kv[..., dn:]
    s = (torch.einsum("thd,shd->hts", q_nope, k_nope) + torch.einsum("thr,sr->hts", q_pe, k_pe)) * scale
    p = torch.softmax(causal_mask(s, q_pos), -1)
    return torch.einsum("hts,shd->thd", p, v)


def mla_absorbed(q_nope, q_pe, lat, k_pe, wkv_b, dn, dv, scale, q_pos):
    """The same attention against the latent cache: kv_b's key half absorbed into the query, its
    value half applied after the weighted sum of latents."""
    H, r = q_nope.shape[1], lat.shape[1]
    w = wkv_b.view(H, dn + dv, r)
    q_lat = torch.einsum("thd,hdc->thc", q_nope, w[:, :dn])
    s = (torch.einsum("thc,sc->hts", q_lat, lat) + torch.einsum("thr,sr->hts", q_pe, k_pe)) * scale
    p = torch.softmax(causal_mask(s, q_pos), -1)
    return torch.einsum("thc,hdc->thd", torch.einsum("hts,sc->thc", p, lat), w[:, dn:])


# ----------------------------------------------------------------------------------------------
# the model


class Model:
    """A float64 forward pass over a Checkpoint. `raw_cfg` replaces its config.json (for tests).
    `mla` chooses "naive" (default) or "absorbed" attention for forward(); decode() runs token by
    token against the latent cache."""

    def __init__(self, ckpt, raw_cfg=None):
        self.ck = ckpt
        self.c = Config(raw_cfg if raw_cfg is not None else ckpt.cfg)
        self.mla = "naive"

    def check_names(self):
        """(missing, unexpected): FP8 scale companions and MTP layers are expected extras."""
        want = expected_tensors(self.c)
        have = set(self.ck.names())
        missing = [n for n in want if n not in have]
        allowed = set(want) | fp8_scales(self.ck, want)
        return missing, sorted(n for n in have - allowed if not mtp_layer(n, self.c))

    def w(self, name):
        return self.ck.weight(name)

    def linear(self, x, name, bias=False):
        y = x @ self.w(name + ".weight").t()
        return y + self.w(name + ".bias") if bias else y

    # -- attention -------------------------------------------------------------------------------

    def rope(self, x, cos, sin):
        return rope_interleaved(x, cos, sin) if self.c.interleave else base.apply_rope(x, cos, sin)

    def attn(self, L, h, cos, sin, q_pos, cache):
        """h [T, hidden] at positions q_pos; cache {"lat": [S, r], "pe": [S, dr]} of the earlier
        positions (extended here). Returns [T, hidden]."""
        c = self.c
        a = f"model.layers.{L}.self_attn."
        T = h.shape[0]
        if c.q_lora is None:
            q = self.linear(h, a + "q_proj")
        else:
            q = self.linear(rmsnorm(self.linear(h, a + "q_a_proj", c.bias), self.w(a + "q_a_layernorm.weight"), LATENT_NORM_EPS),
                            a + "q_b_proj")
        q = q.view(T, c.heads, c.dn + c.dr)
        q_nope, q_pe = q[..., :c.dn], self.rope(q[..., c.dn:], cos, sin)
        ckv = self.linear(h, a + "kv_a_proj_with_mqa", c.bias)
        lat = rmsnorm(ckv[:, :c.kv_lora], self.w(a + "kv_a_layernorm.weight"), LATENT_NORM_EPS)
        k_pe = self.rope(ckv[:, None, c.kv_lora:], cos, sin)[:, 0]
        cache["lat"] = lat if "lat" not in cache else torch.cat([cache["lat"], lat])
        cache["pe"] = k_pe if "pe" not in cache else torch.cat([cache["pe"], k_pe])
        fn = mla_absorbed if self.mla == "absorbed" else mla_naive
        o = fn(q_nope, q_pe, cache["lat"], cache["pe"], self.w(a + "kv_b_proj.weight"), c.dn, c.dv, c.scale, q_pos)
        return self.linear(o.reshape(T, c.heads * c.dv), a + "o_proj", c.bias)

    # -- feed-forward ----------------------------------------------------------------------------

    def dense(self, p, x):
        return swiglu(x, self.w(p + "gate_proj.weight"), self.w(p + "up_proj.weight"), self.w(p + "down_proj.weight"))

    def route(self, L, x):
        c = self.c
        p = f"model.layers.{L}.mlp.gate."
        logits = x @ self.w(p + "weight").t()
        b = p + "e_score_correction_bias"
        bias = self.w(b) if self.ck.has(b) else torch.zeros(c.n_experts, dtype=DT)
        return base.route_sigmoid_group(logits, bias, c.top_k, c.n_group, c.topk_group, c.renorm, c.routed_scale)

    def ffn(self, L, x, routing=None):
        c = self.c
        p = f"model.layers.{L}.mlp."
        if not c.moe[L]:
            return self.dense(p, x)
        ids, w = self.route(L, x)
        if routing is not None:
            routing.append({"layer": L, "experts": ids.tolist(), "weights": w.tolist()})
        out = base.moe_combine(x, ids, w, lambda e, xe: self.dense(f"{p}experts.{e}.", xe))
        if c.n_shared:
            out = out + self.dense(p + "shared_experts.", x)
        return out

    # -- the whole pass --------------------------------------------------------------------------

    def _check_ids(self, ids):
        if len(ids) == 0:
            raise ValueError("no token ids")
        if any(i < 0 or i >= self.c.vocab for i in ids):
            raise ValueError(f"token id out of range [0, {self.c.vocab})")

    def _step(self, ids, pos0, caches, trace=None, routing=None):
        """Run tokens `ids` at positions pos0.. through every layer, extending `caches`; final-normed x."""
        c = self.c
        T = len(ids)
        cos, sin = base.rope_tables(c.inv_freq, c.attn_factor, pos0 + T)
        cos, sin = cos[pos0:], sin[pos0:]
        q_pos = torch.arange(pos0, pos0 + T)
        x = self.ck.rows("model.embed_tokens.weight", ids)
        for L in range(c.layers):
            p = f"model.layers.{L}."
            x = x + self.attn(L, rmsnorm(x, self.w(p + "input_layernorm.weight"), c.eps), cos, sin, q_pos, caches[L])
            x = x + self.ffn(L, rmsnorm(x, self.w(p + "post_attention_layernorm.weight"), c.eps), routing)
            if trace is not None:
                trace.append(x.clone())
        return rmsnorm(x, self.w("model.norm.weight"), c.eps)

    def logits(self, x):
        c = self.c
        head = "model.embed_tokens.weight" if c.tie else "lm_head.weight"
        return torch.cat([x @ self.ck.row_range(head, a, min(c.vocab, a + 8192)).t() for a in range(0, c.vocab, 8192)], 1)

    def forward(self, ids, trace=None, routing=None):
        """ids -> logits float64 [T, vocab] of every position (one causal prefill from position 0).
        `trace` receives x after every layer [T, hidden]; `routing` each MoE layer's choices."""
        self._check_ids(ids)
        return self.logits(self._step(list(ids), 0, [{} for _ in range(self.c.layers)], trace, routing))

    def decode(self, ids, mla="absorbed"):
        """The same logits computed one token at a time against the per-layer caches of latents and
        rotated k_pe (the engine's decode), with the absorbed attention unless mla says "naive"."""
        self._check_ids(ids)
        caches = [{} for _ in range(self.c.layers)]
        saved, self.mla = self.mla, mla
        try:
            return torch.cat([self.logits(self._step([t], i, caches)) for i, t in enumerate(ids)])
        finally:
            self.mla = saved


__all__ = ["Checkpoint", "Config", "Model", "expected_tensors", "fp8_eligible", "FAMILIES"]
