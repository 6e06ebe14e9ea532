/* launch.c: the two ways ccl-perf and ccl-tune run their ranks (see harness.h).
 *
 * Under a launcher (mpirun, srun: what runtime/src/bootstrap_env.c recognizes) every
 * process is one rank: ccl_comm_init_rank over the environment bootstrap, on the GPU of
 * its local rank. Otherwise one process drives every rank: ccl_comm_init_all and one
 * thread per rank, whose agreements go through a threads bootstrap
 * (ccl__thread_boot_new) that a failing rank can fail so its peers stop waiting.
 * Either way each rank this process drives gets a comm and a bootstrap, and the tool's
 * per-rank function runs once per rank; the results then agree through the bootstrap. */
#include <pthread.h>
#include <stdlib.h>

#include "harness.h"
#include "internal.h"

int tool_launch_open(ToolLaunch *l, int timeout_ms)
{
    *l = (ToolLaunch){0};
    char err[512] = "";
    int e = ccl__env_boot_open(&l->eb, &l->pboot, timeout_ms, err, sizeof err);
    if (e < 0) {
        fprintf(stderr, "%s: error: the launcher bootstrap failed: %s\n", tool_name(), err);
        return -1;
    }
    l->processes = e == 0;
    return 0;
}

int tool_launch_ranks(ToolLaunch *l, int ranks, int gpu, int ndev, int cpu_default)
{
    if (l->processes) {
        l->nranks = l->pboot.nranks;
        if (ranks && ranks != l->nranks) {
            /* Its peers learn nothing more from this process: leave the bootstrap first. */
            int n = l->nranks;
            tool_launch_close(l);
            tool_usage_error("--ranks %d, but the launcher started %d processes", ranks, n);
        }
    } else if (gpu) {
        l->nranks = ranks ? ranks : ndev;
        if (l->nranks > ndev)
            tool_usage_error("--ranks %d: only %d GPUs are visible", l->nranks, ndev);
    } else {
        l->nranks = ranks ? ranks : cpu_default;
    }
    return l->nranks;
}

int tool_launch_comms(ToolLaunch *l, const ccl_config_t *cfg, int ndev)
{
    l->nlocal = l->processes ? 1 : l->nranks;
    l->comms = calloc((size_t)l->nlocal, sizeof *l->comms);
    l->boots = calloc((size_t)l->nlocal, sizeof *l->boots);
    if (!l->comms || !l->boots) {
        fprintf(stderr, "%s: out of memory\n", tool_name());
        return -1;
    }
    if (l->processes) {
        l->first_rank = l->pboot.rank;
        l->device = ndev ? ccl__local_rank(l->pboot.rank) % ndev : 0;
        if (ccl_comm_init_rank(&l->comms[0], &l->pboot, l->device, cfg) != CCL_OK) {
            fprintf(stderr, "%s: rank %d: error: %s\n", tool_name(), l->pboot.rank, ccl_comm_last_error(NULL));
            return -1;
        }
        l->boots[0] = l->pboot;
        return 0;
    }
    if (ccl_comm_init_all(l->comms, l->nranks, NULL, cfg) != CCL_OK) {
        fprintf(stderr, "%s: error: %s\n", tool_name(), ccl_comm_last_error(NULL));
        return -1;
    }
    if (!(l->tb = ccl__thread_boot_new(l->nranks, l->boots))) {
        fprintf(stderr, "%s: out of memory\n", tool_name());
        return -1;
    }
    return 0;
}

int tool_launch_run(ToolLaunch *l, void *(*fn)(void *), void *args, size_t stride)
{
    if (l->processes) {
        fn(args);
        return 0;
    }
    pthread_t *tids = calloc((size_t)l->nlocal, sizeof *tids);
    int started = 0, rc = 0;
    for (; tids && started < l->nlocal; started++)
        if (pthread_create(&tids[started], NULL, fn, (char *)args + (size_t)started * stride) != 0)
            break;
    if (started < l->nlocal) {
        fprintf(stderr, "%s: cannot start a thread for rank %d\n", tool_name(), started);
        /* The ranks already running wait for this one in their first agreement. */
        if (l->tb)
            ccl__thread_boot_fail(l->tb);
        rc = -1;
    }
    for (int i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    free(tids);
    return rc;
}

void tool_launch_close(ToolLaunch *l)
{
    for (int i = 0; l->comms && i < l->nlocal; i++)
        ccl_comm_destroy(l->comms[i]);
    if (l->tb)
        ccl__thread_boot_free(l->tb);
    if (l->eb)
        ccl__env_boot_close(l->eb);
    free(l->comms);
    free(l->boots);
    *l = (ToolLaunch){0};
}
