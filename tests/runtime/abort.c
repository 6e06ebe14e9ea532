/* abort.c: ccl_comm_abort from another thread while ranks wait, and
 * ccl_comm_get_async_error (CPU backend, threads).
 *
 * Ranks 0 and 2 start an all-reduce that rank 1 never joins (the timeout is 20 s); after
 * 150 ms a second thread checks that no failure is reported yet, then aborts rank 1.
 * Ranks 0 and 2 must fail at once naming rank 1; rank 1 is dead (CCL_ERR_INVALID_USAGE).
 * Then a rank aborted while its own thread is blocked in ccl_comm_synchronize. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ccl.h"
#include "internal.h"

#include "ring_source.h"

static int failures;

static void check(const char *what, int ok, const char *detail)
{
    if (ok)
        printf("ok abort: %s\n", what);
    else {
        printf("FAIL abort: %s: %s\n", what, detail);
        failures++;
    }
}

typedef struct {
    ccl_comm_t *probe, *victim;
    ccl_result_t before;       /* what get_async_error said before the abort */
    ccl_result_t rc;
} Aborter;

static void *aborter(void *arg)
{
    Aborter *a = arg;
    usleep(150 * 1000);
    a->before = CCL_ERR_INTERNAL;
    ccl_comm_get_async_error(a->probe, &a->before);
    a->rc = ccl_comm_abort(a->victim);
    return NULL;
}

static int init(ccl_comm_t **comms, int n, ccl_algorithm_t **alg)
{
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .timeout_ms = 20000};
    if (ccl_comm_init_all(comms, n, NULL, &cfg) != CCL_OK) {
        printf("FAIL abort: init: %s\n", ccl_comm_last_error(NULL));
        failures++;
        return -1;
    }
    for (int r = 0; r < n; r++)
        if (ccl_algorithm_load(comms[r], RING, 0, &alg[r]) != CCL_OK) {
            printf("FAIL abort: load: %s\n", ccl_comm_last_error(comms[r]));
            failures++;
            return -1;
        }
    return 0;
}

/* A peer aborts: the waiting ranks stop at once and name it. */
static void test_peer_aborts(void)
{
    enum { N = 3, COUNT = 256 };
    ccl_comm_t *comms[N];
    ccl_algorithm_t *alg[N];
    if (init(comms, N, alg) != 0)
        return;
    float in[N][COUNT] = {{0}}, out[N][COUNT];
    ccl_algorithm_run(alg[0], in[0], out[0], COUNT, CCL_F32, CCL_SUM, NULL);
    ccl_algorithm_run(alg[2], in[2], out[2], COUNT, CCL_F32, CCL_SUM, NULL);
    Aborter a = {.probe = comms[0], .victim = comms[1]};
    pthread_t t;
    double t0 = ccl__now_ms();
    pthread_create(&t, NULL, aborter, &a);
    char msg[2][CCL__ERR_LEN], detail[2 * CCL__ERR_LEN + 64];
    ccl_result_t r0 = ccl_comm_synchronize(comms[0]);
    snprintf(msg[0], sizeof msg[0], "%s", ccl_comm_last_error(comms[0]));
    ccl_result_t r2 = ccl_comm_synchronize(comms[2]);
    snprintf(msg[1], sizeof msg[1], "%s", ccl_comm_last_error(comms[2]));
    double ms = ccl__now_ms() - t0;
    pthread_join(t, NULL);
    check("ccl_comm_get_async_error reports nothing while the ranks only wait", a.before == CCL_OK,
          ccl_result_string(a.before));
    check("ccl_comm_abort from another thread returns CCL_OK", a.rc == CCL_OK, ccl_result_string(a.rc));
    snprintf(detail, sizeof detail, "%s / %s after %.0f ms: %s | %s", ccl_result_string(r0), ccl_result_string(r2), ms,
             msg[0], msg[1]);
    const char *needle = "rank 1 aborted the communicator (ccl_comm_abort)";
    check("waiting peers fail fast naming the aborting rank",
          r0 == CCL_ERR_PEER_FAILED && r2 == CCL_ERR_PEER_FAILED && strstr(msg[0], needle) && strstr(msg[1], needle) &&
              ms < 2000,
          detail);
    ccl_result_t q = CCL_OK;
    ccl_comm_get_async_error(comms[1], &q);
    check("the aborted rank's ccl_comm_get_async_error says CCL_ERR_INVALID_USAGE", q == CCL_ERR_INVALID_USAGE,
          ccl_result_string(q));
    ccl_result_t r1 = ccl_algorithm_run(alg[1], in[1], out[1], COUNT, CCL_F32, CCL_SUM, NULL);
    check("the aborted rank refuses later calls", r1 == CCL_ERR_INVALID_USAGE && strstr(ccl_comm_last_error(comms[1]), "aborted"),
          ccl_comm_last_error(comms[1]));
    q = CCL_OK;
    ccl_comm_get_async_error(comms[2], &q);
    check("a stopped peer's ccl_comm_get_async_error keeps the failure", q == CCL_ERR_PEER_FAILED, ccl_result_string(q));
    ccl_result_t d = CCL_OK;
    for (int r = 0; r < N; r++)
        if (ccl_comm_destroy(comms[r]) != CCL_OK)
            d = CCL_ERR_INTERNAL;
    check("aborted communicators are destroyed", d == CCL_OK, "a destroy failed");
}

/* A rank aborted while its own thread is blocked in ccl_comm_synchronize. */
static void test_self_abort(void)
{
    enum { N = 2, COUNT = 256 };
    ccl_comm_t *comms[N];
    ccl_algorithm_t *alg[N];
    if (init(comms, N, alg) != 0)
        return;
    float in[COUNT] = {0}, out[COUNT];
    ccl_algorithm_run(alg[0], in, out, COUNT, CCL_F32, CCL_SUM, NULL);
    Aborter a = {.probe = comms[1], .victim = comms[0]};
    pthread_t t;
    double t0 = ccl__now_ms();
    pthread_create(&t, NULL, aborter, &a);
    ccl_result_t r = ccl_comm_synchronize(comms[0]);
    double ms = ccl__now_ms() - t0;
    pthread_join(t, NULL);
    char detail[CCL__ERR_LEN + 64];
    snprintf(detail, sizeof detail, "%s after %.0f ms: %s", ccl_result_string(r), ms, ccl_comm_last_error(comms[0]));
    check("abort releases this rank's own thread blocked in ccl_comm_synchronize",
          r == CCL_ERR_INVALID_USAGE && strstr(ccl_comm_last_error(comms[0]), "aborted (ccl_comm_abort)") && ms < 2000,
          detail);
    ccl_result_t q = CCL_OK;
    ccl_comm_get_async_error(comms[1], &q);
    check("an idle peer's ccl_comm_get_async_error sees the abort without waiting", q == CCL_ERR_PEER_FAILED,
          ccl_result_string(q));
    check("ccl_comm_get_async_error: NULL result", ccl_comm_get_async_error(comms[1], NULL) == CCL_ERR_INVALID_ARGUMENT &&
          strstr(ccl_comm_last_error(comms[1]), "'result'"), ccl_comm_last_error(comms[1]));
    /* What get_async_error said, the idle peer's own calls say too. */
    void *p = NULL;
    ccl_result_t m = ccl_mem_alloc(comms[0], &p, 4096);
    snprintf(detail, sizeof detail, "%s, ptr %p: %s", ccl_result_string(m), p, ccl_comm_last_error(comms[0]));
    check("ccl_mem_alloc on the aborted rank fails", m == CCL_ERR_INVALID_USAGE && !p &&
          strstr(ccl_comm_last_error(comms[0]), "aborted"), detail);
    ccl_result_t s1 = ccl_comm_synchronize(comms[1]);
    snprintf(detail, sizeof detail, "%s: %s", ccl_result_string(s1), ccl_comm_last_error(comms[1]));
    check("an idle peer's ccl_comm_synchronize reports the abort",
          s1 == CCL_ERR_PEER_FAILED && strstr(ccl_comm_last_error(comms[1]), "rank 0 aborted the communicator"), detail);
    m = ccl_mem_alloc(comms[1], &p, 4096);
    snprintf(detail, sizeof detail, "%s, ptr %p: %s", ccl_result_string(m), p, ccl_comm_last_error(comms[1]));
    check("ccl_mem_alloc on the idle peer fails after the abort", m == CCL_ERR_PEER_FAILED && !p, detail);
    ccl_comm_destroy(comms[0]);
    ccl_comm_destroy(comms[1]);
    check("ccl_comm_abort: a destroyed communicator", ccl_comm_abort(comms[0]) == CCL_ERR_INVALID_ARGUMENT,
          ccl_comm_last_error(NULL));
}

/* A peer aborts while this rank is idle: its next ccl_mem_alloc, before any
 * synchronize, fails too (it would hand out a buffer of a dead communicator). */
static void test_idle_alloc(void)
{
    enum { N = 2 };
    ccl_comm_t *comms[N];
    ccl_algorithm_t *alg[N];
    if (init(comms, N, alg) != 0)
        return;
    ccl_comm_abort(comms[1]);
    void *p = NULL;
    ccl_result_t m = ccl_mem_alloc(comms[0], &p, 4096);
    char detail[CCL__ERR_LEN + 64];
    snprintf(detail, sizeof detail, "%s, ptr %p: %s", ccl_result_string(m), p, ccl_comm_last_error(comms[0]));
    check("ccl_mem_alloc after a peer's abort fails naming the peer", m == CCL_ERR_PEER_FAILED && !p &&
          strstr(ccl_comm_last_error(comms[0]), "rank 1 aborted the communicator"), detail);
    ccl_comm_destroy(comms[0]);
    ccl_comm_destroy(comms[1]);
}

int main(void)
{
    test_peer_aborts();
    test_self_abort();
    test_idle_alloc();
    return failures != 0;
}
