/* vcoll.c: ccl_all_gather_v and ccl_all_to_all_v through the public API (CPU backend,
 * threads; cclc run covers processes): uneven, zero and large segments, displacements
 * with gaps (which must stay untouched), back-to-back calls whose counts change every
 * call, counts that disagree across ranks (every rank fails naming both ranks, the
 * segment and both counts, and no recvbuf is written; in threads and in processes), and
 * argument errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ccl.h"
#include "internal.h"
#include "forked_ranks.h"

enum { N = 4, POISON = -7 };

static int failures;

#define EXPECT(cond, ...)                                                                                    \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            printf("FAIL vcoll: " __VA_ARGS__);                                                              \
            printf("\n");                                                                                    \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

static int init(ccl_comm_t **comms)
{
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .timeout_ms = 10000};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) == CCL_OK)
        return 0;
    printf("FAIL vcoll: init: %s\n", ccl_comm_last_error(NULL));
    failures++;
    return -1;
}

static void destroy(ccl_comm_t **comms)
{
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(comms[r]);
}

/* The value rank q sends in element i of its block for rank p (allgatherv: p = 0). */
static int32_t val(int call, int q, int p, size_t i)
{
    return (int32_t)(call * 1000003 + q * 10007 + p * 101 + (int)(i % 9973));
}

/* One allgatherv or alltoallv call's layout: cnt[q][p] elements from q to p
 * (allgatherv: column 0), recvbuf segments in reverse order with gaps. */
typedef struct {
    size_t cnt[N][N], sd[N][N], rc[N][N], rd[N][N], in_ext[N], out_ext[N];
} Layout;

static void layout(int alltoall, const size_t cnt[N][N], Layout *l)
{
    memset(l, 0, sizeof *l);
    memcpy(l->cnt, cnt, sizeof l->cnt);
    for (int q = 0; q < N; q++) {
        size_t at = 0;
        for (int p = 0; p < (alltoall ? N : 1); p++) {
            l->sd[q][p] = at;
            at += cnt[q][p] + 1;
        }
        l->in_ext[q] = at;
        at = 2;
        for (int u = N - 1; u >= 0; u--) {
            l->rc[q][u] = alltoall ? cnt[u][q] : cnt[u][0];
            l->rd[q][u] = at;
            at += l->rc[q][u] + 3;
        }
        l->out_ext[q] = at;
    }
}

typedef struct {
    int32_t *send[N], *recv[N];
} Bufs;

static void bufs_make(const Layout *l, int call, int alltoall, Bufs *b)
{
    for (int q = 0; q < N; q++) {
        b->send[q] = malloc(sizeof(int32_t) * (l->in_ext[q] + 1));
        b->recv[q] = malloc(sizeof(int32_t) * (l->out_ext[q] + 1));
        for (size_t e = 0; e <= l->out_ext[q]; e++)
            b->recv[q][e] = POISON;
        for (int p = 0; p < (alltoall ? N : 1); p++)
            for (size_t i = 0; i < l->cnt[q][p]; i++)
                b->send[q][l->sd[q][p] + i] = val(call, q, p, i);
    }
}

static void bufs_free(Bufs *b)
{
    for (int q = 0; q < N; q++)
        free(b->send[q]), free(b->recv[q]);
}

/* Every segment holds its sender's data, every other element is still poison. */
static void verify(const char *what, const Layout *l, int call, int alltoall, const Bufs *b)
{
    for (int p = 0; p < N; p++) {
        char *mine = calloc(l->out_ext[p] + 1, 1);
        for (int u = 0; u < N; u++)
            for (size_t i = 0; i < l->rc[p][u]; i++) {
                size_t e = l->rd[p][u] + i;
                mine[e] = 1;
                int32_t want = val(call, u, alltoall ? p : 0, i), got = b->recv[p][e];
                if (got != want) {
                    EXPECT(0, "%s: rank %d segment %d element %zu = %d, expected %d", what, p, u, i, got, want);
                    free(mine);
                    return;
                }
            }
        for (size_t e = 0; e <= l->out_ext[p]; e++)
            if (!mine[e] && b->recv[p][e] != POISON) {
                EXPECT(0, "%s: rank %d recvbuf[%zu] lies outside every segment but was written", what, p, e);
                break;
            }
        free(mine);
    }
}

static ccl_result_t call_v(int alltoall, ccl_comm_t *comm, int q, const Layout *l, const Bufs *b)
{
    if (alltoall)
        return ccl_all_to_all_v(b->send[q], l->cnt[q], l->sd[q], b->recv[q], l->rc[q], l->rd[q], CCL_I32, comm, NULL);
    return ccl_all_gather_v(b->send[q], l->cnt[q][0], b->recv[q], l->rc[q], l->rd[q], CCL_I32, comm, NULL);
}

/* Counts of call `call`: a mix of zeros, small and (when big) large segments. */
static void counts(int call, int alltoall, int big, size_t cnt[N][N])
{
    memset(cnt, 0, sizeof(size_t) * N * N);
    for (int q = 0; q < N; q++)
        for (int p = 0; p < (alltoall ? N : 1); p++) {
            unsigned h = (unsigned)(call * 7919 + q * 131 + p * 31) * 2654435761u;
            cnt[q][p] = h % 5 == 0 ? 0 : (h >> 8) % (big ? 300000 : 700);
        }
}

static void correct(int alltoall, int big, const char *what)
{
    int failures0 = failures;
    ccl_comm_t *comms[N];
    if (init(comms) != 0)
        return;
    for (int call = 0; call < 3; call++) {
        size_t cnt[N][N];
        counts(call, alltoall, big, cnt);
        Layout l;
        layout(alltoall, cnt, &l);
        Bufs b;
        bufs_make(&l, call, alltoall, &b);
        for (int q = 0; q < N; q++) {
            ccl_result_t r = call_v(alltoall, comms[q], q, &l, &b);
            EXPECT(r == CCL_OK, "%s: call %d rank %d: %s", what, call, q, ccl_comm_last_error(comms[q]));
        }
        for (int q = 0; q < N; q++)
            EXPECT(ccl_comm_synchronize(comms[q]) == CCL_OK, "%s: sync %d: %s", what, q, ccl_comm_last_error(comms[q]));
        verify(what, &l, call, alltoall, &b);
        bufs_free(&b);
    }
    destroy(comms);
    if (failures == failures0)
        printf("ok vcoll %s\n", what);
}

/* 24 calls enqueued with no synchronization in between, each with its own counts and
 * buffers: a rank's next call overlaps its peers' current one. */
static void back_to_back(int alltoall)
{
    int failures0 = failures;
    enum { CALLS = 24 };
    ccl_comm_t *comms[N];
    if (init(comms) != 0)
        return;
    Layout *l = malloc(sizeof *l * CALLS);
    Bufs *b = malloc(sizeof *b * CALLS);
    for (int k = 0; k < CALLS; k++) {
        size_t cnt[N][N];
        counts(k, alltoall, 0, cnt);
        layout(alltoall, cnt, &l[k]);
        bufs_make(&l[k], k, alltoall, &b[k]);
    }
    for (int k = 0; k < CALLS; k++)
        for (int q = 0; q < N; q++) {
            ccl_result_t r = call_v(alltoall, comms[q], q, &l[k], &b[k]);
            EXPECT(r == CCL_OK, "back-to-back call %d rank %d: %s", k, q, ccl_comm_last_error(comms[q]));
        }
    for (int q = 0; q < N; q++)
        EXPECT(ccl_comm_synchronize(comms[q]) == CCL_OK, "back-to-back sync %d: %s", q, ccl_comm_last_error(comms[q]));
    for (int k = 0; k < CALLS; k++) {
        verify(alltoall ? "alltoallv back-to-back" : "allgatherv back-to-back", &l[k], k, alltoall, &b[k]);
        bufs_free(&b[k]);
    }
    free(l);
    free(b);
    destroy(comms);
    if (failures == failures0)
        printf("ok vcoll %s back-to-back, counts changing every call\n", alltoall ? "alltoallv" : "allgatherv");
}

/* Rank `bad` expects `want` elements in segment `seg` where its sender sends another
 * count: every rank fails with CCL_ERR_INVALID_ARGUMENT naming both ranks, the segment
 * and both counts, and no recvbuf is written. */
static void mismatch(int alltoall, int bad, int seg, size_t want, const char *n1, const char *n2)
{
    int failures0 = failures;
    ccl_comm_t *comms[N];
    if (init(comms) != 0)
        return;
    size_t cnt[N][N];
    counts(5, alltoall, 0, cnt);
    Layout l;
    layout(alltoall, cnt, &l);
    l.rc[bad][seg] = want;
    Bufs b;
    bufs_make(&l, 5, alltoall, &b);
    for (int q = 0; q < N; q++) {
        ccl_result_t r = call_v(alltoall, comms[q], q, &l, &b);
        EXPECT(r == CCL_OK, "mismatch: rank %d returned %s at once: %s", q, ccl_result_string(r),
               ccl_comm_last_error(comms[q]));
    }
    for (int q = 0; q < N; q++) {
        ccl_result_t r = ccl_comm_synchronize(comms[q]);
        const char *msg = ccl_comm_last_error(comms[q]);
        EXPECT(r == CCL_ERR_INVALID_ARGUMENT && strstr(msg, n1) && strstr(msg, n2),
               "mismatch: rank %d got %s, wanted invalid argument naming '%s' and '%s': %s", q, ccl_result_string(r),
               n1, n2, msg);
        for (size_t e = 0; e <= l.out_ext[q]; e++)
            if (b.recv[q][e] != POISON) {
                EXPECT(0, "mismatch: rank %d's recvbuf was written (element %zu)", q, e);
                break;
            }
    }
    bufs_free(&b);
    destroy(comms);
    if (failures == failures0)
        printf("ok vcoll %s mismatched counts: every rank names both sides\n", alltoall ? "alltoallv" : "allgatherv");
}

/* The alltoallv mismatch with every rank a process (shm heaps, the environment
 * bootstrap): rank `rank`'s part; 0 when it failed as it must. */
static int proc_child(int rank, int unused)
{
    char err[512];
    ccl_bootstrap_t boot;
    CclEnvBoot *eb;
    if (ccl__env_boot_open(&eb, &boot, 10000, err, sizeof err) != 0) {
        printf("FAIL vcoll: processes: rank %d: bootstrap: %s\n", rank, err);
        return 1;
    }
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .timeout_ms = 10000};
    ccl_comm_t *comm;
    if (ccl_comm_init_rank(&comm, &boot, 0, &cfg) != CCL_OK) {
        printf("FAIL vcoll: processes: rank %d: init: %s\n", rank, ccl_comm_last_error(NULL));
        ccl__env_boot_close(eb);
        return 1;
    }
    size_t cnt[N][N];
    counts(5, 1, 0, cnt);
    Layout l;
    layout(1, cnt, &l);
    l.rc[3][0] = 4;
    Bufs b;
    bufs_make(&l, 5, 1, &b);
    ccl_result_t r = call_v(1, comm, rank, &l, &b);
    if (r == CCL_OK)
        r = ccl_comm_synchronize(comm);
    const char *msg = ccl_comm_last_error(comm);
    int bad = r != CCL_ERR_INVALID_ARGUMENT || !strstr(msg, "rank 0 sends") ||
              !strstr(msg, "rank 3 expects 4 (its recvcounts[0])");
    if (bad)
        printf("FAIL vcoll: processes: rank %d got %s, wanted invalid argument naming both ranks: %s\n", rank,
               ccl_result_string(r), msg);
    for (size_t e = 0; e <= l.out_ext[rank] && !bad; e++)
        if (b.recv[rank][e] != POISON) {
            printf("FAIL vcoll: processes: rank %d's recvbuf was written (element %zu)\n", rank, e);
            bad = 1;
        }
    bufs_free(&b);
    ccl_comm_destroy(comm);
    ccl__env_boot_close(eb);
    return bad;
}

static void procs_mismatch(void)
{
    int codes[N], bad = 0;
    forked_ranks_run("vcoll-test", N, proc_child, 0, codes);
    for (int r = 0; r < N; r++)
        bad |= codes[r] != 0;
    if (!bad)
        printf("ok vcoll alltoallv mismatched counts in processes: every rank names both sides\n");
    failures += bad;
}

/* Scratch and staging that do not fit the heap part v-collectives use: every rank
 * fails with CCL_ERR_OUT_OF_MEMORY naming the sizes, none touches a buffer. */
static void arena_too_small(void)
{
    int failures0 = failures;
    ccl_comm_t *comms[N];
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .timeout_ms = 10000, .heap_bytes = 4 << 20};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK) {
        EXPECT(0, "arena: init: %s", ccl_comm_last_error(NULL));
        return;
    }
    size_t cnt[N][N];
    for (int q = 0; q < N; q++)
        for (int p = 0; p < N; p++)
            cnt[q][p] = 100000; /* LL scratch: 2 halves x 4 slots x 100000 x 4 bytes, > 1.5 MiB */
    Layout l;
    layout(1, cnt, &l);
    Bufs b;
    bufs_make(&l, 0, 1, &b);
    ccl_algorithm_t *alg[N];
    for (int q = 0; q < N; q++) {
        if (ccl_algorithm_load(comms[q], "tests/runtime/v/scratch_ll.ccl", 0, &alg[q]) != CCL_OK) {
            EXPECT(0, "arena: load: %s", ccl_comm_last_error(comms[q]));
            goto out;
        }
    }
    for (int q = 0; q < N; q++)
        EXPECT(ccl_algorithm_run_v(alg[q], b.send[q], l.cnt[q], l.sd[q], b.recv[q], l.rc[q], l.rd[q], CCL_I32, NULL) ==
                   CCL_OK, "arena: rank %d refused at once: %s", q, ccl_comm_last_error(comms[q]));
    for (int q = 0; q < N; q++) {
        ccl_result_t r = ccl_comm_synchronize(comms[q]);
        const char *msg = ccl_comm_last_error(comms[q]);
        EXPECT(r == CCL_ERR_OUT_OF_MEMORY && strstr(msg, "bytes of scratch for its longest segment (100000 elements") && !strstr(msg, "staging") &&
                   strstr(msg, "heap that v-collectives use"), "arena: rank %d got %s: %s", q, ccl_result_string(r),
               msg);
        EXPECT(b.recv[q][l.rd[q][0]] == POISON, "arena: rank %d's recvbuf was written", q);
    }
    if (failures == failures0)
        printf("ok vcoll scratch larger than the v arena: every rank fails naming the sizes\n");
out:
    bufs_free(&b);
    destroy(comms);
}

/* Staging alone that does not fit (a program with no scratch, host buffers): the message
 * names the staging and its rank, not a scratch of 0 bytes and the longest segment
 * (before the fix: "ring.ccl needs 0 bytes of scratch (its longest segment is ...
 * elements) and rank 0 ... bytes of staging"). */
static void arena_staging_too_small(void)
{
    int failures0 = failures;
    ccl_comm_t *comms[N];
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .timeout_ms = 10000, .heap_bytes = 4 << 20};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK) {
        EXPECT(0, "staging: init: %s", ccl_comm_last_error(NULL));
        return;
    }
    enum { EACH = 300000 }; /* N x 1.2 MB of recvbuf to stage, more than the arena */
    size_t counts[N];
    int32_t *send[N], *recv[N];
    ccl_algorithm_t *alg[N];
    for (int q = 0; q < N; q++) {
        counts[q] = EACH;
        send[q] = calloc(EACH, sizeof(int32_t));
        recv[q] = malloc(sizeof(int32_t) * EACH * N);
        recv[q][0] = POISON;
        if (ccl_algorithm_load(comms[q], "algorithms/allgatherv/ring.ccl", 0, &alg[q]) != CCL_OK)
            EXPECT(0, "staging: load: %s", ccl_comm_last_error(comms[q]));
    }
    for (int q = 0; q < N && failures == failures0; q++)
        EXPECT(ccl_algorithm_run_v(alg[q], send[q], &counts[q], NULL, recv[q], counts, NULL, CCL_I32, NULL) == CCL_OK,
               "staging: rank %d refused at once: %s", q, ccl_comm_last_error(comms[q]));
    for (int q = 0; q < N && failures == failures0; q++) {
        ccl_result_t r = ccl_comm_synchronize(comms[q]);
        const char *msg = ccl_comm_last_error(comms[q]);
        EXPECT(r == CCL_ERR_OUT_OF_MEMORY && strstr(msg, "bytes of staging") && strstr(msg, "rank 0 needs") &&
                   !strstr(msg, "0 bytes of scratch") && !strstr(msg, "longest segment"),
               "staging: rank %d got %s: %s", q, ccl_result_string(r), msg);
        EXPECT(recv[q][0] == POISON, "staging: rank %d's recvbuf was written", q);
    }
    if (failures == failures0)
        printf("ok vcoll staging larger than the v arena: every rank fails naming the staging, not scratch\n");
    for (int q = 0; q < N; q++)
        free(send[q]), free(recv[q]);
    destroy(comms);
}

/* Which algorithm the standard calls run: allgatherv by its total bytes (direct_ll up
 * to 64 KiB, ring beyond), alltoallv pairwise (no size every rank agrees on), and a
 * ccl_comm_use_algorithm registration before either. */
static void choice(void)
{
    int failures0 = failures;
    ccl_comm_t *comms[N];
    if (init(comms) != 0)
        return;
    char why[1024];
    for (int big = 0; big < 2; big++) {
        size_t cnt[N][N];
        for (int q = 0; q < N; q++)
            for (int p = 0; p < N; p++)
                cnt[q][p] = big ? 100000 : 10;
        for (int alltoall = 0; alltoall < 2; alltoall++) {
            Layout l;
            layout(alltoall, cnt, &l);
            Bufs b;
            bufs_make(&l, 0, alltoall, &b);
            for (int q = 0; q < N; q++)
                EXPECT(call_v(alltoall, comms[q], q, &l, &b) == CCL_OK, "choice: %s", ccl_comm_last_error(comms[q]));
            for (int q = 0; q < N; q++)
                EXPECT(ccl_comm_synchronize(comms[q]) == CCL_OK, "choice: %s", ccl_comm_last_error(comms[q]));
            verify("choice", &l, 0, alltoall, &b);
            bufs_free(&b);
            ccl_comm_explain_choice(comms[0], why, sizeof why);
            const char *want = alltoall ? "alltoallv/direct.ccl" : big ? "allgatherv/direct.ccl" : "allgatherv/direct_ll.ccl";
            EXPECT(strstr(why, want), "choice: %s of %s segments ran '%s', expected %s", alltoall ? "alltoallv" : "allgatherv",
                   big ? "large" : "small", why, want);
        }
    }
    ccl_algorithm_t *ll[N];
    for (int q = 0; q < N; q++)
        if (ccl_algorithm_load(comms[q], "algorithms/alltoallv/direct_ll.ccl", 0, &ll[q]) != CCL_OK ||
            ccl_comm_use_algorithm(comms[q], ll[q], 0, 0) != CCL_OK)
            EXPECT(0, "choice: registering direct_ll: %s", ccl_comm_last_error(comms[q]));
    size_t cnt[N][N] = {{1, 2, 3, 4}, {0, 0, 7, 0}, {5, 0, 0, 1}, {2, 2, 2, 2}};
    Layout l;
    layout(1, cnt, &l);
    Bufs b;
    bufs_make(&l, 0, 1, &b);
    for (int q = 0; q < N; q++)
        EXPECT(call_v(1, comms[q], q, &l, &b) == CCL_OK, "choice: %s", ccl_comm_last_error(comms[q]));
    for (int q = 0; q < N; q++)
        EXPECT(ccl_comm_synchronize(comms[q]) == CCL_OK, "choice: %s", ccl_comm_last_error(comms[q]));
    verify("choice, registered", &l, 0, 1, &b);
    bufs_free(&b);
    ccl_comm_explain_choice(comms[0], why, sizeof why);
    EXPECT(strstr(why, "alltoallv/direct_ll.ccl") && strstr(why, "regist"), "choice: registered: '%s'", why);
    destroy(comms);
    if (failures == failures0)
        printf("ok vcoll the standard calls' algorithms: the library's by size, a registration first\n");
}

/* Errors a rank finds by itself, at once. */
static void arguments(void)
{
    int failures0 = failures;
    ccl_comm_t *comms[N];
    if (init(comms) != 0)
        return;
    int32_t send[16] = {0}, recv[64];
    size_t rc[N] = {2, 2, 2, 2}, rd[N] = {0, 2, 3, 6}, sc[N] = {2, 2, 2, 2};
    ccl_result_t r = ccl_all_gather_v(send, 2, recv, NULL, NULL, CCL_I32, comms[0], NULL);
    EXPECT(r == CCL_ERR_INVALID_ARGUMENT && strstr(ccl_comm_last_error(comms[0]), "'recvcounts' is NULL"),
           "NULL recvcounts: %s", ccl_comm_last_error(comms[0]));
    r = ccl_all_gather_v(send, 2, recv, rc, rd, CCL_I32, comms[0], NULL);
    EXPECT(r == CCL_ERR_INVALID_ARGUMENT && strstr(ccl_comm_last_error(comms[0]), "units 1 ([2, 4)) and 2 ([3, 5))"),
           "overlapping displs: %s", ccl_comm_last_error(comms[0]));
    r = ccl_all_gather_v(send, 3, recv, rc, NULL, CCL_I32, comms[1], NULL);
    EXPECT(r == CCL_ERR_INVALID_ARGUMENT && strstr(ccl_comm_last_error(comms[1]), "recvcounts[1] is 2, but this rank (1) "
                                                                                   "sends itself 3"),
           "own count: %s", ccl_comm_last_error(comms[1]));
    r = ccl_all_to_all_v(send, NULL, NULL, recv, rc, NULL, CCL_I32, comms[2], NULL);
    EXPECT(r == CCL_ERR_INVALID_ARGUMENT && strstr(ccl_comm_last_error(comms[2]), "'sendcounts' is NULL"),
           "NULL sendcounts: %s", ccl_comm_last_error(comms[2]));
    r = ccl_all_to_all_v(NULL, sc, NULL, recv, rc, NULL, CCL_I32, comms[2], NULL);
    EXPECT(r == CCL_ERR_INVALID_ARGUMENT && strstr(ccl_comm_last_error(comms[2]), "'sendbuf' is NULL"),
           "NULL sendbuf: %s", ccl_comm_last_error(comms[2]));
    ccl_algorithm_t *v, *fixed;
    if (ccl_algorithm_load(comms[3], "algorithms/allgatherv/ring.ccl", 0, &v) == CCL_OK &&
        ccl_algorithm_load(comms[3], "algorithms/allgather/ring.ccl", 0, &fixed) == CCL_OK) {
        r = ccl_algorithm_run(v, send, recv, 2, CCL_I32, CCL_SUM, NULL);
        EXPECT(r == CCL_ERR_INVALID_ARGUMENT && strstr(ccl_comm_last_error(comms[3]), "run it with ccl_algorithm_run_v"),
               "ccl_algorithm_run of allgatherv: %s", ccl_comm_last_error(comms[3]));
        r = ccl_algorithm_run_v(fixed, send, sc, NULL, recv, rc, NULL, CCL_I32, NULL);
        EXPECT(r == CCL_ERR_INVALID_ARGUMENT && strstr(ccl_comm_last_error(comms[3]), "(use ccl_algorithm_run)"),
               "ccl_algorithm_run_v of allgather: %s", ccl_comm_last_error(comms[3]));
        EXPECT(!strcmp(ccl_algorithm_collective(v), "allgatherv"), "collective name: %s", ccl_algorithm_collective(v));
    } else {
        EXPECT(0, "load: %s", ccl_comm_last_error(comms[3]));
    }
    destroy(comms);
    if (failures == failures0)
        printf("ok vcoll argument errors\n");
}

int main(void)
{
    correct(0, 0, "allgatherv uneven and zero segments");
    correct(1, 0, "alltoallv uneven and zero segments");
    correct(0, 1, "allgatherv large segments");
    correct(1, 1, "alltoallv large segments");
    {   /* all zero: nothing to move, every call still completes */
        ccl_comm_t *comms[N];
        int failures0 = failures;
        if (init(comms) == 0) {
            size_t zero[N] = {0};
            for (int q = 0; q < N; q++) {
                EXPECT(ccl_all_gather_v(NULL, 0, NULL, zero, NULL, CCL_F32, comms[q], NULL) == CCL_OK, "zero allgatherv: %s",
                       ccl_comm_last_error(comms[q]));
                EXPECT(ccl_all_to_all_v(NULL, zero, NULL, NULL, zero, NULL, CCL_F32, comms[q], NULL) == CCL_OK,
                       "zero alltoallv: %s", ccl_comm_last_error(comms[q]));
            }
            for (int q = 0; q < N; q++)
                EXPECT(ccl_comm_synchronize(comms[q]) == CCL_OK, "zero sync: %s", ccl_comm_last_error(comms[q]));
            destroy(comms);
            if (failures == failures0)
                printf("ok vcoll all-zero counts\n");
        }
    }
    back_to_back(0);
    back_to_back(1);
    /* Rank 2 expects 5 elements of rank 1's allgatherv block, rank 3 4 of rank 0's
     * alltoallv block for it; neither is what the sender sends (counts(5, ...)). */
    mismatch(0, 2, 1, 5, "rank 1 sends", "rank 2 expects 5 (its recvcounts[1])");
    mismatch(1, 3, 0, 4, "rank 0 sends", "rank 3 expects 4 (its recvcounts[0])");
    procs_mismatch();
    arena_too_small();
    arena_staging_too_small();
    choice();
    arguments();
    return failures ? 1 : 0;
}
