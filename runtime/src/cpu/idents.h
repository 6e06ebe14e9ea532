/* cpu/idents.h: the CPU backend's call entry (idents.c). Included by cpu/backend.c only. */
#ifndef CCL_CPU_IDENTS_H
#define CCL_CPU_IDENTS_H

#include "backend.h"

/* Publishes c's identity, then compares it with every peer's as the peers publish theirs
 * (bounded, abort-aware): 0 when all match, or -1 after reporting and stopping every
 * rank. The worker calls it before any block of c runs. */
int ccl__cpu_check_idents(ccl_comm_t *comm, const CclCall *c);

#endif
