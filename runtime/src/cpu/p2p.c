/* cpu/p2p.c: one group of ccl_send and ccl_recv calls, run by the comm's worker.
 *
 * Every channel of the group (sends to one peer, recvs from one peer) advances in turn,
 * as far as it can, until all are done: so no call waits for another of its group, only
 * for its partner on the other rank (see runtime/src/p2p.c for why a group cannot
 * deadlock). Since a channel's slots are taken in call order, only its first unfinished
 * calls can move, so a round costs the channels, not the calls: a group's time is
 * linear in its messages (it was quadratic: 131072 messages took minutes). A message of B bytes takes
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
 * is bounded by the timeout and names the first call still waiting.
 *
 * A peer on another node (no heap mapped here) has no slots: its channels go through the
 * inter-node proxy (cpu/net.h), in the same round of the same loop, so a group mixing
 * both kinds still progresses all its calls at once.
 *   send: announce each message in call order, within CCL__NET_CREDITS of the last one
 *         the peer's recvs completed (the credits bound what the receiving proxy keeps).
 *         Small (at most CCL__NET_EAGER_BYTES): the whole message, copied, and the send is
 *         done at once, before its recv is posted if it comes late (as MPI's eager sends).
 *         Large: its header alone (RTS); once the receiver answers (CTS), the data, from
 *         the caller's buffer as a net put's piece is, and it is done once the receiver
 *         acknowledged every piece, as a flush is.
 *   recv: take each message in call order once its announcement has arrived; compare
 *         its header with the call (message number, count, dtype) before a byte lands, as
 *         the slots do: a mismatch fails the recv naming both calls, its buffer untouched.
 *         Small: copy it into the buffer, done. Large: register the buffer and answer
 *         with the CTS; done once the proxy has received the data into it. The recvs
 *         completed so far return the sender's credits.
 * A sender whose message does not match stops when the receiver does (the receiver alone
 * reports the mismatch, as on one node); a small send that was done already leaves the
 * sender to find the comm stopped at its next call. While no call of the group can move,
 * the worker runs the proxy's sweep itself (ccl__cpu_net_progress), so that its messages
 * leave and its peers' arrive without waiting for the proxy thread to be scheduled. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/net.h"
#include "cpu/p2p.h"
#include "cpu/waits.h"

typedef struct {
    const CclP2pOp *op;
    size_t bytes;
    uint64_t first, slots;           /* its slots on its channel: [first, first + slots) */
    uint64_t next;                   /* slots of it filled (send) or emptied (recv) */
    uint64_t mark;                   /* a large message to another node: a send is done once
                                        acked reaches it */
    int eager;                       /* a message to or from another node that went whole */
    int sent;                        /* a large send to another node whose data went out */
} Call;

static _Atomic uint64_t *sem(ccl_comm_t *comm, int rank, int k)
{
    return (_Atomic uint64_t *)(comm->heap_base[rank] + comm->p2p_sem_off) + k;
}

static char *slot_at(ccl_comm_t *comm, int holder, int sender, uint64_t g)
{
    return comm->heap_base[holder] + ccl__p2p_slot_off(comm, sender, (int)(g % CCL__P2P_SLOTS));
}

/* The header a message of op carries (in a slot, or in the proxy's CTS and P2P), op
 * being one of its group's ncalls calls. */
static CclP2pSlot header_of(const CclP2pOp *op, int ncalls)
{
    return (CclP2pSlot){.nth = op->nth, .count = op->count, .dtype = ccl__p2p_wire_dtype(op),
                        .index = (uint64_t)op->index, .group_calls = (uint64_t)ncalls};
}

/* A send fills the slots of its channel in call order: it may fill slot g only when it
 * is the channel's next (filled[p] == g) and the receiver has emptied the slot's last
 * use. 1 when it filled one, else 0. */
static int send_fill(ccl_comm_t *comm, CpuP2p *st, Call *c, int ncalls, uint64_t emptied)
{
    int me = comm->rank, p = c->op->peer;
    size_t payload = comm->p2p_slot_bytes - CCL__P2P_HEADER;
    uint64_t g = c->first + c->next;
    if (c->next == c->slots || st->filled[p] != g || g - emptied >= CCL__P2P_SLOTS)
        return 0;
    char *slot = slot_at(comm, p, me, g);
    CclP2pSlot h = header_of(c->op, ncalls);
    memcpy(slot, &h, sizeof h);
    size_t at = (size_t)c->next * payload, len = c->bytes - at < payload ? c->bytes - at : payload;
    if (len)
        memcpy(slot + CCL__P2P_HEADER, (const char *)c->op->buf + at, len);
    c->next++;
    st->filled[p]++;
    atomic_store_explicit(sem(comm, p, me), st->filled[p], memory_order_release);
    return 1;
}

/* One slot of a recv: 1 when it emptied one; 0 when the next slot is not full yet; -1
 * when the slot's header does not match the recv (reported, every rank stopped). */
static int recv_step(ccl_comm_t *comm, CpuP2p *st, Call *c, int ncalls)
{
    int me = comm->rank, p = c->op->peer, N = comm->nranks;
    size_t payload = comm->p2p_slot_bytes - CCL__P2P_HEADER;
    uint64_t g = c->first + c->next;
    if (st->emptied[p] != g || atomic_load_explicit(sem(comm, me, p), memory_order_acquire) <= g)
        return 0;
    const char *slot = slot_at(comm, me, p, g);
    CclP2pSlot h;
    memcpy(&h, slot, sizeof h);
    if (h.nth != c->op->nth || h.count != c->op->count || h.dtype != ccl__p2p_wire_dtype(c->op)) {
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
    return 1;
}

/* Why call c is still waiting, for the timeout's message. A peer of another node has
 * no slots: the message counts what the proxy heard from it instead. */
static void report_stuck(ccl_comm_t *comm, CpuNet *net, const Call *c, int ncalls)
{
    int me = comm->rank, p = c->op->peer, N = comm->nranks, send = c->op->kind == CCL__P2P_SEND;
    if (comm->heap_base[p]) {
        ccl__p2p_timeout_error(comm, c->op, (uint64_t)ncalls, atomic_load(sem(comm, me, send ? N + p : p)),
                               send ? c->first + c->slots : c->first + 1);
        return;
    }
    char what[160], how[200];
    ccl__p2p_describe(c->op, (uint64_t)ncalls, what, sizeof what);
    const char *v = ccl__p2p_vname(c->op->vtag);   /* a v-collective's segment: its partner is the same call */
    if (send && c->sent)
        CCL__FMT(how, sizeof how, "its data went out, but rank %d on node %d did not acknowledge it", p,
                 p / comm->local);
    else if (send)
        CCL__FMT(how, sizeof how, "rank %d on node %d has made no matching %s (its recvs took %llu of this rank's "
                 "messages to it)", p, p / comm->local, v ? v : "ccl_recv",
                 (unsigned long long)ccl__cpu_net_p2p_taken(net, p));
    else
        CCL__FMT(how, sizeof how, "rank %d on node %d has made no matching %s (%llu of its messages to this rank "
                 "arrived)", p, p / comm->local, v ? v : "ccl_send", (unsigned long long)ccl__cpu_net_p2p_arrived(net, p));
    ccl__set_async_error(comm, CCL_ERR_TIMEOUT, "timeout: rank %d: %s (message %llu from rank %d to rank %d) %s "
                         "within %d ms: %s", me, what, (unsigned long long)c->op->nth + 1, send ? me : p,
                         send ? p : me, send ? "was not received" : "received nothing", comm->timeout_ms, how);
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

/* One channel of the group: the calls on it (indices into the group's calls, in call
 * order: only its first unfinished ones can move, because a channel's slots are taken
 * in call order), and how far they are. A send channel's calls are filled up to `fill`
 * and complete (the receiver emptied every slot) up to `done`; a recv channel's are
 * done up to `done` (`fill` unused). Completion is in order too: emptied counts rise. */
typedef struct {
    int *calls, ncalls;
    int fill, done;
    int send, peer;
    int post;                        /* another node's: calls sent (large) or taken (the
                                        function below says) */
} Channel;

/* channel_step for a peer of another node (the file's head says how): the same
 * returns. A send channel's calls are announced up to `fill`, their data sent (large ones)
 * up to `post`, done up to `done`; a recv channel's taken up to `post`, done up to `done`. */
static int net_channel_step(ccl_comm_t *comm, CpuNet *net, Call *calls, int ncalls, Channel *ch)
{
    int moved = 0, p = ch->peer;
    if (ch->send) {
        uint64_t acked = atomic_load_explicit(ccl__cpu_net_acked(net, p), memory_order_acquire);
        uint64_t taken = ccl__cpu_net_p2p_taken(net, p);
        for (; ch->fill < ch->ncalls; ch->fill++, moved++) {
            Call *c = &calls[ch->calls[ch->fill]];
            if (c->op->nth >= taken + CCL__NET_CREDITS)
                break;               /* no credit: the peer's recvs must complete earlier ones */
            CclP2pSlot h = header_of(c->op, ncalls);
            c->eager = c->bytes <= CCL__NET_EAGER_BYTES;
            if (ccl__cpu_net_p2p_announce(net, p, &h, c->op->buf, c->bytes) != 0)
                goto failed;
        }
        for (; ch->post < ch->fill; ch->post++, moved++) {
            Call *c = &calls[ch->calls[ch->post]];
            if (c->eager)
                continue;
            if (!ccl__cpu_net_p2p_cleared(net, p, c->op->nth))
                break;
            CclP2pSlot h = header_of(c->op, ncalls);
            if (ccl__cpu_net_p2p_data(net, p, &h, c->op->buf, c->bytes, &c->mark) != 0)
                goto failed;
            c->sent = 1;
        }
        for (; ch->done < ch->post; ch->done++, moved++) {
            const Call *c = &calls[ch->calls[ch->done]];
            if (!c->eager && acked < c->mark)
                break;
        }
        return moved;
    }
    for (; ch->post < ch->ncalls; ch->post++, moved++) {
        Call *c = &calls[ch->calls[ch->post]];
        CclP2pSlot found;
        int kind = ccl__cpu_net_p2p_peek(net, p, c->op->nth, &found);
        if (!kind)
            break;
        if (found.count != c->op->count || found.dtype != ccl__p2p_wire_dtype(c->op)) {
            ccl__p2p_mismatch_error(comm, c->op, (uint64_t)ncalls, &found);
            goto failed;
        }
        c->eager = kind == 1;
        if (ccl__cpu_net_p2p_take(net, p, c->op->nth, c->op->buf, c->bytes) != 0)
            goto failed;
    }
    int before = ch->done;
    for (; ch->done < ch->post; ch->done++, moved++) {
        const Call *c = &calls[ch->calls[ch->done]];
        if (!c->eager && !ccl__cpu_net_p2p_landed(net, p, c->op->nth))
            break;
    }
    if (ch->done != before)
        ccl__cpu_net_p2p_complete(net, p, calls[ch->calls[ch->done - 1]].op->nth + 1);
    return moved;
failed:
    ccl__cpu_abort_all(comm);
    return -1;
}

/* Moves channel ch as far as it can now: the number of slots moved or calls completed
 * (0: none), or -1 after a mismatch was reported. */
static int channel_step(ccl_comm_t *comm, CpuP2p *st, Call *calls, int ncalls, Channel *ch)
{
    int moved = 0;
    if (ch->send) {
        uint64_t emptied = atomic_load_explicit(sem(comm, comm->rank, comm->nranks + ch->peer), memory_order_acquire);
        while (ch->fill < ch->ncalls) {
            Call *c = &calls[ch->calls[ch->fill]];
            while (send_fill(comm, st, c, ncalls, emptied))
                moved++;
            if (c->next < c->slots)
                break;
            ch->fill++;
        }
        while (ch->done < ch->fill) {
            const Call *c = &calls[ch->calls[ch->done]];
            if (emptied < c->first + c->slots)
                break;
            ch->done++;
            moved++;
        }
        return moved;
    }
    while (ch->done < ch->ncalls) {
        Call *c = &calls[ch->calls[ch->done]];
        int r = 0;
        while (c->next < c->slots && (r = recv_step(comm, st, c, ncalls)) > 0)
            moved++;
        if (r < 0)
            return -1;
        if (c->next < c->slots)
            break;
        ch->done++;
    }
    return moved;
}

/* The first call of the group (in call order) not done yet: the one a stop names. */
static const Call *first_waiting(const Call *calls, const Channel *chans, int nch)
{
    int first = -1;
    for (int k = 0; k < nch; k++)
        if (chans[k].done < chans[k].ncalls && (first < 0 || chans[k].calls[chans[k].done] < first))
            first = chans[k].calls[chans[k].done];
    return &calls[first < 0 ? 0 : first];
}

void ccl__cpu_p2p_run(ccl_comm_t *comm, CpuNet *net, CpuP2p *st, const CclP2pOp *ops, int n)
{
    int me = comm->rank, N = comm->nranks;
    _Atomic uint64_t *abort_flag = &ccl__cpu_header(comm, me)->abort;
    uint64_t ab = atomic_load(abort_flag);
    char what[160], who[96];
    if (ab) {
        ccl__set_async_error(comm, CCL_ERR_PEER_FAILED, "rank %d: a group of %d point-to-point call%s skipped: %s "
                             "earlier", me, n, n > 1 ? "s" : "", ccl__cpu_culprit(comm, ab, who, sizeof who));
        return;
    }
    /* Channel k < N: sends to rank k; N + k: recvs from rank k. */
    Call *calls = calloc((size_t)n, sizeof *calls);
    int *order = malloc(sizeof *order * (size_t)n), *count = calloc(2 * (size_t)N + 1, sizeof *count);
    uint64_t *at = calloc(2 * (size_t)N, sizeof *at);
    Channel *chans = calloc(2 * (size_t)N, sizeof *chans);
    if (!calls || !order || !count || !at || !chans || state_init(comm, st) != 0) {
        ccl__set_async_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory running a group of %d "
                             "point-to-point calls", me, n);
        ccl__cpu_abort_all(comm);
        goto out;
    }
    /* Each call's slots on its channel, in call order from where the channel stands. */
    memcpy(at, st->filled, sizeof *at * (size_t)N);
    memcpy(at + N, st->emptied, sizeof *at * (size_t)N);
    size_t payload = comm->p2p_slot_bytes - CCL__P2P_HEADER;
    for (int i = 0; i < n; i++) {
        Call *c = &calls[i];
        int k = (ops[i].kind == CCL__P2P_SEND ? 0 : N) + ops[i].peer;
        c->op = &ops[i];
        c->bytes = ops[i].count * ccl_dtype_size(ops[i].dtype);
        c->slots = c->bytes ? (c->bytes + payload - 1) / payload : 1;
        c->first = at[k];
        at[k] += c->slots;
        count[k + 1]++;
    }
    /* The calls of each channel, in call order (a counting sort), and the channels that
     * have any. */
    for (int k = 0; k < 2 * N; k++)
        count[k + 1] += count[k];
    int nch = 0;
    for (int k = 0; k < 2 * N; k++)
        if (count[k + 1] > count[k])
            chans[nch++] = (Channel){.calls = order + count[k], .ncalls = count[k + 1] - count[k], .send = k < N,
                                     .peer = k % N};
    for (int i = 0; i < n; i++)
        order[count[(ops[i].kind == CCL__P2P_SEND ? 0 : N) + ops[i].peer]++] = i;
    int remote = 0;                  /* channels with ranks of other nodes */
    for (int k = 0; k < nch; k++)
        if (!comm->heap_base[chans[k].peer]) {
            remote++;
            if (!chans[k].send)
                ccl__cpu_net_p2p_expect(net, chans[k].peer, ops[chans[k].calls[chans[k].ncalls - 1]].nth + 1);
        }

    int left = n;
    CpuSpinClock clock = {0};
    if (remote)
        ccl__cpu_net_helping(net, 1);
    for (unsigned it = 0; left > 0;) {
        int moved = 0;
        left = 0;
        for (int k = 0; k < nch; k++) {
            int before = chans[k].done, r = comm->heap_base[chans[k].peer]
                                                 ? channel_step(comm, st, calls, n, &chans[k])
                                                 : net_channel_step(comm, net, calls, n, &chans[k]);
            if (r < 0)
                goto out;
            moved |= r > 0 || chans[k].done != before;
            left += chans[k].ncalls - chans[k].done;
        }
        if (remote)
            ccl__cpu_net_progress(net);   /* what this round queued leaves now */
        if (left == 0)
            break;
        if (moved) {
            it = 0;
            clock = (CpuSpinClock){0};
            continue;
        }
        ab = atomic_load_explicit(abort_flag, memory_order_relaxed);
        if (ab) {
            ccl__set_async_error(comm, CCL_ERR_PEER_FAILED, "rank %d: %s stopped: %s", me,
                                 ccl__p2p_describe(first_waiting(calls, chans, nch)->op, (uint64_t)n, what, sizeof what),
                                 ccl__cpu_culprit(comm, ab, who, sizeof who));
            goto out;
        }
        if ((it & 63) == 63 && ccl__cpu_clock_turn(comm, &clock)) {
            report_stuck(comm, net, first_waiting(calls, chans, nch), n);
            ccl__cpu_abort_all(comm);
            goto out;
        }
        ccl__backoff(it++);
    }
out:
    if (net)
        ccl__cpu_net_helping(net, 0);
    free(calls), free(order), free(count), free(at), free(chans);
}

void ccl__cpu_p2p_free(CpuP2p *st)
{
    free(st->filled);
    st->filled = st->emptied = NULL;
}
