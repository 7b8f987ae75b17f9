#!/usr/bin/python3
"""Dev only: the inverse frequencies and attention factor of the rope settings test/rope.test.ts
checks, from moe_families_model.rope_setup (float64), written to test/golden/rope.json.

    /usr/bin/python3 tools/reference/rope_golden.py
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from moe_families_model import rope_setup  # noqa: E402

CASES = [
    ("default", "qwen3_moe", {"rope_theta": 1000000.0, "max_position_embeddings": 40960}, 128),
    ("partial", "glm4_moe", {"rope_theta": 1000000.0, "partial_rotary_factor": 0.5, "max_position_embeddings": 131072}, 128),
    ("linear", "qwen3_moe", {"rope_theta": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 4.0}}, 64),
    ("llama3", "qwen3_moe", {"rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}, 128),
    ("gpt-oss", "gpt_oss", {"rope_theta": 150000.0, "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                                                    "truncate": False, "original_max_position_embeddings": 4096}}, 64),
    ("yarn-truncated", "qwen3_moe", {"rope_theta": 1000000.0, "max_position_embeddings": 131072,
                                     "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}, 128),
    ("deepseek", "deepseek_v3", {"rope_theta": 10000.0, "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                                                                         "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096}}, 64),
    ("kimi-k2", "kimi_k2", {"rope_theta": 50000.0, "rope_scaling": {"type": "yarn", "factor": 32.0, "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0,
                                                                    "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096}}, 64),
    ("v5-parameters", "qwen3_moe", {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 2.0,
                                                        "original_max_position_embeddings": 4096}, "max_position_embeddings": 8192}, 64),
]

out = []
for name, family, raw, head_dim in CASES:
    inv, af, R, rtype, _ = rope_setup(raw, head_dim, family)
    out.append({"name": name, "family": family, "config": raw, "headDim": head_dim, "dims": R, "type": rtype,
                "invFreq": [float(x) for x in inv], "attentionFactor": float(af)})
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "test", "golden", "rope.json")
with open(path, "w") as f:
    json.dump({"reference": "tools/reference/rope_golden.py (moe_families_model.rope_setup, float64)", "cases": out}, f, indent=1)
    f.write("\n")
print(f"{len(out)} cases -> {os.path.normpath(path)}")
