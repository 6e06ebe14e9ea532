/* gpu/ipc.c: a rank's ordinary device memory written directly by a peer process's
 * kernels: the receive buffers of point-to-point messages (gpu/p2p.c).
 *
 * A ccl_recv into memory from cudaMalloc or cuMemAlloc (a framework's tensor) is not in
 * the symmetric heap, so its message would be copied twice: into the channel's slots by
 * the sender, out of them by the receiver. Where the sender is another process of the
 * host, the receiver instead exports the buffer's allocation with a CUDA IPC handle
 * (cuIpcGetMemHandle); the sender's process opens it once (cuIpcOpenMemHandle) and says
 * where it mapped it; from then on every receive from that sender into that allocation
 * offers its buffer as a direct write, as a ccl_mem_alloc buffer does (gpu/p2p.cu's direct
 * path, unchanged): the word offered is the buffer's address in the sender's process
 * minus the sender's view of this rank's heap base, which the sender's kernel adds back.
 *
 * The handshake never waits. It runs over the comm's mailboxes (base.h's notes): lane 0
 * carries a rank's requests to a peer, at most one unanswered per peer, lane 1 its
 * answers. A receive whose allocation its sender has not mapped yet goes through the
 * slots, its request posted; every point-to-point launch first serves what reached its
 * rank (ccl__gpu_ipc_serve: opens what peers asked, takes their answers). So an exchange
 * that repeats on the same tensors, as a training step's does, writes directly from its
 * second or third call on, and a CUDA graph captured after such warm-up calls (as
 * torch's and ccl-perf's are) keeps the direct writes; one captured before keeps the
 * slots.
 *
 * An allocation is known by CU_POINTER_ATTRIBUTE_BUFFER_ID, which the driver never
 * reuses: memory freed and allocated again at the same address is a new export, and its
 * request tells the sender to close the old mapping. Otherwise mappings live until the
 * comm is destroyed, at most IPC_EXPORTS per pair of ranks (later allocations go
 * through the slots: a mapping a captured graph may still use is never closed to make
 * room). Memory IPC cannot export (cuMemCreate, stream-ordered pools:
 * CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE 0) and allocations a sender failed to
 * open go through the slots, remembered. CCL_GPU_P2P_IPC=0 turns this off (each rank's
 * own choice: a receiver that offers nothing gets copies).
 *
 * Freeing: CUDA calls freeing an exported allocation while another process still has
 * it open undefined. A mapping here is only ever written for a receive that is live
 * (posted by a running kernel of its owner), so a freed allocation's old mapping is
 * never written; what the driver does with the freed memory meanwhile is its own
 * (tests/gpu/p2p_ipc_gpu.c's `again` frees a mapped receive allocation, allocates
 * again and checks every byte: it passed on 2x and 4x H200; whether the memory returns
 * to the GPU before the mapping closes was not measured). Frameworks free their cached
 * segments rarely (torch: empty_cache, or an allocation that failed); a hook on the
 * allocator's segment frees, closing the mapping first (as torch's NCCL process group
 * deregisters its buffers), is not there yet. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"

enum {
    IPC_EXPORTS = 64,        /* allocations a rank exports to one peer */
    IPC_LANE_ASK = 0,        /* notes: requests */
    IPC_LANE_ANSWER = 1,     /*        answers */
};

/* A request: open allocation `key` (handle, bytes), after closing `retire` (0: none). */
typedef struct {
    uint32_t key, retire;
    uint64_t bytes;
    CUipcMemHandle handle;
} IpcAsk;

/* An answer: key opened (result CUDA_SUCCESS; word = its address here minus this
 * process's view of the asker's heap base) or not (the driver's error). */
typedef struct {
    uint32_t key;
    int32_t result;
    uint64_t word;
} IpcAnswer;

_Static_assert(sizeof(IpcAsk) <= CCL__NOTE_BYTES && sizeof(IpcAnswer) <= CCL__NOTE_BYTES, "notes hold them");

typedef enum { EXPORT_ASKED, EXPORT_MAPPED, EXPORT_REFUSED } ExportState;

/* An allocation of this rank that one peer may write. */
typedef struct {
    unsigned long long buffer_id;
    CUdeviceptr base;
    uint32_t key;
    ExportState state;
    uint64_t word;                   /* MAPPED: the answer's word */
} IpcExport;

/* A peer's allocation mapped here. */
typedef struct {
    uint32_t key;
    CUdeviceptr va;
} IpcImport;

typedef struct {
    IpcExport out[IPC_EXPORTS];
    int nout;
    uint32_t keys;                   /* keys given so far */
    int asking;                      /* a request to this peer is unanswered */
    IpcImport in[IPC_EXPORTS];
    int nin;
} IpcPeer;

struct GpuIpc {
    int nranks;
    IpcPeer *peer;                   /* per rank */
};

void ccl__gpu_ipc_open(ccl_comm_t *comm, GpuComm *g)
{
    const char *knob = getenv("CCL_GPU_P2P_IPC");
    int other_process = 0;
    for (int p = 0; g->pids && p < comm->nranks; p++)
        other_process |= g->pids[p] != g->pids[comm->rank];
    if (comm->nnodes > 1 || !other_process || comm->rank >= CCL__NOTE_RANKS || (knob && !strcmp(knob, "0")))
        return;
    GpuIpc *x = calloc(1, sizeof *x);
    if (x && !(x->peer = calloc((size_t)comm->nranks, sizeof *x->peer))) {
        free(x);
        x = NULL;
    }
    if (x)
        x->nranks = comm->nranks;
    g->ipc = x;
}

void ccl__gpu_ipc_close(GpuComm *g)
{
    GpuIpc *x = g->ipc;
    if (!x)
        return;
    for (int p = 0; p < x->nranks; p++)
        for (int i = 0; i < x->peer[p].nin; i++)
            ccl__cu.IpcCloseMemHandle(x->peer[p].in[i].va);
    free(x->peer);
    free(x);
    g->ipc = NULL;
}

static void drop_import(IpcPeer *q, uint32_t key)
{
    for (int i = 0; i < q->nin; i++)
        if (q->in[i].key == key) {
            ccl__cu.IpcCloseMemHandle(q->in[i].va);
            q->in[i] = q->in[--q->nin];
            return;
        }
}

/* Peer p asked: open its allocation, answer. The answer lane to p is free: p asks
 * again only once it has taken the previous answer. */
static void serve_ask(ccl_comm_t *comm, GpuComm *g, int p)
{
    IpcPeer *q = &g->ipc->peer[p];
    IpcAsk ask;
    if (ccl__note_take(comm->notes, p, IPC_LANE_ASK, &ask, sizeof ask) != 1)
        return;
    if (ask.retire)
        drop_import(q, ask.retire);
    IpcAnswer a = {.key = ask.key, .result = CUDA_ERROR_TOO_MANY_PEERS};
    CUdeviceptr va = 0;
    if (q->nin < IPC_EXPORTS &&
        (a.result = ccl__cu.IpcOpenMemHandle(&va, ask.handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) == CUDA_SUCCESS) {
        q->in[q->nin++] = (IpcImport){.key = ask.key, .va = va};
        a.word = (uint64_t)va - (uint64_t)(uintptr_t)comm->heap_base[p];
    }
    if (ccl__note_send(comm->notes, p, IPC_LANE_ANSWER, &a, sizeof a) != 1)
        CCL__TRACE(comm->rank, "point-to-point IPC: the answer to rank %d's allocation %u was not sent", p, ask.key);
    CCL__TRACE(comm->rank, "point-to-point IPC: rank %d's allocation %u (%llu bytes) %s%s", p, ask.key,
               (unsigned long long)ask.bytes, a.result == CUDA_SUCCESS ? "mapped" : "not mapped: ",
               a.result == CUDA_SUCCESS ? "" : ccl__cuda_error((CUresult)a.result));
}

/* Peer p answered this rank's request. */
static void take_answer(ccl_comm_t *comm, GpuComm *g, int p)
{
    IpcPeer *q = &g->ipc->peer[p];
    IpcAnswer a;
    if (ccl__note_take(comm->notes, p, IPC_LANE_ANSWER, &a, sizeof a) != 1)
        return;
    q->asking = 0;
    for (int i = 0; i < q->nout; i++)
        if (q->out[i].key == a.key && q->out[i].state == EXPORT_ASKED) {
            q->out[i].state = a.result == CUDA_SUCCESS && a.word != CCL_P2P_NO_DIRECT ? EXPORT_MAPPED : EXPORT_REFUSED;
            q->out[i].word = a.word;
            if (q->out[i].state == EXPORT_REFUSED)
                CCL__TRACE(comm->rank, "point-to-point IPC: rank %d cannot map this rank's allocation %u (%s): its "
                           "messages to it go through the slots", p, a.key, ccl__cuda_error((CUresult)a.result));
        }
}

void ccl__gpu_ipc_serve(ccl_comm_t *comm, GpuComm *g)
{
    if (!g->ipc || !comm->notes)
        return;
    for (int p = 0; p < comm->nranks; p++)
        if (p != comm->rank) {
            take_answer(comm, g, p);
            serve_ask(comm, g, p);
        }
}

/* Asks peer p to map the allocation [base, base + bytes) (buffer id), in entry `slot`
 * of q's table (replacing what is there, or a new one at its end). */
static void ask_export(ccl_comm_t *comm, IpcPeer *q, int p, int slot, CUdeviceptr base, size_t bytes,
                       unsigned long long id)
{
    IpcAsk ask = {.key = q->keys + 1, .bytes = bytes};
    if (slot < q->nout)
        ask.retire = q->out[slot].state == EXPORT_MAPPED ? q->out[slot].key : 0;
    IpcExport e = {.buffer_id = id, .base = base, .key = ask.key, .state = EXPORT_ASKED};
    if (ccl__cu.IpcGetMemHandle(&ask.handle, base) != CUDA_SUCCESS)
        e.state = EXPORT_REFUSED;
    else if (ccl__note_send(comm->notes, p, IPC_LANE_ASK, &ask, sizeof ask) != 1)
        return;
    else
        q->keys++, q->asking = 1;
    q->out[slot] = e;
    if (slot == q->nout)
        q->nout++;
}

uint64_t ccl__gpu_ipc_direct(ccl_comm_t *comm, GpuComm *g, int p, const void *buf, size_t bytes)
{
    GpuIpc *x = g->ipc;
    if (!x || !comm->notes || p == comm->rank || g->pids[p] == g->pids[comm->rank])
        return CCL_P2P_NO_DIRECT;
    /* The allocation (the IPC handle maps all of it) and whether IPC can export it. */
    CUdeviceptr at = (CUdeviceptr)(uintptr_t)buf, base = 0;
    size_t size = 0;
    unsigned long long id = 0;
    unsigned int capable = 0; /* a boolean, however many bytes the driver writes */
    CUpointer_attribute what[] = {CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
    void *into[] = {&id, &capable};
    if (ccl__cu.PointerGetAttributes(2, what, into, at) != CUDA_SUCCESS || !capable ||
        ccl__cu.MemGetAddressRange(&base, &size, at) != CUDA_SUCCESS || at + bytes > base + size)
        return CCL_P2P_NO_DIRECT;
    IpcPeer *q = &x->peer[p];
    int slot = 0;
    for (; slot < q->nout && q->out[slot].base != base; slot++) {}
    if (slot < q->nout && q->out[slot].buffer_id == id) {
        const IpcExport *e = &q->out[slot];
        return e->state == EXPORT_MAPPED ? e->word + (at - base) : CCL_P2P_NO_DIRECT;
    }
    /* New here (or freed and made again at this address): ask, unless a request is out,
     * the replaced one is still being answered, or the table is full. */
    if (!q->asking && (slot < q->nout ? q->out[slot].state != EXPORT_ASKED : q->nout < IPC_EXPORTS))
        ask_export(comm, q, p, slot, base, size, id);
    return CCL_P2P_NO_DIRECT;
}

int ccl__gpu_ipc_mapped(const ccl_comm_t *comm, int p, const void *buf)
{
    const GpuComm *g = comm->be_comm;
    unsigned long long id = 0;
    if (buf && ccl__cu.PointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)(uintptr_t)buf) !=
                   CUDA_SUCCESS)
        return 0;
    int n = 0;
    for (int i = 0; g && g->ipc && p >= 0 && p < g->ipc->nranks && i < g->ipc->peer[p].nout; i++) {
        const IpcExport *e = &g->ipc->peer[p].out[i];
        n += e->state == EXPORT_MAPPED && (!buf || e->buffer_id == id);
    }
    return n;
}
