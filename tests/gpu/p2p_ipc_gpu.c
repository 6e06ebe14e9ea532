/* p2p_ipc_gpu: point-to-point messages into ordinary receive buffers of another process,
 * which the sender writes directly once it has mapped their allocation (gpu/ipc.c).
 *
 *   mpirun -np N p2p_ipc_gpu          (one process per GPU, N >= 2)
 *
 * Every rank sends to rank + 1 and receives from rank - 1 in one group, both buffers
 * from cuMemAlloc (as a framework's tensors are), every byte of every receive
 * allocation checked (the bytes around the message must stay untouched):
 *  - sizes: around the smallest receive offered directly (-1, 0, +1 byte), 1 MB + 3 and
 *    64 MB, at receive offsets 0 to 15 bytes off 16-byte alignment, four rounds each:
 *    by the last round the sender has mapped every receive allocation of at least that
 *    size (and no more than one allocation more), and none of a smaller one;
 *  - again: a receive allocation freed and made again (a new allocation, often at the
 *    same address), four rounds: right, and no more than one more mapping;
 *  - graph: a ring group captured after warm-up calls, replayed 3 times with new data;
 *  - mismatch: on a fresh comm, rank 0 sends one element fewer than rank 1's receive
 *    into a buffer already mapped: rank 1 fails naming both calls, rank 0 fails, and the
 *    receive buffer stays untouched;
 *  - off: CCL_GPU_P2P_IPC=0 on a fresh comm: nothing mapped, the data right.
 * Prints "ok p2p-ipc/..." or "FAIL p2p-ipc/...: why"; exits 1 on any failure. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccl.h"
#include "gpu/driver.h"
#include "gpu/gpu.h"
#include "internal.h"
#include "p2p_pattern.h"

enum { GUARD = 64, POISON = 0xEE, ROUNDS = 4 };

static int failures, me, N;
static ccl_bootstrap_t boot;

#define FAIL(...)                                      \
    do {                                               \
        printf("FAIL p2p-ipc/rank%d/", me);            \
        printf(__VA_ARGS__);                           \
        printf("\n");                                  \
        fflush(stdout);                                \
        failures++;                                    \
    } while (0)

/* A cuMemAlloc buffer of `bytes` whose message lies at `at`. */
typedef struct {
    CUdeviceptr dev;
    size_t bytes, at;
} Buf;

static int buf_alloc(Buf *b, size_t msg, size_t at)
{
    *b = (Buf){.bytes = msg + at + GUARD, .at = at};
    if (ccl__cu.MemAlloc(&b->dev, b->bytes) != CUDA_SUCCESS) {
        FAIL("cuMemAlloc of %zu bytes failed", b->bytes);
        return -1;
    }
    return 0;
}

static void buf_free(Buf *b)
{
    if (b->dev)
        ccl__cu.MemFree(b->dev);
    b->dev = 0;
}

/* The whole buffer POISON, then message (tag, q) of n bytes at b->at when fill. */
static int buf_fill(Buf *b, size_t n, int tag, int q, int fill)
{
    unsigned char *h = malloc(b->bytes);
    if (!h)
        return -1;
    memset(h, POISON, b->bytes);
    for (size_t i = 0; fill && i < n; i++)
        h[b->at + i] = pat(tag, q, i);
    int r = ccl__cu.MemcpyHtoD(b->dev, h, b->bytes) == CUDA_SUCCESS ? 0 : -1;
    free(h);
    if (r)
        FAIL("filling a buffer failed");
    return r;
}

/* 0 when the message (tag, q) of n bytes is at b->at (fill: else nothing was written)
 * and every other byte is POISON. */
static int buf_check(const Buf *b, size_t n, int tag, int q, int fill, const char *what)
{
    unsigned char *h = malloc(b->bytes);
    if (!h || ccl__cu.MemcpyDtoH(h, b->dev, b->bytes) != CUDA_SUCCESS) {
        FAIL("%s: copying the receive buffer back failed", what);
        free(h);
        return -1;
    }
    int r = 0;
    for (size_t i = 0; i < b->bytes && !r; i++) {
        int in = fill && i >= b->at && i < b->at + n;
        unsigned char want = in ? pat(tag, q, i - b->at) : POISON;
        if (h[i] != want) {
            FAIL("%s: byte %zu of the %zu-byte receive allocation (message of %zu bytes from rank %d at %zu) is 0x%02x, "
                 "expected 0x%02x", what, i, b->bytes, n, q, b->at, h[i], want);
            r = -1;
        }
    }
    free(h);
    return r;
}

static int make_comm(ccl_comm_t **c, int timeout_ms)
{
    ccl_config_t cfg = {.backend = CCL_BACKEND_GPU, .timeout_ms = timeout_ms};
    int ngpu = 0;
    ccl__cu.DeviceGetCount(&ngpu);
    if (ccl_comm_init_rank(c, &boot, me % (ngpu ? ngpu : 1), &cfg) != CCL_OK) {
        FAIL("ccl_comm_init_rank: %s", ccl_comm_last_error(NULL));
        return -1;
    }
    ccl__gpu_make_current(*c);
    return 0;
}

/* One ring round: `bytes` from send to rank + 1, from rank - 1 into recv; checked. */
static int round_trip(ccl_comm_t *c, Buf *send, Buf *recv, size_t bytes, int tag, const char *what)
{
    int to = (me + 1) % N, from = (me + N - 1) % N;
    if (buf_fill(send, bytes, tag, me, 1) != 0 || buf_fill(recv, 0, 0, 0, 0) != 0)
        return -1;
    boot.barrier(boot.ctx);
    ccl_group_start();
    ccl_send((char *)(uintptr_t)send->dev + send->at, bytes, CCL_U8, to, c, NULL);
    ccl_recv((char *)(uintptr_t)recv->dev + recv->at, bytes, CCL_U8, from, c, NULL);
    ccl_result_t r = ccl_group_end();
    if (r == CCL_OK)
        r = ccl_comm_synchronize(c);
    if (r != CCL_OK) {
        FAIL("%s: %s", what, ccl_comm_last_error(c));
        return -1;
    }
    boot.barrier(boot.ctx);
    return buf_check(recv, bytes, tag, from, 1, what);
}

static void sizes(ccl_comm_t *c, size_t direct_min)
{
    const size_t sz[] = {direct_min - 1, direct_min, direct_min + 1, (1 << 20) + 3, (size_t)64 << 20};
    int from = (me + N - 1) % N, f0 = failures;
    for (size_t k = 0; k < sizeof sz / sizeof *sz; k++) {
        Buf send, recv;
        char what[96];
        snprintf(what, sizeof what, "sizes/%zu", sz[k]);
        if (buf_alloc(&send, sz[k], (k * 5) % 16) != 0 || buf_alloc(&recv, sz[k], (k * 7 + 3) % 16) != 0)
            return;
        int before = ccl__gpu_ipc_mapped(c, from, NULL);
        for (int t = 1; t <= ROUNDS && round_trip(c, &send, &recv, sz[k], t + 10 * (int)k, what) == 0; t++) {}
        int after = ccl__gpu_ipc_mapped(c, from, NULL), mapped = ccl__gpu_ipc_mapped(c, from, (void *)recv.dev);
        /* One mapping more, or as many where the allocation took a freed one's address. */
        if (sz[k] >= direct_min && (!mapped || after > before + 1))
            FAIL("%s: after %d rounds rank %d has %s this rank's receive allocation (mappings %d -> %d)", what, ROUNDS,
                 from, mapped ? "mapped" : "not mapped", before, after);
        if (sz[k] < direct_min && (mapped || after != before))
            FAIL("%s: a receive below the direct size (%zu) was offered: mappings %d -> %d", what, direct_min, before,
                 after);
        boot.barrier(boot.ctx);
        buf_free(&send);
        buf_free(&recv);
    }
    if (failures == f0)
        printf("ok p2p-ipc/sizes N=%d (%zu-1 B to 64 MB, misaligned, %d rounds each, mapped from the third)\n", N,
               direct_min, ROUNDS);
}

static void again(ccl_comm_t *c)
{
    int from = (me + N - 1) % N, f0 = failures;
    size_t bytes = (size_t)4 << 20;
    Buf send, recv;
    if (buf_alloc(&send, bytes, 0) != 0 || buf_alloc(&recv, bytes, 0) != 0)
        return;
    for (int t = 1; t <= ROUNDS && round_trip(c, &send, &recv, bytes, 100 + t, "again/first") == 0; t++) {}
    int before = ccl__gpu_ipc_mapped(c, from, NULL);
    CUdeviceptr old = recv.dev;
    boot.barrier(boot.ctx);
    buf_free(&recv);
    if (buf_alloc(&recv, bytes, 0) != 0)
        return;
    for (int t = 1; t <= ROUNDS && round_trip(c, &send, &recv, bytes, 200 + t, "again/second") == 0; t++) {}
    int after = ccl__gpu_ipc_mapped(c, from, NULL);
    if (after > before + (recv.dev != old) || !ccl__gpu_ipc_mapped(c, from, (void *)recv.dev))
        FAIL("again: the new allocation (%s address) is %s; mappings %d -> %d", recv.dev == old ? "the same" : "another",
             ccl__gpu_ipc_mapped(c, from, (void *)recv.dev) ? "mapped" : "not mapped", before, after);
    boot.barrier(boot.ctx);
    buf_free(&send);
    buf_free(&recv);
    if (failures == f0)
        printf("ok p2p-ipc/again N=%d (a receive allocation freed and made again%s)\n", N,
               recv.dev == old ? " at the same address" : "");
}

static void graph(ccl_comm_t *c)
{
    int to = (me + 1) % N, from = (me + N - 1) % N, f0 = failures;
    size_t bytes = ((size_t)3 << 20) + 5;
    Buf send, recv;
    CUstream s;
    CUgraph g;
    CUgraphExec exec;
    if (buf_alloc(&send, bytes, 3) != 0 || buf_alloc(&recv, bytes, 9) != 0 ||
        ccl__cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
        return;
    for (int t = 1; t <= 3 && round_trip(c, &send, &recv, bytes, 300 + t, "graph/warm-up") == 0; t++) {}
    boot.barrier(boot.ctx);
    ccl__cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED);
    ccl_group_start();
    ccl_send((char *)(uintptr_t)send.dev + send.at, bytes, CCL_U8, to, c, s);
    ccl_recv((char *)(uintptr_t)recv.dev + recv.at, bytes, CCL_U8, from, c, s);
    ccl_result_t res = ccl_group_end();
    CUresult end = ccl__cu.StreamEndCapture(s, &g);
    if (res != CCL_OK || end != CUDA_SUCCESS || ccl__cu.GraphInstantiate(&exec, g, 0) != CUDA_SUCCESS) {
        FAIL("graph: capture: %s (%s)", ccl_comm_last_error(c), ccl__cuda_error(end));
        return;
    }
    if (!ccl__gpu_ipc_mapped(c, from, (void *)recv.dev))
        FAIL("graph: rank %d has not mapped this rank's receive allocation after 3 calls", from);
    for (int k = 1; k <= 3; k++) {
        if (buf_fill(&send, bytes, 400 + k, me, 1) != 0 || buf_fill(&recv, 0, 0, 0, 0) != 0)
            break;
        boot.barrier(boot.ctx);
        if (ccl__cu.GraphLaunch(exec, s) != CUDA_SUCCESS || ccl__cu.StreamSynchronize(s) != CUDA_SUCCESS ||
            ccl_comm_synchronize(c) != CCL_OK) {
            FAIL("graph: replay %d: %s", k, ccl_comm_last_error(c));
            break;
        }
        boot.barrier(boot.ctx);
        if (buf_check(&recv, bytes, 400 + k, from, 1, "graph") != 0)
            break;
    }
    ccl__cu.GraphExecDestroy(exec);
    ccl__cu.GraphDestroy(g);
    ccl__cu.StreamDestroy(s);
    buf_free(&send);
    buf_free(&recv);
    if (failures == f0)
        printf("ok p2p-ipc/graph N=%d (captured after warm-up, replayed 3 times)\n", N);
}

/* Rank 0 sends rank 1 `count` f32, rank 1 receives count + 1 into a buffer its earlier
 * receives from rank 0 had the sender map. */
static void mismatch(void)
{
    int f0 = failures;
    ccl_comm_t *c;
    if (make_comm(&c, 5000) != 0)
        return;
    size_t count = 300000, bytes = (count + 1) * 4;
    Buf b;
    if (buf_alloc(&b, bytes, 0) != 0)
        return;
    ccl_result_t r = CCL_OK;
    for (int t = 0; t < 3 && me < 2 && r == CCL_OK; t++) {
        r = me == 0 ? ccl_send((void *)(uintptr_t)b.dev, count + 1, CCL_F32, 1, c, NULL)
                    : ccl_recv((void *)(uintptr_t)b.dev, count + 1, CCL_F32, 0, c, NULL);
        if (r == CCL_OK)
            r = ccl_comm_synchronize(c);
    }
    if (r != CCL_OK)
        FAIL("mismatch: warm-up: %s", ccl_comm_last_error(c));
    if (me == 1 && !ccl__gpu_ipc_mapped(c, 0, (void *)b.dev))
        FAIL("mismatch: rank 0 has not mapped rank 1's receive allocation after 3 receives");
    if (me == 1)
        buf_fill(&b, 0, 0, 0, 0);
    boot.barrier(boot.ctx);
    if (me < 2 && r == CCL_OK) {
        r = me == 0 ? ccl_send((void *)(uintptr_t)b.dev, count, CCL_F32, 1, c, NULL)
                    : ccl_recv((void *)(uintptr_t)b.dev, count + 1, CCL_F32, 0, c, NULL);
        if (r == CCL_OK)
            r = ccl_comm_synchronize(c);
        const char *m = ccl_comm_last_error(c);
        if (me == 1 && (r != CCL_ERR_INVALID_ARGUMENT || !strstr(m, "ccl_recv (call 1 of 1 of its group) from rank 0") ||
                        !strstr(m, "ccl_send (call 1 of 1 of its group) to rank 1")))
            FAIL("mismatch: rank 1 got %s: %s", ccl_result_string(r), m);
        if (me == 0 && r == CCL_OK)
            FAIL("mismatch: rank 0's send succeeded");
        if (me == 1)
            buf_check(&b, 0, 0, 0, 0, "mismatch: the receive buffer");
    }
    boot.barrier(boot.ctx);
    ccl_comm_destroy(c);
    buf_free(&b);
    if (failures == f0 && me < 2)
        printf("ok p2p-ipc/mismatch: rank 1 names both calls and receives nothing, rank 0 fails\n");
}

static void off(void)
{
    int f0 = failures, from = (me + N - 1) % N;
    setenv("CCL_GPU_P2P_IPC", "0", 1);
    ccl_comm_t *c;
    int made = make_comm(&c, 20000);
    unsetenv("CCL_GPU_P2P_IPC");
    if (made != 0)
        return;
    Buf send, recv;
    size_t bytes = (size_t)1 << 20;
    if (buf_alloc(&send, bytes, 0) == 0 && buf_alloc(&recv, bytes, 0) == 0) {
        for (int t = 1; t <= ROUNDS && round_trip(c, &send, &recv, bytes, 500 + t, "off") == 0; t++) {}
        if (ccl__gpu_ipc_mapped(c, from, NULL) != 0)
            FAIL("off: CCL_GPU_P2P_IPC=0, yet rank %d mapped this rank's allocation", from);
    }
    boot.barrier(boot.ctx);
    ccl_comm_destroy(c);
    buf_free(&send);
    buf_free(&recv);
    if (failures == f0)
        printf("ok p2p-ipc/off N=%d (CCL_GPU_P2P_IPC=0: copied through the slots)\n", N);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    char err[512];
    if (ccl__cuda_load(err, sizeof err) != 0) {
        printf("skipped: %s\n", err);
        return 0;
    }
    CclEnvBoot *eb = NULL;
    if (ccl__env_boot_open(&eb, &boot, 60000, err, sizeof err) != 0) {
        printf("FAIL p2p-ipc: bootstrap (run it under mpirun, a process per GPU): %s\n", err);
        return 1;
    }
    me = boot.rank, N = boot.nranks;
    if (N < 2) {
        printf("FAIL p2p-ipc: run it with 2 or more processes, not %d\n", N);
        return 1;
    }
    ccl_comm_t *c;
    if (make_comm(&c, 20000) != 0)
        return 1;
    size_t payload, ll_max, direct_min, lanes, slots;
    ccl__gpu_p2p_sizes(c, &payload, &ll_max, &direct_min, &lanes, &slots);
    sizes(c, direct_min);
    again(c);
    graph(c);
    boot.barrier(boot.ctx);
    ccl_comm_destroy(c);
    mismatch();
    off();
    ccl__env_boot_close(eb);
    return failures ? 1 : 0;
}
