/* watchdog.c: the watchdog pattern of docs/api.md ("Communicators") against a destroy.
 *
 * Watchdog threads poll ccl_comm_get_async_error (and one calls ccl_comm_abort) on
 * every rank of a communicator in a tight loop while the main thread destroys the
 * communicator under them, many times over. Every poll must return either CCL_OK with
 * a result, or CCL_ERR_INVALID_ARGUMENT once the destroy has begun; the library must
 * never touch the freed communicator (before the fix: a heap use after free in comm.c,
 * which crashed or hung this test and is reported by `make asan`). More watchdogs than
 * cores, so that some are descheduled between their handle check and their use of the
 * communicator when the destroy comes. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ccl.h"

enum { N = 2, WATCHDOGS = 6, ROUNDS = 40 };

static int failures;

static void check(const char *what, int ok, const char *detail)
{
    if (ok)
        printf("ok watchdog: %s\n", what);
    else {
        printf("FAIL watchdog: %s: %s\n", what, detail);
        failures++;
    }
}

typedef struct {
    ccl_comm_t **comms;
    int abort_too;              /* also calls ccl_comm_abort, once per round */
    _Atomic int *stop;
    long polls, refused;
    char bad[256];              /* the first wrong answer */
} Watchdog;

static void *watchdog(void *arg)
{
    Watchdog *w = arg;
    int aborted = 0;
    while (!atomic_load(w->stop)) {
        for (int r = 0; r < N; r++) {
            ccl_result_t res = CCL_ERR_INTERNAL;
            ccl_result_t rc = ccl_comm_get_async_error(w->comms[r], &res);
            w->polls++;
            if (rc == CCL_ERR_INVALID_ARGUMENT) {
                w->refused++;
                continue;
            }
            if (rc != CCL_OK || (res != CCL_OK && res != CCL_ERR_INVALID_USAGE && res != CCL_ERR_PEER_FAILED)) {
                if (!w->bad[0])
                    snprintf(w->bad, sizeof w->bad, "ccl_comm_get_async_error returned %s with result %s",
                             ccl_result_string(rc), ccl_result_string(res));
            }
            if (w->abort_too && !aborted && w->polls > 50) {
                ccl_result_t a = ccl_comm_abort(w->comms[r]);
                if (a != CCL_OK && a != CCL_ERR_INVALID_ARGUMENT && !w->bad[0])
                    snprintf(w->bad, sizeof w->bad, "ccl_comm_abort returned %s", ccl_result_string(a));
                aborted = 1;
            }
        }
    }
    return NULL;
}

int main(void)
{
    /* A hang (a poll blocked on a destroyed lock) fails the test instead of the suite. */
    alarm(240);
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .heap_bytes = 4 << 20};
    long polls = 0, refused = 0;
    char bad[256] = "";
    for (int round = 0; round < ROUNDS && !failures; round++) {
        ccl_comm_t *comms[N];
        if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK) {
            check("init", 0, ccl_comm_last_error(NULL));
            break;
        }
        _Atomic int stop = 0;
        Watchdog w[WATCHDOGS];
        pthread_t t[WATCHDOGS];
        for (int i = 0; i < WATCHDOGS; i++) {
            w[i] = (Watchdog){.comms = comms, .abort_too = i == 0 && round % 2, .stop = &stop};
            pthread_create(&t[i], NULL, watchdog, &w[i]);
        }
        usleep(round % 7 * 100);
        for (int r = 0; r < N; r++)
            if (ccl_comm_destroy(comms[r]) != CCL_OK)
                check("destroy under a watchdog", 0, ccl_comm_last_error(NULL));
        /* Polls go on for a while against the destroyed handles. */
        usleep(200);
        atomic_store(&stop, 1);
        for (int i = 0; i < WATCHDOGS; i++) {
            pthread_join(t[i], NULL);
            polls += w[i].polls;
            refused += w[i].refused;
            if (w[i].bad[0] && !bad[0])
                snprintf(bad, sizeof bad, "round %d: %s", round, w[i].bad);
        }
    }
    char detail[512];
    snprintf(detail, sizeof detail, "%s (%ld polls, %ld refused)", bad, polls, refused);
    check("ccl_comm_get_async_error and ccl_comm_abort from watchdog threads race ccl_comm_destroy safely", !bad[0],
          detail);
    check("polls after the destroy are refused with CCL_ERR_INVALID_ARGUMENT", refused > 0, detail);
    return failures != 0;
}
