/* p2p.c: ccl_send, ccl_recv and groups: argument checks, the calling thread's open
 * group and message numbering, over the channels every comm reserves for them
 * (channels.c).
 *
 * Point-to-point is not a CCL program: only the two ranks of a message take part, so
 * no program over all N ranks describes a group (a rank outside it makes no call, and
 * the language's programs are run by every rank). What the verifier proves of a program
 * holds here by construction instead (docs/internals.md, "Point-to-point"):
 *  - matching: the k-th send from a to b meets the k-th recv on b from a (both count
 *    messages per channel, p2p_sent / p2p_recvd), and the sender's slot header carries
 *    its count, dtype and place in its group, which the receiver compares with its own
 *    before it takes a byte: a mismatch fails both ranks naming both calls;
 *  - no deadlock inside a group: the backend progresses every call of a group at once,
 *    and each waits only for its own partner, so a group completes whenever every
 *    call in it is matched; a call never matched times out naming itself;
 *  - no race: a channel has one writer (its sender) and one reader, and a slot is
 *    refilled only after the reader emptied it (its semaphores).
 * A peer of another node (a comm of several nodes, CPU backend) has no channel in this
 * rank's memory: there the receiver's CTS carries its count and dtype to the sender,
 * which checks them before it sends a byte, with the same guarantees and messages
 * (cpu/p2p.c, docs/multinode.md).
 * Groups are per thread (NCCL's): calls between ccl_group_start and the outermost
 * ccl_group_end are held here, then handed to the backend per comm, one launch each. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* A held call. */
typedef struct {
    ccl_comm_t *comm;
    void *stream;
    CclP2pOp op;
    const char *fn;
} HeldCall;

/* A held ccl_comm_split. */
typedef struct {
    ccl_comm_t *comm;
    int color, key;
    ccl_comm_t **newcomm;
    int has_config;
    ccl_config_t config;             /* a copy: the caller's may be gone by the group's end */
    ccl_result_t r;
    char why[CCL__ERR_LEN];
} HeldSplit;

/* The calling thread's group. */
static _Thread_local struct {
    int depth;                       /* open ccl_group_start calls */
    int n, cap;
    HeldCall *calls;
    int nsplits, splits_cap;
    HeldSplit *splits;
    /* The first call of the group that failed its checks (1-based among the group's
     * calls, 0: none), and its message: the group then launches nothing. */
    int failed_at;
    ccl_result_t failed;
    char why[CCL__ERR_LEN];
} group;

static ccl_result_t launch(ccl_comm_t *comm, void *stream, HeldCall *calls, int n, ccl_comm_t *const *group_comms,
                           int ngroup_comms, const char *fn);

/* The checks of one call; CCL_OK or the error, its message set on comm. */
static ccl_result_t check_call(const char *fn, const void *buf, size_t count, ccl_dtype_t dtype, int peer,
                               ccl_comm_t *comm)
{
    ccl_result_t r = ccl__check_call(comm, dtype, fn);
    if (r != CCL_OK)
        return r;
    if (!comm->be->run_p2p)
        return ccl__set_error(comm, CCL_ERR_UNSUPPORTED,
                              "%s: the %s backend does not run point-to-point calls yet; use the CPU backend "
                              "(ccl_config_t.backend = CCL_BACKEND_CPU, or CCL_BACKEND=cpu)", fn, comm->be->name);
    if (comm->p2p_off == SIZE_MAX)
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY,
                              "%s: the heap (heap_bytes %zu) had no room for the point-to-point channels when the comm "
                              "started (%d ranks x %d slots of at least %d bytes); raise ccl_config_t.heap_bytes / "
                              "CCL_HEAP_BYTES", fn, comm->heap_bytes, comm->nranks, CCL__P2P_SLOTS, 4 * CCL__P2P_HEADER);
    if (peer < 0 || peer >= comm->nranks)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'peer' is %d; the comm's ranks are 0..%d",
                              fn, peer, comm->nranks - 1);
    size_t es = ccl_dtype_size(dtype);
    if (count > ((size_t)1 << 46) / es)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'count' is %zu; at most %zu elements of %s",
                              fn, count, ((size_t)1 << 46) / es, ccl_dtype_name(dtype));
    if (count > 0 && !buf)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'buf' is NULL (count %zu)", fn, count);
    if ((uintptr_t)buf % es)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'buf' (%p) is not aligned to the %zu-byte "
                              "size of %s", fn, buf, es, ccl_dtype_name(dtype));
    return CCL_OK;
}

static ccl_result_t hold(HeldCall c)
{
    if (group.n >= CCL_GROUP_MAX_CALLS)
        return ccl__set_error(c.comm, CCL_ERR_INVALID_USAGE,
                              "%s: a group holds at most %d calls (CCL_GROUP_MAX_CALLS), all comms together, and this "
                              "would be call %d: end the group with ccl_group_end and start another (nothing of this "
                              "group will be launched)", c.fn, CCL_GROUP_MAX_CALLS, group.n + 1);
    if (group.n == group.cap) {
        int cap = group.cap ? 2 * group.cap : 16;
        HeldCall *nc = realloc(group.calls, sizeof *nc * (size_t)cap);
        if (!nc)
            return ccl__set_error(c.comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory holding the group's calls", c.fn);
        group.calls = nc;
        group.cap = cap;
    }
    group.calls[group.n++] = c;
    return CCL_OK;
}

static ccl_result_t p2p_call_body(const char *fn, CclP2pKind kind, void *buf, size_t count, ccl_dtype_t dtype,
                                  int peer, ccl_comm_t *comm, void *stream);

/* ccl_send and ccl_recv, inside their NVTX range (CCL_NVTX). */
static ccl_result_t p2p_call(const char *fn, CclP2pKind kind, void *buf, size_t count, ccl_dtype_t dtype, int peer,
                             ccl_comm_t *comm, void *stream)
{
    ccl__range_push(fn);
    return ccl__range_pop(p2p_call_body(fn, kind, buf, count, dtype, peer, comm, stream));
}

static ccl_result_t p2p_call_body(const char *fn, CclP2pKind kind, void *buf, size_t count, ccl_dtype_t dtype,
                                  int peer, ccl_comm_t *comm, void *stream)
{
    ccl_result_t r = check_call(fn, buf, count, dtype, peer, comm);
    HeldCall c = {comm, stream, {.kind = kind, .peer = peer, .buf = buf, .count = count, .dtype = dtype}, fn};
    if (r == CCL_OK && group.depth == 0)
        return launch(comm, stream, &c, 1, &comm, 1, fn);
    if (r == CCL_OK)
        r = hold(c);
    if (r != CCL_OK && group.depth > 0 && !group.failed_at) {
        group.failed_at = group.n + 1;
        group.failed = r;
        CCL__FMT(group.why, sizeof group.why, "%s",
                 ccl__handle_live(comm) ? comm->last_error : ccl_comm_last_error(NULL));
    }
    return r;
}

ccl_result_t ccl_send(const void *buf, size_t count, ccl_dtype_t dtype, int peer, ccl_comm_t *comm, void *stream)
{
    return p2p_call("ccl_send", CCL__P2P_SEND, (void *)buf, count, dtype, peer, comm, stream);
}

ccl_result_t ccl_recv(void *buf, size_t count, ccl_dtype_t dtype, int peer, ccl_comm_t *comm, void *stream)
{
    return p2p_call("ccl_recv", CCL__P2P_RECV, buf, count, dtype, peer, comm, stream);
}

int ccl__group_open(void)
{
    return group.depth > 0;
}

void ccl__group_fail(ccl_result_t r, const char *why)
{
    if (group.depth == 0 || group.failed_at)
        return;
    group.failed_at = group.n + group.nsplits + 1;
    group.failed = r;
    CCL__FMT(group.why, sizeof group.why, "%s", why);
}

ccl_result_t ccl__group_defer_split(ccl_comm_t *comm, int color, int key, ccl_comm_t **newcomm,
                                    const ccl_config_t *config)
{
    if (group.nsplits == group.splits_cap) {
        int cap = group.splits_cap ? 2 * group.splits_cap : 8;
        HeldSplit *ns = realloc(group.splits, sizeof *ns * (size_t)cap);
        if (!ns)
            return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "ccl_comm_split: out of memory holding the group's calls");
        group.splits = ns;
        group.splits_cap = cap;
    }
    group.splits[group.nsplits++] = (HeldSplit){.comm = comm, .color = color, .key = key, .newcomm = newcomm,
                                                .has_config = config != NULL, .config = config ? *config : (ccl_config_t){0}};
    return CCL_OK;
}

static void *split_thread(void *arg)
{
    HeldSplit *s = arg;
    s->r = ccl__comm_split_now(s->comm, s->color, s->key, s->newcomm, s->has_config ? &s->config : NULL);
    if (s->r != CCL_OK)
        CCL__FMT(s->why, sizeof s->why, "%s", s->comm->last_error);
    return NULL;
}

/* The group's held splits, all at once (each blocks until its comm's every rank is in
 * it); CCL_OK or the first failure, its message in the thread's error. */
static ccl_result_t run_splits(const char *fn)
{
    int n = group.nsplits, started = 0;
    pthread_t *t = malloc(sizeof *t * (size_t)(n ? n : 1));
    if (!t)
        return ccl__set_error(NULL, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    for (; started < n; started++)
        if (pthread_create(&t[started], NULL, split_thread, &group.splits[started]) != 0)
            break;
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    free(t);
    ccl_result_t r = CCL_OK;
    for (int i = started; i < n && r == CCL_OK; i++)
        r = ccl__set_error(NULL, CCL_ERR_SYSTEM, "%s: cannot start a thread for the group's ccl_comm_split %d of %d",
                           fn, i + 1, n);
    for (int i = 0; i < started && r == CCL_OK; i++)
        if (group.splits[i].r != CCL_OK)
            r = ccl__set_error(NULL, group.splits[i].r, "%s: the group's ccl_comm_split %d of %d failed: %s", fn, i + 1,
                               n, group.splits[i].why);
    return r;
}

ccl_result_t ccl_group_start(void)
{
    group.depth++;
    return CCL_OK;
}

/* Reorders calls[0..n) so that each comm's calls are together, the comms in the order
 * of their first call and each comm's calls in call order; returns the number of comms,
 * or -1 when out of memory (calls unchanged). Linear in n: the comms are numbered
 * through a small hash table of their addresses, then the calls placed by a counting
 * sort. */
static int group_by_comm(HeldCall *calls, int n)
{
    size_t cap = 16;
    while (cap < 2 * (size_t)n)
        cap *= 2;
    ccl_comm_t **keys = calloc(cap, sizeof *keys);
    int *slot_of = malloc(sizeof *slot_of * cap), *comm_of = malloc(sizeof *comm_of * (size_t)n);
    int *start = calloc((size_t)n + 1, sizeof *start);
    HeldCall *sorted = malloc(sizeof *sorted * (size_t)n);
    int ncomms = -1;
    if (!keys || !slot_of || !comm_of || !start || !sorted)
        goto out;
    ncomms = 0;
    for (int i = 0; i < n; i++) {
        uint64_t h = (uint64_t)(uintptr_t)calls[i].comm * 0x9e3779b97f4a7c15ull;
        size_t k = (size_t)(h >> 20) & (cap - 1);
        while (keys[k] && keys[k] != calls[i].comm)
            k = (k + 1) & (cap - 1);
        if (!keys[k]) {
            keys[k] = calls[i].comm;
            slot_of[k] = ncomms++;
        }
        comm_of[i] = slot_of[k];
        start[comm_of[i] + 1]++;
    }
    for (int c = 0; c < ncomms; c++)
        start[c + 1] += start[c];
    for (int i = 0; i < n; i++)
        sorted[start[comm_of[i]]++] = calls[i];
    memcpy(calls, sorted, sizeof *calls * (size_t)n);
out:
    free(keys), free(slot_of), free(comm_of), free(start), free(sorted);
    return ncomms;
}

/* Checks the group's calls on one comm: the comm still lives, one stream. */
static ccl_result_t check_group(const HeldCall *calls, int n)
{
    if (ccl__check_comm(calls[0].comm, "ccl_group_end") != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    for (int i = 1; i < n; i++)
        if (calls[i].stream != calls[0].stream)
            return ccl__set_error(calls[0].comm, CCL_ERR_INVALID_ARGUMENT,
                                  "ccl_group_end: call %d of the group on rank %d (%s to/from rank %d) uses stream %p, "
                                  "call 1 (%s) stream %p: one group's calls on one comm share a stream",
                                  i + 1, calls[0].comm->rank, calls[i].fn, calls[i].op.peer, calls[i].stream,
                                  calls[0].fn, calls[0].stream);
    return CCL_OK;
}

/* Numbers call->ops' messages (ops, n of them, modifiable: call->ops is ops) and hands
 * them to the backend as one launch; un-numbers them if the backend took nothing. */
static ccl_result_t run_numbered(CclP2pCall *call, CclP2pOp *ops, const char *fn)
{
    ccl_comm_t *comm = call->comm;
    int n = call->nops;
    for (int i = 0; i < n; i++) {
        ops[i].index = i + 1;
        uint64_t *counter = ops[i].kind == CCL__P2P_SEND ? comm->p2p_sent : comm->p2p_recvd;
        ops[i].nth = counter[ops[i].peer]++;
        size_t bytes = ops[i].count * ccl_dtype_size(ops[i].dtype);
        if (ops[i].kind != CCL__P2P_RECV || !ccl__reg_find(comm, ops[i].buf, bytes, &ops[i].reg_off))
            ops[i].reg_off = SIZE_MAX;
    }
    call->ops = ops;
    CCL__LOG(CCL__LOG_TRACE, CCL__SUB_P2P, comm->rank, "%s: a group of %d point-to-point call%s", fn, n,
             n > 1 ? "s" : "");
    ccl_result_t r = comm->be->run_p2p(call);
    if (r != CCL_OK) /* nothing was enqueued: the messages were not sent */
        for (int i = n - 1; i >= 0; i--)
            (ops[i].kind == CCL__P2P_SEND ? comm->p2p_sent : comm->p2p_recvd)[ops[i].peer]--;
    return r;
}

/* Numbers the calls' messages and hands them to the backend as one launch. */
static ccl_result_t launch(ccl_comm_t *comm, void *stream, HeldCall *calls, int n, ccl_comm_t *const *group_comms,
                           int ngroup_comms, const char *fn)
{
    CclP2pOp *ops = malloc(sizeof *ops * (size_t)n);
    if (!ops)
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    for (int i = 0; i < n; i++)
        ops[i] = calls[i].op;
    CclP2pCall call = {.comm = comm, .stream = stream, .nops = n, .group_comms = group_comms,
                       .ngroup_comms = ngroup_comms};
    ccl_result_t r = run_numbered(&call, ops, fn);
    free(ops);
    return r;
}

ccl_result_t ccl__p2p_launch_v(CclP2pCall *call, CclP2pOp *ops, const char *fn)
{
    ccl_comm_t *comm = call->comm;
    ccl_comm_t *const self[1] = {comm};
    call->group_comms = self;
    call->ngroup_comms = 1;
    ccl_result_t r = run_numbered(call, ops, fn);
    call->group_comms = NULL;
    return r;
}

static void group_reset(void)
{
    free(group.calls);
    group.calls = NULL;
    group.n = group.cap = 0;
    free(group.splits);
    group.splits = NULL;
    group.nsplits = group.splits_cap = 0;
    group.failed_at = 0;
    group.failed = CCL_OK;
}

static ccl_result_t group_end_body(void);

ccl_result_t ccl_group_end(void)
{
    ccl__range_push("ccl_group_end");
    return ccl__range_pop(group_end_body());
}

static ccl_result_t group_end_body(void)
{
    const char *fn = "ccl_group_end";
    if (group.depth == 0)
        return ccl__set_error(NULL, CCL_ERR_INVALID_USAGE, "%s: no group is open (call ccl_group_start first)", fn);
    if (--group.depth > 0)
        return CCL_OK;
    if (group.failed_at) {
        ccl_result_t r = ccl__set_error(NULL, CCL_ERR_INVALID_USAGE,
                                        "%s: call %d of the group failed, so nothing in the group was launched: %s",
                                        fn, group.failed_at, group.why);
        for (int i = 0; i < group.n; i++)
            if ((i == 0 || group.calls[i].comm != group.calls[i - 1].comm) && ccl__handle_live(group.calls[i].comm))
                CCL__FMT(group.calls[i].comm->last_error, sizeof group.calls[i].comm->last_error, "%s",
                         ccl_comm_last_error(NULL));
        group_reset();
        return r;
    }
    /* Splits first: they block until every rank of their comm is in one. */
    if (group.nsplits > 0) {
        ccl_result_t r = run_splits(fn);
        if (r != CCL_OK || group.n == 0) {
            group_reset();
            return r;
        }
    }
    if (group.n == 0) { /* an empty group launches nothing */
        group_reset();
        return CCL_OK;
    }
    /* Every comm's calls together, and all checked before any comm launches. */
    ccl_result_t r = CCL_OK;
    ccl_comm_t *failed = NULL, **comms = malloc(sizeof *comms * (size_t)group.n);
    int ncomms = 0;
    if (!comms || group_by_comm(group.calls, group.n) < 0)
        r = ccl__set_error(NULL, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    for (int i = 0, k; i < group.n && r == CCL_OK; i += k) {
        for (k = 1; i + k < group.n && group.calls[i + k].comm == group.calls[i].comm; k++)
            ;
        r = check_group(&group.calls[i], k);
        failed = comms[ncomms++] = group.calls[i].comm;
    }
    for (int i = 0, k; i < group.n && r == CCL_OK; i += k) {
        for (k = 1; i + k < group.n && group.calls[i + k].comm == group.calls[i].comm; k++)
            ;
        r = launch(group.calls[i].comm, group.calls[i].stream, &group.calls[i], k, comms, ncomms, fn);
        failed = group.calls[i].comm;
    }
    free(comms);
    /* No comm argument: the message is also the thread's (ccl_comm_last_error(NULL)). */
    if (r != CCL_OK && ccl__handle_live(failed))
        ccl__set_error(NULL, r, "%s", failed->last_error);
    group_reset();
    return r;
}
