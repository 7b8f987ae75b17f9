#!/usr/bin/python3
"""Independent reference for the Kimi-Linear and Kimi K3 forward passes (dev only; CI never runs Python).

Reads a WASTE v0 container (or a HuggingFace checkpoint: config.json + safetensors), dequantizes
every tensor -- trunk and experts -- to float64, loads them by name into the PyTorch module of
kimi_linear_model.py (the same module tools/demo/train.py trains) and runs it over a list of token
ids the plain way: experts expanded into weight matrices, MLA with per-head keys and values rebuilt
from the latents (not the absorbed form the engine uses), the KDA recurrence token by token.
Writes the logits of every position as little-endian float32.

`--activations a16` applies the engine's 16-bit activation rounding (its `--activations a16`) to the
input of every product it makes over a Q8G or Q4G matrix, and nothing else stays different: per
group of G input columns, X = round(x * 32767 / max|x|) with ties to even, from x as the f32 value
the engine holds, and x becomes X times the one f32 factor max|x| / 32767 (see a16_round). The rest
of the pass stays float64. Each a16 product can be held to f32 accuracy against it (`--products`
writes their inputs and outputs); whole-model logits cannot, since a value that f32 and float64
round differently changes every later rounding (docs/LEARNED.md).

A Kimi K3 container or checkpoint (its outer `architectures` names KimiK3, or its text config uses a
K3 feature: AttnRes, latent MoE, SiTU, q-LoRA, gated MLA, the full-rank or bounded KDA gate) runs
the module of kimi_k3_model.py instead; kimi_k3_ref.py is the same program, refusing anything else.
K3 tensors sit under `tensor_prefix` ("language_model."; also the default when the config still
nests a `text_config`), and a K3 checkpoint's MXFP4 routed experts are decoded exactly.

It is written from a description of the architecture compiled from its public sources (Moonshot's
HuggingFace modeling code, the fla kernels, vLLM, llama.cpp), not from the TypeScript, so the two
agreeing is evidence that both are right. The formulas as the engine implements them are in
docs/ARCHITECTURE.md.

    /usr/bin/python3 tools/reference/kimi_linear_ref.py CONTAINER --ids 1,2,3 --out logits.bin [--activations a16]
"""
import argparse
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kimi_linear_model import KimiLinearForCausalLM, load_tensors  # noqa: E402
from kimi_k3_model import KimiK3ForCausalLM, is_k3, load_k3_tensors  # noqa: E402

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
        self.raw_cfg = cfg                          # with `_outer` (or the outer object, if nested)
        self.cfg = cfg.get("text_config", cfg)
        self.prefix = self.manifest.get("tensor_prefix", "")
        if not self.prefix and "text_config" in cfg:
            self.prefix = "language_model."         # a config still nested as in config.json: K3's names
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

    def quantized_group(self, name):
        """The group size of a Q8G/Q4G trunk tensor, None for any other (or absent) one."""
        t = self.index.get(self.prefix + name)
        return t.get("group", 128) if t and t["fmt"] in (Q8G, Q4G) else None

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
        self.raw_cfg = self.cfg
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
        # K3 nests the text model's config and names its tensors language_model.*
        self.prefix = "language_model." if "text_config" in self.cfg else ""

    def has(self, name):
        return self.prefix + name in self.where

    def _raw(self, name):
        fn, base, meta = self.where[self.prefix + name]
        b, e = meta["data_offsets"]
        with open(os.path.join(self.path, fn), "rb") as f:
            f.seek(base + b)
            return bytearray(f.read(e - b)), meta

    def tensor(self, name):
        raw, meta = self._raw(name)
        if meta["dtype"] == "F32":
            t = torch.frombuffer(raw, dtype=torch.float32)
        elif meta["dtype"] == "F16":
            t = torch.frombuffer(raw, dtype=torch.float16)
        else:
            t = torch.frombuffer(raw, dtype=torch.int16).to(torch.int32).bitwise_left_shift(16).view(torch.float32)
        return t.to(torch.float64).reshape(meta["shape"])

    def expert(self, layer, e, hidden, inter):
        p = f"model.layers.{layer}.block_sparse_moe.experts.{e}."
        if not self.has(p + "w1.weight") and self.has(p + "w1.weight_packed"):
            return [self.mxfp4(p + w) for w in ("w1", "w3", "w2")]
        return [self.tensor(p + "w1.weight"), self.tensor(p + "w3.weight"), self.tensor(p + "w2.weight")]

    def mxfp4(self, name):
        """A K3 routed-expert matrix [R, N] from NAME.weight_packed (u8 [R, N/2]) and NAME.weight_scale
        (u8 E8M0 [R, N/32]): byte j holds element 2j in its low nibble and 2j+1 in its high one; a
        nibble is sign (bit 3) x {0, .5, 1, 1.5, 2, 3, 4, 6}[n & 7]; group g of 32 is scaled by
        2^(e - 127) (OCP MX; the C engine maps e = 0 to 0 instead, a difference below 1e-37). The
        NaN scale 0xFF is refused."""
        raw, meta = self._raw(name + ".weight_packed")
        R, half = meta["shape"]
        b = torch.frombuffer(raw, dtype=torch.uint8).to(torch.int64).view(R, half)
        n = torch.stack([b & 15, b >> 4], -1).view(R, 2 * half)
        mag = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=torch.float64)[n & 7]
        w = torch.where(n >= 8, -mag, mag)
        raw, meta = self._raw(name + ".weight_scale")
        e = torch.frombuffer(raw, dtype=torch.uint8).to(torch.int64).view(R, -1)
        if bool((e == 255).any()):
            raise ValueError(f"{name}.weight_scale: E8M0 0xFF (NaN)")
        if e.shape[1] * 32 != w.shape[1]:
            raise ValueError(f"{name}: {e.shape[1]} scale groups for {w.shape[1]} columns")
        scale = torch.pow(torch.tensor(2.0, dtype=torch.float64), (e - 127).to(torch.float64))
        return (w.view(R, -1, 32) * scale.unsqueeze(-1)).view(R, -1)


SCALE16 = 32767.0


def a16_round(x, G):
    """x [..., cols] as the engine's a16 products see it: each group of G columns (the last one
    zero-padded) of the f32 value becomes X = round(x * (32767 / m)) (m = max|x| of the group, the
    multiplier and product in float64, ties to even) times the f32 factor m / 32767."""
    cols = x.shape[-1]
    ng = (cols + G - 1) // G
    x32 = x.to(torch.float32).to(torch.float64)
    g = F.pad(x32, (0, ng * G - cols)).view(*x.shape[:-1], ng, G)
    m = g.abs().amax(-1, keepdim=True)
    live = m > 0
    k = torch.where(live, SCALE16 / torch.where(live, m, 1.0), 0.0)
    factor = torch.where(live, (m / SCALE16).to(torch.float32).to(torch.float64), 0.0)
    return (torch.round(g * k) * factor).view(*x.shape[:-1], ng * G)[..., :cols].to(x.dtype)


# products the engine does not run through its Q8G/Q4G matmul whatever the weight's format: kv_b is
# absorbed into MLA's per-head attention (exact in both modes); AttnRes projections are f32 vectors
A16_EXEMPT = ("kv_b_proj", "_res_proj")


def apply_a16(model, src, record=None, positions=0):
    """Round the inputs of the products over Q8G/Q4G matrices as the engine's a16 mode does (see
    a16_round): a pre-hook on each such Linear, and the router's input (MoE.route reads x only for
    its product with the gate's weight). With `record` (a list), each such product's first
    `positions` input rows (as f32) and its float64 a16 output rows are appended to it as
    (name, x [P, cols], y [P, rows]). Returns the names of the matrices so treated."""
    quantized = getattr(src, "quantized_group", lambda name: None)
    done = []

    def rounded(name, x, W, G):
        xr = a16_round(x, G)
        if record is not None and positions > 0:
            rows = x.reshape(-1, x.shape[-1])[:positions]
            record.append((name, rows.to(torch.float32), a16_round(rows, G) @ W.t()))
        return xr

    for name, mod in model.named_modules():
        if any(e in name for e in A16_EXEMPT):
            continue
        if isinstance(mod, torch.nn.Linear):
            G = quantized(name + ".weight")
            if G:
                mod.register_forward_pre_hook(lambda m, args, n=name + ".weight", G=G: (rounded(n, args[0], m.weight, G),) + tuple(args[1:]))
                done.append(name + ".weight")
        elif hasattr(mod, "route") and hasattr(mod, "gate"):
            G = quantized(name + ".gate.weight")
            if G:
                route = mod.route
                mod.route = lambda x, route=route, n=name + ".gate.weight", w=mod.gate.weight, G=G: route(rounded(n, x, w, G))
                done.append(name + ".gate.weight")
    return done


def forward(src, ids, trace=None, activations="exact", record=None, positions=0):
    """Logits [T, vocab] (float64) of every position: the module in float64, KDA token by token.
    For K3, `trace` (a list) receives x after every layer, [T, hidden] each. `activations` "a16"
    rounds as the engine's a16 mode does; `record` and `positions`: see apply_a16."""
    if is_k3(src.raw_cfg):
        model = load_k3_tensors(KimiK3ForCausalLM(src.cfg, dtype=torch.float64), src)
        if activations == "a16":
            apply_a16(model, src, record, positions)
        with torch.no_grad():
            out = model(torch.tensor(ids), mode="loop", trace=trace)
        if trace is not None:
            trace[:] = [x[0] for x in trace]
        return out
    model = load_tensors(KimiLinearForCausalLM(src.cfg, dtype=torch.float64), src)
    if activations == "a16":
        apply_a16(model, src, record, positions)
    with torch.no_grad():
        return model(torch.tensor(ids), mode="loop")


def open_source(path):
    """A container directory (manifest.json) or a HuggingFace checkpoint directory."""
    return Container(path) if os.path.exists(os.path.join(path, "manifest.json")) else Checkpoint(path)


def main(k3_only=False):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("container")
    ap.add_argument("--ids", required=True, help="comma-separated token ids")
    ap.add_argument("--out", required=True, help="float32 logits of every position, row after row")
    ap.add_argument("--hidden", help="K3 only: also write x after every layer as float32 [layers][positions][hidden] "
                                     "(the C engine's WASTE_DUMP_HIDDEN is the last position of each layer)")
    ap.add_argument("--activations", choices=["exact", "a16"], default="exact",
                    help="a16: round the inputs of Q8G/Q4G products as the engine's --activations a16 does")
    ap.add_argument("--products", help="with --activations a16: write the first --positions input rows of every "
                                       "Q8G/Q4G product and their float64 a16 outputs here (float32, entry after entry: "
                                       "x [P][cols] then y [P][rows]; their names and sizes in FILE.json)")
    ap.add_argument("--positions", type=int, default=2)
    args = ap.parse_args()
    if args.products and args.activations != "a16":
        sys.exit("--products needs --activations a16")
    ids = [int(i) for i in args.ids.split(",")]
    src = open_source(args.container)
    if (k3_only or args.hidden) and not is_k3(src.raw_cfg):
        sys.exit(f"{args.container}: not a Kimi K3 model (use kimi_linear_ref.py{'' if k3_only else ' without --hidden'})")
    trace = [] if args.hidden else None
    record = [] if args.products else None
    logits = forward(src, ids, trace, args.activations, record, args.positions)
    if record is not None:
        # each product once (a router or a layer's matrix is called once per forward)
        names = [r[0] for r in record]
        if len(set(names)) != len(names):
            sys.exit("a product was called twice; --products assumes one call each")
        with open(args.products, "wb") as f:
            for _, x, y in record:
                f.write(x.numpy().tobytes())
                f.write(y.to(torch.float32).numpy().tobytes())
        entries = [{"name": src.prefix + n, "positions": x.shape[0], "cols": x.shape[1], "rows": y.shape[1]} for n, x, y in record]
        with open(args.products + ".json", "w") as f:
            json.dump(entries, f, indent=1)
    with open(args.out, "wb") as f:
        f.write(logits.to(torch.float32).numpy().tobytes())
    if args.hidden:
        with open(args.hidden, "wb") as f:
            f.write(torch.stack(trace).to(torch.float32).numpy().tobytes())


if __name__ == "__main__":
    main()
