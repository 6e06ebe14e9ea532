/* register_gpu: ccl_mem_register on GPUs: every output element checked, and the call
 * traces checked for staging (a call on registered buffers must stage nothing).
 *
 *   register_gpu --threads N   one process, N ranks on GPUs 0..N-1 (ccl_comm_init_all,
 *                              a thread per rank)
 *   register_gpu --procs N     N processes forked here, one GPU each (ccl_comm_init_rank
 *                              over the runtime's environment bootstrap); the parent never
 *                              touches CUDA
 *
 * Memory is the user's: cuMemCreate allocations with a POSIX file-descriptor handle type,
 * mapped by the test. The main region is two allocations back to back, registered from
 * 4 KiB into the first (a range over two allocations, not at an allocation's start).
 * Cases, each on every rank:
 *  - all-reduce, all-gather and all-to-all, out of place and in place, through the
 *    standard calls and through programs that reach peers' buffers (allreduce/ring and
 *    /pull, allgather/ring, alltoall/direct): exact results, and no "staging" in the
 *    call's trace line (CCL_DEBUG=TRACE into CCL_DEBUG_FILE), the registered sides named
 *    ("sendbuf registered", "recvbuf registered") where peers reach them; in-place
 *    all-to-all has no in-place form, so only its input may be staged;
 *  - an all-reduce captured into a CUDA graph and replayed;
 *  - the cache: the same range and a range inside it give the same registration;
 *  - after deregistration the same calls stage again (the check sees staging);
 *  - one whole allocation; memory freed and allocated again at the same address (the
 *    cache refuses it); a pool allocation (ccl_mem_pool_alloc), zero-copy, freed, and
 *    its mappings released at the next registration;
 *  - refusals, on every rank, saying why: cuMemAlloc (cudaMalloc) memory, host memory,
 *    another GPU's memory, sizes that differ, ranges at different places in their
 *    pages; memory without a shareable handle type (refused across processes, fine in
 *    one process).
 * Prints "ok gpu-register/MODE/N<n>/CASE" (rank 0) or "FAIL gpu-register/...: rank R:
 * why" (any rank); exits 1 on a failure, 0 otherwise; "skipped: ..." and 0 without N
 * GPUs. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ccl.h"
#include "gpu/driver.h"
#include "internal.h"

enum { MiB = 1 << 20, PIECE = 16 * MiB, LEAD = 4096, MAXN = 8 };

typedef struct {
    int rank, n, procs;
    const char *mode;
    ccl_comm_t *comm;
    CUcontext ctx;
    CUstream stream;
    char log[256];               /* this process's CCL_DEBUG_FILE */
    long log_off;                /* what this rank has read of it */
    int fails;
} R;

/* User memory: `pieces` cuMemCreate allocations of `piece` bytes, back to back. */
typedef struct {
    CUdeviceptr va;
    size_t size, piece;
    int pieces;
    CUmemGenericAllocationHandle h[4];
} Region;

static void say(R *r, int ok, const char *name, const char *fmt, ...)
{
    char why[3000] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (ok && r->rank == 0)
        printf("ok gpu-register/%s/N%d/%s\n", r->mode, r->n, name);
    if (!ok) {
        printf("FAIL gpu-register/%s/N%d/%s: rank %d: %s\n", r->mode, r->n, name, r->rank, why);
        r->fails++;
    }
    fflush(stdout);
}

static int cu_ok(R *r, CUresult c, const char *what)
{
    if (c == CUDA_SUCCESS) return 1;
    say(r, 0, "driver", "%s: %s", what, ccl__cuda_error(c));
    return 0;
}

static int region_make(R *r, int device, int pieces, size_t piece, int handle_types, Region *g)
{
    memset(g, 0, sizeof *g);
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device},
                                .requestedHandleTypes = (CUmemAllocationHandleType)handle_types};
    g->pieces = pieces;
    g->piece = piece;
    g->size = piece * (size_t)pieces;
    if (!cu_ok(r, ccl__cu.MemAddressReserve(&g->va, g->size, 2 * MiB, 0, 0), "cuMemAddressReserve")) return -1;
    for (int i = 0; i < pieces; i++)
        if (!cu_ok(r, ccl__cu.MemCreate(&g->h[i], piece, &prop, 0), "cuMemCreate") ||
            !cu_ok(r, ccl__cu.MemMap(g->va + piece * (size_t)i, piece, 0, g->h[i], 0), "cuMemMap"))
            return -1;
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    /* The test reads and writes it from this rank's GPU (its context). */
    if (device != r->rank % 64) {
        CUmemAccessDesc both[2] = {acc, acc};
        both[1].location.id = r->rank;
        return cu_ok(r, ccl__cu.MemSetAccess(g->va, g->size, both, 2), "cuMemSetAccess") ? 0 : -1;
    }
    return cu_ok(r, ccl__cu.MemSetAccess(g->va, g->size, &acc, 1), "cuMemSetAccess") ? 0 : -1;
}

static void region_free(Region *g)
{
    for (int i = 0; i < g->pieces; i++) {
        ccl__cu.MemUnmap(g->va + g->piece * (size_t)i, g->piece);
        ccl__cu.MemRelease(g->h[i]);
    }
    if (g->va) ccl__cu.MemAddressFree(g->va, g->size);
    memset(g, 0, sizeof *g);
}

/* ---- data ---- */

static int32_t val(int rank, size_t i)
{
    return (int32_t)((rank + 1) * 3 + (int)(i % 101));
}

static void fill(R *r, CUdeviceptr p, size_t n, int rank_of_data, int poison)
{
    int32_t *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = poison ? -7 : val(rank_of_data, i);
    cu_ok(r, ccl__cu.MemcpyHtoD(p, h, n * sizeof *h), "cuMemcpyHtoD");
    free(h);
}

/* Each of n elements at p must be want(i); 0 or the first wrong index + 1. */
static size_t wrong(R *r, CUdeviceptr p, size_t n, int32_t (*want)(R *, size_t, void *), void *arg, int32_t *got,
                    int32_t *exp)
{
    int32_t *h = malloc(n * sizeof *h);
    size_t bad = 0;
    if (cu_ok(r, ccl__cu.MemcpyDtoH(h, p, n * sizeof *h), "cuMemcpyDtoH"))
        for (size_t i = 0; i < n && !bad; i++)
            if (h[i] != want(r, i, arg)) {
                bad = i + 1;
                *got = h[i];
                *exp = want(r, i, arg);
            }
    free(h);
    return bad;
}

static int32_t want_sum(R *r, size_t i, void *arg)
{
    int32_t s = 0, mul = arg ? *(int32_t *)arg : 1;
    for (int q = 0; q < r->n; q++)
        s += val(q, i);
    return s * mul;
}

static _Thread_local size_t gcount;   /* all-gather's and all-to-all's count per rank (each rank thread its own) */

static int32_t want_gather(R *r, size_t i, void *arg)
{
    (void)arg;
    return val((int)(i / gcount), i % gcount);
}

/* All-to-all: rank q's input block p is val(q, p * count + j); rank p receives block q
 * of its output from rank q's block p. */
static int32_t want_a2a(R *r, size_t i, void *arg)
{
    (void)arg;
    size_t q = i / gcount, j = i % gcount;
    return val((int)q, (size_t)r->rank * gcount + j);
}

/* ---- the traces ---- */

typedef struct {
    int calls, staged_in, staged_out, reg_send, reg_recv, reaped;
} Trace;

/* This rank's trace lines written since its last look. */
static Trace trace(R *r)
{
    Trace t = {0};
    FILE *f = fopen(r->log, "r");
    if (!f) return t;
    fseek(f, r->log_off, SEEK_SET);
    char line[8192], mine[64], alloc[64];
    snprintf(mine, sizeof mine, " rank %d [call]: call ", r->rank);
    snprintf(alloc, sizeof alloc, " rank %d [alloc]: ", r->rank);
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, alloc) && strstr(line, "freed by every rank's pool, unmapped")) t.reaped++;
        if (!strstr(line, mine)) continue;
        t.calls++;
        t.staged_in += strstr(line, "staging in") != NULL;
        t.staged_out += strstr(line, "staging out") != NULL;
        t.reg_send += strstr(line, "sendbuf registered") != NULL;
        t.reg_recv += strstr(line, "recvbuf registered") != NULL;
    }
    r->log_off = ftell(f);
    fclose(f);
    return t;
}

/* ---- the collectives on registered memory ---- */

typedef enum { K_ALLREDUCE, K_ALLGATHER, K_ALLTOALL, K_ALLTOALLV } Kind;

/* One call (standard when alg is NULL) on send/recv, checked: values, and the trace:
 * nothing staged (in-place all-to-all: its input only), the sides peers reach named
 * registered when `registered`; `staged`: the buffers are not registered, so some
 * staging must show where peers reach them. */
static void one(R *r, const char *name, Kind k, ccl_algorithm_t *alg, CUdeviceptr send, CUdeviceptr recv,
                size_t count, int registered)
{
    int n = r->n;
    int a2a = k == K_ALLTOALL || k == K_ALLTOALLV;
    size_t in_n = k == K_ALLREDUCE ? count : k == K_ALLGATHER ? count : (size_t)n * count;
    size_t out_n = k == K_ALLREDUCE ? count : (size_t)n * count;
    int inplace = send == recv || (k == K_ALLGATHER && send == recv + (size_t)r->rank * count * 4);
    gcount = count;
    trace(r);
    if (!inplace) fill(r, recv, out_n, 0, 1);
    if (k == K_ALLGATHER && inplace) {
        fill(r, recv, out_n, 0, 1);
        fill(r, send, in_n, r->rank, 0);
    } else if (a2a) {
        /* block p of rank q: val(q, p * count + j) */
        fill(r, send, in_n, r->rank, 0);
    } else {
        fill(r, send, in_n, r->rank, 0);
    }
    void *s = (void *)(uintptr_t)send, *d = (void *)(uintptr_t)recv;
    ccl_result_t res;
    if (alg)
        res = ccl_algorithm_run(alg, s, d, count, CCL_I32, CCL_SUM, r->stream);
    else if (k == K_ALLREDUCE)
        res = ccl_all_reduce(s, d, count, CCL_I32, CCL_SUM, r->comm, r->stream);
    else if (k == K_ALLGATHER)
        res = ccl_all_gather(s, d, count, CCL_I32, r->comm, r->stream);
    else if (k == K_ALLTOALL)
        res = ccl_all_to_all(s, d, count, CCL_I32, r->comm, r->stream);
    else {
        /* Every segment `count` long, packed: all-to-all's layout through the v path. */
        size_t counts[64];
        for (int p = 0; p < n; p++) counts[p] = count;
        res = ccl_all_to_all_v(s, counts, NULL, d, counts, NULL, CCL_I32, r->comm, r->stream);
    }
    if (res == CCL_OK) res = ccl_comm_synchronize(r->comm);
    if (res != CCL_OK) {
        say(r, 0, name, "%s: %s", ccl_result_string(res), ccl_comm_last_error(r->comm));
        return;
    }
    int32_t got = 0, exp = 0;
    size_t bad = wrong(r, recv, out_n, k == K_ALLREDUCE ? want_sum : k == K_ALLGATHER ? want_gather : want_a2a, NULL,
                       &got, &exp);
    Trace t = trace(r);
    int remote_in = alg && alg->in_remote && !alg->lines_only, remote_out = alg && alg->out_remote && !alg->lines_only;
    /* In place, a program not proved in place copies its input aside first (and all-to-all
     * has no in-place form); the standard calls' program is the library's choice. */
    int proved = alg && alg->plan->proof.inplace_applicable && alg->plan->proof.inplace_ok;
    int may_stage_in = inplace && (a2a || !proved);
    if (bad)
        say(r, 0, name, "element %zu is %d, expected %d", bad - 1, got, exp);
    else if (t.calls != 1)
        say(r, 0, name, "%d trace lines of this call in %s (CCL_DEBUG=TRACE), expected 1", t.calls, r->log);
    else if (registered && ((t.staged_in && !may_stage_in) || t.staged_out))
        say(r, 0, name, "registered buffers were staged (%s%s)", t.staged_in ? "in " : "", t.staged_out ? "out" : "");
    else if (registered && ((remote_in && !inplace && !t.reg_send) || (remote_out && !t.reg_recv)))
        say(r, 0, name, "peers reach this call's %s, but its trace does not name it registered",
            remote_out && !t.reg_recv ? "recvbuf" : "sendbuf");
    else if (!registered && (remote_in || remote_out) && !t.staged_in && !t.staged_out)
        say(r, 0, name, "unregistered buffers that peers reach were not staged: the trace cannot tell");
    else
        say(r, 1, name, "");
}

static ccl_algorithm_t *load(R *r, const char *rel)
{
    char path[512];
    const char *dir = getenv("CCL_ALGORITHM_DIR");
    snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : "algorithms", rel);
    ccl_algorithm_t *a = NULL;
    if (ccl_algorithm_load(r->comm, path, 0, &a) != CCL_OK) {
        say(r, 0, rel, "load: %s", ccl_comm_last_error(r->comm));
        return NULL;
    }
    return a;
}

/* The collectives on [base, base + bytes): send at base, recv 1/2 of the way in. */
static void collectives(R *r, const char *tag, CUdeviceptr base, size_t bytes, int registered)
{
    static const char *ar[] = {"allreduce/ring.ccl", "allreduce/pull.ccl"};
    static const char *ag[] = {"allgather/ring.ccl"};
    static const char *aa[] = {"alltoall/direct.ccl"};
    size_t half = bytes / 2 / 4096 * 4096, cnt = half / 4 / (size_t)r->n - 64;
    CUdeviceptr send = base, recv = base + half;
    char name[128];
    for (int a = -1; a < 2; a++) {
        ccl_algorithm_t *alg = a < 0 ? NULL : load(r, ar[a]);
        if (a >= 0 && !alg) continue;
        snprintf(name, sizeof name, "%s/allreduce/%s/out-of-place", tag, a < 0 ? "standard" : ar[a]);
        one(r, name, K_ALLREDUCE, alg, send, recv, cnt, registered);
        snprintf(name, sizeof name, "%s/allreduce/%s/in-place", tag, a < 0 ? "standard" : ar[a]);
        one(r, name, K_ALLREDUCE, alg, recv, recv, cnt, registered);
        if (alg) ccl_algorithm_free(alg);
    }
    for (int a = -1; a < 1; a++) {
        ccl_algorithm_t *alg = a < 0 ? NULL : load(r, ag[a]);
        if (a >= 0 && !alg) continue;
        snprintf(name, sizeof name, "%s/allgather/%s/out-of-place", tag, a < 0 ? "standard" : ag[a]);
        one(r, name, K_ALLGATHER, alg, send, recv, cnt, registered);
        snprintf(name, sizeof name, "%s/allgather/%s/in-place", tag, a < 0 ? "standard" : ag[a]);
        one(r, name, K_ALLGATHER, alg, recv + (size_t)r->rank * cnt * 4, recv, cnt, registered);
        if (alg) ccl_algorithm_free(alg);
    }
    for (int a = -1; a < 1; a++) {
        ccl_algorithm_t *alg = a < 0 ? NULL : load(r, aa[a]);
        if (a >= 0 && !alg) continue;
        snprintf(name, sizeof name, "%s/alltoall/%s/out-of-place", tag, a < 0 ? "standard" : aa[a]);
        one(r, name, K_ALLTOALL, alg, send, recv, cnt, registered);
        snprintf(name, sizeof name, "%s/alltoall/%s/in-place", tag, a < 0 ? "standard" : aa[a]);
        one(r, name, K_ALLTOALL, alg, recv, recv, cnt, registered);
        if (alg) ccl_algorithm_free(alg);
    }
    /* The v path (the library's alltoallv puts into peers' recvbuf). */
    snprintf(name, sizeof name, "%s/alltoallv/standard/out-of-place", tag);
    one(r, name, K_ALLTOALLV, NULL, send, recv, cnt, registered);
}

/* ---- the cases ---- */

static ccl_mem_reg_t *reg_ok(R *r, const char *name, void *p, size_t bytes)
{
    ccl_mem_reg_t *reg = NULL;
    ccl_result_t res = ccl_mem_register(r->comm, p, bytes, &reg);
    say(r, res == CCL_OK && reg, name, "ccl_mem_register: %s: %s", ccl_result_string(res), ccl_comm_last_error(r->comm));
    return res == CCL_OK ? reg : NULL;
}

/* A registration every rank must refuse with `want` and a message holding n1 and n2. */
static void reg_refused(R *r, const char *name, void *p, size_t bytes, ccl_result_t want, const char *n1,
                        const char *n2)
{
    ccl_mem_reg_t *reg = NULL;
    ccl_result_t res = ccl_mem_register(r->comm, p, bytes, &reg);
    const char *m = ccl_comm_last_error(r->comm);
    if (res == CCL_OK) ccl_mem_deregister(r->comm, reg);
    say(r, res == want && (!n1 || strstr(m, n1)) && (!n2 || strstr(m, n2)), name,
        "got %s (%s), expected %s with \"%s\" and \"%s\"", ccl_result_string(res), res == CCL_OK ? "" : m,
        ccl_result_string(want), n1 ? n1 : "", n2 ? n2 : "");
}

static void graph_case(R *r, CUdeviceptr buf, size_t cnt)
{
    const char *name = "registered/allreduce/graph-replayed-3x";
    /* Warm up with the very call (loads, scratch, any staging), then capture it. */
    fill(r, buf, cnt, r->rank, 0);
    ccl_all_reduce((void *)(uintptr_t)buf, (void *)(uintptr_t)buf, cnt, CCL_I32, CCL_SUM, r->comm, r->stream);
    ccl_comm_synchronize(r->comm);
    fill(r, buf, cnt, r->rank, 0);
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    ccl_result_t res = CCL_ERR_INTERNAL;
    if (cu_ok(r, ccl__cu.StreamBeginCapture(r->stream, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture")) {
        res = ccl_all_reduce((void *)(uintptr_t)buf, (void *)(uintptr_t)buf, cnt, CCL_I32, CCL_SUM, r->comm, r->stream);
        CUresult e = ccl__cu.StreamEndCapture(r->stream, &graph);
        if (res == CCL_OK && cu_ok(r, e, "cuStreamEndCapture") &&
            cu_ok(r, ccl__cu.GraphInstantiate(&exec, graph, 0), "cuGraphInstantiate")) {
            for (int i = 0; i < 3; i++) cu_ok(r, ccl__cu.GraphLaunch(exec, r->stream), "cuGraphLaunch");
            cu_ok(r, ccl__cu.StreamSynchronize(r->stream), "cuStreamSynchronize");
        }
    }
    if (exec) ccl__cu.GraphExecDestroy(exec);
    if (graph) ccl__cu.GraphDestroy(graph);
    if (res != CCL_OK) {
        say(r, 0, name, "%s: %s", ccl_result_string(res), ccl_comm_last_error(r->comm));
        return;
    }
    /* Each replay sums every rank's buffer, which were all x * N^k. */
    int32_t mul = r->n * r->n, got = 0, exp = 0;
    size_t bad = wrong(r, buf, cnt, want_sum, &mul, &got, &exp);
    say(r, !bad, name, "element %zu is %d, expected %d", bad ? bad - 1 : 0, got, exp);
    trace(r);
}

static void pool_case(R *r)
{
    const char *name = "pool";
    ccl_result_t res = ccl_mem_pool_attach(r->comm);
    if (res != CCL_OK) {
        say(r, 0, name, "ccl_mem_pool_attach: %s", ccl_comm_last_error(r->comm));
        return;
    }
    size_t cnt = 1 << 20;
    void *p = ccl_mem_pool_alloc((ptrdiff_t)(cnt * 8), r->rank, NULL);
    if (!p) {
        say(r, 0, name, "ccl_mem_pool_alloc: NULL: %s", ccl_comm_last_error(r->comm));
        ccl_mem_pool_detach(r->comm);
        return;
    }
    ccl_algorithm_t *alg = load(r, "allreduce/ring.ccl");
    if (alg) {
        one(r, "pool/allreduce/ring/in-place", K_ALLREDUCE, alg, (CUdeviceptr)(uintptr_t)p, (CUdeviceptr)(uintptr_t)p,
            cnt, 1);
        ccl_algorithm_free(alg);
    }
    ccl_mem_pool_free(p, (ptrdiff_t)(cnt * 8), r->rank, NULL);
    /* Every rank freed it: the next registration's exchange releases its mappings. */
    Region g;
    if (region_make(r, r->rank, 1, 2 * MiB, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, &g) == 0) {
        ccl_mem_reg_t *reg = reg_ok(r, "pool/next-registration", (void *)(uintptr_t)g.va, g.size);
        if (reg) ccl_mem_deregister(r->comm, reg);
        Trace t = trace(r);
        say(r, t.reaped == 1, "pool/freed-memory-unmapped-on-every-rank", "%d INFO lines say the pool's registration "
            "was released (CCL_DEBUG_SUBSYS includes ALLOC?), expected 1", t.reaped);
    }
    region_free(&g);
    ccl_mem_pool_detach(r->comm);
}

static void run_rank(R *r)
{
    ccl__cu.CtxSetCurrent(r->ctx);
    cu_ok(r, ccl__cu.StreamCreate(&r->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    int fd = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    Region main_r, one_r, bare, other;
    trace(r);

    /* The main region: two allocations, registered from LEAD bytes in. */
    if (region_make(r, r->rank, 2, PIECE, fd, &main_r) != 0) return;
    size_t bytes = main_r.size - 2 * LEAD;
    CUdeviceptr base = main_r.va + LEAD;
    ccl_mem_reg_t *reg = reg_ok(r, "register/two-allocations", (void *)(uintptr_t)base, bytes);
    if (reg) {
        collectives(r, "registered", base, bytes, 1);
        graph_case(r, base, 100000);
        ccl_mem_reg_t *again = NULL, *inside = NULL;
        ccl_mem_register(r->comm, (void *)(uintptr_t)base, bytes, &again);
        ccl_mem_register(r->comm, (void *)(uintptr_t)(base + 4096), 4096, &inside);
        say(r, again == reg && inside == reg, "cache/same-range-and-inside", "registrations %p and %p, expected %p",
            (void *)again, (void *)inside, (void *)reg);
        ccl_mem_deregister(r->comm, inside);
        ccl_mem_deregister(r->comm, again);
        ccl_result_t res = ccl_mem_deregister(r->comm, reg);
        say(r, res == CCL_OK, "deregister", "%s", ccl_comm_last_error(r->comm));
        collectives(r, "deregistered", base, bytes, 0);
        res = ccl_mem_deregister(r->comm, reg);
        say(r, res == CCL_ERR_INVALID_ARGUMENT && strstr(ccl_comm_last_error(r->comm), "not a live registration"),
            "deregister-again-refused", "%s: %s", ccl_result_string(res), ccl_comm_last_error(r->comm));
    }

    /* One whole allocation; then freed and made again at the same address. */
    if (region_make(r, r->rank, 1, PIECE, fd, &one_r) == 0) {
        ccl_mem_reg_t *w = reg_ok(r, "register/one-allocation", (void *)(uintptr_t)one_r.va, one_r.size);
        ccl_algorithm_t *alg = w ? load(r, "allreduce/ring.ccl") : NULL;
        if (alg) {
            one(r, "one-allocation/allreduce/ring/out-of-place", K_ALLREDUCE, alg, one_r.va, one_r.va + PIECE / 2,
                PIECE / 8, 1);
            ccl_algorithm_free(alg);
        }
        if (w) {
            CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                        .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = r->rank},
                                        .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
            CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = r->rank},
                                   .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
            ccl__cu.MemUnmap(one_r.va, PIECE);
            ccl__cu.MemRelease(one_r.h[0]);
            if (cu_ok(r, ccl__cu.MemCreate(&one_r.h[0], PIECE, &prop, 0), "cuMemCreate") &&
                cu_ok(r, ccl__cu.MemMap(one_r.va, PIECE, 0, one_r.h[0], 0), "cuMemMap") &&
                cu_ok(r, ccl__cu.MemSetAccess(one_r.va, PIECE, &acc, 1), "cuMemSetAccess"))
                reg_refused(r, "cache/memory-freed-and-made-again", (void *)(uintptr_t)one_r.va, one_r.size,
                            CCL_ERR_INVALID_USAGE, "was freed and other memory now sits at its address", NULL);
            say(r, ccl_mem_deregister(r->comm, w) == CCL_OK, "deregister/after-the-memory-changed", "%s",
                ccl_comm_last_error(r->comm));
        }
        region_free(&one_r);
    }

    /* Refusals. */
    CUdeviceptr plain = 0;
    if (cu_ok(r, ccl__cu.MemAlloc(&plain, 4 * MiB), "cuMemAlloc")) {
        reg_refused(r, "refused/cuMemAlloc-memory", (void *)(uintptr_t)plain, 4 * MiB, CCL_ERR_INVALID_ARGUMENT,
                    "device memory from cudaMalloc or cuMemAlloc", "expandable_segments:True");
        ccl__cu.MemFree(plain);
    }
    char *host = malloc(MiB);
    reg_refused(r, "refused/host-memory", host, MiB, CCL_ERR_INVALID_ARGUMENT, "host memory the CUDA driver does not know",
                "ccl_mem_alloc");
    free(host);
    if (region_make(r, (r->rank + 1) % r->n, 1, 2 * MiB, fd, &other) == 0) {
        char want[64];
        snprintf(want, sizeof want, "lies on GPU %d, but this rank drives GPU %d", (r->rank + 1) % r->n, r->rank);
        reg_refused(r, "refused/another-GPU's-memory", (void *)(uintptr_t)other.va, other.size,
                    CCL_ERR_INVALID_ARGUMENT, want, "register memory of the rank's own GPU");
        region_free(&other);
    }
    if (region_make(r, r->rank, 1, 4 * MiB, fd, &other) == 0) {
        reg_refused(r, "refused/sizes-differ", (void *)(uintptr_t)other.va, r->rank ? 8192 : 4096,
                    CCL_ERR_INVALID_ARGUMENT, "rank 0 registers 4096 bytes", "rank 1 8192 bytes");
        reg_refused(r, "refused/different-places-in-the-page", (void *)(uintptr_t)(other.va + (r->rank ? 8192 : 4096)),
                    MiB, CCL_ERR_NOT_SYMMETRIC, "rank 0's", "starts 4096 bytes into its page, rank 1's");
        region_free(&other);
    }
    /* No shareable handle type: fine in one process, refused across processes. */
    if (region_make(r, r->rank, 1, PIECE, 0, &bare) == 0) {
        if (r->procs) {
            reg_refused(r, "refused/no-shareable-handle-type", (void *)(uintptr_t)bare.va, bare.size,
                        CCL_ERR_INVALID_ARGUMENT, "no handle type at all", "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR");
        } else {
            ccl_mem_reg_t *w = reg_ok(r, "register/no-handle-type-in-one-process", (void *)(uintptr_t)bare.va, bare.size);
            ccl_algorithm_t *alg = w ? load(r, "allreduce/ring.ccl") : NULL;
            if (alg) {
                one(r, "no-handle-type/allreduce/ring/in-place", K_ALLREDUCE, alg, bare.va, bare.va, PIECE / 8, 1);
                ccl_algorithm_free(alg);
            }
            if (w) ccl_mem_deregister(r->comm, w);
        }
        region_free(&bare);
    }
    pool_case(r);
    region_free(&main_r);
    ccl__cu.StreamDestroy(r->stream);
}

/* ---- modes ---- */

static void *thread_main(void *arg)
{
    run_rank(arg);
    return NULL;
}

static int threads(int n)
{
    char why[256];
    if (ccl__cuda_load(why, sizeof why) != 0) {
        printf("skipped: no GPU (%s)\n", why);
        return 0;
    }
    int ngpu = 0;
    ccl__cu.DeviceGetCount(&ngpu);
    if (ngpu < n) {
        printf("skipped: gpu-register/threads/N%d needs %d GPUs, this machine has %d\n", n, n, ngpu);
        return 0;
    }
    ccl_comm_t *comms[MAXN];
    int devs[MAXN];
    for (int i = 0; i < n; i++) devs[i] = i;
    ccl_config_t cfg = {.backend = CCL_BACKEND_GPU, .timeout_ms = 60000};
    if (ccl_comm_init_all(comms, n, devs, &cfg) != CCL_OK) {
        printf("FAIL gpu-register/threads/N%d/init: %s\n", n, ccl_comm_last_error(NULL));
        return 1;
    }
    static R rs[MAXN];
    pthread_t t[MAXN];
    for (int i = 0; i < n; i++) {
        rs[i] = (R){.rank = i, .n = n, .mode = "threads", .comm = comms[i]};
        snprintf(rs[i].log, sizeof rs[i].log, "%s", getenv("REGISTER_GPU_LOG"));
        CUdevice d;
        ccl__cu.DeviceGet(&d, i);
        ccl__cu.DevicePrimaryCtxRetain(&rs[i].ctx, d);
        pthread_create(&t[i], NULL, thread_main, &rs[i]);
    }
    int fails = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        fails += rs[i].fails;
    }
    for (int i = 0; i < n; i++) ccl_comm_destroy(comms[i]);
    return fails ? 1 : 0;
}

static int proc_child(int rank, int n)
{
    char why[256];
    int ngpu = 0;
    if (ccl__cuda_load(why, sizeof why) != 0 || ccl__cu.DeviceGetCount(&ngpu) != CUDA_SUCCESS || ngpu < n)
        return 77;                   /* the parent says why */
    CclEnvBoot *eb;
    ccl_bootstrap_t boot;
    if (ccl__env_boot_open(&eb, &boot, 60000, why, sizeof why) != 0) {
        printf("FAIL gpu-register/procs/N%d: rank %d: bootstrap: %s\n", n, rank, why);
        return 1;
    }
    ccl_config_t cfg = {.backend = CCL_BACKEND_GPU, .timeout_ms = 60000};
    R r = {.rank = rank, .n = n, .procs = 1, .mode = "procs"};
    snprintf(r.log, sizeof r.log, "%s", getenv("REGISTER_GPU_LOG"));
    char *pct = strstr(r.log, "%p");
    if (pct) {
        char rest[256];
        snprintf(rest, sizeof rest, "%s", pct + 2);
        snprintf(pct, sizeof r.log - (size_t)(pct - r.log), "%ld%s", (long)getpid(), rest);
    }
    if (ccl_comm_init_rank(&r.comm, &boot, rank, &cfg) != CCL_OK) {
        printf("FAIL gpu-register/procs/N%d/init: rank %d: %s\n", n, rank, ccl_comm_last_error(NULL));
        return 1;
    }
    CUdevice d;
    ccl__cu.DeviceGet(&d, rank);
    ccl__cu.DevicePrimaryCtxRetain(&r.ctx, d);
    run_rank(&r);
    ccl_comm_destroy(r.comm);
    ccl__env_boot_close(eb);
    return r.fails ? 1 : 0;
}

static int procs(int n)
{
    char job[96];
    snprintf(job, sizeof job, "register-gpu-%ld", (long)getpid());
    pid_t pids[MAXN];
    fflush(stdout);
    for (int r = 0; r < n; r++) {
        if ((pids[r] = fork()) == 0) {
            char rs[16], ns[16];
            snprintf(rs, sizeof rs, "%d", r);
            snprintf(ns, sizeof ns, "%d", n);
            setenv("OMPI_COMM_WORLD_RANK", rs, 1);
            setenv("OMPI_COMM_WORLD_SIZE", ns, 1);
            setenv("OMPI_COMM_WORLD_LOCAL_RANK", rs, 1);
            setenv("CCL_JOB_ID", job, 1);
            int rc = proc_child(r, n);
            fflush(stdout);
            _exit(rc);
        }
    }
    int fails = 0, skipped = 0;
    for (int r = 0; r < n; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
            skipped++;
        } else if (!WIFEXITED(st) || WEXITSTATUS(st)) {
            printf("FAIL gpu-register/procs/N%d: rank %d exited %s %d\n", n, r, WIFEXITED(st) ? "with" : "on signal",
                   WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            fails++;
        }
    }
    if (skipped == n) {
        printf("skipped: gpu-register/procs/N%d needs a CUDA driver and %d GPUs\n", n, n);
        return 0;
    }
    if (skipped) printf("FAIL gpu-register/procs/N%d: %d of %d ranks found no GPU of their own\n", n, skipped, n);
    return fails || skipped ? 1 : 0;
}

int main(int argc, char **argv)
{
    int n = argc == 3 ? atoi(argv[2]) : 0;
    if (argc != 3 || n < 2 || n > MAXN || (strcmp(argv[1], "--threads") && strcmp(argv[1], "--procs"))) {
        fprintf(stderr, "usage: register_gpu --threads|--procs N   (2 <= N <= %d)\n", MAXN);
        return 2;
    }
    /* Every call's trace line goes to a file per process, which each rank reads back. */
    char log[256];
    snprintf(log, sizeof log, "%s/ccl-register-gpu-%ld.%%p.log", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (long)getpid());
    setenv("CCL_DEBUG", "TRACE", 1);
    setenv("CCL_DEBUG_SUBSYS", "CALL,ALLOC", 1);
    setenv("CCL_DEBUG_FILE", log, 1);
    setenv("REGISTER_GPU_LOG", log, 1);
    if (!strcmp(argv[1], "--threads")) {
        char *pct = strstr(log, "%p");
        char rest[256];
        snprintf(rest, sizeof rest, "%s", pct + 2);
        snprintf(pct, sizeof log - (size_t)(pct - log), "%ld%s", (long)getpid(), rest);
        setenv("REGISTER_GPU_LOG", log, 1);
        int rc = threads(n);
        unlink(log);
        return rc;
    }
    return procs(n);
}
