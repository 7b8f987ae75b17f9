#!/usr/bin/python3
"""The Kimi-Linear architecture as a PyTorch module: the project's reference implementation.

One description of the model serves three purposes: `kimi_linear_ref.py` loads a container's or a
checkpoint's tensors into it and runs it in float64 (the golden files the engine is tested
against), `tools/demo/train.py` trains a small one in float32, and the trained weights are
exported under exactly these parameter names as a HuggingFace checkpoint for the engine.

Written from a description of the architecture compiled from its public sources (Moonshot's
HuggingFace modeling code, the fla kernels, vLLM, llama.cpp), not from the TypeScript engine;
docs/ARCHITECTURE.md states the same formulas as the engine implements them.

Kimi K3's text model (kimi_k3_model.py) subclasses these pieces; the small methods KDA.decay,
KDA.output_gate, MLA.query, MLA.gate_output and MoE.combine are where its differences plug in.

Parameter names are the HuggingFace tensor names (model.layers.3.self_attn.q_proj.weight,
model.layers.2.block_sparse_moe.experts.5.w1.weight, ...); the router's selection bias
`gate.e_score_correction_bias` is a buffer (it is trained by a rule, not by gradients).

Semantics:
  * KDA: q/k/v projections, causal depthwise short conv (last tap = current token) + SiLU;
    q and k L2-normalised per head (eps 1e-6 inside the sqrt), q scaled by D^-0.5; per-channel
    log decay g = -exp(A_log[h]) * softplus(f_b(f_a(x)) + dt_bias) (softplus threshold 20);
    beta = sigmoid(b_proj(x)); the gated delta rule
        S <- diag(exp(g_t)) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T q_t
    then a per-head RMSNorm (o_norm, rms_norm_eps) times sigmoid(g_b(g_a(x))), then o_proj.
    Two paths compute it: `loop` (token by token, the reference) and `chunk` (a chunked
    parallel form for training; equal up to rounding, see `kda_chunked`).
  * MLA without RoPE: q = q_proj(x) per head (nope | rope); c = kv_a_proj_with_mqa(x) =
    (latent | k_pe); latent RMSNorm (rms_norm_eps); kv_b_proj(latent) per head = (k_nope | v);
    the rope part of the key is k_pe shared by every head and never rotated; scores scaled by
    (nope + rope)^-0.5; causal softmax.
  * MoE: sigmoid router scores; the correction bias is added for SELECTION only; top-k with
    ties going to the lower expert id; the weights are the chosen (unbiased) scores,
    renormalised (sum + 1e-20) when moe_renormalize and k > 1, times routed_scaling_factor;
    plus the shared experts (one SwiGLU of moe_intermediate_size * num_shared_experts).
    Tokens are dispatched per expert (index_select / index_add), never through every expert.
  * Layers < first_k_dense_replace use a dense SwiGLU (intermediate_size); then final RMSNorm
    and an untied lm_head.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# ----------------------------------------------------------------------------------------------
# configuration


class KimiLinearConfig:
    """The hyper-parameters the module needs, read from a HuggingFace config.json dict."""

    def __init__(self, cfg):
        cfg = cfg.get("text_config", cfg)
        self.raw = cfg
        self.vocab_size = cfg["vocab_size"]
        self.hidden_size = cfg["hidden_size"]
        self.num_hidden_layers = cfg["num_hidden_layers"]
        self.rms_norm_eps = cfg.get("rms_norm_eps", 1e-5)
        lac = cfg.get("linear_attn_config") or {}
        self.kda_layers = {l - 1 for l in lac.get("kda_layers", [])}      # 0-based
        self.kda_heads = lac.get("num_heads", 0)
        self.kda_head_dim = lac.get("head_dim", 0)
        self.conv_kernel = lac.get("short_conv_kernel_size", 4)
        self.mla_heads = cfg.get("num_attention_heads", 0)
        self.kv_lora_rank = cfg.get("kv_lora_rank", 0)
        self.qk_nope = cfg.get("qk_nope_head_dim", 0)
        self.qk_rope = cfg.get("qk_rope_head_dim", 0)
        self.v_head = cfg.get("v_head_dim", 0)
        self.num_experts = cfg.get("num_experts", cfg.get("n_routed_experts", 0)) or 0
        self.top_k = cfg.get("num_experts_per_token", cfg.get("num_experts_per_tok", 0))
        self.shared = cfg.get("num_shared_experts", cfg.get("n_shared_experts", 0)) or 0
        self.moe_inter = cfg.get("moe_intermediate_size", 0)
        self.first_dense = cfg.get("first_k_dense_replace", 0)
        self.renormalize = cfg.get("moe_renormalize", cfg.get("norm_topk_prob", True))
        self.routed_scale = cfg.get("routed_scaling_factor", 1.0)
        self.intermediate_size = cfg.get("intermediate_size", 0)

    def is_kda(self, layer):
        return layer in self.kda_layers

    def is_moe(self, layer):
        return bool(self.num_experts) and layer >= self.first_dense


# ----------------------------------------------------------------------------------------------
# building blocks


def rmsnorm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def silu(x):
    return x * torch.sigmoid(x)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return rmsnorm(x, self.weight, self.eps)


def linear(i, o):
    return nn.Linear(i, o, bias=False)


class SwiGLU(nn.Module):
    """gate_proj / up_proj / down_proj (dense FFN and shared experts)."""

    def __init__(self, h, inter):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = linear(h, inter), linear(h, inter), linear(inter, h)

    def forward(self, x):
        return self.down_proj(silu(self.gate_proj(x)) * self.up_proj(x))


class Expert(nn.Module):
    """A routed expert, Mixtral names: w1 the gate (SiLU side), w3 the up, w2 the down projection."""

    def __init__(self, h, inter):
        super().__init__()
        self.w1, self.w3, self.w2 = linear(h, inter), linear(h, inter), linear(inter, h)

    def forward(self, x):
        return self.w2(silu(self.w1(x)) * self.w3(x))


# ----------------------------------------------------------------------------------------------
# KDA recurrence: token by token (reference) and chunked (training)


def kda_loop(q, k, v, g, beta, state=None):
    """q, k, v, g: [B, T, NH, D]; beta: [B, T, NH]. Returns (o [B, T, NH, Dv], final state [B, NH, D, Dv])."""
    B, T, NH, D = k.shape
    Dv = v.shape[-1]
    S = k.new_zeros(B, NH, D, Dv) if state is None else state
    outs = []
    for t in range(T):
        S = S * torch.exp(g[:, t]).unsqueeze(-1)                              # decay rows (key dims)
        u = beta[:, t].unsqueeze(-1) * (v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t]))
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, t], u)
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    return torch.stack(outs, 1), S


def kda_chunked(q, k, v, g, beta, chunk=32, state=None, pairwise=None):
    """The same recurrence, computed a chunk of C tokens at a time.

    Inside a chunk starting from state S0, with G_t = sum_{i<=t} g_i (per channel, <= 0):
        S_t = diag(e^{G_t}) (S0 + sum_{i<=t} diag(e^{-G_i}) k_i u_i^T)
        u_t = beta_t (v_t - S0^T (e^{G_t} k_t) - sum_{i<t} A_ti u_i),  A_ti = sum_c k_t,c k_i,c e^{G_t,c - G_i,c}
    so (I + diag(beta) A) U = diag(beta) V - diag(beta) (e^G * K) S0: a unit lower-triangular
    system (the WY/UT form), solved for all chunks at once, giving U = U_v - W S0. Then chunk by
    chunk: o = (e^G * Q) S0 + Aqk U (Aqk with the diagonal), S_C = diag(e^{G_C}) S0 +
    (e^{G_C - G} * K)^T U.

    The pairwise decays e^{G_t - G_i} (i <= t, never above 1) are computed one of two ways:
    factored through the chunk's middle token m, (k_t e^{G_t - G_m}) . (k_i e^{G_m - G_i}), two
    matrix products -- whose factors can overflow when a chunk decays by more than e^-80 on either
    side of m -- or, in that case (or when `pairwise` is True), exactly pairwise per channel
    ([C, C, D] per chunk, slower, nothing can overflow).
    """
    B, T, NH, D = k.shape
    Dv = v.shape[-1]
    C = chunk
    N = (T + C - 1) // C
    pad = N * C - T

    def prep(x):                                       # [B, T, NH, ...] -> [B, NH, N, C, ...]
        x = x.transpose(1, 2)
        if pad:
            x = F.pad(x, [0, 0] * (x.dim() - 3) + [0, pad])
        return x.reshape(B, NH, N, C, *x.shape[3:])

    q, k, v, g = prep(q), prep(k), prep(v), prep(g)
    beta = prep(beta.unsqueeze(-1)).squeeze(-1)        # [B, NH, N, C]
    G = g.cumsum(-2)                                   # [B, NH, N, C, D]
    m = C // 2
    Gm = G[..., m:m + 1, :]
    if pairwise is None:
        with torch.no_grad():
            span = torch.maximum(G[..., 0, :] - Gm[..., 0, :], Gm[..., 0, :] - G[..., -1, :])
            pairwise = bool(span.max() > 80.0)
    if pairwise:
        ar = torch.arange(C, device=k.device)
        incl = ar.view(C, 1) >= ar.view(1, C)          # i <= t
        diff = (G.unsqueeze(-2) - G.unsqueeze(-3)).masked_fill(~incl.view(C, C, 1), float("-inf"))
        X = torch.exp(diff) * k.unsqueeze(-3)          # [B, NH, N, C(t), C(i), D]: e^{G_t - G_i} k_i, 0 for i > t
        Akk = (X * k.unsqueeze(-2)).sum(-1).tril(-1)   # [B, NH, N, C(t), C(i)]
        Aqk = (X * q.unsqueeze(-2)).sum(-1)            # X is already 0 above the diagonal
    else:
        ef = torch.exp(G - Gm)
        kb = (k * torch.exp(Gm - G)).transpose(-1, -2)
        Akk = ((k * ef) @ kb).tril(-1)
        Aqk = ((q * ef) @ kb).tril(0)
    eG = torch.exp(G)
    L = beta.unsqueeze(-1) * Akk                       # the unit diagonal is implied
    rhs = torch.cat([beta.unsqueeze(-1) * v, beta.unsqueeze(-1) * (k * eG)], -1)
    sol = torch.linalg.solve_triangular(L, rhs, upper=False, unitriangular=True)
    # unbind, not indexing, per chunk: the backward of unbind is one stack, not N zero-filled copies
    Uv, W = sol[..., :Dv].unbind(2), sol[..., Dv:].unbind(2)
    qg = (q * eG).unbind(2)
    kdT = (k * torch.exp(G[..., -1:, :] - G)).transpose(-1, -2).unbind(2)   # decay to the chunk's end
    dlast = eG[..., -1, :].unsqueeze(-1).unbind(2)     # [B, NH, D, 1] each
    Aqk = Aqk.unbind(2)
    S = k.new_zeros(B, NH, D, Dv) if state is None else state
    outs = []
    for n in range(N):
        U = Uv[n] - W[n] @ S
        outs.append(qg[n] @ S + Aqk[n] @ U)
        S = dlast[n] * S + kdT[n] @ U
    o = torch.stack(outs, 2).reshape(B, NH, N * C, Dv)[:, :, :T]
    return o.transpose(1, 2), S


# ----------------------------------------------------------------------------------------------
# attention


class KDA(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, NH, D, K = c.hidden_size, c.kda_heads, c.kda_head_dim, c.conv_kernel
        C = NH * D
        self.NH, self.D, self.K, self.eps = NH, D, K, c.rms_norm_eps
        self.q_proj, self.k_proj, self.v_proj = linear(H, C), linear(H, C), linear(H, C)
        self.q_conv1d = nn.Conv1d(C, C, K, groups=C, bias=False)
        self.k_conv1d = nn.Conv1d(C, C, K, groups=C, bias=False)
        self.v_conv1d = nn.Conv1d(C, C, K, groups=C, bias=False)
        self.f_a_proj, self.f_b_proj = linear(H, D), linear(D, C)
        self.dt_bias = nn.Parameter(torch.zeros(C))
        self.A_log = nn.Parameter(torch.zeros(1, 1, NH, 1))
        self.b_proj = linear(H, NH)
        self.g_a_proj, self.g_b_proj = linear(H, D), linear(D, C)
        self.o_norm = RMSNorm(D, c.rms_norm_eps)
        self.o_proj = linear(C, H)

    def conv(self, y, conv):
        """Causal depthwise conv over time (zeros before the start; last tap = current token) + SiLU."""
        out = F.conv1d(F.pad(y.transpose(1, 2), [self.K - 1, 0]), conv.weight, groups=y.shape[-1])
        return silu(out.transpose(1, 2))

    def forward(self, h, mode="chunk", chunk=32):
        B, T, _ = h.shape
        NH, D = self.NH, self.D
        q = self.conv(self.q_proj(h), self.q_conv1d).view(B, T, NH, D)
        k = self.conv(self.k_proj(h), self.k_conv1d).view(B, T, NH, D)
        v = self.conv(self.v_proj(h), self.v_conv1d).view(B, T, NH, D)
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * D ** -0.5
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        g = self.decay(h)
        beta = torch.sigmoid(self.b_proj(h))                                  # [B, T, NH]
        if mode == "loop":
            o, _ = kda_loop(q, k, v, g, beta)
        else:
            o, _ = kda_chunked(q, k, v, g, beta, chunk)
        o = self.o_norm(o) * torch.sigmoid(self.output_gate(h))
        return self.o_proj(o.reshape(B, T, NH * D))

    # the two pieces Kimi K3 changes (kimi_k3_model.py overrides them)

    def decay(self, h):
        """Per-channel log decay g [B, T, NH, D] = -exp(A_log[h]) * softplus(f_b(f_a(h)) + dt_bias)."""
        B, T, _ = h.shape
        z = self.f_b_proj(self.f_a_proj(h)) + self.dt_bias
        return -torch.exp(self.A_log).view(1, 1, self.NH, 1) * F.softplus(z, threshold=20).view(B, T, self.NH, self.D)

    def output_gate(self, h):
        """Pre-sigmoid output gate [B, T, NH, D]: the low-rank g_b(g_a(h))."""
        B, T, _ = h.shape
        return self.g_b_proj(self.g_a_proj(h)).view(B, T, self.NH, self.D)


class MLA(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, NH = c.hidden_size, c.mla_heads
        self.NH, self.nope, self.rope, self.vh, self.kvl = NH, c.qk_nope, c.qk_rope, c.v_head, c.kv_lora_rank
        self.q_proj = linear(H, NH * (c.qk_nope + c.qk_rope))
        self.kv_a_proj_with_mqa = linear(H, c.kv_lora_rank + c.qk_rope)
        self.kv_a_layernorm = RMSNorm(c.kv_lora_rank, c.rms_norm_eps)     # rms_norm_eps, as the engine
        self.kv_b_proj = linear(c.kv_lora_rank, NH * (c.qk_nope + c.v_head))
        self.o_proj = linear(NH * c.v_head, H)

    def forward(self, h, mode=None, chunk=None):
        B, T, _ = h.shape
        NH, nope, rope, vh, kvl = self.NH, self.nope, self.rope, self.vh, self.kvl
        q = self.query(h).view(B, T, NH, nope + rope)
        ckv = self.kv_a_proj_with_mqa(h)
        lat = self.kv_a_layernorm(ckv[..., :kvl])
        kpe = ckv[..., kvl:]                                                  # shared by all heads, no RoPE
        kv = self.kv_b_proj(lat).view(B, T, NH, nope + vh)
        knope, vals = kv[..., :nope], kv[..., nope:]
        scores = (torch.einsum("bthd,bshd->bhts", q[..., :nope], knope) +
                  torch.einsum("bthd,bsd->bhts", q[..., nope:], kpe)) * (nope + rope) ** -0.5
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=h.device), 1)
        scores = scores.masked_fill(mask, float("-inf"))
        o = torch.einsum("bhts,bshd->bthd", torch.softmax(scores, -1), vals)
        return self.o_proj(self.gate_output(o.reshape(B, T, NH * vh), h))

    # the two pieces Kimi K3 changes (kimi_k3_model.py overrides them)

    def query(self, h):
        """Per-head queries (nope | rope), [B, T, NH * (nope + rope)]."""
        return self.q_proj(h)

    def gate_output(self, o, h):
        """The concatenated head outputs before o_proj; Kimi-Linear has no output gate."""
        return o


# ----------------------------------------------------------------------------------------------
# mixture of experts


class Gate(nn.Module):
    def __init__(self, h, n):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n, h))
        self.register_buffer("e_score_correction_bias", torch.zeros(n))


class MoE(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, E, I = c.hidden_size, c.num_experts, c.moe_inter
        self.E, self.k, self.renorm, self.scale = E, c.top_k, c.renormalize, c.routed_scale
        self.gate = Gate(H, E)
        self.experts = nn.ModuleList(Expert(H, I) for _ in range(E))
        self.shared_experts = SwiGLU(H, I * c.shared) if c.shared > 0 else None
        self.stats = None      # after a forward: routing statistics (see route)

    def route(self, x):
        """x: [N, H] -> (chosen ids [N, k], combine weights [N, k], sigmoid scores [N, E])."""
        scores = torch.sigmoid(x @ self.gate.weight.t())                      # [N, E]
        sel = scores + self.gate.e_score_correction_bias                      # bias chooses, never weighs
        # a stable descending sort keeps the lower id first among equal values
        chosen = torch.sort(sel.detach(), dim=-1, descending=True, stable=True).indices[:, :self.k]
        w = scores.gather(1, chosen)
        if self.renorm and self.k > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return chosen, w * self.scale, scores

    def forward(self, h):
        shape = h.shape
        x = h.reshape(-1, shape[-1])
        N = x.shape[0]
        chosen, w, scores = self.route(x)
        out, counts = self.combine(x, chosen, w)
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)
        self.stats = {"counts": counts, "chosen": chosen, "scores": scores, "tokens": N}
        return out.view(shape)

    def combine(self, x, chosen, w):
        """The routed part: (sum_j w[:, j] * expert_{chosen[:, j]}(x) for x [N, in] -> [N, out],
        assignments per expert [E]). Kimi K3 runs it on a latent projection of x."""
        flat_e = chosen.reshape(-1)
        order = torch.sort(flat_e, dim=0, stable=True).indices               # assignments grouped by expert
        tok = order.div(self.k, rounding_mode="floor")                       # their tokens
        counts = torch.bincount(flat_e, minlength=self.E)
        # one gather, per-expert pieces by split (whose backward is one cat), one scatter-add
        xs = x.index_select(0, tok).split(counts.tolist())
        ys = torch.cat([self.experts[e](xe) for e, xe in enumerate(xs) if xe.shape[0] > 0])
        ys = ys * w.reshape(-1).index_select(0, order).unsqueeze(-1)
        return x.new_zeros(x.shape[0], ys.shape[-1]).index_add_(0, tok, ys), counts


# ----------------------------------------------------------------------------------------------
# the model


class DecoderLayer(nn.Module):
    def __init__(self, c, L):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = KDA(c) if c.is_kda(L) else MLA(c)
        if c.is_moe(L):
            self.block_sparse_moe = MoE(c)
        else:
            self.mlp = SwiGLU(c.hidden_size, c.intermediate_size)

    def forward(self, x, mode, chunk):
        x = x + self.self_attn(self.input_layernorm(x), mode, chunk)
        h = self.post_attention_layernorm(x)
        ffn = self.block_sparse_moe(h) if hasattr(self, "block_sparse_moe") else self.mlp(h)
        return x + ffn


class KimiLinearModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c, L) for L in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class KimiLinearForCausalLM(nn.Module):
    def __init__(self, cfg, dtype=torch.float32):
        super().__init__()
        self.config = cfg if isinstance(cfg, KimiLinearConfig) else KimiLinearConfig(cfg)
        self.model = KimiLinearModel(self.config)
        self.lm_head = linear(self.config.hidden_size, self.config.vocab_size)
        self.to(dtype)

    def hidden(self, ids, mode="chunk", chunk=32):
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, mode, chunk)
        return self.model.norm(x)

    def forward(self, ids, mode="chunk", chunk=32):
        """ids: [B, T] (or [T]) token ids -> logits [B, T, vocab] (or [T, vocab]).

        mode "loop" runs KDA token by token (the reference path), "chunk" in chunks of `chunk`."""
        squeeze = ids.dim() == 1
        if squeeze:
            ids = ids.unsqueeze(0)
        logits = self.lm_head(self.hidden(ids, mode, chunk))
        return logits[0] if squeeze else logits

    def moe_layers(self):
        return [(L, l.block_sparse_moe) for L, l in enumerate(self.model.layers) if hasattr(l, "block_sparse_moe")]


# ----------------------------------------------------------------------------------------------
# loading tensors by name


_EXPERT = ("w1", "w3", "w2")


def load_tensors(model, src):
    """Fill every parameter and buffer of `model` from `src`, a reader with has(name),
    tensor(name) and expert(layer, e, hidden, inter) -> [w1, w3, w2] (kimi_linear_ref.py's
    Container and Checkpoint). A missing e_score_correction_bias reads as zeros."""
    c = model.config
    cache = {}
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            parts = name.split(".")
            if ".block_sparse_moe.experts." in name:
                L, e = int(parts[2]), int(parts[5])
                if (L, e) not in cache:
                    cache = {(L, e): src.expert(L, e, getattr(c, "expert_in", c.hidden_size), c.moe_inter)}
                w = cache[(L, e)][_EXPERT.index(parts[6])]
            elif name.endswith("e_score_correction_bias") and not src.has(name):
                w = torch.zeros(t.shape)
            else:
                w = src.tensor(name)
            t.copy_(w.reshape(t.shape).to(t.dtype))
    return model


# ----------------------------------------------------------------------------------------------
# self-test: /usr/bin/python3 tools/reference/kimi_linear_model.py


def _moe_plain(moe, x):
    """The MoE token by token, the way the reference describes it (for the self-test)."""
    out = torch.zeros_like(x)
    scores = torch.sigmoid(x @ moe.gate.weight.t())
    for t in range(x.shape[0]):
        sel = scores[t] + moe.gate.e_score_correction_bias
        chosen = []
        for _ in range(moe.k):                                                # ties to the lower id
            chosen.append(max((e for e in range(moe.E) if e not in chosen), key=lambda e: (sel[e].item(), -e)))
        w = scores[t][chosen]
        if moe.renorm and moe.k > 1:
            w = w / (w.sum() + 1e-20)
        for j, e in enumerate(chosen):
            out[t] += w[j] * moe.scale * moe.experts[e](x[t])
    if moe.shared_experts is not None:
        out = out + moe.shared_experts(x)
    return out


def _self_test():
    torch.set_num_threads(1)
    dt = torch.float64
    gen = torch.Generator().manual_seed(0)
    worst = 0.0

    def check(what, a, b, tol=1e-10):
        nonlocal worst
        d = ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()
        worst = max(worst, d)
        print(f"{'ok  ' if d <= tol else 'FAIL'} {what}: max rel diff {d:.2e}")
        if d > tol:
            raise SystemExit(1)

    # KDA: chunked == token by token (outputs, final states and gradients), T not a multiple of C
    for (B, T, NH, D, Dv, C, decay) in [(2, 37, 3, 16, 16, 16, 1.0), (1, 50, 2, 12, 20, 8, 5.0),
                                        (2, 71, 2, 16, 16, 32, 30.0), (1, 33, 1, 8, 8, 64, 0.01)]:
        q = torch.randn(B, T, NH, D, dtype=dt, generator=gen)
        k = torch.randn(B, T, NH, D, dtype=dt, generator=gen)
        q, k = q / q.norm(dim=-1, keepdim=True) * D ** -0.5, k / k.norm(dim=-1, keepdim=True)
        v = torch.randn(B, T, NH, Dv, dtype=dt, generator=gen)
        g = -torch.rand(B, T, NH, D, dtype=dt, generator=gen) * decay
        beta = torch.rand(B, T, NH, dtype=dt, generator=gen)
        ins = [t.clone().requires_grad_() for t in (q, k, v, g, beta)]
        o1, s1 = kda_loop(*ins)
        w = torch.randn(o1.shape, dtype=dt, generator=gen)
        g1 = torch.autograd.grad((o1 * w).sum() + s1.sum(), ins)
        for pw in (False, True):
            o2, s2 = kda_chunked(*ins, chunk=C, pairwise=pw)
            g2 = torch.autograd.grad((o2 * w).sum() + s2.sum(), ins)
            tag = f"KDA T={T} C={C} decay {decay} {'pairwise' if pw else 'factored'}"
            check(tag + " output", o2, o1)
            check(tag + " state", s2, s1)
            for name, a, b in zip("q k v g beta".split(), g2, g1):
                check(tag + f" d{name}", a, b)

    # a whole model of awkward sizes: chunked == loop; MoE dispatch == the plain per-token form
    cfg = {"vocab_size": 91, "hidden_size": 40, "num_hidden_layers": 5, "intermediate_size": 56,
           "moe_intermediate_size": 24, "num_experts": 9, "num_experts_per_token": 3, "num_shared_experts": 2,
           "first_k_dense_replace": 1, "routed_scaling_factor": 1.7, "num_attention_heads": 2, "kv_lora_rank": 16,
           "qk_nope_head_dim": 8, "qk_rope_head_dim": 5, "v_head_dim": 12, "rms_norm_eps": 1e-5,
           "linear_attn_config": {"num_heads": 3, "head_dim": 8, "short_conv_kernel_size": 3,
                                  "kda_layers": [1, 2, 3, 5], "full_attn_layers": [4]}}
    torch.manual_seed(1)
    model = KimiLinearForCausalLM(cfg, dtype=dt)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0, 0.3 if p.dim() > 1 else 0.5, generator=gen)
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.add_(1.0)
        for _, moe in model.moe_layers():
            moe.gate.e_score_correction_bias.uniform_(-0.1, 0.1, generator=gen)
    ids = torch.randint(0, 91, (2, 29), generator=gen)
    with torch.no_grad():
        ref = model(ids, mode="loop")
        check("model chunk(8) vs loop", model(ids, mode="chunk", chunk=8), ref)
        check("model batch row vs alone", model(ids[1], mode="loop"), ref[1])
        moe = model.model.layers[2].block_sparse_moe
        x = torch.randn(23, 40, dtype=dt, generator=gen)
        check("MoE dispatch vs per token", moe(x), _moe_plain(moe, x))
        moe.gate.e_score_correction_bias.zero_()
        moe.gate.weight[:5] = 0.1 * x[0]                                       # experts 0..4 tie at the top
        moe.gate.weight[5:] = -0.1 * x[0]
        x[:, :] = x[0]
        chosen = moe.route(x)[0]
        if not bool((chosen == torch.tensor([0, 1, 2])).all()):
            raise SystemExit(f"FAIL MoE ties: chose {chosen[0].tolist()}, expected [0, 1, 2]")
        check("MoE ties go to the lower id", moe(x), _moe_plain(moe, x))
    print(f"all passed (worst {worst:.2e})")


if __name__ == "__main__":
    _self_test()
