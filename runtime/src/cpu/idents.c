/* cpu/idents.c: the CPU backend's call entry (idents.h): each rank publishes the
 * identity of the call it starts (CclIdent) in its heap header's ring, and compares it
 * with every peer's before any of its blocks touches a peer (docs/internals.md, "The
 * call entry"). A peer of another node (docs/multinode.md) has no header here: the
 * identity travels both ways as a message of the inter-node proxy (cpu/net.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/heaps.h"
#include "cpu/idents.h"
#include "cpu/net.h"
#include "cpu/waits.h"

static const CpuHeaps *heaps(ccl_comm_t *comm)
{
    return comm->be_comm;
}

static uint64_t *ident_entry(ccl_comm_t *comm, int rank, uint64_t seq)
{
    return (uint64_t *)(comm->heap_base[rank] + CCL_IDENT_OFF + (seq % CCL_IDENT_RING) * sizeof(CclIdent));
}

/* Peer p's ring entry for seq into *out when p has published that call: 1, else 0. */
static int ident_read(ccl_comm_t *comm, int p, uint64_t seq, CclIdent *out)
{
    if (!comm->heap_base[p])
        return ccl__cpu_net_ident_read(heaps(comm)->net, p, seq, out);
    uint64_t *e = ident_entry(comm, p, seq), *dst = (uint64_t *)out;
    if (__atomic_load_n(&e[0], __ATOMIC_ACQUIRE) < seq)
        return 0;
    for (size_t k = 1; k < sizeof *out / 8; k++)
        dst[k] = __atomic_load_n(&e[k], __ATOMIC_RELAXED);
    atomic_thread_fence(memory_order_acquire);
    dst[0] = __atomic_load_n(&e[0], __ATOMIC_RELAXED);
    return 1;
}

/* "2, 5": the ranks not yet seen, for messages. */
static const char *unseen_ranks(const unsigned char *seen, int N, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (int p = 0; p < N && n + 16 < len; p++)
        if (!seen[p])
            n += (size_t)snprintf(buf + n, len - n, "%s%d", n ? ", " : "", p);
    return buf;
}

/* Publishes c's identity in this rank's header, then compares it with every peer's as
 * the peers publish theirs (bounded, abort-aware): 0 when all match, or -1 after
 * reporting and stopping every rank. Before any block runs, so a rank that runs another
 * call never signals, reads or writes a peer. Each pass compares every peer that has
 * published before it looks at the abort flag: whichever rank found a difference had
 * published, so every rank names the two sides itself rather than only "rank k failed".
 * A peer waits here too, so none is more than one call ahead and the entry read is the
 * call's (an entry newer than seq, a graph-like replay, is not compared). */
int ccl__cpu_check_idents(ccl_comm_t *comm, const CclCall *c)
{
    const uint64_t seq = c->id.seq;
    uint64_t *mine = ident_entry(comm, comm->rank, seq);
    const uint64_t *src = (const uint64_t *)&c->id;
    for (size_t k = 1; k < sizeof c->id / 8; k++)
        __atomic_store_n(&mine[k], src[k], __ATOMIC_RELAXED);
    __atomic_store_n(&mine[0], seq, __ATOMIC_RELEASE);
    if (heaps(comm)->net && ccl__cpu_net_ident(heaps(comm)->net, &c->id) != 0) {
        ccl__cpu_abort_all(comm);
        return -1;
    }
    int N = comm->nranks, pending = N - 1;
    unsigned char seen_small[256], *seen = N <= 256 ? seen_small : malloc((size_t)N);
    if (!seen) {
        ccl__set_async_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory running %s", comm->rank, c->alg->file);
        ccl__cpu_abort_all(comm);
        return -1;
    }
    memset(seen, 0, (size_t)N);
    seen[comm->rank] = 1;
    _Atomic uint64_t *abort_flag = &ccl__cpu_header(comm, comm->rank)->abort;
    CpuSpinClock clock = {0};
    int rc = -1;
    char late[256];
    for (unsigned it = 0;; it++) {
        for (int p = 0; p < N; p++) {
            CclIdent theirs;
            if (seen[p] || !ident_read(comm, p, seq, &theirs))
                continue;
            seen[p] = 1;
            pending--;
            if (theirs.seq == seq && theirs.hash != c->id.hash) {
                ccl__ident_report(comm, &c->id, &theirs, p);
                ccl__cpu_abort_all(comm);
                goto out;
            }
        }
        if (pending == 0) {
            rc = 0;
            goto out;
        }
        uint64_t ab = atomic_load_explicit(abort_flag, memory_order_relaxed);
        if (ab) {
            char who[96];
            ccl__set_async_error(comm, CCL_ERR_PEER_FAILED,
                                 "rank %d: %s (call %llu) stopped waiting for rank%s %s to start the call because %s",
                                 comm->rank, c->alg->file, (unsigned long long)seq, pending > 1 ? "s" : "",
                                 unseen_ranks(seen, N, late, sizeof late), ccl__cpu_culprit(comm, ab, who, sizeof who));
            goto out;
        }
        if ((it & 63) == 63 && ccl__cpu_clock_turn(comm, &clock)) {
            ccl__set_async_error(comm, CCL_ERR_TIMEOUT,
                                 "timeout: rank %d: %s (call %llu): peer rank%s %s did not start this call within %d ms",
                                 comm->rank, c->alg->file, (unsigned long long)seq, pending > 1 ? "s" : "",
                                 unseen_ranks(seen, N, late, sizeof late), comm->timeout_ms);
            ccl__cpu_abort_all(comm);
            goto out;
        }
        if (heaps(comm)->net)
            ccl__cpu_net_progress(heaps(comm)->net);   /* the identities of other nodes' ranks */
        ccl__backoff(it);
    }
out:
    if (seen != seen_small)
        free(seen);
    return rc;
}
