/* pieces.c: a call whose staging and scratch do not fit the symmetric heap's free
 * space runs in pieces instead of failing (runtime/src/call.c, "Pieces").
 *
 * Cases (CPU backend, a 3 MiB heap, N = 4): each of the six standard collectives, in
 * place and out of place, on malloc buffers of 300001 f32 per unit (1.2 MB, the N-unit
 * buffers 4.8 MB: larger than the whole heap), every element checked, with ranks as
 * threads and as processes; avg, whose division runs per piece; room left for
 * ccl_mem_alloc after a pieced call; ranks that pass
 * different counts to such a call, which must all fail naming both counts; and a heap
 * so full of ccl_mem_alloc buffers that not even a piece fits, which every rank must
 * refuse alike, at once, saying so.
 *
 * Prints "ok pieces: WHAT" or "FAIL pieces: WHAT: ..." with both sides. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccl.h"
#include "internal.h"

#include "forked_ranks.h"

enum { N = 4, ROOT = 1, NCOLLS = 6, HEAP = 3 << 20 };
static const size_t COUNT = 300001;
static const char *const names[NCOLLS] = {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter",
                                          "all_to_all"};

static int failures;

/* Rank r's element i of unit u: exact in f32, sums of N of them too. */
static float val(int r, size_t u, size_t i)
{
    return (float)((size_t)r * 31 + u * 7 + i % 1021);
}

/* Units of sendbuf and recvbuf. */
static size_t in_units(int c) { return c == 4 || c == 5 ? N : 1; }
static size_t out_units(int c) { return c == 3 || c == 5 ? N : 1; }

/* What rank me's recv holds after collective c: element i of unit u. */
static float want(int c, int me, size_t u, size_t i, ccl_op_t op)
{
    float s = 0;
    switch (c) {
    case 0: case 2:
        for (int r = 0; r < N; r++)
            s += val(r, 0, i);
        return op == CCL_AVG ? s / N : s;
    case 1: return val(ROOT, 0, i);
    case 3: return val((int)u, 0, i);
    case 4:
        for (int r = 0; r < N; r++)
            s += val(r, (size_t)me, i);
        return s;
    default: return val((int)u, (size_t)me, i);
    }
}

/* Runs collective c on rank me (in place or not) with malloc buffers, and checks every
 * element of recv (the root's only, for reduce). 0 when right; else prints why. */
static int one(ccl_comm_t *comm, int me, int c, int inplace, ccl_op_t op, const char *mode)
{
    size_t ib = in_units(c) * COUNT, ob = out_units(c) * COUNT;
    float *recv = malloc((ib > ob ? ib : ob) * sizeof *recv), *send = recv, *mine = NULL;
    if (!inplace)
        send = mine = malloc(ib * sizeof *send);
    else if (c == 3)
        send = recv + (size_t)me * COUNT;          /* NCCL's in-place forms */
    if (!recv || !send) {
        printf("FAIL pieces: %s %s: rank %d: out of memory\n", mode, names[c], me);
        return 1;
    }
    for (size_t i = 0; i < ob; i++)
        recv[i] = -1;
    for (size_t u = 0; u < in_units(c); u++)
        for (size_t i = 0; i < COUNT; i++)
            send[u * COUNT + i] = val(me, u, i);
    float *out = inplace && c == 4 ? recv + (size_t)me * COUNT : recv;
    ccl_result_t r;
    switch (c) {
    case 0: r = ccl_all_reduce(send, out, COUNT, CCL_F32, op, comm, NULL); break;
    case 1: r = ccl_broadcast(send, out, COUNT, CCL_F32, ROOT, comm, NULL); break;
    case 2: r = ccl_reduce(send, out, COUNT, CCL_F32, op, ROOT, comm, NULL); break;
    case 3: r = ccl_all_gather(send, out, COUNT, CCL_F32, comm, NULL); break;
    case 4: r = ccl_reduce_scatter(send, out, COUNT, CCL_F32, op, comm, NULL); break;
    default: r = ccl_all_to_all(send, out, COUNT, CCL_F32, comm, NULL); break;
    }
    if (r == CCL_OK)
        r = ccl_comm_synchronize(comm);
    int bad = 0;
    if (r != CCL_OK) {
        printf("FAIL pieces: %s %s %s: rank %d: %s: %s\n", mode, names[c], inplace ? "in place" : "out of place", me,
               ccl_result_string(r), ccl_comm_last_error(comm));
        bad = 1;
    }
    for (size_t u = 0; !bad && (c != 2 || me == ROOT) && u < out_units(c); u++)
        for (size_t i = 0; i < COUNT; i++)
            if (out[u * COUNT + i] != want(c, me, u, i, op)) {
                printf("FAIL pieces: %s %s %s: rank %d: recvbuf element %zu of unit %zu is %g, expected %g\n", mode,
                       names[c], inplace ? "in place" : "out of place", me, i, u, out[u * COUNT + i],
                       want(c, me, u, i, op));
                bad = 1;
                break;
            }
    free(recv);
    free(mine);
    return bad;
}

/* Every case on rank me: a bit per failed case (collective x placement), bit 12 avg. */
static int rank_body(ccl_comm_t *comm, int me, const char *mode)
{
    int failed = 0;
    for (int c = 0; c < NCOLLS; c++)
        for (int ip = 0; ip < 2; ip++)
            if (one(comm, me, c, ip, CCL_SUM, mode))
                failed |= 1 << (c * 2 + ip);
    if (one(comm, me, 0, 0, CCL_AVG, mode))
        failed |= 1 << 12;
    return failed;
}

static void report(const char *mode, int failed)
{
    for (int c = 0; c < NCOLLS; c++)
        for (int ip = 0; ip < 2; ip++)
            if (!(failed & 1 << (c * 2 + ip)))
                printf("ok pieces: %s: %s %s, %zu f32 per unit on malloc buffers, %d-byte heap\n", mode, names[c],
                       ip ? "in place" : "out of place", COUNT, HEAP);
    if (!(failed & 1 << 12))
        printf("ok pieces: %s: all_reduce avg\n", mode);
    failures += failed != 0;
}

typedef struct {
    ccl_comm_t *comm;
    int rank, failed;
} Job;

static void *job_main(void *arg)
{
    Job *j = arg;
    j->failed = rank_body(j->comm, j->rank, "threads");
    return NULL;
}

static void threads_case(void)
{
    ccl_comm_t *comms[N];
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .timeout_ms = 20000, .heap_bytes = HEAP};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK) {
        printf("FAIL pieces: threads: init: %s\n", ccl_comm_last_error(NULL));
        failures++;
        return;
    }
    Job jobs[N];
    pthread_t t[N];
    for (int r = 0; r < N; r++) {
        jobs[r] = (Job){.comm = comms[r], .rank = r};
        pthread_create(&t[r], NULL, job_main, &jobs[r]);
    }
    int failed = 0;
    for (int r = 0; r < N; r++) {
        pthread_join(t[r], NULL);
        failed |= jobs[r].failed;
        ccl_comm_destroy(comms[r]);
    }
    report("threads", failed);
}

/* A process per rank (shm heaps): exits with its bits of failed cases (0..8191 fit
 * nothing an exit code holds, so 1 for any). */
static int proc_child(int rank, int unused)
{
    char err[512];
    CclEnvBoot *eb;
    ccl_bootstrap_t boot;
    if (ccl__env_boot_open(&eb, &boot, 10000, err, sizeof err) != 0) {
        printf("FAIL pieces: processes: rank %d: bootstrap: %s\n", rank, err);
        return 1;
    }
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .timeout_ms = 20000, .heap_bytes = HEAP};
    ccl_comm_t *comm;
    if (ccl_comm_init_rank(&comm, &boot, 0, &cfg) != CCL_OK) {
        printf("FAIL pieces: processes: rank %d: ccl_comm_init_rank: %s\n", rank, ccl_comm_last_error(NULL));
        return 1;
    }
    int failed = rank_body(comm, rank, "processes");
    ccl_comm_destroy(comm);
    ccl__env_boot_close(eb);
    return failed != 0;
}

static void procs_case(void)
{
    int codes[N], bad = 0;
    forked_ranks_run("pieces-test", N, proc_child, 0, codes);
    for (int r = 0; r < N; r++)
        bad |= codes[r] != 0;
    if (!bad)
        printf("ok pieces: processes: the six collectives, in and out of place, and avg\n");
    failures += bad;
}

/* A pieced call leaves half of the heap's largest free block to ccl_mem_alloc (its
 * regions are kept until destroy): an alltoall on a fresh comm, then a buffer of a
 * third of what was free before it, on every rank. */
static void *room_job(void *arg)
{
    Job *j = arg;
    size_t before = ccl__heap_largest_free(&j->comm->data);
    float *in = calloc((size_t)N * COUNT, sizeof *in), *out = calloc((size_t)N * COUNT, sizeof *out);
    ccl_result_t r = ccl_all_to_all(in, out, COUNT, CCL_F32, j->comm, NULL);
    if (r == CCL_OK)
        r = ccl_comm_synchronize(j->comm);
    void *buf = NULL;
    if (r == CCL_OK)
        r = ccl_mem_alloc(j->comm, &buf, before / 3);
    if (r != CCL_OK)
        printf("FAIL pieces: room left: rank %d: %s (largest free block %zu before the call, %zu after)\n", j->rank,
               ccl_comm_last_error(j->comm), before, ccl__heap_largest_free(&j->comm->data));
    j->failed = r != CCL_OK;
    ccl_mem_free(j->comm, buf);
    free(in), free(out);
    return NULL;
}

static void room_case(void)
{
    ccl_comm_t *comms[N];
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .timeout_ms = 20000, .heap_bytes = HEAP};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK) {
        printf("FAIL pieces: room left: init: %s\n", ccl_comm_last_error(NULL));
        failures++;
        return;
    }
    Job jobs[N];
    pthread_t t[N];
    for (int r = 0; r < N; r++) {
        jobs[r] = (Job){.comm = comms[r], .rank = r};
        pthread_create(&t[r], NULL, room_job, &jobs[r]);
    }
    int bad = 0;
    for (int r = 0; r < N; r++) {
        pthread_join(t[r], NULL);
        bad |= jobs[r].failed;
        ccl_comm_destroy(comms[r]);
    }
    if (!bad)
        printf("ok pieces: room left: after a pieced alltoall, ccl_mem_alloc of a third of the free heap succeeds\n");
    failures += bad;
}

/* ---- calls that must fail ---- */

typedef struct {
    ccl_comm_t *comm;
    size_t count;
    int hog;                         /* take the heap's largest free block first */
    ccl_result_t r;
    double ms;
    char msg[CCL__ERR_LEN];
} FailJob;

static void *fail_job(void *arg)
{
    FailJob *j = arg;
    void *hog = NULL;
    if (j->hog)
        ccl_mem_alloc(j->comm, &hog, ccl__heap_largest_free(&j->comm->data));
    float *in = calloc(j->count, sizeof *in), *out = calloc(j->count, sizeof *out);
    double t0 = ccl__now_ms();
    j->r = ccl_all_reduce(in, out, j->count, CCL_F32, CCL_SUM, j->comm, NULL);
    if (j->r == CCL_OK)
        j->r = ccl_comm_synchronize(j->comm);
    j->ms = ccl__now_ms() - t0;
    snprintf(j->msg, sizeof j->msg, "%s", ccl_comm_last_error(j->comm));
    free(in), free(out);
    return NULL;
}

/* ccl_all_reduce of counts[r] on rank r (after a hog, with `hog`); every rank
 * must fail with `want`, its message holding n1 and n2, within 5 s. */
static void fail_case(const char *what, const size_t *counts, int hog, ccl_result_t want, const char *n1,
                      const char *n2)
{
    ccl_comm_t *comms[N];
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .timeout_ms = 20000, .heap_bytes = HEAP};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK) {
        printf("FAIL pieces: %s: init: %s\n", what, ccl_comm_last_error(NULL));
        failures++;
        return;
    }
    FailJob jobs[N];
    pthread_t t[N];
    for (int r = 0; r < N; r++) {
        jobs[r] = (FailJob){.comm = comms[r], .count = counts[r], .hog = hog};
        pthread_create(&t[r], NULL, fail_job, &jobs[r]);
    }
    int bad = 0;
    for (int r = 0; r < N; r++) {
        pthread_join(t[r], NULL);
        if (jobs[r].r != want || !strstr(jobs[r].msg, n1) || !strstr(jobs[r].msg, n2) || jobs[r].ms > 5000) {
            printf("FAIL pieces: %s: rank %d got %s after %.0f ms (want %s within 5 s, naming '%s' and '%s'): %s\n",
                   what, r, ccl_result_string(jobs[r].r), jobs[r].ms, ccl_result_string(want), n1, n2, jobs[r].msg);
            bad = 1;
        }
        ccl_comm_destroy(comms[r]);
    }
    if (!bad)
        printf("ok pieces: %s: every rank fails, saying why: %s\n", what, jobs[0].msg);
    failures += bad;
}

int main(void)
{
    setenv("CCL_BACKEND", "cpu", 1);
    threads_case();
    procs_case();
    room_case();
    const size_t skew[N] = {COUNT, COUNT, COUNT / 2, COUNT};
    /* Rank 2 names the first rank it compares with, the others rank 2. */
    fail_case("counts that differ on one rank (pieced calls)", skew, 0, CCL_ERR_INVALID_ARGUMENT, "300001 on",
              "150000 on");
    const size_t same[N] = {COUNT, COUNT, COUNT, COUNT};
    fail_case("a heap with no room for even a piece", same, 1, CCL_ERR_OUT_OF_MEMORY, "not even a piece",
              "heap_bytes 3145728");
    return failures ? 1 : 0;
}
