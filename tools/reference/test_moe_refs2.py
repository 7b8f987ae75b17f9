#!/usr/bin/python3
"""Self-checks of deepseek_model.py and qwen_next_model.py (+ moe_ref.py on them; dev only, not npm test).

    /usr/bin/python3 tools/reference/test_moe_refs2.py [--keep DIR]

Writes tiny random HuggingFace checkpoints (hidden 64, 3-4 layers, 8 experts, vocab 300) for
deepseek_v3 (FP8 E4M3 with non-square 16 x 24 scale blocks mixed with BF16 tensors, sharded, an MTP
layer; and its dequantized twin in F64), kimi_k2 (plain q_proj, n_group 1, YaRN betas 1/1, biases),
qwen3_next (interleaved qkvz/ba, a dense layer via mlp_only_layers, per-expert tensors, `mtp.*`) and
qwen3_5_moe (text_config, model.language_model., stacked experts, `model.visual.*`, `mtp.*`; and a
per-expert twin, and the qwen3_5_moe_text form), with each family's release tensor names and config
keys spelled out here by hand, independently of the modules' own name lists, then checks:
  * FP8 E4M3: all 254 finite bytes == a decoder built from float32 bit patterns, hand values,
    NaN bytes refused; block dequantization of a hand-made 5 x 7 tensor in 2 x 3 blocks (partial
    edges); wrong scale shapes, a missing scale_inv and other quant methods refused;
  * MLA: absorbed == naive (random tensors and whole models, prefill and token-by-token decode
    against the latent cache); interleaved RoPE == complex rotation of adjacent pairs, and gives
    HF's dot products (permute + rotate_half); YaRN betas change the tables and the logits;
    mscale^2; group-limited routing with n_group 1 (or every group kept) == plain top-k, HF's 0.0
    masking vs -inf;
  * DeltaNet: chunked == token by token (outputs and states, chunk sizes 1..T+, initial state,
    strong decay); running a prefix then continuing from its state == the whole; the causal conv
    with a carried state == the whole; whole models chunked == recurrent, decode == prefill;
  * every family: the names the generator wrote == the names the module expects; only model
    tensors are read (MTP, vision skipped); logits == a numpy forward written from the generator's
    arrays (loops per head and query, RoPE as complex numbers, the recurrence as
    S = (I - beta k k^T) e^g S + beta k v^T, every expert weighted by a dense routing matrix);
    prefill == prefixes; FP8 == its dequantized twin; stacked == per-expert experts;
  * mutations: each fact (zero-centred norms, the gated norm's weight and silu(z), the attention
    output gate and its per-head split, the qkvz/ba grouping, the value-to-key head mapping, the
    shared-expert gate, the conv tap order, renormalisation, the partial rotary factor; interleaved
    RoPE, mscale^2, the correction bias, the group limit, norm_topk_prob, the FP8 scales) is changed
    one at a time and the numpy comparison must then fail;
  * DeepSeek-V3.2 refused by name; the CLI on both module families.
Prints each check; exits 1 on the first failure.
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import deepseek_model as DS  # noqa: E402
import moe_families_model as M  # noqa: E402
import qwen_next_model as QN  # noqa: E402
import test_moe_refs as T  # noqa: E402  (check/truth counters, stored(), np_topk, Recorder)

DT = torch.float64
VOCAB, HID = 300, 64
check, truth = T.check, T.truth


def differs(what, a, b, tol=1e-6):
    """A mutation must move the result away from the reference by more than tol (relative)."""
    d = ((torch.as_tensor(a) - torch.as_tensor(b)).abs().max() / torch.as_tensor(b).abs().max()).item()
    truth(f"mutation {what}: the numpy comparison fails", d > tol, f"max rel diff {d:.2e}")


def _raises(f, text=None):
    try:
        f()
    except Exception as e:  # noqa: BLE001
        return text is None or text in str(e)
    return False


# ----------------------------------------------------------------------------------------------
# FP8 E4M3, independently of the module: float32 bit patterns


def np_e4m3(codes):
    """uint8 codes -> float64 via float32 bits (normal: exponent + 120 in the f32 field, mantissa
    shifted up 20 bits); subnormals m * 2^-9; NaN for 0x7F/0xFF."""
    c = np.asarray(codes).astype(np.uint32)
    sign, e, m = c >> 7, (c >> 3) & 15, c & 7
    bits = (sign << 31) | ((e + 120) << 23) | (m << 20)
    v = bits.astype(np.uint32).view(np.float32).astype(np.float64)
    v = np.where(e == 0, np.where(sign == 1, -1.0, 1.0) * m * 2.0 ** -9, v)
    return np.where((e == 15) & (m == 7), np.nan, v)


FINITE_CODES = np.array([b for b in range(256) if b & 0x7F != 0x7F], dtype=np.uint8)
FINITE_VALUES = np_e4m3(FINITE_CODES)


def quantize_e4m3(y):
    """Nearest finite E4M3 code of each value (ties: whichever argmin meets first)."""
    flat = y.reshape(-1)
    idx = np.concatenate([np.abs(FINITE_VALUES[None, :] - flat[i:i + 512, None]).argmin(1) for i in range(0, flat.size, 512)])
    return FINITE_CODES[idx].reshape(y.shape)


def to_bytes(a, dtype):
    if dtype == "F64":
        return np.ascontiguousarray(a).astype("<f8").tobytes()
    if dtype == "F8_E4M3":
        return np.ascontiguousarray(a).astype(np.uint8).tobytes()
    return T.to_bytes(a, dtype)


def write_safetensors(path, tensors):
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
    per = -(-len(names) // shards)
    wmap = {}
    for s in range(shards):
        fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s * per:(s + 1) * per]}
        write_safetensors(os.path.join(d, fn), part)
        wmap.update({n: fn for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wmap}, f, indent=1)


def value(t, name, block=(128, 128)):
    """The float64 array a generator entry stands for once written (FP8: code * block scale)."""
    dt, a = t[name]
    if dt == "F64":
        return a.astype(np.float64)
    if dt == "F8_E4M3":
        s = value(t, name + "_scale_inv")
        R, C = a.shape
        full = np.repeat(np.repeat(s, block[0], 0), block[1], 1)[:R, :C]
        return np_e4m3(a) * full
    return T.stored((dt, a))


class Gen:
    """Random tensors by name; `fp8` names are written as E4M3 + an F32 scale_inv per block."""

    def __init__(self, seed, dtype, block=None, fp8=()):
        self.rng = np.random.default_rng(seed)
        self.dtype, self.block, self.fp8 = dtype, block, fp8
        self.t = {}

    def mat(self, name, *shape, std=0.2, dtype=None):
        x = self.rng.normal(0, std, shape)
        if self.block and len(shape) == 2 and any(f in name for f in self.fp8) and dtype is None:
            b0, b1 = self.block
            R, C = shape
            s = np.zeros((-(-R // b0), -(-C // b1)), dtype=np.float32)
            for i in range(s.shape[0]):
                for j in range(s.shape[1]):
                    s[i, j] = np.abs(x[i * b0:(i + 1) * b0, j * b1:(j + 1) * b1]).max() / 448.0
            full = np.repeat(np.repeat(s.astype(np.float64), b0, 0), b1, 1)[:R, :C]
            self.t[name] = ("F8_E4M3", quantize_e4m3(x / full))
            self.t[name + "_scale_inv"] = ("F32", s)
        else:
            self.t[name] = (dtype or self.dtype, x.astype(np.float32))

    def norm(self, name, n, center=1.0, dtype=None):
        self.t[name] = (dtype or self.dtype, (center + self.rng.normal(0, 0.2, n)).astype(np.float32))

    def swiglu(self, p, inter, hidden=HID):
        self.mat(p + "gate_proj.weight", inter, hidden)
        self.mat(p + "up_proj.weight", inter, hidden)
        self.mat(p + "down_proj.weight", hidden, inter)


# ----------------------------------------------------------------------------------------------
# DeepSeek-V3 / Kimi K2 checkpoints


DS_DIMS = dict(heads=4, dn=8, dr=16, dv=12, r=16, q_lora=24, E=8, moe_inter=20, inter=48)
FP8_PARTS = ("q_a_proj", "q_b_proj", "q_proj", "kv_a_proj_with_mqa", "o_proj", "gate_proj", "up_proj", "down_proj",
             "layers.2.self_attn.kv_b_proj")   # layer 1's kv_b_proj stays BF16: the checkpoint mixes both


def ds_config(kind):
    d = DS_DIMS
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "vocab_size": VOCAB, "hidden_size": HID, "num_hidden_layers": 3,
           "num_attention_heads": d["heads"], "num_key_value_heads": d["heads"], "kv_lora_rank": d["r"],
           "qk_nope_head_dim": d["dn"], "qk_rope_head_dim": d["dr"], "v_head_dim": d["dv"],
           "intermediate_size": d["inter"], "moe_intermediate_size": d["moe_inter"], "n_routed_experts": d["E"],
           "num_experts_per_tok": 3, "n_shared_experts": 1, "first_k_dense_replace": 1, "moe_layer_freq": 1,
           "norm_topk_prob": True, "scoring_func": "sigmoid", "topk_method": "noaux_tc", "hidden_act": "silu",
           "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "attention_bias": False}
    if kind == "deepseek_v3":
        cfg.update(model_type="deepseek_v3", q_lora_rank=d["q_lora"], n_group=4, topk_group=2, routed_scaling_factor=2.5,
                   num_nextn_predict_layers=1, max_position_embeddings=163840, rope_theta=10000,
                   rope_scaling={"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                                 "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096},
                   quantization_config={"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                        "weight_block_size": [16, 24]})
    else:   # kimi_k2 shape, plus the code paths no release uses: plain q_proj, biases, mscale != mscale_all_dim
        cfg.update(model_type="kimi_k2", q_lora_rank=None, n_group=1, topk_group=1, routed_scaling_factor=2.827,
                   num_nextn_predict_layers=0, max_position_embeddings=131072, rope_theta=50000.0, attention_bias=True,
                   rope_scaling={"type": "yarn", "factor": 32.0, "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0,
                                 "mscale_all_dim": 0.8, "original_max_position_embeddings": 4096})
    return cfg


def make_deepseek(d, kind, twin_of=None):
    """kind deepseek_v3 (FP8 mix, sharded, MTP layer 3) or kimi_k2 (BF16). twin_of: write those
    entries' values as F64 (the dequantized twin) instead of generating."""
    cfg = ds_config(kind)
    if twin_of is not None:
        t = {n: ("F64", value(twin_of, n, tuple(cfg["quantization_config"]["weight_block_size"])))
             for n in twin_of if not n.endswith("_scale_inv")}
        cfg = dict(cfg)
        del cfg["quantization_config"]
        write_checkpoint(d, cfg, t)
        return t
    g = Gen(21 if kind == "deepseek_v3" else 22, "BF16", *(((16, 24), FP8_PARTS) if kind == "deepseek_v3" else ()))
    D = DS_DIMS
    H, qk = D["heads"], D["dn"] + D["dr"]
    g.mat("model.embed_tokens.weight", VOCAB, HID, std=1.0)
    g.norm("model.norm.weight", HID)
    g.mat("lm_head.weight", VOCAB, HID)
    layers = 4 if kind == "deepseek_v3" else 3                  # layer 3: DeepSeek's MTP layer
    for L in range(layers):
        p = f"model.layers.{L}."
        a = p + "self_attn."
        g.norm(p + "input_layernorm.weight", HID)
        g.norm(p + "post_attention_layernorm.weight", HID)
        if cfg["q_lora_rank"]:
            g.mat(a + "q_a_proj.weight", D["q_lora"], HID)
            g.norm(a + "q_a_layernorm.weight", D["q_lora"])
            g.mat(a + "q_b_proj.weight", H * qk, D["q_lora"])
        else:
            g.mat(a + "q_proj.weight", H * qk, HID)
        g.mat(a + "kv_a_proj_with_mqa.weight", D["r"] + D["dr"], HID)
        g.norm(a + "kv_a_layernorm.weight", D["r"])
        g.mat(a + "kv_b_proj.weight", H * (D["dn"] + D["dv"]), D["r"])
        g.mat(a + "o_proj.weight", HID, H * D["dv"])
        if cfg["attention_bias"]:                                 # never on q_proj, q_b_proj, kv_b_proj
            if cfg["q_lora_rank"]:
                g.mat(a + "q_a_proj.bias", D["q_lora"], std=0.3)
            g.mat(a + "kv_a_proj_with_mqa.bias", D["r"] + D["dr"], std=0.3)
            g.mat(a + "o_proj.bias", HID, std=0.3)
        m = p + "mlp."
        if L == 0:
            g.swiglu(m, D["inter"])
        else:
            g.mat(m + "gate.weight", D["E"], HID, std=0.5)
            g.mat(m + "gate.e_score_correction_bias", D["E"], std=0.3, dtype="F32")
            for e in range(D["E"]):
                g.swiglu(m + f"experts.{e}.", D["moe_inter"])
            g.swiglu(m + "shared_experts.", D["moe_inter"])
        if L == 3:
            for n in ("enorm.weight", "hnorm.weight", "shared_head.norm.weight"):
                g.norm(p + n, HID)
            g.mat(p + "eh_proj.weight", HID, 2 * HID)
            g.mat(p + "embed_tokens.weight", VOCAB, HID)
            g.mat(p + "shared_head.head.weight", VOCAB, HID)
    write_checkpoint(d, cfg, g.t, shards=2 if kind == "deepseek_v3" else 1)
    return g.t


def np_rms(z, w, eps):
    return z / np.sqrt((z * z).mean(-1, keepdims=True) + eps) * w


def np_sigmoid(z):
    return 1 / (1 + np.exp(-z))


def np_swiglu(x, S, p):
    return (T.np_silu(x @ S(p + "gate_proj.weight").T) * (x @ S(p + "up_proj.weight").T)) @ S(p + "down_proj.weight").T


def np_deepseek_moe(t, cfg, L, x, S):
    p = f"model.layers.{L}.mlp."
    E, k, G, TG = cfg["n_routed_experts"], cfg["num_experts_per_tok"], cfg["n_group"], cfg["topk_group"]
    s = np_sigmoid(x @ S(p + "gate.weight").T)
    c = s + S(p + "gate.e_score_correction_bias")
    W = np.zeros((x.shape[0], E))
    for i in range(x.shape[0]):
        gsc = [sum(sorted(grp)[-2:]) for grp in c[i].reshape(G, E // G)]
        kept = T.np_topk(gsc, TG)
        cc = np.array([c[i, e] if e // (E // G) in kept else 0.0 for e in range(E)])          # HF: 0.0
        top = T.np_topk(cc, k)
        W[i, top] = s[i, top] / ((s[i, top].sum() + 1e-20) if cfg["norm_topk_prob"] else 1.0) * cfg["routed_scaling_factor"]
    out = sum(W[:, e:e + 1] * np_swiglu(x, S, f"{p}experts.{e}.") for e in range(E))
    return out + np_swiglu(x, S, p + "shared_experts.")


def np_deepseek(t, cfg, ids):
    """DeepSeek-V3 / Kimi K2 in numpy from the generator's arrays."""
    block = tuple((cfg.get("quantization_config") or {}).get("weight_block_size", (128, 128)))
    S = lambda n: value(t, n, block)  # noqa: E731
    has = lambda n: n in t  # noqa: E731
    eps, H = cfg["rms_norm_eps"], cfg["num_attention_heads"]
    dn, dr, dv, r = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"]
    inv, af, _, _, _ = M.rope_setup(cfg, dr, cfg["model_type"])           # the frequencies only
    inv = inv.numpy()
    rs = cfg.get("rope_scaling") or {}
    scale = 1 / math.sqrt(dn + dr)
    if rs.get("mscale_all_dim") and rs["factor"] > 1:
        m = 0.1 * rs["mscale_all_dim"] * math.log(rs["factor"]) + 1
        scale *= m * m

    def rot(vec, pos):                     # adjacent pairs as complex numbers
        z = (vec[0::2] + 1j * vec[1::2]) * np.exp(1j * pos * inv) * af
        out = np.empty_like(vec)
        out[0::2], out[1::2] = z.real, z.imag
        return out

    n = len(ids)
    x = S("model.embed_tokens.weight")[ids]
    for L in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{L}."
        a = p + "self_attn."

        def lin(z, nm):
            return z @ S(a + nm + ".weight").T + (S(a + nm + ".bias") if has(a + nm + ".bias") else 0)
        h = np_rms(x, S(p + "input_layernorm.weight"), eps)
        if has(a + "q_a_proj.weight"):
            q = lin(np_rms(lin(h, "q_a_proj"), S(a + "q_a_layernorm.weight"), 1e-6), "q_b_proj")
        else:
            q = lin(h, "q_proj")
        q = q.reshape(n, H, dn + dr)
        ckv = lin(h, "kv_a_proj_with_mqa")
        lat = np_rms(ckv[:, :r], S(a + "kv_a_layernorm.weight"), 1e-6)
        kpe = [rot(ckv[j, r:], j) for j in range(n)]
        kv = (lat @ S(a + "kv_b_proj.weight").T).reshape(n, H, dn + dv)
        o = np.zeros((n, H, dv))
        for hh in range(H):
            for i in range(n):
                qpe = rot(q[i, hh, dn:], i)
                sc = np.array([q[i, hh, :dn] @ kv[j, hh, :dn] + qpe @ kpe[j] for j in range(i + 1)]) * scale
                pr = np.exp(sc - sc.max())
                pr /= pr.sum()
                o[i, hh] = sum(pr[j] * kv[j, hh, dn:] for j in range(i + 1))
        x = x + lin(o.reshape(n, H * dv), "o_proj")
        h = np_rms(x, S(p + "post_attention_layernorm.weight"), eps)
        x = x + (np_swiglu(h, S, p + "mlp.") if has(p + "mlp.gate_proj.weight") else np_deepseek_moe(t, cfg, L, h, S))
    return np_rms(x, S("model.norm.weight"), eps) @ S("lm_head.weight").T


# ----------------------------------------------------------------------------------------------
# Qwen3-Next / Qwen3.5-MoE checkpoints


QN_DIMS = dict(heads=4, kv=2, D=16, nk=2, nv=4, dk=8, dv=6, K=4, E=8, moe_inter=20, shared=24, inter=40)


def qn_text_config(kind):
    d = QN_DIMS
    cfg = {"vocab_size": VOCAB, "hidden_size": HID, "num_hidden_layers": 4, "num_attention_heads": d["heads"],
           "num_key_value_heads": d["kv"], "head_dim": d["D"], "linear_conv_kernel_dim": d["K"],
           "linear_key_head_dim": d["dk"], "linear_value_head_dim": d["dv"], "linear_num_key_heads": d["nk"],
           "linear_num_value_heads": d["nv"], "num_experts": d["E"], "num_experts_per_tok": 3,
           "moe_intermediate_size": d["moe_inter"], "shared_expert_intermediate_size": d["shared"],
           "rms_norm_eps": 1e-6, "hidden_act": "silu", "attention_bias": False, "max_position_embeddings": 262144}
    if kind == "qwen3_next":
        cfg.update(model_type="qwen3_next", full_attention_interval=4, partial_rotary_factor=0.25, rope_theta=10000.0,
                   rope_scaling=None, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
                   intermediate_size=d["inter"], tie_word_embeddings=False)
    else:
        cfg.update(model_type="qwen3_5_moe_text", attn_output_gate=True,
                   layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                    "mrope_section": [1, 1, 0], "mrope_interleaved": True})
    return cfg


def make_qwen(d, kind, stacked=None, twin_of=None, text_only=False):
    """kind qwen3_next (per-expert, F32) or qwen3_5_moe (nested text_config, stacked experts, BF16).
    twin_of: rewrite those values with the other expert layout (stacked <-> per expert)."""
    tc = qn_text_config(kind)
    q35 = kind == "qwen3_5_moe"
    if q35 and not text_only:
        cfg = {"model_type": "qwen3_5_moe", "architectures": ["Qwen3_5MoeForConditionalGeneration"], "tie_word_embeddings": False,
               "text_config": tc, "vision_config": {"model_type": "qwen3_5_moe", "depth": 1, "hidden_size": 8}}
        pre = "model.language_model."
    else:
        cfg = dict(tc, tie_word_embeddings=False) if q35 else tc
        pre = "model."
    D = QN_DIMS
    E, I = D["E"], D["moe_inter"]
    if twin_of is not None:
        t = {}
        for n, (dt, a) in twin_of.items():
            if ".mlp.experts." not in n:
                t[n.replace("model.language_model.", pre) if not n.startswith("mtp.") and not n.startswith("model.visual.") else n] = (dt, a)
        for L in range(4):
            old = f"model.language_model.layers.{L}.mlp.experts." if "model.language_model.layers.0.input_layernorm.weight" in twin_of \
                else f"model.layers.{L}.mlp.experts."
            new = f"{pre}layers.{L}.mlp.experts."
            if old + "gate_up_proj" in twin_of:                        # stacked -> per expert
                gu, dn = twin_of[old + "gate_up_proj"], twin_of[old + "down_proj"]
                for e in range(E):
                    t[new + f"{e}.gate_proj.weight"] = (gu[0], gu[1][e, :I])
                    t[new + f"{e}.up_proj.weight"] = (gu[0], gu[1][e, I:])
                    t[new + f"{e}.down_proj.weight"] = (dn[0], dn[1][e])
            elif old + "0.gate_proj.weight" in twin_of:                # per expert -> stacked
                dt = twin_of[old + "0.gate_proj.weight"][0]
                t[new + "gate_up_proj"] = (dt, np.stack([np.concatenate([twin_of[f"{old}{e}.gate_proj.weight"][1],
                                                                         twin_of[f"{old}{e}.up_proj.weight"][1]]) for e in range(E)]))
                t[new + "down_proj"] = (dt, np.stack([twin_of[f"{old}{e}.down_proj.weight"][1] for e in range(E)]))
        write_checkpoint(d, cfg, t)
        return t
    if stacked is None:
        stacked = q35
    g = Gen(31 if not q35 else 32, "F32" if not q35 else "BF16")
    nk, nv, dk, dv, K = D["nk"], D["nv"], D["dk"], D["dv"], D["K"]
    H, KV, hd = D["heads"], D["kv"], D["D"]
    g.mat(pre + "embed_tokens.weight", VOCAB, HID, std=1.0)
    g.norm(pre + "norm.weight", HID, center=0.0)                 # zero-centred: stored around 0
    g.mat("lm_head.weight", VOCAB, HID)
    types = ["linear_attention", "linear_attention", "linear_attention", "full_attention"] if not q35 else tc["layer_types"]
    for L in range(4):
        p = f"{pre}layers.{L}."
        g.norm(p + "input_layernorm.weight", HID, center=0.0)
        g.norm(p + "post_attention_layernorm.weight", HID, center=0.0)
        if types[L] == "linear_attention":
            a = p + "linear_attn."
            if not q35:
                g.mat(a + "in_proj_qkvz.weight", 2 * nk * dk + 2 * nv * dv, HID)
                g.mat(a + "in_proj_ba.weight", 2 * nv, HID, std=0.5)
            else:
                g.mat(a + "in_proj_qkv.weight", 2 * nk * dk + nv * dv, HID)
                g.mat(a + "in_proj_z.weight", nv * dv, HID)
                g.mat(a + "in_proj_b.weight", nv, HID, std=0.5)
                g.mat(a + "in_proj_a.weight", nv, HID, std=0.5)
            g.mat(a + "conv1d.weight", 2 * nk * dk + nv * dv, 1, K, std=0.4)
            g.t[a + "dt_bias"] = (g.dtype, g.rng.normal(0, 0.5, nv).astype(np.float32))
            g.t[a + "A_log"] = ("F32", np.log(g.rng.uniform(0.5, 8, nv)).astype(np.float32))
            g.norm(a + "norm.weight", dv)                        # gated norm: stored around 1
            g.mat(a + "out_proj.weight", HID, nv * dv)
        else:
            a = p + "self_attn."
            g.mat(a + "q_proj.weight", 2 * H * hd, HID)
            g.mat(a + "k_proj.weight", KV * hd, HID)
            g.mat(a + "v_proj.weight", KV * hd, HID)
            g.mat(a + "o_proj.weight", HID, H * hd)
            g.norm(a + "q_norm.weight", hd, center=0.0)
            g.norm(a + "k_norm.weight", hd, center=0.0)
        m = p + "mlp."
        if not q35 and L == 1:
            g.swiglu(m, D["inter"])
            continue
        g.mat(m + "gate.weight", E, HID, std=0.5)
        if stacked:
            g.mat(m + "experts.gate_up_proj", E, 2 * I, HID)
            g.mat(m + "experts.down_proj", E, HID, I)
        else:
            for e in range(E):
                g.swiglu(m + f"experts.{e}.", I)
        g.swiglu(m + "shared_expert.", D["shared"])
        g.mat(m + "shared_expert_gate.weight", 1, HID, std=0.5)
    g.mat("mtp.fc.weight", HID, 2 * HID)                        # MTP and vision: never read
    g.norm("mtp.norm.weight", HID, center=0.0)
    if q35 and not text_only:
        g.mat("model.visual.patch_embed.proj.weight", 8, 12)
        g.norm("model.visual.merger.norm.weight", 8)
    write_checkpoint(d, cfg, g.t)
    return g.t


def np_softplus(z):
    return np.where(z > 20, z, np.log1p(np.exp(np.minimum(z, 20))))


def np_qwen(t, cfg, ids):
    """Qwen3-Next / Qwen3.5-MoE in numpy from the generator's arrays."""
    S = lambda n: value(t, n)  # noqa: E731
    has = lambda n: n in t  # noqa: E731
    nested = cfg["model_type"] == "qwen3_5_moe"
    tc = cfg["text_config"] if nested else cfg
    q35 = tc["model_type"].startswith("qwen3_5")
    pre = "model.language_model." if nested else "model."
    eps = tc["rms_norm_eps"]
    H, KV, D = tc["num_attention_heads"], tc["num_key_value_heads"], tc["head_dim"]
    nk, nv, dk, dv, K = (tc[k] for k in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                         "linear_value_head_dim", "linear_conv_kernel_dim"))
    rr = nv // nk
    types = tc.get("layer_types") or ["linear_attention" if (i + 1) % tc["full_attention_interval"] else "full_attention"
                                      for i in range(tc["num_hidden_layers"])]
    inv, af, R, _, _ = M.rope_setup(tc, D, "qwen3_5_moe" if q35 else "qwen3_next")   # the frequencies only
    inv = inv.numpy()

    def zc(z, w):
        return np_rms(z, 1.0 + w, eps)
    n = len(ids)
    x = S(pre + "embed_tokens.weight")[ids]
    for L in range(tc["num_hidden_layers"]):
        p = f"{pre}layers.{L}."
        h = zc(x, S(p + "input_layernorm.weight"))
        if types[L] == "linear_attention":
            a = p + "linear_attn."
            if not q35:                                                  # per key-head group: q k v z / b a
                W, Wba = S(a + "in_proj_qkvz.weight"), S(a + "in_proj_ba.weight")
                per = 2 * dk + 2 * rr * dv
                qi = [g_ * per + j for g_ in range(nk) for j in range(dk)]
                ki = [g_ * per + dk + j for g_ in range(nk) for j in range(dk)]
                vi = [g_ * per + 2 * dk + j for g_ in range(nk) for j in range(rr * dv)]
                zi = [g_ * per + 2 * dk + rr * dv + j for g_ in range(nk) for j in range(rr * dv)]
                bi = [g_ * 2 * rr + j for g_ in range(nk) for j in range(rr)]
                ai = [g_ * 2 * rr + rr + j for g_ in range(nk) for j in range(rr)]
                q, k, v, z = (h @ W[ix].T for ix in (qi, ki, vi, zi))
                b, a_ = h @ Wba[bi].T, h @ Wba[ai].T
            else:
                W = S(a + "in_proj_qkv.weight")
                q, k, v = h @ W[:nk * dk].T, h @ W[nk * dk:2 * nk * dk].T, h @ W[2 * nk * dk:].T
                z, b, a_ = h @ S(a + "in_proj_z.weight").T, h @ S(a + "in_proj_b.weight").T, h @ S(a + "in_proj_a.weight").T
            mixed = np.concatenate([q, k, v], 1)
            cw = S(a + "conv1d.weight")[:, 0, :]
            conv = np.zeros_like(mixed)
            for i in range(n):
                for j in range(K):
                    src = i - (K - 1) + j
                    if src >= 0:
                        conv[i] += cw[:, j] * mixed[src]
            conv = T.np_silu(conv)
            gdec = -np.exp(S(a + "A_log")) * np_softplus(a_ + S(a + "dt_bias"))
            beta = np_sigmoid(b)
            o = np.zeros((n, nv, dv))
            for hv in range(nv):
                kh = hv // rr
                St = np.zeros((dk, dv))
                for i in range(n):
                    qv = conv[i, kh * dk:(kh + 1) * dk]
                    kv_ = conv[i, nk * dk + kh * dk:nk * dk + (kh + 1) * dk]
                    vv = conv[i, 2 * nk * dk + hv * dv:2 * nk * dk + (hv + 1) * dv]
                    qv = qv / np.sqrt((qv * qv).sum() + 1e-6) / math.sqrt(dk)
                    kv_ = kv_ / np.sqrt((kv_ * kv_).sum() + 1e-6)
                    bt = beta[i, hv]
                    St = (np.eye(dk) - bt * np.outer(kv_, kv_)) @ (np.exp(gdec[i, hv]) * St) + bt * np.outer(kv_, vv)
                    o[i, hv] = St.T @ qv
            zz = z.reshape(n, nv, dv)
            o = np_rms(o, S(a + "norm.weight"), eps) * T.np_silu(zz)
            x = x + o.reshape(n, nv * dv) @ S(a + "out_proj.weight").T
        else:
            a = p + "self_attn."
            Wq = S(a + "q_proj.weight")
            qrows = [hh * 2 * D + j for hh in range(H) for j in range(D)]
            grows = [hh * 2 * D + D + j for hh in range(H) for j in range(D)]
            q = zc((h @ Wq[qrows].T).reshape(n, H, D), S(a + "q_norm.weight"))
            gate = h @ Wq[grows].T
            k = zc((h @ S(a + "k_proj.weight").T).reshape(n, KV, D), S(a + "k_norm.weight"))
            v = (h @ S(a + "v_proj.weight").T).reshape(n, KV, D)
            for zt in (q, k):
                for pos in range(n):
                    cz = (zt[pos, :, :R // 2] + 1j * zt[pos, :, R // 2:R]) * np.exp(1j * pos * inv) * af
                    zt[pos, :, :R // 2], zt[pos, :, R // 2:R] = cz.real, cz.imag
            o = np.zeros((n, H, D))
            for hh in range(H):
                g_ = hh // (H // KV)
                for i in range(n):
                    sc = np.array([q[i, hh] @ k[j, g_] for j in range(i + 1)]) / math.sqrt(D)
                    pr = np.exp(sc - sc.max())
                    pr /= pr.sum()
                    o[i, hh] = sum(pr[j] * v[j, g_] for j in range(i + 1))
            x = x + (o.reshape(n, H * D) * np_sigmoid(gate)) @ S(a + "o_proj.weight").T
        h = zc(x, S(p + "post_attention_layernorm.weight"))
        m = p + "mlp."
        if has(m + "gate_proj.weight"):
            x = x + np_swiglu(h, S, m)
            continue
        E, k_, I = tc["num_experts"], tc["num_experts_per_tok"], tc["moe_intermediate_size"]
        lg = h @ S(m + "gate.weight").T
        pr = np.exp(lg - lg.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        Wr = np.zeros((n, E))
        for i in range(n):
            top = T.np_topk(pr[i], k_)
            Wr[i, top] = pr[i, top] / (pr[i, top].sum() if q35 or tc.get("norm_topk_prob", True) else 1.0)
        out = np.zeros_like(h)
        for e in range(E):
            if has(m + "experts.gate_up_proj"):
                gu, dn = S(m + "experts.gate_up_proj")[e], S(m + "experts.down_proj")[e]
                y = (T.np_silu(h @ gu[:I].T) * (h @ gu[I:].T)) @ dn.T
            else:
                y = np_swiglu(h, S, f"{m}experts.{e}.")
            out += Wr[:, e:e + 1] * y
        out += np_swiglu(h, S, m + "shared_expert.") * np_sigmoid(h @ S(m + "shared_expert_gate.weight").T)
        x = x + out
    x = zc(x, S(pre + "norm.weight"))
    return x @ S("lm_head.weight").T


# ----------------------------------------------------------------------------------------------
# running a family


def run_family(name, mod, d, written, ids, skip=lambda n: False):
    ck = T.Recorder(d)
    model = mod.Model(ck)
    missing, extra = model.check_names()
    truth(f"{name}: names the module expects == names the generator wrote", not missing and not extra,
          f"missing {missing[:3]}, unexpected {extra[:3]}" if missing or extra else f"{len(written)} tensors")
    with torch.no_grad():
        full = model.forward(ids)
    truth(f"{name}: logits [{len(ids)}, {VOCAB}] finite", tuple(full.shape) == (len(ids), VOCAB) and bool(torch.isfinite(full).all()))
    bad = [n for n in ck.read if skip(n) or n not in written]
    truth(f"{name}: read {len(ck.read)} tensors, none outside the model", not bad, str(bad[:3]))
    with torch.no_grad():
        rows = torch.stack([model.forward(ids[:k])[-1] for k in range(1, len(ids) + 1)])
    check(f"{name}: prefill of {len(ids)} == last rows of prefixes 1..{len(ids)}", full, rows)
    return model, full


def cfg_of(d):
    with open(os.path.join(d, "config.json")) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", help="write the checkpoints here and keep them")
    args = ap.parse_args()
    torch.set_num_threads(1)
    root = args.keep or tempfile.mkdtemp(prefix="moe-refs2-")
    os.makedirs(root, exist_ok=True)
    gen = torch.Generator().manual_seed(0)
    ids = [5, 17, 299, 0, 42, 42, 7, 123, 64]
    try:
        fp8_checks()
        mla_checks(gen)
        deltanet_checks(gen)
        deepseek_family_checks(root, ids)
        qwen_family_checks(root, ids)
        base_fp8_checks(root, ids)
        cli_checks(root, ids)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{T.COUNT[0]} passed, 0 failed (worst relative difference {T.WORST[0]:.2e})")


def fp8_checks():
    codes = torch.arange(256)
    ok = (codes & 0x7F) != 0x7F
    check("E4M3: the module's 254 finite byte values == float32-bit-pattern decoding", M.E4M3[ok],
          torch.from_numpy(np_e4m3(codes[ok].numpy().astype(np.uint8))), 0)
    hand = {0x00: 0.0, 0x80: -0.0, 0x01: 2.0 ** -9, 0x07: 7 * 2.0 ** -9, 0x08: 2.0 ** -6, 0x38: 1.0, 0x3C: 1.5,
            0x40: 2.0, 0xB8: -1.0, 0x7E: 448.0, 0xFE: -448.0, 0x77: 240.0, 0x78: 256.0}
    got = M.decode(bytes(hand), "F8_E4M3")
    truth("E4M3 hand values (0x01 = 2^-9, 0x08 = 2^-6, 0x38 = 1, 0x3C = 1.5, 0x7E = 448, 0xFE = -448, 0x78 = 256)",
          got.tolist() == list(hand.values()) and math.copysign(1, got[1].item()) < 0)
    truth("E4M3 NaN bytes 0x7F and 0xFF refused", _raises(lambda: M.decode(bytes([1, 0x7F]), "F8_E4M3"), "NaN")
          and _raises(lambda: M.decode(bytes([0xFF]), "F8_E4M3"), "NaN"))
    q = torch.arange(35, dtype=DT).view(5, 7) - 17
    s = torch.tensor([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0], [64.0, 128.0, 256.0]], dtype=DT)
    want = torch.empty(5, 7, dtype=DT)
    for i in range(5):
        for j in range(7):
            want[i, j] = q[i, j] * s[i // 2, j // 3]
    check("FP8 block dequantization, 5 x 7 in 2 x 3 blocks (partial last row and column of blocks)",
          M.fp8_dequant(q, s, (2, 3)), want, 0)
    truth("FP8 scale_inv of the wrong shape refused", _raises(lambda: M.fp8_dequant(q, s[:2], (2, 3)), "expected (3, 3)"))


def mla_checks(gen):
    H, dn, dr, dv, r, Tq = 3, 5, 6, 4, 7, 8
    wkv = torch.randn(H * (dn + dv), r, dtype=DT, generator=gen)
    qn, qp = torch.randn(Tq, H, dn, dtype=DT, generator=gen), torch.randn(Tq, H, dr, dtype=DT, generator=gen)
    lat, kp = torch.randn(Tq, r, dtype=DT, generator=gen), torch.randn(Tq, dr, dtype=DT, generator=gen)
    pos = torch.arange(Tq)
    naive = DS.mla_naive(qn, qp, lat, kp, wkv, dn, dv, 0.3, pos)
    check("MLA absorbed == naive (prefill, 8 positions)", DS.mla_absorbed(qn, qp, lat, kp, wkv, dn, dv, 0.3, pos), naive)
    check("MLA absorbed == naive (2 queries at positions 5, 7 against 8 cached)",
          DS.mla_absorbed(qn[[5, 7]], qp[[5, 7]], lat, kp, wkv, dn, dv, 0.3, [5, 7]), naive[[5, 7]])
    loops = torch.zeros(Tq, H, dv, dtype=DT)
    w = wkv.view(H, dn + dv, r)
    for h in range(H):
        for t in range(Tq):
            sc = torch.tensor([(qn[t, h] @ (w[h, :dn] @ lat[j]) + qp[t, h] @ kp[j]).item() * 0.3 for j in range(t + 1)], dtype=DT)
            p = torch.softmax(sc, 0)
            loops[t, h] = sum(p[j] * (w[h, dn:] @ lat[j]) for j in range(t + 1))
    check("MLA naive == per-head, per-query loops", naive, loops)

    x = torch.randn(5, 2, 8, dtype=DT, generator=gen)
    inv = 1.0 / 500.0 ** (torch.arange(0, 8, 2, dtype=DT) / 8)
    cos, sin = M.rope_tables(inv, 1.0, 5)
    want = x.clone()
    for t in range(5):
        for h in range(2):
            for i in range(4):
                z = complex(float(x[t, h, 2 * i]), float(x[t, h, 2 * i + 1])) * complex(math.cos(t * inv[i]), math.sin(t * inv[i]))
                want[t, h, 2 * i], want[t, h, 2 * i + 1] = z.real, z.imag
    got = DS.rope_interleaved(x, cos, sin)
    check("interleaved RoPE == complex rotation of adjacent pairs (2i, 2i+1)", got, want)
    perm = lambda v: v.view(*v.shape[:-1], 4, 2).transpose(-1, -2).reshape(v.shape)  # noqa: E731  HF's permute
    hf = M.apply_rope(perm(x), cos, sin)                          # then rotate_half
    check("interleaved RoPE gives HF's dot products (HF: permute to [even | odd] + rotate_half)",
          torch.einsum("thd,shd->hts", got, got), torch.einsum("thd,shd->hts", hf, hf))

    # YaRN of DeepSeek-V3's shape and Kimi K2's betas
    base_cfg = ds_config("deepseek_v3")
    ds_rope = M.rope_setup(base_cfg, 16, "deepseek_v3")
    kimi_betas = dict(base_cfg, rope_scaling=dict(base_cfg["rope_scaling"], beta_fast=1.0, beta_slow=1.0))
    k_rope = M.rope_setup(kimi_betas, 16, "deepseek_v3")
    truth("YaRN beta_fast/beta_slow 1/1 (Kimi K2) and 32/1 (DeepSeek) give different frequencies",
          (k_rope[0] - ds_rope[0]).abs().max() > 1e-3, f"inv_freq {ds_rope[0][:6].tolist()} vs {k_rope[0][:6].tolist()}")
    cfgd = DS.Config(base_cfg)
    m = 0.1 * math.log(40) + 1
    truth("softmax scale = (dn + dr)^-0.5 * (0.1 ln 40 + 1)^2 for factor 40, mscale_all_dim 1; attention factor 1",
          abs(cfgd.scale - 24 ** -0.5 * m * m) < 1e-15 and cfgd.attn_factor == 1.0, f"{cfgd.scale:.6f}")
    truth("mscale 1, mscale_all_dim 0.8: cos/sin factor (0.1 ln 32 + 1) / (0.08 ln 32 + 1)",
          abs(DS.Config(ds_config("kimi_k2")).attn_factor - (0.1 * math.log(32) + 1) / (0.08 * math.log(32) + 1)) < 1e-15)

    # group-limited routing: n_group 1 == plain top-k; HF's 0.0 masking vs -inf
    for (E, G, TG, K) in [(8, 1, 1, 3), (12, 4, 4, 5)]:
        logits = torch.randn(30, E, dtype=DT, generator=gen) * 2
        bias = torch.randn(E, dtype=DT, generator=gen) * 0.3
        ids_g, _ = M.route_sigmoid_group(logits, bias, K, G, TG, True, 2.827)
        truth(f"routing n_group {G}, topk_group {TG} == plain top-{K} of the biased sigmoid",
              [sorted(r) for r in ids_g.tolist()] == T.plain_topk(torch.sigmoid(logits) + bias, K))
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0]], dtype=DT)
    chosen = sorted(M.route_sigmoid_group(logits, torch.full((8,), -2.0, dtype=DT), 3, 4, 1, True, 1.0)[0][0].tolist())
    truth("HF 0.0 masking: all biased scores < 0 -> dropped groups' experts 2, 3, 4 win (DeepSeek's -inf would keep 0, 1)",
          chosen == [2, 3, 4], str(chosen))
    for bad, text in ((dict(base_cfg, model_type="deepseek_v32"), "V3.2"), (dict(base_cfg, index_topk=2048), "V3.2"),
                      (dict(base_cfg, scoring_func="softmax"), "scoring_func"),
                      (dict(base_cfg, quantization_config={"quant_method": "compressed-tensors"}), "compressed-tensors"),
                      (dict(base_cfg, num_key_value_heads=2), "num_key_value_heads")):
        truth(f"refused: {text} ({[k for k in bad if bad[k] != base_cfg.get(k)][0]})", _raises(lambda: DS.Config(bad), text))


def deltanet_checks(gen):
    def rand_inputs(Tn, H, dk, dv, decay):
        q = QN.l2norm(torch.randn(Tn, H, dk, dtype=DT, generator=gen)) * dk ** -0.5
        k = QN.l2norm(torch.randn(Tn, H, dk, dtype=DT, generator=gen))
        v = torch.randn(Tn, H, dv, dtype=DT, generator=gen)
        g = -torch.rand(Tn, H, dtype=DT, generator=gen) * decay
        beta = torch.rand(Tn, H, dtype=DT, generator=gen)
        return q, k, v, g, beta
    for (Tn, H, dk, dv, decay, S0) in [(23, 3, 8, 6, 1.0, False), (17, 2, 5, 9, 20.0, True), (9, 1, 4, 4, 0.01, True)]:
        q, k, v, g, beta = rand_inputs(Tn, H, dk, dv, decay)
        s0 = torch.randn(H, dk, dv, dtype=DT, generator=gen) if S0 else None
        o1, s1 = QN.gdn_recurrent(q, k, v, g, beta, s0)
        for C in (1, 4, 7, Tn + 5):
            o2, s2 = QN.gdn_chunked(q, k, v, g, beta, C, s0)
            check(f"DeltaNet chunked (C {C}) == token by token: outputs (T {Tn}, decay {decay}, initial state {S0})", o2, o1)
            check(f"DeltaNet chunked (C {C}) == token by token: final state", s2, s1)
        n = Tn // 2
        oa, sa = QN.gdn_recurrent(q[:n], k[:n], v[:n], g[:n], beta[:n], s0)
        ob, sb = QN.gdn_chunked(q[n:], k[n:], v[n:], g[n:], beta[n:], 4, sa)
        check(f"DeltaNet: first {n} tokens, then the rest from their state == all {Tn}", torch.cat([oa, ob]), o1)
        check("DeltaNet: ... and the same final state", sb, s1)
    # the recurrence against an explicit matrix form: S = (I - b k k^T) e^g S + b k v^T
    q, k, v, g, beta = rand_inputs(6, 1, 4, 3, 2.0)
    St, outs = torch.zeros(4, 3, dtype=DT), []
    for t in range(6):
        kk = k[t, 0][:, None]
        St = (torch.eye(4, dtype=DT) - beta[t, 0] * kk @ kk.t()) @ (torch.exp(g[t, 0]) * St) + beta[t, 0] * kk @ v[t, 0][None, :]
        outs.append(St.t() @ q[t, 0])
    check("DeltaNet token by token == (I - beta k k^T) e^g S + beta k v^T, o = S^T q", QN.gdn_recurrent(q, k, v, g, beta)[0][:, 0],
          torch.stack(outs))
    x = torch.randn(11, 5, dtype=DT, generator=gen)
    w = torch.randn(5, 4, dtype=DT, generator=gen)
    full, st = QN.causal_conv(x, w)
    a, sa = QN.causal_conv(x[:6], w)
    b, sb = QN.causal_conv(x[6:], w, sa)
    check("causal conv: 6 tokens, then 5 from the carried state == all 11", torch.cat([a, b]), full)
    check("causal conv: the state is the last K - 1 = 3 inputs", sb, x[-3:], 0)
    lin = [sum(w[:, j] * (x[t - 3 + j] if t - 3 + j >= 0 else 0) for j in range(4)) for t in range(11)]
    by_hand = torch.stack([y * torch.sigmoid(y) for y in lin])
    check("causal conv: the last tap multiplies the current token, zeros before the start", full, by_hand)


def deepseek_family_checks(root, ids):
    d_fp8 = os.path.join(root, "deepseek_v3")
    t_fp8 = make_deepseek(d_fp8, "deepseek_v3")
    n8 = sum(1 for n in t_fp8 if t_fp8[n][0] == "F8_E4M3")
    truth("deepseek_v3 checkpoint mixes F8_E4M3 (with scale_inv) and BF16 tensors",
          0 < n8 and any(t_fp8[n][0] == "BF16" and n.endswith("_proj.weight") for n in t_fp8), f"{n8} FP8 weights")
    mtp = lambda n: n.startswith("model.layers.3.")  # noqa: E731
    model, logits = run_family("deepseek_v3 (FP8 mix, sharded, MTP layer 3)", DS, d_fp8, t_fp8, ids, mtp)
    cfg = cfg_of(d_fp8)
    ref = torch.from_numpy(np_deepseek(t_fp8, cfg, ids))
    check("deepseek_v3: logits == numpy forward (loops, complex RoPE, dense routing)", logits, ref, 1e-10)
    with torch.no_grad():
        model.mla = "absorbed"
        check("deepseek_v3: absorbed MLA == naive (whole model)", model.forward(ids), logits, 1e-11)
        model.mla = "naive"
        check("deepseek_v3: token-by-token decode against the latent cache (absorbed) == prefill", model.decode(ids), logits, 1e-11)
        check("deepseek_v3: token-by-token decode, naive form == prefill", model.decode(ids, "naive"), logits, 1e-11)
    d_twin = os.path.join(root, "deepseek_v3_dequantized")
    make_deepseek(d_twin, "deepseek_v3", twin_of=t_fp8)
    with torch.no_grad():
        twin = DS.Model(M.Checkpoint(d_twin)).forward(ids)
    check("deepseek_v3: FP8 checkpoint == its dequantized values stored as F64", logits, twin, 1e-12)
    with torch.no_grad():
        all_kept = DS.Model(M.Checkpoint(d_fp8), dict(cfg, n_group=4, topk_group=4)).forward(ids)
        one = DS.Model(M.Checkpoint(d_fp8), dict(cfg, n_group=1, topk_group=1)).forward(ids)
        betas = DS.Model(M.Checkpoint(d_fp8), dict(cfg, rope_scaling=dict(cfg["rope_scaling"], beta_fast=1, beta_slow=1))).forward(ids)
    check("deepseek_v3: n_group 4 with every group kept == n_group 1 (plain top-k)", all_kept, one)
    truth("deepseek_v3: topk_group 2 of 4 changes the logits (the group limit binds)", (one - logits).abs().max() > 1e-6)
    truth("deepseek_v3: YaRN betas 1/1 instead of 32/1 change the logits", (betas - logits).abs().max() / logits.abs().max() > 1e-4,
          f"max rel {((betas - logits).abs().max() / logits.abs().max()).item():.2e}")

    class HalvesRope(DS.Model):
        def rope(self, x, cos, sin):
            return M.apply_rope(x, cos, sin)

    class NoBias(DS.Model):
        def route(self, L, x):
            c = self.c
            return M.route_sigmoid_group(x @ self.w(f"model.layers.{L}.mlp.gate.weight").t(), torch.zeros(c.n_experts, dtype=DT),
                                         c.top_k, c.n_group, c.topk_group, c.renorm, c.routed_scale)

    class NoScales(M.Checkpoint):
        def weight(self, name):
            return self.tensor(name)
    with torch.no_grad():
        differs("RoPE halves (rotate_half) instead of adjacent pairs", HalvesRope(M.Checkpoint(d_fp8)).forward(ids), ref)
        nm = DS.Model(M.Checkpoint(d_fp8))
        nm.c.scale = 24 ** -0.5
        differs("softmax scale without mscale^2", nm.forward(ids), ref)
        differs("e_score_correction_bias ignored in the selection", NoBias(M.Checkpoint(d_fp8)).forward(ids), ref)
        differs("no group limit (n_group 1)", one, ref)
        differs("FP8 block scales ignored", DS.Model(NoScales(d_fp8)).forward(ids), ref)
        nm = DS.Model(M.Checkpoint(d_fp8))
        nm.c.renorm = False
        differs("routed weights not renormalised (norm_topk_prob ignored)", nm.forward(ids), ref)

    d_k = os.path.join(root, "kimi_k2")
    t_k = make_deepseek(d_k, "kimi_k2")
    km, k_logits = run_family("kimi_k2 (plain q_proj, n_group 1, betas 1/1, biases)", DS, d_k, t_k, ids)
    check("kimi_k2: logits == numpy forward", k_logits, torch.from_numpy(np_deepseek(t_k, cfg_of(d_k), ids)), 1e-10)
    with torch.no_grad():
        check("kimi_k2: decode (absorbed) == prefill", km.decode(ids), k_logits, 1e-11)
    truth("kimi_k2: layer 0 dense, layers 1-2 MoE; no group limit", km.c.moe == [False, True, True] and km.c.n_group == 1)


def qwen_family_checks(root, ids):
    d_n = os.path.join(root, "qwen3_next")
    t_n = make_qwen(d_n, "qwen3_next")
    mtp = lambda n: n.startswith("mtp.") or n.startswith("model.visual.")  # noqa: E731
    nm, n_logits = run_family("qwen3_next (per-expert, dense layer 1, mtp.*)", QN, d_n, t_n, ids, mtp)
    truth("qwen3_next: layer types linear x3, full (full_attention_interval 4); layer 1 dense (mlp_only_layers)",
          nm.c.types == ["linear_attention"] * 3 + ["full_attention"] and nm.c.moe == [True, False, True, True])
    ref_n = torch.from_numpy(np_qwen(t_n, cfg_of(d_n), ids))
    check("qwen3_next: logits == numpy forward (group de-interleave by index, loops, matrix-form recurrence)", n_logits, ref_n, 1e-10)

    d_5 = os.path.join(root, "qwen3_5_moe")
    t_5 = make_qwen(d_5, "qwen3_5_moe")
    m5, l5 = run_family("qwen3_5_moe (text_config, model.language_model., stacked experts, visual + mtp)", QN, d_5, t_5, ids, mtp)
    ref_5 = torch.from_numpy(np_qwen(t_5, cfg_of(d_5), ids))
    check("qwen3_5_moe: logits == numpy forward", l5, ref_5, 1e-10)
    truth("qwen3_5_moe: every layer MoE, always renormalised; layer_types read", all(m5.c.moe) and m5.c.renorm
          and m5.c.types == ["linear_attention", "full_attention"] * 2)

    for name, model, logits in (("qwen3_next", nm, n_logits), ("qwen3_5_moe", m5, l5)):
        with torch.no_grad():
            model.deltanet, model.chunk = "chunked", 4
            check(f"{name}: DeltaNet chunked (C 4) == token by token (whole model)", model.forward(ids), logits, 1e-11)
            model.deltanet = "recurrent"
            check(f"{name}: decode one token at a time (conv, DeltaNet, KV states) == prefill", model.decode(ids), logits, 1e-11)
            check(f"{name}: prefill 4, then one at a time from the states == prefill", model.decode(ids, split=4), logits, 1e-11)

    d_pe = os.path.join(root, "qwen3_5_moe_per_expert")
    make_qwen(d_pe, "qwen3_5_moe", twin_of=t_5)
    d_txt = os.path.join(root, "qwen3_5_moe_text")
    make_qwen(d_txt, "qwen3_5_moe", twin_of=t_5, text_only=True)
    d_ns = os.path.join(root, "qwen3_next_stacked")
    make_qwen(d_ns, "qwen3_next", twin_of=t_n)
    with torch.no_grad():
        pe = QN.Model(T.Recorder(d_pe))
        check("qwen3_5_moe: per-expert tensors == stacked gate_up_proj/down_proj", pe.forward(ids), l5, 1e-13)
        truth("qwen3_5_moe per-expert twin: names accepted", pe.check_names() == ([], []), str(pe.check_names())[:200])
        tx = QN.Model(M.Checkpoint(d_txt))
        check("qwen3_5_moe_text (model.* names, flat config) == the nested form", tx.forward(ids), l5, 1e-13)
        st = QN.Model(M.Checkpoint(d_ns))
        check("qwen3_next: stacked experts == per expert", st.forward(ids), n_logits, 1e-13)

    class ZcOff(QN.Model):
        def norm(self, x, name):
            return M.rmsnorm(x, self.w(name), self.c.eps)

    class GatedZc(QN.Model):
        def gated_norm(self, o, z, w):
            return M.rmsnorm(o, 1.0 + w, self.c.eps) * M.silu(z)

    class NoZ(QN.Model):
        def gated_norm(self, o, z, w):
            return M.rmsnorm(o, w, self.c.eps)

    class NoOutGate(QN.Model):
        def out_gate(self, o, gate):
            return o

    class HalvesQGate(QN.Model):
        def split_q_gate(self, qg):
            n, HD = qg.shape[0], self.c.heads * self.c.head_dim
            return qg[:, :HD].reshape(n, self.c.heads, self.c.head_dim), qg[:, HD:]

    class FlatQKVZ(QN.Model):
        def split_linear(self, L, h):
            c = self.c
            a_ = f"{c.prefix}layers.{L}.linear_attn."
            n, kd, vd = h.shape[0], c.nk * c.dk, c.nv * c.dv
            y = self.linear(h, a_ + "in_proj_qkvz")
            ba = self.linear(h, a_ + "in_proj_ba")
            return (y[:, :kd].view(n, c.nk, c.dk), y[:, kd:2 * kd].view(n, c.nk, c.dk), y[:, 2 * kd:2 * kd + vd].view(n, c.nv, c.dv),
                    y[:, 2 * kd + vd:].view(n, c.nv, c.dv), ba[:, :c.nv], ba[:, c.nv:])

    class NoSharedGate(QN.Model):
        def shared_gate(self, x, p):
            return 1.0

    class TiledHeads(QN.Model):
        def expand_heads(self, x):
            return x.repeat(1, self.c.nv // self.c.nk, 1)
    with torch.no_grad():
        for what, cls, d, ref in (("norms not zero-centred (w instead of 1 + w)", ZcOff, d_n, ref_n),
                                  ("DeltaNet gated norm zero-centred (1 + w)", GatedZc, d_n, ref_n),
                                  ("DeltaNet gated norm without silu(z)", NoZ, d_5, ref_5),
                                  ("attention output gate dropped", NoOutGate, d_n, ref_n),
                                  ("q_proj split [all q | all gate] instead of per head", HalvesQGate, d_5, ref_5),
                                  ("in_proj_qkvz/ba split flat instead of per key-head group", FlatQKVZ, d_n, ref_n),
                                  ("shared_expert_gate dropped", NoSharedGate, d_5, ref_5),
                                  ("value head h reads key head h % nk (tiled) instead of h // (nv / nk)", TiledHeads, d_n, ref_n),
                                  ("... the same in qwen3_5_moe", TiledHeads, d_5, ref_5)):
            differs(what, cls(M.Checkpoint(d)).forward(ids), ref)
        conv = QN.causal_conv
        QN.causal_conv = lambda x, w, state=None: conv(x, w.flip(1), state)
        try:
            differs("conv taps reversed (first tap on the current token)", QN.Model(M.Checkpoint(d_n)).forward(ids), ref_n)
        finally:
            QN.causal_conv = conv
        m = QN.Model(M.Checkpoint(d_n))
        m.c.renorm = False
        differs("qwen3_next top-k weights not renormalised", m.forward(ids), ref_n)
        m = QN.Model(M.Checkpoint(d_n), dict(cfg_of(d_n), partial_rotary_factor=1.0))
        differs("partial_rotary_factor 1 instead of 0.25", m.forward(ids), ref_n)


def base_fp8_checks(root, ids):
    """The shared reader under the five older families: a qwen3_moe checkpoint with some weights
    re-written as E4M3 + 16 x 24 block scales == the same values stored as F64."""
    d0 = os.path.join(root, "qwen3_moe_src")
    src = T.make_qwen3(d0)
    cfg = cfg_of(d0)
    g = Gen(41, "BF16", (16, 24), ("self_attn.q_proj", "experts.1.", "mlp.down_proj", "layers.2.self_attn.o_proj"))
    t = {}
    for n, (dt, a) in src.items():
        if len(a.shape) == 2 and any(f in n for f in g.fp8):
            g.t = {}
            g.rng = np.random.default_rng(zlib.crc32(n.encode()))
            g.mat(n, *a.shape)
            t.update(g.t)
        else:
            t[n] = (dt, a)
    d8 = os.path.join(root, "qwen3_moe_fp8")
    write_checkpoint(d8, dict(cfg, quantization_config={"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [16, 24]}), t)
    dtw = os.path.join(root, "qwen3_moe_fp8_twin")
    write_checkpoint(dtw, cfg, {n: ("F64", value(t, n, (16, 24))) for n in t if not n.endswith("_scale_inv")})
    m8 = M.Model(M.Checkpoint(d8))
    n8 = sum(1 for n in t if t[n][0] == "F8_E4M3")
    truth(f"qwen3_moe with {n8} FP8 weights: names accepted (scale_inv companions expected)", m8.check_names() == ([], []),
          str(m8.check_names())[:200])
    with torch.no_grad():
        check("qwen3_moe (moe_families_model) FP8 + BF16 mix == its dequantized values as F64", m8.forward(ids),
              M.Model(M.Checkpoint(dtw)).forward(ids), 1e-12)


def cli_checks(root, ids):
    cli = os.path.join(HERE, "moe_ref.py")
    out = os.path.join(root, "logits.bin")
    d = os.path.join(root, "deepseek_v3")
    with torch.no_grad():
        want = DS.Model(M.Checkpoint(d)).forward(ids)
    for extra in ([], ["--decode"], ["--mla", "absorbed"]):
        r = subprocess.run([sys.executable, cli, d, "--ids", ",".join(map(str, ids)), "--out", out] + extra,
                           capture_output=True, text=True)
        truth(f"CLI deepseek_v3 {' '.join(extra) or '(prefill)'} runs", r.returncode == 0, r.stderr.strip()[-300:])
        got = torch.from_numpy(np.fromfile(out, dtype="<f4").reshape(len(ids), VOCAB).astype(np.float64))
        check(f"CLI deepseek_v3 {' '.join(extra) or '(prefill)'} logits == the module's (float32)", got, want.to(torch.float32).to(DT), 1e-6)
    r = subprocess.run([sys.executable, cli, d, "--names-fp8"], capture_output=True, text=True)
    names = r.stdout.split()
    truth("CLI --names-fp8: scale_inv beside projections, none beside the router/norms, no MTP layer",
          "model.layers.1.mlp.experts.0.down_proj.weight_scale_inv" in names and "model.layers.1.mlp.gate.weight_scale_inv" not in names
          and "model.layers.0.self_attn.kv_a_layernorm.weight_scale_inv" not in names and not any(".layers.3." in n for n in names))
    d = os.path.join(root, "qwen3_5_moe")
    with torch.no_grad():
        want = QN.Model(M.Checkpoint(d)).forward(ids)
    rout = os.path.join(root, "routing.json")
    r = subprocess.run([sys.executable, cli, d, "--ids", ",".join(map(str, ids)), "--out", out, "--deltanet", "chunked",
                        "--routing", rout], capture_output=True, text=True)
    truth("CLI qwen3_5_moe --deltanet chunked --routing runs", r.returncode == 0, r.stderr.strip()[-300:])
    got = torch.from_numpy(np.fromfile(out, dtype="<f4").reshape(len(ids), VOCAB).astype(np.float64))
    check("CLI qwen3_5_moe logits == the module's (float32)", got, want.to(torch.float32).to(DT), 1e-6)
    rj = json.load(open(rout))
    truth("CLI --routing: 4 MoE layers, 3 experts per position", len(rj["layers"]) == 4 and all(len(e) == 3 for L in rj["layers"] for e in L["experts"]))
    r = subprocess.run([sys.executable, cli, d, "--names"], capture_output=True, text=True)
    truth("CLI --names (qwen3_5_moe): model.language_model.*, stacked experts, no mtp/visual",
          "model.language_model.layers.0.mlp.experts.gate_up_proj" in r.stdout and "mtp." not in r.stdout
          and "visual" not in r.stdout and "model.language_model.layers.0.linear_attn.in_proj_qkv.weight" in r.stdout)


if __name__ == "__main__":
    main()
