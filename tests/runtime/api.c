/* api.c: every entry point's argument checks, with result code and message; the
 * standard collectives through the shipped library; staging; the timeout path.
 *
 * Each check prints "ok api: WHAT" or "FAIL api: WHAT: got R 'message'" with both
 * sides. Runs on the CPU backend in threads mode; needs CCL_ALGORITHM_DIR (run.sh sets
 * it) for the standard collectives. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ccl.h"
#include "internal.h"

#include "ring_source.h"

static int failures;

/* Checks that r == want and the message contains every needle (NULL-terminated). */
static void expect(const char *what, ccl_result_t r, ccl_result_t want, const char *msg, ...)
{
    va_list ap;
    va_start(ap, msg);
    const char *needle, *missing = NULL;
    while ((needle = va_arg(ap, const char *)))
        if (!missing && (!msg || !strstr(msg, needle)))
            missing = needle;
    va_end(ap);
    if (r == want && !missing) {
        printf("ok api: %s\n", what);
        return;
    }
    failures++;
    printf("FAIL api: %s: got %s, expected %s; message '%s'%s%s%s\n", what, ccl_result_string(r), ccl_result_string(want),
           msg ? msg : "(null)", missing ? " lacks '" : "", missing ? missing : "", missing ? "'" : "");
}

#define EXPECT(what, call, want, comm, ...) expect(what, (call), want, ccl_comm_last_error(comm), __VA_ARGS__, NULL)


static void test_init(void)
{
    ccl_comm_t *comms[4];
    EXPECT("init_all: NULL comms", ccl_comm_init_all(NULL, 2, NULL, NULL), CCL_ERR_INVALID_ARGUMENT, NULL,
           "ccl_comm_init_all", "'comms'");
    EXPECT("init_all: nranks 0", ccl_comm_init_all(comms, 0, NULL, NULL), CCL_ERR_INVALID_ARGUMENT, NULL,
           "ccl_comm_init_all", "'nranks'", "0");
    ccl_config_t bad = {.timeout_ms = -5};
    EXPECT("init_all: negative timeout", ccl_comm_init_all(comms, 2, NULL, &bad), CCL_ERR_INVALID_ARGUMENT, NULL,
           "'config'", "timeout_ms");
    ccl_config_t tiny = {.heap_bytes = 4096};
    EXPECT("init_all: heap too small", ccl_comm_init_all(comms, 2, NULL, &tiny), CCL_ERR_INVALID_ARGUMENT, NULL,
           "heap_bytes");
    ccl_config_t huge = {.heap_bytes = SIZE_MAX};
    EXPECT("init_all: heap too large", ccl_comm_init_all(comms, 2, NULL, &huge), CCL_ERR_INVALID_ARGUMENT, NULL,
           "heap_bytes", "above the maximum");
    int devs[2] = {0, -2};
    EXPECT("init_all: negative device", ccl_comm_init_all(comms, 2, devs, NULL), CCL_ERR_INVALID_ARGUMENT, NULL,
           "'devices'", "devices[1]", "CCL_DEVICE_AUTO");
    int autodev[2] = {CCL_DEVICE_AUTO, CCL_DEVICE_AUTO};
    EXPECT("init_all: CCL_DEVICE_AUTO", ccl_comm_init_all(comms, 2, autodev, NULL), CCL_OK, NULL, "");
    for (int r = 0; r < 2 && comms[0]; r++) ccl_comm_destroy(comms[r]);
    ccl_comm_t *c;
    EXPECT("init_rank: NULL bootstrap", ccl_comm_init_rank(&c, NULL, 0, NULL), CCL_ERR_INVALID_ARGUMENT, NULL,
           "ccl_comm_init_rank", "'bootstrap'");
    ccl_bootstrap_t b = {.nranks = 2, .rank = 2};
    EXPECT("init_rank: rank out of range", ccl_comm_init_rank(&c, &b, 0, NULL), CCL_ERR_INVALID_ARGUMENT, NULL,
           "rank 2", "0..1");
    b.rank = 0;
    EXPECT("init_rank: no allgather", ccl_comm_init_rank(&c, &b, 0, NULL), CCL_ERR_INVALID_ARGUMENT, NULL,
           "allgather");
    ccl_config_t cpu = {.backend = (ccl_backend_t)7};
    EXPECT("init_all: bad backend", ccl_comm_init_all(comms, 2, NULL, &cpu), CCL_ERR_INVALID_ARGUMENT, NULL, "backend");
    EXPECT("destroy: NULL", ccl_comm_destroy(NULL), CCL_ERR_INVALID_ARGUMENT, NULL, "ccl_comm_destroy", "'comm'");
    EXPECT("synchronize: NULL", ccl_comm_synchronize(NULL), CCL_ERR_INVALID_ARGUMENT, NULL, "'comm'");
    int x;
    EXPECT("rank: NULL comm", ccl_comm_rank(NULL, &x), CCL_ERR_INVALID_ARGUMENT, NULL, "ccl_comm_rank");
}

static void test_memory(ccl_comm_t *c)
{
    void *p;
    EXPECT("mem_alloc: NULL ptr", ccl_mem_alloc(c, NULL, 64), CCL_ERR_INVALID_ARGUMENT, c, "ccl_mem_alloc", "'ptr'");
    EXPECT("mem_alloc: 0 bytes", ccl_mem_alloc(c, &p, 0), CCL_ERR_INVALID_ARGUMENT, c, "'bytes'");
    EXPECT("mem_alloc: too big", ccl_mem_alloc(c, &p, (size_t)1 << 50), CCL_ERR_OUT_OF_MEMORY, c, "'bytes'", "heap");
    int stack;
    EXPECT("mem_free: not heap", ccl_mem_free(c, &stack), CCL_ERR_INVALID_ARGUMENT, c, "ccl_mem_free", "not in");
    void *q;
    ccl_mem_alloc(c, &q, 256);
    EXPECT("mem_free: interior pointer", ccl_mem_free(c, (char *)q + 8), CCL_ERR_INVALID_ARGUMENT, c, "not the start");
    EXPECT("mem_free: ok", ccl_mem_free(c, q), CCL_OK, c, "");
    EXPECT("mem_free: twice", ccl_mem_free(c, q), CCL_ERR_INVALID_ARGUMENT, c, "not the start");
    int32_t host[4] = {1, 2, 3, 4}, back[4] = {0};
    ccl_mem_alloc(c, &q, sizeof host);
    EXPECT("mem_copy: NULL comm", ccl_mem_copy(NULL, q, host, sizeof host), CCL_ERR_INVALID_ARGUMENT, NULL,
           "ccl_mem_copy", "'comm'");
    EXPECT("mem_copy: NULL dst", ccl_mem_copy(c, NULL, host, sizeof host), CCL_ERR_INVALID_ARGUMENT, c, "'dst'");
    EXPECT("mem_copy: NULL src", ccl_mem_copy(c, q, NULL, sizeof host), CCL_ERR_INVALID_ARGUMENT, c, "'src'");
    EXPECT("mem_copy: 0 bytes, NULL pointers", ccl_mem_copy(c, NULL, NULL, 0), CCL_OK, c, "");
    EXPECT("mem_copy: host to heap", ccl_mem_copy(c, q, host, sizeof host), CCL_OK, c, "");
    EXPECT("mem_copy: heap to host", ccl_mem_copy(c, back, q, sizeof back), CCL_OK, c, "");
    EXPECT("mem_copy: the data came back", memcmp(host, back, sizeof host) ? CCL_ERR_INTERNAL : CCL_OK, CCL_OK, c, "");
    ccl_mem_free(c, q);
}

static void test_load(ccl_comm_t **comms, int n)
{
    ccl_algorithm_t *a;
    ccl_comm_t *c = comms[0];
    EXPECT("load: NULL source", ccl_algorithm_load(c, NULL, 0, &a), CCL_ERR_INVALID_ARGUMENT, c, "ccl_algorithm_load",
           "'path_or_source'");
    EXPECT("load: NULL alg", ccl_algorithm_load(c, RING, 0, NULL), CCL_ERR_INVALID_ARGUMENT, c, "'alg'");
    EXPECT("load: missing file", ccl_algorithm_load(c, "/nonexistent/x.ccl", 0, &a), CCL_ERR_INVALID_ARGUMENT, c,
           "cannot read", "/nonexistent/x.ccl");
    EXPECT("load: syntax error", ccl_algorithm_load(c, "algorithm x : allreduce\nranks N in 2..8\nfor r in 0..N on r { put }\n", 0, &a),
           CCL_ERR_COMPILE, c, "ccl_algorithm_load", "<string>:3:", "error:");
    EXPECT("load: unproved program", ccl_algorithm_load(c, "algorithm x : allreduce\nranks N in 2..8\nfor r in 0..N on r tb 0 { copy out[0] <- in[0] }\n", 0, &a),
           CCL_ERR_COMPILE, c, "does not compile", "error:");
    EXPECT("load: N not admitted", ccl_algorithm_load(c, "algorithm x : allreduce\nranks N in 4..8\nfor r in 0..N on r tb 0 { copy out[0] <- in[0] }\n", 0, &a),
           CCL_ERR_INVALID_ARGUMENT, c, "'comm'", "N=3");
    char path[1024];
    snprintf(path, sizeof path, "%s/broadcast/direct.ccl", getenv("CCL_ALGORITHM_DIR") ? getenv("CCL_ALGORITHM_DIR") : "algorithms");
    EXPECT("load: rooted, root out of range", ccl_algorithm_load(c, path, 7, &a), CCL_ERR_INVALID_ARGUMENT, c, "'root'",
           "7", "0..2");
    (void)n;
}

static void test_run(ccl_comm_t **comms, int n)
{
    ccl_algorithm_t *algs[8];
    for (int r = 0; r < n; r++)
        if (ccl_algorithm_load(comms[r], RING, 0, &algs[r]) != CCL_OK) {
            printf("FAIL api: load ring: %s\n", ccl_comm_last_error(comms[r]));
            failures++;
            return;
        }
    ccl_comm_t *c = comms[0];
    ccl_algorithm_t *a = algs[0];
    float buf[64];
    EXPECT("run: NULL alg", ccl_algorithm_run(NULL, buf, buf, 4, CCL_F32, CCL_SUM, NULL), CCL_ERR_INVALID_ARGUMENT, NULL,
           "ccl_algorithm_run", "'alg'");
    EXPECT("run: bad dtype", ccl_algorithm_run(a, buf, buf + 16, 4, (ccl_dtype_t)42, CCL_SUM, NULL),
           CCL_ERR_INVALID_ARGUMENT, c, "'dtype'", "42");
    EXPECT("run: bad op", ccl_algorithm_run(a, buf, buf + 16, 4, CCL_F32, (ccl_op_t)-1, NULL), CCL_ERR_INVALID_ARGUMENT,
           c, "'op'");
    EXPECT("run: NULL sendbuf", ccl_algorithm_run(a, NULL, buf, 4, CCL_F32, CCL_SUM, NULL), CCL_ERR_INVALID_ARGUMENT, c,
           "'sendbuf'", "NULL");
    EXPECT("run: NULL recvbuf", ccl_algorithm_run(a, buf, NULL, 4, CCL_F32, CCL_SUM, NULL), CCL_ERR_INVALID_ARGUMENT, c,
           "'recvbuf'", "NULL");
    EXPECT("run: misaligned", ccl_algorithm_run(a, (char *)buf + 1, buf + 16, 4, CCL_F32, CCL_SUM, NULL),
           CCL_ERR_INVALID_ARGUMENT, c, "'sendbuf'", "aligned");
    EXPECT("run: count overflow", ccl_algorithm_run(a, buf, buf + 16, SIZE_MAX / 2, CCL_F32, CCL_SUM, NULL),
           CCL_ERR_INVALID_ARGUMENT, c, "'count'");
    EXPECT("run: count 0 with NULL buffers", ccl_algorithm_run(a, NULL, NULL, 0, CCL_F32, CCL_SUM, NULL), CCL_OK, c, "");
    void *sym;
    ccl_mem_alloc(c, &sym, 64);
    EXPECT("run: buffer runs past its allocation", ccl_algorithm_run(a, sym, buf, 1000, CCL_F32, CCL_SUM, NULL),
           CCL_ERR_NOT_SYMMETRIC, c, "'sendbuf'", "runs past");
    ccl_mem_free(c, sym);
    EXPECT("run: freed heap buffer", ccl_algorithm_run(a, sym, buf, 4, CCL_F32, CCL_SUM, NULL), CCL_ERR_NOT_SYMMETRIC, c,
           "'sendbuf'", "not into a live");
    EXPECT("use_algorithm: alg of another comm", ccl_comm_use_algorithm(comms[1], a, 0, 0), CCL_ERR_INVALID_ARGUMENT,
           comms[1], "ccl_comm_use_algorithm", "another communicator");
    EXPECT("use_algorithm: min > max", ccl_comm_use_algorithm(c, a, 10, 5), CCL_ERR_INVALID_ARGUMENT, c, "'min_bytes'");

    /* Host (non-symmetric) buffers are staged; results are exact; every rank in order
     * from this one thread (the calls are asynchronous). */
    enum { COUNT = 1003 };
    float *in[8], *out[8];
    for (int r = 0; r < n; r++) {
        in[r] = malloc(COUNT * sizeof(float));
        out[r] = malloc(COUNT * sizeof(float));
        for (int i = 0; i < COUNT; i++)
            in[r][i] = (float)(r + i % 7);
    }
    int ok = 1;
    for (int iter = 0; iter < 3; iter++) {
        for (int r = 0; r < n; r++)
            ok &= ccl_algorithm_run(algs[r], in[r], out[r], COUNT, CCL_F32, CCL_SUM, NULL) == CCL_OK;
        for (int r = 0; r < n; r++)
            ok &= ccl_comm_synchronize(comms[r]) == CCL_OK;
    }
    for (int r = 0; r < n; r++)
        for (int i = 0; i < COUNT; i++) {
            float want = (float)(n * (n - 1) / 2 + n * (i % 7));
            if (out[r][i] != want && ok) {
                printf("FAIL api: staged host buffers: rank %d out[%d] = %g, expected %g\n", r, i, out[r][i], want);
                ok = 0;
            }
        }
    if (ok)
        printf("ok api: host buffers staged, 3 calls, exact\n");
    else
        failures++;

    /* In place with a heap buffer. */
    void *io[8];
    for (int r = 0; r < n; r++) {
        ccl_mem_alloc(comms[r], &io[r], COUNT * sizeof(int32_t));
        for (int i = 0; i < COUNT; i++)
            ((int32_t *)io[r])[i] = r * 1000 + i;
    }
    ok = 1;
    for (int r = 0; r < n; r++)
        ok &= ccl_algorithm_run(algs[r], io[r], io[r], COUNT, CCL_I32, CCL_MAX, NULL) == CCL_OK;
    for (int r = 0; r < n; r++)
        ok &= ccl_comm_synchronize(comms[r]) == CCL_OK;
    for (int r = 0; r < n && ok; r++)
        for (int i = 0; i < COUNT; i++)
            if (((int32_t *)io[r])[i] != (n - 1) * 1000 + i) {
                printf("FAIL api: in-place i32 max: rank %d [%d] = %d, expected %d\n", r, i, ((int32_t *)io[r])[i],
                       (n - 1) * 1000 + i);
                ok = 0;
                break;
            }
    if (ok)
        printf("ok api: in-place symmetric buffers, i32 max\n");
    else
        failures++;

    /* The standard collective uses a registered algorithm. */
    uint64_t before = algs[0]->ncalls;
    for (int r = 0; r < n; r++)
        ccl_comm_use_algorithm(comms[r], algs[r], 0, 0);
    ok = 1;
    for (int r = 0; r < n; r++)
        ok &= ccl_all_reduce(in[r], out[r], COUNT, CCL_F32, CCL_SUM, comms[r], NULL) == CCL_OK;
    for (int r = 0; r < n; r++)
        ok &= ccl_comm_synchronize(comms[r]) == CCL_OK;
    if (ok && algs[0]->ncalls == before + 1 && out[n - 1][5] == (float)(n * (n - 1) / 2 + n * 5))
        printf("ok api: ccl_all_reduce runs the algorithm registered with ccl_comm_use_algorithm\n");
    else {
        failures++;
        printf("FAIL api: registered algorithm: ok=%d calls %llu -> %llu\n", ok, (unsigned long long)before,
               (unsigned long long)algs[0]->ncalls);
    }
    /* Breaking the symmetric contract: rank 0 passes ccl_mem_alloc buffers, the others
     * ordinary ones (staged elsewhere in their heaps). The CPU backend must say so
     * instead of writing to the wrong place. This leaves the comms failed. */
    void *s0, *o0;
    ccl_mem_alloc(comms[0], &s0, COUNT * sizeof(float));
    ccl_mem_alloc(comms[0], &o0, COUNT * sizeof(float));
    for (int r = 0; r < n; r++)
        ccl_algorithm_run(algs[r], r ? (void *)in[r] : s0, r ? (void *)out[r] : o0, COUNT, CCL_F32, CCL_SUM, NULL);
    int flagged = 0;
    char msg[CCL__ERR_LEN] = "";
    for (int r = 0; r < n; r++) {
        ccl_result_t res = ccl_comm_synchronize(comms[r]);
        if (res == CCL_ERR_NOT_SYMMETRIC && !flagged) {
            flagged = 1;
            snprintf(msg, sizeof msg, "%s", ccl_comm_last_error(comms[r]));
        }
    }
    expect("mixed symmetric and ordinary buffers across ranks are caught", flagged ? CCL_ERR_NOT_SYMMETRIC : CCL_OK,
           CCL_ERR_NOT_SYMMETRIC, msg, "is not symmetric", "heap offset", "ccl_mem_alloc buffers at the same offset", NULL);
    for (int r = 0; r < n; r++) {
        free(in[r]);
        free(out[r]);
        ccl_mem_free(comms[r], io[r]);
    }
}

/* The blocks of a rank that meet at a barrier of all of them, which a GPU must hold at
 * once (gpu/backend.c refuses a grid it may not): 2(N-1) and N-1 at N = 3, none for a
 * ring. Loaded on rank 0 alone, so on communicators of their own. */
static void test_barrier_blocks(void)
{
    enum { N = 3 };
    ccl_comm_t *comms[N];
    if (ccl_comm_init_all(comms, N, NULL, NULL) != CCL_OK) {
        printf("FAIL api: init for the barrier blocks test: %s\n", ccl_comm_last_error(NULL));
        failures++;
        return;
    }
    ccl_comm_t *c = comms[0];
    ccl_algorithm_t *a;
    char path[1024];
    static const struct { const char *file; int blocks; } barriers[] = {
        {"allreduce/hybrid.ccl", 4}, {"reduce_scatter/direct.ccl", 2}, {"allreduce/ring.ccl", 0}};
    for (size_t i = 0; i < sizeof barriers / sizeof barriers[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", getenv("CCL_ALGORITHM_DIR") ? getenv("CCL_ALGORITHM_DIR") : "algorithms",
                 barriers[i].file);
        int got = -1;
        if (ccl_algorithm_load(c, path, 0, &a) == CCL_OK) {
            got = cclc_plan_barrier_blocks(a->plan);
            ccl_algorithm_free(a);
        }
        if (got == barriers[i].blocks) {
            printf("ok api: %s: %d blocks meet at a barrier of all of them\n", barriers[i].file, got);
        } else {
            printf("FAIL api: %s: cclc_plan_barrier_blocks %d, expected %d (%s)\n", barriers[i].file, got,
                   barriers[i].blocks, ccl_comm_last_error(c));
            failures++;
        }
    }
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(comms[r]);
}

/* Standard collectives from the shipped library, small and exact. */
static void test_library(void)
{
    enum { N = 3, COUNT = 37 };
    ccl_comm_t *comms[N];
    if (ccl_comm_init_all(comms, N, NULL, NULL) != CCL_OK) {
        printf("FAIL api: init for the library test: %s\n", ccl_comm_last_error(NULL));
        failures++;
        return;
    }
    int32_t in[N][N * COUNT], out[N][N * COUNT];
    for (int r = 0; r < N; r++)
        for (int i = 0; i < N * COUNT; i++)
            in[r][i] = r * 100 + i;
    struct { const char *name; int coll; } colls[] = {{"ccl_all_reduce", 0}, {"ccl_all_gather", 1}, {"ccl_reduce_scatter", 2},
                                                      {"ccl_all_to_all", 3}, {"ccl_broadcast", 4}, {"ccl_reduce", 5}};
    for (int k = 0; k < 6; k++) {
        memset(out, 0xff, sizeof out);
        int ok = 1, root = 1;
        for (int r = 0; r < N; r++) {
            ccl_result_t res;
            switch (k) {
            case 0: res = ccl_all_reduce(in[r], out[r], COUNT, CCL_I32, CCL_SUM, comms[r], NULL); break;
            case 1: res = ccl_all_gather(in[r], out[r], COUNT, CCL_I32, comms[r], NULL); break;
            case 2: res = ccl_reduce_scatter(in[r], out[r], COUNT, CCL_I32, CCL_SUM, comms[r], NULL); break;
            case 3: res = ccl_all_to_all(in[r], out[r], COUNT, CCL_I32, comms[r], NULL); break;
            case 4: res = ccl_broadcast(in[r], out[r], COUNT, CCL_I32, root, comms[r], NULL); break;
            default: res = ccl_reduce(in[r], out[r], COUNT, CCL_I32, CCL_SUM, root, comms[r], NULL); break;
            }
            if (res != CCL_OK) {
                printf("FAIL api: %s on rank %d: %s\n", colls[k].name, r, ccl_comm_last_error(comms[r]));
                ok = 0;
            }
        }
        for (int r = 0; r < N; r++)
            if (ccl_comm_synchronize(comms[r]) != CCL_OK) {
                printf("FAIL api: %s sync rank %d: %s\n", colls[k].name, r, ccl_comm_last_error(comms[r]));
                ok = 0;
            }
        for (int r = 0; r < N && ok; r++) {
            int n_out = (k == 1 || k == 3) ? N * COUNT : COUNT;
            if (k == 5 && r != root)
                continue;
            for (int i = 0; i < n_out && ok; i++) {
                int32_t want;
                switch (k) {
                case 0: case 5: want = (0 + 100 + 200) + N * i; break;
                case 1: want = (i / COUNT) * 100 + i % COUNT; break;
                case 2: want = 300 + N * (r * COUNT + i); break;
                case 3: want = (i / COUNT) * 100 + r * COUNT + i % COUNT; break;
                default: want = root * 100 + i; break;
                }
                if (out[r][i] != want) {
                    printf("FAIL api: %s: rank %d out[%d] = %d, expected %d\n", colls[k].name, r, i, out[r][i], want);
                    ok = 0;
                }
            }
        }
        if (ok)
            printf("ok api: %s from the shipped library, N=%d\n", colls[k].name, N);
        else
            failures++;
    }
    EXPECT("broadcast: root out of range", ccl_broadcast(in[0], out[0], 4, CCL_I32, 3, comms[0], NULL),
           CCL_ERR_INVALID_ARGUMENT, comms[0], "ccl_broadcast", "'root'", "3");
    EXPECT("all_reduce: bad dtype", ccl_all_reduce(in[0], out[0], 4, (ccl_dtype_t)-3, CCL_SUM, comms[0], NULL),
           CCL_ERR_INVALID_ARGUMENT, comms[0], "ccl_all_reduce", "'dtype'");
    EXPECT("all_reduce: NULL comm", ccl_all_reduce(in[0], out[0], 4, CCL_F32, CCL_SUM, NULL, NULL),
           CCL_ERR_INVALID_ARGUMENT, NULL, "ccl_all_reduce", "'comm'");
    EXPECT("all_reduce: NULL sendbuf names the entry point", ccl_all_reduce(NULL, out[0], 4, CCL_I32, CCL_SUM, comms[0], NULL),
           CCL_ERR_INVALID_ARGUMENT, comms[0], "ccl_all_reduce", "'sendbuf'");
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(comms[r]);

    /* An empty library: no algorithm. */
    char dir[] = "/tmp/ccl-empty-XXXXXX";
    const char *old = getenv("CCL_ALGORITHM_DIR");
    char *saved = old ? strdup(old) : NULL;
    if (mkdtemp(dir) && ccl_comm_init_all(comms, 2, NULL, NULL) == CCL_OK) {
        setenv("CCL_ALGORITHM_DIR", dir, 1);
        EXPECT("all_reduce: empty library", ccl_all_reduce(in[0], out[0], 4, CCL_I32, CCL_SUM, comms[0], NULL),
               CCL_ERR_NO_ALGORITHM, comms[0], "ccl_all_reduce", "no allreduce algorithm", "N=2");
        ccl_comm_destroy(comms[0]);
        ccl_comm_destroy(comms[1]);
        rmdir(dir);
    }
    if (saved) {
        setenv("CCL_ALGORITHM_DIR", saved, 1);
        free(saved);
    }
}

/* Back-to-back calls with changing counts, all issued before one synchronize: the
 * scratch layout changes between calls, with no fence, and must stay race-free. */
static void test_varying_counts(void)
{
    enum { N = 4, CALLS = 8 };
    static const size_t counts[CALLS] = {1001, 37, 100003, 5, 0, 77, 100003, 1};
    ccl_comm_t *comms[N];
    ccl_algorithm_t *algs[N];
    if (ccl_comm_init_all(comms, N, NULL, NULL) != CCL_OK) {
        printf("FAIL api: varying counts: init: %s\n", ccl_comm_last_error(NULL));
        failures++;
        return;
    }
    for (int r = 0; r < N; r++)
        ccl_algorithm_load(comms[r], RING, 0, &algs[r]);
    int32_t *in[N][CALLS], *out[N][CALLS];
    int ok = 1;
    for (int k = 0; k < CALLS; k++)
        for (int r = 0; r < N; r++) {
            in[r][k] = malloc((counts[k] + 1) * sizeof(int32_t));
            out[r][k] = malloc((counts[k] + 1) * sizeof(int32_t));
            for (size_t i = 0; i < counts[k]; i++)
                in[r][k][i] = (int32_t)(r + 10 * k + i);
            ok &= ccl_algorithm_run(algs[r], in[r][k], out[r][k], counts[k], CCL_I32, CCL_SUM, NULL) == CCL_OK;
        }
    for (int r = 0; r < N; r++)
        ok &= ccl_comm_synchronize(comms[r]) == CCL_OK;
    for (int k = 0; k < CALLS && ok; k++)
        for (int r = 0; r < N && ok; r++)
            for (size_t i = 0; i < counts[k]; i++) {
                int32_t want = (int32_t)(N * (N - 1) / 2 + N * (10 * k + i));
                if (out[r][k][i] != want) {
                    printf("FAIL api: varying counts: call %d (count %zu) rank %d out[%zu] = %d, expected %d\n", k,
                           counts[k], r, i, out[r][k][i], want);
                    ok = 0;
                    break;
                }
            }
    if (ok)
        printf("ok api: %d back-to-back calls with changing counts, one synchronize\n", CALLS);
    else
        failures++;
    for (int k = 0; k < CALLS; k++)
        for (int r = 0; r < N; r++)
            free(in[r][k]), free(out[r][k]);
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(comms[r]);
}

/* The call identity compares heap layouts, not histories: a rank that allocated and
 * freed a buffer first runs with ranks that did not, and a rank whose live buffers
 * differ still fails (tests/runtime/mismatch.c names the sides). */
static void test_alloc_history(void)
{
    enum { N = 3, COUNT = 1000 };
    ccl_comm_t *comms[N];
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .timeout_ms = 5000};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK) {
        printf("FAIL api: alloc history: init: %s\n", ccl_comm_last_error(NULL));
        failures++;
        return;
    }
    ccl_algorithm_t *alg[N];
    float *in[N], *out[N];
    int ok = 1;
    for (int r = 0; r < N; r++) {
        void *pad[3];
        for (int k = 0; r == 1 && k < 3; k++) /* rank 1: three buffers, freed out of order */
            ok &= ccl_mem_alloc(comms[r], &pad[k], 4096u << k) == CCL_OK;
        if (r == 1)
            ok &= ccl_mem_free(comms[r], pad[1]) == CCL_OK && ccl_mem_free(comms[r], pad[0]) == CCL_OK &&
                  ccl_mem_free(comms[r], pad[2]) == CCL_OK;
        ok &= ccl_algorithm_load(comms[r], RING, 0, &alg[r]) == CCL_OK &&
              ccl_mem_alloc(comms[r], (void **)&in[r], COUNT * sizeof(float)) == CCL_OK &&
              ccl_mem_alloc(comms[r], (void **)&out[r], COUNT * sizeof(float)) == CCL_OK;
        for (int i = 0; ok && i < COUNT; i++)
            in[r][i] = (float)r;
    }
    for (int r = 0; ok && r < N; r++)
        ok &= ccl_algorithm_run(alg[r], in[r], out[r], COUNT, CCL_F32, CCL_SUM, NULL) == CCL_OK;
    for (int r = 0; ok && r < N; r++)
        ok &= ccl_comm_synchronize(comms[r]) == CCL_OK && out[r][COUNT - 1] == (float)(N * (N - 1) / 2);
    if (ok) {
        printf("ok api: alloc history: a buffer allocated and freed again changes no call's identity\n");
    } else {
        printf("FAIL api: alloc history: %s | %s\n", ccl_comm_last_error(comms[0]), ccl_comm_last_error(comms[1]));
        failures++;
    }
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(comms[r]);
}

/* A small heap: an ordinary buffer whose staging does not fit runs in pieces
 * (tests/runtime/pieces.c has the rest); a ccl_mem_alloc that does not fit is refused,
 * naming the argument and the way out. */
static void test_small_heap(void)
{
    ccl_comm_t *comms[2];
    ccl_config_t cfg = {.heap_bytes = 4u << 20};
    if (ccl_comm_init_all(comms, 2, NULL, &cfg) != CCL_OK) {
        printf("FAIL api: small heap: init: %s\n", ccl_comm_last_error(NULL));
        failures++;
        return;
    }
    ccl_algorithm_t *a[2];
    size_t n = 1u << 20; /* 4 MiB of f32: the staging buffer cannot fit whole */
    float *in[2], *out[2];
    for (int r = 0; r < 2; r++) {
        ccl_algorithm_load(comms[r], RING, 0, &a[r]);
        in[r] = malloc(n * sizeof *in[r]);
        out[r] = calloc(n, sizeof *out[r]);
        for (size_t i = 0; i < n; i++)
            in[r][i] = (float)(r + i % 1000);
    }
    ccl_result_t got = CCL_OK;
    for (int r = 0; r < 2 && got == CCL_OK; r++)
        got = ccl_algorithm_run(a[r], in[r], out[r], n, CCL_F32, CCL_SUM, NULL);
    for (int r = 0; r < 2 && got == CCL_OK; r++)
        got = ccl_comm_synchronize(comms[r]);
    size_t wrong = 0;
    for (int r = 0; r < 2 && got == CCL_OK; r++)
        for (size_t i = 0; i < n; i++)
            wrong += out[r][i] != (float)(1 + 2 * (i % 1000));
    if (got != CCL_OK || wrong) {
        printf("FAIL api: small heap: staging that does not fit runs in pieces: %s, %zu wrong elements: %s\n",
               ccl_result_string(got), wrong, ccl_comm_last_error(comms[0]));
        failures++;
    } else {
        printf("ok api: small heap: staging that does not fit runs in pieces\n");
    }
    for (int r = 0; r < 2; r++)
        free(in[r]), free(out[r]);
    void *big;
    EXPECT("small heap: ccl_mem_alloc too big", ccl_mem_alloc(comms[0], &big, 8u << 20), CCL_ERR_OUT_OF_MEMORY, comms[0],
           "'bytes'", "CCL_HEAP_BYTES");
    ccl_comm_destroy(comms[0]);
    ccl_comm_destroy(comms[1]);
}

/* Ranks that disagree on count or dtype are told so (CPU backend), not left with garbage. */
static void test_disagreement(void)
{
    for (int kind = 0; kind < 2; kind++) {
        ccl_comm_t *comms[2];
        ccl_algorithm_t *a[2];
        if (ccl_comm_init_all(comms, 2, NULL, NULL) != CCL_OK)
            return;
        for (int r = 0; r < 2; r++)
            ccl_algorithm_load(comms[r], RING, 0, &a[r]);
        float in[2][512], out[2][512];
        memset(in, 0, sizeof in);
        for (int r = 0; r < 2; r++)
            ccl_algorithm_run(a[r], in[r], out[r], kind == 0 ? (size_t)(100 + 100 * r) : 100,
                              kind == 1 && r ? CCL_I32 : CCL_F32, CCL_SUM, NULL);
        ccl_result_t got = CCL_OK;
        char msg[CCL__ERR_LEN] = "";
        for (int r = 0; r < 2; r++) {
            ccl_result_t res = ccl_comm_synchronize(comms[r]);
            if (res == CCL_ERR_INVALID_ARGUMENT && got == CCL_OK) {
                got = res;
                snprintf(msg, sizeof msg, "%s", ccl_comm_last_error(comms[r]));
            }
        }
        expect(kind == 0 ? "ranks passing different counts are caught" : "ranks passing different dtypes are caught", got,
               CCL_ERR_INVALID_ARGUMENT, msg, "the ranks disagree", kind == 0 ? "count 200" : "i32", NULL);
        ccl_comm_destroy(comms[0]);
        ccl_comm_destroy(comms[1]);
    }
}

/* One rank: every standard collective works (a built-in copy), avg included. */
static void test_one_rank(void)
{
    ccl_comm_t *c;
    if (ccl_comm_init_all(&c, 1, NULL, NULL) != CCL_OK) {
        printf("FAIL api: one rank: init: %s\n", ccl_comm_last_error(NULL));
        failures++;
        return;
    }
    double in[5] = {1, 2, 3, 4, 5}, out[5] = {0};
    int ok = ccl_all_reduce(in, out, 5, CCL_F64, CCL_AVG, c, NULL) == CCL_OK && ccl_comm_synchronize(c) == CCL_OK &&
             out[4] == 5;
    ok = ok && ccl_all_gather(in, out, 5, CCL_F64, c, NULL) == CCL_OK && ccl_reduce(in, out, 5, CCL_F64, CCL_MAX, 0, c, NULL) == CCL_OK &&
         ccl_broadcast(in, out, 5, CCL_F64, 0, c, NULL) == CCL_OK && ccl_all_to_all(in, out, 5, CCL_F64, c, NULL) == CCL_OK &&
         ccl_reduce_scatter(in, out, 5, CCL_F64, CCL_SUM, c, NULL) == CCL_OK && ccl_comm_synchronize(c) == CCL_OK && out[2] == 3;
    if (ok)
        printf("ok api: one-rank communicator: every standard collective\n");
    else {
        printf("FAIL api: one-rank communicator: %s\n", ccl_comm_last_error(c));
        failures++;
    }
    /* The built-in one-rank program is a plain copy, which a GPU runs as the driver's
     * copy (cclc_plan_is_copy); a program that copies chunk by chunk is not one. */
    static const char *const copies[2] = {
        "algorithm self : allreduce\nranks N in 1..1\nfor r in 0..N on r tb 0 { copy out[0] <- in[0] }\n",
        "algorithm halves : allreduce\nranks N in 1..1\nchunks 2\n"
        "for r in 0..N on r tb 0 { copy out[0] <- in[0]\n copy out[1] <- in[1] }\n"};
    for (int i = 0; i < 2; i++) {
        ccl_algorithm_t *a = NULL;
        int is_copy = -1;
        if (ccl_algorithm_load(c, copies[i], 0, &a) == CCL_OK)
            is_copy = cclc_plan_is_copy(a->plan);
        if (is_copy == !i) {
            printf("ok api: one rank: %s is %sa plain copy\n", i ? "a copy by halves" : "the built-in copy",
                   i ? "not " : "");
        } else {
            printf("FAIL api: one rank: program %d: is_copy %d (%s)\n", i, is_copy, ccl_comm_last_error(c));
            failures++;
        }
        if (a) ccl_algorithm_free(a);
    }
    double io[5] = {1, 2, 3, 4, 5};
    if (ccl_all_reduce(io, io, 5, CCL_F64, CCL_SUM, c, NULL) != CCL_OK || ccl_comm_synchronize(c) != CCL_OK ||
        io[3] != 4) {
        printf("FAIL api: one rank in place: %s, io[3] = %g\n", ccl_comm_last_error(c), io[3]);
        failures++;
    } else {
        printf("ok api: one rank in place\n");
    }
    ccl_comm_destroy(c);
}

/* A peer that never joins: rank 0 runs alone and must time out quickly, naming rank,
 * thread block, source line and the peer it waited for; the comm then stays failed. */
static void test_timeout(void)
{
    ccl_comm_t *comms[2];
    ccl_config_t cfg = {.timeout_ms = 300};
    if (ccl_comm_init_all(comms, 2, NULL, &cfg) != CCL_OK) {
        printf("FAIL api: init for the timeout test: %s\n", ccl_comm_last_error(NULL));
        failures++;
        return;
    }
    ccl_algorithm_t *a0, *a1;
    ccl_algorithm_load(comms[0], RING, 0, &a0);
    ccl_algorithm_load(comms[1], RING, 0, &a1);
    float in[16] = {0}, out[16];
    double t0 = ccl__now_ms();
    ccl_result_t r = ccl_algorithm_run(a0, in, out, 16, CCL_F32, CCL_SUM, NULL);
    if (r == CCL_OK)
        r = ccl_comm_synchronize(comms[0]);
    double ms = ccl__now_ms() - t0;
    /* Caught before the plan's first wait: every rank waits for its peers to publish the
     * call's identity (CclIdent) before it touches them, so the absent rank is named. */
    expect("timeout: peer never joins", r, CCL_ERR_TIMEOUT, ccl_comm_last_error(comms[0]), "rank 0", "(call 1)",
           "peer rank 1 did not start this call", "300 ms", NULL);
    if (ms > 3000) {
        printf("FAIL api: timeout took %.0f ms (limit 300 ms)\n", ms);
        failures++;
    }
    EXPECT("timeout: comm stays failed", ccl_algorithm_run(a0, in, out, 16, CCL_F32, CCL_SUM, NULL), CCL_ERR_TIMEOUT,
           comms[0], "failed earlier");
    /* The peer was told: its next call fails at once instead of waiting. */
    r = ccl_algorithm_run(a1, in, out, 16, CCL_F32, CCL_SUM, NULL);
    if (r == CCL_OK)
        r = ccl_comm_synchronize(comms[1]);
    EXPECT("timeout: the peer learns of the failure", r, CCL_ERR_PEER_FAILED, comms[1], "rank 0 failed");
    EXPECT("timeout: destroy after failure", ccl_comm_destroy(comms[0]), CCL_OK, NULL, "");
    ccl_comm_destroy(comms[1]);
}

/* A call that one rank never makes names that rank: here the first call after an
 * algorithm was freed, which starts with an all-rank fence (its identity check, or the
 * fence, whichever waits first, names rank 2). */
static void test_barrier_names_absent_rank(void)
{
    enum { N = 3 };
    ccl_comm_t *comms[N];
    ccl_algorithm_t *a[N], *b[N];
    ccl_config_t cfg = {.timeout_ms = 300};
    if (ccl_comm_init_all(comms, N, NULL, &cfg) != CCL_OK) {
        printf("FAIL api: init for the barrier test: %s\n", ccl_comm_last_error(NULL));
        failures++;
        return;
    }
    int ok = 1;
    for (int r = 0; r < N; r++)
        ok &= ccl_algorithm_load(comms[r], RING, 0, &a[r]) == CCL_OK && ccl_algorithm_load(comms[r], RING, 0, &b[r]) == CCL_OK;
    for (int r = 0; ok && r < N; r++)
        ok &= ccl_algorithm_free(b[r]) == CCL_OK;
    float in[2][16] = {{0}}, out[2][16];
    for (int r = 0; ok && r < 2; r++)
        ok &= ccl_algorithm_run(a[r], in[r], out[r], 16, CCL_F32, CCL_SUM, NULL) == CCL_OK;
    if (!ok) {
        printf("FAIL api: barrier test: setup: %s\n", ccl_comm_last_error(comms[0]));
        failures++;
    } else {
        /* The first of ranks 0 and 1 to time out stops the other. */
        ccl_result_t r0 = ccl_comm_synchronize(comms[0]), r1 = ccl_comm_synchronize(comms[1]);
        int t = r0 == CCL_ERR_TIMEOUT ? 0 : 1;
        expect("an absent rank is named", t ? r1 : r0, CCL_ERR_TIMEOUT, ccl_comm_last_error(comms[t]), "rank 2",
               "did not", NULL);
    }
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(comms[r]);
}

/* Runs alg (one per rank) on count i32 elements and checks the all-reduce; 1 when right. */
static int ring_once(ccl_algorithm_t **alg, ccl_comm_t **comms, int n, const char *what)
{
    enum { COUNT = 64 };
    int32_t in[4][COUNT], out[4][COUNT];
    for (int r = 0; r < n; r++)
        for (int i = 0; i < COUNT; i++)
            in[r][i] = r * 1000 + i;
    for (int r = 0; r < n; r++)
        if (ccl_algorithm_run(alg[r], in[r], out[r], COUNT, CCL_I32, CCL_SUM, NULL) != CCL_OK) {
            printf("FAIL api: %s: run on rank %d: %s\n", what, r, ccl_comm_last_error(comms[r]));
            return 0;
        }
    for (int r = 0; r < n; r++)
        if (ccl_comm_synchronize(comms[r]) != CCL_OK) {
            printf("FAIL api: %s: rank %d: %s\n", what, r, ccl_comm_last_error(comms[r]));
            return 0;
        }
    for (int r = 0; r < n; r++)
        for (int i = 0; i < COUNT; i++)
            if (out[r][i] != 1000 * n * (n - 1) / 2 + n * i) {
                printf("FAIL api: %s: rank %d out[%d] = %d\n", what, r, i, out[r][i]);
                return 0;
            }
    return 1;
}

/* A freed algorithm's semaphores and scratch are not handed out again until a call
 * with an all-rank fence has completed after the free (a slower peer may still signal
 * into them), and then the same way on every rank, zeroed. */
static void test_free_quarantine(void)
{
    enum { N = 2 };
    ccl_comm_t *comms[N];
    ccl_algorithm_t *a[N], *b[N], *c[N];
    if (ccl_comm_init_all(comms, N, NULL, NULL) != CCL_OK) {
        printf("FAIL api: init for the quarantine test: %s\n", ccl_comm_last_error(NULL));
        failures++;
        return;
    }
    int ok = 1;
    for (int r = 0; r < N; r++)
        ok &= ccl_algorithm_load(comms[r], RING, 0, &a[r]) == CCL_OK;
    ok = ok && ring_once(a, comms, N, "quarantine: first algorithm");
    size_t sem_a = ok ? a[0]->sem_off : 0;
    for (int r = 0; ok && r < N; r++)
        ok &= ccl_algorithm_free(a[r]) == CCL_OK;
    for (int r = 0; ok && r < N; r++)
        ok &= ccl_algorithm_load(comms[r], RING, 0, &b[r]) == CCL_OK;
    if (!ok) {
        printf("FAIL api: quarantine: setup: %s\n", ccl_comm_last_error(comms[0]));
        failures++;
    } else {
        int fresh = b[0]->sem_off != sem_a && b[1]->sem_off != sem_a && b[0]->sem_off == b[1]->sem_off;
        printf("%s api: quarantine: a load right after a free gets other semaphores (%zu, freed %zu)\n",
               fresh ? "ok" : "FAIL", b[0]->sem_off, sem_a);
        failures += !fresh;
        /* The first call after the free fences; once it completed, a load reuses. */
        ok = ring_once(b, comms, N, "quarantine: the fenced call");
        failures += !ok;
        for (int r = 0; ok && r < N; r++)
            ok &= ccl_algorithm_load(comms[r], RING, 0, &c[r]) == CCL_OK;
        if (ok) {
            int reused = c[0]->sem_off == sem_a && c[1]->sem_off == sem_a;
            const uint64_t *sems = (const uint64_t *)(comms[0]->heap_base[0] + sem_a);
            int zero = 1;
            for (size_t i = 0; i < ccl__sem_block_bytes(c[0]->nsems) / 8; i++)
                zero &= sems[i] == 0;
            printf("%s api: quarantine: after the fenced call the block is reused on every rank, zeroed\n",
                   reused && zero ? "ok" : "FAIL");
            failures += !(reused && zero);
            ok = ring_once(c, comms, N, "quarantine: the reusing algorithm");
            failures += !ok;
        }
    }
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(comms[r]);
}

/* Handles after their end: a second free or destroy, and use after either, are refused
 * with a message (runtime/src/handles.c, check.c), never dereferenced (ASan runs this too). */
static void test_dead_handles(void)
{
    ccl_comm_t *comms[2];
    ccl_algorithm_t *algs[2] = {0};
    if (ccl_comm_init_all(comms, 2, NULL, NULL) != CCL_OK) {
        printf("FAIL api: dead handles: init: %s\n", ccl_comm_last_error(NULL));
        failures++;
        return;
    }
    for (int r = 0; r < 2; r++)
        ccl_algorithm_load(comms[r], RING, 0, &algs[r]);
    EXPECT("algorithm_free: once", ccl_algorithm_free(algs[0]), CCL_OK, comms[0], "");
    EXPECT("algorithm_free: twice", ccl_algorithm_free(algs[0]), CCL_ERR_INVALID_ARGUMENT, NULL,
           "ccl_algorithm_free", "'alg'", "not a live algorithm");
    float buf[4] = {0};
    EXPECT("algorithm_run: freed", ccl_algorithm_run(algs[0], buf, buf, 4, CCL_F32, CCL_SUM, NULL),
           CCL_ERR_INVALID_ARGUMENT, NULL, "ccl_algorithm_run", "not a live algorithm");
    EXPECT("algorithm_name: freed", strcmp(ccl_algorithm_name(algs[0]), "?") ? CCL_ERR_INTERNAL : CCL_OK, CCL_OK,
           NULL, "");
    EXPECT("comm_destroy: once", ccl_comm_destroy(comms[0]), CCL_OK, NULL, "");
    EXPECT("comm_destroy: twice", ccl_comm_destroy(comms[0]), CCL_ERR_INVALID_ARGUMENT, NULL, "ccl_comm_destroy",
           "not a live communicator");
    EXPECT("comm_synchronize: destroyed", ccl_comm_synchronize(comms[0]), CCL_ERR_INVALID_ARGUMENT, NULL,
           "ccl_comm_synchronize", "not a live communicator");
    EXPECT("all_reduce: destroyed comm", ccl_all_reduce(buf, buf, 4, CCL_F32, CCL_SUM, comms[0], NULL),
           CCL_ERR_INVALID_ARGUMENT, NULL, "ccl_all_reduce", "not a live communicator");
    void *p;
    EXPECT("mem_alloc: destroyed comm", ccl_mem_alloc(comms[0], &p, 64), CCL_ERR_INVALID_ARGUMENT, NULL,
           "ccl_mem_alloc", "not a live communicator");
    EXPECT("last_error: destroyed comm", CCL_ERR_INVALID_ARGUMENT, CCL_ERR_INVALID_ARGUMENT, comms[0],
           "not a live communicator");
    int stack;
    EXPECT("comm_rank: not a communicator", ccl_comm_rank((ccl_comm_t *)&stack, &stack), CCL_ERR_INVALID_ARGUMENT,
           NULL, "ccl_comm_rank", "not a live communicator");
    EXPECT("comm_destroy: the other rank", ccl_comm_destroy(comms[1]), CCL_OK, NULL, "");
    EXPECT("algorithm_free: after its comm's destroy", ccl_algorithm_free(algs[1]), CCL_ERR_INVALID_ARGUMENT, NULL,
           "not a live algorithm");
}

/* ccl_algorithm_check: the proof or the compiler's located diagnostics, with no communicator. */
static void test_check(void)
{
    char buf[8192] = "";
    size_t needed = 0;
    expect("check: ring source proves", ccl_algorithm_check(RING, 4, 0, buf, sizeof buf, &needed), CCL_OK, buf,
           "tring: allreduce for N = 4", "postcondition:    proved", NULL);
    expect("check: needed is the report's size", needed == strlen(buf) + 1 ? CCL_OK : CCL_ERR_INTERNAL, CCL_OK, buf, NULL);
    char small[16];
    size_t full = 0;
    expect("check: a short buffer truncates", ccl_algorithm_check(RING, 4, 0, small, sizeof small, &full), CCL_OK, small, "tring", NULL);
    expect("check: a short buffer reports the full size", full == needed && strlen(small) == 15 ? CCL_OK : CCL_ERR_INTERNAL,
           CCL_OK, small, NULL);
    expect("check: size only", ccl_algorithm_check(RING, 4, 0, NULL, 0, &full), CCL_OK, "", NULL);
    expect("check: not admitted", ccl_algorithm_check(RING, 1, 0, buf, sizeof buf, NULL), CCL_ERR_INVALID_ARGUMENT, buf,
           "<string>:2:", "error:", NULL);
    expect("check: syntax error", ccl_algorithm_check("algorithm x : allreduce\nranks N in 2..4\nchunks N\nfor r in 0..N on r tb 0 {\n"
           "  put out@r[0] in[0]\n}\n", 2, 0, buf, sizeof buf, NULL), CCL_ERR_COMPILE, buf, "<string>:5:", "error:", "^", NULL);
    expect("check: the message is also the thread's error", ccl_algorithm_check("algorithm x : allreduce\n", 2, 0, NULL, 0, NULL),
           CCL_ERR_COMPILE, ccl_comm_last_error(NULL), "ccl_algorithm_check", "does not compile for N=2", NULL);
    expect("check: missing file", ccl_algorithm_check("/nonexistent.ccl", 2, 0, buf, sizeof buf, NULL), CCL_ERR_INVALID_ARGUMENT,
           buf, "cannot read '/nonexistent.ccl'", NULL);
    expect("check: nranks 0", ccl_algorithm_check(RING, 0, 0, buf, sizeof buf, NULL), CCL_ERR_INVALID_ARGUMENT, ccl_comm_last_error(NULL),
           "ccl_algorithm_check", "'nranks'", NULL);
    expect("check: NULL source", ccl_algorithm_check(NULL, 2, 0, buf, sizeof buf, NULL), CCL_ERR_INVALID_ARGUMENT, ccl_comm_last_error(NULL),
           "'path_or_source'", NULL);
}

int main(void)
{
    test_init();
    test_check();
    enum { N = 3 };
    ccl_comm_t *comms[N];
    if (ccl_comm_init_all(comms, N, NULL, NULL) != CCL_OK) {
        printf("FAIL api: ccl_comm_init_all: %s\n", ccl_comm_last_error(NULL));
        return 1;
    }
    int rank = -1, size = -1;
    ccl_backend_t be = CCL_BACKEND_AUTO;
    if (ccl_comm_rank(comms[2], &rank) || ccl_comm_size(comms[2], &size) || ccl_comm_backend(comms[2], &be) ||
        rank != 2 || size != N || be != CCL_BACKEND_CPU) {
        printf("FAIL api: rank/size/backend: %d %d %d\n", rank, size, (int)be);
        failures++;
    } else {
        printf("ok api: rank, size, backend\n");
    }
    test_memory(comms[0]);
    test_load(comms, N);
    test_run(comms, N);
    for (int r = 0; r < N; r++)
        ccl_comm_destroy(comms[r]);
    test_library();
    test_barrier_blocks();
    test_one_rank();
    test_small_heap();
    test_disagreement();
    test_varying_counts();
    test_alloc_history();
    test_free_quarantine();
    test_timeout();
    test_barrier_names_absent_rank();
    test_dead_handles();
    return failures != 0;
}
