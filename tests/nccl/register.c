/* register.c: ncclCommRegister and ncclCommWindowRegister on libccl (ccl_mem_register)
 * through libccl_nccl, on libccl's CPU backend (the test mode), written against nccl.h
 * only. libccl's registration is collective, so where it refuses, every rank hears why;
 * the shim then warns (ncclGetLastError) and the call still succeeds, as NCCL's
 * registration is a hint. What this program sees of libccl's part is those warnings;
 * tests/nccl/run.sh also counts the INFO lines of each registration made and undone.
 *
 *   threads   one thread per rank (ncclCommInitRank): a registration and a window per
 *             rank, a collective on them, exact; ranks registering different sizes (every
 *             rank succeeds, warned with libccl's reason); a range overlapping a
 *             registered one (libccl refuses it: the first was registered with libccl);
 *             deregistration, twice (ncclInvalidArgument);
 *             (tests/nccl/run.sh sets CCL_NCCL_REGISTER=1 for it: ncclCommRegister
 *             reaches libccl only so);
 *   off       the same with CCL_NCCL_REGISTER=0 (tests/nccl/run.sh sets it): libccl
 *             registers nothing, so neither refusal is said, and every call succeeds;
 *   default   CCL_NCCL_REGISTER unset: as off for ncclCommRegister, windows as threads,
 *             then clique;
 *   clique    one thread driving every rank (ncclCommInitAll): ncclCommRegister leaves
 *             libccl out (no wait for the ranks the thread has yet to call), so does a
 *             window outside a group (warned); windows of every rank inside a group
 *             reach libccl at the group's end (the overlap check again), and are
 *             deregistered inside a group, not outside one (ncclInvalidUsage, the
 *             window still live); a registration and its deregistration in one group. */
#include <pthread.h>

#include "common.h"

enum { N = 3, COUNT = 64 };

static int has(const char *text, const char *part) { return text && strstr(text, part) != NULL; }

/* ---- one thread per rank ---- */

typedef struct {
    int rank, libccl;    /* libccl: whether libccl's part is expected (not CCL_NCCL_REGISTER=0) */
    ncclUniqueId id;
    ncclComm_t comm;
    float in[COUNT], out[COUNT], other[COUNT];
    char why[1024];      /* the first failure, "" when none */
} Rank;

static pthread_barrier_t step;

#define RANK_CHECK(k, cond, ...)                                                                              \
    do {                                                                                                      \
        if (!(cond) && !(k)->why[0])                                                                          \
            snprintf((k)->why, sizeof (k)->why, __VA_ARGS__);                                                 \
    } while (0)

static void *rank_main(void *arg)
{
    Rank *k = arg;
    ncclResult_t r = ncclCommInitRank(&k->comm, N, k->id, k->rank);
    RANK_CHECK(k, r == ncclSuccess, "init: %s", ncclGetLastError(NULL));
    pthread_barrier_wait(&step);
    if (r != ncclSuccess)
        return NULL;
    ncclComm_t c = k->comm;
    void *h = NULL, *h2 = NULL;
    ncclWindow_t w = NULL;
    for (int i = 0; i < COUNT; i++)
        k->in[i] = (float)(k->rank + i);

    /* A registration and a window, then a collective from one to the other. */
    r = ncclCommRegister(c, k->in, sizeof k->in, &h);
    RANK_CHECK(k, r == ncclSuccess && h, "ncclCommRegister: %d: %s", (int)r, ncclGetLastError(c));
    r = ncclCommWindowRegister(c, k->out, sizeof k->out, &w, NCCL_WIN_COLL_SYMMETRIC);
    RANK_CHECK(k, r == ncclSuccess && w, "ncclCommWindowRegister: %d: %s", (int)r, ncclGetLastError(c));
    r = ncclAllReduce(k->in, k->out, COUNT, ncclFloat, ncclSum, c, NULL);
    RANK_CHECK(k, r == ncclSuccess, "ncclAllReduce: %s", ncclGetLastError(c));
    for (int i = 0; i < COUNT; i++)
        RANK_CHECK(k, k->out[i] == (float)(N * (N - 1) / 2 + N * i), "element %d is %g", i, k->out[i]);

    /* A range overlapping the registered one: libccl refuses it (on every rank), which
     * it can only where the first is registered with it; the call succeeds. */
    r = ncclCommRegister(c, (char *)k->in + 16, sizeof k->in, &h2);
    RANK_CHECK(k, r == ncclSuccess && h2, "overlapping ncclCommRegister: %d: %s", (int)r, ncclGetLastError(c));
    RANK_CHECK(k, k->libccl == (has(ncclGetLastError(c), "libccl did not register") && has(ncclGetLastError(c), "overlaps")),
               "the overlapping registration's warning (expected %s): %s", k->libccl ? "one" : "none",
               ncclGetLastError(c));
    RANK_CHECK(k, ncclCommDeregister(c, h2) == ncclSuccess, "deregister the overlapping one: %s", ncclGetLastError(c));

    /* Ranks registering different sizes: every rank succeeds, warned with libccl's reason.
     * (Not inside a registered range, which libccl's cache would answer alone.) */
    r = ncclCommRegister(c, k->other, (size_t)(k->rank + 1) * 16, &h2);
    RANK_CHECK(k, r == ncclSuccess && h2, "different sizes: %d: %s", (int)r, ncclGetLastError(c));
    RANK_CHECK(k, k->libccl == has(ncclGetLastError(c), "register different sizes"),
               "different sizes' warning (expected %s): %s", k->libccl ? "one" : "none", ncclGetLastError(c));
    RANK_CHECK(k, ncclCommDeregister(c, h2) == ncclSuccess, "deregister (not registered with libccl): %s",
               ncclGetLastError(c));

    RANK_CHECK(k, ncclCommWindowDeregister(c, w) == ncclSuccess, "ncclCommWindowDeregister: %s", ncclGetLastError(c));
    RANK_CHECK(k, ncclCommDeregister(c, h) == ncclSuccess, "ncclCommDeregister: %s", ncclGetLastError(c));
    r = ncclCommDeregister(c, h);
    RANK_CHECK(k, r == ncclInvalidArgument && has(ncclGetLastError(c), "not a live handle"),
               "a second ncclCommDeregister: %d: %s", (int)r, ncclGetLastError(c));
    RANK_CHECK(k, ncclCommDestroy(c) == ncclSuccess, "destroy: %s", ncclGetLastError(NULL));
    return NULL;
}

static void threads(const char *name, int libccl)
{
    Rank ks[N];
    pthread_t t[N];
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) {
        say(0, name, "ncclGetUniqueId: %s", ncclGetLastError(NULL));
        return;
    }
    pthread_barrier_init(&step, NULL, N);
    for (int r = 0; r < N; r++) {
        ks[r] = (Rank){.rank = r, .libccl = libccl, .id = id};
        pthread_create(&t[r], NULL, rank_main, &ks[r]);
    }
    int bad = -1;
    for (int r = 0; r < N; r++) {
        pthread_join(t[r], NULL);
        if (bad < 0 && ks[r].why[0])
            bad = r;
    }
    pthread_barrier_destroy(&step);
    say(bad < 0, name, "rank %d: %s", bad, bad < 0 ? "" : ks[bad].why);
}

/* ---- one thread, every rank ---- */

static int clique(void)
{
    const char *name = "nccl.register.clique";
    ncclComm_t c[N];
    float buf[N][2 * COUNT], out[N][COUNT];
    void *h[N];
    ncclWindow_t w[N], w2[N];
    NCCL_OK(name, ncclCommInitAll(c, N, NULL));
    for (int r = 0; r < N; r++)
        for (int i = 0; i < COUNT; i++)
            buf[r][i] = (float)(r * i);

    /* ncclCommRegister, one rank after another: libccl is left out (it would wait). */
    int ok = 1;
    for (int r = 0; r < N; r++)
        ok &= ncclCommRegister(c[r], buf[r], sizeof buf[r], &h[r]) == ncclSuccess && h[r];
    for (int r = 0; r < N; r++)
        ok &= ncclCommDeregister(c[r], h[r]) == ncclSuccess;
    say(ok, "nccl.register.clique.register-without-waiting", "%s", ncclGetLastError(NULL));

    /* A window outside a group: no wait either, and a warning saying to group. */
    ncclResult_t r0 = ncclCommWindowRegister(c[0], buf[0], sizeof buf[0], &w[0], NCCL_WIN_DEFAULT);
    say(r0 == ncclSuccess && w[0] && has(ncclGetLastError(c[0]), "between ncclGroupStart and ncclGroupEnd") &&
            ncclCommWindowDeregister(c[0], w[0]) == ncclSuccess,
        "nccl.register.clique.window-outside-group-warned", "%d: %s", (int)r0, ncclGetLastError(c[0]));

    /* Every rank's window in a group: libccl registers them at the group's end, which
     * an overlapping window shows (libccl refuses it, on every rank, with a warning). */
    ok = 1;
    ncclGroupStart();
    for (int r = 0; r < N; r++)
        ok &= ncclCommWindowRegister(c[r], buf[r], COUNT * sizeof(float), &w[r], NCCL_WIN_DEFAULT) == ncclSuccess;
    ok &= ncclGroupEnd() == ncclSuccess;
    ncclGroupStart();
    for (int r = 0; r < N; r++)
        ok &= ncclCommWindowRegister(c[r], (char *)buf[r] + 8, COUNT * sizeof(float), &w2[r], NCCL_WIN_DEFAULT) ==
              ncclSuccess;
    ok &= ncclGroupEnd() == ncclSuccess;
    for (int r = 0; r < N; r++)
        ok &= has(ncclGetLastError(c[r]), "libccl did not register") && has(ncclGetLastError(c[r]), "overlaps");
    say(ok, "nccl.register.clique.windows-in-a-group", "%s", ncclGetLastError(c[N - 1]));

    /* A collective on the registered windows, exact. */
    ncclGroupStart();
    for (int r = 0; r < N; r++)
        ncclAllReduce(buf[r], out[r], COUNT, ncclFloat, ncclSum, c[r], NULL);
    ok = ncclGroupEnd() == ncclSuccess;
    for (int r = 0; r < N && ok; r++)
        for (int i = 0; i < COUNT; i++)
            ok &= out[r][i] == (float)(N * (N - 1) / 2 * i);
    say(ok, "nccl.register.clique.allreduce", "%s", ncclGetLastError(NULL));

    /* Deregistering a window libccl holds, outside a group, would wait for the other
     * ranks: refused, the window still live; inside a group it goes. */
    r0 = ncclCommWindowDeregister(c[0], w[0]);
    expect_fail("nccl.register.clique.deregister-outside-group", r0, ncclInvalidUsage, c[0],
                "cannot be deregistered outside a group");
    ok = 1;
    ncclGroupStart();
    for (int r = 0; r < N; r++)
        ok &= ncclCommWindowDeregister(c[r], w2[r]) == ncclSuccess &&
              ncclCommWindowDeregister(c[r], w[r]) == ncclSuccess;
    ok &= ncclGroupEnd() == ncclSuccess;
    say(ok, "nccl.register.clique.deregister-in-a-group", "%s", ncclGetLastError(NULL));
    expect_fail("nccl.register.clique.deregister-twice", ncclCommWindowDeregister(c[1], w[1]), ncclInvalidArgument,
                c[1], "not a live window");

    /* A registration and its deregistration in one group: both at the group's end. */
    ok = 1;
    ncclGroupStart();
    for (int r = 0; r < N; r++)
        ok &= ncclCommWindowRegister(c[r], buf[r], sizeof buf[r], &w[r], NCCL_WIN_DEFAULT) == ncclSuccess;
    for (int r = 0; r < N; r++)
        ok &= ncclCommWindowDeregister(c[r], w[r]) == ncclSuccess;
    ok &= ncclGroupEnd() == ncclSuccess;
    say(ok, "nccl.register.clique.register-and-deregister-in-one-group", "%s", ncclGetLastError(NULL));
    for (int r = 0; r < N; r++)
        ncclCommDestroy(c[r]);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "off")) {
        threads("nccl.register.off", 0);
    } else if (argc > 1 && !strcmp(argv[1], "default")) {
        /* CCL_NCCL_REGISTER unset: ncclCommRegister's buffers stay NCCL's alone, so
         * neither of its refusals is said; windows still reach libccl. */
        threads("nccl.register.default", 0);
        clique();
    } else {
        threads("nccl.register.threads", 1);
        clique();
    }
    return failures ? 1 : 0;
}
