/* colls.c: every collective libccl_nccl maps, on libccl's CPU backend (the test mode:
 * CCL_BACKEND=cpu, host buffers, CCL_NCCL_ROUTE=ccl), written against nccl.h only.
 *
 * One thread drives every rank of an ncclCommInitAll clique through groups, as NCCL's
 * single-process programs do, for N = 2, 3 and 4: all-reduce, reduce and reduce-scatter
 * for every datatype x every operator; all-gather, broadcast (and the legacy ncclBcast),
 * all-to-all, gather and scatter for every datatype; in place (NCCL's forms) and out of
 * place; count 0 with NULL buffers; a ring of sends and receives in one group, a send
 * to itself; ncclRedOpCreatePreMulSum operators (host and device scalars) on every
 * datatype; ncclMemAlloc buffers. Data is exact: small integers chosen so that every
 * sum, product and average is exact in every datatype, compared element by element;
 * outputs are poisoned before each call. */
#include "common.h"

enum { COUNT = 7, MAXN = 4 };

static int N;
static ncclComm_t comms[MAXN];
static void *sendb[MAXN], *recvb[MAXN];

typedef enum { ALLREDUCE, REDUCE, REDUCESCATTER, ALLGATHER, BROADCAST, BCAST, ALLTOALL, GATHER, SCATTER } Coll;
static const char *const coll_names[] = {"allreduce", "reduce", "reducescatter", "allgather", "broadcast",
                                         "bcast", "alltoall", "gather", "scatter"};
static const char *const op_names[] = {"sum", "prod", "max", "min", "avg"};

/* Rank r's element i: every reduction of N <= 4 of them is exact in every datatype
 * (every partial sum at most 8, products powers of two up to 16, averages of values
 * whose deviations cancel, their sums at most 8). */
static double input(int r, size_t i, ncclRedOp_t op)
{
    if (op == ncclProd)
        return (r + (int)i) % 3 == 0 ? 2 : 1;
    if (op == ncclAvg) {
        int delta = N % 2 && r == N - 1 ? 0 : r % 2 ? -1 : 1;
        return 1 + (double)(i % 2) + delta;
    }
    return (r + 2 * (int)i) % 3;
}

static double reduce_all(size_t i, ncclRedOp_t op)
{
    double acc = input(0, i, op);
    for (int r = 1; r < N; r++) {
        double x = input(r, i, op);
        acc = op == ncclProd ? acc * x : op == ncclMax ? fmax(acc, x) : op == ncclMin ? fmin(acc, x) : acc + x;
    }
    return op == ncclAvg ? acc / N : acc;
}

static int rooted(Coll c)
{
    return c == REDUCE || c == BROADCAST || c == BCAST || c == GATHER || c == SCATTER;
}

/* Elements of a rank's send and receive buffers. */
static size_t send_elems(Coll c)
{
    return c == REDUCESCATTER || c == ALLTOALL || c == SCATTER ? (size_t)N * COUNT : COUNT;
}

static size_t recv_elems(Coll c)
{
    return c == ALLGATHER || c == ALLTOALL || c == GATHER ? (size_t)N * COUNT : COUNT;
}

/* Where rank r's call reads and writes, in place or not (NCCL's in-place forms). */
static void buffers(Coll c, int r, int root, int in_place, ncclDataType_t t, const void **s, void **d)
{
    size_t es = dtype_size(t);
    *s = sendb[r];
    *d = recvb[r];
    if (!in_place)
        return;
    switch (c) {
    case ALLGATHER:
        *s = (char *)recvb[r] + (size_t)r * COUNT * es;
        break;
    case REDUCESCATTER:
        *d = (char *)sendb[r] + (size_t)r * COUNT * es;
        break;
    case GATHER:
        if (r == root)
            *s = (char *)recvb[r] + (size_t)root * COUNT * es;
        break;
    case SCATTER:
        if (r == root)
            *d = (char *)sendb[r] + (size_t)root * COUNT * es;
        break;
    default:
        *s = *d = recvb[r];
    }
}

/* Fills rank r's input where the call reads it. */
static void fill(Coll c, int r, int root, int in_place, ncclDataType_t t, ncclRedOp_t op)
{
    const void *s;
    void *d;
    buffers(c, r, root, in_place, t, &s, &d);
    memset(sendb[r], 0x5a, (size_t)N * COUNT * 8);
    memset(recvb[r], 0x5a, (size_t)N * COUNT * 8);
    size_t n = send_elems(c);
    for (size_t i = 0; i < n; i++)
        /* The value names its sender and place: for alltoall and scatter block p of
         * rank r's input goes to rank p. */
        put((void *)(uintptr_t)s, i, t, c >= ALLGATHER ? (double)((r * 3 + (int)i) % 5) : input(r, i, op));
}

/* What rank r must hold after the call, element i of its output; NAN: not written. */
static double expected(Coll c, int r, int root, size_t i, ncclRedOp_t op)
{
    switch (c) {
    case ALLREDUCE:
        return reduce_all(i, op);
    case REDUCE:
        return r == root ? reduce_all(i, op) : NAN;
    case REDUCESCATTER:
        return reduce_all((size_t)r * COUNT + i, op);
    case ALLGATHER:
    case GATHER:
        if (c == GATHER && r != root)
            return NAN;
        return (double)(((int)(i / COUNT) * 3 + (int)(i % COUNT)) % 5);
    case BROADCAST:
    case BCAST:
        return (double)((root * 3 + (int)i) % 5);
    case ALLTOALL: /* block p of rank r's output is block r of rank p's input */
        return (double)(((int)(i / COUNT) * 3 + r * COUNT + (int)(i % COUNT)) % 5);
    case SCATTER:
        return (double)((root * 3 + r * COUNT + (int)i) % 5);
    }
    return NAN;
}

static ncclResult_t call(Coll c, int r, int root, int in_place, ncclDataType_t t, ncclRedOp_t op)
{
    const void *s;
    void *d;
    buffers(c, r, root, in_place, t, &s, &d);
    switch (c) {
    case ALLREDUCE:
        return ncclAllReduce(s, d, COUNT, t, op, comms[r], NULL);
    case REDUCE:
        return ncclReduce(s, d, COUNT, t, op, root, comms[r], NULL);
    case REDUCESCATTER:
        return ncclReduceScatter(s, d, COUNT, t, op, comms[r], NULL);
    case ALLGATHER:
        return ncclAllGather(s, d, COUNT, t, comms[r], NULL);
    case BROADCAST:
        return ncclBroadcast(s, d, COUNT, t, root, comms[r], NULL);
    case BCAST:
        if (r == root)
            memcpy(d, s, COUNT * dtype_size(t));
        return ncclBcast(d, COUNT, t, root, comms[r], NULL);
    case ALLTOALL:
        return ncclAlltoAll(s, d, COUNT, t, comms[r], NULL);
    case GATHER:
        return ncclGather(s, d, COUNT, t, root, comms[r], NULL);
    case SCATTER:
        return ncclScatter(s, d, COUNT, t, root, comms[r], NULL);
    }
    return ncclInternalError;
}

/* One collective on every rank from this thread, in a group; then every output
 * element checked. 0, or -1 with the first difference in why. */
static int run(Coll c, int in_place, ncclDataType_t t, ncclRedOp_t op, char *why, size_t len)
{
    int root = N - 1 - (int)t % N; /* roots vary with the datatype */
    for (int r = 0; r < N; r++)
        fill(c, r, root, in_place, t, op);
    ncclGroupStart();
    ncclResult_t res = ncclSuccess;
    for (int r = 0; r < N && res == ncclSuccess; r++)
        res = call(c, r, root, in_place, t, op);
    ncclResult_t end = ncclGroupEnd();
    if (res != ncclSuccess || end != ncclSuccess) {
        snprintf(why, len, "%s returned %d, ncclGroupEnd %d: %s", coll_names[c], (int)res, (int)end,
                 ncclGetLastError(NULL));
        return -1;
    }
    for (int r = 0; r < N; r++) {
        const void *s;
        void *d;
        buffers(c, r, root, in_place, t, &s, &d);
        size_t n = recv_elems(c);
        for (size_t i = 0; i < n; i++) {
            double want = expected(c, r, root, i, op);
            if (isnan(want))
                continue;
            double got = get(d, i, t);
            if (got != want) {
                snprintf(why, len, "%s %s %s %s: rank %d element %zu is %g, expected %g", coll_names[c],
                         dtype_names[t], rooted(c) || c < ALLGATHER ? op_names[op] : "", in_place ? "in place" : "",
                         r, i, got, want);
                return -1;
            }
        }
    }
    return 0;
}

static void matrix(Coll c, int in_place)
{
    char name[96], why[512] = "", first[512] = "";
    int bad = 0, runs = 0;
    int reducing = c <= REDUCESCATTER;
    if (c == ALLTOALL && in_place)
        return; /* NCCL's alltoall has no in-place form */
    for (int t = 0; t < ncclNumTypes; t++)
        for (int op = 0; op < (reducing ? ncclNumOps : 1); op++) {
            runs++;
            if (run(c, in_place, (ncclDataType_t)t, (ncclRedOp_t)op, why, sizeof why) != 0 && !bad++)
                snprintf(first, sizeof first, "%s", why);
        }
    snprintf(name, sizeof name, "nccl.colls.N%d.%s.%s", N, coll_names[c], in_place ? "in-place" : "out-of-place");
    say(!bad, name, "%d of %d datatype x operator runs failed; the first: %s", bad, runs, first);
}

/* count 0 with NULL buffers: nothing happens, nothing fails. */
static void zero_counts(void)
{
    char name[64];
    snprintf(name, sizeof name, "nccl.colls.N%d.count-0", N);
    ncclGroupStart();
    ncclResult_t r = ncclSuccess;
    for (int p = 0; p < N && r == ncclSuccess; p++) {
        ncclComm_t cm = comms[p];
        ncclResult_t rs[] = {ncclAllReduce(NULL, NULL, 0, ncclFloat, ncclSum, cm, NULL),
                             ncclReduce(NULL, NULL, 0, ncclFloat, ncclSum, 0, cm, NULL),
                             ncclReduceScatter(NULL, NULL, 0, ncclFloat, ncclSum, cm, NULL),
                             ncclAllGather(NULL, NULL, 0, ncclFloat, cm, NULL),
                             ncclBroadcast(NULL, NULL, 0, ncclFloat, 0, cm, NULL),
                             ncclAlltoAll(NULL, NULL, 0, ncclFloat, cm, NULL),
                             ncclGather(NULL, NULL, 0, ncclFloat, 0, cm, NULL),
                             ncclScatter(NULL, NULL, 0, ncclFloat, 0, cm, NULL),
                             ncclSend(NULL, 0, ncclFloat, (p + 1) % N, cm, NULL),
                             ncclRecv(NULL, 0, ncclFloat, (p + N - 1) % N, cm, NULL)};
        for (size_t k = 0; k < sizeof rs / sizeof rs[0] && r == ncclSuccess; k++)
            r = rs[k];
    }
    ncclResult_t e = ncclGroupEnd();
    say(r == ncclSuccess && e == ncclSuccess, name, "a call returned %d, ncclGroupEnd %d: %s", (int)r, (int)e,
        ncclGetLastError(NULL));
}

/* A ring in one group: every rank sends to the next and receives from the previous,
 * and sends itself a block, for every datatype. */
static void ring(void)
{
    char name[64], why[256] = "";
    int ok = 1;
    snprintf(name, sizeof name, "nccl.p2p.N%d.ring-and-self", N);
    for (int t = 0; t < ncclNumTypes && ok; t++) {
        for (int r = 0; r < N; r++) {
            for (size_t i = 0; i < 2 * COUNT; i++)
                put(sendb[r], i, (ncclDataType_t)t, (double)((r + (int)i) % 7));
            memset(recvb[r], 0x5a, 2 * COUNT * 8);
        }
        ncclGroupStart();
        ncclResult_t res = ncclSuccess;
        for (int r = 0; r < N && res == ncclSuccess; r++) {
            size_t es = dtype_size((ncclDataType_t)t);
            ncclResult_t rs[] = {
                ncclSend(sendb[r], COUNT, (ncclDataType_t)t, (r + 1) % N, comms[r], NULL),
                ncclRecv(recvb[r], COUNT, (ncclDataType_t)t, (r + N - 1) % N, comms[r], NULL),
                ncclSend((char *)sendb[r] + COUNT * es, COUNT, (ncclDataType_t)t, r, comms[r], NULL),
                ncclRecv((char *)recvb[r] + COUNT * es, COUNT, (ncclDataType_t)t, r, comms[r], NULL)};
            for (size_t k = 0; k < 4 && res == ncclSuccess; k++)
                res = rs[k];
        }
        ncclResult_t e = ncclGroupEnd();
        if (res != ncclSuccess || e != ncclSuccess) {
            snprintf(why, sizeof why, "%s: a call returned %d, ncclGroupEnd %d: %s", dtype_names[t], (int)res, (int)e,
                     ncclGetLastError(NULL));
            ok = 0;
        }
        for (int r = 0; r < N && ok; r++)
            for (size_t i = 0; i < 2 * COUNT && ok; i++) {
                int from = i < COUNT ? (r + N - 1) % N : r;
                double want = (double)((from + (int)i) % 7), got = get(recvb[r], i, (ncclDataType_t)t);
                if (got != want) {
                    snprintf(why, sizeof why, "%s: rank %d element %zu is %g, expected %g", dtype_names[t], r, i, got,
                             want);
                    ok = 0;
                }
            }
    }
    say(ok, name, "%s", why);
}

/* Pre-multiplied sums: rank r's scalar is 1 + r % 2 (so every partial sum is at most 6,
 * exact in fp8), given as a value (host-immediate) or read from memory at the call
 * (device residence: the value changes after the operator is made). */
static void premul(void)
{
    char name[64], why[256] = "";
    int ok = 1;
    snprintf(name, sizeof name, "nccl.premulsum.N%d", N);
    for (int t = 0; t < ncclNumTypes && ok; t++)
        for (int res = 0; res < 2 && ok; res++) {
            ncclRedOp_t ops[MAXN];
            unsigned char scal[MAXN][8];
            for (int r = 0; r < N; r++) {
                put(scal[r], 0, (ncclDataType_t)t, res == ncclScalarHostImmediate ? 1 + r % 2 : 1);
                ncclResult_t e = ncclRedOpCreatePreMulSum(&ops[r], scal[r], (ncclDataType_t)t,
                                                          (ncclScalarResidence_t)res, comms[r]);
                if (e != ncclSuccess) {
                    snprintf(why, sizeof why, "create %s: %d: %s", dtype_names[t], (int)e, ncclGetLastError(comms[r]));
                    ok = 0;
                }
                if (res == ncclScalarDevice)
                    put(scal[r], 0, (ncclDataType_t)t, 1 + r % 2); /* read at the call */
                for (size_t i = 0; i < COUNT; i++)
                    put(sendb[r], i, (ncclDataType_t)t, (double)(i % 2));
            }
            if (!ok)
                break;
            ncclGroupStart();
            for (int r = 0; r < N; r++)
                ncclAllReduce(sendb[r], recvb[r], COUNT, (ncclDataType_t)t, ops[r], comms[r], NULL);
            ncclResult_t e = ncclGroupEnd();
            int scale = 0;
            for (int r = 0; r < N; r++)
                scale += 1 + r % 2;
            for (int r = 0; r < N && ok; r++)
                for (size_t i = 0; i < COUNT && ok; i++) {
                    double want = (double)(i % 2) * scale, got = get(recvb[r], i, (ncclDataType_t)t);
                    if (e != ncclSuccess || got != want) {
                        snprintf(why, sizeof why, "%s %s: group end %d (%s); rank %d element %zu is %g, expected %g",
                                 dtype_names[t], res ? "host" : "device", (int)e, ncclGetLastError(NULL), r, i, got,
                                 want);
                        ok = 0;
                    }
                }
            for (int r = 0; r < N; r++)
                if (ncclRedOpDestroy(ops[r], comms[r]) != ncclSuccess && ok) {
                    snprintf(why, sizeof why, "destroy: %s", ncclGetLastError(comms[r]));
                    ok = 0;
                }
        }
    say(ok, name, "%s", why);
}

/* ncclMemAlloc's buffers in an all-reduce (host memory in the test mode). */
static void memalloc(void)
{
    char name[64];
    snprintf(name, sizeof name, "nccl.memalloc.N%d", N);
    float *b[MAXN] = {0};
    int ok = 1;
    for (int r = 0; r < N; r++) {
        ok &= ncclMemAlloc((void **)&b[r], COUNT * sizeof(float)) == ncclSuccess && b[r];
        for (int i = 0; ok && i < COUNT; i++)
            b[r][i] = (float)(r + i);
    }
    ncclGroupStart();
    for (int r = 0; ok && r < N; r++)
        ok &= ncclAllReduce(b[r], b[r], COUNT, ncclFloat, ncclSum, comms[r], NULL) == ncclSuccess;
    ok &= ncclGroupEnd() == ncclSuccess;
    for (int r = 0; ok && r < N; r++)
        for (int i = 0; i < COUNT; i++)
            ok &= b[r][i] == (float)(N * (N - 1) / 2 + N * i);
    for (int r = 0; r < N; r++)
        ok &= ncclMemFree(b[r]) == ncclSuccess;
    say(ok, name, "%s", ncclGetLastError(NULL));
}

static int clique(int n)
{
    N = n;
    char name[64];
    snprintf(name, sizeof name, "nccl.initall.N%d", n);
    NCCL_OK(name, ncclCommInitAll(comms, n, NULL));
    say(1, name, " ");
    for (int r = 0; r < n; r++) {
        sendb[r] = malloc((size_t)MAXN * COUNT * 8);
        recvb[r] = malloc((size_t)MAXN * COUNT * 8);
    }
    for (Coll c = ALLREDUCE; c <= SCATTER; c++)
        for (int in_place = 0; in_place < 2; in_place++)
            matrix(c, in_place);
    zero_counts();
    ring();
    premul();
    memalloc();
    for (int r = 0; r < n; r++) {
        free(sendb[r]);
        free(recvb[r]);
        NCCL_OK(name, ncclCommDestroy(comms[r]));
    }
    return 0;
}

int main(int argc, char **argv)
{
    /* N from the command line, else 2, 3 and 4. */
    if (argc > 1) {
        clique(atoi(argv[1]));
    } else {
        for (int n = 2; n <= MAXN; n++)
            clique(n);
    }
    return failures ? 1 : 0;
}
