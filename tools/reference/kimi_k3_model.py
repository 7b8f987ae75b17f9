#!/usr/bin/python3
"""The Kimi K3 text model as a PyTorch module: the project's float64 reference for K3 (dev only).

Written from the project's Kimi K3 implementation spec (kimi-k3.md; the section numbers below are
its own), which compiles the public sources (Moonshot's released modeling code as adapted in
MindSpeed-MM, the public C engine sqliteai/waste), not from the TypeScript engine, so that the two
agreeing is evidence both are right. `kimi_linear_ref.py` (or its K3-only alias `kimi_k3_ref.py`)
reads a WASTE container or an HF checkpoint, dequantizes every tensor to float64, loads it into this
module by HuggingFace tensor name (without the `language_model.` prefix) and runs it; CI never runs
Python. Checked against the C engine's test_forward on tiny K3-shaped containers (step and chunked
paths, 1 to 70 tokens): max|d|/max|ref| of the logits 1e-6 to 1e-5, equal routing.

    /usr/bin/python3 tools/reference/kimi_k3_ref.py CONTAINER --ids 1,2,3 --out logits.bin
    /usr/bin/python3 tools/reference/kimi_k3_model.py          # self-test

K3's text model is a Kimi-Linear block with more options, so this file subclasses the pieces of
kimi_linear_model.py and overrides only what K3 changes:

  * Attention Residuals (attn_res_block_size B > 0): the residual stream is replaced by a per-token
    list of block summaries. Every sublayer input is AttnRes(blocks, partial sum), a softmax over
    candidates v_i of s_i = proj . RMSNorm(v_i, norm) (rms_norm_eps), mixing the un-normalised v_i;
    a new block starts at every layer L with L % B == 0; one last AttnRes (output_attn_res_*) before
    the final norm. Spec 4.1-4.2; `KimiK3ForCausalLM.hidden` is that loop, line for line.
  * KDA: full-rank output gate g_proj (use_full_rank_gate) instead of g_b(g_a(h)); the bounded
    decay gate g = lb * sigmoid(exp(A_log[h]) * (f_b(f_a(h)) + dt_bias)) when gate_lower_bound
    lb < 0 (else Kimi-Linear's -exp(A_log[h]) * softplus(...)). A_log is one value per head: the
    loader takes the first NH stored values ([128] for 96 heads in the release). Spec 4.3.
  * MLA: compressed query q_b(RMSNorm(q_a(h))) when q_lora_rank > 0 (the inner norm uses
    rms_norm_eps, as the C engine does; HF builds it with 1e-6, spec 12.1), and a sigmoid output
    gate o * sigmoid(g_proj(h)) before o_proj when mla_use_output_gate. Still NoPE. Spec 4.4.
  * Router unchanged from Kimi-Linear (renormalised only when top-k > 1, as the C engine does; the
    spec's 4.5 leaves the condition out, which matters only at top-1).
  * Latent MoE (routed_expert_hidden_size W > 0): the router still sees the full h, but the routed
    experts run on x_lat = routed_expert_down_proj(h) (width W); their weighted sum goes through
    RMSNorm(routed_expert_norm) when latent_moe_use_norm, then routed_expert_up_proj; the shared
    experts run on the full h. Spec 4.5.
  * SiTU-GLU (hidden_act "situ") replaces silu(gate) * up in the dense FFN, the shared and the
    routed experts: beta tanh(g / beta) sigmoid(g) * beta_l tanh(u / beta_l) (no squash of u when
    activation_situ_linear_beta is absent or 0). Spec 4.6.

Booleans (latent_moe_use_norm, mla_use_output_gate, use_full_rank_gate, moe_renormalize) are taken
by value, as the HF code does; the C engine takes them by presence (spec 12.5), which agrees on every
K3 config that writes them true. Everything unchanged is Kimi-Linear's: the KDA recurrence token by
token (l2 eps 1e-6 inside the sqrt; the C engine uses 1e-12, invisible unless |q| is tiny), the
sigmoid router with its selection-only bias, experts expanded into matrices, MLA with per-head keys
and values rebuilt from the latents (not the absorbed form).
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kimi_linear_model import (KDA, MLA, Expert, KimiLinearConfig, MoE, RMSNorm, SwiGLU,  # noqa: E402
                               linear, load_tensors, silu)


# ----------------------------------------------------------------------------------------------
# configuration


_K3_KEYS = ("attn_res_block_size", "routed_expert_hidden_size", "q_lora_rank", "mla_use_output_gate",
            "activation_situ_beta", "activation_situ_linear_beta")
_K3_LAC_KEYS = ("use_full_rank_gate", "gate_lower_bound")


def is_k3(cfg):
    """Whether a config (a container's `config`, flattened with `_outer`, or an HF config.json with
    `text_config`) is Kimi K3 rather than Kimi-Linear. The outer `architectures` is the only place K3
    names itself (text_config says KimiLinearForCausalLM); failing that, any K3 feature set to a
    truthy value (Kimi-Linear's own config writes q_lora_rank: null)."""
    outer = cfg.get("_outer") or (cfg if "text_config" in cfg else {})
    arch = outer.get("architectures") or cfg.get("architectures") or []
    if any("KimiK3" in str(a) for a in arch) or outer.get("model_type") == "kimi_k3":
        return True
    t = cfg.get("text_config", cfg)
    lac = t.get("linear_attn_config") or {}
    return (t.get("hidden_act") == "situ" or any(t.get(k) for k in _K3_KEYS)
            or any(lac.get(k) for k in _K3_LAC_KEYS))


class KimiK3Config(KimiLinearConfig):
    """Kimi-Linear's hyper-parameters plus K3's options (each off when its key is absent)."""

    def __init__(self, cfg):
        super().__init__(cfg)
        c = self.raw
        lac = c.get("linear_attn_config") or {}
        self.attn_res_block = int(c.get("attn_res_block_size") or 0)
        self.latent = int(c.get("routed_expert_hidden_size") or 0)
        self.latent_norm = self.latent > 0 and bool(c.get("latent_moe_use_norm", False))
        self.expert_in = self.latent or self.hidden_size              # the width a routed expert reads
        self.act = c.get("hidden_act", "silu")
        if self.act not in ("silu", "situ"):
            raise ValueError(f"hidden_act {self.act!r}: only silu and situ are known")
        # absent beta: 1.0, the C engine's default (the release always writes 4.0)
        self.situ_beta = float(c.get("activation_situ_beta") or 1.0)
        self.situ_linear_beta = float(c.get("activation_situ_linear_beta") or 0.0)   # 0: no squash
        self.q_lora_rank = int(c.get("q_lora_rank") or 0)
        self.mla_output_gate = bool(c.get("mla_use_output_gate", False))
        self.full_rank_gate = bool(lac.get("use_full_rank_gate", False))
        lb = lac.get("gate_lower_bound")
        # as the C engine: only a negative bound selects the bounded gate
        self.gate_lower_bound = float(lb) if lb is not None and float(lb) < 0 else None

    def glu(self, g, u):
        """The gated activation of every FFN: silu(g) * u, or SiTU."""
        if self.act == "silu":
            return silu(g) * u
        return situ(g, u, self.situ_beta, self.situ_linear_beta)


def situ(g, u, beta, linear_beta):
    """SiTU-GLU: beta tanh(g / beta) sigmoid(g) * (linear_beta tanh(u / linear_beta) or u)."""
    a = beta * torch.tanh(g / beta) * torch.sigmoid(g)
    if linear_beta:
        u = linear_beta * torch.tanh(u / linear_beta)
    return a * u


# ----------------------------------------------------------------------------------------------
# FFNs with the configured activation


class GLU(SwiGLU):
    """gate_proj / up_proj / down_proj with the config's activation (dense FFN, shared experts)."""

    def __init__(self, h, inter, c):
        super().__init__(h, inter)
        self.glu = c.glu

    def forward(self, x):
        return self.down_proj(self.glu(self.gate_proj(x), self.up_proj(x)))


class GLUExpert(Expert):
    """A routed expert (w1 gate, w3 up, w2 down) with the config's activation."""

    def __init__(self, h, inter, c):
        super().__init__(h, inter)
        self.glu = c.glu

    def forward(self, x):
        return self.w2(self.glu(self.w1(x), self.w3(x)))


# ----------------------------------------------------------------------------------------------
# attention


class K3KDA(KDA):
    """Kimi-Linear's KDA with K3's full-rank output gate and bounded decay gate (spec 4.3)."""

    def __init__(self, c):
        super().__init__(c)
        H, C = c.hidden_size, self.NH * self.D
        self.lower_bound = c.gate_lower_bound
        self.full_rank_gate = c.full_rank_gate
        if self.full_rank_gate:
            del self.g_a_proj, self.g_b_proj
            self.g_proj = linear(H, C)
        # one value per head; the stored tensor may be longer (K3: [128] for 96 heads) or
        # Kimi-Linear's [1, 1, NH, 1] -- load_k3_tensors takes the first NH values either way
        self.A_log = nn.Parameter(torch.zeros(self.NH))

    def decay(self, h):
        B, T, _ = h.shape
        z = (self.f_b_proj(self.f_a_proj(h)) + self.dt_bias).view(B, T, self.NH, self.D)
        a = torch.exp(self.A_log).view(1, 1, self.NH, 1)               # indexed by head, never by channel
        if self.lower_bound is None:
            return -a * F.softplus(z, threshold=20)
        return self.lower_bound * torch.sigmoid(a * z)                  # in (lb, 0): a different function, not a clamp

    def output_gate(self, h):
        if not self.full_rank_gate:
            return super().output_gate(h)
        B, T, _ = h.shape
        return self.g_proj(h).view(B, T, self.NH, self.D)


class K3MLA(MLA):
    """Kimi-Linear's NoPE MLA with K3's compressed query and sigmoid output gate (spec 4.4)."""

    def __init__(self, c):
        super().__init__(c)
        H, NH = c.hidden_size, c.mla_heads
        if c.q_lora_rank:
            del self.q_proj
            self.q_a_proj = linear(H, c.q_lora_rank)
            self.q_a_layernorm = RMSNorm(c.q_lora_rank, c.rms_norm_eps)      # the C engine's eps (HF: 1e-6)
            self.q_b_proj = linear(c.q_lora_rank, NH * (c.qk_nope + c.qk_rope))
        self.q_lora = bool(c.q_lora_rank)
        if c.mla_output_gate:
            self.g_proj = linear(H, NH * c.v_head)
        self.output_gated = c.mla_output_gate

    def query(self, h):
        if not self.q_lora:
            return super().query(h)
        return self.q_b_proj(self.q_a_layernorm(self.q_a_proj(h)))

    def gate_output(self, o, h):
        return o * torch.sigmoid(self.g_proj(h)) if self.output_gated else o


# ----------------------------------------------------------------------------------------------
# mixture of experts


class K3MoE(MoE):
    """Kimi-Linear's routing; experts on a latent projection of h, SiTU activations (spec 4.5)."""

    def __init__(self, c):
        super().__init__(c)
        H, E, I, W = c.hidden_size, c.num_experts, c.moe_inter, c.expert_in
        self.experts = nn.ModuleList(GLUExpert(W, I, c) for _ in range(E))
        self.shared_experts = GLU(H, I * c.shared, c) if c.shared > 0 else None
        self.latent = bool(c.latent)
        if self.latent:
            self.routed_expert_down_proj = linear(H, W)
            if c.latent_norm:
                self.routed_expert_norm = RMSNorm(W, c.rms_norm_eps)
            self.routed_expert_up_proj = linear(W, H)
        self.latent_norm = c.latent_norm

    def forward(self, h):
        shape = h.shape
        x = h.reshape(-1, shape[-1])
        chosen, w, scores = self.route(x)                  # the router reads the full h
        if self.latent:
            y, counts = self.combine(self.routed_expert_down_proj(x), chosen, w)
            if self.latent_norm:
                y = self.routed_expert_norm(y)             # scale-invariant: w's scale matters only through eps
            y = self.routed_expert_up_proj(y)
        else:
            y, counts = self.combine(x, chosen, w)
        if self.shared_experts is not None:
            y = y + self.shared_experts(x)                 # on the full h, not the latent
        self.stats = {"counts": counts, "chosen": chosen, "scores": scores, "tokens": x.shape[0]}
        return y.view(shape)


# ----------------------------------------------------------------------------------------------
# the model


def attn_res(cands, norm, proj):
    """AttnRes over candidates v_0..v_n (each [B, T, H]): softmax_i(proj . RMSNorm(v_i)) mixing the
    un-normalised v_i, per token. `norm` is an RMSNorm, `proj` a Linear(H, 1) (spec 4.2)."""
    V = torch.stack(cands, 0)                              # [n + 1, B, T, H]
    p = torch.softmax(proj(norm(V)).squeeze(-1), 0)       # [n + 1, B, T]
    return (p.unsqueeze(-1) * V).sum(0)


class K3DecoderLayer(nn.Module):
    def __init__(self, c, L):
        super().__init__()
        H = c.hidden_size
        self.input_layernorm = RMSNorm(H, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(H, c.rms_norm_eps)
        self.self_attn = K3KDA(c) if c.is_kda(L) else K3MLA(c)
        if c.is_moe(L):
            self.block_sparse_moe = K3MoE(c)
        else:
            self.mlp = GLU(H, c.intermediate_size, c)
        if c.attn_res_block:
            self.self_attention_res_norm = RMSNorm(H, c.rms_norm_eps)
            self.self_attention_res_proj = linear(H, 1)
            self.mlp_res_norm = RMSNorm(H, c.rms_norm_eps)
            self.mlp_res_proj = linear(H, 1)

    def attn(self, x, mode, chunk):
        return self.self_attn(self.input_layernorm(x), mode, chunk)

    def ffn(self, x):
        h = self.post_attention_layernorm(x)
        return self.block_sparse_moe(h) if hasattr(self, "block_sparse_moe") else self.mlp(h)


class KimiK3Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        H = c.hidden_size
        self.embed_tokens = nn.Embedding(c.vocab_size, H)
        self.layers = nn.ModuleList(K3DecoderLayer(c, L) for L in range(c.num_hidden_layers))
        self.norm = RMSNorm(H, c.rms_norm_eps)
        if c.attn_res_block:
            self.output_attn_res_norm = RMSNorm(H, c.rms_norm_eps)
            self.output_attn_res_proj = linear(H, 1)


class KimiK3ForCausalLM(nn.Module):
    """The text model. Parameter names are the HF names without the `language_model.` prefix."""

    def __init__(self, cfg, dtype=torch.float64):
        super().__init__()
        self.config = cfg if isinstance(cfg, KimiK3Config) else KimiK3Config(cfg)
        self.model = KimiK3Model(self.config)
        self.lm_head = linear(self.config.hidden_size, self.config.vocab_size)
        self.to(dtype)

    def hidden(self, ids, mode="loop", chunk=32, trace=None):
        """Final-norm output [B, T, H]. `trace`, a list, receives x after every layer (the C
        engine's WASTE_DUMP_HIDDEN: with AttnRes the partial sum of the current block)."""
        m, Bk = self.model, self.config.attn_res_block
        x = m.embed_tokens(ids)
        blocks = []                                        # per-token block summaries; the embedding is block 0
        for L, layer in enumerate(m.layers):
            if not Bk:                                     # a plain residual stream
                x = x + layer.attn(x, mode, chunk)
                x = x + layer.ffn(x)
            else:
                ps = x                                     # the running partial sum of the current block
                if blocks:
                    x = attn_res(blocks + [ps], layer.self_attention_res_norm, layer.self_attention_res_proj)
                if L % Bk == 0:                            # a new block starts: the finished one is a candidate
                    blocks.append(ps)
                    ps = None
                a = layer.attn(x, mode, chunk)
                ps = a if ps is None else ps + a           # at layer 0 the embedding is not added in
                x = attn_res(blocks + [ps], layer.mlp_res_norm, layer.mlp_res_proj)
                ps = ps + layer.ffn(x)
                x = ps
            if trace is not None:
                trace.append(x)
        if Bk:
            x = attn_res(blocks + [x], m.output_attn_res_norm, m.output_attn_res_proj)
        return m.norm(x)

    def forward(self, ids, mode="loop", chunk=32, trace=None):
        """ids [B, T] (or [T]) -> logits [B, T, vocab] (or [T, vocab]). mode "loop" runs KDA token
        by token (the reference), "chunk" in chunks of `chunk` (equal up to rounding)."""
        squeeze = ids.dim() == 1
        if squeeze:
            ids = ids.unsqueeze(0)
        logits = self.lm_head(self.hidden(ids, mode, chunk, trace))
        return logits[0] if squeeze else logits

    def moe_layers(self):
        return [(L, l.block_sparse_moe) for L, l in enumerate(self.model.layers) if hasattr(l, "block_sparse_moe")]


# ----------------------------------------------------------------------------------------------
# loading tensors by name


class _K3Source:
    """A view of a tensor source (kimi_linear_ref.py's Container or Checkpoint) that gives each KDA
    layer's A_log as its first NH values, whatever length it is stored at."""

    def __init__(self, src, heads):
        self.src, self.heads = src, heads

    def has(self, name):
        return self.src.has(name)

    def tensor(self, name):
        w = self.src.tensor(name)
        if name.endswith(".self_attn.A_log"):
            w = w.reshape(-1)
            if w.numel() < self.heads:
                raise ValueError(f"{name}: {w.numel()} values for {self.heads} heads")
            w = w[:self.heads]
        return w

    def expert(self, layer, e, hidden, inter):
        return self.src.expert(layer, e, hidden, inter)


def load_k3_tensors(model, src):
    """Fill `model` from `src` by name (kimi_linear_model.load_tensors: experts read at the latent
    width, since the config's expert_in is the latent)."""
    return load_tensors(model, _K3Source(src, model.config.kda_heads))


# ----------------------------------------------------------------------------------------------
# self-test: /usr/bin/python3 tools/reference/kimi_k3_model.py


def _self_test():
    from kimi_linear_model import KimiLinearForCausalLM
    torch.set_num_threads(1)
    dt = torch.float64
    gen = torch.Generator().manual_seed(0)
    worst = 0.0

    def check(what, a, b, tol=1e-12):
        nonlocal worst
        d = ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()
        worst = max(worst, d)
        print(f"{'ok  ' if d <= tol else 'FAIL'} {what}: max rel diff {d:.2e}")
        if d > tol:
            raise SystemExit(1)

    def randomize(model):
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.normal_(0, 0.3 if p.dim() > 1 else 0.5, generator=gen)
                if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                    p.add_(1.0)
            for _, moe in model.moe_layers():
                moe.gate.e_score_correction_bias.uniform_(-0.1, 0.1, generator=gen)

    kl = {"vocab_size": 91, "hidden_size": 40, "num_hidden_layers": 5, "intermediate_size": 56,
          "moe_intermediate_size": 24, "num_experts": 9, "num_experts_per_token": 3, "num_shared_experts": 2,
          "first_k_dense_replace": 1, "routed_scaling_factor": 1.7, "num_attention_heads": 2, "kv_lora_rank": 16,
          "qk_nope_head_dim": 8, "qk_rope_head_dim": 5, "v_head_dim": 12, "rms_norm_eps": 1e-5, "q_lora_rank": None,
          "linear_attn_config": {"num_heads": 3, "head_dim": 8, "short_conv_kernel_size": 3,
                                 "kda_layers": [1, 2, 3, 5], "full_attn_layers": [4]}}
    ids = torch.randint(0, 91, (2, 23), generator=gen)

    # 1. with every K3 option off, the K3 module is the Kimi-Linear module (same parameter names)
    assert not is_k3(kl)
    a = KimiLinearForCausalLM(kl, dtype=dt)
    randomize(a)
    b = KimiK3ForCausalLM(kl, dtype=dt)
    state = {k: (v.reshape(-1) if k.endswith("A_log") else v) for k, v in a.state_dict().items()}
    b.load_state_dict(state)
    with torch.no_grad():
        check("K3 module with K3 off == Kimi-Linear module", b(ids), a(ids, mode="loop"))

    # 2. a K3-shaped model: chunked KDA == loop, a batch row == the row alone, MoE dispatch == per token
    k3 = dict(kl, hidden_act="situ", activation_situ_beta=4.0, activation_situ_linear_beta=25.0,
              attn_res_block_size=2, routed_expert_hidden_size=16, latent_moe_use_norm=True,
              routed_scaling_factor=1.0, q_lora_rank=12, mla_use_output_gate=True,
              linear_attn_config=dict(kl["linear_attn_config"], use_full_rank_gate=True, gate_lower_bound=-5.0))
    assert is_k3(k3) and is_k3({"architectures": ["KimiK3ForConditionalGeneration"], "text_config": kl})
    assert is_k3(dict(kl, _outer={"architectures": ["KimiK3ForConditionalGeneration"]}))
    m = KimiK3ForCausalLM(k3, dtype=dt)
    randomize(m)
    with torch.no_grad():
        ref = m(ids)
        check("K3 chunk(8) vs loop", m(ids, mode="chunk", chunk=8), ref, 1e-10)
        check("K3 batch row vs alone", m(ids[1]), ref[1])

        # 3. pieces against the formulas written out per element
        g = torch.linspace(-30, 30, 512, dtype=dt)
        u = torch.linspace(40, -40, 512, dtype=dt)
        want = torch.tensor([4 * torch.tanh(x / 4) * torch.sigmoid(x) * 25 * torch.tanh(y / 25) for x, y in zip(g, u)])
        check("SiTU 4/25", situ(g, u, 4.0, 25.0), want)
        want = torch.tensor([4 * torch.tanh(x / 4) * torch.sigmoid(x) * y for x, y in zip(g, u)])
        check("SiTU without linear beta", situ(g, u, 4.0, 0.0), want)
        kda = m.model.layers[0].self_attn
        h = torch.randn(1, 3, 40, dtype=dt, generator=gen)
        z = (h @ kda.f_a_proj.weight.t() @ kda.f_b_proj.weight.t() + kda.dt_bias).view(1, 3, 3, 8)
        want = torch.stack([-5 / (1 + torch.exp(-torch.exp(kda.A_log[hd]) * z[:, :, hd])) for hd in range(3)], 2)
        check("bounded decay gate, A_log per head", kda.decay(h), want)
        cands = [torch.randn(1, 2, 40, dtype=dt, generator=gen) for _ in range(4)]
        lay = m.model.layers[1]
        s = torch.stack([(c / torch.sqrt((c * c).mean(-1, keepdim=True) + 1e-5) * lay.mlp_res_norm.weight
                          * lay.mlp_res_proj.weight[0]).sum(-1) for c in cands])
        check("AttnRes", attn_res(cands, lay.mlp_res_norm, lay.mlp_res_proj),
              sum(p.unsqueeze(-1) * c for p, c in zip(torch.softmax(s, 0), cands)))

        # 4. the latent MoE token by token, the way the spec writes it
        moe = m.model.layers[2].block_sparse_moe
        x = torch.randn(7, 40, dtype=dt, generator=gen)
        out = torch.zeros_like(x)
        for t in range(7):
            sc = torch.sigmoid(moe.gate.weight @ x[t])
            sel = sc + moe.gate.e_score_correction_bias
            chosen = sorted(range(9), key=lambda e: (-sel[e].item(), e))[:3]
            w = sc[chosen] / (sc[chosen].sum() + 1e-20)
            xl = moe.routed_expert_down_proj.weight @ x[t]
            yl = sum(w[j] * moe.experts[e](xl) for j, e in enumerate(chosen))
            out[t] = moe.routed_expert_up_proj(moe.routed_expert_norm(yl)) + moe.shared_experts(x[t])
        check("latent MoE vs per token", moe(x), out)

    # 5. A_log read per head from a longer stored tensor
    class Src:
        def has(self, name):
            return True

        def tensor(self, name):
            return torch.arange(8, dtype=dt) + 1

    assert _K3Source(Src(), 3).tensor("model.layers.0.self_attn.A_log").tolist() == [1.0, 2.0, 3.0]
    print(f"all passed (worst {worst:.2e})")


if __name__ == "__main__":
    _self_test()
