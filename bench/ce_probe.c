/* ce_probe.c: how fast does a copy engine move data from GPU 0 to GPU 1 for each way
 * libccl could issue the copy? (Written when the port programs looked like ~40 GB/s per
 * copy; every cuMem variant here runs at ~395 GB/s: docs/perf/x2-sweep, "Port channels".)
 *
 *   cc -std=c11 -O2 -I/usr/local/cuda/include bench/ce_probe.c -o ce_probe \
 *      -L/usr/local/cuda/lib64/stubs -L/usr/local/cuda/lib64 -lcuda -lnvrtc
 *   ./ce_probe [MiB]
 *
 * Each case copies MiB (256 by default) from GPU 0 to memory on GPU 1, 10 times on one
 * stream of GPU 0's context, and prints GB/s (bytes / time between events). The last
 * cases copy while a kernel on GPU 0 spins as a flush does: one thread polling a word
 * (host-mapped or device memory) with ld.acquire.sys until the host sets it. */
#include <cuda.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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

static CUdevice dev[2];
static CUcontext ctx[2];

/* A cuMem allocation on GPU `owner`, mapped readable and writable by the GPUs in
 * `access` (bit i: GPU i). With via_fd, the handle is exported as a POSIX fd and
 * imported again, as between ranks. */
static CUdeviceptr vmm_alloc(int owner, size_t bytes, int via_fd, int access)
{
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = owner;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    bytes = (bytes + gran - 1) / gran * gran;
    CUmemGenericAllocationHandle h;
    CK(cuMemCreate(&h, bytes, &prop, 0));
    if (via_fd) {
        int fd;
        CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        CUmemGenericAllocationHandle h2;
        CK(cuMemImportFromShareableHandle(&h2, (void *)(long)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        close(fd);
        h = h2;
    }
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, bytes, gran, 0, 0));
    CK(cuMemMap(va, bytes, 0, h, 0));
    CUmemAccessDesc acc[2];
    int nacc = 0;
    for (int i = 0; i < 2; i++) {
        if (!(access >> i & 1)) continue;
        acc[nacc].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc[nacc].location.id = i;
        acc[nacc].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        nacc++;
    }
    CK(cuMemSetAccess(va, bytes, acc, nacc));
    return va;
}

static double time_copy(const char *name, CUdeviceptr dst, CUdeviceptr src, size_t bytes, int peer_api)
{
    CK(cuCtxSetCurrent(ctx[0]));
    CUstream s;
    CUevent a, b;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuEventCreate(&a, 0));
    CK(cuEventCreate(&b, 0));
    for (int warm = 0; warm < 2; warm++) {
        CK(cuEventRecord(a, s));
        for (int i = 0; i < 10; i++) {
            if (peer_api) CK(cuMemcpyPeerAsync(dst, ctx[1], src, ctx[0], bytes, s));
            else CK(cuMemcpyAsync(dst, src, bytes, s));
        }
        CK(cuEventRecord(b, s));
        CK(cuEventSynchronize(b));
    }
    float ms;
    CK(cuEventElapsedTime(&ms, a, b));
    double gbs = 10.0 * (double)bytes / (ms * 1e-3) / 1e9;
    printf("%-58s %8.1f GB/s\n", name, gbs);
    cuStreamDestroy(s);
    return gbs;
}

static const char spin_src[] =
    "extern \"C\" __global__ void spin(const unsigned long long *flag, int nap)\n"
    "{\n"
    "    if (threadIdx.x == 0) {\n"
    "        unsigned long long v = 0;\n"
    "        while (!v) {\n"
    "            asm volatile(\"ld.acquire.sys.global.u64 %0, [%1];\" : \"=l\"(v) : \"l\"(flag) : \"memory\");\n"
    "            if (nap) __nanosleep(nap);\n"
    "        }\n"
    "    }\n"
    "    __syncthreads();\n"
    "}\n";

static CUfunction spin_kernel(void)
{
    nvrtcProgram p;
    if (nvrtcCreateProgram(&p, spin_src, "spin.cu", 0, NULL, NULL) != NVRTC_SUCCESS) exit(1);
    const char *opt[] = {"-arch=sm_90"};
    if (nvrtcCompileProgram(p, 1, opt) != NVRTC_SUCCESS) {
        fprintf(stderr, "nvrtc failed\n");
        exit(1);
    }
    size_t n;
    nvrtcGetCUBINSize(p, &n);
    char *bin = malloc(n);
    nvrtcGetCUBIN(p, bin);
    CUmodule m;
    CUfunction f;
    CK(cuModuleLoadData(&m, bin));
    CK(cuModuleGetFunction(&f, m, "spin"));
    return f;
}

/* time_copy while GPU `g` runs `spin` on flag (device address) until the copies finish. */
static void time_copy_spinning(const char *name, int g, CUfunction spin, CUdeviceptr flag_dev,
                               volatile unsigned long long *flag_host, CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                               int nap)
{
    CK(cuCtxSetCurrent(ctx[g]));
    CUstream ks;
    CK(cuStreamCreate(&ks, CU_STREAM_NON_BLOCKING));
    void *args[] = {&flag_dev, &nap};
    CK(cuLaunchKernel(spin, 1, 1, 1, 512, 1, 1, 0, ks, args, NULL));
    usleep(20000);
    time_copy(name, dst, src, bytes, 0);
    CK(cuCtxSetCurrent(ctx[g]));
    if (flag_host) *flag_host = 1;
    else CK(cuMemsetD8(flag_dev, 1, 8));
    CK(cuStreamSynchronize(ks));
    if (flag_host) *flag_host = 0;
    else CK(cuMemsetD8(flag_dev, 0, 8));
    cuStreamDestroy(ks);
}

int main(int argc, char **argv)
{
    size_t bytes = (size_t)(argc > 1 ? atoi(argv[1]) : 256) << 20;
    CK(cuInit(0));
    int n;
    CK(cuDeviceGetCount(&n));
    if (n < 2) {
        fprintf(stderr, "ce_probe: needs 2 GPUs, found %d\n", n);
        return 2;
    }
    for (int i = 0; i < 2; i++) {
        CK(cuDeviceGet(&dev[i], i));
        CK(cuDevicePrimaryCtxRetain(&ctx[i], dev[i]));
    }
    CK(cuCtxSetCurrent(ctx[0]));
    /* As libccl maps heaps under mpirun: each process grants only its own GPU. */
    CUdeviceptr src0 = vmm_alloc(0, bytes, 0, 1), dst0 = vmm_alloc(1, bytes, 1, 1);
    time_copy("cuMem -> peer cuMem (fd), access GPU 0 only", dst0, src0, bytes, 0);
    CUdeviceptr dst01 = vmm_alloc(1, bytes, 1, 3);
    time_copy("cuMem (GPU 0 only) -> peer cuMem (fd), access both", dst01, src0, bytes, 0);
    CUdeviceptr src = vmm_alloc(0, bytes, 0, 3);
    time_copy("cuMem (both) -> peer cuMem (fd), access GPU 0 only", dst0, src, bytes, 0);
    CUdeviceptr dst = vmm_alloc(1, bytes, 0, 3);
    CUdeviceptr dst_fd = vmm_alloc(1, bytes, 1, 3);
    time_copy("cuMem -> peer cuMem, cuMemcpyAsync", dst, src, bytes, 0);
    time_copy("cuMem -> peer cuMem (fd-imported), cuMemcpyAsync", dst_fd, src, bytes, 0);
    time_copy("cuMem -> peer cuMem, cuMemcpyPeerAsync", dst, src, bytes, 1);
    CUdeviceptr msrc, mdst;
    CK(cuCtxSetCurrent(ctx[1]));
    CK(cuMemAlloc(&mdst, bytes));
    CK(cuCtxSetCurrent(ctx[0]));
    CK(cuMemAlloc(&msrc, bytes));
    time_copy("cuMemAlloc -> peer cuMemAlloc, no peer access", mdst, msrc, bytes, 0);
    CK(cuCtxEnablePeerAccess(ctx[1], 0));
    time_copy("cuMemAlloc -> peer cuMemAlloc, peer access", mdst, msrc, bytes, 0);
    time_copy("cuMem -> peer cuMem, peer access, cuMemcpyAsync", dst, src, bytes, 0);
    time_copy("cuMem -> peer cuMem (fd-imported), peer access", dst_fd, src, bytes, 0);
    time_copy("cuMemAlloc -> peer cuMem, peer access", dst, msrc, bytes, 0);

    CUfunction spin = spin_kernel();
    unsigned long long *hflag;
    CUdeviceptr hflag_dev, dflag;
    CK(cuMemHostAlloc((void **)&hflag, 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    CK(cuMemHostGetDevicePointer(&hflag_dev, hflag, 0));
    *hflag = 0;
    CK(cuMemAlloc(&dflag, 64));
    CK(cuMemsetD8(dflag, 0, 64));
    CK(cuCtxSynchronize());
    time_copy_spinning("cuMem -> peer cuMem, GPU 0 spins on host memory", 0, spin, hflag_dev, hflag, dst_fd, src, bytes, 0);
    time_copy_spinning("cuMem -> peer cuMem, GPU 0 spins on device memory", 0, spin, dflag, NULL, dst_fd, src, bytes, 0);
    /* The receiver spinning on its own memory, as a peer's wait does. */
    CK(cuCtxSetCurrent(ctx[1]));
    CUfunction spin1 = spin_kernel();
    CUdeviceptr dflag1;
    CK(cuMemAlloc(&dflag1, 64));
    CK(cuMemsetD8(dflag1, 0, 64));
    CK(cuCtxSynchronize());
    time_copy_spinning("cuMem -> peer cuMem, GPU 1 spins on device memory", 1, spin1, dflag1, NULL, dst_fd, src, bytes, 0);
    /* Both directions at once, as the port ring on 2 GPUs does. */
    CUdeviceptr back_src = vmm_alloc(1, bytes, 0, 3), back_dst = vmm_alloc(0, bytes, 1, 3);
    CUstream s1;
    CK(cuCtxSetCurrent(ctx[1]));
    CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < 10; i++) CK(cuMemcpyAsync(back_dst, back_src, bytes, s1));
    time_copy("cuMem -> peer cuMem while GPU 1 copies to GPU 0", dst_fd, src, bytes, 0);
    CK(cuCtxSetCurrent(ctx[1]));
    CK(cuStreamSynchronize(s1));
    /* Inside one large allocation, at an offset, as in the symmetric heap. */
    size_t big = (size_t)6 << 30;
    CUdeviceptr bsrc = vmm_alloc(0, big, 0, 1), bdst = vmm_alloc(1, big, 1, 1);
    time_copy("cuMem -> peer cuMem, 6 GiB allocations, offset 1 GiB", bdst + ((size_t)1 << 30), bsrc + ((size_t)3 << 30),
              bytes, 0);
    return 0;
}
