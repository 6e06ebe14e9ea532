/* p2p_gpu: ccl_send, ccl_recv and groups on the GPU backend, every byte checked.
 *
 *   p2p_gpu N
 *
 * N ranks in one process (ccl_comm_init_all, ranks beyond the GPU count share GPUs):
 *  - ring: a thread per rank, each a group {send right, recv left}, messages of uneven
 *    sizes many slots long, 5 groups back to back without synchronization;
 *  - all-to-all: one thread, one group spanning every rank's comm, self included, a
 *    quarter of the messages empty, two messages per channel;
 *  - sizes: a ring exchange at every size where the kernel changes path or wraps (0, 1,
 *    odd counts, the largest LL message +-1, 8 chunks of 4 KB +-1, a slot's payload +-1,
 *    a row of lanes +-1,
 *    every slot of a channel +-1, the smallest direct receive +-1, several times every
 *    slot), from and into buffers 0 to 15 bytes off 16-byte alignment, with three kinds
 *    of buffers: both from ccl_mem_alloc (the larger sizes go straight into the
 *    receiver's buffer), both from cuMemAlloc (through the channel's slots), and a
 *    cuMemAlloc send into a ccl_mem_alloc receive; the bytes around every receive
 *    buffer must stay untouched;
 *  - 256 MB: one ring exchange with each kind of buffer;
 *  - many: ranks 0 and 1 exchange 64 messages each way in one group (128 calls a rank),
 *    of every path and both kinds of buffer;
 *  - graph: a ring group captured into a CUDA graph on each rank's stream, replayed 3
 *    times with new data each time; then a group of LL, slot and direct messages, both
 *    kinds of buffer, the same way;
 *  - mismatches (on fresh comms): counts of an LL message, counts of a direct one (the
 *    receive buffer stays untouched), dtypes of equal byte counts: the receiver fails
 *    naming both calls, the sender fails too;
 *  - unmatched calls (on fresh comms, short timeout): a send, a direct-sized send and a
 *    recv time out naming themselves.
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
#include "p2p_pattern.h"

enum { MAXN = 8, ROUNDS = 5, GUARD = 64, POISON = 0xEE };

static int failures;

#define FAIL(...)                       \
    do {                                \
        printf("FAIL p2p-gpu/" __VA_ARGS__); \
        printf("\n");                   \
        fflush(stdout);                 \
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

/* ---- device buffers of either kind, filled and checked byte by byte ---- */

/* A buffer from ccl_mem_alloc (symmetric: peers reach it) or cuMemAlloc (plain). */
typedef struct {
    ccl_comm_t *comm;
    int plain;
    char *dev;
    size_t bytes;
} Buf;

static int buf_alloc(ccl_comm_t *comm, int plain, size_t bytes, Buf *b)
{
    *b = (Buf){.comm = comm, .plain = plain, .bytes = bytes};
    if (plain) {
        CUdeviceptr d;
        ccl__gpu_make_current(comm);
        if (ccl__cu.MemAlloc(&d, bytes) != CUDA_SUCCESS) {
            FAIL("cuMemAlloc of %zu bytes failed", bytes);
            return -1;
        }
        b->dev = (char *)(uintptr_t)d;
        return 0;
    }
    if (ccl_mem_alloc(comm, (void **)&b->dev, bytes) != CCL_OK) {
        FAIL("ccl_mem_alloc of %zu bytes: %s", bytes, ccl_comm_last_error(comm));
        return -1;
    }
    return 0;
}

/* Only once every rank's work is done: cuMemFree waits for the GPU. */
static void buf_free(Buf *b)
{
    if (!b->dev)
        return;
    if (b->plain) {
        ccl__gpu_make_current(b->comm);
        ccl__cu.MemFree((CUdeviceptr)(uintptr_t)b->dev);
    } else {
        ccl_mem_free(b->comm, b->dev);
    }
    b->dev = NULL;
}

/* The whole buffer POISON, then message (tag, q) at byte `at` when n > 0 and fill. */
static int buf_fill(Buf *b, size_t at, size_t n, int tag, int q, int fill)
{
    unsigned char *h = malloc(b->bytes);
    if (!h)
        return -1;
    memset(h, POISON, b->bytes);
    for (size_t i = 0; fill && i < n; i++)
        h[at + i] = pat(tag, q, i);
    int r = ccl_mem_copy(b->comm, b->dev, h, b->bytes) == CCL_OK ? 0 : -1;
    free(h);
    if (r)
        FAIL("filling a buffer: %s", ccl_comm_last_error(b->comm));
    return r;
}

/* 0 when bytes [at, at + n) hold message (tag, q) and every other byte is POISON. */
static int buf_check(Buf *b, size_t at, size_t n, int tag, int q, const char *what)
{
    unsigned char *h = malloc(b->bytes);
    if (!h || ccl_mem_copy(b->comm, h, b->dev, b->bytes) != CCL_OK) {
        FAIL("%s: copy back: %s", what, ccl_comm_last_error(b->comm));
        free(h);
        return -1;
    }
    int r = 0;
    for (size_t i = 0; i < b->bytes && !r; i++) {
        int in = i >= at && i < at + n;
        unsigned char want = in ? pat(tag, q, i - at) : POISON;
        if (h[i] != want) {
            FAIL("%s: byte %zu of the %zu-byte message from rank %d at offset %zu %s is 0x%02x, expected 0x%02x",
                 what, in ? i - at : i, n, q, at, in ? "" : "(outside the message)", h[i], want);
            r = -1;
        }
    }
    free(h);
    return r;
}

static int N;
static ccl_comm_t *comms[MAXN];

/* The sizes where the kernel changes path (gpu/p2p.c, ccl__gpu_p2p_sizes). */
static size_t payload, ll_max, direct_min, lanes, slots;

/* ---- ring: the existing uneven messages, 5 groups back to back ---- */

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

static void run_ranks(void *(*fn)(void *))
{
    pthread_t t[MAXN];
    for (int r = 0; r < N; r++)
        pthread_create(&t[r], NULL, fn, (void *)(intptr_t)r);
    for (int r = 0; r < N; r++)
        pthread_join(t[r], NULL);
}

static void ring(void)
{
    int f0 = failures;
    run_ranks(ring_rank);
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

/* ---- ring exchanges of bytes, any size, offsets and buffer kinds ---- */

/* Buffer kinds: send and receive buffer plain (cuMemAlloc) or not (ccl_mem_alloc). */
static const struct {
    int send_plain, recv_plain;
    const char *name;
} kinds[] = {{0, 0, "symmetric"}, {1, 1, "plain"}, {1, 0, "plain-to-symmetric"}};
enum { NKINDS = 3 };

/* One exchange: every rank sends `bytes` at send[r] + src_off to its right and receives
 * its left's at recv[r] + dst_off, in one group per rank on a thread each. */
static struct {
    Buf *send, *recv;
    size_t bytes, src_off, dst_off;
    int tag;
} xr;

static void *xr_rank(void *arg)
{
    int r = (int)(intptr_t)arg, to = (r + 1) % N, from = (r + N - 1) % N;
    ccl_group_start();
    if (ccl_send(xr.send[r].dev + xr.src_off, xr.bytes, CCL_U8, to, comms[r], NULL) != CCL_OK ||
        ccl_recv(xr.recv[r].dev + xr.dst_off, xr.bytes, CCL_U8, from, comms[r], NULL) != CCL_OK)
        FAIL("exchange: rank %d: %s", r, ccl_comm_last_error(comms[r]));
    if (ccl_group_end() != CCL_OK)
        FAIL("exchange: rank %d: group_end: %s", r, ccl_comm_last_error(NULL));
    if (ccl_comm_synchronize(comms[r]) != CCL_OK)
        FAIL("exchange: rank %d: %s", r, ccl_comm_last_error(comms[r]));
    return NULL;
}

/* Runs one exchange over send[] and recv[] (each at least bytes + 16 + GUARD long) and
 * checks every rank's receive buffer; 0 when right. */
static int exchange(Buf *send, Buf *recv, size_t bytes, size_t src_off, size_t dst_off, int tag, const char *what)
{
    int f0 = failures;
    xr.send = send, xr.recv = recv, xr.bytes = bytes, xr.src_off = src_off, xr.dst_off = dst_off, xr.tag = tag;
    for (int r = 0; r < N; r++)
        if (buf_fill(&send[r], src_off, bytes, tag, r, 1) != 0 || buf_fill(&recv[r], 0, 0, 0, 0, 0) != 0)
            return -1;
    run_ranks(xr_rank);
    for (int r = 0; r < N && failures == f0; r++) {
        char w[160];
        snprintf(w, sizeof w, "%s: rank %d, %zu bytes, send at +%zu, recv at +%zu", what, r, bytes, src_off, dst_off);
        buf_check(&recv[r], dst_off, bytes, tag, (r + N - 1) % N, w);
    }
    return failures == f0 ? 0 : -1;
}

static void sizes(void)
{
    const size_t row = lanes * payload, all = lanes * slots * payload;
    const size_t list[] = {0, 1, 3, 15, 16, 17, 255, 4097, ll_max - 1, ll_max, ll_max + 1, 8 * 4096 - 1, 8 * 4096 + 1,
                           payload - 1, payload,
                           payload + 1, row - 1, row, row + 1, all - 1, all + 1, direct_min - 1, direct_min,
                           direct_min + 1, ((size_t)1 << 20) + 3, 5 * all + 7};
    static const size_t offs[][2] = {{0, 0}, {1, 0}, {0, 1}, {3, 7}, {8, 8}, {15, 1}, {4, 12}, {9, 0}};
    const size_t n = sizeof list / sizeof *list, most = 5 * all + 7 + 16 + GUARD;
    for (int k = 0; k < NKINDS; k++) {
        int f0 = failures;
        Buf send[MAXN] = {{0}}, recv[MAXN] = {{0}};
        for (int r = 0; r < N; r++)
            if (buf_alloc(comms[r], kinds[k].send_plain, most, &send[r]) != 0 ||
                buf_alloc(comms[r], kinds[k].recv_plain, most, &recv[r]) != 0)
                goto out;
        for (size_t i = 0; i < n && failures == f0; i++) {
            const size_t *o = offs[(i + 3 * (size_t)k) % 8];
            char what[64];
            snprintf(what, sizeof what, "sizes/%s", kinds[k].name);
            exchange(send, recv, list[i], o[0], o[1], (int)i + 1, what);
        }
        if (failures == f0)
            printf("ok p2p-gpu/sizes N=%d %s (%zu sizes from 0 to %zu bytes: LL up to %zu, slots of %zu x %zu lanes x %zu, "
                   "direct from %zu; misaligned both ends)\n", N, kinds[k].name, n, 5 * all + 7, ll_max, payload, lanes,
                   slots, direct_min);
    out:
        for (int r = 0; r < N; r++) {
            buf_free(&send[r]);
            buf_free(&recv[r]);
        }
    }
}

static void big(void)
{
    const size_t bytes = ((size_t)256 << 20) + 5;
    for (int k = 0; k < 2; k++) {
        int f0 = failures;
        Buf send[MAXN] = {{0}}, recv[MAXN] = {{0}};
        for (int r = 0; r < N; r++)
            if (buf_alloc(comms[r], kinds[k].send_plain, bytes + 16 + GUARD, &send[r]) != 0 ||
                buf_alloc(comms[r], kinds[k].recv_plain, bytes + 16 + GUARD, &recv[r]) != 0)
                goto out;
        char what[64];
        snprintf(what, sizeof what, "256MB/%s", kinds[k].name);
        exchange(send, recv, bytes, k ? 0 : 3, k ? 0 : 8, 100 + k, what);
        if (failures == f0)
            printf("ok p2p-gpu/256MB N=%d %s (%zu bytes around the ring)\n", N, kinds[k].name, bytes);
    out:
        for (int r = 0; r < N; r++) {
            buf_free(&send[r]);
            buf_free(&recv[r]);
        }
    }
}

/* ---- many: 64 messages each way between ranks 0 and 1, one group ---- */

enum { MANY = 64 };
static Buf many_send[2][MANY], many_recv[2][MANY];

static size_t many_bytes(int k)
{
    const size_t s[] = {0, 1, 100, ll_max, ll_max + 1, payload + 3, 3 * payload, direct_min, direct_min + 17,
                        ((size_t)1 << 20) + 1};
    return s[k % 10];
}

static void *many_rank(void *arg)
{
    int r = (int)(intptr_t)arg, o = 1 - r;
    ccl_group_start();
    for (int k = 0; k < MANY; k++) {
        /* Sends and receives interleaved, a receive first every other time. */
        int rf = (k + r) % 2;
        for (int x = 0; x < 2; x++)
            if ((x == rf ? ccl_recv(many_recv[r][k].dev + k % 16, many_bytes(k), CCL_U8, o, comms[r], NULL)
                         : ccl_send(many_send[r][k].dev + k % 7, many_bytes(k), CCL_U8, o, comms[r], NULL)) != CCL_OK)
                FAIL("many: rank %d: %s", r, ccl_comm_last_error(comms[r]));
    }
    if (ccl_group_end() != CCL_OK)
        FAIL("many: rank %d: group_end: %s", r, ccl_comm_last_error(NULL));
    if (ccl_comm_synchronize(comms[r]) != CCL_OK)
        FAIL("many: rank %d: %s", r, ccl_comm_last_error(comms[r]));
    return NULL;
}

static void many(void)
{
    int f0 = failures;
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < MANY; k++) {
            size_t b = many_bytes(k) + 16 + GUARD;
            if (buf_alloc(comms[r], k % 3 == 1, b, &many_send[r][k]) != 0 ||
                buf_alloc(comms[r], k % 4 == 2, b, &many_recv[r][k]) != 0 ||
                buf_fill(&many_send[r][k], (size_t)k % 7, many_bytes(k), 200 + k, r, 1) != 0 ||
                buf_fill(&many_recv[r][k], 0, 0, 0, 0, 0) != 0)
                goto out;
        }
    pthread_t t[2];
    for (int r = 0; r < 2; r++)
        pthread_create(&t[r], NULL, many_rank, (void *)(intptr_t)r);
    for (int r = 0; r < 2; r++)
        pthread_join(t[r], NULL);
    for (int r = 0; r < 2 && failures == f0; r++)
        for (int k = 0; k < MANY && failures == f0; k++) {
            char what[64];
            snprintf(what, sizeof what, "many: rank %d, message %d", r, k);
            buf_check(&many_recv[r][k], (size_t)k % 16, many_bytes(k), 200 + k, 1 - r, what);
        }
    if (failures == f0)
        printf("ok p2p-gpu/many N=%d (ranks 0 and 1: %d messages each way in one group, 0 to %zu bytes, both kinds "
               "of buffer)\n", N, MANY, many_bytes(9));
out:
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < MANY; k++) {
            buf_free(&many_send[r][k]);
            buf_free(&many_recv[r][k]);
        }
}

/* ---- graphs ---- */

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
    run_ranks(graph_rank);
    for (int r = 0; r < N; r++)
        if (ccl_comm_synchronize(comms[r]) != CCL_OK)
            FAIL("graph: rank %d: %s", r, ccl_comm_last_error(comms[r]));
    if (failures == f0)
        printf("ok p2p-gpu/graph N=%d (a ring group captured on each rank's stream, replayed 3 times)\n", N);
}

/* A captured ring group of three messages a rank: LL, through the slots, direct. */
enum { GMSGS = 3 };
static Buf gsend[MAXN][GMSGS], grecv[MAXN][GMSGS];
static pthread_barrier_t gbar;

static size_t gbytes(int m)
{
    return m == 0 ? 1000 : m == 1 ? 3 * payload + 5 : direct_min + ((size_t)1 << 20) + 3;
}

static void *graph_mixed_rank(void *arg)
{
    int r = (int)(intptr_t)arg, to = (r + 1) % N, from = (r + N - 1) % N;
    ccl__gpu_make_current(comms[r]);
    CUstream s;
    CUgraph graph;
    CUgraphExec exec;
    int ok = ccl__cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS;
    if (ok) {
        ccl__cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED);
        ccl_group_start();
        for (int m = 0; m < GMSGS; m++) {
            ccl_send(gsend[r][m].dev + m, gbytes(m), CCL_U8, to, comms[r], s);
            ccl_recv(grecv[r][m].dev + 2 * m, gbytes(m), CCL_U8, from, comms[r], s);
        }
        ccl_result_t res = ccl_group_end();
        CUresult end = ccl__cu.StreamEndCapture(s, &graph);
        ok = res == CCL_OK && end == CUDA_SUCCESS && ccl__cu.GraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS;
        if (!ok)
            FAIL("graph-mixed: rank %d: capture: %s (%s)", r, ccl_comm_last_error(NULL), ccl__cuda_error(end));
    }
    for (int k = 1; k <= 3; k++) {
        /* Every rank's buffers are filled before any rank replays. */
        for (int m = 0; ok && m < GMSGS; m++)
            ok = buf_fill(&gsend[r][m], (size_t)m, gbytes(m), 300 + 10 * k + m, r, 1) == 0 &&
                 buf_fill(&grecv[r][m], 0, 0, 0, 0, 0) == 0;
        pthread_barrier_wait(&gbar);
        if (ok && (ccl__cu.GraphLaunch(exec, s) != CUDA_SUCCESS || ccl__cu.StreamSynchronize(s) != CUDA_SUCCESS)) {
            FAIL("graph-mixed: rank %d: replay %d: %s", r, k, ccl_comm_last_error(comms[r]));
            ok = 0;
        }
        pthread_barrier_wait(&gbar);
        for (int m = 0; ok && m < GMSGS; m++) {
            char what[64];
            snprintf(what, sizeof what, "graph-mixed: rank %d, replay %d, message %d", r, k, m);
            ok = buf_check(&grecv[r][m], 2 * (size_t)m, gbytes(m), 300 + 10 * k + m, from, what) == 0;
        }
    }
    if (ok) {
        ccl__cu.GraphExecDestroy(exec);
        ccl__cu.GraphDestroy(graph);
    }
    ccl__cu.StreamDestroy(s);
    return NULL;
}

static void graph_mixed(void)
{
    int f0 = failures;
    for (int r = 0; r < N; r++)
        for (int m = 0; m < GMSGS; m++)
            if (buf_alloc(comms[r], m == 1, gbytes(m) + 16 + GUARD, &gsend[r][m]) != 0 ||
                buf_alloc(comms[r], m == 1, gbytes(m) + 16 + GUARD, &grecv[r][m]) != 0)
                goto out;
    pthread_barrier_init(&gbar, NULL, (unsigned)N);
    run_ranks(graph_mixed_rank);
    pthread_barrier_destroy(&gbar);
    for (int r = 0; r < N; r++)
        if (ccl_comm_synchronize(comms[r]) != CCL_OK)
            FAIL("graph-mixed: rank %d: %s", r, ccl_comm_last_error(comms[r]));
    if (failures == f0)
        printf("ok p2p-gpu/graph-mixed N=%d (LL, slot and direct messages in one captured group, replayed 3 times)\n",
               N);
out:
    for (int r = 0; r < N; r++)
        for (int m = 0; m < GMSGS; m++) {
            buf_free(&gsend[r][m]);
            buf_free(&grecv[r][m]);
        }
}

/* ---- failures, on fresh comms ---- */

static int fresh(ccl_comm_t **c, int timeout_ms)
{
    ccl_config_t cfg = {.backend = CCL_BACKEND_GPU, .timeout_ms = timeout_ms};
    if (ccl_comm_init_all(c, N, NULL, &cfg) != CCL_OK) {
        FAIL("init: %s", ccl_comm_last_error(NULL));
        return -1;
    }
    return 0;
}

static void destroy(ccl_comm_t **c)
{
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(c[r]);
}

/* Rank 0 sends `scount` elements of stype, rank 1 receives rcount of rtype (outside
 * groups, buffers from ccl_mem_alloc): the receiver names both calls and receives
 * nothing, the sender fails too. */
static void mismatch(const char *name, size_t scount, ccl_dtype_t stype, size_t rcount, ccl_dtype_t rtype)
{
    int f0 = failures;
    ccl_comm_t *c[MAXN];
    if (fresh(c, 20000) != 0)
        return;
    Buf s, rv;
    size_t sb = scount * ccl_dtype_size(stype), rb = rcount * ccl_dtype_size(rtype);
    if (buf_alloc(c[0], 0, sb + GUARD, &s) == 0 && buf_alloc(c[1], 0, rb + GUARD, &rv) == 0 &&
        buf_fill(&s, 0, sb, 1, 0, 1) == 0 && buf_fill(&rv, 0, 0, 0, 0, 0) == 0) {
        ccl_send(s.dev, scount, stype, 1, c[0], NULL);
        ccl_recv(rv.dev, rcount, rtype, 0, c[1], NULL);
        ccl_result_t r1 = ccl_comm_synchronize(c[1]), r0 = ccl_comm_synchronize(c[0]);
        const char *m1 = ccl_comm_last_error(c[1]);
        char want_r[96], want_s[96];
        snprintf(want_r, sizeof want_r, "ccl_recv (call 1 of 1 of its group) from rank 0, %zu %s", rcount,
                 ccl_dtype_name(rtype));
        snprintf(want_s, sizeof want_s, "ccl_send (call 1 of 1 of its group) to rank 1, %zu %s", scount,
                 ccl_dtype_name(stype));
        if (r1 != CCL_ERR_INVALID_ARGUMENT || !strstr(m1, want_r) || !strstr(m1, want_s))
            FAIL("mismatch/%s: rank 1 got %s: %s", name, ccl_result_string(r1), m1);
        if (r0 == CCL_OK)
            FAIL("mismatch/%s: rank 0's send succeeded", name);
        /* Nothing received: the receive buffer is as it was (the comms are stopped, so
         * the copy goes through the driver). */
        unsigned char *h = malloc(rv.bytes);
        ccl__gpu_make_current(c[1]);
        if (h && ccl__cu.MemcpyDtoH(h, (CUdeviceptr)(uintptr_t)rv.dev, rv.bytes) == CUDA_SUCCESS) {
            for (size_t i = 0; i < rv.bytes; i++)
                if (h[i] != POISON) {
                    FAIL("mismatch/%s: byte %zu of the receive buffer was written", name, i);
                    break;
                }
        } else {
            FAIL("mismatch/%s: reading the receive buffer back failed", name);
        }
        free(h);
    }
    destroy(c);
    if (failures == f0)
        printf("ok p2p-gpu/mismatch/%s: the receiver names both calls and receives nothing, the sender fails\n", name);
}

/* On fresh comms with a short timeout: rank 0 sends (or receives) `bytes` to (from)
 * rank 1, which makes no call. */
static void unmatched(const char *name, int recv_side, size_t bytes)
{
    int f0 = failures;
    ccl_comm_t *c[MAXN];
    if (fresh(c, 1500) != 0)
        return;
    Buf b;
    if (buf_alloc(c[0], 0, bytes + GUARD, &b) == 0) {
        ccl_result_t r = recv_side ? ccl_recv(b.dev, bytes, CCL_U8, 1, c[0], NULL)
                                   : ccl_send(b.dev, bytes, CCL_U8, 1, c[0], NULL);
        if (r == CCL_OK)
            r = ccl_comm_synchronize(c[0]);
        const char *m = ccl_comm_last_error(c[0]);
        char want[96];
        snprintf(want, sizeof want, "rank 1 has made no matching %s", recv_side ? "ccl_send" : "ccl_recv");
        if (r != CCL_ERR_TIMEOUT || !strstr(m, want) ||
            !strstr(m, recv_side ? "ccl_recv (call 1 of 1" : "ccl_send (call 1 of 1"))
            FAIL("unmatched/%s: rank 0 got %s: %s", name, ccl_result_string(r), m);
    }
    destroy(c);
    if (failures == f0)
        printf("ok p2p-gpu/unmatched/%s: a timeout naming it\n", name);
}

int main(int argc, char **argv)
{
    N = argc > 1 ? atoi(argv[1]) : 4;
    if (N < 2 || N > MAXN) {
        fprintf(stderr, "usage: p2p_gpu N (2..%d)\n", MAXN);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* 1 GiB of heap: the 256 MB messages between ccl_mem_alloc buffers (big) need two. */
    ccl_config_t cfg = {.backend = CCL_BACKEND_GPU, .timeout_ms = 20000, .heap_bytes = (size_t)1 << 30};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK) {
        const char *e = ccl_comm_last_error(NULL);
        if (strstr(e, "no GPU") || strstr(e, "libcuda")) {
            printf("skipped: %s\n", e);
            return 0;
        }
        FAIL("init: %s", e);
        return 1;
    }
    ccl__gpu_p2p_sizes(comms[0], &payload, &ll_max, &direct_min, &lanes, &slots);
    if (!payload) {
        FAIL("init: no point-to-point channels (payload 0)");
        return 1;
    }
    ring();
    all_to_all();
    sizes();
    big();
    many();
    graph_ring();
    graph_mixed();
    destroy(comms);
    mismatch("ll-count", 10, CCL_I32, 12, CCL_I32);
    mismatch("direct-count", 300000, CCL_F32, 300001, CCL_F32);
    mismatch("direct-dtype", (size_t)1 << 18, CCL_F32, (size_t)1 << 19, CCL_BF16);
    unmatched("send", 0, 400);
    unmatched("direct-send", 0, (size_t)4 << 20);
    unmatched("recv", 1, (size_t)4 << 20);
    return failures ? 1 : 0;
}
