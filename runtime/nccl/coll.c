/* coll.c: NCCL's collectives and point-to-point calls, each to libccl or the real NCCL.
 *
 * Every call is checked here first, as NCCL checks it (datatype, operator, root or peer,
 * buffers; NCCL's codes), so that both routes refuse the same calls alike; then routed:
 *   - a route of "ccl" or "nccl" (CCL_NCCL_ROUTE) sends the call there;
 *   - "auto" sends it to libccl where libccl implements it, and to NCCL where it does
 *     not (the GPU backend's collectives on int8, uint32 and uint64; ncclRedOpCreate-
 *     PreMulSum's operators on GPUs), or where libccl refused it at the call (no
 *     algorithm for this size of communicator, a backend limit: remembered for the
 *     comm, so later calls go straight to NCCL; a CUDA graph capture libccl cannot
 *     record yet), and from the size where NCCL was measured faster on ordinary
 *     tensors (CCL_NCCL_AUTO_LIMIT, route.c's defaults; docs/nccl.md). Without a real
 *     NCCL comm everything goes to libccl, whose refusal is then the call's error.
 * The decision reads only what every rank of the call passes alike (collective,
 * datatype, operator kind, count), so the ranks of one call never go different ways. Both
 * libraries enqueue on the user's stream, so calls stay in order across routes.
 *
 * On libccl's CPU backend (the test mode: host buffers, no streams) a call completes
 * before it returns, or at the end of its group: as a program that synchronized its
 * stream would see it. ncclGather and ncclScatter run on libccl as point-to-point
 * groups (ccl.h has neither collective). */
#include <stdlib.h>
#include <string.h>

#include "shim.h"

static const ccl_dtype_t dtypes[ncclNumTypes] = {
    [ncclInt8] = CCL_I8,       [ncclUint8] = CCL_U8,       [ncclInt32] = CCL_I32,
    [ncclUint32] = CCL_U32,    [ncclInt64] = CCL_I64,      [ncclUint64] = CCL_U64,
    [ncclFloat16] = CCL_F16,   [ncclFloat32] = CCL_F32,    [ncclFloat64] = CCL_F64,
    [ncclBfloat16] = CCL_BF16, [ncclFloat8e4m3] = CCL_FP8_E4M3, [ncclFloat8e5m2] = CCL_FP8_E5M2,
};
static const ccl_op_t ops[ncclNumOps] = {
    [ncclSum] = CCL_SUM, [ncclProd] = CCL_PROD, [ncclMax] = CCL_MAX, [ncclMin] = CCL_MIN, [ncclAvg] = CCL_AVG,
};

int shim_dtype(ncclDataType_t t, ccl_dtype_t *out)
{
    if ((unsigned)t >= ncclNumTypes)
        return -1;
    *out = dtypes[t];
    return 0;
}

size_t shim_dtype_size(ncclDataType_t t)
{
    ccl_dtype_t d;
    return shim_dtype(t, &d) == 0 ? ccl_dtype_size(d) : 0;
}

/* One call, as NCCL's API describes it. */
typedef struct {
    ShimColl coll;
    const char *fn;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t dtype;
    ncclRedOp_t op;
    int root;               /* root, or the peer of a send or recv */
    int is_recv;            /* SHIM_SENDRECV: a recv */
    ncclComm_t comm;
    cudaStream_t stream;
    int custom;             /* op is a ncclRedOpCreatePreMulSum operator, copied here */
    ShimRedOp redop;
    void *scaled;           /* the CPU backend's pre-multiplied input, freed after the call */
} Call;

static int reduces(ShimColl c)
{
    return c == SHIM_ALLREDUCE || c == SHIM_REDUCE || c == SHIM_REDUCESCATTER;
}

static int rooted(ShimColl c)
{
    return c == SHIM_BROADCAST || c == SHIM_REDUCE || c == SHIM_GATHER || c == SHIM_SCATTER;
}

/* NCCL's argument checks (the comm is held). */
static ncclResult_t check(Call *c)
{
    ncclComm_t comm = c->comm;
    if ((unsigned)c->dtype >= ncclNumTypes)
        return shim_fail(comm, ncclInvalidArgument, "%s: argument 'datatype' is %d, not an ncclDataType_t", c->fn,
                         (int)c->dtype);
    if (reduces(c->coll) && (unsigned)c->op >= ncclNumOps) {
        unsigned i = (unsigned)c->op - ncclNumOps;
        pthread_mutex_lock(&comm->mu);
        int live = (unsigned)c->op >= ncclNumOps && i < (unsigned)comm->nredops && comm->redops[i].used;
        if (live)
            c->redop = comm->redops[i];
        pthread_mutex_unlock(&comm->mu);
        if (!live)
            return shim_fail(comm, ncclInvalidArgument, "%s: argument 'op' is %d: not a built-in operator, nor one "
                             "that ncclRedOpCreatePreMulSum made for this communicator (or it was destroyed)", c->fn,
                             (int)c->op);
        if (c->redop.dtype != c->dtype)
            return shim_fail(comm, ncclInvalidArgument, "%s: argument 'op' (%d) was made for datatype %d, not for "
                             "this call's %d", c->fn, (int)c->op, (int)c->redop.dtype, (int)c->dtype);
        c->custom = 1;
    }
    const char *what = c->coll == SHIM_SENDRECV ? "peer" : "root";
    if ((rooted(c->coll) || c->coll == SHIM_SENDRECV) && (c->root < 0 || c->root >= comm->nranks))
        return shim_fail(comm, ncclInvalidArgument, "%s: argument '%s' is %d, outside 0..%d", c->fn, what, c->root,
                         comm->nranks - 1);
    if (c->count > 0) {
        int me_root = c->root == comm->rank;
        int need_send, need_recv;
        switch (c->coll) {
        case SHIM_BROADCAST:
        case SHIM_SCATTER:
            need_send = me_root, need_recv = 1;
            break;
        case SHIM_REDUCE:
        case SHIM_GATHER:
            need_send = 1, need_recv = me_root;
            break;
        case SHIM_SENDRECV:
            need_send = !c->is_recv, need_recv = c->is_recv;
            break;
        default:
            need_send = need_recv = 1;
        }
        if (need_send && !c->send)
            return shim_fail(comm, ncclInvalidArgument, "%s: argument 'sendbuff' is NULL with count %zu", c->fn,
                             c->count);
        if (need_recv && !c->recv)
            return shim_fail(comm, ncclInvalidArgument, "%s: argument 'recvbuff' is NULL with count %zu", c->fn,
                             c->count);
    }
    if (comm->aborted || comm->finalized)
        return shim_fail(comm, ncclInvalidUsage, "%s: the communicator was %s", c->fn,
                         comm->aborted ? "revoked" : "finalized");
    return ncclSuccess;
}

/* Whether libccl implements the call (what every rank knows alike): all but a
 * pre-multiplied sum on GPUs (on the CPU backend the host pre-multiplies). */
static int ccl_can(const Call *c)
{
    return !c->custom || c->comm->backend == CCL_BACKEND_CPU;
}

/* Whether the real library has the call (ncclAlltoAll, ncclGather and ncclScatter are
 * NCCL 2.28's). */
static int real_has(const Call *c, const ShimReal *real)
{
    return real && (c->coll == SHIM_ALLTOALL ? real->AlltoAll != NULL
                    : c->coll == SHIM_GATHER ? real->Gather != NULL
                    : c->coll == SHIM_SCATTER ? real->Scatter != NULL : 1);
}

/* The call's larger buffer in bytes, as nccl-tests and torch count it (CCL_NCCL_AUTO_LIMIT). */
static size_t call_bytes(const Call *c)
{
    size_t b = c->count * shim_dtype_size(c->dtype);
    int blocks = c->coll == SHIM_ALLGATHER || c->coll == SHIM_REDUCESCATTER || c->coll == SHIM_ALLTOALL;
    return blocks ? b * (size_t)c->comm->nranks : b;
}

static int route_of(const Call *c)
{
    ncclComm_t comm = c->comm;
    if (!comm->ccl)
        return SHIM_TO_NCCL;
    switch (comm->routes[c->coll]) {
    case SHIM_ROUTE_CCL:
        return SHIM_TO_CCL;
    case SHIM_ROUTE_NCCL:
        return comm->real ? SHIM_TO_NCCL : SHIM_TO_CCL;
    default:
        if (!comm->real || !real_has(c, shim_real_loaded()))
            return SHIM_TO_CCL;
        if (call_bytes(c) >= comm->auto_limit[c->coll])
            return SHIM_TO_NCCL;
        return ccl_can(c) && !comm->refused[c->coll][c->dtype][c->custom] ? SHIM_TO_CCL : SHIM_TO_NCCL;
    }
}

/* ncclGather and ncclScatter as point-to-point groups (ccl.h has neither collective).
 * The root's own block is a send and a recv to itself, or nothing in place. */
static ccl_result_t gather_scatter(const Call *c, ccl_dtype_t dt, void *stream)
{
    ccl_comm_t *cc = c->comm->ccl;
    size_t block = c->count * ccl_dtype_size(dt);
    int me = c->comm->rank, n = c->comm->nranks, root = c->root, gather = c->coll == SHIM_GATHER;
    /* In place: gather's sendbuff is the root's block of recvbuff, scatter's recvbuff
     * the root's block of sendbuff. */
    const char *blocks = gather ? (const char *)c->recv : (const char *)c->send;
    int in_place = me == root && (gather ? c->send : c->recv) == (const void *)(blocks + (size_t)root * block);
    ccl_result_t r = CCL_OK, e;
    ccl_group_start();
    if (me == root)
        for (int p = 0; p < n; p++) {
            if (p == me && in_place)
                continue;
            char *b = (gather ? (char *)c->recv : (char *)(uintptr_t)c->send) + (size_t)p * block;
            e = gather ? ccl_recv(b, c->count, dt, p, cc, stream) : ccl_send(b, c->count, dt, p, cc, stream);
            r = r == CCL_OK ? e : r;
        }
    if (!in_place) {
        e = gather ? ccl_send(c->send, c->count, dt, root, cc, stream) : ccl_recv(c->recv, c->count, dt, root, cc, stream);
        r = r == CCL_OK ? e : r;
    }
    e = ccl_group_end();
    return r == CCL_OK ? e : r;
}

/* The call on libccl. A pre-multiplied sum (CPU backend only: issue refuses it on GPUs)
 * scales the input into c->scaled first and sums that. */
static ccl_result_t run_ccl(Call *c)
{
    ccl_comm_t *cc = c->comm->ccl;
    ccl_dtype_t dt = dtypes[c->dtype];
    ccl_op_t op = c->custom ? CCL_SUM : reduces(c->coll) ? ops[c->op] : CCL_SUM;
    void *stream = c->comm->backend == CCL_BACKEND_GPU ? (void *)c->stream : NULL;
    const void *send = c->send;
    if (c->custom && c->count > 0) {
        size_t n = c->coll == SHIM_REDUCESCATTER ? c->count * (size_t)c->comm->nranks : c->count;
        if (!(c->scaled = malloc(n * ccl_dtype_size(dt))))
            return CCL_ERR_OUT_OF_MEMORY;
        const void *scalar = c->redop.residence == ncclScalarHostImmediate ? c->redop.scalar : c->redop.scalar_ptr;
        shim_premul(c->scaled, c->send, n, c->dtype, scalar);
        send = c->scaled;
    }
    switch (c->coll) {
    case SHIM_ALLREDUCE:
        return ccl_all_reduce(send, c->recv, c->count, dt, op, cc, stream);
    case SHIM_ALLGATHER:
        return ccl_all_gather(send, c->recv, c->count, dt, cc, stream);
    case SHIM_REDUCESCATTER:
        return ccl_reduce_scatter(send, c->recv, c->count, dt, op, cc, stream);
    case SHIM_BROADCAST:
        return ccl_broadcast(send, c->recv, c->count, dt, c->root, cc, stream);
    case SHIM_REDUCE:
        return ccl_reduce(send, c->recv, c->count, dt, op, c->root, cc, stream);
    case SHIM_ALLTOALL:
        return ccl_all_to_all(send, c->recv, c->count, dt, cc, stream);
    case SHIM_GATHER:
    case SHIM_SCATTER:
        return gather_scatter(c, dt, stream);
    case SHIM_SENDRECV:
        return c->is_recv ? ccl_recv(c->recv, c->count, dt, c->root, cc, stream)
                          : ccl_send(send, c->count, dt, c->root, cc, stream);
    default:
        return CCL_ERR_INTERNAL;
    }
}

/* The call on the real communicator rc with the real operator op. */
static ncclResult_t call_real(const Call *c, const ShimReal *real, ncclComm_t rc, ncclRedOp_t op)
{
    switch (c->coll) {
    case SHIM_ALLREDUCE:
        return real->AllReduce(c->send, c->recv, c->count, c->dtype, op, rc, c->stream);
    case SHIM_ALLGATHER:
        return real->AllGather(c->send, c->recv, c->count, c->dtype, rc, c->stream);
    case SHIM_REDUCESCATTER:
        return real->ReduceScatter(c->send, c->recv, c->count, c->dtype, op, rc, c->stream);
    case SHIM_BROADCAST:
        return real->Broadcast(c->send, c->recv, c->count, c->dtype, c->root, rc, c->stream);
    case SHIM_REDUCE:
        return real->Reduce(c->send, c->recv, c->count, c->dtype, op, c->root, rc, c->stream);
    case SHIM_ALLTOALL:
        return real->AlltoAll(c->send, c->recv, c->count, c->dtype, rc, c->stream);
    case SHIM_GATHER:
        return real->Gather(c->send, c->recv, c->count, c->dtype, c->root, rc, c->stream);
    case SHIM_SCATTER:
        return real->Scatter(c->send, c->recv, c->count, c->dtype, c->root, rc, c->stream);
    case SHIM_SENDRECV:
        return c->is_recv ? real->Recv(c->recv, c->count, c->dtype, c->root, rc, c->stream)
                          : real->Send(c->send, c->count, c->dtype, c->root, rc, c->stream);
    default:
        return ncclInternalError;
    }
}

/* The call on the real NCCL (the comm has a real one). */
static ncclResult_t run_nccl(const Call *c, const ShimReal *real)
{
    shim_group_real_enter(real);
    return call_real(c, real, c->comm->real, c->custom ? c->redop.real_op : c->op);
}

/* Refusals of libccl's that auto mode sends to NCCL instead: nothing was enqueued, and
 * every rank gets the same one (they depend on the collective, datatype and size of the
 * communicator only), except a capture, which every rank of a captured graph makes. */
static int fall_back(const Call *c, ccl_result_t cr)
{
    ncclComm_t comm = c->comm;
    if (comm->routes[c->coll] != SHIM_ROUTE_AUTO || !comm->real)
        return 0;
    if (cr == CCL_ERR_NO_ALGORITHM || cr == CCL_ERR_UNSUPPORTED) {
        comm->refused[c->coll][c->dtype][c->custom] = 1;
        shim_log(SHIM_LOG_INFO, comm->rank, "%s: libccl refused %s of datatype %d (%s: %s): such calls go to NCCL "
                 "on comm %p from now on", c->fn, shim_coll_name(c->coll), (int)c->dtype, ccl_result_string(cr),
                 ccl_comm_last_error(comm->ccl), (void *)comm);
        return 1;
    }
    return cr == CCL_ERR_INVALID_USAGE && comm->backend == CCL_BACKEND_GPU && shim_stream_capturing(c->stream);
}

static ncclResult_t issue(Call *c)
{
    ncclComm_t comm = c->comm;
    const ShimReal *pass;
    ncclResult_t r = shim_comm_get_or_real(comm, c->fn, &pass);
    if (r == ncclSuccess && pass) /* the real library's own call (NCCL's ncclBcast calls ncclBroadcast) */
        return call_real(c, pass, comm, c->op);
    if (r != ncclSuccess) {
        shim_group_fail(r);
        return r;
    }
    if ((r = check(c)) != ncclSuccess) {
        shim_group_fail(r);
        shim_comm_put(comm);
        return r;
    }
    int to = route_of(c);
    if (to == SHIM_TO_CCL && !ccl_can(c)) {
        /* A pre-multiplied sum on GPUs with no real NCCL comm to run it: refused, as the
         * host cannot scale device buffers. */
        r = shim_fail(comm, ncclInvalidUsage, "%s: argument 'op' (%d) is a pre-multiplied sum "
                      "(ncclRedOpCreatePreMulSum), which libccl does not have on GPUs, and this comm has no real NCCL "
                      "comm to run it on (%s)", c->fn, (int)c->op, comm->routes[c->coll] == SHIM_ROUTE_CCL ?
                      "CCL_NCCL_ROUTE sends it to libccl" : "see CCL_DEBUG=INFO at its init");
    } else if (to == SHIM_TO_CCL) {
        ccl_result_t cr = run_ccl(c);
        if (cr != CCL_OK && fall_back(c, cr))
            to = SHIM_TO_NCCL;
        else if (cr != CCL_OK)
            r = shim_fail_ccl(comm, cr, comm->ccl, c->fn);
    }
    const ShimReal *real = shim_real_loaded();
    if (to == SHIM_TO_NCCL && !real_has(c, real)) {
        r = shim_fail(comm, ncclInvalidUsage, "%s: CCL_NCCL_ROUTE sends %s to NCCL, but the real NCCL (%s, version "
                      "%d) has no %s", c->fn, shim_coll_name(c->coll), real ? real->path : "none",
                      real ? real->version : 0, c->fn);
    } else if (to == SHIM_TO_NCCL) {
        ncclResult_t rr = run_nccl(c, real);
        if (rr != ncclSuccess)
            r = shim_fail(comm, rr, "%s: the real NCCL failed: %s", c->fn, shim_real_error(comm->real));
    }
    atomic_fetch_add(&comm->calls[c->coll][to], 1);
    /* The CPU backend: done before the call returns, or at the group's end. */
    if (r == ncclSuccess && to == SHIM_TO_CCL && comm->backend == CCL_BACKEND_CPU) {
        if (shim_group_depth()) {
            shim_group_touch(comm);
        } else {
            ccl_result_t cr = ccl_comm_synchronize(comm->ccl);
            if (cr != CCL_OK)
                r = shim_fail_ccl(comm, cr, comm->ccl, c->fn);
        }
    }
    /* The scaled input lives until libccl is done with it: the call's end, or the group's.
     * A group that cannot hold it (out of memory) leaks it rather than free it under
     * libccl's worker. */
    if (c->scaled && (!shim_group_depth() || r != ncclSuccess))
        free(c->scaled);
    else if (c->scaled)
        shim_group_keep(c->scaled);
    if (r != ncclSuccess)
        shim_group_fail(r);
    shim_comm_put(comm);
    return r;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    Call c = {.coll = SHIM_ALLREDUCE, .fn = "ncclAllReduce", .send = sendbuff, .recv = recvbuff, .count = count,
              .dtype = datatype, .op = op, .comm = comm, .stream = stream};
    return issue(&c);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream)
{
    Call c = {.coll = SHIM_ALLGATHER, .fn = "ncclAllGather", .send = sendbuff, .recv = recvbuff, .count = sendcount,
              .dtype = datatype, .comm = comm, .stream = stream};
    return issue(&c);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    Call c = {.coll = SHIM_REDUCESCATTER, .fn = "ncclReduceScatter", .send = sendbuff, .recv = recvbuff,
              .count = recvcount, .dtype = datatype, .op = op, .comm = comm, .stream = stream};
    return issue(&c);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream)
{
    Call c = {.coll = SHIM_BROADCAST, .fn = "ncclBroadcast", .send = sendbuff, .recv = recvbuff, .count = count,
              .dtype = datatype, .root = root, .comm = comm, .stream = stream};
    return issue(&c);
}

ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream)
{
    Call c = {.coll = SHIM_BROADCAST, .fn = "ncclBcast", .send = buff, .recv = buff, .count = count,
              .dtype = datatype, .root = root, .comm = comm, .stream = stream};
    return issue(&c);
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream)
{
    Call c = {.coll = SHIM_REDUCE, .fn = "ncclReduce", .send = sendbuff, .recv = recvbuff, .count = count,
              .dtype = datatype, .op = op, .root = root, .comm = comm, .stream = stream};
    return issue(&c);
}

ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                          ncclComm_t comm, cudaStream_t stream)
{
    Call c = {.coll = SHIM_ALLTOALL, .fn = "ncclAlltoAll", .send = sendbuff, .recv = recvbuff, .count = count,
              .dtype = datatype, .comm = comm, .stream = stream};
    return issue(&c);
}

ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream)
{
    Call c = {.coll = SHIM_GATHER, .fn = "ncclGather", .send = sendbuff, .recv = recvbuff, .count = count,
              .dtype = datatype, .root = root, .comm = comm, .stream = stream};
    return issue(&c);
}

ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream)
{
    Call c = {.coll = SHIM_SCATTER, .fn = "ncclScatter", .send = sendbuff, .recv = recvbuff, .count = count,
              .dtype = datatype, .root = root, .comm = comm, .stream = stream};
    return issue(&c);
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    Call c = {.coll = SHIM_SENDRECV, .fn = "ncclSend", .send = sendbuff, .count = count, .dtype = datatype,
              .root = peer, .comm = comm, .stream = stream};
    return issue(&c);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    Call c = {.coll = SHIM_SENDRECV, .fn = "ncclRecv", .recv = recvbuff, .count = count, .dtype = datatype,
              .root = peer, .is_recv = 1, .comm = comm, .stream = stream};
    return issue(&c);
}

/* ---- operators ---- */

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm)
{
    const char *fn = "ncclRedOpCreatePreMulSum";
    ncclResult_t r = shim_comm_get(comm, fn);
    if (r != ncclSuccess)
        return r;
    if (!op)
        r = shim_fail(comm, ncclInvalidArgument, "%s: argument 'op' is NULL", fn);
    else if (!scalar)
        r = shim_fail(comm, ncclInvalidArgument, "%s: argument 'scalar' is NULL", fn);
    else if ((unsigned)datatype >= ncclNumTypes)
        r = shim_fail(comm, ncclInvalidArgument, "%s: argument 'datatype' is %d, not an ncclDataType_t", fn,
                      (int)datatype);
    else if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
        r = shim_fail(comm, ncclInvalidArgument, "%s: argument 'residence' is %d", fn, (int)residence);
    if (r != ncclSuccess) {
        shim_comm_put(comm);
        return r;
    }
    ShimRedOp e = {.used = 1, .dtype = datatype, .residence = residence, .scalar_ptr = scalar};
    if (residence == ncclScalarHostImmediate)
        memcpy(e.scalar, scalar, shim_dtype_size(datatype));
    const ShimReal *real = shim_real_loaded();
    if (comm->real && real) {
        ncclResult_t rr = real->RedOpCreatePreMulSum(&e.real_op, scalar, datatype, residence, comm->real);
        if (rr != ncclSuccess) {
            shim_comm_put(comm);
            return shim_fail(comm, rr, "%s: the real NCCL's failed: %s", fn, shim_real_error(comm->real));
        }
        e.has_real_op = 1;
    }
    pthread_mutex_lock(&comm->mu);
    int i = 0;
    while (i < comm->nredops && comm->redops[i].used)
        i++;
    if (i == comm->nredops) {
        ShimRedOp *more = realloc(comm->redops, sizeof *more * (size_t)(comm->nredops + 1));
        if (more) {
            comm->redops = more;
            comm->nredops++;
        } else {
            i = -1;
        }
    }
    if (i >= 0)
        comm->redops[i] = e;
    pthread_mutex_unlock(&comm->mu);
    if (i < 0) {
        if (e.has_real_op)
            real->RedOpDestroy(e.real_op, comm->real);
        r = shim_fail(comm, ncclSystemError, "%s: out of memory", fn);
    } else {
        *op = (ncclRedOp_t)(ncclNumOps + i);
    }
    shim_comm_put(comm);
    return r;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
    const char *fn = "ncclRedOpDestroy";
    ncclResult_t r = shim_comm_get(comm, fn);
    if (r != ncclSuccess)
        return r;
    unsigned i = (unsigned)op - ncclNumOps;
    pthread_mutex_lock(&comm->mu);
    int live = (unsigned)op >= ncclNumOps && i < (unsigned)comm->nredops && comm->redops[i].used;
    ShimRedOp e = live ? comm->redops[i] : (ShimRedOp){0};
    if (live)
        comm->redops[i].used = 0;
    pthread_mutex_unlock(&comm->mu);
    const ShimReal *real = shim_real_loaded();
    if (!live)
        r = shim_fail(comm, ncclInvalidArgument, "%s: argument 'op' is %d: %s", fn, (int)op,
                      (unsigned)op < ncclNumOps ? "a built-in operator cannot be destroyed"
                                                : "not an operator made for this communicator (destroyed already?)");
    else if (e.has_real_op && real && (r = real->RedOpDestroy(e.real_op, comm->real)) != ncclSuccess)
        r = shim_fail(comm, r, "%s: the real NCCL's failed: %s", fn, shim_real_error(comm->real));
    shim_comm_put(comm);
    return r;
}

/* NCCL's profiling names. */
SHIM_PROFILING_NAME(ncclAllReduce);
SHIM_PROFILING_NAME(ncclAllGather);
SHIM_PROFILING_NAME(ncclReduceScatter);
SHIM_PROFILING_NAME(ncclBroadcast);
SHIM_PROFILING_NAME(ncclBcast);
SHIM_PROFILING_NAME(ncclReduce);
SHIM_PROFILING_NAME(ncclAlltoAll);
SHIM_PROFILING_NAME(ncclGather);
SHIM_PROFILING_NAME(ncclScatter);
SHIM_PROFILING_NAME(ncclSend);
SHIM_PROFILING_NAME(ncclRecv);
SHIM_PROFILING_NAME(ncclRedOpCreatePreMulSum);
SHIM_PROFILING_NAME(ncclRedOpDestroy);
