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

const char *ccl__p2p_describe(const CclP2pOp *op, uint64_t calls, char *buf, size_t len)
{
    int send = op->kind == CCL__P2P_SEND;
    CCL__FMT(buf, len, "%s (call %d of %llu of its group) %s rank %d, %zu %s", send ? "ccl_send" : "ccl_recv",
             op->index, (unsigned long long)calls, send ? "to" : "from", op->peer, op->count,
             ccl_dtype_name(op->dtype));
    return buf;
}

void ccl__p2p_mismatch_error(ccl_comm_t *comm, const CclP2pOp *op, uint64_t calls, const CclP2pSlot *found)
{
    char mine[160], theirs[160];
    CclP2pOp sent = {.kind = CCL__P2P_SEND, .peer = comm->rank, .count = (size_t)found->count,
                     .dtype = found->dtype < CCL_NUM_DTYPES ? (ccl_dtype_t)found->dtype : CCL_NUM_DTYPES,
                     .index = (int)found->index};
    ccl__set_async_error(comm, CCL_ERR_INVALID_ARGUMENT,
                         "rank %d: %s meets rank %d's %s (message %llu from rank %d to rank %d): a matched send and "
                         "recv must have the same count and dtype; nothing was received", comm->rank,
                         ccl__p2p_describe(op, calls, mine, sizeof mine), op->peer,
                         ccl__p2p_describe(&sent, found->group_calls, theirs, sizeof theirs),
                         (unsigned long long)found->nth + 1, op->peer, comm->rank);
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
                         send ? "was not received" : "received nothing", comm->timeout_ms, p,
                         send ? "ccl_recv" : "ccl_send", send ? "emptied" : "filled", (unsigned long long)seen,
                         send ? "ends" : "starts", (unsigned long long)slot);
}
