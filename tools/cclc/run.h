/* run.h: `cclc run` (run.c, and run_v.c for the v-collectives, over verdict.c), the part
 * of the cclc driver that links libccl: the types its files share. run.c calls run_v.c;
 * both call verdict.c; nothing calls back up. */
#ifndef CCLC_RUN_H
#define CCLC_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "ccl.h"
#include "cclc.h"

/* argv[0] is the FILE argument (everything after "run"); returns the exit status. */
int cclc_run_command(int argc, char **argv);

typedef struct {
    const char *file;
    int nranks;              /* 0: not given */
    ccl_backend_t backend;
    size_t count;
    ccl_dtype_t dtype;
    ccl_op_t op;
    int iters;
    int inplace;
    int host_buffers;        /* malloc'd buffers (staged) instead of ccl_mem_alloc */
    uint64_t seed;
    int root;
    int timeout_ms;
    int back_to_back;        /* no synchronization between the K calls */
    /* v-collectives (run_v.c): --counts (N values: each rank's sendcount) or
     * --counts-matrix (N*N: rank q's sendcounts, row by row); ncounts 0: seeded random
     * counts in 0..count, new each call, a quarter of them 0. */
    size_t *counts;
    int ncounts, counts_matrix;
} RunOpts;

/* Buffer sets of --back-to-back (run.c): enough to separate consecutive calls of
 * every rank by many calls, few enough to stay small in the heap. */
enum { B_SETS = 16 };

/* What one rank found; exchanged between processes under mpirun. */
typedef struct {
    int32_t failed_call;     /* a call returned an error */
    int32_t pad;
    uint64_t wrong;          /* wrong elements */
    double ms;               /* time spent in calls, all iterations */
    char first[480];         /* the first problem, as text */
} Verdict;

/* The data generators' hash (a bijection of 64-bit words). */
static inline uint64_t cclc_run_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* verdict.c: a rank's verdict takes its first failure (msg) only. */
void cclc_run_fail(Verdict *v, const char *msg);
/* verdict.c: synchronizes comms[0..n); the first that fails, when none failed before
 * (`failed`), gives its verdict the library's message. Returns whether any failed. */
int cclc_run_sync(ccl_comm_t **comms, int n, Verdict *v, int failed);

/* run_v.c: runs an allgatherv or alltoallv program on ranks rank0 .. rank0+n-1 of N
 * (comms[i], algs[i]; all N in threads mode, one under mpirun), o->iters calls, each
 * with its own counts where they are seeded, every element of every rank's recvbuf
 * checked, and the gaps between its segments checked untouched. v[i] gets rank
 * rank0+i's verdict. Returns 0, or 2 after a usage error (a --counts list of the wrong
 * length, --inplace) on stderr. */
int cclc_run_v(const RunOpts *o, Collective coll, int N, int n, int rank0, ccl_comm_t **comms, ccl_algorithm_t **algs,
               Verdict *v);
/* What the summary line says instead of "count=C": "counts=3,0,7,1" or
 * "counts=seeded(S, 0..C)". */
void cclc_run_v_describe(const RunOpts *o, char *buf, size_t len);

#endif
