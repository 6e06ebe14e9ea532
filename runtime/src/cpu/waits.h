/* cpu/waits.h: what every bounded wait of the CPU backend uses (waits.c): the heap
 * headers' abort words, the clock that bounds a wait and notices dead peers, how a
 * stopped rank names the culprit, and the all-rank barrier. Shared by cpu/backend.c
 * (plans) and cpu/p2p.c (point-to-point); no other backend may call them. */
#ifndef CCL_CPU_WAITS_H
#define CCL_CPU_WAITS_H

#include "backend.h"

/* Rank `rank`'s heap header, through this process's mapping of its heap. Host
 * addresses: on GPUs heap_base holds device addresses (the GPU backend keeps its own
 * abort and barrier state on the device). */
static inline CclHeapHeader *ccl__cpu_header(ccl_comm_t *comm, int rank)
{
    return (CclHeapHeader *)comm->heap_base[rank];
}

/* Stops every rank on behalf of rank d (a failure of its own, or its death), through
 * their heap headers (see CclHeapHeader), and the other nodes through the proxy (an
 * ABORT): the abort words say d + 1, d's own first. */
void ccl__cpu_abort_for(ccl_comm_t *comm, int d);
/* Stops this rank and every peer: on this rank's behalf, or, when it was stopped
 * already, on behalf of the rank that stopped it, which it passes on. */
void ccl__cpu_abort_all(ccl_comm_t *comm);

/* The clock of one bounded wait: its deadline (set at the first reading), when it next
 * looks for dead peers, and a peer found gone at the last look (1 + rank). Zeroed at
 * the start of every wait. */
typedef struct {
    double deadline, probe;
    int gone;
} CpuSpinClock;

/* One clock reading of a wait (every 64 turns): 1 when the timeout has passed. Every
 * CCL__PROBE_MS it also looks for a dead peer; one found gone is acted on (abort_for)
 * only at the next look, if the wait still has not completed: a peer that did its part
 * and then exited is no failure. The caller sees the abort word at its next turn. */
int ccl__cpu_clock_turn(ccl_comm_t *comm, CpuSpinClock *c);

/* How a rank stopped by abort word `ab` names the culprit into buf, from what was
 * recorded when the abort word was set: "rank 2 failed (its own error says why)",
 * "rank 2 aborted the communicator (ccl_comm_abort)", "rank 2 (pid 4711) is gone", and
 * for a rank of another node "rank 2 on node 1 is gone (its node's ranks found its
 * process dead)" or "... (its connection to rank 0 failed)". */
const char *ccl__cpu_culprit(ccl_comm_t *comm, uint64_t ab, char *buf, size_t len);

/* The all-rank barrier on the heap headers (a rank of another node: through the proxy,
 * whose sweep the waiter runs itself); bounded by the timeout. 0 or -1 (timeout or
 * abort, message in err, naming a rank that did not arrive). Called by one thread per
 * rank (the comm's worker), in the same order on every rank. */
int ccl__cpu_rank_barrier(ccl_comm_t *comm, char *err, size_t errlen);

#endif
