/* deep_stack.c: programs at the compiler's nesting limits, loaded from threads with a
 * small stack (128 KiB, musl's default for new threads).
 *
 * The compiler recurses as deep as a program nests: an expression may have 999 nested
 * operators, blocks a few hundred levels, the header's lets chain up to the same
 * operator depth. That needs up to about 256 KiB of stack; before the fix,
 * ccl_algorithm_load and ccl_algorithm_check crashed in compiler/expand.c on such a
 * thread. Each program must load (or be refused with its diagnostic) exactly as on a
 * large stack, and the loaded one must run. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccl.h"

enum { SMALL_STACK = 128 << 10 };

static int failures;

static void check(const char *what, int ok, const char *detail)
{
    if (ok)
        printf("ok deep_stack: %s\n", what);
    else {
        printf("FAIL deep_stack: %s: %s\n", what, detail);
        failures++;
    }
}

/* A one-rank all-reduce (one copy) whose chunk index is 0+0+...+0 (depth operators
 * deep), inside `blocks` nested ifs, with `lets` header lets chained into `chunks`. */
static char *program(int depth, int blocks, int lets)
{
    size_t cap = (size_t)depth * 2 + (size_t)blocks * 16 + (size_t)lets * 32 + 512;
    char *s = malloc(cap);
    size_t n = (size_t)snprintf(s, cap, "algorithm deep : allreduce\nranks N in 1..1\nlet a0 = 1\n");
    for (int i = 1; i < lets; i++)
        n += (size_t)snprintf(s + n, cap - n, "let a%d = a%d + 0\n", i, i - 1);
    n += (size_t)snprintf(s + n, cap - n, "chunks a%d\nfor r in 0..N on r tb 0 {\n", lets > 0 ? lets - 1 : 0);
    for (int i = 0; i < blocks; i++)
        n += (size_t)snprintf(s + n, cap - n, "if N > 0 {");
    n += (size_t)snprintf(s + n, cap - n, " copy out[0");
    for (int i = 0; i < depth; i++)
        n += (size_t)snprintf(s + n, cap - n, "+0");
    n += (size_t)snprintf(s + n, cap - n, "] <- in[0] ");
    for (int i = 0; i < blocks; i++)
        n += (size_t)snprintf(s + n, cap - n, "}");
    snprintf(s + n, cap - n, "\n}\n");
    return s;
}

typedef struct {
    const char *src;
    ccl_comm_t *comm;
    ccl_result_t load, run, check;
    char msg[512], report[512];
    float out;
} Job;

static void *job(void *arg)
{
    Job *j = arg;
    size_t needed;
    j->check = ccl_algorithm_check(j->src, 1, 0, j->report, sizeof j->report, &needed);
    ccl_algorithm_t *alg;
    j->load = ccl_algorithm_load(j->comm, j->src, 0, &alg);
    snprintf(j->msg, sizeof j->msg, "%s", ccl_comm_last_error(j->comm));
    if (j->load == CCL_OK) {
        float in = 42;
        j->run = ccl_algorithm_run(alg, &in, &j->out, 1, CCL_F32, CCL_SUM, NULL);
        if (j->run == CCL_OK)
            j->run = ccl_comm_synchronize(j->comm);
        ccl_algorithm_free(alg);
    }
    return NULL;
}

static void on_small_stack(const char *what, int depth, int blocks, int lets, ccl_result_t want, const char *needle,
                           ccl_comm_t *comm)
{
    Job j = {.src = program(depth, blocks, lets), .comm = comm, .run = CCL_ERR_INTERNAL};
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, SMALL_STACK);
    pthread_t t;
    if (pthread_create(&t, &a, job, &j) != 0) {
        check(what, 0, "cannot start a thread with a 128 KiB stack");
        return;
    }
    pthread_join(t, NULL);
    pthread_attr_destroy(&a);
    char detail[1400];
    snprintf(detail, sizeof detail, "load %s (%s), check %s (%.300s), run %s, out %g", ccl_result_string(j.load),
             j.msg, ccl_result_string(j.check), j.report, ccl_result_string(j.run), j.out);
    int ok = j.load == want && j.check == want;
    if (want == CCL_OK)
        ok &= j.run == CCL_OK && j.out == 42;
    else
        ok &= strstr(j.msg, needle) && strstr(j.report, needle);
    check(what, ok, detail);
    free((char *)j.src);
}

int main(void)
{
    ccl_comm_t *comm;
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .heap_bytes = 8 << 20};
    if (ccl_comm_init_all(&comm, 1, NULL, &cfg) != CCL_OK) {
        printf("FAIL deep_stack: init: %s\n", ccl_comm_last_error(NULL));
        return 1;
    }
    on_small_stack("a 999-operator expression loads and runs on a 128 KiB stack", 998, 0, 1, CCL_OK, NULL, comm);
    on_small_stack("200 nested blocks around it", 998, 200, 1, CCL_OK, NULL, comm);
    on_small_stack("header lets chained 400 deep (800 operators)", 0, 0, 400, CCL_OK, NULL, comm);
    on_small_stack("past the limit: refused with its diagnostic", 1001, 0, 1, CCL_ERR_COMPILE, "expression too deep",
                   comm);
    ccl_comm_destroy(comm);
    return failures != 0;
}
