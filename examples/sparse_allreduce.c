/* sparse_allreduce.c: a sparse all-reduce in the way MPI codes write it: every rank keeps
 * only its large entries (a different number on each rank), the ranks exchange how many
 * with an all-gather, then the (index, value) pairs with two all-gathers of variable
 * size (ccl_all_gather_v), and each rank adds them into a dense result, which must equal
 * the dense all-reduce of the same sparsified vectors.
 *
 *   build/examples/sparse_allreduce [NRANKS]
 *
 * One thread drives every rank (calls return at once; ccl_comm_synchronize waits), on
 * the CPU backend, with malloc'd buffers (the GPU backend runs the v-collectives on
 * device memory). Values are small integers held in doubles, so every sum is exact
 * whatever its order. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

enum { M = 100000 };              /* the dense vector's length */

/* Rank r's dense entry i: an integer in [-50, 50]. */
static double entry(int r, size_t i)
{
    uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)(r + 1) * 0xc2b2ae3d27d4eb4full;
    h ^= h >> 29;
    return (double)(int)(h % 101) - 50.0;
}

/* Rank r keeps the entries above its own threshold, so each rank keeps a different number. */
static int kept(int r, double v)
{
    return v > 40.0 - r || v < -45.0;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    if (n < 2 || n > 16) {
        fprintf(stderr, "usage: %s [NRANKS 2..16]\n", argv[0]);
        return 2;
    }
    ccl_comm_t **comms = calloc((size_t)n, sizeof *comms);
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU};
    CHECK(ccl_comm_init_all(comms, n, NULL, &cfg), NULL);

    /* Each rank's selection: indices and values, and its sparsified dense vector (the
     * reference's input). */
    int64_t **idx = calloc((size_t)n, sizeof *idx);
    double **val = calloc((size_t)n, sizeof *val), **dense = calloc((size_t)n, sizeof *dense);
    int64_t *mine = calloc((size_t)n, sizeof *mine), **counts = calloc((size_t)n, sizeof *counts);
    for (int r = 0; r < n; r++) {
        idx[r] = malloc(M * sizeof **idx);
        val[r] = malloc(M * sizeof **val);
        dense[r] = calloc(M, sizeof **dense);
        counts[r] = malloc((size_t)n * sizeof **counts);
        for (size_t i = 0; i < M; i++) {
            double v = entry(r, i);
            if (!kept(r, v)) continue;
            idx[r][mine[r]] = (int64_t)i;
            val[r][mine[r]++] = v;
            dense[r][i] = v;
        }
    }
    /* 1. How many pairs each rank has. */
    for (int r = 0; r < n; r++)
        CHECK(ccl_all_gather(&mine[r], counts[r], 1, CCL_I64, comms[r], NULL), comms[r]);
    for (int r = 0; r < n; r++)
        CHECK(ccl_comm_synchronize(comms[r]), comms[r]);

    /* 2. The pairs themselves: every rank's into one packed array (displacements NULL). */
    size_t total = 0;
    size_t *recvcounts = malloc((size_t)n * sizeof *recvcounts);
    for (int p = 0; p < n; p++)
        total += recvcounts[p] = (size_t)counts[0][p];
    int64_t **all_idx = calloc((size_t)n, sizeof *all_idx);
    double **all_val = calloc((size_t)n, sizeof *all_val);
    for (int r = 0; r < n; r++) {
        all_idx[r] = malloc((total ? total : 1) * sizeof **all_idx);
        all_val[r] = malloc((total ? total : 1) * sizeof **all_val);
        CHECK(ccl_all_gather_v(idx[r], (size_t)mine[r], all_idx[r], recvcounts, NULL, CCL_I64, comms[r], NULL),
              comms[r]);
        CHECK(ccl_all_gather_v(val[r], (size_t)mine[r], all_val[r], recvcounts, NULL, CCL_F64, comms[r], NULL),
              comms[r]);
    }
    /* 3. The reference: the dense all-reduce of the sparsified vectors, in place. */
    for (int r = 0; r < n; r++)
        CHECK(ccl_all_reduce(dense[r], dense[r], M, CCL_F64, CCL_SUM, comms[r], NULL), comms[r]);
    for (int r = 0; r < n; r++)
        CHECK(ccl_comm_synchronize(comms[r]), comms[r]);

    /* 4. Every rank accumulates the pairs and compares. */
    double *sum = malloc(M * sizeof *sum);
    for (int r = 0; r < n; r++) {
        memset(sum, 0, M * sizeof *sum);
        for (size_t k = 0; k < total; k++)
            sum[all_idx[r][k]] += all_val[r][k];
        for (size_t i = 0; i < M; i++)
            if (sum[i] != dense[r][i]) {
                fprintf(stderr, "rank %d: element %zu is %g from the sparse pairs, %g from the dense all-reduce\n",
                        r, i, sum[i], dense[r][i]);
                return 1;
            }
    }
    printf("sparse all-reduce of %d x %d-element vectors through ccl_all_gather_v: %zu pairs (", n, M, total);
    for (int p = 0; p < n; p++)
        printf("%s%zu", p ? ", " : "", recvcounts[p]);
    printf(" per rank), equal to the dense all-reduce\n");
    for (int r = 0; r < n; r++) {
        free(idx[r]), free(val[r]), free(dense[r]), free(counts[r]), free(all_idx[r]), free(all_val[r]);
        ccl_comm_destroy(comms[r]);
    }
    free(idx), free(val), free(dense), free(counts), free(all_idx), free(all_val), free(mine), free(recvcounts);
    free(sum), free(comms);
    return 0;
}
