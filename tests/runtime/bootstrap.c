/* bootstrap.c: a user's bootstrap whose all-gather returns wrong bytes but reports
 * success (CPU backend; ranks as threads, each calling ccl_comm_init_rank).
 *
 * The test's bootstrap wraps the library's in-process one and damages what one of its
 * all-gathers returns: random bytes in a peer's entry, an all-zero result (a gather
 * that wrote nothing), the entries in the wrong order, one byte flipped, only one
 * rank's view damaged. Every rank that sees damage must fail ccl_comm_init_rank with
 * CCL_ERR_INVALID_ARGUMENT naming the bootstrap's allgather, the exchange and the
 * entry; none may crash (before the fix: SIGSEGV in cpu/heaps.c on the damaged heap
 * exchange) or hang (a rank that fails releases the others' waits, as
 * ccl_comm_init_all does). An undamaged run must still work. Then the same with ranks
 * as forked processes (POSIX shm heaps, whose names travel through the exchange): every
 * rank fails or works as above, within the bootstrap's timeout, and no rank leaves a
 * heap segment in /dev/shm, also when one dies inside ccl_comm_init_rank (before the
 * fix, a rank killed after it had made its segment left it there: 1 GiB apparent).
 * Last, the environment bootstrap itself: a rank alive but late to a barrier is named
 * when the others give up (it said "not every rank arrived", naming nobody). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ccl.h"
#include "internal.h"

#include "forked_ranks.h"

enum { N = 3 };

static int failures;

static void check(const char *what, int ok, const char *detail)
{
    if (ok)
        printf("ok bootstrap: %s\n", what);
    else {
        printf("FAIL bootstrap: %s: %s\n", what, detail);
        failures++;
    }
}

typedef enum { DAMAGE_NONE, DAMAGE_RANDOM, DAMAGE_ZERO, DAMAGE_SWAP, DAMAGE_FLIP, DAMAGE_ONE_VIEW, DAMAGE_DIE } Damage;

static const char *damage_name[] = {"none", "random bytes in a peer's entry", "all zeros", "entries swapped",
                                    "one byte flipped", "random bytes in rank 0's view only",
                                    "rank 2 dies entering it"};

/* Forked ranks' pids, shared with the parent (run_forked). */
static long *child_pids;

typedef struct {
    ccl_bootstrap_t inner;      /* the library's in-process bootstrap for this rank */
    Damage damage;
    int exchange;               /* which all-gather (1-based) to damage */
    int calls;
    unsigned seed;
} Wrap;

static int wrap_allgather(void *ctx, const void *in, void *out, size_t bytes)
{
    Wrap *w = ctx;
    if (w->damage == DAMAGE_DIE && w->inner.rank == N - 1 && w->calls + 1 == w->exchange)
        _exit(9); /* inside ccl_comm_init_rank, after what it made before this exchange */
    int rc = w->inner.allgather(w->inner.ctx, in, out, bytes);
    if (rc != 0 || ++w->calls != w->exchange)
        return rc;
    char *o = out;
    int me = w->inner.rank, victim = (me + 1) % N;
    switch (w->damage) {
    case DAMAGE_NONE:
    case DAMAGE_DIE:
        break;
    case DAMAGE_ONE_VIEW:
        if (me != 0)
            break;
        /* fall through */
    case DAMAGE_RANDOM:
        for (size_t i = 0; i < bytes; i++)
            o[(size_t)victim * bytes + i] = (char)rand_r(&w->seed);
        break;
    case DAMAGE_ZERO:
        memset(o, 0, bytes * N);
        break;
    case DAMAGE_SWAP: {
        char *tmp = malloc(bytes);
        memcpy(tmp, o, bytes);
        memcpy(o, o + bytes, bytes);
        memcpy(o + bytes, tmp, bytes);
        free(tmp);
        break;
    }
    case DAMAGE_FLIP:
        o[(size_t)victim * bytes + bytes / 2] ^= 0x10;
        break;
    }
    return 0;
}

static int wrap_barrier(void *ctx)
{
    Wrap *w = ctx;
    return w->inner.barrier(w->inner.ctx);
}

typedef struct {
    Wrap wrap;
    CclThreadBoot *tb;
    ccl_comm_t *comm;
    ccl_result_t r;
    char msg[CCL__ERR_LEN];
} Rank;

static void *rank_main(void *arg)
{
    Rank *rk = arg;
    ccl_bootstrap_t b = {.nranks = N, .rank = rk->wrap.inner.rank, .allgather = wrap_allgather,
                         .barrier = wrap_barrier, .ctx = &rk->wrap};
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .heap_bytes = 8 << 20, .timeout_ms = 5000};
    rk->r = ccl_comm_init_rank(&rk->comm, &b, 0, &cfg);
    snprintf(rk->msg, sizeof rk->msg, "%s", ccl_comm_last_error(NULL));
    if (rk->r != CCL_OK)
        ccl__thread_boot_fail(rk->tb); /* releases peers waiting in a later exchange */
    return NULL;
}

/* Runs N ranks through a bootstrap damaged as asked; 0 when every rank behaved. */
static void run(Damage damage, int exchange)
{
    ccl_bootstrap_t boots[N];
    CclThreadBoot *tb = ccl__thread_boot_new(N, boots);
    Rank rk[N];
    pthread_t t[N];
    for (int r = 0; r < N; r++) {
        rk[r] = (Rank){.wrap = {.inner = boots[r], .damage = damage, .exchange = exchange, .seed = 17u + (unsigned)r},
                       .tb = tb};
        pthread_create(&t[r], NULL, rank_main, &rk[r]);
    }
    for (int r = 0; r < N; r++)
        pthread_join(t[r], NULL);
    char what[160], detail[3 * CCL__ERR_LEN];
    snprintf(what, sizeof what, "exchange %d damaged (%s)", exchange, damage_name[damage]);
    size_t n = 0;
    for (int r = 0; r < N; r++)
        n += (size_t)snprintf(detail + n, sizeof detail - n, "rank %d: %s '%s'; ", r, ccl_result_string(rk[r].r),
                              rk[r].msg);
    if (damage == DAMAGE_NONE) {
        int ok = 1;
        for (int r = 0; r < N; r++)
            ok &= rk[r].r == CCL_OK;
        check("an undamaged bootstrap works", ok, detail);
    } else if (rk[0].wrap.calls < exchange) {
        /* The backend made fewer exchanges: nothing was damaged. */
        int ok = 1;
        for (int r = 0; r < N; r++)
            ok &= rk[r].r == CCL_OK;
        snprintf(what + strlen(what), sizeof what - strlen(what), ": the init makes fewer, so it works");
        check(what, ok, detail);
    } else {
        /* Every rank whose view was damaged names it; the others fail (their peer gave
         * up) or, where the damage was theirs alone to see, may even have succeeded
         * before the peer gave up. */
        int ok = 1;
        for (int r = 0; r < N; r++) {
            int saw = damage != DAMAGE_ONE_VIEW || r == 0;
            if (saw)
                ok &= rk[r].r == CCL_ERR_INVALID_ARGUMENT && strstr(rk[r].msg, "argument 'bootstrap'") &&
                      strstr(rk[r].msg, "allgather") && strstr(rk[r].msg, "exchange");
            else
                ok &= rk[r].r != CCL_ERR_INTERNAL;
        }
        check(what, ok, detail);
    }
    for (int r = 0; r < N; r++)
        if (rk[r].comm)
            ccl_comm_destroy(rk[r].comm);
    ccl__thread_boot_free(tb);
}

/* A forked rank: the environment bootstrap, damaged (arg: exchange * 8 + damage).
 * Exit 0: init worked; 2: it failed naming the bootstrap's data; 3: it failed
 * otherwise (a peer gave up), message printed; 1: something else went wrong. */
static int child(int rank, int arg)
{
    CclEnvBoot *eb;
    ccl_bootstrap_t inner;
    char err[512];
    child_pids[rank] = (long)getpid();
    if (ccl__env_boot_open(&eb, &inner, 10000, err, sizeof err) != 0) {
        printf("FAIL bootstrap: rank %d: env bootstrap: %s\n", rank, err);
        return 1;
    }
    Wrap w = {.inner = inner, .damage = (Damage)(arg % 8), .exchange = arg / 8, .seed = 5u + (unsigned)rank};
    ccl_bootstrap_t b = {.nranks = N, .rank = rank, .allgather = wrap_allgather, .barrier = wrap_barrier, .ctx = &w};
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .heap_bytes = 8 << 20, .timeout_ms = 3000};
    ccl_comm_t *comm;
    ccl_result_t r = ccl_comm_init_rank(&comm, &b, 0, &cfg);
    const char *msg = ccl_comm_last_error(NULL);
    int code = r == CCL_OK ? 0 : r == CCL_ERR_INVALID_ARGUMENT && strstr(msg, "argument 'bootstrap'") ? 2 : 3;
    if (code == 3 && r != CCL_ERR_PEER_FAILED && r != CCL_ERR_SYSTEM) {
        printf("FAIL bootstrap: rank %d: %s: %s\n", rank, ccl_result_string(r), msg);
        code = 1;
    }
    if (r == CCL_OK)
        ccl_comm_destroy(comm);
    ccl__env_boot_close(eb);
    return code;
}

static void run_forked(Damage damage, int exchange)
{
    int codes[N];
    double t0 = ccl__now_ms();
    forked_ranks_run("ccl-bootstrap-test", N, child, exchange * 8 + (int)damage, codes);
    double ms = ccl__now_ms() - t0;
    /* Heap segments the ranks left in /dev/shm (named after their pids). */
    char left[256] = "";
    for (int r = 0; r < N; r++) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "ls /dev/shm 2>/dev/null | grep '^ccl-heap-%ld-'", child_pids[r]);
        FILE *f = popen(cmd, "r");
        char line[128];
        while (f && fgets(line, sizeof line, f) && strlen(left) + strlen(line) + 2 < sizeof left)
            strcat(left, line);
        if (f)
            pclose(f);
    }
    char what[160], detail[sizeof left + 256];
    snprintf(what, sizeof what, "processes: exchange %d damaged (%s)", exchange, damage_name[damage]);
    snprintf(detail, sizeof detail, "exit codes %d %d %d (0 ok, 2 named the damage, 3 a peer gave up, 9 died) after "
             "%.0f ms; heap segments left: %s", codes[0], codes[1], codes[2], ms, left[0] ? left : "none");
    int ok = ms < 8000 && !left[0];
    for (int r = 0; r < N; r++) {
        int saw = damage != DAMAGE_ONE_VIEW || r == 0;
        if (damage == DAMAGE_DIE)
            ok &= r == N - 1 ? codes[r] == 9 : codes[r] == 3;
        else
            ok &= damage == DAMAGE_NONE ? codes[r] == 0 : saw ? codes[r] == 2 : codes[r] == 3 || codes[r] == 0;
    }
    check(what, ok, detail);
}

/* Ranks 0 and 1 wait at a bootstrap barrier that rank 2, alive, reaches too late. Rank 0
 * must name rank 2; rank 1 names it too, or, where rank 0's wait ended first and it left
 * (a loaded machine: their timeouts start apart), says that rank 0 is gone. */
static int late_child(int rank, int arg)
{
    CclEnvBoot *eb;
    ccl_bootstrap_t b;
    char err[512];
    if (ccl__env_boot_open(&eb, &b, 600, err, sizeof err) != 0) {
        printf("FAIL bootstrap: late rank: rank %d: %s\n", rank, err);
        return 1;
    }
    if (rank == N - 1) {
        usleep(1500 * 1000);
        ccl__env_boot_close(eb);
        return 0;
    }
    int rc = b.barrier(b.ctx);
    const char *why = ccl__env_boot_error(eb);
    int named = rc != 0 && ((strstr(why, "rank 2 did not reach the bootstrap's barrier") && strstr(why, "slow or hung")) ||
                            (rank == 1 && strstr(why, "rank 0 (pid ") && strstr(why, ") is gone")));
    if (!named)
        printf("FAIL bootstrap: late rank: rank %d: barrier %d: '%s'\n", rank, rc, why);
    ccl__env_boot_close(eb);
    return named ? 0 : 1;
}

int main(void)
{
    /* A hang fails the test instead of the suite. */
    alarm(120);
    run(DAMAGE_NONE, 0);
    /* The heaps' exchanges, then the comm's mailboxes' (mailbox.c). */
    for (int exchange = 1; exchange <= 6; exchange++)
        for (Damage d = DAMAGE_RANDOM; d <= DAMAGE_ONE_VIEW; d++)
            run(d, exchange);
    child_pids = mmap(NULL, sizeof *child_pids * N, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    run_forked(DAMAGE_NONE, 0);
    for (int exchange = 1; exchange <= 6; exchange++) {
        run_forked(DAMAGE_RANDOM, exchange);
        run_forked(DAMAGE_ONE_VIEW, exchange);
        run_forked(DAMAGE_DIE, exchange);
    }
    int codes[N];
    forked_ranks_run("ccl-bootstrap-late", N, late_child, 0, codes);
    if (codes[0] == 0 && codes[1] == 0 && codes[2] == 0)
        printf("ok bootstrap: a rank alive but late to a bootstrap barrier is named\n");
    else
        failures++;
    return failures != 0;
}
