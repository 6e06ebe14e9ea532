/* ccl_mpi.h: communicators from an MPI communicator, header-only.
 *
 * libccl itself does not link MPI; this header adapts an MPI_Comm to the
 * ccl_bootstrap_t that ccl_comm_init_rank needs (an all-gather and a barrier, used only
 * while the communicator is being created). Include it after <mpi.h> in a program
 * built with mpicc:
 *
 *   MPI_Init(&argc, &argv);
 *   ccl_comm_t *comm;
 *   ccl_comm_init_mpi(&comm, MPI_COMM_WORLD, local_rank, NULL);
 *   ...
 *   ccl_comm_destroy(comm);
 *   MPI_Finalize();
 *
 * Any MPI thread level works for these: libccl's own threads never call MPI.
 *
 * Several nodes (docs/multinode.md): ccl_comm_init_mpi_nodes also gives the
 * communicator an inter-node transport (ccl_net_t) over a duplicate of the MPI_Comm,
 * whose MPI_Isend, MPI_Irecv and MPI_Test libccl's proxy thread calls (or its worker
 * thread, while it waits for point-to-point messages); MPI must then
 * be initialized with MPI_THREAD_MULTIPLE:
 *
 *   int provided;
 *   MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
 *   ccl_comm_init_mpi_nodes(&comm, MPI_COMM_WORLD, 0, local_rank, NULL);
 *
 * (ranks_per_node 0: CCL_RANKS_PER_NODE, else each host a node.) The duplicate is freed
 * by ccl_comm_destroy, which must therefore come before MPI_Finalize. ccl_comm_split of
 * such a communicator gives each child of several nodes a transport over an
 * MPI_Comm_split of the duplicate (freed by the child's destroy, also before
 * MPI_Finalize). */
#ifndef CCL_MPI_H
#define CCL_MPI_H

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "ccl.h"

#ifdef __cplusplus
extern "C" {
#endif

static inline int ccl_mpi_allgather_(void *ctx, const void *in, void *out, size_t bytes)
{
    if (bytes > (size_t)INT_MAX)
        return -1;
    return MPI_Allgather((void *)in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, *(MPI_Comm *)ctx) == MPI_SUCCESS
               ? 0
               : -1;
}

static inline int ccl_mpi_barrier_(void *ctx)
{
    return MPI_Barrier(*(MPI_Comm *)ctx) == MPI_SUCCESS ? 0 : -1;
}

/* Fills *boot for mpi_comm; *mpi_comm must outlive the ccl_comm_init_rank call. */
static inline ccl_result_t ccl_bootstrap_from_mpi(ccl_bootstrap_t *boot, MPI_Comm *mpi_comm)
{
    int rank, size;
    if (!boot || !mpi_comm || MPI_Comm_rank(*mpi_comm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(*mpi_comm, &size) != MPI_SUCCESS)
        return CCL_ERR_INVALID_ARGUMENT;
    boot->nranks = size;
    boot->rank = rank;
    boot->allgather = ccl_mpi_allgather_;
    boot->barrier = ccl_mpi_barrier_;
    boot->ctx = mpi_comm;
    return CCL_OK;
}

/* ccl_comm_init_rank over mpi_comm: collective over its processes; rank i of mpi_comm
 * becomes rank i of the communicator. `device` is this process's GPU. */
static inline ccl_result_t ccl_comm_init_mpi(ccl_comm_t **comm, MPI_Comm mpi_comm, int device,
                                             const ccl_config_t *config)
{
    ccl_bootstrap_t boot;
    ccl_result_t r = ccl_bootstrap_from_mpi(&boot, &mpi_comm);
    if (r != CCL_OK)
        return r;
    return ccl_comm_init_rank(comm, &boot, device, config);
}

/* ---- the inter-node transport (ccl_net_t) over MPI point-to-point ---- */

#define CCL_MPI_NET_TAG 0x4343

typedef struct {
    MPI_Comm comm;              /* a duplicate: libccl's messages never meet the application's */
} ccl_mpi_net_ctx_;

static inline int ccl_mpi_net_isend_(void *ctx, int peer, const void *buf, size_t bytes, void **req)
{
    MPI_Request *r = (MPI_Request *)malloc(sizeof *r);
    if (!r || bytes > (size_t)INT_MAX) {
        free(r);
        return -1;
    }
    int rc = MPI_Isend((void *)buf, (int)bytes, MPI_BYTE, peer, CCL_MPI_NET_TAG, ((ccl_mpi_net_ctx_ *)ctx)->comm, r);
    if (rc != MPI_SUCCESS) {
        free(r);
        return rc;
    }
    *req = r;
    return 0;
}

static inline int ccl_mpi_net_irecv_(void *ctx, int peer, void *buf, size_t bytes, void **req)
{
    MPI_Request *r = (MPI_Request *)malloc(sizeof *r);
    if (!r || bytes > (size_t)INT_MAX) {
        free(r);
        return -1;
    }
    int rc = MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, CCL_MPI_NET_TAG, ((ccl_mpi_net_ctx_ *)ctx)->comm, r);
    if (rc != MPI_SUCCESS) {
        free(r);
        return rc;
    }
    *req = r;
    return 0;
}

static inline int ccl_mpi_net_test_(void *ctx, void *req, int *done, size_t *bytes)
{
    (void)ctx;
    MPI_Status st;
    int rc = MPI_Test((MPI_Request *)req, done, &st);
    if (rc != MPI_SUCCESS)
        return rc;
    if (*done) {
        int n = 0;
        MPI_Get_count(&st, MPI_BYTE, &n);
        *bytes = (size_t)n;
        free(req);
    }
    return 0;
}

/* MPI_Cancel, then up to a second for the request to complete. A receive already matched
 * to a message whose sender died can be neither cancelled nor completed, and MPI_Wait on
 * it would wait forever (a survivor's ccl_comm_destroy hung so in tests/multinode's
 * killmid). Past the second the request stays MPI's, not freed, and 1 says so: libccl
 * then leaves its buffer alone for good (ccl.h, ccl_net_t.cancel). */
static inline int ccl_mpi_net_cancel_(void *ctx, void *req)
{
    (void)ctx;
    MPI_Cancel((MPI_Request *)req);
    const double until = MPI_Wtime() + 1.0;
    int done = 0, rc = MPI_SUCCESS;
    while ((rc = MPI_Test((MPI_Request *)req, &done, MPI_STATUS_IGNORE)) == MPI_SUCCESS && !done &&
           MPI_Wtime() < until)
        ;
    if (rc == MPI_SUCCESS && !done) return 1;
    free(req);
    return rc == MPI_SUCCESS ? 0 : rc;
}

static inline void ccl_mpi_net_release_(void *ctx)
{
    ccl_mpi_net_ctx_ *c = (ccl_mpi_net_ctx_ *)ctx;
    MPI_Comm_free(&c->comm);
    free(c);
}

static inline int ccl_mpi_net_split_(void *ctx, int color, int rank, const ccl_bootstrap_t *members, ccl_net_t *child,
                                     char *why, size_t len);

/* The transport over comm, which it owns (frees at release). */
static inline ccl_result_t ccl_net_over_mpi_(ccl_net_t *net, MPI_Comm comm)
{
    int provided = MPI_THREAD_SINGLE;
    ccl_mpi_net_ctx_ *c = (ccl_mpi_net_ctx_ *)malloc(sizeof *c);
    if (!c)
        return CCL_ERR_OUT_OF_MEMORY;
    c->comm = comm;
    MPI_Query_thread(&provided);
    net->isend = ccl_mpi_net_isend_;
    net->irecv = ccl_mpi_net_irecv_;
    net->test = ccl_mpi_net_test_;
    net->cancel = ccl_mpi_net_cancel_;
    net->release = ccl_mpi_net_release_;
    net->ctx = c;
    net->thread_safe = provided == MPI_THREAD_MULTIPLE;
    net->split = ccl_mpi_net_split_;
    return CCL_OK;
}

/* ccl_net_t.split: MPI_Comm_split of the duplicate, collective over every rank of it (a
 * rank whose child needs no transport passes MPI_UNDEFINED), keyed by the rank in the
 * child, so that MPI's ranks are the child's. Not bounded by CCL_TIMEOUT_MS: libccl calls
 * it only once every rank has come to the split. */
static inline int ccl_mpi_net_split_(void *ctx, int color, int rank, const ccl_bootstrap_t *members, ccl_net_t *child,
                                     char *why, size_t len)
{
    (void)members;
    MPI_Comm sub = MPI_COMM_NULL;
    int rc = MPI_Comm_split(((ccl_mpi_net_ctx_ *)ctx)->comm, color == CCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, rank,
                            &sub);
    if (rc != MPI_SUCCESS) {
        snprintf(why, len, "MPI_Comm_split returned %d", rc);
        return rc;
    }
    if (sub == MPI_COMM_NULL)
        return 0;
    if (ccl_net_over_mpi_(child, sub) != CCL_OK) {
        MPI_Comm_free(&sub);
        snprintf(why, len, "out of memory");
        return -1;
    }
    return 0;
}

/* Fills *net with a transport over a duplicate of mpi_comm (collective over its
 * processes: MPI_Comm_dup). CCL_OK, or CCL_ERR_OUT_OF_MEMORY / CCL_ERR_INVALID_ARGUMENT. */
static inline ccl_result_t ccl_net_from_mpi(ccl_net_t *net, MPI_Comm mpi_comm)
{
    MPI_Comm dup;
    if (!net)
        return CCL_ERR_INVALID_ARGUMENT;
    if (MPI_Comm_dup(mpi_comm, &dup) != MPI_SUCCESS)
        return CCL_ERR_INVALID_ARGUMENT;
    ccl_result_t r = ccl_net_over_mpi_(net, dup);
    if (r != CCL_OK)
        MPI_Comm_free(&dup);
    return r;
}

/* ccl_comm_init_rank_net over mpi_comm: rank i of mpi_comm is rank i of the communicator,
 * ranks_per_node consecutive ranks on each node (0: CCL_RANKS_PER_NODE, else each host a
 * node). Collective over mpi_comm's processes. */
static inline ccl_result_t ccl_comm_init_mpi_nodes(ccl_comm_t **comm, MPI_Comm mpi_comm, int ranks_per_node,
                                                   int device, const ccl_config_t *config)
{
    ccl_bootstrap_t boot;
    ccl_net_t net;
    ccl_result_t r = ccl_bootstrap_from_mpi(&boot, &mpi_comm);
    if (r == CCL_OK)
        r = ccl_net_from_mpi(&net, mpi_comm);
    if (r != CCL_OK)
        return r;
    return ccl_comm_init_rank_net(comm, &boot, &net, ranks_per_node, device, config);
}

#ifdef __cplusplus
}
#endif
#endif
