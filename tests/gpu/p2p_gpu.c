/* p2p_gpu: ccl_send, ccl_recv and groups on the GPU backend, every element checked.
 *
 *   p2p_gpu N
 *
 * N ranks in one process (ccl_comm_init_all, ranks beyond the GPU count share GPUs):
 *  - ring: a thread per rank, each a group {send right, recv left}, messages of uneven
 *    sizes many slots long, 5 groups back to back without synchronization;
 *  - all-to-all: one thread, one group spanning every rank's comm, self included, a
 *    quarter of the messages empty, two messages per channel;
 *  - a ring group captured into a CUDA graph on each rank's stream, replayed 3 times with
 *    new data each time;
 *  - a count mismatch: the receiver fails naming both calls, the sender fails too;
 *  - an unmatched send: a timeout naming it.
 * Buffers are ccl_mem_alloc'd (device memory), filled and read with ccl_mem_copy.
 * Prints "ok p2p-gpu/..." or "FAIL p2p-gpu/...: why"; exits 1 on any failure. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccl.h"
#include "gpu/driver.h"
#include "gpu/gpu.h"
#include "internal.h"

enum { MAXN = 8, ROUNDS = 5 };

static int failures;

#define FAIL(...)                       \
    do {                                \
        printf("FAIL p2p-gpu/" __VA_ARGS__); \
        printf("\n");                   \
        failures++;                     \
    } while (0)

static int32_t val(int tag, int q, int p, size_t i)
{
    return (int32_t)(tag * 1000003 + q * 10007 + p * 101 + (int)(i % 9973));
}

/* A message's device buffer and its host image. */
typedef struct {
    int32_t *dev, *host;
    size_t n;
} Msg;

static int msg_make(ccl_comm_t *comm, Msg *m, size_t n, int tag, int q, int p, int fill)
{
    m->n = n;
    m->host = malloc(sizeof(int32_t) * (n + 1));
    if (ccl_mem_alloc(comm, (void **)&m->dev, sizeof(int32_t) * (n + 1)) != CCL_OK) {
        FAIL("alloc: %s", ccl_comm_last_error(comm));
        return -1;
    }
    for (size_t i = 0; i <= n; i++)
        m->host[i] = fill && i < n ? val(tag, q, p, i) : -7;
    return ccl_mem_copy(comm, m->dev, m->host, sizeof(int32_t) * (n + 1)) == CCL_OK ? 0 : -1;
}

/* 0 when the device buffer holds message (tag, q -> p) and the element after it is
 * untouched. */
static int msg_check(ccl_comm_t *comm, Msg *m, const char *what, int tag, int q, int p)
{
    if (ccl_mem_copy(comm, m->host, m->dev, sizeof(int32_t) * (m->n + 1)) != CCL_OK) {
        FAIL("%s: copy back: %s", what, ccl_comm_last_error(comm));
        return -1;
    }
    for (size_t i = 0; i < m->n; i++)
        if (m->host[i] != val(tag, q, p, i)) {
            FAIL("%s: message %d from rank %d to rank %d: element %zu is %d, expected %d", what, tag, q, p, i,
                 m->host[i], val(tag, q, p, i));
            return -1;
        }
    if (m->host[m->n] != -7) {
        FAIL("%s: message %d from rank %d to rank %d: the element past its end was written", what, tag, q, p);
        return -1;
    }
    return 0;
}

static void msg_free(ccl_comm_t *comm, Msg *m)
{
    ccl_mem_free(comm, m->dev);
    free(m->host);
}

static int N;
static ccl_comm_t *comms[MAXN];

static size_t ring_count(int r, int round)
{
    return (size_t)(r * 131071 + round * 40000 + 1000) % 700000;
}

static void *ring_rank(void *arg)
{
    int r = (int)(intptr_t)arg, to = (r + 1) % N, from = (r + N - 1) % N;
    Msg send[ROUNDS], recv[ROUNDS];
    for (int k = 0; k < ROUNDS; k++)
        if (msg_make(comms[r], &send[k], ring_count(r, k), k, r, to, 1) != 0 ||
            msg_make(comms[r], &recv[k], ring_count(from, k), k, from, r, 0) != 0)
            return NULL;
    for (int k = 0; k < ROUNDS; k++) {
        ccl_group_start();
        if (ccl_send(send[k].dev, send[k].n, CCL_I32, to, comms[r], NULL) != CCL_OK ||
            ccl_recv(recv[k].dev, recv[k].n, CCL_I32, from, comms[r], NULL) != CCL_OK)
            FAIL("ring: rank %d: %s", r, ccl_comm_last_error(comms[r]));
        if (ccl_group_end() != CCL_OK)
            FAIL("ring: rank %d: group_end: %s", r, ccl_comm_last_error(NULL));
    }
    if (ccl_comm_synchronize(comms[r]) != CCL_OK)
        FAIL("ring: rank %d: %s", r, ccl_comm_last_error(comms[r]));
    else
        for (int k = 0; k < ROUNDS; k++)
            if (msg_check(comms[r], &recv[k], "ring", k, from, r) != 0)
                break;
    for (int k = 0; k < ROUNDS; k++) {
        msg_free(comms[r], &send[k]);
        msg_free(comms[r], &recv[k]);
    }
    return NULL;
}

static void ring(void)
{
    int f0 = failures;
    pthread_t t[MAXN];
    for (int r = 0; r < N; r++)
        pthread_create(&t[r], NULL, ring_rank, (void *)(intptr_t)r);
    for (int r = 0; r < N; r++)
        pthread_join(t[r], NULL);
    if (failures == f0)
        printf("ok p2p-gpu/ring N=%d (a thread per rank, %d groups back to back, up to 700000 elements)\n", N, ROUNDS);
}

static void all_to_all(void)
{
    int f0 = failures;
    static Msg send[MAXN][MAXN][2], recv[MAXN][MAXN][2];
    for (int q = 0; q < N; q++)
        for (int p = 0; p < N; p++)
            for (int k = 0; k < 2; k++) {
                int tag = (q * N + p) * 2 + k;
                size_t n = tag % 4 == 3 ? 0 : (size_t)(tag * 7919) % 300000;
                if (msg_make(comms[q], &send[q][p][k], n, tag, q, p, 1) != 0 ||
                    msg_make(comms[p], &recv[p][q][k], n, tag, q, p, 0) != 0)
                    return;
            }
    ccl_group_start();
    for (int r = 0; r < N; r++)
        for (int p = 0; p < N; p++)
            for (int k = 0; k < 2; k++)
                if (ccl_recv(recv[r][p][k].dev, recv[r][p][k].n, CCL_I32, p, comms[r], NULL) != CCL_OK ||
                    ccl_send(send[r][p][k].dev, send[r][p][k].n, CCL_I32, p, comms[r], NULL) != CCL_OK)
                    FAIL("all-to-all: rank %d: %s", r, ccl_comm_last_error(comms[r]));
    if (ccl_group_end() != CCL_OK)
        FAIL("all-to-all: group_end: %s", ccl_comm_last_error(NULL));
    for (int r = 0; r < N; r++)
        if (ccl_comm_synchronize(comms[r]) != CCL_OK)
            FAIL("all-to-all: rank %d: %s", r, ccl_comm_last_error(comms[r]));
    for (int p = 0; p < N && failures == f0; p++)
        for (int q = 0; q < N; q++)
            for (int k = 0; k < 2; k++)
                msg_check(comms[p], &recv[p][q][k], "all-to-all", (q * N + p) * 2 + k, q, p);
    for (int q = 0; q < N; q++)
        for (int p = 0; p < N; p++)
            for (int k = 0; k < 2; k++) {
                msg_free(comms[q], &send[q][p][k]);
                msg_free(comms[p], &recv[p][q][k]);
            }
    if (failures == f0)
        printf("ok p2p-gpu/all-to-all N=%d (one thread, one group over every comm, self and empty messages)\n", N);
}

static size_t graph_count(int r)
{
    return 50000 + 30011 * (size_t)r;
}

static void *graph_rank(void *arg)
{
    int r = (int)(intptr_t)arg, to = (r + 1) % N, from = (r + N - 1) % N;
    ccl__gpu_make_current(comms[r]);
    CUstream s;
    CUgraph graph;
    CUgraphExec exec;
    Msg send, recv;
    if (msg_make(comms[r], &send, graph_count(r), 0, r, to, 1) != 0 ||
        msg_make(comms[r], &recv, graph_count(from), 0, from, r, 0) != 0 ||
        ccl__cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        FAIL("graph: rank %d: setup", r);
        return NULL;
    }
    ccl__cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED);
    ccl_group_start();
    ccl_send(send.dev, send.n, CCL_I32, to, comms[r], s);
    ccl_recv(recv.dev, recv.n, CCL_I32, from, comms[r], s);
    ccl_result_t res = ccl_group_end();
    CUresult end = ccl__cu.StreamEndCapture(s, &graph);
    if (res != CCL_OK || end != CUDA_SUCCESS || ccl__cu.GraphInstantiate(&exec, graph, 0) != CUDA_SUCCESS) {
        FAIL("graph: rank %d: capture: %s (%s)", r, ccl_comm_last_error(NULL), ccl__cuda_error(end));
        return NULL;
    }
    for (int k = 1; k <= 3; k++) {
        for (size_t i = 0; i < send.n; i++)
            send.host[i] = val(k, r, to, i);
        if (ccl_mem_copy(comms[r], send.dev, send.host, sizeof(int32_t) * send.n) != CCL_OK ||
            ccl__cu.GraphLaunch(exec, s) != CUDA_SUCCESS || ccl__cu.StreamSynchronize(s) != CUDA_SUCCESS) {
            FAIL("graph: rank %d: replay %d: %s", r, k, ccl_comm_last_error(comms[r]));
            break;
        }
        if (msg_check(comms[r], &recv, "graph", k, from, r) != 0)
            break;
    }
    ccl__cu.GraphExecDestroy(exec);
    ccl__cu.GraphDestroy(graph);
    ccl__cu.StreamDestroy(s);
    msg_free(comms[r], &send);
    msg_free(comms[r], &recv);
    return NULL;
}

static void graph_ring(void)
{
    int f0 = failures;
    pthread_t t[MAXN];
    for (int r = 0; r < N; r++)
        pthread_create(&t[r], NULL, graph_rank, (void *)(intptr_t)r);
    for (int r = 0; r < N; r++)
        pthread_join(t[r], NULL);
    for (int r = 0; r < N; r++)
        if (ccl_comm_synchronize(comms[r]) != CCL_OK)
            FAIL("graph: rank %d: %s", r, ccl_comm_last_error(comms[r]));
    if (failures == f0)
        printf("ok p2p-gpu/graph N=%d (a ring group captured on each rank's stream, replayed 3 times)\n", N);
}

/* Rank 1 receives 12 where rank 0 sends 10 (outside groups). */
static void mismatch(void)
{
    int f0 = failures;
    Msg s, rv;
    if (msg_make(comms[0], &s, 10, 0, 0, 1, 1) != 0 || msg_make(comms[1], &rv, 12, 0, 0, 1, 0) != 0)
        return;
    ccl_send(s.dev, 10, CCL_I32, 1, comms[0], NULL);
    ccl_recv(rv.dev, 12, CCL_I32, 0, comms[1], NULL);
    ccl_result_t r1 = ccl_comm_synchronize(comms[1]), r0 = ccl_comm_synchronize(comms[0]);
    const char *m1 = ccl_comm_last_error(comms[1]);
    if (r1 != CCL_ERR_INVALID_ARGUMENT || !strstr(m1, "ccl_recv (call 1 of 1 of its group) from rank 0, 12 i32") ||
        !strstr(m1, "ccl_send (call 1 of 1 of its group) to rank 1, 10 i32"))
        FAIL("mismatch: rank 1 got %s: %s", ccl_result_string(r1), m1);
    if (r0 == CCL_OK)
        FAIL("mismatch: rank 0's send succeeded");
    msg_free(comms[0], &s);
    msg_free(comms[1], &rv);
    if (failures == f0)
        printf("ok p2p-gpu/mismatch: the receiver names both calls\n");
}

/* On fresh comms with a short timeout: rank 0 sends to rank 1, which never receives. */
static void unmatched(void)
{
    int f0 = failures;
    ccl_config_t cfg = {.backend = CCL_BACKEND_GPU, .timeout_ms = 1500};
    ccl_comm_t *c[MAXN];
    if (ccl_comm_init_all(c, N, NULL, &cfg) != CCL_OK) {
        FAIL("unmatched: init: %s", ccl_comm_last_error(NULL));
        return;
    }
    Msg s;
    if (msg_make(c[0], &s, 100, 0, 0, 1, 1) == 0) {
        ccl_send(s.dev, 100, CCL_I32, 1, c[0], NULL);
        ccl_result_t r = ccl_comm_synchronize(c[0]);
        const char *m = ccl_comm_last_error(c[0]);
        if (r != CCL_ERR_TIMEOUT || !strstr(m, "rank 1 has made no matching ccl_recv"))
            FAIL("unmatched: rank 0 got %s: %s", ccl_result_string(r), m);
        msg_free(c[0], &s);
    }
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(c[r]);
    if (failures == f0)
        printf("ok p2p-gpu/unmatched send: a timeout naming it\n");
}

int main(int argc, char **argv)
{
    N = argc > 1 ? atoi(argv[1]) : 4;
    if (N < 2 || N > MAXN) {
        fprintf(stderr, "usage: p2p_gpu N (2..%d)\n", MAXN);
        return 2;
    }
    ccl_config_t cfg = {.backend = CCL_BACKEND_GPU, .timeout_ms = 20000};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK) {
        const char *e = ccl_comm_last_error(NULL);
        if (strstr(e, "no GPU") || strstr(e, "libcuda")) {
            printf("skipped: %s\n", e);
            return 0;
        }
        FAIL("init: %s", e);
        return 1;
    }
    ring();
    all_to_all();
    graph_ring();
    mismatch();
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(comms[r]);
    unmatched();
    return failures ? 1 : 0;
}
