/* emit_cuda.h: what the emitter's files share, private to compiler/emit_cuda*.c: the
 * per-rank emission state (Emit), the LL analysis' deliveries, and emit_analyze.c's
 * judgements of the plan, which emit_cuda.c prints from. Non-static names carry the
 * prefix cclc_emit_ (the entry points, cclc_emit_cuda and friends, are cclc.h's). */
#ifndef CCLC_EMIT_CUDA_H
#define CCLC_EMIT_CUDA_H

#include <stdio.h>

#include "cclc.h"
#include "cuda/abi.h"

/* LL analysis. A delivery is what one signal of a sender block publishes to one peer:
 * the remote writes (op, destination index) since its previous signal to that peer. The
 * k-th wait on p of block t pairs with the k-th signal of p's block t, so the waiter
 * knows exactly which lines to receive. */
typedef struct {
    const PlanOp *op;
    int d;
} LLItem;
typedef struct {
    int n;
    LLItem *items;
} LLDelivery;
typedef struct {
    int n, cap;
    LLDelivery *v;
} LLDeliveries;

/* Everything the per-rank code emission needs in one place. */
typedef struct {
    FILE *out;
    const Plan *plan;
    const Program *prog;
    int rank;
    int nslots;           /* semaphore slots for one instance: plan->nsems */
    int port;             /* this rank posts port-channel puts to the host proxy */
    long *scratch_prefix; /* per buffer: chunks of the scratch buffers before it */
    long scratch_chunks;  /* all scratch buffers together */
    /* LL packets (see cclc_emit_ll_analyze). Chunks of every buffer have an LL shadow on each
     * rank: global chunk index in, then out, then scratch. */
    int ll;
    int ll128;            /* the lines are LL128's (128 bytes, 15 data words and a flag) */
    long total_chunks;
    LLDeliveries *deliv;  /* per plan block (a sender): its deliveries to this rank, in order */
    int *pend;            /* per peer: remote writes of the current block since its last signal */
    int *waits;           /* per peer: waits of the current block so far */
    int heard_all;        /* the blocks of this rank together receive lines from every peer:
                           * they record whose arrived (`heard`) for the exit check */
    int hears;            /* ... and the current block receives some (emit_cuda.c) */
    const PlanBlock *cur; /* the block being emitted */
    /* Who runs the transfer being emitted: the whole block (item < 0), or warp group
     * item % G of a run of independent transfers (emit_xfer_run). */
    int item;
    /* A v-collective: chunks sized by their segments, from the tables in `vt` (see
     * emit_op_part_v); scratch's chunk stride is then the kernel's vcs, else a.cs. */
    int v;
    int v_idles; /* its instances past the longest segment's need return (vinst) */
    const char *cs;
} Emit;

static inline int emit_first_line(const PlanOp *op) { return op->nlines ? op->lines[0] : 0; }
static inline int emit_op_chunks(const PlanOp *op) { return op->ndst ? op->dst[0].count : op->src[0].count; }

/* ===== emit_analyze.c: what the plan allows, decided before anything is printed ===== */

/* Decides whether rank e->rank's kernel can use LL packets and collects, per sender
 * block, its deliveries to that rank (e->deliv; cclc_emit_ll_free frees them). Returns 1
 * when LL applies. */
int cclc_emit_ll_analyze(Emit *e);
void cclc_emit_ll_free(Emit *e);
/* The plan block index of (rank, tb), or -1; the delivery the k-th wait of block tb on
 * `peer` receives, or NULL (a pure synchronization pair, still a semaphore). */
int cclc_emit_block_index(Emit *e, int rank, int tb);
const LLDelivery *cclc_emit_delivery(Emit *e, int peer, int tb, int k);
/* Whether operands may share memory, and chunks of two transfers may run at once. */
int cclc_emit_refs_overlap(const Ref *x, int jx, const Ref *y, int jy);
int cclc_emit_chunks_independent(const PlanOp *a, int ja, const PlanOp *b, int jb);
/* The end of the run of pairwise independent SM transfers from op `first` (two chunks
 * or more), else `first`. */
int cclc_emit_xfer_run_end(const PlanBlock *b, int first);
/* The most sources a fused receive and reduce takes (registers: two words of each in
 * flight per thread). */
enum { EMIT_FUSE_MAX_SOURCES = 8 };
/* Whether chunk `chunk` of this rank's `buf` is used by an op of its blocks but `skip`;
 * whether the LL wait ops[i] of b and the transfer after it fuse (from[x]: the peer
 * whose lines source x is, -1 for ordinary memory). */
int cclc_emit_chunk_used_elsewhere(const Emit *e, int buf, int chunk, const PlanOp *skip);
int cclc_emit_fusable(Emit *e, const PlanBlock *b, int i, int *from);

#endif
