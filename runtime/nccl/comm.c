/* comm.c: NCCL's communicators over libccl's (and the real NCCL's).
 *
 * Takes NCCL's init, split, shrink, finalize, destroy and abort calls and the queries;
 * gives each ncclComm_t its ccl_comm_t and, where the comm runs on GPUs, a real
 * libnccl is found and some route may send calls to NCCL (route.c), a real NCCL
 * communicator on the same ranks in the same order. Every rank decides alike whether
 * the real one exists: the decision is voted on over the rendezvous (ncclCommInitRank)
 * or made once for all ranks (ncclCommInitAll), so no rank waits in a real init its
 * peers skipped.
 *
 * The registry of live comms is registry.c's; the calls that make a comm and may sit in
 * a group (init by id, split, shrink) are create.c's, over this file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

/* ---- handles ---- */

ncclComm_t shim_comm_new(void)
{
    ncclComm_t c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->idle, NULL);
    c->device = -1;
    return c;
}

void shim_comm_free(ncclComm_t c)
{
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->idle);
    free(c->redops);
    c->magic = 0;
    free(c);
}

/* Destroys a real comm that no live comm holds (an init or split that failed halfway).
 * registry.c knows it for the length of the call: the real destroy asks
 * ncclCommGetAsyncError about it by name (NCCL's ncclCommEnsureReady), which must go
 * back to the real library. */
static void real_destroy(const ShimReal *real, ncclComm_t rc)
{
    shim_real_adopt(rc);
    real->CommDestroy(rc);
    shim_real_drop(rc);
}

void shim_comm_discard(ncclComm_t c)
{
    if (!c)
        return;
    if (c->ccl)
        ccl_comm_destroy(c->ccl);
    const ShimReal *real = shim_real_loaded();
    if (c->real && real)
        real_destroy(real, c->real);
    shim_comm_free(c);
}

ncclResult_t shim_comm_publish(ncclComm_t c, const ShimRoute routes[SHIM_NUM_COLLS], const char *fn)
{
    const ShimReal *real = shim_real_loaded();
    if (c->ccl) {
        ccl_comm_rank(c->ccl, &c->rank);
        ccl_comm_size(c->ccl, &c->nranks);
        ccl_comm_backend(c->ccl, &c->backend);
    } else if (c->real && real) {
        real->CommUserRank(c->real, &c->rank);
        real->CommCount(c->real, &c->nranks);
        c->backend = CCL_BACKEND_GPU;
        if (c->device < 0)
            real->CommCuDevice(c->real, &c->device);
    }
    memcpy(c->routes, routes, sizeof c->routes);
    char lerr[512];
    if (shim_auto_limits_parse(getenv("CCL_NCCL_AUTO_LIMIT"), c->nranks, c->backend == CCL_BACKEND_GPU, c->auto_limit,
                               lerr, sizeof lerr) != 0) /* checked at the init's start: cannot fail here */
        for (int k = 0; k < SHIM_NUM_COLLS; k++)
            c->auto_limit[k] = SIZE_MAX;
    c->magic = SHIM_COMM_MAGIC;
    shim_real_adopt(c->real);
    shim_comm_register(c);
    if (shim_log_level() >= SHIM_LOG_INFO) {
        char r[512];
        shim_routes_describe(routes, r, sizeof r);
        shim_log(SHIM_LOG_INFO, c->rank, "%s: comm %p%s%s ready: rank %d of %d, device %d, libccl's %s backend%s; "
                 "the real NCCL: %s%s%s%s; routes: %s", fn, (void *)c, c->name[0] ? " " : "", c->name, c->rank,
                 c->nranks, c->device, c->backend == CCL_BACKEND_GPU ? "gpu" : "cpu",
                 c->ccl ? "" : " (not used: this comm is NCCL's only)",
                 c->real ? "used (" : "not used", c->real && real ? real->path : "", c->real ? ")" : "",
                 c->real ? "" : !shim_real_fits(c->backend) ? " (the cpu backend's buffers are host memory)"
                 : !shim_routes_want_nccl(routes) ? " (CCL_NCCL_ROUTE sends everything to libccl)"
                 : shim_real_loaded() ? " (not every rank could use it)" : " (none found)", r);
    }
    return ncclSuccess;
}

ncclResult_t shim_routes_from_env(ShimRoute routes[SHIM_NUM_COLLS], const char *fn)
{
    char err[512];
    size_t limits[SHIM_NUM_COLLS];
    if (shim_routes_parse(getenv("CCL_NCCL_ROUTE"), routes, err, sizeof err) != 0 ||
        shim_auto_limits_parse(getenv("CCL_NCCL_AUTO_LIMIT"), 2, 0, limits, err, sizeof err) != 0)
        return shim_fail(NULL, ncclInvalidArgument, "%s: %s", fn, err);
    return ncclSuccess;
}

/* NCCL refuses a config that NCCL_CONFIG_INITIALIZER did not start. */
ncclResult_t shim_check_config(const ncclConfig_t *config, const char *fn)
{
    if (config && config->magic != 0xcafebeef)
        return shim_fail(NULL, ncclInvalidArgument, "%s: argument 'config' was not initialized with "
                         "NCCL_CONFIG_INITIALIZER (its magic is 0x%x)", fn, config->magic);
    return ncclSuccess;
}

/* The config the real NCCL gets: the user's, blocking (the shim's init returns once the
 * comm is ready; a non-blocking comm may do that too). */
ncclConfig_t *shim_real_config(const ncclConfig_t *config, ncclConfig_t *copy)
{
    if (!config)
        return NULL;
    ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
    *copy = init;
    size_t n = config->size && config->size < sizeof *copy ? config->size : sizeof *copy;
    memcpy(copy, config, n);
    copy->size = n;
    copy->blocking = 1;
    return copy;
}

void shim_copy_name(ncclComm_t c, const ncclConfig_t *config)
{
    if (config && config->commName)
        snprintf(c->name, sizeof c->name, "%s", config->commName);
}

/* ---- ids and init by rank ---- */

ncclResult_t ncclGetVersion(int *version)
{
    if (!version)
        return shim_fail(NULL, ncclInvalidArgument, "ncclGetVersion: argument 'version' is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

/* Set while this thread is inside the real ncclCommInitAll, which calls
 * ncclGetUniqueId by its name (the call lands here, see registry.c) and needs the real
 * library's id, not the shim's. */
static _Thread_local int in_real_init_all;

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    const ShimReal *inner = in_real_init_all ? shim_real_loaded() : NULL;
    if (inner)
        return inner->GetUniqueId(uniqueId);
    ShimRoute routes[SHIM_NUM_COLLS];
    ncclResult_t r = shim_routes_from_env(routes, "ncclGetUniqueId");
    if (r != ncclSuccess)
        return r;
    /* NCCL's own id, made here where its root thread will live, when this job may use
     * NCCL; whether it does is decided at the init. */
    ncclUniqueId real_id;
    const ShimReal *real = (!shim_env_cpu() || shim_real_on_cpu()) && shim_routes_want_nccl(routes) ? shim_real()
                                                                                              : NULL;
    int have_real = real && real->GetUniqueId(&real_id) == ncclSuccess;
    if (real && !have_real)
        shim_log(SHIM_LOG_INFO, -1, "ncclGetUniqueId: the real NCCL's ncclGetUniqueId failed (%s): this job runs "
                 "on libccl only", shim_real_error(NULL));
    return shim_id_make(uniqueId, have_real ? &real_id : NULL);
}

/* What every rank says about the real NCCL at the init. */
typedef struct {
    int32_t want;   /* the real comm is wanted (gpu backend, a route that may use NCCL, a real id) */
    int32_t can;    /* ... and this rank has a real library */
} RealVote;

/* Why the ranks do not use NCCL, for a route that needs it. */
static void no_real_reason(const RealVote *votes, int n, ccl_backend_t backend, int has_real, char *buf, size_t len)
{
    if (!shim_real_fits(backend)) {
        snprintf(buf, len, "this communicator runs on libccl's cpu backend (host memory; CCL_BACKEND=cpu is a test "
                 "mode), where NCCL cannot run");
        return;
    }
    if (!has_real) {
        snprintf(buf, len, "the unique id carries no real NCCL id (where ncclGetUniqueId ran: %s)",
                 shim_real_loaded() ? "its ncclGetUniqueId failed" : "no real libnccl, or CCL_BACKEND=cpu there");
        return;
    }
    for (int p = 0; p < n; p++)
        if (!votes[p].can) {
            snprintf(buf, len, "rank %d has no real libnccl%s%s", p, shim_real_loaded() ? "" : ": ",
                     shim_real_loaded() ? "" : shim_real_why());
            return;
        }
    snprintf(buf, len, "not every rank wants it");
}

/* ncclCommInitRankScalable's other ids: rank 0 stops their roots (no rank joins them:
 * every rank meets at ids[0]'s) and takes the real NCCL ids they carry, and every rank
 * gets those. real_ids[0] is ids[0]'s already. 1 when real_ids is complete. */
static int scalable_real_ids(ShimClient *cl, int nranks, int rank, int nid, const ShimId *sids, int has_real,
                             ncclUniqueId *real_ids)
{
    size_t bytes = 4 + (size_t)(nid - 1) * NCCL_UNIQUE_ID_BYTES;
    unsigned char *mine = calloc(1, bytes), *all = malloc(bytes * (size_t)nranks);
    int complete = 0;
    if (mine && all) {
        if (rank == 0) {
            int ok = 1;
            for (int k = 1; k < nid; k++) {
                char err[256];
                int hr = 0;
                ncclUniqueId rid;
                if (shim_id_release(&sids[k], &rid, &hr, err, sizeof err) != 0) {
                    shim_log(SHIM_LOG_INFO, 0, "ncclCommInitRankScalable: id %d's root at %s: %s", k, sids[k].text,
                             err);
                    ok = 0;
                } else {
                    ok &= hr == has_real;
                    memcpy(mine + 4 + (size_t)(k - 1) * NCCL_UNIQUE_ID_BYTES, rid.internal, NCCL_UNIQUE_ID_BYTES);
                }
            }
            mine[0] = (unsigned char)ok;
        }
        if (shim_client_allgather(cl, mine, all, bytes) == 0 && all[0]) {
            for (int k = 1; k < nid; k++)
                memcpy(real_ids[k].internal, all + 4 + (size_t)(k - 1) * NCCL_UNIQUE_ID_BYTES, NCCL_UNIQUE_ID_BYTES);
            complete = 1;
        }
    }
    free(mine);
    free(all);
    return complete;
}

/* The real NCCL comm for c, when every rank wants and can have one: ncclSuccess with
 * c->real set or left NULL (auto routes go to libccl then), or the failure when a route
 * needs NCCL and the ranks cannot have it, or the real init failed. Collective over cl. */
static ncclResult_t init_real(ncclComm_t c, ShimClient *cl, const ShimRoute *routes, int has_real, int nid,
                              ncclUniqueId *real_ids, int scalable_ok, const ncclConfig_t *config, const char *fn)
{
    const ShimReal *real = NULL;
    RealVote mine = {.want = has_real && shim_real_fits(c->backend) && shim_routes_want_nccl(routes)};
    if (mine.want)
        real = shim_real();
    mine.can = real != NULL;
    RealVote *votes = calloc((size_t)c->nranks, sizeof *votes);
    if (!votes)
        return shim_fail(NULL, ncclSystemError, "%s: out of memory", fn);
    if (shim_client_allgather(cl, &mine, votes, sizeof mine) != 0) {
        free(votes);
        return shim_fail(NULL, shim_client_code(cl), "%s: rank %d: %s", fn, c->rank, shim_client_why(cl));
    }
    int use = 1;
    for (int p = 0; p < c->nranks; p++)
        use &= votes[p].want && votes[p].can;
    const char *need = shim_routes_need_nccl(routes);
    if (!use) {
        char why[512];
        no_real_reason(votes, c->nranks, c->backend, has_real, why, sizeof why);
        free(votes);
        if (need)
            return shim_fail(NULL, ncclInvalidUsage, "%s: rank %d: CCL_NCCL_ROUTE sends %s to NCCL, but %s", fn,
                             c->rank, need, why);
        return ncclSuccess;
    }
    free(votes);
    ncclConfig_t copy;
    ncclConfig_t *cfg = shim_real_config(config, &copy);
    ncclResult_t rr;
    if (nid > 1 && scalable_ok && real->CommInitRankScalable)
        rr = real->CommInitRankScalable(&c->real, c->nranks, c->rank, nid, real_ids, cfg);
    else
        rr = real->CommInitRankConfig(&c->real, c->nranks, real_ids[0], c->rank, cfg);
    char why[SHIM_ERR_LEN];
    snprintf(why, sizeof why, "%s", rr == ncclSuccess ? "" : shim_real_error(NULL));
    /* Every rank learns whether every real init succeeded, and keeps its real comm only
     * if all did (else the routes would differ among ranks). */
    int32_t ok = rr == ncclSuccess, *oks = calloc((size_t)c->nranks, sizeof *oks);
    int all_ok = oks && shim_client_allgather(cl, &ok, oks, sizeof ok) == 0;
    int failed = -1;
    for (int p = 0; all_ok && p < c->nranks; p++)
        if (!oks[p] && failed < 0)
            failed = p;
    free(oks);
    if (all_ok && failed < 0)
        return ncclSuccess;
    if (c->real)
        real_destroy(real, c->real);
    c->real = NULL;
    if (!need && all_ok) {
        shim_log(SHIM_LOG_WARN, c->rank, "%s: the real NCCL's init failed on rank %d%s%s: this comm runs on libccl "
                 "only", fn, failed, rr != ncclSuccess ? ": " : "", why);
        return ncclSuccess;
    }
    if (!all_ok)
        return shim_fail(NULL, shim_client_code(cl), "%s: rank %d: %s", fn, c->rank, shim_client_why(cl));
    return shim_fail(NULL, rr != ncclSuccess ? rr : ncclRemoteError, "%s: rank %d: the real NCCL's init failed on "
                     "rank %d%s%s", fn, c->rank, failed, rr != ncclSuccess ? ": " : "", why);
}

ncclResult_t shim_init_rank_now(ncclComm_t *out, int nranks, int nid, const ncclUniqueId *ids, int rank,
                                const ncclConfig_t *config, const char *fn)
{
    ShimRoute routes[SHIM_NUM_COLLS];
    ncclResult_t r = shim_routes_from_env(routes, fn);
    if (r != ncclSuccess)
        return r;
    ShimId *sids = calloc((size_t)nid, sizeof *sids);
    ncclUniqueId *real_ids = calloc((size_t)nid, sizeof *real_ids);
    ncclComm_t c = shim_comm_new();
    ShimClient *cl = NULL;
    if (!sids || !real_ids || !c) {
        r = shim_fail(NULL, ncclSystemError, "%s: out of memory", fn);
        goto fail;
    }
    char err[512];
    for (int k = 0; k < nid; k++)
        if (shim_id_parse(&ids[k], &sids[k], err, sizeof err) != 0) {
            r = shim_fail(NULL, ncclInvalidArgument, "%s: argument '%s'%s: %s", fn, nid > 1 ? "commIds" : "commId",
                          nid > 1 ? " (an entry)" : "", err);
            goto fail;
        }
    int has_real = 0;
    if (!(cl = shim_client_join(&sids[0], nranks, rank, &real_ids[0], &has_real, &r, err, sizeof err))) {
        r = shim_fail(NULL, r, "%s: rank %d of %d: %s", fn, rank, nranks, err);
        goto fail;
    }
    int scalable_ok = nid > 1 && scalable_real_ids(cl, nranks, rank, nid, sids, has_real, real_ids);
    /* The rank's GPU is the thread's current device, as NCCL's is. */
    c->device = shim_env_cpu() ? 0 : shim_current_device();
    ccl_bootstrap_t boot = shim_client_bootstrap(cl);
    ccl_result_t cr = ccl_comm_init_rank(&c->ccl, &boot, c->device < 0 ? CCL_DEVICE_AUTO : c->device, NULL);
    if (cr != CCL_OK) {
        r = shim_fail_ccl(NULL, cr, NULL, fn);
        goto fail;
    }
    ccl_comm_rank(c->ccl, &c->rank);
    ccl_comm_size(c->ccl, &c->nranks);
    ccl_comm_backend(c->ccl, &c->backend);
    if (c->device < 0)
        c->device = 0;
    if ((r = init_real(c, cl, routes, has_real, nid, real_ids, scalable_ok, config, fn)) != ncclSuccess)
        goto fail;
    shim_client_leave(cl);
    free(sids);
    free(real_ids);
    shim_copy_name(c, config);
    *out = c;
    return shim_comm_publish(c, routes, fn);
fail:
    shim_client_leave(cl); /* the root tells the other ranks at once */
    shim_comm_discard(c);
    free(sids);
    free(real_ids);
    return r;
}

/* ---- one process, every rank ---- */

ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
    const char *fn = "ncclCommInitAll";
    if (!comm)
        return shim_fail(NULL, ncclInvalidArgument, "%s: argument 'comm' is NULL", fn);
    if (ndev < 1)
        return shim_fail(NULL, ncclInvalidArgument, "%s: argument 'ndev' is %d (at least 1)", fn, ndev);
    for (int i = 0; devlist && i < ndev; i++)
        if (devlist[i] < 0)
            return shim_fail(NULL, ncclInvalidArgument, "%s: argument 'devlist': devlist[%d] is %d", fn, i,
                             devlist[i]);
    for (int i = 0; i < ndev; i++)
        comm[i] = NULL;
    ShimRoute routes[SHIM_NUM_COLLS];
    ncclResult_t r = shim_routes_from_env(routes, fn);
    if (r != ncclSuccess)
        return r;
    ncclComm_t *cs = calloc((size_t)ndev, sizeof *cs);
    ccl_comm_t **cc = calloc((size_t)ndev, sizeof *cc);
    ncclComm_t *reals = calloc((size_t)ndev, sizeof *reals);
    for (int i = 0; cs && i < ndev; i++)
        if (!(cs[i] = shim_comm_new()))
            r = ncclSystemError;
    if (!cs || !cc || !reals || r != ncclSuccess) {
        r = shim_fail(NULL, ncclSystemError, "%s: out of memory", fn);
        goto out;
    }
    ccl_result_t cr = ccl_comm_init_all(cc, ndev, devlist, NULL);
    if (cr != CCL_OK) {
        r = shim_fail_ccl(NULL, cr, NULL, fn);
        goto out;
    }
    ccl_backend_t backend;
    ccl_comm_backend(cc[0], &backend);
    const char *need = shim_routes_need_nccl(routes);
    const ShimReal *real = shim_real_fits(backend) && shim_routes_want_nccl(routes) ? shim_real() : NULL;
    if (need && !real) {
        r = shim_fail(NULL, ncclInvalidUsage, "%s: CCL_NCCL_ROUTE sends %s to NCCL, but %s", fn, need,
                      !shim_real_fits(backend) ? "these communicators run on libccl's cpu backend (host memory; "
                      "CCL_BACKEND=cpu is a test mode), where NCCL cannot run" : shim_real_why());
        goto out;
    }
    in_real_init_all = 1;
    r = real ? real->CommInitAll(reals, ndev, devlist) : ncclSuccess;
    in_real_init_all = 0;
    if (r != ncclSuccess) {
        const char *why = shim_real_error(NULL);
        for (int i = 0; i < ndev; i++)
            reals[i] = NULL;
        if (need) {
            r = shim_fail(NULL, r, "%s: the real NCCL's ncclCommInitAll failed: %s", fn, why);
            goto out;
        }
        shim_log(SHIM_LOG_WARN, -1, "%s: the real NCCL's ncclCommInitAll failed (%s): these comms run on libccl "
                 "only", fn, why);
        r = ncclSuccess;
    }
    for (int i = 0; i < ndev; i++) {
        cs[i]->ccl = cc[i];
        cs[i]->real = reals[i];
        cs[i]->device = devlist ? devlist[i] : i;
        cs[i]->shared_thread = ndev > 1;
        cc[i] = NULL;
        shim_comm_publish(cs[i], routes, fn);
        comm[i] = cs[i];
        cs[i] = NULL;
    }
out:
    for (int i = 0; cs && i < ndev; i++) {
        if (cc && cc[i])
            ccl_comm_destroy(cc[i]);
        if (cs[i])
            shim_comm_free(cs[i]);
    }
    free(cs);
    free(cc);
    free(reals);
    return r;
}

/* ---- split and shrink ---- */

/* Makes a split's child live, or frees it when this rank joined no child; *newcomm is
 * the comm or NULL. */
ncclResult_t shim_split_finish(ncclComm_t parent, ncclComm_t child, ncclComm_t *newcomm, const char *fn)
{
    if (!child->ccl && !child->real) {
        shim_comm_free(child);
        *newcomm = NULL;
        return ncclSuccess;
    }
    if ((parent->ccl && !child->ccl) || (parent->real && !child->real)) {
        shim_comm_discard(child);
        *newcomm = NULL;
        return shim_fail(parent, ncclInternalError, "%s: libccl and the real NCCL disagree on whether rank %d "
                         "joins a new communicator", fn, parent->rank);
    }
    child->device = parent->device;
    child->shared_thread = parent->shared_thread;
    *newcomm = child;
    return shim_comm_publish(child, parent->routes, fn);
}

/* Called by the group's end for a split it held. */
ncclResult_t shim_group_split_done(ncclComm_t parent, ncclComm_t child, ncclComm_t *newcomm)
{
    return shim_split_finish(parent, child, newcomm, "ncclCommSplit");
}

/* ---- the end of a communicator ---- */

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    const char *fn = "ncclCommFinalize";
    ncclResult_t r = shim_comm_get(comm, fn);
    if (r != ncclSuccess)
        return r;
    if (comm->finalized) {
        shim_comm_put(comm);
        return shim_fail(comm, ncclInvalidUsage, "%s: the communicator was finalized already", fn);
    }
    comm->finalized = 1;
    ccl_result_t cr = comm->ccl && !comm->aborted ? ccl_comm_synchronize(comm->ccl) : CCL_OK;
    if (cr != CCL_OK)
        r = shim_fail_ccl(comm, cr, comm->ccl, fn);
    const ShimReal *real = shim_real_loaded();
    if (comm->real && real && real->CommFinalize) {
        ncclResult_t rr = real->CommFinalize(comm->real);
        if (rr != ncclSuccess && r == ncclSuccess)
            r = shim_fail(comm, rr, "%s: the real NCCL's ncclCommFinalize failed: %s", fn, shim_real_error(comm->real));
    }
    shim_comm_put(comm);
    return r;
}

/* The routing summary, where CCL_NCCL_SUMMARY=1 or CCL_DEBUG=INFO asks. */
static void say_summary(ncclComm_t comm, const char *fn)
{
    const char *v = getenv("CCL_NCCL_SUMMARY");
    int asked = v && !strcmp(v, "1");
    if (!asked && shim_log_level() < SHIM_LOG_INFO)
        return;
    char line[1024];
    shim_summary(comm, line, sizeof line);
    if (asked)
        fprintf(stderr, "ccl-nccl: rank %d of %d%s%s: %s\n", comm->rank, comm->nranks, comm->name[0] ? ", " : "",
                comm->name, line);
    else
        shim_log(SHIM_LOG_INFO, comm->rank, "%s: comm %p: %s", fn, (void *)comm, line);
}

static ncclResult_t comm_end(ncclComm_t comm, int abort, const char *fn)
{
    if (!comm)
        return ncclSuccess; /* as NCCL */
    ncclResult_t r = shim_comm_retire(comm, fn, abort);
    if (r != ncclSuccess)
        return r;
    say_summary(comm, fn);
    if (comm->drop_regs)
        comm->drop_regs(comm);
    if (comm->ccl) {
        ccl_result_t cr = ccl_comm_destroy(comm->ccl);
        if (cr != CCL_OK && !abort)
            r = shim_fail(NULL, shim_result(cr), "%s: %s", fn, ccl_comm_last_error(NULL));
    }
    const ShimReal *real = shim_real_loaded();
    if (comm->real && real) {
        ncclResult_t rr = abort ? real->CommAbort(comm->real) : real->CommDestroy(comm->real);
        if (rr != ncclSuccess && r == ncclSuccess)
            r = shim_fail(NULL, rr, "%s: the real NCCL's %s failed: %s", fn, abort ? "ncclCommAbort" : "ncclCommDestroy",
                          shim_real_error(NULL));
    }
    shim_real_drop(comm->real);
    shim_comm_free(comm);
    return r;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    return comm_end(comm, 0, "ncclCommDestroy");
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    return comm_end(comm, 1, "ncclCommAbort");
}

/* Stops the comm's work; it stays to be destroyed (or shrunk, on NCCL's side). libccl's
 * half is aborted: its later calls fail. */
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags)
{
    const char *fn = "ncclCommRevoke";
    ncclResult_t r = shim_comm_get(comm, fn);
    if (r != ncclSuccess)
        return r;
    if (revokeFlags != NCCL_REVOKE_DEFAULT) {
        shim_comm_put(comm);
        return shim_fail(comm, ncclInvalidArgument, "%s: argument 'revokeFlags' is %d (must be NCCL_REVOKE_DEFAULT)",
                         fn, revokeFlags);
    }
    comm->aborted = 1;
    if (comm->ccl)
        ccl_comm_abort(comm->ccl);
    const ShimReal *real = shim_real_loaded();
    if (comm->real && real && real->CommRevoke && (r = real->CommRevoke(comm->real, revokeFlags)) != ncclSuccess)
        r = shim_fail(comm, r, "%s: the real NCCL's ncclCommRevoke failed: %s", fn, shim_real_error(comm->real));
    shim_comm_put(comm);
    return r;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    const char *fn = "ncclCommGetAsyncError";
    const ShimReal *pass;
    ncclResult_t r = shim_comm_get_or_real(comm, fn, &pass);
    if (r != ncclSuccess)
        return r;
    if (pass) /* the real library's own call (NCCL's ncclCommEnsureReady) */
        return pass->CommGetAsyncError(comm, asyncError);
    if (!asyncError) {
        shim_comm_put(comm);
        return shim_fail(comm, ncclInvalidArgument, "%s: argument 'asyncError' is NULL", fn);
    }
    ccl_result_t cr = CCL_OK;
    if (comm->ccl)
        ccl_comm_get_async_error(comm->ccl, &cr);
    *asyncError = shim_result(cr);
    if (cr != CCL_OK) {
        /* libccl gives the text of an asynchronous failure with the comm's next call (it
         * cannot be read from another thread); keep what an earlier call said. */
        pthread_mutex_lock(&comm->mu);
        int have = comm->last_error[0] != 0;
        pthread_mutex_unlock(&comm->mu);
        if (!have)
            shim_fail(comm, *asyncError, "%s: libccl reports an asynchronous failure on rank %d: %s (its message "
                      "comes with the comm's next call)", fn, comm->rank, ccl_result_string(cr));
    }
    const ShimReal *real = shim_real_loaded();
    ncclResult_t rr = ncclSuccess;
    if (*asyncError == ncclSuccess && comm->real && real && real->CommGetAsyncError(comm->real, &rr) == ncclSuccess &&
        rr != ncclSuccess) {
        *asyncError = rr;
        if (rr != ncclInProgress)
            shim_fail(comm, rr, "%s: the real NCCL reports an asynchronous failure: %s", fn,
                      shim_real_error(comm->real));
    }
    shim_comm_put(comm);
    return ncclSuccess;
}

/* ---- queries ---- */

static ncclResult_t query(const ncclComm_t comm, int *out, int what, const char *fn, const char *arg)
{
    ncclResult_t r = shim_comm_get(comm, fn);
    if (r != ncclSuccess)
        return r;
    if (!out)
        r = shim_fail(comm, ncclInvalidArgument, "%s: argument '%s' is NULL", fn, arg);
    else
        *out = what == 0 ? comm->nranks : what == 1 ? comm->rank : comm->device;
    shim_comm_put(comm);
    return r;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    return query(comm, count, 0, "ncclCommCount", "count");
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    return query(comm, rank, 1, "ncclCommUserRank", "rank");
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    return query(comm, device, 2, "ncclCommCuDevice", "device");
}

/* NCCL's profiling names. */
/* ncclGetLastError(comm): the comm's last failure, also when another thread asks (a
 * copy, so the caller's pointer stays valid while the comm's thread fails again);
 * ncclGetLastError(NULL), or a comm with none: this thread's. */
const char *ncclGetLastError(ncclComm_t comm)
{
    static _Thread_local char copy[SHIM_ERR_LEN];
    if (comm && shim_comm_hold(comm)) {
        pthread_mutex_lock(&comm->mu);
        memcpy(copy, comm->last_error, sizeof copy);
        pthread_mutex_unlock(&comm->mu);
        shim_comm_put(comm);
        if (copy[0])
            return copy;
    }
    return shim_thread_error();
}

SHIM_PROFILING_NAME(ncclGetVersion);
SHIM_PROFILING_NAME(ncclGetUniqueId);
SHIM_PROFILING_NAME(ncclCommInitAll);
SHIM_PROFILING_NAME(ncclCommFinalize);
SHIM_PROFILING_NAME(ncclCommDestroy);
SHIM_PROFILING_NAME(ncclCommAbort);
SHIM_PROFILING_NAME(ncclCommRevoke);
SHIM_PROFILING_NAME(ncclCommGetAsyncError);
SHIM_PROFILING_NAME(ncclCommCount);
SHIM_PROFILING_NAME(ncclCommUserRank);
SHIM_PROFILING_NAME(ncclCommCuDevice);
SHIM_PROFILING_NAME(ncclGetLastError);
