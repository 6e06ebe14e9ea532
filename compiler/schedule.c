/* schedule.c: from a proved Program to the Plan that backends run.
 *
 * Takes the expanded, verified Program; gives, per rank and logical thread block, a
 * list of PlanOps:
 *  - every data step becomes an OP_XFER (dsts = reduce(srcs); one src is a copy);
 *  - fusion of neighbours in one block: consecutive signals (or waits) become one
 *    batched op; a reduce or copy followed by a copy of its result becomes one op with
 *    two destinations ("reduce then put"); consecutive copies of one source become one
 *    op with several destinations ("broadcast"). Fusion never crosses a signal, wait or
 *    barrier, and only merges ops whose accesses do not conflict, so every element is
 *    computed exactly as the program said, in the same order;
 *  - OP_SYNC (a barrier among the threads of one block) before an op that touches
 *    chunks an earlier op of the block wrote or read since the last synchronization:
 *    threads split ops by element, and two ops may split the same bytes differently;
 *  - semaphore slots for signals and waits (plan_sem_slot).
 * The Program is left unchanged; the Plan refers to it. */
#include <string.h>

#include "cclc.h"

typedef VEC(PlanOp) OpVec;
typedef VEC(Ref) RefVec;

static int refs_equal(Ref a, Ref b)
{
    return a.rank == b.rank && a.buf == b.buf && a.chunk == b.chunk && a.count == b.count;
}

/* Does any ref of list a overlap any ref of list b? */
static int any_overlap(const Ref *a, int na, const Ref *b, int nb)
{
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            if (ref_ranges_overlap(a[i], b[j]))
                return 1;
    return 0;
}

static void add_line(Arena *arena, PlanOp *op, int line)
{
    for (int i = 0; i < op->nlines; i++)
        if (op->lines[i] == line)
            return;
    int *lines = cclc_arena_alloc(arena, sizeof *lines * (size_t)(op->nlines + 1));
    int k = 0;
    for (int i = 0; i < op->nlines && op->lines[i] < line; i++)
        lines[k++] = op->lines[i];
    lines[k++] = line;
    for (int i = k - 1; i < op->nlines; i++)
        lines[k++] = op->lines[i];
    op->lines = lines;
    op->nlines++;
}

static Ref *append_refs(Arena *arena, const Ref *a, int na, const Ref *b, int nb)
{
    Ref *out = cclc_arena_alloc(arena, sizeof *out * (size_t)(na + nb));
    if (na)
        memcpy(out, a, sizeof *out * (size_t)na);
    if (nb)
        memcpy(out + na, b, sizeof *out * (size_t)nb);
    return out;
}

/* Tries to fold data op `b` into the data op `a` just before it; returns 1 if done.
 * Both forms keep a's sources and add b's destination, so b must not write anything
 * a reads or writes, and b's destination must not be one of a's destinations. */
static int fuse_xfer(Arena *arena, PlanOp *a, const PlanOp *b)
{
    /* Port-channel puts are served by the host proxy one by one; fuse memory ops only. */
    if (a->kind != OP_XFER || b->kind != OP_XFER || b->nsrc != 1 || cclc_chan_async(a->chan) || cclc_chan_async(b->chan))
        return 0;
    if (any_overlap(b->dst, b->ndst, a->src, a->nsrc) || any_overlap(b->dst, b->ndst, a->dst, a->ndst))
        return 0;
    int same_source = a->nsrc == 1 && refs_equal(a->src[0], b->src[0]) && !any_overlap(a->dst, a->ndst, b->src, 1);
    int of_result = 0;
    for (int i = 0; i < a->ndst; i++)
        if (refs_equal(a->dst[i], b->src[0]))
            of_result = 1;
    if (!same_source && !of_result)
        return 0;
    a->dst = append_refs(arena, a->dst, a->ndst, b->dst, b->ndst);
    a->ndst += b->ndst;
    for (int i = 0; i < b->nlines; i++)
        add_line(arena, a, b->lines[i]);
    return 1;
}

/* Tries to fold a signal/wait/flush op into the same kind just before it. */
static int fuse_sync(Arena *arena, PlanOp *a, const PlanOp *b)
{
    if (a->kind != b->kind || (a->kind != OP_SIGNAL && a->kind != OP_WAIT && a->kind != OP_FLUSH))
        return 0;
    /* A batch names each peer once: two waits on one peer are two distinct waits. */
    for (int i = 0; i < a->npeer; i++)
        if (a->peer[i] == b->peer[0])
            return 0;
    int *peer = cclc_arena_alloc(arena, sizeof *peer * (size_t)(a->npeer + 1));
    int *sem = cclc_arena_alloc(arena, sizeof *sem * (size_t)(a->npeer + 1));
    memcpy(peer, a->peer, sizeof *peer * (size_t)a->npeer);
    memcpy(sem, a->sem, sizeof *sem * (size_t)a->npeer);
    peer[a->npeer] = b->peer[0];
    sem[a->npeer] = b->sem[0];
    a->peer = peer;
    a->sem = sem;
    a->npeer++;
    for (int i = 0; i < b->nlines; i++)
        add_line(arena, a, b->lines[i]);
    return 1;
}

static PlanOp op_from_step(Arena *arena, const Program *p, int ntb, const Block *b, const Step *s, int *content)
{
    PlanOp op = {0};
    add_line(arena, &op, s->loc.line);
    switch (s->kind) {
    case STEP_PUT:
    case STEP_GET:
    case STEP_COPY:
    case STEP_REDUCE:
        op.kind = OP_XFER;
        op.ndst = 1;
        op.dst = append_refs(arena, &s->dst, 1, NULL, 0);
        op.nsrc = s->nsrc;
        op.src = append_refs(arena, s->src, s->nsrc, NULL, 0);
        op.chan = s->chan;
        op.content = content;
        return op;
    case STEP_SIGNAL:
    case STEP_WAIT:
    case STEP_FLUSH:
        op.kind = s->kind == STEP_SIGNAL ? OP_SIGNAL : s->kind == STEP_WAIT ? OP_WAIT : OP_FLUSH;
        op.npeer = 1;
        op.peer = cclc_arena_alloc(arena, sizeof *op.peer);
        op.sem = cclc_arena_alloc(arena, sizeof *op.sem);
        op.peer[0] = s->peer;
        /* A signal bumps the peer's slot for (this tb, this rank); a wait watches this
         * rank's slot for (this tb, the peer). */
        op.sem[0] = s->kind == STEP_SIGNAL ? plan_sem_slot(p->nranks, s->tag * ntb + b->tb, b->rank)
                                           : plan_sem_slot(p->nranks, s->tag * ntb + b->tb, s->peer);
        return op;
    case STEP_BARRIER:
        op.kind = OP_BARRIER;
        return op;
    }
    internal_error("unknown step kind %d", s->kind);
}

/* Accesses since the last point where every thread of the block was synchronized;
 * the last op's own accesses start at last_reads, last_writes. */
typedef struct {
    RefVec reads, writes;
    int last_reads, last_writes;
} Pending;

/* Would op conflict with the first nr reads and nw writes of pend? */
static int conflicts(const PlanOp *op, const Pending *pend, int nr, int nw)
{
    return any_overlap(op->src, op->nsrc, pend->writes.v, nw) || any_overlap(op->dst, op->ndst, pend->writes.v, nw) ||
           any_overlap(op->dst, op->ndst, pend->reads.v, nr);
}

static void record(Arena *arena, Pending *pend, const PlanOp *op)
{
    pend->last_reads = pend->reads.n;
    pend->last_writes = pend->writes.n;
    for (int k = 0; k < op->nsrc; k++)
        vec_push(arena, &pend->reads, op->src[k]);
    for (int k = 0; k < op->ndst; k++)
        vec_push(arena, &pend->writes, op->dst[k]);
}

/* content: Proof.content of this block, else NULL. Fused ops keep the first op's
 * content: fusion only adds destinations of the same data (for a fixed-size collective,
 * an added in/out destination has the data's position, and so its length). */
static void schedule_block(Arena *arena, const Program *p, int ntb, const Block *b, int **content, PlanBlock *out)
{
    OpVec ops = {0};
    Pending pend = {0};
    for (int i = 0; i < b->nsteps; i++) {
        PlanOp op = op_from_step(arena, p, ntb, b, &b->steps[i], content ? content[i] : NULL);
        PlanOp *last = ops.n ? &ops.v[ops.n - 1] : NULL;
        if (op.kind != OP_XFER) {
            if (last && fuse_sync(arena, last, &op))
                continue;
            /* Backends synchronize a block's threads around signals, waits and barriers. */
            pend.reads.n = pend.writes.n = pend.last_reads = pend.last_writes = 0;
            vec_push(arena, &ops, op);
            continue;
        }
        /* Fusing moves op up to the previous op's place, so it must not conflict with
         * anything before that op since the last synchronization. */
        if (last && !conflicts(&op, &pend, pend.last_reads, pend.last_writes) && fuse_xfer(arena, last, &op)) {
            for (int k = 0; k < op.ndst; k++)
                vec_push(arena, &pend.writes, op.dst[k]);
            continue;
        }
        if (conflicts(&op, &pend, pend.reads.n, pend.writes.n)) {
            PlanOp sync = {.kind = OP_SYNC};
            add_line(arena, &sync, b->steps[i].loc.line);
            vec_push(arena, &ops, sync);
            pend.reads.n = pend.writes.n = 0;
        }
        record(arena, &pend, &op);
        vec_push(arena, &ops, op);
    }
    out->rank = b->rank;
    out->tb = b->tb;
    out->nops = ops.n;
    out->ops = ops.v;
}

int cclc_plan_has_port_puts(const Plan *plan, int rank)
{
    for (int i = 0; i < plan->nblocks; i++) {
        const PlanBlock *b = &plan->blocks[i];
        for (int j = 0; (rank < 0 || b->rank == rank) && j < b->nops; j++)
            if (b->ops[j].kind == OP_XFER && cclc_chan_async(b->ops[j].chan))
                return 1;
    }
    return 0;
}

int cclc_plan_barrier_blocks(const Plan *plan)
{
    int most = 0;
    for (int i = 0; i < plan->nblocks; i++) {
        const PlanBlock *b = &plan->blocks[i];
        int ntb = plan->prog->ntb[b->rank];
        for (int j = 0; j < b->nops && ntb > most; j++)
            if (b->ops[j].kind == OP_BARRIER)
                most = ntb;
    }
    return most;
}

int cclc_plan_can_run_lines(const Plan *plan)
{
    if (plan->prog->ntags > 1)
        return 0;
    for (int i = 0; i < plan->nblocks; i++) {
        const PlanBlock *b = &plan->blocks[i];
        for (int j = 0; j < b->nops; j++) {
            const PlanOp *op = &b->ops[j];
            if (op->kind != OP_XFER)
                continue;
            if (cclc_chan_async(op->chan))
                return 0;
            for (int k = 0; k < op->nsrc; k++)
                if (op->src[k].rank != b->rank)
                    return 0;
        }
    }
    return 1;
}

int cclc_plan_is_copy(const Plan *plan)
{
    const Program *p = plan->prog;
    if (plan->nranks != 1 || cclc_coll_is_v(p->coll) || plan->nblocks != 1 || plan->blocks[0].nops != 1)
        return 0;
    const PlanOp *op = &plan->blocks[0].ops[0];
    int k = p->buf_chunks[BUF_IN];
    return op->kind == OP_XFER && op->ndst == 1 && op->nsrc == 1 && p->buf_chunks[BUF_OUT] == k &&
           op->src[0].buf == BUF_IN && op->src[0].chunk == 0 && op->src[0].count == k &&
           op->dst[0].buf == BUF_OUT && op->dst[0].chunk == 0 && op->dst[0].count == k;
}

Plan *cclc_schedule_program(Arena *a, const Program *p, const Proof *proof)
{
    Plan *plan = cclc_arena_alloc(a, sizeof *plan);
    plan->prog = p;
    plan->proof = *proof;
    plan->nranks = p->nranks;
    for (int r = 0; r < p->nranks; r++)
        if (p->ntb[r] > plan->ntb)
            plan->ntb = p->ntb[r];
    plan->nsems = plan->ntb * p->nranks * (p->ntags > 1 ? p->ntags : 1);
    plan->nblocks = p->nblocks;
    plan->blocks = cclc_arena_alloc(a, sizeof *plan->blocks * (size_t)p->nblocks);
    for (int i = 0; i < p->nblocks; i++)
        schedule_block(a, p, plan->ntb, &p->blocks[i], proof->content ? proof->content[i] : NULL, &plan->blocks[i]);
    return plan;
}
