/* sparse_allreduce.c: a sparse all-reduce in the two ways MPI codes write it, both
 * checked against the dense all-reduce of the same sparsified vectors. Every rank keeps
 * only its large entries (a different number on each rank), as sorted (index, value)
 * pairs.
 *  - gather: the ranks exchange how many with an all-gather, then the pairs with two
 *    all-gathers of variable size (ccl_all_gather_v), and each rank adds them all up;
 *  - tree: a binary tree of grouped ccl_send/ccl_recv: at each level a rank sends its
 *    partial sum to its parent (its size first, then the pairs), which merges it into its
 *    own; the root's sum then goes back down the tree the same way.
 *
 *   build/examples/sparse_allreduce [NRANKS]
 *
 * One thread drives every rank (calls return at once; ccl_comm_synchronize waits), on
 * the CPU backend, with malloc'd buffers (the GPU backend runs the same calls on device
 * memory). Values are small integers held in doubles, so every sum is exact
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

/* A rank's sparse vector: n pairs sorted by index. */
typedef struct {
    int64_t *idx;
    double *val;
    size_t n;
} Sparse;

/* a += b, both sorted by index; b is left as it was. */
static void merge_into(Sparse *a, const Sparse *b)
{
    int64_t *idx = malloc((a->n + b->n + 1) * sizeof *idx);
    double *val = malloc((a->n + b->n + 1) * sizeof *val);
    size_t i = 0, j = 0, k = 0;
    while (i < a->n || j < b->n) {
        if (j == b->n || (i < a->n && a->idx[i] < b->idx[j]))
            idx[k] = a->idx[i], val[k++] = a->val[i++];
        else if (i == a->n || b->idx[j] < a->idx[i])
            idx[k] = b->idx[j], val[k++] = b->val[j++];
        else
            idx[k] = a->idx[i], val[k++] = a->val[i++] + b->val[j++];
    }
    free(a->idx), free(a->val);
    *a = (Sparse){idx, val, k};
}

/* One level's messages: every rank in `from` sends its vector to `to[r]` (-1: none),
 * which receives it into got[to[r]]: the size first, then, once the receivers know it,
 * the pairs. Each rank's calls of a round are one group. */
static void tree_level(ccl_comm_t **comms, int n, const int *to, Sparse *v, Sparse *got)
{
    int64_t *size = calloc((size_t)n, sizeof *size), *incoming = calloc((size_t)n, sizeof *incoming);
    for (int round = 0; round < 2; round++) {
        for (int r = 0; r < n; r++) {
            CHECK(ccl_group_start(), NULL);
            if (to[r] >= 0 && round == 0) {
                size[r] = (int64_t)v[r].n;
                CHECK(ccl_send(&size[r], 1, CCL_I64, to[r], comms[r], NULL), comms[r]);
            } else if (to[r] >= 0) {
                CHECK(ccl_send(v[r].idx, v[r].n, CCL_I64, to[r], comms[r], NULL), comms[r]);
                CHECK(ccl_send(v[r].val, v[r].n, CCL_F64, to[r], comms[r], NULL), comms[r]);
            }
            for (int q = 0; q < n; q++) {
                if (to[q] != r)
                    continue;
                if (round == 0) {
                    CHECK(ccl_recv(&incoming[r], 1, CCL_I64, q, comms[r], NULL), comms[r]);
                    continue;
                }
                got[r].n = (size_t)incoming[r];
                got[r].idx = malloc((got[r].n + 1) * sizeof *got[r].idx);
                got[r].val = malloc((got[r].n + 1) * sizeof *got[r].val);
                CHECK(ccl_recv(got[r].idx, got[r].n, CCL_I64, q, comms[r], NULL), comms[r]);
                CHECK(ccl_recv(got[r].val, got[r].n, CCL_F64, q, comms[r], NULL), comms[r]);
            }
            CHECK(ccl_group_end(), NULL);
        }
        for (int r = 0; r < n; r++)
            CHECK(ccl_comm_synchronize(comms[r]), comms[r]);
    }
    free(size), free(incoming);
}

/* The tree variant: v[r] becomes the sum of every rank's vector, on every rank. */
static void tree_allreduce(ccl_comm_t **comms, int n, Sparse *v)
{
    int *to = malloc((size_t)n * sizeof *to);
    Sparse *got = calloc((size_t)n, sizeof *got);
    int top = 1;
    while (top < n)
        top *= 2;
    /* Up: at distance s, rank r = s mod 2s sends to r - s, which adds it in. */
    for (int s = 1; s < top; s *= 2) {
        for (int r = 0; r < n; r++)
            to[r] = r % (2 * s) == s ? r - s : -1;
        tree_level(comms, n, to, v, got);
        for (int r = 0; r < n; r++)
            if (got[r].idx) {
                merge_into(&v[r], &got[r]);
                free(got[r].idx), free(got[r].val);
                got[r] = (Sparse){0};
            }
    }
    /* Down: the same edges the other way; a receiver's vector is replaced. */
    for (int s = top / 2; s >= 1; s /= 2) {
        for (int r = 0; r < n; r++)
            to[r] = r % (2 * s) == 0 && r + s < n ? r + s : -1;
        tree_level(comms, n, to, v, got);
        for (int r = 0; r < n; r++)
            if (got[r].idx) {
                free(v[r].idx), free(v[r].val);
                v[r] = got[r];
                got[r] = (Sparse){0};
            }
    }
    free(to), free(got);
}

/* 0 when the pairs of v add up to dense, element for element; else says where not. */
static int compare(const char *how, int r, const int64_t *idx, const double *val, size_t n, const double *dense,
                   double *sum)
{
    memset(sum, 0, M * sizeof *sum);
    for (size_t k = 0; k < n; k++)
        sum[idx[k]] += val[k];
    for (size_t i = 0; i < M; i++)
        if (sum[i] != dense[i]) {
            fprintf(stderr, "%s: rank %d: element %zu is %g from the sparse pairs, %g from the dense all-reduce\n",
                    how, r, i, sum[i], dense[i]);
            return 1;
        }
    return 0;
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
    for (int r = 0; r < n; r++)
        if (compare("gather", r, all_idx[r], all_val[r], total, dense[r], sum))
            return 1;
    printf("sparse all-reduce of %d x %d-element vectors through ccl_all_gather_v: %zu pairs (", n, M, total);
    for (int p = 0; p < n; p++)
        printf("%s%zu", p ? ", " : "", recvcounts[p]);
    printf(" per rank), equal to the dense all-reduce\n");

    /* 5. The tree variant, from each rank's own selection. */
    Sparse *v = calloc((size_t)n, sizeof *v);
    for (int r = 0; r < n; r++) {
        v[r] = (Sparse){malloc(((size_t)mine[r] + 1) * sizeof *v[r].idx), malloc(((size_t)mine[r] + 1) * sizeof *v[r].val),
                        (size_t)mine[r]};
        memcpy(v[r].idx, idx[r], (size_t)mine[r] * sizeof *idx[r]);
        memcpy(v[r].val, val[r], (size_t)mine[r] * sizeof *val[r]);
    }
    tree_allreduce(comms, n, v);
    for (int r = 0; r < n; r++)
        if (compare("tree", r, v[r].idx, v[r].val, v[r].n, dense[r], sum))
            return 1;
    printf("sparse all-reduce through a tree of grouped ccl_send/ccl_recv: %zu distinct indices on every rank, equal "
           "to the dense all-reduce\n", v[0].n);
    for (int r = 0; r < n; r++)
        free(v[r].idx), free(v[r].val);
    free(v);
    for (int r = 0; r < n; r++) {
        free(idx[r]), free(val[r]), free(dense[r]), free(counts[r]), free(all_idx[r]), free(all_val[r]);
        ccl_comm_destroy(comms[r]);
    }
    free(idx), free(val), free(dense), free(counts), free(all_idx), free(all_val), free(mine), free(recvcounts);
    free(sum), free(comms);
    return 0;
}
