/* cpu/p2p.c: one group of ccl_send and ccl_recv calls, run by the comm's worker.
 *
 * Every call of the group advances in turn, a slot at a time, until all are done: so
 * no call waits for another of its group, only for its partner on the other rank (see
 * runtime/src/p2p.c for why a group cannot deadlock). A message of B bytes takes
 * max(1, ceil(B / payload)) slots of its channel, in order; a zero-size one takes one
 * slot, its header alone, so that it is matched and checked like any other.
 *   send: fill the channel's next slot once the receiver has emptied the slot's last
 *         use (filled - emptied < CCL__P2P_SLOTS), header then payload, then raise the
 *         receiver's semaphore [rank] (release); done when the receiver has emptied
 *         every slot of the message: a send completes when its data has arrived.
 *   recv: once the sender's semaphore says the next slot is full (acquire), check its
 *         header against the recv (message number, count, dtype) before taking a byte,
 *         copy the payload out, then raise the sender's semaphore [N + rank].
 * Calls on one channel take their slots in call order. A wait with no progress at all
 * is bounded by the timeout and names the first call still waiting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/p2p.h"
#include "cpu/waits.h"

typedef struct {
    const CclP2pOp *op;
    size_t bytes;
    uint64_t first, slots;           /* its slots on its channel: [first, first + slots) */
    uint64_t next;                   /* slots of it filled (send) or emptied (recv) */
} Call;

static _Atomic uint64_t *sem(ccl_comm_t *comm, int rank, int k)
{
    return (_Atomic uint64_t *)(comm->heap_base[rank] + comm->p2p_sem_off) + k;
}

static char *slot_at(ccl_comm_t *comm, int holder, int sender, uint64_t g)
{
    return comm->heap_base[holder] + ccl__p2p_slot_off(comm, sender, (int)(g % CCL__P2P_SLOTS));
}

/* One step of a send: 1 when it filled a slot or completed. */
static int send_step(ccl_comm_t *comm, CpuP2p *st, Call *c, int ncalls, int *done)
{
    int me = comm->rank, p = c->op->peer, N = comm->nranks;
    size_t payload = comm->p2p_slot_bytes - CCL__P2P_HEADER;
    uint64_t emptied = atomic_load_explicit(sem(comm, me, N + p), memory_order_acquire);
    if (c->next == c->slots) {
        *done = emptied >= c->first + c->slots;
        return *done;
    }
    uint64_t g = c->first + c->next;
    if (st->filled[p] != g || g - emptied >= CCL__P2P_SLOTS)
        return 0;
    char *slot = slot_at(comm, p, me, g);
    CclP2pSlot h = {.nth = c->op->nth, .count = c->op->count, .dtype = (uint64_t)c->op->dtype,
                    .index = (uint64_t)c->op->index, .group_calls = (uint64_t)ncalls};
    memcpy(slot, &h, sizeof h);
    size_t at = (size_t)c->next * payload, len = c->bytes - at < payload ? c->bytes - at : payload;
    if (len)
        memcpy(slot + CCL__P2P_HEADER, (const char *)c->op->buf + at, len);
    c->next++;
    st->filled[p]++;
    atomic_store_explicit(sem(comm, p, me), st->filled[p], memory_order_release);
    return 1;
}

/* One step of a recv: 1 when it emptied a slot; -1 when the slot's header does not
 * match the recv (reported, every rank stopped). */
static int recv_step(ccl_comm_t *comm, CpuP2p *st, Call *c, int ncalls, int *done)
{
    int me = comm->rank, p = c->op->peer, N = comm->nranks;
    size_t payload = comm->p2p_slot_bytes - CCL__P2P_HEADER;
    uint64_t g = c->first + c->next;
    if (st->emptied[p] != g || atomic_load_explicit(sem(comm, me, p), memory_order_acquire) <= g)
        return 0;
    const char *slot = slot_at(comm, me, p, g);
    CclP2pSlot h;
    memcpy(&h, slot, sizeof h);
    if (h.nth != c->op->nth || h.count != c->op->count || h.dtype != (uint64_t)c->op->dtype) {
        ccl__p2p_mismatch_error(comm, c->op, (uint64_t)ncalls, &h);
        ccl__cpu_abort_all(comm);
        return -1;
    }
    size_t at = (size_t)c->next * payload, len = c->bytes - at < payload ? c->bytes - at : payload;
    if (len)
        memcpy((char *)c->op->buf + at, slot + CCL__P2P_HEADER, len);
    c->next++;
    st->emptied[p]++;
    atomic_store_explicit(sem(comm, p, N + me), st->emptied[p], memory_order_release);
    *done = c->next == c->slots;
    return 1;
}

/* Why call c is still waiting, for the timeout's message. */
static void report_stuck(ccl_comm_t *comm, const Call *c, int ncalls)
{
    int me = comm->rank, p = c->op->peer, N = comm->nranks, send = c->op->kind == CCL__P2P_SEND;
    ccl__p2p_timeout_error(comm, c->op, (uint64_t)ncalls, atomic_load(sem(comm, me, send ? N + p : p)),
                           send ? c->first + c->slots : c->first + 1);
}

static int state_init(ccl_comm_t *comm, CpuP2p *st)
{
    if (st->filled)
        return 0;
    st->filled = calloc(2 * (size_t)comm->nranks, sizeof *st->filled);
    if (!st->filled)
        return -1;
    st->emptied = st->filled + comm->nranks;
    return 0;
}

void ccl__cpu_p2p_run(ccl_comm_t *comm, CpuP2p *st, const CclP2pOp *ops, int n)
{
    int me = comm->rank;
    _Atomic uint64_t *abort_flag = &ccl__cpu_header(comm, me)->abort;
    uint64_t ab = atomic_load(abort_flag);
    char what[160], who[96];
    if (ab) {
        ccl__set_async_error(comm, CCL_ERR_PEER_FAILED, "rank %d: a group of %d point-to-point call%s skipped: %s "
                             "earlier", me, n, n > 1 ? "s" : "", ccl__cpu_culprit(comm, ab, who, sizeof who));
        return;
    }
    Call *calls = calloc((size_t)n, sizeof *calls);
    if (!calls || state_init(comm, st) != 0) {
        free(calls);
        ccl__set_async_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory running a group of %d "
                             "point-to-point calls", me, n);
        ccl__cpu_abort_all(comm);
        return;
    }
    /* Each call's slots on its channel, in call order from where the channel stands. */
    uint64_t *fill_at = calloc(2 * (size_t)comm->nranks, sizeof *fill_at);
    if (!fill_at) {
        free(calls);
        ccl__set_async_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory", me);
        ccl__cpu_abort_all(comm);
        return;
    }
    uint64_t *empty_at = fill_at + comm->nranks;
    memcpy(fill_at, st->filled, sizeof *fill_at * (size_t)comm->nranks);
    memcpy(empty_at, st->emptied, sizeof *empty_at * (size_t)comm->nranks);
    size_t payload = comm->p2p_slot_bytes - CCL__P2P_HEADER;
    for (int i = 0; i < n; i++) {
        Call *c = &calls[i];
        c->op = &ops[i];
        c->bytes = ops[i].count * ccl_dtype_size(ops[i].dtype);
        c->slots = c->bytes ? (c->bytes + payload - 1) / payload : 1;
        uint64_t *at = ops[i].kind == CCL__P2P_SEND ? &fill_at[ops[i].peer] : &empty_at[ops[i].peer];
        c->first = *at;
        *at += c->slots;
    }
    free(fill_at);

    int left = n;
    unsigned char *done = calloc((size_t)n, 1);
    CpuSpinClock clock = {0};
    for (unsigned it = 0; done && left > 0;) {
        int moved = 0;
        for (int i = 0; i < n; i++) {
            if (done[i])
                continue;
            int finished = 0;
            int r = calls[i].op->kind == CCL__P2P_SEND ? send_step(comm, st, &calls[i], n, &finished)
                                                       : recv_step(comm, st, &calls[i], n, &finished);
            if (r < 0)
                goto out;
            moved |= r;
            if (finished) {
                done[i] = 1;
                left--;
            }
        }
        if (moved) {
            it = 0;
            clock = (CpuSpinClock){0};
            continue;
        }
        int first = 0;
        while (done[first])
            first++;
        ab = atomic_load_explicit(abort_flag, memory_order_relaxed);
        if (ab) {
            ccl__set_async_error(comm, CCL_ERR_PEER_FAILED, "rank %d: %s stopped: %s", me,
                                 ccl__p2p_describe(calls[first].op, (uint64_t)n, what, sizeof what),
                                 ccl__cpu_culprit(comm, ab, who, sizeof who));
            goto out;
        }
        if ((it & 63) == 63 && ccl__cpu_clock_turn(comm, &clock)) {
            report_stuck(comm, &calls[first], n);
            ccl__cpu_abort_all(comm);
            goto out;
        }
        ccl__backoff(it++);
    }
    if (!done) {
        ccl__set_async_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory", me);
        ccl__cpu_abort_all(comm);
    }
out:
    free(done);
    free(calls);
}

void ccl__cpu_p2p_free(CpuP2p *st)
{
    free(st->filled);
    st->filled = st->emptied = NULL;
}
