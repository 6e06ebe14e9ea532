/* dead_peer_gpu: a peer process that dies, on the GPU backend (runtime/src/watchdog.c).
 *
 *   dead_peer_gpu
 *
 * Two processes, one GPU each (ranks 0 and 1 on GPUs 0 and 1), forked without mpirun
 * (mpirun would kill the job itself) and bootstrapped through the environment as
 * tests/runtime/forked_ranks.h does; a 20 s timeout. After a warm-up call (which
 * compiles the kernels), rank 1 is killed with SIGKILL and rank 0:
 *   - waits in an all-reduce: its kernel must give up, and ccl_comm_synchronize return
 *     CCL_ERR_PEER_FAILED naming rank 1 and its pid, within 2 s (before the watchdog:
 *     the 20 s timeout; 10 minutes by default);
 *   - is idle: ccl_comm_get_async_error must say CCL_ERR_PEER_FAILED within 1 s;
 *   - waits in a ccl_recv from rank 1: as the all-reduce;
 *   - destroys its comm with an all-reduce still waiting on rank 1: the destroy returns
 *     within 2 s (it waits for the comm's work with the watchdog still looking);
 * and where rank 1 destroys its comm and exits, rank 0 sees no failure. Rank 0 then
 * destroys its comm, which must not hang (every child has an alarm of 120 s).
 * Prints "skipped: ..." and exits 0 with fewer than 2 GPUs (or no driver); else
 * "ok gpu/dead-peer/..." or "FAIL gpu/dead-peer/...: why", exit 1 on any failure. */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ccl.h"
#include "internal.h"

#include "../runtime/forked_ranks.h"

enum { N = 2, VICTIM = 1, COUNT = 1 << 20, TIMEOUT_MS = 20000 };

enum Scenario { WAITING_ALLREDUCE, IDLE, WAITING_RECV, DESTROY_WAITING, DESTROYED, NSCENARIOS };

static const char *const names[NSCENARIOS] = {"all-reduce", "idle", "recv", "destroy-while-waiting",
                                              "destroyed-is-no-failure"};

enum { CHILD_OK = 0, CHILD_FAILED = 1 };

/* The GPUs the driver sees, asked in a child so that this process never initializes
 * CUDA before it forks; -1 without a driver. */
static int gpu_count(void)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        int (*init)(unsigned) = h ? (int (*)(unsigned))dlsym(h, "cuInit") : NULL;
        int (*count)(int *) = h ? (int (*)(int *))dlsym(h, "cuDeviceGetCount") : NULL;
        int n = 0;
        if (!init || !count || init(0) != 0 || count(&n) != 0)
            _exit(255);
        _exit(n > 100 ? 100 : n);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) == 255)
        return -1;
    return WEXITSTATUS(st);
}

static int fail(int s, int rank, const char *what, ccl_comm_t *comm)
{
    printf("FAIL gpu/dead-peer/%s: rank %d: %s: %s\n", names[s], rank, what, ccl_comm_last_error(comm));
    return CHILD_FAILED;
}

/* Rank 0 after rank 1 died: the failure within `limit_ms`, naming rank 1 and its pid. */
static int survivor(int s, ccl_comm_t *comm, float *buf)
{
    double t0 = ccl__now_ms(), limit_ms = s == IDLE ? 1000 : 2000;
    ccl_result_t r, async = CCL_OK;
    if (s == IDLE) {
        while (ccl_comm_get_async_error(comm, &async) == CCL_OK && async == CCL_OK && ccl__now_ms() - t0 < 5000)
            usleep(2000);
        r = async;
    } else {
        if (s == WAITING_ALLREDUCE)
            r = ccl_all_reduce(buf, buf, COUNT, CCL_F32, CCL_SUM, comm, NULL);
        else if ((r = ccl_group_start()) == CCL_OK && (r = ccl_recv(buf, COUNT, CCL_F32, VICTIM, comm, NULL)) == CCL_OK)
            r = ccl_group_end();
        if (r == CCL_OK)
            r = ccl_comm_synchronize(comm);
    }
    double ms = ccl__now_ms() - t0;
    if (s == IDLE && r == CCL_ERR_PEER_FAILED)
        r = ccl_comm_synchronize(comm);
    char msg[1024], dead[64];
    snprintf(msg, sizeof msg, "%s", ccl_comm_last_error(comm));
    snprintf(dead, sizeof dead, "rank %d (pid ", VICTIM);
    if (r != CCL_ERR_PEER_FAILED || ms > limit_ms || !strstr(msg, dead) || !strstr(msg, "is gone")) {
        printf("FAIL gpu/dead-peer/%s: rank 0: %s after %.0f ms (want CCL_ERR_PEER_FAILED naming rank %d and its "
               "pid within %.0f ms; timeout %d ms): %s\n", names[s], ccl_result_string(r), ms, VICTIM, limit_ms,
               TIMEOUT_MS, msg);
        return CHILD_FAILED;
    }
    printf("ok gpu/dead-peer/%s: rank 0 stopped %.0f ms after rank %d was killed (timeout %d ms): %s\n", names[s], ms,
           VICTIM, TIMEOUT_MS, msg);
    return CHILD_OK;
}

static int child(int rank, int s)
{
    alarm(120); /* a hang fails the test (SIGALRM) instead of hanging the suite */
    char err[512];
    CclEnvBoot *eb;
    ccl_bootstrap_t boot;
    if (ccl__env_boot_open(&eb, &boot, 30000, err, sizeof err) != 0) {
        printf("FAIL gpu/dead-peer/%s: rank %d: bootstrap: %s\n", names[s], rank, err);
        return CHILD_FAILED;
    }
    ccl_config_t cfg = {.backend = CCL_BACKEND_GPU, .timeout_ms = TIMEOUT_MS};
    ccl_comm_t *comm;
    if (ccl_comm_init_rank(&comm, &boot, rank, &cfg) != CCL_OK)
        return fail(s, rank, "ccl_comm_init_rank", NULL);
    float *buf;
    if (ccl_mem_alloc(comm, (void **)&buf, COUNT * sizeof(float)) != CCL_OK)
        return fail(s, rank, "ccl_mem_alloc", comm);
    /* The warm-up compiles what the scenario runs, so that rank 0's clock counts only
     * the wait. */
    ccl_result_t r = ccl_all_reduce(buf, buf, COUNT, CCL_F32, CCL_SUM, comm, NULL);
    if (r == CCL_OK && s == WAITING_RECV && (r = ccl_group_start()) == CCL_OK) {
        r = rank == 0 ? ccl_recv(buf, COUNT, CCL_F32, 1, comm, NULL) : ccl_send(buf, COUNT, CCL_F32, 0, comm, NULL);
        ccl_result_t e = ccl_group_end();
        r = r == CCL_OK ? e : r;
    }
    if (r == CCL_OK)
        r = ccl_comm_synchronize(comm);
    if (r != CCL_OK)
        return fail(s, rank, "the warm-up call", comm);
    if (boot.barrier(boot.ctx) != 0) {
        printf("FAIL gpu/dead-peer/%s: rank %d: the barrier after the warm-up failed\n", names[s], rank);
        return CHILD_FAILED;
    }
    int status = CHILD_OK;
    if (rank == VICTIM) {
        if (s != DESTROYED)
            raise(SIGKILL);
    } else if (s == DESTROY_WAITING) {
        r = ccl_all_reduce(buf, buf, COUNT, CCL_F32, CCL_SUM, comm, NULL);
        double t0 = ccl__now_ms();
        ccl_comm_destroy(comm);
        double ms = ccl__now_ms() - t0;
        ccl__env_boot_close(eb);
        if (r != CCL_OK || ms > 2000) {
            printf("FAIL gpu/dead-peer/%s: rank 0: all-reduce %s, then ccl_comm_destroy took %.0f ms (timeout %d ms)\n",
                   names[s], ccl_result_string(r), ms, TIMEOUT_MS);
            return CHILD_FAILED;
        }
        printf("ok gpu/dead-peer/%s: rank 0's destroy returned %.0f ms after rank %d was killed (timeout %d ms)\n",
               names[s], ms, VICTIM, TIMEOUT_MS);
        return CHILD_OK;
    } else if (s == DESTROYED) {
        usleep(600 * 1000); /* the watchdog looks six times */
        ccl_result_t async = CCL_ERR_INTERNAL;
        ccl_comm_get_async_error(comm, &async);
        r = ccl_comm_synchronize(comm);
        if (async != CCL_OK || r != CCL_OK)
            status = fail(s, rank, "a peer that destroyed its comm and exited is reported as a failure", comm);
        else
            printf("ok gpu/dead-peer/%s: rank 0 sees no failure 600 ms after rank %d destroyed its comm and exited\n",
                   names[s], VICTIM);
    } else {
        status = survivor(s, comm, buf);
    }
    double t0 = ccl__now_ms();
    ccl_comm_destroy(comm);
    if (rank == 0 && ccl__now_ms() - t0 > 5000) {
        printf("FAIL gpu/dead-peer/%s: rank 0: ccl_comm_destroy took %.0f ms\n", names[s], ccl__now_ms() - t0);
        status = CHILD_FAILED;
    }
    ccl__env_boot_close(eb);
    return status;
}

int main(void)
{
    int ngpu = gpu_count();
    if (ngpu < N) {
        printf("skipped: dead_peer_gpu needs %d GPUs (%s)\n", N, ngpu < 0 ? "no CUDA driver" : "fewer here");
        return 0;
    }
    int failures = 0;
    for (int s = 0; s < NSCENARIOS; s++) {
        int codes[N];
        forked_ranks_run("dead-peer-gpu", N, child, s, codes);
        int want_victim = s == DESTROYED ? CHILD_OK : 100 + SIGKILL;
        if (codes[0] != CHILD_OK || codes[VICTIM] != want_victim) {
            printf("FAIL gpu/dead-peer/%s: exit codes %d %d (want %d %d; 100 + a signal: killed by it)\n", names[s],
                   codes[0], codes[1], CHILD_OK, want_victim);
            failures++;
        }
    }
    return failures != 0;
}
