/* cpu/heaps.h: the CPU backend's symmetric heaps (heaps.c), made and mapped when a
 * communicator starts. Included by cpu/backend.c only. */
#ifndef CCL_CPU_HEAPS_H
#define CCL_CPU_HEAPS_H

#include "backend.h"

typedef struct LocalWorld LocalWorld;

/* Where a comm's heaps live: ranks in one process share anonymous mappings (world);
 * ranks in several processes map each other's POSIX shm segments (shm) and know every
 * rank's pid, so waits notice a dead peer (pids, NULL in one process). */
typedef struct {
    struct CpuNet *net;              /* the inter-node proxy (cpu/net.c) on a comm of several nodes, else NULL */
    LocalWorld *world;
    uint64_t world_token;            /* its ccl__share_* token: each comm holds a reference */
    int shm;
    int64_t *pids;
} CpuHeaps;

/* Collective: agrees on the heap size (a default heap in processes shrinks to what
 * /dev/shm holds, the same on every rank), makes this rank's heap of comm->heap_bytes
 * and maps every peer's (comm->heap_base). On failure it has released what it made
 * and set the message. */
ccl_result_t ccl__cpu_heaps_create(ccl_comm_t *comm, const ccl_bootstrap_t *boot, CpuHeaps *h);

/* Releases this rank's share: in one process the last rank unmaps every heap. */
void ccl__cpu_heaps_destroy(ccl_comm_t *comm, CpuHeaps *h);

#endif
