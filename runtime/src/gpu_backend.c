/* gpu_backend.c: the GPU backend (internal.h's CclBackend) on the CUDA driver API.
 *
 * Takes loaded algorithms and calls from the common code; gives asynchronous launches
 * on the user's stream. Per algorithm and (dtype, op) it emits this rank's kernel
 * (compiler/emit_cuda.c), compiles it with NVRTC through the disk cache (jit.c) and
 * loads it, on first use. A call is then at most: a staging copy in, the fused kernel,
 * for avg an all-rank barrier + division + barrier (kernels of the same module), a
 * staging copy out. Nothing waits on the host, so calls are CUDA-graph capturable
 * (compile and allocate before capture: the first call of each dtype/op compiles).
 *
 * Invariants: semaphores (heap) and expected values (device memory, GpuAlg.expected)
 * start at zero and are only ever increased by kernels, so any number of launches and
 * graph replays pair the k-th wait with the k-th signal. A failed wait stops the rank
 * and, through the abort word at offset 0 of every heap, every peer; synchronize turns
 * the host-mapped error record into the comm's error.
 *
 * Environment (for tuning and benchmarks): CCL_GPU_THREADS (threads per block, 512),
 * CCL_GPU_INSTANCES (instances per logical block, the program's by default),
 * CCL_GPU_SLICES (slices when the program is pipeline-safe, the program's by default),
 * CCL_GPU_PROTOCOL=ll (run a Simple program with LL lines). A launch shape set by the
 * tuner (alg->shape, tuner.c) wins over these for its instances, protocol and threads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "gpu_abi.h"
#include "gpu_proxy.h"
#include "jit.h"

typedef struct {
    CUmodule mod;             /* 0 until compiled */
    CUfunction kernel, avg, barrier;
} GpuKernel;

/* alg->be_alg. */
typedef struct {
    GpuKernel k[CCL_NUM_DTYPES][CCL_NUM_OPS];
    CUdeviceptr expected;
    size_t nexpected;
    CclGpuErr *err;           /* host-mapped */
    CUdeviceptr err_dev;
    int threads;
    int grid;                 /* this rank's logical blocks * instances */
    Protocol protocol;        /* the program's, or LL where CCL_GPU_PROTOCOL=ll asks */
    /* LL programs run as Simple need their scratch twice (by call parity): our own
     * grow-only heap region, taken in the same call on every rank; old ones are freed
     * with the algorithm. */
    size_t ll_off, ll_bytes;
    uint64_t ll_salt, ll_gen;
    int nll_old;
    size_t ll_old[8];
    GpuPortQueues *port;      /* the proxy's request queues, when the plan has port puts */
} GpuAlg;

static GpuComm *gpu_comm(ccl_comm_t *comm) { return comm->be_comm; }

static ccl_result_t gpu_cu_fail(ccl_comm_t *comm, CUresult r, const char *what)
{
    return ccl__set_error(comm, CCL_ERR_CUDA, "rank %d: %s failed: %s", comm->rank, what, ccl__cuda_error(r));
}

#define CU_CHECK(call, what)                                                                            \
    do {                                                                                                \
        CUresult r_ = (call);                                                                           \
        if (r_ != CUDA_SUCCESS) return gpu_cu_fail(comm, r_, what);                                     \
    } while (0)

static int gpu_env_int(const char *name, int lo, int hi, int dflt)
{
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end;
    long v = strtol(s, &end, 10);
    return *end || v < lo || v > hi ? dflt : (int)v;
}

static ccl_result_t gpu_comm_init(ccl_comm_t *comm, const ccl_bootstrap_t *boot)
{
    char why[256];
    if (ccl__cuda_load(why, sizeof why) != 0)
        return ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "rank %d: %s", comm->rank, why);
    GpuComm *g = calloc(1, sizeof *g);
    if (!g) return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory", comm->rank);
    int count = 0;
    ccl__cu.DeviceGetCount(&count);
    if (comm->device >= count) {
        free(g);
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "rank %d: argument 'device' is %d but this machine has %d GPU%s",
                              comm->rank, comm->device, count, count == 1 ? "" : "s");
    }
    CUresult r;
    int major = 0, minor = 0;
    if ((r = ccl__cu.DeviceGet(&g->dev, comm->device)) != CUDA_SUCCESS ||
        (r = ccl__cu.DevicePrimaryCtxRetain(&g->ctx, g->dev)) != CUDA_SUCCESS) {
        free(g);
        return gpu_cu_fail(comm, r, "cuDevicePrimaryCtxRetain");
    }
    ccl__cu.CtxSetCurrent(g->ctx);
    ccl__cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g->dev);
    ccl__cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g->dev);
    g->arch = major * 10 + minor;
    comm->be_comm = g;
    ccl_result_t res = ccl__gpu_heap_create(comm, g, boot);
    if (res != CCL_OK) {
        ccl__cu.DevicePrimaryCtxRelease(g->dev);
        free(g);
        comm->be_comm = NULL;
        return res;
    }
    return CCL_OK;
}

static void gpu_free_retired(GpuComm *g)
{
    for (int i = 0; i < g->nretired; i++) ccl__cu.MemFree(g->retired[i]);
    g->nretired = 0;
}

static void gpu_comm_fini(ccl_comm_t *comm)
{
    GpuComm *g = gpu_comm(comm);
    if (!g) return;
    ccl__cu.CtxSetCurrent(g->ctx);
    ccl__cu.CtxSynchronize();
    ccl__gpu_proxy_stop(g);
    gpu_free_retired(g);
    for (int i = 0; i < 2; i++)
        if (g->stage[i]) ccl__cu.MemFree(g->stage[i]);
    ccl__gpu_heap_destroy(comm, g);
    ccl__cu.DevicePrimaryCtxRelease(g->dev);
    free(g);
    comm->be_comm = NULL;
}

static ccl_result_t gpu_heap_zero(ccl_comm_t *comm, size_t off, size_t bytes)
{
    GpuComm *g = gpu_comm(comm);
    ccl__cu.CtxSetCurrent(g->ctx);
    CU_CHECK(ccl__cu.MemsetD8(g->own_va + off, 0, bytes), "cuMemsetD8 (heap)");
    /* Asynchronous, on the legacy stream, which does not order a user's non-blocking
     * stream: wait, so the next kernel there never sees the old semaphores. */
    CU_CHECK(ccl__cu.CtxSynchronize(), "cuCtxSynchronize (heap zeroed)");
    return CCL_OK;
}

static ccl_result_t gpu_alg_prepare(ccl_algorithm_t *alg)
{
    ccl_comm_t *comm = alg->comm;
    GpuComm *g = gpu_comm(comm);
    ccl__cu.CtxSetCurrent(g->ctx);
    /* More instances than the program's default need more semaphores: take a larger
     * region from the same deterministic allocator (every rank does the same), of the
     * size ccl_algorithm_free zeroes when it gives the region back. */
    /* A tuner's shape (tuner.c: alg->shape, already applied to instances) wins. */
    int inst = alg->shape.instances ? alg->instances : gpu_env_int("CCL_GPU_INSTANCES", 1, 64, alg->instances);
    if (inst != alg->instances) {
        size_t off;
        int nsems = alg->plan->nsems * inst;
        if (ccl__heap_alloc(&comm->sems, ccl__sem_block_bytes(nsems), 0, &off) != 0)
            return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: no semaphore space for CCL_GPU_INSTANCES=%d",
                                  comm->rank, inst);
        ccl__heap_free(&comm->sems, alg->sem_off);
        alg->sem_off = off;
        alg->nsems = nsems;
        alg->instances = inst;
    }
    if (alg->plan->proof.pipeline_safe) alg->slices = gpu_env_int("CCL_GPU_SLICES", 1, 1024, alg->slices);

    GpuAlg *ga = calloc(1, sizeof *ga);
    if (!ga) return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory", comm->rank);
    int ntb = 0;
    for (int i = 0; i < alg->nblocks; i++)
        if (alg->blocks[i]->tb + 1 > ntb) ntb = alg->blocks[i]->tb + 1;
    ga->grid = ntb * alg->instances;
    ga->threads = gpu_env_int("CCL_GPU_THREADS", 32, 512, 512) / 32 * 32;
    /* A Simple program may run as LL (a tuning choice: LL only adds double-buffering and
     * flags); an LL program never runs as Simple, whose cross-call safety it lacks. */
    const char *pe = getenv("CCL_GPU_PROTOCOL");
    ga->protocol = pe && !strcmp(pe, "ll") ? PROTO_LL : alg->prog->protocol;
    if (alg->shape.protocol) ga->protocol = alg->shape.protocol == 1 + PROTO_LL ? PROTO_LL : alg->prog->protocol;
    /* Expected values of the slots, the block barrier's counter and generations, the
     * per-block call counters that pick an LL program's scratch half, and the per-block
     * counts of posted port puts (emit_cuda.c). */
    ga->nexpected = (size_t)alg->plan->nsems * (size_t)alg->instances + 1 + 4 * (size_t)ga->grid;
    CUresult r;
    if ((r = ccl__cu.MemAlloc(&ga->expected, ga->nexpected * 8)) != CUDA_SUCCESS ||
        (r = ccl__cu.MemsetD8(ga->expected, 0, ga->nexpected * 8)) != CUDA_SUCCESS ||
        /* The memset is asynchronous and fresh device memory holds garbage: the first
         * kernel, on whatever stream, must find the expected values zero. */
        (r = ccl__cu.CtxSynchronize()) != CUDA_SUCCESS ||
        (r = ccl__cu.MemHostAlloc((void **)&ga->err, sizeof *ga->err,
                                  CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)) != CUDA_SUCCESS ||
        (r = ccl__cu.MemHostGetDevicePointer(&ga->err_dev, ga->err, 0)) != CUDA_SUCCESS) {
        if (ga->expected) ccl__cu.MemFree(ga->expected);
        if (ga->err) ccl__cu.MemFreeHost(ga->err);
        free(ga);
        return gpu_cu_fail(comm, r, "allocating the algorithm's device state");
    }
    memset(ga->err, 0, sizeof *ga->err);
    alg->be_alg = ga;
    /* Any rank's: every rank opens queues (the kernels of ranks without port puts ignore
     * them), so all ranks start the same proxies. */
    if (plan_has_port_puts(alg->plan, -1)) return ccl__gpu_port_open(comm, g, ga->grid, &ga->port);
    return CCL_OK;
}

static void gpu_alg_release(ccl_algorithm_t *alg)
{
    GpuAlg *ga = alg->be_alg;
    if (!ga) return;
    ccl__cu.CtxSetCurrent(gpu_comm(alg->comm)->ctx);
    for (int t = 0; t < CCL_NUM_DTYPES; t++)
        for (int o = 0; o < CCL_NUM_OPS; o++)
            if (ga->k[t][o].mod) ccl__cu.ModuleUnload(ga->k[t][o].mod);
    ccl__gpu_port_close(gpu_comm(alg->comm), ga->port);
    ccl__cu.MemFree(ga->expected);
    ccl__cu.MemFreeHost(ga->err);
    if (ga->ll_bytes) ccl__heap_free(&alg->comm->data, ga->ll_off);
    for (int i = 0; i < ga->nll_old; i++) ccl__heap_free(&alg->comm->data, ga->ll_old[i]);
    free(ga);
    alg->be_alg = NULL;
}

static const char *gpu_default_cache(char *buf, size_t len)
{
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (x && *x) snprintf(buf, len, "%s/ccl", x);
    else if (h && *h) snprintf(buf, len, "%s/.cache/ccl", h);
    else return NULL;
    return buf;
}

/* The kernel for (dtype, op): emitted, compiled (or found in the disk cache), loaded. */
static ccl_result_t gpu_kernel(ccl_algorithm_t *alg, ccl_dtype_t dtype, ccl_op_t op, GpuKernel **out)
{
    ccl_comm_t *comm = alg->comm;
    GpuComm *g = gpu_comm(comm);
    GpuAlg *ga = alg->be_alg;
    if (op == CCL_AVG) op = CCL_SUM; /* avg runs the sum kernel, then ccl_avg */
    GpuKernel *k = &ga->k[dtype][op];
    *out = k;
    if (k->mod) return CCL_OK;
    EmitOptions eo = {.dtype = ccl_dtype_name(dtype), .op = ccl_op_name(op), .protocol = ga->protocol};
    char *src = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&src, &len);
    if (!m) return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory", comm->rank);
    emit_cuda(m, alg->plan, comm->rank, &eo);
    fclose(m);
    char name[256], cache[1024];
    snprintf(name, sizeof name, "%s.rank%d.%s.%s.cu", alg->prog->name, comm->rank, eo.dtype, eo.op);
    const char *dir = comm->cache_dir ? comm->cache_dir : gpu_default_cache(cache, sizeof cache);
    CclJitResult jr;
    char *err = malloc(CCL__ERR_LEN);
    if (!err) {
        free(src);
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory", comm->rank);
    }
    int rc = ccl__jit_compile(src, name, g->arch, dir, &jr, err, CCL__ERR_LEN);
    free(src);
    if (rc != 0) {
        ccl_result_t res = ccl__set_error(comm, CCL_ERR_NVRTC, "rank %d: %s", comm->rank, err);
        free(err);
        return res;
    }
    free(err);
    CUresult r = ccl__cu.ModuleLoadData(&k->mod, jr.image);
    free(jr.image);
    if (r != CUDA_SUCCESS) {
        k->mod = 0;
        return gpu_cu_fail(comm, r, "cuModuleLoadData (the generated kernel)");
    }
    if ((r = ccl__cu.ModuleGetFunction(&k->kernel, k->mod, "ccl_kernel")) != CUDA_SUCCESS ||
        (r = ccl__cu.ModuleGetFunction(&k->avg, k->mod, "ccl_avg")) != CUDA_SUCCESS ||
        (r = ccl__cu.ModuleGetFunction(&k->barrier, k->mod, "ccl_rank_barrier")) != CUDA_SUCCESS) {
        ccl__cu.ModuleUnload(k->mod);
        k->mod = 0;
        return gpu_cu_fail(comm, r, "cuModuleGetFunction");
    }
    /* Under lazy loading (CUDA_MODULE_LOADING=LAZY, the default) a function is loaded at
     * its first launch, which can wait for kernels already running in the context; a
     * spinning peer kernel there would deadlock. Asking for an attribute loads it now. */
    int attr;
    ccl__cu.FuncGetAttribute(&attr, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k->kernel);
    ccl__cu.FuncGetAttribute(&attr, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k->avg);
    ccl__cu.FuncGetAttribute(&attr, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k->barrier);
    return CCL_OK;
}

/* A device buffer for staging that peers never reach; grow-only, old ones freed at the
 * next synchronize (a launch may still use them). */
static ccl_result_t gpu_stage(ccl_comm_t *comm, int which, size_t bytes, void **out)
{
    GpuComm *g = gpu_comm(comm);
    if (g->stage_bytes[which] < bytes) {
        if (g->stage[which]) {
            if (g->nretired == (int)(sizeof g->retired / sizeof g->retired[0])) {
                ccl__cu.CtxSynchronize();
                gpu_free_retired(g);
            }
            g->retired[g->nretired++] = g->stage[which];
            g->stage[which] = 0;
            g->stage_bytes[which] = 0;
        }
        size_t want = bytes < ((size_t)1 << 20) ? (size_t)1 << 20 : bytes;
        CU_CHECK(ccl__cu.MemAlloc(&g->stage[which], want), "cuMemAlloc (staging)");
        g->stage_bytes[which] = want;
    }
    *out = (void *)(uintptr_t)g->stage[which];
    return CCL_OK;
}

static int gpu_in_heap(ccl_comm_t *comm, const void *p)
{
    const char *base = comm->heap_base[comm->rank];
    return (const char *)p >= base && (const char *)p < base + comm->heap_bytes;
}

static ccl_result_t gpu_rank_barrier(ccl_comm_t *comm, GpuKernel *k, GpuAlg *ga, CUstream s)
{
    GpuComm *g = gpu_comm(comm);
    uint64_t timeout_ns = (uint64_t)comm->timeout_ms * 1000000ull;
    void *params[] = {&g->peers, &g->bar_gen, &ga->err_dev, &timeout_ns};
    CU_CHECK(ccl__cu.LaunchKernel(k->barrier, 1, 1, 1, 32, 1, 1, 0, s, params, NULL), "cuLaunchKernel (barrier)");
    return CCL_OK;
}

static ccl_result_t gpu_run(const CclCall *call)
{
    ccl_algorithm_t *alg = call->alg;
    ccl_comm_t *comm = alg->comm;
    GpuComm *g = gpu_comm(comm);
    GpuAlg *ga = alg->be_alg;
    CUstream s = (CUstream)call->stream;
    ccl__cu.CtxSetCurrent(g->ctx);
    GpuKernel *k;
    ccl_result_t res = gpu_kernel(alg, call->dtype, call->op, &k);
    if (res != CCL_OK) return res;

    uint64_t scratch_off = call->scratch_off;
    if (ga->protocol != PROTO_SIMPLE) {
        size_t need = ccl__ll_region_bytes(alg->prog, call->CS, call->esize);
        if (need > ga->ll_bytes) {
            size_t off;
            if (ga->nll_old == (int)(sizeof ga->ll_old / sizeof ga->ll_old[0]) ||
                ccl__heap_alloc(&comm->data, need, 0, &off) != 0)
                return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY,
                                      "rank %d: %s (an LL program, run double-buffered) needs %zu bytes of scratch "
                                      "the heap does not have (raise ccl_config_t.heap_bytes / CCL_HEAP_BYTES)",
                                      comm->rank, alg->file, need);
            if (ga->ll_bytes) ga->ll_old[ga->nll_old++] = ga->ll_off;
            ga->ll_off = off;
            ga->ll_bytes = need;
            /* Lines left in this memory by earlier users must never match a flag: the
             * salt differs per region (same on every rank: same offsets, same order). */
            uint64_t h = 0x9e3779b97f4a7c15ull ^ ((uint64_t)off * 0xff51afd7ed558ccdull) ^ ((uint64_t)++ga->ll_gen << 40);
            h ^= h >> 33;
            h *= 0xc4ceb9fe1a85ec53ull;
            ga->ll_salt = h ^ (h >> 29);
        }
        scratch_off = ga->ll_off;
    }
    void *in = call->in, *out = call->out;
    /* The common code stages buffers peers never reach in host memory (the CPU
     * backend's view); on GPUs such staging is device memory of our own. */
    if (call->stage_in && !gpu_in_heap(comm, in) && (res = gpu_stage(comm, 0, call->in_bytes, &in)) != CCL_OK)
        return res;
    if (call->stage_out && !gpu_in_heap(comm, out) && (res = gpu_stage(comm, 1, call->out_bytes, &out)) != CCL_OK)
        return res;
    /* A changed scratch layout (or staging peers may still read): every rank finishes the
     * previous call before this one starts, staging copy included. */
    if (call->fence && (res = gpu_rank_barrier(comm, k, ga, s)) != CCL_OK) return res;
    if (call->stage_in)
        CU_CHECK(ccl__cu.MemcpyAsync((CUdeviceptr)(uintptr_t)in, (CUdeviceptr)(uintptr_t)call->send, call->in_bytes, s),
                 "cuMemcpyAsync (staging sendbuf)");
    CclGpuArgs a = {
        .in = (uint64_t)(uintptr_t)in,
        .out = (uint64_t)(uintptr_t)out,
        .peers = g->peers,
        .in_off = call->in_off,
        .out_off = call->out_off,
        .scratch_off = scratch_off,
        .sem_off = alg->sem_off,
        .expected = ga->expected,
        .err = ga->err_dev,
        .n = call->count,
        .in_ustride = call->count,
        .out_ustride = call->count,
        .cs = call->CS,
        .ninst = (uint64_t)alg->instances,
        .nslices = (uint64_t)(call->slices > 0 ? call->slices : 1),
        .timeout_ns = (uint64_t)comm->timeout_ms * 1000000ull,
        .ll_salt = ga->ll_salt,
        .in_stride = call->in_stride,
        .out_stride = call->out_stride,
        .port = ccl__gpu_port_address(ga->port),
    };
    void *params[] = {&a};
    /* Threads per block may change per call (the tuner's shape; the kernel reads
     * blockDim); the environment's or 512 otherwise. */
    int th = alg->shape.threads >= 32 && alg->shape.threads <= 512 ? alg->shape.threads / 32 * 32 : ga->threads;
    if (ga->grid > 0)
        CU_CHECK(ccl__cu.LaunchKernel(k->kernel, (unsigned)ga->grid, 1, 1, (unsigned)th, 1, 1, 0, s, params, NULL),
                 "cuLaunchKernel (ccl_kernel)");
    if (call->divide) {
        /* Peers may still read our out until every rank is past its plan. */
        if ((res = gpu_rank_barrier(comm, k, ga, s)) != CCL_OK) return res;
        if (call->divide_here) {
            uint64_t outp = (uint64_t)(uintptr_t)out, cnt = call->out_bytes / call->esize, nr = (uint64_t)call->divide;
            void *ap[] = {&outp, &cnt, &nr};
            unsigned blocks = (unsigned)((cnt + 511) / 512 < 1024 ? (cnt + 511) / 512 : 1024);
            CU_CHECK(ccl__cu.LaunchKernel(k->avg, blocks ? blocks : 1, 1, 1, 512, 1, 1, 0, s, ap, NULL),
                     "cuLaunchKernel (ccl_avg)");
        }
        if ((res = gpu_rank_barrier(comm, k, ga, s)) != CCL_OK) return res;
    }
    if (call->stage_out)
        CU_CHECK(ccl__cu.MemcpyAsync((CUdeviceptr)(uintptr_t)call->recv, (CUdeviceptr)(uintptr_t)out, call->out_bytes, s),
                 "cuMemcpyAsync (staging recvbuf)");
    return CCL_OK;
}

static ccl_result_t gpu_synchronize(ccl_comm_t *comm)
{
    GpuComm *g = gpu_comm(comm);
    ccl__cu.CtxSetCurrent(g->ctx);
    CUresult r = ccl__cu.CtxSynchronize();
    if (r != CUDA_SUCCESS) {
        ccl__set_async_error(comm, CCL_ERR_CUDA, "rank %d: a kernel failed: %s", comm->rank, ccl__cuda_error(r));
        return CCL_OK;
    }
    gpu_free_retired(g);
    for (int i = 0; i < comm->nalgs; i++) {
        ccl_algorithm_t *alg = comm->algs[i];
        GpuAlg *ga = alg->be_alg;
        if (!ga || ga->err->flag != 1) continue;
        const CclGpuErr *e = ga->err;
        char why[256];
        if (e->slot == CCL_SLOT_PORT) {
            int broken = ccl__gpu_proxy_error(g, why, sizeof why);
            ccl__set_async_error(comm, CCL_ERR_TIMEOUT,
                                 "rank %d: timeout after %d ms in %s:%llu: thread block %llu (instance %llu) waited for "
                                 "its port-channel puts (to rank %llu) to land; the host proxy finished %llu of %llu%s%s",
                                 comm->rank, comm->timeout_ms, alg->file, (unsigned long long)e->line,
                                 (unsigned long long)e->tb, (unsigned long long)e->inst, (unsigned long long)e->peer,
                                 (unsigned long long)e->seen, (unsigned long long)e->expected, broken ? ": " : "",
                                 broken ? why : "");
        } else if (e->slot == ~1ull)
            ccl__set_async_error(comm, CCL_ERR_TIMEOUT,
                                 "rank %d: timeout after %d ms in %s:%llu: thread block %llu (instance %llu) waited for "
                                 "LL data from rank %llu (flag %llx, saw %llx)", comm->rank, comm->timeout_ms, alg->file,
                                 (unsigned long long)e->line, (unsigned long long)e->tb, (unsigned long long)e->inst,
                                 (unsigned long long)e->peer, (unsigned long long)e->expected,
                                 (unsigned long long)e->seen);
        else if (e->slot == ~0ull)
            ccl__set_async_error(comm, CCL_ERR_TIMEOUT,
                                 "rank %d: timeout after %d ms at an all-rank barrier of %s (the fence before a call, "
                                 "or around avg's division; %llu of %llu arrivals)", comm->rank, comm->timeout_ms, alg->file,
                                 (unsigned long long)e->seen, (unsigned long long)e->expected);
        else if (e->slot == (uint64_t)alg->plan->nsems * (uint64_t)alg->instances)
            ccl__set_async_error(comm, CCL_ERR_TIMEOUT,
                                 "rank %d: timeout after %d ms in %s:%llu: thread block %llu (instance %llu) waited at "
                                 "a barrier of all blocks (%llu of %llu arrived)", comm->rank, comm->timeout_ms,
                                 alg->file, (unsigned long long)e->line, (unsigned long long)e->tb,
                                 (unsigned long long)e->inst, (unsigned long long)e->seen,
                                 (unsigned long long)e->expected);
        else
            ccl__set_async_error(comm, CCL_ERR_TIMEOUT,
                                 "rank %d: timeout after %d ms in %s:%llu: thread block %llu (instance %llu) waited for "
                                 "rank %llu (semaphore slot %llu: expected %llu, saw %llu)", comm->rank,
                                 comm->timeout_ms, alg->file, (unsigned long long)e->line, (unsigned long long)e->tb,
                                 (unsigned long long)e->inst, (unsigned long long)e->peer,
                                 (unsigned long long)e->slot, (unsigned long long)e->expected,
                                 (unsigned long long)e->seen);
        return CCL_OK;
    }
    uint64_t ab = 0;
    if (ccl__cu.MemcpyDtoH(&ab, g->own_va, sizeof ab) == CUDA_SUCCESS && ab)
        ccl__set_async_error(comm, CCL_ERR_PEER_FAILED, "rank %d: stopped because rank %d failed (see its error)",
                             comm->rank, (int)ab - 1);
    return CCL_OK;
}

/* Synchronous host <-> heap copy for tools (cclc run): after the comm's earlier work. */
static ccl_result_t gpu_copy(ccl_comm_t *comm, void *dst, const void *src, size_t bytes)
{
    GpuComm *g = gpu_comm(comm);
    ccl__cu.CtxSetCurrent(g->ctx);
    CU_CHECK(ccl__cu.CtxSynchronize(), "cuCtxSynchronize");
    CU_CHECK(ccl__cu.Memcpy((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes), "cuMemcpy");
    /* From pageable host memory cuMemcpy may return before the DMA lands. */
    CU_CHECK(ccl__cu.CtxSynchronize(), "cuCtxSynchronize");
    return CCL_OK;
}

static const CclBackend gpu_backend = {
    .name = "gpu",
    .comm_init = gpu_comm_init,
    .comm_fini = gpu_comm_fini,
    .heap_zero = gpu_heap_zero,
    .alg_prepare = gpu_alg_prepare,
    .alg_release = gpu_alg_release,
    .run = gpu_run,
    .synchronize = gpu_synchronize,
    .copy = gpu_copy,
};

const CclBackend *ccl__gpu_backend(char *why, size_t len)
{
    if (ccl__cuda_load(why, len) != 0) return NULL;
    if (ccl__jit_nvrtc_version(why, len) < 0) return NULL;
    return &gpu_backend;
}
