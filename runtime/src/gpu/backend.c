/* gpu/backend.c: the GPU backend (backend.h's CclBackend) on the CUDA driver API.
 *
 * Takes loaded algorithms and calls from the common code; gives asynchronous launches
 * on the user's stream. Per algorithm and (dtype, op) it emits this rank's kernel
 * (compiler/emit_cuda.c), compiles it with NVRTC through the disk cache (gpu/jit.c) and
 * loads it, on first use. A call is then at most: a staging copy in, the fused kernel,
 * for avg an all-rank barrier + division + barrier (kernels of the same module), a
 * staging copy out (a piece's of a call too large for the heap's regions on a stream of
 * its own, beside the next piece: gpu/stage.c). Nothing waits on the host, so calls are CUDA-graph capturable
 * (compile and allocate before capture: the first call of each dtype/op compiles).
 *
 * allgatherv and alltoallv: the kernel gets this rank's segment table by value (staging
 * that peers reach placed in the v arena first, ccl__v_place), publishes it, checks
 * every rank's and sizes every chunk from them (emit_cuda.c); a v call that stages its
 * sendbuf where peers read it starts with an all-rank barrier (the layout follows
 * counts no host knows all of), and only the segments of a staged recvbuf are copied
 * out.
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
 * CCL_GPU_PROTOCOL=ll or ll128 (run with those lines; see gpu_pick_protocol). A launch shape set by the
 * tuner (alg->shape, tuner.c) wins over these for its instances, protocol and threads.
 * CCL_GPU_PDL=0 launches ccl_kernel without programmatic dependent launch (gpu_open_device). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
#include "cuda/abi.h"
#include "gpu/proxy.h"
#include "gpu/jit.h"
#include "gpu/layout.h"

typedef struct {
    GpuModule *module;        /* NULL until loaded; the GPU's kernel cache owns it */
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
    /* The largest grid of a rank whose blocks meet at a barrier of all of them
     * (cclc_plan_barrier_blocks * instances), 0 where no rank has one: the same on every
     * rank, so every rank judges its residency alike (gpu_fit_threads). */
    int barrier_grid;
    Protocol protocol;        /* what it runs with: gpu_pick_protocol */
    int copy;                 /* the plan is one copy of in into out (cclc_plan_is_copy): gpu_run_copy */
    GpuPortQueues *port;      /* the proxy's request queues, when the plan has port puts */
} GpuAlg;

static int gpu_env_int(const char *name, int lo, int hi, int dflt)
{
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end;
    long v = strtol(s, &end, 10);
    return *end || v < lo || v > hi ? dflt : (int)v;
}

/* The device's context current, its properties read, this comm's streams made. */
static ccl_result_t gpu_open_device(ccl_comm_t *comm, GpuComm *g)
{
    g->ctx = ccl__gpu_device_context(g->device);
    ccl__cu.CtxSetCurrent(g->ctx);
    int major = 0, minor = 0;
    CU_CHECK(ccl__cu.DeviceGet(&g->dev, comm->device), "cuDeviceGet");
    ccl__cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g->dev);
    ccl__cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g->dev);
    ccl__cu.DeviceGetAttribute(&g->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g->dev);
    g->arch = major * 10 + minor;
    /* Programmatic dependent launch: a ccl_kernel may be scheduled while the stream's
     * previous kernel still runs, its blocks resident and waiting at their first
     * instruction (griddepcontrol.wait in ccl_announce) for that kernel's end and its
     * memory. Back-to-back calls then pay no launch gap. Not where ranks share the GPU:
     * a waiting grid holds resources a co-located peer's kernel may need to be resident
     * beside this rank's, which both wait for. */
    g->pdl = g->arch >= 90 && ccl__cu.LaunchKernelEx && g->ncolocated == 1 && gpu_env_int("CCL_GPU_PDL", 0, 1, 1);
    g->quiet = ccl__gpu_device_quiet_stream(g->device);
    CUmemPoolProps pool = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                           .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = comm->device}};
    CU_CHECK(ccl__cu.MemPoolCreate(&g->stage_pool, &pool), "cuMemPoolCreate (staging)");
    /* Keep freed staging in the pool: growth after a synchronize reuses it. */
    cuuint64_t keep = UINT64_MAX;
    ccl__cu.MemPoolSetAttribute(g->stage_pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
    CU_CHECK(ccl__cu.StreamCreate(&g->side, CU_STREAM_NON_BLOCKING), "cuStreamCreate (copies out)");
    CU_CHECK(ccl__cu.EventCreate(&g->piece_done, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    for (int i = 0; i < 2; i++) CU_CHECK(ccl__cu.EventCreate(&g->copied[i], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    return CCL_OK;
}

/* Undoes gpu_open_device and ccl__gpu_agree_device (after the heap is gone). */
static void gpu_close_device(GpuComm *g)
{
    for (int i = 0; i < g->marks_cap; i++)
        if (g->marks[i].done) ccl__cu.EventDestroy(g->marks[i].done);
    free(g->marks);
    /* Outstanding frees finish first: the driver releases the pool after them. */
    if (g->stage_pool) ccl__cu.MemPoolDestroy(g->stage_pool);
    if (g->order) ccl__cu.EventDestroy(g->order);
    if (g->own_stream) ccl__cu.StreamDestroy(g->own_stream);
    for (int i = 0; i < 2; i++)
        if (g->copied[i]) ccl__cu.EventDestroy(g->copied[i]);
    if (g->piece_done) ccl__cu.EventDestroy(g->piece_done);
    if (g->side) ccl__cu.StreamDestroy(g->side);
    ccl__gpu_device_release(g->device);
    ccl__gpu_launch_counts_release(g);
    free(g->colocated);
    free(g);
}

static ccl_result_t gpu_comm_init(ccl_comm_t *comm, const ccl_bootstrap_t *boot)
{
    char why[256];
    if (ccl__cuda_load(why, sizeof why) != 0)
        return ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "rank %d: %s", comm->rank, why);
    GpuComm *g = calloc(1, sizeof *g);
    if (!g) return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory", comm->rank);
    comm->be_comm = g;
    ccl_result_t res = ccl__gpu_agree_device(comm, g, boot);
    if (res == CCL_OK) res = gpu_open_device(comm, g);
    if (res == CCL_OK) res = ccl__gpu_heap_create(comm, g, boot); /* releases its own part on failure */
    if (res == CCL_OK) ccl__gpu_p2p_open(comm, g);
    if (res != CCL_OK) {
        gpu_close_device(g);
        comm->be_comm = NULL;
    }
    return res;
}

static void gpu_comm_fini(ccl_comm_t *comm)
{
    GpuComm *g = gpu_comm(comm);
    if (!g) return;
    ccl__cu.CtxSetCurrent(g->ctx);
    ccl__gpu_wait_own_work(comm);
    ccl__gpu_proxy_stop(g);
    ccl__gpu_free_retired(g);
    for (int i = 0; i < 2; i++)
        if (g->stage[i]) ccl__cu.MemFreeAsync(g->stage[i], g->quiet);
    ccl__gpu_heap_destroy(comm, g);
    ccl__gpu_p2p_close(g);
    gpu_close_device(g);
    comm->be_comm = NULL;
}

static ccl_result_t gpu_heap_zero(ccl_comm_t *comm, size_t off, size_t bytes)
{
    GpuComm *g = gpu_comm(comm);
    ccl__cu.CtxSetCurrent(g->ctx);
    /* On a stream of its own, waited for: the next kernel on any stream must find the
     * semaphores zero, and nothing here may wait for a peer's running kernel. */
    CU_CHECK(ccl__cu.MemsetD8Async(g->own_va + off, 0, bytes, g->quiet), "cuMemsetD8Async (heap)");
    CU_CHECK(ccl__cu.StreamSynchronize(g->quiet), "cuStreamSynchronize (heap zeroed)");
    return CCL_OK;
}

/* The protocol alg runs with: as the tuner's shape asks, else as CCL_GPU_PROTOCOL asks,
 * by ccl__shape_protocol's rule (asking for simple leaves a program on its own). */
static ccl_result_t gpu_pick_protocol(ccl_algorithm_t *alg, Protocol *proto)
{
    int field = alg->shape.protocol;
    const char *env = getenv("CCL_GPU_PROTOCOL");
    if (!field && env && *env) {
        field = 1 + cclc_proto_parse(env);
        if (!field)
            return ccl__set_error(alg->comm, CCL_ERR_INVALID_ARGUMENT,
                                  "CCL_GPU_PROTOCOL=%s: expected simple, ll or ll128 (or unset: the program's)", env);
    }
    *proto = ccl__shape_protocol(field, alg->prog->protocol);
    return CCL_OK;
}

static ccl_result_t gpu_alg_prepare(ccl_algorithm_t *alg)
{
    ccl_comm_t *comm = alg->comm;
    /* Refused at load, before any state exists (a v-collective for more ranks than its
     * kernel's shared memory holds tables of). */
    const char *refusal = cclc_emit_cuda_refusal(alg->plan);
    if (refusal)
        return ccl__set_error(comm, CCL_ERR_UNSUPPORTED,
                              "ccl_algorithm_load: %s for N = %d: %s (ccl_config_t.backend = CCL_BACKEND_CPU, or "
                              "CCL_BACKEND=cpu)", alg->file, comm->nranks, refusal);
    Protocol proto = PROTO_SIMPLE;
    ccl_result_t res = gpu_pick_protocol(alg, &proto);
    if (res != CCL_OK) return res;
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
    ga->barrier_grid = cclc_plan_barrier_blocks(alg->plan) * alg->instances;
    ga->threads = gpu_env_int("CCL_GPU_THREADS", 32, 512, 512) / 32 * 32;
    ga->protocol = proto;
    ga->copy = cclc_plan_is_copy(alg->plan);
    alg->lines_only = cclc_emit_cuda_lines_only(alg->plan, proto);
    /* A kernel with lines sends at once, before its peers have entered the call, into
     * lines laid out by its program and its region's size: that region must be its own. */
    alg->own_scratch = proto != PROTO_SIMPLE;
    /* Expected values of the slots, the block barrier's counter and generations, and the
     * per-block counts of posted port puts (emit_cuda.c). */
    ga->nexpected = (size_t)alg->plan->nsems * (size_t)alg->instances + 1 + 2 * (size_t)ga->grid;
    CUresult r;
    if ((r = ccl__cu.MemAlloc(&ga->expected, ga->nexpected * 8)) != CUDA_SUCCESS ||
        (r = ccl__cu.MemsetD8Async(ga->expected, 0, ga->nexpected * 8, g->quiet)) != CUDA_SUCCESS ||
        /* Fresh device memory holds garbage: the first kernel, on whatever stream, must
         * find the expected values zero. */
        (r = ccl__cu.StreamSynchronize(g->quiet)) != CUDA_SUCCESS ||
        (r = ccl__cu.MemHostAlloc((void **)&ga->err, sizeof *ga->err,
                                  CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)) != CUDA_SUCCESS ||
        (r = ccl__cu.MemHostGetDevicePointer(&ga->err_dev, ga->err, 0)) != CUDA_SUCCESS) {
        ccl__gpu_free_device_mem(g->device, ga->expected);
        ccl__gpu_free_host_mem(g->device, ga->err);
        free(ga);
        return ccl__gpu_cu_fail(comm, r, "allocating the algorithm's device state");
    }
    memset(ga->err, 0, sizeof *ga->err);
    alg->be_alg = ga;
    /* Any rank's: every rank opens queues (the kernels of ranks without port puts ignore
     * them), so all ranks start the same proxies. */
    if (cclc_plan_has_port_puts(alg->plan, -1)) return ccl__gpu_port_open(comm, g, ga->grid, &ga->port);
    return CCL_OK;
}

static void gpu_alg_release(ccl_algorithm_t *alg)
{
    GpuAlg *ga = alg->be_alg;
    if (!ga) return;
    GpuComm *g = gpu_comm(alg->comm);
    ccl__cu.CtxSetCurrent(g->ctx);
    /* Its kernels stay in the GPU's cache (another algorithm may have the same code). */
    ccl__gpu_port_close(g, ga->port);
    ccl__gpu_free_device_mem(g->device, ga->expected);
    ccl__gpu_free_host_mem(g->device, ga->err);
    free(ga);
    alg->be_alg = NULL;
}

/* The scratch region of a run with lines holds the lines after the scratch buffers
 * (gpu/layout.h; a v call's kernel lays out both in the v arena instead). */
static size_t gpu_scratch_bytes(const ccl_algorithm_t *alg, size_t CS, size_t esize)
{
    const GpuAlg *ga = alg->be_alg;
    if (ga->protocol == PROTO_SIMPLE)
        return ccl__scratch_offset(alg->prog, alg->prog->nbufs, CS, esize);
    return ccl__ll_region_bytes(alg->prog, ga->protocol, CS, esize);
}

/* One kernel to load: rank `rank`'s code for one (dtype, op), its module claimed by
 * this thread (state LOADING until published). */
typedef struct {
    ccl_algorithm_t *alg;
    int rank;
    const EmitOptions *eo;
    GpuModule *m;
    int mine;                 /* this thread claimed m, so it compiles, loads, publishes */
    pthread_t thread;         /* compiling it, when `threaded` */
    int threaded;
    CclJitResult jr;
    int compiled;             /* jr holds the cubin; else err says why not */
    char err[CCL__ERR_LEN];
} KernelLoad;

/* NVRTC (or the disk cache) for one KernelLoad; a thread's body, so that the kernels of
 * the ranks sharing a GPU compile at once. */
static void *gpu_compile(void *arg)
{
    KernelLoad *kl = arg;
    ccl_comm_t *comm = kl->alg->comm;
    char name[256], cache[1024];
    snprintf(name, sizeof name, "%s.rank%d.%s.%s.cu", kl->alg->prog->name, kl->rank, kl->eo->dtype, kl->eo->op);
    const char *dir = ccl__cache_dir(comm->cache_dir, cache, sizeof cache);
    double t0 = ccl__now_ms();
    kl->compiled = ccl__jit_compile(kl->m->source, name, gpu_comm(comm)->arch, dir, &kl->jr, kl->err,
                                    sizeof kl->err) == 0;
    CCL__TRACE(comm->rank, "compiled rank %d's kernel %s in %.1f ms%s", kl->rank, name, ccl__now_ms() - t0,
               kl->compiled ? "" : " (failed)");
    return NULL;
}

/* Loads a compiled KernelLoad's module and publishes it to the GPU's cache, loaded or
 * failed. */
static void gpu_load_module(GpuComm *g, KernelLoad *kl)
{
    GpuModule *m = kl->m;
    if (!kl->compiled) {
        ccl__gpu_module_publish(g->device, m, 0, kl->err);
        return;
    }
    CUmodule mod = 0;
    double t0 = ccl__now_ms();
    CUresult r = ccl__cu.ModuleLoadData(&mod, kl->jr.image);
    free(kl->jr.image);
    if (r == CUDA_SUCCESS && ((r = ccl__cu.ModuleGetFunction(&m->kernel, mod, "ccl_kernel")) != CUDA_SUCCESS ||
                              (r = ccl__cu.ModuleGetFunction(&m->avg, mod, "ccl_avg")) != CUDA_SUCCESS ||
                              (r = ccl__cu.ModuleGetFunction(&m->copy, mod, "ccl_copy")) != CUDA_SUCCESS ||
                              (r = ccl__cu.ModuleGetFunction(&m->barrier, mod, "ccl_rank_barrier")) != CUDA_SUCCESS)) {
        ccl__cu.ModuleUnload(mod);
        mod = 0;
    }
    if (!mod) {
        snprintf(kl->err, sizeof kl->err, "loading the generated kernel failed: %s", ccl__cuda_error(r));
        ccl__gpu_module_publish(g->device, m, 0, kl->err);
        return;
    }
    /* Under lazy loading (CUDA_MODULE_LOADING=LAZY, the default) a function is loaded at
     * its first launch, which can wait for kernels already running in the context; a
     * spinning peer kernel there would deadlock. Asking for an attribute loads it now. */
    int attr;
    ccl__cu.FuncGetAttribute(&attr, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, m->kernel);
    ccl__cu.FuncGetAttribute(&attr, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, m->avg);
    ccl__cu.FuncGetAttribute(&attr, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, m->copy);
    ccl__cu.FuncGetAttribute(&attr, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, m->barrier);
    for (int i = 1; i <= 16; i++)
        if (ccl__cu.OccupancyMaxActiveBlocksPerMultiprocessor(&m->blocks_per_sm[i], m->kernel, 32 * i, 0) != CUDA_SUCCESS)
            m->blocks_per_sm[i] = 0;
    CCL__TRACE(kl->alg->comm->rank, "loaded rank %d's kernel in %.1f ms", kl->rank, ccl__now_ms() - t0);
    ccl__gpu_module_publish(g->device, m, mod, NULL);
}

/* Claims the cache entry of rank `rank`'s kernel for eo: kl->m, and whether this thread
 * must load it (returned). -1 when out of memory. */
static int gpu_claim_kernel(ccl_algorithm_t *alg, int rank, const EmitOptions *eo, KernelLoad *kl)
{
    char *src = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&src, &len);
    if (!f) return -1;
    int emitted = cclc_compile_emit_cuda(f, alg->plan, rank, eo);
    fclose(f);
    if (emitted != 0) {
        free(src);
        return -1;
    }
    int load = 0;
    *kl = (KernelLoad){.alg = alg, .rank = rank, .eo = eo};
    kl->m = ccl__gpu_module_claim(gpu_comm(alg->comm)->device, src, len, &load);
    free(src);
    return kl->m ? load : -1;
}

/* The kernel for (dtype, op), loaded. On a GPU that several ranks of this comm share,
 * the first of them to get here loads every one's kernel (compiled at once, one thread
 * each): a module load waits for the kernels running on the GPU, and once a rank has
 * launched, its kernel waits for the others' (gpu/device.c). */
static ccl_result_t gpu_kernel(ccl_algorithm_t *alg, ccl_dtype_t dtype, ccl_op_t op, GpuKernel **out)
{
    ccl_comm_t *comm = alg->comm;
    GpuComm *g = gpu_comm(comm);
    GpuAlg *ga = alg->be_alg;
    if (op == CCL_AVG) op = CCL_SUM; /* avg runs the sum kernel, then ccl_avg */
    GpuKernel *k = &ga->k[dtype][op];
    *out = k;
    if (k->module) return CCL_OK;
    EmitOptions eo = {.dtype = ccl_dtype_name(dtype), .op = ccl_op_name(op), .protocol = ga->protocol};
    int n = g->ncolocated, oom = 0;
    KernelLoad *kl = calloc((size_t)n, sizeof *kl);
    if (!kl) return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory", comm->rank);
    for (int i = 0; i < n; i++) {
        int load = gpu_claim_kernel(alg, g->colocated[i], &eo, &kl[i]);
        oom |= load < 0;
        kl[i].mine = load == 1;
    }
    /* Claimed entries must be published whatever happens, or peers would wait forever. */
    for (int i = 0; i < n; i++)
        if (kl[i].mine) kl[i].threaded = n > 1 && pthread_create(&kl[i].thread, NULL, gpu_compile, &kl[i]) == 0;
    for (int i = 0; i < n; i++)
        if (kl[i].mine) {
            if (kl[i].threaded) pthread_join(kl[i].thread, NULL);
            else gpu_compile(&kl[i]);
            gpu_load_module(g, &kl[i]);
        }
    ccl_result_t res = oom ? ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory", comm->rank) : CCL_OK;
    for (int i = 0; i < n && res == CCL_OK; i++) {
        GpuModule *m = kl[i].m;
        ccl__gpu_module_wait(g->device, m);
        if (m->state != GPU_MODULE_READY)
            res = kl[i].rank == comm->rank
                      ? ccl__set_error(comm, CCL_ERR_NVRTC, "rank %d: %s", comm->rank, m->error)
                      : ccl__set_error(comm, CCL_ERR_NVRTC, "rank %d: the kernel of rank %d, which shares GPU %d, "
                                                            "failed: %s", comm->rank, kl[i].rank, comm->device, m->error);
        else if (kl[i].rank == comm->rank)
            k->module = m;
    }
    free(kl);
    return res;
}

static ccl_result_t gpu_wait_colocated_launches(ccl_comm_t *comm, const char *what, int capturing)
{
    GpuComm *g = gpu_comm(comm);
    if (!g->launches || capturing) return CCL_OK;
    _Atomic uint64_t *launched = g->launches->slot;
    uint64_t mine = atomic_fetch_add_explicit(&launched[comm->rank], 1, memory_order_release) + 1;
    double t0 = 0;
    for (int i = 0; i < g->ncolocated; i++) {
        int p = g->colocated[i];
        if (ccl__gpu_wait_launched(comm, p, &launched[p], mine, &t0) != 0)
            return ccl__set_error(comm, CCL_ERR_TIMEOUT,
                                  "rank %d: timeout after %d ms waiting for rank %d, which shares GPU %d, to launch "
                                  "%s: ranks that share a GPU must make the same calls", comm->rank, comm->timeout_ms,
                                  p, comm->device, what);
    }
    return CCL_OK;
}

static ccl_result_t gpu_rank_barrier(ccl_comm_t *comm, GpuKernel *k, GpuAlg *ga, CUstream s)
{
    GpuComm *g = gpu_comm(comm);
    uint64_t timeout_ns = (uint64_t)comm->timeout_ms * 1000000ull;
    void *params[] = {&g->peers, &g->bar_gen, &ga->err_dev, &timeout_ns};
    CU_CHECK(ccl__cu.LaunchKernel(k->module->barrier, 1, 1, 1, 32, 1, 1, 0, s, params, NULL),
             "cuLaunchKernel (barrier)");
    CCL__TRACE(comm->rank, "launched the all-rank barrier on stream %p", (void *)s);
    return CCL_OK;
}

/* One rank per GPU: a grid whose blocks meet at a barrier of all of them (any rank's:
 * ga->barrier_grid) must be resident at once, or the blocks that never get a
 * multiprocessor leave the others waiting at the barrier until the timeout. Other
 * grids need not be: their blocks wait for peers' blocks of the same number, which
 * the GPUs place in the same order. It is refused where it exceeds what the GPU is
 * sure to hold: ccl_kernel's __launch_bounds__(512, 1) keeps its registers within one
 * block of 512 threads per SM, so 512 / threads blocks fit each SM. Not the occupancy
 * query's figure, which follows each rank's own kernel (their register counts differ):
 * every rank must decide alike (on alike GPUs), or the ranks that launch wait for the
 * ones that refused. */
static ccl_result_t gpu_check_barrier_grid(ccl_algorithm_t *alg, int threads)
{
    ccl_comm_t *comm = alg->comm;
    GpuComm *g = gpu_comm(comm);
    GpuAlg *ga = alg->be_alg;
    long per_sm = 512 / threads, fit = per_sm * g->sms;
    if (ga->barrier_grid <= fit) return CCL_OK;
    return ccl__set_error(comm, CCL_ERR_UNSUPPORTED,
                          "rank %d: %s runs %d thread blocks per rank (%d instances) of %d threads that meet at a "
                          "barrier of all of them, so all must run at once, but GPU %d (%d SMs) is sure to hold only "
                          "%ld (%ld per SM at %d threads). Use fewer instances (CCL_GPU_INSTANCES, or the tuning "
                          "table's row), fewer threads per block (CCL_GPU_THREADS), or another algorithm; nothing "
                          "was launched", comm->rank, alg->file, ga->barrier_grid, alg->instances, threads,
                          comm->device, g->sms, fit, per_sm, threads);
}

/* Threads per block for k: `want`, or where ranks of this comm share the GPU the most
 * threads (a multiple of 32, at most want) at which every rank's grid can be resident
 * at once, each rank taking an equal share of the GPU (its waits need the peers'
 * blocks running). With one rank per GPU, want, or a refusal where the program has a
 * barrier of all of a rank's blocks and the grid might not be resident at once
 * (gpu_check_barrier_grid). */
static ccl_result_t gpu_fit_threads(ccl_algorithm_t *alg, GpuKernel *k, int want, int *out)
{
    ccl_comm_t *comm = alg->comm;
    GpuComm *g = gpu_comm(comm);
    GpuAlg *ga = alg->be_alg;
    *out = want;
    if (g->ncolocated == 1) return gpu_check_barrier_grid(alg, want);
    if (ga->grid == 0) return CCL_OK;
    /* One block more per rank: the all-rank barrier's, which may wait beside a grid. */
    long need = (long)(ga->grid + 1) * g->ncolocated;
    for (int t = want; t >= 32; t -= 32)
        if ((long)k->module->blocks_per_sm[t / 32] * g->sms >= need) {
            *out = t;
            return CCL_OK;
        }
    char ranks[256];
    return ccl__set_error(comm, CCL_ERR_UNSUPPORTED,
                          "rank %d: %s runs %d thread blocks per rank (%d instances), and ranks %s share GPU %d "
                          "(%d SMs): their blocks cannot all run at once, which the waits between them need. Use "
                          "fewer instances (CCL_GPU_INSTANCES), more GPUs, or the CPU backend (--backend cpu)",
                          comm->rank, alg->file, ga->grid, alg->instances, ccl__gpu_colocated_list(g, ranks, sizeof ranks),
                          comm->device, g->sms);
}

/* CclBackend.capturing: whether the user's stream is being captured. */
static int gpu_capturing(ccl_comm_t *comm, void *stream)
{
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    ccl__gpu_make_current(comm);
    return stream && ccl__cu.StreamIsCapturing((CUstream)stream, &cs) == CUDA_SUCCESS &&
           cs != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* Under CUDA stream capture a call may only enqueue: compiling its kernel (NVRTC, a
 * module load), allocating or growing a staging buffer (a pool allocation, and waiting for
 * earlier work to free the old one) would fail inside the capture and invalidate it.
 * So the first call of each (algorithm, dtype, op), and any call needing more staging
 * than the calls before it, is refused before anything is done, saying to warm up. */
static ccl_result_t gpu_check_capture(const CclCall *call)
{
    ccl_algorithm_t *alg = call->alg;
    ccl_comm_t *comm = alg->comm;
    GpuComm *g = gpu_comm(comm);
    GpuAlg *ga = alg->be_alg;
    /* What a capture would refuse first, then whether there is a capture: the common
     * call needs no driver query. */
    const char *what = NULL;
    char buf[160];
    ccl_op_t op = call->op == CCL_AVG ? CCL_SUM : call->op;
    if (!ga->k[call->dtype][op].module) {
        snprintf(buf, sizeof buf, "its kernel for %s %s is not compiled yet (NVRTC and a module load)",
                 ccl_dtype_name(call->dtype), ccl_op_name(call->op));
        what = buf;
    } else if ((!call->in && !call->v.in_heap && g->stage_bytes[0] < call->in_bytes) ||
               (!call->out && !call->v.out_heap && g->stage_bytes[1] < call->out_bytes)) {
        /* (A v call's staging that peers reach is in the v arena: nothing to allocate.) */
        snprintf(buf, sizeof buf, "it needs a larger staging buffer (%zu bytes of sendbuf, %zu of recvbuf)",
                 call->in_bytes, call->out_bytes);
        what = buf;
    }
    if (!what || !gpu_capturing(comm, call->stream))
        return CCL_OK;
    return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                          "rank %d: %s is called inside a CUDA stream capture, but %s, which a capture does not allow. "
                          "Warm up before capture: run each algorithm once outside the capture with every dtype and op "
                          "and the largest count the graph will use (nothing was enqueued; the capture is intact)",
                          comm->rank, alg->file, what);
}

/* The user's buffers are device memory, and the stream the call goes on (*s). */
static ccl_result_t gpu_call_buffers_and_stream(const CclCall *call, CUstream *s, int *capturing)
{
    ccl_comm_t *comm = call->alg->comm;
    ccl_result_t res;
    if ((res = ccl__gpu_check_buffer(comm, call->send, call->in_bytes, "sendbuf")) != CCL_OK ||
        (res = ccl__gpu_check_buffer(comm, call->recv, call->out_bytes, "recvbuf")) != CCL_OK)
        return res;
    return ccl__gpu_call_stream(comm, call->stream, s, capturing);
}

/* A plan that is one copy of the whole of in into out (every collective on one rank):
 * the driver's copy on the stream, and in place nothing at all. No kernel to compile and
 * no identity to check: there is no peer. */
static ccl_result_t gpu_run_copy(const CclCall *call)
{
    ccl_comm_t *comm = call->alg->comm;
    CUstream s;
    int capturing;
    ccl__gpu_note_caller(comm);
    ccl_result_t res = gpu_call_buffers_and_stream(call, &s, &capturing);
    if (res != CCL_OK) return res;
    if (call->in != call->out)
        CU_CHECK(ccl__cu.MemcpyAsync((CUdeviceptr)(uintptr_t)call->out, (CUdeviceptr)(uintptr_t)call->in,
                                     call->out_bytes, s),
                 "cuMemcpyAsync (one rank's collective)");
    return ccl__gpu_mark_stream(comm, s, capturing);
}

static ccl_result_t gpu_run(const CclCall *call)
{
    ccl_algorithm_t *alg = call->alg;
    ccl_comm_t *comm = alg->comm;
    GpuComm *g = gpu_comm(comm);
    GpuAlg *ga = alg->be_alg;
    ccl__cu.CtxSetCurrent(g->ctx);
    /* Staged or divided calls take the general path (one rank stages nothing and divides
     * by nothing: algorithm.c). */
    if (ga->copy && !call->stage_in && !call->stage_out && !call->divide && !call->is_v) return gpu_run_copy(call);
    GpuKernel *k;
    CUstream s;
    int capturing;
    ccl_result_t res = gpu_check_capture(call);
    if (res != CCL_OK) return res;
    ccl__gpu_note_caller(comm);
    res = gpu_kernel(alg, call->dtype, call->op, &k);
    if (res != CCL_OK) return res;
    /* Threads per block may change per call (the tuner's shape; the kernel reads
     * blockDim); the environment's or 512 otherwise. Fitted (or the call refused) before
     * anything is enqueued. */
    int th = alg->shape.threads >= 32 && alg->shape.threads <= 512 ? alg->shape.threads / 32 * 32 : ga->threads;
    if ((res = gpu_fit_threads(alg, k, th, &th)) != CCL_OK ||
        (res = gpu_call_buffers_and_stream(call, &s, &capturing)) != CCL_OK)
        return res;

    void *in = call->in, *out = call->out;
    /* A v call's table, which the kernel publishes for its peers (its second parameter,
     * by value: a graph replays it as captured), with the staging peers reach placed. */
    uint64_t vtable[CCL_VT_WORDS(CCLC_EMIT_V_MAX_RANKS)] = {0};
    if (call->is_v) {
        memcpy(vtable, call->v.table, CCL__VT_WORDS(comm->nranks) * sizeof *vtable);
        ccl__v_place(comm, call, vtable, &in, &out);
    }
    if (!in && (res = ccl__gpu_private_stage(comm, 0, call->in_bytes, s, &in)) != CCL_OK) return res;
    if (!out && (res = ccl__gpu_private_stage(comm, 1, call->out_bytes, s, &out)) != CCL_OK) return res;
    /* The first call after an algorithm was freed: every rank finishes the previous call
     * before this one starts, staging copies included. So does a v call that stages its
     * sendbuf where peers read it (the v arena, whose layout follows every rank's
     * counts): the copy in runs before the kernel's entry, while a peer may still read
     * the previous call's. Nothing else of a v call needs it: a peer writes this rank's
     * arena only once this rank's kernel has announced the call, after its previous
     * call's copies out (docs/gpu-backend.md). */
    if ((call->fence || (call->is_v && call->v.in_heap)) &&
        ((res = gpu_rank_barrier(comm, k, ga, s)) != CCL_OK ||
         (res = gpu_wait_colocated_launches(comm, "its fence before this call", capturing)) != CCL_OK))
        return res;
    CUfunction copy = k->module->copy;
    if (call->stage_in && (res = ccl__gpu_stage_rows(comm, copy, in, 0, call->send, call->send_pitch, call->in_bytes,
                                                     call->count * call->esize, s, "sendbuf")) != CCL_OK)
        return res;
    /* Peers write this piece's staged out once it started: the copy out of the piece
     * before it in that region (two pieces back) must have ended. (A call's first two
     * pieces owe nothing: the call before joined its copies.) */
    if (call->alternate && call->piece > 2)
        CU_CHECK(ccl__cu.StreamWaitEvent(s, g->copied[call->turn], 0), "cuStreamWaitEvent (a piece's staged out)");
    CclGpuArgs a = {
        .in = (uint64_t)(uintptr_t)in,
        .out = (uint64_t)(uintptr_t)out,
        .peers = g->peers,
        .in_off = call->in_off,
        .out_off = call->out_off,
        .scratch_off = call->scratch_off,
        .sem_off = alg->sem_off,
        .expected = ga->expected,
        .err = ga->err_dev,
        .n = call->count,
        .in_ustride = call->in_ustride,
        .out_ustride = call->out_ustride,
        .cs = call->CS,
        .ninst = (uint64_t)alg->instances,
        .nslices = (uint64_t)(call->slices > 0 ? call->slices : 1),
        .timeout_ns = (uint64_t)comm->timeout_ms * 1000000ull,
        .in_stride = call->in_stride,
        .out_stride = call->out_stride,
        .port = ccl__gpu_port_address(ga->port),
        .vring_off = call->is_v ? call->v.ring_off : 0,
        .varena_bytes = call->is_v ? call->v.arena_bytes : 0,
        .lines_chunk = ga->protocol == PROTO_SIMPLE || call->is_v
                           ? 0
                           : ccl__lines_chunk_capacity(alg->prog, ga->protocol, alg->scratch_bytes),
        .id = call->id,
    };
    /* A fixed-size kernel has one parameter and ignores the second. */
    void *params[] = {&a, vtable};
    /* The identity's shape as this backend runs it: protocol and threads too. */
    a.id.shape |= (uint64_t)(1 + ga->protocol) << 32 | (uint64_t)th << 40;
    ccl__ident_seal(&a.id);
    /* A rank without blocks still launches one, which publishes and checks the call's
     * identity (its peers wait for it) and finds no block of its own to run. */
    CU_CHECK(ccl__gpu_launch(g, k->module->kernel, ga->grid > 0 ? (unsigned)ga->grid : 1, (unsigned)th, s, params),
             "cuLaunchKernel (ccl_kernel)");
    CCL__TRACE(comm->rank, "launched %d blocks x %d threads on stream %p", ga->grid, th, (void *)s);
    if ((res = gpu_wait_colocated_launches(comm, "its kernel of this call", capturing)) != CCL_OK) return res;
    if (call->divide) {
        /* Peers may still read our out until every rank is past its plan. */
        if ((res = gpu_rank_barrier(comm, k, ga, s)) != CCL_OK ||
            (res = gpu_wait_colocated_launches(comm, "its barrier before avg's division", capturing)) != CCL_OK)
            return res;
        if (call->divide_here) {
            uint64_t outp = (uint64_t)(uintptr_t)out, cnt = call->out_bytes / call->esize, nr = (uint64_t)call->divide;
            void *ap[] = {&outp, &cnt, &nr};
            unsigned blocks = (unsigned)((cnt + 511) / 512 < 1024 ? (cnt + 511) / 512 : 1024);
            CU_CHECK(ccl__cu.LaunchKernel(k->module->avg, blocks ? blocks : 1, 1, 1, 512, 1, 1, 0, s, ap, NULL),
                     "cuLaunchKernel (ccl_avg)");
        }
        if ((res = gpu_rank_barrier(comm, k, ga, s)) != CCL_OK ||
            (res = gpu_wait_colocated_launches(comm, "its barrier after avg's division", capturing)) != CCL_OK)
            return res;
    }
    if (call->stage_out && call->alternate) {
        if ((res = ccl__gpu_copy_out_beside(comm, copy, call, out, s)) != CCL_OK) return res;
    } else if (call->stage_out && !call->is_v &&
               (res = ccl__gpu_stage_rows(comm, copy, call->recv, call->recv_pitch, out, 0, call->out_bytes,
                                          call->count * call->esize, s, "recvbuf")) != CCL_OK) {
        return res;
    }
    /* A v call's recvbuf gets its segments only: the gaps between them are the user's.
     * Segments that follow one another (packed recvbufs: every one that leaves rdispls
     * NULL) go as one copy, a kernel fewer per segment. */
    size_t run_at = 0, run_bytes = 0;
    for (int u = 0; call->stage_out && call->is_v && u <= comm->nranks; u++) {
        size_t at = 0, bytes = 0;
        if (u < comm->nranks) {
            at = (size_t)vtable[CCL__VT_OUT_DISPL * comm->nranks + u] * call->esize;
            bytes = (size_t)vtable[CCL__VT_OUT_COUNT * comm->nranks + u] * call->esize;
            if (bytes == 0) continue;
            if (run_bytes && at == run_at + run_bytes) {
                run_bytes += bytes;
                continue;
            }
        }
        if (run_bytes && (res = ccl__gpu_stage_copy(comm, copy, (char *)call->recv + run_at, (const char *)out + run_at,
                                                    run_bytes, s, "recvbuf")) != CCL_OK)
            return res;
        run_at = at, run_bytes = bytes;
    }
    return ccl__gpu_mark_stream(comm, s, capturing);
}

/* The kernel's prologue found a peer running another call (or none): both ranks' ring
 * entries (cuda/abi.h's CclIdent) read back from the heaps to name the two sides. */
static void gpu_ident_error(ccl_comm_t *comm, const ccl_algorithm_t *alg, const CclGpuErr *e)
{
    unsigned long long seq = e->line;
    int peer = (int)e->peer;
    if (e->slot == CCL_SLOT_IDENT_WAIT) {
        ccl__set_async_error(comm, CCL_ERR_TIMEOUT,
                             "timeout: rank %d, thread block %llu (instance %llu): %s (call %llu): peer rank %d did not "
                             "start this call within %d ms", comm->rank, (unsigned long long)e->tb,
                             (unsigned long long)e->inst, alg->file, seq, peer, comm->timeout_ms);
        return;
    }
    CclIdent mine, theirs;
    size_t at = CCL_IDENT_OFF + (seq % CCL_IDENT_RING) * sizeof(CclIdent);
    if (peer >= 0 && peer < comm->nranks &&
        ccl__cu.MemcpyDtoH(&mine, (CUdeviceptr)(uintptr_t)(comm->heap_base[comm->rank] + at), sizeof mine) == CUDA_SUCCESS &&
        ccl__cu.MemcpyDtoH(&theirs, (CUdeviceptr)(uintptr_t)(comm->heap_base[peer] + at), sizeof theirs) == CUDA_SUCCESS &&
        mine.seq == seq && theirs.seq == seq && mine.hash == e->expected && theirs.hash == e->seen) {
        ccl__ident_report(comm, &mine, &theirs, peer);
        return;
    }
    ccl__set_async_error(comm, CCL_ERR_INVALID_ARGUMENT,
                         "rank %d, call %llu: the ranks disagree on what this call runs: this rank runs %s (identity "
                         "%016llx), rank %d a call with identity %016llx (its error says which; every rank must run the "
                         "same algorithm with the same launch shape, count, dtype and op, after the same "
                         "ccl_mem_alloc/free calls)", comm->rank, seq, alg->file, (unsigned long long)e->expected, peer,
                         (unsigned long long)e->seen);
}

/* The kernel's check of every rank's segment table failed (ccl_vload in the prelude;
 * abi.h's CCL_SLOT_VCOUNT and CCL_SLOT_VSPACE say what the record holds): the CPU
 * backend's message for the same failure. */
static void gpu_v_error(ccl_comm_t *comm, const ccl_algorithm_t *alg, const CclGpuErr *e)
{
    char msg[1024];
    if (e->slot == CCL_SLOT_VCOUNT) {
        ccl__v_count_message(msg, sizeof msg, alg->prog->coll, comm->rank, e->line, (int)e->tb, (int)e->inst,
                             (unsigned long long)e->seen, (unsigned long long)e->expected, alg->file);
        ccl__set_async_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s", msg);
        return;
    }
    ccl_dtype_t dtype = e->tb < CCL_NUM_DTYPES ? (ccl_dtype_t)e->tb : CCL_F32;
    ccl__v_space_message(msg, sizeof msg, comm->rank, e->line, alg->file, (size_t)e->expected,
                         (unsigned long long)e->inst, dtype, (int)e->peer, (unsigned long long)e->seen,
                         comm->varena_bytes);
    ccl__set_async_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s", msg);
}

static ccl_result_t gpu_synchronize(ccl_comm_t *comm)
{
    GpuComm *g = gpu_comm(comm);
    ccl__cu.CtxSetCurrent(g->ctx);
    double t0 = ccl__now_ms();
    CUresult r = ccl__gpu_wait_own_work(comm);
    CCL__TRACE(comm->rank, "synchronize waited %.1f ms", ccl__now_ms() - t0);
    if (r != CUDA_SUCCESS) {
        ccl__set_async_error(comm, CCL_ERR_CUDA, "rank %d: a kernel failed: %s", comm->rank, ccl__cuda_error(r));
        return CCL_OK;
    }
    ccl__gpu_free_retired(g);
    for (int i = 0; i < comm->nalgs; i++) {
        ccl_algorithm_t *alg = comm->algs[i];
        GpuAlg *ga = alg->be_alg;
        if (!ga || ga->err->flag != 1) continue;
        const CclGpuErr *e = ga->err;
        char why[256];
        if (e->slot == CCL_SLOT_IDENT || e->slot == CCL_SLOT_IDENT_WAIT) {
            gpu_ident_error(comm, alg, e);
        } else if (e->slot == CCL_SLOT_VCOUNT || e->slot == CCL_SLOT_VSPACE) {
            gpu_v_error(comm, alg, e);
        } else if (e->slot == CCL_SLOT_PORT) {
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
                                 "or around avg's division): rank %llu did not arrive (it reached barrier %llu, this "
                                 "is barrier %llu)", comm->rank, comm->timeout_ms, alg->file,
                                 (unsigned long long)e->peer, (unsigned long long)e->seen,
                                 (unsigned long long)e->expected);
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
    if (ccl__gpu_p2p_error(comm)) return CCL_OK;
    uint64_t ab = 0;
    if (ccl__cu.MemcpyDtoH(&ab, g->own_va, sizeof ab) == CUDA_SUCCESS && ab)
        ccl__set_async_error(comm, CCL_ERR_PEER_FAILED, "rank %d: stopped because rank %d failed (see its error)",
                             comm->rank, (int)ab - 1);
    return CCL_OK;
}

/* From any thread: this rank's abort word and every peer's but skip's (offset 0 of each
 * heap, the low 32 bits; the high ones stay 0) set to culprit + 1 on the quiet stream, not
 * waited for. Running kernels see it at their next check and return; the host launches nothing
 * more (the common code marked the comm failed). ccl_comm_abort names this rank. */
static void gpu_stop_every_rank(ccl_comm_t *comm, int culprit, int skip)
{
    GpuComm *g = gpu_comm(comm);
    ccl__cu.CtxSetCurrent(g->ctx);
    for (int p = 0; p < comm->nranks; p++)
        if (p != skip)
            ccl__cu.MemsetD32Async((CUdeviceptr)(uintptr_t)comm->heap_base[p], (unsigned)culprit + 1, 1, g->quiet);
}

static void gpu_abort(ccl_comm_t *comm)
{
    gpu_stop_every_rank(comm, comm->rank, -1);
}

/* The watchdog (watchdog.c, on its own thread) found rank `dead`'s process gone: the same
 * stop, every live rank's abort word naming `dead` (nobody reads the dead one's), so that
 * kernels waiting on it return now instead of at their timeout. */
static void gpu_peer_gone(ccl_comm_t *comm, int dead)
{
    gpu_stop_every_rank(comm, dead, dead);
}

/* ccl_comm_get_async_error: a kernel's error record (host-mapped) is readable at once;
 * a peer's failure (this heap's abort word, device memory) shows at synchronize. */
static ccl_result_t gpu_poll(ccl_comm_t *comm)
{
    for (int i = 0; i < comm->nalgs; i++) {
        const GpuAlg *ga = comm->algs[i]->be_alg;
        if (ga && ga->err->flag == 1)
            return ga->err->slot == CCL_SLOT_IDENT || ga->err->slot == CCL_SLOT_VCOUNT ? CCL_ERR_INVALID_ARGUMENT
                   : ga->err->slot == CCL_SLOT_VSPACE                                  ? CCL_ERR_OUT_OF_MEMORY
                                                                                       : CCL_ERR_TIMEOUT;
    }
    return ccl__gpu_p2p_poll(comm);
}

/* Synchronous host <-> heap copy for tools (cclc run): after the comm's earlier work. */
static ccl_result_t gpu_copy(ccl_comm_t *comm, void *dst, const void *src, size_t bytes)
{
    GpuComm *g = gpu_comm(comm);
    ccl__cu.CtxSetCurrent(g->ctx);
    CU_CHECK(ccl__gpu_wait_own_work(comm), "waiting for the communicator's work");
    CU_CHECK(ccl__cu.MemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes, g->quiet),
             "cuMemcpyAsync");
    /* From pageable host memory the copy may return before its DMA lands. */
    CU_CHECK(ccl__cu.StreamSynchronize(g->quiet), "cuStreamSynchronize");
    return CCL_OK;
}

/* The device model from the driver; the topology: whether this GPU reaches every other
 * visible GPU directly (P2P; NVLink on the target machines). One process per GPU
 * usually sees one: "p2p-all". Threads per block and LL lines for Simple programs. */
static void gpu_describe(const ccl_comm_t *comm, CclDeviceInfo *out)
{
    const GpuComm *g = comm->be_comm;
    char name[128];
    snprintf(out->device, sizeof out->device, "gpu");
    snprintf(out->topology, sizeof out->topology, "unknown");
    out->has_threads_per_block = 1;
    out->can_run_simple_as_ll = 1;
    if (g && ccl__cu.DeviceGetName(name, (int)sizeof name, g->dev) == CUDA_SUCCESS)
        snprintf(out->device, sizeof out->device, "%s", name);
    int count = 0, all = 1;
    if (!g || ccl__cu.DeviceGetCount(&count) != CUDA_SUCCESS)
        return;
    for (int d = 0; d < count; d++) {
        CUdevice other;
        int ok = 0;
        if (ccl__cu.DeviceGet(&other, d) != CUDA_SUCCESS)
            continue;
        if (other == g->dev)
            continue;
        if (ccl__cu.DeviceCanAccessPeer(&ok, g->dev, other) != CUDA_SUCCESS || !ok)
            all = 0;
    }
    snprintf(out->topology, sizeof out->topology, "%s", all ? "p2p-all" : "p2p-partial");
}

void ccl__gpu_make_current(const ccl_comm_t *comm)
{
    const GpuComm *g = comm->be_comm;
    ccl__cu.CtxSetCurrent(g->ctx);
}

/* alltoall of an ordinary recvbuf as messages (CclBackend.alltoall_p2p_min): from 64 MB
 * on up to 4 ranks, where the messages through the slots beat the program, which stages
 * the recvbuf (docs/perf/x2-exchange); from 16 MB on 2 ranks in two processes, whose
 * messages go straight into the recvbuf once the sender has mapped it (gpu/ipc.c:
 * 0.87x the program's time at 16 MB on 2x H200, 1.18x at 4 MB; docs/perf/ipc). Every
 * rank knows alike whether any rank is another process. */
static size_t gpu_alltoall_p2p_min(const ccl_comm_t *comm)
{
    const GpuComm *g = comm->be_comm;
    if (comm->nranks > 4)
        return 0;
    return comm->nranks == 2 && g->remote ? (size_t)16 << 20 : (size_t)64 << 20;
}

static const CclBackend gpu_backend = {
    .name = "gpu",
    .alternates_out = 1,
    .alltoall_p2p_min = gpu_alltoall_p2p_min,
    .kind = CCL_BACKEND_GPU,
    .comm_init = gpu_comm_init,
    .comm_fini = gpu_comm_fini,
    .heap_zero = gpu_heap_zero,
    .alg_prepare = gpu_alg_prepare,
    .alg_release = gpu_alg_release,
    .scratch_bytes = gpu_scratch_bytes,
    .run = gpu_run,
    .run_p2p = ccl__gpu_p2p_run,
    .synchronize = gpu_synchronize,
    .abort = gpu_abort,
    .peer_gone = gpu_peer_gone,
    .poll = gpu_poll,
    .capturing = gpu_capturing,
    .copy = gpu_copy,
    .describe = gpu_describe,
    .reg_inspect = ccl__gpu_reg_inspect,
    .reg_map = ccl__gpu_reg_map,
    .reg_release = ccl__gpu_reg_release,
    .reg_same = ccl__gpu_reg_same,
    .pool_alloc = ccl__gpu_pool_alloc,
    .pool_free = ccl__gpu_pool_free,
};

const CclBackend *ccl__gpu_backend(char *why, size_t len)
{
    if (ccl__cuda_load(why, len) != 0) return NULL;
    if (ccl__jit_nvrtc_version(why, len) < 0) return NULL;
    return &gpu_backend;
}
