#!/usr/bin/python3
"""Train the small Kimi-Linear demo model on this machine (CPU, float32), reproducibly.

The model is tools/reference/kimi_linear_model.py -- the same module that produces the golden
files -- so training, golden files and the engine describe one architecture.

    /usr/bin/python3 tools/demo/train.py --minutes 60            # train (fresh), export at the end
    /usr/bin/python3 tools/demo/train.py --resume                # continue from /work/demo/ckpt
    /usr/bin/python3 tools/demo/train.py --export-only           # write /work/demo/hf from the checkpoint
    /usr/bin/python3 tools/demo/train.py --bench 12 --size m     # measure tok/s of a size, then exit

Data (--data, default /work/demo/data): train.ids and heldout.ids (little-endian uint16 token ids,
documents separated by [EOS]), tiktoken.model and tokenizer_config.json. `--random-data` trains on
random ids instead (for development).

Schedule: linear warm-up for --warmup steps, then cosine decay to --min-lr-frac of the peak. The
total step count is estimated from the speed measured during the first warm-up steps so the run
takes about --minutes, then fixed and stored in the checkpoint: a resumed run follows the same
schedule and sees the same data in the same order.

Routing is trained the way the architecture does it: the router weights by gradient, the selection
bias e_score_correction_bias by the auxiliary-loss-free rule (after each step
bias_e += u * sign(mean_load - load_e), with u following the learning-rate schedule: strong early,
when the routing of a young model collapses onto a few experts, gentle late), plus a tiny
sequence-wise balance loss (--balance-alpha).

Threads: see the note at the re-exec below (OPENBLAS_NUM_THREADS=1 beside torch's 2 threads).
"""
import argparse
import json
import math
import os
import random
import shutil
import struct
import sys
import time

if os.environ.get("MALLOC_MMAP_MAX_") is None:
    # Measured on this machine (2 vCPUs), both settings are worth ~2x:
    # - training allocates and frees tensors of tens of MB many times a step; glibc serves those
    #   with mmap/munmap, so every allocation page-faults afresh. Keep them on the heap and never
    #   hand memory back (glibc's malloc tunables).
    # - Debian's OpenBLAS (pthread build) keeps its own pool of threads beside torch's OpenMP pool;
    #   two of each on two vCPUs fight (2 OpenMP + 2 BLAS: ~670 tok/s; 2 + 1: ~1460; 1 + 1: ~1340).
    # Both must be set before the libraries load: re-exec.
    env = dict(os.environ, MALLOC_MMAP_MAX_="0", MALLOC_TRIM_THRESHOLD_=str(1 << 36))
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.execve(sys.executable, [sys.executable] + sys.argv, env)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
from kimi_linear_model import KimiLinearForCausalLM, KDA, MoE  # noqa: E402

VOCAB = 4096
BOS, EOS = 4089, 4090

# Candidate sizes. Every dimension is a multiple of 8 (the experts' VQ vectors are 8 wide) and the
# big matrices' widths are multiples of 128 where possible (Q4G/Q8G groups of 128).
SIZES = {
    "xs": dict(hidden=128, kda_heads=2, kda_head_dim=64, mla_heads=2, kv_lora=64, nope=32, rope=16, v_head=32,
               dense_inter=384, experts=32, top_k=4, moe_inter=64),
    "s": dict(hidden=192, kda_heads=3, kda_head_dim=64, mla_heads=3, kv_lora=96, nope=32, rope=16, v_head=32,
              dense_inter=512, experts=32, top_k=4, moe_inter=64),
    "m": dict(hidden=256, kda_heads=4, kda_head_dim=64, mla_heads=4, kv_lora=128, nope=32, rope=16, v_head=32,
              dense_inter=768, experts=32, top_k=4, moe_inter=128),
    "l": dict(hidden=256, kda_heads=4, kda_head_dim=64, mla_heads=4, kv_lora=128, nope=48, rope=16, v_head=48,
              dense_inter=768, experts=64, top_k=6, moe_inter=128),
}


def layer_pattern(layers):
    """Kimi's 3:1 pattern, 1-based lists: every fourth layer is MLA, and so is the last."""
    kda, full = [], []
    for i in range(layers):
        (full if i % 4 == 3 or i == layers - 1 else kda).append(i + 1)
    return kda, full


def make_config(size, layers):
    s = SIZES[size]
    kda, full = layer_pattern(layers)
    return {
        "model_type": "kimi_linear",
        "architectures": ["KimiLinearForCausalLM"],
        "vocab_size": VOCAB,
        "hidden_size": s["hidden"],
        "num_hidden_layers": layers,
        "intermediate_size": s["dense_inter"],
        "moe_intermediate_size": s["moe_inter"],
        "num_experts": s["experts"],
        "num_experts_per_token": s["top_k"],
        "num_shared_experts": 1,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "moe_renormalize": True,
        "moe_router_activation_func": "sigmoid",
        "routed_scaling_factor": 2.446,
        "use_grouped_topk": True,
        "num_expert_group": 1,
        "topk_group": 1,
        "num_attention_heads": s["mla_heads"],
        "num_key_value_heads": s["mla_heads"],
        "q_lora_rank": None,
        "kv_lora_rank": s["kv_lora"],
        "qk_nope_head_dim": s["nope"],
        "qk_rope_head_dim": s["rope"],
        "v_head_dim": s["v_head"],
        "mla_use_nope": True,
        "linear_attn_config": {
            "num_heads": s["kda_heads"],
            "head_dim": s["kda_head_dim"],
            "short_conv_kernel_size": 4,
            "kda_layers": kda,
            "full_attn_layers": full,
        },
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "pad_token_id": EOS,
        "model_max_length": 4096,
        "torch_dtype": "float32",
    }


def container_bytes(cfg):
    """What `waste convert` (default settings) writes for this config: VQ3R experts in 4 KiB-aligned
    records, codebooks, and a trunk of F32 (vectors and tensors under 65,536 values), Q8G
    (embedding, lm_head) and Q4G (the rest), groups of 128 with f16 scales."""
    H, I, E = cfg["hidden_size"], cfg["moe_intermediate_size"], cfg["num_experts"]
    moe_layers = cfg["num_hidden_layers"] - cfg["first_k_dense_replace"]

    def idx(rows, cols):
        return math.ceil(rows / 64) * 64 * (cols // 8) * 3

    rec = 48 + 2 * idx(I, H) + idx(H, I) + 2 * (2 * I + H)
    rec = math.ceil(rec / 4096) * 4096
    experts = moe_layers * E * rec
    books = moe_layers * 9 * (16 + 256 * 8 * 2)
    model = KimiLinearForCausalLM(cfg, dtype=torch.float32)
    trunk = 0
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if ".block_sparse_moe.experts." in name:
            continue
        n = t.numel()
        if t.dim() <= 1 or n < 65536:
            trunk += 4 * n
            continue
        cols = t.shape[-1]
        rows = n // cols
        groups = math.ceil(cols / 128)
        q8 = name in ("model.embed_tokens.weight", "lm_head.weight")
        trunk += rows * groups * (128 if q8 else 64) + rows * groups * 2
    return experts + books + trunk


def count_params(model):
    total = sum(p.numel() for p in model.parameters())
    experts = sum(p.numel() for n, p in model.named_parameters() if ".block_sparse_moe.experts." in n)
    c = model.config
    per_expert = 3 * c.hidden_size * c.moe_inter
    active = total - experts - c.vocab_size * c.hidden_size + len(model.moe_layers()) * c.top_k * per_expert
    return total, experts, active


# ----------------------------------------------------------------------------------------------
# initialisation


def init_weights(model, seed):
    g = torch.Generator().manual_seed(seed)
    c = model.config
    resid = 0.02 / math.sqrt(2 * c.num_hidden_layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.empty(p.shape).uniform_(1, 16, generator=g)))
            elif name.endswith("dt_bias"):
                dt = torch.exp(torch.empty(p.shape).uniform_(math.log(1e-3), math.log(1e-1), generator=g))
                p.copy_(dt + torch.log(-torch.expm1(-dt)))            # softplus^-1(dt)
            elif "conv1d" in name:
                p.copy_(torch.empty(p.shape).uniform_(-1, 1, generator=g) / math.sqrt(p.shape[-1]))
            elif p.dim() == 1:
                p.fill_(1.0)                                           # norm weights
            elif name.endswith(("o_proj.weight", "down_proj.weight", "w2.weight")):
                p.normal_(0, resid, generator=g)
            else:
                p.normal_(0, 0.02, generator=g)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.zero_()


# ----------------------------------------------------------------------------------------------
# data


class Data:
    """Windows of seq+1 ids from the training stream, in a seeded order per epoch. Epoch e starts
    its windows at offset (e * 97) % seq, so window boundaries move from epoch to epoch."""

    def __init__(self, ids, seq, batch, seed, chat_frac=0.0):
        self.ids, self.seq, self.batch, self.seed, self.chat_frac = ids, seq, batch, seed, chat_frac

    def windows(self, epoch):
        off = (epoch * 97) % self.seq
        starts = torch.arange(off, len(self.ids) - self.seq - 1, self.seq)
        perm = torch.randperm(len(starts), generator=torch.Generator().manual_seed(self.seed * 1000 + epoch))
        return starts[perm]

    def batch_at(self, pos):
        """pos = (epoch, index of the next window); returns (x [B, T], y [B, T], new pos)."""
        epoch, i = pos
        w = self.windows(epoch)
        rows = []
        while len(rows) < self.batch:
            if i >= len(w):
                epoch, i = epoch + 1, 0
                w = self.windows(epoch)
            s = int(w[i])
            row = self.ids[s:s + self.seq + 1]
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch * 100_003 + i)
            if self.chat_frac and torch.rand((), generator=g).item() < self.chat_frac:
                row = chat_row(row, self.seq + 1, g)
            rows.append(row)
            i += 1
        b = torch.stack(rows)
        return b[:, :-1], b[:, 1:], (epoch, i)


# The chat format's tokens in the demo tokenizer (tools/demo/corpus.ts): <|im_user|> "user"
# <|im_middle|> … <|im_end|> <|im_assistant|> "assistant" <|im_middle|> … <|im_end|>
IM_END, IM_USER, IM_ASSISTANT, IM_MIDDLE = 4091, 4092, 4093, 4095
USER, ASSISTANT = [447, 264], [630, 398, 417]


def chat_row(text, n, g):
    """A window of text as one chat turn: the user gives its first k tokens, the assistant continues
    with the next m and ends its turn; the rest of the row is the text that follows. The model so
    learns the chat format the engine renders (an assistant that continues the user's text)."""
    k = int(torch.randint(4, 33, (), generator=g))
    head = [IM_USER, *USER, IM_MIDDLE]
    mid = [IM_END, IM_ASSISTANT, *ASSISTANT, IM_MIDDLE]
    room = n - len(head) - len(mid) - k - 1
    m = int(torch.randint(min(24, room), room + 1, (), generator=g))
    body = text.tolist()
    out = head + body[:k] + mid + body[k:k + m] + [IM_END]
    out += body[k + m:k + m + n - len(out)]
    return torch.tensor(out[:n], dtype=text.dtype)


def read_ids(path):
    return torch.from_numpy(np.fromfile(path, dtype="<u2").astype(np.int64))


def load_data(args):
    if args.random_data:
        g = torch.Generator().manual_seed(12345)
        return torch.randint(0, VOCAB, (3_000_000,), generator=g), torch.randint(0, VOCAB, (100_000,), generator=g)
    tr, ho = read_ids(os.path.join(args.data, "train.ids")), read_ids(os.path.join(args.data, "heldout.ids"))
    for name, t in (("train", tr), ("heldout", ho)):
        if len(t) == 0 or int(t.max()) >= VOCAB:
            raise SystemExit(f"{name}.ids: {len(t)} ids, max {int(t.max()) if len(t) else None} (vocab {VOCAB})")
    return tr, ho


def heldout_windows(ids, seq, limit):
    n = min((len(ids) - 1) // seq, limit)
    return [ids[i * seq:i * seq + seq + 1] for i in range(n)]


@torch.no_grad()
def evaluate(model, windows, batch, chunk):
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(windows), batch):
        b = torch.stack(windows[i:i + batch])
        logits = model(b[:, :-1], mode="chunk", chunk=chunk)
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), b[:, 1:].reshape(-1), reduction="sum").item()
        count += b[:, 1:].numel()
    model.train()
    return total / max(count, 1)


# ----------------------------------------------------------------------------------------------
# routing: balance loss and the bias rule


def balance_loss(model, batch, seq):
    """DeepSeek-V3's sequence-wise balance loss: sum over experts of f_i * P_i per sequence, where
    f_i = E/(k T) * (tokens of the sequence routed to i) and P_i = mean over the sequence of the
    normalised scores s_i / sum_j s_j. Summed over MoE layers, averaged over sequences."""
    loss = 0.0
    for _, moe in model.moe_layers():
        st = moe.stats
        E, k = moe.E, moe.k
        s = st["scores"].view(batch, seq, E)
        p = (s / s.sum(-1, keepdim=True)).mean(1)                                   # [B, E]
        onehot = torch.zeros(batch * seq, E).scatter_(1, st["chosen"], 1.0).view(batch, seq, E)
        f = onehot.sum(1) * (E / (k * seq))                                         # [B, E]
        loss = loss + (f * p).sum(-1).mean()
    return loss


@torch.no_grad()
def update_bias(model, u):
    """Auxiliary-loss-free balancing: raise the bias of under-loaded experts, lower the others'.
    Returns the load of the least and the most loaded expert over all MoE layers, as a fraction of
    the mean load, and how many experts got no token."""
    lo, hi, idle = float("inf"), 0.0, 0
    for _, moe in model.moe_layers():
        load = moe.stats["counts"].to(torch.float32)
        mean = load.mean()
        moe.gate.e_score_correction_bias.add_(u * torch.sign(mean - load))
        lo, hi = min(lo, (load.min() / mean).item()), max(hi, (load.max() / mean).item())
        idle += int((load == 0).sum())
    return lo, hi, idle


# ----------------------------------------------------------------------------------------------
# optimiser and schedule


def make_optimizer(model, lr, wd):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 and "conv1d" not in name else no_decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8)


def lr_at(step, peak, warmup, total, min_frac):
    """step counts from 0 (the step being taken)."""
    if step < warmup:
        return peak * (step + 1) / warmup
    if total is None:
        return peak
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * t)))


# ----------------------------------------------------------------------------------------------
# checkpoint and export


def save_checkpoint(path, state):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def write_safetensors(path, tensors):
    """F32 safetensors: 8-byte little-endian header length, JSON header (space-padded to 8 bytes),
    then the raw little-endian data in header order."""
    header, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, t in tensors:
        data = t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * ((8 - len(js) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)))
        f.write(js)
        for b in blobs:
            f.write(b)


# The sampling the demo model is run with unless the caller says otherwise (the engine reads
# generation_config.json): greedy decoding of so small a model repeats itself within a sentence.
GENERATION = {"do_sample": True, "temperature": 0.7, "top_p": 0.9, "repetition_penalty": 1.15}


def export(model, cfg, out, data_dir, log):
    tmp = out.rstrip("/") + ".tmp"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    tensors = list(model.named_parameters()) + list(model.named_buffers())
    write_safetensors(os.path.join(tmp, "model.safetensors"), sorted(tensors, key=lambda nt: nt[0]))
    for fn in ("tiktoken.model", "tokenizer_config.json", "chat_template.jinja"):
        src = os.path.join(data_dir, fn)
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(tmp, fn))
        elif fn != "chat_template.jinja":
            print(f"warning: {src} not found; the export has no {fn}", flush=True)
    with open(os.path.join(tmp, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": cfg.get("bos_token_id"), "eos_token_id": cfg.get("eos_token_id"), **GENERATION}, f, indent=2)
        f.write("\n")
    with open(os.path.join(tmp, "train-log.json"), "w") as f:
        json.dump(log, f, indent=2)
        f.write("\n")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.replace(tmp, out)
    print(f"exported {out}", flush=True)


def check_engine(out, ids):
    """Run the engine on the exported checkpoint (`waste logits OUT --all`, every weight in f32)
    and compare with this module's logits read back from the same files: float64 token by token
    (the reference) and float32 chunked (as trained). Returns the worst max|diff| / max|logit|."""
    import subprocess
    import tempfile
    import kimi_linear_ref as ref                          # (sets float64 as the default dtype)
    torch.set_default_dtype(torch.float32)
    from kimi_linear_model import load_tensors
    root = os.path.normpath(os.path.join(HERE, "..", ".."))
    with tempfile.TemporaryDirectory() as tmp:
        f = os.path.join(tmp, "logits.bin")
        subprocess.run(["node", os.path.join(root, "bin", "waste.js"), "logits", out, "--ids", ",".join(map(str, ids)),
                        "--all", "--out", f], check=True)
        eng = torch.from_numpy(np.fromfile(f, dtype="<f4").astype(np.float64)).view(len(ids), -1)
    src = ref.Checkpoint(out)
    worst = 0.0
    for dtype, mode in ((torch.float64, "loop"), (torch.float32, "chunk")):
        m = load_tensors(KimiLinearForCausalLM(src.cfg, dtype=dtype), src)
        with torch.no_grad():
            r = m(torch.tensor(ids), mode=mode).to(torch.float64)
        rel = ((eng - r).abs().max() / r.abs().max()).item()
        top1 = (eng.argmax(-1) == r.argmax(-1)).to(torch.float64).mean().item()
        worst = max(worst, rel)
        print(f"engine vs module ({dtype}, KDA {mode}) on {len(ids)} ids: max|diff| {(eng - r).abs().max().item():.3g}, "
              f"max|logit| {r.abs().max().item():.3g}, relative {rel:.3g}, same top-1 {top1:.3f}", flush=True)
    print(f"engine check {'PASSED' if worst <= 1e-4 else 'FAILED'} (worst relative {worst:.3g}, limit 1e-4)", flush=True)
    return worst


# ----------------------------------------------------------------------------------------------


def fmt_time(s):
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="/work/demo/data")
    ap.add_argument("--ckpt", default="/work/demo/ckpt")
    ap.add_argument("--out", default="/work/demo/hf")
    ap.add_argument("--minutes", type=float, default=60.0, help="time budget of the whole run (sets the step count)")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--export-only", action="store_true")
    ap.add_argument("--bench", type=int, default=0, help="run this many steps, print tok/s and exit")
    ap.add_argument("--check-engine", action="store_true",
                    help="after exporting, compare the engine's logits on the export with this module's")
    ap.add_argument("--random-data", action="store_true")
    ap.add_argument("--size", default="s", choices=sorted(SIZES))
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--chunk", type=int, default=32, help="KDA chunk length (32 measured fastest)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--bias-rate", type=float, default=1e-2,
                    help="u of the bias rule at the peak learning rate (it follows the schedule: u * lr / peak)")
    ap.add_argument("--balance-alpha", type=float, default=1e-4)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-windows", type=int, default=48)
    ap.add_argument("--ckpt-minutes", type=float, default=5.0)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--total-steps", type=int, default=None,
                    help="fix the schedule's length instead of deriving it from --minutes; with --resume it "
                         "shortens or lengthens a run's schedule from where it stands (the cosine continues at the new scale)")
    ap.add_argument("--chat-frac", type=float, default=0.25, help="share of training rows turned into one chat turn")
    ap.add_argument("--threads", type=int, default=2, help="torch (OpenMP) threads; OpenBLAS gets OPENBLAS_NUM_THREADS (1)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t_start = time.time()
    ckpt_path = os.path.join(args.ckpt, "ckpt.pt")

    state = None
    if args.resume or args.export_only:
        if not os.path.exists(ckpt_path):
            raise SystemExit(f"{ckpt_path}: no checkpoint to {'resume' if args.resume else 'export'}")
        state = torch.load(ckpt_path)
        a = state["args"]
        for k in ("data", "size", "layers", "seq", "batch", "chunk", "lr", "min_lr_frac", "warmup", "wd", "clip",
                  "bias_rate", "balance_alpha", "eval_every", "eval_windows", "seed", "random_data", "chat_frac"):
            setattr(args, k, a[k])                        # a resumed run is the same run
        cfg = state["config"]
    else:
        cfg = make_config(args.size, args.layers)

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    model = KimiLinearForCausalLM(cfg, dtype=torch.float32)
    init_weights(model, args.seed)
    opt = make_optimizer(model, args.lr, args.wd)
    total, n_exp, active = count_params(model)
    size_mb = container_bytes(cfg) / 1e6

    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        np.random.set_state(state["rng"]["numpy"])
    else:
        state = {"step": 0, "pos": (0, 0), "total_steps": None, "tokens": 0, "wall": 0.0, "history": [],
                 "heldout": [], "calib": None}

    if args.export_only:
        do_export(model, cfg, args, state, None)
        return
    if args.total_steps is not None:
        if args.total_steps <= state["step"]:
            raise SystemExit(f"--total-steps {args.total_steps}: the run is already at step {state['step']}")
        if state["total_steps"] is not None and state["total_steps"] != args.total_steps:
            state.setdefault("schedule_changes", []).append({"at_step": state["step"], "from": state["total_steps"], "to": args.total_steps})
            print(f"schedule: {state['total_steps']} -> {args.total_steps} steps from step {state['step']}", flush=True)
        state["total_steps"] = args.total_steps

    print(f"config {args.size}: hidden {cfg['hidden_size']}, {cfg['num_hidden_layers']} layers, "
          f"{cfg['num_experts']} experts x {cfg['moe_intermediate_size']} top-{cfg['num_experts_per_token']}; "
          f"params {total / 1e6:.2f}M (experts {n_exp / 1e6:.2f}M, active/token {active / 1e6:.2f}M); "
          f"container ~{size_mb:.1f} MB; seq {args.seq} x batch {args.batch}", flush=True)
    if size_mb > 25:
        print("warning: the converted container would exceed 25 MB", flush=True)

    train_ids, ho_ids = load_data(args)
    data = Data(train_ids, args.seq, args.batch, args.seed, args.chat_frac)
    ho = heldout_windows(ho_ids, args.seq, args.eval_windows)
    print(f"data: {len(train_ids)} training ids, {len(ho_ids)} held-out ids ({len(ho)} eval windows)", flush=True)
    tok_per_step = args.batch * args.seq
    model.train()

    budget = args.minutes * 60
    session_start = time.time()
    wall_before = state["wall"]
    last_ckpt = time.time()
    step_times = []
    # the schedule is fixed after this many steps (inside the warm-up, whose learning rates do not
    # depend on it), from the speed of all but the first 10 (the heap grows to size during those)
    calib_steps = min(args.warmup, 30) if not args.bench else args.bench
    loss_ema = None

    def snapshot():
        return {"model": model.state_dict(), "optimizer": opt.state_dict(), "config": cfg, "args": vars(args),
                "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()},
                **{k: state[k] for k in ("step", "pos", "total_steps", "tokens", "wall", "history", "heldout", "calib")},
                "schedule_changes": state.get("schedule_changes", [])}

    while True:
        step = state["step"]
        if state["total_steps"] is not None and step >= state["total_steps"]:
            break
        x, y, pos = data.batch_at(state["pos"])
        lr = lr_at(step, args.lr, args.warmup, state["total_steps"], args.min_lr_frac)
        for gr in opt.param_groups:
            gr["lr"] = lr
        t0 = time.time()
        logits = model(x, mode="chunk", chunk=args.chunk)
        ce = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        loss = ce + args.balance_alpha * balance_loss(model, args.batch, args.seq) if args.balance_alpha else ce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip).item()
        opt.step()
        lo, hi, idle = update_bias(model, args.bias_rate * lr / args.lr)
        dt = time.time() - t0
        step_times.append(dt)
        state["step"] = step + 1
        state["pos"] = pos
        state["tokens"] += tok_per_step
        state["wall"] = wall_before + time.time() - session_start
        cel = ce.item()
        loss_ema = cel if loss_ema is None else 0.9 * loss_ema + 0.1 * cel
        state["history"].append([state["step"], round(cel, 4), round(lr, 7)])

        if args.bench and state["step"] >= args.bench:
            ts = step_times[2:] if len(step_times) > 4 else step_times
            sp = sum(ts) / len(ts)
            t_eval = time.time()
            evaluate(model, ho[:16], args.batch, args.chunk)
            t_eval = (time.time() - t_eval) / max(1, min(16, len(ho))) * args.eval_windows
            print(f"BENCH size {args.size} layers {args.layers} seq {args.seq} batch {args.batch} chunk {args.chunk}: "
                  f"{sp:.2f} s/step, {tok_per_step / sp:.0f} tok/s, eval of {args.eval_windows} windows ~{t_eval:.1f}s; "
                  f"params {total / 1e6:.2f}M active {active / 1e6:.2f}M container ~{size_mb:.1f} MB; "
                  f"tokens in 60 min ~{3600 * tok_per_step / sp / 1e6:.2f}M; loss {cel:.3f}", flush=True)
            return

        if state["total_steps"] is None and state["step"] >= calib_steps:
            # fix the schedule: steps that fit the budget after evals, checkpoints and export
            ts = step_times[10:] if len(step_times) >= 20 else step_times[len(step_times) // 2:]
            sp = sum(ts) / len(ts)
            te = time.time()
            evaluate(model, ho, args.batch, args.chunk)
            te = time.time() - te
            elapsed = state["wall"] + te
            reserve = 60 + 2 * te                                        # final eval + export
            per_step = sp * 1.03 + te / args.eval_every                  # 3% slack for checkpoints, logging
            state["total_steps"] = max(state["step"] + 1, int(state["step"] + (budget - elapsed - reserve) / per_step))
            state["calib"] = {"sec_per_step": sp, "tok_per_sec": tok_per_step / sp, "eval_sec": te}
            print(f"schedule: {sp:.2f} s/step ({tok_per_step / sp:.0f} tok/s), eval {te:.1f}s -> "
                  f"{state['total_steps']} steps, {state['total_steps'] * tok_per_step / 1e6:.2f}M tokens", flush=True)

        s = state["step"]
        tot = state["total_steps"]
        if s % args.log_every == 0 or s == tot:
            recent = step_times[-args.log_every:]
            tps = tok_per_step * len(recent) / sum(recent)
            eta = (tot - s) * (sum(recent) / len(recent)) if tot else float("nan")
            print(f"step {s}/{tot or '?'} loss {cel:.4f} (ema {loss_ema:.4f}) lr {lr:.2e} gnorm {gnorm:.2f} "
                  f"{tps:.0f} tok/s tokens {state['tokens'] / 1e6:.2f}M elapsed {fmt_time(state['wall'])} "
                  f"ETA {fmt_time(eta) if tot else '?'} expert load min/max {lo:.2f}/{hi:.2f} of mean, idle {idle}", flush=True)
        if tot and (s % args.eval_every == 0 or s == tot):
            hl = evaluate(model, ho, args.batch, args.chunk)
            state["heldout"].append([s, round(hl, 4)])
            print(f"heldout step {s}: loss {hl:.4f} ppl {math.exp(hl):.1f}", flush=True)
        if not args.bench and time.time() - last_ckpt > args.ckpt_minutes * 60:
            save_checkpoint(ckpt_path, snapshot())
            last_ckpt = time.time()
            print(f"checkpoint step {s} -> {ckpt_path}", flush=True)

    save_checkpoint(ckpt_path, snapshot())
    do_export(model, cfg, args, state, ho)


def do_export(model, cfg, args, state, ho):
    model.eval()
    if ho is None:
        _, ho_ids = load_data(args)
        ho = heldout_windows(ho_ids, args.seq, args.eval_windows)
    hist = state["history"]
    tail = [h[1] for h in hist[-50:]]
    if not args.random_data:                             # the final number is on all of heldout.ids
        ho = heldout_windows(load_data(args)[1], args.seq, 1 << 30)
    final_ho = evaluate(model, ho, args.batch, args.chunk) if ho else float("nan")
    total, n_exp, active = count_params(model)
    log = {
        "config": cfg,
        "train_args": {k: v for k, v in vars(args).items() if k not in ("resume", "export_only", "bench")},
        "seed": args.seed,
        "steps": state["step"],
        "total_steps": state["total_steps"],
        "schedule_changes": state.get("schedule_changes", []),
        "tokens_seen": state["tokens"],
        "tokens_per_step": args.batch * args.seq,
        "params": {"total": total, "routed_experts": n_exp, "active_per_token": active},
        "final_train_loss": sum(tail) / len(tail) if tail else None,
        "final_train_loss_window": len(tail),
        "final_heldout_loss": final_ho,
        "heldout_perplexity": math.exp(final_ho),
        "heldout_tokens": sum(len(w) - 1 for w in ho),
        "heldout_curve": state["heldout"],
        "wall_time_sec": round(state["wall"], 1),
        "measured": state["calib"],
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "model": "tools/reference/kimi_linear_model.py (KimiLinearForCausalLM), float32, KDA chunked",
    }
    print(f"final: {state['step']} steps, {state['tokens'] / 1e6:.2f}M tokens, held-out loss {final_ho:.4f} "
          f"(ppl {math.exp(final_ho):.1f}), wall {fmt_time(state['wall'])}", flush=True)
    export(model, cfg, args.out, args.data, log)
    if args.check_engine:
        ids = (load_data(args)[1][:96] if not args.random_data else torch.arange(96) * 37 % VOCAB).tolist()
        check_engine(args.out, ids)


if __name__ == "__main__":
    main()
