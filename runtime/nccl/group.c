/* group.c: ncclGroupStart and ncclGroupEnd over libccl's groups and the real NCCL's.
 *
 * A group is the calling thread's, as NCCL's and libccl's are. ncclGroupStart opens a
 * libccl group at once (libccl holds its sends, recvs and splits until the outermost
 * end) and the real NCCL's lazily, only once a call of the group goes to NCCL (so a
 * job that never uses NCCL never calls it). What neither library can hold is held
 * here until the outermost ncclGroupEnd:
 *   - ncclCommInitRank and friends: each runs then on a thread of its own, on the CUDA
 *     device that was current at its call, all at once (they wait for each other);
 *     comms of one id made so by one thread are marked shared_thread;
 *   - ncclCommSplit's new communicators: made live once both libraries wrote theirs;
 *   - steps held for the end (shim_group_hold: libccl's part of ncclCommRegister,
 *     ncclCommWindowRegister and their deregistrations, collective in libccl): each
 *     comm's in the order held, on a thread per comm, all at once;
 *   - on libccl's CPU backend, the comms the group's calls used, synchronized at the
 *     end (the test mode's calls complete by the group's end), and the pre-multiplied
 *     inputs of its ncclRedOpCreatePreMulSum sums, freed after that.
 * A call that fails its checks inside a group returns its error at once, and the
 * outermost ncclGroupEnd returns the first such error; the group's other calls still
 * run (libccl enqueues collectives when called; NCCL would launch nothing of such a
 * group). ncclGroupEnd without a group is ncclInvalidUsage. */
#include <stdlib.h>
#include <string.h>

#include "shim.h"

typedef struct {
    ncclComm_t *out;
    int nranks, nid, rank, device, has_config;
    ncclUniqueId *ids;
    ncclConfig_t config;
    const char *fn;
    ncclResult_t r;
    char why[SHIM_ERR_LEN];
} HeldInit;

typedef struct {
    ncclComm_t parent, child;
    ncclComm_t *newcomm;
} HeldSplit;

typedef struct {
    ncclComm_t comm;
    void *step;
    ShimHeldRun run;
} HeldStep;

static _Thread_local struct {
    int depth;          /* open ncclGroupStart calls */
    int real_depth;     /* real ncclGroupStart calls made for them */
    HeldInit *inits;
    int ninits;
    HeldSplit *splits;
    int nsplits;
    HeldStep *steps;
    int nsteps;
    ncclComm_t *touched;
    int ntouched;
    void **kept;
    int nkept;
    ncclResult_t failed; /* the first call of the group that failed */
    char why[SHIM_ERR_LEN];
} group;

int shim_group_depth(void)
{
    return group.depth;
}

void shim_group_real_enter(const ShimReal *real)
{
    while (group.real_depth < group.depth) {
        real->GroupStart();
        group.real_depth++;
    }
}

/* Appends one element of `size` bytes to *arr (length *n); 0, or -1 out of memory. */
static int append(void *arr, int *n, const void *elem, size_t size)
{
    void **a = arr;
    char *more = realloc(*a, size * (size_t)(*n + 1));
    if (!more)
        return -1;
    memcpy(more + size * (size_t)*n, elem, size);
    *a = more;
    (*n)++;
    return 0;
}

void shim_group_touch(ncclComm_t comm)
{
    for (int i = 0; i < group.ntouched; i++)
        if (group.touched[i] == comm)
            return;
    if (append(&group.touched, &group.ntouched, &comm, sizeof comm) != 0)
        shim_group_fail(shim_fail(comm, ncclSystemError, "ncclGroupEnd: out of memory holding the group's comms"));
}

int shim_group_keep(void *buffer)
{
    return append(&group.kept, &group.nkept, &buffer, sizeof buffer);
}

void shim_group_fail(ncclResult_t r)
{
    if (group.depth && group.failed == ncclSuccess) {
        group.failed = r;
        memcpy(group.why, shim_thread_error(), sizeof group.why);
    }
}

ncclResult_t shim_group_defer_init(ncclComm_t *out, int nranks, int nid, const ncclUniqueId *ids, int rank,
                                   const ncclConfig_t *config, const char *fn)
{
    HeldInit h = {.out = out, .nranks = nranks, .nid = nid, .rank = rank, .fn = fn, .has_config = config != NULL,
                  .device = shim_env_cpu() ? -1 : shim_current_device()};
    if (config)
        memcpy(&h.config, config, config->size && config->size < sizeof h.config ? config->size : sizeof h.config);
    h.ids = malloc(sizeof *h.ids * (size_t)nid);
    if (!h.ids || append(&group.inits, &group.ninits, &h, sizeof h) != 0) {
        free(h.ids);
        ncclResult_t r = shim_fail(NULL, ncclSystemError, "%s: out of memory holding the init in a group", fn);
        shim_group_fail(r);
        return r;
    }
    memcpy(group.inits[group.ninits - 1].ids, ids, sizeof *ids * (size_t)nid);
    return ncclSuccess;
}

ncclResult_t shim_group_hold(ncclComm_t comm, void *step, ShimHeldRun run)
{
    HeldStep h = {comm, step, run};
    if (append(&group.steps, &group.nsteps, &h, sizeof h) != 0) {
        ncclResult_t r = shim_fail(comm, ncclSystemError, "ncclGroupEnd: out of memory holding a step for its end");
        shim_group_fail(r);
        return r;
    }
    return ncclSuccess;
}

ncclResult_t shim_group_defer_split(ncclComm_t parent, ncclComm_t child, ncclComm_t *newcomm)
{
    HeldSplit h = {parent, child, newcomm};
    if (append(&group.splits, &group.nsplits, &h, sizeof h) != 0) {
        /* libccl still writes child->ccl at its group's end: the child is lost, not freed. */
        ncclResult_t r = shim_fail(parent, ncclSystemError, "ncclCommSplit: out of memory holding the split");
        shim_group_fail(r);
        return r;
    }
    return ncclSuccess;
}

/* NVIDIA's header declares these two without a prototype. */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

ncclResult_t ncclGroupStart(void)
{
    group.depth++;
    ccl_group_start();
    return ncclSuccess;
}

static void *init_thread(void *arg)
{
    HeldInit *h = arg;
    if (h->device >= 0)
        shim_set_device(h->device);
    h->r = shim_init_rank_now(h->out, h->nranks, h->nid, h->ids, h->rank, h->has_config ? &h->config : NULL, h->fn);
    if (h->r != ncclSuccess)
        memcpy(h->why, shim_thread_error(), sizeof h->why);
    return NULL;
}

/* The held inits, each on a thread of its own; the first failure. */
static ncclResult_t run_inits(void)
{
    int n = group.ninits;
    pthread_t *t = calloc((size_t)n, sizeof *t);
    int *started = calloc((size_t)n, sizeof *started);
    ncclResult_t r = ncclSuccess;
    for (int i = 0; i < n; i++) {
        if (t && started && pthread_create(&t[i], NULL, init_thread, &group.inits[i]) == 0)
            started[i] = 1;
        else if (r == ncclSuccess)
            r = shim_fail(NULL, ncclSystemError, "ncclGroupEnd: cannot start a thread for the group's init %d", i + 1);
    }
    for (int i = 0; i < n; i++) {
        if (started && started[i])
            pthread_join(t[i], NULL);
        HeldInit *h = &group.inits[i];
        if (started && started[i] && h->r != ncclSuccess && r == ncclSuccess)
            r = shim_fail(NULL, h->r, "ncclGroupEnd: the group's init %d of %d failed: %s", i + 1, n, h->why);
    }
    /* Ranks of one id made here by this thread: it may drive them all (shared_thread). */
    for (int i = 0; i < n; i++) {
        HeldInit *h = &group.inits[i];
        for (int j = 0; j < n && h->r == ncclSuccess && started && started[i]; j++)
            if (j != i && group.inits[j].r == ncclSuccess && started[j] &&
                !memcmp(&h->ids[0], &group.inits[j].ids[0], sizeof h->ids[0])) {
                (*h->out)->shared_thread = 1;
                break;
            }
    }
    for (int i = 0; i < n; i++)
        free(group.inits[i].ids);
    free(t);
    free(started);
    free(group.inits);
    group.inits = NULL;
    group.ninits = 0;
    return r;
}

/* One comm's held steps, run on a thread of its own. */
typedef struct {
    ncclComm_t comm;
    const HeldStep *steps;   /* the group's, every comm's */
    int nsteps;
    ncclResult_t r;
    char why[SHIM_ERR_LEN];
} StepRun;

static void *step_thread(void *arg)
{
    StepRun *run = arg;
    int live = shim_comm_hold(run->comm);
    for (int i = 0; i < run->nsteps; i++) {
        if (run->steps[i].comm != run->comm)
            continue;
        ncclResult_t r = run->steps[i].run(run->comm, run->steps[i].step, live);
        if (r != ncclSuccess && run->r == ncclSuccess) {
            run->r = r;
            memcpy(run->why, shim_thread_error(), sizeof run->why);
        }
    }
    if (live)
        shim_comm_put(run->comm);
    return NULL;
}

/* The held steps: a thread per comm, all at once (libccl's registration of one comm's
 * ranks waits for every rank's), each comm's steps in the order held; the first failure. */
static ncclResult_t run_steps(void)
{
    int n = group.nsteps, ncomms = 0;
    StepRun *runs = calloc((size_t)(n ? n : 1), sizeof *runs);
    pthread_t *t = calloc((size_t)(n ? n : 1), sizeof *t);
    int *started = calloc((size_t)(n ? n : 1), sizeof *started);
    ncclResult_t r = ncclSuccess;
    if (!runs || !t || !started) {
        /* Every step still runs, one after another on this thread (a registration of a
         * comm whose peers this thread drives too then waits in vain until libccl's
         * timeout), so that nothing held is leaked. */
        r = shim_fail(NULL, ncclSystemError, "ncclGroupEnd: out of memory for the threads of the steps it held");
        for (int i = 0; i < n; i++) {
            int live = shim_comm_hold(group.steps[i].comm);
            group.steps[i].run(group.steps[i].comm, group.steps[i].step, live);
            if (live)
                shim_comm_put(group.steps[i].comm);
        }
    } else {
        for (int i = 0; i < n; i++) {
            int seen = 0;
            for (int k = 0; k < ncomms && !seen; k++)
                seen = runs[k].comm == group.steps[i].comm;
            if (!seen)
                runs[ncomms++] = (StepRun){.comm = group.steps[i].comm, .steps = group.steps, .nsteps = n};
        }
        for (int k = 0; k < ncomms; k++)
            started[k] = pthread_create(&t[k], NULL, step_thread, &runs[k]) == 0;
        /* A comm whose thread did not start runs on this one, once the others run. */
        for (int k = 0; k < ncomms; k++)
            if (!started[k])
                step_thread(&runs[k]);
        for (int k = 0; k < ncomms; k++) {
            if (started[k])
                pthread_join(t[k], NULL);
            if (runs[k].r != ncclSuccess && r == ncclSuccess)
                r = shim_fail(NULL, runs[k].r, "ncclGroupEnd: %s", runs[k].why);
        }
    }
    free(runs);
    free(t);
    free(started);
    free(group.steps);
    group.steps = NULL;
    group.nsteps = 0;
    return r;
}

/* The CPU backend's comms the group used: their work done by the group's end. */
static ncclResult_t sync_touched(void)
{
    ncclResult_t r = ncclSuccess;
    for (int i = 0; i < group.ntouched; i++) {
        ncclComm_t c = group.touched[i];
        if (!shim_comm_hold(c))
            continue;
        ccl_result_t cr = ccl_comm_synchronize(c->ccl);
        if (cr != CCL_OK && r == ncclSuccess)
            r = shim_fail_ccl(c, cr, c->ccl, "ncclGroupEnd");
        shim_comm_put(c);
    }
    free(group.touched);
    group.touched = NULL;
    group.ntouched = 0;
    return r;
}

static ncclResult_t first(ncclResult_t a, ncclResult_t b)
{
    return a != ncclSuccess ? a : b;
}

ncclResult_t ncclGroupEnd(void)
{
    if (group.depth == 0)
        return shim_fail(NULL, ncclInvalidUsage, "ncclGroupEnd: no group is open (no ncclGroupStart before it)");
    group.depth--;
    ncclResult_t r = group.depth == 0 && group.ninits ? run_inits() : ncclSuccess;
    ccl_result_t cr = ccl_group_end();
    if (cr != CCL_OK)
        r = first(r, shim_fail(NULL, shim_result(cr), "ncclGroupEnd: %s", ccl_comm_last_error(NULL)));
    const ShimReal *real = shim_real_loaded();
    if (group.real_depth > group.depth && real) {
        group.real_depth--;
        ncclResult_t rr = real->GroupEnd();
        if (rr != ncclSuccess)
            r = first(r, shim_fail(NULL, rr, "ncclGroupEnd: the real NCCL's failed: %s", shim_real_error(NULL)));
    }
    if (group.depth > 0)
        return r;
    for (int i = 0; i < group.nsplits; i++) {
        HeldSplit *s = &group.splits[i];
        r = first(r, shim_group_split_done(s->parent, s->child, s->newcomm));
    }
    free(group.splits);
    group.splits = NULL;
    group.nsplits = 0;
    if (group.nsteps)
        r = first(r, run_steps());
    r = first(r, sync_touched());
    for (int i = 0; i < group.nkept; i++)
        free(group.kept[i]);
    free(group.kept);
    group.kept = NULL;
    group.nkept = 0;
    if (group.failed != ncclSuccess) {
        r = shim_fail(NULL, group.failed, "ncclGroupEnd: a call of the group failed: %s", group.why);
        group.failed = ncclSuccess;
    }
    return r;
}

ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo)
{
    (void)simInfo;
    return shim_fail(NULL, ncclInvalidUsage, "ncclGroupSimulateEnd: libccl_nccl cannot simulate a group (the group "
                     "stays open: end it with ncclGroupEnd)");
}

/* NCCL's profiling names. */
SHIM_PROFILING_NAME(ncclGroupStart);
SHIM_PROFILING_NAME(ncclGroupEnd);
SHIM_PROFILING_NAME(ncclGroupSimulateEnd);
