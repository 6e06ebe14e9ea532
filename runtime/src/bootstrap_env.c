/* bootstrap_env.c: a bootstrap for processes started by mpirun, without linking MPI.
 *
 * Takes the launcher's environment (Open MPI's OMPI_COMM_WORLD_RANK/SIZE, or PMI_RANK/
 * PMI_SIZE, or Slurm's SLURM_PROCID/SLURM_NTASKS) and a job identity (PMIX_NAMESPACE,
 * OMPI_MCA_ess_base_jobid, CCL_JOB_ID, or SLURM_JOB_ID.SLURM_STEP_ID); gives a
 * ccl_bootstrap_t whose allgather and barrier go through one POSIX shm segment named
 * after the user and the job, so it works for the processes of one host (which is what
 * the CPU backend needs anyway). Every wait is bounded: a dead process makes the others
 * fail with a message instead of hanging, at once where it had arrived (each rank's pid
 * is in the segment, looked at while waiting), else when the timeout names the ranks
 * that never joined. Rank 0 unlinks the segment as soon as every
 * rank has mapped it, so nothing is left behind even after a crash.
 *
 * The name is predictable, so the segment is trusted only as rank 0 makes it: created
 * exclusively, mode 0600. Rank 0 refuses a segment that already exists; the others open
 * (never create) it, and refuse one that is not this user's or not 0600. A rank that
 * comes after rank 0 removed the name finds nothing and times out, leaving nothing. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
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
    _Atomic int64_t *pids;      /* after the slots: each rank's pid once it arrived, else 0 */
    _Atomic uint64_t *reached;  /* after the pids: the barriers each rank has reached */
    size_t bytes;
    char name[128];
    char why[256];              /* why the last wait failed (ccl__env_boot_error) */
};

static const char *env2(const char *a, const char *b)
{
    const char *v = getenv(a);
    return v && *v ? v : b ? getenv(b) : NULL;
}

/* The ranks that have arrived and whose processes are gone, named in eb->why: the
 * first one's number, or -1. All are named: a survivor that stopped because of the first
 * death may have exited too by the time another looks. */
static int dead_rank(CclEnvBoot *eb)
{
    int first = -1, count = 0;
    size_t n = 0;
    for (int r = 0; r < eb->nranks; r++) {
        int64_t pid = atomic_load(&eb->pids[r]);
        if (r == eb->rank || pid <= 0 || !ccl__pid_dead((long)pid))
            continue;
        if (first < 0)
            first = r;
        count++;
        if (n + 48 < sizeof eb->why)
            n += (size_t)snprintf(eb->why + n, sizeof eb->why - n, "%srank %d (pid %lld)", n ? ", " : "", r,
                                  (long long)pid);
    }
    if (first >= 0 && n + 32 < sizeof eb->why)
        n += (size_t)snprintf(eb->why + n, sizeof eb->why - n, " %s gone (died or exited)", count > 1 ? "are" : "is");
    for (int r = 0; first >= 0 && r < eb->nranks && n + 32 < sizeof eb->why; r++)
        if (!atomic_load(&eb->pids[r]))
            n += (size_t)snprintf(eb->why + n, sizeof eb->why - n, "; rank %d never joined", r);
    return first;
}

/* Bounded by the timeout, and cut short when a rank's process dies (its pid, looked at
 * every CCL__PROBE_MS), so survivors learn of a death at once and say whose. */
static int env_barrier(void *ctx)
{
    CclEnvBoot *eb = ctx;
    uint64_t k = ++eb->barriers, want = k * (uint64_t)eb->nranks;
    atomic_store(&eb->reached[eb->rank], k);
    atomic_fetch_add(&eb->hdr->arrive, 1);
    double now = ccl__now_ms(), deadline = now + eb->timeout_ms, probe = now + CCL__PROBE_MS;
    for (unsigned it = 0; atomic_load(&eb->hdr->arrive) < want; it++) {
        if ((it & 63) == 63) {
            now = ccl__now_ms();
            if (now > probe) {
                /* A rank that arrived and then exited normally is no failure. */
                if (dead_rank(eb) >= 0)
                    return atomic_load(&eb->hdr->arrive) >= want ? 0 : -1;
                probe = now + CCL__PROBE_MS;
            }
            if (now > deadline) {
                /* Whom the wait was for: ranks that never joined, else the ranks alive but
                 * not at this barrier yet (slow or hung). */
                char late[160] = "";
                size_t n = 0;
                for (int r = 0; r < eb->nranks && n + 16 < sizeof late; r++)
                    if (!atomic_load(&eb->pids[r]))
                        n += (size_t)snprintf(late + n, sizeof late - n, "%s%d", n ? ", " : "", r);
                if (n) {
                    snprintf(eb->why, sizeof eb->why, "rank%s %s never joined (waited %d ms)", strchr(late, ',') ? "s" : "",
                             late, eb->timeout_ms);
                    return -1;
                }
                for (int r = 0; r < eb->nranks && n + 16 < sizeof late; r++)
                    if (atomic_load(&eb->reached[r]) < k)
                        n += (size_t)snprintf(late + n, sizeof late - n, "%s%d", n ? ", " : "", r);
                snprintf(eb->why, sizeof eb->why, "rank%s %s did not reach the bootstrap's barrier %llu within %d ms "
                         "(alive, so slow or hung)", strchr(late, ',') ? "s" : "", late, (unsigned long long)k,
                         eb->timeout_ms);
                return -1;
            }
        }
        ccl__backoff(it);
    }
    return 0;
}

const char *ccl__env_boot_error(const CclEnvBoot *eb)
{
    return eb ? eb->why : "";
}

static int env_allgather(void *ctx, const void *in, void *out, size_t bytes)
{
    CclEnvBoot *eb = ctx;
    if (bytes > SLOT) {
        snprintf(eb->why, sizeof eb->why, "an allgather of %zu bytes per rank, more than the %d this bootstrap holds",
                 bytes, SLOT);
        return -1;
    }
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

/* Why the open segment fd must not be used (NULL: it may), given its wanted size; *ready
 * says whether rank 0 has sized it yet. */
static const char *untrusted_segment(int fd, size_t bytes, int *ready, char *buf, size_t len)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(buf, len, "cannot inspect it: %s", strerror(errno));
        return buf;
    }
    if (st.st_uid != geteuid() || (st.st_mode & 0777) != 0600) {
        snprintf(buf, len, "it belongs to uid %u with mode %03o, not to this user (uid %u) with mode 600",
                 (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777), (unsigned)geteuid());
        return buf;
    }
    *ready = (size_t)st.st_size == bytes;
    if (st.st_size != 0 && !*ready) {
        snprintf(buf, len, "it has %lld bytes, not the %zu this job's ranks use", (long long)st.st_size, bytes);
        return buf;
    }
    return NULL;
}

/* The segment's descriptor, made by rank 0 and opened by the others (bounded by the
 * timeout while rank 0 has not made and sized it yet); -1 with the reason in err. */
static int open_segment(const CclEnvBoot *eb, char *err, size_t errlen)
{
    char why[200];
    if (eb->rank == 0) {
        int fd = shm_open(eb->name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0 && errno == EEXIST) {
            snprintf(err, errlen, "bootstrap segment /dev/shm%s already exists (left by an earlier run with this job "
                     "id, or made by someone else): not used. Remove it, or set CCL_JOB_ID to a fresh value", eb->name);
            return -1;
        }
        if (fd < 0 || fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)eb->bytes) != 0) {
            snprintf(err, errlen, "bootstrap segment %s: %s", eb->name, strerror(errno));
            if (fd >= 0) {
                close(fd);
                shm_unlink(eb->name);
            }
            return -1;
        }
        return fd;
    }
    double deadline = ccl__now_ms() + eb->timeout_ms;
    for (unsigned it = 0;; it++) {
        int fd = shm_open(eb->name, O_RDWR, 0);
        int ready = 0;
        const char *bad = fd >= 0 ? untrusted_segment(fd, eb->bytes, &ready, why, sizeof why) : NULL;
        if (bad) {
            snprintf(err, errlen, "bootstrap segment /dev/shm%s is not used: %s", eb->name, bad);
            close(fd);
            return -1;
        }
        if (fd >= 0 && ready)
            return fd;
        if (fd >= 0)
            close(fd);
        else if (errno != ENOENT) {
            snprintf(err, errlen, "bootstrap segment %s: %s", eb->name, strerror(errno));
            return -1;
        }
        if (ccl__now_ms() > deadline) {
            snprintf(err, errlen, "bootstrap: rank 0 did not set up segment %s within %d ms (is it running, with the "
                     "same job id?)", eb->name, eb->timeout_ms);
            return -1;
        }
        struct timespec ts = {0, it < 100 ? 100000 : 2000000};
        nanosleep(&ts, NULL);
    }
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
    eb->bytes = sizeof(BootHeader) + (size_t)size * SLOT + (size_t)size * (sizeof(int64_t) + sizeof(uint64_t));
    snprintf(eb->name, sizeof eb->name, "/ccl-boot-%u-%s", (unsigned)getuid(), job);
    int fd = open_segment(eb, err, errlen);
    if (fd < 0) {
        free(eb);
        return -1;
    }
    void *m = mmap(NULL, eb->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        snprintf(err, errlen, "bootstrap segment %s: mmap: %s", eb->name, strerror(errno));
        if (rank == 0)
            shm_unlink(eb->name);
        free(eb);
        return -1;
    }
    eb->hdr = m;
    eb->slots = (char *)m + sizeof(BootHeader);
    eb->pids = (_Atomic int64_t *)(eb->slots + (size_t)size * SLOT);
    eb->reached = (_Atomic uint64_t *)(eb->pids + size);
    atomic_store(&eb->pids[rank], (int64_t)getpid());
    if (env_barrier(eb) != 0) {
        snprintf(err, errlen, "bootstrap: not every one of the %d ranks arrived: %s (segment %s)", size, eb->why,
                 eb->name);
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
