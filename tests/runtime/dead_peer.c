/* dead_peer.c: the watchdog (runtime/src/watchdog.c) in process mode, CPU backend.
 *
 * Forked ranks (forked_ranks.h) with a 60 s timeout, so that nothing here is found by
 * a timeout:
 *   - a rank killed (SIGKILL) while the others are idle: each survivor's
 *     ccl_comm_get_async_error says CCL_ERR_PEER_FAILED well under a second later, its
 *     ccl_comm_synchronize returns it with a message naming the rank, its pid and the
 *     host, and its next collective fails at once (before the watchdog an idle rank
 *     heard of nothing: only a wait looked at pids);
 *   - a rank killed while the others wait in an all-reduce: they stop within a second;
 *   - a rank that exits with status 1 without destroying its comm is dead too;
 *   - no false failure: a rank that destroys its comm and exits, or exits with status
 *     0 without destroying it, leaves its peers' comms healthy (synchronize OK);
 *   - fork: a rank's forked child that exits does not speak for the rank (its death
 *     is still found afterwards);
 *   - the thread is joined by ccl_comm_destroy: the process has as many threads after
 *     it as before the init.
 * Children print FAIL lines; the parent prints ok. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ccl.h"
#include "internal.h"

#include "forked_ranks.h"
#include "ring_source.h"

enum { N = 3, COUNT = 1001, VICTIM = N - 1, TIMEOUT_MS = 60000 };

enum Scenario {
    KILLED_IDLE,            /* the victim is killed; the others make no call */
    KILLED_WAITING,         /* the victim is killed; the others wait in an all-reduce */
    EXIT_FAILING,           /* the victim calls exit(1) with its comm alive */
    DESTROYED,              /* the victim destroys its comm, then exits 0 */
    EXIT_CLEAN,             /* the victim calls exit(0) with its comm alive */
    FORKED_CHILD,           /* the victim's forked child exits 0, then the victim is killed */
    NSCENARIOS
};

static const char *const names[NSCENARIOS] = {
    "a rank killed while its peers are idle",
    "a rank killed while its peers wait in an all-reduce",
    "a rank that exits with status 1 without ccl_comm_destroy",
    "a rank that destroys its comm and exits",
    "a rank that exits with status 0 without ccl_comm_destroy",
    "a rank whose forked child exits, then the rank is killed",
};

/* The victim's process is gone without leaving on purpose. */
static int is_death(int s)
{
    return s != DESTROYED && s != EXIT_CLEAN;
}

/* Exit codes of a child. */
enum { CHILD_OK = 0, CHILD_FAILED = 1, CHILD_VICTIM = 3, CHILD_NAMED = 4 };

static int threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static int victim(int s, ccl_comm_t *comm)
{
    if (s == FORKED_CHILD) {
        pid_t c = fork();
        if (c == 0)
            exit(0); /* its exit handlers run: they must not mark the rank as gone on purpose */
        waitpid(c, NULL, 0);
    }
    if (s == EXIT_FAILING)
        exit(1);
    if (s == EXIT_CLEAN)
        exit(0);
    if (s == DESTROYED) {
        ccl_comm_destroy(comm);
        return CHILD_VICTIM;
    }
    raise(SIGKILL);
    return CHILD_FAILED;
}

/* A survivor where the victim died: the error within a second, named, and sticky. */
static int survivor_of_death(int s, int rank, ccl_comm_t *comm, ccl_algorithm_t *alg)
{
    static double in[COUNT], out[COUNT];
    double t0 = ccl__now_ms(), ms;
    ccl_result_t r, async = CCL_OK;
    if (s == KILLED_WAITING) {
        r = ccl_algorithm_run(alg, in, out, COUNT, CCL_F64, CCL_SUM, NULL);
        if (r == CCL_OK)
            r = ccl_comm_synchronize(comm);
        ms = ccl__now_ms() - t0;
    } else {
        while (ccl_comm_get_async_error(comm, &async) == CCL_OK && async == CCL_OK && ccl__now_ms() - t0 < 5000)
            usleep(2000);
        ms = ccl__now_ms() - t0;
        r = ccl_comm_synchronize(comm);
    }
    char msg[1024], dead[64], host[256] = "", on_host[300];
    snprintf(msg, sizeof msg, "%s", ccl_comm_last_error(comm));
    snprintf(dead, sizeof dead, "rank %d (pid ", VICTIM);
    gethostname(host, sizeof host - 1);
    snprintf(on_host, sizeof on_host, "is gone from host %s", host);
    /* This rank's watchdog, another's (which stopped this rank on the dead one's
     * behalf), or a wait's own look: each names the rank, its pid and the host. */
    int named = strstr(msg, dead) && strstr(msg, on_host);
    if (r != CCL_ERR_PEER_FAILED || !named || ms > 1000 || (s != KILLED_WAITING && async != CCL_ERR_PEER_FAILED)) {
        printf("FAIL dead_peer: %s: rank %d: %s after %.0f ms (async %s): %s\n", names[s], rank, ccl_result_string(r),
               ms, ccl_result_string(async), msg);
        return CHILD_FAILED;
    }
    /* The comm stays stopped: the next call fails at once, never waits for the dead. */
    t0 = ccl__now_ms();
    r = ccl_algorithm_run(alg, in, out, COUNT, CCL_F64, CCL_SUM, NULL);
    if (r == CCL_OK)
        r = ccl_comm_synchronize(comm);
    if (r == CCL_OK || ccl__now_ms() - t0 > 1000) {
        printf("FAIL dead_peer: %s: rank %d: a call after the death: %s after %.0f ms\n", names[s], rank,
               ccl_result_string(r), ccl__now_ms() - t0);
        return CHILD_FAILED;
    }
    if (rank == 0)
        printf("   (%s: rank 0 stopped %.0f ms after the barrier: %s)\n", names[s], ms, msg);
    return CHILD_NAMED;
}

/* A survivor where the victim left on purpose: nothing is wrong, for longer than the
 * watchdog takes to look a few times. */
static int survivor_of_departure(int s, int rank, ccl_comm_t *comm)
{
    usleep(600 * 1000);
    ccl_result_t async = CCL_ERR_INTERNAL;
    ccl_comm_get_async_error(comm, &async);
    ccl_result_t r = ccl_comm_synchronize(comm);
    if (async != CCL_OK || r != CCL_OK) {
        printf("FAIL dead_peer: %s: rank %d reports a failure (async %s, synchronize %s): %s\n", names[s], rank,
               ccl_result_string(async), ccl_result_string(r), ccl_comm_last_error(comm));
        return CHILD_FAILED;
    }
    return CHILD_OK;
}

static int child(int rank, int s)
{
    int before = threads();
    ccl_bootstrap_t boot;
    CclEnvBoot *eb;
    ccl_algorithm_t *alg;
    ccl_comm_t *comm = forked_rank_open("dead_peer", rank, TIMEOUT_MS, RING, &alg, &eb, &boot);
    if (!comm)
        return CHILD_FAILED;
    if (boot.barrier(boot.ctx) != 0) {
        printf("FAIL dead_peer: %s: rank %d: the barrier after init failed\n", names[s], rank);
        return CHILD_FAILED;
    }
    if (rank == VICTIM)
        return victim(s, comm);
    int status = is_death(s) ? survivor_of_death(s, rank, comm, alg) : survivor_of_departure(s, rank, comm);
    double t0 = ccl__now_ms();
    ccl_comm_destroy(comm);
    double destroy_ms = ccl__now_ms() - t0;
    ccl__env_boot_close(eb);
    int after = threads();
    if (status != CHILD_FAILED && (after != before || destroy_ms > 500)) {
        printf("FAIL dead_peer: %s: rank %d: %d threads before the init, %d after the destroy (which took %.0f ms)\n",
               names[s], rank, before, after, destroy_ms);
        return CHILD_FAILED;
    }
    return status;
}

int main(void)
{
    int failures = 0;
    for (int s = 0; s < NSCENARIOS; s++) {
        int codes[N];
        double t0 = ccl__now_ms();
        forked_ranks_run("dead-peer-test", N, child, s, codes);
        int death = is_death(s), want = death ? CHILD_NAMED : CHILD_OK, ok = 1;
        for (int r = 0; r < N - 1; r++)
            ok &= codes[r] == want;
        int vcode = s == KILLED_IDLE || s == KILLED_WAITING || s == FORKED_CHILD ? 100 + SIGKILL
                    : s == EXIT_FAILING                                          ? 1
                    : s == EXIT_CLEAN                                            ? 0
                                                                                 : CHILD_VICTIM;
        ok &= codes[VICTIM] == vcode;
        if (ok)
            printf("ok dead_peer: %s: %s (%.0f ms in all; timeout %d ms)\n", names[s],
                   death ? "every survivor stops with CCL_ERR_PEER_FAILED naming it, within a second"
                         : "no survivor reports a failure", ccl__now_ms() - t0, TIMEOUT_MS);
        else {
            printf("FAIL dead_peer: %s: exit codes %d %d %d (want %d %d %d)\n", names[s], codes[0], codes[1], codes[2],
                   want, want, vcode);
            failures++;
        }
    }
    return failures != 0;
}
