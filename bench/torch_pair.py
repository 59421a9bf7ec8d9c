"""PyTorch on both sides of the preemption step of `bench/gpu-check.sh`.

    python3 bench/torch_pair.py train SECONDS   matmuls back to back (a training loop's
                                                 shape), printing {"iterations_per_s": ...}
    python3 bench/torch_pair.py serve SECONDS   requests 20 times a second, each a few small
                                                 matmuls and a synchronize, printing the
                                                 latency's p50 and p99 in ms

One JSON line on stdout; exit status 3 when PyTorch or a GPU is missing.
"""

import json
import sys
import time


def main():
    mode, seconds = sys.argv[1], float(sys.argv[2])
    try:
        import torch
    except ImportError:
        print("no PyTorch", file=sys.stderr)
        sys.exit(3)
    if not torch.cuda.is_available():
        print("PyTorch sees no GPU", file=sys.stderr)
        sys.exit(3)
    dev = torch.device("cuda")
    if mode == "train":
        a = torch.randn(8192, 8192, device=dev)
        b = torch.randn(8192, 8192, device=dev)
        for _ in range(3):
            a @ b
        torch.cuda.synchronize()
        n, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < seconds:
            for _ in range(4):
                c = a @ b
            n += 4
            c.sum().item()
        print(json.dumps({"iterations_per_s": n / (time.monotonic() - t0)}))
    elif mode == "serve":
        x = torch.randn(64, 4096, device=dev)
        w = [torch.randn(4096, 4096, device=dev) for _ in range(8)]
        for _ in range(5):
            y = x
            for m in w:
                y = torch.relu(y @ m)
            torch.cuda.synchronize()
        latencies, t0 = [], time.monotonic()
        k = 0
        while time.monotonic() - t0 < seconds:
            due = t0 + k / 20.0
            k += 1
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            s = time.monotonic()
            y = x
            for m in w:
                y = torch.relu(y @ m)
            torch.cuda.synchronize()
            latencies.append((time.monotonic() - s) * 1e3)
        latencies.sort()
        pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]
        print(json.dumps({"requests": len(latencies), "p50_ms": pick(0.5), "p99_ms": pick(0.99)}))
    else:
        print("mode: train or serve", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
