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
    X(cuEventCreate, "cuEventCreate", 2000, (CUevent *event, unsigned int flags))            \
    X(cuEventDestroy_v2, "cuEventDestroy", 4000, (CUevent event))                            \
    X(cuEventRecord, "cuEventRecord", 2000, (CUevent event, CUstream stream))                \
    X(cuEventSynchronize, "cuEventSynchronize", 2000, (CUevent event))                       \
    X(cuEventElapsedTime, "cuEventElapsedTime", 2000,                                        \
      (float *ms, CUevent start, CUevent end))

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

/* cuInit, device 0, its primary context made current. Returns 0 on success. */
int open_primary_context(const struct driver *d, CUdevice *device);

/* The scenario every linking style must pass: allocate, round-trip data, launch
 * tessera_fill_u32 from the PTX at ptx_path, copy back and verify. Returns 0 on success. */
int run_roundtrip(const struct driver *d, const char *ptx_path);

#endif
