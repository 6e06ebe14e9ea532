/* cpu/waits.c: the CPU backend's abort words, wait clocks, culprits and all-rank barrier
 * (waits.h).
 *
 * A dead peer is found by its pid: cpu/heaps.c records every rank's when ranks are
 * processes (of its own node only, on a comm of several). cpu/backend.c's CpuComm begins
 * with its CpuHeaps, which is all of it this file reads. Ranks of other nodes have no
 * header here: an abort reaches them as a message of the inter-node proxy (cpu/net.c),
 * and what it said of the rank it names stands in for that rank's header words. */
#include <stdio.h>

#include "cpu/heaps.h"
#include "cpu/net.h"
#include "cpu/waits.h"

static const CpuHeaps *heaps(ccl_comm_t *comm)
{
    return comm->be_comm;
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
    for (int p = 0; p < comm->nranks; p++) {
        zero = 0;
        if (comm->heap_base[p])
            atomic_compare_exchange_strong(&ccl__cpu_header(comm, p)->abort, &zero, (uint64_t)d + 1);
    }
    if (heaps(comm)->net)
        ccl__cpu_net_abort(heaps(comm)->net, d,
                           (atomic_load(&ccl__cpu_header(comm, d)->gone) ? CCL__NET_GONE : 0) |
                           (atomic_load(&ccl__cpu_header(comm, d)->aborted) ? CCL__NET_ABORTED : 0));
}

void ccl__cpu_abort_all(ccl_comm_t *comm)
{
    ccl__cpu_abort_for(comm, comm->rank);
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
    /* What the rank that set the abort word recorded, not what its pid says now: a rank
     * that failed and then exited is a failure, not a death. */
    int far = r >= 0 && r < comm->nranks && !comm->heap_base[r];
    int flags = far && h->net ? ccl__cpu_net_flags(h->net, r) : 0;
    if (r < 0 || r >= comm->nranks)
        snprintf(buf, len, "rank %d failed", r);
    else if (far)
        snprintf(buf, len, "rank %d on node %d %s", r, r / comm->local,
                 flags & CCL__NET_GONE ? "is gone (its node's ranks found its process dead)"
                 : flags & CCL__NET_ABORTED ? "aborted the communicator (ccl_comm_abort)" : "failed (its own error says why)");
    else if (atomic_load(&ccl__cpu_header(comm, r)->gone)) {
        char host[256];
        snprintf(buf, len, "rank %d (pid %lld) is gone from host %s (it died or exited)", r,
                 h->pids ? (long long)h->pids[r] : -1LL, ccl__host_name(host, sizeof host));
    }
    else if (atomic_load(&ccl__cpu_header(comm, r)->aborted))
        snprintf(buf, len, "rank %d aborted the communicator (ccl_comm_abort)", r);
    else
        snprintf(buf, len, "rank %d failed%s", r, r != comm->rank && h->pids && ccl__pid_dead((long)h->pids[r])
                 ? " (its own error says why; it has exited since)" : " (its own error says why)");
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
    uint64_t k = ++comm->barriers;
    atomic_store_explicit(&ccl__cpu_header(comm, comm->rank)->arrived, k, memory_order_release);
    if (heaps(comm)->net && ccl__cpu_net_arrive(heaps(comm)->net, k) != 0)
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
        ccl__backoff(it);
    }
}
