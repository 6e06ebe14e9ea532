/* cuda_api.h: the CUDA driver's entry points the harness uses (cuda.c loads them with
 * dlopen; cuda.c and timing.c call them). Private to tools/common/: the tools call the
 * harness's functions (harness.h), never the driver. Under CCL_TOOLS_CHECK_PROTOTYPES
 * cuda.c checks every prototype against cuda.h (tests/perf/run.sh). */
#ifndef CCL_TOOLS_CUDA_API_H
#define CCL_TOOLS_CUDA_API_H

#include "harness.h"

enum { TOOL_CU_STREAM_NON_BLOCKING = 1, TOOL_CU_CAPTURE_THREAD_LOCAL = 1 };

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
