/* cpu/backend.c: the Plan executed by host threads on host memory.
 *
 * Takes resolved calls (CclCall) from algorithm.c; runs them asynchronously, in order, on
 * one worker thread per communicator, so one host thread can drive every rank of a
 * ccl_comm_init_all communicator (rank 0's call returns before rank 1's is made).
 * A call runs this rank's logical thread blocks x instances as host threads (the worker
 * and a pool kept across calls), each going slice-major over its ops exactly as
 * docs/internals.md says: chunk layout, instance and slice parts, semaphore slots
 * (t*I + i)*N + r as 64-bit C11 atomics in the symmetric heap (release add, acquire
 * wait), expected values kept by the waiter across calls, bounded waits. Port channels are plain copies here, so flush is a no-op; a
 * block is one thread, so OP_SYNC is a no-op too. On a comm of several nodes, what
 * reaches a rank of another node (net puts, signals, identities, barrier arrivals) goes
 * through the proxy of cpu/net.c, and a flush of such a peer waits for its
 * acknowledgments.
 * The heaps are cpu/heaps.c's. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cpu/heaps.h"
#include "cpu/idents.h"
#include "cpu/net.h"
#include "cpu/p2p.h"
#include "cpu/segments.h"
#include "cpu/waits.h"
#include "backend.h"

/* A queued call: a collective (call), or a group of point-to-point calls (p2p, nops of
 * them, after the Task; NULL otherwise). */
typedef struct Task {
    struct Task *next;
    CclCall call;
    CclP2pOp *p2p;
    int nops;
    /* A v call run as point-to-point (CclP2pCall's staging): the copy of stage_src that
     * its sends read (owned), and its own segment's copy. */
    char *stage;
    const void *stage_src;
    size_t stage_bytes;
    const void *self_src;
    void *self_dst;
    size_t self_bytes;
} Task;

typedef struct {
    CpuHeaps heaps;             /* cpu/heaps.c; first: cpu/waits.c reads it */
    pthread_t worker;
    pthread_mutex_t mu;
    pthread_cond_t cv, idle_cv;
    Task *head, *tail;
    int busy, stop;
    /* Block threads kept across calls: pool thread k runs physical block k + 1 of each
     * call (the worker runs block 0). Creating threads per call cost more than most
     * small calls; the pool grows to the largest call and sleeps between calls. */
    pthread_mutex_t pmu;
    pthread_cond_t pgo, pdone;
    struct PoolThread **pool;
    int npool, pool_cap;
    uint64_t pgen;              /* bumped once per call */
    struct Exec *pexec;         /* the call being run */
    int pactive;                /* pool threads not yet done with generation pgen */
    int pstop;
    /* Private staging (CclCall's NULL in/out): [0] in, [1] out; grow-only, replaced
     * blocks freed at the next synchronize (queued calls may still use them). */
    void *priv[2];
    size_t priv_bytes[2];
    void **priv_retired;
    int npriv_retired;
    CpuSegsLast last_v;         /* the worker's last v call (cpu/segments.h) */
    CpuP2p p2p;                 /* the worker's channel counts (cpu/p2p.h) */
} CpuComm;

typedef struct PoolThread {
    CpuComm *cc;
    pthread_t tid;
    int k;
    uint64_t seen;              /* the last generation this thread took part in */
} PoolThread;

typedef struct {
    uint64_t *expected;         /* per physical semaphore slot on this rank */
} CpuAlg;

static void *worker_main(void *arg);
static void pool_stop(CpuComm *cc);

static ccl_result_t cpu_comm_init(ccl_comm_t *comm, const ccl_bootstrap_t *boot)
{
    CpuComm *cc = calloc(1, sizeof *cc);
    if (!cc)
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "out of memory");
    ccl_result_t r = ccl__cpu_heaps_create(comm, boot, &cc->heaps);
    if (r == CCL_OK && comm->nnodes > 1 && (r = ccl__cpu_net_start(comm, &cc->heaps.net)) != CCL_OK)
        ccl__cpu_heaps_destroy(comm, &cc->heaps);
    if (r != CCL_OK) {
        free(cc);
        return r;
    }
    pthread_mutex_init(&cc->mu, NULL);
    pthread_cond_init(&cc->cv, NULL);
    pthread_cond_init(&cc->idle_cv, NULL);
    pthread_mutex_init(&cc->pmu, NULL);
    pthread_cond_init(&cc->pgo, NULL);
    pthread_cond_init(&cc->pdone, NULL);
    comm->be_comm = cc;
    if (pthread_create(&cc->worker, NULL, worker_main, comm) != 0) {
        comm->be_comm = NULL;
        ccl__cpu_net_stop(cc->heaps.net);
        ccl__cpu_heaps_destroy(comm, &cc->heaps); /* nothing ran yet */
        free(cc);
        return ccl__set_error(comm, CCL_ERR_SYSTEM, "cannot start the CPU backend's worker thread");
    }
    return CCL_OK;
}

static void free_private_retired(CpuComm *cc)
{
    for (int i = 0; i < cc->npriv_retired; i++)
        free(cc->priv_retired[i]);
    cc->npriv_retired = 0;
}

static ccl_result_t cpu_synchronize(ccl_comm_t *comm)
{
    CpuComm *cc = comm->be_comm;
    pthread_mutex_lock(&cc->mu);
    while (cc->head || cc->busy)
        pthread_cond_wait(&cc->idle_cv, &cc->mu);
    pthread_mutex_unlock(&cc->mu);
    free_private_retired(cc);
    return CCL_OK;
}

static void cpu_comm_fini(ccl_comm_t *comm)
{
    CpuComm *cc = comm->be_comm;
    if (!cc)
        return;
    pthread_mutex_lock(&cc->mu);
    cc->stop = 1;
    pthread_cond_broadcast(&cc->cv);
    pthread_mutex_unlock(&cc->mu);
    pthread_join(cc->worker, NULL);
    pool_stop(cc);
    pthread_mutex_destroy(&cc->pmu);
    pthread_cond_destroy(&cc->pgo);
    pthread_cond_destroy(&cc->pdone);
    ccl__cpu_net_stop(cc->heaps.net);   /* its proxy writes into this rank's heap */
    ccl__cpu_heaps_destroy(comm, &cc->heaps);
    pthread_mutex_destroy(&cc->mu);
    pthread_cond_destroy(&cc->cv);
    pthread_cond_destroy(&cc->idle_cv);
    free_private_retired(cc);
    free(cc->priv_retired);
    free(cc->priv[0]);
    free(cc->priv[1]);
    ccl__cpu_p2p_free(&cc->p2p);
    free(cc);
    comm->be_comm = NULL;
}

static ccl_result_t cpu_heap_zero(ccl_comm_t *comm, size_t off, size_t bytes)
{
    memset(comm->heap_base[comm->rank] + off, 0, bytes);
    return CCL_OK;
}

static ccl_result_t cpu_alg_prepare(ccl_algorithm_t *alg)
{
    CpuAlg *ca = calloc(1, sizeof *ca);
    if (ca)
        ca->expected = calloc((size_t)alg->nsems + 1, sizeof *ca->expected);
    if (!ca || !ca->expected) {
        free(ca);
        return ccl__set_error(alg->comm, CCL_ERR_OUT_OF_MEMORY, "ccl_algorithm_load: out of memory");
    }
    alg->be_alg = ca;
    return CCL_OK;
}

static void cpu_alg_release(ccl_algorithm_t *alg)
{
    CpuAlg *ca = alg->be_alg;
    if (ca) {
        free(ca->expected);
        free(ca);
    }
    alg->be_alg = NULL;
}

/* ccl_comm_abort: from any thread. The worker's blocks see the abort word at their next
 * turn and stop; queued calls are skipped; peers' waits give up naming this rank. */
static void cpu_abort(ccl_comm_t *comm)
{
    atomic_store(&ccl__cpu_header(comm, comm->rank)->aborted, 1);
    ccl__cpu_abort_all(comm);
}

/* ccl_comm_get_async_error: a peer's failure shows in this rank's abort word before the
 * worker reaches a wait and reports it. */
static ccl_result_t cpu_poll(ccl_comm_t *comm)
{
    uint64_t ab = atomic_load(&ccl__cpu_header(comm, comm->rank)->abort);
    return ab && (int)ab - 1 != comm->rank ? CCL_ERR_PEER_FAILED : CCL_OK;
}

static void cpu_poll_message(ccl_comm_t *comm, char *buf, size_t len)
{
    ccl__cpu_culprit(comm, atomic_load(&ccl__cpu_header(comm, comm->rank)->abort), buf, len);
}

static CpuNet *net_of(ccl_comm_t *comm)
{
    return ((CpuComm *)comm->be_comm)->heaps.net;
}

static int cpu_boot_send(ccl_comm_t *comm, int peer, uint64_t tag, int gave_up, const void *buf, size_t bytes)
{
    return net_of(comm) ? ccl__cpu_net_boot_send(net_of(comm), peer, tag, gave_up, buf, bytes) : -1;
}

static int cpu_boot_take(ccl_comm_t *comm, int peer, uint64_t tag, void *buf, size_t bytes, char *why, size_t len)
{
    if (!net_of(comm)) {
        snprintf(why, len, "rank %d is on another node, and this communicator has no transport", peer);
        return -1;
    }
    return ccl__cpu_net_boot_take(net_of(comm), peer, tag, buf, bytes, why, len);
}

/* This rank's private staging buffer `which` ([0] in, [1] out) of at least `need` bytes. */
static void *grow_private(CpuComm *cc, int which, size_t need)
{
    if (cc->priv[which] && cc->priv_bytes[which] >= need)
        return cc->priv[which];
    void *p = malloc(need ? need : 1);
    if (!p)
        return NULL;
    if (cc->priv[which]) {
        void **nr = realloc(cc->priv_retired, sizeof *nr * (size_t)(cc->npriv_retired + 1));
        if (!nr) {
            free(p);
            return NULL;
        }
        cc->priv_retired = nr;
        cc->priv_retired[cc->npriv_retired++] = cc->priv[which];
    }
    cc->priv[which] = p;
    cc->priv_bytes[which] = need;
    return p;
}

static void enqueue(CpuComm *cc, Task *t)
{
    pthread_mutex_lock(&cc->mu);
    if (cc->tail)
        cc->tail->next = t;
    else
        cc->head = t;
    cc->tail = t;
    pthread_cond_signal(&cc->cv);
    pthread_mutex_unlock(&cc->mu);
}

static ccl_result_t cpu_run(const CclCall *call)
{
    ccl_comm_t *comm = call->alg->comm;
    CpuComm *cc = comm->be_comm;
    /* ccl_all_gather_v and ccl_all_to_all_v run as point-to-point there (vcoll.c); a v
     * program's plan reaches every peer's scratch and tables, which another node's
     * ranks do not share (and no v program admits several nodes, so none loads). */
    if (call->is_v && cc->heaps.net)
        return ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "%s: a loaded allgatherv or alltoallv program does not run on "
                              "a communicator of %d nodes (ccl_all_gather_v and ccl_all_to_all_v do: "
                              "docs/multinode.md)", call->alg->file, comm->nnodes);
    void *in = call->in, *out = call->out;
    /* A v call's table is the caller's until we return: the Task keeps a copy. */
    size_t vbytes = call->is_v ? ccl__segs_table_bytes(comm->nranks) : 0;
    Task *t = malloc(sizeof *t + vbytes);
    if (!t)
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "out of memory");
    memset(t, 0, sizeof *t);
    if (call->is_v) {
        memcpy(t + 1, call->v.table, vbytes);
        ccl__v_place(comm, call, (uint64_t *)(t + 1), &in, &out);
    }
    if ((!in && !(in = grow_private(cc, 0, call->in_bytes))) || (!out && !(out = grow_private(cc, 1, call->out_bytes)))) {
        free(t);
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory staging %zu bytes of %s", comm->rank,
                              in ? call->out_bytes : call->in_bytes, in ? "recvbuf" : "sendbuf");
    }
    t->next = NULL;
    t->call = *call;
    t->call.in = in;
    t->call.out = out;
    t->p2p = NULL;
    if (call->is_v)
        t->call.v.table = (const uint64_t *)(t + 1);
    enqueue(cc, t);
    return CCL_OK;
}

static ccl_result_t cpu_run_p2p(const CclP2pCall *call)
{
    ccl_comm_t *comm = call->comm;
    size_t ops = sizeof *call->ops * (size_t)call->nops;
    Task *t = malloc(sizeof *t + ops);
    if (!t)
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "out of memory");
    memset(t, 0, sizeof *t);
    t->p2p = (CclP2pOp *)(t + 1);
    memcpy(t->p2p, call->ops, ops);
    t->nops = call->nops;
    t->self_src = call->self_src;
    t->self_dst = call->self_dst;
    t->self_bytes = call->self_bytes;
    if (call->stage_bytes) {
        /* Taken now, filled by the worker in stream order (earlier calls may still write
         * the sendbuf). */
        const char *lo = call->stage_src, *hi = lo + call->stage_bytes;
        if (!(t->stage = malloc(call->stage_bytes))) {
            free(t);
            return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory staging %zu bytes of sendbuf",
                                  comm->rank, call->stage_bytes);
        }
        t->stage_src = lo;
        t->stage_bytes = call->stage_bytes;
        for (int i = 0; i < t->nops; i++) {
            const char *b = t->p2p[i].buf;
            if (t->p2p[i].kind == CCL__P2P_SEND && b && b >= lo && b < hi)
                t->p2p[i].buf = t->stage + (b - lo);
        }
        if (t->self_src && (const char *)t->self_src >= lo && (const char *)t->self_src < hi)
            t->self_src = t->stage + ((const char *)t->self_src - lo);
    }
    enqueue(comm->be_comm, t);
    return CCL_OK;
}

/* ---- execution of one call ---- */

typedef struct Exec {
    const CclCall *call;
    ccl_comm_t *comm;
    ccl_algorithm_t *alg;
    CpuAlg *ca;
    char **bases;               /* [buf * nranks + rank]; NULL for a rank of another node */
    size_t *offs;               /* [buf * nranks + rank]: heap offsets, for ranks of other nodes */
    CpuNet *net;                /* the inter-node proxy, or NULL */
    _Atomic uint64_t *own_sems;
    _Atomic uint64_t *abort_flag;
    int nphys;
    _Atomic unsigned arrived, gen; /* the rank's block barrier */
    const CpuSegs *segs;        /* a v call: its segments size every chunk; else NULL */
} Exec;

/* `ring.ccl:12 "wait prev"` (or ring.ccl:12,14 for a fused op): where an op came from,
 * with the statement's source text. */
static void op_where(const Exec *x, const PlanOp *op, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s:", x->alg->file);
    for (int i = 0; i < op->nlines && n > 0 && (size_t)n < len; i++)
        n += snprintf(buf + n, len - (size_t)n, "%s%d", i ? "," : "", op->lines[i]);
    if (op->nlines < 1 || n <= 0 || (size_t)n >= len)
        return;
    const char *p = x->alg->source;
    for (int line = 1; line < op->lines[0] && p; line++) {
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    if (!p)
        return;
    while (*p == ' ' || *p == '\t')
        p++;
    int w = (int)strcspn(p, "#\n");
    while (w > 0 && (p[w - 1] == ' ' || p[w - 1] == '\t'))
        w--;
    if (w > 0)
        snprintf(buf + n, len - (size_t)n, " \"%.*s\"", w > 60 ? 60 : w, p);
}

static const char *op_word(OpKind k)
{
    return k == OP_WAIT ? "wait" : k == OP_BARRIER ? "barrier" : k == OP_FLUSH ? "flush" : "op";
}

/* How a bounded wait ended. */
typedef enum {
    SPIN_DONE = 0,                   /* what it waited for happened (or: keep spinning) */
    SPIN_TIMEOUT,                    /* the comm's timeout passed */
    SPIN_ABORTED,                    /* a rank failed and set the abort flag */
} SpinResult;

/* One turn of a bounded spin: SPIN_ABORTED on abort, SPIN_TIMEOUT once the timeout has
 * passed since the first clock reading (taken every 64 turns; clock_turn, which also
 * stops every rank when a peer's process is gone), else SPIN_DONE after backing off. On
 * a comm of several nodes the waiter sweeps the proxy first (unless the proxy thread is
 * sweeping), so that what it waits for from another node need not wait for that thread
 * to be scheduled. */
static SpinResult spin_turn(Exec *x, unsigned it, CpuSpinClock *clock)
{
    if (atomic_load_explicit(x->abort_flag, memory_order_relaxed))
        return SPIN_ABORTED;
    if ((it & 63) == 63 && ccl__cpu_clock_turn(x->comm, clock))
        return SPIN_TIMEOUT;
    if (x->net)
        ccl__cpu_net_progress(x->net);
    ccl__backoff(it);
    return SPIN_DONE;
}

/* Waits until *p >= want, bounded by the timeout and cut short by an abort. */
static SpinResult wait_ge(Exec *x, _Atomic uint64_t *p, uint64_t want)
{
    CpuSpinClock clock = {0};
    for (unsigned it = 0; atomic_load_explicit(p, memory_order_acquire) < want; it++) {
        SpinResult r = spin_turn(x, it, &clock);
        if (r != SPIN_DONE)
            return r;
    }
    return SPIN_DONE;
}

static void block_fail(Exec *x, const PlanBlock *pb, int inst, const PlanOp *op, int peer, SpinResult why,
                       uint64_t have, uint64_t want, int slot)
{
    char where[256];
    op_where(x, op, where, sizeof where);
    ccl_comm_t *comm = x->comm;
    int r = comm->rank;
    if (why == SPIN_ABORTED) {
        char who[96];
        ccl__cpu_culprit(comm, atomic_load(x->abort_flag), who, sizeof who);
        if (peer >= 0)
            ccl__set_async_error(comm, CCL_ERR_PEER_FAILED,
                                 "rank %d, thread block %d (instance %d), %s (%s): stopped waiting for rank %d because %s",
                                 r, pb->tb, inst, where, op_word(op->kind), peer, who);
        else
            ccl__set_async_error(comm, CCL_ERR_PEER_FAILED,
                                 "rank %d, thread block %d (instance %d), %s (%s): stopped because %s",
                                 r, pb->tb, inst, where, op_word(op->kind), who);
    } else if (peer >= 0 && op->kind == OP_FLUSH) {
        ccl__set_async_error(comm, CCL_ERR_TIMEOUT, "timeout: rank %d, thread block %d (instance %d), %s (flush): rank "
                             "%d on node %d did not acknowledge the net puts within %d ms", r, pb->tb, inst, where, peer,
                             peer / comm->local, comm->timeout_ms);
    } else if (peer >= 0) {
        ccl__set_async_error(comm, CCL_ERR_TIMEOUT,
                             "timeout: rank %d, thread block %d (instance %d), %s (wait): no signal from peer rank %d "
                             "within %d ms (semaphore slot %d is at %llu, waiting for %llu)",
                             r, pb->tb, inst, where, peer, comm->timeout_ms, slot, (unsigned long long)have,
                             (unsigned long long)want);
    } else {
        ccl__set_async_error(comm, CCL_ERR_TIMEOUT,
                             "timeout: rank %d, thread block %d (instance %d), %s (barrier): the rank's other thread "
                             "blocks did not arrive within %d ms",
                             r, pb->tb, inst, where, comm->timeout_ms);
    }
    ccl__cpu_abort_all(comm);
}

static SpinResult block_barrier(Exec *x)
{
    unsigned gen = atomic_load(&x->gen);
    if (atomic_fetch_add(&x->arrived, 1) + 1 == (unsigned)x->nphys) {
        atomic_store(&x->arrived, 0);
        atomic_fetch_add(&x->gen, 1);
        return SPIN_DONE;
    }
    CpuSpinClock clock = {0};
    for (unsigned it = 0; atomic_load(&x->gen) == gen; it++) {
        SpinResult r = spin_turn(x, it, &clock);
        if (r != SPIN_DONE)
            return r;
    }
    return SPIN_DONE;
}

static int do_xfer(Exec *x, const PlanBlock *pb, const PlanOp *op, int inst, int slice)
{
    const CclCall *c = x->call;
    const Program *prog = x->alg->prog;
    int N = x->comm->nranks, K = prog->chunks, I = x->alg->instances, S = c->slices;
    size_t es = c->esize, A = ccl__align_elems(es);
    enum { MAXOPS = 64 };
    const void *srcbuf[MAXOPS];
    size_t offbuf[2 * MAXOPS];
    int nref = op->ndst + op->nsrc;
    const void **srcs = op->nsrc <= MAXOPS ? srcbuf : malloc(sizeof *srcs * (size_t)op->nsrc);
    size_t *offs = nref <= 2 * MAXOPS ? offbuf : malloc(sizeof *offs * (size_t)nref);
    int rc = 0;
    if (!srcs || !offs) {
        ccl__set_async_error(x->comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory running %s (an op of %d operands)",
                             x->comm->rank, x->alg->file, nref);
        ccl__cpu_abort_all(x->comm);
        rc = -1;
        goto out;
    }
    int count = op->dst[0].count;
    for (int j = 0; j < count; j++) {
        size_t L = SIZE_MAX, len;
        for (int k = 0; k < nref && !x->segs; k++) {
            const Ref *r = k < op->ndst ? &op->dst[k] : &op->src[k - op->ndst];
            ccl__chunk_range(r->buf, r->chunk + j, c->count, r->buf == BUF_IN ? c->in_ustride : c->out_ustride, K, c->CS,
                             &offs[k], &len);
            if (len < L)
                L = len;
        }
        if (x->segs) {
            ccl__segs_chunk(x->segs, op, j, offs, &L);
        } else if (op->content) {
            /* From scratch to scratch only, sized by the position of the data it moves
             * (PlanOp.content): as much as an in/out chunk of that position holds. */
            size_t pos_off;
            if (op->content[j] < 0) {
                L = 0;
            } else {
                ccl__chunk_range(BUF_IN, op->content[j], c->count, c->count, K, c->CS, &pos_off, &len);
                if (len < L)
                    L = len;
            }
        }
        if (L == 0)
            continue;
        size_t plo, phi, slo, shi;
        ccl__part(L, I, inst, A, &plo, &phi);
        ccl__part(phi - plo, S, slice, A, &slo, &shi);
        size_t lo = plo + slo, n = shi - slo;
        if (n == 0)
            continue;
        for (int k = 0; k < op->nsrc; k++) {
            const Ref *r = &op->src[k];
            srcs[k] = x->bases[r->buf * N + r->rank] + (offs[op->ndst + k] + lo) * es;
        }
        if (op->chan == CHAN_NET) {   /* a put to another node: one source, one destination */
            size_t off = x->offs[op->dst[0].buf * N + op->dst[0].rank];
            if (off == SIZE_MAX || ccl__cpu_net_put(x->net, op->dst[0].rank, off + (offs[0] + lo) * es, srcs[0], n * es)) {
                if (off == SIZE_MAX)
                    ccl__set_async_error(x->comm, CCL_ERR_INTERNAL, "rank %d: %s: a net put into rank %d's buffer, "
                                         "which is not in its heap", x->comm->rank, x->alg->file, op->dst[0].rank);
                ccl__cpu_abort_all(x->comm);
                rc = -1;
                goto out;
            }
            continue;
        }
        char *d0 = x->bases[op->dst[0].buf * N + op->dst[0].rank] + (offs[0] + lo) * es;
        ccl__reduce(d0, srcs, op->nsrc, n, c->dtype, c->op);
        for (int k = 1; k < op->ndst; k++) {
            char *d = x->bases[op->dst[k].buf * N + op->dst[k].rank] + (offs[k] + lo) * es;
            memmove(d, d0, n * es);
        }
    }
out:
    if (srcs != srcbuf)
        free(srcs);
    if (offs != offbuf)
        free(offs);
    return rc;
}

static void run_block(Exec *x, int b, int inst)
{
    const PlanBlock *pb = x->alg->blocks[b];
    int N = x->comm->nranks, I = x->alg->instances;
    ccl_comm_t *comm = x->comm;
    for (int s = 0; s < x->call->slices; s++) {
        for (int o = 0; o < pb->nops; o++) {
            const PlanOp *op = &pb->ops[o];
            switch (op->kind) {
            case OP_XFER:
                if (do_xfer(x, pb, op, inst, s) != 0)
                    return;
                break;
            case OP_SIGNAL:
                for (int k = 0; k < op->npeer; k++) {
                    int slot = (op->sem[k] / N * I + inst) * N + op->sem[k] % N;
                    if (!comm->heap_base[op->peer[k]]) {    /* another node: after its puts, by the proxy */
                        if (ccl__cpu_net_add(x->net, op->peer[k], x->alg->sem_off + (size_t)slot * 8) != 0) {
                            ccl__cpu_abort_all(comm);
                            return;
                        }
                        continue;
                    }
                    _Atomic uint64_t *sems = (_Atomic uint64_t *)(comm->heap_base[op->peer[k]] + x->alg->sem_off);
                    atomic_fetch_add_explicit(&sems[slot], 1, memory_order_release);
                }
                break;
            case OP_WAIT:
                for (int k = 0; k < op->npeer; k++) {
                    int slot = (op->sem[k] / N * I + inst) * N + op->sem[k] % N;
                    uint64_t want = ++x->ca->expected[slot];
                    SpinResult why = wait_ge(x, &x->own_sems[slot], want);
                    if (why != SPIN_DONE) {
                        block_fail(x, pb, inst, op, op->peer[k], why, atomic_load(&x->own_sems[slot]), want, slot);
                        return;
                    }
                }
                break;
            case OP_BARRIER: {
                SpinResult why = block_barrier(x);
                if (why != SPIN_DONE) {
                    block_fail(x, pb, inst, op, -1, why, 0, 0, -1);
                    return;
                }
                break;
            }
            case OP_FLUSH:   /* port channels are direct copies on the CPU; net puts wait for acks */
                for (int k = 0; k < op->npeer && x->net; k++) {
                    SpinResult why = comm->heap_base[op->peer[k]] ? SPIN_DONE
                                     : wait_ge(x, ccl__cpu_net_acked(x->net, op->peer[k]),
                                               ccl__cpu_net_posted(x->net, op->peer[k]));
                    if (why != SPIN_DONE) {
                        block_fail(x, pb, inst, op, op->peer[k], why, 0, 0, -1);
                        return;
                    }
                }
                break;
            case OP_SYNC:    /* a block is one thread */
                break;
            }
        }
    }
}

static void *pool_main(void *arg)
{
    PoolThread *t = arg;
    CpuComm *cc = t->cc;
    pthread_mutex_lock(&cc->pmu);
    for (;;) {
        while (cc->pgen == t->seen && !cc->pstop)
            pthread_cond_wait(&cc->pgo, &cc->pmu);
        if (cc->pstop)
            break;
        t->seen = cc->pgen;
        Exec *x = cc->pexec;
        pthread_mutex_unlock(&cc->pmu);
        int b = t->k + 1;
        if (b < x->nphys)
            run_block(x, b / x->alg->instances, b % x->alg->instances);
        pthread_mutex_lock(&cc->pmu);
        if (--cc->pactive == 0)
            pthread_cond_signal(&cc->pdone);
    }
    pthread_mutex_unlock(&cc->pmu);
    return NULL;
}

/* Grows the pool to n threads; 0, or -1 when a thread cannot be made. Worker thread only,
 * between calls (no generation is running). Records are allocated one by one because
 * their threads keep pointers to them. */
static int pool_grow(CpuComm *cc, int n)
{
    if (n <= cc->npool)
        return 0;
    if (n > cc->pool_cap) {
        int cap = n < 16 ? 16 : 2 * n;
        PoolThread **np = realloc(cc->pool, sizeof *np * (size_t)cap);
        if (!np)
            return -1;
        cc->pool = np;
        cc->pool_cap = cap;
    }
    while (cc->npool < n) {
        PoolThread *t = calloc(1, sizeof *t);
        if (!t)
            return -1;
        *t = (PoolThread){.cc = cc, .k = cc->npool, .seen = cc->pgen};
        if (pthread_create(&t->tid, NULL, pool_main, t) != 0) {
            free(t);
            return -1;
        }
        cc->pool[cc->npool++] = t;
    }
    return 0;
}

/* Runs every physical block of x: block 0 here, the others on the pool. */
static int run_blocks(CpuComm *cc, Exec *x)
{
    if (x->nphys > 1 && pool_grow(cc, x->nphys - 1) != 0)
        return -1;
    pthread_mutex_lock(&cc->pmu);
    cc->pexec = x;
    cc->pgen++;
    cc->pactive = cc->npool;
    pthread_cond_broadcast(&cc->pgo);
    pthread_mutex_unlock(&cc->pmu);
    if (x->nphys > 0)
        run_block(x, 0, 0);
    pthread_mutex_lock(&cc->pmu);
    while (cc->pactive > 0)
        pthread_cond_wait(&cc->pdone, &cc->pmu);
    pthread_mutex_unlock(&cc->pmu);
    return 0;
}

static void pool_stop(CpuComm *cc)
{
    pthread_mutex_lock(&cc->pmu);
    cc->pstop = 1;
    pthread_cond_broadcast(&cc->pgo);
    pthread_mutex_unlock(&cc->pmu);
    for (int k = 0; k < cc->npool; k++) {
        pthread_join(cc->pool[k]->tid, NULL);
        free(cc->pool[k]);
    }
    free(cc->pool);
    cc->pool = NULL;
    cc->npool = 0;
}

/* A staging copy of `bytes` into dst from src, in rows of `row` bytes where either
 * side is strided (a pitch, CclCall.send_pitch / recv_pitch; 0: packed). */
static void copy_rows(void *dst, size_t dpitch, const void *src, size_t spitch, size_t bytes, size_t row)
{
    if (!dpitch && !spitch) {
        memcpy(dst, src, bytes);
        return;
    }
    for (size_t u = 0; u * row < bytes; u++)
        memcpy((char *)dst + u * (dpitch ? dpitch : row), (const char *)src + u * (spitch ? spitch : row), row);
}

/* Whether this rank has recorded a failure (reported or not yet). */
static int rank_failed(ccl_comm_t *comm)
{
    pthread_mutex_lock(&comm->async_lock);
    int failed = comm->async_result != CCL_OK || comm->failed != CCL_OK;
    pthread_mutex_unlock(&comm->async_lock);
    return failed;
}

/* The all-rank barrier (cpu/waits.c); if it fails, this rank fails with its message and
 * `where` (the moment of the call it was for), and stops every rank. 0 or -1. */
static int barrier_or_stop(ccl_comm_t *comm, const char *where)
{
    char err[512];
    if (ccl__cpu_rank_barrier(comm, err, sizeof err) == 0)
        return 0;
    ccl__set_async_error(comm, strstr(err, "timed out") ? CCL_ERR_TIMEOUT : CCL_ERR_PEER_FAILED, "%s (%s)", err, where);
    ccl__cpu_abort_all(comm);
    return -1;
}

static void execute(ccl_comm_t *comm, const CclCall *c)
{
    ccl_algorithm_t *alg = c->alg;
    const Program *prog = alg->prog;
    int N = comm->nranks, me = comm->rank;
    CclHeapHeader *hdr = (CclHeapHeader *)comm->heap_base[me];
    /* Before the identity: once it is published, peers may write into `out`, which in
     * place is the user's input this copies (as on GPUs, where the copy is queued before
     * the kernel). */
    if (c->stage_in)
        copy_rows(c->in, 0, c->send, c->send_pitch, c->in_bytes, c->count * c->esize);
    if (c->is_v)
        ccl__segs_publish(comm, c);
    /* First, even after an abort: a rank stopped by a peer that found two calls
     * differing still compares, and names both sides itself. Only until it has failed:
     * its later calls (the other pieces of a call, runtime/src/call.c) are dropped, and
     * their identities would overwrite ring entries (CCL_IDENT_RING of them) that a
     * slower peer still has to read to name both sides. */
    uint64_t ab = atomic_load(&hdr->abort);
    if (ab && rank_failed(comm))
        return;
    if (ccl__cpu_check_idents(comm, c) != 0)
        return;
    ab = atomic_load(&hdr->abort);
    if (ab) {
        char who[96];
        ccl__set_async_error(comm, CCL_ERR_PEER_FAILED, "rank %d: %s skipped: %s earlier", me, alg->file,
                             ccl__cpu_culprit(comm, ab, who, sizeof who));
        return;
    }
    /* A v call: every rank's segments, checked alike on every rank (cpu/segments.c); a
     * layout other than the previous v call's fences: its staging moves with every
     * rank's counts, into memory a peer still in the previous call may use. */
    CpuSegs segs = {0};
    int fence = c->fence;
    const char *fence_why = c->fence_why;
    if (c->is_v) {
        char err[1024];
        ccl_result_t r = ccl__segs_load(comm, c, &segs, err, sizeof err);
        if (r != CCL_OK) {
            /* The checks fail alike on every rank, each naming the cause itself; only
             * running out of memory here is this rank's alone: stop the others. */
            ccl__set_async_error(comm, r, "%s", err);
            if (!segs.tab)
                ccl__cpu_abort_all(comm);
            ccl__segs_free(&segs);
            return;
        }
        if (ccl__segs_moved(&((CpuComm *)comm->be_comm)->last_v, alg, &segs)) {
            fence = 1;
            fence_why = "its segments differ from the previous v call's";
        }
    }
    size_t CS = c->is_v ? segs.cs_max : c->CS;
    if (fence) {
        char where[512];
        snprintf(where, sizeof where, "before %s: %s", alg->file, fence_why);
        if (barrier_or_stop(comm, where) != 0) {
            ccl__segs_free(&segs);
            return;
        }
    }

    Exec x = {.call = c, .comm = comm, .alg = alg, .ca = alg->be_alg, .segs = c->is_v ? &segs : NULL};
    x.bases = calloc((size_t)prog->nbufs * (size_t)N, sizeof *x.bases);
    x.offs = calloc((size_t)prog->nbufs * (size_t)N, sizeof *x.offs);
    x.net = net_of(comm);
    x.nphys = alg->nblocks * alg->instances;
    if (!x.bases || !x.offs) {
        ccl__set_async_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory running %s", me, alg->file);
        ccl__cpu_abort_all(comm);
        goto out;
    }
    for (int p = 0; p < N; p++) {
        char *hb = comm->heap_base[p];
        ptrdiff_t dp = p - me;
        x.bases[BUF_IN * N + p] = p == me ? c->in : c->in_off == SIZE_MAX ? NULL : hb + c->in_off + dp * (ptrdiff_t)c->in_stride;
        x.bases[BUF_OUT * N + p] = p == me ? c->out : c->out_off == SIZE_MAX ? NULL : hb + c->out_off + dp * (ptrdiff_t)c->out_stride;
        if (c->is_v && p != me)     /* a v call's peers publish where their in and out are */
            ccl__segs_peer_bases(&segs, comm, p, &x.bases[BUF_IN * N + p], &x.bases[BUF_OUT * N + p]);
        for (int b = BUF_SCRATCH0; b < prog->nbufs; b++)
            x.bases[b * N + p] = hb + c->scratch_off + ccl__scratch_offset(prog, b, CS, c->esize);
        if (!hb) {  /* another node: its offsets, for the proxy (v calls are refused there) */
            x.offs[BUF_IN * N + p] = c->in_off == SIZE_MAX ? SIZE_MAX : c->in_off + (size_t)(dp * (ptrdiff_t)c->in_stride);
            x.offs[BUF_OUT * N + p] = c->out_off == SIZE_MAX ? SIZE_MAX : c->out_off + (size_t)(dp * (ptrdiff_t)c->out_stride);
            for (int b = BUF_SCRATCH0; b < prog->nbufs; b++)
                x.offs[b * N + p] = c->scratch_off + ccl__scratch_offset(prog, b, CS, c->esize);
            for (int b = 0; b < prog->nbufs; b++)
                x.bases[b * N + p] = NULL;
        }
    }
    x.own_sems = (_Atomic uint64_t *)(comm->heap_base[me] + alg->sem_off);
    x.abort_flag = &hdr->abort;
    atomic_init(&x.arrived, 0);
    atomic_init(&x.gen, 0);

    if (run_blocks(comm->be_comm, &x) != 0) {
        ccl__set_async_error(comm, CCL_ERR_SYSTEM, "rank %d: cannot start the %d threads that run %s's thread blocks", me,
                             x.nphys, alg->file);
        ccl__cpu_abort_all(comm);
        goto out;
    }
    if (atomic_load(&hdr->abort))
        goto out;

    if (c->divide) {
        if (barrier_or_stop(comm, "before avg's division") != 0)
            goto out;
        if (c->divide_here)
            ccl__divide(c->out, c->out_bytes / c->esize, c->dtype, c->divide);
        if (barrier_or_stop(comm, "after avg's division") != 0)
            goto out;
    }
    if (c->stage_out && c->is_v)
        ccl__segs_stage_out(&segs, me, c->recv, c->out);
    else if (c->stage_out)
        copy_rows(c->recv, c->recv_pitch, c->out, 0, c->out_bytes, c->count * c->esize);
out:
    free(x.bases);
    free(x.offs);
    ccl__segs_free(&segs);
}

/* The end of a v call run as point-to-point (vcoll.c): an all-rank barrier, so that
 * the call fails on every rank when it fails on one, as on one node. Without it a rank
 * whose own segments all went and came (its partners matched) would succeed while a
 * rank whose counts disagree with a third fails: one rank's messages say nothing of
 * the others'. A rank that failed stays out of it, which stops the others there. */
static void end_v(ccl_comm_t *comm, const CclP2pOp *op)
{
    char where[128];
    if (rank_failed(comm))
        return;
    snprintf(where, sizeof where, "at the end of %s, v call %llu on this comm", ccl__p2p_vname(op->vtag),
             (unsigned long long)op->vseq);
    barrier_or_stop(comm, where);
}

static void *worker_main(void *arg)
{
    ccl_comm_t *comm = arg;
    CpuComm *cc = comm->be_comm;
    pthread_mutex_lock(&cc->mu);
    for (;;) {
        while (!cc->head && !cc->stop)
            pthread_cond_wait(&cc->cv, &cc->mu);
        if (!cc->head)
            break;
        Task *t = cc->head;
        cc->head = t->next;
        if (!cc->head)
            cc->tail = NULL;
        cc->busy = 1;
        pthread_mutex_unlock(&cc->mu);
        if (t->p2p) {
            /* A v call's copies first (none after a failure: a call that fails writes
             * nothing of its own accord); the group then reports the abort itself. */
            if (!atomic_load(&ccl__cpu_header(comm, comm->rank)->abort)) {
                if (t->stage_bytes)
                    memcpy(t->stage, t->stage_src, t->stage_bytes);
                if (t->self_bytes)
                    memmove(t->self_dst, t->self_src, t->self_bytes);
            }
            ccl__cpu_p2p_run(comm, cc->heaps.net, &cc->p2p, t->p2p, t->nops);
            if (t->p2p[0].vtag)
                end_v(comm, &t->p2p[0]);
        } else {
            execute(comm, &t->call);
        }
        free(t->stage);
        free(t);
        pthread_mutex_lock(&cc->mu);
        cc->busy = 0;
        if (!cc->head)
            pthread_cond_broadcast(&cc->idle_cv);
    }
    pthread_mutex_unlock(&cc->mu);
    return NULL;
}

/* ccl_mem_copy: the heap is host memory, so after the comm's earlier work a memcpy. */
static ccl_result_t cpu_copy(ccl_comm_t *comm, void *dst, const void *src, size_t bytes)
{
    ccl_result_t r = cpu_synchronize(comm);
    if (r != CCL_OK)
        return r;
    memcpy(dst, src, bytes);
    return CCL_OK;
}

/* The cost depends on whether ranks are threads of one process (ccl_comm_init_all: a
 * group) or processes sharing POSIX memory; no threads per block, no LL lines. */
static void cpu_describe(const ccl_comm_t *comm, CclDeviceInfo *out)
{
    snprintf(out->device, sizeof out->device, "cpu");
    snprintf(out->topology, sizeof out->topology, "%s", comm->group ? "threads" : "processes");
    out->has_threads_per_block = 0;
    out->can_run_simple_as_ll = 0;
}

/* ccl_mem_register of memory outside the heap: in one process every rank's thread
 * reaches it already, but calls still stage it (peers find buffers by heap offset), so
 * it is only recorded; across processes peers reach nothing outside the shared heaps. */
static ccl_result_t cpu_reg_inspect(ccl_comm_t *comm, const void *ptr, size_t bytes, CclRegSpan *span, void **state)
{
    (void)span;
    *state = NULL;
    if (!((CpuComm *)comm->be_comm)->heaps.shm)
        return CCL_OK;
    return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                          "the range %p (%zu bytes) is this process's private memory, which the other ranks' "
                          "processes cannot map: on the CPU backend in process mode peers reach only the symmetric "
                          "heap (POSIX shared memory); allocate the buffer with ccl_mem_alloc (in Python, "
                          "comm.empty), or pass it unregistered (calls stage it)", ptr, bytes);
}

const CclBackend ccl__cpu_backend = {
    .name = "cpu",
    .kind = CCL_BACKEND_CPU,
    .alternates_out = 1,
    .comm_init = cpu_comm_init,
    .comm_fini = cpu_comm_fini,
    .heap_zero = cpu_heap_zero,
    .boot_send = cpu_boot_send,
    .boot_take = cpu_boot_take,
    .alg_prepare = cpu_alg_prepare,
    .alg_release = cpu_alg_release,
    .run = cpu_run,
    .run_p2p = cpu_run_p2p,
    .synchronize = cpu_synchronize,
    .abort = cpu_abort,
    .peer_gone = ccl__cpu_abort_for,
    .poll = cpu_poll,
    .poll_message = cpu_poll_message,
    .copy = cpu_copy,
    .describe = cpu_describe,
    .reg_inspect = cpu_reg_inspect,
};
