"""A program written against a Python GPU framework, as its users write them: CuPy or
numba-cuda. It first runs one small kernel and reports the outcome (simgpu runs PTX
kernels and refuses the compiled images these frameworks make, as a GPU without a matching
image would), then reports the device's memory as the framework sees it and allocates
blocks through the framework's own allocator until it raises its out-of-memory error.

    framework_client.py cupy|numba <block bytes>

Prints "full {json}" with what it saw, waits for a line on stdin (the test reads simgpu's
figures meanwhile), frees everything and prints "done {json}". Exits 1, naming the step,
on any failure other than the out-of-memory error it waits for.
"""

import gc
import json
import os
import sys


# A one-block launch is the point here, not a mistake to warn about.
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")


def emit(tag, doc):
    print(f"{tag} {json.dumps(doc)}", flush=True)


def kind(error):
    return f"{type(error).__module__}.{type(error).__qualname__}"


def cupy_run(block):
    import cupy

    pool = cupy.get_default_memory_pool()
    try:
        kernel = int(cupy.arange(10, dtype=cupy.int32).sum())
    except Exception as error:  # the outcome is reported, whatever it is
        kernel = kind(error)
    gc.collect()
    pool.free_all_blocks()
    free, total = cupy.cuda.Device(0).mem_info
    blocks = []
    try:
        while True:
            blocks.append(cupy.empty(block, dtype=cupy.uint8))
    except cupy.cuda.memory.OutOfMemoryError as error:
        oom = kind(error)

    def free_all():
        blocks.clear()
        pool.free_all_blocks()
        return cupy.cuda.Device(0).mem_info[0]

    return {"free": free, "total": total, "allocated": len(blocks) * block,
            "pool_used": pool.used_bytes(), "oom": oom, "kernel": kernel}, free_all


def numba_run(block):
    import numpy
    from numba import cuda
    from numba.cuda.cudadrv.driver import CudaAPIError

    ctx = cuda.current_context()
    try:
        @cuda.jit
        def increment(x):
            i = cuda.grid(1)
            if i < x.size:
                x[i] += 1

        x = cuda.to_device(numpy.zeros(32, dtype=numpy.uint32))
        increment[1, 32](x)
        cuda.synchronize()
        kernel = int(x.copy_to_host().sum())
    except Exception as error:  # the outcome is reported, whatever it is
        kernel = kind(error)
    x = None
    gc.collect()
    ctx.deallocations.clear()
    free, total = ctx.get_memory_info()
    blocks = []
    oom = None
    try:
        while True:
            blocks.append(cuda.device_array(block, dtype=numpy.uint8))
    except CudaAPIError as error:
        if error.code != 2:  # CUDA_ERROR_OUT_OF_MEMORY
            raise
        oom = kind(error)

    def free_all():
        blocks.clear()
        gc.collect()
        ctx.deallocations.clear()
        return ctx.get_memory_info()[0]

    return {"free": free, "total": total, "allocated": len(blocks) * block, "oom": oom,
            "kernel": kernel}, free_all


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("cupy", "numba"):
        print("usage: framework_client.py cupy|numba <block bytes>", file=sys.stderr)
        sys.exit(2)
    block = int(sys.argv[2])
    run = cupy_run if sys.argv[1] == "cupy" else numba_run
    report, free_all = run(block)
    report["pid"] = os.getpid()
    emit("full", report)
    sys.stdin.readline()
    emit("done", {"free_after": free_all()})


if __name__ == "__main__":
    main()
