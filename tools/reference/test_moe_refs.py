#!/usr/bin/python3
"""Self-checks of moe_families_model.py / moe_ref.py (dev only; not part of npm test).

    /usr/bin/python3 tools/reference/test_moe_refs.py [--keep DIR]

Writes tiny random HuggingFace checkpoints for qwen3_moe, mixtral, olmoe, glm4_moe and gpt_oss
(hidden 64, 3 layers, a handful of experts, vocab 300) with each family's exact release tensor names
and config keys -- spelled out here by hand, independently of moe_families_model.expected_tensors --
in BF16, F16 and F32 (mixtral sharded with an index; gpt-oss experts in MXFP4 and, as a second
checkpoint, the same values as dense bf16 parameters), then checks:
  * the reference runs on each (and through the CLI), reads only tensors it should, and the names
    the generator wrote are exactly the names the reference expects;
  * every family's logits == a second forward pass written in numpy straight from the generator's
    arrays (per-head loops, RoPE as complex rotations, every expert evaluated and weighted by a dense
    routing matrix; only the RoPE frequencies are shared), and each MoE layer alone likewise;
  * prefill of n tokens == the last row of running each prefix 1..n;
  * attention computed per head and per query with loops == the batched form (GQA, windows, sinks);
  * gpt-oss sinks of -inf == attention without sinks (function and whole model);
  * a sliding window larger than the sequence == full attention (function and model), a window of
    1 attends only to the token itself, and the gpt-oss window does change the logits;
  * glm4 group-limited routing with n_group 1 (or every group kept) == plain top-k; a case where
    HF's 0.0 masking picks an expert from a dropped group where -inf masking would not;
  * mixtral routing == every expert evaluated, weighted by the renormalised top-2 softmax;
  * YaRN with factor 1 == default RoPE; partial rotary with factor 1 == full rotary; RoPE == a
    complex-number rotation; gpt-oss YaRN band structure and attention factor;
  * MXFP4 decoding of hand-made bytes; MXFP4 checkpoint == dense checkpoint.
Prints each check; exits 1 on the first failure.
"""
import argparse
import cmath
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import moe_families_model as M  # noqa: E402

DT = torch.float64
VOCAB, HID, LAYERS = 300, 64, 3
WORST = [0.0]
COUNT = [0]


def check(what, a, b, tol=1e-12):
    a, b = torch.as_tensor(a, dtype=DT), torch.as_tensor(b, dtype=DT)
    if a.shape != b.shape:
        raise SystemExit(f"FAIL {what}: shapes {tuple(a.shape)} vs {tuple(b.shape)}")
    d = ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item() if a.numel() else 0.0
    WORST[0] = max(WORST[0], d)
    COUNT[0] += 1
    print(f"{'ok  ' if d <= tol else 'FAIL'} {what}: max rel diff {d:.2e}")
    if not d <= tol:
        raise SystemExit(1)


def truth(what, cond, detail=""):
    COUNT[0] += 1
    print(f"{'ok  ' if cond else 'FAIL'} {what}{': ' + detail if detail else ''}")
    if not cond:
        raise SystemExit(1)


# ----------------------------------------------------------------------------------------------
# writing safetensors


def to_bytes(a, dtype):
    a = np.ascontiguousarray(a)
    if dtype == "F32":
        return a.astype("<f4").tobytes()
    if dtype == "F16":
        return a.astype("<f2").tobytes()
    if dtype == "BF16":                       # round to nearest even from float32
        bits = a.astype("<f4").view("<u4").astype(np.uint64)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return bits.astype("<u2").tobytes()
    if dtype == "U8":
        return a.astype(np.uint8).tobytes()
    raise ValueError(dtype)


def write_safetensors(path, tensors):
    """tensors: {name: (dtype, numpy array)}"""
    header, blobs, off = {}, [], 0
    for name, (dt, a) in tensors.items():
        raw = to_bytes(a, dt)
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_checkpoint(d, cfg, tensors, shards=1):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    names = list(tensors)
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), tensors)
        return
    per = (len(names) + shards - 1) // shards
    wmap = {}
    for s in range(shards):
        fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s * per:(s + 1) * per]}
        write_safetensors(os.path.join(d, fn), part)
        wmap.update({n: fn for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wmap}, f, indent=1)


# ----------------------------------------------------------------------------------------------
# tiny checkpoints, one per family, with the release names spelled out


class Gen:
    def __init__(self, seed, dtype):
        self.rng = np.random.default_rng(seed)
        self.dtype = dtype
        self.t = {}

    def mat(self, name, *shape, std=0.2, dtype=None):
        self.t[name] = (dtype or self.dtype, self.rng.normal(0, std, shape).astype(np.float32))

    def norm(self, name, n):
        self.t[name] = (self.dtype, (1 + self.rng.normal(0, 0.2, n)).astype(np.float32))

    def common(self, tie=False):
        self.mat("model.embed_tokens.weight", VOCAB, HID, std=1.0)
        self.norm("model.norm.weight", HID)
        if not tie:
            self.mat("lm_head.weight", VOCAB, HID, std=0.2)

    def layer_norms(self, L):
        self.norm(f"model.layers.{L}.input_layernorm.weight", HID)
        self.norm(f"model.layers.{L}.post_attention_layernorm.weight", HID)

    def attn(self, L, heads, kv, hd, qkv_bias=False, o_bias=False):
        p = f"model.layers.{L}.self_attn."
        self.mat(p + "q_proj.weight", heads * hd, HID)
        self.mat(p + "k_proj.weight", kv * hd, HID)
        self.mat(p + "v_proj.weight", kv * hd, HID)
        self.mat(p + "o_proj.weight", HID, heads * hd)
        if qkv_bias:
            for n, rows in (("q", heads * hd), ("k", kv * hd), ("v", kv * hd)):
                self.mat(p + f"{n}_proj.bias", rows, std=0.3)
        if o_bias:
            self.mat(p + "o_proj.bias", HID, std=0.3)

    def swiglu(self, p, inter, names=("gate_proj", "up_proj", "down_proj")):
        self.mat(p + names[0] + ".weight", inter, HID)
        self.mat(p + names[1] + ".weight", inter, HID)
        self.mat(p + names[2] + ".weight", HID, inter)


def base_cfg(model_type, **kw):
    cfg = {"model_type": model_type, "vocab_size": VOCAB, "hidden_size": HID, "num_hidden_layers": LAYERS,
           "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096}
    cfg.update(kw)
    return cfg


def make_qwen3(d, variant=False):
    """Release-like: per-head q/k norms, untied, norm_topk_prob, layer 1 dense via mlp_only_layers.
    Variant: attention_bias, tied, decoder_sparse_step 2, sliding window 3, YaRN via rope_parameters."""
    g = Gen(1 if not variant else 11, "BF16" if not variant else "F32")
    hd, E = 24, 6
    if not variant:
        cfg = base_cfg("qwen3_moe", head_dim=hd, intermediate_size=48, moe_intermediate_size=20, num_experts=E,
                       num_experts_per_tok=3, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
                       rms_norm_eps=1e-6, rope_theta=1000000.0, rope_scaling=None, attention_bias=False,
                       tie_word_embeddings=False, use_sliding_window=False, sliding_window=None, max_window_layers=3)
        moe = [True, False, True]
    else:
        cfg = base_cfg("qwen3_moe", head_dim=hd, intermediate_size=48, moe_intermediate_size=20, num_experts=E,
                       num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=2, mlp_only_layers=[],
                       rms_norm_eps=1e-6, attention_bias=True, tie_word_embeddings=True,
                       use_sliding_window=True, sliding_window=3, max_position_embeddings=64,
                       rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                        "original_max_position_embeddings": 16})
        moe = [False, True, False]
    g.common(tie=variant)
    for L in range(LAYERS):
        g.layer_norms(L)
        g.attn(L, 4, 2, hd, qkv_bias=variant, o_bias=variant)
        g.norm(f"model.layers.{L}.self_attn.q_norm.weight", hd)
        g.norm(f"model.layers.{L}.self_attn.k_norm.weight", hd)
        p = f"model.layers.{L}.mlp."
        if moe[L]:
            g.mat(p + "gate.weight", E, HID, std=0.5)
            for e in range(E):
                g.swiglu(p + f"experts.{e}.", 20)
        else:
            g.swiglu(p, 48)
    write_checkpoint(d, cfg, g.t)
    return g.t


def make_mixtral(d):
    g = Gen(2, "F16")
    E = 6
    cfg = base_cfg("mixtral", intermediate_size=40, num_local_experts=E, num_experts_per_tok=2, rms_norm_eps=1e-5,
                   rope_theta=1000000.0, sliding_window=None, tie_word_embeddings=False)
    g.common()
    for L in range(LAYERS):
        g.layer_norms(L)
        g.attn(L, 4, 2, 16)
        p = f"model.layers.{L}.block_sparse_moe."
        g.mat(p + "gate.weight", E, HID, std=0.5)
        for e in range(E):
            g.swiglu(p + f"experts.{e}.", 40, names=("w1", "w3", "w2"))
    write_checkpoint(d, cfg, g.t, shards=3)
    return g.t


def make_olmoe(d):
    g = Gen(3, "F32")
    E = 8
    cfg = base_cfg("olmoe", intermediate_size=24, num_experts=E, num_experts_per_tok=3, norm_topk_prob=False,
                   clip_qkv=2.0, rms_norm_eps=1e-5, rope_theta=10000.0, attention_bias=False, tie_word_embeddings=False)
    g.common()
    for L in range(LAYERS):
        g.layer_norms(L)
        g.attn(L, 4, 2, 16)
        g.norm(f"model.layers.{L}.self_attn.q_norm.weight", 4 * 16)       # the whole q projection
        g.norm(f"model.layers.{L}.self_attn.k_norm.weight", 2 * 16)       # the whole k projection
        p = f"model.layers.{L}.mlp."
        g.mat(p + "gate.weight", E, HID, std=0.5)
        for e in range(E):
            g.swiglu(p + f"experts.{e}.", 24)
    write_checkpoint(d, cfg, g.t)
    return g.t


def make_glm4(d):
    g = Gen(4, "BF16")
    E, hd = 8, 32
    cfg = base_cfg("glm4_moe", head_dim=hd, partial_rotary_factor=0.5, intermediate_size=56, moe_intermediate_size=20,
                   n_routed_experts=E, num_experts_per_tok=3, n_group=4, topk_group=2, routed_scaling_factor=2.5,
                   norm_topk_prob=True, n_shared_experts=1, first_k_dense_replace=1, num_nextn_predict_layers=1,
                   use_qk_norm=True, attention_bias=True, rms_norm_eps=1e-5, rope_theta=1000000.0,
                   tie_word_embeddings=False)
    g.common()
    for L in range(LAYERS + 1):                  # layer 3 is the MTP layer the reference must skip
        g.layer_norms(L)
        g.attn(L, 4, 2, hd, qkv_bias=True)
        g.norm(f"model.layers.{L}.self_attn.q_norm.weight", hd)
        g.norm(f"model.layers.{L}.self_attn.k_norm.weight", hd)
        p = f"model.layers.{L}.mlp."
        if L == 0:
            g.swiglu(p, 56)
            continue
        g.mat(p + "gate.weight", E, HID, std=0.5)
        g.mat(p + "gate.e_score_correction_bias", E, std=0.3, dtype="F32")
        for e in range(E):
            g.swiglu(p + f"experts.{e}.", 20)
        g.swiglu(p + "shared_experts.", 20)
    m = f"model.layers.{LAYERS}."
    g.norm(m + "enorm.weight", HID)
    g.norm(m + "hnorm.weight", HID)
    g.mat(m + "eh_proj.weight", HID, 2 * HID)
    g.norm(m + "shared_head.norm.weight", HID)
    g.mat(m + "shared_head.head.weight", VOCAB, HID)
    write_checkpoint(d, cfg, g.t)
    return g.t


def mxfp4_values(nib, scale):
    """Independent decode for the generator: sign bit 3, magnitude table, 2^(scale - 127)."""
    mag = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)[nib & 7]
    return np.where(nib >= 8, -mag, mag) * np.exp2(scale.astype(np.float64) - 127)[..., None]


def make_gpt_oss(d, dense=False, sinks_value=None):
    """MXFP4 experts (release form) or, with dense, the same values as bf16 [E, H, 2I] / [E, I, H]."""
    g = Gen(5, "BF16")
    E, I, hd = 4, 32, 16
    cfg = base_cfg("gpt_oss", head_dim=hd, intermediate_size=I, num_local_experts=E, num_experts_per_tok=2,
                   experts_per_token=2, sliding_window=4, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                   rms_norm_eps=1e-5, rope_theta=150000.0, swiglu_limit=1.5, attention_bias=True, tie_word_embeddings=False,
                   max_position_embeddings=131072, initial_context_length=4096,
                   rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                 "truncate": False, "original_max_position_embeddings": 4096},
                   quantization_config={"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]})
    g.common()
    for L in range(LAYERS):
        g.layer_norms(L)
        g.attn(L, 4, 2, hd, qkv_bias=True, o_bias=True)
        p = f"model.layers.{L}."
        g.mat(p + "self_attn.sinks", 4, std=1.0)
        if sinks_value is not None:                 # same random stream either way
            g.t[p + "self_attn.sinks"] = ("F32", np.full(4, sinks_value, np.float32))
        g.mat(p + "mlp.router.weight", E, HID, std=0.5)
        g.mat(p + "mlp.router.bias", E, std=0.3)
        q = p + "mlp.experts."
        for t, rows, cols in (("gate_up_proj", 2 * I, HID), ("down_proj", HID, I)):
            nib = g.rng.integers(0, 16, (E, rows, cols // 32, 32))
            scale = g.rng.integers(122, 126, (E, rows, cols // 32))
            if dense:                               # [E, rows=out, cols=in] -> HF's [E, in, out]
                vals = mxfp4_values(nib, scale).reshape(E, rows, cols).transpose(0, 2, 1)
                g.t[q + t] = ("BF16", vals.astype(np.float32))
            else:
                packed = (nib[..., 0::2] | (nib[..., 1::2] << 4)).astype(np.uint8)
                g.t[q + t + "_blocks"] = ("U8", packed)
                g.t[q + t + "_scales"] = ("U8", scale.astype(np.uint8))
            g.mat(q + t + "_bias", E, rows, std=0.3)
    write_checkpoint(d, cfg, g.t)
    return g.t


# ----------------------------------------------------------------------------------------------
# independent pieces for the checks


def attention_loops(q, k, v, scale, window=None, sinks=None):
    """Per head, per query, with plain Python sums over keys."""
    T, H, D = q.shape
    KV = k.shape[1]
    out = torch.zeros(T, H, D, dtype=DT)
    for h in range(H):
        kv = h * KV // H
        for t in range(T):
            keys = [j for j in range(t + 1) if window is None or t - j < window]
            logits = [float(q[t, h] @ k[j, kv]) * scale for j in keys]
            extra = [float(sinks[h])] if sinks is not None else []
            m = max(logits + extra)
            ws = [math.exp(x - m) for x in logits]
            z = sum(ws) + sum(math.exp(x - m) for x in extra)
            for wj, j in zip(ws, keys):
                out[t, h] += (wj / z) * v[j, kv]
    return out


def rope_complex(x, theta, R, positions):
    """Rotate pairs (i, i + R/2) of the first R dims as complex numbers by pos * theta^(-2i/R)."""
    out = x.clone()
    for t, pos in enumerate(positions):
        for h in range(x.shape[1]):
            for i in range(R // 2):
                z = complex(float(x[t, h, i]), float(x[t, h, i + R // 2])) * cmath.exp(1j * pos * theta ** (-2 * i / R))
                out[t, h, i], out[t, h, i + R // 2] = z.real, z.imag
    return out


def plain_topk(scores, k):
    """Top-k by repeated argmax (ties to the lower id), row by row."""
    res = []
    for row in scores.tolist():
        chosen = []
        for _ in range(k):
            chosen.append(max((e for e in range(len(row)) if e not in chosen), key=lambda e: (row[e], -e)))
        res.append(sorted(chosen))
    return res


def stored(entry):
    """The float64 values a generator entry holds once written in its dtype (numpy only)."""
    dt, a = entry
    raw = to_bytes(a, dt)
    if dt == "BF16":
        v = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view("<f4")
    else:
        v = np.frombuffer(raw, {"F32": "<f4", "F16": "<f2"}[dt])
    return v.astype(np.float64).reshape(a.shape)


def np_silu(z):
    return z / (1 + np.exp(-z))


def np_topk(row, k):
    return sorted(sorted(range(len(row)), key=lambda e: (-row[e], e))[:k])


def brute_ffn(fam, t, cfg, L, x):
    """A MoE layer with numpy from the generator's arrays: EVERY expert evaluated on every token,
    weighted by a dense [tokens, experts] routing matrix (zero for the experts not chosen)."""
    S = lambda n: stored(t[n])  # noqa: E731
    p = f"model.layers.{L}.mlp."
    N = x.shape[0]
    k = cfg["num_experts_per_tok"]
    if fam == "gpt_oss":
        E = cfg["num_local_experts"]
        logits = x @ S(p + "router.weight").T + S(p + "router.bias")
        W = np.zeros((N, E))
        for t_ in range(N):
            top = np_topk(logits[t_], k)
            z = np.exp(logits[t_, top] - logits[t_, top].max())
            W[t_, top] = z / z.sum()
        lim, out = cfg["swiglu_limit"], np.zeros_like(x)
        for e in range(E):
            gu = x @ S(p + "experts.gate_up_proj")[e] + S(p + "experts.gate_up_proj_bias")[e]   # [N, 2I]
            gate, up = np.minimum(gu[:, 0::2], lim), np.clip(gu[:, 1::2], -lim, lim)
            h = gate / (1 + np.exp(-1.702 * gate)) * (up + 1)
            out += W[:, e:e + 1] * (h @ S(p + "experts.down_proj")[e] + S(p + "experts.down_proj_bias")[e])
        return out
    if fam == "mixtral":
        p = f"model.layers.{L}.block_sparse_moe."
    E = cfg.get("num_experts") or cfg.get("n_routed_experts") or cfg.get("num_local_experts")
    logits = x @ S(p + "gate.weight").T
    W = np.zeros((N, E))
    if fam == "glm4_moe":
        s = 1 / (1 + np.exp(-logits))
        c = s + S(p + "gate.e_score_correction_bias")
        G, TG = cfg["n_group"], cfg["topk_group"]
        for t_ in range(N):
            groups = c[t_].reshape(G, E // G)
            gsc = [sum(sorted(g_)[-2:]) for g_ in groups]
            kept = np_topk(gsc, TG)
            cc = np.array([c[t_, e] if e // (E // G) in kept else 0.0 for e in range(E)])   # HF: 0.0
            top = np_topk(cc, k)
            W[t_, top] = s[t_, top] / (s[t_, top].sum() + 1e-20) * cfg["routed_scaling_factor"]
    else:
        pr = np.exp(logits - logits.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        for t_ in range(N):
            top = np_topk(pr[t_], k)
            renorm = fam == "mixtral" or cfg.get("norm_topk_prob")
            W[t_, top] = pr[t_, top] / (pr[t_, top].sum() if renorm else 1.0)
    out = np.zeros_like(x)
    gn, un, dn = ("w1", "w3", "w2") if fam == "mixtral" else ("gate_proj", "up_proj", "down_proj")

    def mlp(q):
        return (np_silu(x @ S(q + gn + ".weight").T) * (x @ S(q + un + ".weight").T)) @ S(q + dn + ".weight").T
    for e in range(E):
        out += W[:, e:e + 1] * mlp(f"{p}experts.{e}.")
    if fam == "glm4_moe":
        out += mlp(p + "shared_experts.")
    return out


def np_forward(fam, t, cfg, ids):
    """The whole model in numpy from the generator's arrays: per-head loops for attention, RoPE as
    complex rotations of (i, i + R/2) pairs, dense layers found by their tensors, brute_ffn for MoE.
    Only the RoPE frequencies and attention factor come from the module (rope_setup, checked apart)."""
    S = lambda n: stored(t[n])  # noqa: E731
    has = lambda n: n in t  # noqa: E731
    eps = cfg["rms_norm_eps"]

    def rms(z, w):
        return z / np.sqrt((z * z).mean(-1, keepdims=True) + eps) * w

    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or HID // H
    inv, af, R, _, _ = M.rope_setup(cfg, hd, fam)
    inv = inv.numpy()
    T = len(ids)
    x = S("model.embed_tokens.weight")[ids]
    for L in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{L}."
        a = p + "self_attn."
        h = rms(x, S(p + "input_layernorm.weight"))
        q, k, v = ((h @ S(a + n + "_proj.weight").T + (S(a + n + "_proj.bias") if has(a + n + "_proj.bias") else 0))
                   for n in "qkv")
        if fam == "olmoe":
            q, k = rms(q, S(a + "q_norm.weight")), rms(k, S(a + "k_norm.weight"))
            c = cfg.get("clip_qkv")
            if c:
                q, k, v = np.clip(q, -c, c), np.clip(k, -c, c), np.clip(v, -c, c)
        q, k, v = q.reshape(T, H, hd), k.reshape(T, KV, hd), v.reshape(T, KV, hd)
        if fam != "olmoe" and has(a + "q_norm.weight"):
            q, k = rms(q, S(a + "q_norm.weight")), rms(k, S(a + "k_norm.weight"))
        for z in (q, k):
            for pos in range(T):
                rot = np.exp(1j * pos * inv) * af
                cz = (z[pos, :, :R // 2] + 1j * z[pos, :, R // 2:R]) * rot
                z[pos, :, :R // 2], z[pos, :, R // 2:R] = cz.real, cz.imag
                z[pos, :, R:] *= 1.0
        if fam == "gpt_oss":
            window = cfg["sliding_window"] if cfg["layer_types"][L] == "sliding_attention" else None
        elif fam == "qwen3_moe":
            window = cfg.get("sliding_window") if cfg.get("use_sliding_window") else None
        else:
            window = cfg.get("sliding_window")
        o = np.zeros((T, H, hd))
        for hh in range(H):
            g_ = hh // (H // KV)
            for i in range(T):
                js = [j for j in range(i + 1) if window is None or i - j < window]
                sc = np.array([q[i, hh] @ k[j, g_] for j in js]) / math.sqrt(hd)
                if has(a + "sinks"):
                    sc = np.append(sc, S(a + "sinks")[hh])
                pr = np.exp(sc - sc.max())
                pr = pr[:len(js)] / pr.sum()
                o[i, hh] = sum(pr_ * v[j, g_] for pr_, j in zip(pr, js))
        y = o.reshape(T, H * hd) @ S(a + "o_proj.weight").T
        x = x + y + (S(a + "o_proj.bias") if has(a + "o_proj.bias") else 0)
        h = rms(x, S(p + "post_attention_layernorm.weight"))
        if has(p + "mlp.gate_proj.weight"):
            x = x + (np_silu(h @ S(p + "mlp.gate_proj.weight").T) * (h @ S(p + "mlp.up_proj.weight").T)) @ S(p + "mlp.down_proj.weight").T
        else:
            x = x + brute_ffn(fam, t, cfg, L, h)
    x = rms(x, S("model.norm.weight"))
    return x @ S("lm_head.weight" if has("lm_head.weight") else "model.embed_tokens.weight").T


# ----------------------------------------------------------------------------------------------
# the checks


class Recorder(M.Checkpoint):
    """A Checkpoint that remembers which tensors were read."""

    def __init__(self, path):
        super().__init__(path)
        self.read = set()

    def _bytes(self, name, start=0, count=None):
        self.read.add(name)
        return super()._bytes(name, start, count)


def run_family(name, d, written, ids):
    ck = Recorder(d)
    model = M.Model(ck)
    missing, extra = model.check_names()
    truth(f"{name}: names the reference expects == names the generator wrote", not missing and not extra,
          f"missing {missing[:3]}, unexpected {extra[:3]}" if missing or extra else f"{len(written)} tensors")
    with torch.no_grad():
        full = model.forward(ids)
    truth(f"{name}: logits [{len(ids)}, {VOCAB}] finite", tuple(full.shape) == (len(ids), VOCAB) and bool(torch.isfinite(full).all()))
    bad = [n for n in ck.read if M.mtp_layer(n, model.c) or n not in written]
    truth(f"{name}: read {len(ck.read)} tensors, none outside the model (MTP layers skipped)", not bad, str(bad[:3]))
    with torch.no_grad():
        rows = torch.stack([model.forward(ids[:n])[-1] for n in range(1, len(ids) + 1)])
    check(f"{name}: prefill of {len(ids)} == last rows of prefixes 1..{len(ids)}", full, rows)
    return model, full


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", help="write the checkpoints here and keep them")
    args = ap.parse_args()
    torch.set_num_threads(1)
    root = args.keep or tempfile.mkdtemp(prefix="moe-refs-")
    os.makedirs(root, exist_ok=True)
    gen = torch.Generator().manual_seed(0)
    ids = [5, 17, 299, 0, 42, 42, 7, 123, 64]
    try:
        # -- attention, RoPE and routing pieces ---------------------------------------------------
        for (T, H, KV, D, window, sinks) in [(7, 4, 2, 8, None, False), (9, 6, 3, 5, 3, False), (8, 4, 1, 6, None, True),
                                             (9, 4, 2, 8, 4, True), (6, 2, 2, 4, 1, False)]:
            q, k, v = (torch.randn(T, n, D, dtype=DT, generator=gen) for n in (H, KV, KV))
            s = torch.randn(H, dtype=DT, generator=gen) * 2 if sinks else None
            check(f"attention batched == loops (T {T}, {H}/{KV} heads, window {window}, sinks {sinks})",
                  M.attention(q, k, v, D ** -0.5, window, s), attention_loops(q, k, v, D ** -0.5, window, s))
        q, k, v = (torch.randn(8, n, 6, dtype=DT, generator=gen) for n in (4, 2, 2))
        full = M.attention(q, k, v, 0.4)
        check("sinks of -inf == no sinks", M.attention(q, k, v, 0.4, None, torch.full((4,), float("-inf"), dtype=DT)), full)
        check("window 9 > 8 tokens == full attention", M.attention(q, k, v, 0.4, 9), full)
        check("window 8 == 8 tokens == full attention", M.attention(q, k, v, 0.4, 8), full)
        check("window 1 == each token's own value", M.attention(q, k, v, 0.4, 1), v.repeat_interleave(2, dim=1))
        truth("window 3 < 8 tokens differs from full attention", (M.attention(q, k, v, 0.4, 3) - full).abs().max() > 1e-3)

        x = torch.randn(5, 3, 32, dtype=DT, generator=gen)
        for R in (32, 16):
            inv, af, rd, _, _ = M.rope_setup({"rope_theta": 5000.0, "partial_rotary_factor": R / 32}, 32, "qwen3_moe")
            cos, sin = M.rope_tables(inv, af, 5)
            check(f"RoPE (rotary dim {R} of 32) == complex rotation of pairs (i, i+{R // 2})",
                  M.apply_rope(x, cos, sin), rope_complex(x, 5000.0, R, range(5)))
        glm_full = M.rope_setup({"rope_theta": 1e6, "partial_rotary_factor": 1.0}, 32, "glm4_moe")
        plain = M.rope_setup({"rope_theta": 1e6}, 32, "mixtral")
        truth("partial_rotary_factor 1 rotates all 32 dims, absent (glm4_moe) rotates 16",
              glm_full[2] == 32 and M.rope_setup({"rope_theta": 1e6}, 32, "glm4_moe")[2] == 16)
        check("partial rotary factor 1 == full rotary (glm4_moe vs mixtral tables)", glm_full[0], plain[0], 0)
        y1 = M.rope_setup({"rope_scaling": {"rope_type": "yarn", "factor": 1.0, "original_max_position_embeddings": 4096,
                                            "truncate": False}, "rope_theta": 150000.0}, 64, "gpt_oss")
        y0 = M.rope_setup({"rope_scaling": {"rope_type": "default"}, "rope_theta": 150000.0}, 64, "gpt_oss")
        check("YaRN factor 1 == default RoPE (inv_freq)", y1[0], y0[0])
        truth("YaRN factor 1 attention factor == 1", y1[1] == 1.0 and y0[1] == 1.0)
        lin1 = M.rope_setup({"rope_scaling": {"rope_type": "linear", "factor": 1.0}}, 64, "olmoe")
        check("linear factor 1 == default RoPE", lin1[0], M.rope_setup({}, 64, "olmoe")[0])
        rel = M.rope_setup({"max_position_embeddings": 131072}, 64, "gpt_oss")      # the class default: YaRN 32
        base = 1.0 / 150000.0 ** (torch.arange(0, 64, 2, dtype=DT) / 64)
        ratio = rel[0] / base
        lo = 64 * math.log(4096 / (32 * 2 * math.pi)) / (2 * math.log(150000))
        hi = 64 * math.log(4096 / (1 * 2 * math.pi)) / (2 * math.log(150000))
        truth(f"gpt-oss YaRN: dims below {lo:.2f} keep theta^-2i/d, above {hi:.2f} are /32, between strictly between",
              bool((ratio[:int(lo) + 1] == 1).all()) and bool(torch.allclose(ratio[math.ceil(hi):], torch.tensor(1 / 32, dtype=DT)))
              and bool(((ratio[int(lo) + 1:math.ceil(hi)] < 1) & (ratio[int(lo) + 1:math.ceil(hi)] > 1 / 32)).all()))
        truth("gpt-oss YaRN attention factor == 0.1 ln 32 + 1", abs(rel[1] - (0.1 * math.log(32) + 1)) < 1e-15, f"{rel[1]:.6f}")
        trunc = M.rope_setup({"max_position_embeddings": 131072, "rope_scaling": dict(M._GPT_OSS_ROPE, truncate=True)}, 64, "gpt_oss")
        truth("YaRN truncate true (whole dims) differs from truncate false", (trunc[0] - rel[0]).abs().max() > 1e-6)

        # glm4 routing
        for (E, G, TG, K) in [(8, 1, 1, 3), (16, 4, 4, 5), (12, 3, 3, 2)]:
            logits = torch.randn(20, E, dtype=DT, generator=gen) * 2
            bias = torch.randn(E, dtype=DT, generator=gen) * 0.3
            ids_g, w_g = M.route_sigmoid_group(logits, bias, K, G, TG, True, 2.5)
            want = plain_topk(torch.sigmoid(logits) + bias, K)
            truth(f"glm4 routing n_group {G}, topk_group {TG} (all kept) == plain top-{K} of the biased scores",
                  [sorted(r) for r in ids_g.tolist()] == want)
            s = torch.sigmoid(logits).gather(1, ids_g)
            check(f"glm4 weights == unbiased sigmoid / sum * 2.5 (n_group {G})", w_g, s / s.sum(-1, keepdim=True) * 2.5)
        logits = torch.tensor([[3.0, 2.9, 0.0, -0.1, 2.0, 1.0, -3.0, -3.0]], dtype=DT)
        ids_g, _ = M.route_sigmoid_group(logits, torch.zeros(8, dtype=DT), 2, 4, 1, True, 1.0)
        truth("glm4 group limit binds: topk_group 1 of 4 picks both experts of the best group",
              sorted(ids_g[0].tolist()) == [0, 1] and plain_topk(torch.sigmoid(logits), 2)[0] == [0, 1])
        logits = torch.tensor([[0.0, 3.0, 2.5, 2.4, -1.0, -1.0, 2.6, -2.0]], dtype=DT)
        ids_g, _ = M.route_sigmoid_group(logits, torch.zeros(8, dtype=DT), 2, 4, 1, True, 1.0)
        truth("glm4 group limit changes the choice (group 1 wins: experts 2,3; plain top-2 would be 1,6)",
              sorted(ids_g[0].tolist()) == [2, 3] and plain_topk(torch.sigmoid(logits), 2)[0] == [1, 6],
              f"group-limited {sorted(ids_g[0].tolist())}")
        # HF's 0.0 masking: every biased score negative -> masked (dropped) experts outrank kept ones
        logits = torch.tensor([[2.0, 1.0, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0]], dtype=DT)
        ids_g, _ = M.route_sigmoid_group(logits, torch.full((8,), -2.0, dtype=DT), 3, 4, 1, True, 1.0)
        chosen = ids_g[0].tolist()
        truth("glm4 0.0 masking (HF): with every biased score < 0 the kept group's experts 0, 1 lose to the "
              "dropped groups' zeros (-inf masking, DeepSeek/llama.cpp, would pick 0, 1 first)", sorted(chosen) == [2, 3, 4],
              f"HF picks {sorted(chosen)}")

        # MXFP4 by hand: byte 0x2F = low nibble 0xF (-6), high 0x2 (+1.0); scale 128 -> x2
        blk = torch.zeros(1, 16, dtype=torch.uint8)
        blk[0, 0], blk[0, 15] = 0x2F, 0x98
        dec = M.mxfp4_decode(blk, torch.tensor([128], dtype=torch.uint8))
        want = torch.zeros(32, dtype=DT)
        want[0], want[1], want[30], want[31] = -12.0, 2.0, -0.0, -1.0
        check("MXFP4 hand-made block (0x2F -> -12, 2; 0x98 -> -0, -1 at scale 2^1)", dec, want, 0)
        truth("MXFP4 scale 0xFF refused", _raises(lambda: M.mxfp4_decode(blk, torch.tensor([255], dtype=torch.uint8))))

        # -- the five families --------------------------------------------------------------------
        fams = {}
        for name, make in (("qwen3_moe", make_qwen3), ("mixtral", make_mixtral), ("olmoe", make_olmoe),
                           ("glm4_moe", make_glm4), ("gpt_oss", make_gpt_oss)):
            d = os.path.join(root, name)
            written = make(d)
            fams[name] = (d, written) + run_family(name, d, written, ids)
        d = os.path.join(root, "qwen3_moe_variant")
        w = make_qwen3(d, variant=True)
        vmodel, _ = run_family("qwen3_moe variant (bias, tied, sparse step 2, window 3, YaRN)", d, w, ids)
        truth("qwen3 MoE layers: mlp_only_layers [1] -> MoE, dense, MoE; decoder_sparse_step 2 -> dense, MoE, dense",
              fams["qwen3_moe"][2].c.moe == [True, False, True] and vmodel.c.moe == [False, True, False])
        truth("qwen3 variant: tied embeddings need no lm_head; rope_parameters YaRN read",
              vmodel.c.tie and vmodel.c.rope_type == "yarn" and vmodel.c.attn_factor > 1)

        # every family's whole model == the numpy forward on the generator's arrays
        for name in ("qwen3_moe", "mixtral", "olmoe", "glm4_moe"):
            d_f, written, _, logits = fams[name]
            cfg = json.load(open(os.path.join(d_f, "config.json")))
            check(f"{name}: logits == numpy forward (loops, complex RoPE, all experts)", logits,
                  torch.from_numpy(np_forward(name, written, cfg, ids)), 1e-10)
        d_f = os.path.join(root, "qwen3_moe_variant")
        check("qwen3_moe variant: logits == numpy forward", vmodel.forward(ids),
              torch.from_numpy(np_forward("qwen3_moe", w, json.load(open(os.path.join(d_f, "config.json"))), ids)), 1e-10)

        # every family's MoE layer == numpy over all experts from the generator's arrays
        for name, L in (("qwen3_moe", 2), ("olmoe", 1), ("glm4_moe", 2)):
            d_f, written, mod, _ = fams[name]
            cfg = json.load(open(os.path.join(d_f, "config.json")))
            xs = torch.randn(13, HID, dtype=DT, generator=gen)
            check(f"{name} layer {L} MoE == numpy, every expert weighted by the routing", mod.ffn(L, xs),
                  torch.from_numpy(brute_ffn(name, written, cfg, L, xs.numpy())))

        # mixtral: dispatch == every expert evaluated, weighted by the renormalised top-2 softmax
        mx = fams["mixtral"][2]
        xs = torch.randn(11, HID, dtype=DT, generator=gen)
        p = "model.layers.1.block_sparse_moe."
        probs = torch.softmax(xs @ mx.w(p + "gate.weight").t(), -1)
        dense_w = torch.zeros_like(probs)
        for t in range(11):
            top = plain_topk(probs[t:t + 1], 2)[0]
            dense_w[t, top] = probs[t, top] / probs[t, top].sum()
        brute = sum(dense_w[:, e:e + 1] * M.swiglu(xs, mx.w(f"{p}experts.{e}.w1.weight"), mx.w(f"{p}experts.{e}.w3.weight"),
                                                   mx.w(f"{p}experts.{e}.w2.weight")) for e in range(6))
        check("mixtral MoE == all experts weighted by the renormalised top-2 softmax", mx.ffn(1, xs), brute)

        # gpt-oss
        d_g, _, gm, g_logits = fams["gpt_oss"]
        d = os.path.join(root, "gpt_oss_dense")
        w = make_gpt_oss(d, dense=True)
        dm, d_logits = run_family("gpt_oss dense bf16 experts", d, w, ids)
        check("gpt_oss: MXFP4 checkpoint == the same values as dense [E, H, 2I] parameters", d_logits, g_logits)
        check("gpt_oss: logits (MXFP4 checkpoint) == numpy forward on the dense arrays", g_logits,
              torch.from_numpy(np_forward("gpt_oss", w, json.load(open(os.path.join(d, "config.json"))), ids)), 1e-10)
        xs = torch.randn(13, HID, dtype=DT, generator=gen)
        check("gpt_oss layer 1 MoE == numpy on the dense arrays (gate = columns 0::2, up = 1::2, clamps, +1)",
              gm.ffn(1, xs), torch.from_numpy(brute_ffn("gpt_oss", w, json.load(open(os.path.join(d, "config.json"))), 1, xs.numpy())))
        clamped = []
        with torch.no_grad():
            xs = torch.randn(40, HID, dtype=DT, generator=gen)
            e0 = gm.gptoss_expert(0, 0)
            gate = xs @ e0["gate"].t() + e0["gate_bias"]
            up = xs @ e0["up"].t() + e0["up_bias"]
            clamped = [(gate > 1.5).float().mean().item(), (up.abs() > 1.5).float().mean().item()]
        truth("gpt_oss: swiglu_limit 1.5 clamps some gate (above) and up (both sides) values",
              0 < clamped[0] < 1 and 0 < clamped[1] < 1, f"gate {clamped[0]:.2f}, up {clamped[1]:.2f} of values clamped")
        d = os.path.join(root, "gpt_oss_nosink")
        make_gpt_oss(d, sinks_value=float("-inf"))
        gm.disable_sinks = True
        with torch.no_grad():
            ns = gm.forward(ids)
        gm.disable_sinks = False
        with torch.no_grad():
            check("gpt_oss: sinks of -inf in the checkpoint == the model without sinks", M.Model(M.Checkpoint(d)).forward(ids), ns)
        truth("gpt_oss: the learned sinks change the logits", (ns - g_logits).abs().max() > 1e-3)
        cfg = json.load(open(os.path.join(d_g, "config.json")))
        all_full = dict(cfg, layer_types=["full_attention"] * 3)
        wide = dict(cfg, sliding_window=1000)
        with torch.no_grad():
            f_full = M.Model(M.Checkpoint(d_g), all_full).forward(ids)
            f_wide = M.Model(M.Checkpoint(d_g), wide).forward(ids)
            f_y1 = M.Model(M.Checkpoint(d_g), dict(cfg, rope_scaling=dict(cfg["rope_scaling"], factor=1.0))).forward(ids)
            f_def = M.Model(M.Checkpoint(d_g), dict(cfg, rope_scaling={"rope_type": "default"})).forward(ids)
        check("gpt_oss: sliding window 1000 > 9 tokens == every layer full attention", f_wide, f_full)
        truth("gpt_oss: the window of 4 over 9 tokens changes the logits", (f_full - g_logits).abs().max() > 1e-3)
        check("gpt_oss: YaRN factor 1 == default RoPE (whole model)", f_y1, f_def)

        # glm4: partial rotary factor 1 == a full-rotary model on the same weights
        d_l, _, lm, _ = fams["glm4_moe"]
        cfg = json.load(open(os.path.join(d_l, "config.json")))
        with torch.no_grad():
            p1 = M.Model(M.Checkpoint(d_l), dict(cfg, partial_rotary_factor=1.0))
            truth("glm4 partial_rotary_factor 1 rotates the whole head", p1.c.rot_dim == 32 and lm.c.rot_dim == 16)
            p1_logits = p1.forward(ids)
            p1.c.inv_freq, p1.c.attn_factor, _, _, _ = M.rope_setup({"rope_theta": 1e6}, 32, "mixtral")
            check("glm4 partial factor 1 == full rotary tables of another family", p1.forward(ids), p1_logits)

        # the CLI on one checkpoint
        out = os.path.join(root, "logits.bin")
        hid = os.path.join(root, "hidden.bin")
        rout = os.path.join(root, "routing.json")
        d_m = fams["mixtral"][0]
        r = subprocess.run([sys.executable, os.path.join(HERE, "moe_ref.py"), d_m, "--ids", ",".join(map(str, ids)),
                            "--out", out, "--hidden", hid, "--routing", rout], capture_output=True, text=True)
        truth("CLI moe_ref.py runs", r.returncode == 0, r.stderr.strip()[-300:])
        got = np.fromfile(out, dtype="<f4").reshape(len(ids), VOCAB)
        check("CLI logits (float32 [positions][vocab]) == the module's", torch.from_numpy(got.astype(np.float64)),
              fams["mixtral"][3].to(torch.float32).to(DT), 0)
        truth("CLI --hidden is [layers][positions][hidden] float32", os.path.getsize(hid) == 4 * LAYERS * len(ids) * HID)
        rj = json.load(open(rout))
        truth("CLI --routing lists the 2 experts of every position for each layer",
              len(rj["layers"]) == LAYERS and all(len(r2) == 2 for lay in rj["layers"] for r2 in lay["experts"]))
        r = subprocess.run([sys.executable, os.path.join(HERE, "moe_ref.py"), fams["glm4_moe"][0], "--names"],
                           capture_output=True, text=True)
        truth("CLI --names lists the needed tensors (glm4: no MTP layer)", r.returncode == 0 and "model.layers.3." not in r.stdout
              and "model.layers.2.mlp.gate.e_score_correction_bias" in r.stdout)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{COUNT[0]} passed, 0 failed (worst relative difference {WORST[0]:.2e})")


def _raises(f):
    try:
        f()
    except Exception:
        return True
    return False


if __name__ == "__main__":
    main()
