/* cuda.c: the CUDA driver for the tools (see harness.h), loaded with dlopen so the tools
 * link nothing but libccl: a rank's GPU (primary context, stream, event pairs) and its
 * buffers, and the graph timing.c captures on its stream. The clock that uses them is in
 * timing.c. tests/perf/run.sh compiles this file
 * with CCL_TOOLS_CHECK_PROTOTYPES and the real cuda.h, so the hand-written prototypes
 * (cuda_api.h) are checked against it. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"

/* Symbols, newest first where the driver versions them. */
#define TOOL_CU_SYMS(X)                                                                   \
    X(Init, "cuInit", NULL) X(DeviceGetCount, "cuDeviceGetCount", NULL)                    \
    X(DeviceGet, "cuDeviceGet", NULL) X(DeviceGetName, "cuDeviceGetName", NULL)            \
    X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL)                            \
    X(CtxSetCurrent, "cuCtxSetCurrent", NULL) X(StreamCreate, "cuStreamCreate", NULL)      \
    X(CtxSynchronize, "cuCtxSynchronize", NULL)                                            \
    X(StreamDestroy, "cuStreamDestroy_v2", "cuStreamDestroy")                              \
    X(StreamSynchronize, "cuStreamSynchronize", NULL) X(EventCreate, "cuEventCreate", NULL) \
    X(EventRecord, "cuEventRecord", NULL) X(EventSynchronize, "cuEventSynchronize", NULL)  \
    X(EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime")                     \
    X(EventDestroy, "cuEventDestroy_v2", "cuEventDestroy")                                 \
    X(MemcpyHtoD, "cuMemcpyHtoD_v2", NULL) X(MemcpyDtoH, "cuMemcpyDtoH_v2", NULL)          \
    X(MemsetD8, "cuMemsetD8_v2", NULL)                                                     \
    X(MemAlloc, "cuMemAlloc_v2", NULL) X(MemFree, "cuMemFree_v2", NULL)                    \
    X(MemGetAllocationGranularity, "cuMemGetAllocationGranularity", NULL)                  \
    X(MemAddressReserve, "cuMemAddressReserve", NULL) X(MemAddressFree, "cuMemAddressFree", NULL) \
    X(MemCreate, "cuMemCreate", NULL) X(MemRelease, "cuMemRelease", NULL)                  \
    X(MemMap, "cuMemMap", NULL) X(MemUnmap, "cuMemUnmap", NULL)                            \
    X(MemSetAccess, "cuMemSetAccess", NULL)                                                \
    X(StreamBeginCapture, "cuStreamBeginCapture_v2", NULL)                                 \
    X(StreamEndCapture, "cuStreamEndCapture", NULL)                                        \
    X(GraphInstantiate, "cuGraphInstantiateWithFlags", NULL)                               \
    X(GraphLaunch, "cuGraphLaunch", NULL) X(GraphExecDestroy, "cuGraphExecDestroy", NULL)  \
    X(GraphDestroy, "cuGraphDestroy", NULL) X(GetErrorString, "cuGetErrorString", NULL)

#ifdef CCL_TOOLS_CHECK_PROTOTYPES
#define TOOL_SAME_TYPE(field, fn)                                                        \
    _Static_assert(__builtin_types_compatible_p(__typeof__(((ToolCudaApi *)0)->field), __typeof__(&fn)), \
                   #fn " does not match cuda.h");
TOOL_SAME_TYPE(Init, cuInit) TOOL_SAME_TYPE(DeviceGetCount, cuDeviceGetCount)
TOOL_SAME_TYPE(DeviceGet, cuDeviceGet) TOOL_SAME_TYPE(DeviceGetName, cuDeviceGetName)
TOOL_SAME_TYPE(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain)
TOOL_SAME_TYPE(CtxSetCurrent, cuCtxSetCurrent) TOOL_SAME_TYPE(StreamCreate, cuStreamCreate)
TOOL_SAME_TYPE(CtxSynchronize, cuCtxSynchronize)
TOOL_SAME_TYPE(StreamDestroy, cuStreamDestroy_v2) TOOL_SAME_TYPE(StreamSynchronize, cuStreamSynchronize)
TOOL_SAME_TYPE(EventCreate, cuEventCreate) TOOL_SAME_TYPE(EventRecord, cuEventRecord)
TOOL_SAME_TYPE(EventSynchronize, cuEventSynchronize)
TOOL_SAME_TYPE(EventElapsedTime, cuEventElapsedTime_v2) TOOL_SAME_TYPE(EventDestroy, cuEventDestroy_v2)
TOOL_SAME_TYPE(MemcpyHtoD, cuMemcpyHtoD_v2) TOOL_SAME_TYPE(MemcpyDtoH, cuMemcpyDtoH_v2)
TOOL_SAME_TYPE(MemsetD8, cuMemsetD8_v2) TOOL_SAME_TYPE(StreamBeginCapture, cuStreamBeginCapture_v2)
TOOL_SAME_TYPE(MemAlloc, cuMemAlloc_v2) TOOL_SAME_TYPE(MemFree, cuMemFree_v2)
TOOL_SAME_TYPE(MemGetAllocationGranularity, cuMemGetAllocationGranularity)
TOOL_SAME_TYPE(MemAddressReserve, cuMemAddressReserve) TOOL_SAME_TYPE(MemAddressFree, cuMemAddressFree)
TOOL_SAME_TYPE(MemCreate, cuMemCreate) TOOL_SAME_TYPE(MemRelease, cuMemRelease)
TOOL_SAME_TYPE(MemMap, cuMemMap) TOOL_SAME_TYPE(MemUnmap, cuMemUnmap) TOOL_SAME_TYPE(MemSetAccess, cuMemSetAccess)
TOOL_SAME_TYPE(StreamEndCapture, cuStreamEndCapture)
TOOL_SAME_TYPE(GraphInstantiate, cuGraphInstantiateWithFlags) TOOL_SAME_TYPE(GraphLaunch, cuGraphLaunch)
TOOL_SAME_TYPE(GraphExecDestroy, cuGraphExecDestroy) TOOL_SAME_TYPE(GraphDestroy, cuGraphDestroy)
TOOL_SAME_TYPE(GetErrorString, cuGetErrorString)
_Static_assert((int)CU_STREAM_NON_BLOCKING == (int)TOOL_CU_STREAM_NON_BLOCKING, "stream flag");
_Static_assert((int)CU_STREAM_CAPTURE_MODE_THREAD_LOCAL == (int)TOOL_CU_CAPTURE_THREAD_LOCAL, "capture mode");
_Static_assert((int)CU_MEM_ALLOCATION_TYPE_PINNED == (int)TOOL_CU_MEM_ALLOCATION_TYPE_PINNED, "allocation type");
_Static_assert((int)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR == (int)TOOL_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
               "handle type");
_Static_assert((int)CU_MEM_LOCATION_TYPE_DEVICE == (int)TOOL_CU_MEM_LOCATION_TYPE_DEVICE, "location type");
_Static_assert((int)CU_MEM_ACCESS_FLAGS_PROT_READWRITE == (int)TOOL_CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "access");
_Static_assert((int)CU_MEM_ALLOC_GRANULARITY_RECOMMENDED == (int)TOOL_CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
               "granularity");
/* The hand-written layouts (cuda_api.h), field by field. */
#define TOOL_SAME_FIELD(ours, theirs, field)                                                               \
    _Static_assert(offsetof(ours, field) == offsetof(theirs, field) &&                                        \
                   sizeof(((ours *)0)->field) == sizeof(((theirs *)0)->field), #theirs "." #field " differs");
TOOL_SAME_FIELD(ToolCuMemPropAbi, CUmemAllocationProp, type)
TOOL_SAME_FIELD(ToolCuMemPropAbi, CUmemAllocationProp, requestedHandleTypes)
TOOL_SAME_FIELD(ToolCuMemPropAbi, CUmemAllocationProp, location.type)
TOOL_SAME_FIELD(ToolCuMemPropAbi, CUmemAllocationProp, location.id)
TOOL_SAME_FIELD(ToolCuMemPropAbi, CUmemAllocationProp, win32HandleMetaData)
TOOL_SAME_FIELD(ToolCuMemPropAbi, CUmemAllocationProp, allocFlags)
TOOL_SAME_FIELD(ToolCuMemAccessAbi, CUmemAccessDesc, location)
TOOL_SAME_FIELD(ToolCuMemAccessAbi, CUmemAccessDesc, flags)
_Static_assert(sizeof(ToolCuMemPropAbi) == sizeof(CUmemAllocationProp) &&
               sizeof(ToolCuMemAccessAbi) == sizeof(CUmemAccessDesc) &&
               sizeof(unsigned long long) == sizeof(CUmemGenericAllocationHandle), "VMM layouts");
#undef TOOL_SAME_FIELD
#undef TOOL_SAME_TYPE
#endif

ToolCudaApi tool_cu;
static int cu_loaded;

int tool_cuda_load(int *ndev, char *why, size_t len)
{
    static int done, result = -1, count;
    static char reason[256];
    if (!done) {
        done = 1;
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        if (!lib) {
            snprintf(reason, sizeof reason, "no CUDA driver (%s)", dlerror());
            goto out;
        }
        struct { void **slot; const char *a, *b; } syms[] = {
#define TOOL_SYM(field, a, b) {(void **)&tool_cu.field, a, b},
            TOOL_CU_SYMS(TOOL_SYM)
#undef TOOL_SYM
        };
        for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
            *syms[i].slot = dlsym(lib, syms[i].a);
            if (!*syms[i].slot && syms[i].b)
                *syms[i].slot = dlsym(lib, syms[i].b);
            if (!*syms[i].slot) {
                snprintf(reason, sizeof reason, "the CUDA driver lacks %s (too old?)", syms[i].a);
                goto out;
            }
        }
        CuResult e = tool_cu.Init(0);
        if (e != 0) {
            const char *s = NULL;
            tool_cu.GetErrorString(e, &s);
            snprintf(reason, sizeof reason, "cuInit failed: %s%sCUDA error %d%s", s ? s : "", s ? " (" : "", e, s ? ")" : "");
            goto out;
        }
        if ((e = tool_cu.DeviceGetCount(&count)) != 0 || count == 0) {
            snprintf(reason, sizeof reason, "no CUDA device is visible");
            goto out;
        }
        cu_loaded = 1;
        result = 0;
    }
out:
    if (result != 0)
        snprintf(why, len, "%s", reason);
    *ndev = count;
    return result;
}

const char *tool_cuda_error(CuResult e)
{
    const char *s = NULL;
    if (cu_loaded)
        tool_cu.GetErrorString(e, &s);
    return s ? s : "unknown CUDA error";
}

/* ===== a rank's GPU ===== */

CuResult tool_gpu_open(ToolGpu *g, int device, int nev)
{
    *g = (ToolGpu){.device = device};
    CuDevice dev;
    CuResult r;
    if ((r = tool_cu_call(g, tool_cu.DeviceGet(&dev, device), "cuDeviceGet")) ||
        (r = tool_cu_call(g, tool_cu.DevicePrimaryCtxRetain(&g->ctx, dev), "cuDevicePrimaryCtxRetain")) ||
        (r = tool_gpu_make_current(g)) ||
        (r = tool_cu_call(g, tool_cu.StreamCreate(&g->stream, TOOL_CU_STREAM_NON_BLOCKING), "cuStreamCreate")))
        return r;
    g->ev0 = calloc((size_t)(nev > 0 ? nev : 1), sizeof *g->ev0);
    g->ev1 = calloc((size_t)(nev > 0 ? nev : 1), sizeof *g->ev1);
    if (!g->ev0 || !g->ev1) {
        g->what = "allocating the event table";
        return 2;                    /* CUDA_ERROR_OUT_OF_MEMORY */
    }
    g->nev = nev;
    for (int i = 0; i < nev; i++)
        if ((r = tool_cu_call(g, tool_cu.EventCreate(&g->ev0[i], 0), "cuEventCreate")) ||
            (r = tool_cu_call(g, tool_cu.EventCreate(&g->ev1[i], 0), "cuEventCreate")))
            return r;
    return 0;
}

void tool_gpu_graph_free(ToolGpu *g)
{
    if (g->exec)
        tool_cu.GraphExecDestroy(g->exec);
    if (g->graph)
        tool_cu.GraphDestroy(g->graph);
    g->exec = NULL;
    g->graph = NULL;
}

void tool_gpu_close(ToolGpu *g)
{
    tool_gpu_graph_free(g);
    for (int i = 0; i < g->nev; i++) {
        if (g->ev0[i])
            tool_cu.EventDestroy(g->ev0[i]);
        if (g->ev1[i])
            tool_cu.EventDestroy(g->ev1[i]);
    }
    if (g->stream)
        tool_cu.StreamDestroy(g->stream);
    free(g->ev0);
    free(g->ev1);
    *g = (ToolGpu){.device = g->device};
}

void tool_gpu_why(const ToolGpu *g, CuResult e, char *buf, size_t len)
{
    snprintf(buf, len, "%s failed: %s (CUDA error %d)", g->what ? g->what : "a CUDA call", tool_cuda_error(e), (int)e);
}

CuResult tool_gpu_make_current(ToolGpu *g)
{
    return tool_cu_call(g, tool_cu.CtxSetCurrent(g->ctx), "cuCtxSetCurrent");
}

CuResult tool_gpu_name(ToolGpu *g, char *buf, int len)
{
    CuDevice dev;
    CuResult r = tool_cu_call(g, tool_cu.DeviceGet(&dev, g->device), "cuDeviceGet");
    return r ? r : tool_cu_call(g, tool_cu.DeviceGetName(buf, len, dev), "cuDeviceGetName");
}

CuResult tool_gpu_sync(ToolGpu *g)
{
    return tool_cu_call(g, tool_cu.StreamSynchronize(g->stream), "cuStreamSynchronize");
}

/* cuMemcpyHtoD from pageable memory returns once the data is staged, before the DMA
 * lands, and cuMemsetD8 is asynchronous; both run on the legacy stream, which does not
 * order the non-blocking stream. So the context is synchronized after each: work
 * launched next must see the new bytes (without this, ccl-perf's in-place checks at 1 MB
 * flagged wrong elements for NCCL and for CCL alike). */
CuResult tool_gpu_upload(ToolGpu *g, void *dst, const void *src, size_t bytes)
{
    CuResult r = tool_cu_call(g, tool_cu.MemcpyHtoD((CuDevicePtr)(uintptr_t)dst, src, bytes), "cuMemcpyHtoD");
    return r ? r : tool_cu_call(g, tool_cu.CtxSynchronize(), "cuCtxSynchronize");
}

CuResult tool_gpu_fill(ToolGpu *g, void *dst, unsigned char byte, size_t bytes)
{
    CuResult r = tool_cu_call(g, tool_cu.MemsetD8((CuDevicePtr)(uintptr_t)dst, byte, bytes), "cuMemsetD8");
    return r ? r : tool_cu_call(g, tool_cu.CtxSynchronize(), "cuCtxSynchronize");
}

CuResult tool_gpu_download(ToolGpu *g, void *dst, const void *src, size_t bytes)
{
    return tool_cu_call(g, tool_cu.MemcpyDtoH(dst, (CuDevicePtr)(uintptr_t)src, bytes), "cuMemcpyDtoH");
}

/* Both make the rank's context current first, so the memory is the rank's device's
 * whatever context the calling thread used last. */
CuResult tool_gpu_alloc(ToolGpu *g, void **ptr, size_t bytes)
{
    CuDevicePtr d = 0;
    *ptr = NULL;
    CuResult r = tool_gpu_make_current(g);
    if (r == 0 && (r = tool_cu_call(g, tool_cu.MemAlloc(&d, bytes), "cuMemAlloc")) == 0)
        *ptr = (void *)(uintptr_t)d;
    return r;
}

CuResult tool_gpu_free(ToolGpu *g, void *ptr)
{
    if (!ptr)
        return 0;
    CuResult r = tool_gpu_make_current(g);
    return r ? r : tool_cu_call(g, tool_cu.MemFree((CuDevicePtr)(uintptr_t)ptr), "cuMemFree");
}

/* PyTorch's expandable segments (its caching allocator with expandable_segments:True)
 * reserve an address range and map one cuMemCreate allocation per page into it as the
 * segment grows: 2 MiB pages for requests up to 1 MiB (its small pool), 20 MiB pages
 * above, exportable as POSIX file descriptors (torch 2.5 on), readable and writable by
 * the device. This makes one buffer the same way, whole; the handles are released once
 * mapped, so unmapping frees the memory (or a registration that holds them does, later). */
enum { TOOL_SMALL_PAGE = 2u << 20, TOOL_LARGE_PAGE = 20u << 20, TOOL_SMALL_REQUEST = 1u << 20 };

CuResult tool_gpu_alloc_shareable(ToolGpu *g, void **ptr, size_t bytes, size_t *size)
{
    ToolCuMemProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = (__typeof__(prop.type))TOOL_CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes =
        (__typeof__(prop.requestedHandleTypes))TOOL_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = (__typeof__(prop.location.type))TOOL_CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = g->device;
    ToolCuMemAccess access;
    memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = (__typeof__(access.flags))TOOL_CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    *ptr = NULL;
    *size = 0;
    size_t gran = 0;
    CuResult r = tool_gpu_make_current(g);
    if (r == 0)
        r = tool_cu_call(g, tool_cu.MemGetAllocationGranularity(
                                &gran, &prop, (ToolCuGranularity)TOOL_CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
                         "cuMemGetAllocationGranularity");
    if (r != 0)
        return r;
    size_t page = bytes <= TOOL_SMALL_REQUEST ? TOOL_SMALL_PAGE : TOOL_LARGE_PAGE;
    if (gran > 1)
        page = (page + gran - 1) / gran * gran;
    if (bytes == 0 || bytes > SIZE_MAX - page) {
        g->what = "cuMemAddressReserve (size)";
        return 1;                    /* CUDA_ERROR_INVALID_VALUE */
    }
    size_t total = (bytes + page - 1) / page * page, mapped = 0;
    CuDevicePtr va = 0;
    if ((r = tool_cu_call(g, tool_cu.MemAddressReserve(&va, total, 0, 0, 0), "cuMemAddressReserve")) != 0)
        return r;
    while (mapped < total && r == 0) {
        ToolCuMemHandle h = 0;
        if ((r = tool_cu_call(g, tool_cu.MemCreate(&h, page, &prop, 0), "cuMemCreate (POSIX file descriptor)")) != 0)
            break;
        r = tool_cu_call(g, tool_cu.MemMap(va + mapped, page, 0, h, 0), "cuMemMap");
        tool_cu.MemRelease(h);       /* the mapping holds the memory from here on */
        if (r == 0)
            mapped += page;
    }
    if (r == 0)
        r = tool_cu_call(g, tool_cu.MemSetAccess(va, total, &access, 1), "cuMemSetAccess");
    if (r != 0) {
        if (mapped)
            tool_cu.MemUnmap(va, mapped);
        tool_cu.MemAddressFree(va, total);
        return r;
    }
    *ptr = (void *)(uintptr_t)va;
    *size = total;
    return 0;
}

CuResult tool_gpu_free_shareable(ToolGpu *g, void *ptr, size_t size)
{
    if (!ptr)
        return 0;
    CuDevicePtr va = (CuDevicePtr)(uintptr_t)ptr;
    CuResult r = tool_gpu_make_current(g);
    if (r == 0)
        r = tool_cu_call(g, tool_cu.MemUnmap(va, size), "cuMemUnmap");
    CuResult f = tool_cu_call(g, tool_cu.MemAddressFree(va, size), "cuMemAddressFree");
    return r ? r : f;
}
