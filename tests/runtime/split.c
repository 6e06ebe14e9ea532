/* split.c: ccl_comm_split (CPU backend, threads and processes).
 *
 * Threads: 6 ranks split by color r % 2 with key -r (so each color's ranks come in
 * reverse order), rank 5 with CCL_SPLIT_NOCOLOR; each child must have the right size
 * and ranks, run an exact all-reduce and a barrier of its own (the two colors at the
 * same time), split again, and outlive its parent. The same split made by one thread
 * for every rank between ccl_group_start and ccl_group_end. Argument errors. Processes:
 * 4 ranks split in two pairs, each pair runs an all-reduce. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ccl.h"
#include "internal.h"

#include "forked_ranks.h"
#include "ring_source.h"

enum { N = 6, COUNT = 257 };

static int failures;

static void check(const char *what, int ok, const char *detail)
{
    if (ok)
        printf("ok split: %s\n", what);
    else {
        printf("FAIL split: %s: %s\n", what, detail);
        failures++;
    }
}

static int color_of(int r)
{
    return r == N - 1 ? CCL_SPLIT_NOCOLOR : r % 2;
}

/* The child ranks of color c in new-rank order (key -r: descending parent rank). */
static int expected(int c, int *ranks)
{
    int n = 0;
    for (int r = N - 1; r >= 0; r--)
        if (color_of(r) == c)
            ranks[n++] = r;
    return n;
}

/* An all-reduce of the parent ranks on a child: every element the sum of its members'
 * parent ranks; and a barrier. 0 when exact. */
static int use_child(ccl_comm_t *child, int parent_rank, char *why, size_t len)
{
    ccl_algorithm_t *alg;
    if (ccl_algorithm_load(child, RING, 0, &alg) != CCL_OK) {
        snprintf(why, len, "load: %s", ccl_comm_last_error(child));
        return -1;
    }
    float in[COUNT], out[COUNT];
    for (int i = 0; i < COUNT; i++)
        in[i] = (float)parent_rank;
    ccl_result_t r = ccl_algorithm_run(alg, in, out, COUNT, CCL_F32, CCL_SUM, NULL);
    if (r == CCL_OK)
        r = ccl_barrier(child, NULL);
    if (r == CCL_OK)
        r = ccl_comm_synchronize(child);
    if (r != CCL_OK) {
        snprintf(why, len, "run: %s", ccl_comm_last_error(child));
        return -1;
    }
    int members[N], rank, n;
    ccl_comm_size(child, &n);
    ccl_comm_rank(child, &rank);
    float want = 0;
    for (int i = 0, m = expected(parent_rank % 2, members); i < m; i++)
        want += (float)members[i];
    for (int i = 0; i < COUNT; i++)
        if (out[i] != want) {
            snprintf(why, len, "out[%d] = %g, expected %g", i, out[i], want);
            return -1;
        }
    return 0;
}

typedef struct {
    ccl_comm_t *parent, *child, *grandchild;
    int rank;
    ccl_result_t r;
    char why[CCL__ERR_LEN];
} Job;

static void *job(void *arg)
{
    Job *j = arg;
    j->r = ccl_comm_split(j->parent, color_of(j->rank), -j->rank, &j->child, NULL);
    if (j->r != CCL_OK) {
        snprintf(j->why, sizeof j->why, "split: %s", ccl_comm_last_error(j->parent));
        return NULL;
    }
    if (!j->child)
        return NULL;
    if (use_child(j->child, j->rank, j->why, sizeof j->why) != 0) {
        j->r = CCL_ERR_INTERNAL;
        return NULL;
    }
    /* The child split again: everyone in one color, keys equal: ranks kept. */
    j->r = ccl_comm_split(j->child, 7, 0, &j->grandchild, NULL);
    if (j->r != CCL_OK)
        snprintf(j->why, sizeof j->why, "split of the child: %s", ccl_comm_last_error(j->child));
    return NULL;
}

static void *use_again(void *arg)
{
    Job *j = arg;
    if (use_child(j->child, j->rank, j->why, sizeof j->why) != 0)
        j->r = CCL_ERR_INTERNAL;
    return NULL;
}

/* For children made inside a group: use them, then split them again. */
static void *use_and_split(void *arg)
{
    Job *j = arg;
    if (use_child(j->child, j->rank, j->why, sizeof j->why) != 0) {
        j->r = CCL_ERR_INTERNAL;
        return NULL;
    }
    j->r = ccl_comm_split(j->child, 7, 0, &j->grandchild, NULL);
    if (j->r != CCL_OK)
        snprintf(j->why, sizeof j->why, "split of the child: %s", ccl_comm_last_error(j->child));
    return NULL;
}

/* What every rank's job got, against what it should have. */
static void judge(const char *what, Job *jobs)
{
    int ok = 1;
    char detail[4 * CCL__ERR_LEN] = "";
    size_t n = 0;
    for (int r = 0; r < N; r++) {
        Job *j = &jobs[r];
        int members[N], m = expected(color_of(r), members), rank = -1, size = -1, want_rank = -1;
        for (int i = 0; i < m; i++)
            if (members[i] == r)
                want_rank = i;
        if (j->child) {
            ccl_comm_rank(j->child, &rank);
            ccl_comm_size(j->child, &size);
        }
        int good = j->r == CCL_OK && (color_of(r) == CCL_SPLIT_NOCOLOR ? !j->child
                                      : j->child && rank == want_rank && size == m && j->grandchild);
        if (good && j->grandchild) {
            int grank, gsize;
            ccl_comm_rank(j->grandchild, &grank);
            ccl_comm_size(j->grandchild, &gsize);
            good = grank == rank && gsize == size;
        }
        ok &= good;
        n += (size_t)snprintf(detail + n, sizeof detail - n, "rank %d: %s, child rank %d of %d (want %d of %d)%s%s; ",
                              r, ccl_result_string(j->r), rank, size, want_rank, m, j->why[0] ? ": " : "", j->why);
    }
    check(what, ok, detail);
}

static void test_threads(void)
{
    ccl_comm_t *comms[N];
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .heap_bytes = 8 << 20, .timeout_ms = 20000};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK) {
        check("init", 0, ccl_comm_last_error(NULL));
        return;
    }
    Job jobs[N];
    pthread_t t[N];
    for (int r = 0; r < N; r++) {
        jobs[r] = (Job){.parent = comms[r], .rank = r};
        pthread_create(&t[r], NULL, job, &jobs[r]);
    }
    for (int r = 0; r < N; r++)
        pthread_join(t[r], NULL);
    judge("threads: colors, keys, NOCOLOR; each child runs an all-reduce and a barrier, and splits again", jobs);

    /* The children outlive their parents: the parents destroyed, they run again. */
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(comms[r]);
    for (int r = 0; r < N; r++) {
        jobs[r].why[0] = 0;
        jobs[r].r = CCL_OK;
        if (jobs[r].child)
            pthread_create(&t[r], NULL, use_again, &jobs[r]);
    }
    int ok = 1;
    char detail[4 * CCL__ERR_LEN] = "";
    size_t n = 0;
    for (int r = 0; r < N; r++) {
        if (!jobs[r].child)
            continue;
        pthread_join(t[r], NULL);
        ok &= jobs[r].r == CCL_OK;
        n += (size_t)snprintf(detail + n, sizeof detail - n, "rank %d: %s %s; ", r, ccl_result_string(jobs[r].r),
                              jobs[r].why);
    }
    check("threads: the children work on after their parents were destroyed", ok, detail);
    for (int r = 0; r < N; r++) {
        ccl_comm_destroy(jobs[r].grandchild);
        ccl_comm_destroy(jobs[r].child);
    }

    /* Argument errors. */
    if (ccl_comm_init_all(comms, 2, NULL, &cfg) != CCL_OK)
        return;
    ccl_comm_t *c = (ccl_comm_t *)1;
    ccl_result_t r = ccl_comm_split(comms[0], -5, 0, &c, NULL);
    check("a negative color other than CCL_SPLIT_NOCOLOR is refused, naming it",
          r == CCL_ERR_INVALID_ARGUMENT && !c && strstr(ccl_comm_last_error(comms[0]), "argument 'color' is -5"),
          ccl_comm_last_error(comms[0]));
    r = ccl_comm_split(comms[0], 0, 0, NULL, NULL);
    check("a NULL newcomm is refused", r == CCL_ERR_INVALID_ARGUMENT &&
          strstr(ccl_comm_last_error(comms[0]), "argument 'newcomm'"), ccl_comm_last_error(comms[0]));
    check("a NULL comm is refused", ccl_comm_split(NULL, 0, 0, &c, NULL) == CCL_ERR_INVALID_ARGUMENT &&
          strstr(ccl_comm_last_error(NULL), "ccl_comm_split: argument 'comm'"), ccl_comm_last_error(NULL));
    /* Rank 1 never comes: rank 0's split fails when the timeout passes, naming it. */
    ccl_comm_destroy(comms[0]);
    ccl_comm_destroy(comms[1]);
    cfg.timeout_ms = 300;
    if (ccl_comm_init_all(comms, 2, NULL, &cfg) != CCL_OK)
        return;
    r = ccl_comm_split(comms[0], 0, 0, &c, NULL);
    check("a rank that never comes to the split is named when the timeout passes",
          r == CCL_ERR_PEER_FAILED && !c && strstr(ccl_comm_last_error(comms[0]), "rank 1 did not come within 300 ms"),
          ccl_comm_last_error(comms[0]));
    ccl_comm_destroy(comms[0]);
    ccl_comm_destroy(comms[1]);
}

/* The same split of every rank, made by one thread inside a group. */
static void test_group(void)
{
    ccl_comm_t *comms[N];
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .heap_bytes = 8 << 20, .timeout_ms = 20000};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK) {
        check("group: init", 0, ccl_comm_last_error(NULL));
        return;
    }
    Job jobs[N];
    ccl_result_t r = ccl_group_start();
    for (int k = 0; k < N; k++) {
        jobs[k] = (Job){.parent = comms[k], .rank = k};
        ccl_result_t e = ccl_comm_split(comms[k], color_of(k), -k, &jobs[k].child, NULL);
        if (r == CCL_OK)
            r = e;
    }
    ccl_result_t e = ccl_group_end();
    char detail[CCL__ERR_LEN + 64];
    snprintf(detail, sizeof detail, "calls %s, ccl_group_end %s: %s", ccl_result_string(r), ccl_result_string(e),
             ccl_comm_last_error(NULL));
    check("group: one thread splits every rank between ccl_group_start and ccl_group_end", r == CCL_OK && e == CCL_OK,
          detail);
    /* Use the children (one thread per rank) and split them again there. */
    pthread_t t[N];
    for (int k = 0; k < N; k++)
        if (jobs[k].child)
            pthread_create(&t[k], NULL, use_and_split, &jobs[k]);
    for (int k = 0; k < N; k++)
        if (jobs[k].child)
            pthread_join(t[k], NULL);
    judge("group: the children are the same as split by one thread per rank", jobs);
    for (int k = 0; k < N; k++) {
        ccl_comm_destroy(jobs[k].grandchild);
        ccl_comm_destroy(jobs[k].child);
        ccl_comm_destroy(comms[k]);
    }
}

/* Processes: 4 ranks, pairs {0, 1} and {2, 3}; an exact all-reduce in each. */
static int child(int rank, int arg)
{
    ccl_bootstrap_t boot;
    CclEnvBoot *eb;
    ccl_algorithm_t *alg;
    ccl_comm_t *comm = forked_rank_open("split", rank, 20000, RING, &alg, &eb, &boot);
    if (!comm)
        return 1;
    ccl_comm_t *pair = NULL;
    ccl_result_t r = ccl_comm_split(comm, rank / 2, rank, &pair, NULL);
    int prank = -1, psize = -1;
    float in[COUNT], out[COUNT];
    if (r == CCL_OK) {
        ccl_comm_rank(pair, &prank);
        ccl_comm_size(pair, &psize);
        r = ccl_algorithm_load(pair, RING, 0, &alg);
    }
    for (int i = 0; i < COUNT; i++)
        in[i] = (float)rank;
    if (r == CCL_OK)
        r = ccl_algorithm_run(alg, in, out, COUNT, CCL_F32, CCL_SUM, NULL);
    if (r == CCL_OK)
        r = ccl_comm_synchronize(pair);
    float want = (float)(rank / 2 * 4 + 1);
    int ok = r == CCL_OK && prank == rank % 2 && psize == 2 && out[0] == want && out[COUNT - 1] == want;
    if (!ok)
        printf("FAIL split: processes: rank %d: %s, pair rank %d of %d, out[0] %g (want %g): %s\n", rank,
               ccl_result_string(r), prank, psize, r == CCL_OK ? out[0] : -1.0f, want,
               pair ? ccl_comm_last_error(pair) : ccl_comm_last_error(comm));
    if (pair)
        ccl_comm_destroy(pair);
    ccl_comm_destroy(comm);
    ccl__env_boot_close(eb);
    return ok ? 0 : 1;
}

int main(void)
{
    test_threads();
    test_group();
    int codes[4];
    forked_ranks_run("split-test", 4, child, 0, codes);
    check("processes: 4 ranks split in two pairs, each runs an exact all-reduce",
          codes[0] == 0 && codes[1] == 0 && codes[2] == 0 && codes[3] == 0, "a rank failed (above)");
    return failures != 0;
}
