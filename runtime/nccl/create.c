/* create.c: the calls that make a communicator from another call's state and may sit
 * inside a group: ncclCommInitRank (and its Config and Scalable forms), ncclCommSplit
 * and ncclCommShrink. Each checks its arguments at the call; inside a group it hands the
 * work to group.c, which does it at the group's end, else it does it now through
 * comm.c. So group.c calls comm.c, and this file calls both: none calls back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

/* The checks every init-by-id makes at the call (also inside a group). */
static ncclResult_t init_checks(ncclComm_t *comm, int nranks, int nid, const ncclUniqueId *ids, int rank,
                                const ncclConfig_t *config, const char *fn)
{
    if (!comm)
        return shim_fail(NULL, ncclInvalidArgument, "%s: argument 'comm' is NULL", fn);
    *comm = NULL;
    if (nranks < 1)
        return shim_fail(NULL, ncclInvalidArgument, "%s: argument 'nranks' is %d (at least 1)", fn, nranks);
    if (rank < 0 || rank >= nranks)
        return shim_fail(NULL, ncclInvalidArgument, "%s: argument 'rank' is %d, outside 0..%d", fn, rank, nranks - 1);
    if (nid < 1 || !ids)
        return shim_fail(NULL, ncclInvalidArgument, "%s: argument '%s' is %s", fn, ids ? "nId" : "commIds",
                         ids ? "below 1" : "NULL");
    return shim_check_config(config, fn);
}

static ncclResult_t init_rank(ncclComm_t *comm, int nranks, int nid, const ncclUniqueId *ids, int rank,
                              const ncclConfig_t *config, const char *fn)
{
    ncclResult_t r = init_checks(comm, nranks, nid, ids, rank, config, fn);
    if (r != ncclSuccess)
        return r;
    if (shim_group_depth())
        return shim_group_defer_init(comm, nranks, nid, ids, rank, config, fn);
    return shim_init_rank_now(comm, nranks, nid, ids, rank, config, fn);
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    return init_rank(comm, nranks, 1, &commId, rank, NULL, "ncclCommInitRank");
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config)
{
    return init_rank(comm, nranks, 1, &commId, rank, config, "ncclCommInitRankConfig");
}

ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId, ncclUniqueId *commIds,
                                      ncclConfig_t *config)
{
    return init_rank(newcomm, nranks, nId, commIds, myrank, config, "ncclCommInitRankScalable");
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)
{
    const char *fn = "ncclCommSplit";
    ncclResult_t r = shim_comm_get(comm, fn);
    if (r != ncclSuccess)
        return r;
    if (!newcomm)
        r = shim_fail(comm, ncclInvalidArgument, "%s: argument 'newcomm' is NULL", fn);
    else if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
        r = shim_fail(comm, ncclInvalidArgument, "%s: argument 'color' is %d (a color is >= 0, or "
                      "NCCL_SPLIT_NOCOLOR)", fn, color);
    else if (comm->aborted || comm->finalized)
        r = shim_fail(comm, ncclInvalidUsage, "%s: the communicator was %s", fn,
                      comm->aborted ? "revoked" : "finalized");
    else
        r = shim_check_config(config, fn);
    if (r != ncclSuccess) {
        shim_group_fail(r);
        shim_comm_put(comm);
        return r;
    }
    *newcomm = NULL;
    ncclComm_t child = shim_comm_new();
    if (!child) {
        shim_comm_put(comm);
        return shim_fail(comm, ncclSystemError, "%s: out of memory", fn);
    }
    shim_copy_name(child, config);
    /* Inside a group both halves are held by their libraries until the group's end,
     * which writes child->ccl and child->real. */
    ccl_result_t cr = comm->ccl ? ccl_comm_split(comm->ccl, color, key, &child->ccl, NULL) : CCL_OK;
    if (cr != CCL_OK) {
        r = shim_fail_ccl(comm, cr, comm->ccl, fn);
        shim_comm_free(child);
        shim_group_fail(r);
        shim_comm_put(comm);
        return r;
    }
    const ShimReal *real = shim_real_loaded();
    if (comm->real && real) {
        ncclConfig_t copy;
        shim_group_real_enter(real);
        if ((r = real->CommSplit(comm->real, color, key, &child->real, shim_real_config(config, &copy))) != ncclSuccess) {
            r = shim_fail(comm, r, "%s: the real NCCL's ncclCommSplit failed: %s", fn, shim_real_error(comm->real));
            /* Inside a group libccl writes its half at the group's end: the child waits
             * for it there, and is dropped then. */
            if (shim_group_depth())
                shim_group_defer_split(comm, child, newcomm);
            else
                shim_comm_discard(child);
            shim_group_fail(r);
            shim_comm_put(comm);
            return r;
        }
    }
    if (shim_group_depth())
        r = shim_group_defer_split(comm, child, newcomm);
    else
        r = shim_split_finish(comm, child, newcomm, fn);
    shim_comm_put(comm);
    return r;
}

/* libccl cannot make a communicator without the excluded ranks taking part (their
 * processes may be gone), so a shrunk comm is the real NCCL's alone. */
ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm,
                            ncclConfig_t *config, int shrinkFlags)
{
    const char *fn = "ncclCommShrink";
    ncclResult_t r = shim_comm_get(comm, fn);
    if (r != ncclSuccess)
        return r;
    const ShimReal *real = shim_real_loaded();
    if (!newcomm)
        r = shim_fail(comm, ncclInvalidArgument, "%s: argument 'newcomm' is NULL", fn);
    else if (excludeRanksCount < 0 || (excludeRanksCount > 0 && !excludeRanksList))
        r = shim_fail(comm, ncclInvalidArgument, "%s: argument 'excludeRanksList' is NULL or its count %d is "
                      "negative", fn, excludeRanksCount);
    else if (!comm->real || !real || !real->CommShrink)
        r = shim_fail(comm, ncclInvalidUsage, "%s: libccl cannot shrink a communicator (every rank of a libccl "
                      "split takes part, and excluded ranks may be gone), and this comm has no real NCCL one to "
                      "shrink (%s)", fn, !comm->real ? "see CCL_DEBUG=INFO at its init" : "its NCCL lacks ncclCommShrink");
    else
        r = shim_check_config(config, fn);
    ncclComm_t child = r == ncclSuccess ? shim_comm_new() : NULL;
    if (r == ncclSuccess && !child)
        r = shim_fail(comm, ncclSystemError, "%s: out of memory", fn);
    if (r == ncclSuccess) {
        ncclConfig_t copy;
        *newcomm = NULL;
        shim_group_real_enter(real);
        r = real->CommShrink(comm->real, excludeRanksList, excludeRanksCount, &child->real,
                             shim_real_config(config, &copy), shrinkFlags);
        if (r != ncclSuccess) {
            r = shim_fail(comm, r, "%s: the real NCCL's ncclCommShrink failed: %s", fn, shim_real_error(comm->real));
            shim_comm_free(child);
        } else if (!child->real) {
            shim_comm_free(child);
        } else {
            shim_copy_name(child, config);
            *newcomm = child;
            ShimRoute nccl_only[SHIM_NUM_COLLS];
            for (int c = 0; c < SHIM_NUM_COLLS; c++)
                nccl_only[c] = SHIM_ROUTE_NCCL;
            shim_comm_publish(child, nccl_only, fn);
        }
    }
    shim_comm_put(comm);
    return r;
}

SHIM_PROFILING_NAME(ncclCommInitRank);
SHIM_PROFILING_NAME(ncclCommInitRankConfig);
SHIM_PROFILING_NAME(ncclCommInitRankScalable);
SHIM_PROFILING_NAME(ncclCommSplit);
SHIM_PROFILING_NAME(ncclCommShrink);
