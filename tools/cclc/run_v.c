/* run_v.c: `cclc run` for allgatherv and alltoallv programs.
 *
 * Takes the loaded algorithm of every local rank (run.c loads it) and the run's
 * options; gives each rank's verdict. Each call has a layout, computed alike by every
 * rank (so ranks in separate processes agree without talking): the counts, from
 * --counts (allgatherv: each rank's sendcount), --counts-matrix (alltoallv: rank q's
 * sendcounts, row by row) or, without either, from the seed and the call's number
 * (uniform in 1..--count, a quarter of them 0, so uneven, empty and, with a large
 * --count, large segments all occur); the displacements, with gaps between segments and
 * recvbuf's segments in reverse rank order, as MPI programs may lay them out. Inputs are
 * integers the dtype holds exactly, a hash of (call, rank, unit, index); recvbuf is
 * poisoned before each call, so every element of every segment must be its sender's
 * and every element in a gap must still be poison.
 *
 * Buffers: one allocation per rank (and per buffer set of --back-to-back) of the
 * largest extents any rank has in any call, so ccl_mem_alloc sizes are equal on every
 * rank (the heap stays symmetric); --host-buffers uses malloc'd ones (staged). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "internal.h"
#include "run.h"

/* Counts and displacements of one call, for every rank. */
typedef struct {
    int N, nin;
    size_t *scount, *sdispl;     /* [q * nin + v]: rank q's unit v of sendbuf */
    size_t *rcount, *rdispl;     /* [p * N + u]: rank p's unit u of recvbuf */
    size_t max_in, max_out;      /* the largest extents of any rank, elements */
} Layout;

static void layout_free(Layout *l)
{
    free(l->scount), free(l->sdispl), free(l->rcount), free(l->rdispl);
    memset(l, 0, sizeof *l);
}

/* The layout of call `call` (0-based). */
static void layout_make(const RunOpts *o, Collective coll, int N, int call, Layout *l)
{
    int nin = coll == COLL_ALLTOALLV ? N : 1;
    l->N = N;
    l->nin = nin;
    l->scount = tool_calloc((size_t)N * (size_t)nin, sizeof *l->scount);
    l->sdispl = tool_calloc((size_t)N * (size_t)nin, sizeof *l->sdispl);
    l->rcount = tool_calloc((size_t)N * (size_t)N, sizeof *l->rcount);
    l->rdispl = tool_calloc((size_t)N * (size_t)N, sizeof *l->rdispl);
    uint64_t base = cclc_run_mix(cclc_run_mix(o->seed) ^ (uint64_t)call * 0x9e3779b97f4a7c15ull ^ 0x5eedull);
    for (int i = 0; i < N * nin; i++) {
        if (o->ncounts) {
            l->scount[i] = o->counts[i];
            continue;
        }
        uint64_t r = cclc_run_mix(base ^ (uint64_t)i);
        l->scount[i] = r % 4 == 0 || o->count == 0 ? 0 : 1 + (size_t)((r >> 8) % o->count);
    }
    l->max_in = l->max_out = 0;
    for (int q = 0; q < N; q++) {
        size_t at = 0;
        for (int v = 0; v < nin; v++) { /* a gap of v % 3 elements before each unit */
            at += (size_t)(v % 3);
            l->sdispl[q * nin + v] = at;
            at += l->scount[q * nin + v];
        }
        if (at > l->max_in)
            l->max_in = at;
    }
    for (int p = 0; p < N; p++) {
        size_t at = 0;
        for (int u = N - 1; u >= 0; u--) { /* reverse rank order, gaps of 1 + u % 2 */
            int q, v;
            ccl__v_home(coll, p, u, &q, &v);
            at += 1 + (size_t)(u % 2);
            l->rcount[p * N + u] = l->scount[q * nin + v];
            l->rdispl[p * N + u] = at;
            at += l->rcount[p * N + u];
        }
        if (at > l->max_out)
            l->max_out = at;
    }
}

/* Rank q's input element i of unit v in call `call`. */
static int64_t value(const RunOpts *o, int call, int q, int v, size_t i)
{
    int64_t R = tool_exact_max(o->dtype);
    uint64_t r = cclc_run_mix(cclc_run_mix(o->seed ^ (uint64_t)call << 48) ^ (uint64_t)q << 40 ^ (uint64_t)v << 32 ^ i);
    int64_t lo = tool_dtype_unsigned(o->dtype) ? 0 : -R;
    return lo + (int64_t)(r % (uint64_t)(R - lo + 1));
}

typedef struct {
    void *mem;                   /* the allocation: send at 0, recv at recv_at */
    char *mirror;                /* host copy */
    size_t total, recv_at;
} VBufs;

static int vbufs_alloc(const RunOpts *o, ccl_comm_t *comm, size_t max_in, size_t max_out, VBufs *b, char *err,
                       size_t len)
{
    size_t es = ccl_dtype_size(o->dtype);
    b->recv_at = (max_in * es + 255) / 256 * 256;
    b->total = b->recv_at + max_out * es + 16;
    if (!(b->mirror = malloc(b->total))) {
        snprintf(err, len, "out of host memory for %zu bytes", b->total);
        return -1;
    }
    if (o->host_buffers) {
        if (!(b->mem = aligned_alloc(256, (b->total + 255) / 256 * 256))) {
            snprintf(err, len, "out of host memory for %zu bytes", b->total);
            return -1;
        }
    } else if (ccl_mem_alloc(comm, &b->mem, b->total) != CCL_OK) {
        snprintf(err, len, "%s", ccl_comm_last_error(comm));
        return -1;
    }
    return 0;
}

static void vbufs_free(const RunOpts *o, ccl_comm_t *comm, VBufs *b)
{
    if (o->host_buffers)
        free(b->mem);
    else if (b->mem)
        ccl_mem_free(comm, b->mem);
    free(b->mirror);
    memset(b, 0, sizeof *b);
}

static unsigned char poison(int call)
{
    return (unsigned char)(0xA5 ^ (call & 0xff));
}

static int vfill(const RunOpts *o, const Layout *l, int call, int rank, ccl_comm_t *comm, VBufs *b, char *err,
                 size_t len)
{
    memset(b->mirror, poison(call), b->total);
    for (int v = 0; v < l->nin; v++)
        for (size_t i = 0; i < l->scount[rank * l->nin + v]; i++)
            tool_store_int(b->mirror, l->sdispl[rank * l->nin + v] + i, value(o, call, rank, v, i), o->dtype);
    if (ccl_mem_copy(comm, b->mem, b->mirror, b->total) != CCL_OK) {
        snprintf(err, len, "copying rank %d's input: %s", rank, ccl_comm_last_error(comm));
        return -1;
    }
    return 0;
}

static int vrun(const Layout *l, Collective coll, int rank, ccl_algorithm_t *alg, ccl_dtype_t dtype, VBufs *b)
{
    int N = l->N;
    return ccl_algorithm_run_v(alg, b->mem, &l->scount[rank * l->nin], &l->sdispl[rank * l->nin],
                               (char *)b->mem + b->recv_at, &l->rcount[rank * N], &l->rdispl[rank * N], dtype,
                               NULL) == CCL_OK ? 0 : -1;
}

/* Fetches rank's recvbuf and compares every element with its sender's and every gap
 * with the poison. `shown` is the call named in messages (1-based). */
static void vcheck(const RunOpts *o, const Layout *l, Collective coll, int call, int shown, int rank, ccl_comm_t *comm,
                   VBufs *b, Verdict *v)
{
    size_t es = ccl_dtype_size(o->dtype), out_elems = (b->total - 16 - b->recv_at) / es;
    char *got = b->mirror + b->recv_at;
    if (ccl_mem_copy(comm, got, (char *)b->mem + b->recv_at, out_elems * es) != CCL_OK) {
        v->failed_call = 1;
        snprintf(v->first, sizeof v->first, "copying rank %d's output: %s", rank, ccl_comm_last_error(comm));
        return;
    }
    unsigned char *seg = calloc(out_elems ? out_elems : 1, 1); /* 1: inside a segment */
    for (int u = 0; u < l->N; u++) {
        int q, w;
        ccl__v_home(coll, rank, u, &q, &w);
        size_t at = l->rdispl[rank * l->N + u];
        for (size_t i = 0; i < l->rcount[rank * l->N + u]; i++) {
            if (seg)
                seg[at + i] = 1;
            double want = (double)value(o, call, q, w, i), have = ccl__load_double(got + (at + i) * es, o->dtype);
            if (have != want && !v->wrong++)
                snprintf(v->first, sizeof v->first, "call %d: rank %d recvbuf[%zu] (segment %d, from rank %d, element "
                         "%zu of %zu) = %.17g, expected %.17g", shown, rank, at + i, u, q, i,
                         l->rcount[rank * l->N + u], have, want);
        }
    }
    for (size_t e = 0; seg && e < out_elems; e++) {
        if (seg[e])
            continue;
        for (size_t k = 0; k < es; k++)
            if ((unsigned char)got[e * es + k] != poison(call)) {
                if (!v->wrong++)
                    snprintf(v->first, sizeof v->first, "call %d: rank %d recvbuf[%zu] lies between segments but was "
                             "written", shown, rank, e);
                break;
            }
    }
    free(seg);
}

void cclc_run_v_describe(const RunOpts *o, char *buf, size_t len)
{
    if (!o->ncounts) {
        snprintf(buf, len, "counts=seeded(%llu, 0..%zu)", (unsigned long long)o->seed, o->count);
        return;
    }
    size_t n = (size_t)snprintf(buf, len, "counts=");
    for (int i = 0; i < o->ncounts && n + 24 < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%zu", i ? "," : "", o->counts[i]);
    if (n + 24 >= len)
        snprintf(buf + n, len - n, ",...");
}

int cclc_run_v(const RunOpts *o, Collective coll, int N, int n, int rank0, ccl_comm_t **comms, ccl_algorithm_t **algs,
               Verdict *v)
{
    int want = coll == COLL_ALLTOALLV ? N * N : N;
    const char *usage = NULL;
    char msg[200];
    if (o->inplace)
        usage = "--inplace: allgatherv and alltoallv have no in-place form";
    else if (o->ncounts && o->counts_matrix != (coll == COLL_ALLTOALLV)) {
        snprintf(msg, sizeof msg, "%s: an %s takes %s", o->counts_matrix ? "--counts-matrix" : "--counts",
                 cclc_coll_name(coll), coll == COLL_ALLTOALLV ? "--counts-matrix (N*N values)" : "--counts (N values)");
        usage = msg;
    } else if (o->ncounts && o->ncounts != want) {
        snprintf(msg, sizeof msg, "%s: %d values given, %d expected (N = %d)",
                 o->counts_matrix ? "--counts-matrix" : "--counts", o->ncounts, want, N);
        usage = msg;
    }
    if (usage) {
        for (int i = 0; i < n; i++)
            snprintf(v[i].first, sizeof v[i].first, "%s", usage);
        return 2;
    }
    int sets = o->back_to_back ? (o->iters < B_SETS ? o->iters : B_SETS) : 1;
    int ncalls = o->back_to_back ? sets : o->iters; /* distinct layouts */
    Layout *lay = tool_calloc((size_t)ncalls, sizeof *lay);
    size_t max_in = 0, max_out = 0;
    for (int k = 0; k < ncalls; k++) {
        layout_make(o, coll, N, k, &lay[k]);
        max_in = lay[k].max_in > max_in ? lay[k].max_in : max_in;
        max_out = lay[k].max_out > max_out ? lay[k].max_out : max_out;
    }
    VBufs *b = tool_calloc((size_t)n * (size_t)sets, sizeof *b);
    char err[400];
    int failed = 0;
    for (int i = 0; i < n * sets && !failed; i++)
        if (vbufs_alloc(o, comms[i / sets], max_in, max_out, &b[i], err, sizeof err) != 0) {
            cclc_run_fail(&v[i / sets], err);
            failed = 1;
        }
    double ms = 0;
    if (!failed && o->back_to_back) {
        /* Set s: call s's layout and data, used again by calls s + sets, ...; out of
         * place, its input never changes, so its last call's output is checked. */
        for (int k = 0; k < sets * n && !failed; k++)
            if (vfill(o, &lay[k % sets], k % sets, rank0 + k / sets, comms[k / sets], &b[k], err, sizeof err) != 0) {
                cclc_run_fail(&v[k / sets], err);
                failed = 1;
            }
        double t0 = ccl__now_ms();
        for (int k = 0; k < o->iters && !failed; k++)
            for (int i = 0; i < n && !failed; i++)
                if (vrun(&lay[k % sets], coll, rank0 + i, algs[i], o->dtype, &b[i * sets + k % sets]) != 0) {
                    cclc_run_fail(&v[i], ccl_comm_last_error(comms[i]));
                    failed = 1;
                }
        failed = cclc_run_sync(comms, n, v, failed);
        ms = ccl__now_ms() - t0;
        for (int s = 0; s < sets && !failed; s++)
            for (int i = 0; i < n; i++)
                vcheck(o, &lay[s], coll, s, s + (o->iters - 1 - s) / sets * sets + 1, rank0 + i, comms[i],
                       &b[i * sets + s], &v[i]);
    }
    for (int k = 0; k < o->iters && !failed && !o->back_to_back; k++) {
        for (int i = 0; i < n && !failed; i++)
            if (vfill(o, &lay[k], k, rank0 + i, comms[i], &b[i], err, sizeof err) != 0) {
                cclc_run_fail(&v[i], err);
                failed = 1;
            }
        double t0 = ccl__now_ms();
        for (int i = 0; i < n && !failed; i++)
            if (vrun(&lay[k], coll, rank0 + i, algs[i], o->dtype, &b[i]) != 0) {
                cclc_run_fail(&v[i], ccl_comm_last_error(comms[i]));
                failed = 1;
            }
        failed = cclc_run_sync(comms, n, v, failed);
        ms += ccl__now_ms() - t0;
        for (int i = 0; i < n && !failed; i++)
            vcheck(o, &lay[k], coll, k, k + 1, rank0 + i, comms[i], &b[i], &v[i]);
    }
    for (int i = 0; i < n; i++)
        v[i].ms = ms;
    for (int i = 0; i < n * sets; i++)
        vbufs_free(o, comms[i / sets], &b[i]);
    for (int k = 0; k < ncalls; k++)
        layout_free(&lay[k]);
    free(lay);
    free(b);
    return 0;
}
