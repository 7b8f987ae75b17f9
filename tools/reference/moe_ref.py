#!/usr/bin/python3
"""Float64 reference logits for qwen3_moe, mixtral, olmoe, glm4_moe and gpt_oss checkpoints (dev only).

Reads a HuggingFace checkpoint folder (config.json + safetensors, sharded or not), picks the family
by config.json's `model_type`, runs moe_families_model.Model in float64 over the token ids (one causal
prefill from position 0) and writes the logits of EVERY position as little-endian float32,
[positions][vocab]. The facts each family follows, and where other readings differ, are in the
docstring of moe_families_model.py.

    /usr/bin/python3 tools/reference/moe_ref.py DIR --ids 1,2,3 --out logits.bin
        [--hidden hidden.bin]    x after every layer, float32 [layers][positions][hidden]
        [--routing routing.json] each MoE layer's chosen experts and weights per position
        [--names]                list the tensor names this config needs, and stop

A tensor the config needs and the checkpoint lacks is an error (glm4_moe's e_score_correction_bias
excepted: HF reads it as zeros); tensors it does not use are named on stderr (MTP layers past
num_hidden_layers silently).
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from moe_families_model import Checkpoint, Model, expected_tensors  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--ids", help="comma-separated token ids")
    ap.add_argument("--out", help="float32 logits of every position, row after row")
    ap.add_argument("--hidden", help="float32 x after every layer, [layers][positions][hidden]")
    ap.add_argument("--routing", help="JSON: per MoE layer, the experts and weights of every position")
    ap.add_argument("--names", action="store_true", help="print the tensor names the config needs and exit")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = Model(Checkpoint(args.checkpoint))
    if args.names:
        print("\n".join(expected_tensors(model.c)))
        return
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
        logits = model.forward(ids, trace, routing)
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
