/* cpu/net.c: the CPU backend's inter-node proxy (net.h; docs/multinode.md).
 *
 * On a communicator of several nodes a rank maps only its own node's heaps. Everything
 * that crosses nodes is a message of the transport the user gave (ccl_net_t: Open MPI
 * through ccl_mpi.h), which one proxy thread per communicator posts and polls; the
 * comm's other threads only queue messages (under a mutex) and read words the proxy
 * writes. Messages, each an 80-byte header and a payload; every header also says how many
 * PUT and P2P pieces from the receiver its sender has applied, and how many of the
 * receiver's point-to-point messages its recvs have completed (both cumulative, as of
 * when it was posted; the latter returns the credits, net.h):
 *
 *   PUT    a piece of a net put (at most 1 GiB): the receiver puts it into its heap at
 *          the offset given, and counts it. A piece of at most NET_INLINE bytes rides in
 *          the message (copied at the put); a larger one follows the header as a message
 *          of its own, sent from where it lies and received straight into the heap (the
 *          verifier's rule that nothing writes a put's source before its flush, and the
 *          flush's wait for the peer's acknowledgment, keep the source intact)
 *   ADD    a signal: the receiver adds 1 (release) to the semaphore at the offset given
 *   ACK    only those counts: sent at once after pieces were applied (a flush waits
 *          for them), and for completed recvs by the proxy thread's next sweep, unless
 *          half the credits wait already (a message back meanwhile carries them)
 *   IDENT  a call's identity (CclIdent), kept per sender in a ring like the heaps' own
 *   ARRIVE the all-rank barrier's arrival count
 *   ABORT  stop on behalf of rank d (value d + 1), with what is known of d (net.h) and,
 *          when a rank's connection to d failed, which rank's (lost(), below)
 *   BYE    the sender is leaving: it sends nothing more
 *   EAGER  a whole point-to-point message nth of at most CCL__NET_EAGER_BYTES (its
 *          CclP2pSlot in the header), sent at once within the sender's credits (net.h):
 *          kept in the ring until the receiver's worker takes it
 *   RTS    the header alone of a larger point-to-point message nth, within the credits:
 *          kept in the ring as an EAGER is
 *   CTS    the receiver's worker has taken RTS nth (it matched its recv, whose buffer is
 *          registered): the sender may send the data
 *   P2P    a piece of point-to-point message nth's data, into the registered recv's buffer
 *          at an offset; sent only after the CTS, and carried as a PUT's piece is (inline
 *          up to NET_INLINE, else from where the data lie, received straight into the
 *          buffer) and acknowledged as PUTs are
 *   BOOT   an exchange of ccl_comm_split's bootstrap (mailbox.c): its number (the comm's
 *          split count << 32 | the exchange) and at most NET_INLINE bytes, kept in a list
 *          per sender until the split's thread takes it; with F_GAVE_UP the sender gave
 *          up that split, and the bytes say why
 *
 * Order is what makes it correct: the transport delivers one sender's messages in the
 * order sent, and the proxy applies them in that order (one receive per sender at a
 * time). So a signal lands after every put its block flushed before it. A flush waits
 * until the peer acknowledged every piece posted to it so far: "landed in the peer's
 * memory", as docs/internals.md requires of port channels, whatever path (a third rank,
 * another block) the news then takes. A rank sends a call's puts only once it has seen
 * every peer's identity of that call (cpu/idents.c, as on one node), so a peer never
 * applies a put of a call it has not entered.
 *
 * A transport call about one rank that fails loses that rank alone (lost(), below): the
 * proxy goes on with the others, so that it can tell them whom the failure was about.
 *
 * The proxy applies a PUT only inside the heap (offset and length checked), and only
 * ranks of other nodes are ever sent to or received from. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/net.h"
#include "cpu/net_state.h" /* the messages and the proxy's state */

static CclHeapHeader *header(ccl_comm_t *comm, int p)
{
    return (CclHeapHeader *)comm->heap_base[p];
}

static int remote(const CpuNet *n, int p)
{
    return p / n->L != n->me / n->L;
}

static Msg *msg_new(int peer, uint32_t kind, uint64_t a, uint64_t b, size_t payload)
{
    Msg *m = malloc(sizeof *m + payload);
    if (!m)
        return NULL;
    memset(m, 0, sizeof *m);
    m->peer = peer;
    m->bytes = sizeof m->h + payload;
    m->h.kind = kind;
    m->h.a = a;
    m->h.b = b;
    return m;
}

static void enqueue(CpuNet *n, Msg *m)
{
    pthread_mutex_lock(&n->mu);
    if (n->tail)
        n->tail->next = m;
    else
        n->head = m;
    n->tail = m;
    pthread_mutex_unlock(&n->mu);
}

static int oom(CpuNet *n)
{
    ccl__set_async_error(n->comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory queueing a message for another node",
                         n->me);
    return -1;
}

/* One message to rank p, its payload copied; -1 when out of memory. */
static int to_peer(CpuNet *n, int p, uint32_t kind, uint64_t a, uint64_t b, uint32_t flags, const void *payload,
                   size_t bytes)
{
    Msg *m = msg_new(p, kind, a, b, bytes);
    if (!m)
        return oom(n);
    m->h.flags = flags;
    if (bytes)
        memcpy(&m->h + 1, payload, bytes);
    enqueue(n, m);
    return 0;
}

/* The same message to every rank of another node; -1 when out of memory. */
static int to_remotes(CpuNet *n, uint32_t kind, uint64_t a, uint64_t b, uint32_t flags, const void *payload,
                      size_t bytes)
{
    for (int p = 0; p < n->N; p++)
        if (remote(n, p) && to_peer(n, p, kind, a, b, flags, payload, bytes) != 0)
            return -1;
    return 0;
}

/* The pieces of a PUT (at heap offset a0) or a P2P (at offset a0 of the message, slot its
 * header), each counted in posted[peer]. */
static int pieces(CpuNet *n, int peer, uint32_t kind, size_t a0, const void *src, size_t bytes, const CclP2pSlot *slot)
{
    for (size_t done = 0; done < bytes || (bytes == 0 && done == 0);) {
        size_t piece = bytes - done < NET_PIECE ? bytes - done : NET_PIECE;
        int inline_ = piece <= NET_INLINE;
        Msg *m = msg_new(peer, kind, a0 + done, piece, inline_ ? piece : 0);
        if (!m)
            return oom(n);
        if (slot)
            memcpy(m->h.pad, slot, sizeof *slot);
        if (inline_) {
            memcpy(&m->h + 1, (const char *)src + done, piece);
        } else {
            m->h.flags = F_DATA_FOLLOWS;
            m->data = (const char *)src + done;
        }
        atomic_fetch_add_explicit(&n->posted[peer], 1, memory_order_relaxed);
        enqueue(n, m);
        if (bytes == 0)
            break;
        done += piece;
    }
    return 0;
}

int ccl__cpu_net_put(CpuNet *n, int peer, size_t off, const void *src, size_t bytes)
{
    return pieces(n, peer, M_PUT, off, src, bytes, NULL);
}

uint64_t ccl__cpu_net_p2p_taken(CpuNet *n, int peer)
{
    return atomic_load_explicit(&n->taken[peer], memory_order_acquire);
}

int ccl__cpu_net_p2p_announce(CpuNet *n, int peer, const CclP2pSlot *send, const void *src, size_t bytes)
{
    int eager = bytes <= CCL__NET_EAGER_BYTES;
    Msg *m = msg_new(peer, eager ? M_EAGER : M_RTS, 0, bytes, eager ? bytes : 0);
    if (!m)
        return oom(n);
    memcpy(m->h.pad, send, sizeof *send);
    if (eager && bytes)
        memcpy(&m->h + 1, src, bytes);
    enqueue(n, m);
    return 0;
}

int ccl__cpu_net_p2p_cleared(CpuNet *n, int peer, uint64_t nth)
{
    return atomic_load_explicit(&n->cts[(size_t)peer * CREDITS + nth % CREDITS], memory_order_acquire) == nth + 1;
}

int ccl__cpu_net_p2p_data(CpuNet *n, int peer, const CclP2pSlot *send, const void *src, size_t bytes,
                          uint64_t *mark)
{
    /* posted[peer] is this worker's to raise while a group runs (no block of a
     * collective runs beside it), so the count after the pieces is this message's mark. */
    if (pieces(n, peer, M_P2P, 0, src, bytes, send) != 0)
        return -1;
    *mark = ccl__cpu_net_posted(n, peer);
    return 0;
}

int ccl__cpu_net_p2p_peek(CpuNet *n, int peer, uint64_t nth, CclP2pSlot *found)
{
    const char *kept = atomic_load_explicit(&n->ring[(size_t)peer * CREDITS + nth % CREDITS], memory_order_acquire);
    const NetHdr *h = (const NetHdr *)kept;
    if (!h)
        return 0;
    memcpy(found, h->pad, sizeof *found);
    return found->nth != nth ? 0 : h->kind == M_EAGER ? 1 : 2;
}

int ccl__cpu_net_p2p_take(CpuNet *n, int peer, uint64_t nth, void *buf, size_t bytes)
{
    _Atomic(char *) *slot = &n->ring[(size_t)peer * CREDITS + nth % CREDITS];
    char *kept = atomic_load_explicit(slot, memory_order_acquire);
    const NetHdr *h = (const NetHdr *)kept;
    int rc = 0;
    if (h->kind == M_EAGER) {
        /* Count and dtype matched, so the sizes do; the bound only keeps a damaged
         * header from writing past the recv's buffer. */
        if (bytes)
            memcpy(buf, h + 1, bytes < h->b ? bytes : h->b);
    } else {
        NetRecv *e = &n->rx[(size_t)peer * CREDITS + nth % CREDITS];
        e->buf = buf;
        e->bytes = bytes;
        atomic_store_explicit(&e->got, 0, memory_order_relaxed);
        atomic_store_explicit(&e->seq, nth + 1, memory_order_release);
        rc = to_peer(n, peer, M_CTS, nth, 0, 0, NULL, 0);
    }
    atomic_store_explicit(slot, NULL, memory_order_release);
    atomic_fetch_sub_explicit(&n->held[peer], 1, memory_order_relaxed);
    free(kept);
    return rc;
}

int ccl__cpu_net_p2p_landed(CpuNet *n, int peer, uint64_t nth)
{
    return atomic_load_explicit(&n->rx[(size_t)peer * CREDITS + nth % CREDITS].got, memory_order_acquire) == nth + 1;
}

void ccl__cpu_net_p2p_complete(CpuNet *n, int peer, uint64_t upto)
{
    atomic_store_explicit(&n->complete[peer], upto, memory_order_release);
}

void ccl__cpu_net_p2p_expect(CpuNet *n, int peer, uint64_t upto)
{
    atomic_store_explicit(&n->expected[peer], upto, memory_order_relaxed);
}

uint64_t ccl__cpu_net_p2p_arrived(CpuNet *n, int peer)
{
    return atomic_load_explicit(&n->arrivals[peer], memory_order_relaxed);
}

int ccl__cpu_net_add(CpuNet *n, int peer, size_t off)
{
    return to_peer(n, peer, M_ADD, off, 0, 0, NULL, 0);
}

uint64_t ccl__cpu_net_posted(CpuNet *n, int peer)
{
    return atomic_load_explicit(&n->posted[peer], memory_order_relaxed);
}

_Atomic uint64_t *ccl__cpu_net_acked(CpuNet *n, int peer)
{
    return &n->acked[peer];
}

int ccl__cpu_net_ident(CpuNet *n, const CclIdent *id)
{
    return to_remotes(n, M_IDENT, id->seq, 0, 0, id, sizeof *id);
}

int ccl__cpu_net_ident_read(CpuNet *n, int p, uint64_t seq, CclIdent *out)
{
    enum { W = sizeof(CclIdent) / 8 };
    uint64_t *e = n->idents + ((size_t)p * CCL_IDENT_RING + seq % CCL_IDENT_RING) * W, *dst = (uint64_t *)out;
    if (__atomic_load_n(&e[0], __ATOMIC_ACQUIRE) < seq)
        return 0;
    for (size_t k = 1; k < W; k++)
        dst[k] = __atomic_load_n(&e[k], __ATOMIC_RELAXED);
    atomic_thread_fence(memory_order_acquire);
    dst[0] = __atomic_load_n(&e[0], __ATOMIC_RELAXED);
    return 1;
}

int ccl__cpu_net_arrive(CpuNet *n, uint64_t k)
{
    return to_remotes(n, M_ARRIVE, k, 0, 0, NULL, 0);
}

_Atomic uint64_t *ccl__cpu_net_arrived(CpuNet *n, int p)
{
    return &n->arrived[p];
}

void ccl__cpu_net_abort(CpuNet *n, int d, int flags, int by)
{
    uint64_t b = flags & CCL__NET_LOST && by >= 0 ? (uint64_t)by + 1 : 0;
    if (!atomic_load(&n->stop))
        to_remotes(n, M_ABORT, (uint64_t)d + 1, b, (uint32_t)flags, NULL, 0);
}

int ccl__cpu_net_flags(CpuNet *n, int p, int *by)
{
    *by = atomic_load(&n->lost_by[p]) - 1;
    return atomic_load(&n->flags[p]);
}

/* ---- ccl_comm_split's exchanges with ranks of other nodes ---- */

int ccl__cpu_net_boot_send(CpuNet *n, int peer, uint64_t tag, int gave_up, const void *buf, size_t bytes)
{
    if (bytes > NET_INLINE)
        return -1;
    return to_peer(n, peer, M_BOOT, tag, 0, gave_up ? F_GAVE_UP : 0, buf, bytes);
}

int ccl__cpu_net_boot_take(CpuNet *n, int peer, uint64_t tag, void *buf, size_t bytes, char *why, size_t len)
{
    int got = 0;
    pthread_mutex_lock(&n->mu);
    for (BootMsg **at = &n->boot[peer], *b; (b = *at) != NULL && !got;) {
        if ((b->flags & F_GAVE_UP) && b->tag >> 32 == tag >> 32) {
            snprintf(why, len, "rank %d gave up%s%.*s", peer, b->bytes > 1 ? ": " : "", (int)b->bytes, b->data);
            got = -1;
        } else if (b->tag == tag && !(b->flags & F_GAVE_UP)) {
            if (b->bytes != bytes) {
                snprintf(why, len, "rank %d is out of step: its exchange %u has %zu bytes, this rank's %zu", peer,
                         (unsigned)tag, b->bytes, bytes);
                got = -1;
            } else {
                memcpy(buf, b->data, bytes);
                got = 1;
            }
            *at = b->next;
            free(b);
        } else if (b->tag < tag) {      /* from an earlier split that gave up: stale */
            *at = b->next;
            free(b);
        } else {
            at = &b->next;
        }
    }
    pthread_mutex_unlock(&n->mu);
    if (got)
        return got;
    uint64_t ab = atomic_load(&header(n->comm, n->me)->abort);
    if (ab) {
        snprintf(why, len, "the communicator was stopped (on behalf of rank %llu)", (unsigned long long)ab - 1);
        return -1;
    }
    if (__atomic_load_n(&n->bye[peer], __ATOMIC_ACQUIRE)) {
        snprintf(why, len, "rank %d left the communicator (ccl_comm_destroy)", peer);
        return -1;
    }
    return 0;
}

/* ---- the proxy thread ---- */

/* What came through the transport breaks the protocol (a message that makes no sense),
 * or the proxy cannot keep it (out of memory): the comm fails, naming what and whose, and
 * the proxy calls the transport no more. */
static void broke(CpuNet *n, const char *what, int peer, int rc)
{
    if (n->broken)
        return;
    n->broken = 1;
    ccl__set_async_error(n->comm, CCL_ERR_PEER_FAILED, "rank %d: the inter-node transport failed: %s with rank %d "
                         "returned %d", n->me, what, peer, rc);
    /* Every rank of this node stops on this rank's behalf (as ccl__cpu_abort_all, which
     * is cpu/waits.c's, above this file); the other nodes hear no more from it. */
    for (int p = 0; p < n->N; p++) {
        uint64_t zero = 0;
        if (n->comm->heap_base[p])
            atomic_compare_exchange_strong(&header(n->comm, p)->abort, &zero, (uint64_t)n->me + 1);
    }
}

static void post_send(CpuNet *n, Msg *m);

/* A transport call about rank p returned rc (over TCP: p's connection was closed or
 * reset without a goodbye, its process ended?): p is lost to this rank. The proxy calls
 * the transport for p no more (p's receive and sends are neither tested nor cancelled
 * again) and goes on with the other ranks. Unless this rank had stopped already, it tells
 * every other rank of another node that p is gone (ABORT naming p, flagged CCL__NET_LOST,
 * with this rank as the one whose connection failed) before anything else, then stops its
 * own node on p's behalf, the comm's error naming p.
 *
 * Whom a stopped rank names: the rank its abort word names, which the first news sets,
 * once (ABORT messages and lost connections alike are applied by this thread, one at a
 * time). News travels in order along each connection, and three rules make the first
 * news name a rank that is really gone rather than one that stopped because of it: a
 * rank that loses p tells every other node before its own threads can see that it
 * stopped (so before it can fail or leave on that account); a rank stopped on p's
 * behalf passes p on, not itself (ccl__cpu_abort_all, cpu/waits.c); and a rank that
 * leaves says goodbye (BYE), after which its connection's closing is no news (no receive
 * is posted). So a connection that fails is news of a rank that ended without a goodbye,
 * gone itself, and a rank that hears from rank A that p is gone hears it before anything
 * of A's own end. A rank that hears both, its connection to A failing and an ABORT saying
 * p is gone, names the one it heard first: both are gone. And a rank that stopped
 * everyone itself before it went (its ABORT came first) is named for that, as on one
 * node (ccl__cpu_abort_for): its loss is not recorded over it. */
static void lost(CpuNet *n, const char *what, int p, int rc)
{
    ccl_comm_t *comm = n->comm;
    if (n->cut[p])
        return;
    n->cut[p] = 1;
    n->ncut++;
    uint64_t ab = atomic_load(&header(comm, n->me)->abort);
    if (ab != (uint64_t)p + 1) {
        int zero = 0;
        atomic_compare_exchange_strong(&n->lost_by[p], &zero, n->me + 1);
        atomic_fetch_or(&n->flags[p], CCL__NET_LOST);
    }
    if (ab || n->telling) {
        /* Old news: whoever stopped this rank tells the others, and so do this rank's
         * threads as they stop (ccl__cpu_abort_all), with all that is known by then; or
         * this rank is telling them of the rank it lost first, which stops them. */
        CCL__LOG(CCL__LOG_INFO, CCL__SUB_INIT, n->me, "the inter-node transport lost rank %d (%s returned %d); this "
                 "rank stops on rank %llu's behalf already", p, what, rc,
                 (unsigned long long)(ab ? ab : (uint64_t)n->telling) - 1);
        return;
    }
    n->telling = p + 1;
    for (int q = 0; q < n->N; q++) {
        Msg *m = remote(n, q) && !n->cut[q] ? msg_new(q, M_ABORT, (uint64_t)p + 1, (uint64_t)n->me + 1, 0) : NULL;
        if (m) {
            m->h.flags = CCL__NET_LOST;
            post_send(n, m);  /* (one that fails loses q as well) */
        }
    }
    n->telling = 0;
    ccl__set_async_error(comm, CCL_ERR_PEER_FAILED, "rank %d: rank %d on node %d is gone: the inter-node transport "
                         "failed: %s with rank %d returned %d", n->me, p, p / n->L, what, p, rc);
    /* This rank's word first, then its node-mates', which say why through it (CclHeapHeader.why). */
    atomic_store(&header(comm, n->me)->why, CCL__NET_LOST | (uint64_t)(n->me + 1) << 8);
    uint64_t zero = 0;
    atomic_compare_exchange_strong(&header(comm, n->me)->abort, &zero, (uint64_t)p + 1);
    for (int q = 0; q < n->N; q++) {
        zero = 0;
        if (comm->heap_base[q])
            atomic_compare_exchange_strong(&header(comm, q)->abort, &zero, (uint64_t)p + 1);
    }
}

/* Gives up rank p's receive (the communicator is going away). Where the transport cannot
 * cancel it (a receive matched to a message whose sender died), the request stays the
 * transport's, and so does the buffer it names: a header's is left to it, never freed
 * (a piece's lies in the heap or a recv's buffer, which hold nothing after an error). */
static void give_up_recv(CpuNet *n, int p)
{
    if (n->t.cancel(n->t.ctx, n->rreq[p]) != 0 && !n->rdata[p]) n->rbuf[p] = NULL;
    n->rreq[p] = NULL;
}

/* Posts the receive of rank p's next message; the transport's result. */
static int post_recv(CpuNet *n, int p)
{
    n->rdata[p] = 0;
    int rc = n->t.irecv(n->t.ctx, p, n->rbuf[p], sizeof(NetHdr) + NET_INLINE, &n->rreq[p]);
    if (rc)
        n->rreq[p] = NULL;
    return rc;
}

/* Posts m (and the piece that follows it), or drops it: the transport failed, or m's
 * rank is lost. */
static void post_send(CpuNet *n, Msg *m)
{
    m->next = NULL;
    if (n->broken || n->cut[m->peer]) {
        free(m);
        return;
    }
    m->h.applied = n->ack_sent[m->peer] = n->applied[m->peer];
    m->h.complete = n->complete_sent[m->peer] = atomic_load_explicit(&n->complete[m->peer], memory_order_relaxed);
    int rc = n->t.isend(n->t.ctx, m->peer, &m->h, m->bytes, &m->req), kept = 0;
    if (!rc && m->data && (rc = n->t.isend(n->t.ctx, m->peer, m->data, m->h.b, &m->dreq)) != 0)
        kept = n->t.cancel(n->t.ctx, m->req) != 0; /* the header's send is given up (or kept by the transport) */
    if (rc) {
        lost(n, "isend", m->peer, rc);
        if (!kept) free(m);
        return;
    }
    if (n->flight_tail)
        n->flight_tail->next = m;
    else
        n->flight = m;
    n->flight_tail = m;
    n->sent++;
    n->sent_bytes += m->bytes + (m->data ? m->h.b : 0);
}

/* Keeps point-to-point message h (EAGER or RTS, bytes long with its payload) from rank p
 * in its ring slot for the worker. Within the sender's credits the slot is free: the
 * worker completed message nth - CREDITS, so it took it first. */
static void keep(CpuNet *n, int p, const NetHdr *h, size_t bytes)
{
    CclP2pSlot s;
    memcpy(&s, h->pad, sizeof s);
    uint64_t done = atomic_load_explicit(&n->complete[p], memory_order_acquire);
    _Atomic(char *) *slot = &n->ring[(size_t)p * CREDITS + s.nth % CREDITS];
    if (s.nth < done || s.nth >= done + CREDITS || atomic_load_explicit(slot, memory_order_relaxed)) {
        broke(n, "a point-to-point message beyond its sender's credits", p, (int)s.nth);
        return;
    }
    if (h->kind == M_EAGER ? h->b > CCL__NET_EAGER_BYTES || bytes != sizeof *h + h->b
                           : h->b <= CCL__NET_EAGER_BYTES || bytes != sizeof *h) {
        broke(n, "a point-to-point message whose size is not its kind's", p, (int)h->b);
        return;
    }
    char *copy = malloc(bytes);
    if (!copy) {
        broke(n, "out of memory keeping a point-to-point message", p, -1);
        return;
    }
    memcpy(copy, h, bytes);
    if (s.nth >= atomic_load_explicit(&n->expected[p], memory_order_relaxed))
        n->early++;
    int held = atomic_fetch_add_explicit(&n->held[p], 1, memory_order_relaxed) + 1;
    if (held > n->held_peak)
        n->held_peak = held;
    atomic_store_explicit(&n->arrivals[p], s.nth + 1, memory_order_relaxed);
    atomic_store_explicit(slot, copy, memory_order_release);
}

/* Applies one message from rank p (bytes long, in n->rbuf[p]). */
static void apply(CpuNet *n, int p, size_t bytes)
{
    const NetHdr *h = (const NetHdr *)n->rbuf[p];
    ccl_comm_t *comm = n->comm;
    char *heap = comm->heap_base[n->me];
    if (bytes < sizeof *h) {
        broke(n, "a message shorter than its header", p, (int)bytes);
        return;
    }
    atomic_store_explicit(&n->acked[p], h->applied, memory_order_release);
    atomic_store_explicit(&n->taken[p], h->complete, memory_order_release);
    switch (h->kind) {
    case M_PUT: {
        int follows = h->flags & F_DATA_FOLLOWS;
        if (h->a > comm->heap_bytes || h->b > comm->heap_bytes - h->a || bytes != sizeof *h + (follows ? 0 : h->b)) {
            broke(n, "a put outside the heap", p, -1);
            return;
        }
        if (!follows) {
            memcpy(heap + h->a, h + 1, h->b);
            n->applied[p]++;
            return;
        }
        /* The piece is p's next message: received where it belongs, counted once it is. */
        int rc = n->t.irecv(n->t.ctx, p, heap + h->a, h->b, &n->rreq[p]);
        if (rc) {
            n->rreq[p] = NULL;
            lost(n, "irecv of a put's piece", p, rc);
            return;
        }
        n->rdata[p] = 1;
        return;
    }
    case M_ADD:
        if (h->a % 8 || h->a + 8 > comm->heap_bytes) {
            broke(n, "a signal outside the heap", p, -1);
            return;
        }
        atomic_fetch_add_explicit((_Atomic uint64_t *)(heap + h->a), 1, memory_order_release);
        return;
    case M_ACK:                 /* (its header said it all) */
        return;
    case M_IDENT: {
        enum { W = sizeof(CclIdent) / 8 };
        if (bytes != sizeof *h + sizeof(CclIdent))
            return;
        const uint64_t *src = (const uint64_t *)(h + 1);
        uint64_t *e = n->idents + ((size_t)p * CCL_IDENT_RING + h->a % CCL_IDENT_RING) * W;
        for (size_t k = 1; k < W; k++)
            __atomic_store_n(&e[k], src[k], __ATOMIC_RELAXED);
        __atomic_store_n(&e[0], src[0], __ATOMIC_RELEASE);
        return;
    }
    case M_ARRIVE:
        atomic_store_explicit(&n->arrived[p], h->a, memory_order_release);
        return;
    case M_ABORT: {
        /* Stop on behalf of rank d, keeping what the sender knows of it; the first news
         * stays the cause (lost(), above), and d's loss is not recorded over d's own
         * stop (this rank stopped on d's behalf already, and nobody had lost d). */
        int d = (int)h->a - 1, flags = (int)h->flags, by = (int)h->b - 1;
        uint64_t ab = atomic_load(&header(comm, n->me)->abort);
        if (h->a == 0 || h->a > (uint64_t)n->N) {
            broke(n, "an abort naming no rank", p, (int)h->a);
            return;
        }
        if (ab == h->a && !(atomic_load(&n->flags[d]) & CCL__NET_LOST))
            flags &= ~CCL__NET_LOST;
        int zero32 = 0;
        if (flags & CCL__NET_LOST && by >= 0 && by < n->N)
            atomic_compare_exchange_strong(&n->lost_by[d], &zero32, by + 1);
        atomic_fetch_or(&n->flags[d], flags);
        uint64_t zero = 0;
        atomic_compare_exchange_strong(&header(comm, n->me)->abort, &zero, h->a);
        return;
    }
    case M_BYE:
        __atomic_store_n(&n->bye[p], 1, __ATOMIC_RELEASE);
        return;
    case M_BOOT: {
        size_t len = bytes - sizeof *h;
        BootMsg *b = malloc(sizeof *b + len);
        if (!b) {
            broke(n, "out of memory keeping a split's exchange", p, -1);
            return;
        }
        *b = (BootMsg){.tag = h->a, .flags = h->flags, .bytes = len};
        memcpy(b->data, h + 1, len);
        pthread_mutex_lock(&n->mu);
        BootMsg **at = &n->boot[p];
        while (*at)
            at = &(*at)->next;
        *at = b;
        pthread_mutex_unlock(&n->mu);
        return;
    }
    case M_CTS:
        atomic_store_explicit(&n->cts[(size_t)p * CREDITS + h->a % CREDITS], h->a + 1, memory_order_release);
        return;
    case M_EAGER:
    case M_RTS:
        keep(n, p, h, bytes);
        return;
    case M_P2P: {
        CclP2pSlot s;
        memcpy(&s, h->pad, sizeof s);
        NetRecv *e = &n->rx[(size_t)p * CREDITS + s.nth % CREDITS];
        int follows = h->flags & F_DATA_FOLLOWS;
        if (atomic_load_explicit(&e->seq, memory_order_acquire) != s.nth + 1) {
            broke(n, "a point-to-point message that no receive had cleared", p, -1);
            return;
        }
        if (h->a > e->bytes || h->b > e->bytes - h->a || bytes != sizeof *h + (follows ? 0 : h->b)) {
            broke(n, "a point-to-point piece outside its receive's buffer", p, -1);
            return;
        }
        int last = h->a + h->b == e->bytes;
        if (!follows) {
            if (h->b)
                memcpy(e->buf + h->a, h + 1, h->b);
            n->applied[p]++;
            if (last)
                atomic_store_explicit(&e->got, s.nth + 1, memory_order_release);
            return;
        }
        /* This rank has failed: its worker has given up the recv, whose buffer may be
         * gone already; nothing more from p is taken (the comm is dead). */
        if (atomic_load(&header(comm, n->me)->abort)) {
            __atomic_store_n(&n->bye[p], 1, __ATOMIC_RELEASE);
            return;
        }
        int rc = n->t.irecv(n->t.ctx, p, e->buf + h->a, h->b, &n->rreq[p]);
        if (rc) {
            n->rreq[p] = NULL;
            lost(n, "irecv of a point-to-point piece", p, rc);
            return;
        }
        n->rdata[p] = 2;
        n->rx_nth[p] = s.nth;
        n->rx_last[p] = last;
        return;
    }
    }
}

/* One sweep: queued messages posted, completed sends freed, arrived messages applied
 * (receives posted again), acknowledgments sent; under sweep_mu. Whether anything
 * happened (then last_busy is now). */
static int sweep(CpuNet *n, int proxy)
{
    int busy = 0;
    pthread_mutex_lock(&n->mu);
    Msg *q = n->head;
    n->head = n->tail = NULL;
    pthread_mutex_unlock(&n->mu);
    for (Msg *m = q, *next; m; m = next) {
        next = m->next;
        post_send(n, m);
        busy = 1;
    }
    /* (lost() may append ABORTs to the list as it is walked.) */
    for (Msg **pp = &n->flight, *prev = NULL; *pp && !n->broken;) {
        Msg *m = *pp;
        int done = 0, rc = 0;
        size_t b;
        if (!n->cut[m->peer] && m->req && (rc = n->t.test(n->t.ctx, m->req, &done, &b)) == 0 && done)
            m->req = NULL;
        if (!n->cut[m->peer] && !rc && m->dreq && (rc = n->t.test(n->t.ctx, m->dreq, &done, &b)) == 0 && done)
            m->dreq = NULL;
        if (rc)
            lost(n, "test of a send", m->peer, rc);
        if (!n->cut[m->peer] && (m->req || m->dreq)) {
            prev = m;
            pp = &m->next;
            continue;
        }
        *pp = m->next;
        if (n->flight_tail == m)
            n->flight_tail = prev;
        if (n->cut[m->peer]) {
            m->next = n->dropped;
            n->dropped = m;
        } else {
            free(m);
        }
        busy = 1;
    }
    for (int p = 0; p < n->N && !n->broken; p++) {
        if (!n->rreq[p] || n->cut[p])
            continue;
        int done = 0;
        size_t bytes = 0;
        int rc = n->t.test(n->t.ctx, n->rreq[p], &done, &bytes);
        if (rc) {
            lost(n, "test of a receive", p, rc);
            continue;
        }
        if (!done)
            continue;
        n->rreq[p] = NULL;
        busy = 1;
        if (n->rdata[p]) {      /* a put's or a point-to-point message's piece has landed */
            if (n->rdata[p] == 2 && n->rx_last[p])
                atomic_store_explicit(&n->rx[(size_t)p * CREDITS + n->rx_nth[p] % CREDITS].got, n->rx_nth[p] + 1,
                                      memory_order_release);
            n->rdata[p] = 0;
            n->applied[p]++;
        } else {
            n->recvd++;
            apply(n, p, bytes);
        }
        if (!n->rreq[p] && !n->bye[p] && !n->broken && !n->cut[p] && (rc = post_recv(n, p)) != 0)
            lost(n, "irecv", p, rc);
    }
    for (int p = 0; p < n->N && !n->broken; p++) {
        /* Applied pieces are acknowledged at once (a flush waits for them); completed
         * recvs (credits) by the proxy thread's next sweep, unless half the credits wait
         * already: a message back to p meanwhile carries them, as every header does. */
        uint64_t owed = atomic_load_explicit(&n->complete[p], memory_order_relaxed) - n->complete_sent[p];
        if ((n->applied[p] != n->ack_sent[p] || owed >= (proxy ? 1u : CREDITS / 2u)) && !n->bye[p] && !n->cut[p]) {
            Msg *m = msg_new(p, M_ACK, 0, 0, 0);
            if (!m)
                break; /* tried again at the next sweep */
            post_send(n, m);
        }
    }
    if (busy)
        n->last_busy = ccl__now_ms();
    return busy;
}

void ccl__cpu_net_progress(CpuNet *n)
{
    if (pthread_mutex_trylock(&n->sweep_mu) != 0)
        return;                 /* the proxy thread is sweeping */
    sweep(n, 0);
    pthread_mutex_unlock(&n->sweep_mu);
}

void ccl__cpu_net_helping(CpuNet *n, int on)
{
    atomic_store_explicit(&n->helping, on, memory_order_relaxed);
}

static void *proxy_main(void *arg)
{
    CpuNet *n = arg;
    ccl_comm_t *comm = n->comm;
    int leaving = 0;
    double deadline = 0, grace = 0;
    const struct timespec nap = {0, 20000};
    for (;;) {
        pthread_mutex_lock(&n->sweep_mu);
        sweep(n, 1);
        int end = 0, sending = n->flight != NULL;
        double now = ccl__now_ms(), quiet = now - n->last_busy;
        if (leaving) {
            int all = !n->flight && !n->head;
            for (int p = 0; p < n->N && all; p++)
                all = !remote(n, p) || n->bye[p] || n->cut[p];
            end = all || n->broken || now > deadline || (now > grace && atomic_load(&header(comm, n->me)->abort));
        } else if (atomic_load(&n->stop)) {
            /* The comm's threads are done (its worker helps no more): no message is
             * queued after this one. */
            leaving = 1;
            to_remotes(n, M_BYE, 0, 0, 0, NULL, 0);
            deadline = now + comm->timeout_ms;
            grace = now + 1000;
            quiet = 0;
        }
        pthread_mutex_unlock(&n->sweep_mu);
        if (end)
            break;
        /* Idle: Open MPI moves a large message's fragments only inside its calls, so while
         * sends are in flight, or anything happened in the last 2 ms (a receive may be
         * midway), the proxy only yields; otherwise it naps 20 us between looks. While the
         * worker sweeps as it waits (a point-to-point group), the proxy naps too, leaving
         * the cores to the threads that wait for messages. */
        if ((sending || quiet < 2.0) && !atomic_load_explicit(&n->helping, memory_order_relaxed))
            sched_yield();
        else
            nanosleep(&nap, NULL);
    }
    for (int p = 0; p < n->N; p++)
        if (n->rreq[p] && !n->broken && !n->cut[p])
            give_up_recv(n, p);
    /* Sends still in flight (a peer that never took them) keep their buffers: the
     * transport may still read them. */
    return NULL;
}

static void net_free(CpuNet *n)
{
    if (n->rbuf)
        for (int p = 0; p < n->N; p++)
            free(n->rbuf[p]);
    free(n->rbuf);
    free(n->rdata);
    free(n->rreq);
    free((void *)n->posted);
    free((void *)n->acked);
    free((void *)n->arrived);
    free((void *)n->flags);
    free((void *)n->lost_by);
    free(n->cut);
    free(n->applied);
    free(n->ack_sent);
    free(n->bye);
    free(n->idents);
    free((void *)n->cts);
    free(n->rx);
    free(n->rx_nth);
    free(n->rx_last);
    for (size_t k = 0; n->ring && k < (size_t)n->N * CREDITS; k++)
        free(atomic_load(&n->ring[k]));
    free((void *)n->ring);
    free((void *)n->taken);
    free((void *)n->complete);
    free(n->complete_sent);
    free((void *)n->arrivals);
    free((void *)n->expected);
    free((void *)n->held);
    for (int p = 0; n->boot && p < n->N; p++)
        for (BootMsg *b = n->boot[p], *next; b; b = next) {
            next = b->next;
            free(b);
        }
    free(n->boot);
    for (Msg *m = n->head, *next; m; m = next) {
        next = m->next;
        free(m);
    }
    for (Msg *m = n->dropped, *next; m; m = next) {
        next = m->next;
        free(m);
    }
    pthread_mutex_destroy(&n->mu);
    pthread_mutex_destroy(&n->sweep_mu);
    free(n);
}

ccl_result_t ccl__cpu_net_start(ccl_comm_t *comm, CpuNet **out)
{
    int N = comm->nranks;
    CpuNet *n = calloc(1, sizeof *n);
    if (!n)
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "out of memory");
    *n = (CpuNet){.comm = comm, .t = comm->net, .N = N, .me = comm->rank, .L = comm->local};
    pthread_mutex_init(&n->mu, NULL);
    pthread_mutex_init(&n->sweep_mu, NULL);
    n->posted = calloc((size_t)N, sizeof *n->posted);
    n->acked = calloc((size_t)N, sizeof *n->acked);
    n->arrived = calloc((size_t)N, sizeof *n->arrived);
    n->flags = calloc((size_t)N, sizeof *n->flags);
    n->lost_by = calloc((size_t)N, sizeof *n->lost_by);
    n->cut = calloc((size_t)N, sizeof *n->cut);
    n->applied = calloc((size_t)N, sizeof *n->applied);
    n->ack_sent = calloc((size_t)N, sizeof *n->ack_sent);
    n->bye = calloc((size_t)N, sizeof *n->bye);
    n->rreq = calloc((size_t)N, sizeof *n->rreq);
    n->rbuf = calloc((size_t)N, sizeof *n->rbuf);
    n->rdata = calloc((size_t)N, sizeof *n->rdata);
    n->idents = calloc((size_t)N * CCL_IDENT_RING, sizeof(CclIdent));
    n->cts = calloc((size_t)N * CREDITS, sizeof *n->cts);
    n->ring = calloc((size_t)N * CREDITS, sizeof *n->ring);
    n->rx = calloc((size_t)N * CREDITS, sizeof *n->rx);
    n->rx_nth = calloc((size_t)N, sizeof *n->rx_nth);
    n->rx_last = calloc((size_t)N, sizeof *n->rx_last);
    n->boot = calloc((size_t)N, sizeof *n->boot);
    n->taken = calloc((size_t)N, sizeof *n->taken);
    n->complete = calloc((size_t)N, sizeof *n->complete);
    n->complete_sent = calloc((size_t)N, sizeof *n->complete_sent);
    n->arrivals = calloc((size_t)N, sizeof *n->arrivals);
    n->expected = calloc((size_t)N, sizeof *n->expected);
    n->held = calloc((size_t)N, sizeof *n->held);
    int ok = n->boot && n->taken && n->complete && n->complete_sent && n->arrivals && n->expected && n->held &&
             n->posted && n->acked && n->arrived && n->flags && n->lost_by && n->cut && n->applied && n->ack_sent &&
             n->bye && n->rreq && n->rbuf && n->rdata && n->idents && n->cts && n->ring && n->rx && n->rx_nth &&
             n->rx_last;
    for (int p = 0; ok && p < N; p++)
        if (remote(n, p) && !(n->rbuf[p] = malloc(sizeof(NetHdr) + NET_INLINE)))
            ok = 0;
    if (!ok) {
        net_free(n);
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "out of memory for the inter-node proxy's buffers");
    }
    for (int p = 0; p < N; p++) {
        int rc = remote(n, p) ? post_recv(n, p) : 0;
        if (rc) {
            for (int q = 0; q < p; q++)
                if (n->rreq[q])
                    give_up_recv(n, q);
            net_free(n);
            return ccl__set_error(comm, CCL_ERR_SYSTEM, "the inter-node transport refused a receive from rank %d "
                                  "(irecv returned %d)", p, rc);
        }
    }
    if (pthread_create(&n->thread, NULL, proxy_main, n) != 0) {
        for (int p = 0; p < N; p++)
            if (n->rreq[p])
                give_up_recv(n, p);
        net_free(n);
        return ccl__set_error(comm, CCL_ERR_SYSTEM, "cannot start the inter-node proxy thread");
    }
    *out = n;
    return CCL_OK;
}

void ccl__cpu_net_stop(CpuNet *n)
{
    if (!n)
        return;
    atomic_store(&n->stop, 1);
    pthread_join(n->thread, NULL);
    char cut[64] = "", early[120] = "";
    if (n->ncut)
        snprintf(cut, sizeof cut, "; the connections to %d of them failed", n->ncut);
    if (n->held_peak)
        snprintf(early, sizeof early, "; %llu point-to-point messages came before their recv (at most %d kept at "
                 "once from one rank)", (unsigned long long)n->early, n->held_peak);
    CCL__LOG(CCL__LOG_INFO, CCL__SUB_INIT, n->me, "inter-node proxy: %llu messages (%llu bytes) sent to, %llu "
             "received from the other nodes' ranks%s%s", (unsigned long long)n->sent, (unsigned long long)n->sent_bytes,
             (unsigned long long)n->recvd, early, n->broken ? "; the transport failed" : cut);
    for (Msg *m = n->flight, *next; m; m = next) {
        next = m->next;
        if (n->broken || n->cut[m->peer])
            free(m);    /* a broken transport, or a lost rank's connection, reads nothing more */
    }
    net_free(n);
}
