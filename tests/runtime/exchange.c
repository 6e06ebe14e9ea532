/* exchange.c: the exchanges as point-to-point messages on one node (CCL_EXCHANGE=p2p,
 * vcoll.c's ccl__exchange_p2p), CPU backend, threads: alltoall out of place and in place
 * (an odd count, so blocks sit at odd offsets), alltoallv whose sendbuf overlaps its
 * recvbuf, allgatherv in place, and an alltoall whose ranks pass different counts (every
 * rank fails, the first to find it naming both counts). The GPU runs the same cases through
 * tests/gpu/gpu_test --standard. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccl.h"

enum { N = 3, C = 1001 };

static int failures;

#define EXPECT(cond, ...)                                                                                    \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            printf("FAIL exchange: " __VA_ARGS__);                                                           \
            printf("\n");                                                                                    \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

static ccl_comm_t *comms[N];
static int32_t *buf[N], *other[N];
static ccl_result_t got[N];
static char why[N][512];

/* What rank q sends rank p as element i of its block. */
static int32_t val(int q, int p, size_t i)
{
    return (int32_t)(q * 1000003 + p * 1009 + (int)(i % 997));
}

typedef enum { A2A_OUT, A2A_IN, A2AV_OVERLAP, AGV_IN, A2A_MISMATCH } Case;
static Case which;

/* alltoallv's layout on rank r: sends count s(r, p) = C + r + p to p, packed; receives
 * s(p, r) from p into recvbuf at rdispls in reverse rank order, one gap element between. */
static size_t vcount(int q, int p)
{
    return (size_t)(C + q + p);
}

static void *rank_main(void *arg)
{
    int r = (int)(long)arg;
    ccl_comm_t *comm = comms[r];
    ccl_result_t x = CCL_OK;
    size_t sc[N], sd[N], rc[N], rd[N];
    switch (which) {
    case A2A_OUT:
        x = ccl_all_to_all(buf[r], other[r], C, CCL_I32, comm, NULL);
        break;
    case A2A_IN:
        x = ccl_all_to_all(buf[r], buf[r], C, CCL_I32, comm, NULL);
        break;
    case A2A_MISMATCH:
        x = ccl_all_to_all(buf[r], other[r], C + (r == 1), CCL_I32, comm, NULL);
        break;
    case A2AV_OVERLAP: {
        size_t d = 0;
        for (int p = 0; p < N; p++)
            sc[p] = vcount(r, p), sd[p] = d, d += sc[p];
        d = 0;
        for (int p = N - 1; p >= 0; p--)
            rc[p] = vcount(p, r), rd[p] = d, d += rc[p] + 1;
        x = ccl_all_to_all_v(buf[r], sc, sd, buf[r], rc, rd, CCL_I32, comm, NULL);
        break;
    }
    case AGV_IN:
        for (int p = 0; p < N; p++)
            rc[p] = vcount(p, 0), rd[p] = p == 0 ? 0 : rd[p - 1] + rc[p - 1];
        x = ccl_all_gather_v(buf[r] + rd[r], rc[r], buf[r], rc, rd, CCL_I32, comm, NULL);
        break;
    }
    if (x == CCL_OK)
        x = ccl_comm_synchronize(comm);
    got[r] = x;
    snprintf(why[r], sizeof why[r], "%s", x == CCL_OK ? "" : ccl_comm_last_error(comm));
    return NULL;
}

static void run(Case c)
{
    pthread_t t[N];
    which = c;
    for (int r = 0; r < N; r++)
        pthread_create(&t[r], NULL, rank_main, (void *)(long)r);
    for (int r = 0; r < N; r++)
        pthread_join(t[r], NULL);
}

/* Every rank's buffer b filled with what it sends: alltoall's blocks (count C each), or
 * alltoallv's packed segments, or allgatherv's own segment at its displacement. */
static void fill(Case c)
{
    for (int r = 0; r < N; r++) {
        memset(buf[r], 0x55, sizeof(int32_t) * 8 * N * C);
        memset(other[r], 0x55, sizeof(int32_t) * 8 * N * C);
        size_t d = 0;
        for (int p = 0; p < N; p++) {
            size_t n = c == A2AV_OVERLAP ? vcount(r, p) : c == AGV_IN ? vcount(p, 0) : C;
            for (size_t i = 0; i < n; i++)
                if (c != AGV_IN || p == r)
                    buf[r][d + i] = val(r, c == AGV_IN ? 0 : p, i);
            d += n;
        }
    }
}

static int all_ok(const char *name)
{
    int ok = 1;
    for (int r = 0; r < N; r++)
        if (got[r] != CCL_OK) {
            EXPECT(0, "%s: rank %d: %s", name, r, why[r]);
            ok = 0;
        }
    return ok;
}

int main(void)
{
    setenv("CCL_EXCHANGE", "p2p", 1);
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .timeout_ms = 10000};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK) {
        printf("FAIL exchange: init: %s\n", ccl_comm_last_error(NULL));
        return 1;
    }
    for (int r = 0; r < N; r++) {
        buf[r] = malloc(sizeof(int32_t) * 8 * N * C);
        other[r] = malloc(sizeof(int32_t) * 8 * N * C);
    }

    const Case blocks[] = {A2A_OUT, A2A_IN};
    for (int k = 0; k < 2; k++) {
        const char *name = blocks[k] == A2A_OUT ? "alltoall out of place" : "alltoall in place";
        fill(blocks[k]);
        run(blocks[k]);
        int bad = 0;
        for (int r = 0; r < N && (r > 0 || all_ok(name)); r++) {
            const int32_t *out = blocks[k] == A2A_OUT ? other[r] : buf[r];
            for (int q = 0; q < N; q++)
                for (size_t i = 0; i < C; i++)
                    bad += out[(size_t)q * C + i] != val(q, r, i);
            bad += blocks[k] == A2A_OUT && out[N * C] != 0x55555555; /* nothing past recvbuf's end */
        }
        EXPECT(bad == 0, "%s: %d wrong elements", name, bad);
        if (!bad && !failures)
            printf("ok exchange %s as messages (N=%d, count %d)\n", name, N, C);
    }

    fill(A2AV_OVERLAP);
    run(A2AV_OVERLAP);
    int bad = 0;
    for (int r = 0; r < N && (r > 0 || all_ok("alltoallv overlapping")); r++) {
        size_t d = 0;
        for (int p = N - 1; p >= 0; p--) {
            for (size_t i = 0; i < vcount(p, r); i++)
                bad += buf[r][d + i] != val(p, r, i);
            d += vcount(p, r) + 1;
        }
    }
    EXPECT(bad == 0, "alltoallv with sendbuf overlapping recvbuf: %d wrong elements", bad);
    if (!bad)
        printf("ok exchange alltoallv whose sendbuf overlaps its recvbuf, as messages\n");

    fill(AGV_IN);
    run(AGV_IN);
    bad = 0;
    for (int r = 0; r < N && (r > 0 || all_ok("allgatherv in place")); r++) {
        size_t d = 0;
        for (int p = 0; p < N; p++) {
            for (size_t i = 0; i < vcount(p, 0); i++)
                bad += buf[r][d + i] != val(p, 0, i);
            d += vcount(p, 0);
        }
    }
    EXPECT(bad == 0, "allgatherv in place: %d wrong elements", bad);
    if (!bad)
        printf("ok exchange allgatherv in place, as messages\n");

    /* Rank 1 passes C + 1: every rank fails; the first to find it (a receiver of a block of
     * the wrong size) names both counts, the others that rank. */
    fill(A2A_MISMATCH);
    run(A2A_MISMATCH);
    int named = 0, failed = 0;
    for (int r = 0; r < N; r++) {
        failed += got[r] != CCL_OK;
        named += strstr(why[r], "ccl_all_to_all") && strstr(why[r], "passes count 100") &&
                 strstr(why[r], "every rank must pass the same count");
    }
    EXPECT(failed == N && named >= 1, "counts that differ: %d of %d ranks failed, %d named both counts; rank 0: %s",
           failed, N, named, why[0]);
    if (failed == N && named >= 1)
        printf("ok exchange alltoall whose ranks pass different counts: every rank fails, one names both counts\n");

    for (int r = 0; r < N; r++) {
        ccl_comm_destroy(comms[r]);
        free(buf[r]);
        free(other[r]);
    }
    return failures != 0;
}
