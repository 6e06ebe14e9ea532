/* forked_ranks.h: ranks as forked processes, without mpirun (tests/runtime procs.c and
 * mismatch.c). The parent forks n children with the environment mpirun would give
 * them (rank, size, a job id of its own), so each bootstraps through
 * runtime/src/bootstrap_env.c; a child opens its communicator and one algorithm with
 * forked_rank_open. Header-only: each test is one program. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ccl.h"
#include "internal.h"

/* Forks n ranks, runs child(rank, arg) in each and collects their exit codes: the
 * child's return value, or 100 + the signal that killed it. */
static inline void forked_ranks_run(const char *job_name, int n, int (*child)(int rank, int arg), int arg, int *codes)
{
    char job[96];
    snprintf(job, sizeof job, "%s-%ld-%d", job_name, (long)getpid(), arg);
    pid_t pids[64];
    fflush(stdout);
    for (int r = 0; r < n && r < 64; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            char rs[16], ns[16];
            snprintf(rs, sizeof rs, "%d", r);
            snprintf(ns, sizeof ns, "%d", n);
            setenv("OMPI_COMM_WORLD_RANK", rs, 1);
            setenv("OMPI_COMM_WORLD_SIZE", ns, 1);
            setenv("CCL_JOB_ID", job, 1);
            int rc = child(r, arg);
            fflush(stdout);
            _exit(rc);
        }
    }
    for (int r = 0; r < n && r < 64; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        codes[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
    }
}

/* In a child: bootstrap, a CPU communicator with timeout_ms, and alg loaded from
 * `source` (a path or CCL source). NULL after printing "FAIL TEST: rank R: ...". */
static inline ccl_comm_t *forked_rank_open(const char *test, int rank, int timeout_ms, const char *source,
                                           ccl_algorithm_t **alg, CclEnvBoot **eb, ccl_bootstrap_t *boot)
{
    char err[512];
    if (ccl__env_boot_open(eb, boot, 10000, err, sizeof err) != 0) {
        printf("FAIL %s: rank %d: bootstrap: %s\n", test, rank, err);
        return NULL;
    }
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .timeout_ms = timeout_ms};
    ccl_comm_t *comm;
    if (ccl_comm_init_rank(&comm, boot, 0, &cfg) != CCL_OK) {
        printf("FAIL %s: rank %d: ccl_comm_init_rank: %s\n", test, rank, ccl_comm_last_error(NULL));
        return NULL;
    }
    if (ccl_algorithm_load(comm, source, 0, alg) != CCL_OK) {
        printf("FAIL %s: rank %d: load: %s\n", test, rank, ccl_comm_last_error(comm));
        return NULL;
    }
    return comm;
}
