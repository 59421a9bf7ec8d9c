"""A program written against NVIDIA's Python driver bindings (`cuda-bindings` from PyPI):
context, allocation, host/device round trip and memory info on device 0.

Prints one JSON line of what it saw; exits 1, naming the failing call, on the first error.
"""

import json
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


if __name__ == "__main__":
    main()
