/* procs.c: libccl_nccl with one process per rank, as torchrun runs NCCL: rank 0 makes
 * the unique id (ncclGetUniqueId) and hands it to the others (here through pipes, as
 * torch does through its store), and every rank calls ncclCommInitRank. CPU backend (the
 * test mode), written against nccl.h only.
 *
 *   - 3 ranks: all-reduce, all-gather, reduce-scatter, a ring of sends and receives in a
 *     group, a split into two communicators each running an all-reduce, destroy;
 *   - a rank that never joins: the others fail ncclRemoteError naming it, once
 *     CCL_TIMEOUT_MS has passed;
 *   - a rank that passes another nranks: every rank fails ncclInvalidArgument, saying so;
 *   - a rank killed after the init: the others' next call fails ncclRemoteError naming
 *     it, within seconds;
 *   - an id whose maker exited: ncclSystemError, its root cannot be reached;
 *   - registrations of private memory (ncclCommRegister, ncclCommWindowRegister): libccl
 *     cannot map a process's own memory for its peers and refuses it on every rank, which
 *     the shim only warns (ncclGetLastError says why): the calls succeed, a collective on
 *     the buffers is exact, the deregistrations succeed. */
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

enum { N = 3, COUNT = 101 };

typedef int (*Child)(int rank, ncclUniqueId id);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Forks N ranks; rank 0 (or, with maker_exits, a process that exits at once) makes the
 * id and writes it to the others' pipes. Returns how many ranks exited non-zero. */
static int run_ranks(Child child, int maker_exits)
{
    int fds[N + 1][2];
    for (int r = 0; r <= N; r++)
        if (pipe(fds[r]) != 0)
            return N;
    pid_t pids[N + 1];
    fflush(stdout);
    for (int r = 0; r <= N; r++) {
        int maker = r == N;
        if (maker && !maker_exits)
            break;
        if ((pids[r] = fork()) != 0)
            continue;
        ncclUniqueId id;
        if (maker || (r == 0 && !maker_exits)) {
            if (ncclGetUniqueId(&id) != ncclSuccess) {
                printf("FAIL rank %d: ncclGetUniqueId: %s\n", r, ncclGetLastError(NULL));
                _exit(1);
            }
            for (int p = 0; p < N; p++)
                if (p != r && write(fds[p][1], &id, sizeof id) != (ssize_t)sizeof id)
                    _exit(1);
            if (maker)
                _exit(0); /* its root goes with it */
        } else if (read(fds[r][0], &id, sizeof id) != (ssize_t)sizeof id) {
            _exit(1);
        }
        if (maker_exits)
            usleep(200000); /* the maker is gone */
        int rc = child(r, id);
        fflush(stdout);
        _exit(rc);
    }
    int bad = 0;
    for (int r = 0; r <= N; r++) {
        if (r == N && !maker_exits)
            break;
        int st;
        waitpid(pids[r], &st, 0);
        bad += r < N && !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    for (int r = 0; r <= N; r++)
        close(fds[r][0]), close(fds[r][1]);
    return bad;
}

#define CHILD_OK(r, what, call)                                                                              \
    do {                                                                                                      \
        ncclResult_t e_ = (call);                                                                             \
        if (e_ != ncclSuccess) {                                                                              \
            printf("FAIL rank %d: %s returned %d: %s\n", r, what, (int)e_, ncclGetLastError(NULL));          \
            return 1;                                                                                         \
        }                                                                                                     \
    } while (0)

static int check_floats(int r, const char *what, const float *got, const float *want, int n)
{
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) {
            printf("FAIL rank %d: %s: element %d is %g, expected %g\n", r, what, i, got[i], want[i]);
            return 1;
        }
    return 0;
}

static int normal(int r, ncclUniqueId id)
{
    ncclComm_t comm, half;
    float in[N * COUNT], out[N * COUNT], want[N * COUNT];
    CHILD_OK(r, "ncclCommInitRank", ncclCommInitRank(&comm, N, id, r));
    for (int i = 0; i < N * COUNT; i++)
        in[i] = (float)(r * 1000 + i);
    CHILD_OK(r, "ncclAllReduce", ncclAllReduce(in, out, COUNT, ncclFloat, ncclSum, comm, NULL));
    for (int i = 0; i < COUNT; i++)
        want[i] = (float)(3000 + 3 * i);
    if (check_floats(r, "allreduce", out, want, COUNT))
        return 1;
    CHILD_OK(r, "ncclAllGather", ncclAllGather(in, out, COUNT, ncclFloat, comm, NULL));
    for (int p = 0; p < N; p++)
        for (int i = 0; i < COUNT; i++)
            want[p * COUNT + i] = (float)(p * 1000 + i);
    if (check_floats(r, "allgather", out, want, N * COUNT))
        return 1;
    CHILD_OK(r, "ncclReduceScatter", ncclReduceScatter(in, out, COUNT, ncclFloat, ncclMax, comm, NULL));
    for (int i = 0; i < COUNT; i++)
        want[i] = (float)(2000 + r * COUNT + i);
    if (check_floats(r, "reducescatter", out, want, COUNT))
        return 1;
    ncclGroupStart();
    ncclSend(in, COUNT, ncclFloat, (r + 1) % N, comm, NULL);
    ncclRecv(out, COUNT, ncclFloat, (r + N - 1) % N, comm, NULL);
    CHILD_OK(r, "ncclGroupEnd (ring)", ncclGroupEnd());
    for (int i = 0; i < COUNT; i++)
        want[i] = (float)(((r + N - 1) % N) * 1000 + i);
    if (check_floats(r, "ring", out, want, COUNT))
        return 1;
    CHILD_OK(r, "ncclCommSplit", ncclCommSplit(comm, r % 2, r, &half, NULL));
    CHILD_OK(r, "ncclAllReduce (split)", ncclAllReduce(in, out, COUNT, ncclFloat, ncclSum, half, NULL));
    for (int i = 0; i < COUNT; i++)
        want[i] = r % 2 ? (float)(1000 + i) : (float)(2000 + 2 * i); /* {1} and {0, 2} */
    if (check_floats(r, "split allreduce", out, want, COUNT))
        return 1;
    CHILD_OK(r, "ncclCommDestroy (split)", ncclCommDestroy(half));
    CHILD_OK(r, "ncclCommDestroy", ncclCommDestroy(comm));
    return 0;
}

/* Private memory registered: refused by libccl on every rank, only warned
 * (CCL_NCCL_REGISTER=1: ncclCommRegister reaches libccl only so; windows always). */
static int registered(int r, ncclUniqueId id)
{
    ncclComm_t comm;
    float in[COUNT], out[COUNT], want[COUNT];
    void *h;
    ncclWindow_t w;
    setenv("CCL_NCCL_REGISTER", "1", 1);
    CHILD_OK(r, "ncclCommInitRank", ncclCommInitRank(&comm, N, id, r));
    CHILD_OK(r, "ncclCommRegister", ncclCommRegister(comm, in, sizeof in, &h));
    const char *why = ncclGetLastError(comm);
    if (!strstr(why, "libccl did not register") || !strstr(why, "private memory")) {
        printf("FAIL rank %d: ncclCommRegister's warning does not say libccl refused private memory: %s\n", r, why);
        return 1;
    }
    CHILD_OK(r, "ncclCommWindowRegister", ncclCommWindowRegister(comm, out, sizeof out, &w, NCCL_WIN_DEFAULT));
    for (int i = 0; i < COUNT; i++)
        in[i] = (float)(r * 100 + i), want[i] = (float)(300 + 3 * i);
    CHILD_OK(r, "ncclAllReduce", ncclAllReduce(in, out, COUNT, ncclFloat, ncclSum, comm, NULL));
    if (check_floats(r, "allreduce on registered buffers", out, want, COUNT))
        return 1;
    CHILD_OK(r, "ncclCommWindowDeregister", ncclCommWindowDeregister(comm, w));
    CHILD_OK(r, "ncclCommDeregister", ncclCommDeregister(comm, h));
    CHILD_OK(r, "ncclCommDestroy", ncclCommDestroy(comm));
    return 0;
}

/* A rank's init must fail with `want`, its message saying `text`, within `secs`. */
static int init_fails(int r, ncclUniqueId id, int nranks, ncclResult_t want, const char *text, double secs)
{
    ncclComm_t comm;
    double t0 = now_s();
    ncclResult_t got = ncclCommInitRank(&comm, nranks, id, r);
    double took = now_s() - t0;
    const char *msg = ncclGetLastError(NULL);
    if (got != want || !strstr(msg, text) || took > secs) {
        printf("FAIL rank %d: ncclCommInitRank returned %d after %.1f s (expected %d, within %.0f s, saying '%s'): "
               "%s\n", r, (int)got, took, (int)want, secs, text, msg);
        return 1;
    }
    return 0;
}

static int never_joins(int r, ncclUniqueId id)
{
    if (r == 2)
        return 0;
    return init_fails(r, id, N, ncclRemoteError, "rank 2 of 3 never joined the init", 10);
}

static int wrong_nranks(int r, ncclUniqueId id)
{
    if (r == 2) {
        usleep(300000); /* the others have joined first */
        return init_fails(r, id, N + 1, ncclInvalidArgument, "passed nranks 4, but the ranks before it passed 3", 10);
    }
    return init_fails(r, id, N, ncclInvalidArgument, "passed nranks 4, but the ranks before it passed 3", 10);
}

static int killed(int r, ncclUniqueId id)
{
    ncclComm_t comm;
    CHILD_OK(r, "ncclCommInitRank", ncclCommInitRank(&comm, N, id, r));
    if (r == 2)
        raise(SIGKILL);
    float x[COUNT] = {0};
    double t0 = now_s();
    ncclResult_t got = ncclAllReduce(x, x, COUNT, ncclFloat, ncclSum, comm, NULL);
    double took = now_s() - t0;
    const char *msg = ncclGetLastError(comm);
    if (got != ncclRemoteError || !strstr(msg, "rank 2") || took > 5) {
        printf("FAIL rank %d: the all-reduce with a dead peer returned %d after %.1f s: %s\n", r, (int)got, took, msg);
        return 1;
    }
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    ncclCommAbort(comm);
    return async == ncclRemoteError ? 0 : 1;
}

static int gone_maker(int r, ncclUniqueId id)
{
    return init_fails(r, id, N, ncclSystemError, "cannot reach the id's root", 10);
}

int main(void)
{
    setenv("CCL_TIMEOUT_MS", "1500", 1);
    int bad = run_ranks(normal, 0);
    say(!bad, "nccl.procs.N3", "%d of %d ranks failed", bad, N);
    bad = run_ranks(never_joins, 0);
    say(!bad, "nccl.procs.never-joins", "%d of %d ranks failed", bad, N);
    bad = run_ranks(wrong_nranks, 0);
    say(!bad, "nccl.procs.wrong-nranks", "%d of %d ranks failed", bad, N);
    bad = run_ranks(killed, 0);
    say(bad == 1, "nccl.procs.killed-rank", "%d of %d surviving ranks failed", bad - 1, N - 1); /* rank 2 died */
    bad = run_ranks(gone_maker, 1);
    say(!bad, "nccl.procs.id-maker-gone", "%d of %d ranks failed", bad, N);
    bad = run_ranks(registered, 0);
    say(!bad, "nccl.procs.register-private-memory", "%d of %d ranks failed", bad, N);
    return failures ? 1 : 0;
}
