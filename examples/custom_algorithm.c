/* custom_algorithm.c: load your own algorithm file and run it.
 *
 *   build/examples/custom_algorithm examples/star.ccl [NRANKS]
 *
 * ccl_algorithm_load compiles the file in-process for this communicator's rank count
 * and proves it (postcondition, races, deadlocks, safety across calls) before anything
 * runs; a program that fails the proof is refused with the compiler's diagnostics. Then
 * the algorithm runs directly (ccl_algorithm_run), or serves the standard collective
 * once registered with ccl_comm_use_algorithm. One process drives all ranks here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccl.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE.ccl [NRANKS]\n", argv[0]);
        return 2;
    }
    const char *file = argv[1];
    int n = argc > 2 ? atoi(argv[2]) : 4;
    if (n < 1 || n > 64) {
        fprintf(stderr, "NRANKS must be in 1..64\n");
        return 2;
    }
    ccl_comm_t **comms = calloc((size_t)n, sizeof *comms);
    ccl_algorithm_t **algs = calloc((size_t)n, sizeof *algs);
    if (ccl_comm_init_all(comms, n, NULL, NULL) != CCL_OK) {
        fprintf(stderr, "%s\n", ccl_comm_last_error(NULL));
        return 1;
    }
    for (int r = 0; r < n; r++) {
        ccl_result_t res = ccl_algorithm_load(comms[r], file, 0, &algs[r]);
        if (res != CCL_OK) {
            /* On CCL_ERR_COMPILE this holds the compiler's file:line:col diagnostics. */
            fprintf(stderr, "%s\n", ccl_comm_last_error(comms[r]));
            return 1;
        }
    }
    printf("loaded %s: algorithm '%s' for %s on %d ranks\n", file, ccl_algorithm_name(algs[0]),
           ccl_algorithm_collective(algs[0]), n);

    /* This example checks all-reduce semantics; other collectives load and run the same way. */
    const size_t count = 100003;  /* any count works, including ones that do not divide evenly */
    double **in = calloc((size_t)n, sizeof *in), **out = calloc((size_t)n, sizeof *out);
    double *host = malloc(count * sizeof *host);
    for (int r = 0; r < n; r++) {
        /* Symmetric buffers; ordinary device buffers (cudaMalloc) work too, through a
         * staging copy. ccl_mem_copy moves host data in and out on either backend. */
        if (ccl_mem_alloc(comms[r], (void **)&in[r], count * sizeof(double)) != CCL_OK ||
            ccl_mem_alloc(comms[r], (void **)&out[r], count * sizeof(double)) != CCL_OK) {
            fprintf(stderr, "%s\n", ccl_comm_last_error(comms[r]));
            return 1;
        }
        for (size_t i = 0; i < count; i++)
            host[i] = (double)(r * 1000 + i % 1000);
        ccl_mem_copy(comms[r], in[r], host, count * sizeof(double));
    }
    for (int r = 0; r < n; r++)
        if (ccl_algorithm_run(algs[r], in[r], out[r], count, CCL_F64, CCL_MAX, NULL) != CCL_OK) {
            fprintf(stderr, "%s\n", ccl_comm_last_error(comms[r]));
            return 1;
        }
    for (int r = 0; r < n; r++)
        if (ccl_comm_synchronize(comms[r]) != CCL_OK) {
            fprintf(stderr, "%s\n", ccl_comm_last_error(comms[r]));
            return 1;
        }
    int wrong = 0;
    if (!strcmp(ccl_algorithm_collective(algs[0]), "allreduce"))
        for (int r = 0; r < n; r++) {
            ccl_mem_copy(comms[r], host, out[r], count * sizeof(double));
            for (size_t i = 0; i < count; i++)
                wrong += host[i] != (double)((n - 1) * 1000 + i % 1000);
        }
    printf("max-all-reduce of %zu doubles: %s\n", count, wrong ? "WRONG" : "every element right");
    for (int r = 0; r < n; r++)
        ccl_comm_destroy(comms[r]);  /* frees the rank's algorithms and buffers too */
    free(host);
    free(in), free(out), free(algs), free(comms);
    return wrong ? 1 : 0;
}
