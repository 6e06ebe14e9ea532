/* gpu/driver.c: loads the CUDA driver API with dlopen (see gpu/driver.h).
 *
 * The symbol names are the ABI versions cuda.h selects for CUDA 12/13 (the _v2 forms
 * where they exist); cuGetProcAddress is not used so that the table reads plainly. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpu/driver.h"

CclCuda ccl__cu;

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static char cuda_why[256];
static int cuda_ok;

static void cuda_load(void)
{
    /* Streams beyond the GPU's hardware queues share them, and a kernel queued behind
     * another rank's spinning kernel in a shared queue waits for it: ranks that share a
     * GPU need the most queues (32; the driver's default is 8). Read when CUDA starts,
     * so it only helps where libccl starts CUDA; a value the user set stays. */
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(cuda_why, sizeof cuda_why, "no CUDA driver (cannot load libcuda.so.1: %s)", e ? e : "not found");
        return;
    }
    struct { void **fn; const char *name; } syms[] = {
#define S(field, name) {(void **)&ccl__cu.field, name}
        S(Init, "cuInit"), S(DriverGetVersion, "cuDriverGetVersion"), S(GetErrorString, "cuGetErrorString"),
        S(DeviceGet, "cuDeviceGet"), S(DeviceGetCount, "cuDeviceGetCount"), S(DeviceGetName, "cuDeviceGetName"),
        S(DeviceGetAttribute, "cuDeviceGetAttribute"), S(DeviceCanAccessPeer, "cuDeviceCanAccessPeer"),
        S(DeviceGetUuid, "cuDeviceGetUuid_v2"),
        S(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
        S(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"), S(CtxSetCurrent, "cuCtxSetCurrent"),
        S(CtxSynchronize, "cuCtxSynchronize"), S(MemAlloc, "cuMemAlloc_v2"), S(MemFree, "cuMemFree_v2"),
        S(MemPoolCreate, "cuMemPoolCreate"), S(MemPoolDestroy, "cuMemPoolDestroy"),
        S(MemPoolSetAttribute, "cuMemPoolSetAttribute"), S(MemAllocFromPoolAsync, "cuMemAllocFromPoolAsync"),
        S(MemFreeAsync, "cuMemFreeAsync"),
        S(MemHostAlloc, "cuMemHostAlloc"), S(MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2"),
        S(MemFreeHost, "cuMemFreeHost"), S(Memcpy, "cuMemcpy"), S(MemcpyAsync, "cuMemcpyAsync"),
        S(MemcpyHtoD, "cuMemcpyHtoD_v2"), S(MemcpyDtoH, "cuMemcpyDtoH_v2"), S(MemsetD8, "cuMemsetD8_v2"),
        S(PointerGetAttribute, "cuPointerGetAttribute"), S(PointerGetAttributes, "cuPointerGetAttributes"),
        S(IpcGetMemHandle, "cuIpcGetMemHandle"), S(IpcOpenMemHandle, "cuIpcOpenMemHandle_v2"),
        S(IpcCloseMemHandle, "cuIpcCloseMemHandle"),
        S(MemsetD8Async, "cuMemsetD8Async"), S(MemsetD32Async, "cuMemsetD32Async"), S(MemCreate, "cuMemCreate"), S(MemRelease, "cuMemRelease"),
        S(MemAddressReserve, "cuMemAddressReserve"), S(MemAddressFree, "cuMemAddressFree"), S(MemMap, "cuMemMap"),
        S(MemUnmap, "cuMemUnmap"), S(MemSetAccess, "cuMemSetAccess"),
        S(MemGetAllocationGranularity, "cuMemGetAllocationGranularity"),
        S(MemExportToShareableHandle, "cuMemExportToShareableHandle"),
        S(MemImportFromShareableHandle, "cuMemImportFromShareableHandle"),
        S(MemRetainAllocationHandle, "cuMemRetainAllocationHandle"),
        S(MemGetAllocationPropertiesFromHandle, "cuMemGetAllocationPropertiesFromHandle"),
        S(MemGetAddressRange, "cuMemGetAddressRange_v2"), S(DeviceTotalMem, "cuDeviceTotalMem_v2"),
        S(ModuleLoadData, "cuModuleLoadData"),
        S(ModuleUnload, "cuModuleUnload"), S(ModuleGetFunction, "cuModuleGetFunction"),
        S(FuncSetAttribute, "cuFuncSetAttribute"), S(FuncGetAttribute, "cuFuncGetAttribute"),
        S(OccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor"), S(LaunchKernel, "cuLaunchKernel"),
        S(LaunchKernelEx, "cuLaunchKernelEx"),
        S(StreamCreate, "cuStreamCreate"), S(StreamDestroy, "cuStreamDestroy_v2"),
        S(StreamSynchronize, "cuStreamSynchronize"), S(StreamGetFlags, "cuStreamGetFlags"),
        S(StreamWaitEvent, "cuStreamWaitEvent"), S(StreamIsCapturing, "cuStreamIsCapturing"),
        S(StreamBeginCapture, "cuStreamBeginCapture_v2"), S(StreamEndCapture, "cuStreamEndCapture"),
        S(GraphInstantiate, "cuGraphInstantiateWithFlags"), S(GraphLaunch, "cuGraphLaunch"),
        S(GraphExecDestroy, "cuGraphExecDestroy"), S(GraphDestroy, "cuGraphDestroy"),
        S(EventCreate, "cuEventCreate"), S(EventDestroy, "cuEventDestroy_v2"), S(EventRecord, "cuEventRecord"),
        S(EventSynchronize, "cuEventSynchronize"), S(EventQuery, "cuEventQuery"),
        S(ThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode"),
        S(EventElapsedTime, "cuEventElapsedTime_v2"),
#undef S
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].fn = dlsym(lib, syms[i].name);
        if (!*syms[i].fn && syms[i].fn == (void **)&ccl__cu.EventElapsedTime)
            *syms[i].fn = dlsym(lib, "cuEventElapsedTime");
        if (!*syms[i].fn && syms[i].fn == (void **)&ccl__cu.LaunchKernelEx) continue; /* optional */
        if (!*syms[i].fn) {
            snprintf(cuda_why, sizeof cuda_why, "the CUDA driver lacks %s (driver too old?)", syms[i].name);
            return;
        }
    }
    CUresult r = ccl__cu.Init(0);
    if (r != CUDA_SUCCESS) {
        snprintf(cuda_why, sizeof cuda_why, "cuInit failed: %s", ccl__cuda_error(r));
        return;
    }
    int n = 0;
    if (ccl__cu.DeviceGetCount(&n) != CUDA_SUCCESS || n == 0) {
        snprintf(cuda_why, sizeof cuda_why, "the CUDA driver sees no GPU");
        return;
    }
    cuda_ok = 1;
}

int ccl__cuda_load(char *why, size_t len)
{
    pthread_once(&cuda_once, cuda_load);
    if (!cuda_ok && why) snprintf(why, len, "%s", cuda_why);
    return cuda_ok ? 0 : -1;
}

const char *ccl__cuda_error(CUresult r)
{
    static __thread char buf[160];
    const char *s = NULL;
    if (ccl__cu.GetErrorString) ccl__cu.GetErrorString(r, &s);
    snprintf(buf, sizeof buf, "%s (CUresult %d)", s ? s : "unknown error", (int)r);
    return buf;
}
