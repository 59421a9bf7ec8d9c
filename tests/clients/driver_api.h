/* The slice of the CUDA driver API the C test clients use, declared here by hand from the
 * public documentation (types, result codes, version numbers), so the clients need no
 * toolkit. Each entry point is listed once, in DRIVER_API, with:
 *   the exported symbol, the base name cuGetProcAddress takes, the CUDA version that
 *   introduced that variant, and the parameter list. */
#ifndef TESSERA_TEST_DRIVER_API_H
#define TESSERA_TEST_DRIVER_API_H

#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct simgpu_test_ctx *CUcontext;
typedef struct simgpu_test_module *CUmodule;
typedef struct simgpu_test_function *CUfunction;
typedef struct simgpu_test_stream *CUstream;
typedef struct simgpu_test_event *CUevent;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef void (*CUhostFn)(void *user_data);

/* Virtual memory management: where a physical allocation lives and who may access it. */
typedef struct {
    int type; /* CU_MEM_LOCATION_TYPE_DEVICE */
    int id;
} CUmemLocation;
typedef struct {
    int type;                   /* CU_MEM_ALLOCATION_TYPE_PINNED */
    int requested_handle_types; /* none */
    CUmemLocation location;
    void *win32_handle_meta_data;
    struct {
        unsigned char compression_type;
        unsigned char gpu_direct_rdma_capable;
        unsigned short usage;
        unsigned char reserved[4];
    } alloc_flags;
} CUmemAllocationProp;
typedef struct {
    CUmemLocation location;
    int flags; /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE */
} CUmemAccessDesc;
enum {
    CU_MEM_ALLOCATION_TYPE_PINNED = 1,
    CU_MEM_LOCATION_TYPE_DEVICE = 1,
    CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
    CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
    CU_MEM_ATTACH_GLOBAL = 1,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
};

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NOT_FOUND = 500,
};

/* cuGetProcAddress flags and symbol status. */
enum {
    CU_GET_PROC_ADDRESS_DEFAULT = 0,
    CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1,
    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2,
};
enum {
    CU_GET_PROC_ADDRESS_SUCCESS = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};

#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_DEFAULT 0x0

#define DRIVER_API(X)                                                                        \
    X(cuInit, "cuInit", 2000, (unsigned int flags))                                          \
    X(cuDriverGetVersion, "cuDriverGetVersion", 2020, (int *version))                        \
    X(cuGetErrorName, "cuGetErrorName", 6000, (CUresult error, const char **name))           \
    X(cuDeviceGetCount, "cuDeviceGetCount", 2000, (int *count))                              \
    X(cuDeviceGet, "cuDeviceGet", 2000, (CUdevice *device, int ordinal))                     \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000,                            \
      (CUcontext *ctx, CUdevice device))                                                     \
    X(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 11000, (CUdevice device))   \
    X(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000, (CUdevice device))       \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", 4000, (CUcontext ctx))                             \
    X(cuCtxSynchronize, "cuCtxSynchronize", 2000, (void))                                    \
    X(cuMemGetInfo_v2, "cuMemGetInfo", 3020, (size_t *free_bytes, size_t *total_bytes))      \
    X(cuMemAlloc_v2, "cuMemAlloc", 3020, (CUdeviceptr *dptr, size_t bytes))                  \
    X(cuMemFree_v2, "cuMemFree", 3020, (CUdeviceptr dptr))                                   \
    X(cuMemcpyHtoD_v2, "cuMemcpyHtoD", 3020,                                                 \
      (CUdeviceptr dst, const void *src, size_t bytes))                                      \
    X(cuMemcpyDtoH_v2, "cuMemcpyDtoH", 3020,                                                 \
      (void *dst, CUdeviceptr src, size_t bytes))                                            \
    X(cuModuleLoadData, "cuModuleLoadData", 2000, (CUmodule *module, const void *image))     \
    X(cuModuleUnload, "cuModuleUnload", 2000, (CUmodule module))                             \
    X(cuModuleGetFunction, "cuModuleGetFunction", 2000,                                      \
      (CUfunction *function, CUmodule module, const char *name))                             \
    X(cuLaunchKernel, "cuLaunchKernel", 4000,                                                \
      (CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,         \
       unsigned int block_x, unsigned int block_y, unsigned int block_z,                    \
       unsigned int shared_bytes, CUstream stream, void **params, void **extra))            \
    X(cuStreamCreate, "cuStreamCreate", 2000, (CUstream *stream, unsigned int flags))        \
    X(cuStreamDestroy_v2, "cuStreamDestroy", 4000, (CUstream stream))                        \
    X(cuStreamSynchronize, "cuStreamSynchronize", 2000, (CUstream stream))                   \
    X(cuLaunchHostFunc, "cuLaunchHostFunc", 10000,                                           \
      (CUstream stream, CUhostFn fn, void *user_data))                                       \
    X(cuEventCreate, "cuEventCreate", 2000, (CUevent *event, unsigned int flags))            \
    X(cuEventDestroy_v2, "cuEventDestroy", 4000, (CUevent event))                            \
    X(cuEventRecord, "cuEventRecord", 2000, (CUevent event, CUstream stream))                \
    X(cuEventSynchronize, "cuEventSynchronize", 2000, (CUevent event))                       \
    X(cuEventElapsedTime, "cuEventElapsedTime", 2000,                                        \
      (float *ms, CUevent start, CUevent end))                                               \
    X(cuDeviceGetName, "cuDeviceGetName", 2000, (char *name, int len, CUdevice device))      \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute", 2000,                                    \
      (int *value, int attribute, CUdevice device))                                          \
    X(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, (size_t *bytes, CUdevice device))       \
    X(cuCtxGetDevice, "cuCtxGetDevice", 2000, (CUdevice *device))                            \
    X(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020,                                           \
      (CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem))   \
    X(cuMemAllocManaged, "cuMemAllocManaged", 6000,                                          \
      (CUdeviceptr *dptr, size_t bytes, unsigned int flags))                                 \
    X(cuMemAllocAsync, "cuMemAllocAsync", 11020,                                             \
      (CUdeviceptr *dptr, size_t bytes, CUstream stream))                                    \
    X(cuMemFreeAsync, "cuMemFreeAsync", 11020, (CUdeviceptr dptr, CUstream stream))          \
    X(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", 10020,                 \
      (size_t *granularity, const CUmemAllocationProp *prop, int option))                    \
    X(cuMemCreate, "cuMemCreate", 10020,                                                     \
      (CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,  \
       unsigned long long flags))                                                            \
    X(cuMemRelease, "cuMemRelease", 10020, (CUmemGenericAllocationHandle handle))            \
    X(cuMemAddressReserve, "cuMemAddressReserve", 10020,                                     \
      (CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,                   \
       unsigned long long flags))                                                            \
    X(cuMemAddressFree, "cuMemAddressFree", 10020, (CUdeviceptr ptr, size_t size))           \
    X(cuMemMap, "cuMemMap", 10020,                                                           \
      (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,    \
       unsigned long long flags))                                                            \
    X(cuMemUnmap, "cuMemUnmap", 10020, (CUdeviceptr ptr, size_t size))                       \
    X(cuMemSetAccess, "cuMemSetAccess", 10020,                                               \
      (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count))

/* The entry points, as a table of function pointers filled by each client its own way. */
struct driver {
#define DRIVER_FIELD(sym, base, version, params) CUresult (*sym) params;
    DRIVER_API(DRIVER_FIELD)
#undef DRIVER_FIELD
};

/* One entry of DRIVER_API, for loops over the table. */
struct driver_entry {
    const char *symbol;
    const char *base;
    int version;
    size_t offset;
};

extern const struct driver_entry driver_entries[];
extern const size_t driver_entry_count;

/* Prints "<what> failed: <error name> (<code>)" to stderr. */
void report_failure(const struct driver *d, const char *what, CUresult rc);

/* Evaluates a driver call; on failure reports it and returns 1 from the enclosing function. */
#define CHECK(d, call)                                                                       \
    do {                                                                                     \
        CUresult check_rc_ = (d)->call;                                                      \
        if (check_rc_ != CUDA_SUCCESS) {                                                     \
            report_failure((d), #call, check_rc_);                                           \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

/* Reads a whole file into a NUL-terminated buffer (free it), or NULL with a message. */
char *read_text_file(const char *path);

/* Fills the table from the library linked with -lcuda (driver_linked.c). */
void bind_linked_driver(struct driver *d);

/* Fills the table the way this program was built to reach the driver: driver_linked.c
 * (-lcuda), driver_dlopen.c (dlopen + dlsym) or driver_proc_address.c (cuGetProcAddress_v2;
 * with CLIENT_PER_THREAD_STREAM=1 in the environment it asks for the per-thread default
 * stream variants). Returns 0 on success, or reports what failed and returns 1. */
int bind_driver(struct driver *d);

/* How bind_driver reaches the driver: "linked", "dlopen" or "proc_address". */
extern const char *const driver_binding;

/* cuInit, device 0, its primary context made current. Returns 0 on success. */
int open_primary_context(const struct driver *d, CUdevice *device);

/* The scenario every linking style must pass: allocate, round-trip data, launch
 * tessera_fill_u32 from the PTX at ptx_path, copy back and verify. Returns 0 on success. */
int run_roundtrip(const struct driver *d, const char *ptx_path);

#endif
