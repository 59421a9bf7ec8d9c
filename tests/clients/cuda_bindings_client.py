"""A program written against NVIDIA's Python driver bindings (`cuda-bindings` from PyPI):
context, allocation, host/device round trip and memory info on device 0.

Prints one JSON line of what it saw; exits 1, naming the failing call, on the first error.

Modes for the memory-cap tests (the protocol of tests/clients/tessera_client.c):
  capfill  fill device 0 to the cap, largest chunks first and down to one byte; print
           "full {json}", wait for a line on stdin, free one chunk and allocate again;
           print "done {json}"
  names    calls the library does not intercept (name, attribute, count, version) and
           three allocate/free pairs; print "names {json}"
  hold <bytes>
           allocate on device 0, print "ready {json}", sleep until killed
  primary  the primary-context sequence: at each step print "step {json}" (its name and
           result code) and wait for a line
"""

import json
import os
import signal
import sys

from cuda.bindings import driver as cu


def check(call, result):
    """Unpacks a (CUresult, values...) tuple, exiting on an error."""
    if not isinstance(result, tuple):
        result = (result,)
    err, values = result[0], result[1:]
    if err != cu.CUresult.CUDA_SUCCESS:
        name = cu.cuGetErrorName(err)
        label = name[1].decode() if name[0] == cu.CUresult.CUDA_SUCCESS else str(err)
        print(f"{call} failed: {label} ({int(err)})", file=sys.stderr)
        sys.exit(1)
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def main():
    count = 1 << 20
    check("cuInit", cu.cuInit(0))
    version = check("cuDriverGetVersion", cu.cuDriverGetVersion())
    devices = check("cuDeviceGetCount", cu.cuDeviceGetCount())
    device = check("cuDeviceGet", cu.cuDeviceGet(0))
    name = check("cuDeviceGetName", cu.cuDeviceGetName(128, device))
    name = name.split(b"\0", 1)[0].decode()
    total_mem = check("cuDeviceTotalMem", cu.cuDeviceTotalMem(device))
    ctx = check("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(device))
    check("cuCtxSetCurrent", cu.cuCtxSetCurrent(ctx))

    free_before, total = check("cuMemGetInfo", cu.cuMemGetInfo())
    dptr = check("cuMemAlloc", cu.cuMemAlloc(count))
    free_during, _ = check("cuMemGetInfo", cu.cuMemGetInfo())

    data = bytes((i * 131 + 7) & 0xFF for i in range(count))
    check("cuMemcpyHtoD", cu.cuMemcpyHtoD(dptr, data, count))
    back = bytearray(count)
    check("cuMemcpyDtoH", cu.cuMemcpyDtoH(back, dptr, count))
    if bytes(back) != data:
        first = next(i for i in range(count) if back[i] != data[i])
        print(f"data did not round-trip: first difference at byte {first}", file=sys.stderr)
        sys.exit(1)
    if free_before < free_during + count:
        print(f"cuMemGetInfo: free went from {free_before} to {free_during} "
              f"after allocating {count} bytes", file=sys.stderr)
        sys.exit(1)

    check("cuMemFree", cu.cuMemFree(dptr))
    free_after, _ = check("cuMemGetInfo", cu.cuMemGetInfo())
    check("cuDevicePrimaryCtxRelease", cu.cuDevicePrimaryCtxRelease(device))
    print(json.dumps({
        "version": version, "devices": devices, "name": name, "total_mem": total_mem,
        "total": total, "free_before": free_before, "free_during": free_during,
        "free_after": free_after, "bytes": count, "verified": True,
    }))


def open_device():
    check("cuInit", cu.cuInit(0))
    device = check("cuDeviceGet", cu.cuDeviceGet(0))
    ctx = check("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(device))
    check("cuCtxSetCurrent", cu.cuCtxSetCurrent(ctx))
    return device


def emit(tag, doc):
    print(f"{tag} {json.dumps(doc)}", flush=True)


def code(result):
    """The result code of a call, as an int."""
    return int(result[0] if isinstance(result, tuple) else result)


def capfill():
    oom = cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY
    device = open_device()
    device_total = check("cuDeviceTotalMem", cu.cuDeviceTotalMem(device))
    free_before, total_before = check("cuMemGetInfo", cu.cuMemGetInfo())
    chunks = []
    # A start that is no power of two: reaching the cap exactly needs every size down to 1.
    chunk = 100_000_000
    while chunk >= 1:
        while True:
            result = cu.cuMemAlloc(chunk)
            if result[0] == oom:
                break
            chunks.append((check("cuMemAlloc while filling", result), chunk))
        chunk //= 2
    free_full, total_full = check("cuMemGetInfo", cu.cuMemGetInfo())
    extra = cu.cuMemAlloc(1)
    emit("full", {
        "pid": os.getpid(), "binding": "cuda-bindings",
        "allocated": sum(size for _, size in chunks), "allocations": len(chunks),
        "free_before": free_before, "total_before": total_before,
        "device_total": device_total, "free_full": free_full, "total_full": total_full,
        "one_more_rc": code(extra),
    })
    sys.stdin.readline()

    first, freed = chunks[0]
    check("cuMemFree", cu.cuMemFree(first))
    free_after_free, _ = check("cuMemGetInfo", cu.cuMemGetInfo())
    refill = cu.cuMemAlloc(freed)
    again = cu.cuMemAlloc(1)
    free_refilled, _ = check("cuMemGetInfo", cu.cuMemGetInfo())
    rest = [p for p, _ in chunks[1:]]
    rest += [r[1] for r in (refill, extra, again) if code(r) == 0]
    for p in rest:
        check("cuMemFree", cu.cuMemFree(p))
    free_all_freed, _ = check("cuMemGetInfo", cu.cuMemGetInfo())
    emit("done", {
        "freed": freed, "free_after_free": free_after_free, "refill_rc": code(refill),
        "one_more_rc": code(again), "free_refilled": free_refilled,
        "free_all_freed": free_all_freed,
    })


def hold():
    if len(sys.argv) < 3 or not sys.argv[2].isdigit():
        print("hold <bytes>: a size in bytes", file=sys.stderr)
        sys.exit(2)
    size = int(sys.argv[2])
    open_device()
    dptr = check("cuMemAlloc", cu.cuMemAlloc(size))
    emit("ready", {"pid": os.getpid(), "binding": "cuda-bindings", "bytes": size,
                   "ptr": int(dptr)})
    while True:
        signal.pause()


def names():
    device = open_device()
    name = check("cuDeviceGetName", cu.cuDeviceGetName(128, device))
    sms = check("cuDeviceGetAttribute", cu.cuDeviceGetAttribute(
        cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device))
    count = check("cuDeviceGetCount", cu.cuDeviceGetCount())
    version = check("cuDriverGetVersion", cu.cuDriverGetVersion())
    for _ in range(3):
        p = check("cuMemAlloc", cu.cuMemAlloc(4096))
        check("cuMemFree", cu.cuMemFree(p))
    emit("names", {
        "binding": "cuda-bindings", "name": name.split(b"\0", 1)[0].decode(), "sms": sms,
        "count": count, "version": version,
    })


def primary():
    check("cuInit", cu.cuInit(0))
    device = check("cuDeviceGet", cu.cuDeviceGet(0))

    def step(name, result):
        emit("step", {"pid": os.getpid(), "name": name, "rc": code(result)})
        sys.stdin.readline()

    step("retained", cu.cuDevicePrimaryCtxRetain(device))
    step("retained_twice", cu.cuDevicePrimaryCtxRetain(device))
    step("released_once", cu.cuDevicePrimaryCtxRelease(device))
    step("released", cu.cuDevicePrimaryCtxRelease(device))
    check("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(device))
    step("reset", cu.cuDevicePrimaryCtxReset(device))
    step("late_release", cu.cuDevicePrimaryCtxRelease(device))
    check("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(device))
    check("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(device))
    step("reset_retained_twice", cu.cuDevicePrimaryCtxReset(device))
    step("retained_again", cu.cuDevicePrimaryCtxRetain(device))


if __name__ == "__main__":
    MODES = {"capfill": capfill, "names": names, "hold": hold, "primary": primary}
    if len(sys.argv) > 1:
        if sys.argv[1] not in MODES:
            print(f"unknown mode {sys.argv[1]!r}: one of {sorted(MODES)}", file=sys.stderr)
            sys.exit(2)
        MODES[sys.argv[1]]()
    else:
        main()
