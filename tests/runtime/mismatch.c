/* mismatch.c: ranks that run different calls fail, every one of them, naming both
 * sides; none returns CCL_OK with wrong data (CPU backend, threads and processes).
 *
 * Cases: rank 0 loads ring, the others allpairs, for the same all-reduce; the same
 * algorithm with different instances (a launch shape); ranks whose ccl_mem_alloc
 * sequences differ (different heap layouts); the first case again with every rank a
 * process (shm heaps, ccl_comm_init_rank through the environment bootstrap); a standard
 * all-reduce whose count differs on one rank, which makes that rank pick another
 * algorithm: the message must name the count as the cause, with both counts (it named
 * the algorithm first, as if the ranks had loaded different ones). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ccl.h"
#include "internal.h"

#include "forked_ranks.h"
#include "ring_source.h"

enum { N = 4, COUNT = 1000 };

static int failures;

/* One rank's verdict: 0 when it failed with `want` and a message holding every needle. */
static int judge(const char *what, int rank, ccl_result_t r, ccl_result_t want, const char *msg, const char *n1,
                 const char *n2)
{
    if (r == want && strstr(msg, n1) && (!n2 || strstr(msg, n2)))
        return 0;
    printf("FAIL mismatch: %s: rank %d got %s (want %s, naming '%s'%s%s): %s\n", what, rank, ccl_result_string(r),
           ccl_result_string(want), n1, n2 ? " and " : "", n2 ? n2 : "", msg);
    return 1;
}

/* The instances variant of RING: same text but `instances 2`. */
static char *ring_with_instances(void)
{
    const char *at = strstr(RING, "chunks N\n");
    size_t head = (size_t)(at - RING);
    char *s = malloc(strlen(RING) + 32);
    memcpy(s, RING, head);
    strcpy(s + head, "instances 2\n");
    strcat(s, at);
    return s;
}

/* Threads mode: srcs[r] is rank r's algorithm; extra[r] extra ccl_mem_alloc bytes
 * before the buffers (0: none). Every rank must fail with want, naming n1 and n2. */
static void threads_case(const char *what, const char *const *srcs, const size_t *extra, ccl_result_t want,
                         const char *n1, const char *n2)
{
    ccl_comm_t *comms[N];
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .timeout_ms = 5000};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK) {
        printf("FAIL mismatch: %s: init: %s\n", what, ccl_comm_last_error(NULL));
        failures++;
        return;
    }
    ccl_algorithm_t *alg[N];
    float *in[N], *out[N];
    for (int r = 0; r < N; r++) {
        if (ccl_algorithm_load(comms[r], srcs[r], 0, &alg[r]) != CCL_OK) {
            printf("FAIL mismatch: %s: rank %d load: %s\n", what, r, ccl_comm_last_error(comms[r]));
            failures++;
            return;
        }
        void *pad;
        if (extra[r])
            ccl_mem_alloc(comms[r], &pad, extra[r]);
        ccl_mem_alloc(comms[r], (void **)&in[r], COUNT * sizeof(float));
        ccl_mem_alloc(comms[r], (void **)&out[r], COUNT * sizeof(float));
        for (int i = 0; i < COUNT; i++)
            in[r][i] = (float)(r + i);
    }
    double t0 = ccl__now_ms();
    for (int r = 0; r < N; r++)
        ccl_algorithm_run(alg[r], in[r], out[r], COUNT, CCL_F32, CCL_SUM, NULL);
    int bad = 0;
    for (int r = 0; r < N; r++)
        bad += judge(what, r, ccl_comm_synchronize(comms[r]), want, ccl_comm_last_error(comms[r]), n1, n2);
    double ms = ccl__now_ms() - t0;
    if (!bad && ms < 2500)
        printf("ok mismatch: %s: every rank fails naming both sides (%.0f ms)\n", what, ms);
    else if (!bad) {
        printf("FAIL mismatch: %s: took %.0f ms\n", what, ms);
        bad = 1;
    }
    failures += bad != 0;
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(comms[r]);
}

/* Processes: rank 0 ring, the others allpairs; exit 0 when this rank failed as it must. */
static int proc_child(int rank, int unused)
{
    ccl_bootstrap_t boot;
    CclEnvBoot *eb;
    ccl_algorithm_t *alg;
    const char *src = rank == 0 ? "algorithms/allreduce/ring.ccl" : "algorithms/allreduce/allpairs.ccl";
    ccl_comm_t *comm = forked_rank_open("mismatch: processes", rank, 5000, src, &alg, &eb, &boot);
    if (!comm)
        return 1;
    float *in = NULL, *out = NULL;
    ccl_mem_alloc(comm, (void **)&in, COUNT * sizeof(float));
    ccl_mem_alloc(comm, (void **)&out, COUNT * sizeof(float));
    /* Every rank allocated before any runs: a rank that finds the mismatch stops every
     * peer, and ccl_mem_alloc on a stopped comm fails (docs/api.md, "Results"). */
    boot.barrier(boot.ctx);
    if (!in || !out) {
        printf("FAIL mismatch: processes: rank %d: ccl_mem_alloc: %s\n", rank, ccl_comm_last_error(comm));
        return 1;
    }
    for (int i = 0; i < COUNT; i++)
        in[i] = (float)(rank + i);
    ccl_result_t r = ccl_algorithm_run(alg, in, out, COUNT, CCL_F32, CCL_SUM, NULL);
    if (r == CCL_OK)
        r = ccl_comm_synchronize(comm);
    int bad = judge("processes, ring vs allpairs", rank, r, CCL_ERR_INVALID_ARGUMENT, ccl_comm_last_error(comm),
                    "ring.ccl", "allpairs.ccl");
    ccl_comm_destroy(comm);
    ccl__env_boot_close(eb);
    return bad;
}

static void procs_case(void)
{
    int codes[N], bad = 0;
    forked_ranks_run("mismatch-test", N, proc_child, 0, codes);
    for (int r = 0; r < N; r++)
        bad |= codes[r] != 0;
    if (!bad)
        printf("ok mismatch: processes, ring vs allpairs: every rank fails naming both sides\n");
    failures += bad;
}

typedef struct {
    ccl_comm_t *comm;
    size_t count;
    ccl_result_t r;
    char msg[CCL__ERR_LEN];
} CollJob;

static void *coll_job(void *arg)
{
    CollJob *j = arg;
    float *in = calloc(j->count, sizeof *in), *out = calloc(j->count, sizeof *out);
    j->r = ccl_all_reduce(in, out, j->count, CCL_F32, CCL_SUM, j->comm, NULL);
    if (j->r == CCL_OK)
        j->r = ccl_comm_synchronize(j->comm);
    snprintf(j->msg, sizeof j->msg, "%s", ccl_comm_last_error(j->comm));
    free(in), free(out);
    return NULL;
}

/* ccl_all_reduce with counts[r] on rank r (threads). */
static void counts_case(const char *what, const size_t *counts, const char *n1, const char *n2)
{
    ccl_comm_t *comms[N];
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .timeout_ms = 20000};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK) {
        printf("FAIL mismatch: %s: init: %s\n", what, ccl_comm_last_error(NULL));
        failures++;
        return;
    }
    CollJob jobs[N];
    pthread_t t[N];
    for (int r = 0; r < N; r++) {
        jobs[r] = (CollJob){.comm = comms[r], .count = counts[r]};
        pthread_create(&t[r], NULL, coll_job, &jobs[r]);
    }
    for (int r = 0; r < N; r++)
        pthread_join(t[r], NULL);
    int bad = 0;
    for (int r = 0; r < N; r++) {
        bad |= judge(what, r, jobs[r].r, CCL_ERR_INVALID_ARGUMENT, jobs[r].msg, n1, n2);
        ccl_comm_destroy(comms[r]);
    }
    if (!bad)
        printf("ok mismatch: %s: every rank fails naming the count\n", what);
    failures += bad;
}

int main(void)
{
    const char *ring = "algorithms/allreduce/ring.ccl", *allpairs = "algorithms/allreduce/allpairs.ccl";
    const size_t none[N] = {0}, skew[N] = {0, 0, 4096, 0};
    const char *plan[N] = {ring, allpairs, allpairs, allpairs};
    threads_case("threads, ring vs allpairs", plan, none, CCL_ERR_INVALID_ARGUMENT, "ring.ccl", "allpairs.ccl");
    char *wide = ring_with_instances();
    const char *shape[N] = {RING, RING, wide, RING};
    threads_case("threads, instances 1 vs 2", shape, none, CCL_ERR_INVALID_ARGUMENT, "instances/slices",
                 "instances 2");
    free(wide);
    const char *same[N] = {ring, ring, ring, ring};
    threads_case("threads, a different ccl_mem_alloc sequence on rank 2", same, skew, CCL_ERR_NOT_SYMMETRIC,
                 "heap offset", "ccl_mem_alloc");
    procs_case();
    const size_t counts[N] = {1000, 1000, 3000000, 1000};
    counts_case("threads, ccl_all_reduce with another count on rank 2 (so another algorithm)", counts,
                "the ranks disagree on the count", "3000000");
    return failures != 0;
}
