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

/* Runs collective c of `count` on rank me (in place or not) with malloc buffers, and
 * checks every element of recv (the root's only, for reduce). 0 when right; else prints
 * why. */
static int one(ccl_comm_t *comm, int me, int c, int inplace, ccl_op_t op, size_t count, const char *mode)
{
    size_t ib = in_units(c) * count, ob = out_units(c) * count;
    float *recv = malloc((ib > ob ? ib : ob) * sizeof *recv), *send = recv, *mine = NULL;
    if (!inplace)
        send = mine = malloc(ib * sizeof *send);
    else if (c == 3)
        send = recv + (size_t)me * count;          /* NCCL's in-place forms */
    if (!recv || !send) {
        printf("FAIL pieces: %s %s: rank %d: out of memory\n", mode, names[c], me);
        return 1;
    }
    for (size_t i = 0; i < ob; i++)
        recv[i] = -1;
    for (size_t u = 0; u < in_units(c); u++)
        for (size_t i = 0; i < count; i++)
            send[u * count + i] = val(me, u, i);
    float *out = inplace && c == 4 ? recv + (size_t)me * count : recv;
    ccl_result_t r;
    switch (c) {
    case 0: r = ccl_all_reduce(send, out, count, CCL_F32, op, comm, NULL); break;
    case 1: r = ccl_broadcast(send, out, count, CCL_F32, ROOT, comm, NULL); break;
    case 2: r = ccl_reduce(send, out, count, CCL_F32, op, ROOT, comm, NULL); break;
    case 3: r = ccl_all_gather(send, out, count, CCL_F32, comm, NULL); break;
    case 4: r = ccl_reduce_scatter(send, out, count, CCL_F32, op, comm, NULL); break;
    default: r = ccl_all_to_all(send, out, count, CCL_F32, comm, NULL); break;
    }
    if (r == CCL_OK)
        r = ccl_comm_synchronize(comm);
    int bad = 0;
    if (r != CCL_OK) {
        printf("FAIL pieces: %s %s %s, count %zu: rank %d: %s: %s\n", mode, names[c],
               inplace ? "in place" : "out of place", count, me, ccl_result_string(r), ccl_comm_last_error(comm));
        bad = 1;
    }
    for (size_t u = 0; !bad && (c != 2 || me == ROOT) && u < out_units(c); u++)
        for (size_t i = 0; i < count; i++)
            if (out[u * count + i] != want(c, me, u, i, op)) {
                printf("FAIL pieces: %s %s %s, count %zu: rank %d: recvbuf element %zu of unit %zu is %g, "
                       "expected %g\n", mode, names[c], inplace ? "in place" : "out of place", count, me, i, u,
                       out[u * count + i], want(c, me, u, i, op));
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
            if (one(comm, me, c, ip, CCL_SUM, COUNT, mode))
                failed |= 1 << (c * 2 + ip);
    if (one(comm, me, 0, 0, CCL_AVG, COUNT, mode))
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

/* A fresh comm of N ranks (threads) with a `heap`-byte heap into comms: 0, or 1 once
 * said as a failure of `what`. */
static int comms_open(size_t heap, const char *what, ccl_comm_t *comms[N])
{
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .timeout_ms = 20000, .heap_bytes = heap};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) == CCL_OK)
        return 0;
    printf("FAIL pieces: %s: init: %s\n", what, ccl_comm_last_error(NULL));
    return 1;
}

/* Runs body on every rank's job (N of `size` bytes at jobs, rank r's r-th), a thread
 * each, then destroys the comms. */
static void threads_run(ccl_comm_t *comms[N], void *(*body)(void *), void *jobs, size_t size)
{
    pthread_t t[N];
    for (int r = 0; r < N; r++)
        pthread_create(&t[r], NULL, body, (char *)jobs + (size_t)r * size);
    for (int r = 0; r < N; r++)
        pthread_join(t[r], NULL);
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(comms[r]);
}

static void threads_case(void)
{
    ccl_comm_t *comms[N];
    if (comms_open(HEAP, "threads", comms)) {
        failures++;
        return;
    }
    Job jobs[N];
    for (int r = 0; r < N; r++)
        jobs[r] = (Job){.comm = comms[r], .rank = r};
    threads_run(comms, job_main, jobs, sizeof *jobs);
    int failed = 0;
    for (int r = 0; r < N; r++)
        failed |= jobs[r].failed;
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
    if (comms_open(HEAP, "room left", comms)) {
        failures++;
        return;
    }
    Job jobs[N];
    for (int r = 0; r < N; r++)
        jobs[r] = (Job){.comm = comms[r], .rank = r};
    threads_run(comms, room_job, jobs, sizeof *jobs);
    int bad = 0;
    for (int r = 0; r < N; r++)
        bad |= jobs[r].failed;
    if (!bad)
        printf("ok pieces: room left: after a pieced alltoall, ccl_mem_alloc of a third of the free heap succeeds\n");
    failures += bad;
}

/* ---- regions every call shares (runtime/src/call.c, "Regions") ----
 *
 * A comm that runs the six collectives at many sizes on malloc buffers, round after
 * round in changing orders, must keep cutting each call into no more pieces than a
 * fresh comm does (the regions are shared and bounded, so what ran before leaves room),
 * get every element right, and keep its regions within 3.75 x the cap (CCL_REGION_BYTES,
 * set here to a sixteenth of the heap, the default, so the bound is the one the
 * default gives). */

enum { RHEAP = 4 << 20, RCAP = RHEAP / 16, NSIZES = 5, ROUNDS = 3 };
static const size_t rsizes[NSIZES] = {3001, 40000, 100003, 300001, 17};

typedef struct {
    ccl_comm_t *comm;
    int rank, failed;
    int fresh;                       /* 1: one collective on a fresh comm (the reference) */
    int coll;                        /* with fresh: which */
    uint64_t pieces[NCOLLS][NSIZES][2];  /* fresh: what each call took; else its bound */
    size_t kept, most;               /* the heap its regions hold at the end, and the bound */
} RegionJob;

/* Heap bytes held by anything but ccl_mem_alloc buffers: the comm's fixed blocks
 * (point-to-point channels) and the regions calls take. */
static size_t nonuser_bytes(const ccl_comm_t *comm)
{
    size_t sum = 0;
    for (int i = 0; i < comm->data.n; i++)
        if (!comm->data.used[i].user)
            sum += comm->data.used[i].size;
    return sum;
}

/* One call, its pieces counted (every piece is a call of the comm): 0 when right. */
static int region_call(RegionJob *j, int c, int si, int ip, uint64_t *pieces)
{
    uint64_t before = j->comm->calls;
    int bad = one(j->comm, j->rank, c, ip, CCL_SUM, rsizes[si], j->fresh ? "regions (fresh comm)" : "regions");
    *pieces = j->comm->calls - before;
    return bad;
}

static void *region_job(void *arg)
{
    RegionJob *j = arg;
    size_t base = nonuser_bytes(j->comm);
    uint64_t p;
    if (j->fresh) {
        for (int si = 0; si < NSIZES; si++)
            for (int ip = 0; ip < 2; ip++)
                j->failed |= region_call(j, j->coll, si, ip, &j->pieces[j->coll][si][ip]);
        return NULL;
    }
    /* Round r: sizes up, down, then from the middle out; collectives forward, backward,
     * then odd ones first; in place every other call. */
    for (int r = 0; r < ROUNDS; r++)
        for (int k = 0; k < NSIZES * NCOLLS; k++) {
            int si = k / NCOLLS, c = k % NCOLLS;
            si = r == 0 ? si : r == 1 ? NSIZES - 1 - si : (si + NSIZES / 2) % NSIZES;
            c = r == 0 ? c : r == 1 ? NCOLLS - 1 - c : (2 * c + 1) % (NCOLLS + 1) % NCOLLS;
            int ip = (k + r) % 2;
            if (region_call(j, c, si, ip, &p)) {
                j->failed = 1;
            } else if (p > j->pieces[c][si][ip]) {
                printf("FAIL pieces: regions: rank %d, round %d: %s %s of %zu f32 ran in %llu pieces, on a fresh "
                       "comm in %llu\n", j->rank, r, names[c], ip ? "in place" : "out of place", rsizes[si],
                       (unsigned long long)p, (unsigned long long)j->pieces[c][si][ip]);
                j->failed = 1;
            }
        }
    j->kept = nonuser_bytes(j->comm) - base;
    j->most = RCAP * 15 / 4;
    if (j->kept > j->most) {
        printf("FAIL pieces: regions: rank %d: the regions hold %zu bytes of the heap, more than 3.75 x the cap "
               "(%zu bytes)\n", j->rank, j->kept, (size_t)RCAP);
        j->failed = 1;
    }
    return NULL;
}

/* Runs the jobs (jobs[r] for rank r) on a fresh comm of N threads; 0 when all passed. */
static int region_comm(RegionJob *jobs)
{
    ccl_comm_t *comms[N];
    if (comms_open(RHEAP, "regions", comms))
        return 1;
    for (int r = 0; r < N; r++) {
        jobs[r].comm = comms[r];
        jobs[r].rank = r;
    }
    threads_run(comms, region_job, jobs, sizeof *jobs);
    int bad = 0;
    for (int r = 0; r < N; r++)
        bad |= jobs[r].failed;
    return bad;
}

static void regions_case(void)
{
    char cap[32];
    snprintf(cap, sizeof cap, "%d", RCAP);
    setenv("CCL_REGION_BYTES", cap, 1);
    static RegionJob jobs[N];
    memset(jobs, 0, sizeof jobs);
    int bad = 0;
    /* The reference: each collective alone on a fresh comm, every size both ways. */
    for (int c = 0; c < NCOLLS && !bad; c++) {
        RegionJob fresh[N];
        memset(fresh, 0, sizeof fresh);
        for (int r = 0; r < N; r++)
            fresh[r].fresh = 1, fresh[r].coll = c;
        bad = region_comm(fresh);
        for (int r = 0; r < N; r++)
            memcpy(jobs[r].pieces[c], fresh[r].pieces[c], sizeof jobs[r].pieces[c]);
    }
    if (!bad)
        bad = region_comm(jobs);
    unsetenv("CCL_REGION_BYTES");
    if (!bad)
        printf("ok pieces: regions: %d rounds of the six collectives x %d sizes (up to %zu f32 a unit, on malloc "
               "buffers, a %d-byte heap) on one comm: no call in more pieces than on a fresh comm (all_gather of "
               "%zu: %llu), every element right, regions holding %zu bytes (at most %zu)\n", ROUNDS, NSIZES,
               rsizes[3], RHEAP, rsizes[3], (unsigned long long)jobs[0].pieces[3][3][0], jobs[0].kept,
               jobs[0].most);
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
    if (comms_open(HEAP, what, comms)) {
        failures++;
        return;
    }
    FailJob jobs[N];
    for (int r = 0; r < N; r++)
        jobs[r] = (FailJob){.comm = comms[r], .count = counts[r], .hog = hog};
    threads_run(comms, fail_job, jobs, sizeof *jobs);
    int bad = 0;
    for (int r = 0; r < N; r++)
        if (jobs[r].r != want || !strstr(jobs[r].msg, n1) || !strstr(jobs[r].msg, n2) || jobs[r].ms > 5000) {
            printf("FAIL pieces: %s: rank %d got %s after %.0f ms (want %s within 5 s, naming '%s' and '%s'): %s\n",
                   what, r, ccl_result_string(jobs[r].r), jobs[r].ms, ccl_result_string(want), n1, n2, jobs[r].msg);
            bad = 1;
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
    regions_case();
    const size_t skew[N] = {COUNT, COUNT, COUNT / 2, COUNT};
    /* Rank 2 names the first rank it compares with, the others rank 2. */
    fail_case("counts that differ on one rank (pieced calls)", skew, 0, CCL_ERR_INVALID_ARGUMENT, "300001 on",
              "150000 on");
    const size_t same[N] = {COUNT, COUNT, COUNT, COUNT};
    fail_case("a heap with no room for even a piece", same, 1, CCL_ERR_OUT_OF_MEMORY, "not even a piece",
              "heap_bytes 3145728");
    return failures ? 1 : 0;
}
