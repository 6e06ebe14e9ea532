/* allreduce_threads.c: one process driving several ranks (one per GPU, or host threads
 * on the CPU backend) with the standard all-reduce.
 *
 *   build/examples/allreduce_threads [NRANKS]
 *
 * The calls are asynchronous, so one thread issues every rank's call in turn and then
 * waits for each; nothing here blocks on a peer. The algorithm comes from the shipped
 * library (algorithms/, found next to the executable or through CCL_ALGORITHM_DIR). */
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

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    if (n < 1 || n > 64) {
        fprintf(stderr, "usage: %s [NRANKS 1..64]\n", argv[0]);
        return 2;
    }
    const size_t count = 1 << 20;
    ccl_comm_t **comms = calloc((size_t)n, sizeof *comms);
    float **bufs = calloc((size_t)n, sizeof *bufs);
    float *host = malloc(count * sizeof *host);
    /* NULL devices: rank i on GPU i modulo the GPUs there are (ranks share GPUs when
     * there are fewer GPUs than ranks; the CPU backend where there is none). */
    CHECK(ccl_comm_init_all(comms, n, NULL, NULL), NULL);

    /* Symmetric buffers: peers read and write them directly (no staging copies). They
     * are device memory on GPUs, so the host fills and reads them with ccl_mem_copy. */
    for (int r = 0; r < n; r++) {
        CHECK(ccl_mem_alloc(comms[r], (void **)&bufs[r], count * sizeof(float)), comms[r]);
        for (size_t i = 0; i < count; i++)
            host[i] = (float)(r + 1);
        CHECK(ccl_mem_copy(comms[r], bufs[r], host, count * sizeof *host), comms[r]);
    }
    /* In place: every rank's buffer becomes the sum over ranks. */
    for (int r = 0; r < n; r++)
        CHECK(ccl_all_reduce(bufs[r], bufs[r], count, CCL_F32, CCL_SUM, comms[r], NULL), comms[r]);
    for (int r = 0; r < n; r++)
        CHECK(ccl_comm_synchronize(comms[r]), comms[r]);

    float want = (float)(n * (n + 1) / 2);
    for (int r = 0; r < n; r++) {
        CHECK(ccl_mem_copy(comms[r], host, bufs[r], count * sizeof *host), comms[r]);
        for (size_t i = 0; i < count; i++)
            if (host[i] != want) {
                fprintf(stderr, "rank %d: element %zu is %g, expected %g\n", r, i, host[i], want);
                return 1;
            }
    }
    ccl_backend_t be;
    ccl_comm_backend(comms[0], &be);
    printf("all-reduce of %zu floats on %d ranks (%s backend): every element is %g\n", count, n,
           be == CCL_BACKEND_GPU ? "GPU" : "CPU", want);
    for (int r = 0; r < n; r++) {
        ccl_mem_free(comms[r], bufs[r]);
        ccl_comm_destroy(comms[r]);
    }
    free(host);
    free(bufs);
    free(comms);
    return 0;
}
