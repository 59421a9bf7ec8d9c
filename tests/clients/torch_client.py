"""PyTorch on one GPU as its users use it, reporting what it saw as JSON.

    torch_client.py [block bytes [most bytes]]

Prints "report {json}" with: torch and CUDA versions, is_available(), device_count(),
get_device_properties(0).total_memory, mem_get_info() before allocating, how many
torch.empty blocks fit before torch.cuda.OutOfMemoryError (and that error's type; at most
[most bytes] are asked for, when given), then
waits for a line on stdin (the caller reads simgpu's figures), empties the caching
allocator and reports mem_get_info() again ("freed {json}"), then runs torch.zeros and a
64x64 matmul and reports whether they ran ("ran {json}"). Results of kernels are not
computed on simgpu, and nothing here reads them. Exits 1 on an unexpected error.
"""

import json
import os
import sys

import torch


def emit(tag, doc):
    print(f"{tag} {json.dumps(doc)}", flush=True)


def kind(error):
    return f"{type(error).__module__}.{type(error).__qualname__}"


def main():
    block = int(sys.argv[1]) if len(sys.argv) > 1 else 64 << 20
    most = int(sys.argv[2]) if len(sys.argv) > 2 else None
    available = torch.cuda.is_available()
    report = {
        "pid": os.getpid(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "available": available, "count": torch.cuda.device_count(),
    }
    if not available:
        emit("report", report)
        sys.exit(1)
    report["total_memory"] = torch.cuda.get_device_properties(0).total_memory
    free, total = torch.cuda.mem_get_info()
    report.update(free=free, total=total)
    blocks = []
    try:
        while most is None or (len(blocks) + 1) * block <= most:
            blocks.append(torch.empty(block, dtype=torch.uint8, device="cuda"))
    except torch.cuda.OutOfMemoryError as error:
        report["oom"] = kind(error)
    report["allocated"] = len(blocks) * block
    report["reserved"] = torch.cuda.memory_reserved()
    emit("report", report)
    sys.stdin.readline()

    blocks.clear()
    torch.cuda.empty_cache()
    free_after, _ = torch.cuda.mem_get_info()
    emit("freed", {"free": free_after, "reserved": torch.cuda.memory_reserved()})

    ran = {}
    for name, op in (
        ("zeros", lambda: torch.zeros(1 << 20, device="cuda")),
        ("matmul", lambda: torch.ones(64, 64, device="cuda") @ torch.ones(64, 64, device="cuda")),
    ):
        try:
            op()
            torch.cuda.synchronize()
            ran[name] = True
        except Exception as error:  # reported, whatever it is
            ran[name] = f"{kind(error)}: {str(error).splitlines()[0]}"
    emit("ran", ran)


if __name__ == "__main__":
    main()
