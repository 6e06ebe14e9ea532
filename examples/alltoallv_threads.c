/* alltoallv_threads.c: one process driving several ranks with ccl_all_to_all_v, where
 * every rank sends every peer a block of its own size (MPI's counts and displacements).
 *
 *   build/examples/alltoallv_threads [NRANKS]
 *
 * Rank q sends (q + p) % 3 * 1000 elements to rank p, some of them none; every rank's
 * recvcounts must say the same (the library checks it across ranks and names both sides
 * when they disagree). It runs on the CPU backend, with ordinary malloc'd buffers: the
 * library stages them (the GPU backend runs the v-collectives too, on device memory). */
#include <stdio.h>
#include <stdlib.h>

#include "ccl.h"

#define CHECK(call, comm)                                                               \
    do {                                                                                \
        ccl_result_t r_ = (call);                                                       \
        if (r_ != CCL_OK) {                                                             \
            fprintf(stderr, "%s failed: %s\n  %s\n", #call, ccl_result_string(r_),      \
                    ccl_comm_last_error(comm));                                         \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

static size_t block(int from, int to)
{
    return (size_t)((from + to) % 3) * 1000;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    if (n < 1 || n > 64) {
        fprintf(stderr, "usage: %s [NRANKS 1..64]\n", argv[0]);
        return 2;
    }
    ccl_comm_t **comms = calloc((size_t)n, sizeof *comms);
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU};
    CHECK(ccl_comm_init_all(comms, n, NULL, &cfg), NULL);

    /* Per rank: counts and displacements (packed, in rank order) of both sides. */
    size_t *sc = calloc((size_t)(n * n), sizeof *sc), *sd = calloc((size_t)(n * n), sizeof *sd);
    size_t *rc = calloc((size_t)(n * n), sizeof *rc), *rd = calloc((size_t)(n * n), sizeof *rd);
    float **send = calloc((size_t)n, sizeof *send), **recv = calloc((size_t)n, sizeof *recv);
    for (int q = 0; q < n; q++) {
        size_t s = 0, r = 0;
        for (int p = 0; p < n; p++) {
            sc[q * n + p] = block(q, p), sd[q * n + p] = s, s += block(q, p);
            rc[q * n + p] = block(p, q), rd[q * n + p] = r, r += block(p, q);
        }
        send[q] = malloc((s + 1) * sizeof(float));
        recv[q] = malloc((r + 1) * sizeof(float));
        for (int p = 0; p < n; p++)
            for (size_t i = 0; i < block(q, p); i++)
                send[q][sd[q * n + p] + i] = (float)(q * 100 + p) + (float)i / 4096;
    }
    for (int q = 0; q < n; q++)
        CHECK(ccl_all_to_all_v(send[q], &sc[q * n], &sd[q * n], recv[q], &rc[q * n], &rd[q * n], CCL_F32, comms[q],
                               NULL), comms[q]);
    for (int q = 0; q < n; q++)
        CHECK(ccl_comm_synchronize(comms[q]), comms[q]);

    size_t total = 0;
    for (int q = 0; q < n; q++)
        for (int p = 0; p < n; p++)
            for (size_t i = 0; i < block(p, q); i++, total++) {
                float want = (float)(p * 100 + q) + (float)i / 4096, got = recv[q][rd[q * n + p] + i];
                if (got != want) {
                    fprintf(stderr, "rank %d: element %zu from rank %d is %g, expected %g\n", q, i, p, got, want);
                    return 1;
                }
            }
    printf("all-to-all-v on %d ranks: %zu elements in blocks of 0, 1000 and 2000, every one right\n", n, total);
    for (int q = 0; q < n; q++) {
        ccl_comm_destroy(comms[q]);
        free(send[q]);
        free(recv[q]);
    }
    free(send), free(recv), free(sc), free(sd), free(rc), free(rd), free(comms);
    return 0;
}
