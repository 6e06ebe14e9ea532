/* p2p.c: ccl_send, ccl_recv and groups through the public API (CPU backend): a ring
 * and an all-to-all (self included) of uneven and zero sizes in groups, one group
 * spanning every rank's comm, messages many slots long, several messages on one
 * channel in one group, back-to-back groups without synchronization, calls outside any
 * group, processes; and every failure: counts or dtypes that disagree (the receiver
 * names both calls, nothing is written), a send nobody receives and a recv nobody sends
 * (timeouts naming the call), argument errors, a failed call inside a group (nothing
 * launched), one group on two streams, ccl_group_end without a group. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccl.h"
#include "internal.h"
#include "forked_ranks.h"

enum { N = 4, POISON = -7 };

static int failures;

#define EXPECT(cond, ...)                                                                                    \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            printf("FAIL p2p: " __VA_ARGS__);                                                                \
            printf("\n");                                                                                    \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

static int init(ccl_comm_t **comms, int timeout_ms, size_t heap_bytes)
{
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .timeout_ms = timeout_ms, .heap_bytes = heap_bytes};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) == CCL_OK)
        return 0;
    printf("FAIL p2p: init: %s\n", ccl_comm_last_error(NULL));
    failures++;
    return -1;
}

static void destroy(ccl_comm_t **comms)
{
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(comms[r]);
}

/* Element i of message `tag` from rank q to rank p. */
static int32_t val(int tag, int q, int p, size_t i)
{
    return (int32_t)(tag * 1000003 + q * 10007 + p * 101 + (int)(i % 9973));
}

static int32_t *filled(size_t n, int tag, int q, int p)
{
    int32_t *b = malloc(sizeof *b * (n + 1));
    for (size_t i = 0; i < n; i++)
        b[i] = val(tag, q, p, i);
    b[n] = POISON;
    return b;
}

static int32_t *poisoned(size_t n)
{
    int32_t *b = malloc(sizeof *b * (n + 1));
    for (size_t i = 0; i <= n; i++)
        b[i] = POISON;
    return b;
}

/* 0 when b holds message (tag, q -> p) of n elements and the element after it is
 * untouched; else prints the first difference. */
static int check(const char *what, const int32_t *b, size_t n, int tag, int q, int p)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != val(tag, q, p, i)) {
            EXPECT(0, "%s: message %d from rank %d to rank %d: element %zu is %d, expected %d", what, tag, q, p, i,
                   b[i], val(tag, q, p, i));
            return -1;
        }
    if (b[n] != POISON) {
        EXPECT(0, "%s: message %d from rank %d to rank %d: the element past its %zu was written", what, tag, q, p, n);
        return -1;
    }
    return 0;
}

static int sync_all(ccl_comm_t **comms, const char *what)
{
    int bad = 0;
    for (int r = 0; r < N; r++)
        if (ccl_comm_synchronize(comms[r]) != CCL_OK) {
            EXPECT(0, "%s: rank %d: %s", what, r, ccl_comm_last_error(comms[r]));
            bad = 1;
        }
    return bad;
}

/* Every rank sends to r + 1 and receives from r - 1 (rank r's message: 37r + 5
 * elements, rank 2's none), in one group that spans every rank's comm. */
static void ring(void)
{
    int f0 = failures;
    ccl_comm_t *comms[N];
    if (init(comms, 10000, 0) != 0)
        return;
    size_t n[N];
    int32_t *send[N], *recv[N];
    for (int r = 0; r < N; r++) {
        n[r] = r == 2 ? 0 : 37 * (size_t)r + 5;
        send[r] = filled(n[r], 1, r, (r + 1) % N);
    }
    for (int r = 0; r < N; r++)
        recv[r] = poisoned(n[(r + N - 1) % N]);
    EXPECT(ccl_group_start() == CCL_OK, "ring: group_start");
    for (int r = 0; r < N; r++) {
        EXPECT(ccl_send(send[r], n[r], CCL_I32, (r + 1) % N, comms[r], NULL) == CCL_OK, "ring: send: %s",
               ccl_comm_last_error(comms[r]));
        EXPECT(ccl_recv(recv[r], n[(r + N - 1) % N], CCL_I32, (r + N - 1) % N, comms[r], NULL) == CCL_OK,
               "ring: recv: %s", ccl_comm_last_error(comms[r]));
    }
    EXPECT(ccl_group_end() == CCL_OK, "ring: group_end: %s", ccl_comm_last_error(NULL));
    if (!sync_all(comms, "ring"))
        for (int r = 0; r < N; r++)
            check("ring", recv[r], n[(r + N - 1) % N], 1, (r + N - 1) % N, r);
    for (int r = 0; r < N; r++) {
        free(send[r]);
        free(recv[r]);
    }
    destroy(comms);
    if (failures == f0)
        printf("ok p2p ring in one group over every rank's comm (uneven, one empty)\n");
}

/* An all-to-all of point-to-point calls, self included, each rank its own group, with
 * `rounds` groups back to back (counts changing every round, no synchronization in
 * between) and `per_pair` messages per channel per group. heap_bytes small: messages
 * many slots long. */
static void all_to_all(const char *name, size_t heap_bytes, size_t scale, int rounds, int per_pair)
{
    int f0 = failures;
    ccl_comm_t *comms[N];
    if (init(comms, 20000, heap_bytes) != 0)
        return;
    int msgs = rounds * N * N * per_pair;
    int32_t **send = calloc((size_t)msgs, sizeof *send), **recv = calloc((size_t)msgs, sizeof *recv);
    size_t *cnt = calloc((size_t)msgs, sizeof *cnt);
    /* Message m = ((round * N + q) * N + p) * per_pair + k, from q to p. */
    for (int m = 0; m < msgs; m++) {
        int q = m / per_pair / N % N, p = m / per_pair % N;
        cnt[m] = (m * 7919 + q * 31 + p) % 5 == 0 ? 0 : scale * (size_t)(1 + (m * 104729) % 97);
        send[m] = filled(cnt[m], m, q, p);
        recv[m] = poisoned(cnt[m]);
    }
    for (int round = 0; round < rounds; round++)
        for (int r = 0; r < N; r++) {
            ccl_group_start();
            /* Receives first, then sends in reverse peer order: the order inside a
             * group does not matter. */
            for (int q = 0; q < N; q++)
                for (int k = 0; k < per_pair; k++) {
                    int m = ((round * N + q) * N + r) * per_pair + k;
                    EXPECT(ccl_recv(recv[m], cnt[m], CCL_I32, q, comms[r], NULL) == CCL_OK, "%s: recv: %s", name,
                           ccl_comm_last_error(comms[r]));
                }
            for (int p = N - 1; p >= 0; p--)
                for (int k = 0; k < per_pair; k++) {
                    int m = ((round * N + r) * N + p) * per_pair + k;
                    EXPECT(ccl_send(send[m], cnt[m], CCL_I32, p, comms[r], NULL) == CCL_OK, "%s: send: %s", name,
                           ccl_comm_last_error(comms[r]));
                }
            EXPECT(ccl_group_end() == CCL_OK, "%s: group_end: %s", name, ccl_comm_last_error(NULL));
        }
    if (!sync_all(comms, name))
        for (int m = 0; m < msgs; m++)
            if (check(name, recv[m], cnt[m], m, m / per_pair / N % N, m / per_pair % N) != 0)
                break;
    for (int m = 0; m < msgs; m++) {
        free(send[m]);
        free(recv[m]);
    }
    free(send);
    free(recv);
    free(cnt);
    destroy(comms);
    if (failures == f0)
        printf("ok p2p %s\n", name);
}

/* Sends and recvs outside any group: rank 0 to 1, then 1 back to 0 (f64). */
static void ungrouped(void)
{
    int f0 = failures;
    ccl_comm_t *comms[N];
    if (init(comms, 10000, 0) != 0)
        return;
    double a[100], b[101], c[101];
    for (int i = 0; i < 100; i++)
        a[i] = i * 0.5;
    b[100] = c[100] = -1;
    EXPECT(ccl_send(a, 100, CCL_F64, 1, comms[0], NULL) == CCL_OK, "ungrouped: send");
    EXPECT(ccl_recv(b, 100, CCL_F64, 0, comms[1], NULL) == CCL_OK, "ungrouped: recv");
    EXPECT(ccl_send(b, 100, CCL_F64, 0, comms[1], NULL) == CCL_OK, "ungrouped: send back");
    EXPECT(ccl_recv(c, 100, CCL_F64, 1, comms[0], NULL) == CCL_OK, "ungrouped: recv back");
    if (!sync_all(comms, "ungrouped"))
        EXPECT(!memcmp(a, c, sizeof a) && c[100] == -1, "ungrouped: the round trip changed the data");
    destroy(comms);
    if (failures == f0)
        printf("ok p2p calls outside groups (a round trip)\n");
}

/* Rank 1 receives 12 elements where rank 0 sends 10 (or i32 where it sends f32): rank 1
 * fails naming both calls and writes nothing, rank 0 fails naming rank 1. */
static void mismatch(int dtype_differs)
{
    int f0 = failures;
    const char *name = dtype_differs ? "dtype mismatch" : "count mismatch";
    ccl_comm_t *comms[N];
    if (init(comms, 10000, 0) != 0)
        return;
    int32_t *send = filled(10, 0, 0, 1), *recv = poisoned(12);
    ccl_group_start();
    ccl_send(send, 10, dtype_differs ? CCL_F32 : CCL_I32, 1, comms[0], NULL);
    ccl_group_end();
    ccl_group_start();
    ccl_recv(recv, dtype_differs ? 10 : 12, CCL_I32, 0, comms[1], NULL);
    ccl_group_end();
    ccl_result_t r1 = ccl_comm_synchronize(comms[1]), r0 = ccl_comm_synchronize(comms[0]);
    const char *m1 = ccl_comm_last_error(comms[1]);
    const char *want = dtype_differs ? "ccl_send (call 1 of 1 of its group) to rank 1, 10 f32"
                                     : "ccl_send (call 1 of 1 of its group) to rank 1, 10 i32";
    EXPECT(r1 == CCL_ERR_INVALID_ARGUMENT && strstr(m1, "ccl_recv (call 1 of 1 of its group) from rank 0") &&
               strstr(m1, want) && strstr(m1, "nothing was received"),
           "%s: rank 1 got %s: %s", name, ccl_result_string(r1), m1);
    EXPECT(r0 == CCL_ERR_PEER_FAILED && strstr(ccl_comm_last_error(comms[0]), "rank 1 failed"),
           "%s: rank 0 got %s: %s", name, ccl_result_string(r0), ccl_comm_last_error(comms[0]));
    for (int i = 0; i <= 12; i++)
        if (recv[i] != POISON) {
            EXPECT(0, "%s: rank 1's buffer was written (element %d)", name, i);
            break;
        }
    free(send);
    free(recv);
    destroy(comms);
    if (failures == f0)
        printf("ok p2p %s: the receiver names both calls, writes nothing\n", name);
}

/* A send nobody receives, then a recv nobody sends: each times out naming itself. */
static void unmatched(int recv_side)
{
    int f0 = failures;
    const char *name = recv_side ? "unmatched recv" : "unmatched send";
    ccl_comm_t *comms[N];
    if (init(comms, 300, 0) != 0)
        return;
    int32_t buf[8] = {0};
    int me = recv_side ? 2 : 0, peer = recv_side ? 3 : 1;
    ccl_group_start();
    if (recv_side)
        ccl_recv(buf, 8, CCL_I32, peer, comms[me], NULL);
    else
        ccl_send(buf, 8, CCL_I32, peer, comms[me], NULL);
    ccl_group_end();
    ccl_result_t r = ccl_comm_synchronize(comms[me]);
    const char *msg = ccl_comm_last_error(comms[me]);
    char want[128];
    snprintf(want, sizeof want, "rank %d has made no matching %s", peer, recv_side ? "ccl_send" : "ccl_recv");
    EXPECT(r == CCL_ERR_TIMEOUT && strstr(msg, want) && strstr(msg, recv_side ? "ccl_recv (call 1 of 1" :
                                                                                "ccl_send (call 1 of 1"),
           "%s: got %s: %s", name, ccl_result_string(r), msg);
    destroy(comms);
    if (failures == f0)
        printf("ok p2p %s: a timeout naming the call and its peer\n", name);
}

static void argument_errors(void)
{
    int f0 = failures;
    ccl_comm_t *comms[N];
    if (init(comms, 10000, 0) != 0)
        return;
    int32_t buf[4];
    EXPECT(ccl_send(buf, 4, CCL_I32, N, comms[0], NULL) == CCL_ERR_INVALID_ARGUMENT &&
               strstr(ccl_comm_last_error(comms[0]), "argument 'peer' is 4; the comm's ranks are 0..3"),
           "peer out of range: %s", ccl_comm_last_error(comms[0]));
    EXPECT(ccl_recv(NULL, 4, CCL_I32, 1, comms[0], NULL) == CCL_ERR_INVALID_ARGUMENT &&
               strstr(ccl_comm_last_error(comms[0]), "argument 'buf' is NULL"),
           "NULL buf: %s", ccl_comm_last_error(comms[0]));
    EXPECT(ccl_send(buf, 4, (ccl_dtype_t)99, 1, comms[0], NULL) == CCL_ERR_INVALID_ARGUMENT,
           "bad dtype accepted");
    EXPECT(ccl_send((char *)buf + 1, 2, CCL_I32, 1, comms[0], NULL) == CCL_ERR_INVALID_ARGUMENT &&
               strstr(ccl_comm_last_error(comms[0]), "not aligned"),
           "misaligned buf: %s", ccl_comm_last_error(comms[0]));
    EXPECT(ccl_send(buf, 4, CCL_I32, 1, NULL, NULL) == CCL_ERR_INVALID_ARGUMENT, "NULL comm accepted");
    EXPECT(ccl_recv(NULL, 0, CCL_I32, 1, comms[0], NULL) == CCL_OK &&
               ccl_send(NULL, 0, CCL_I32, 0, comms[1], NULL) == CCL_OK,
           "zero-size calls with NULL buffers: %s", ccl_comm_last_error(comms[0]));
    EXPECT(ccl_group_end() == CCL_ERR_INVALID_USAGE && strstr(ccl_comm_last_error(NULL), "no group is open"),
           "group_end without start: %s", ccl_comm_last_error(NULL));
    EXPECT(ccl_group_start() == CCL_OK && ccl_group_end() == CCL_OK, "an empty group: %s", ccl_comm_last_error(NULL));
    /* A call failing inside a group: nothing launches, group_end names it. */
    ccl_group_start();
    ccl_group_start(); /* nested: only the outermost end launches */
    EXPECT(ccl_send(buf, 4, CCL_I32, 1, comms[0], NULL) == CCL_OK, "held send");
    EXPECT(ccl_recv(buf, 4, CCL_I32, -1, comms[0], NULL) == CCL_ERR_INVALID_ARGUMENT, "bad peer in a group");
    EXPECT(ccl_group_end() == CCL_OK, "inner group_end");
    ccl_result_t r = ccl_group_end();
    EXPECT(r == CCL_ERR_INVALID_USAGE && strstr(ccl_comm_last_error(NULL), "call 2 of the group failed") &&
               strstr(ccl_comm_last_error(NULL), "argument 'peer' is -1"),
           "failed call in a group: %s: %s", ccl_result_string(r), ccl_comm_last_error(NULL));
    /* Two streams on one comm in one group. */
    int s1, s2;
    ccl_group_start();
    ccl_send(buf, 4, CCL_I32, 1, comms[0], &s1);
    ccl_recv(buf, 4, CCL_I32, 1, comms[0], &s2);
    r = ccl_group_end();
    EXPECT(r == CCL_ERR_INVALID_ARGUMENT && strstr(ccl_comm_last_error(NULL), "share a stream"),
           "two streams: %s: %s", ccl_result_string(r), ccl_comm_last_error(NULL));
    /* Nothing of the above was sent: the comms still work. */
    EXPECT(sync_all(comms, "after argument errors") == 0, "a refused call left work behind");
    destroy(comms);
    if (failures == f0)
        printf("ok p2p argument errors (peer, buf, dtype, alignment, comm, groups, streams)\n");
}

/* Processes (shm heaps): a ring with uneven sizes, three rounds back to back. */
static int proc_child(int rank, int arg)
{
    CclEnvBoot *eb;
    ccl_bootstrap_t boot;
    char err[512];
    if (ccl__env_boot_open(&eb, &boot, 10000, err, sizeof err) != 0) {
        printf("FAIL p2p: processes: rank %d: bootstrap: %s\n", rank, err);
        return 1;
    }
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .timeout_ms = 10000, .heap_bytes = 8 << 20};
    ccl_comm_t *comm;
    if (ccl_comm_init_rank(&comm, &boot, 0, &cfg) != CCL_OK) {
        printf("FAIL p2p: processes: rank %d: init: %s\n", rank, ccl_comm_last_error(NULL));
        ccl__env_boot_close(eb);
        return 1;
    }
    int bad = 0, to = (rank + 1) % N, from = (rank + N - 1) % N;
    int32_t *send[3], *recv[3];
    for (int k = 0; k < 3; k++) {
        send[k] = filled(50000 * (size_t)(rank + k), k, rank, to);
        recv[k] = poisoned(50000 * (size_t)(from + k));
        ccl_group_start();
        ccl_recv(recv[k], 50000 * (size_t)(from + k), CCL_I32, from, comm, NULL);
        ccl_send(send[k], 50000 * (size_t)(rank + k), CCL_I32, to, comm, NULL);
        bad |= ccl_group_end() != CCL_OK;
    }
    if (bad || ccl_comm_synchronize(comm) != CCL_OK) {
        printf("FAIL p2p: processes: rank %d: %s\n", rank, ccl_comm_last_error(comm));
        bad = 1;
    }
    for (int k = 0; k < 3; k++) {
        bad |= !bad && check("processes", recv[k], 50000 * (size_t)(from + k), k, from, rank) != 0;
        free(send[k]);
        free(recv[k]);
    }
    ccl_comm_destroy(comm);
    ccl__env_boot_close(eb);
    return bad || failures;
}

static void processes(void)
{
    int codes[N], bad = 0;
    forked_ranks_run("p2p-test", N, proc_child, 0, codes);
    for (int r = 0; r < N; r++)
        bad |= codes[r] != 0;
    if (!bad)
        printf("ok p2p ring in processes (messages up to 300000 elements, 3 groups back to back)\n");
    failures += bad;
}

int main(void)
{
    ring();
    all_to_all("all-to-all with self, uneven and zero sizes", 0, 1, 1, 1);
    all_to_all("all-to-all of messages many slots long (4 MiB heap)", 4 << 20, 3000, 1, 1);
    all_to_all("6 groups back to back, 3 messages per channel per group", 0, 11, 6, 3);
    ungrouped();
    mismatch(0);
    mismatch(1);
    unmatched(0);
    unmatched(1);
    argument_errors();
    processes();
    return failures ? 1 : 0;
}
