/* p2p_scale.c: point-to-point groups with many messages (CPU backend, threads).
 *
 * A group's cost must grow linearly with its messages: before the fix, launching a
 * group (gathering each comm's calls) and running it (every round scanned every call,
 * while a channel moves two slots a round) were both quadratic: 64k messages took
 * 7.5 s, 128k 37.8 s. Here one thread puts 131072 one-element messages from rank 0 to
 * rank 1 (and as many back) in one group spanning both comms, calls interleaved, and
 * checks every element, within a bound far below the quadratic time. Then the limit: a
 * group holds at most CCL_GROUP_MAX_CALLS calls; the next one fails with a message
 * naming the limit, and ccl_group_end launches nothing of that group. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccl.h"
#include "internal.h"

enum { N = 2, MESSAGES = 131072 };

static int failures;

static void check(const char *what, int ok, const char *detail)
{
    if (ok)
        printf("ok p2p_scale: %s\n", what);
    else {
        printf("FAIL p2p_scale: %s: %s\n", what, detail);
        failures++;
    }
}

static void test_many(ccl_comm_t **comms)
{
    int32_t *to1 = malloc(sizeof *to1 * MESSAGES), *at1 = malloc(sizeof *at1 * MESSAGES);
    int32_t *to0 = malloc(sizeof *to0 * MESSAGES), *at0 = malloc(sizeof *at0 * MESSAGES);
    for (int i = 0; i < MESSAGES; i++) {
        to1[i] = i * 3 + 1;
        to0[i] = -i;
        at1[i] = at0[i] = 7;
    }
    double t0 = ccl__now_ms();
    ccl_result_t r = ccl_group_start();
    for (int i = 0; i < MESSAGES && r == CCL_OK; i++) {
        r = ccl_send(&to1[i], 1, CCL_I32, 1, comms[0], NULL);
        if (r == CCL_OK)
            r = ccl_recv(&at1[i], 1, CCL_I32, 0, comms[1], NULL);
        if (r == CCL_OK)
            r = ccl_send(&to0[i], 1, CCL_I32, 0, comms[1], NULL);
        if (r == CCL_OK)
            r = ccl_recv(&at0[i], 1, CCL_I32, 1, comms[0], NULL);
    }
    ccl_result_t e = ccl_group_end();
    double launched = ccl__now_ms() - t0;
    ccl_result_t s0 = ccl_comm_synchronize(comms[0]), s1 = ccl_comm_synchronize(comms[1]);
    double ms = ccl__now_ms() - t0;
    int wrong = -1;
    for (int i = 0; i < MESSAGES && wrong < 0; i++)
        if (at1[i] != to1[i] || at0[i] != to0[i])
            wrong = i;
    char detail[CCL__ERR_LEN + 256];
    snprintf(detail, sizeof detail, "calls %s, end %s, synchronize %s/%s (%s); first wrong message %d; %.0f ms "
             "(launched after %.0f ms)", ccl_result_string(r), ccl_result_string(e), ccl_result_string(s0),
             ccl_result_string(s1), ccl_comm_last_error(comms[0]), wrong, ms, launched);
    check("a group of 2 x 131072 messages between two comms arrives whole",
          r == CCL_OK && e == CCL_OK && s0 == CCL_OK && s1 == CCL_OK && wrong < 0, detail);
    /* Quadratic took 38 s for 128k on this kind of machine; linear takes well under 2 s. */
    check("... in linear time (under 8 s)", ms < 8000, detail);
    free(to1), free(at1), free(to0), free(at0);
}

static void test_limit(ccl_comm_t **comms)
{
    static char byte;
    ccl_result_t r = ccl_group_start(), last = CCL_OK;
    long made = 0;
    for (long i = 0; i <= CCL_GROUP_MAX_CALLS && r == CCL_OK; i++) {
        r = ccl_send(&byte, 0, CCL_U8, 1, comms[0], NULL);
        if (r == CCL_OK)
            made++;
        last = r;
    }
    char msg[CCL__ERR_LEN], detail[CCL__ERR_LEN + 200];
    snprintf(msg, sizeof msg, "%s", ccl_comm_last_error(comms[0]));
    ccl_result_t e = ccl_group_end();
    snprintf(detail, sizeof detail, "%ld calls held, then %s: '%s'; ccl_group_end %s: '%s'", made,
             ccl_result_string(last), msg, ccl_result_string(e), ccl_comm_last_error(NULL));
    check("the call past the group's limit fails naming the limit",
          made == CCL_GROUP_MAX_CALLS && last == CCL_ERR_INVALID_USAGE && strstr(msg, "at most") &&
          strstr(msg, "ccl_group_end"), detail);
    check("... and ccl_group_end launches nothing of that group", e == CCL_ERR_INVALID_USAGE &&
          strstr(ccl_comm_last_error(NULL), "nothing in the group was launched"), detail);
    /* Nothing was sent: a fresh exchange still matches message 1 with message 1. */
    int32_t x = 5, y = 0;
    ccl_group_start();
    ccl_send(&x, 1, CCL_I32, 1, comms[0], NULL);
    ccl_recv(&y, 1, CCL_I32, 0, comms[1], NULL);
    e = ccl_group_end();
    ccl_result_t s = ccl_comm_synchronize(comms[1]);
    snprintf(detail, sizeof detail, "%s/%s, got %d: %s", ccl_result_string(e), ccl_result_string(s), y,
             ccl_comm_last_error(comms[1]));
    check("the comms work on after the refused group", e == CCL_OK && s == CCL_OK && y == 5, detail);
}

int main(void)
{
    ccl_comm_t *comms[N];
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .heap_bytes = 64 << 20, .timeout_ms = 20000};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK) {
        printf("FAIL p2p_scale: init: %s\n", ccl_comm_last_error(NULL));
        return 1;
    }
    test_many(comms);
    test_limit(comms);
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(comms[r]);
    return failures != 0;
}
