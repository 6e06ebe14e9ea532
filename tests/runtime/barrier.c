/* barrier.c: ccl_barrier (CPU backend, threads and processes).
 *
 * Each rank reaches the barrier at another time (rank r sleeps r * 150 ms first); none
 * may get past it (ccl_comm_synchronize returning) before the last has reached it. The
 * barrier is ordered with the rank's other calls (an all-reduce before and after it
 * give exact results), works back to back without synchronizing in between, on one
 * rank (nothing to wait for), and a rank that never comes is named when the timeout
 * passes. Then the same timing check with every rank a process. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ccl.h"
#include "internal.h"

#include "forked_ranks.h"
#include "ring_source.h"

enum { N = 4, STAGGER_MS = 150, COUNT = 333 };

static int failures;

static void check(const char *what, int ok, const char *detail)
{
    if (ok)
        printf("ok barrier: %s\n", what);
    else {
        printf("FAIL barrier: %s: %s\n", what, detail);
        failures++;
    }
}

typedef struct {
    ccl_comm_t *comm;
    ccl_algorithm_t *alg;
    int rank;
    double t0, reached, passed;
    ccl_result_t r;
    int wrong;
    char msg[CCL__ERR_LEN];
} Rank;

static void *rank_main(void *arg)
{
    Rank *k = arg;
    static float in[N][COUNT], out[N][COUNT];
    for (int i = 0; i < COUNT; i++)
        in[k->rank][i] = (float)(k->rank + 1);
    usleep((useconds_t)k->rank * STAGGER_MS * 1000);
    k->reached = ccl__now_ms() - k->t0;
    /* all-reduce, barrier, all-reduce, three barriers back to back, then synchronize */
    k->r = ccl_algorithm_run(k->alg, in[k->rank], out[k->rank], COUNT, CCL_F32, CCL_SUM, NULL);
    for (int b = 0; b < 4 && k->r == CCL_OK; b++) {
        k->r = ccl_barrier(k->comm, NULL);
        if (b == 0 && k->r == CCL_OK)
            k->r = ccl_algorithm_run(k->alg, in[k->rank], out[k->rank], COUNT, CCL_F32, CCL_SUM, NULL);
    }
    if (k->r == CCL_OK)
        k->r = ccl_comm_synchronize(k->comm);
    k->passed = ccl__now_ms() - k->t0;
    for (int i = 0; i < COUNT; i++)
        k->wrong += out[k->rank][i] != (float)(N * (N + 1) / 2);
    snprintf(k->msg, sizeof k->msg, "%s", ccl_comm_last_error(k->comm));
    return NULL;
}

static void test_threads(void)
{
    ccl_comm_t *comms[N];
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .heap_bytes = 16 << 20, .timeout_ms = 20000};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK) {
        check("init", 0, ccl_comm_last_error(NULL));
        return;
    }
    Rank k[N];
    pthread_t t[N];
    double t0 = ccl__now_ms();
    for (int r = 0; r < N; r++) {
        k[r] = (Rank){.comm = comms[r], .rank = r, .t0 = t0};
        if (ccl_algorithm_load(comms[r], RING, 0, &k[r].alg) != CCL_OK)
            check("load", 0, ccl_comm_last_error(comms[r]));
    }
    for (int r = 0; r < N; r++)
        pthread_create(&t[r], NULL, rank_main, &k[r]);
    for (int r = 0; r < N; r++)
        pthread_join(t[r], NULL);
    double last = 0;
    for (int r = 0; r < N; r++)
        last = k[r].reached > last ? k[r].reached : last;
    int ok = 1;
    char detail[4 * CCL__ERR_LEN];
    size_t n = 0;
    for (int r = 0; r < N; r++) {
        ok &= k[r].r == CCL_OK && k[r].passed >= last && !k[r].wrong;
        n += (size_t)snprintf(detail + n, sizeof detail - n, "rank %d: reached %.0f ms, passed %.0f ms, %s, %d wrong "
                              "(%s); ", r, k[r].reached, k[r].passed, ccl_result_string(k[r].r), k[r].wrong, k[r].msg);
    }
    check("threads: no rank passes before the last reached it; calls around it stay in order", ok, detail);

    /* Rank 3 never comes: the others fail when the timeout passes, naming it. */
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(comms[r]);
    cfg.timeout_ms = 400;
    if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK)
        return;
    ccl_result_t rs[N - 1];
    for (int r = 0; r < N - 1; r++)
        ccl_barrier(comms[r], NULL);
    ok = 1;
    n = 0;
    for (int r = 0; r < N - 1; r++) {
        rs[r] = ccl_comm_synchronize(comms[r]);
        const char *m = ccl_comm_last_error(comms[r]);
        ok &= (rs[r] == CCL_ERR_TIMEOUT && strstr(m, "rank 3 did not start")) || rs[r] == CCL_ERR_PEER_FAILED;
        n += (size_t)snprintf(detail + n, sizeof detail - n, "rank %d: %s: %s; ", r, ccl_result_string(rs[r]), m);
    }
    check("a rank that never reaches the barrier is named when the timeout passes", ok && rs[0] != CCL_OK, detail);
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(comms[r]);

    ccl_comm_t *one;
    cfg.timeout_ms = 0;
    ccl_result_t r1 = ccl_comm_init_all(&one, 1, NULL, &cfg);
    if (r1 == CCL_OK)
        r1 = ccl_barrier(one, NULL);
    if (r1 == CCL_OK)
        r1 = ccl_comm_synchronize(one);
    check("one rank: nothing to wait for", r1 == CCL_OK, ccl_comm_last_error(one));
    ccl_comm_destroy(one);
    check("a NULL comm is refused", ccl_barrier(NULL, NULL) == CCL_ERR_INVALID_ARGUMENT &&
          strstr(ccl_comm_last_error(NULL), "ccl_barrier: argument 'comm'"), ccl_comm_last_error(NULL));
}

/* Processes: the same timing check; exit 0 when this rank passed after the last came. */
static double *reached_at; /* shared with the parent: when each rank reached the barrier */

static int child(int rank, int arg)
{
    ccl_bootstrap_t boot;
    CclEnvBoot *eb;
    ccl_algorithm_t *alg;
    ccl_comm_t *comm = forked_rank_open("barrier", rank, 20000, RING, &alg, &eb, &boot);
    if (!comm)
        return 1;
    boot.barrier(boot.ctx);
    usleep((useconds_t)rank * STAGGER_MS * 1000);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    reached_at[rank] = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
    ccl_result_t r = ccl_barrier(comm, NULL);
    if (r == CCL_OK)
        r = ccl_comm_synchronize(comm);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double passed = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6, last = 0;
    for (int p = 0; p < 3; p++)
        last = reached_at[p] > last ? reached_at[p] : last;
    int ok = r == CCL_OK && passed >= last;
    if (!ok)
        printf("FAIL barrier: processes: rank %d: %s, passed %.0f ms before the last rank came: %s\n", rank,
               ccl_result_string(r), last - passed, ccl_comm_last_error(comm));
    ccl_comm_destroy(comm);
    ccl__env_boot_close(eb);
    return ok ? 0 : 1;
}

int main(void)
{
    test_threads();
    reached_at = mmap(NULL, sizeof(double) * 3, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int codes[3];
    forked_ranks_run("barrier-test", 3, child, 0, codes);
    check("processes: no rank passes before the last reached it", codes[0] == 0 && codes[1] == 0 && codes[2] == 0,
          "a rank failed (above)");
    return failures != 0;
}
