/* gpu/p2p.c: point-to-point groups on the GPU backend: the ccl_p2p kernel (gpu/p2p.cu),
 * loaded once per GPU, one launch per group, its failure record turned into messages
 * like the CPU backend's (cpu/p2p.c).
 *
 * A launch's calls go to the kernel grouped by channel (sends to one peer, receives from
 * one peer), each channel with blocks of its own: as many as its longest message can
 * use (a lane each for copies through the channel's slots, more for a send that may
 * write the receiver's buffer directly), within what fits the GPU at once. Here the
 * channel region (2 x p2p_slot_bytes a peer, reserved by the common code) gets its
 * layout (p2p_layout), and a receive whose buffer is a ccl_mem_alloc buffer or registered
 * memory offers it to its sender (CclP2pGpuCall.direct). A v-collective run as messages
 * (vcoll.c) adds its copies before the launch (v_copies) and its tag to each message's
 * dtype word, which the kernel compares whole.
 *
 * Where each channel stands is the kernel's to read from the heap (gpu/p2p.cu), so a
 * launch is the same every time it runs and may be captured into a CUDA graph. A comm's
 * point-to-point launches must run in the order they were made (one stream, or streams
 * ordered by events), as the message numbers assume.
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

/* ccl_p2p's source (gpu/p2p.cu with abi.h and copy.cuh inlined), made by the Makefile. */
extern const char ccl__p2p_cu[];

/* Threads per block (fewer where the channels' blocks would not all fit at once), slots
 * of a lane, and the blocks of a channel: at most P2P_MAX_BLOCKS; a send that may go
 * directly into its receiver's buffer one per P2P_DIRECT_BYTES_PER_BLOCK (NVLink needs
 * 16 to 32 blocks writing for its full rate), and from P2P_WIDE_MIN bytes, in a launch
 * of at most two channels, P2P_WIDE_BLOCKS (on 2x H200 a ring's 16 MB-1 GB took
 * 0.98-0.99x the time with 64 blocks, 1.05x with 48 or 128: docs/perf/ipc, section 6);
 * otherwise a block per lane its longest message uses. A receive past ll_max offers
 * its buffer at P2P_DIRECT_MIN bytes and more: below, the sender's wait for the offer
 * costs more than the copy out of the slots (on 2x H200, 32 KB took 10.2 us so against
 * 9.1, 64 KB 11.0 against 9.6). Messages shorter than a row of lanes go in chunks of a
 * multiple of P2P_CHUNK_MIN. A failure's message names the v call of one of the latest
 * P2P_VSEQS launches (GpuP2p.vseq). */
enum {
    P2P_THREADS = 512,
    P2P_SLOTS = 4,
    P2P_MAX_BLOCKS = 32,
    P2P_WIDE_BLOCKS = 64,
    P2P_WIDE_MIN = 16 << 20,
    P2P_DIRECT_MIN = 128 << 10,
    P2P_DIRECT_BYTES_PER_BLOCK = 16 << 10,
    P2P_CHUNK_MIN = 4 << 10,
    P2P_VSEQS = 64,
};

/* How the kernel lays out one channel region (cuda/abi.h, CCL_P2P_*). */
typedef struct {
    uint64_t lanes, slots, payload, ll_max, ll_chunk, ll_slots, ll_off, pay_off;
} P2pLayout;

/* The layout of a region of `bytes`: the first of these whose slots hold at least
 * min_payload bytes each: 16 lanes of 4 slots of about 111 KB in the 8 MiB a peer that a
 * 1 GiB heap reserves for up to 8 ranks (on 2x H200, 256 MB through the slots moved 330
 * GB/s with slots of 126 KB; 148 with slots of 30 KB, in 2 MiB a peer). Each lane also has
 * ll_slots LL slots of 2 x ll_chunk bytes, so messages up to lanes x ll_chunk (256 KB) go
 * as LL lines over every lane: on 2x H100, LL slots of 16 KB took 10.3 us at 256 KB
 * against 12.6 with 8 KB (then 128 KB the bound), and 1, 2 or 4 of them a lane were
 * alike to 1 MB; 4 (2 MiB of the 8) cost the slots' copies 3-5% at 64-256 MB
 * (docs/perf/x2-vinst). -1 when none fits. */
static int p2p_layout(uint64_t bytes, P2pLayout *l)
{
    static const struct {
        uint64_t lanes, ll_chunk, ll_slots, min_payload;
    } tries[] = {{16, 16 << 10, 2, 24 << 10}, {8, 16 << 10, 2, 16 << 10}, {4, 4 << 10, 4, 8 << 10},
                 {2, 2 << 10, 4, 4 << 10}, {1, 1 << 10, 4, 4 << 10}};
    for (size_t t = 0; t < sizeof tries / sizeof *tries; t++) {
        uint64_t lanes = tries[t].lanes, ll_chunk = tries[t].ll_chunk, ll_slots = tries[t].ll_slots;
        uint64_t ll_off = (CCL_P2P_HDRS + lanes * P2P_SLOTS * CCL_P2P_HDR_BYTES + 255) / 256 * 256;
        uint64_t pay_off = ll_off + lanes * ll_slots * 2 * ll_chunk;
        if (pay_off >= bytes)
            continue;
        uint64_t payload = (bytes - pay_off) / (lanes * P2P_SLOTS) / 256 * 256;
        if (payload < tries[t].min_payload)
            continue;
        *l = (P2pLayout){.lanes = lanes, .slots = P2P_SLOTS, .payload = payload, .ll_max = lanes * ll_chunk,
                         .ll_chunk = ll_chunk, .ll_slots = ll_slots, .ll_off = ll_off, .pay_off = pay_off};
        return 0;
    }
    return -1;
}

/* The smallest region p2p_layout accepts. */
static uint64_t p2p_layout_min(void)
{
    P2pLayout l;
    uint64_t lo = 1, hi = (uint64_t)1 << 30;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (p2p_layout(mid, &l) == 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* The bytes of a message's chunks: a slot's payload for a long message; a shorter one
 * spreads over every lane in chunks of a multiple of P2P_CHUNK_MIN (of ll_chunk, where
 * less, for LL chunks, which are at most ll_chunk). A function of the message's bytes
 * alone, as both ranks must agree. */
static uint64_t message_chunk(uint64_t bytes, const P2pLayout *l)
{
    uint64_t grain = bytes <= l->ll_max && l->ll_chunk < P2P_CHUNK_MIN ? l->ll_chunk : P2P_CHUNK_MIN;
    uint64_t per = (bytes + l->lanes - 1) / l->lanes;
    per = (per + grain - 1) / grain * grain;
    if (per == 0)
        per = grain;
    return per < l->payload ? per : l->payload;
}

/* The blocks a call's channel can use for it: one for a receive the sender writes
 * directly; a block per lane for LL lines and copies through the slots; and a send
 * that may write its receiver's buffer directly (it learns that in the kernel) one per
 * P2P_DIRECT_BYTES_PER_BLOCK, at most P2P_MAX_BLOCKS, or P2P_WIDE_BLOCKS from
 * P2P_WIDE_MIN bytes (the caller caps them all). */
static uint64_t call_blocks(const CclP2pGpuCall *c, const P2pLayout *l)
{
    if (c->bytes <= l->ll_max)
        return c->lanes;
    if (c->kind == 1 && c->direct != CCL_P2P_NO_DIRECT)
        return 1;
    if (c->kind == 0 && c->bytes >= P2P_DIRECT_MIN) {
        uint64_t d = (c->bytes + P2P_DIRECT_BYTES_PER_BLOCK - 1) / P2P_DIRECT_BYTES_PER_BLOCK;
        uint64_t most = c->bytes >= P2P_WIDE_MIN ? P2P_WIDE_BLOCKS : P2P_MAX_BLOCKS;
        d = d < most ? d : most;
        return d > c->lanes ? d : c->lanes;
    }
    return c->lanes;
}

/* What a receive long enough to gain from being written directly offers its sender: its
 * buffer's offset from this rank's heap base where it lies inside one of its
 * ccl_mem_alloc buffers or in registered memory (both of which the sender reaches);
 * outside the heap, ordinary memory its sender's process has mapped (gpu/ipc.c);
 * CCL_P2P_NO_DIRECT otherwise. */
static uint64_t direct_offset(ccl_comm_t *comm, GpuComm *g, const CclP2pOp *op, size_t bytes)
{
    const char *base = comm->heap_base[comm->rank], *b = op->buf;
    size_t start, size;
    if (bytes < P2P_DIRECT_MIN || !b)
        return CCL_P2P_NO_DIRECT;
    if (op->reg_off != SIZE_MAX)
        return (uint64_t)op->reg_off;
    if (b < base || b >= base + comm->heap_bytes)
        return ccl__gpu_ipc_direct(comm, g, op->peer, b, bytes);
    if (ccl__heap_find_user(&comm->data, (size_t)(b - base), bytes, &start, &size) != 0)
        return CCL_P2P_NO_DIRECT;
    return (uint64_t)(b - base);
}

typedef struct GpuP2p {
    GpuModule *module;          /* the GPU's cache entry; NULL when the kernel is not usable */
    char why[512];              /* why not */
    CclP2pGpuErr *err;          /* host-mapped */
    CUdeviceptr err_dev;
    uint64_t groups;            /* launches so far */
    /* The v call (comm->v_p2p_calls) of each of the latest P2P_VSEQS launches, by launch
     * number, for the messages of a failure (0: none). */
    uint64_t vseq[P2P_VSEQS];
    /* A v call's own segment, copied on the comm's side stream beside the messages:
     * `forked` once its source is ready on the call's stream, `copied` once done. */
    CUevent forked, copied;
    int max_blocks;             /* blocks of a channel at most: CCL_GPU_P2P_BLOCKS, else 0 (call_blocks') */
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
            if (r == CUDA_SUCCESS && ((r = ccl__cu.ModuleGetFunction(&m->kernel, mod, "ccl_p2p")) != CUDA_SUCCESS ||
                                      (r = ccl__cu.ModuleGetFunction(&m->copy, mod, "ccl_copy")) != CUDA_SUCCESS)) {
                ccl__cu.ModuleUnload(mod);
                mod = 0;
            }
            if (!mod)
                snprintf(err, sizeof err, "loading the point-to-point kernel failed: %s", ccl__cuda_error(r));
        }
        if (mod) {
            /* Loaded now, not at its first launch (which could wait for a peer's kernel),
             * and how many of its blocks fit an SM at each block size a launch may take. */
            int attr;
            ccl__cu.FuncGetAttribute(&attr, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, m->kernel);
            for (int t = P2P_THREADS; t >= 64; t /= 2)
                if (ccl__cu.OccupancyMaxActiveBlocksPerMultiprocessor(&m->blocks_per_sm[t / 32], m->kernel, t, 0) !=
                    CUDA_SUCCESS)
                    m->blocks_per_sm[t / 32] = 0;
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
    if ((r = ccl__cu.EventCreate(&p->forked, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS ||
        (r = ccl__cu.EventCreate(&p->copied, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
        snprintf(p->why, sizeof p->why, "creating its events failed: %s", ccl__cuda_error(r));
        return;
    }
    /* A tuning knob until the tuner owns it; each rank's own (the ranks need not agree). */
    const char *knob = getenv("CCL_GPU_P2P_BLOCKS");
    int kb = knob ? atoi(knob) : 0;
    p->max_blocks = kb >= 1 && kb <= 128 ? kb : 0;
    double t0 = ccl__now_ms();
    load_module(comm, g, p);
    ccl__gpu_ipc_open(comm, g);
    CCL__TRACE(comm->rank, "point-to-point kernel %s in %.1f ms", p->module ? "ready" : "failed", ccl__now_ms() - t0);
}

void ccl__gpu_p2p_close(GpuComm *g)
{
    GpuP2p *p = g->p2p;
    ccl__gpu_ipc_close(g);
    if (!p)
        return;
    if (p->err)
        ccl__gpu_free_host_mem(g->device, p->err);
    if (p->forked)
        ccl__cu.EventDestroy(p->forked);
    if (p->copied)
        ccl__cu.EventDestroy(p->copied);
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

/* An own segment of at least this many bytes is copied beside the messages (below, the
 * fork and join cost more than they save). */
enum { P2P_SELF_BESIDE_MIN = 1 << 20 };

/* A v call's copies (CclP2pCall), before its messages: the sendbuf's snapshot into
 * private staging on s, the sends that read it rebased onto it (in the launch's
 * arguments), then the rank's own segment, which no message touches: on the side stream
 * beside the messages where it is large (*beside: the caller joins it after the launch),
 * else on s. ccl_copy copies nothing once this rank is stopped. */
static ccl_result_t v_copies(ccl_comm_t *comm, GpuComm *g, GpuP2p *p, const CclP2pCall *call, CUstream s, int *beside)
{
    const char *lo = call->stage_src, *hi = lo + call->stage_bytes, *self = call->self_src;
    ccl_result_t res = CCL_OK;
    *beside = 0;
    if (call->stage_bytes) {
        void *stage;
        if ((res = ccl__gpu_private_stage(comm, 0, call->stage_bytes, s, &stage)) != CCL_OK ||
            (res = ccl__gpu_stage_copy(comm, p->module->copy, stage, lo, call->stage_bytes, s, "sendbuf")) != CCL_OK)
            return res;
        for (uint64_t i = 0; i < p->args.ncalls; i++) {
            CclP2pGpuCall *c = &p->args.call[i];
            const char *b = (const char *)(uintptr_t)c->buf;
            if (c->kind == 0 && b >= lo && b < hi)
                c->buf = (uint64_t)(uintptr_t)((char *)stage + (b - lo));
        }
        if (self >= lo && self < hi)
            self = (char *)stage + (self - lo);
    }
    if (!call->self_bytes)
        return CCL_OK;
    if (call->self_bytes < P2P_SELF_BESIDE_MIN)
        return ccl__gpu_stage_copy(comm, p->module->copy, call->self_dst, self, call->self_bytes, s, "own segment");
    CU_CHECK(ccl__cu.EventRecord(p->forked, s), "cuEventRecord (a v call's own segment)");
    CU_CHECK(ccl__cu.StreamWaitEvent(g->side, p->forked, 0), "cuStreamWaitEvent (a v call's own segment)");
    if ((res = ccl__gpu_stage_copy(comm, p->module->copy, call->self_dst, self, call->self_bytes, g->side,
                                   "own segment")) != CCL_OK)
        return res;
    CU_CHECK(ccl__cu.EventRecord(p->copied, g->side), "cuEventRecord (a v call's own segment)");
    *beside = 1;
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
                              "per group", comm->rank, n, CCL_P2P_MAX_CALLS);
    for (int i = 0; i < n; i++) {
        char what[64];
        snprintf(what, sizeof what, "buf (call %d of the group)", call->ops[i].index);
        size_t bytes = call->ops[i].count * ccl_dtype_size(call->ops[i].dtype);
        ccl_result_t r = ccl__gpu_check_buffer(comm, call->ops[i].buf, bytes, what);
        if (r != CCL_OK)
            return r;
    }
    P2pLayout lay;
    uint64_t region = (uint64_t)CCL__P2P_SLOTS * comm->p2p_slot_bytes;
    if (p2p_layout(region, &lay) != 0)
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY,
                              "rank %d: the heap (heap_bytes %zu) leaves %llu bytes a peer for the point-to-point "
                              "channels, fewer than the GPU backend's slots take (%llu); raise ccl_config_t.heap_bytes "
                              "/ CCL_HEAP_BYTES", comm->rank, comm->heap_bytes, (unsigned long long)region,
                              (unsigned long long)p2p_layout_min());
    CUstream s;
    int capturing;
    ccl_result_t res = ccl__gpu_call_stream(comm, call->stream, &s, &capturing);
    if (res != CCL_OK)
        return res;
    ccl__gpu_ipc_serve(comm, g);
    /* The calls by channel, the channels in the order they first appear, each channel's
     * calls in call order (the order both ranks number its messages in). */
    int N = comm->nranks, nch = 0, chan[CCL_P2P_MAX_CALLS];
    uint64_t key[CCL_P2P_MAX_CALLS], want[CCL_P2P_MAX_CALLS] = {0};
    for (int i = 0; i < n; i++) {
        uint64_t k = (uint64_t)(call->ops[i].kind == CCL__P2P_SEND ? 0 : N) + (uint64_t)call->ops[i].peer;
        for (chan[i] = 0; chan[i] < nch && key[chan[i]] != k; chan[i]++) {}
        if (chan[i] == nch)
            key[nch++] = k;
    }
    CclP2pGpuArgs *a = &p->args;
    *a = (CclP2pGpuArgs){.peers = g->peers, .err = p->err_dev, .rank = (uint64_t)comm->rank,
                         .nranks = (uint64_t)N, .chan_off = comm->p2p_off, .chan_bytes = region,
                         .lanes = lay.lanes, .slots = lay.slots,
                         .payload = lay.payload, .ll_max = lay.ll_max, .ll_chunk = lay.ll_chunk, .ll_slots = lay.ll_slots,
                         .direct_min = P2P_DIRECT_MIN,
                         .ll_off = lay.ll_off, .pay_off = lay.pay_off,
                         .timeout_ns = (uint64_t)comm->timeout_ms * 1000000ull, .group = ++p->groups,
                         .ncalls = (uint64_t)n};
    int at = 0;
    for (int ch = 0; ch < nch; ch++)
        for (int i = 0; i < n; i++) {
            if (chan[i] != ch)
                continue;
            const CclP2pOp *op = &call->ops[i];
            CclP2pGpuCall *c = &a->call[at++];
            c->kind = op->kind == CCL__P2P_SEND ? 0 : 1;
            c->peer = (uint64_t)op->peer;
            c->buf = (uint64_t)(uintptr_t)op->buf;
            c->count = op->count;
            c->dtype = ccl__p2p_wire_dtype(op);
            c->bytes = op->count * ccl_dtype_size(op->dtype);
            c->nth = op->nth;
            c->index = (uint64_t)op->index;
            c->direct = c->kind == 1 && c->bytes > lay.ll_max ? direct_offset(comm, g, op, c->bytes)
                                                              : CCL_P2P_NO_DIRECT;
            c->chunk = message_chunk(c->bytes, &lay);
            c->chunks = c->bytes ? (c->bytes + c->chunk - 1) / c->chunk : 1;
            c->lanes = c->chunks < lay.lanes ? c->chunks : lay.lanes;
            c->rows = c->chunks / c->lanes;
            c->extra = c->chunks % c->lanes;
            uint64_t w = call_blocks(c, &lay);
            want[ch] = w > want[ch] ? w : want[ch];
        }
    /* Every channel's blocks must be able to run at once (they wait for one another's
     * partners), and where ranks share the GPU, every rank's (a block each spare for a
     * collective's barrier): fewer threads a block where 512 leave too few. */
    int threads = P2P_THREADS;
    long fit = 0, per_rank = 0;
    for (; threads >= 64; threads /= 2) {
        fit = (long)p->module->blocks_per_sm[threads / 32] * g->sms;
        per_rank = g->ncolocated > 1 ? fit / g->ncolocated - 1 : fit;
        if (per_rank >= nch)
            break;
    }
    if (threads < 64)
        return ccl__set_error(comm, CCL_ERR_UNSUPPORTED,
                              "rank %d: a group of %d calls on %d channels (peers and directions) needs a thread block "
                              "per channel on each of the %d rank(s) using GPU %d, and only %ld fit at once, which the "
                              "waits between them need: use smaller groups", comm->rank, n, nch, g->ncolocated,
                              comm->device, fit);
    /* Wide sends were measured with one channel each way (a ring); more channels keep
     * P2P_MAX_BLOCKS each until measured. */
    long most = per_rank / nch, cap = p->max_blocks ? p->max_blocks : nch <= 2 ? P2P_WIDE_BLOCKS : P2P_MAX_BLOCKS;
    most = most < 1 ? 1 : most > cap ? cap : most;
    uint64_t grid = 0;
    for (int i = 0, ch = -1; i < n; i++) {
        CclP2pGpuCall *c = &a->call[i];
        if (i == 0 || c->kind != a->call[i - 1].kind || c->peer != a->call[i - 1].peer) {
            ch++;
            grid += i ? a->call[i - 1].blocks : 0;
        }
        c->first_block = grid;
        c->blocks = want[ch] < (uint64_t)most ? want[ch] : (uint64_t)most;
    }
    grid += a->call[n - 1].blocks;
    p->vseq[a->group % P2P_VSEQS] = call->ops[0].vtag ? call->ops[0].vseq : 0;
    int beside;
    if ((res = v_copies(comm, g, p, call, s, &beside)) != CCL_OK)
        return res;
    ccl__gpu_note_caller(comm);
    void *params[] = {a};
    CUresult r = ccl__gpu_launch(g, p->module->kernel, (unsigned)grid, (unsigned)threads, s, params);
    if (r != CUDA_SUCCESS)
        return ccl__gpu_cu_fail(comm, r, "cuLaunchKernel (ccl_p2p)");
    if (beside)
        CU_CHECK(ccl__cu.StreamWaitEvent(s, p->copied, 0), "cuStreamWaitEvent (a v call's own segment)");
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
    uint64_t dtype = c->dtype & 0xff, vtag = c->dtype >> 8; /* ccl__p2p_wire_dtype's word */
    CclP2pOp op = {.kind = c->kind == 0 ? CCL__P2P_SEND : CCL__P2P_RECV, .peer = (int)c->peer,
                   .count = (size_t)c->count, .dtype = dtype < CCL_NUM_DTYPES ? (ccl_dtype_t)dtype : CCL_NUM_DTYPES,
                   .nth = c->nth, .index = (int)c->index, .vtag = (int)vtag,
                   .vseq = vtag ? p->vseq[e->group % P2P_VSEQS] : 0};
    if (e->what == CCL_P2P_MISMATCH) {
        CclP2pSlot found; /* the header's five words, in CclP2pSlot's order */
        _Static_assert(sizeof found == sizeof e->header, "a slot header is five words");
        memcpy(&found, e->header, sizeof found);
        ccl__p2p_mismatch_error(comm, &op, e->calls, &found);
    } else {
        ccl__p2p_timeout_error(comm, &op, e->calls, e->seen, e->expected);
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

void ccl__gpu_p2p_sizes(const ccl_comm_t *comm, size_t *payload, size_t *ll_max, size_t *direct_min, size_t *lanes,
                        size_t *slots)
{
    P2pLayout l = {0};
    if (comm->p2p_off == SIZE_MAX || p2p_layout((uint64_t)CCL__P2P_SLOTS * comm->p2p_slot_bytes, &l) != 0)
        l = (P2pLayout){0};
    /* Past ll_max: the LL lines take the messages below it. */
    *payload = (size_t)l.payload, *ll_max = (size_t)l.ll_max;
    *direct_min = P2P_DIRECT_MIN > l.ll_max ? P2P_DIRECT_MIN : (size_t)l.ll_max + 1;
    *lanes = (size_t)l.lanes, *slots = (size_t)l.slots;
}

