#!/usr/bin/python3
"""Independent float64 reference for Kimi K3's vision tower and for images in K3's token stream
(dev only; CI never runs Python).

Written from the project's K3 spec, `kimi-k3.md` section 8 (8.1 config, 8.2 tensors, 8.3 the C
engine's preprocessing, 8.4 the tower, 8.5 its bisection stages, 8.6 images in the token stream),
not from the TypeScript engine, so that the two agreeing is evidence both are right. Containers and
HF checkpoints are read with kimi_linear_ref.py's readers (Container: manifest.json + trunk.bin,
Q8G/Q4G/F16/F32 dequantized to float64; Checkpoint: safetensors, bf16 widened), the text model is
kimi_k3_model.py's. Every file written is little-endian float32.

    /usr/bin/python3 tools/reference/kimi_k3_vision.py tower MODEL PIXELS.bin GH GW OUT.bin [--stage S]
        pixels f32 [GH*GW][3][14][14] -> image rows f32 [(GH/2)*(GW/2)][text_hidden];
        --stage embed | attnN | n1_N | fc0_N | act_N | fc1_N | blockN | encoder writes that
        intermediate instead, f32 [GH*GW][vt_hidden] (wide stages: their first vt_hidden columns),
        the same cut points as the C engine's WASTE_VIS_STAGE (spec 8.5).
    /usr/bin/python3 tools/reference/kimi_k3_vision.py logits MODEL IDS OUT.bin --image PIXELS.bin GH GW [--image ...]
        IDS (a file of integers separated by commas or white space, or the list itself, "1,2,3")
        holds one media placeholder per image; each is expanded to (GH/2)*(GW/2) copies and those
        positions take the image's rows in order (spec 8.6). Writes the logits of every position of
        the expanded prompt, f32 [T][vocab]; prints T.
    /usr/bin/python3 tools/reference/kimi_k3_vision.py pixels IMAGE OUT.bin [--max-patches N] [--model MODEL]
        the C engine's preprocessing (spec 8.3, "C engine"): grid choice, bilinear half-pixel resize
        and normalisation in float32 arithmetic, as the engine does them, on the image decoded by
        PIL; writes f32 [GH*GW][3][14][14] and prints "GH GW". --model takes max_patches, mean and
        std from the model's vision config (else 1024 and K3's 0.5 / 0.5).
    /usr/bin/python3 tools/reference/kimi_k3_vision.py selftest
        the pieces against other statements of the same formulas (F.interpolate, complex rotation,
        torch's GELUs, a patch-by-patch tower, the spec's grid examples).

Checked against the public C engine on tiny K3-shaped containers: the tower and every stage against
its test_vision at max|d|/max|ref| 3e-7..1e-5 (the float32 floor of the same tower is 6e-7..4e-6),
`pixels` against its waste_image_load bit for bit on PNG and BMP (70 of 70 cases: RGB, RGBA, grey,
16-bit grey, palette; grids from 2x2 to 356x2), `logits` against its public API (waste_image_add,
waste_image_expand, waste_eval) at 4e-6..5e-5, equal argmax everywhere.

MODEL is a container (vision tensors `vision_tower.*` / `mm_projector.*` outside tensor_prefix, the
patch embedding stored as [D, 3*14*14], the position grid as [H*W, D]; config in vision.json) or an
HF checkpoint (conv weight [D, 3, 14, 14], grid [H, W, D]; config.json's vision_config, its
media_placeholder_token_id, preprocessor_config.json's media_proc_cfg).

The tower (spec 8.4), all in float64: x = patch_embed . pixels + bilinear(pos grid -> GH x GW);
2-D RoPE per head (pair j of a head uses frequency 10000^(-4 floor(j/2) / hd), angle col * f for
even j, row * f for odd j); per block x += wo . attn(rope(q), rope(k), v) over all patches with
RMSNorm(norm0) in front, x += fc1 . gelu_tanh(fc0 . RMSNorm(x, norm1)); RMSNorm(final_layernorm);
2x2 merge in the order (2a,2b) (2a,2b+1) (2a+1,2b) (2a+1,2b+1); projector
RMSNorm(proj.2 . gelu_erf(proj.0 . m), post_norm, projector eps). Tower norms use vt_rms_eps, i.e.
float32's machine epsilon 2^-23 when the config has none (PyTorch's nn.RMSNorm default in f32).

The preprocessing is the C engine's, not the release's processor (spec 8.3 tells the two apart).
PIL stands in for stb_image as the decoder: identical on PNG (8-bit and 16-bit, whose high byte
stb keeps), BMP, TGA and GIF's first frame; JPEG decoders may differ by a unit, so bit-exact
comparisons want lossless images. Alpha is dropped, not composited, as the engine does.
"""
import argparse
import copy
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kimi_linear_ref import Container, open_source  # noqa: E402
from kimi_k3_model import KimiK3ForCausalLM, is_k3, load_k3_tensors  # noqa: E402
from kimi_linear_model import rmsnorm  # noqa: E402

torch.set_default_dtype(torch.float64)

F32_EPS = 2.0 ** -23                # finfo(float32).eps: the tower's RMSNorm epsilon (spec 8.4)
MAX_SOURCE_PIXELS = 64 * 1024 * 1024  # the C engine refuses larger sources (spec 8.3 step 1)
STAGE_HELP = "embed | attnN | n1_N | fc0_N | act_N | fc1_N | blockN | encoder"


# ----------------------------------------------------------------------------------------------
# configuration (spec 8.1)


# the options this reference implements (K3's); a config naming another is refused, not misread
_K3_CHOICES = {"activation_func": "gelu_pytorch_tanh", "projector_hidden_act": "gelu", "norm_type": "rmsnorm",
               "merge_kernel_size": [2, 2], "pos_emb_interpolation_mode": "bilinear", "mlp_type": "mlp2",
               "attn_bias": False, "linear_bias": False, "patch_embed_proj_bias": False}


class VisionConfig:
    """What the tower and the preprocessing read of a vision config (vision.json's keys)."""

    def __init__(self, vc, text_hidden):
        def need(k):
            if k not in vc:
                raise ValueError(f"vision config: no {k}")
            return int(vc[k])
        self.hidden = need("vt_hidden_size")
        self.layers = need("vt_num_hidden_layers")
        self.heads = need("vt_num_attention_heads")
        self.qkv = need("qkv_hidden_size")
        self.inter = need("vt_intermediate_size")
        self.pos_h = need("init_pos_emb_height")
        self.pos_w = need("init_pos_emb_width")
        self.patch = int(vc.get("patch_size", 14))
        self.text_hidden = int(vc.get("text_hidden_size") or text_hidden)
        self.eps = float(vc.get("vt_rms_eps", F32_EPS))
        self.proj_eps = float(vc.get("projector_ln_eps", 1e-5))
        mt = vc.get("media_placeholder_token_id")
        self.media_token = int(mt) if mt is not None else None
        self.max_patches = int(vc.get("max_patches", 1024))
        self.mean = [float(v) for v in vc.get("image_mean", [0.5, 0.5, 0.5])]
        self.std = [float(v) for v in vc.get("image_std", [0.5, 0.5, 0.5])]
        if self.qkv % self.heads or (self.qkv // self.heads) % 4:
            raise ValueError(f"qkv_hidden_size {self.qkv} / {self.heads} heads: the 2-D RoPE needs a head dim divisible by 4")
        for k, want in _K3_CHOICES.items():
            if vc.get(k, want) != want:
                raise ValueError(f"vision config {k} = {vc[k]!r}: this reference knows only K3's {want!r}")

    @property
    def pixels_per_patch(self):
        return 3 * self.patch * self.patch


def vision_config(src):
    """The VisionConfig of a container (its vision.json) or of an HF checkpoint (config.json's
    vision_config + media_placeholder_token_id, preprocessor_config.json's media_proc_cfg: the
    fields the converter copies into vision.json)."""
    text_hidden = src.cfg.get("text_config", src.cfg).get("hidden_size")
    if isinstance(src, Container):
        p = os.path.join(src.path, "vision.json")
        if not os.path.exists(p):
            raise ValueError(f"{src.path}: no vision.json (a container without a vision tower)")
        with open(p) as f:
            return VisionConfig(json.load(f), text_hidden)
    raw = src.raw_cfg
    if not isinstance(raw.get("vision_config"), dict):
        raise ValueError(f"{src.path}: config.json has no vision_config")
    vc = {k: v for k, v in raw["vision_config"].items() if not k.startswith("_")}
    if raw.get("media_placeholder_token_id") is not None:
        vc["media_placeholder_token_id"] = raw["media_placeholder_token_id"]
    pre = os.path.join(src.path, "preprocessor_config.json")
    if os.path.exists(pre):
        with open(pre) as f:
            doc = json.load(f)
        media = doc.get("media_proc_cfg", doc)
        for k in ("image_mean", "image_std", "patch_size"):
            if k in media:
                vc[k] = media[k]
    return VisionConfig(vc, text_hidden)


# ----------------------------------------------------------------------------------------------
# tensors (spec 8.2)


class VisionWeights:
    """The tower's and projector's tensors in float64, by their release names, in the shapes the
    tower uses: the patch embedding as [D, 3*p*p], the position grid as [H, W, D] (a container
    stores them as 2-D matrices, a checkpoint as [D, 3, p, p] and [H, W, D]; the bytes are the
    same row-major order either way)."""

    def __init__(self, src, cfg):
        self.src = copy.copy(src)       # the same reader (and trunk bytes) without tensor_prefix:
        self.src.prefix = ""            # the vision tensors sit outside the language model's
        self.cfg = cfg
        if not self.src.has("vision_tower.patch_embed.proj.weight"):
            raise ValueError(f"{src.path}: no vision_tower.patch_embed.proj.weight")

    def get(self, name, shape):
        w = self.src.tensor(name)
        n = 1
        for d in shape:
            n *= d
        if w.numel() != n:
            raise ValueError(f"{name}: {list(w.shape)} does not hold {shape}")
        return w.reshape(shape).to(torch.float64)

    def load(self):
        c, D, Q, M = self.cfg, self.cfg.hidden, self.cfg.qkv, self.cfg.inter
        pe = "vision_tower.patch_embed."
        w = {"patch": self.get(pe + "proj.weight", [D, c.pixels_per_patch]),
             "pos": self.get(pe + "pos_emb.weight", [c.pos_h, c.pos_w, D]),
             "final": self.get("vision_tower.encoder.final_layernorm.weight", [D]),
             "blocks": []}
        for b in range(c.layers):
            k = f"vision_tower.encoder.blocks.{b}."
            w["blocks"].append({"norm0": self.get(k + "norm0.weight", [D]), "norm1": self.get(k + "norm1.weight", [D]),
                                "wqkv": self.get(k + "wqkv.weight", [3 * Q, D]), "wo": self.get(k + "wo.weight", [D, Q]),
                                "fc0": self.get(k + "mlp.fc0.weight", [M, D]), "fc1": self.get(k + "mlp.fc1.weight", [D, M])})
        w["proj0"] = self.get("mm_projector.proj.0.weight", [4 * D, 4 * D])
        w["proj2"] = self.get("mm_projector.proj.2.weight", [c.text_hidden, 4 * D])
        w["post_norm"] = self.get("mm_projector.post_norm.weight", [c.text_hidden])
        return w


# ----------------------------------------------------------------------------------------------
# the tower (spec 8.4)


def gelu_tanh(z):
    return 0.5 * z * (1 + torch.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))


def gelu_erf(z):
    return 0.5 * z * (1 + torch.erf(z / math.sqrt(2)))


def _axis(n_out, n_in):
    """Bilinear sampling along one axis, align_corners = False: source s = (i + 0.5) n_in / n_out
    - 0.5 clamped to [0, n_in - 1]; returns (i0, i1, weight of i1)."""
    s = ((torch.arange(n_out, dtype=torch.float64) + 0.5) * n_in / n_out - 0.5).clamp(0, n_in - 1)
    i0 = torch.floor(s).long()
    return i0, (i0 + 1).clamp(max=n_in - 1), s - i0


def resize_pos(grid, gh, gw):
    """The [H, W, D] position grid resized bilinearly to [gh, gw, D] (itself when the sizes match)."""
    H, W, _ = grid.shape
    if (gh, gw) == (H, W):
        return grid
    y0, y1, wy = _axis(gh, H)
    x0, x1, wx = _axis(gw, W)
    wy, wx = wy.view(-1, 1, 1), wx.view(1, -1, 1)
    top = grid[y0][:, x0] * (1 - wx) + grid[y0][:, x1] * wx
    bot = grid[y1][:, x0] * (1 - wx) + grid[y1][:, x1] * wx
    return top * (1 - wy) + bot * wy


def rope_tables(gh, gw, hd):
    """cos and sin [gh*gw, hd/2] of the 2-D RoPE: pair j of a head vector turns by col * f_i
    (j even) or row * f_i (j odd), f_i = 10000^(-4i/hd), i = floor(j/2); patch p = row * gw + col."""
    f = 10000.0 ** (-4.0 * torch.arange(hd // 4, dtype=torch.float64) / hd)
    j = torch.arange(hd // 2)
    fj = f[j // 2]
    p = torch.arange(gh * gw)
    row, col = (p // gw).to(torch.float64), (p % gw).to(torch.float64)
    ang = torch.where(j % 2 == 0, col.view(-1, 1) * fj, row.view(-1, 1) * fj)
    return torch.cos(ang), torch.sin(ang)


def rotate(x, cos, sin):
    """x [P, heads, hd]: each adjacent pair (a, b) -> (a cos - b sin, a sin + b cos)."""
    a, b = x[..., 0::2], x[..., 1::2]
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)
    return torch.stack((a * c - b * s, a * s + b * c), -1).flatten(-2)


def stages(cfg):
    """The intermediates `tower` can stop at, in order (the C engine's WASTE_VIS_STAGE names)."""
    out = ["embed"]
    for b in range(cfg.layers):
        out += [f"attn{b}", f"n1_{b}", f"fc0_{b}", f"act_{b}", f"fc1_{b}", f"block{b}"]
    return out + ["encoder"]


def tower(w, cfg, pixels, gh, gw, stage=None):
    """pixels [gh*gw, 3*p*p] (float64) -> image rows [(gh/2)*(gw/2), text_hidden], or the named
    intermediate [gh*gw, vt_hidden] (`stage`, see STAGE_HELP)."""
    P, D, H, Q = gh * gw, cfg.hidden, cfg.heads, cfg.qkv
    hd = Q // H
    if pixels.shape != (P, cfg.pixels_per_patch):
        raise ValueError(f"pixels {list(pixels.shape)} for a {gh}x{gw} grid")
    if stage is not None and stage not in stages(cfg):
        raise ValueError(f"stage {stage!r}: not one of {STAGE_HELP} (blocks 0..{cfg.layers - 1})")
    if stage is None and (gh % 2 or gw % 2):
        raise ValueError(f"a {gh}x{gw} grid: the 2x2 merge needs both sides even")
    cut = lambda t: t[:, :D]                                       # noqa: E731  (wide stages)
    x = pixels @ w["patch"].t() + resize_pos(w["pos"], gh, gw).reshape(P, D)
    if stage == "embed":
        return x
    cos, sin = rope_tables(gh, gw, hd)
    for b, k in enumerate(w["blocks"]):
        y = rmsnorm(x, k["norm0"], cfg.eps)
        q, kk, v = (y @ k["wqkv"].t()).view(P, 3, H, hd).unbind(1)   # rows q | k | v, each head-major
        q, kk = rotate(q, cos, sin), rotate(kk, cos, sin)
        o = torch.empty(P, H, hd)
        for h in range(H):                                         # bidirectional, all patches
            a = torch.softmax(q[:, h] @ kk[:, h].t() / math.sqrt(hd), -1)
            o[:, h] = a @ v[:, h]
        x = x + o.reshape(P, Q) @ k["wo"].t()
        if stage == f"attn{b}":
            return x
        y = rmsnorm(x, k["norm1"], cfg.eps)
        if stage == f"n1_{b}":
            return y
        f = y @ k["fc0"].t()
        if stage == f"fc0_{b}":
            return cut(f)
        f = gelu_tanh(f)
        if stage == f"act_{b}":
            return cut(f)
        f = f @ k["fc1"].t()
        if stage == f"fc1_{b}":
            return f
        x = x + f
        if stage == f"block{b}":
            return x
    x = rmsnorm(x, w["final"], cfg.eps)
    if stage == "encoder":
        return x
    m = x.view(gh // 2, 2, gw // 2, 2, D).permute(0, 2, 1, 3, 4).reshape(-1, 4 * D)
    e = gelu_erf(m @ w["proj0"].t()) @ w["proj2"].t()
    return rmsnorm(e, w["post_norm"], cfg.proj_eps)


def read_pixels(path, gh, gw, cfg):
    n = gh * gw * cfg.pixels_per_patch
    a = np.fromfile(path, dtype="<f4")
    if a.size != n:
        raise ValueError(f"{path}: {a.size} floats, a {gh}x{gw} grid of {cfg.pixels_per_patch} needs {n}")
    return torch.from_numpy(a.astype(np.float64)).view(gh * gw, cfg.pixels_per_patch)


def write_f32(path, t):
    with open(path, "wb") as f:
        f.write(t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes())


# ----------------------------------------------------------------------------------------------
# images in the token stream (spec 8.6)


class EmbeddingWithImages(nn.Module):
    """The embedding table, except that the positions holding the media placeholder take the
    image rows in order (across images); a placeholder left over once the rows run out reads the
    table, as the C engine does. Installed in place of the text model's embed_tokens, so the text
    reference runs unchanged."""

    def __init__(self, table, pad, rows):
        super().__init__()
        self.table, self.pad, self.rows = table, pad, rows

    def forward(self, ids):
        x = self.table(ids).clone()
        flat = x.view(-1, x.shape[-1])
        where = torch.nonzero(ids.reshape(-1) == self.pad).view(-1)[:self.rows.shape[0]]
        flat[where] = self.rows[:where.numel()].to(flat.dtype)
        return x


def expand(ids, pad, counts):
    """One placeholder per image -> counts[i] copies for image i (waste_image_expand)."""
    n = sum(1 for t in ids if t == pad)
    if n != len(counts):
        raise ValueError(f"{n} media placeholders ({pad}) in the prompt for {len(counts)} images")
    out, k = [], 0
    for t in ids:
        if t == pad:
            out += [pad] * counts[k]
            k += 1
        else:
            out.append(t)
    return out


def read_ids(arg):
    text = open(arg).read() if os.path.exists(arg) else arg
    return [int(t) for t in text.replace(",", " ").split()]


def image_logits(src, ids, images):
    """Logits [T, vocab] (float64) of the expanded prompt; `images` is a list of (pixels, gh, gw)."""
    if not is_k3(src.raw_cfg):
        raise ValueError(f"{src.path}: not a Kimi K3 model")
    cfg = vision_config(src)
    if cfg.media_token is None:
        raise ValueError(f"{src.path}: the vision config names no media_placeholder_token_id")
    w = VisionWeights(src, cfg).load()
    with torch.no_grad():
        rows = [tower(w, cfg, px, gh, gw) for px, gh, gw in images]
    ids = expand(ids, cfg.media_token, [r.shape[0] for r in rows])
    model = load_k3_tensors(KimiK3ForCausalLM(src.cfg, dtype=torch.float64), src)
    if model.config.hidden_size != cfg.text_hidden:
        raise ValueError(f"image rows of {cfg.text_hidden} for a text model of {model.config.hidden_size}")
    rows = torch.cat(rows) if rows else torch.zeros(0, cfg.text_hidden)
    model.model.embed_tokens = EmbeddingWithImages(model.model.embed_tokens, cfg.media_token, rows)
    with torch.no_grad():
        return model(torch.tensor(ids), mode="loop")


# ----------------------------------------------------------------------------------------------
# the C engine's preprocessing (spec 8.3), in float32 arithmetic


def choose_grid(w, h, max_patches, patch=14):
    """(gh, gw): the largest aspect-keeping grid within max_patches, even on both sides, at least 2."""
    scale = min(1.0, math.sqrt(max_patches / (w * h / (patch * patch))))
    gw = max(2, int(w * scale / patch + 0.5)) & ~1
    gh = max(2, int(h * scale / patch + 0.5)) & ~1
    while gw * gh > max_patches and (gw > 2 or gh > 2):
        if gw >= gh and gw > 2:
            gw -= 2
        elif gh > 2:
            gh -= 2
        else:
            break
    return gh, gw


def decode_rgb(path):
    """8-bit RGB [h, w, 3] as the engine decodes it: alpha dropped, grey replicated, 16 bits -> high byte."""
    from PIL import Image
    with Image.open(path) as im:
        im.seek(0)
        if im.width * im.height > MAX_SOURCE_PIXELS:
            raise ValueError(f"{path}: {im.width}x{im.height} exceeds the {MAX_SOURCE_PIXELS}-pixel limit")
        if im.mode.startswith("I;16") or im.mode == "I":
            g = (np.asarray(im).astype(np.uint32) >> 8).astype(np.uint8)
            return np.repeat(g[:, :, None], 3, axis=2)
        return np.asarray(im.convert("RGB"), dtype=np.uint8)


def c_engine_pixels(rgb, max_patches, mean, std, patch=14):
    """rgb [h, w, 3] uint8 -> (pixels float32 [gh*gw, 3, patch, patch], gh, gw). Every operation is
    one float32 operation in the engine's order (half-pixel source coordinate, clamp to edge,
    bilinear, / 255, (v - mean) / std), so the result is the engine's bit for bit."""
    f = np.float32
    sh, sw = rgb.shape[:2]
    gh, gw = choose_grid(sw, sh, max_patches, patch)
    H, W = gh * patch, gw * patch

    def axis(n_out, n_in):
        r = f(n_in) / f(n_out)
        s = (np.arange(n_out, dtype=f) + f(0.5)) * r - f(0.5)
        i0 = np.floor(s)
        wgt = s - i0
        i0 = i0.astype(np.int64)
        return np.clip(i0, 0, n_in - 1), np.clip(i0 + 1, 0, n_in - 1), wgt

    y0, y1, wy = axis(H, sh)
    x0, x1, wx = axis(W, sw)
    wy, omy = wy[:, None], (f(1) - wy)[:, None]
    omx = f(1) - wx
    out = np.empty((3, H, W), dtype=f)
    for c in range(3):
        ch = rgb[:, :, c].astype(f)
        a, b = ch[y0][:, x0], ch[y0][:, x1]
        d, e = ch[y1][:, x0], ch[y1][:, x1]
        v = omy * (omx * a + wx * b) + wy * (omx * d + wx * e)
        out[c] = (v / f(255.0) - f(mean[c])) / f(std[c])
    px = out.reshape(3, gh, patch, gw, patch).transpose(1, 3, 0, 2, 4)
    return np.ascontiguousarray(px).reshape(gh * gw, 3, patch, patch), gh, gw


# ----------------------------------------------------------------------------------------------
# self-test: the pieces against other statements of the same formulas


def _self_test():
    import torch.nn.functional as F
    gen = torch.Generator().manual_seed(0)
    worst = 0.0

    def check(what, a, b, tol=1e-12):
        nonlocal worst
        d = ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()
        worst = max(worst, d)
        print(f"{'ok  ' if d <= tol else 'FAIL'} {what}: max rel diff {d:.2e}")
        if d > tol:
            raise SystemExit(1)

    grid = torch.randn(8, 8, 5, generator=gen)
    for gh, gw in ((4, 6), (8, 8), (12, 10), (2, 16)):
        want = F.interpolate(grid.permute(2, 0, 1)[None], size=(gh, gw), mode="bilinear", align_corners=False)[0].permute(1, 2, 0)
        check(f"position grid 8x8 -> {gh}x{gw} vs F.interpolate", resize_pos(grid, gh, gw), want)

    gh, gw, hd = 3, 5, 8
    x = torch.randn(gh * gw, 2, hd, generator=gen)
    cos, sin = rope_tables(gh, gw, hd)
    want = torch.empty_like(x)
    for p in range(gh * gw):
        for j in range(hd // 2):
            ang = (p % gw if j % 2 == 0 else p // gw) * 10000.0 ** (-4 * (j // 2) / hd)
            z = torch.complex(x[p, :, 2 * j], x[p, :, 2 * j + 1]) * complex(math.cos(ang), math.sin(ang))
            want[p, :, 2 * j], want[p, :, 2 * j + 1] = z.real, z.imag
    check("2-D RoPE vs complex rotation per pair", rotate(x, cos, sin), want)

    z = torch.linspace(-6, 6, 101)
    check("gelu_erf vs torch", gelu_erf(z), F.gelu(z))
    check("gelu_tanh vs torch", gelu_tanh(z), F.gelu(z, approximate="tanh"))

    # a whole small tower against a patch-by-patch statement of 8.4 (merge order included)
    cfg = VisionConfig({"vt_hidden_size": 8, "vt_num_hidden_layers": 2, "vt_num_attention_heads": 2, "qkv_hidden_size": 8,
                        "vt_intermediate_size": 12, "init_pos_emb_height": 4, "init_pos_emb_width": 4, "patch_size": 2,
                        "text_hidden_size": 6}, 6)
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    w = {"patch": r(8, 12), "pos": r(4, 4, 8), "final": r(8), "proj0": r(32, 32) / 5, "proj2": r(6, 32) / 5, "post_norm": r(6),
         "blocks": [{"norm0": r(8), "norm1": r(8), "wqkv": r(24, 8) / 3, "wo": r(8, 8) / 3, "fc0": r(12, 8) / 3, "fc1": r(8, 12) / 3}
                    for _ in range(2)]}
    gh, gw = 4, 6
    px = r(gh * gw, 12)
    got = tower(w, cfg, px, gh, gw)
    pos = resize_pos(w["pos"], gh, gw)
    xs = [w["patch"] @ px[p] + pos[p // gw, p % gw] for p in range(gh * gw)]
    nrm = lambda v, g, e: v / torch.sqrt((v * v).mean() + e) * g  # noqa: E731
    for k in w["blocks"]:
        qkv = [k["wqkv"] @ nrm(v, k["norm0"], cfg.eps) for v in xs]
        heads = []
        for h in range(2):
            def rot(v, p):
                out = v.clone()
                for j in range(2):
                    ang = (p % gw if j % 2 == 0 else p // gw) * 10000.0 ** (-4 * (j // 2) / 4)
                    a, b = v[2 * j], v[2 * j + 1]
                    out[2 * j], out[2 * j + 1] = a * math.cos(ang) - b * math.sin(ang), a * math.sin(ang) + b * math.cos(ang)
                return out
            q = [rot(t[4 * h:4 * h + 4], p) for p, t in enumerate(qkv)]
            kk = [rot(t[8 + 4 * h:8 + 4 * h + 4], p) for p, t in enumerate(qkv)]
            v = [t[16 + 4 * h:16 + 4 * h + 4] for t in qkv]
            heads.append([sum(a * vj for a, vj in zip(torch.softmax(torch.stack([qi @ kj / 2 for kj in kk]), 0), v)) for qi in q])
        xs = [x + k["wo"] @ torch.cat([heads[0][p], heads[1][p]]) for p, x in enumerate(xs)]
        xs = [x + k["fc1"] @ gelu_tanh(k["fc0"] @ nrm(x, k["norm1"], cfg.eps)) for x in xs]
    xs = [nrm(x, w["final"], cfg.eps) for x in xs]
    want = []
    for a in range(gh // 2):
        for b in range(gw // 2):
            m = torch.cat([xs[(2 * a + dy) * gw + 2 * b + dx] for dy in (0, 1) for dx in (0, 1)])
            want.append(nrm(w["proj2"] @ gelu_erf(w["proj0"] @ m), w["post_norm"], 1e-5))
    check("tower vs patch-by-patch", got, torch.stack(want), 1e-10)

    # the grid rule of 8.3 on its own examples, and the resize's identity case
    assert choose_grid(896, 896, 1024) == (32, 32) and choose_grid(354, 354, 1024) == (24, 24)
    assert choose_grid(10, 10, 1024) == (2, 2) and choose_grid(5000, 100, 1024) == (4, 226)
    rgb = (np.arange(28 * 56 * 3) % 251).astype(np.uint8).reshape(28, 56, 3)
    px, gh, gw = c_engine_pixels(rgb, 1024, [0.5] * 3, [0.5] * 3)
    assert (gh, gw) == (2, 4)
    back = px.reshape(gh, gw, 3, 14, 14).transpose(2, 0, 3, 1, 4).reshape(3, 28, 56)
    assert np.array_equal(back, (rgb.transpose(2, 0, 1).astype(np.float32) / np.float32(255) - np.float32(0.5)) / np.float32(0.5))
    print("ok   C-engine grid examples and the identity resize")
    print(f"all passed (worst {worst:.2e})")


# ----------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tower", help="pixels -> image rows (or an intermediate)")
    t.add_argument("model")
    t.add_argument("pixels")
    t.add_argument("gh", type=int)
    t.add_argument("gw", type=int)
    t.add_argument("out")
    t.add_argument("--stage", help=STAGE_HELP)
    lg = sub.add_parser("logits", help="logits of every position of a prompt with images")
    lg.add_argument("model")
    lg.add_argument("ids", help="a file of token ids (commas or white space) or the list itself")
    lg.add_argument("out")
    lg.add_argument("--image", nargs=3, action="append", default=[], metavar=("PIXELS", "GH", "GW"),
                    help="one per media placeholder, in prompt order")
    px = sub.add_parser("pixels", help="the C engine's preprocessing of an image file")
    px.add_argument("image")
    px.add_argument("out")
    px.add_argument("--max-patches", type=int)
    px.add_argument("--model", help="take max_patches, image_mean and image_std from this model's vision config")
    sub.add_parser("selftest", help="check the pieces against other statements of the formulas")
    a = ap.parse_args()
    try:
        run(a)
    except (ValueError, OSError) as e:
        sys.exit(f"kimi_k3_vision.py {a.cmd}: {e}")


def run(a):
    if a.cmd == "selftest":
        _self_test()
    elif a.cmd == "tower":
        src = open_source(a.model)
        cfg = vision_config(src)
        w = VisionWeights(src, cfg).load()
        with torch.no_grad():
            out = tower(w, cfg, read_pixels(a.pixels, a.gh, a.gw, cfg), a.gh, a.gw, a.stage)
        write_f32(a.out, out)
        print(f"grid {a.gh}x{a.gw} -> {tuple(out.shape)}  mean {out.mean().item():+.5f}  std {out.std(unbiased=False).item():.5f}")
    elif a.cmd == "logits":
        src = open_source(a.model)
        cfg = vision_config(src)
        images = [(read_pixels(p, int(h), int(w), cfg), int(h), int(w)) for p, h, w in a.image]
        out = image_logits(src, read_ids(a.ids), images)
        write_f32(a.out, out)
        print(f"{out.shape[0]} positions x {out.shape[1]}")
    else:
        max_patches, mean, std = 1024, [0.5] * 3, [0.5] * 3
        if a.model:
            cfg = vision_config(open_source(a.model))
            max_patches, mean, std = cfg.max_patches, cfg.mean, cfg.std
        if a.max_patches:
            max_patches = a.max_patches
        pixels, gh, gw = c_engine_pixels(decode_rgb(a.image), max_patches, mean, std)
        pixels.astype("<f4").tofile(a.out)
        print(gh, gw)


if __name__ == "__main__":
    main()
