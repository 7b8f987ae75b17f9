#!/usr/bin/python3
"""Dev only: routing decisions of the float64 reference (moe_families_model's route_* functions)
for random logits, written to test/golden/router.json for test/router.test.ts.

    /usr/bin/python3 tools/reference/router_golden.py
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from moe_families_model import route_sigmoid_group, route_softmax, route_softmax_of_topk  # noqa: E402

torch.manual_seed(7)
DT = torch.float64
cases = []


def add(name, cfg, logits, ids, w, bias=None):
    cases.append({"name": name, "config": cfg, "logits": logits.tolist(), "bias": None if bias is None else bias.tolist(),
                  "ids": ids.tolist(), "w": w.tolist()})


for E, K, renorm in ((8, 2, True), (64, 8, False), (128, 8, True)):
    lg = torch.randn(6, E, dtype=DT) * 2
    ids, w = route_softmax(lg, K, renorm)
    add(f"softmax E={E} K={K} renorm={renorm}", {"scoring": "softmax", "topK": K, "renormalize": renorm, "scale": 1}, lg, ids, w)
for E, K in ((32, 4), (128, 4)):
    lg = torch.randn(6, E, dtype=DT) * 2
    ids, w = route_softmax_of_topk(lg, K)
    add(f"softmax of the top k E={E} K={K}", {"scoring": "softmax-topk", "topK": K, "renormalize": False, "scale": 1}, lg, ids, w)
for E, K, G, TG, renorm, scale in ((64, 8, 8, 4, True, 2.5), (32, 4, 1, 1, True, 1.0), (48, 6, 4, 2, False, 1.8), (16, 4, 4, 1, True, 1.0)):
    lg = torch.randn(6, E, dtype=DT) * 2
    # biases large enough that the groups matter, and for the last case negative, so that fewer
    # than K kept experts score above the 0.0 that dropped groups are masked to
    bias = torch.randn(E, dtype=DT) * (0.5 if G > 1 else 0.1) - (1.5 if E == 16 else 0)
    ids, w = route_sigmoid_group(lg, bias, K, G, TG, renorm, scale)
    add(f"sigmoid E={E} K={K} groups {TG} of {G} renorm={renorm}",
        {"scoring": "sigmoid", "topK": K, "renormalize": renorm, "scale": scale, "groups": {"count": G, "keep": TG}}, lg, ids, w, bias)

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "test", "golden", "router.json")
with open(path, "w") as f:
    json.dump({"reference": "tools/reference/router_golden.py (moe_families_model route_*, float64)", "cases": cases}, f)
    f.write("\n")
print(f"{len(cases)} cases -> {os.path.normpath(path)}")
