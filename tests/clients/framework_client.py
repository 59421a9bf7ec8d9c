"""A program written against a Python GPU framework, as its users write them: CuPy or
numba-cuda. It first compiles and launches one small kernel and reports the outcome (its
result as read back, or the error; simgpu runs kernels for their time and does not compute
their results), then reports the device's memory as the framework sees it and allocates
blocks through the framework's own allocator until it raises its out-of-memory error.

    framework_client.py cupy|numba|numba-culink <block bytes>

numba-culink runs numba as on a machine without nvJitLink: numba then compiles to PTX and
links through the driver's cuLink* functions instead of linking LTO-IR with nvJitLink.

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


def without_nvjitlink():
    """numba and cuda.core as they run where nvJitLink is not installed: both decide once,
    on first use, whether it is there; these are the answers they would reach."""
    from cuda.bindings import driver
    import cuda.core.cu12._linker as linker
    import numba.cuda.cudadrv.driver as numba_driver
    import numba.cuda.decorators as decorators

    kinds = driver.CUjitInputType
    linker._use_nvjitlink_backend = False
    linker._driver = driver
    linker._driver_input_types = {
        "ptx": kinds.CU_JIT_INPUT_PTX, "cubin": kinds.CU_JIT_INPUT_CUBIN,
        "fatbin": kinds.CU_JIT_INPUT_FATBINARY, "object": kinds.CU_JIT_INPUT_OBJECT,
        "library": kinds.CU_JIT_INPUT_LIBRARY,
    }
    numba_driver._have_nvjitlink = lambda: False
    decorators._have_nvjitlink = lambda: False


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
    if len(sys.argv) != 3 or sys.argv[1] not in ("cupy", "numba", "numba-culink"):
        print("usage: framework_client.py cupy|numba|numba-culink <block bytes>",
              file=sys.stderr)
        sys.exit(2)
    block = int(sys.argv[2])
    if sys.argv[1] == "numba-culink":
        without_nvjitlink()
    run = cupy_run if sys.argv[1] == "cupy" else numba_run
    report, free_all = run(block)
    report["pid"] = os.getpid()
    emit("full", report)
    sys.stdin.readline()
    emit("done", {"free_after": free_all()})


if __name__ == "__main__":
    main()
