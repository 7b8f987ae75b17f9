#!/usr/bin/python3
"""Float64 reference logits for MoE checkpoints of nine HF model_types (dev only).

Reads a HuggingFace checkpoint folder (config.json + safetensors, sharded or not; BF16/F16/F32/F64,
MXFP4, and F8_E4M3 with block scales, mixed freely), picks the module by config.json's `model_type`:
  qwen3_moe, mixtral, olmoe, glm4_moe, gpt_oss          moe_families_model.py
  deepseek_v3, kimi_k2                                  deepseek_model.py
  qwen3_next, qwen3_5_moe (and qwen3_5_moe_text)        qwen_next_model.py
runs its Model in float64 over the token ids (one causal prefill from position 0) and writes the
logits of EVERY position as little-endian float32, [positions][vocab]. The facts each family
follows, and where other readings differ, are in the docstring of its module.

    /usr/bin/python3 tools/reference/moe_ref.py DIR --ids 1,2,3 --out logits.bin
        [--hidden hidden.bin]    x after every layer, float32 [layers][positions][hidden]
        [--routing routing.json] each MoE layer's chosen experts and weights per position
        [--decode]               compute the logits token by token with the caches (MLA latent
                                 cache with absorbed attention; DeltaNet conv/recurrent states)
        [--mla naive|absorbed]   deepseek_v3/kimi_k2 prefill attention form (default naive)
        [--deltanet recurrent|chunked]  qwen3_next/qwen3_5_moe DeltaNet form (default recurrent)
        [--names]                list the tensor names this config needs (release form), and stop
        [--names-fp8]            deepseek_v3/kimi_k2: the names of the FP8 release form (adds
                                 `<name>_scale_inv` beside every FP8 weight), and stop

A tensor the config needs and the checkpoint lacks is an error (the routers' e_score_correction_bias
excepted: HF reads it as zeros); tensors it does not use are named on stderr (MTP layers, `mtp.*`,
`model.visual.*` and FP8 scale companions silently).
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek_model  # noqa: E402
import moe_families_model  # noqa: E402
import qwen_next_model  # noqa: E402
from moe_families_model import Checkpoint  # noqa: E402


def load(path):
    """(model, expected_tensors function) for the checkpoint folder's model_type."""
    ck = Checkpoint(path)
    fam = ck.cfg.get("model_type")
    if fam in deepseek_model.FAMILIES or fam == "deepseek_v32":
        return deepseek_model.Model(ck), deepseek_model.expected_tensors
    if fam in ("qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text"):
        return qwen_next_model.Model(ck), qwen_next_model.expected_tensors
    return moe_families_model.Model(ck), moe_families_model.expected_tensors


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--ids", help="comma-separated token ids")
    ap.add_argument("--out", help="float32 logits of every position, row after row")
    ap.add_argument("--hidden", help="float32 x after every layer, [layers][positions][hidden]")
    ap.add_argument("--routing", help="JSON: per MoE layer, the experts and weights of every position")
    ap.add_argument("--decode", action="store_true", help="token by token with caches (deepseek/qwen-next families)")
    ap.add_argument("--mla", choices=("naive", "absorbed"), default="naive", help="deepseek_v3/kimi_k2 attention form")
    ap.add_argument("--deltanet", choices=("recurrent", "chunked"), default="recurrent", help="qwen3_next/qwen3_5_moe DeltaNet form")
    ap.add_argument("--names", action="store_true", help="print the tensor names the config needs and exit")
    ap.add_argument("--names-fp8", action="store_true", help="deepseek_v3/kimi_k2: names of the FP8 release form, and exit")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, expected_tensors = load(args.checkpoint)
    if args.names or args.names_fp8:
        names = expected_tensors(model.c)
        if args.names_fp8:
            if not isinstance(model, deepseek_model.Model):
                ap.error("--names-fp8 is for deepseek_v3/kimi_k2")
            names = [m for n in names for m in ([n, n + "_scale_inv"] if deepseek_model.fp8_eligible(n) else [n])]
        print("\n".join(names))
        return
    if isinstance(model, deepseek_model.Model):
        model.mla = args.mla
    if isinstance(model, qwen_next_model.Model):
        model.deltanet = args.deltanet
    if args.decode and not hasattr(model, "decode"):
        ap.error("--decode is for the deepseek_v3/kimi_k2/qwen3_next/qwen3_5_moe families")
    if args.decode and (args.hidden or args.routing):
        ap.error("--decode writes logits only")
    if not args.ids or not args.out:
        ap.error("--ids and --out are required")
    missing, extra = model.check_names()
    missing = [n for n in missing if not n.endswith("e_score_correction_bias")]
    if missing:
        sys.exit(f"{args.checkpoint}: {len(missing)} tensors missing, e.g. {', '.join(missing[:5])}")
    if extra:
        print(f"note: {len(extra)} tensors not used, e.g. {', '.join(extra[:5])}", file=sys.stderr)
    ids = [int(i) for i in args.ids.split(",")]
    trace = [] if args.hidden else None
    routing = [] if args.routing else None
    with torch.no_grad():
        logits = model.decode(ids) if args.decode else model.forward(ids, trace, routing)
    with open(args.out, "wb") as f:
        f.write(logits.to(torch.float32).numpy().astype("<f4").tobytes())
    if args.hidden:
        with open(args.hidden, "wb") as f:
            f.write(torch.stack(trace).to(torch.float32).numpy().astype("<f4").tobytes())
    if args.routing:
        with open(args.routing, "w") as f:
            json.dump({"model_type": model.c.family, "ids": ids, "layers": routing}, f)


if __name__ == "__main__":
    main()
