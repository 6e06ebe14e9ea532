/* bootstrap_env.c: a bootstrap for processes started by mpirun, without linking MPI.
 *
 * Takes the launcher's environment (Open MPI's OMPI_COMM_WORLD_RANK/SIZE, or PMI_RANK/
 * PMI_SIZE, or Slurm's SLURM_PROCID/SLURM_NTASKS) and a job identity (PMIX_NAMESPACE,
 * OMPI_MCA_ess_base_jobid, CCL_JOB_ID, or SLURM_JOB_ID.SLURM_STEP_ID); gives a
 * ccl_bootstrap_t whose allgather and barrier go through one POSIX shm segment named
 * after the user and the job, so it works for the processes of one host (which is what
 * the CPU backend needs anyway). Every wait is bounded: a dead process makes the others
 * fail with a message instead of hanging. Rank 0 unlinks the segment as soon as every
 * rank has mapped it, so nothing is left behind even after a crash. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

enum { SLOT = 4096 };

typedef struct {
    _Atomic uint64_t arrive;    /* monotonic barrier counter */
    char pad[56];
} BootHeader;

struct CclEnvBoot {
    int rank, nranks, timeout_ms;
    uint64_t barriers;
    BootHeader *hdr;
    char *slots;
    size_t bytes;
    char name[128];
};

static const char *env2(const char *a, const char *b)
{
    const char *v = getenv(a);
    return v && *v ? v : b ? getenv(b) : NULL;
}

static int env_barrier(void *ctx)
{
    CclEnvBoot *eb = ctx;
    uint64_t want = ++eb->barriers * (uint64_t)eb->nranks;
    atomic_fetch_add(&eb->hdr->arrive, 1);
    double deadline = ccl__now_ms() + eb->timeout_ms;
    for (unsigned it = 0; atomic_load(&eb->hdr->arrive) < want; it++) {
        if ((it & 63) == 63 && ccl__now_ms() > deadline)
            return -1;
        ccl__backoff(it);
    }
    return 0;
}

static int env_allgather(void *ctx, const void *in, void *out, size_t bytes)
{
    CclEnvBoot *eb = ctx;
    if (bytes > SLOT)
        return -1;
    memcpy(eb->slots + (size_t)eb->rank * SLOT, in, bytes);
    if (env_barrier(eb) != 0)
        return -1;
    for (int r = 0; r < eb->nranks; r++)
        memcpy((char *)out + (size_t)r * bytes, eb->slots + (size_t)r * SLOT, bytes);
    return env_barrier(eb);
}

static int parse_int(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || *end || v < 0 || v > 1 << 20)
        return -1;
    *out = (int)v;
    return 0;
}

int ccl__env_boot_open(CclEnvBoot **out, ccl_bootstrap_t *boot, int timeout_ms, char *err, size_t errlen)
{
    *out = NULL;
    const char *rs = env2("OMPI_COMM_WORLD_RANK", "PMI_RANK"), *ss = env2("OMPI_COMM_WORLD_SIZE", "PMI_SIZE");
    if (!rs || !ss) {
        rs = getenv("SLURM_PROCID");
        ss = getenv("SLURM_NTASKS");
    }
    if (!rs || !ss)
        return 1;
    int rank, size;
    if (parse_int(rs, &rank) || parse_int(ss, &size) || size < 1 || rank >= size) {
        snprintf(err, errlen, "the launcher's rank '%s' and size '%s' make no sense", rs, ss);
        return -1;
    }
    char job[96] = "";
    const char *j = env2("CCL_JOB_ID", "PMIX_NAMESPACE");
    if (!j)
        j = getenv("OMPI_MCA_ess_base_jobid");
    if (j)
        snprintf(job, sizeof job, "%s", j);
    else if (getenv("SLURM_JOB_ID"))
        snprintf(job, sizeof job, "%s.%s", getenv("SLURM_JOB_ID"), env2("SLURM_STEP_ID", NULL) ? getenv("SLURM_STEP_ID") : "0");
    else {
        snprintf(err, errlen, "cannot tell this job from others (no PMIX_NAMESPACE or OMPI_MCA_ess_base_jobid); set CCL_JOB_ID");
        return -1;
    }
    for (char *p = job; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')))
            *p = '_';
    CclEnvBoot *eb = calloc(1, sizeof *eb);
    if (!eb) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    eb->rank = rank;
    eb->nranks = size;
    eb->timeout_ms = timeout_ms > 0 ? timeout_ms : 60000;
    eb->bytes = sizeof(BootHeader) + (size_t)size * SLOT;
    snprintf(eb->name, sizeof eb->name, "/ccl-boot-%u-%s", (unsigned)getuid(), job);
    int fd = shm_open(eb->name, O_CREAT | O_RDWR, 0600);
    /* Every rank sizes the segment the same, so a late ftruncate changes nothing. */
    if (fd < 0 || ftruncate(fd, (off_t)eb->bytes) != 0) {
        snprintf(err, errlen, "bootstrap segment %s: %s", eb->name, strerror(errno));
        if (fd >= 0)
            close(fd);
        free(eb);
        return -1;
    }
    void *m = mmap(NULL, eb->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        snprintf(err, errlen, "bootstrap segment %s: mmap: %s", eb->name, strerror(errno));
        free(eb);
        return -1;
    }
    eb->hdr = m;
    eb->slots = (char *)m + sizeof(BootHeader);
    if (env_barrier(eb) != 0) {
        snprintf(err, errlen, "bootstrap: not every one of the %d ranks arrived within %d ms (segment %s)", size,
                 eb->timeout_ms, eb->name);
        if (rank == 0)
            shm_unlink(eb->name);
        munmap(m, eb->bytes);
        free(eb);
        return -1;
    }
    if (rank == 0)
        shm_unlink(eb->name);
    *boot = (ccl_bootstrap_t){.nranks = size, .rank = rank, .allgather = env_allgather, .barrier = env_barrier, .ctx = eb};
    *out = eb;
    return 0;
}

void ccl__env_boot_close(CclEnvBoot *eb)
{
    if (!eb)
        return;
    munmap(eb->hdr, eb->bytes);
    free(eb);
}

int ccl__local_rank(int rank)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *s = getenv(vars[i]);
        if (s && *s)
            return atoi(s);
    }
    return rank;
}
