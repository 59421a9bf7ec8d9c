"""The driver calls NVIDIA's math libraries make beyond a plain program's (cuBLASLt looks them
all up as it loads and uses them to choose and replay its kernels), made through ctypes on a
node of two devices, reporting each result as JSON:

  peer     cuCtxEnablePeerAccess / cuCtxDisablePeerAccess between the two primary contexts:
           enable, enable again, disable, disable again, a context with itself, bad flags
  batch    cuStreamBatchMemOp: 32- and 64-bit writes, a wait and a barrier, read back; a batch
           with one bad operation, which must write nothing
  tensor   cuTensorMapEncodeTiled of a 1024 x 512 half-precision matrix, and of a misaligned
           one; cuTensorMapReplaceAddress
  graph    a captured memset, copy and tessera_fill_u32 kernel: cuGraphGetNodes,
           cuGraphNodeGetType, cuGraphKernelNodeGetParams (geometry and arguments), then
           cuGraphExecKernelNodeSetParams with a new fill value, the graph launched and the
           buffer read back

    library_calls.py <libcuda.so.1> <tessera.ptx>
"""

import ctypes as C
import json
import sys

lib = C.CDLL(sys.argv[1])
PTX = open(sys.argv[2], "rb").read() + b"\0"
out = {}
P = C.c_void_p


def call(name, *args):
    return getattr(lib, name)(*args)


def ok(name, *args):
    r = call(name, *args)
    if r != 0:
        print(json.dumps({"failed": name, "result": r}))
        sys.exit(1)


class BatchMemOp(C.Structure):
    _fields_ = [("operation", C.c_uint32), ("short_flags", C.c_uint32), ("address", C.c_uint64),
                ("value", C.c_uint64), ("flags", C.c_uint32), ("pad", C.c_uint32),
                ("alias", C.c_uint64), ("rest", C.c_uint64)]


class KernelNodeParams(C.Structure):
    _fields_ = [("func", P), ("grid", C.c_uint32 * 3), ("block", C.c_uint32 * 3),
                ("shared", C.c_uint32), ("params", C.POINTER(P)), ("extra", P)]


ok("cuInit", 0)
ctx = [P(), P()]
for d in (0, 1):
    ok("cuDevicePrimaryCtxRetain", C.byref(ctx[d]), d)
ok("cuCtxSetCurrent", ctx[0])

# peer
out["peer"] = {
    "enable": call("cuCtxEnablePeerAccess", ctx[1], 0),
    "enable_again": call("cuCtxEnablePeerAccess", ctx[1], 0),
    "disable": call("cuCtxDisablePeerAccess", ctx[1]),
    "disable_again": call("cuCtxDisablePeerAccess", ctx[1]),
    "self": call("cuCtxEnablePeerAccess", ctx[0], 0),
    "bad_flags": call("cuCtxEnablePeerAccess", ctx[1], 1),
}

# batch
stream = P()
ok("cuStreamCreate", C.byref(stream), 0)
buf = C.c_uint64()
ok("cuMemAlloc_v2", C.byref(buf), 16)
ok("cuMemsetD8_v2", buf, 0, 16)
ops = (BatchMemOp * 4)()
ops[0].operation, ops[0].address, ops[0].value = 2, buf.value, 7                    # write 32
ops[1].operation, ops[1].address, ops[1].value = 5, buf.value + 8, 0x1122334455667788  # write 64
ops[2].operation, ops[2].address, ops[2].value, ops[2].flags = 1, buf.value, 7, 1   # wait 32, ==
ops[3].operation = 6                                                                 # barrier
batch = {"result": call("cuStreamBatchMemOp", stream, 4, ops, 0)}
ok("cuStreamSynchronize", stream)
host = (C.c_uint32 * 4)()
ok("cuMemcpyDtoH_v2", host, buf, 16)
batch["word32"], batch["word64"] = host[0], host[2] | host[3] << 32
bad = (BatchMemOp * 2)()
bad[0].operation, bad[0].address, bad[0].value = 2, buf.value, 9
bad[1].operation = 99
batch["bad_result"] = call("cuStreamBatchMemOp", stream, 2, bad, 0)
ok("cuStreamSynchronize", stream)
ok("cuMemcpyDtoH_v2", host, buf, 16)
batch["word32_after_bad"] = host[0]
out["batch"] = batch

# tensor
# A CUtensorMap is 128 bytes aligned to 64: placed inside a larger buffer.
room_for_map = (C.c_uint8 * 192)()
tmap = (C.addressof(room_for_map) + 63) // 64 * 64
mat = C.c_uint64()
ok("cuMemAlloc_v2", C.byref(mat), 1024 * 512 * 2)
dims, strides = (C.c_uint64 * 2)(1024, 512), (C.c_uint64 * 1)(2048)
box, estr = (C.c_uint32 * 2)(64, 128), (C.c_uint32 * 2)(1, 1)
enc = lib.cuTensorMapEncodeTiled
enc.argtypes = [P, C.c_uint32, C.c_uint32, P, P, P, P, P, C.c_uint32, C.c_uint32, C.c_uint32,
                C.c_uint32]
out["tensor"] = {
    "encode": enc(tmap, 6, 2, mat.value, dims, strides, box, estr, 0, 3, 2, 0),
    "misaligned": enc(tmap, 6, 2, mat.value + 8, dims, strides, box, estr, 0, 3,
                      2, 0),
    "replace": call("cuTensorMapReplaceAddress", P(tmap), P(mat.value + 4096)),
    "unaligned_map": enc(tmap + 8, 6, 2, mat.value, dims, strides, box, estr, 0, 3, 2, 0),
}

# graph
module, fill = P(), P()
ok("cuModuleLoadData", C.byref(module), PTX)
ok("cuModuleGetFunction", C.byref(fill), module, b"tessera_fill_u32")
words = C.c_uint64()
ok("cuMemAlloc_v2", C.byref(words), 1024 * 4)
hostbuf = (C.c_uint32 * 1024)()
ok("cuStreamBeginCapture_v2", stream, 2)
ok("cuMemsetD8Async", words, 0, 1024 * 4, stream)
ok("cuMemcpyHtoDAsync_v2", words, hostbuf, 16, stream)
a_ptr, a_count, a_value = C.c_uint64(words.value), C.c_uint64(1024), C.c_uint32(1)
args = (P * 3)(C.cast(C.byref(a_ptr), P), C.cast(C.byref(a_count), P),
               C.cast(C.byref(a_value), P))
ok("cuLaunchKernel", fill, 4, 1, 1, 256, 1, 1, 0, stream, args, None)
graph = P()
ok("cuStreamEndCapture", stream, C.byref(graph))
count = C.c_size_t()
ok("cuGraphGetNodes", graph, None, C.byref(count))
nodes = (P * 4)()
room = C.c_size_t(4)
ok("cuGraphGetNodes", graph, nodes, C.byref(room))
types = []
for i in range(room.value):
    t = C.c_uint32()
    ok("cuGraphNodeGetType", P(nodes[i]), C.byref(t))
    types.append(t.value)
kp = KernelNodeParams()
g = {"count": count.value, "returned": room.value, "types": types,
     "cleared": nodes[3] is None,
     "params_of_memset": call("cuGraphKernelNodeGetParams", P(nodes[0]), C.byref(kp))}
ok("cuGraphKernelNodeGetParams", P(nodes[2]), C.byref(kp))
g["grid"], g["block"] = list(kp.grid), list(kp.block)
g["same_function"] = kp.func == fill.value
g["args"] = [C.cast(kp.params[0], C.POINTER(C.c_uint64))[0],
             C.cast(kp.params[1], C.POINTER(C.c_uint64))[0],
             C.cast(kp.params[2], C.POINTER(C.c_uint32))[0]]
exe = P()
ok("cuGraphInstantiateWithFlags", C.byref(exe), graph, C.c_uint64(0))
new_value = C.c_uint32(5)
args[2] = C.cast(C.byref(new_value), P)
kp.params = C.cast(args, C.POINTER(P))
g["set"] = call("cuGraphExecKernelNodeSetParams", exe, P(nodes[2]), C.byref(kp))
g["set_on_memset"] = call("cuGraphExecKernelNodeSetParams", exe, P(nodes[0]), C.byref(kp))
ok("cuGraphLaunch", exe, stream)
ok("cuStreamSynchronize", stream)
ok("cuMemcpyDtoH_v2", hostbuf, words, 1024 * 4)
g["filled"] = sorted(set(hostbuf))
out["graph"] = g
print(json.dumps(out))
