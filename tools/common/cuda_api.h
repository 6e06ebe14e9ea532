/* cuda_api.h: the CUDA driver's entry points the harness uses (cuda.c loads them with
 * dlopen; cuda.c and timing.c call them). Private to tools/common/: the tools call the
 * harness's functions (harness.h), never the driver. Under CCL_TOOLS_CHECK_PROTOTYPES
 * cuda.c checks every prototype against cuda.h (tests/perf/run.sh). */
#ifndef CCL_TOOLS_CUDA_API_H
#define CCL_TOOLS_CUDA_API_H

#include "harness.h"

enum { TOOL_CU_STREAM_NON_BLOCKING = 1, TOOL_CU_CAPTURE_THREAD_LOCAL = 1 };

/* The virtual memory management API's types (cuMemCreate and friends), laid out as
 * cuda.h (CUDA 11 to 13) lays them out. Under CCL_TOOLS_CHECK_PROTOTYPES the driver's
 * entry points take cuda.h's own types, and cuda.c checks every size and offset of these
 * against them. */
typedef struct {
    int type, id;                   /* CUmemLocationType, the device ordinal */
} ToolCuMemLocationAbi;
typedef struct {
    int type;                       /* CUmemAllocationType */
    int requestedHandleTypes;       /* CUmemAllocationHandleType */
    ToolCuMemLocationAbi location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType, gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} ToolCuMemPropAbi;
typedef struct {
    ToolCuMemLocationAbi location;
    int flags;                      /* CUmemAccess_flags */
} ToolCuMemAccessAbi;
#ifdef CCL_TOOLS_CHECK_PROTOTYPES
typedef CUmemGenericAllocationHandle ToolCuMemHandle;
typedef CUmemAllocationProp ToolCuMemProp;
typedef CUmemAccessDesc ToolCuMemAccess;
typedef CUmemAllocationGranularity_flags ToolCuGranularity;
#else
typedef unsigned long long ToolCuMemHandle;
typedef ToolCuMemPropAbi ToolCuMemProp;
typedef ToolCuMemAccessAbi ToolCuMemAccess;
typedef int ToolCuGranularity;
#endif
enum {
    TOOL_CU_MEM_ALLOCATION_TYPE_PINNED = 1,
    TOOL_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1,
    TOOL_CU_MEM_LOCATION_TYPE_DEVICE = 1,
    TOOL_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
    TOOL_CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1,
};

typedef struct {
    CuResult (*Init)(unsigned int);
    CuResult (*DeviceGetCount)(int *);
    CuResult (*DeviceGet)(CuDevice *, int);
    CuResult (*DeviceGetName)(char *, int, CuDevice);
    CuResult (*DevicePrimaryCtxRetain)(CuContext *, CuDevice);
    CuResult (*CtxSetCurrent)(CuContext);
    CuResult (*CtxSynchronize)(void);
    CuResult (*StreamCreate)(CuStream *, unsigned int);
    CuResult (*StreamDestroy)(CuStream);
    CuResult (*StreamSynchronize)(CuStream);
    CuResult (*EventCreate)(CuEvent *, unsigned int);
    CuResult (*EventRecord)(CuEvent, CuStream);
    CuResult (*EventSynchronize)(CuEvent);
    CuResult (*EventElapsedTime)(float *, CuEvent, CuEvent);
    CuResult (*EventDestroy)(CuEvent);
    CuResult (*MemcpyHtoD)(CuDevicePtr, const void *, size_t);
    CuResult (*MemcpyDtoH)(void *, CuDevicePtr, size_t);
    CuResult (*MemsetD8)(CuDevicePtr, unsigned char, size_t);
    CuResult (*MemAlloc)(CuDevicePtr *, size_t);
    CuResult (*MemFree)(CuDevicePtr);
    CuResult (*MemGetAllocationGranularity)(size_t *, const ToolCuMemProp *, ToolCuGranularity);
    CuResult (*MemAddressReserve)(CuDevicePtr *, size_t, size_t, CuDevicePtr, unsigned long long);
    CuResult (*MemAddressFree)(CuDevicePtr, size_t);
    CuResult (*MemCreate)(ToolCuMemHandle *, size_t, const ToolCuMemProp *, unsigned long long);
    CuResult (*MemRelease)(ToolCuMemHandle);
    CuResult (*MemMap)(CuDevicePtr, size_t, size_t, ToolCuMemHandle, unsigned long long);
    CuResult (*MemUnmap)(CuDevicePtr, size_t);
    CuResult (*MemSetAccess)(CuDevicePtr, size_t, const ToolCuMemAccess *, size_t);
    CuResult (*StreamBeginCapture)(CuStream, CuCaptureMode);
    CuResult (*StreamEndCapture)(CuStream, CuGraph *);
    CuResult (*GraphInstantiate)(CuGraphExec *, CuGraph, unsigned long long);
    CuResult (*GraphLaunch)(CuGraphExec, CuStream);
    CuResult (*GraphExecDestroy)(CuGraphExec);
    CuResult (*GraphDestroy)(CuGraph);
    CuResult (*GetErrorString)(CuResult, const char **);
} ToolCudaApi;

extern ToolCudaApi tool_cu;

/* r, and where it failed, the call's name in g->what. */
static inline CuResult tool_cu_call(ToolGpu *g, CuResult r, const char *what)
{
    if (r != 0)
        g->what = what;
    return r;
}

#endif
