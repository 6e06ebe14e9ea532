/* defaults.c: the default timeout (CPU backend), with CCL_TIMEOUT_MS unset, and the
 * size of the regions calls share (runtime/src/call.c, "Regions"): a sixteenth of the
 * heap, CCL_REGION_BYTES where set, and a malformed value refused naming it.
 *
 * The timeout is for waits that will never end; it must never end one that would: a
 * rank that spends a while elsewhere (writing a checkpoint, compiling) before it joins
 * a call is not a failure, and its peers must wait for it, as NCCL and PyTorch's
 * default (10 minutes) do. Before the fix the default was 10 s and a rank 11 s late
 * killed every communicator of the job. A dead peer must still be found at once, by
 * its pid, whatever the timeout. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ccl.h"
#include "internal.h"

#include "forked_ranks.h"
#include "ring_source.h"

enum { N = 3, COUNT = 1001, LATE_MS = 11000 };

static int failures;

static void check(const char *what, int ok, const char *detail)
{
    if (ok)
        printf("ok defaults: %s\n", what);
    else {
        printf("FAIL defaults: %s: %s\n", what, detail);
        failures++;
    }
}

typedef struct {
    ccl_algorithm_t *alg;
    int rank, late_ms;
    float in[COUNT], out[COUNT];
    ccl_result_t r;
    char msg[CCL__ERR_LEN];
} Rank;

static void *rank_main(void *arg)
{
    Rank *k = arg;
    usleep((useconds_t)k->late_ms * 1000);
    for (int i = 0; i < COUNT; i++)
        k->in[i] = (float)(k->rank + i % 7);
    k->r = ccl_algorithm_run(k->alg, k->in, k->out, COUNT, CCL_F32, CCL_SUM, NULL);
    if (k->r == CCL_OK)
        k->r = ccl_comm_synchronize(k->alg->comm);
    snprintf(k->msg, sizeof k->msg, "%s", ccl_comm_last_error(k->alg->comm));
    return NULL;
}

/* Ranks 0 and 1 call at once, rank 2 LATE_MS later: the call completes, exact. */
static void test_late_rank(void)
{
    ccl_comm_t *comms[N];
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .heap_bytes = 16 << 20};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK) {
        check("init", 0, ccl_comm_last_error(NULL));
        return;
    }
    char detail[3 * CCL__ERR_LEN];
    snprintf(detail, sizeof detail, "timeout_ms %d", comms[0]->timeout_ms);
    check("the default timeout is CCL_DEFAULT_TIMEOUT_MS (10 minutes)",
          comms[0]->timeout_ms == CCL_DEFAULT_TIMEOUT_MS && CCL_DEFAULT_TIMEOUT_MS == 600000, detail);
    static Rank k[N];
    pthread_t t[N];
    for (int r = 0; r < N; r++) {
        k[r] = (Rank){.rank = r, .late_ms = r == N - 1 ? LATE_MS : 0};
        if (ccl_algorithm_load(comms[r], RING, 0, &k[r].alg) != CCL_OK) {
            check("load", 0, ccl_comm_last_error(comms[r]));
            return;
        }
    }
    for (int r = 0; r < N; r++)
        pthread_create(&t[r], NULL, rank_main, &k[r]);
    for (int r = 0; r < N; r++)
        pthread_join(t[r], NULL);
    int ok = 1, wrong = -1;
    size_t n = 0;
    for (int r = 0; r < N; r++) {
        ok &= k[r].r == CCL_OK;
        n += (size_t)snprintf(detail + n, sizeof detail - n, "rank %d: %s %s; ", r, ccl_result_string(k[r].r), k[r].msg);
        for (int i = 0; i < COUNT && wrong < 0; i++)
            if (k[r].out[i] != (float)(N * (N - 1) / 2 + N * (i % 7)))
                wrong = i;
    }
    check("a rank 11 s late into a call (a checkpoint, a compile) kills nothing: the call completes", ok && wrong < 0,
          detail);
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(comms[r]);
}

/* Processes with the default timeout: one dies after init; the others stop at once. */
static int child(int rank, int arg)
{
    ccl_bootstrap_t boot;
    CclEnvBoot *eb;
    ccl_algorithm_t *alg;
    ccl_comm_t *comm = forked_rank_open("defaults", rank, 0, RING, &alg, &eb, &boot);
    if (!comm)
        return 1;
    boot.barrier(boot.ctx);
    if (rank == N - 1)
        _exit(3);
    static float in[COUNT], out[COUNT];
    double t0 = ccl__now_ms();
    ccl_result_t r = ccl_algorithm_run(alg, in, out, COUNT, CCL_F32, CCL_SUM, NULL);
    if (r == CCL_OK)
        r = ccl_comm_synchronize(comm);
    double ms = ccl__now_ms() - t0;
    int named = r == CCL_ERR_PEER_FAILED && strstr(ccl_comm_last_error(comm), "is gone") && ms < 3000;
    if (!named)
        printf("FAIL defaults: rank %d with a dead peer: %s after %.0f ms: %s\n", rank, ccl_result_string(r), ms,
               ccl_comm_last_error(comm));
    ccl_comm_destroy(comm);
    ccl__env_boot_close(eb);
    return named ? 4 : 1;
}

static void test_dead_peer(void)
{
    int codes[N];
    double t0 = ccl__now_ms();
    forked_ranks_run("defaults-test", N, child, 0, codes);
    char detail[128];
    snprintf(detail, sizeof detail, "exit codes %d %d %d (4: stopped naming the dead rank) after %.0f ms", codes[0],
             codes[1], codes[2], ccl__now_ms() - t0);
    check("with the default timeout, a dead peer is still found at once (its pid)",
          codes[0] == 4 && codes[1] == 4 && codes[2] == 3, detail);
}

/* The regions' cap of a one-rank comm with a 32 MiB heap and CCL_REGION_BYTES=env
 * (NULL: unset): its cap, or 0 with the init's message in msg. */
static size_t region_cap(const char *env, char *msg, size_t len)
{
    if (env)
        setenv("CCL_REGION_BYTES", env, 1);
    else
        unsetenv("CCL_REGION_BYTES");
    ccl_comm_t *comm;
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .heap_bytes = 32 << 20};
    size_t cap = 0;
    if (ccl_comm_init_all(&comm, 1, NULL, &cfg) == CCL_OK) {
        cap = comm->region_cap;
        ccl_comm_destroy(comm);
    } else {
        snprintf(msg, len, "%s", ccl_comm_last_error(NULL));
    }
    unsetenv("CCL_REGION_BYTES");
    return cap;
}

static void test_region_bytes(void)
{
    char msg[CCL__ERR_LEN] = "", detail[CCL__ERR_LEN + 64];
    size_t cap = region_cap(NULL, msg, sizeof msg);
    snprintf(detail, sizeof detail, "cap %zu, want %d (%s)", cap, 2 << 20, msg);
    check("the shared regions' size is a sixteenth of the heap by default", cap == 2 << 20, detail);
    cap = region_cap("5M", msg, sizeof msg);
    snprintf(detail, sizeof detail, "cap %zu, want %d (%s)", cap, 5 << 20, msg);
    check("CCL_REGION_BYTES=5M sets it", cap == 5 << 20, detail);
    cap = region_cap("12Q", msg, sizeof msg);
    snprintf(detail, sizeof detail, "cap %zu; message: %s", cap, msg);
    check("CCL_REGION_BYTES=12Q is refused, naming it", cap == 0 && strstr(msg, "CCL_REGION_BYTES='12Q'"), detail);
}

int main(void)
{
    test_region_bytes();
    unsetenv("CCL_TIMEOUT_MS"); /* the suites set one; this test is about the default */
    test_late_rank();
    test_dead_peer();
    return failures != 0;
}
