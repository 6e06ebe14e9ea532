/* cpu/waits.c: the CPU backend's abort words, wait clocks, culprits and all-rank barrier
 * (waits.h).
 *
 * A dead peer is found by its pid: cpu/heaps.c records every rank's when ranks are
 * processes (of its own node only, on a comm of several). cpu/backend.c's CpuComm begins
 * with its CpuHeaps, which is all of it this file reads. Ranks of other nodes have no
 * header here: an abort reaches them as a message of the inter-node proxy (cpu/net.c),
 * and what it said of the rank it names stands in for that rank's header words; a rank
 * that stops its node on such a rank's behalf leaves what it knew of it in its own header
 * (CclHeapHeader.why) for its node-mates. */
#include <stdio.h>

#include "cpu/heaps.h"
#include "cpu/net.h"
#include "cpu/waits.h"

static const CpuHeaps *heaps(ccl_comm_t *comm)
{
    return comm->be_comm;
}

/* What this rank knows of rank r, as CCL__NET_* flags (cpu/net.h): r's header words
 * where r is of this node, what the proxy's ABORT messages said of r, and what node-mates
 * stopped on r's behalf knew of it (CclHeapHeader.why); *by is the rank whose connection
 * to r failed (CCL__NET_LOST), else -1. */
static int known(ccl_comm_t *comm, int r, int *by)
{
    CpuNet *net = heaps(comm)->net;
    *by = -1;
    if (r < 0 || r >= comm->nranks)
        return 0;
    int flags = net ? ccl__cpu_net_flags(net, r, by) : 0;
    if (comm->heap_base[r]) {
        flags |= atomic_load(&ccl__cpu_header(comm, r)->gone) ? CCL__NET_GONE : 0;
        flags |= atomic_load(&ccl__cpu_header(comm, r)->aborted) ? CCL__NET_ABORTED : 0;
    }
    for (int p = 0; p < comm->nranks; p++) {
        if (!comm->heap_base[p] || atomic_load(&ccl__cpu_header(comm, p)->abort) != (uint64_t)r + 1)
            continue;
        uint64_t why = atomic_load(&ccl__cpu_header(comm, p)->why);
        flags |= (int)(why & 0xff);
        if (*by < 0 && why & CCL__NET_LOST)
            *by = (int)(why >> 8) - 1;
    }
    return flags;
}

/* Sets every abort word of this node that is still 0 to ab, and tells the other nodes
 * whom it names, with what is known of that rank (which this rank's node-mates read in
 * its header when its own word says the same). */
static void stop_everyone(ccl_comm_t *comm, uint64_t ab)
{
    int by, flags = known(comm, (int)ab - 1, &by);
    if (flags && atomic_load(&ccl__cpu_header(comm, comm->rank)->abort) == ab)
        atomic_store(&ccl__cpu_header(comm, comm->rank)->why,
                     (uint64_t)flags | (flags & CCL__NET_LOST ? (uint64_t)(by + 1) << 8 : 0));
    for (int p = 0; p < comm->nranks; p++) {
        uint64_t zero = 0;
        if (comm->heap_base[p])
            atomic_compare_exchange_strong(&ccl__cpu_header(comm, p)->abort, &zero, ab);
    }
    if (heaps(comm)->net)
        ccl__cpu_net_abort(heaps(comm)->net, (int)ab - 1, flags, by);
}

void ccl__cpu_abort_for(ccl_comm_t *comm, int d)
{
    /* On behalf of a peer (only one whose process is gone, always of this node): recorded
     * first, unless the peer had stopped everyone itself before it went (its own word
     * says so: a failing rank sets its own first). */
    if (d != comm->rank && atomic_load(&ccl__cpu_header(comm, d)->abort) != (uint64_t)d + 1)
        atomic_store(&ccl__cpu_header(comm, d)->gone, 1);
    uint64_t zero = 0;
    atomic_compare_exchange_strong(&ccl__cpu_header(comm, d)->abort, &zero, (uint64_t)d + 1);
    stop_everyone(comm, (uint64_t)d + 1);
}

void ccl__cpu_abort_all(ccl_comm_t *comm)
{
    /* On this rank's own behalf, unless it was stopped already: then on behalf of the
     * rank that stopped it, which it passes on rather than itself, so that no rank hears
     * of this one before it hears whom the stop is about (cpu/net.c, lost()). */
    uint64_t ab = 0;
    if (atomic_compare_exchange_strong(&ccl__cpu_header(comm, comm->rank)->abort, &ab, (uint64_t)comm->rank + 1))
        ab = (uint64_t)comm->rank + 1;
    stop_everyone(comm, ab);
}

/* Processes: a peer whose process is gone (ccl__pid_dead), or -1. */
static int gone_peer(ccl_comm_t *comm)
{
    const CpuHeaps *h = heaps(comm);
    return h->pids ? ccl__first_dead(h->pids, comm->nranks, 0) : -1;
}

int ccl__cpu_clock_turn(ccl_comm_t *comm, CpuSpinClock *c)
{
    double now = ccl__now_ms();
    if (c->deadline == 0) {
        c->deadline = now + comm->timeout_ms;
        c->probe = now + CCL__PROBE_MS;
        return 0;
    }
    if (now > c->deadline)
        return 1;
    if (now > c->probe) {
        if (c->gone) {
            ccl__cpu_abort_for(comm, c->gone - 1);
            return 0;
        }
        int d = gone_peer(comm);
        c->gone = d + 1;
        c->probe = d >= 0 ? now : now + CCL__PROBE_MS;
    }
    return 0;
}

const char *ccl__cpu_culprit(ccl_comm_t *comm, uint64_t ab, char *buf, size_t len)
{
    int r = (int)ab - 1;
    const CpuHeaps *h = heaps(comm);
    atomic_thread_fence(memory_order_acquire); /* ab was read relaxed: see what was recorded before it */
    if (r < 0 || r >= comm->nranks) {
        snprintf(buf, len, "rank %d failed", r);
        return buf;
    }
    /* What was recorded when r stopped the comm or was found gone, not what its pid
     * says now: a rank that failed and then exited is a failure, not a death. A rank of
     * another node has only what the messages said of it. */
    int by, flags = known(comm, r, &by), far = !comm->heap_base[r], node = r / comm->local;
    int dead = !far && r != comm->rank && h->pids && ccl__pid_dead((long)h->pids[r]);
    char host[256], on[32];
    snprintf(on, sizeof on, " on node %d", node);
    if (far && flags & CCL__NET_GONE)
        snprintf(buf, len, "rank %d on node %d is gone (its node's ranks found its process dead)", r, node);
    else if (!far && (flags & CCL__NET_GONE || (flags & CCL__NET_LOST && !(flags & CCL__NET_ABORTED) && dead)))
        snprintf(buf, len, "rank %d (pid %lld) is gone from host %s (it died or exited)", r,
                 h->pids ? (long long)h->pids[r] : -1LL, ccl__host_name(host, sizeof host));
    else if (flags & CCL__NET_ABORTED)
        snprintf(buf, len, "rank %d%s aborted the communicator (ccl_comm_abort)", r, far ? on : "");
    else if (flags & CCL__NET_LOST)     /* (of this node: its process may still be ending) */
        snprintf(buf, len, "rank %d on node %d is gone (its connection to rank %d failed)", r, node, by);
    else
        snprintf(buf, len, "rank %d%s failed%s", r, far ? on : "", dead ? " (its own error says why; it has exited since)"
                                                                     : " (its own error says why)");
    return buf;
}

/* Rank p's barrier count: its heap header's, or for a rank of another node what the
 * proxy last heard from it. */
static _Atomic uint64_t *arrived_word(ccl_comm_t *comm, int p)
{
    return comm->heap_base[p] ? &ccl__cpu_header(comm, p)->arrived : ccl__cpu_net_arrived(heaps(comm)->net, p);
}

int ccl__cpu_rank_barrier(ccl_comm_t *comm, char *err, size_t errlen)
{
    _Atomic uint64_t *abort_flag = &ccl__cpu_header(comm, comm->rank)->abort;
    CpuNet *net = heaps(comm)->net;
    uint64_t k = ++comm->barriers;
    atomic_store_explicit(&ccl__cpu_header(comm, comm->rank)->arrived, k, memory_order_release);
    if (net && ccl__cpu_net_arrive(net, k) != 0)
        return snprintf(err, errlen, "rank %d: out of memory in the all-rank barrier", comm->rank), -1;
    CpuSpinClock clock = {0};
    int missing = 0;
    for (unsigned it = 0;; it++) {
        while (missing < comm->nranks && atomic_load_explicit(arrived_word(comm, missing), memory_order_acquire) >= k)
            missing++;
        if (missing == comm->nranks)
            return 0;
        uint64_t ab = atomic_load_explicit(abort_flag, memory_order_relaxed);
        if (ab) {
            char who[96];
            snprintf(err, errlen, "rank %d: all-rank barrier abandoned: %s", comm->rank, ccl__cpu_culprit(comm, ab, who, sizeof who));
            return -1;
        }
        if ((it & 63) == 63 && ccl__cpu_clock_turn(comm, &clock)) {
            snprintf(err, errlen,
                     "rank %d: all-rank barrier timed out after %d ms: rank %d did not arrive (it reached %llu of this "
                     "comm's barriers, this is barrier %llu)", comm->rank, comm->timeout_ms, missing,
                     (unsigned long long)atomic_load(arrived_word(comm, missing)), (unsigned long long)k);
            return -1;
        }
        /* Across nodes the waiter runs the proxy's sweep itself, as a point-to-point
         * group's waits do (cpu/p2p.c), unless the proxy thread is running it: this rank's
         * ARRIVE leaves and the others' are taken now, not at the proxy thread's next look,
         * which comes after a nap when the thread was idle or a group's worker swept for it
         * (cpu/net.c, proxy_main), as at the end of every v call; a nap asked for 20 us
         * lasts 85 to 145 us on a busy host. */
        if (net)
            ccl__cpu_net_progress(net);
        ccl__backoff(it);
    }
}
