/* fake_nccl.c: a stand-in for NVIDIA's libnccl, for tests/nccl's routing tests on a
 * machine without GPUs: NCCL's API on host memory among the threads of one process.
 *
 * libccl_nccl loads it as the real NCCL (CCL_NCCL_LIB names it, CCL_NCCL_REAL_ON_CPU=1
 * lets it run beside libccl's CPU backend), so the tests see which calls reached "NCCL"
 * (fake_nccl_calls counts every call by name), that its id travelled through the
 * shim's rendezvous (an init with another id's clique fails), and that the results are
 * right. Collectives are correct for float32 and int32 (every operator, and
 * ncclRedOpCreatePreMulSum's on float32) and move bytes for every datatype. A call
 * outside a group runs at once (every rank's thread meets the others); a group's calls
 * run at ncclGroupEnd, on one thread per communicator, so one thread may drive every
 * rank. Sends are buffered, so a group's sends never wait for its receives. Splits run
 * among the ranks' threads, outside groups; shrinks are refused.
 *
 * Like NVIDIA's libnccl.so.2 (whose relocations show it: readelf -r), it calls some of
 * its exported functions by their names, and it is linked as NVIDIA's is (no
 * -Bsymbolic), so that with libccl_nccl in the process those calls reach the shim with
 * the fake's own comms, as NCCL's do under LD_PRELOAD: every collective, operator,
 * split, finalize and destroy first calls ncclCommGetAsyncError (NCCL's
 * ncclCommEnsureReady), a window's
 * registration calls ncclCommRegister and its deregistration ncclCommDeregister, and
 * ncclCommInitAll takes its id from ncclGetUniqueId. Exports NCCL's names and the
 * profiling ones. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"

#define MAXR 16

typedef struct Msg {
    void *data;
    size_t bytes;
    struct Msg *next;
} Msg;

typedef struct Clique {
    int n, joined, refs; /* refs: live comms; the last one frees the clique */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned gen;
    int arrived;
    const void *send[MAXR];
    Msg *mbox[MAXR][MAXR]; /* [src][dst], oldest first */
    int split_color[MAXR], split_key[MAXR];
    struct Clique *split_child[MAXR]; /* made by the lowest rank of each color */
} Clique;

struct ncclComm {
    int rank, device;
    Clique *cl;
    float scalar[16];
    int nops;
};

/* ---- counting ---- */

static pthread_mutex_t count_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const char *name;
    int n;
} counts[64];

static void bump(const char *name)
{
    pthread_mutex_lock(&count_mu);
    int i = 0;
    while (i < 63 && counts[i].name && strcmp(counts[i].name, name))
        i++;
    counts[i].name = name;
    counts[i].n++;
    pthread_mutex_unlock(&count_mu);
}

int fake_nccl_calls(const char *name);
int fake_nccl_calls(const char *name)
{
    pthread_mutex_lock(&count_mu);
    int n = 0;
    for (int i = 0; i < 64 && counts[i].name; i++)
        if (!strcmp(counts[i].name, name))
            n = counts[i].n;
    pthread_mutex_unlock(&count_mu);
    return n;
}

/* Makes every comm report an asynchronous failure r (ncclCommGetAsyncError). */
static ncclResult_t fake_async;

void fake_nccl_set_async(ncclResult_t r);
void fake_nccl_set_async(ncclResult_t r)
{
    fake_async = r;
}

/* NCCL's ncclCommEnsureReady: the comm's asynchronous error, asked by its exported
 * name (so, with libccl_nccl in the process, through the shim). */
static ncclResult_t ensure_ready(ncclComm_t c)
{
    ncclResult_t e = ncclSuccess, r = ncclCommGetAsyncError(c, &e);
    return r != ncclSuccess ? r : e;
}

/* ---- cliques ---- */

static Clique *clique_new(int n)
{
    Clique *c = calloc(1, sizeof *c);
    c->n = n;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    return c;
}

static void barrier(Clique *c)
{
    pthread_mutex_lock(&c->mu);
    unsigned g = c->gen;
    if (++c->arrived == c->n) {
        c->arrived = 0;
        c->gen++;
        pthread_cond_broadcast(&c->cv);
    } else {
        while (g == c->gen)
            pthread_cond_wait(&c->cv, &c->mu);
    }
    pthread_mutex_unlock(&c->mu);
}

static size_t esize(ncclDataType_t t)
{
    static const size_t s[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    return (unsigned)t < 12 ? s[t] : 0;
}

typedef enum { ALLREDUCE, REDUCE, REDUCESCATTER, ALLGATHER, BROADCAST, ALLTOALL, GATHER, SCATTER, SEND, RECV } Kind;

typedef struct {
    Kind kind;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t dt;
    ncclRedOp_t op;
    int root;
    ncclComm_t comm;
} Op;

static double load(const void *b, size_t i, ncclDataType_t t)
{
    if (t == ncclInt32) {
        int32_t x;
        memcpy(&x, (const char *)b + 4 * i, 4);
        return x;
    }
    float x;
    memcpy(&x, (const char *)b + 4 * i, 4);
    return x;
}

static void store(void *b, size_t i, ncclDataType_t t, double v)
{
    if (t == ncclInt32) {
        int32_t x = (int32_t)v;
        memcpy((char *)b + 4 * i, &x, 4);
    } else {
        float x = (float)v;
        memcpy((char *)b + 4 * i, &x, 4);
    }
}

/* Element i of the reduction of every rank's input (float32 and int32). */
static double reduce_at(const Op *o, size_t i)
{
    Clique *c = o->comm->cl;
    double acc = 0;
    for (int p = 0; p < c->n; p++) {
        double x = load(c->send[p], i, o->dt);
        if (p == 0)
            acc = x;
        else if (o->op == ncclProd)
            acc *= x;
        else if (o->op == ncclMax)
            acc = x > acc ? x : acc;
        else if (o->op == ncclMin)
            acc = x < acc ? x : acc;
        else
            acc += x;
    }
    return o->op == ncclAvg ? acc / c->n : acc;
}

/* One collective on one rank: inputs published, everyone meets, the output computed
 * aside from what peers still read, everyone meets again, then written. */
static void collective(const Op *o)
{
    ncclComm_t comm = o->comm;
    Clique *c = comm->cl;
    int r = comm->rank, n = c->n;
    size_t es = esize(o->dt), blk = o->count * es;
    size_t out_elems = o->kind == ALLGATHER || o->kind == ALLTOALL || o->kind == GATHER ? (size_t)n * o->count : o->count;
    void *tmp = malloc(out_elems * es + 1);
    /* A pre-multiplied sum scales this rank's input first (float32). */
    void *scaled = NULL;
    const void *mine = o->send;
    if (o->op >= ncclNumOps && (o->kind == ALLREDUCE || o->kind == REDUCE || o->kind == REDUCESCATTER)) {
        size_t in = o->kind == REDUCESCATTER ? (size_t)n * o->count : o->count;
        scaled = malloc(in * 4 + 1);
        for (size_t i = 0; i < in; i++)
            store(scaled, i, ncclFloat, load(o->send, i, ncclFloat) * comm->scalar[o->op - ncclNumOps]);
        mine = scaled;
    }
    c->send[r] = mine;
    barrier(c);
    Op sum = *o;
    if (sum.op >= ncclNumOps)
        sum.op = ncclSum;
    int write = 1;
    switch (o->kind) {
    case ALLREDUCE:
    case REDUCE:
        for (size_t i = 0; i < o->count; i++)
            store(tmp, i, o->dt, reduce_at(&sum, i));
        write = o->kind == ALLREDUCE || r == o->root;
        break;
    case REDUCESCATTER:
        for (size_t i = 0; i < o->count; i++)
            store(tmp, i, o->dt, reduce_at(&sum, (size_t)r * o->count + i));
        break;
    case ALLGATHER:
    case GATHER:
        for (int p = 0; p < n; p++)
            memcpy((char *)tmp + (size_t)p * blk, c->send[p], blk);
        write = o->kind == ALLGATHER || r == o->root;
        break;
    case BROADCAST:
        memcpy(tmp, c->send[o->root], blk);
        break;
    case ALLTOALL:
        for (int p = 0; p < n; p++)
            memcpy((char *)tmp + (size_t)p * blk, (const char *)c->send[p] + (size_t)r * blk, blk);
        break;
    case SCATTER:
        memcpy(tmp, (const char *)c->send[o->root] + (size_t)r * blk, blk);
        break;
    default:
        break;
    }
    barrier(c);
    if (write && out_elems)
        memcpy(o->recv, tmp, out_elems * es);
    free(tmp);
    free(scaled);
}

static void p2p(const Op *o)
{
    Clique *c = o->comm->cl;
    int me = o->comm->rank;
    size_t bytes = o->count * esize(o->dt);
    pthread_mutex_lock(&c->mu);
    if (o->kind == SEND) {
        Msg *m = calloc(1, sizeof *m), **tail = &c->mbox[me][o->root];
        m->data = malloc(bytes + 1);
        m->bytes = bytes;
        memcpy(m->data, o->send, bytes);
        while (*tail)
            tail = &(*tail)->next;
        *tail = m;
        pthread_cond_broadcast(&c->cv);
    } else {
        while (!c->mbox[o->root][me])
            pthread_cond_wait(&c->cv, &c->mu);
        Msg *m = c->mbox[o->root][me];
        c->mbox[o->root][me] = m->next;
        memcpy(o->recv, m->data, m->bytes < bytes ? m->bytes : bytes);
        free(m->data);
        free(m);
    }
    pthread_mutex_unlock(&c->mu);
}

static void exec(const Op *o)
{
    if (o->kind == SEND || o->kind == RECV)
        p2p(o);
    else
        collective(o);
}

/* ---- groups ---- */

static _Thread_local struct {
    int depth, n;
    Op *ops;
} group;

typedef struct {
    ncclComm_t comm;
    Op *ops;
    int n;
} Lane;

static void *lane_main(void *arg)
{
    Lane *l = arg;
    for (int i = 0; i < l->n; i++)
        if (l->ops[i].comm == l->comm)
            exec(&l->ops[i]);
    return NULL;
}

static ncclResult_t enqueue(Op o, const char *name)
{
    bump(name);
    if (!o.comm || !o.comm->cl)
        return ncclInvalidArgument;
    ncclResult_t r = ensure_ready(o.comm);
    if (r != ncclSuccess)
        return r;
    if (!group.depth) {
        exec(&o);
        return ncclSuccess;
    }
    group.ops = realloc(group.ops, sizeof *group.ops * (size_t)(group.n + 1));
    group.ops[group.n++] = o;
    return ncclSuccess;
}

ncclResult_t pncclGroupStart(void)
{
    bump("GroupStart");
    group.depth++;
    return ncclSuccess;
}

ncclResult_t pncclGroupEnd(void)
{
    bump("GroupEnd");
    if (!group.depth)
        return ncclInvalidUsage;
    if (--group.depth)
        return ncclSuccess;
    Lane lanes[64];
    pthread_t t[64];
    int nl = 0;
    for (int i = 0; i < group.n; i++) {
        int k = 0;
        while (k < nl && lanes[k].comm != group.ops[i].comm)
            k++;
        if (k == nl && nl < 64)
            lanes[nl++] = (Lane){group.ops[i].comm, group.ops, group.n};
    }
    for (int k = 0; k < nl; k++)
        pthread_create(&t[k], NULL, lane_main, &lanes[k]);
    for (int k = 0; k < nl; k++)
        pthread_join(t[k], NULL);
    free(group.ops);
    group.ops = NULL;
    group.n = 0;
    return ncclSuccess;
}

/* ---- the API ---- */

ncclResult_t pncclGetVersion(int *v)
{
    *v = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t pncclGetUniqueId(ncclUniqueId *id)
{
    bump("GetUniqueId");
    memset(id, 0, sizeof *id);
    memcpy(id->internal, "FAKENCCL", 8);
    Clique *c = clique_new(0);
    memcpy(id->internal + 8, &c, sizeof c);
    return ncclSuccess;
}

static ncclComm_t comm_new(Clique *c, int rank)
{
    ncclComm_t m = calloc(1, sizeof *m);
    m->rank = rank;
    m->cl = c; /* the caller counted it in c->refs */
    return m;
}

static void comm_free(ncclComm_t m)
{
    Clique *c = m->cl;
    pthread_mutex_lock(&c->mu);
    int last = --c->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (last) {
        for (int a = 0; a < MAXR; a++)
            for (int b = 0; b < MAXR; b++)
                for (Msg *g = c->mbox[a][b], *next; g; g = next) {
                    next = g->next;
                    free(g->data);
                    free(g);
                }
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
        free(c);
    }
    free(m);
}

static ncclResult_t init_rank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *cfg)
{
    if (memcmp(id.internal, "FAKENCCL", 8) != 0 || (cfg && cfg->blocking != 1))
        return ncclInvalidArgument; /* the shim passes the id it got from the root, and blocking */
    Clique *c;
    memcpy(&c, id.internal + 8, sizeof c);
    pthread_mutex_lock(&c->mu);
    if (!c->n)
        c->n = nranks;
    c->joined++;
    c->refs++;
    pthread_cond_broadcast(&c->cv);
    while (c->joined < c->n)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    *comm = comm_new(c, rank);
    return ncclSuccess;
}

ncclResult_t pncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *cfg)
{
    bump("CommInitRankConfig");
    return init_rank(comm, nranks, id, rank, cfg);
}

ncclResult_t pncclCommInitRankScalable(ncclComm_t *comm, int nranks, int rank, int nid, ncclUniqueId *ids,
                                       ncclConfig_t *cfg)
{
    bump("CommInitRankScalable");
    (void)nid;
    return init_rank(comm, nranks, ids[0], rank, cfg);
}

ncclResult_t pncclCommInitAll(ncclComm_t *comms, int n, const int *devlist)
{
    bump("CommInitAll");
    ncclUniqueId id; /* NCCL's ncclCommInitAll calls ncclGetUniqueId by its name too */
    Clique *c;
    if (ncclGetUniqueId(&id) != ncclSuccess || memcmp(id.internal, "FAKENCCL", 8) != 0)
        return ncclInvalidArgument;
    memcpy(&c, id.internal + 8, sizeof c);
    c->n = n;
    c->refs = n;
    for (int r = 0; r < n; r++) {
        comms[r] = comm_new(c, r);
        comms[r]->device = devlist ? devlist[r] : r;
    }
    return ncclSuccess;
}

#define COUNTED(name, body)                                                                                    \
    {                                                                                                          \
        bump(name);                                                                                            \
        body;                                                                                                  \
        return ncclSuccess;                                                                                    \
    }

/* NCCL's finalize and destroy wait for the comm to be ready first (by name, as above). */
ncclResult_t pncclCommFinalize(ncclComm_t c)
{
    bump("CommFinalize");
    return ensure_ready(c);
}

ncclResult_t pncclCommDestroy(ncclComm_t c)
{
    bump("CommDestroy");
    ncclResult_t r = ensure_ready(c);
    if (r == ncclSuccess)
        comm_free(c);
    return r;
}

ncclResult_t pncclCommAbort(ncclComm_t c) COUNTED("CommAbort", comm_free(c))
ncclResult_t pncclCommRevoke(ncclComm_t c, int f) COUNTED("CommRevoke", (void)c; (void)f)
ncclResult_t pncclCommCount(ncclComm_t c, int *n) COUNTED("CommCount", *n = c->cl->n)
ncclResult_t pncclCommUserRank(ncclComm_t c, int *r) COUNTED("CommUserRank", *r = c->rank)
ncclResult_t pncclCommCuDevice(ncclComm_t c, int *d) COUNTED("CommCuDevice", *d = c->device)
ncclResult_t pncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e) COUNTED("CommGetAsyncError", (void)c; *e = fake_async)

/* A window holds the registration NCCL 2.28 makes for it by ncclCommRegister's name. */
ncclResult_t pncclCommWindowRegister(ncclComm_t c, void *b, size_t s, ncclWindow_t *w, int f)
{
    bump("CommWindowRegister");
    (void)f;
    void *h;
    ncclResult_t r = ncclCommRegister(c, b, s, &h);
    if (r == ncclSuccess)
        *w = h;
    return r;
}

ncclResult_t pncclCommWindowDeregister(ncclComm_t c, ncclWindow_t w)
{
    bump("CommWindowDeregister");
    return ncclCommDeregister(c, w);
}
ncclResult_t pncclCommRegister(ncclComm_t c, void *b, size_t s, void **h) COUNTED("CommRegister", (void)c; (void)b;
                                                                                  (void)s; *h = malloc(1))
ncclResult_t pncclCommDeregister(ncclComm_t c, void *h) COUNTED("CommDeregister", (void)c; free(h))
ncclResult_t pncclMemAlloc(void **p, size_t s) COUNTED("MemAlloc", *p = malloc(s))
ncclResult_t pncclMemFree(void *p) COUNTED("MemFree", free(p))

/* Every rank of c's clique calls it from its own thread, outside a group (a split in a
 * group is not faked). Ranks of one color make a clique ranked by key, then parent rank;
 * NCCL_SPLIT_NOCOLOR gets NULL. The config is checked as NCCL parses it: its magic, and
 * blocking (the shim passes 1). */
ncclResult_t pncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *nc, ncclConfig_t *cfg)
{
    bump("CommSplit");
    ncclResult_t r = ensure_ready(c);
    if (r != ncclSuccess)
        return r;
    if (group.depth || !nc)
        return ncclInvalidUsage;
    if (cfg && (cfg->magic != 0xcafebeef || (cfg->blocking != 1 && cfg->blocking != NCCL_CONFIG_UNDEF_INT)))
        return ncclInvalidArgument;
    *nc = NULL;
    Clique *p = c->cl;
    int me = c->rank, size = 0, rank = 0, leader = -1;
    p->split_color[me] = color;
    p->split_key[me] = key;
    barrier(p);
    for (int q = 0; color != NCCL_SPLIT_NOCOLOR && q < p->n; q++)
        if (p->split_color[q] == color) {
            size++;
            rank += p->split_key[q] < key || (p->split_key[q] == key && q < me);
            leader = leader < 0 ? q : leader;
        }
    if (leader == me) {
        p->split_child[me] = clique_new(size);
        p->split_child[me]->refs = size;
    }
    barrier(p); /* every child made; read before any rank's next split */
    if (leader >= 0) {
        *nc = comm_new(p->split_child[leader], rank);
        (*nc)->device = c->device;
    }
    return ncclSuccess;
}

ncclResult_t pncclCommShrink(ncclComm_t c, int *ex, int nex, ncclComm_t *nc, ncclConfig_t *cfg, int f)
{
    bump("CommShrink");
    (void)c, (void)ex, (void)nex, (void)nc, (void)cfg, (void)f;
    return ncclInvalidUsage;
}

const char *pncclGetLastError(ncclComm_t c)
{
    (void)c;
    return "the fake NCCL's last error";
}

ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t t, ncclScalarResidence_t res,
                                       ncclComm_t c)
{
    bump("RedOpCreatePreMulSum");
    ncclResult_t r = ensure_ready(c);
    if (r != ncclSuccess)
        return r;
    if (t != ncclFloat || res != ncclScalarHostImmediate || c->nops == 16)
        return ncclInvalidArgument;
    memcpy(&c->scalar[c->nops], scalar, sizeof(float));
    *op = (ncclRedOp_t)(ncclNumOps + c->nops++);
    return ncclSuccess;
}

ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t c) COUNTED("RedOpDestroy", (void)op; (void)c)

ncclResult_t pncclAllReduce(const void *s, void *d, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                            cudaStream_t st)
{
    (void)st;
    return enqueue((Op){ALLREDUCE, s, d, n, t, op, 0, c}, "AllReduce");
}

ncclResult_t pncclReduce(const void *s, void *d, size_t n, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t c,
                         cudaStream_t st)
{
    (void)st;
    return enqueue((Op){REDUCE, s, d, n, t, op, root, c}, "Reduce");
}

ncclResult_t pncclReduceScatter(const void *s, void *d, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                cudaStream_t st)
{
    (void)st;
    return enqueue((Op){REDUCESCATTER, s, d, n, t, op, 0, c}, "ReduceScatter");
}

ncclResult_t pncclAllGather(const void *s, void *d, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st)
{
    (void)st;
    return enqueue((Op){ALLGATHER, s, d, n, t, ncclSum, 0, c}, "AllGather");
}

ncclResult_t pncclBroadcast(const void *s, void *d, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                            cudaStream_t st)
{
    (void)st;
    return enqueue((Op){BROADCAST, s, d, n, t, ncclSum, root, c}, "Broadcast");
}

ncclResult_t pncclAlltoAll(const void *s, void *d, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st)
{
    (void)st;
    return enqueue((Op){ALLTOALL, s, d, n, t, ncclSum, 0, c}, "AlltoAll");
}

ncclResult_t pncclGather(const void *s, void *d, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st)
{
    (void)st;
    return enqueue((Op){GATHER, s, d, n, t, ncclSum, root, c}, "Gather");
}

ncclResult_t pncclScatter(const void *s, void *d, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                          cudaStream_t st)
{
    (void)st;
    return enqueue((Op){SCATTER, s, d, n, t, ncclSum, root, c}, "Scatter");
}

ncclResult_t pncclSend(const void *s, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st)
{
    (void)st;
    return enqueue((Op){SEND, s, NULL, n, t, ncclSum, peer, c}, "Send");
}

ncclResult_t pncclRecv(void *d, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st)
{
    (void)st;
    return enqueue((Op){RECV, NULL, d, n, t, ncclSum, peer, c}, "Recv");
}

/* NCCL's names too (the shim calls the profiling ones; it checks a candidate by these). */
#define ALIAS(name) extern __typeof__(p##name) name __attribute__((alias("p" #name)))
ALIAS(ncclGetVersion);
ALIAS(ncclGetUniqueId);
ALIAS(ncclCommInitRankConfig);
ALIAS(ncclCommInitAll);
ALIAS(ncclCommDestroy);
ALIAS(ncclAllReduce);
ALIAS(ncclGroupStart);
ALIAS(ncclGroupEnd);
ALIAS(ncclCommGetAsyncError);
ALIAS(ncclCommRegister);
ALIAS(ncclCommDeregister);
