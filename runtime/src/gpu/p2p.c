/* gpu/p2p.c: point-to-point groups on the GPU backend: the ccl_p2p kernel (gpu/p2p.cu,
 * one thread block per call), loaded once per GPU, one launch per group, and its
 * failure record turned into messages like the CPU backend's (cpu/p2p.c).
 *
 * Where each call's slots start on its channel is the kernel's to read from the heap
 * (gpu/p2p.cu), so a launch is the same every time it runs and may be captured into a
 * CUDA graph. A comm's point-to-point launches must run in the order they were made
 * (one stream, or streams ordered by events), as the message numbers assume.
 *
 * Ranks sharing a GPU: a rank's kernel spins until its partners' kernels run, so, as for
 * collectives (gpu/backend.c, gpu_wait_colocated_launches), after launching a group a
 * rank waits on the host until each co-located partner has launched the kernel holding
 * the matching call. The counts are per channel and direction, since only the two ranks
 * of a message take part. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
#include "gpu/jit.h"

/* ccl_p2p's source (gpu/p2p.cu with abi.h inlined), made by the Makefile. */
extern const char ccl__p2p_cu[];

/* Threads per block; at most how many blocks share one call's copies (a block alone
 * moves about 15 GB/s: docs/gpu-backend.md), and the bytes that earn a call one more
 * (a short message gains nothing from more blocks, and pays their handshakes). */
enum { P2P_THREADS = 256, P2P_MAX_BLOCKS_PER_CALL = 16, P2P_BYTES_PER_BLOCK = 8 << 10 };

typedef struct GpuP2p {
    GpuModule *module;          /* the GPU's cache entry; NULL when the kernel is not usable */
    char why[512];              /* why not */
    CclP2pGpuErr *err;          /* host-mapped */
    CUdeviceptr err_dev;
    uint64_t groups;            /* launches so far */
    /* The kernel's parameter (about 10 KB), filled per launch: a comm's hooks never run
     * at once, and the driver copies it at the launch. */
    CclP2pGpuArgs args;
} GpuP2p;

static ccl_result_t load_module(ccl_comm_t *comm, GpuComm *g, GpuP2p *p)
{
    int load = 0;
    GpuModule *m = ccl__gpu_module_claim(g->device, ccl__p2p_cu, strlen(ccl__p2p_cu), &load);
    if (!m) {
        snprintf(p->why, sizeof p->why, "out of memory loading the point-to-point kernel");
        return CCL_ERR_OUT_OF_MEMORY;
    }
    if (load) {
        char cache[1024], err[CCL__ERR_LEN];
        CclJitResult jr;
        CUmodule mod = 0;
        const char *dir = ccl__cache_dir(comm->cache_dir, cache, sizeof cache);
        if (ccl__jit_compile(m->source, "ccl_p2p.cu", g->arch, dir, &jr, err, sizeof err) == 0) {
            CUresult r = ccl__cu.ModuleLoadData(&mod, jr.image);
            free(jr.image);
            if (r == CUDA_SUCCESS && (r = ccl__cu.ModuleGetFunction(&m->kernel, mod, "ccl_p2p")) != CUDA_SUCCESS) {
                ccl__cu.ModuleUnload(mod);
                mod = 0;
            }
            if (!mod)
                snprintf(err, sizeof err, "loading the point-to-point kernel failed: %s", ccl__cuda_error(r));
        }
        if (mod) {
            /* Loaded now, not at its first launch (which could wait for a peer's kernel),
             * and how many of its blocks fit an SM. */
            int attr;
            ccl__cu.FuncGetAttribute(&attr, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, m->kernel);
            if (ccl__cu.OccupancyMaxActiveBlocksPerMultiprocessor(&m->blocks_per_sm[P2P_THREADS / 32], m->kernel,
                                                                  P2P_THREADS, 0) != CUDA_SUCCESS)
                m->blocks_per_sm[P2P_THREADS / 32] = 0;
        }
        ccl__gpu_module_publish(g->device, m, mod, mod ? NULL : err);
    }
    ccl__gpu_module_wait(g->device, m);
    if (m->state != GPU_MODULE_READY) {
        snprintf(p->why, sizeof p->why, "%s", m->error ? m->error : "the point-to-point kernel did not load");
        return CCL_ERR_NVRTC;
    }
    p->module = m;
    return CCL_OK;
}

void ccl__gpu_p2p_open(ccl_comm_t *comm, GpuComm *g)
{
    GpuP2p *p = calloc(1, sizeof *p);
    if (!p)
        return;
    g->p2p = p;
    CUresult r = ccl__cu.MemHostAlloc((void **)&p->err, sizeof *p->err, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
    if (r == CUDA_SUCCESS)
        r = ccl__cu.MemHostGetDevicePointer(&p->err_dev, p->err, 0);
    if (r != CUDA_SUCCESS) {
        snprintf(p->why, sizeof p->why, "allocating its error record failed: %s", ccl__cuda_error(r));
        return;
    }
    memset(p->err, 0, sizeof *p->err);
    double t0 = ccl__now_ms();
    load_module(comm, g, p);
    CCL__TRACE(comm->rank, "point-to-point kernel %s in %.1f ms", p->module ? "ready" : "failed", ccl__now_ms() - t0);
}

void ccl__gpu_p2p_close(GpuComm *g)
{
    GpuP2p *p = g->p2p;
    if (!p)
        return;
    if (p->err)
        ccl__gpu_free_host_mem(g->device, p->err);
    free(p);
    g->p2p = NULL;
}

static int colocated(const GpuComm *g, int rank)
{
    for (int i = 0; i < g->ncolocated; i++)
        if (g->colocated[i] == rank)
            return 1;
    return 0;
}

/* Whether rank p's comm has calls in this same group: this thread launches them after
 * we return. */
static int in_group(const CclP2pCall *call, const GpuComm *g, int p)
{
    for (int i = 0; i < call->ngroup_comms; i++) {
        const ccl_comm_t *c = call->group_comms[i];
        if (c->rank == p && c->be_comm && ((const GpuComm *)c->be_comm)->launches == g->launches)
            return 1;
    }
    return 0;
}

/* Shared GPU: publishes which messages this launch holds, then waits until every
 * co-located partner has launched the kernel with the other end of each (a partner
 * driven by this same thread launches after we return: one in this group, or one whose
 * latest call came from this thread; one that has made no call yet is not waited for). */
static ccl_result_t wait_partners(ccl_comm_t *comm, GpuComm *g, const CclP2pCall *call, int capturing)
{
    const CclP2pOp *ops = call->ops;
    int n = call->nops;
    if (!g->launches || capturing) /* nothing runs until the graph is launched */
        return CCL_OK;
    int N = comm->nranks, me = comm->rank;
    _Atomic uint64_t *sends = g->launches->slot + 2 * N, *recvs = sends + N * N;
    for (int i = 0; i < n; i++) {
        _Atomic uint64_t *mine = ops[i].kind == CCL__P2P_SEND ? &sends[me * N + ops[i].peer] : &recvs[ops[i].peer * N + me];
        atomic_store_explicit(mine, ops[i].nth + 1, memory_order_release);
    }
    for (int i = 0; i < n; i++) {
        int p = ops[i].peer;
        if (p == me || !colocated(g, p) || in_group(call, g, p))
            continue;
        _Atomic uint64_t *theirs = ops[i].kind == CCL__P2P_SEND ? &recvs[me * N + p] : &sends[p * N + me];
        double t0 = 0;
        if (ccl__gpu_wait_launched(comm, p, theirs, ops[i].nth + 1, &t0) != 0)
            return ccl__set_error(comm, CCL_ERR_TIMEOUT,
                                  "rank %d: timeout after %d ms waiting for rank %d, which shares GPU %d, to launch its "
                                  "%s of message %llu (this rank's %s, call %d of its group): rank %d made no matching "
                                  "call", me, comm->timeout_ms, p, comm->device,
                                  ops[i].kind == CCL__P2P_SEND ? "ccl_recv" : "ccl_send",
                                  (unsigned long long)ops[i].nth + 1,
                                  ops[i].kind == CCL__P2P_SEND ? "ccl_send" : "ccl_recv", ops[i].index, p);
    }
    return CCL_OK;
}

ccl_result_t ccl__gpu_p2p_run(const CclP2pCall *call)
{
    ccl_comm_t *comm = call->comm;
    GpuComm *g = comm->be_comm;
    GpuP2p *p = g->p2p;
    ccl__cu.CtxSetCurrent(g->ctx);
    int n = call->nops;
    if (!p || !p->module)
        return ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "rank %d: the GPU backend cannot run point-to-point calls: %s",
                              comm->rank, p ? p->why : "out of memory");
    if (n > CCL_P2P_MAX_CALLS)
        return ccl__set_error(comm, CCL_ERR_UNSUPPORTED,
                              "rank %d: a group of %d point-to-point calls on one comm; the GPU backend runs at most %d "
                              "per group (one thread block each)", comm->rank, n, CCL_P2P_MAX_CALLS);
    for (int i = 0; i < n; i++) {
        char what[64];
        snprintf(what, sizeof what, "buf (call %d of the group)", call->ops[i].index);
        size_t bytes = call->ops[i].count * ccl_dtype_size(call->ops[i].dtype);
        ccl_result_t r = ccl__gpu_check_buffer(comm, call->ops[i].buf, bytes, what);
        if (r != CCL_OK)
            return r;
    }
    CUstream s;
    int capturing;
    ccl_result_t res = ccl__gpu_call_stream(comm, call->stream, &s, &capturing);
    if (res != CCL_OK)
        return res;
    /* Every rank's blocks must be able to run at once where ranks share the GPU (a
     * block each spare for a collective's barrier); the GPU's SMs are shared among the
     * calls otherwise. */
    long fit = (long)p->module->blocks_per_sm[P2P_THREADS / 32] * g->sms;
    long per_rank = g->ncolocated > 1 ? fit / g->ncolocated - 1 : g->sms;
    if (per_rank < n)
        return ccl__set_error(comm, CCL_ERR_UNSUPPORTED,
                              "rank %d: a group of %d calls needs %d thread blocks on each of the %d ranks sharing GPU "
                              "%d, and only %ld fit at once, which the waits between them need: use smaller groups",
                              comm->rank, n, n, g->ncolocated, comm->device, fit);
    long most = per_rank / n;
    most = most < 1 ? 1 : most > P2P_MAX_BLOCKS_PER_CALL ? P2P_MAX_BLOCKS_PER_CALL : most;
    CclP2pGpuArgs *a = &p->args;
    *a = (CclP2pGpuArgs){.peers = g->peers, .err = p->err_dev, .rank = (uint64_t)comm->rank,
                         .nranks = (uint64_t)comm->nranks, .chan_off = comm->p2p_off,
                         .slot_bytes = comm->p2p_slot_bytes, .sem_off = comm->p2p_sem_off,
                         .timeout_ns = (uint64_t)comm->timeout_ms * 1000000ull, .group = ++p->groups,
                         .ncalls = (uint64_t)n};
    size_t payload = comm->p2p_slot_bytes - CCL__P2P_HEADER;
    for (int i = 0; i < n; i++) {
        const CclP2pOp *op = &call->ops[i];
        CclP2pGpuCall *c = &a->call[i];
        /* Slots of the launch's earlier calls on the same channel come first. */
        for (int j = 0; j < i; j++)
            if (a->call[j].kind == (op->kind == CCL__P2P_SEND ? 0u : 1u) && a->call[j].peer == (uint64_t)op->peer)
                c->before += a->call[j].slots;
        c->kind = op->kind == CCL__P2P_SEND ? 0 : 1;
        c->peer = (uint64_t)op->peer;
        c->buf = (uint64_t)(uintptr_t)op->buf;
        c->count = op->count;
        c->dtype = (uint64_t)op->dtype;
        c->bytes = op->count * ccl_dtype_size(op->dtype);
        c->nth = op->nth;
        c->index = (uint64_t)op->index;
        c->slots = c->bytes ? (c->bytes + payload - 1) / payload : 1;
        uint64_t want = (c->bytes + P2P_BYTES_PER_BLOCK - 1) / P2P_BYTES_PER_BLOCK;
        c->blocks = want < 1 ? 1 : want > (uint64_t)most ? (uint64_t)most : want;
        c->first_block = i ? a->call[i - 1].first_block + a->call[i - 1].blocks : 0;
    }
    unsigned grid = (unsigned)(a->call[n - 1].first_block + a->call[n - 1].blocks);
    ccl__gpu_note_caller(comm);
    void *params[] = {a};
    CUresult r = ccl__cu.LaunchKernel(p->module->kernel, grid, 1, 1, P2P_THREADS, 1, 1, 0, s, params, NULL);
    if (r != CUDA_SUCCESS)
        return ccl__gpu_cu_fail(comm, r, "cuLaunchKernel (ccl_p2p)");
    CCL__TRACE(comm->rank, "launched a group of %d point-to-point calls on stream %p", n, (void *)s);
    if ((res = wait_partners(comm, g, call, capturing)) != CCL_OK)
        return res;
    return ccl__gpu_mark_stream(comm, s, capturing);
}

int ccl__gpu_p2p_error(ccl_comm_t *comm)
{
    GpuComm *g = comm->be_comm;
    GpuP2p *p = g->p2p;
    if (!p || !p->err || p->err->flag != 1)
        return 0;
    const CclP2pGpuErr *e = p->err;
    const CclP2pGpuCall *c = &e->call;
    CclP2pOp op = {.kind = c->kind == 0 ? CCL__P2P_SEND : CCL__P2P_RECV, .peer = (int)c->peer,
                   .count = (size_t)c->count, .dtype = c->dtype < CCL_NUM_DTYPES ? (ccl_dtype_t)c->dtype : CCL_NUM_DTYPES,
                   .nth = c->nth, .index = (int)c->index};
    if (e->what == CCL_P2P_MISMATCH) {
        CclP2pSlot found; /* the header's five words, in CclP2pSlot's order */
        _Static_assert(sizeof found == sizeof e->header, "a slot header is five words");
        memcpy(&found, e->header, sizeof found);
        ccl__p2p_mismatch_error(comm, &op, e->calls, &found);
    } else {
        ccl__p2p_timeout_error(comm, &op, e->calls, e->seen, c->kind == 0 ? e->first + c->slots : e->first + 1);
    }
    return 1;
}

ccl_result_t ccl__gpu_p2p_poll(ccl_comm_t *comm)
{
    GpuP2p *p = ((GpuComm *)comm->be_comm)->p2p;
    if (!p || !p->err || p->err->flag != 1)
        return CCL_OK;
    return p->err->what == CCL_P2P_MISMATCH ? CCL_ERR_INVALID_ARGUMENT : CCL_ERR_TIMEOUT;
}
