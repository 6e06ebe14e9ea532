/* channels.c: the point-to-point channels (docs/internals.md, "Point-to-point"), as both
 * sides of the backend interface see them (backend.h): the heap region and semaphores
 * every comm reserves for them when it starts, at the same offsets on every rank, and
 * what a backend says when a call fails, so that every backend says it alike: a
 * receiver's slot header that does not match its call, or a call whose partner never
 * came. p2p.c numbers the messages; the backends move them. Calls only the base. */
#include <stdlib.h>

#include "backend.h"

void ccl__p2p_reserve(ccl_comm_t *comm)
{
    int N = comm->nranks;
    comm->p2p_off = SIZE_MAX;
    comm->p2p_sent = calloc(2 * (size_t)N, sizeof *comm->p2p_sent);
    if (!comm->p2p_sent)
        return;
    comm->p2p_recvd = comm->p2p_sent + N;
    /* A sixteenth of the heap, or a sixteenth of a 1 GiB heap where that is at most a
     * quarter of this one (the default 256 MiB keeps the channels the 1 GiB default
     * gave); slots of up to 4 MiB: a backend pipelines a channel's messages through
     * them, and on NVLink the rate of ordinary (unreachable) buffers grows with the bytes
     * in flight up to a few MiB a peer (docs/perf/x2-head). */
    size_t data = comm->heap_bytes - CCL__HEAP_DATA, share = data / 16;
    size_t most = (((size_t)1 << 30) - CCL__HEAP_DATA) / 16;
    if (share < most && comm->heap_bytes / 4 >= most)
        share = most;
    size_t budget = share / (size_t)N / CCL__P2P_SLOTS;
    size_t slot = budget < ((size_t)4 << 20) ? budget : (size_t)4 << 20;
    slot = slot / CCL__HEAP_ALIGN * CCL__HEAP_ALIGN;
    if (slot < 4 * CCL__P2P_HEADER)
        return;
    size_t off, sem_off;
    if (ccl__heap_alloc(&comm->data, slot * CCL__P2P_SLOTS * (size_t)N, 0, &off) != 0)
        return;
    if (ccl__heap_alloc(&comm->sems, ccl__sem_block_bytes(10 * N + 1), 0, &sem_off) != 0) {
        ccl__heap_free(&comm->data, off);
        return;
    }
    comm->p2p_off = off;
    comm->p2p_sem_off = sem_off;
    comm->p2p_slot_bytes = slot;
}

const char *ccl__p2p_vname(int vtag)
{
    return vtag == CCL__P2P_VTAG_ALLGATHERV ? "ccl_all_gather_v"
           : vtag == CCL__P2P_VTAG_ALLTOALLV ? "ccl_all_to_all_v"
           : vtag == CCL__P2P_VTAG_ALLTOALL  ? "ccl_all_to_all"
                                             : NULL;
}

/* The partner call a message waits for: the same v-collective, or the other half of a
 * send/recv pair. */
static const char *partner_name(const CclP2pOp *op)
{
    return op->vtag ? ccl__p2p_vname(op->vtag) : op->kind == CCL__P2P_SEND ? "ccl_recv" : "ccl_send";
}

const char *ccl__p2p_describe(const CclP2pOp *op, uint64_t calls, char *buf, size_t len)
{
    int send = op->kind == CCL__P2P_SEND;
    const char *v = ccl__p2p_vname(op->vtag);
    char seq[48] = "";
    if (v && op->vseq)
        CCL__FMT(seq, sizeof seq, " (v call %llu on this comm)", (unsigned long long)op->vseq);
    if (v)
        CCL__FMT(buf, len, "%s%s: its segment %s rank %d, %zu %s", v, seq, send ? "to" : "from", op->peer,
                 op->count, op->dtype < CCL_NUM_DTYPES ? ccl_dtype_name(op->dtype) : "?");
    else
        CCL__FMT(buf, len, "%s (call %d of %llu of its group) %s rank %d, %zu %s", send ? "ccl_send" : "ccl_recv",
                 op->index, (unsigned long long)calls, send ? "to" : "from", op->peer, op->count,
                 op->dtype < CCL_NUM_DTYPES ? ccl_dtype_name(op->dtype) : "?");
    return buf;
}

void ccl__p2p_mismatch_error(ccl_comm_t *comm, const CclP2pOp *op, uint64_t calls, const CclP2pSlot *found)
{
    char mine[160], theirs[160];
    uint64_t fdtype = found->dtype & 0xff, ftag = found->dtype >> 8;
    CclP2pOp sent = {.kind = CCL__P2P_SEND, .peer = comm->rank, .count = (size_t)found->count,
                     .dtype = fdtype < CCL_NUM_DTYPES ? (ccl_dtype_t)fdtype : CCL_NUM_DTYPES,
                     .index = (int)found->index, .vtag = ftag <= CCL__P2P_VTAG_ALLTOALL ? (int)ftag : 0};
    /* Both sides in the same exchange with the same dtype: only the count differs, which
     * alltoall names as counts that differ, the v-collectives as on one node (vlayout.c). */
    if (op->vtag && ftag == (uint64_t)op->vtag && fdtype == (uint64_t)op->dtype) {
        if (op->vtag == CCL__P2P_VTAG_ALLTOALL) {
            ccl__set_async_error(comm, CCL_ERR_INVALID_ARGUMENT,
                                 "rank %d, ccl_all_to_all (call %llu as point-to-point on this comm): rank %d passes "
                                 "count %llu, rank %d count %zu; every rank must pass the same count; nothing of rank "
                                 "%d's block was received", comm->rank, (unsigned long long)op->vseq, op->peer,
                                 (unsigned long long)found->count, comm->rank, op->count, op->peer);
            return;
        }
        char err[CCL__ERR_LEN];
        ccl__v_count_message(err, sizeof err,
                             op->vtag == CCL__P2P_VTAG_ALLTOALLV ? COLL_ALLTOALLV : COLL_ALLGATHERV, comm->rank,
                             op->vseq, comm->rank, op->peer, (unsigned long long)found->count,
                             (unsigned long long)op->count, ccl__p2p_vname(op->vtag));
        ccl__set_async_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s; nothing of that segment was received", err);
        return;
    }
    ccl__set_async_error(comm, CCL_ERR_INVALID_ARGUMENT,
                         "rank %d: %s meets rank %d's %s (message %llu from rank %d to rank %d): %s; nothing was "
                         "received", comm->rank, ccl__p2p_describe(op, calls, mine, sizeof mine), op->peer,
                         ccl__p2p_describe(&sent, found->group_calls, theirs, sizeof theirs),
                         (unsigned long long)found->nth + 1, op->peer, comm->rank,
                         op->vtag || sent.vtag ? "the two ranks are not in the same call, or disagree on its dtype "
                                                 "(every rank must make the same collective calls in the same order)"
                                               : "a matched send and recv must have the same count and dtype");
}

void ccl__p2p_timeout_error(ccl_comm_t *comm, const CclP2pOp *op, uint64_t calls, uint64_t seen, uint64_t slot)
{
    char what[160];
    int me = comm->rank, p = op->peer, send = op->kind == CCL__P2P_SEND;
    ccl__p2p_describe(op, calls, what, sizeof what);
    ccl__set_async_error(comm, CCL_ERR_TIMEOUT,
                         "timeout: rank %d: %s (message %llu from rank %d to rank %d) %s within %d ms: rank %d has "
                         "made no matching %s (it %s %llu of this channel's slots; this message %s at slot %llu)", me,
                         what, (unsigned long long)op->nth + 1, send ? me : p, send ? p : me,
                         send ? "was not received" : "received nothing", comm->timeout_ms, p, partner_name(op),
                         send ? "emptied" : "filled", (unsigned long long)seen, send ? "ends" : "starts",
                         (unsigned long long)slot);
}
