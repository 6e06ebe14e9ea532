/* gpu_test: shipped algorithms end to end on GPUs, every output element checked.
 *
 *   gpu_test [--full] ALG.ccl...              one process, every visible GPU up to
 *                                             --ranks N (ccl_comm_init_all, a thread per rank)
 *   mpirun -np N gpu_test --procs ALG.ccl...  one process per GPU (ccl_comm_init_rank over
 *                                             the runtime's environment bootstrap)
 *
 * Per algorithm: bf16/sum on symmetric buffers with an odd count; f32/sum on ordinary
 * (cuMemAlloc) buffers (staging); in-place where the collective allows it; 100
 * back-to-back calls alternating two buffer sets of two counts (the scratch layout
 * changes at every call); a CUDA-graph-captured loop of 9 calls
 * replayed five times. With --full, instead: every op and every dtype (reducing collectives).
 * With --pieces, instead, on a 32 MiB heap (CCL_HEAP_BYTES decides where set): ordinary
 * buffers of 12 MB a unit, in and out of place, captured in a graph, two counts back to
 * back, and symmetric ones: calls larger than the heap run in pieces (runtime/src/call.c).
 * allgatherv and alltoallv (run_v_case): uneven counts with zeros, in several dtypes,
 * on symmetric and ordinary buffers, one large, all zero; back-to-back calls whose
 * layout changes every call; a captured loop; segments with poisoned gaps between
 * them (every gap element must stay poison); and last, counts that disagree across
 * ranks: every rank fails naming both, and recvbuf stays poison.
 * More ranks than GPUs (--ranks) put several ranks on one GPU (smoke tests on one GPU).
 *   gpu_test --timeout-test ALG.ccl...  a dead peer: the wait times out with a message
 *                                        naming rank, thread block, file:line and peer
 *   mpirun -np 2 gpu_test --shared-procs   two processes asking for one GPU: every rank's
 *                                        ccl_comm_init_rank fails at once, saying what to do
 *   mpirun -np 2 gpu_test --mismatch-procs  one process per GPU, every class of call the ranks
 *                                        disagree on (algorithm, count, dtype, op, a shifted
 *                                        call sequence; Simple and LL kernels): every rank
 *                                        fails naming what differs and both sides
 *   gpu_test --control-tests             ranks running different algorithms both fail naming
 *                                        both; ccl_comm_abort from another thread ends a
 *                                        peer's wait; first calls inside a stream capture
 *                                        are refused, saying to warm up
 * Inputs are small integers (exact in every dtype); outputs are poisoned before each
 * case; the expected value comes from the runtime's host reduction (reduce.c).
 * Prints "ok gpu/MODE/N<n>/ALG/CASE" or "FAIL ...: rank R element E: got G want W"
 * (rank 0 prints, after all ranks agreed through the bootstrap). Exit 0 when all
 * passed, 1 otherwise, 77 when no GPU backend is available.
 *
 * A case that runs past 15 s (threads mode) or a crash prints every rank thread's stack
 * ("== stall: rank R:" and frames as FILE(+OFFSET); `addr2line -f -e gpu_test OFFSET`
 * names them), so a hang or crash seen once on a GPU machine says where each rank was. */
#include <execinfo.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ccl.h"
#include "gpu/driver.h"
#include "gpu/gpu.h"
#include "internal.h"

typedef struct {
    int rank, nranks, full, procs, pieces;
    ccl_comm_t *comm;
    const ccl_bootstrap_t *boot;  /* for agreeing on results */
    CUcontext ctx;
    CUstream stream;
    int nalgs;
    char **algs;
    int failures;
} Rank;

/* ---- where every rank thread is, when a case stalls or the process crashes ---- */

static _Thread_local int stack_rank = -1;
static pthread_t rank_threads[64];
static int nrank_threads;
static _Atomic long long case_started_ms[64]; /* 0: not in a case */

static void print_stack(const char *why)
{
    char head[64];
    int n = snprintf(head, sizeof head, "== %s: rank %d:\n", why, stack_rank);
    if (write(2, head, (size_t)n) < 0) return;
    void *frames[48];
    backtrace_symbols_fd(frames, backtrace(frames, 48), 2);
}

static void on_stall_signal(int sig)
{
    (void)sig;
    print_stack("stall");
}

static void on_crash(int sig)
{
    print_stack(sig == SIGSEGV ? "crash (SIGSEGV)" : "crash");
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Once a case has run 15 s on some rank (a stall: the default timeout is 20 s), every
 * rank thread prints its stack, once. */
static void *stall_watch(void *arg)
{
    (void)arg;
    long long reported = 0;
    for (;;) {
        usleep(500 * 1000);
        for (int r = 0; r < nrank_threads; r++) {
            long long t = atomic_load(&case_started_ms[r]);
            if (t && t != reported && ccl__now_ms() - (double)t > 15000) {
                reported = t;
                for (int q = 0; q < nrank_threads; q++) pthread_kill(rank_threads[q], SIGUSR1);
                break;
            }
        }
    }
    return NULL;
}

static void stack_reports_init(void)
{
    void *warm[1];
    backtrace(warm, 1); /* loads the unwinder now, not inside a signal handler */
    signal(SIGUSR1, on_stall_signal);
    signal(SIGSEGV, on_crash);
    signal(SIGBUS, on_crash);
    signal(SIGABRT, on_crash);
    pthread_t w;
    if (pthread_create(&w, NULL, stall_watch, NULL) == 0) pthread_detach(w);
}

/* Input element idx of rank r (seed picks one of two data sets). */
static double value(int r, size_t idx, int seed, ccl_op_t op)
{
    if (op == CCL_PROD) return (double)(1 + (size_t)(r + (int)idx + seed) % 2);
    return (double)(1 + ((size_t)r * 3 + idx * 7 + (size_t)seed * 5) % 4);
}

static void fill(void *buf, size_t n, size_t first, int r, int seed, ccl_dtype_t t, ccl_op_t op)
{
    size_t es = ccl_dtype_size(t);
    for (size_t i = 0; i < n; i++) ccl__from_float((char *)buf + i * es, (float)value(r, first + i, seed, op), t);
}

static double tolerance(ccl_dtype_t t)
{
    switch (t) {
    case CCL_F16: return 2e-3;
    case CCL_BF16: return 1.6e-2;
    case CCL_FP8_E4M3: case CCL_FP8_E5M2: return 0.26;
    case CCL_F32: return 1e-6;
    default: return 0;
    }
}

/* The expected value of out element `e` on rank `me`, or 0 when it is unspecified. */
static int expected(Collective coll, int me, int n, size_t U, size_t e, int seed, ccl_dtype_t t, ccl_op_t op,
                    void *want)
{
    size_t es = ccl_dtype_size(t);
    char ops[64][16];
    const void *srcs[64];
    size_t unit = e / U, i = e % U;
    switch (coll) {
    case COLL_BROADCAST: fill(want, 1, e, 0, seed, t, op); return 1;
    case COLL_ALLGATHER: fill(want, 1, i, (int)unit, seed, t, op); return 1;
    case COLL_ALLTOALL: fill(want, 1, (size_t)me * U + i, (int)unit, seed, t, op); return 1;
    case COLL_ALLGATHERV: /* run_v_case checks these */
    case COLL_ALLTOALLV: return 0;
    case COLL_REDUCE:
        if (me != 0) return 0;
        /* fall through */
    case COLL_ALLREDUCE:
    case COLL_REDUCE_SCATTER: {
        size_t idx = coll == COLL_REDUCE_SCATTER ? (size_t)me * U + e : e;
        for (int r = 0; r < n; r++) {
            fill(ops[r], 1, idx, r, seed, t, op);
            srcs[r] = ops[r];
        }
        ccl__reduce(want, srcs, n, 1, t, op);
        if (op == CCL_AVG) ccl__divide(want, 1, t, n);
        (void)es;
        return 1;
    }
    }
    return 0;
}

static int same(const void *got, const void *want, ccl_dtype_t t)
{
    size_t es = ccl_dtype_size(t);
    double tol = tolerance(t);
    if (tol == 0) return memcmp(got, want, es) == 0;
    double g = ccl__load_double(got, t), w = ccl__load_double(want, t);
    return fabs(g - w) <= tol * fabs(w) + 1e-30;
}

#define CU(call)                                                                                 \
    do {                                                                                         \
        CUresult r_ = (call);                                                                    \
        if (r_ != CUDA_SUCCESS) {                                                                \
            snprintf(why, whylen, "%s: %s", #call, ccl__cuda_error(r_));                        \
            goto out;                                                                            \
        }                                                                                        \
    } while (0)

typedef struct {
    const char *name;
    ccl_dtype_t t;
    ccl_op_t op;
    size_t count;
    /* alternate: two buffer sets, the calls alternating between them, all issued before
     * one synchronize; the second set's count is count / 3 + 1, so the scratch layout
     * changes at every call (no fence: the call entry keeps calls apart). */
    int sym, inplace, reps, graph, alternate;
} Case;

/* --standard: the v cases run through ccl_all_gather_v and ccl_all_to_all_v, and the
 * alltoall cases through ccl_all_to_all (the library's route: point-to-point under
 * CCL_EXCHANGE=p2p), instead of the program. */
static int standard_v;

/* One call of a fixed-size case: the program, or ccl_all_to_all (--standard). */
static ccl_result_t run_fixed(ccl_algorithm_t *alg, const void *in, void *out, size_t count, ccl_dtype_t t,
                              ccl_op_t op, void *stream)
{
    if (standard_v && alg->prog->coll == COLL_ALLTOALL) return ccl_all_to_all(in, out, count, t, alg->comm, stream);
    return ccl_algorithm_run(alg, in, out, count, t, op, stream);
}

/* Runs one case on this rank; 0 when every element matched, else -1 with why. */
static int run_case(Rank *R, ccl_algorithm_t *alg, const Case *c, char *why, size_t whylen)
{
    Collective coll = alg->prog->coll;
    int n = R->nranks;
    size_t es = ccl_dtype_size(c->t), U = c->count;
    size_t in_elems = (size_t)cclc_coll_in_chunks(coll, n, 1) * U, out_elems = (size_t)cclc_coll_out_chunks(coll, n, 1) * U;
    int sets = c->alternate ? 2 : 1, rc = -1, barriers = 0;
    const size_t count[2] = {U, U / 3 + 1}; /* set s's count */
    if (!R->procs && R->rank < 64) atomic_store(&case_started_ms[R->rank], (long long)ccl__now_ms());
    void *in[2] = {0}, *outb[2] = {0}, *base[2] = {0};
    char *host = malloc((in_elems > out_elems ? in_elems : out_elems) * es), *want = malloc(16);
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    why[0] = 0;
    if (!host || !want) {
        snprintf(why, whylen, "out of host memory");
        goto out;
    }
    for (int s = 0; s < sets; s++) {
        /* In place, NCCL-style: one buffer of the larger size; allgather's in is this
         * rank's slot of out, reduce_scatter's out this rank's slot of in. */
        size_t base_elems = c->inplace ? (in_elems > out_elems ? in_elems : out_elems) : in_elems;
        if (c->sym) {
            ccl_result_t r1 = ccl_mem_alloc(R->comm, &base[s], base_elems * es);
            ccl_result_t r2 = c->inplace ? CCL_OK : ccl_mem_alloc(R->comm, &outb[s], out_elems * es);
            if (r1 != CCL_OK || r2 != CCL_OK) {
                snprintf(why, whylen, "ccl_mem_alloc: %s", ccl_comm_last_error(R->comm));
                goto out;
            }
        } else {
            CUdeviceptr p;
            CU(ccl__cu.MemAlloc(&p, base_elems * es));
            base[s] = (void *)(uintptr_t)p;
            if (!c->inplace) {
                CU(ccl__cu.MemAlloc(&p, out_elems * es));
                outb[s] = (void *)(uintptr_t)p;
            }
        }
        in[s] = base[s];
        if (c->inplace) {
            char *b = base[s];
            size_t slot = (size_t)R->rank * U * es;
            outb[s] = coll == COLL_REDUCE_SCATTER ? b + slot : b;
            in[s] = coll == COLL_ALLGATHER ? b + slot : b;
        }
        fill(host, in_elems, 0, R->rank, s, c->t, c->op);
        /* Reduce-scatter and alltoall index their input across units: element j of the
         * whole send buffer is value(r, j). */
        CU(ccl__cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)in[s], host, in_elems * es));
        if (!c->inplace) CU(ccl__cu.MemsetD8((CUdeviceptr)(uintptr_t)outb[s], 0xff, out_elems * es));
    }
    /* Ranks sharing a GPU: no rank may launch while a peer still allocates, copies or
     * sets its buffers (those driver calls can wait for the running kernels, which
     * wait for that peer): docs/gpu-backend.md, "Ranks and GPUs". */
    R->boot->barrier(R->boot->ctx);
    barriers++;
    if (c->graph) {
        /* Compile and stage before capture; then capture reps calls, replay 5 times. */
        if (run_fixed(alg, in[0], outb[0], U, c->t, c->op, R->stream) != CCL_OK) {
            snprintf(why, whylen, "warm-up: %s", ccl_comm_last_error(R->comm));
            goto out;
        }
        if (ccl_comm_synchronize(R->comm) != CCL_OK) {
            snprintf(why, whylen, "warm-up: %s", ccl_comm_last_error(R->comm));
            goto out;
        }
        CU(ccl__cu.MemsetD8((CUdeviceptr)(uintptr_t)outb[0], 0xff, out_elems * es));
        CU(ccl__cu.StreamBeginCapture(R->stream, CU_STREAM_CAPTURE_MODE_RELAXED));
        for (int k = 0; k < c->reps; k++)
            if (run_fixed(alg, in[0], outb[0], U, c->t, c->op, R->stream) != CCL_OK) {
                snprintf(why, whylen, "captured call %d: %s", k, ccl_comm_last_error(R->comm));
                ccl__cu.StreamEndCapture(R->stream, &graph);
                goto out;
            }
        CU(ccl__cu.StreamEndCapture(R->stream, &graph));
        CU(ccl__cu.GraphInstantiate(&exec, graph, 0));
        /* Ranks sharing a GPU: a peer's replay must not be running while this rank still
         * instantiates (it may wait for the GPU), since it waits for this rank's. */
        R->boot->barrier(R->boot->ctx);
        barriers++;
        for (int k = 0; k < 5; k++) CU(ccl__cu.GraphLaunch(exec, R->stream));
        /* The replays are ours to wait for: on a GPU several ranks share,
         * ccl_comm_synchronize waits for the communicator's own calls only. */
        CU(ccl__cu.StreamSynchronize(R->stream));
    } else {
        for (int k = 0; k < c->reps; k++) {
            int s = k % sets;
            if (run_fixed(alg, in[s], outb[s], count[s], c->t, c->op, R->stream) != CCL_OK) {
                snprintf(why, whylen, "call %d: %s", k, ccl_comm_last_error(R->comm));
                goto out;
            }
        }
    }
    if (ccl_comm_synchronize(R->comm) != CCL_OK) {
        snprintf(why, whylen, "%s", ccl_comm_last_error(R->comm));
        goto out;
    }
    rc = 0;
    /* The first wrong element, how many there are and where the last one is: a pattern
     * (one line, one part, a tail) says more than one element. */
    for (int s = 0; s < sets && rc == 0; s++) {
        size_t out_s = (size_t)cclc_coll_out_chunks(coll, n, 1) * count[s];
        CU(ccl__cu.MemcpyDtoH(host, (CUdeviceptr)(uintptr_t)outb[s], out_s * es));
        size_t wrong = 0, last = 0, zeros = 0;
        for (size_t e = 0; e < out_s; e++) {
            if (!expected(coll, R->rank, n, count[s], e, s, c->t, c->op, want)) continue;
            if (same(host + e * es, want, c->t)) continue;
            if (!wrong++)
                snprintf(why, whylen, "rank %d set %d element %zu of %zu: got %g want %g", R->rank, s, e, out_s,
                         ccl__load_double(host + e * es, c->t), ccl__load_double(want, c->t));
            zeros += ccl__load_double(host + e * es, c->t) == 0;
            last = e;
            rc = -1;
        }
        if (wrong > 1) {
            size_t used = strlen(why);
            snprintf(why + used, whylen - used, " (%zu elements wrong, %zu of them 0, the last %zu)", wrong, zeros, last);
        }
    }
out:
    if (!R->procs && R->rank < 64) atomic_store(&case_started_ms[R->rank], 0);
    /* Every rank passes the case's barriers, also one that failed before them. */
    for (; barriers < (c->graph ? 2 : 1); barriers++) R->boot->barrier(R->boot->ctx);
    if (exec) ccl__cu.GraphExecDestroy(exec);
    if (graph) ccl__cu.GraphDestroy(graph);
    for (int s = 0; s < sets; s++) {
        if (c->sym) {
            if (base[s]) ccl_mem_free(R->comm, base[s]);
            if (outb[s] && !c->inplace) ccl_mem_free(R->comm, outb[s]);
        } else {
            if (base[s]) ccl__cu.MemFree((CUdeviceptr)(uintptr_t)base[s]);
            if (outb[s] && !c->inplace) ccl__cu.MemFree((CUdeviceptr)(uintptr_t)outb[s]);
        }
    }
    free(host);
    free(want);
    return rc;
}

/* ---- allgatherv and alltoallv ---- */

/* A v case. Counts come from (seed, buffer set, sender, receiver): uneven, a quarter of
 * them 0, at most `max`; `zeros`: every count 0. Segments lie with VGAP poisoned
 * elements between them, recvbuf's in reverse rank order. `bad`: rank 1 expects one
 * element more from rank 0 than rank 0 sends, so every rank's call must fail naming
 * both, and no recvbuf element may change. */
typedef struct {
    const char *name;
    ccl_dtype_t t;
    size_t max;
    int seed, sym, reps, graph, alternate, zeros, bad;
    int overlap; /* recvbuf is sendbuf, one call (the gaps then hold what was sent: not checked) */
} VCase;


enum { VGAP = 3 };

/* Elements rank q sends rank p (allgatherv: its one sendcount, p unused). */
static size_t vcount(const VCase *c, int alltoall, int q, int p, int set)
{
    if (c->zeros) return 0;
    unsigned h = (unsigned)q * 7919u + (unsigned)(alltoall ? p : 0) * 104729u + (unsigned)(c->seed + set) * 1299709u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return h % 4 == 0 ? 0 : 1 + (h >> 4) % c->max;
}

/* Element i of what rank q sends rank p: a small integer, exact in every dtype. */
static double vvalue(int q, int p, size_t i, int set)
{
    return (double)(1 + ((size_t)q * 37 + (size_t)p * 11 + i * 7 + (size_t)set * 5) % 200);
}

/* Rank me's counts and displacements in one buffer set (N <= 64). */
typedef struct {
    size_t sc[64], sd[64], rc[64], rd[64], in_ext, out_ext;
} VLayout;

static void vlayout(const VCase *c, int alltoall, int n, int me, int set, VLayout *l)
{
    memset(l, 0, sizeof *l);
    int nin = alltoall ? n : 1;
    size_t d = 0;
    for (int v = 0; v < nin; v++) {
        l->sc[v] = vcount(c, alltoall, me, v, set);
        l->sd[v] = d;
        d += l->sc[v] + VGAP;
        l->in_ext = l->sd[v] + l->sc[v];
    }
    d = 0;
    for (int u = n - 1; u >= 0; u--) {
        l->rc[u] = vcount(c, alltoall, u, me, set) + (c->bad && me == 1 && u == 0);
        l->rd[u] = d;
        d += l->rc[u] + VGAP;
        if (l->rd[u] + l->rc[u] > l->out_ext) l->out_ext = l->rd[u] + l->rc[u];
    }
}

/* Runs one v case on this rank; 0 when every segment holds its sender's data and every
 * gap is still poison (for `bad`: when the call failed as it must and recvbuf is all
 * poison), else -1 with why. Buffers are as large as any rank's extents (ccl_mem_alloc
 * sizes must agree). */
static int run_v_case(Rank *R, ccl_algorithm_t *alg, const VCase *c, char *why, size_t whylen)
{
    int n = R->nranks, alltoall = alg->prog->coll == COLL_ALLTOALLV, sets = c->alternate ? 2 : 1, rc = -1;
    int barriers = 0;
    size_t es = ccl_dtype_size(c->t), in_max = 1, out_max = 1;
    VLayout mine[2], other;
    for (int s = 0; s < sets; s++)
        for (int r = 0; r < n; r++) {
            vlayout(c, alltoall, n, r, s, r == R->rank ? &mine[s] : &other);
            const VLayout *l = r == R->rank ? &mine[s] : &other;
            if (l->in_ext > in_max) in_max = l->in_ext;
            if (l->out_ext > out_max) out_max = l->out_ext;
        }
    if (!R->procs && R->rank < 64) atomic_store(&case_started_ms[R->rank], (long long)ccl__now_ms());
    void *in[2] = {0}, *out[2] = {0};
    char *host = malloc((in_max > out_max ? in_max : out_max) * es);
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    why[0] = 0;
    if (!host) {
        snprintf(why, whylen, "out of host memory");
        goto out;
    }
    if (c->overlap) in_max = out_max = in_max > out_max ? in_max : out_max;
    for (int s = 0; s < sets; s++) {
        if (c->sym && c->overlap) {
            if (ccl_mem_alloc(R->comm, &in[s], in_max * es) != CCL_OK) {
                snprintf(why, whylen, "ccl_mem_alloc: %s", ccl_comm_last_error(R->comm));
                goto out;
            }
            out[s] = in[s];
        } else if (c->sym) {
            if (ccl_mem_alloc(R->comm, &in[s], in_max * es) != CCL_OK ||
                ccl_mem_alloc(R->comm, &out[s], out_max * es) != CCL_OK) {
                snprintf(why, whylen, "ccl_mem_alloc: %s", ccl_comm_last_error(R->comm));
                goto out;
            }
        } else {
            CUdeviceptr p;
            CU(ccl__cu.MemAlloc(&p, in_max * es));
            in[s] = (void *)(uintptr_t)p;
            if (!c->overlap) CU(ccl__cu.MemAlloc(&p, out_max * es));
            out[s] = (void *)(uintptr_t)p;
        }
        memset(host, 0xee, in_max * es);
        for (int v = 0; v < (alltoall ? n : 1); v++)
            for (size_t i = 0; i < mine[s].sc[v]; i++)
                ccl__from_float(host + (mine[s].sd[v] + i) * es, (float)vvalue(R->rank, v, i, s), c->t);
        CU(ccl__cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)in[s], host, in_max * es));
        if (!c->overlap) CU(ccl__cu.MemsetD8((CUdeviceptr)(uintptr_t)out[s], 0xff, out_max * es));
    }
    /* Ranks sharing a GPU: nobody launches while a peer still allocates or copies. */
    R->boot->barrier(R->boot->ctx);
    barriers++;
#define RUN_V(s)                                                                                                  \
    (!standard_v ? ccl_algorithm_run_v(alg, in[s], mine[s].sc, mine[s].sd, out[s], mine[s].rc, mine[s].rd, c->t,     \
                                       R->stream)                                                                    \
     : alltoall  ? ccl_all_to_all_v(in[s], mine[s].sc, mine[s].sd, out[s], mine[s].rc, mine[s].rd, c->t, R->comm,    \
                                    R->stream)                                                                       \
                 : ccl_all_gather_v(in[s], mine[s].sc[0], out[s], mine[s].rc, mine[s].rd, c->t, R->comm, R->stream))
    if (c->graph) {
        /* Compile and stage before capture; then capture reps calls, replay 3 times. */
        if (RUN_V(0) != CCL_OK || ccl_comm_synchronize(R->comm) != CCL_OK) {
            snprintf(why, whylen, "warm-up: %s", ccl_comm_last_error(R->comm));
            goto out;
        }
        if (!c->overlap) CU(ccl__cu.MemsetD8((CUdeviceptr)(uintptr_t)out[0], 0xff, out_max * es));
        CU(ccl__cu.StreamBeginCapture(R->stream, CU_STREAM_CAPTURE_MODE_RELAXED));
        for (int k = 0; k < c->reps; k++)
            if (RUN_V(0) != CCL_OK) {
                snprintf(why, whylen, "captured call %d: %s", k, ccl_comm_last_error(R->comm));
                ccl__cu.StreamEndCapture(R->stream, &graph);
                goto out;
            }
        CU(ccl__cu.StreamEndCapture(R->stream, &graph));
        CU(ccl__cu.GraphInstantiate(&exec, graph, 0));
        R->boot->barrier(R->boot->ctx);
        barriers++;
        for (int k = 0; k < 3; k++) CU(ccl__cu.GraphLaunch(exec, R->stream));
        CU(ccl__cu.StreamSynchronize(R->stream));
    } else {
        for (int k = 0; k < c->reps; k++)
            if (RUN_V(k % sets) != CCL_OK) {
                snprintf(why, whylen, "call %d: %s", k, ccl_comm_last_error(R->comm));
                goto out;
            }
    }
#undef RUN_V
    ccl_result_t sr = ccl_comm_synchronize(R->comm);
    if (c->bad && standard_v && R->rank != 1) {
        /* As messages, the receiver finds the difference and stops every rank: the
         * others fail naming it (docs/gpu-backend.md, "Exchanges as messages"); what
         * landed before the stop may be in recvbuf, so nothing more is checked. */
        const char *e = ccl_comm_last_error(R->comm);
        if (sr == CCL_OK || !strstr(e, "rank 1")) {
            snprintf(why, whylen, "rank %d: want a failure naming rank 1; got %s: %.300s", R->rank,
                     ccl_result_string(sr), e);
            goto out;
        }
        rc = 0;
        goto out;
    } else if (c->bad) {
        /* Every rank fails, naming the segment, both ranks and both counts. */
        const char *e = ccl_comm_last_error(R->comm);
        char seg[64];
        snprintf(seg, sizeof seg, "segment 0 of rank 1's recvbuf");
        if (sr != CCL_ERR_INVALID_ARGUMENT || !strstr(e, seg) || !strstr(e, "rank 0 sends") ||
            !strstr(e, "rank 1 expects")) {
            snprintf(why, whylen, "rank %d: want CCL_ERR_INVALID_ARGUMENT naming %s, rank 0 sends, rank 1 expects; "
                     "got %s: %.300s", R->rank, seg, ccl_result_string(sr), e);
            goto out;
        }
    } else if (sr != CCL_OK) {
        snprintf(why, whylen, "%s", ccl_comm_last_error(R->comm));
        goto out;
    }
    rc = 0;
    for (int s = 0; s < sets && rc == 0; s++) {
        const VLayout *l = &mine[s];
        CU(ccl__cu.MemcpyDtoH(host, (CUdeviceptr)(uintptr_t)out[s], out_max * es));
        for (size_t e = 0; e < out_max && rc == 0; e++) {
            int u = -1;
            for (int x = 0; x < n && !c->bad; x++)
                if (e >= l->rd[x] && e < l->rd[x] + l->rc[x]) u = x;
            const char *at = host + e * es;
            if (u < 0 && (c->overlap || (c->bad && standard_v))) continue;
            if (u < 0) {
                for (size_t b = 0; b < es; b++)
                    if ((unsigned char)at[b] != 0xff) {
                        snprintf(why, whylen, "rank %d set %d element %zu of %zu: outside every segment%s, but "
                                 "written (byte %zu is 0x%02x, not the poison 0xff)", R->rank, s, e, out_max,
                                 c->bad ? " (the call failed)" : "", b, (unsigned char)at[b]);
                        rc = -1;
                        break;
                    }
                continue;
            }
            /* Out segment u of this rank is what rank u sends it (allgatherv: its only one). */
            double want = vvalue(u, alltoall ? R->rank : 0, e - l->rd[u], s), got = ccl__load_double(at, c->t);
            if (got != want) {
                snprintf(why, whylen, "rank %d set %d element %zu of segment %d (%zu elements at %zu): got %g want %g",
                         R->rank, s, e - l->rd[u], u, l->rc[u], l->rd[u], got, want);
                rc = -1;
            }
        }
    }
out:
    if (!R->procs && R->rank < 64) atomic_store(&case_started_ms[R->rank], 0);
    for (; barriers < (c->graph ? 2 : 1); barriers++) R->boot->barrier(R->boot->ctx);
    if (exec) ccl__cu.GraphExecDestroy(exec);
    if (graph) ccl__cu.GraphDestroy(graph);
    for (int s = 0; s < sets; s++) {
        if (c->sym) {
            if (in[s]) ccl_mem_free(R->comm, in[s]);
            if (out[s] && out[s] != in[s]) ccl_mem_free(R->comm, out[s]);
        } else {
            if (in[s]) ccl__cu.MemFree((CUdeviceptr)(uintptr_t)in[s]);
            if (out[s] && out[s] != in[s]) ccl__cu.MemFree((CUdeviceptr)(uintptr_t)out[s]);
        }
    }
    free(host);
    return rc;
}

/* The v cases, every one of an allgatherv or alltoallv program; the count mismatch last
 * (it leaves the communicator failed). */
static const VCase vcases[] = {
    {"i32_uneven", CCL_I32, 5000, 1, 1, 1, 0, 0, 0, 0, 0},
    {"bf16_uneven_plain", CCL_BF16, 3001, 2, 0, 1, 0, 0, 0, 0, 0},
    {"u8_uneven", CCL_U8, 777, 3, 1, 1, 0, 0, 0, 0, 0},
    {"f64_large", CCL_F64, 300000, 4, 1, 1, 0, 0, 0, 0, 0},
    {"i32_count1", CCL_I32, 1, 5, 1, 1, 0, 0, 0, 0, 0},
    {"i32_all_zero", CCL_I32, 1, 6, 1, 1, 0, 0, 1, 0, 0},
    {"i32_50_calls_layouts_alternate", CCL_I32, 20000, 7, 1, 50, 0, 1, 0, 0, 0},
    {"bf16_20_calls_plain_alternate", CCL_BF16, 4099, 8, 0, 20, 0, 1, 0, 0, 0},
    {"i32_graph", CCL_I32, 10000, 9, 1, 5, 1, 0, 0, 0, 0},
    {"bf16_overlap_plain", CCL_BF16, 3001, 11, 0, 1, 0, 0, 0, 0, 1},
    {"i32_overlap", CCL_I32, 10000, 12, 1, 1, 0, 0, 0, 0, 1},
    {"i32_counts_disagree", CCL_I32, 1000, 10, 0, 1, 0, 0, 0, 1, 0},
};

static int reducing(Collective c)
{
    return c == COLL_ALLREDUCE || c == COLL_REDUCE_SCATTER || c == COLL_REDUCE;
}

/* Every rank runs the same cases in the same order (ccl_mem_alloc is collective). */
static void *rank_main(void *arg)
{
    Rank *R = arg;
    char why[1024], all_why[64][256];
    stack_rank = R->rank;
    ccl__cu.CtxSetCurrent(R->ctx);
    if (ccl__cu.StreamCreate(&R->stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        fprintf(stderr, "rank %d: cannot create a stream\n", R->rank);
        R->failures++;
        return NULL;
    }
    const char *pe = getenv("CCL_GPU_PROTOCOL");
    char mode[48];
    snprintf(mode, sizeof mode, "%s%s%s", R->procs ? "procs" : "threads", pe && *pe ? "+" : "", pe && *pe ? pe : "");
    for (int a = 0; a < R->nalgs; a++) {
        const char *file = R->algs[a];
        ccl_algorithm_t *alg = NULL;
        int status = ccl_algorithm_load(R->comm, file, 0, &alg);
        int st_all[64];
        R->boot->allgather(R->boot->ctx, &status, st_all, sizeof status);
        int bad = 0;
        for (int r = 0; r < R->nranks; r++) bad |= st_all[r] != CCL_OK && st_all[r] != CCL_ERR_COMPILE;
        if (status != CCL_OK) {
            if (R->rank == 0) {
                const char *e = ccl_comm_last_error(R->comm);
                if (strstr(e, "admit") || strstr(e, "ranks"))
                    printf("   gpu/%s/N%d/%s: skipped (does not admit N=%d)\n", mode, R->nranks, file, R->nranks);
                else
                    printf("FAIL gpu/%s/N%d/%s: load: %s\n", mode, R->nranks, file, e);
            }
            if (alg) ccl_algorithm_free(alg);
            continue;
        }
        (void)bad;
        Collective coll = alg->prog->coll;
        int can_inplace = coll != COLL_ALLTOALL || standard_v; /* ccl_all_to_all stages an overlapping sendbuf */
        Case cases[40];
        int nc = 0;
        if (R->pieces) {
            /* A 32 MiB heap (--pieces): symmetric buffers whose scratch or lines may not
             * fit, then ordinary buffers of 12 MB a unit, whose staging does not: the
             * calls run in pieces (runtime/src/call.c), captured in a graph too. The
             * symmetric case first: the regions the ordinary ones take stay until the
             * comm's destroy, and after them 8 MB of ccl_mem_alloc buffers may not fit. */
            cases[nc++] = (Case){"bf16_sum_sym_pieces", CCL_BF16, CCL_SUM, 1000003, 1, 0, 1, 0, 0};
            cases[nc++] = (Case){"f32_sum_plain_pieces", CCL_F32, CCL_SUM, 3000017, 0, 0, 1, 0, 0};
            if (can_inplace) cases[nc++] = (Case){"bf16_sum_plain_pieces_inplace", CCL_BF16, CCL_SUM, 4000037, 0, 1, 1, 0, 0};
            cases[nc++] = (Case){"f32_sum_plain_pieces_graph", CCL_F32, CCL_SUM, 3000017, 0, 0, 3, 1, 0};
            cases[nc++] = (Case){"bf16_sum_plain_pieces_2counts", CCL_BF16, CCL_SUM, 4000037, 0, 0, 6, 0, 1};
        } else if (!R->full) {
            cases[nc++] = (Case){"bf16_sum_sym_odd", CCL_BF16, CCL_SUM, 1000003, 1, 0, 1, 0, 0};
            cases[nc++] = (Case){"f32_sum_plain_odd", CCL_F32, CCL_SUM, 12345, 0, 0, 1, 0, 0};
            cases[nc++] = (Case){"bf16_sum_count1", CCL_BF16, CCL_SUM, 1, 1, 0, 1, 0, 0};
            if (can_inplace) cases[nc++] = (Case){"f32_sum_inplace", CCL_F32, CCL_SUM, 77777, 1, 1, 1, 0, 0};
            if (can_inplace) cases[nc++] = (Case){"bf16_sum_inplace_plain", CCL_BF16, CCL_SUM, 4099, 0, 1, 1, 0, 0};
            if (can_inplace) cases[nc++] = (Case){"bf16_sum_inplace_512K", CCL_BF16, CCL_SUM, 524288, 1, 1, 1, 0, 0};
            cases[nc++] = (Case){"bf16_sum_100_calls_2counts", CCL_BF16, CCL_SUM, 65537, 1, 0, 100, 0, 1};
            /* An odd number of captured calls: a replay's first call and the previous
             * replay's last then have seqs of the same parity. */
            cases[nc++] = (Case){"bf16_sum_graph", CCL_BF16, CCL_SUM, 65536, 1, 0, 9, 1, 0};
        }
        if (R->full && reducing(coll)) {
            const ccl_op_t ops[] = {CCL_PROD, CCL_MIN, CCL_MAX, CCL_AVG};
            const char *opn[] = {"f32_prod", "f32_min", "f32_max", "f32_avg"};
            for (int i = 0; i < 4; i++) cases[nc++] = (Case){opn[i], CCL_F32, ops[i], 5003, 1, 0, 1, 0, 0};
            const ccl_dtype_t ts[] = {CCL_F64, CCL_F16, CCL_I32, CCL_I64, CCL_U8, CCL_FP8_E4M3, CCL_FP8_E5M2};
            const char *tn[] = {"f64_sum", "f16_sum", "i32_sum", "i64_sum", "u8_sum", "fp8_e4m3_sum", "fp8_e5m2_sum"};
            for (int i = 0; i < 7; i++) cases[nc++] = (Case){tn[i], ts[i], CCL_SUM, 3001, 1, 0, 1, 0, 0};
            cases[nc++] = (Case){"bf16_avg", CCL_BF16, CCL_AVG, 3001, 1, 0, 1, 0, 0};
            cases[nc++] = (Case){"i32_max_plain", CCL_I32, CCL_MAX, 3001, 0, 0, 1, 0, 0};
            /* NCCL's int8, uint32 and uint64 (their wrap-around: tests/cuda/int_ops.c). */
            const Case ints[] = {
                {"i8_sum", CCL_I8, CCL_SUM, 3001, 1, 0, 1, 0, 0},
                {"i8_prod", CCL_I8, CCL_PROD, 3001, 1, 0, 1, 0, 0},
                {"i8_min", CCL_I8, CCL_MIN, 3001, 1, 0, 1, 0, 0},
                {"i8_avg_plain", CCL_I8, CCL_AVG, 3001, 0, 0, 1, 0, 0},
                {"u32_sum", CCL_U32, CCL_SUM, 3001, 1, 0, 1, 0, 0},
                {"u32_max_plain", CCL_U32, CCL_MAX, 3001, 0, 0, 1, 0, 0},
                {"u64_sum", CCL_U64, CCL_SUM, 3001, 1, 0, 1, 0, 0},
                {"u64_prod", CCL_U64, CCL_PROD, 3001, 1, 0, 1, 0, 0},
                {"u64_min_inplace", CCL_U64, CCL_MIN, 3001, 1, 1, 1, 0, 0},
            };
            for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
                if (can_inplace || !ints[i].inplace) cases[nc++] = ints[i];
        }
        /* v programs run their own cases (not with --full: no ops or dtypes to sweep). */
        if (cclc_coll_is_v(coll)) nc = R->full || R->pieces ? 0 : (int)(sizeof vcases / sizeof vcases[0]);
        for (int i = 0; i < nc; i++) {
            int rc = cclc_coll_is_v(coll) ? run_v_case(R, alg, &vcases[i], why, sizeof why)
                                           : run_case(R, alg, &cases[i], why, sizeof why);
            const char *cname = cclc_coll_is_v(coll) ? vcases[i].name : cases[i].name;
            char mine[256];
            snprintf(mine, sizeof mine, "%.255s", rc == 0 ? "" : why); /* the first 255 bytes say enough */
            R->boot->allgather(R->boot->ctx, mine, all_why, sizeof mine);
            if (R->rank == 0) {
                int nbad = 0;
                for (int r = 0; r < R->nranks; r++) nbad += all_why[r][0] != 0;
                if (nbad) {
                    printf("FAIL gpu/%s/N%d/%s/%s:", mode, R->nranks, file, cname);
                    for (int r = 0; r < R->nranks; r++)
                        if (all_why[r][0]) printf(" [%s]", all_why[r]);
                    printf("\n");
                } else {
                    printf("ok gpu/%s/N%d/%s/%s\n", mode, R->nranks, file, cname);
                }
                fflush(stdout);
            }
            for (int r = 0; r < R->nranks; r++) R->failures += all_why[r][0] != 0;
            if (rc != 0 && ccl_comm_synchronize(R->comm) != CCL_OK) {
                /* A failed (timed-out) communicator cannot go on. */
                return NULL;
            }
        }
        ccl_algorithm_free(alg);
    }
    ccl__cu.StreamDestroy(R->stream);
    return NULL;
}

/* Two processes on GPU 0: kernels of different processes do not run at once, so
 * ccl_comm_init_rank must refuse on every rank, within a second or two, naming the way
 * out (threads mode, a GPU per process, the CPU backend). */
static int shared_procs_test(void)
{
    CclEnvBoot *eb = NULL;
    ccl_bootstrap_t boot;
    char err[512];
    if (ccl__env_boot_open(&eb, &boot, 60000, err, sizeof err) != 0) {
        printf("FAIL gpu/shared-procs: bootstrap: %s\n", err);
        return 1;
    }
    ccl_config_t cfg = {.backend = CCL_BACKEND_GPU, .timeout_ms = 20000};
    ccl_comm_t *comm = NULL;
    double t0 = ccl__now_ms();
    ccl_result_t r = ccl_comm_init_rank(&comm, &boot, 0, &cfg);
    double ms = ccl__now_ms() - t0;
    char mine[256];
    const char *e = ccl_comm_last_error(NULL);
    if (r == CCL_ERR_UNSUPPORTED && strstr(e, "separate processes on one GPU") && strstr(e, "--backend cpu") &&
        strstr(e, "ccl_comm_init_all") && ms < 5000)
        mine[0] = 0;
    else
        snprintf(mine, sizeof mine, "rank %d after %.0f ms: %s: %.150s", boot.rank, ms, ccl_result_string(r), e);
    if (comm) ccl_comm_destroy(comm);
    char all[64][256];
    boot.allgather(boot.ctx, mine, all, sizeof mine);
    int bad = 0;
    for (int p = 0; p < boot.nranks; p++) bad |= all[p][0] != 0;
    if (boot.rank == 0) {
        if (bad) {
            printf("FAIL gpu/shared-procs/N%d: want CCL_ERR_UNSUPPORTED at once on every rank, naming the way out; got",
                   boot.nranks);
            for (int p = 0; p < boot.nranks; p++)
                if (all[p][0]) printf(" [%s]", all[p]);
            printf("\n");
        } else {
            printf("ok gpu/shared-procs/N%d (%.0f ms: %s)\n", boot.nranks, ms, e);
        }
    }
    ccl__env_boot_close(eb);
    return bad;
}

/* A dead peer: two ranks, only rank 0 runs; its wait must time out within the bound and
 * the error must name rank, thread block, source line and peer. */
static int timeout_test(int ngpu, const char *file)
{
    ccl_config_t cfg = {.backend = CCL_BACKEND_GPU, .timeout_ms = 300};
    ccl_comm_t *comms[2];
    int devices[2] = {0, 1 % ngpu};
    if (ccl_comm_init_all(comms, 2, devices, &cfg) != CCL_OK) {
        printf("FAIL gpu/timeout/%s: ccl_comm_init_all: %s\n", file, ccl_comm_last_error(NULL));
        return 1;
    }
    ccl_algorithm_t *alg = NULL;
    void *in = NULL, *out = NULL;
    int bad = 0;
    if (ccl_algorithm_load(comms[0], file, 0, &alg) != CCL_OK || ccl_mem_alloc(comms[0], &in, 4096) != CCL_OK ||
        ccl_mem_alloc(comms[0], &out, 4096) != CCL_OK) {
        printf("FAIL gpu/timeout/%s: setup: %s\n", file, ccl_comm_last_error(comms[0]));
        bad = 1;
    } else {
        ccl_result_t r = ccl_algorithm_run(alg, in, out, 1024, CCL_F32, CCL_SUM, NULL);
        ccl_result_t s = r == CCL_OK ? ccl_comm_synchronize(comms[0]) : r;
        const char *e = ccl_comm_last_error(comms[0]);
        if (s != CCL_ERR_TIMEOUT || !strstr(e, "rank 0") || !strstr(e, "thread block 0") || !strstr(e, "rank 1") ||
            !strstr(e, file)) {
            printf("FAIL gpu/timeout/%s: want CCL_ERR_TIMEOUT naming rank 0, thread block 0, %s:LINE and rank 1; "
                   "got %s: %s\n", file, file, ccl_result_string(s), e);
            bad = 1;
        } else {
            printf("ok gpu/timeout/%s (%s)\n", file, e);
        }
    }
    for (int r = 0; r < 2; r++) ccl_comm_destroy(comms[r]);
    return bad;
}

/* Two ranks (threads) on GPUs: rank 0 loads files[0], rank 1 files[1]; returns the two
 * comms and algorithms, or -1 after printing FAIL. */
static int pair_setup(int ngpu, const char *what, const char *f0, const char *f1, int timeout_ms, ccl_comm_t **comms,
                      ccl_algorithm_t **alg, void **in, void **out)
{
    ccl_config_t cfg = {.backend = CCL_BACKEND_GPU, .timeout_ms = timeout_ms};
    int devices[2] = {0, 1 % ngpu};
    if (ccl_comm_init_all(comms, 2, devices, &cfg) != CCL_OK) {
        printf("FAIL gpu/%s: ccl_comm_init_all: %s\n", what, ccl_comm_last_error(NULL));
        return -1;
    }
    const char *f[2] = {f0, f1};
    for (int r = 0; r < 2; r++)
        if (ccl_algorithm_load(comms[r], f[r], 0, &alg[r]) != CCL_OK || ccl_mem_alloc(comms[r], &in[r], 4096) != CCL_OK ||
            ccl_mem_alloc(comms[r], &out[r], 4096) != CCL_OK) {
            printf("FAIL gpu/%s: setup of rank %d: %s\n", what, r, ccl_comm_last_error(comms[r]));
            return -1;
        }
    return 0;
}

/* Ranks running different algorithms for one call: both fail, each naming both sides
 * (the kernel's prologue compares the calls' identities), never CCL_OK. */
static int mismatch_test(int ngpu)
{
    const char *f0 = "algorithms/allreduce/ring.ccl", *f1 = "algorithms/allreduce/allpairs.ccl";
    ccl_comm_t *comms[2];
    ccl_algorithm_t *alg[2], *other[2];
    void *in[2], *out[2];
    if (pair_setup(ngpu, "mismatch", f0, f0, 5000, comms, alg, in, out) != 0) return 1;
    int bad = 0;
    for (int r = 0; r < 2; r++)
        if (ccl_algorithm_load(comms[r], f1, 0, &other[r]) != CCL_OK) {
            printf("FAIL gpu/mismatch: load: %s\n", ccl_comm_last_error(comms[r]));
            return 1;
        }
    /* Both kernels compiled and loaded first, by matched calls: on a GPU the ranks share,
     * a module load waits for the running kernels, which wait for the loading rank. */
    for (int k = 0; k < 2; k++) {
        for (int r = 0; r < 2; r++) ccl_algorithm_run(k ? other[r] : alg[r], in[r], out[r], 1024, CCL_F32, CCL_SUM, NULL);
        for (int r = 0; r < 2; r++)
            if (ccl_comm_synchronize(comms[r]) != CCL_OK) {
                printf("FAIL gpu/mismatch: warm-up: %s\n", ccl_comm_last_error(comms[r]));
                return 1;
            }
    }
    alg[1] = other[1];
    for (int r = 0; r < 2; r++) ccl_algorithm_run(alg[r], in[r], out[r], 1024, CCL_F32, CCL_SUM, NULL);
    for (int r = 0; r < 2; r++) {
        ccl_result_t s = ccl_comm_synchronize(comms[r]);
        const char *e = ccl_comm_last_error(comms[r]);
        if (s != CCL_ERR_INVALID_ARGUMENT || !strstr(e, "ring.ccl") || !strstr(e, "allpairs.ccl")) {
            printf("FAIL gpu/mismatch: rank %d: want CCL_ERR_INVALID_ARGUMENT naming ring.ccl and allpairs.ccl, got "
                   "%s: %s\n", r, ccl_result_string(s), e);
            bad = 1;
        }
    }
    if (!bad) printf("ok gpu/mismatch: ring vs allpairs: both ranks fail naming both sides\n");
    for (int r = 0; r < 2; r++) ccl_comm_destroy(comms[r]);
    return bad;
}

typedef struct {
    ccl_comm_t *victim;
} GpuAborter;

static void *gpu_aborter(void *arg)
{
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    ccl_comm_abort(((GpuAborter *)arg)->victim);
    return NULL;
}

/* ccl_comm_abort from another thread: rank 0's kernel waits for rank 1 (which never
 * calls); aborting rank 1 ends it long before the 20 s timeout. */
static int abort_test(int ngpu)
{
    const char *f = "algorithms/allreduce/ring.ccl";
    ccl_comm_t *comms[2];
    ccl_algorithm_t *alg[2];
    void *in[2], *out[2];
    if (pair_setup(ngpu, "abort", f, f, 20000, comms, alg, in, out) != 0) return 1;
    /* Compiled first, so the timing is the abort's. */
    for (int r = 0; r < 2; r++) ccl_algorithm_run(alg[r], in[r], out[r], 1024, CCL_F32, CCL_SUM, NULL);
    for (int r = 0; r < 2; r++) ccl_comm_synchronize(comms[r]);
    int bad = 0;
    GpuAborter a = {comms[1]};
    pthread_t t;
    double t0 = ccl__now_ms();
    ccl_algorithm_run(alg[0], in[0], out[0], 1024, CCL_F32, CCL_SUM, NULL);
    pthread_create(&t, NULL, gpu_aborter, &a);
    ccl_result_t s = ccl_comm_synchronize(comms[0]);
    double ms = ccl__now_ms() - t0;
    pthread_join(t, NULL);
    const char *e = ccl_comm_last_error(comms[0]);
    if (s != CCL_ERR_PEER_FAILED || !strstr(e, "rank 1") || ms > 5000) {
        printf("FAIL gpu/abort: want CCL_ERR_PEER_FAILED naming rank 1 within 5 s, got %s after %.0f ms: %s\n",
               ccl_result_string(s), ms, e);
        bad = 1;
    } else {
        printf("ok gpu/abort: the waiting rank stops %.0f ms after its peer's ccl_comm_abort (%s)\n", ms, e);
    }
    for (int r = 0; r < 2; r++) ccl_comm_destroy(comms[r]);
    return bad;
}

/* The first call of an algorithm inside a stream capture is refused, saying to warm up,
 * and leaves the capture intact; after a warm-up the captured calls work. The same for
 * a standard collective whose library algorithm is not loaded yet. */
static int capture_test(int ngpu)
{
    const char *f = "algorithms/allreduce/ring.ccl";
    ccl_comm_t *comms[2];
    ccl_algorithm_t *alg[2];
    void *in[2], *out[2];
    if (pair_setup(ngpu, "capture", f, f, 20000, comms, alg, in, out) != 0) return 1;
    int bad = 0;
    CUstream st[2];
    for (int r = 0; r < 2; r++) {
        ccl__gpu_make_current(comms[r]);
        ccl__cu.StreamCreate(&st[r], CU_STREAM_NON_BLOCKING);
    }
    for (int coll = 0; coll < 2; coll++) {
        for (int r = 0; r < 2; r++) {
            ccl__gpu_make_current(comms[r]);
            CUgraph g = NULL;
            ccl__cu.StreamBeginCapture(st[r], CU_STREAM_CAPTURE_MODE_GLOBAL);
            ccl_result_t res = coll ? ccl_all_reduce(in[r], out[r], 1024, CCL_BF16, CCL_SUM, comms[r], st[r])
                                    : ccl_algorithm_run(alg[r], in[r], out[r], 1024, CCL_F32, CCL_SUM, st[r]);
            char e[1024];
            snprintf(e, sizeof e, "%s", ccl_comm_last_error(comms[r]));
            CUresult end = ccl__cu.StreamEndCapture(st[r], &g);
            if (g) ccl__cu.GraphDestroy(g);
            if (res != CCL_ERR_INVALID_USAGE || !strstr(e, "Warm up before capture") || end != CUDA_SUCCESS) {
                printf("FAIL gpu/capture/%s: rank %d: want CCL_ERR_INVALID_USAGE saying to warm up and an intact "
                       "capture, got %s (capture end %d): %s\n", coll ? "ccl_all_reduce" : "ccl_algorithm_run", r,
                       ccl_result_string(res), (int)end, e);
                bad = 1;
            }
        }
    }
    if (!bad) printf("ok gpu/capture: first calls inside a capture are refused, saying to warm up; captures intact\n");
    /* After the warm-up, the same calls capture and replay. */
    for (int r = 0; r < 2; r++) ccl_algorithm_run(alg[r], in[r], out[r], 1024, CCL_F32, CCL_SUM, st[r]);
    for (int r = 0; r < 2; r++)
        if (ccl_comm_synchronize(comms[r]) != CCL_OK) {
            printf("FAIL gpu/capture: warm-up: %s\n", ccl_comm_last_error(comms[r]));
            bad = 1;
        }
    for (int r = 0; r < 2; r++) ccl_comm_destroy(comms[r]);
    return bad;
}

/* One class of mismatched calls, in process mode (mpirun -np 2): rank r runs
 * `before[r]` extra calls of (alg, count before_count) first, then (file[r], count[r],
 * dtype[r], op[r]); every rank must fail with CCL_ERR_INVALID_ARGUMENT naming `differs`
 * and both algorithms. An allgatherv or alltoallv file runs with every segment count[r] / 2
 * elements (mismatch_run). */
typedef struct {
    const char *name, *differs;
    const char *file[2];
    size_t count[2];
    ccl_dtype_t dtype[2];
    ccl_op_t op[2];
    int before[2];
} MismatchCase;

/* Runs alg as the mismatch cases do: a v program (its file under algorithms/allgatherv
 * or alltoallv) with packed segments of count / 2 elements each, 2 ranks. */
static ccl_result_t mismatch_run(ccl_algorithm_t *alg, const char *file, void *in, void *out, size_t count,
                                 ccl_dtype_t dtype, ccl_op_t op)
{
    const size_t seg[2] = {count / 2, count / 2}; /* allgatherv reads sendcounts[0] only */
    if (strstr(file, "/allgatherv/") || strstr(file, "/alltoallv/"))
        return ccl_algorithm_run_v(alg, in, seg, NULL, out, seg, NULL, dtype, NULL);
    return ccl_algorithm_run(alg, in, out, count, dtype, op, NULL);
}

static int mismatch_procs_case(const MismatchCase *mc, ccl_bootstrap_t *boot, int ngpu)
{
    const int me = boot->rank;
    ccl_config_t cfg = {.backend = CCL_BACKEND_GPU, .timeout_ms = 20000};
    ccl_comm_t *comm = NULL;
    if (ccl_comm_init_rank(&comm, boot, me % ngpu, &cfg) != CCL_OK) {
        printf("FAIL gpu/mismatch-procs/%s: rank %d: ccl_comm_init_rank: %s\n", mc->name, me, ccl_comm_last_error(NULL));
        return 1;
    }
    ccl_algorithm_t *alg[2] = {NULL, NULL};
    void *in = NULL, *out = NULL;
    int bad = 0;
    for (int k = 0; k < 2 && !bad; k++)
        bad = ccl_algorithm_load(comm, mc->file[k], 0, &alg[k]) != CCL_OK;
    if (!bad) bad = ccl_mem_alloc(comm, &in, 8192) != CCL_OK || ccl_mem_alloc(comm, &out, 8192) != CCL_OK;
    /* Matched warm-ups first: every kernel either rank runs below is compiled and loaded. */
    for (int k = 0; k < 2 && !bad; k++) {
        bad = mismatch_run(alg[k], mc->file[k], in, out, mc->count[k], mc->dtype[k], mc->op[k]) != CCL_OK ||
              ccl_comm_synchronize(comm) != CCL_OK;
        boot->barrier(boot->ctx);
    }
    if (bad) {
        printf("FAIL gpu/mismatch-procs/%s: rank %d: setup: %s\n", mc->name, me, ccl_comm_last_error(comm));
        ccl_comm_destroy(comm);
        return 1;
    }
    ccl_result_t r = CCL_OK;
    for (int i = 0; i < mc->before[me] && r == CCL_OK; i++)
        r = mismatch_run(alg[0], mc->file[0], in, out, mc->count[0] / 2, mc->dtype[0], mc->op[0]);
    if (r == CCL_OK) r = mismatch_run(alg[me], mc->file[me], in, out, mc->count[me], mc->dtype[me], mc->op[me]);
    ccl_result_t s = r == CCL_OK ? ccl_comm_synchronize(comm) : r;
    const char *e = ccl_comm_last_error(comm);
    /* What differs: one of the call's arguments by itself ("disagree on the count (1024
     * on this rank, ..."), or a list, "(algorithm, ... differ", where the heap layout may
     * follow (the scratch of another call sits elsewhere). */
    char one[64], what[256] = "";
    snprintf(one, sizeof one, "the ranks disagree on the %s (", mc->differs);
    const char *list = strstr(e, "the ranks disagree on what this call runs (");
    const char *end = list ? strstr(list, " differ") : NULL;
    if (strstr(e, one)) snprintf(what, sizeof what, "%s", mc->differs);
    else if (list && end) snprintf(what, sizeof what, "%.*s", (int)(end - list), list);
    const char *b0 = strrchr(mc->file[0], '/') + 1, *b1 = strrchr(mc->file[1], '/') + 1;
    if (s != CCL_ERR_INVALID_ARGUMENT || !strstr(what, mc->differs) || !strstr(e, b0) || !strstr(e, b1)) {
        printf("FAIL gpu/mismatch-procs/%s: rank %d: want CCL_ERR_INVALID_ARGUMENT listing '%s' among what differs "
               "and naming %s and %s, got %s: %s\n", mc->name, me, mc->differs, b0, b1, ccl_result_string(s), e);
        bad = 1;
    } else {
        printf("ok gpu/mismatch-procs/%s: rank %d fails naming both sides\n", mc->name, me);
    }
    ccl_comm_destroy(comm);
    return bad;
}

static int mismatch_procs_test(void)
{
    CclEnvBoot *eb = NULL;
    ccl_bootstrap_t boot;
    char err[512];
    if (ccl__env_boot_open(&eb, &boot, 60000, err, sizeof err) != 0) {
        printf("FAIL gpu/mismatch-procs: bootstrap: %s\n", err);
        return 1;
    }
    if (boot.nranks != 2) {
        printf("FAIL gpu/mismatch-procs: run it with 2 processes (mpirun -np 2), not %d\n", boot.nranks);
        ccl__env_boot_close(eb);
        return 1;
    }
    int ngpu = 0;
    ccl__cu.DeviceGetCount(&ngpu);
    const char *ring = "algorithms/allreduce/ring.ccl", *ap = "algorithms/allreduce/allpairs.ccl";
    const char *agv_ll = "algorithms/allgatherv/direct_ll.ccl", *agv = "algorithms/allgatherv/direct.ccl";
    const char *a2av = "algorithms/alltoallv/direct_own.ccl";
    const MismatchCase cases[] = {
        {"algorithm", "algorithm", {ring, ap}, {1024, 1024}, {CCL_F32, CCL_F32}, {CCL_SUM, CCL_SUM}, {0, 0}},
        {"count-simple", "count", {ring, ring}, {1024, 1000}, {CCL_F32, CCL_F32}, {CCL_SUM, CCL_SUM}, {0, 0}},
        {"count-ll", "count", {ap, ap}, {1024, 1000}, {CCL_F32, CCL_F32}, {CCL_SUM, CCL_SUM}, {0, 0}},
        {"dtype-ll", "dtype", {ap, ap}, {1024, 1024}, {CCL_F32, CCL_BF16}, {CCL_SUM, CCL_SUM}, {0, 0}},
        {"op-simple", "op", {ring, ring}, {1024, 1024}, {CCL_F32, CCL_F32}, {CCL_SUM, CCL_MAX}, {0, 0}},
        /* Rank 0 runs one call more first (count 512): its next call meets rank 1's first. */
        {"shifted-ll", "count", {ap, ap}, {1024, 1024}, {CCL_F32, CCL_F32}, {CCL_SUM, CCL_SUM}, {1, 0}},
        /* v kernels, whose entry is the wait for the peers' tables (ccl_vload): a peer in
         * another v program, in a fixed-size call (whose identity's count is not a v
         * call's 0: the message leads with the count), another dtype, one call behind. */
        {"v-algorithm", "algorithm", {agv_ll, agv}, {1024, 1024}, {CCL_F32, CCL_F32}, {CCL_SUM, CCL_SUM}, {0, 0}},
        {"v-fixed-ll", "count", {agv_ll, ap}, {1024, 1024}, {CCL_F32, CCL_F32}, {CCL_SUM, CCL_SUM}, {0, 0}},
        {"v-fixed-simple", "count", {a2av, ring}, {1024, 1024}, {CCL_F32, CCL_F32}, {CCL_SUM, CCL_SUM}, {0, 0}},
        {"v-dtype", "dtype", {a2av, a2av}, {1024, 1024}, {CCL_F32, CCL_BF16}, {CCL_SUM, CCL_SUM}, {0, 0}},
        {"v-shifted", "algorithm", {a2av, agv_ll}, {1024, 1024}, {CCL_F32, CCL_F32}, {CCL_SUM, CCL_SUM}, {1, 0}},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bad |= mismatch_procs_case(&cases[i], &boot, ngpu);
        boot.barrier(boot.ctx);
    }
    ccl__env_boot_close(eb);
    return bad;
}

int main(int argc, char **argv)
{
    int full = 0, procs = 0, pieces = 0, nranks = 0, first = 1;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (!strcmp(argv[first], "--full")) full = 1;
        else if (!strcmp(argv[first], "--pieces")) pieces = 1;
        else if (!strcmp(argv[first], "--standard")) standard_v = 1;
        else if (!strcmp(argv[first], "--procs")) procs = 1;
        else if (!strcmp(argv[first], "--ranks") && first + 1 < argc) nranks = atoi(argv[++first]);
        else if (!strcmp(argv[first], "--timeout-test")) nranks = -1;
        else if (!strcmp(argv[first], "--shared-procs")) nranks = -2;
        else if (!strcmp(argv[first], "--control-tests")) nranks = -3;
        else if (!strcmp(argv[first], "--mismatch-procs")) nranks = -4;
        else {
            fprintf(stderr, "gpu_test: unknown option %s\n", argv[first]);
            return 2;
        }
    }
    char why[256];
    if (ccl__cuda_load(why, sizeof why) != 0) {
        printf("skipped: no GPU (%s)\n", why);
        return 77;
    }
    int ngpu = 0;
    ccl__cu.DeviceGetCount(&ngpu);
    if (nranks == -2) return shared_procs_test();
    if (nranks == -3) return mismatch_test(ngpu) | abort_test(ngpu) | capture_test(ngpu);
    if (nranks == -4) return mismatch_procs_test();
    if (nranks == -1) {
        int bad = 0;
        for (int a = first; a < argc; a++) bad |= timeout_test(ngpu, argv[a]);
        return bad;
    }
    /* CCL_TIMEOUT_MS, when set, bounds the waits instead (shorter runs of failing cases). */
    ccl_config_t cfg = {.backend = CCL_BACKEND_GPU, .timeout_ms = getenv("CCL_TIMEOUT_MS") ? 0 : 20000,
                        .heap_bytes = pieces && !getenv("CCL_HEAP_BYTES") ? (size_t)32 << 20 : 0};
    int failures = 0;
    if (procs) {
        CclEnvBoot *eb = NULL;
        ccl_bootstrap_t boot;
        char err[512];
        if (ccl__env_boot_open(&eb, &boot, 60000, err, sizeof err) != 0) {
            printf("FAIL gpu/procs: bootstrap: %s\n", err);
            return 1;
        }
        int nfail = 0;
        for (int a = first; a < argc; a++) {
            /* A fresh communicator per algorithm: a failure (a dead comm) stays local. */
            Rank R = {.rank = boot.rank, .nranks = boot.nranks, .full = full, .procs = 1, .pieces = pieces, .boot = &boot,
                      .nalgs = 1, .algs = argv + a};
            if (ccl_comm_init_rank(&R.comm, &boot, boot.rank % ngpu, &cfg) != CCL_OK) {
                printf("FAIL gpu/procs/N%d: ccl_comm_init_rank: %s\n", boot.nranks, ccl_comm_last_error(NULL));
                return 1;
            }
            CUdevice dev;
            ccl__cu.DeviceGet(&dev, boot.rank % ngpu);
            ccl__cu.DevicePrimaryCtxRetain(&R.ctx, dev);
            rank_main(&R);
            nfail += R.failures;
            ccl_comm_destroy(R.comm);
            boot.barrier(boot.ctx);
        }
        ccl__env_boot_close(eb);
        return nfail ? 1 : 0;
    }
    if (nranks <= 0) nranks = ngpu;
    if (nranks > 64) {
        printf("FAIL gpu: --ranks %d is more than 64\n", nranks);
        return 2;
    }
    ccl_comm_t *comms[64];
    int devices[64];
    for (int r = 0; r < nranks; r++) devices[r] = r % ngpu;
    stack_reports_init();
    for (int a = first; a < argc; a++) {
        /* A fresh set of communicators per algorithm: a failure (a dead comm) stays local. */
        if (ccl_comm_init_all(comms, nranks, devices, &cfg) != CCL_OK) {
            printf("FAIL gpu/threads/N%d: ccl_comm_init_all: %s\n", nranks, ccl_comm_last_error(NULL));
            return 1;
        }
        ccl_bootstrap_t boots[64];
        CclThreadBoot *tb = ccl__thread_boot_new(nranks, boots);
        Rank ranks[64];
        pthread_t tids[64];
        for (int r = 0; r < nranks; r++) {
            ranks[r] = (Rank){.rank = r, .nranks = nranks, .full = full, .pieces = pieces, .comm = comms[r], .boot = &boots[r],
                              .nalgs = 1, .algs = argv + a};
            CUdevice dev;
            ccl__cu.DeviceGet(&dev, devices[r]);
            ccl__cu.DevicePrimaryCtxRetain(&ranks[r].ctx, dev);
            pthread_create(&tids[r], NULL, rank_main, &ranks[r]);
            rank_threads[r] = tids[r];
        }
        nrank_threads = nranks;
        for (int r = 0; r < nranks; r++) {
            pthread_join(tids[r], NULL);
            failures += ranks[r].failures;
        }
        for (int r = 0; r < nranks; r++) ccl_comm_destroy(comms[r]);
        ccl__thread_boot_free(tb);
    }
    return failures ? 1 : 0;
}
