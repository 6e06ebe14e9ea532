/* gpu/driver.h: the CUDA driver API as the GPU backend uses it, loaded with dlopen.
 *
 * libccl never links libcuda: gpu/driver.c opens libcuda.so.1 on first use and fills
 * `ccl__cu` with the entry points below (the versioned symbol names that cuda.h's
 * macros would pick), so a machine without a driver still runs the CPU backend. Types
 * and constants come from cuda.h (headers only). Also used by tests/gpu to move data. */
#ifndef CCL_GPU_CUDA_H
#define CCL_GPU_CUDA_H

#include <cuda.h>
#include <stddef.h>

typedef struct {
    CUresult (*Init)(unsigned int);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*DeviceCanAccessPeer)(int *, CUdevice, CUdevice);
    CUresult (*DeviceGetUuid)(CUuuid *, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxSynchronize)(void);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemPoolCreate)(CUmemoryPool *, const CUmemPoolProps *);
    CUresult (*MemPoolDestroy)(CUmemoryPool);
    CUresult (*MemPoolSetAttribute)(CUmemoryPool, CUmemPool_attribute, void *);
    CUresult (*MemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*MemFreeAsync)(CUdeviceptr, CUstream);
    CUresult (*MemHostAlloc)(void **, size_t, unsigned int);
    CUresult (*MemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned int);
    CUresult (*MemFreeHost)(void *);
    CUresult (*Memcpy)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*MemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*PointerGetAttribute)(void *, CUpointer_attribute, CUdeviceptr);
    CUresult (*PointerGetAttributes)(unsigned int, CUpointer_attribute *, void **, CUdeviceptr);
    CUresult (*IpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
    CUresult (*IpcOpenMemHandle)(CUdeviceptr *, CUipcMemHandle, unsigned int);
    CUresult (*IpcCloseMemHandle)(CUdeviceptr);
    CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*MemsetD32Async)(CUdeviceptr, unsigned int, size_t, CUstream);
    CUresult (*MemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    CUresult (*MemRelease)(CUmemGenericAllocationHandle);
    CUresult (*MemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*MemAddressFree)(CUdeviceptr, size_t);
    CUresult (*MemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*MemUnmap)(CUdeviceptr, size_t);
    CUresult (*MemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*MemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
    CUresult (*MemExportToShareableHandle)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                                           unsigned long long);
    CUresult (*MemImportFromShareableHandle)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
    CUresult (*MemRetainAllocationHandle)(CUmemGenericAllocationHandle *, void *);
    CUresult (*MemGetAllocationPropertiesFromHandle)(CUmemAllocationProp *, CUmemGenericAllocationHandle);
    CUresult (*MemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*FuncSetAttribute)(CUfunction, CUfunction_attribute, int);
    CUresult (*FuncGetAttribute)(int *, CUfunction_attribute, CUfunction);
    CUresult (*OccupancyMaxActiveBlocksPerMultiprocessor)(int *, CUfunction, int, size_t);
    CUresult (*LaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                             unsigned int, unsigned int, CUstream, void **, void **);
    /* NULL where the driver lacks it (before CUDA 12.0): launches then go without
     * attributes (gpu_launch_kernel). */
    CUresult (*LaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **);
    CUresult (*StreamCreate)(CUstream *, unsigned int);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*StreamGetFlags)(CUstream, unsigned int *);
    CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned int);
    CUresult (*StreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
    CUresult (*StreamBeginCapture)(CUstream, CUstreamCaptureMode);
    CUresult (*StreamEndCapture)(CUstream, CUgraph *);
    CUresult (*GraphInstantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*GraphLaunch)(CUgraphExec, CUstream);
    CUresult (*GraphExecDestroy)(CUgraphExec);
    CUresult (*GraphDestroy)(CUgraph);
    CUresult (*EventCreate)(CUevent *, unsigned int);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventQuery)(CUevent);
    CUresult (*ThreadExchangeStreamCaptureMode)(CUstreamCaptureMode *);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
} CclCuda;

extern CclCuda ccl__cu;

/* Loads libcuda (once) and runs cuInit. 0, or -1 with the reason in why. Thread-safe. */
int ccl__cuda_load(char *why, size_t len);
/* "cuMemCreate: out of memory (CUDA_ERROR_OUT_OF_MEMORY)": for messages. */
const char *ccl__cuda_error(CUresult r);

#endif
