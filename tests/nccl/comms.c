/* comms.c: libccl_nccl's communicators, groups and errors on libccl's CPU backend (the
 * test mode), written against nccl.h only.
 *
 * Inits: ncclGetUniqueId + ncclCommInitRank from one thread per rank; the same inits
 * held in a group by one thread; ncclCommInitRankConfig (non-blocking config, a name);
 * ncclCommInitRankScalable with two ids. Splits (in a group from one thread, and from a
 * thread per rank; NCCL_SPLIT_NOCOLOR; children outliving their parent). Abort: a peer
 * learns it (ncclCommGetAsyncError, then its calls fail naming the rank), and an abort
 * from another thread ends a call blocked on a peer. Finalize, revoke, shrink. Every
 * error NCCL defines for bad arguments and misuse, with NCCL's codes and
 * ncclGetLastError's text; registrations, windows, ncclMemAlloc's errors; groups
 * (nesting, a failed call, ncclGroupSimulateEnd); CCL_NCCL_ROUTE. */
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

enum { COUNT = 33, MAXN = 8 };

/* An exact float all-reduce on comms[0..n) from one thread (a group); 0 when right. */
static int allreduce_check(ncclComm_t *comms, int n, const int *tag, char *why, size_t len)
{
    float in[MAXN][COUNT], out[MAXN][COUNT];
    for (int r = 0; r < n; r++)
        for (int i = 0; i < COUNT; i++)
            in[r][i] = (float)(tag[r] + i), out[r][i] = -1;
    ncclGroupStart();
    for (int r = 0; r < n; r++)
        ncclAllReduce(in[r], out[r], COUNT, ncclFloat, ncclSum, comms[r], NULL);
    ncclResult_t e = ncclGroupEnd();
    if (e != ncclSuccess) {
        snprintf(why, len, "ncclGroupEnd returned %d: %s", (int)e, ncclGetLastError(NULL));
        return -1;
    }
    float base = 0;
    for (int r = 0; r < n; r++)
        base += (float)tag[r];
    for (int r = 0; r < n; r++)
        for (int i = 0; i < COUNT; i++)
            if (out[r][i] != base + (float)(n * i)) {
                snprintf(why, len, "rank %d element %d is %g, expected %g", r, i, out[r][i], base + (float)(n * i));
                return -1;
            }
    return 0;
}

/* ---- init by rank, one thread per rank ---- */

typedef struct {
    int n, rank, nid;
    ncclUniqueId *ids;
    ncclComm_t comm;
    ncclResult_t r;
    char why[512];
    float out[COUNT];
    int use_config;
} Rank;

static void *rank_main(void *arg)
{
    Rank *k = arg;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    cfg.commName = "threads";
    if (k->nid > 1)
        k->r = ncclCommInitRankScalable(&k->comm, k->n, k->rank, k->nid, k->ids, &cfg);
    else if (k->use_config)
        k->r = ncclCommInitRankConfig(&k->comm, k->n, k->ids[0], k->rank, &cfg);
    else
        k->r = ncclCommInitRank(&k->comm, k->n, k->ids[0], k->rank);
    if (k->r != ncclSuccess) {
        snprintf(k->why, sizeof k->why, "init: %d: %s", (int)k->r, ncclGetLastError(NULL));
        return NULL;
    }
    ncclResult_t async = ncclInternalError;
    int count = -1, me = -1, dev = -2;
    if ((k->r = ncclCommGetAsyncError(k->comm, &async)) != ncclSuccess || async != ncclSuccess ||
        ncclCommCount(k->comm, &count) != ncclSuccess || ncclCommUserRank(k->comm, &me) != ncclSuccess ||
        ncclCommCuDevice(k->comm, &dev) != ncclSuccess || count != k->n || me != k->rank || dev < 0) {
        snprintf(k->why, sizeof k->why, "queries: async %d, count %d, rank %d, device %d", (int)async, count, me, dev);
        k->r = ncclInternalError;
        return NULL;
    }
    float in[COUNT];
    for (int i = 0; i < COUNT; i++)
        in[i] = (float)(k->rank * i);
    /* The CPU backend's call completes before it returns (the test mode). */
    if ((k->r = ncclAllReduce(in, k->out, COUNT, ncclFloat, ncclSum, k->comm, NULL)) != ncclSuccess)
        snprintf(k->why, sizeof k->why, "allreduce: %s", ncclGetLastError(k->comm));
    else if ((k->r = ncclCommFinalize(k->comm)) != ncclSuccess)
        snprintf(k->why, sizeof k->why, "finalize: %s", ncclGetLastError(k->comm));
    else if ((k->r = ncclCommDestroy(k->comm)) != ncclSuccess)
        snprintf(k->why, sizeof k->why, "destroy: %s", ncclGetLastError(NULL));
    return NULL;
}

static void init_threads(const char *name, int n, int nid, int use_config)
{
    ncclUniqueId ids[2];
    for (int k = 0; k < nid; k++)
        if (ncclGetUniqueId(&ids[k]) != ncclSuccess) {
            say(0, name, "ncclGetUniqueId: %s", ncclGetLastError(NULL));
            return;
        }
    Rank ks[MAXN];
    pthread_t t[MAXN];
    for (int r = 0; r < n; r++) {
        ks[r] = (Rank){.n = n, .rank = r, .nid = nid, .ids = ids, .use_config = use_config};
        pthread_create(&t[r], NULL, rank_main, &ks[r]);
    }
    int ok = 1;
    char why[600] = "";
    for (int r = 0; r < n; r++) {
        pthread_join(t[r], NULL);
        if (ks[r].r != ncclSuccess && ok) {
            snprintf(why, sizeof why, "rank %d: %s", r, ks[r].why);
            ok = 0;
        }
        for (int i = 0; ok && i < COUNT; i++)
            if (ks[r].out[i] != (float)(n * (n - 1) / 2 * i)) {
                snprintf(why, sizeof why, "rank %d element %d is %g", r, i, ks[r].out[i]);
                ok = 0;
            }
    }
    say(ok, name, "%s", why);
}

/* The same inits held in a group by one thread: they run at ncclGroupEnd. */
static void init_group(void)
{
    const char *name = "nccl.init.group-of-inits";
    enum { n = 3 };
    ncclUniqueId id;
    ncclComm_t c[n];
    char why[512] = "";
    int tag[n] = {1, 2, 3};
    if (ncclGetUniqueId(&id) != ncclSuccess) {
        say(0, name, "ncclGetUniqueId: %s", ncclGetLastError(NULL));
        return;
    }
    ncclGroupStart();
    int held = 1;
    for (int r = 0; r < n; r++)
        held &= ncclCommInitRank(&c[r], n, id, r) == ncclSuccess && c[r] == NULL;
    ncclResult_t e = ncclGroupEnd();
    if (!held || e != ncclSuccess) {
        say(0, name, "held %d, ncclGroupEnd %d: %s", held, (int)e, ncclGetLastError(NULL));
        return;
    }
    say(allreduce_check(c, n, tag, why, sizeof why) == 0, name, "%s", why);
    for (int r = 0; r < n; r++)
        ncclCommDestroy(c[r]);
}

/* ---- split ---- */

static int color_of(int r)
{
    return r == 3 ? NCCL_SPLIT_NOCOLOR : r % 2;
}

/* Children of a 5-rank clique split by color r % 2 (rank 3 in none), key -r: each
 * child's ranks in reverse parent order. */
static int check_children(const char *name, ncclComm_t *kids)
{
    for (int r = 0; r < 5; r++) {
        int c = color_of(r), size = -1, me = -1;
        if (c == NCCL_SPLIT_NOCOLOR) {
            if (kids[r]) {
                say(0, name, "rank %d passed NCCL_SPLIT_NOCOLOR but got a communicator", r);
                return -1;
            }
            continue;
        }
        int want_size = c == 0 ? 3 : 1, want_rank = c == 0 ? (4 - r) / 2 : 0; /* color 0: 4, 2, 0 */
        if (!kids[r] || ncclCommCount(kids[r], &size) != ncclSuccess || ncclCommUserRank(kids[r], &me) != ncclSuccess ||
            size != want_size || me != want_rank) {
            say(0, name, "rank %d: child %p of size %d rank %d, expected size %d rank %d", r, (void *)kids[r], size, me,
                want_size, want_rank);
            return -1;
        }
    }
    return 0;
}

typedef struct {
    ncclComm_t parent, child;
    int rank;
    ncclResult_t r;
} SplitArg;

static void *split_main(void *arg)
{
    SplitArg *s = arg;
    s->r = ncclCommSplit(s->parent, color_of(s->rank), -s->rank, &s->child, NULL);
    return NULL;
}

static void split(void)
{
    const char *name = "nccl.split.group";
    ncclComm_t p[5], kids[5];
    char why[512] = "";
    if (ncclCommInitAll(p, 5, NULL) != ncclSuccess) {
        say(0, name, "ncclCommInitAll: %s", ncclGetLastError(NULL));
        return;
    }
    ncclGroupStart();
    for (int r = 0; r < 5; r++)
        ncclCommSplit(p[r], color_of(r), -r, &kids[r], NULL);
    ncclResult_t e = ncclGroupEnd();
    if (e != ncclSuccess)
        say(0, name, "ncclGroupEnd: %d: %s", (int)e, ncclGetLastError(NULL));
    else if (check_children(name, kids) == 0) {
        /* color 0's ranks in child order: parents 4, 2, 0 */
        ncclComm_t c0[3] = {kids[4], kids[2], kids[0]};
        int tag[3] = {4, 2, 0};
        say(allreduce_check(c0, 3, tag, why, sizeof why) == 0, name, "%s", why);
    }
    for (int r = 0; r < 5; r++)
        if (kids[r])
            ncclCommDestroy(kids[r]);

    /* One thread per rank, outside a group; the children outlive their parents. */
    name = "nccl.split.threads";
    pthread_t t[5];
    SplitArg a[5];
    for (int r = 0; r < 5; r++) {
        a[r] = (SplitArg){.parent = p[r], .rank = r};
        pthread_create(&t[r], NULL, split_main, &a[r]);
    }
    int ok = 1;
    for (int r = 0; r < 5; r++) {
        pthread_join(t[r], NULL);
        kids[r] = a[r].child;
        ok &= a[r].r == ncclSuccess;
    }
    for (int r = 0; r < 5; r++)
        ncclCommDestroy(p[r]);
    if (!ok)
        say(0, name, "a split failed: %s", ncclGetLastError(NULL));
    else if (check_children(name, kids) == 0) {
        ncclComm_t c0[3] = {kids[4], kids[2], kids[0]};
        int tag[3] = {4, 2, 0};
        say(allreduce_check(c0, 3, tag, why, sizeof why) == 0, name, "%s", why);
    }
    for (int r = 0; r < 5; r++)
        if (kids[r])
            ncclCommDestroy(kids[r]);
}

/* ---- abort ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *abort_later(void *arg)
{
    usleep(300000);
    ncclCommAbort(*(ncclComm_t *)arg);
    return NULL;
}

static void abort_tests(void)
{
    const char *name = "nccl.abort.peer-learns";
    ncclComm_t c[2];
    if (ncclCommInitAll(c, 2, NULL) != ncclSuccess) {
        say(0, name, "ncclCommInitAll: %s", ncclGetLastError(NULL));
        return;
    }
    ncclResult_t r = ncclCommAbort(c[0]), async = ncclSuccess;
    double t0 = now_s();
    while (ncclCommGetAsyncError(c[1], &async) == ncclSuccess && async == ncclSuccess && now_s() - t0 < 5)
        usleep(10000);
    float x[4] = {0};
    ncclResult_t call = ncclAllReduce(x, x, 4, ncclFloat, ncclSum, c[1], NULL);
    const char *msg = ncclGetLastError(c[1]);
    say(r == ncclSuccess && async == ncclRemoteError && call == ncclRemoteError && strstr(msg, "rank 0"), name,
        "abort %d, the peer's async error %d, its call %d (expected %d): %s", (int)r, (int)async, (int)call,
        (int)ncclRemoteError, msg);
    expect_fail("nccl.abort.handle-dead", ncclAllReduce(x, x, 4, ncclFloat, ncclSum, c[0], NULL), ncclInvalidArgument,
                NULL, "not a live communicator");
    say(ncclCommDestroy(c[1]) == ncclSuccess, "nccl.abort.peer-destroy", "%s", ncclGetLastError(NULL));

    /* An abort from another thread ends a call blocked on a peer that never comes. */
    name = "nccl.abort.from-another-thread";
    if (ncclCommInitAll(c, 2, NULL) != ncclSuccess) {
        say(0, name, "ncclCommInitAll: %s", ncclGetLastError(NULL));
        return;
    }
    pthread_t t;
    pthread_create(&t, NULL, abort_later, &c[0]);
    t0 = now_s();
    call = ncclAllReduce(x, x, 4, ncclFloat, ncclSum, c[0], NULL); /* rank 1 never calls */
    double took = now_s() - t0;
    pthread_join(t, NULL);
    say(call != ncclSuccess && took < 5, name, "the blocked call returned %d after %.1f s", (int)call, took);
    ncclCommDestroy(c[1]);
}

/* ---- errors ---- */

static void errors(void)
{
    ncclComm_t c[2];
    float x[4] = {0};
    int v = 0;
    say(ncclGetVersion(&v) == ncclSuccess && v == NCCL_VERSION_CODE, "nccl.version", "ncclGetVersion gave %d, the "
        "header says %d", v, NCCL_VERSION_CODE);
    say(strstr(ncclGetErrorString(ncclInvalidArgument), "invalid argument") &&
            strstr(ncclGetErrorString(ncclRemoteError), "remote process") &&
            !strcmp(ncclGetErrorString(ncclSuccess), "no error") &&
            !strcmp(ncclGetErrorString((ncclResult_t)99), "unknown result code"),
        "nccl.error-strings", "%s / %s", ncclGetErrorString(ncclInvalidArgument), ncclGetErrorString(ncclRemoteError));
    expect_fail("nccl.errors.version-null", ncclGetVersion(NULL), ncclInvalidArgument, NULL, "'version'");
    expect_fail("nccl.errors.initall-ndev", ncclCommInitAll(c, 0, NULL), ncclInvalidArgument, NULL, "'ndev'");
    int bad_dev[2] = {0, -3};
    expect_fail("nccl.errors.initall-devlist", ncclCommInitAll(c, 2, bad_dev), ncclInvalidArgument, NULL, "devlist[1]");
    ncclUniqueId junk;
    memset(&junk, 7, sizeof junk);
    expect_fail("nccl.errors.initrank-foreign-id", ncclCommInitRank(&c[0], 2, junk, 0), ncclInvalidArgument, NULL,
                "not made by libccl_nccl");
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    expect_fail("nccl.errors.initrank-rank", ncclCommInitRank(&c[0], 2, id, 2), ncclInvalidArgument, NULL, "'rank'");
    expect_fail("nccl.errors.initrank-nranks", ncclCommInitRank(&c[0], 0, id, 0), ncclInvalidArgument, NULL,
                "'nranks'");
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.magic = 0;
    expect_fail("nccl.errors.config-uninitialized", ncclCommInitRankConfig(&c[0], 1, id, 0, &cfg), ncclInvalidArgument,
                NULL, "NCCL_CONFIG_INITIALIZER");
    expect_fail("nccl.errors.comm-null", ncclAllReduce(x, x, 4, ncclFloat, ncclSum, NULL, NULL), ncclInvalidArgument,
                NULL, "ncclAllReduce: argument 'comm' is NULL");
    expect_fail("nccl.errors.comm-foreign", ncclAllReduce(x, x, 4, ncclFloat, ncclSum, (ncclComm_t)(void *)x, NULL),
                ncclInvalidArgument, NULL, "not a live communicator");
    say(ncclCommDestroy(NULL) == ncclSuccess && ncclCommAbort(NULL) == ncclSuccess, "nccl.errors.destroy-null",
        "ncclCommDestroy(NULL) or ncclCommAbort(NULL) failed");
    expect_fail("nccl.errors.groupend-without-start", ncclGroupEnd(), ncclInvalidUsage, NULL, "no group is open");

    if (ncclCommInitAll(c, 2, NULL) != ncclSuccess) {
        say(0, "nccl.errors.initall", "%s", ncclGetLastError(NULL));
        return;
    }
    expect_fail("nccl.errors.dtype", ncclAllReduce(x, x, 4, (ncclDataType_t)12, ncclSum, c[0], NULL),
                ncclInvalidArgument, c[0], "argument 'datatype' is 12");
    expect_fail("nccl.errors.op", ncclAllReduce(x, x, 4, ncclFloat, (ncclRedOp_t)9, c[0], NULL), ncclInvalidArgument,
                c[0], "argument 'op' is 9");
    expect_fail("nccl.errors.root", ncclBroadcast(x, x, 4, ncclFloat, 2, c[0], NULL), ncclInvalidArgument, c[0],
                "argument 'root' is 2, outside 0..1");
    expect_fail("nccl.errors.root-negative", ncclReduce(x, x, 4, ncclFloat, ncclSum, -1, c[1], NULL),
                ncclInvalidArgument, c[1], "'root'");
    expect_fail("nccl.errors.peer", ncclSend(x, 4, ncclFloat, 5, c[0], NULL), ncclInvalidArgument, c[0],
                "argument 'peer' is 5");
    expect_fail("nccl.errors.sendbuff-null", ncclAllGather(NULL, x, 2, ncclFloat, c[0], NULL), ncclInvalidArgument,
                c[0], "'sendbuff' is NULL");
    expect_fail("nccl.errors.recvbuff-null", ncclRecv(NULL, 1, ncclFloat, 1, c[0], NULL), ncclInvalidArgument, c[0],
                "'recvbuff' is NULL");
    /* The last error is the comm's (also for another thread) and the thread's. */
    ncclAllReduce(x, x, 4, (ncclDataType_t)-1, ncclSum, c[1], NULL);
    say(strstr(ncclGetLastError(c[1]), "ncclAllReduce: argument 'datatype' is -1") &&
            strstr(ncclGetLastError(c[0]), "'recvbuff' is NULL") && strstr(ncclGetLastError(NULL), "'datatype' is -1"),
        "nccl.errors.last-error-per-comm", "comm 0: %s; comm 1: %s", ncclGetLastError(c[0]), ncclGetLastError(c[1]));

    /* Operators. */
    ncclRedOp_t op;
    float s = 2;
    expect_fail("nccl.errors.redop-destroy-builtin", ncclRedOpDestroy(ncclSum, c[0]), ncclInvalidArgument, c[0],
                "built-in");
    expect_fail("nccl.errors.redop-scalar-null", ncclRedOpCreatePreMulSum(&op, NULL, ncclFloat,
                ncclScalarHostImmediate, c[0]), ncclInvalidArgument, c[0], "'scalar'");
    if (ncclRedOpCreatePreMulSum(&op, &s, ncclFloat, ncclScalarHostImmediate, c[0]) == ncclSuccess) {
        say(op >= ncclNumOps, "nccl.redop.value", "the operator is %d", (int)op);
        expect_fail("nccl.errors.redop-dtype", ncclAllReduce(x, x, 4, ncclDouble, op, c[0], NULL), ncclInvalidArgument,
                    c[0], "made for datatype 7");
        expect_fail("nccl.errors.redop-other-comm", ncclAllReduce(x, x, 4, ncclFloat, op, c[1], NULL),
                    ncclInvalidArgument, c[1], "ncclRedOpCreatePreMulSum");
        say(ncclRedOpDestroy(op, c[0]) == ncclSuccess, "nccl.redop.destroy", "%s", ncclGetLastError(c[0]));
        expect_fail("nccl.errors.redop-destroyed", ncclAllReduce(x, x, 4, ncclFloat, op, c[0], NULL),
                    ncclInvalidArgument, c[0], "destroyed");
        expect_fail("nccl.errors.redop-destroy-twice", ncclRedOpDestroy(op, c[0]), ncclInvalidArgument, c[0],
                    "destroyed already");
    } else {
        say(0, "nccl.redop.create", "%s", ncclGetLastError(c[0]));
    }

    /* Registrations and windows: handed out, checked when they come back. */
    void *h = NULL;
    ncclWindow_t w = NULL;
    say(ncclCommRegister(c[0], x, sizeof x, &h) == ncclSuccess && h && ncclCommDeregister(c[0], h) == ncclSuccess,
        "nccl.register", "%s", ncclGetLastError(c[0]));
    expect_fail("nccl.errors.deregister-twice", ncclCommDeregister(c[0], h), ncclInvalidArgument, c[0],
                "not a live handle");
    say(ncclCommWindowRegister(c[1], x, sizeof x, &w, NCCL_WIN_DEFAULT) == ncclSuccess && w &&
            ncclCommWindowDeregister(c[1], w) == ncclSuccess, "nccl.window", "%s", ncclGetLastError(c[1]));
    ncclCommRegister(c[0], x, sizeof x, &h);
    expect_fail("nccl.errors.deregister-other-comm", ncclCommDeregister(c[1], h), ncclInvalidArgument, c[1],
                "of this communicator");
    ncclCommDeregister(c[0], h);

    /* Memory. */
    void *p = NULL;
    expect_fail("nccl.errors.memalloc-null", ncclMemAlloc(NULL, 8), ncclInvalidArgument, NULL, "'ptr'");
    say(ncclMemAlloc(&p, 0) == ncclSuccess && ncclMemFree(NULL) == ncclSuccess, "nccl.memalloc.zero", "%s",
        ncclGetLastError(NULL));
    expect_fail("nccl.errors.memfree-foreign", ncclMemFree(x), ncclInvalidArgument, NULL, "not allocated by ncclMemAlloc");

    /* Groups: nesting, a failed call, simulate. */
    ncclGroupStart();
    ncclGroupStart();
    ncclResult_t inner = ncclAllReduce(x, x, 4, (ncclDataType_t)77, ncclSum, c[0], NULL);
    ncclResult_t end1 = ncclGroupEnd(), end2 = ncclGroupEnd();
    say(inner == ncclInvalidArgument && end1 == ncclSuccess && end2 == ncclInvalidArgument &&
            strstr(ncclGetLastError(NULL), "a call of the group failed"),
        "nccl.group.failed-call", "call %d, inner end %d, outer end %d: %s", (int)inner, (int)end1, (int)end2,
        ncclGetLastError(NULL));
    ncclSimInfo_t si = NCCL_SIM_INFO_INITIALIZER;
    ncclGroupStart();
    ncclResult_t sim = ncclGroupSimulateEnd(&si);
    say(sim == ncclInvalidUsage && ncclGroupEnd() == ncclSuccess, "nccl.group.simulate-refused", "simulate %d",
        (int)sim);
    expect_fail("nccl.errors.shrink-without-nccl", ncclCommShrink(c[0], NULL, 0, &c[0], NULL, NCCL_SHRINK_DEFAULT),
                ncclInvalidUsage, c[0], "cannot shrink");

    /* Finalize: later calls are refused, destroy works. */
    say(ncclCommFinalize(c[0]) == ncclSuccess && ncclCommFinalize(c[1]) == ncclSuccess, "nccl.finalize", "%s",
        ncclGetLastError(NULL));
    expect_fail("nccl.errors.after-finalize", ncclAllReduce(x, x, 4, ncclFloat, ncclSum, c[0], NULL), ncclInvalidUsage,
                c[0], "finalized");
    expect_fail("nccl.errors.finalize-twice", ncclCommFinalize(c[0]), ncclInvalidUsage, c[0], "finalized already");
    say(ncclCommDestroy(c[0]) == ncclSuccess && ncclCommDestroy(c[1]) == ncclSuccess, "nccl.destroy", "%s",
        ncclGetLastError(NULL));
    expect_fail("nccl.errors.destroy-twice", ncclCommDestroy(c[0]), ncclInvalidArgument, NULL, "not a live");

    /* Revoke: the comm's calls fail, it can still be destroyed. */
    if (ncclCommInitAll(c, 2, NULL) == ncclSuccess) {
        expect_fail("nccl.errors.revoke-flags", ncclCommRevoke(c[0], 5), ncclInvalidArgument, c[0], "revokeFlags");
        say(ncclCommRevoke(c[0], NCCL_REVOKE_DEFAULT) == ncclSuccess, "nccl.revoke", "%s", ncclGetLastError(c[0]));
        expect_fail("nccl.errors.after-revoke", ncclAllReduce(x, x, 4, ncclFloat, ncclSum, c[0], NULL),
                    ncclInvalidUsage, c[0], "revoked");
        say(ncclCommDestroy(c[0]) == ncclSuccess && ncclCommDestroy(c[1]) == ncclSuccess, "nccl.revoke.destroy", "%s",
            ncclGetLastError(NULL));
    }
}

/* CCL_NCCL_ROUTE: parsed at the init, refused with the reason; "nccl" cannot run on
 * the CPU backend (NCCL needs GPU buffers), which is said, and the route skipped. */
static void routes(void)
{
    ncclComm_t c[2];
    ncclUniqueId id;
    setenv("CCL_NCCL_ROUTE", "sometimes", 1);
    expect_fail("nccl.route.bad-value", ncclCommInitAll(c, 2, NULL), ncclInvalidArgument, NULL,
                "CCL_NCCL_ROUTE='sometimes' is not auto, ccl, nccl");
    expect_fail("nccl.route.bad-value-uniqueid", ncclGetUniqueId(&id), ncclInvalidArgument, NULL, "CCL_NCCL_ROUTE");
    setenv("CCL_NCCL_ROUTE", "allreduce:ccl,allscatter:nccl", 1);
    expect_fail("nccl.route.bad-collective", ncclCommInitAll(c, 2, NULL), ncclInvalidArgument, NULL,
                "'allscatter:nccl' is not COLLECTIVE:ROUTE");
    setenv("CCL_NCCL_ROUTE", "all_reduce:ccl,reduce_scatter:auto,default:ccl", 1);
    if (ncclCommInitAll(c, 2, NULL) == ncclSuccess) {
        say(1, "nccl.route.list", " ");
        ncclCommDestroy(c[0]);
        ncclCommDestroy(c[1]);
    } else {
        say(0, "nccl.route.list", "%s", ncclGetLastError(NULL));
    }
    setenv("CCL_NCCL_ROUTE", "allgather:nccl,default:ccl", 1);
    ncclResult_t r = ncclCommInitAll(c, 2, NULL);
    expect_fail("nccl.route.nccl-refused-on-cpu", r, ncclInvalidUsage, NULL,
                "CCL_NCCL_ROUTE sends allgather to NCCL, but these communicators run on libccl's cpu backend");
    printf("skip nccl.route.nccl: the real NCCL needs GPU buffers, which the CPU backend's test mode does not have "
           "(tests/nccl/gpu_torch.sh runs it on a GPU machine; the fake NCCL of tests/nccl/run.sh covers the routing)\n");
    setenv("CCL_NCCL_ROUTE", "ccl", 1);
}

int main(void)
{
    init_threads("nccl.init.threads.N3", 3, 1, 0);
    init_threads("nccl.init.threads-config.N4", 4, 1, 1);
    init_threads("nccl.init.scalable.N3", 3, 2, 0);
    init_threads("nccl.init.threads.N1", 1, 1, 0);
    init_group();
    split();
    abort_tests();
    errors();
    routes();
    return failures ? 1 : 0;
}
