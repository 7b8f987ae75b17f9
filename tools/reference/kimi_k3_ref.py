#!/usr/bin/python3
"""Independent float64 reference for the Kimi K3 text forward pass (dev only; CI never runs Python).

The same program as kimi_linear_ref.py, which reads the container (or HF checkpoint) and runs the
module of kimi_k3_model.py when the config is K3's; this entry point refuses anything that is not
K3, so a K3 golden can never silently come from the Kimi-Linear module. Written from the public K3
spec, not from the TypeScript. Writes the logits of every position as little-endian float32
(vocab floats per position):

    /usr/bin/python3 tools/reference/kimi_k3_ref.py CONTAINER --ids 1,2,3 --out logits.bin
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kimi_linear_ref import main  # noqa: E402

if __name__ == "__main__":
    main(k3_only=True)
