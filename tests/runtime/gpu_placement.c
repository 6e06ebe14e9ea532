/* gpu_placement.c: which GPU each rank gets and when placements are refused
 * (runtime/src/gpu/device.c), on made-up bootstrap rounds: no GPU needed.
 *
 * Prints "ok placement: WHAT" or "FAIL placement: WHAT: got ..., want ...". */
#include <stdio.h>
#include <string.h>

#include "gpu/gpu.h"

static int failures;

static void check(const char *what, int ok, const char *got)
{
    if (ok) {
        printf("ok placement: %s\n", what);
        return;
    }
    failures++;
    printf("FAIL placement: %s: got %s\n", what, got);
}

/* Rank p of a made-up job: process `pid` on host `host`, which sees `ngpus` GPUs;
 * round two's GPU is `ordinal` (-1: none), whose uuid is the ordinal's on that host. */
static GpuRankPlace place(int pid, int host, int ngpus, int ordinal)
{
    GpuRankPlace r = {.pid = pid, .host = (uint64_t)host, .ordinal = ordinal, .ngpus = ngpus};
    r.uuid[0] = (uint8_t)host;
    r.uuid[1] = (uint8_t)ordinal;
    return r;
}

/* CCL_DEVICE_AUTO: the index among the host's ranks, modulo the host's GPUs. */
static void test_auto(void)
{
    GpuRankPlace one_gpu[4], two_gpus[4], two_hosts[4];
    for (int p = 0; p < 4; p++) {
        one_gpu[p] = place(100, 1, 1, CCL_DEVICE_AUTO);
        two_gpus[p] = place(100, 1, 2, CCL_DEVICE_AUTO);
        two_hosts[p] = place(100 + p, 1 + p / 2, 2, CCL_DEVICE_AUTO);
    }
    char got[128];
    int a[4], b[4], c[4];
    for (int p = 0; p < 4; p++) {
        a[p] = ccl__gpu_auto_ordinal(one_gpu, p);
        b[p] = ccl__gpu_auto_ordinal(two_gpus, p);
        c[p] = ccl__gpu_auto_ordinal(two_hosts, p);
    }
    snprintf(got, sizeof got, "%d %d %d %d", a[0], a[1], a[2], a[3]);
    check("threads, 4 ranks on 1 GPU: all on GPU 0", !strcmp(got, "0 0 0 0"), got);
    snprintf(got, sizeof got, "%d %d %d %d", b[0], b[1], b[2], b[3]);
    check("threads, 4 ranks on 2 GPUs: rank % 2", !strcmp(got, "0 1 0 1"), got);
    snprintf(got, sizeof got, "%d %d %d %d", c[0], c[1], c[2], c[3]);
    check("processes, 2 hosts x 2 ranks: the local rank", !strcmp(got, "0 1 0 1"), got);
}

static void test_verdicts(void)
{
    int co[8], nco;
    char err[1024], got[1200];

    /* Threads mode on one GPU: every rank shares it with every other. */
    GpuRankPlace shared[4];
    for (int p = 0; p < 4; p++) shared[p] = place(100, 1, 1, 0);
    ccl_result_t r = ccl__gpu_check_places(shared, 4, 2, CCL_DEVICE_AUTO, co, &nco, err, sizeof err);
    snprintf(got, sizeof got, "%s, %d colocated", ccl_result_string(r), nco);
    check("threads on one GPU: accepted, 4 ranks share it", r == CCL_OK && nco == 4 && co[0] == 0 && co[3] == 3, got);

    /* Threads on two GPUs: rank 1 shares with rank 3 only. */
    GpuRankPlace pairs[4];
    for (int p = 0; p < 4; p++) pairs[p] = place(100, 1, 2, p % 2);
    r = ccl__gpu_check_places(pairs, 4, 1, CCL_DEVICE_AUTO, co, &nco, err, sizeof err);
    snprintf(got, sizeof got, "%s, %d colocated (%d, %d)", ccl_result_string(r), nco, co[0], co[1]);
    check("threads on two GPUs: rank 1 shares with rank 3", r == CCL_OK && nco == 2 && co[0] == 1 && co[1] == 3, got);

    /* One process per GPU: nobody shares. */
    GpuRankPlace procs[2] = {place(100, 1, 2, 0), place(101, 1, 2, 1)};
    r = ccl__gpu_check_places(procs, 2, 0, 0, co, &nco, err, sizeof err);
    snprintf(got, sizeof got, "%s, %d colocated", ccl_result_string(r), nco);
    check("a process per GPU: accepted, alone on its GPU", r == CCL_OK && nco == 1 && co[0] == 0, got);

    /* Two processes on one GPU: refused on every rank with the way out. */
    GpuRankPlace clash[2] = {place(100, 1, 1, 0), place(101, 1, 1, 0)};
    for (int me = 0; me < 2; me++) {
        r = ccl__gpu_check_places(clash, 2, me, CCL_DEVICE_AUTO, co, &nco, err, sizeof err);
        snprintf(got, sizeof got, "%s: %s", ccl_result_string(r), err);
        check(me ? "two processes on one GPU: refused on rank 1" : "two processes on one GPU: refused on rank 0",
              r == CCL_ERR_UNSUPPORTED && strstr(err, "ranks 0 and 1 are separate processes on one GPU") &&
                  strstr(err, "ccl_comm_init_all") && strstr(err, "--backend cpu"),
              got);
    }
    /* The same GPU ordinal on two hosts is two GPUs. */
    GpuRankPlace hosts[2] = {place(100, 1, 1, 0), place(100, 2, 1, 0)};
    r = ccl__gpu_check_places(hosts, 2, 0, 0, co, &nco, err, sizeof err);
    snprintf(got, sizeof got, "%s, %d colocated", ccl_result_string(r), nco);
    check("GPU 0 of two hosts: accepted, alone", r == CCL_OK && nco == 1, got);

    /* A rank that asked for a GPU it lacks: it says which argument, its peers name it. */
    GpuRankPlace missing[2] = {place(100, 1, 1, 0), place(101, 1, 1, -1)};
    r = ccl__gpu_check_places(missing, 2, 1, 3, co, &nco, err, sizeof err);
    snprintf(got, sizeof got, "%s: %s", ccl_result_string(r), err);
    check("a missing GPU: the rank names its argument",
          r == CCL_ERR_INVALID_ARGUMENT && strstr(err, "argument 'device' is 3 but this machine has 1 GPU"), got);
    r = ccl__gpu_check_places(missing, 2, 0, 0, co, &nco, err, sizeof err);
    snprintf(got, sizeof got, "%s: %s", ccl_result_string(r), err);
    check("a missing GPU: its peer names the rank", r == CCL_ERR_PEER_FAILED && strstr(err, "rank 1 asked for a GPU"),
          got);
}

int main(void)
{
    test_auto();
    test_verdicts();
    return failures ? 1 : 0;
}
