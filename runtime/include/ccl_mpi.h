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
 * Any MPI thread level works: libccl's own threads never call MPI. */
#ifndef CCL_MPI_H
#define CCL_MPI_H

#include <limits.h>
#include <mpi.h>

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

#ifdef __cplusplus
}
#endif
#endif
