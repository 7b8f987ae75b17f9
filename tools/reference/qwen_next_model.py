#!/usr/bin/python3
"""Float64 reference forward pass for Qwen3-Next and Qwen3.5 MoE (dev only; CI never runs Python).

HuggingFace `model_type`s `qwen3_next` (Qwen3-Next-80B-A3B) and `qwen3_5_moe` (Qwen3.5 MoE releases:
the config nests the language model's keys in `text_config`, tensors under `model.language_model.`,
beside a vision tower `model.visual.*` that is never read; `qwen3_5_moe_text`, the text-only
ForCausalLM form with tensors under `model.`, is read too). A sibling of moe_families_model.py, whose
Checkpoint (safetensors, FP8 blocks), rope_setup, RoPE, routers and SwiGLU it reuses; moe_ref.py is
the command line and test_moe_refs2.py the self-checks.

Written from the published architecture, read for facts (no code translated):
  huggingface/transformers src/transformers/models/qwen3_next/{modular,modeling,configuration}_qwen3_next.py
  (Qwen3NextRMSNorm, Qwen3NextRMSNormGated, Qwen3NextAttention, Qwen3NextGatedDeltaNet with
  fix_query_key_value_ordering, torch_causal_conv1d_fn/_update, l2norm,
  torch_recurrent_gated_delta_rule, torch_chunk_gated_delta_rule, Qwen3NextTopKRouter,
  Qwen3NextSparseMoeBlock, Qwen3NextExperts, Qwen3NextDecoderLayer, Qwen3NextConfig),
  src/transformers/models/qwen3_5/modular_qwen3_5.py (Qwen3_5GatedDeltaNet, Qwen3_5TextModel,
  Qwen3_5Model: visual + language_model), src/transformers/models/qwen3_5_moe/{modular,modeling}_qwen3_5_moe.py
  (Qwen3_5MoeTextConfig, Qwen3_5MoeTopKRouter, Qwen3_5MoeExperts, Qwen3_5MoeDecoderLayer,
  Qwen3_5MoeTextRotaryEmbedding, Qwen3_5MoeForCausalLM/_keys_to_ignore_on_load_unexpected);
  second readings of the qkvz grouping in vLLM/TensorRT-LLM/mlx ports of qwen3_next.

Computed in float64 throughout (HF uses float32 for norms, router, softmax and the recurrence).

The decoder
-----------
  * Pre-norm, x += mixer(norm(x)); x += ffn(norm(x)); final norm; lm_head (tie_word_embeddings
    default false). The mixer of layer i is `layer_types[i]` ("linear_attention" = Gated DeltaNet,
    "full_attention"; legacy names "mamba"/"attention" remapped); without layer_types, layer i is
    full attention iff (i + 1) % full_attention_interval == 0 (default 4: 3 of every 4 are linear).
  * Zero-centred RMSNorm (Qwen3NextRMSNorm = Gemma's, weights initialised to 0): x^ * (1 + w),
    eps rms_norm_eps (default 1e-6). It is every norm EXCEPT the DeltaNet output norm:
    input_layernorm, post_attention_layernorm, model.norm, self_attn.q_norm, self_attn.k_norm.
  * Full attention (Qwen3NextAttention): q_proj has 2 * heads * head_dim outputs, viewed
    [heads, 2 * head_dim]: per head the first head_dim are the query, the next head_dim the output
    gate (interleaved per head, not [all q | all gate]); q_norm / k_norm per head (zero-centred);
    RoPE, rotate_half layout, on the first int(head_dim * partial_rotary_factor) dims (default 0.25:
    64 of 256), the rest passed through; GQA; scale head_dim^-0.5 (head_dim default 256); causal
    softmax; o (concatenated heads) * sigmoid(gate); o_proj. Biases on q/k/v/o iff attention_bias.
  * Gated DeltaNet (Qwen3NextGatedDeltaNet), nk key heads of dk, nv value heads of dv (nv a
    multiple of nk, r = nv / nk):
      qwen3_next: in_proj_qkvz(h) viewed [nk, 2 dk + 2 r dv]: per key-head group g, in order,
        q_g (dk), k_g (dk), v of value heads g r .. g r + r - 1 (r dv), z of the same heads (r dv);
        in_proj_ba(h) viewed [nk, 2 r]: b of those r value heads, then a of them.
      qwen3_5_moe: separate in_proj_qkv (q of all heads | k | v, head-major), in_proj_z,
        in_proj_b, in_proj_a (no interleaving).
      mixed = [q (nk dk) | k (nk dk) | v (nv dv)] goes through a causal depthwise conv1d
        (`conv1d.weight` [channels, 1, K], K = linear_conv_kernel_dim, no bias): out_t =
        sum_j w[j] x_{t - K + 1 + j} with zeros before the start (the last tap is the current
        token), then SiLU. HF's cache keeps the last K inputs; K - 1 are needed.
      q, k L2-normalised per head (x / sqrt(sum x^2 + 1e-6)), q scaled by dk^-0.5; q and k repeated
        to the value heads (value head h reads key head h // r: repeat_interleave).
      g = -exp(A_log) * softplus(a + dt_bias) (per value head; softplus threshold 20), beta =
        sigmoid(b). The gated delta rule per value head, state S [dk, dv] from zeros:
        S <- exp(g_t) S;  S <- S + k_t (beta_t (v_t - S^T k_t))^T;  o_t = S^T q_t
        (torch_recurrent_gated_delta_rule; the chunked kernel computes the same).
      o per value head through Qwen3NextRMSNormGated: rmsnorm(o, eps) * w * silu(z) with `norm.weight`
        [dv] NOT zero-centred (initialised to ones); then out_proj.
  * MoE (Qwen3NextSparseMoeBlock): softmax over all `num_experts` router logits (mlp.gate.weight),
    top-k (num_experts_per_tok), divided by their sum iff norm_topk_prob (qwen3_next, default true;
    qwen3_5_moe: always, the router has no flag); experts SwiGLU of moe_intermediate_size; plus
    shared_expert (SwiGLU of shared_expert_intermediate_size) times sigmoid(x W_seg^T) with
    `shared_expert_gate.weight` [1, hidden]. qwen3_next: layer L is MoE iff L not in mlp_only_layers
    and num_experts > 0 and (L + 1) % decoder_sparse_step == 0, else a dense SwiGLU of
    intermediate_size; qwen3_5_moe: every layer is MoE. Ties go to the lower expert id.
    Experts per expert `mlp.experts.N.{gate,up,down}_proj.weight` (the Qwen3-Next release, and
    Qwen's FP8 releases) or stacked `mlp.experts.gate_up_proj` [E, 2 I, hidden] (gate = rows
    [0, I), up = rows [I, 2 I)) and `mlp.experts.down_proj` [E, hidden, I] (the Qwen3.5 MoE bf16
    release; HF v5's in-memory layout); either is read.
  * Qwen3.5's RoPE is "interleaved mrope" (mrope_section [11, 11, 10]): each frequency takes the
    t, h or w position id; for text every token's three ids are its position, so it is the plain
    RoPE above (partial factor 0.25 from rope_parameters). Vision is out of scope.
  * MTP tensors `mtp.*` (and `model.visual.*`) are never read.
"""
import torch
import torch.nn.functional as F

import moe_families_model as base
from moe_families_model import DT, Checkpoint, fp8_scales, rmsnorm, rope_setup, silu, swiglu  # noqa: F401

FAMILIES = ("qwen3_next", "qwen3_5_moe")
_LEGACY_TYPES = {"attention": "full_attention", "mamba": "linear_attention"}


class Config:
    """Qwen3-Next / Qwen3.5-MoE text hyper-parameters, with Qwen3NextConfig's / Qwen3_5MoeTextConfig's defaults."""

    def __init__(self, raw):
        top = raw.get("model_type")
        if top == "qwen3_5_moe":
            t, self.prefix, fam = raw.get("text_config") or {}, "model.language_model.", "qwen3_5_moe"
        elif top == "qwen3_5_moe_text":
            t, self.prefix, fam = raw, "model.", "qwen3_5_moe"
        elif top == "qwen3_next":
            t, self.prefix, fam = raw, "model.", "qwen3_next"
        else:
            raise ValueError(f"model_type {top!r}: this module knows qwen3_next, qwen3_5_moe (and qwen3_5_moe_text)")
        self.raw, self.text, self.family = raw, t, fam
        q35 = fam == "qwen3_5_moe"
        g = t.get
        self.vocab = g("vocab_size", 248320 if q35 else 151936)
        self.hidden = g("hidden_size", 2048)
        self.layers = g("num_hidden_layers", 40 if q35 else 48)
        self.heads = g("num_attention_heads", 16)
        self.kv_heads = g("num_key_value_heads", 2) or self.heads
        self.head_dim = g("head_dim", 256) or self.hidden // self.heads
        if self.heads % self.kv_heads:
            raise ValueError(f"{self.heads} heads not a multiple of {self.kv_heads} key/value heads")
        self.eps = float(g("rms_norm_eps", 1e-6))
        tie = raw.get("tie_word_embeddings", g("tie_word_embeddings"))
        self.tie = bool(tie) if tie is not None else False
        self.bias = bool(g("attention_bias", False))
        if g("hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act {g('hidden_act')!r}: only silu")
        self.inv_freq, self.attn_factor, self.rot_dim, self.rope_type, self.max_pos = rope_setup(t, self.head_dim, fam)

        types = g("layer_types")
        if types is None:
            every = g("full_attention_interval", 4)
            types = ["linear_attention" if (i + 1) % every else "full_attention" for i in range(self.layers)]
        types = [_LEGACY_TYPES.get(x, x) for x in types]
        if len(types) < self.layers or any(x not in ("linear_attention", "full_attention") for x in types[:self.layers]):
            raise ValueError(f"layer_types {types!r}")
        self.types = types[:self.layers]

        self.conv_k = g("linear_conv_kernel_dim", 4)
        self.dk, self.dv = g("linear_key_head_dim", 128), g("linear_value_head_dim", 128)
        self.nk, self.nv = g("linear_num_key_heads", 16), g("linear_num_value_heads", 32)
        if self.nv % self.nk:
            raise ValueError(f"{self.nv} value heads not a multiple of {self.nk} key heads")

        self.n_experts = g("num_experts", 256 if q35 else 512)
        self.top_k = g("num_experts_per_tok", 8 if q35 else 10)
        self.moe_inter = g("moe_intermediate_size", 512)
        self.shared_inter = g("shared_expert_intermediate_size", 512)
        if q35:
            self.renorm = True                                  # Qwen3_5MoeTopKRouter always renormalises
            self.inter = None
            self.moe = [True] * self.layers
        else:
            self.renorm = bool(g("norm_topk_prob", True))
            self.inter = g("intermediate_size", 5632)
            step, only = g("decoder_sparse_step", 1), set(g("mlp_only_layers") or [])
            self.moe = [L not in only and self.n_experts > 0 and (L + 1) % step == 0 for L in range(self.layers)]
        if any(self.moe) and self.top_k > self.n_experts:
            raise ValueError(f"top-k {self.top_k} > {self.n_experts} experts")


# ----------------------------------------------------------------------------------------------
# tensor names


def layer_tensors(c, L, stacked=None):
    """The tensors layer L needs. stacked: experts as `mlp.experts.gate_up_proj`/`down_proj`
    (default: the release form, stacked for qwen3_5_moe, per expert for qwen3_next)."""
    if stacked is None:
        stacked = c.family == "qwen3_5_moe"
    p = f"{c.prefix}layers.{L}."
    n = [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
    if c.types[L] == "linear_attention":
        a = p + "linear_attn."
        if c.family == "qwen3_next":
            n += [a + "in_proj_qkvz.weight", a + "in_proj_ba.weight"]
        else:
            n += [a + "in_proj_qkv.weight", a + "in_proj_z.weight", a + "in_proj_b.weight", a + "in_proj_a.weight"]
        n += [a + "conv1d.weight", a + "dt_bias", a + "A_log", a + "norm.weight", a + "out_proj.weight"]
    else:
        a = p + "self_attn."
        for x in "qkvo":
            n.append(a + f"{x}_proj.weight")
            if c.bias:
                n.append(a + f"{x}_proj.bias")
        n += [a + "q_norm.weight", a + "k_norm.weight"]
    m = p + "mlp."
    if c.moe[L]:
        n.append(m + "gate.weight")
        if stacked:
            n += [m + "experts.gate_up_proj", m + "experts.down_proj"]
        else:
            for e in range(c.n_experts):
                n += [m + f"experts.{e}.{w}_proj.weight" for w in ("gate", "up", "down")]
        n += [m + f"shared_expert.{w}_proj.weight" for w in ("gate", "up", "down")] + [m + "shared_expert_gate.weight"]
    else:
        n += [m + f"{w}_proj.weight" for w in ("gate", "up", "down")]
    return n


def expected_tensors(c, stacked=None):
    n = [c.prefix + "embed_tokens.weight", c.prefix + "norm.weight"] + ([] if c.tie else ["lm_head.weight"])
    for L in range(c.layers):
        n += layer_tensors(c, L, stacked)
    return n


def ignored(name, c):
    """Tensors that belong to no part this module runs: MTP, the vision tower."""
    return name.startswith("mtp.") or name.startswith("model.visual.") or name.startswith("visual.")


# ----------------------------------------------------------------------------------------------
# Gated DeltaNet pieces


def causal_conv(x, w, state=None):
    """Causal depthwise conv + SiLU. x [T, C], w [C, K]; state [K - 1, C]: the inputs before x
    (zeros at the start). Returns (silu(out) [T, C], the new state: the last K - 1 inputs)."""
    T, C = x.shape
    K = w.shape[1]
    prev = torch.zeros(K - 1, C, dtype=x.dtype) if state is None else state
    xx = torch.cat([prev, x])
    out = sum(w[:, j] * xx[j:j + T] for j in range(K))
    return silu(out), xx[xx.shape[0] - (K - 1):]


def l2norm(x, eps=1e-6):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def gdn_recurrent(q, k, v, g, beta, S=None):
    """The gated delta rule token by token. q, k [T, H, dk], v [T, H, dv], g, beta [T, H];
    S [H, dk, dv] (zeros if None). Returns (o [T, H, dv], final S)."""
    T, H, dk = k.shape
    S = torch.zeros(H, dk, v.shape[-1], dtype=v.dtype) if S is None else S
    outs = []
    for t in range(T):
        S = S * torch.exp(g[t])[:, None, None]
        u = beta[t][:, None] * (v[t] - torch.einsum("hkv,hk->hv", S, k[t]))
        S = S + k[t][:, :, None] * u[:, None, :]
        outs.append(torch.einsum("hkv,hk->hv", S, q[t]))
    return torch.stack(outs), S


def gdn_chunked(q, k, v, g, beta, chunk=64, S=None):
    """The same recurrence a chunk of C tokens at a time. In a chunk starting from S0, with
    G_t = g_1 + ... + g_t (per head): S_t = e^{G_t} S0 + sum_{i<=t} e^{G_t - G_i} k_i u_i^T and
    u_t = beta_t (v_t - e^{G_t} S0^T k_t - sum_{i<t} e^{G_t - G_i} (k_t . k_i) u_i), a unit lower-
    triangular system for U; o_t = e^{G_t} S0^T q_t + sum_{i<=t} e^{G_t - G_i} (q_t . k_i) u_i."""
    T, H, dk = k.shape
    S = torch.zeros(H, dk, v.shape[-1], dtype=v.dtype) if S is None else S
    outs = []
    for a in range(0, T, chunk):
        b = min(T, a + chunk)
        n = b - a
        qc, kc, vc = (x[a:b].transpose(0, 1) for x in (q, k, v))              # [H, n, d]
        G = g[a:b].t().cumsum(-1)                                               # [H, n]
        incl = torch.ones(n, n, dtype=torch.bool).tril()
        D = torch.exp((G[:, :, None] - G[:, None, :]).masked_fill(~incl, float("-inf")))   # e^{G_t - G_i}, i <= t
        bc = beta[a:b].t()[:, :, None]
        A = (D * (kc @ kc.transpose(-1, -2))).tril(-1)
        eG = torch.exp(G)[:, :, None]
        rhs = bc * (vc - eG * (kc @ S))
        U = torch.linalg.solve_triangular(torch.eye(n, dtype=DT) + bc * A, rhs, upper=False, unitriangular=True)
        outs.append((eG * (qc @ S) + (D * (qc @ kc.transpose(-1, -2))) @ U).transpose(0, 1))
        S = torch.exp(G[:, -1])[:, None, None] * S + (kc * torch.exp(G[:, -1:] - G)[:, :, None]).transpose(-1, -2) @ U
    return torch.cat(outs), S


def attend(q, k, v, scale, q_pos):
    """Causal GQA attention. q [T, H, D] at positions q_pos; k, v [S, KV, D] at positions 0..S-1."""
    rep = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    s = torch.einsum("thd,shd->hts", q, kk) * scale
    keep = torch.arange(k.shape[0])[None, :] <= torch.as_tensor(q_pos)[:, None]
    p = torch.softmax(s.masked_fill(~keep, float("-inf")), -1)
    return torch.einsum("hts,shd->thd", p, vv)


# ----------------------------------------------------------------------------------------------
# the model


class Model:
    """A float64 forward pass over a Checkpoint. `raw_cfg` replaces its config.json (for tests).
    `deltanet` is "recurrent" (token by token, default) or "chunked" (chunks of `chunk`). The small
    methods norm, gated_norm, split_q_gate, out_gate, split_linear, expand_heads and shared_gate are
    where each fact lives (the self-checks mutate them one at a time)."""

    def __init__(self, ckpt, raw_cfg=None):
        self.ck = ckpt
        self.c = Config(raw_cfg if raw_cfg is not None else ckpt.cfg)
        self.deltanet, self.chunk = "recurrent", 64
        self.stacked = {L: ckpt.has(f"{self.c.prefix}layers.{L}.mlp.experts.gate_up_proj") for L in range(self.c.layers)}

    def check_names(self):
        """(missing, unexpected) names; per-expert and stacked experts are both accepted, FP8 scale
        companions, `mtp.*` and `model.visual.*` are expected extras."""
        c = self.c
        want = [n for L in range(c.layers) for n in layer_tensors(c, L, self.stacked[L])]
        want += [c.prefix + "embed_tokens.weight", c.prefix + "norm.weight"] + ([] if c.tie else ["lm_head.weight"])
        have = set(self.ck.names())
        missing = [n for n in want if n not in have]
        allowed = set(want) | fp8_scales(self.ck, want)
        return missing, sorted(n for n in have - allowed if not ignored(n, c))

    def w(self, name):
        return self.ck.weight(name)

    def linear(self, x, name, bias=False):
        y = x @ self.w(name + ".weight").t()
        return y + self.w(name + ".bias") if bias else y

    # -- the facts, one method each --------------------------------------------------------------

    def norm(self, x, name):
        """Zero-centred RMSNorm: x^ * (1 + w)."""
        return rmsnorm(x, 1.0 + self.w(name), self.c.eps)

    def gated_norm(self, o, z, w):
        """DeltaNet output norm: rmsnorm(o) * w (not zero-centred) * silu(z), per value head."""
        return rmsnorm(o, w, self.c.eps) * silu(z)

    def split_q_gate(self, qg):
        """q_proj output [T, heads * 2 D] -> query [T, heads, D], gate [T, heads * D]: per head
        [query (D) | gate (D)]."""
        T, D = qg.shape[0], self.c.head_dim
        qg = qg.view(T, self.c.heads, 2 * D)
        return qg[..., :D], qg[..., D:].reshape(T, self.c.heads * D)

    def out_gate(self, o, gate):
        return o * torch.sigmoid(gate)

    def shared_gate(self, x, p):
        return torch.sigmoid(x @ self.w(p + "shared_expert_gate.weight").t())

    def expand_heads(self, x):
        """[T, nk, dk] -> [T, nv, dk]: value head h reads key head h // (nv / nk) (repeat_interleave)."""
        return x.repeat_interleave(self.c.nv // self.c.nk, dim=1)

    def split_linear(self, L, h):
        """The DeltaNet projections: q, k [T, nk, dk], v, z [T, nv, dv], b, a [T, nv]."""
        c = self.c
        a_ = f"{c.prefix}layers.{L}.linear_attn."
        T, nk, nv, dk, dv = h.shape[0], c.nk, c.nv, c.dk, c.dv
        r = nv // nk
        if c.family == "qwen3_next":
            qkvz = self.linear(h, a_ + "in_proj_qkvz").view(T, nk, 2 * dk + 2 * r * dv)
            q, k = qkvz[..., :dk], qkvz[..., dk:2 * dk]
            v = qkvz[..., 2 * dk:2 * dk + r * dv].reshape(T, nv, dv)
            z = qkvz[..., 2 * dk + r * dv:].reshape(T, nv, dv)
            ba = self.linear(h, a_ + "in_proj_ba").view(T, nk, 2 * r)
            return q, k, v, z, ba[..., :r].reshape(T, nv), ba[..., r:].reshape(T, nv)
        qkv = self.linear(h, a_ + "in_proj_qkv")
        q = qkv[:, :nk * dk].view(T, nk, dk)
        k = qkv[:, nk * dk:2 * nk * dk].view(T, nk, dk)
        v = qkv[:, 2 * nk * dk:].view(T, nv, dv)
        z = self.linear(h, a_ + "in_proj_z").view(T, nv, dv)
        return q, k, v, z, self.linear(h, a_ + "in_proj_b"), self.linear(h, a_ + "in_proj_a")

    # -- mixers ----------------------------------------------------------------------------------

    def linear_attn(self, L, h, state):
        """Gated DeltaNet over h [T, hidden], continuing from state {"conv", "S"} (updated)."""
        c = self.c
        a_ = f"{c.prefix}layers.{L}.linear_attn."
        T, nk, nv, dk, dv = h.shape[0], c.nk, c.nv, c.dk, c.dv
        q, k, v, z, b, a = self.split_linear(L, h)
        mixed = torch.cat([q.reshape(T, nk * dk), k.reshape(T, nk * dk), v.reshape(T, nv * dv)], -1)
        cw = self.w(a_ + "conv1d.weight")
        if tuple(cw.shape) != (mixed.shape[1], 1, c.conv_k):
            raise ValueError(f"layer {L} conv1d.weight {tuple(cw.shape)}, expected {(mixed.shape[1], 1, c.conv_k)}")
        mixed, state["conv"] = causal_conv(mixed, cw[:, 0, :], state.get("conv"))
        q = l2norm(mixed[:, :nk * dk].view(T, nk, dk)) * dk ** -0.5
        k = l2norm(mixed[:, nk * dk:2 * nk * dk].view(T, nk, dk))
        v = mixed[:, 2 * nk * dk:].view(T, nv, dv)
        q, k = self.expand_heads(q), self.expand_heads(k)
        g = -torch.exp(self.w(a_ + "A_log")) * F.softplus(a + self.w(a_ + "dt_bias"))
        beta = torch.sigmoid(b)
        if self.deltanet == "chunked":
            o, state["S"] = gdn_chunked(q, k, v, g, beta, self.chunk, state.get("S"))
        else:
            o, state["S"] = gdn_recurrent(q, k, v, g, beta, state.get("S"))
        o = self.gated_norm(o, z, self.w(a_ + "norm.weight"))
        return self.linear(o.reshape(T, nv * dv), a_ + "out_proj")

    def full_attn(self, L, h, cos, sin, q_pos, cache):
        c = self.c
        a_ = f"{c.prefix}layers.{L}.self_attn."
        T, D = h.shape[0], c.head_dim
        q, gate = self.split_q_gate(self.linear(h, a_ + "q_proj", c.bias))
        k = self.linear(h, a_ + "k_proj", c.bias).view(T, c.kv_heads, D)
        v = self.linear(h, a_ + "v_proj", c.bias).view(T, c.kv_heads, D)
        q, k = self.norm(q, a_ + "q_norm.weight"), self.norm(k, a_ + "k_norm.weight")
        q, k = base.apply_rope(q, cos, sin), base.apply_rope(k, cos, sin)
        cache["k"] = k if "k" not in cache else torch.cat([cache["k"], k])
        cache["v"] = v if "v" not in cache else torch.cat([cache["v"], v])
        o = attend(q, cache["k"], cache["v"], D ** -0.5, q_pos).reshape(T, c.heads * D)
        return self.linear(self.out_gate(o, gate), a_ + "o_proj", c.bias)

    # -- feed-forward ----------------------------------------------------------------------------

    def dense(self, p, x):
        return swiglu(x, self.w(p + "gate_proj.weight"), self.w(p + "up_proj.weight"), self.w(p + "down_proj.weight"))

    def expert_fn(self, L):
        c = self.c
        p = f"{c.prefix}layers.{L}.mlp.experts."
        if not self.stacked[L]:
            return lambda e, x: self.dense(f"{p}{e}.", x)

        def run(e, x):
            gu, down = self.ck.slab(p + "gate_up_proj", e), self.ck.slab(p + "down_proj", e)
            I = c.moe_inter
            if tuple(gu.shape) != (2 * I, c.hidden) or tuple(down.shape) != (c.hidden, I):
                raise ValueError(f"layer {L} expert {e}: gate_up_proj {tuple(gu.shape)}, down_proj {tuple(down.shape)}; "
                                 f"expected {(2 * I, c.hidden)} and {(c.hidden, I)}")
            return swiglu(x, gu[:I], gu[I:], down)
        return run

    def ffn(self, L, x, routing=None):
        c = self.c
        p = f"{c.prefix}layers.{L}.mlp."
        if not c.moe[L]:
            return self.dense(p, x)
        ids, w = base.route_softmax(x @ self.w(p + "gate.weight").t(), c.top_k, c.renorm)
        if routing is not None:
            routing.append({"layer": L, "experts": ids.tolist(), "weights": w.tolist()})
        out = base.moe_combine(x, ids, w, self.expert_fn(L))
        return out + self.dense(p + "shared_expert.", x) * self.shared_gate(x, p)

    # -- the whole pass --------------------------------------------------------------------------

    def _check_ids(self, ids):
        if len(ids) == 0:
            raise ValueError("no token ids")
        if any(i < 0 or i >= self.c.vocab for i in ids):
            raise ValueError(f"token id out of range [0, {self.c.vocab})")
        if self.c.rope_type == "dynamic" and len(ids) > self.c.max_pos:
            raise ValueError("dynamic RoPE beyond max_position_embeddings is not supported")

    def _step(self, ids, pos0, states, trace=None, routing=None):
        c = self.c
        T = len(ids)
        cos, sin = base.rope_tables(c.inv_freq, c.attn_factor, pos0 + T)
        cos, sin = cos[pos0:], sin[pos0:]
        q_pos = torch.arange(pos0, pos0 + T)
        x = self.ck.rows(c.prefix + "embed_tokens.weight", ids)
        for L in range(c.layers):
            p = f"{c.prefix}layers.{L}."
            h = self.norm(x, p + "input_layernorm.weight")
            if c.types[L] == "linear_attention":
                x = x + self.linear_attn(L, h, states[L])
            else:
                x = x + self.full_attn(L, h, cos, sin, q_pos, states[L])
            x = x + self.ffn(L, self.norm(x, p + "post_attention_layernorm.weight"), routing)
            if trace is not None:
                trace.append(x.clone())
        return self.norm(x, c.prefix + "norm.weight")

    def logits(self, x):
        c = self.c
        head = c.prefix + "embed_tokens.weight" if c.tie else "lm_head.weight"
        return torch.cat([x @ self.ck.row_range(head, a, min(c.vocab, a + 8192)).t() for a in range(0, c.vocab, 8192)], 1)

    def forward(self, ids, trace=None, routing=None):
        """ids -> logits float64 [T, vocab] of every position (one prefill from position 0).
        `trace` receives x after every layer [T, hidden]; `routing` each MoE layer's choices."""
        self._check_ids(ids)
        return self.logits(self._step(list(ids), 0, [{} for _ in range(self.c.layers)], trace, routing))

    def decode(self, ids, split=None):
        """The same logits from incremental steps carrying the conv states, DeltaNet states and
        key/value caches: one token at a time, or (split = n) a prefill of n tokens then one at a time."""
        self._check_ids(ids)
        states = [{} for _ in range(self.c.layers)]
        out, pos = [], 0
        if split:
            out.append(self.logits(self._step(list(ids[:split]), 0, states)))
            pos = split
        for i in range(pos, len(ids)):
            out.append(self.logits(self._step([ids[i]], i, states)))
        return torch.cat(out)


__all__ = ["Checkpoint", "Config", "Model", "expected_tensors", "FAMILIES"]
