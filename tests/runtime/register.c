/* register.c: ccl_mem_register and ccl_mem_deregister on the CPU backend.
 *
 * Threads (N = 3, a thread per rank running one script): arguments that fail on one
 * rank fail every rank (that rank with its own error, the others naming it); sizes that
 * differ name both ranks; a range registered again, or a range inside it, is answered
 * from the cache with the same handle and no exchange (1000 hits on one rank alone take
 * well under a second, and the next real exchange then says the ranks fell out of
 * step); an overlapping range is refused; collectives on registered memory give exact
 * results; deregistering drops one reference at a time, and a dead or foreign handle is
 * refused on every rank; a ccl_mem_alloc buffer registers (ccl_mem_free refuses it
 * until it is deregistered), a freed one does not.
 * Processes (N = 2, forked): private memory is refused on every rank with the reason,
 * a ccl_mem_alloc buffer registers, sizes that differ name both ranks.
 * Prints "ok register: ..." or "FAIL register: ...". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccl.h"
#include "internal.h"

#include "forked_ranks.h"

enum { N = 3, MiB = 1 << 20, STEPS = 32, COUNT = 1000 };

static int failures;

static void check(const char *what, int ok, const char *detail)
{
    if (ok) {
        printf("ok register: %s\n", what);
    } else {
        printf("FAIL register: %s: %s\n", what, detail);
        failures++;
    }
}

/* What each rank got from one step of the script. */
typedef struct {
    ccl_result_t r;
    ccl_mem_reg_t *reg;
    char msg[1024];
} Got;

typedef struct {
    ccl_comm_t *comm;
    int rank;
    Got got[STEPS];
    int wrong;                       /* elements of the all-reduce that were wrong */
    double hit_ms;                   /* 1000 cache hits (rank 0 only) */
} Rank;

static void note(Rank *k, int step, ccl_result_t r, ccl_mem_reg_t *reg)
{
    k->got[step].r = r;
    k->got[step].reg = reg;
    snprintf(k->got[step].msg, sizeof k->got[step].msg, "%s", r == CCL_OK ? "" : ccl_comm_last_error(k->comm));
}

static ccl_result_t reg_step(Rank *k, int step, void *ptr, size_t bytes)
{
    ccl_mem_reg_t *reg = NULL;
    ccl_result_t r = ccl_mem_register(k->comm, ptr, bytes, &reg);
    note(k, step, r, reg);
    return r;
}

static void dereg_step(Rank *k, int step, ccl_mem_reg_t *reg)
{
    note(k, step, ccl_mem_deregister(k->comm, reg), reg);
}

/* The steps of the threads script, in order (each a collective call on every rank). */
enum {
    S_NULL, S_ZERO_ON_1, S_SIZES, S_MALLOC, S_AGAIN, S_INSIDE, S_OVERLAP, S_ALLREDUCE, S_DEREG1, S_DEREG2, S_DEREG3,
    S_DEREG_DEAD, S_DEREG_FOREIGN, S_HEAP_REG, S_HEAP_FREE, S_HEAP_DEREG, S_HEAP_FREED_REG, S_HIT_REG, S_OUT_OF_STEP,
    S_COUNT
};

static void *script(void *arg)
{
    Rank *k = arg;
    int me = k->rank;
    char *a = malloc(2 * MiB), *b = malloc(MiB), *c = malloc(MiB);
    float *x = (float *)a;
    for (int i = 0; i < COUNT; i++)
        x[i] = (float)(me + 1) * (float)(i % 7);
    reg_step(k, S_NULL, NULL, 4096);
    reg_step(k, S_ZERO_ON_1, a, me == 1 ? 0 : 4096);
    reg_step(k, S_SIZES, a, me == 2 ? 2048 : 1024);
    reg_step(k, S_MALLOC, a, MiB);
    reg_step(k, S_AGAIN, a, MiB);
    reg_step(k, S_INSIDE, a + 64, 128);
    reg_step(k, S_OVERLAP, a + MiB / 2, MiB);
    note(k, S_ALLREDUCE, ccl_all_reduce(x, x, COUNT, CCL_F32, CCL_SUM, k->comm, NULL), NULL);
    if (ccl_comm_synchronize(k->comm) != CCL_OK)
        note(k, S_ALLREDUCE, CCL_ERR_INTERNAL, NULL);
    for (int i = 0; i < COUNT; i++)
        k->wrong += x[i] != (float)(N * (N + 1) / 2) * (float)(i % 7);
    ccl_mem_reg_t *ra = k->got[S_MALLOC].reg;
    dereg_step(k, S_DEREG1, ra);
    dereg_step(k, S_DEREG2, ra);
    dereg_step(k, S_DEREG3, ra);
    dereg_step(k, S_DEREG_DEAD, ra);
    dereg_step(k, S_DEREG_FOREIGN, (ccl_mem_reg_t *)&k->wrong);
    void *h = NULL;
    ccl_mem_alloc(k->comm, &h, 4096);
    reg_step(k, S_HEAP_REG, h, 4096);
    note(k, S_HEAP_FREE, ccl_mem_free(k->comm, h), NULL);
    dereg_step(k, S_HEAP_DEREG, k->got[S_HEAP_REG].reg);
    ccl_mem_free(k->comm, h);
    reg_step(k, S_HEAP_FREED_REG, h, 4096);
    /* Rank 0 registers b twice more, from the cache and alone; ranks 1 and 2 register c
     * (new) meanwhile, which rank 0's next new registration meets: out of step. */
    reg_step(k, S_HIT_REG, b, MiB);
    if (me == 0) {
        ccl_mem_reg_t *again;
        double t0 = ccl__now_ms();
        for (int i = 0; i < 1000; i++)
            ccl_mem_register(k->comm, b + 64, 64, &again);
        k->hit_ms = ccl__now_ms() - t0;
        reg_step(k, S_OUT_OF_STEP, c, MiB);
    } else {
        reg_step(k, S_OUT_OF_STEP, c, MiB);
    }
    free(a), free(b), free(c);
    return NULL;
}

/* Every rank's result of a step is r, and every message holds each of the needles. */
static void expect(Rank *k, int step, const char *what, ccl_result_t r, const char *n1, const char *n2)
{
    char detail[2048] = "";
    int ok = 1;
    for (int p = 0; p < N && ok; p++) {
        Got *g = &k[p].got[step];
        if (g->r != r || (n1 && !strstr(g->msg, n1)) || (n2 && !strstr(g->msg, n2))) {
            ok = 0;
            snprintf(detail, sizeof detail, "rank %d got %s (%s), expected %s with \"%s\" and \"%s\"", p,
                     ccl_result_string(g->r), g->msg, ccl_result_string(r), n1 ? n1 : "", n2 ? n2 : "");
        }
    }
    check(what, ok, detail);
}

static void test_threads(void)
{
    ccl_comm_t *comms[N];
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .heap_bytes = 16 << 20, .timeout_ms = 20000};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK) {
        check("init", 0, ccl_comm_last_error(NULL));
        return;
    }
    static Rank k[N];
    pthread_t t[N];
    for (int r = 0; r < N; r++) {
        k[r] = (Rank){.comm = comms[r], .rank = r};
        pthread_create(&t[r], NULL, script, &k[r]);
    }
    for (int r = 0; r < N; r++)
        pthread_join(t[r], NULL);

    expect(k, S_NULL, "a NULL ptr fails every rank", CCL_ERR_INVALID_ARGUMENT, "argument 'ptr' is NULL", NULL);
    check("a rank's own failure names itself, its peers' name it",
          k[1].got[S_ZERO_ON_1].r == CCL_ERR_INVALID_ARGUMENT && k[0].got[S_ZERO_ON_1].r == CCL_ERR_PEER_FAILED &&
              k[2].got[S_ZERO_ON_1].r == CCL_ERR_PEER_FAILED &&
              strstr(k[0].got[S_ZERO_ON_1].msg, "rank 1: argument 'bytes' is 0") &&
              strstr(k[1].got[S_ZERO_ON_1].msg, "rank 1: argument 'bytes' is 0"),
          k[0].got[S_ZERO_ON_1].msg);
    expect(k, S_SIZES, "different sizes fail every rank, naming both", CCL_ERR_INVALID_ARGUMENT,
           "rank 0 registers 1024 bytes", "rank 2 2048 bytes");
    expect(k, S_MALLOC, "host memory registers (threads: recorded)", CCL_OK, NULL, NULL);
    int same = 1;
    for (int p = 0; p < N; p++)
        same &= k[p].got[S_MALLOC].reg && k[p].got[S_AGAIN].reg == k[p].got[S_MALLOC].reg &&
                k[p].got[S_INSIDE].reg == k[p].got[S_MALLOC].reg;
    expect(k, S_AGAIN, "the same range again", CCL_OK, NULL, NULL);
    expect(k, S_INSIDE, "a range inside it", CCL_OK, NULL, NULL);
    check("the cache gives the same registration", same, "another handle");
    expect(k, S_OVERLAP, "an overlapping range is refused", CCL_ERR_INVALID_ARGUMENT, "overlaps registration 0",
           "without lying inside it");
    int wrong = 0;
    for (int p = 0; p < N; p++)
        wrong += k[p].wrong;
    expect(k, S_ALLREDUCE, "an all-reduce on registered memory runs", CCL_OK, NULL, NULL);
    check("and gives exact results", wrong == 0, "wrong elements");
    expect(k, S_DEREG1, "deregister: reference 3", CCL_OK, NULL, NULL);
    expect(k, S_DEREG2, "deregister: reference 2", CCL_OK, NULL, NULL);
    expect(k, S_DEREG3, "deregister: the last reference", CCL_OK, NULL, NULL);
    expect(k, S_DEREG_DEAD, "deregistering it again fails every rank", CCL_ERR_INVALID_ARGUMENT,
           "is not a live registration of this communicator", NULL);
    expect(k, S_DEREG_FOREIGN, "a pointer that never was a registration", CCL_ERR_INVALID_ARGUMENT,
           "is not a live registration", NULL);
    expect(k, S_HEAP_REG, "a ccl_mem_alloc buffer registers", CCL_OK, NULL, NULL);
    expect(k, S_HEAP_FREE, "ccl_mem_free refuses it while registered", CCL_ERR_INVALID_USAGE, "is registered",
           "deregister it");
    expect(k, S_HEAP_DEREG, "and deregisters", CCL_OK, NULL, NULL);
    expect(k, S_HEAP_FREED_REG, "a freed heap buffer is refused", CCL_ERR_INVALID_ARGUMENT,
           "not inside one live ccl_mem_alloc buffer", NULL);
    expect(k, S_HIT_REG, "a fresh range registers", CCL_OK, NULL, NULL);
    char ms[64];
    snprintf(ms, sizeof ms, "%.1f ms", k[0].hit_ms);
    check("1000 cache hits on one rank alone need no exchange", k[0].hit_ms < 500, ms);
    expect(k, S_OUT_OF_STEP, "ranks whose caches answered differently are told", CCL_ERR_INVALID_ARGUMENT,
           "rank 0 is in its registration call 1017", "rank 1 in its call 17");
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(comms[r]);
}

/* ---- processes ---- */

static int proc_child(int rank, int arg)
{
    (void)arg;
    CclEnvBoot *eb;
    ccl_bootstrap_t boot;
    char err[512];
    if (ccl__env_boot_open(&eb, &boot, 10000, err, sizeof err) != 0) {
        printf("FAIL register: processes: rank %d: bootstrap: %s\n", rank, err);
        return 1;
    }
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .timeout_ms = 20000, .heap_bytes = 8 << 20};
    ccl_comm_t *comm;
    if (ccl_comm_init_rank(&comm, &boot, 0, &cfg) != CCL_OK) {
        printf("FAIL register: processes: rank %d: init: %s\n", rank, ccl_comm_last_error(NULL));
        return 1;
    }
    int bad = 0;
    char *priv = malloc(4096);
    ccl_mem_reg_t *reg = NULL;
    ccl_result_t r = ccl_mem_register(comm, priv, 4096, &reg);
    if (r != CCL_ERR_INVALID_ARGUMENT || !strstr(ccl_comm_last_error(comm), "private memory") ||
        !strstr(ccl_comm_last_error(comm), "ccl_mem_alloc")) {
        printf("FAIL register: processes: rank %d: private memory: %s: %s\n", rank, ccl_result_string(r),
               ccl_comm_last_error(comm));
        bad = 1;
    }
    void *h = NULL;
    if (ccl_mem_alloc(comm, &h, 8192) != CCL_OK || ccl_mem_register(comm, h, 8192, &reg) != CCL_OK ||
        ccl_mem_deregister(comm, reg) != CCL_OK) {
        printf("FAIL register: processes: rank %d: a ccl_mem_alloc buffer: %s\n", rank, ccl_comm_last_error(comm));
        bad = 1;
    }
    r = ccl_mem_register(comm, h, rank ? 4096 : 8192, &reg);
    if (r != CCL_ERR_INVALID_ARGUMENT || !strstr(ccl_comm_last_error(comm), "rank 0 registers 8192 bytes") ||
        !strstr(ccl_comm_last_error(comm), "rank 1 4096 bytes")) {
        printf("FAIL register: processes: rank %d: sizes: %s: %s\n", rank, ccl_result_string(r),
               ccl_comm_last_error(comm));
        bad = 1;
    }
    free(priv);
    ccl_comm_destroy(comm);
    ccl__env_boot_close(eb);
    return bad;
}

static void test_procs(void)
{
    int codes[2];
    forked_ranks_run("ccl-register", 2, proc_child, 0, codes);
    check("processes: private memory refused, heap buffers register, sizes named", codes[0] == 0 && codes[1] == 0,
          "a rank failed (above)");
}

int main(void)
{
    test_threads();
    test_procs();
    return failures ? 1 : 0;
}
