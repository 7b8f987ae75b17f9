#!/usr/bin/python3
"""Independent reference for the Kimi-Linear forward pass (dev only; CI never runs Python).

Reads a WASTE v0 container (or a HuggingFace checkpoint: config.json + safetensors), dequantizes
every tensor -- trunk and experts -- to float64, and runs
the model over a list of token ids the plain way: experts expanded into weight matrices, MLA with
per-head keys and values rebuilt from the cached latents (not the absorbed form the engine uses),
the KDA recurrence token by token. Writes the logits of every position as little-endian float32.

It is written from the architecture description (docs: kimi-linear.md), not from the TypeScript,
so the two agreeing is evidence that both are right.

    /usr/bin/python3 tools/reference/kimi_linear_ref.py CONTAINER --ids 1,2,3 --out logits.bin
"""
import argparse
import json
import os
import struct

import torch

torch.set_default_dtype(torch.float64)
F32, F16, Q8G, Q4G = 0, 1, 2, 3


def f16_tensor(raw):
    return torch.frombuffer(bytearray(raw), dtype=torch.float16).to(torch.float64)


class Container:
    def __init__(self, path):
        self.path = path
        with open(os.path.join(path, "manifest.json")) as f:
            self.manifest = json.load(f)
        cfg = self.manifest["config"]
        self.cfg = cfg.get("text_config", cfg)
        self.prefix = self.manifest.get("tensor_prefix", "")
        with open(os.path.join(path, "trunk.bin"), "rb") as f:
            self.trunk = f.read()
        self.index = {t["name"]: t for t in self.manifest["trunk"]}
        self.eq = self.manifest.get("expert_quant")
        if self.eq:
            with open(os.path.join(path, "codebooks.bin"), "rb") as f:
                cb = f.read()
            E, D = self.eq["entries"], self.eq["vec_dim"]
            rec = 16 + E * D * 2
            self.books = [f16_tensor(cb[i * rec + 16:(i + 1) * rec]).view(E, D) for i in range(len(cb) // rec)]

    def tensor(self, name):
        t = self.index[self.prefix + name]
        shape = t["shape"]
        cols = shape[-1]
        rows = 1
        for d in shape[:-1]:
            rows *= d
        off, fmt = t["off"], t["fmt"]
        if fmt == F32:
            w = torch.frombuffer(bytearray(self.trunk[off:off + 4 * rows * cols]), dtype=torch.float32).to(torch.float64)
        elif fmt == F16:
            w = f16_tensor(self.trunk[off:off + 2 * rows * cols])
        else:
            g = t.get("group", 128)
            ng = (cols + g - 1) // g
            so = t["scale_off"]
            scales = f16_tensor(self.trunk[so:so + 2 * rows * ng]).view(rows, ng)
            if fmt == Q8G:
                q = torch.frombuffer(bytearray(self.trunk[off:off + rows * ng * g]), dtype=torch.int8).to(torch.float64)
            else:
                b = torch.frombuffer(bytearray(self.trunk[off:off + rows * ng * g // 2]), dtype=torch.uint8).to(torch.int64)
                q = torch.stack([(b & 15) - 8, (b >> 4) - 8], dim=1).flatten().to(torch.float64)
            q = q.view(rows, ng, g) * scales.view(rows, ng, 1)
            w = q.view(rows, ng * g)[:, :cols]
        return w.reshape(shape) if len(shape) > 1 else w

    def has(self, name):
        return self.prefix + name in self.index

    def expert(self, layer, e, hidden, inter):
        """Expand one VQ expert into (gate [inter,hidden], up [inter,hidden], down [hidden,inter])."""
        bank = self.manifest["layers"][str(layer)]
        stride = bank["bytes"] // bank["experts"]
        with open(os.path.join(self.path, bank["file"]), "rb") as f:
            f.seek(e * stride)
            rec = f.read(stride)
        magic, L, eid, fmt, flags, cb, lowrank, _r, blocks, go, uo, do, so, crc = struct.unpack_from("<IHHBBHHHIIIIII", rec, 0)
        assert magic == 0x50584557 and L == layer and eid == e
        st, vd, B = self.eq["stages"], self.eq["vec_dim"], self.eq.get("index_block", 64)
        shapes = [(inter, hidden), (inter, hidden), (hidden, inter)]
        offs = [go, uo, do]
        mats = []
        scale_pos = so
        for m, (M, N) in enumerate(shapes):
            nv = N // vd
            Mp = (M + B - 1) // B * B if B else M
            idx = torch.frombuffer(bytearray(rec[offs[m]:offs[m] + Mp * nv * st]), dtype=torch.uint8).to(torch.int64)
            if B:
                idx = idx.view(Mp // B, nv, B, st).permute(0, 2, 1, 3).reshape(Mp, nv, st)[:M]
            else:
                idx = idx.view(M, nv, st)
            W = torch.zeros(M, nv, vd)
            for s in range(st):
                W += self.books[cb + m * st + s][idx[:, :, s]]
            scales = f16_tensor(rec[scale_pos:scale_pos + 2 * M])
            scale_pos += 2 * M
            mats.append(W.reshape(M, N) * scales.view(M, 1))
        return mats


class Checkpoint:
    """A HuggingFace checkpoint: config.json and safetensors (single or sharded), read directly."""

    def __init__(self, path):
        self.path = path
        with open(os.path.join(path, "config.json")) as f:
            self.cfg = json.load(f)
        index = os.path.join(path, "model.safetensors.index.json")
        files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
        self.where = {}
        for fn in files:
            with open(os.path.join(path, fn), "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(n))
            for name, meta in header.items():
                if name != "__metadata__":
                    self.where[name] = (fn, 8 + n, meta)

    def has(self, name):
        return name in self.where

    def tensor(self, name):
        fn, base, meta = self.where[name]
        b, e = meta["data_offsets"]
        with open(os.path.join(self.path, fn), "rb") as f:
            f.seek(base + b)
            raw = bytearray(f.read(e - b))
        if meta["dtype"] == "F32":
            t = torch.frombuffer(raw, dtype=torch.float32)
        elif meta["dtype"] == "F16":
            t = torch.frombuffer(raw, dtype=torch.float16)
        else:
            t = torch.frombuffer(raw, dtype=torch.int16).to(torch.int32).bitwise_left_shift(16).view(torch.float32)
        return t.to(torch.float64).reshape(meta["shape"])

    def expert(self, layer, e, hidden, inter):
        p = f"model.layers.{layer}.block_sparse_moe.experts.{e}."
        return [self.tensor(p + "w1.weight"), self.tensor(p + "w3.weight"), self.tensor(p + "w2.weight")]


def rmsnorm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def silu(x):
    return x * torch.sigmoid(x)


def forward(c, ids):
    cfg = c.cfg
    H = cfg["hidden_size"]
    eps = cfg.get("rms_norm_eps", 1e-5)
    n_layers = cfg["num_hidden_layers"]
    lac = cfg.get("linear_attn_config") or {}
    kda_layers = {l - 1 for l in lac.get("kda_layers", [])}
    n_exp = cfg.get("num_experts", 0)
    first_dense = cfg.get("first_k_dense_replace", 0)
    T = len(ids)

    emb = c.tensor("model.embed_tokens.weight")
    x = emb[torch.tensor(ids)]                                   # [T, H]
    for L in range(n_layers):
        p = f"model.layers.{L}."
        a = p + "self_attn."
        h = rmsnorm(x, c.tensor(p + "input_layernorm.weight"), eps)
        if L in kda_layers:
            NH, D, K = lac["num_heads"], lac["head_dim"], lac.get("short_conv_kernel_size", 4)
            C = NH * D

            def conv(y, name):
                w = c.tensor(a + name).reshape(C, K)
                padded = torch.cat([torch.zeros(K - 1, C), y])   # causal: zeros before the start
                out = torch.stack([(padded[t:t + K] * w.T).sum(0) for t in range(T)])
                return silu(out)

            q = conv(h @ c.tensor(a + "q_proj.weight").T, "q_conv1d.weight").view(T, NH, D)
            k = conv(h @ c.tensor(a + "k_proj.weight").T, "k_conv1d.weight").view(T, NH, D)
            v = conv(h @ c.tensor(a + "v_proj.weight").T, "v_conv1d.weight").view(T, NH, D)
            q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * D ** -0.5
            k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
            f = (h @ c.tensor(a + "f_a_proj.weight").T) @ c.tensor(a + "f_b_proj.weight").T
            A = c.tensor(a + "A_log").reshape(NH)
            z = f + c.tensor(a + "dt_bias").reshape(C)
            g = (-torch.exp(A).view(1, NH, 1) * torch.nn.functional.softplus(z, threshold=20).view(T, NH, D))
            beta = torch.sigmoid(h @ c.tensor(a + "b_proj.weight").T)           # [T, NH]
            S = torch.zeros(NH, D, D)
            outs = []
            for t in range(T):
                S = S * torch.exp(g[t]).unsqueeze(-1)                            # decay rows (key dims)
                u = beta[t].view(NH, 1) * (v[t] - torch.einsum("hkv,hk->hv", S, k[t]))
                S = S + torch.einsum("hk,hv->hkv", k[t], u)
                outs.append(torch.einsum("hkv,hk->hv", S, q[t]))
            o = torch.stack(outs)                                                # [T, NH, D]
            gate = (h @ c.tensor(a + "g_a_proj.weight").T) @ c.tensor(a + "g_b_proj.weight").T
            o = rmsnorm(o, c.tensor(a + "o_norm.weight"), eps) * torch.sigmoid(gate.view(T, NH, D))
            attn = o.reshape(T, C) @ c.tensor(a + "o_proj.weight").T
        else:
            NH = cfg["num_attention_heads"]
            nope, rope, vh, kvl = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"]
            q = (h @ c.tensor(a + "q_proj.weight").T).view(T, NH, nope + rope)
            ckv = h @ c.tensor(a + "kv_a_proj_with_mqa.weight").T
            lat = rmsnorm(ckv[:, :kvl], c.tensor(a + "kv_a_layernorm.weight"), eps)   # the engine uses rms_norm_eps
            kpe = ckv[:, kvl:]                                                   # shared by all heads, no RoPE
            kv = (lat @ c.tensor(a + "kv_b_proj.weight").T).view(T, NH, nope + vh)
            knope, vals = kv[..., :nope], kv[..., nope:]
            scores = (torch.einsum("thd,shd->hts", q[..., :nope], knope) +
                      torch.einsum("thd,sd->hts", q[..., nope:], kpe)) * (nope + rope) ** -0.5
            mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
            scores = scores.masked_fill(mask, float("-inf"))
            o = torch.einsum("hts,shd->thd", torch.softmax(scores, -1), vals)
            attn = o.reshape(T, NH * vh) @ c.tensor(a + "o_proj.weight").T
        x = x + attn

        h = rmsnorm(x, c.tensor(p + "post_attention_layernorm.weight"), eps)
        if n_exp and L >= first_dense:
            m = p + "block_sparse_moe."
            topk = cfg["num_experts_per_token"]
            inter = cfg["moe_intermediate_size"]
            scores = torch.sigmoid(h @ c.tensor(m + "gate.weight").T)            # [T, E]
            bias = c.tensor(m + "gate.e_score_correction_bias").reshape(n_exp) if c.has(m + "gate.e_score_correction_bias") else torch.zeros(n_exp)
            out = torch.zeros(T, H)
            cache = {}
            for t in range(T):
                sel = scores[t] + bias                                           # bias chooses, never weighs
                chosen = []
                for _ in range(topk):                                            # ties to the lower id
                    best = max((e for e in range(n_exp) if e not in chosen), key=lambda e: (sel[e].item(), -e))
                    chosen.append(best)
                w = scores[t][chosen]
                if cfg.get("moe_renormalize", True) and topk > 1:
                    w = w / (w.sum() + 1e-20)
                w = w * cfg.get("routed_scaling_factor", 1.0)
                for j, e in enumerate(chosen):
                    if e not in cache:
                        cache[e] = c.expert(L, e, H, inter)
                    W1, W3, W2 = cache[e]
                    out[t] += w[j] * ((silu(h[t] @ W1.T) * (h[t] @ W3.T)) @ W2.T)
            if cfg.get("num_shared_experts", 0) > 0:
                sg = c.tensor(m + "shared_experts.gate_proj.weight")
                su = c.tensor(m + "shared_experts.up_proj.weight")
                sd = c.tensor(m + "shared_experts.down_proj.weight")
                out = out + (silu(h @ sg.T) * (h @ su.T)) @ sd.T
            ffn = out
        else:
            ffn = (silu(h @ c.tensor(p + "mlp.gate_proj.weight").T) * (h @ c.tensor(p + "mlp.up_proj.weight").T)) @ c.tensor(p + "mlp.down_proj.weight").T
        x = x + ffn
    x = rmsnorm(x, c.tensor("model.norm.weight"), eps)
    return x @ c.tensor("lm_head.weight").T


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("container")
    ap.add_argument("--ids", required=True, help="comma-separated token ids")
    ap.add_argument("--out", required=True, help="float32 logits of every position, row after row")
    args = ap.parse_args()
    ids = [int(i) for i in args.ids.split(",")]
    src = Container(args.container) if os.path.exists(os.path.join(args.container, "manifest.json")) else Checkpoint(args.container)
    logits = forward(src, ids)
    with open(args.out, "wb") as f:
        f.write(logits.to(torch.float32).numpy().tobytes())


if __name__ == "__main__":
    main()
