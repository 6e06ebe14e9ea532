/* routes.c: CCL_NCCL_ROUTE with a "real" NCCL, on a machine without GPUs: the real
 * library is tests/nccl/fake/fake_nccl.c (NCCL's API on host memory, counting its
 * calls), loaded by libccl_nccl through CCL_NCCL_LIB, beside libccl's CPU backend
 * (CCL_NCCL_REAL_ON_CPU=1). tests/nccl/run.sh runs one scenario per process, each with
 * its environment:
 *
 *   nccl      CCL_NCCL_ROUTE=nccl: every collective, point-to-point, pre-multiplied sum,
 *             registration, window and ncclMemAlloc reaches NCCL and nothing else runs
 *             on libccl; results exact; NCCL's asynchronous error and its text come back
 *             through ncclCommGetAsyncError and ncclGetLastError; destroy reaches NCCL;
 *   mixed     allreduce:ccl,allgather:nccl,default:ccl, ranks on threads through
 *             ncclGetUniqueId + ncclCommInitRank (NCCL's own id travels through the
 *             rendezvous: the fake refuses any other), also held in a group: an
 *             all-reduce on libccl feeds an all-gather on NCCL, in order;
 *   fallback  auto, with a library that has allreduce algorithms only: all-gathers go
 *             to NCCL after libccl refuses the first (run.sh checks it is said once per
 *             rank), all-reduces stay on libccl;
 *   auto      auto with the whole library: everything libccl implements stays there,
 *             although a real comm exists (its init and operators reach NCCL); windows
 *             registered in a group reach both libraries;
 *   missing   CCL_NCCL_ROUTE=nccl with CCL_NCCL_LIB=none: the init fails, saying why;
 *   split     CCL_NCCL_ROUTE=nccl, ranks on threads, as torch's new_group splits: every
 *             rank of the parent calls ncclCommSplit, one with NCCL_SPLIT_NOCOLOR (it
 *             gets NULL), with a config as torch passes it (non-blocking, made by an
 *             older nccl.h); the child's all-reduce runs on NCCL, exact.
 *
 * The fake calls some of its exported functions by name as NVIDIA's libnccl does
 * (fake_nccl.c), so every scenario also checks that those calls, which land in the
 * shim, go back to the real library: without that, every call reaching NCCL failed
 * with ncclInvalidArgument (torch ignores ncclRedOpCreatePreMulSum's result, so its
 * pre-multiplied sums became plain sums on libccl). */
#include <dlfcn.h>
#include <pthread.h>

#include "common.h"

enum { N = 3, COUNT = 5 };

static int (*calls)(const char *);
static void (*set_async)(ncclResult_t);

static int fake_open(const char *name)
{
    const char *path = getenv("CCL_NCCL_LIB");
    void *h = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (h) {
        *(void **)&calls = dlsym(h, "fake_nccl_calls");
        *(void **)&set_async = dlsym(h, "fake_nccl_set_async");
    }
    if (!calls || !set_async) {
        say(0, name, "the fake NCCL (%s) is not loaded: libccl_nccl did not load it", path ? path : "unset");
        return -1;
    }
    return 0;
}

/* The fake's count of `fn` must have grown by `want` since `*before`. */
static int grew(const char *name, const char *fn, int before, int want)
{
    int now = calls(fn);
    if (now - before != want) {
        say(0, name, "the fake NCCL saw %d %s calls, expected %d", now - before, fn, want);
        return 0;
    }
    return 1;
}

static int check(const char *name, const char *what, const float *got, const float *want, int n, int rank)
{
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) {
            say(0, name, "%s: rank %d element %d is %g, expected %g", what, rank, i, got[i], want[i]);
            return 0;
        }
    return 1;
}

/* ---- nccl: everything to NCCL ---- */

static int all_to_nccl(void)
{
    const char *name = "nccl.route.nccl";
    ncclComm_t c[N];
    float in[N][N * COUNT], out[N][N * COUNT], want[N * COUNT];
    NCCL_OK(name, ncclCommInitAll(c, N, NULL));
    if (fake_open(name) != 0)
        return -1;
    int ok = grew(name, "CommInitAll", 0, 1);
    for (int r = 0; r < N; r++)
        for (int i = 0; i < N * COUNT; i++)
            in[r][i] = (float)(r * 100 + i);
    const char *fns[] = {"AllReduce", "Reduce", "ReduceScatter", "AllGather", "Broadcast", "AlltoAll", "Gather",
                         "Scatter", "Send", "Recv"};
    int before[10];
    for (int k = 0; k < 10; k++)
        before[k] = calls(fns[k]);
    ncclGroupStart();
    for (int r = 0; r < N; r++)
        ncclAllReduce(in[r], out[r], COUNT, ncclFloat, ncclSum, c[r], NULL);
    NCCL_OK(name, ncclGroupEnd());
    for (int i = 0; i < COUNT; i++)
        want[i] = (float)(300 + 3 * i);
    for (int r = 0; r < N; r++)
        ok &= check(name, "allreduce", out[r], want, COUNT, r);
    ncclGroupStart();
    for (int r = 0; r < N; r++)
        ncclAllGather(in[r], out[r], COUNT, ncclFloat, c[r], NULL);
    NCCL_OK(name, ncclGroupEnd());
    for (int p = 0; p < N; p++)
        for (int i = 0; i < COUNT; i++)
            want[p * COUNT + i] = (float)(p * 100 + i);
    for (int r = 0; r < N; r++)
        ok &= check(name, "allgather", out[r], want, N * COUNT, r);
    /* The rest, each once per rank (their arithmetic is the fake's; reaching it counts). */
    ncclGroupStart();
    for (int r = 0; r < N; r++) {
        ncclReduce(in[r], out[r], COUNT, ncclFloat, ncclMax, 0, c[r], NULL);
        ncclReduceScatter(in[r], out[r], COUNT, ncclFloat, ncclSum, c[r], NULL);
        ncclBroadcast(in[r], out[r], COUNT, ncclFloat, 1, c[r], NULL);
        ncclAlltoAll(in[r], out[r], COUNT, ncclFloat, c[r], NULL);
        ncclGather(in[r], out[r], COUNT, ncclFloat, 2, c[r], NULL);
        ncclScatter(in[r], out[r], COUNT, ncclFloat, 0, c[r], NULL);
        ncclSend(in[r], COUNT, ncclFloat, (r + 1) % N, c[r], NULL);
        ncclRecv(out[r], COUNT, ncclFloat, (r + N - 1) % N, c[r], NULL);
    }
    NCCL_OK(name, ncclGroupEnd());
    for (int r = 0; r < N; r++) {
        for (int i = 0; i < COUNT; i++)
            want[i] = (float)(((r + N - 1) % N) * 100 + i);
        ok &= check(name, "ring", out[r], want, COUNT, r);
    }
    for (int k = 0; k < 10; k++) /* each once per rank */
        ok &= grew(name, fns[k], before[k], N);
    say(ok, name, " ");

    /* A pre-multiplied sum: the operator made on NCCL's comm too, and used there. */
    name = "nccl.route.nccl.premulsum";
    ncclRedOp_t op[N];
    float scalar = 0.5f;
    int made = calls("RedOpCreatePreMulSum"), gone = calls("RedOpDestroy"), ar = calls("AllReduce");
    for (int r = 0; r < N; r++)
        NCCL_OK(name, ncclRedOpCreatePreMulSum(&op[r], &scalar, ncclFloat, ncclScalarHostImmediate, c[r]));
    ncclGroupStart();
    for (int r = 0; r < N; r++)
        ncclAllReduce(in[r], out[r], COUNT, ncclFloat, op[r], c[r], NULL);
    NCCL_OK(name, ncclGroupEnd());
    for (int r = 0; r < N; r++)
        NCCL_OK(name, ncclRedOpDestroy(op[r], c[r]));
    for (int i = 0; i < COUNT; i++)
        want[i] = (float)(150 + 1.5 * i);
    ok = check(name, "premulsum", out[0], want, COUNT, 0) && grew(name, "RedOpCreatePreMulSum", made, N) &&
         grew(name, "RedOpDestroy", gone, N) && grew(name, "AllReduce", ar, N);
    say(ok, name, " ");

    /* Registrations, windows and ncclMemAlloc reach NCCL. */
    name = "nccl.route.nccl.memory";
    int reg = calls("CommRegister"), dereg = calls("CommDeregister"), win = calls("CommWindowRegister"),
        unwin = calls("CommWindowDeregister"), ma = calls("MemAlloc"), mf = calls("MemFree");
    void *h, *p;
    ncclWindow_t w;
    NCCL_OK(name, ncclCommRegister(c[0], in[0], sizeof in[0], &h));
    NCCL_OK(name, ncclCommDeregister(c[0], h));
    NCCL_OK(name, ncclCommWindowRegister(c[1], in[1], sizeof in[1], &w, NCCL_WIN_DEFAULT));
    NCCL_OK(name, ncclCommWindowDeregister(c[1], w));
    NCCL_OK(name, ncclMemAlloc(&p, 4096));
    NCCL_OK(name, ncclMemFree(p));
    /* The window's own registration (NCCL 2.28 makes one by ncclCommRegister's name) is
     * the second: it reached the fake back through the shim. */
    ok = grew(name, "CommRegister", reg, 2) && grew(name, "CommDeregister", dereg, 2) &&
         grew(name, "CommWindowRegister", win, 1) && grew(name, "CommWindowDeregister", unwin, 1) &&
         grew(name, "MemAlloc", ma, 1) && grew(name, "MemFree", mf, 1);
    say(ok, name, " ");

    /* NCCL's asynchronous failure, with its text. */
    name = "nccl.route.nccl.async-error";
    ncclResult_t async = ncclSuccess;
    set_async(ncclRemoteError);
    NCCL_OK(name, ncclCommGetAsyncError(c[2], &async));
    set_async(ncclSuccess);
    const char *msg = ncclGetLastError(c[2]);
    say(async == ncclRemoteError && strstr(msg, "the real NCCL reports an asynchronous failure: the fake NCCL's"),
        name, "async %d: %s", (int)async, msg);

    name = "nccl.route.nccl.destroy";
    int d = calls("CommDestroy"), a = calls("CommAbort");
    NCCL_OK(name, ncclCommDestroy(c[0]));
    NCCL_OK(name, ncclCommDestroy(c[1]));
    NCCL_OK(name, ncclCommAbort(c[2]));
    say(grew(name, "CommDestroy", d, 2) && grew(name, "CommAbort", a, 1), name, " ");
    return 0;
}

/* ---- mixed: allreduce on libccl feeding allgather on NCCL, ranks on threads ---- */

typedef struct {
    int rank;
    ncclUniqueId id;
    ncclComm_t comm;
    float out[N * COUNT];
    ncclResult_t r;
    char why[512];
} Rank;

static void *mixed_rank(void *arg)
{
    Rank *k = arg;
    float in[COUNT], mid[COUNT];
    for (int i = 0; i < COUNT; i++)
        in[i] = (float)(k->rank + i);
    if ((k->r = ncclCommInitRank(&k->comm, N, k->id, k->rank)) != ncclSuccess) {
        snprintf(k->why, sizeof k->why, "init: %s", ncclGetLastError(NULL));
        return NULL;
    }
    if ((k->r = ncclAllReduce(in, mid, COUNT, ncclFloat, ncclSum, k->comm, NULL)) != ncclSuccess ||
        (k->r = ncclAllGather(mid, k->out, COUNT, ncclFloat, k->comm, NULL)) != ncclSuccess)
        snprintf(k->why, sizeof k->why, "calls: %s", ncclGetLastError(k->comm));
    return NULL;
}

static int mixed(void)
{
    const char *name = "nccl.route.mixed.threads";
    Rank ks[N];
    pthread_t t[N];
    ncclUniqueId id;
    NCCL_OK(name, ncclGetUniqueId(&id));
    for (int r = 0; r < N; r++) {
        ks[r] = (Rank){.rank = r, .id = id};
        pthread_create(&t[r], NULL, mixed_rank, &ks[r]);
    }
    int ok = 1;
    float want[N * COUNT];
    for (int p = 0; p < N; p++)
        for (int i = 0; i < COUNT; i++)
            want[p * COUNT + i] = (float)(3 + 3 * i);
    for (int r = 0; r < N; r++) {
        pthread_join(t[r], NULL);
        if (ks[r].r != ncclSuccess) {
            say(0, name, "rank %d: %s", r, ks[r].why);
            ok = 0;
        } else {
            ok &= check(name, "allreduce then allgather", ks[r].out, want, N * COUNT, r);
        }
    }
    if (!ok || fake_open(name) != 0)
        return -1;
    ok = grew(name, "GetUniqueId", 0, 1) && grew(name, "CommInitRankConfig", 0, N) && grew(name, "AllReduce", 0, 0) &&
         grew(name, "AllGather", 0, N);
    for (int r = 0; r < N; r++)
        ncclCommDestroy(ks[r].comm);
    say(ok, name, " ");

    /* The same inits held in a group by one thread. */
    name = "nccl.route.mixed.group-of-inits";
    ncclComm_t c[N];
    int inits = calls("CommInitRankConfig");
    NCCL_OK(name, ncclGetUniqueId(&id));
    ncclGroupStart();
    for (int r = 0; r < N; r++)
        ncclCommInitRank(&c[r], N, id, r);
    NCCL_OK(name, ncclGroupEnd());
    float in[N][COUNT], out[N][N * COUNT];
    for (int r = 0; r < N; r++)
        for (int i = 0; i < COUNT; i++)
            in[r][i] = (float)(r * 10 + i);
    ncclGroupStart();
    for (int r = 0; r < N; r++)
        ncclAllGather(in[r], out[r], COUNT, ncclFloat, c[r], NULL);
    NCCL_OK(name, ncclGroupEnd());
    for (int p = 0; p < N; p++)
        for (int i = 0; i < COUNT; i++)
            want[p * COUNT + i] = (float)(p * 10 + i);
    ok = grew(name, "CommInitRankConfig", inits, N);
    for (int r = 0; r < N; r++) {
        ok &= check(name, "allgather", out[r], want, N * COUNT, r);
        ncclCommDestroy(c[r]);
    }
    say(ok, name, " ");
    return 0;
}

/* Two ranks of one process, rank r's input r * 10 + i, for the scenarios below. */
typedef struct {
    ncclComm_t c[2];
    float in[2][COUNT], out[2][2 * COUNT];
} Pair;

static int pair_open(const char *name, Pair *P)
{
    NCCL_OK(name, ncclCommInitAll(P->c, 2, NULL));
    if (fake_open(name) != 0)
        return -1;
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < COUNT; i++)
            P->in[r][i] = (float)(r * 10 + i);
    return 0;
}

/* An all-gather (1) or an all-reduce of `count` floats (0) on both ranks in one group:
 * 1 when every element is right, 0 when one is not, -1 when the group failed (said). */
static int pair_call(const char *name, Pair *P, int allgather, size_t count)
{
    float want[2 * COUNT];
    ncclGroupStart();
    for (int r = 0; r < 2; r++)
        if (allgather)
            ncclAllGather(P->in[r], P->out[r], count, ncclFloat, P->c[r], NULL);
        else
            ncclAllReduce(P->in[r], P->out[r], count, ncclFloat, ncclSum, P->c[r], NULL);
    NCCL_OK(name, ncclGroupEnd());
    size_t n = allgather ? 2 * count : count;
    for (size_t i = 0; i < n; i++)
        want[i] = allgather ? (float)(i / count * 10 + i % count) : (float)(10 + 2 * i);
    int ok = 1;
    for (int r = 0; r < 2; r++)
        ok &= check(name, allgather ? "allgather" : "allreduce", P->out[r], want, (int)n, r);
    return ok;
}

static void pair_close(Pair *P)
{
    for (int r = 0; r < 2; r++)
        ncclCommDestroy(P->c[r]);
}

/* ---- fallback: libccl refuses, NCCL serves ---- */

static int fallback(void)
{
    const char *name = "nccl.route.auto.fallback";
    Pair P;
    if (pair_open(name, &P) != 0)
        return -1;
    int ok = 1, g;
    for (int round = 0; round < 2; round++)
        for (int allgather = 1; allgather >= 0; allgather--) {
            if ((g = pair_call(name, &P, allgather, COUNT)) < 0)
                return -1;
            ok &= g;
        }
    ok = ok && grew(name, "AllGather", 0, 4) && grew(name, "AllReduce", 0, 0);
    pair_close(&P);
    say(ok, name, " ");
    return 0;
}

/* ---- auto: NCCL from CCL_NCCL_AUTO_LIMIT's size (run.sh sets allreduce:12,default:none) ---- */
static int limit(void)
{
    const char *name = "nccl.route.auto.limit";
    Pair P;
    if (pair_open(name, &P) != 0)
        return -1;
    /* All-reduces of 2 floats (8 bytes) to libccl, 3 (12 bytes: the limit) and 5 to
     * NCCL; an all-gather of 5 x 2 floats, under no limit, to libccl. */
    const size_t counts[] = {2, 3, COUNT};
    int ok = 1, g;
    for (int k = 0; k < 4; k++) {
        if ((g = pair_call(name, &P, k == 3, k == 3 ? COUNT : counts[k])) < 0)
            return -1;
        ok &= g;
    }
    ok = ok && grew(name, "AllReduce", 0, 4) && grew(name, "AllGather", 0, 0);
    pair_close(&P);
    say(ok, name, " ");
    return 0;
}

/* ---- auto: libccl where it can ---- */

static int auto_route(void)
{
    const char *name = "nccl.route.auto.ccl-where-it-can";
    enum { M = 2 };
    ncclComm_t c[M];
    float in[M][COUNT], out[M][COUNT], want[COUNT], s = 3;
    ncclRedOp_t op[M];
    NCCL_OK(name, ncclCommInitAll(c, M, NULL));
    if (fake_open(name) != 0)
        return -1;
    for (int r = 0; r < M; r++) {
        for (int i = 0; i < COUNT; i++)
            in[r][i] = (float)(r + i);
        NCCL_OK(name, ncclRedOpCreatePreMulSum(&op[r], &s, ncclFloat, ncclScalarHostImmediate, c[r]));
    }
    ncclGroupStart();
    for (int r = 0; r < M; r++) {
        ncclAllReduce(in[r], out[r], COUNT, ncclFloat, op[r], c[r], NULL);
        ncclBroadcast(in[r], in[r], COUNT, ncclFloat, 0, c[r], NULL);
    }
    NCCL_OK(name, ncclGroupEnd());
    for (int i = 0; i < COUNT; i++)
        want[i] = (float)(3 * (1 + 2 * i));
    int ok = check(name, "premulsum on libccl", out[1], want, COUNT, 1);
    for (int i = 0; i < COUNT; i++)
        want[i] = (float)i;
    ok &= check(name, "broadcast", in[1], want, COUNT, 1);
    ok = ok && grew(name, "CommInitAll", 0, 1) && grew(name, "RedOpCreatePreMulSum", 0, M) &&
         grew(name, "AllReduce", 0, 0) && grew(name, "Broadcast", 0, 0);
    say(ok, name, " ");

    /* Windows of both ranks, in a group (one thread drives them), reach both libraries:
     * NCCL inside its own group, libccl at the group's end, which a window overlapping
     * the first shows (libccl refuses it, warned; it can only where it has the first). */
    name = "nccl.route.auto.windows-reach-both";
    int win = calls("CommWindowRegister"), unwin = calls("CommWindowDeregister"), groups = calls("GroupStart");
    ncclWindow_t w[M], w2[M];
    ncclGroupStart();
    for (int r = 0; r < M; r++)
        ncclCommWindowRegister(c[r], in[r], sizeof in[r], &w[r], NCCL_WIN_COLL_SYMMETRIC);
    NCCL_OK(name, ncclGroupEnd());
    ncclGroupStart();
    for (int r = 0; r < M; r++)
        ncclCommWindowRegister(c[r], (char *)in[r] + 4, sizeof in[r], &w2[r], NCCL_WIN_COLL_SYMMETRIC);
    NCCL_OK(name, ncclGroupEnd());
    ok = 1;
    for (int r = 0; r < M; r++)
        if (!strstr(ncclGetLastError(c[r]), "libccl did not register") || !strstr(ncclGetLastError(c[r]), "overlaps")) {
            say(0, name, "rank %d: no warning of libccl's refusal of the overlapping window: %s", r,
                ncclGetLastError(c[r]));
            ok = 0;
        }
    ncclGroupStart();
    for (int r = 0; r < M; r++) {
        ncclCommWindowDeregister(c[r], w2[r]);
        ncclCommWindowDeregister(c[r], w[r]);
    }
    NCCL_OK(name, ncclGroupEnd());
    ok = ok && grew(name, "CommWindowRegister", win, 2 * M) && grew(name, "CommWindowDeregister", unwin, 2 * M);
    if (ok && calls("GroupStart") <= groups) {
        say(0, name, "the windows did not reach NCCL inside a group of its own");
        ok = 0;
    }
    if (ok)
        say(1, name, " ");
    for (int r = 0; r < M; r++)
        ncclCommDestroy(c[r]);
    return 0;
}

/* ---- split: torch's new_group ---- */

enum { S = 3 };

typedef struct {
    int rank;
    ncclUniqueId id;
    ncclComm_t parent, child;
    float out[COUNT];
    int failed;
    char why[512];
} SplitRank;

static void *split_rank(void *arg)
{
    SplitRank *k = arg;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; /* torch's eager init asks for non-blocking comms */
    ncclResult_t r = ncclCommInitRankConfig(&k->parent, S, k->id, k->rank, &cfg);
    if (r != ncclSuccess) {
        snprintf(k->why, sizeof k->why, "init: %s", ncclGetLastError(NULL));
        k->failed = 1;
        return NULL;
    }
    /* torch's config for the group: non-blocking, from a torch built against NCCL 2.27's
     * nccl.h (a shorter struct). Ranks 0 and 2 form the group, rank 1 passes no color. */
    ncclConfig_t sub = NCCL_CONFIG_INITIALIZER;
    sub.size = offsetof(ncclConfig_t, nChannelsPerNetPeer);
    sub.version = NCCL_VERSION(2, 27, 3);
    sub.blocking = 0;
    sub.splitShare = 0;
    int color = k->rank == 1 ? NCCL_SPLIT_NOCOLOR : 12345;
    if ((r = ncclCommSplit(k->parent, color, k->rank / 2, &k->child, &sub)) != ncclSuccess) {
        snprintf(k->why, sizeof k->why, "split: %s", ncclGetLastError(k->parent));
        k->failed = 1;
        return NULL;
    }
    if (color == NCCL_SPLIT_NOCOLOR) {
        if (k->child) {
            snprintf(k->why, sizeof k->why, "NCCL_SPLIT_NOCOLOR gave a communicator");
            k->failed = 1;
        }
        return NULL;
    }
    int n = -1, me = -1;
    float in[COUNT];
    for (int i = 0; i < COUNT; i++)
        in[i] = (float)(k->rank + i);
    if (!k->child || ncclCommCount(k->child, &n) != ncclSuccess || ncclCommUserRank(k->child, &me) != ncclSuccess ||
        n != 2 || me != k->rank / 2) {
        snprintf(k->why, sizeof k->why, "child %p of size %d rank %d, expected size 2 rank %d", (void *)k->child, n, me,
                 k->rank / 2);
        k->failed = 1;
    } else if (ncclAllReduce(in, k->out, COUNT, ncclFloat, ncclSum, k->child, NULL) != ncclSuccess) {
        snprintf(k->why, sizeof k->why, "child's all-reduce: %s", ncclGetLastError(k->child));
        k->failed = 1;
    }
    return NULL;
}

static int split_nocolor(void)
{
    const char *name = "nccl.route.split.nocolor";
    SplitRank ks[S];
    pthread_t t[S];
    ncclUniqueId id;
    NCCL_OK(name, ncclGetUniqueId(&id));
    for (int r = 0; r < S; r++) {
        ks[r] = (SplitRank){.rank = r, .id = id};
        pthread_create(&t[r], NULL, split_rank, &ks[r]);
    }
    int ok = 1;
    for (int r = 0; r < S; r++)
        pthread_join(t[r], NULL);
    for (int r = 0; r < S; r++) {
        if (ks[r].failed) {
            say(0, name, "rank %d: %s", r, ks[r].why);
            ok = 0;
        }
    }
    float want[COUNT];
    for (int i = 0; i < COUNT; i++)
        want[i] = (float)(2 + 2 * i); /* ranks 0 and 2 */
    for (int r = 0; ok && r < S; r += 2)
        ok = check(name, "the child's all-reduce", ks[r].out, want, COUNT, r);
    if (fake_open(name) != 0)
        return -1;
    ok = ok && grew(name, "CommSplit", 0, S) && grew(name, "AllReduce", 0, 2);
    for (int r = 0; r < S; r++) {
        if (ks[r].child)
            ncclCommDestroy(ks[r].child);
        if (ks[r].parent)
            ncclCommDestroy(ks[r].parent);
    }
    say(ok, name, " ");
    return 0;
}

static int missing(void)
{
    ncclComm_t c[2];
    expect_fail("nccl.route.nccl-without-library", ncclCommInitAll(c, 2, NULL), ncclInvalidUsage, NULL,
                "CCL_NCCL_ROUTE sends allreduce to NCCL, but CCL_NCCL_LIB=none");
    return 0;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "";
    if (!strcmp(what, "nccl"))
        all_to_nccl();
    else if (!strcmp(what, "mixed"))
        mixed();
    else if (!strcmp(what, "fallback"))
        fallback();
    else if (!strcmp(what, "auto"))
        auto_route();
    else if (!strcmp(what, "missing"))
        missing();
    else if (!strcmp(what, "split"))
        split_nocolor();
    else if (!strcmp(what, "limit"))
        limit();
    else
        say(0, "nccl.route", "usage: routes nccl|mixed|fallback|auto|missing|split|limit");
    return failures ? 1 : 0;
}
