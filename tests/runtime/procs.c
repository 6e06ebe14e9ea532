/* procs.c: ranks as processes (POSIX shm heaps), without mpirun.
 *
 * The parent forks N children and gives each the environment mpirun would (rank, size,
 * a job id), so they bootstrap through runtime/src/bootstrap_env.c and create the
 * communicator with ccl_comm_init_rank. Checks: an exact all-reduce with symmetric and
 * with host buffers; then a peer that dies after init: the survivors must fail fast
 * with CCL_ERR_PEER_FAILED naming the dead peer (its pid is gone), never hang; a peer
 * that failed (a timeout of its own) and exited since must be named as failed, not as
 * dead (before the fix, whoever looked after it had exited read its missing pid as a
 * death). Children print FAIL lines; the parent prints ok. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ccl.h"
#include "internal.h"

#include "forked_ranks.h"
#include "ring_source.h"

enum { N = 3, COUNT = 1001 };


/* Exit codes of a child: 0 ok, 1 failed (and printed why), 3 died on purpose. */
static int child(int rank, int scenario)
{
    ccl_bootstrap_t boot;
    CclEnvBoot *eb;
    ccl_algorithm_t *alg;
    ccl_comm_t *comm = forked_rank_open("procs", rank, 400, RING, &alg, &eb, &boot);
    if (!comm)
        return 1;
    void *sym_in, *sym_out;
    ccl_mem_alloc(comm, &sym_in, COUNT * sizeof(double));
    ccl_mem_alloc(comm, &sym_out, COUNT * sizeof(double));
    double *host_in = malloc(COUNT * sizeof(double)), *host_out = malloc(COUNT * sizeof(double));
    int status = 0;
    if (scenario == 2) {
        boot.barrier(boot.ctx);
        if (rank == 1) {
            /* A recv nobody sends: times out after 400 ms, stops every rank, exits. */
            static double x;
            ccl_recv(&x, 1, CCL_F64, 2, comm, NULL);
            ccl_result_t r = ccl_comm_synchronize(comm);
            ccl_comm_destroy(comm);
            ccl__env_boot_close(eb);
            return r == CCL_ERR_TIMEOUT ? 5 : 1;
        }
        usleep(1500 * 1000); /* rank 1 has failed and exited by now */
        ccl_result_t r = ccl_algorithm_run(alg, sym_in, sym_out, COUNT, CCL_F64, CCL_SUM, NULL);
        if (r == CCL_OK)
            r = ccl_comm_synchronize(comm);
        const char *msg = ccl_comm_last_error(comm);
        if (r != CCL_ERR_PEER_FAILED || !strstr(msg, "rank 1 failed") || strstr(msg, "is gone")) {
            printf("FAIL procs: rank %d after rank 1 failed and exited: %s: %s\n", rank, ccl_result_string(r), msg);
            status = 1;
        } else {
            status = 4;
        }
        ccl_comm_destroy(comm);
        ccl__env_boot_close(eb);
        return status;
    }
    if (scenario == 1) {
        /* Everyone must have finished init before the victim goes. */
        boot.barrier(boot.ctx);
        if (rank == N - 1)
            _exit(3);
        double t0 = ccl__now_ms();
        ccl_result_t r = ccl_algorithm_run(alg, sym_in, sym_out, COUNT, CCL_F64, CCL_SUM, NULL);
        if (r == CCL_OK)
            r = ccl_comm_synchronize(comm);
        double ms = ccl__now_ms() - t0;
        const char *msg = ccl_comm_last_error(comm);
        /* The survivors' waits look at the peers' pids: each stops long before the
         * timeout, naming the dead rank. */
        char dead[64];
        snprintf(dead, sizeof dead, "rank %d (pid ", N - 1);
        if (r != CCL_ERR_PEER_FAILED || !strstr(msg, dead) || !strstr(msg, "is gone") || ms > 2000) {
            printf("FAIL procs: rank %d with a dead peer: %s after %.0f ms: %s\n", rank, ccl_result_string(r), ms, msg);
            status = 1;
        } else {
            status = 4; /* tells the parent the dead rank was named */
        }
        ccl_comm_destroy(comm);
        ccl__env_boot_close(eb);
        return status;
    }
    for (int pass = 0; pass < 2; pass++) {
        double *in = pass ? host_in : sym_in, *out = pass ? host_out : sym_out;
        for (int iter = 0; iter < 3; iter++) {
            for (int i = 0; i < COUNT; i++)
                in[i] = rank * 10 + i + iter;
            ccl_result_t r = ccl_algorithm_run(alg, in, out, COUNT, CCL_F64, CCL_SUM, NULL);
            if (r == CCL_OK)
                r = ccl_comm_synchronize(comm);
            if (r != CCL_OK) {
                printf("FAIL procs: rank %d: run: %s\n", rank, ccl_comm_last_error(comm));
                return 1;
            }
            for (int i = 0; i < COUNT; i++) {
                double want = 10.0 * N * (N - 1) / 2 + N * (double)(i + iter);
                if (out[i] != want) {
                    printf("FAIL procs: rank %d (%s buffers) out[%d] = %g, expected %g\n", rank, pass ? "host" : "symmetric",
                           i, out[i], want);
                    return 1;
                }
            }
        }
    }
    free(host_in);
    free(host_out);
    ccl_comm_destroy(comm);
    ccl__env_boot_close(eb);
    return status;
}

static int run_scenario(int scenario, int *codes)
{
    forked_ranks_run("procs-test", N, child, scenario, codes);
    int bad = 0;
    for (int r = 0; r < N; r++)
        bad |= codes[r] == 1 || codes[r] >= 100;
    return bad;
}

int main(void)
{
    int codes[N], failures = 0;
    if (run_scenario(0, codes) == 0)
        printf("ok procs: %d processes, shm heaps, exact f64 all-reduce with symmetric and host buffers\n", N);
    else
        failures++;
    double t0 = ccl__now_ms();
    int bad = run_scenario(1, codes);
    int named = 0;
    for (int r = 0; r < N - 1; r++)
        named += codes[r] == 4;
    if (!bad && codes[N - 1] == 3 && named == N - 1)
        printf("ok procs: a dead peer: every survivor stops with CCL_ERR_PEER_FAILED naming it, in %.0f ms in all "
               "(timeout 400 ms)\n", ccl__now_ms() - t0);
    else {
        printf("FAIL procs: dead peer: exit codes %d %d %d (want 4: the dead rank named)\n", codes[0], codes[1], codes[2]);
        failures++;
    }
    bad = run_scenario(2, codes);
    if (!bad && codes[0] == 4 && codes[1] == 5 && codes[2] == 4)
        printf("ok procs: a peer that failed and exited is named as failed, not as dead\n");
    else {
        printf("FAIL procs: failed peer: exit codes %d %d %d (want 4 5 4)\n", codes[0], codes[1], codes[2]);
        failures++;
    }
    return failures != 0;
}
