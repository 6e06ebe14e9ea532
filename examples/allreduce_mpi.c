/* allreduce_mpi.c: an all-reduce with one process per GPU, started by mpirun.
 *
 *   mpirun -np 4 build/examples/allreduce_mpi
 *
 * The communicator is bootstrapped from MPI_COMM_WORLD (ccl_mpi.h); each process
 * drives the GPU of its node-local rank (on the CPU backend, processes share POSIX
 * shared memory instead). Built with mpicc. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "ccl.h"
#include "ccl_mpi.h"

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, local_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    /* The node-local rank picks the GPU. */
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_free(&local);

    ccl_comm_t *comm;
    ccl_result_t r = ccl_comm_init_mpi(&comm, MPI_COMM_WORLD, local_rank, NULL);
    if (r != CCL_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, ccl_comm_last_error(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const size_t count = 1 << 18;
    float *send, *recv, *host = malloc(count * sizeof *host);
    /* Symmetric memory: peers reach these buffers directly. */
    if (ccl_mem_alloc(comm, (void **)&send, count * sizeof(float)) != CCL_OK ||
        ccl_mem_alloc(comm, (void **)&recv, count * sizeof(float)) != CCL_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, ccl_comm_last_error(comm));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* On GPUs they are device memory: the host fills and reads them with ccl_mem_copy. */
    for (size_t i = 0; i < count; i++)
        host[i] = (float)(rank + 1);
    r = ccl_mem_copy(comm, send, host, count * sizeof *host);
    if (r == CCL_OK)
        r = ccl_all_reduce(send, recv, count, CCL_F32, CCL_SUM, comm, NULL);
    if (r == CCL_OK)
        r = ccl_comm_synchronize(comm);
    if (r == CCL_OK)
        r = ccl_mem_copy(comm, host, recv, count * sizeof *host);
    if (r != CCL_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, ccl_comm_last_error(comm));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int wrong = 0;
    for (size_t i = 0; i < count; i++)
        wrong += host[i] != (float)(size * (size + 1) / 2);
    int total;
    MPI_Reduce(&wrong, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("all-reduce of %zu floats on %d processes: %s\n", count, size, total ? "WRONG" : "every element right");
    ccl_mem_free(comm, send);
    ccl_mem_free(comm, recv);
    free(host);
    ccl_comm_destroy(comm);
    MPI_Finalize();
    return rank == 0 && total ? 1 : 0;
}
