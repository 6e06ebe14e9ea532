/* device.c: the little of CUDA the shim needs itself, found at run time.
 *
 * NCCL takes a rank's GPU from the calling thread's current device (cudaGetDevice), so
 * the shim asks the same: the CUDA runtime the program already loaded (torch's
 * libcudart), else the driver (libcuda.so.1: the primary context's device). It builds
 * without any CUDA header or library and links none: on a machine without CUDA every
 * answer here is "none" (-1, 0), which is the CPU backend's test mode. The runtime is
 * preferred because it is what the program itself uses: its current device and its
 * stream-capture state are the ones that matter. */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "shim.h"

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef unsigned long long CUdeviceptr;

static struct {
    /* The CUDA runtime, where the program loaded one. */
    int (*GetDevice)(int *);
    int (*SetDevice)(int);
    int (*StreamIsCapturing)(cudaStream_t, int *);
    int (*Malloc)(void **, size_t);
    int (*Free)(void *);
    /* The driver. */
    CUresult (*Init)(unsigned);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*CtxGetDevice)(CUdevice *);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*StreamIsCapturingDrv)(cudaStream_t, int *);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    int runtime, driver;
} cu;

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static int find_cudart(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    const char *name = info->dlpi_name;
    const char *base = name ? strrchr(name, '/') : NULL;
    if (base && !strncmp(base + 1, "libcudart.so", 12)) {
        snprintf(arg, 1024, "%s", name);
        return 1;
    }
    return 0;
}

static void cu_load(void)
{
    if (shim_env_cpu())
        return;
    char path[1024] = "";
    dl_iterate_phdr(find_cudart, path);
    void *rt = path[0] ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (rt) {
        *(void **)&cu.GetDevice = dlsym(rt, "cudaGetDevice");
        *(void **)&cu.SetDevice = dlsym(rt, "cudaSetDevice");
        *(void **)&cu.StreamIsCapturing = dlsym(rt, "cudaStreamIsCapturing");
        *(void **)&cu.Malloc = dlsym(rt, "cudaMalloc");
        *(void **)&cu.Free = dlsym(rt, "cudaFree");
        cu.runtime = cu.GetDevice && cu.SetDevice && cu.StreamIsCapturing && cu.Malloc && cu.Free;
    }
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!drv)
        return;
    *(void **)&cu.Init = dlsym(drv, "cuInit");
    *(void **)&cu.CtxGetCurrent = dlsym(drv, "cuCtxGetCurrent");
    *(void **)&cu.CtxGetDevice = dlsym(drv, "cuCtxGetDevice");
    *(void **)&cu.CtxSetCurrent = dlsym(drv, "cuCtxSetCurrent");
    *(void **)&cu.PrimaryCtxRetain = dlsym(drv, "cuDevicePrimaryCtxRetain");
    *(void **)&cu.StreamIsCapturingDrv = dlsym(drv, "cuStreamIsCapturing");
    *(void **)&cu.MemAlloc = dlsym(drv, "cuMemAlloc_v2");
    *(void **)&cu.MemFree = dlsym(drv, "cuMemFree_v2");
    cu.driver = cu.Init && cu.CtxGetCurrent && cu.CtxGetDevice && cu.CtxSetCurrent && cu.PrimaryCtxRetain &&
                cu.StreamIsCapturingDrv && cu.MemAlloc && cu.MemFree && cu.Init(0) == 0;
}

int shim_current_device(void)
{
    pthread_once(&cu_once, cu_load);
    int dev = -1;
    if (cu.runtime)
        return cu.GetDevice(&dev) == 0 ? dev : -1;
    if (!cu.driver)
        return -1;
    CUcontext ctx = NULL;
    if (cu.CtxGetCurrent(&ctx) != 0 || !ctx)
        return 0; /* as cudaGetDevice: device 0 until one is set */
    return cu.CtxGetDevice(&dev) == 0 ? dev : -1;
}

int shim_set_device(int dev)
{
    pthread_once(&cu_once, cu_load);
    if (cu.runtime)
        return cu.SetDevice(dev) == 0 ? 0 : -1;
    CUcontext ctx;
    if (!cu.driver || cu.PrimaryCtxRetain(&ctx, dev) != 0)
        return -1;
    return cu.CtxSetCurrent(ctx) == 0 ? 0 : -1;
}

int shim_stream_capturing(cudaStream_t stream)
{
    pthread_once(&cu_once, cu_load);
    int status = 0; /* cudaStreamCaptureStatusNone, CU_STREAM_CAPTURE_STATUS_NONE */
    if (cu.runtime)
        return cu.StreamIsCapturing(stream, &status) == 0 && status != 0;
    return cu.driver && cu.StreamIsCapturingDrv(stream, &status) == 0 && status != 0;
}

/* The driver needs a current context: the primary one of the current device. */
static int drv_context(void)
{
    CUcontext ctx = NULL;
    if (cu.CtxGetCurrent(&ctx) == 0 && ctx)
        return 0;
    int dev = shim_current_device();
    return shim_set_device(dev < 0 ? 0 : dev);
}

int shim_cuda_alloc(void **ptr, size_t bytes)
{
    pthread_once(&cu_once, cu_load);
    if (cu.runtime)
        return cu.Malloc(ptr, bytes) == 0 ? 0 : -1;
    CUdeviceptr p;
    if (!cu.driver)
        return -2;
    if (drv_context() != 0 || cu.MemAlloc(&p, bytes) != 0)
        return -1;
    *ptr = (void *)(uintptr_t)p;
    return 0;
}

int shim_cuda_free(void *ptr)
{
    pthread_once(&cu_once, cu_load);
    if (cu.runtime)
        return cu.Free(ptr) == 0 ? 0 : -1;
    return cu.driver && cu.MemFree((CUdeviceptr)(uintptr_t)ptr) == 0 ? 0 : -1;
}
