"""A loop of tiny element-wise PyTorch ops, timed: what a launch costs the host when the ops
are too small for the GPU to matter.

    torch_tiny_ops.py [ops]

Runs `x.add_(1)` on a 16-element tensor `ops` times (20 000 unless given) after a warm-up,
synchronizes, and prints "ops {json}" with the time per op in µs.
"""

import json
import sys
import time

import torch


def main():
    ops = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    x = torch.zeros(16, device="cuda")
    for _ in range(200):
        x.add_(1)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(ops):
        x.add_(1)
    torch.cuda.synchronize()
    took = time.perf_counter() - start
    print("ops " + json.dumps({"ops": ops, "us_per_op": took / ops * 1e6}), flush=True)


if __name__ == "__main__":
    main()
