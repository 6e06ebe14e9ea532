/* cpu/p2p.h: point-to-point on the CPU backend (p2p.c): one group's sends and receives
 * run by the comm's worker through the channels of base.h and channels.c
 * ("Point-to-point").
 * Included by cpu/backend.c only. */
#ifndef CCL_CPU_P2P_H
#define CCL_CPU_P2P_H

#include "backend.h"
#include "cpu/net.h"

/* What the worker keeps across groups: per peer, the slots this rank has filled of its
 * channel to the peer and emptied of the peer's channel to it (so far, the same as the
 * semaphores it wrote). NULL until the first group. */
typedef struct {
    uint64_t *filled, *emptied;      /* N each, one block */
} CpuP2p;

/* Runs one group's calls, all of them at once, to completion or failure (reported with
 * ccl__set_async_error, every rank stopped). On the comm's worker thread. net: the
 * inter-node proxy, through which calls with a peer of another node go (NULL on one
 * node). */
void ccl__cpu_p2p_run(ccl_comm_t *comm, CpuNet *net, CpuP2p *st, const CclP2pOp *ops, int n);
void ccl__cpu_p2p_free(CpuP2p *st);

#endif
