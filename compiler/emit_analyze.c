/* emit_analyze.c: what the CUDA emitter decides about a plan before it prints anything
 * (emit_cuda.h): whether a kernel can run with lines and what each of its waits
 * receives (the LL analysis), which transfers are independent and may run at once, and
 * which waits fuse with the transfer after them. Reads the plan; prints nothing, and
 * calls nothing of emit_cuda.c. */
#include <stdlib.h>

#include "emit_cuda.h"

/* Decides whether rank `rank`'s kernel can use LL packets and collects, per sender
 * block, its deliveries to `rank`. LL needs every data movement between ranks to be a
 * remote write published by a later signal of the same block (no remote reads, no port
 * channels, no write left unsignalled); otherwise the program runs as Simple, which
 * is equally correct. Returns 1 when LL applies. */
int cclc_emit_ll_analyze(Emit *e)
{
    const Plan *plan = e->plan;
    /* Named semaphores, gets and port puts rule lines out for every rank
     * (cclc_plan_can_run_lines); then every remote write into this rank must be followed
     * by a signal to it that its lines can travel with. */
    int ok = cclc_plan_can_run_lines(plan);
    e->deliv = cclc_calloc((size_t)plan->nblocks, sizeof *e->deliv);
    for (int bi = 0; bi < plan->nblocks && ok; bi++) {
        const PlanBlock *b = &plan->blocks[bi];
        int npend = 0, cap = 0;
        LLItem *pend = NULL;
        for (int i = 0; i < b->nops && ok; i++) {
            const PlanOp *op = &b->ops[i];
            if (op->kind == OP_XFER) {
                for (int d = 0; d < op->ndst; d++) {
                    if (op->dst[d].rank == b->rank || op->dst[d].rank != e->rank) continue;
                    if (npend == cap) {
                        cap = cap ? 2 * cap : 8;
                        pend = cclc_realloc(pend, sizeof *pend * (size_t)cap);
                    }
                    pend[npend++] = (LLItem){op, d};
                }
            } else if (op->kind == OP_SIGNAL) {
                for (int k = 0; k < op->npeer; k++) {
                    if (op->peer[k] != e->rank) continue;
                    LLDeliveries *dv = &e->deliv[bi];
                    if (dv->n == dv->cap) {
                        dv->cap = dv->cap ? 2 * dv->cap : 8;
                        dv->v = cclc_realloc(dv->v, sizeof *dv->v * (size_t)dv->cap);
                    }
                    dv->v[dv->n].n = npend;
                    dv->v[dv->n].items = npend ? pend : NULL;
                    dv->n++;
                    if (npend) {
                        pend = NULL;
                        npend = cap = 0;
                    }
                }
            }
        }
        /* Remote writes from other ranks to anyone are checked when those ranks are
         * emitted; here only writes to this rank matter. */
        if (npend) ok = 0;
        free(pend);
    }
    return ok;
}

void cclc_emit_ll_free(Emit *e)
{
    if (!e->deliv) return;
    for (int bi = 0; bi < e->plan->nblocks; bi++) {
        for (int k = 0; k < e->deliv[bi].n; k++) free(e->deliv[bi].v[k].items);
        free(e->deliv[bi].v);
    }
    free(e->deliv);
    e->deliv = NULL;
}

/* The plan block index of (rank, tb), or -1. */
int cclc_emit_block_index(Emit *e, int rank, int tb)
{
    for (int i = 0; i < e->plan->nblocks; i++)
        if (e->plan->blocks[i].rank == rank && e->plan->blocks[i].tb == tb) return i;
    return -1;
}

/* The delivery the k-th wait of block tb on `peer` receives, or NULL (a pure
 * synchronization pair, still a semaphore). */
const LLDelivery *cclc_emit_delivery(Emit *e, int peer, int tb, int k)
{
    int bi = cclc_emit_block_index(e, peer, tb);
    if (bi < 0 || k >= e->deliv[bi].n || e->deliv[bi].v[k].n == 0) return NULL;
    return &e->deliv[bi].v[k];
}

/* Whether operands x (at chunk offset jx) and y (at jy) may share memory: the same
 * chunk of one buffer of one rank, or a rank's in and out (the same memory in place). */
int cclc_emit_refs_overlap(const Ref *x, int jx, const Ref *y, int jy)
{
    if (x->rank != y->rank) return 0;
    if (x->buf != y->buf)
        return (x->buf == BUF_IN || x->buf == BUF_OUT) && (y->buf == BUF_IN || y->buf == BUF_OUT);
    return x->chunk + jx == y->chunk + jy;
}

/* Whether chunk ja of transfer a and chunk jb of transfer b may run at once: neither
 * writes what the other reads or writes. */
int cclc_emit_chunks_independent(const PlanOp *a, int ja, const PlanOp *b, int jb)
{
    for (int d = 0; d < a->ndst; d++) {
        for (int x = 0; x < b->ndst; x++)
            if (cclc_emit_refs_overlap(&a->dst[d], ja, &b->dst[x], jb)) return 0;
        for (int x = 0; x < b->nsrc; x++)
            if (cclc_emit_refs_overlap(&a->dst[d], ja, &b->src[x], jb)) return 0;
    }
    for (int d = 0; d < b->ndst; d++)
        for (int x = 0; x < a->nsrc; x++)
            if (cclc_emit_refs_overlap(&b->dst[d], jb, &a->src[x], ja)) return 0;
    return 1;
}

/* The end of the run of SM transfers starting at op `first` whose chunks are pairwise
 * independent, when the run has two chunks or more; otherwise `first`. Each transfer
 * alone costs the block a trip to memory (a thread cannot load the next transfer's
 * data before storing this one's: they may alias), so on small messages N-1 copies in
 * a row cost N-1 trips; run at once, one. The scheduler already puts a sync between
 * ops that touch the same chunks of one buffer, and expand.c rejects a step that
 * overlaps itself at another position; but the scheduler does not see in and out as one
 * buffer, which they are in place, so independence is checked here chunk by chunk. */
int cclc_emit_xfer_run_end(const PlanBlock *b, int first)
{
    int end = first, chunks = 0;
    for (; end < b->nops; end++) {
        const PlanOp *op = &b->ops[end];
        if (op->kind != OP_XFER || cclc_chan_async(op->chan)) break;
        int ok = 1;
        for (int j = 0; j < emit_op_chunks(op) && ok; j++) {
            for (int i = first; i <= end && ok; i++)
                for (int k = 0; k < (i == end ? j : emit_op_chunks(&b->ops[i])) && ok; k++)
                    ok = cclc_emit_chunks_independent(op, j, &b->ops[i], k);
        }
        if (!ok) break;
        chunks += emit_op_chunks(op);
    }
    return chunks >= 2 ? end : first;
}

/* Whether chunk `chunk` of this rank's buffer `buf` is used by any op of this rank's
 * blocks other than `skip` (the op that would consume it). */
int cclc_emit_chunk_used_elsewhere(const Emit *e, int buf, int chunk, const PlanOp *skip)
{
    for (int bi = 0; bi < e->plan->nblocks; bi++) {
        const PlanBlock *b = &e->plan->blocks[bi];
        if (b->rank != e->rank) continue;
        for (int i = 0; i < b->nops; i++) {
            const PlanOp *op = &b->ops[i];
            if (op == skip) continue;
            for (int k = 0; k < op->ndst + op->nsrc; k++) {
                const Ref *r = k < op->ndst ? &op->dst[k] : &op->src[k - op->ndst];
                if (r->rank == e->rank && r->buf == buf && chunk >= r->chunk && chunk < r->chunk + r->count)
                    return 1;
            }
        }
    }
    return 0;
}

/* Whether an LL wait (ops[i]) and the transfer after it fuse (emit_ll_reduce): every
 * peer of the wait delivers lines, each delivery is one scratch chunk of this rank
 * that the transfer reads once, as one of its sources, and nothing else touches; the
 * transfer is local, one chunk, with at most EMIT_FUSE_MAX_SOURCES sources, and the
 * program has one chunk per unit (so the sender's and the transfer's parts of a chunk
 * are the same elements: both are as long as the count). from[x]: the peer whose
 * lines source x is, -1 for ordinary memory. */
int cclc_emit_fusable(Emit *e, const PlanBlock *b, int i, int *from)
{
    if (!e->ll || e->v || e->ll128 || e->prog->chunks != 1 || i + 1 >= b->nops) return 0;
    const PlanOp *w = &b->ops[i], *x = &b->ops[i + 1];
    if (w->kind != OP_WAIT || x->kind != OP_XFER || cclc_chan_async(x->chan) || x->nsrc > EMIT_FUSE_MAX_SOURCES ||
        emit_op_chunks(x) != 1)
        return 0;
    for (int d = 0; d < x->ndst; d++)
        if (x->dst[d].rank != e->rank) return 0;
    for (int s = 0; s < x->nsrc; s++) {
        if (x->src[s].rank != e->rank || x->src[s].count != 1) return 0;
        from[s] = -1;
    }
    for (int k = 0; k < w->npeer; k++) {
        const LLDelivery *dv = cclc_emit_delivery(e, w->peer[k], b->tb, e->waits[w->peer[k]]);
        if (!dv) return 0;
        for (int t = 0; t < dv->n; t++) {
            const Ref *r = &dv->items[t].op->dst[dv->items[t].d];
            if (r->buf < BUF_SCRATCH0 || r->count != 1) return 0;
            int found = -1;
            for (int s = 0; s < x->nsrc; s++)
                if (x->src[s].buf == r->buf && x->src[s].chunk == r->chunk) found = found < 0 ? s : -2;
            if (found < 0 || from[found] >= 0 || cclc_emit_chunk_used_elsewhere(e, r->buf, r->chunk, x)) return 0;
            from[found] = w->peer[k];
        }
    }
    return 1;
}
