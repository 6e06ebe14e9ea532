/* shared_gpu_probe.c: which driver calls wait for a kernel already running on the same
 * GPU, in the same context, on another non-blocking stream?
 *
 *   cc -std=c11 -O2 -I/usr/local/cuda/include bench/shared_gpu_probe.c -o shared_gpu_probe \
 *      -L/usr/local/cuda/lib64/stubs -L/usr/local/cuda/lib64 -lcuda -lnvrtc
 *   CUDA_MODULE_LOADING=LAZY ./shared_gpu_probe; CUDA_MODULE_LOADING=EAGER ./shared_gpu_probe
 *
 * Ranks that share one GPU in one process share its primary context; a rank's kernel
 * spins until its peers' kernels run, so a call that waits for running kernels, made by
 * one rank between another's launch and its own, deadlocks (until the kernel's timeout).
 * For each call below the probe starts a kernel that spins on a host-mapped word for at
 * most 2 s, makes the call, then releases the kernel. A call that took ~2 s waited. */
#define _GNU_SOURCE
#include <cuda.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                                           \
    do {                                                                                                \
        CUresult r_ = (x);                                                                              \
        if (r_ != CUDA_SUCCESS) {                                                                       \
            const char *s_ = "?";                                                                       \
            cuGetErrorString(r_, &s_);                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, s_);                             \
            exit(1);                                                                                    \
        }                                                                                               \
    } while (0)

static const char *spin_src =
    "extern \"C\" __global__ void spin(volatile unsigned *flag, unsigned *timed_out)\n"
    "{\n"
    "    unsigned long long t0, t;\n"
    "    asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t0));\n"
    "    while (!*flag) {\n"
    "        asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t));\n"
    "        if (t - t0 > 2000000000ull) { *timed_out = 1; return; }\n"
    "    }\n"
    "}\n"
    "extern \"C\" __global__ void other(int *x) { x[threadIdx.x] += 1; }\n";

static char *compile(const char *src, int arch)
{
    nvrtcProgram p;
    nvrtcCreateProgram(&p, src, "probe.cu", 0, NULL, NULL);
    char opt[64];
    snprintf(opt, sizeof opt, "--gpu-architecture=sm_%d", arch);
    const char *opts[] = {opt};
    if (nvrtcCompileProgram(p, 1, opts) != NVRTC_SUCCESS) {
        fprintf(stderr, "nvrtc failed\n");
        exit(1);
    }
    size_t n;
    nvrtcGetCUBINSize(p, &n);
    char *bin = malloc(n);
    nvrtcGetCUBIN(p, bin);
    nvrtcDestroyProgram(&p);
    return bin;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static CUfunction spin;
static CUstream s_spin, s_other;
static volatile unsigned *flag, *timed_out;
static CUdeviceptr flag_d, timed_out_d, scratch;
static char *cubin;

static void start_spinner(void)
{
    *flag = 0;
    *timed_out = 0;
    void *args[] = {&flag_d, &timed_out_d};
    CK(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, s_spin, args, NULL));
    /* Let it start. */
    double t = now_ms();
    while (now_ms() - t < 20) {
    }
}

static void finish(const char *what, double ms)
{
    int waited = *timed_out;
    *flag = 1;
    CK(cuStreamSynchronize(s_spin));
    printf("%-58s %8.1f ms  %s\n", what, ms, waited || *timed_out ? "WAITED for the running kernel" : "ok");
    fflush(stdout);
}

#define PROBE(what, body)                                                                               \
    do {                                                                                                \
        start_spinner();                                                                                \
        double t_ = now_ms();                                                                           \
        body;                                                                                           \
        finish(what, now_ms() - t_);                                                                    \
    } while (0)

/* Hardware queues: streams share the GPU's connections (CUDA_DEVICE_MAX_CONNECTIONS).
 * With the spinner running on s_spin (and, when `tail`, a kernel queued behind it on
 * s_spin, as a rank's kernel queues behind its fence), which of NSTREAMS fresh streams
 * can still run a short kernel? A stream that cannot shares the spinner's queue. */
enum { NSTREAMS = 48 };
static void queue_probe(void **args, int tail)
{
    static CUfunction other;
    static CUstream st[NSTREAMS];
    if (!other) {
        CUmodule m;
        CK(cuModuleLoadData(&m, cubin));
        CK(cuModuleGetFunction(&other, m, "other"));
        for (int i = 0; i < NSTREAMS; i++) CK(cuStreamCreate(&st[i], CU_STREAM_NON_BLOCKING));
    }
    start_spinner();
    if (tail) CK(cuLaunchKernel(other, 1, 1, 1, 32, 1, 1, 0, s_spin, args, NULL));
    char blocked[NSTREAMS * 4 + 1] = "";
    int nblocked = 0;
    for (int i = 0; i < NSTREAMS; i++) {
        CK(cuLaunchKernel(other, 1, 1, 1, 32, 1, 1, 0, st[i], args, NULL));
        double t = now_ms();
        CUresult r;
        while ((r = cuStreamQuery(st[i])) == CUDA_ERROR_NOT_READY && now_ms() - t < 30) {
        }
        if (r == CUDA_ERROR_NOT_READY) {
            nblocked++;
            snprintf(blocked + strlen(blocked), sizeof blocked - strlen(blocked), " %d", i);
        }
    }
    const char *mc = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    printf("queues (CUDA_DEVICE_MAX_CONNECTIONS=%s)%s: %d of %d new streams blocked behind the spinner:%s\n",
           mc ? mc : "unset", tail ? ", a kernel queued behind it" : "", nblocked, NSTREAMS, blocked);
    finish("  (queue probe done)", 0);
    for (int i = 0; i < NSTREAMS; i++) CK(cuStreamSynchronize(st[i]));
}

int main(void)
{
    CK(cuInit(0));
    CUdevice dev;
    CK(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    int major, minor;
    cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    const char *lm = getenv("CUDA_MODULE_LOADING");
    printf("CUDA_MODULE_LOADING=%s, sm_%d%d\n", lm ? lm : "(unset)", major, minor);
    cubin = compile(spin_src, major * 10 + minor);
    CUmodule mod;
    CK(cuModuleLoadData(&mod, cubin));
    CK(cuModuleGetFunction(&spin, mod, "spin"));
    int attr;
    CK(cuFuncGetAttribute(&attr, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, spin));
    CK(cuStreamCreate(&s_spin, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&s_other, CU_STREAM_NON_BLOCKING));
    void *h;
    CK(cuMemHostAlloc(&h, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    flag = h;
    timed_out = (unsigned *)h + 16;
    CK(cuMemHostGetDevicePointer(&flag_d, (void *)flag, 0));
    CK(cuMemHostGetDevicePointer(&timed_out_d, (void *)timed_out, 0));
    CK(cuMemAlloc(&scratch, 1 << 20));

    PROBE("nothing (the baseline)", (void)0);
    CUdeviceptr p;
    PROBE("cuMemAlloc 1 MiB", CK(cuMemAlloc(&p, 1 << 20)));
    PROBE("cuMemFree 1 MiB", CK(cuMemFree(p)));
    PROBE("cuMemAlloc 256 MiB", CK(cuMemAlloc(&p, 256 << 20)));
    PROBE("cuMemFree 256 MiB", CK(cuMemFree(p)));
    CK(cuMemAlloc(&p, 4 << 20));
    CK(cuMemFree(p));
    PROBE("cuMemAlloc 4 MiB just after a cuMemFree of 4 MiB", CK(cuMemAlloc(&p, 4 << 20)));
    CUdeviceptr dp;
    PROBE("cuPointerGetAttribute (DEVICE_POINTER of device memory)",
          CK(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p)));
    PROBE("cuMemAlloc 64 KiB + cuPointerGetAttribute of it at once",
          CUdeviceptr q; CK(cuMemAlloc(&q, 64 << 10));
          CK(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, q)));
    PROBE("cuMemcpyAsync device to device (other stream) + sync it",
          CK(cuMemcpyAsync(scratch, p, 1 << 20, s_other)); CK(cuStreamSynchronize(s_other)));
    PROBE("cuStreamGetFlags + cuStreamIsCapturing",
          unsigned fl; CUstreamCaptureStatus cs; CK(cuStreamGetFlags(s_other, &fl));
          CK(cuStreamIsCapturing(s_other, &cs)));
    static char page[64 << 10];
    PROBE("cuMemcpyHtoD 64 KiB pageable (legacy stream)", CK(cuMemcpyHtoD(p, page, sizeof page)));
    CK(cuMemFree(p));
    void *hp;
    PROBE("cuMemHostAlloc 4 KiB mapped", CK(cuMemHostAlloc(&hp, 4096, CU_MEMHOSTALLOC_DEVICEMAP)));
    PROBE("cuMemFreeHost", CK(cuMemFreeHost(hp)));
    PROBE("cuMemsetD8Async (other non-blocking stream) + sync it",
          CK(cuMemsetD8Async(scratch, 0, 1 << 20, s_other)); CK(cuStreamSynchronize(s_other)));
    PROBE("cuMemsetD8 (legacy stream)", CK(cuMemsetD8(scratch, 0, 1 << 20)));
    char buf[256];
    PROBE("cuMemcpyHtoD 256 B (legacy stream)", CK(cuMemcpyHtoD(scratch, buf, sizeof buf)));
    PROBE("cuMemcpyHtoDAsync + sync (other stream)",
          CK(cuMemcpyHtoDAsync(scratch, buf, sizeof buf, s_other)); CK(cuStreamSynchronize(s_other)));
    CUevent ev;
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    PROBE("cuEventRecord on legacy + cuStreamWaitEvent(other) + sync other",
          CK(cuEventRecord(ev, CU_STREAM_LEGACY)); CK(cuStreamWaitEvent(s_other, ev, 0));
          CK(cuStreamSynchronize(s_other)));
    CUstream s3;
    PROBE("cuStreamCreate", CK(cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING)));
    CUmodule m2;
    PROBE("cuModuleLoadData (a new module)", CK(cuModuleLoadData(&m2, cubin)));
    CUfunction f2;
    PROBE("cuModuleGetFunction", CK(cuModuleGetFunction(&f2, m2, "other")));
    PROBE("cuFuncGetAttribute (loads a lazy function)",
          CK(cuFuncGetAttribute(&attr, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f2)));
    CUmodule m3;
    CUfunction f3;
    CK(cuModuleLoadData(&m3, cubin));
    CK(cuModuleGetFunction(&f3, m3, "other"));
    void *a2[] = {&scratch};
    PROBE("cuLaunchKernel of a never-loaded function + sync its stream",
          CK(cuLaunchKernel(f3, 1, 1, 1, 32, 1, 1, 0, s_other, a2, NULL)); CK(cuStreamSynchronize(s_other)));
    PROBE("cuModuleUnload", CK(cuModuleUnload(m2)));
    PROBE("cuStreamDestroy", CK(cuStreamDestroy(s3)));
    PROBE("cuEventDestroy", CK(cuEventDestroy(ev)));
    CUgraph graph;
    CUgraphExec exec;
    CK(cuStreamBeginCapture(s_other, CU_STREAM_CAPTURE_MODE_RELAXED));
    CK(cuLaunchKernel(f3, 1, 1, 1, 32, 1, 1, 0, s_other, a2, NULL));
    CK(cuStreamEndCapture(s_other, &graph));
    PROBE("cuGraphInstantiate", CK(cuGraphInstantiate(&exec, graph, 0)));
    PROBE("cuGraphLaunch + sync its stream", CK(cuGraphLaunch(exec, s_other)); CK(cuStreamSynchronize(s_other)));
    PROBE("cuGraphExecDestroy", CK(cuGraphExecDestroy(exec)));
    PROBE("cuGraphDestroy", CK(cuGraphDestroy(graph)));
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    CUmemGenericAllocationHandle vh;
    CUdeviceptr va;
    CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    PROBE("cuMemCreate + cuMemAddressReserve + cuMemMap + cuMemSetAccess",
          CK(cuMemCreate(&vh, gran, &prop, 0)); CK(cuMemAddressReserve(&va, gran, gran, 0, 0));
          CK(cuMemMap(va, gran, 0, vh, 0)); CK(cuMemSetAccess(va, gran, &acc, 1)));
    PROBE("cuMemUnmap", CK(cuMemUnmap(va, gran)));
    PROBE("cuMemAddressFree + cuMemRelease", CK(cuMemAddressFree(va, gran)); CK(cuMemRelease(vh)));
    PROBE("cuCtxSynchronize (expected to wait)", CK(cuCtxSynchronize()));
    queue_probe(a2, 0);
    queue_probe(a2, 1);
    return 0;
}
