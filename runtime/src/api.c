/* api.c: the standard collectives, ccl_comm_use_algorithm, ccl_barrier and
 * ccl_comm_split: the public entry points that dispatch to the layers below.
 *
 * The standard collectives only check what dispatch needs (comm, dtype, root), pick an
 * algorithm (library.c) and hand over to ccl__run, which checks the rest; every message
 * names the user's entry point, not an internal one. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static ccl_result_t collective_body(Collective coll, const char *fn, const void *send, void *recv, size_t count,
                                    ccl_dtype_t dtype, ccl_op_t op, int root, ccl_comm_t *comm, void *stream);

/* A standard collective, inside its NVTX range (CCL_NVTX). */
static ccl_result_t collective(Collective coll, const char *fn, const void *send, void *recv, size_t count,
                               ccl_dtype_t dtype, ccl_op_t op, int root, ccl_comm_t *comm, void *stream)
{
    ccl__range_push(fn);
    return ccl__range_pop(collective_body(coll, fn, send, recv, count, dtype, op, root, comm, stream));
}

static ccl_result_t collective_body(Collective coll, const char *fn, const void *send, void *recv, size_t count,
                                    ccl_dtype_t dtype, ccl_op_t op, int root, ccl_comm_t *comm, void *stream)
{
    ccl_result_t r = ccl__check_call(comm, dtype, fn);
    if (r != CCL_OK)
        return r;
    if ((unsigned)op >= CCL_NUM_OPS)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'op' is %d, not a ccl_op_t", fn, (int)op);
    if ((coll == COLL_BROADCAST || coll == COLL_REDUCE) && (root < 0 || root >= comm->nranks))
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'root' is %d, outside 0..%d", fn, root,
                              comm->nranks - 1);
    size_t es = ccl_dtype_size(dtype);
    size_t bytes = count > SIZE_MAX / es ? SIZE_MAX : count * es;
    if (coll == COLL_ALLTOALL &&
        ccl__exchange_p2p(comm, coll, bytes > SIZE_MAX / (size_t)comm->nranks ? SIZE_MAX : bytes * (size_t)comm->nranks,
                          recv))
        return ccl__all_to_all_p2p(send, recv, count, dtype, comm, stream, fn);
    ccl_algorithm_t *alg;
    /* The first call of a collective loads its algorithm, which a CUDA graph capture
     * does not allow: refused by the load, which leaves nothing half done (library.c,
     * tuner.c try again on the next call). */
    comm->capturing = comm->be->capturing && comm->be->capturing(comm, stream);
    comm->capture_refused = 0;
    int plain = ccl__tune_has_plain(comm, coll, fn) && ccl__on_plain_buffers(comm, coll, send, recv, count, es);
    r = ccl__pick(comm, coll, root, bytes, plain, fn, &alg);
    comm->capturing = 0;
    if (comm->capture_refused)
        return CCL_ERR_INVALID_USAGE;
    if (r != CCL_OK)
        return r;
    return ccl__run(alg, send, recv, count, dtype, op, stream, fn);
}

ccl_result_t ccl_all_reduce(const void *sendbuf, void *recvbuf, size_t count, ccl_dtype_t dtype, ccl_op_t op,
                            ccl_comm_t *comm, void *stream)
{
    return collective(COLL_ALLREDUCE, "ccl_all_reduce", sendbuf, recvbuf, count, dtype, op, 0, comm, stream);
}

ccl_result_t ccl_all_gather(const void *sendbuf, void *recvbuf, size_t sendcount, ccl_dtype_t dtype,
                            ccl_comm_t *comm, void *stream)
{
    return collective(COLL_ALLGATHER, "ccl_all_gather", sendbuf, recvbuf, sendcount, dtype, CCL_SUM, 0, comm, stream);
}

ccl_result_t ccl_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount, ccl_dtype_t dtype,
                                ccl_op_t op, ccl_comm_t *comm, void *stream)
{
    return collective(COLL_REDUCE_SCATTER, "ccl_reduce_scatter", sendbuf, recvbuf, recvcount, dtype, op, 0, comm, stream);
}

ccl_result_t ccl_all_to_all(const void *sendbuf, void *recvbuf, size_t count, ccl_dtype_t dtype,
                            ccl_comm_t *comm, void *stream)
{
    return collective(COLL_ALLTOALL, "ccl_all_to_all", sendbuf, recvbuf, count, dtype, CCL_SUM, 0, comm, stream);
}

ccl_result_t ccl_broadcast(const void *sendbuf, void *recvbuf, size_t count, ccl_dtype_t dtype, int root,
                           ccl_comm_t *comm, void *stream)
{
    return collective(COLL_BROADCAST, "ccl_broadcast", sendbuf, recvbuf, count, dtype, CCL_SUM, root, comm, stream);
}

ccl_result_t ccl_reduce(const void *sendbuf, void *recvbuf, size_t count, ccl_dtype_t dtype, ccl_op_t op,
                        int root, ccl_comm_t *comm, void *stream)
{
    return collective(COLL_REDUCE, "ccl_reduce", sendbuf, recvbuf, count, dtype, op, root, comm, stream);
}

ccl_result_t ccl_comm_use_algorithm(ccl_comm_t *comm, ccl_algorithm_t *alg, size_t min_bytes, size_t max_bytes)
{
    const char *fn = "ccl_comm_use_algorithm";
    if (ccl__check_comm(comm, fn) != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    if (ccl__check_alg(alg, fn) != CCL_OK)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s", ccl_comm_last_error(NULL));
    if (alg->comm != comm)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'alg' was loaded on another communicator", fn);
    if (min_bytes > max_bytes)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: arguments 'min_bytes' (%zu) > 'max_bytes' (%zu)", fn,
                              min_bytes, max_bytes);
    if (comm->nuses == comm->uses_cap) {
        int ncap = comm->uses_cap ? 2 * comm->uses_cap : 8;
        CclUse *nu = realloc(comm->uses, sizeof *nu * (size_t)ncap);
        if (!nu)
            return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        comm->uses = nu;
        comm->uses_cap = ncap;
    }
    comm->uses[comm->nuses++] = (CclUse){alg, min_bytes, max_bytes};
    return CCL_OK;
}

/* ---- ccl_barrier ----
 *
 * No backend has a barrier of its own to offer through the interface, so a barrier is a
 * one-element all-reduce, run like any collective (in order on the stream, checked
 * across ranks, bounded by the timeout): an all-reduce's result depends on every rank's
 * input, so no rank completes it before every rank has started it. The program is a
 * tree (a reduce up a binary tree, then the sum back down): 2 log2(N) steps and O(N)
 * statements, so it compiles at once for any N (the all-pairs one grows as N^2). Its
 * buffer is a small symmetric allocation made with it at the first barrier, which
 * every rank reaches in the same place of its call sequence. */

/* Both barrier programs' first half, the same text: a rank waits for its children's
 * partial sums and adds its own. */
#define BARRIER_SUBTREE_SUM \
    "  let c0 = 2 * r + 1\n" \
    "  let c1 = 2 * r + 2\n" \
    "  let p = (r - 1) / 2\n" \
    "  if c0 < N { wait c0 }\n" \
    "  if c1 < N { wait c1 }\n" \
    "  if c1 < N {\n" \
    "    reduce out[0] <- in[0], s[0], s[1]\n" \
    "  } else if c0 < N {\n" \
    "    reduce out[0] <- in[0], s[0]\n" \
    "  } else {\n" \
    "    copy out[0] <- in[0]\n" \
    "  }\n"

static const char barrier_source[] =
    "algorithm ccl_barrier : allreduce\n"
    "ranks N in 2..1024\n"
    "chunks 1\n"
    "scratch s[2]                     # s[k]: child k's partial sum\n"
    "for r in 0..N on r tb 0 {\n"
    BARRIER_SUBTREE_SUM
    "  if r > 0 {                      # my subtree's sum up; the total comes back down\n"
    "    put s@p[(r - 1) % 2] <- out[0]\n"
    "    signal p\n"
    "    wait p\n"
    "  }\n"
    "  if c0 < N {\n"
    "    put out@c0[0] <- out[0]\n"
    "    signal c0\n"
    "  }\n"
    "  if c1 < N {\n"
    "    put out@c1[0] <- out[0]\n"
    "    signal c1\n"
    "  }\n"
    "}\n";

/* The same tree on a communicator of several nodes (docs/multinode.md): a parent or child
 * on another node is reached through the net channel, and a put to it is flushed before
 * the signal that announces it. */
static const char barrier_nodes_source[] =
    "algorithm ccl_barrier_nodes : allreduce\n"
    "ranks N in 2..1024\n"
    "nodes M x L\n"
    "chunks 1\n"
    "scratch s[2]\n"
    "connect memory all\n"
    "connect net all\n"
    "for r in 0..N on r tb 0 {\n"
    BARRIER_SUBTREE_SUM
    "  if r > 0 {\n"
    "    put s@p[(r - 1) % 2] <- out[0]\n"
    "    if node(p) != node(r) { flush p }\n"
    "    signal p\n"
    "    wait p\n"
    "  }\n"
    "  for c in c0..min(c1 + 1, N) {\n"
    "    put out@c[0] <- out[0]\n"
    "    if node(c) != node(r) { flush c }\n"
    "    signal c\n"
    "  }\n"
    "}\n";

enum { BARRIER_BYTES = 256, BARRIER_OUT = 128 };

static ccl_result_t barrier_setup(ccl_comm_t *comm, void *stream, const char *fn)
{
    if (comm->barrier_alg)
        return CCL_OK;
    comm->capturing = comm->be->capturing && comm->be->capturing(comm, stream);
    ccl_algorithm_t *alg;
    ccl_result_t r = ccl__algorithm_load(comm, comm->nnodes > 1 ? barrier_nodes_source : barrier_source, 0, fn, &alg);
    comm->capturing = 0;
    if (r != CCL_OK)
        return r;
    size_t off;
    if (ccl__heap_alloc(&comm->data, BARRIER_BYTES, 1, &off) != 0) {
        ccl__algorithm_destroy(alg);
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: the heap has no room for the barrier's %d bytes "
                              "(heap_bytes %zu)", fn, BARRIER_BYTES, comm->heap_bytes);
    }
    alg->origin = CCL__ORIGIN_BARRIER;
    comm->barrier_alg = alg;
    comm->barrier_off = off;
    return CCL_OK;
}

static ccl_result_t barrier_body(ccl_comm_t *comm, void *stream);

ccl_result_t ccl_barrier(ccl_comm_t *comm, void *stream)
{
    ccl__range_push("ccl_barrier");
    return ccl__range_pop(barrier_body(comm, stream));
}

static ccl_result_t barrier_body(ccl_comm_t *comm, void *stream)
{
    const char *fn = "ccl_barrier";
    ccl_result_t r = ccl__check_call(comm, CCL_I32, fn);
    if (r != CCL_OK)
        return r;
    if (comm->nranks == 1) /* nobody to wait for */
        return CCL_OK;
    r = barrier_setup(comm, stream, fn);
    if (r != CCL_OK)
        return r;
    char *base = comm->heap_base[comm->rank] + comm->barrier_off;
    return ccl__run(comm->barrier_alg, base, base + BARRIER_OUT, 1, CCL_I32, CCL_SUM, stream, fn);
}

/* ---- ccl_comm_split ----
 *
 * The entry point over comm.c's split (ccl__comm_split_now) and p2p.c's groups: inside
 * a group the split is held until the group's end, which makes every held split at
 * once; a call that fails its checks fails the group, as a send or recv does. */

static ccl_result_t split_checks(ccl_comm_t *comm, int color, ccl_comm_t **newcomm, const char *fn)
{
    if (ccl__check_comm(comm, fn) != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    if (!newcomm)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'newcomm' is NULL", fn);
    *newcomm = NULL;
    if (color < 0 && color != CCL_SPLIT_NOCOLOR)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'color' is %d (a color is >= 0, or "
                              "CCL_SPLIT_NOCOLOR for a rank that joins no new communicator)", fn, color);
    return ccl__check_usable(comm, fn);
}

ccl_result_t ccl_comm_split(ccl_comm_t *comm, int color, int key, ccl_comm_t **newcomm, const ccl_config_t *config)
{
    ccl_result_t r = split_checks(comm, color, newcomm, "ccl_comm_split");
    /* Inside a group: made at ccl_group_end, every rank's at once (p2p.c); a call that
     * fails its checks fails the group, as a send or recv does. */
    if (r != CCL_OK && ccl__group_open())
        ccl__group_fail(r, ccl__handle_live(comm) ? comm->last_error : ccl_comm_last_error(NULL));
    if (r != CCL_OK)
        return r;
    if (ccl__group_open())
        return ccl__group_defer_split(comm, color, key, newcomm, config);
    ccl__range_push("ccl_comm_split");
    return ccl__range_pop(ccl__comm_split_now(comm, color, key, newcomm, config));
}
