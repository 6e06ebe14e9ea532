/* stress.c: many different algorithms interleaved on one communicator.
 *
 * Loads every shipped algorithm that admits N=4 (CCL_ALGORITHM_DIR), then issues rounds
 * of calls picked at random (algorithm, count from 0 to 70000 with tails, in place or
 * not, symmetric or ordinary buffers, i32 sum/max/min) back to back on every rank
 * before one synchronize, and checks every element of every call. This is what one-call
 * tests miss: semaphores of several algorithms advancing together, scratch growing and
 * changing layout between calls, staging buffers reused across queued calls. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccl.h"

enum { N = 4, ROUNDS = 20, CALLS = 16, MAXALG = 64 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int32_t value(int r, size_t i, int call)
{
    uint64_t x = (uint64_t)r * 0x100000001b3ull ^ i * 0x9e3779b97f4a7c15ull ^ (uint64_t)call << 40;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    return (int32_t)(x % 1000) - 500;
}

typedef struct {
    ccl_algorithm_t *alg[N];
    const char *coll;
    char path[512];
} Alg;

typedef struct {
    int alg, inplace, sym, op, call;
    size_t count, in_elems, out_elems;
    void *mem[N];
    int32_t *send[N], *recv[N];
} Call;

static int in_units(const char *c) { return !strcmp(c, "reduce_scatter") || !strcmp(c, "alltoall") ? N : 1; }
static int out_units(const char *c) { return !strcmp(c, "allgather") || !strcmp(c, "alltoall") ? N : 1; }

static int32_t reduce3(int op, int32_t a, int32_t b)
{
    return op == CCL_SUM ? a + b : op == CCL_MAX ? (a > b ? a : b) : (a < b ? a : b);
}

/* Expected out element j of rank r. Returns 0 when unspecified (reduce, non-root). */
static int expected(const Alg *a, const Call *c, int r, size_t j, int32_t *want)
{
    size_t n = c->count;
    const char *k = a->coll;
    if (!strcmp(k, "allreduce") || (!strcmp(k, "reduce") && r == 0) || !strcmp(k, "reduce_scatter")) {
        size_t idx = !strcmp(k, "reduce_scatter") ? (size_t)r * n + j : j;
        int32_t acc = value(0, idx, c->call);
        for (int q = 1; q < N; q++)
            acc = reduce3(c->op, acc, value(q, idx, c->call));
        *want = acc;
        return 1;
    }
    if (!strcmp(k, "reduce"))
        return 0;
    if (!strcmp(k, "allgather"))
        *want = value((int)(j / n), j % n, c->call);
    else if (!strcmp(k, "alltoall"))
        *want = value((int)(j / n), (size_t)r * n + j % n, c->call);
    else /* broadcast from root 0 */
        *want = value(0, j, c->call);
    return 1;
}

int main(void)
{
    /* A fixed seed keeps `make check` reproducible; CCL_STRESS_SEED explores others. */
    if (getenv("CCL_STRESS_SEED"))
        rng ^= strtoull(getenv("CCL_STRESS_SEED"), NULL, 0) * 0x2545f4914f6cdd1dull;
    const char *dir = getenv("CCL_ALGORITHM_DIR");
    if (!dir)
        dir = "algorithms";
    ccl_comm_t *comms[N];
    if (ccl_comm_init_all(comms, N, NULL, NULL) != CCL_OK) {
        printf("FAIL stress: init: %s\n", ccl_comm_last_error(NULL));
        return 1;
    }
    static Alg algs[MAXALG];
    int nalg = 0;
    static const char *colls[] = {"allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "reduce"};
    for (size_t ci = 0; ci < 6; ci++) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s/%s", dir, colls[ci]);
        DIR *d = opendir(sub);
        struct dirent *e;
        while (d && (e = readdir(d)) && nalg < MAXALG) {
            size_t l = strlen(e->d_name);
            if (l < 5 || strcmp(e->d_name + l - 4, ".ccl"))
                continue;
            Alg *a = &algs[nalg];
            if (snprintf(a->path, sizeof a->path, "%s/%s", sub, e->d_name) >= (int)sizeof a->path)
                continue;
            int ok = 1;
            for (int r = 0; r < N && ok; r++)
                ok = ccl_algorithm_load(comms[r], a->path, 0, &a->alg[r]) == CCL_OK;
            if (!ok)
                continue; /* does not admit N=4 (earlier ranks' loads are freed with the comm) */
            a->coll = colls[ci];
            nalg++;
        }
        if (d)
            closedir(d);
    }
    if (nalg == 0) {
        printf("FAIL stress: no algorithm under %s admits N=%d\n", dir, N);
        return 1;
    }
    int failures = 0, calls_done = 0, callno = 0;
    for (int round = 0; round < ROUNDS && !failures; round++) {
        Call calls[CALLS];
        for (int k = 0; k < CALLS; k++) {
            Call *c = &calls[k];
            memset(c, 0, sizeof *c);
            c->alg = (int)(next() % (uint64_t)nalg);
            const Alg *a = &algs[c->alg];
            uint64_t pick = next() % 10;
            c->count = pick == 0 ? 0 : pick < 4 ? next() % 16 : pick < 9 ? next() % 3000 : 60000 + next() % 10000;
            c->inplace = !strcmp(a->coll, "alltoall") ? 0 : (int)(next() % 3 == 0);
            c->sym = (int)(next() % 2);
            c->op = (int)(next() % 3 == 0 ? CCL_MAX : next() % 2 ? CCL_SUM : CCL_MIN);
            c->call = callno++;
            c->in_elems = (size_t)in_units(a->coll) * c->count;
            c->out_elems = (size_t)out_units(a->coll) * c->count;
            size_t total = (c->inplace ? (c->in_elems > c->out_elems ? c->in_elems : c->out_elems)
                                       : c->in_elems + c->out_elems) * sizeof(int32_t) + 64;
            for (int r = 0; r < N; r++) {
                if (c->sym)
                    ccl_mem_alloc(comms[r], &c->mem[r], total);
                else
                    c->mem[r] = malloc(total);
                int32_t *m = c->mem[r];
                if (c->inplace) {
                    c->send[r] = m + (!strcmp(a->coll, "allgather") ? (size_t)r * c->count : 0);
                    c->recv[r] = m + (!strcmp(a->coll, "reduce_scatter") ? (size_t)r * c->count : 0);
                } else {
                    c->send[r] = m;
                    c->recv[r] = m + c->in_elems;
                }
                memset(c->recv[r], 0x5a, c->out_elems * sizeof(int32_t));
                for (size_t i = 0; i < c->in_elems; i++)
                    c->send[r][i] = value(r, i, c->call);
            }
            for (int r = 0; r < N; r++) {
                ccl_result_t res = ccl_algorithm_run(a->alg[r], c->send[r], c->recv[r], c->count, CCL_I32, (ccl_op_t)c->op, NULL);
                if (res != CCL_OK) {
                    printf("FAIL stress: round %d call %d (%s, count %zu): %s\n", round, k, a->path, c->count,
                           ccl_comm_last_error(comms[r]));
                    failures++;
                }
            }
        }
        for (int r = 0; r < N; r++)
            if (ccl_comm_synchronize(comms[r]) != CCL_OK) {
                printf("FAIL stress: round %d: rank %d: %s\n", round, r, ccl_comm_last_error(comms[r]));
                failures++;
            }
        for (int k = 0; k < CALLS; k++) {
            Call *c = &calls[k];
            const Alg *a = &algs[c->alg];
            for (int r = 0; r < N && !failures; r++)
                for (size_t j = 0; j < c->out_elems; j++) {
                    int32_t want;
                    if (expected(a, c, r, j, &want) && c->recv[r][j] != want) {
                        printf("FAIL stress: round %d call %d (%s, count %zu, %s, %s, op %d): rank %d out[%zu] = %d, "
                               "expected %d\n", round, k, a->path, c->count, c->inplace ? "in-place" : "out-of-place",
                               c->sym ? "symmetric" : "ordinary", c->op, r, j, c->recv[r][j], want);
                        failures++;
                        break;
                    }
                }
            /* Frees run in the same order on every rank, keeping the heap symmetric. */
            for (int r = 0; r < N; r++) {
                if (c->sym)
                    ccl_mem_free(comms[r], c->mem[r]);
                else
                    free(c->mem[r]);
            }
            calls_done++;
        }
    }
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(comms[r]);
    if (!failures)
        printf("ok stress: %d calls over %d algorithms interleaved (random counts, in place, buffers, ops)\n", calls_done,
               nalg);
    return failures != 0;
}
