/* comm.c: communicators: creation, splitting, synchronize, abort, destroy, and the
 * symmetric heap's ccl_mem_alloc and ccl_mem_free (registered memory is register.c's).
 *
 * A communicator is created collectively: ccl_comm_init_rank (one process per rank,
 * over the user's bootstrap) or ccl_comm_init_all (one process, one thread per rank over
 * an in-process bootstrap, running the very same per-rank code). The backend's
 * comm_init makes the symmetric heap, over the user's bootstrap as checked by
 * boot_check.c; everything after that is local to the rank.
 *
 * Errors are error.c's: messages go to the comm's last_error (user's thread) or, from
 * backends' worker threads, to async_error, which ccl_comm_synchronize reports. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* ---- the in-process bootstrap ---- */

struct CclThreadBoot {
    int nranks;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived, failed;
    unsigned long gen;
    char *buf;
    size_t cap;
    struct ThreadBootCtx { CclThreadBoot *tb; int rank; } *ctx;
};

static int tb_barrier_locked(CclThreadBoot *tb)
{
    if (tb->failed)
        return -1;
    unsigned long gen = tb->gen;
    if (++tb->arrived == tb->nranks) {
        tb->arrived = 0;
        tb->gen++;
        pthread_cond_broadcast(&tb->cv);
    } else {
        while (tb->gen == gen && !tb->failed)
            pthread_cond_wait(&tb->cv, &tb->mu);
    }
    return tb->gen == gen ? -1 : 0;
}

static int tb_barrier(void *vctx)
{
    struct ThreadBootCtx *c = vctx;
    pthread_mutex_lock(&c->tb->mu);
    int r = tb_barrier_locked(c->tb);
    pthread_mutex_unlock(&c->tb->mu);
    return r;
}

static int tb_allgather(void *vctx, const void *in, void *out, size_t bytes)
{
    struct ThreadBootCtx *c = vctx;
    CclThreadBoot *tb = c->tb;
    pthread_mutex_lock(&tb->mu);
    int r = -1;
    /* Every rank's previous allgather ended with a barrier, so nobody reads buf now. */
    size_t need = bytes * (size_t)tb->nranks;
    if (need > tb->cap) {
        char *nb = realloc(tb->buf, need);
        if (!nb) {
            tb->failed = 1;
            pthread_cond_broadcast(&tb->cv);
            goto out;
        }
        tb->buf = nb;
        tb->cap = need;
    }
    memcpy(tb->buf + bytes * (size_t)c->rank, in, bytes);
    if (tb_barrier_locked(tb) != 0)
        goto out;
    memcpy(out, tb->buf, need);
    r = tb_barrier_locked(tb);
out:
    pthread_mutex_unlock(&tb->mu);
    return r;
}

CclThreadBoot *ccl__thread_boot_new(int nranks, ccl_bootstrap_t *boots)
{
    CclThreadBoot *tb = calloc(1, sizeof *tb);
    if (!tb)
        return NULL;
    tb->ctx = calloc((size_t)nranks, sizeof *tb->ctx);
    if (!tb->ctx) {
        free(tb);
        return NULL;
    }
    tb->nranks = nranks;
    pthread_mutex_init(&tb->mu, NULL);
    pthread_cond_init(&tb->cv, NULL);
    for (int r = 0; r < nranks; r++) {
        tb->ctx[r] = (struct ThreadBootCtx){tb, r};
        boots[r] = (ccl_bootstrap_t){.nranks = nranks, .rank = r, .allgather = tb_allgather,
                                     .barrier = tb_barrier, .ctx = &tb->ctx[r]};
    }
    return tb;
}

void ccl__thread_boot_fail(CclThreadBoot *tb)
{
    pthread_mutex_lock(&tb->mu);
    tb->failed = 1;
    pthread_cond_broadcast(&tb->cv);
    pthread_mutex_unlock(&tb->mu);
}

void ccl__thread_boot_free(CclThreadBoot *tb)
{
    if (!tb)
        return;
    pthread_mutex_destroy(&tb->mu);
    pthread_cond_destroy(&tb->cv);
    free(tb->buf);
    free(tb->ctx);
    free(tb);
}

/* ---- creation ---- */

static int env_int(const char *name, long long lo, long long hi, long long *out)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    int shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10, end++;
    else if (*end == 'M' || *end == 'm')
        shift = 20, end++;
    else if (*end == 'G' || *end == 'g')
        shift = 30, end++;
    /* The bounds apply to the value with its unit (checked before shifting: no overflow). */
    if (errno || *end || v < 0 || v > (hi >> shift) || (v << shift) < lo)
        return -1;
    *out = v << shift;
    return 1;
}

ccl_result_t ccl__config_timeout(const ccl_config_t *config, const char *fn, int *out)
{
    if (config && config->timeout_ms < 0)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'config': timeout_ms %d is negative", fn,
                              config->timeout_ms);
    if (config && config->timeout_ms) {
        *out = config->timeout_ms;
        return CCL_OK;
    }
    long long v;
    int e = env_int("CCL_TIMEOUT_MS", 1, 1LL << 30, &v);
    if (e < 0)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: CCL_TIMEOUT_MS='%s' is not a positive number of "
                              "milliseconds", fn, getenv("CCL_TIMEOUT_MS"));
    *out = e ? (int)v : CCL_DEFAULT_TIMEOUT_MS;
    return CCL_OK;
}

static const CclBackend *pick_backend(ccl_backend_t want, char *why, size_t len)
{
    const char *env = getenv("CCL_BACKEND");
    if (want == CCL_BACKEND_AUTO && env && !strcmp(env, "cpu"))
        want = CCL_BACKEND_CPU;
    if (want == CCL_BACKEND_AUTO && env && !strcmp(env, "gpu"))
        want = CCL_BACKEND_GPU;
    if (want == CCL_BACKEND_CPU)
        return &ccl__cpu_backend;
    const CclBackend *gpu = NULL;
#ifdef CCL_HAVE_GPU_BACKEND
    gpu = ccl__gpu_backend(why, len);
#else
    snprintf(why, len, "this libccl was built without the GPU backend");
#endif
    if (want == CCL_BACKEND_GPU)
        return gpu;
    return gpu ? gpu : &ccl__cpu_backend;
}

static ccl_result_t comm_create_body(ccl_comm_t **out, const ccl_bootstrap_t *boot, const ccl_net_t *net,
                                     int ranks_per_node, int device, const ccl_config_t *config, const char *fn);
static ccl_result_t comm_create_net(ccl_comm_t **out, const ccl_bootstrap_t *boot, const ccl_net_t *net,
                                    int ranks_per_node, int device, const ccl_config_t *config, const char *fn);

/* Backend auto found no usable GPU and runs on the CPU: said once per process (a WARN
 * line), so that nobody times host threads believing they are GPUs. Asking for the CPU
 * (config or CCL_BACKEND=cpu) says nothing. */
static void note_cpu_fallback(int rank, const char *why)
{
    static atomic_flag said = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&said))
        CCL__LOG(CCL__LOG_WARN, CCL__SUB_INIT, rank, "backend auto: no usable GPU backend (%s): communicators run on "
                 "the CPU backend (host threads and memory); ask for it (ccl_config_t.backend, CCL_BACKEND=cpu) to "
                 "say so on purpose", why);
}

/* The per-rank part of both init calls (and of ccl_comm_split), inside its NVTX range.
 * On failure *out is NULL and the message is in this thread's init error. */
static ccl_result_t comm_create(ccl_comm_t **out, const ccl_bootstrap_t *boot, int device,
                                const ccl_config_t *config, const char *fn)
{
    return comm_create_net(out, boot, NULL, 0, device, config, fn);
}

static ccl_result_t comm_create_net(ccl_comm_t **out, const ccl_bootstrap_t *boot, const ccl_net_t *net,
                                    int ranks_per_node, int device, const ccl_config_t *config, const char *fn)
{
    *out = NULL;
    ccl__log_init();
    ccl__range_push(fn);
    ccl_result_t rr = comm_create_body(out, boot, net, ranks_per_node, device, config, fn);
    if (rr != CCL_OK && net && net->release)
        net->release(net->ctx); /* a comm that was made releases it at its destroy */
    return ccl__range_pop(rr);
}

/* The node layout of a new comm (docs/multinode.md): ranks_per_node, else
 * CCL_RANKS_PER_NODE, else (with a transport) the hosts, each a node of consecutive
 * ranks; one node otherwise. Collective (the hosts' exchange goes through boot). Several
 * nodes need the transport, the CPU backend and process mode. */
static ccl_result_t resolve_nodes(ccl_comm_t *c, const ccl_bootstrap_t *boot, const ccl_net_t *net, int rpn,
                                  const char *fn)
{
    int n = c->nranks;
    long long v;
    int e = rpn ? 0 : env_int("CCL_RANKS_PER_NODE", 1, n, &v);
    if (e < 0)
        return ccl__set_error(c, CCL_ERR_INVALID_ARGUMENT, "CCL_RANKS_PER_NODE='%s' is not a number of ranks from 1 "
                              "to %d", getenv("CCL_RANKS_PER_NODE"), n);
    if (e > 0)
        rpn = (int)v;
    if (!rpn && net) {
        typedef struct { char host[64]; } Host;
        Host me = {{0}}, *all = calloc((size_t)n, sizeof *all);
        if (!all)
            return ccl__set_error(c, CCL_ERR_OUT_OF_MEMORY, "out of memory");
        gethostname(me.host, sizeof me.host - 1);
        if (boot->allgather(boot->ctx, &me, all, sizeof me) != 0) {
            free(all);
            return ccl__set_error(c, CCL_ERR_PEER_FAILED, "bootstrap failed while the ranks exchanged host names");
        }
        rpn = 1;
        while (rpn < n && !strcmp(all[rpn].host, all[0].host))
            rpn++;
        for (int p = 0; p < n && rpn; p++)
            if (n % rpn || strcmp(all[p].host, all[p / rpn * rpn].host) ||
                (p % rpn == 0 && p && !strcmp(all[p].host, all[p - 1].host))) {
                ccl__set_error(c, CCL_ERR_INVALID_ARGUMENT, "the hosts do not hold equal runs of consecutive ranks "
                               "(rank %d is on %s, rank %d on %s): start the same number of ranks on every host, in "
                               "order, or set CCL_RANKS_PER_NODE", p / rpn * rpn, all[p / rpn * rpn].host, p,
                               all[p].host);
                rpn = 0;
            }
        free(all);
        if (!rpn)
            return CCL_ERR_INVALID_ARGUMENT;
    }
    if (!rpn)
        rpn = n;
    if (n % rpn)
        return ccl__set_error(c, CCL_ERR_INVALID_ARGUMENT, "%d ranks are not nodes of %d ranks (ranks_per_node or "
                              "CCL_RANKS_PER_NODE must divide the rank count)", n, rpn);
    c->local = rpn;
    c->nnodes = n / rpn;
    if (net)
        c->net = *net;      /* released at destroy, used or not */
    if (c->nnodes == 1)
        return CCL_OK;
    if (!net || !net->isend || !net->irecv || !net->test || !net->cancel)
        return ccl__set_error(c, CCL_ERR_INVALID_USAGE, "%d ranks of %d per node make %d nodes, whose traffic needs an "
                              "inter-node transport: create the communicator with ccl_comm_init_mpi_nodes (ccl_mpi.h), "
                              "ccl_comm_init_rank_id (a unique id over TCP, no MPI) or ccl_comm_init_rank_net", n, rpn,
                              c->nnodes);
    if (!net->thread_safe)
        return ccl__set_error(c, CCL_ERR_INVALID_USAGE, "argument 'net': the transport is not thread-safe, but libccl's "
                              "proxy thread calls it beside the application (initialize MPI with MPI_THREAD_MULTIPLE)");
    if (c->be->kind != CCL_BACKEND_CPU)
        return ccl__set_error(c, CCL_ERR_UNSUPPORTED, "a communicator of %d nodes runs on the CPU backend only so far "
                              "(docs/multinode.md)", c->nnodes);
    return CCL_OK;
}

static ccl_result_t comm_create_body(ccl_comm_t **out, const ccl_bootstrap_t *boot, const ccl_net_t *net,
                                     int ranks_per_node, int device, const ccl_config_t *config, const char *fn)
{
    ccl_config_t cfg = config ? *config : (ccl_config_t){0};
    if ((unsigned)cfg.backend > CCL_BACKEND_GPU)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'config': backend %d is not a ccl_backend_t", fn, (int)cfg.backend);
    long long v;
    int timeout;
    ccl_result_t tr = ccl__config_timeout(&cfg, fn, &timeout);
    if (tr != CCL_OK)
        return tr;
    size_t heap = cfg.heap_bytes;
    int heap_default = 0;
    if (!heap) {
        int e = env_int("CCL_HEAP_BYTES", 1, (long long)CCL__HEAP_MAX, &v);
        if (e < 0)
            return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: CCL_HEAP_BYTES='%s' is not a size from 1 byte to 64 TiB (a number of bytes, optionally with K, M or G)", fn, getenv("CCL_HEAP_BYTES"));
        heap = e ? (size_t)v : 0;
        heap_default = !e;
    }
    if (!heap_default && heap < 2 * (size_t)CCL__HEAP_DATA)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'config': heap_bytes %zu is below the minimum %zu", fn, heap, 2 * (size_t)CCL__HEAP_DATA);
    if (!heap_default && heap > CCL__HEAP_MAX)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'config': heap_bytes %zu is above the maximum %zu (64 TiB)", fn, heap, CCL__HEAP_MAX);
    /* The size of the regions calls share (call.c, "Regions"); 0: a quarter of the
     * heap, set once the backend has settled heap_bytes. */
    size_t region_cap = 0;
    int e = env_int("CCL_REGION_BYTES", 4096, (long long)CCL__HEAP_MAX, &v);
    if (e < 0)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: CCL_REGION_BYTES='%s' is not a size from 4 KiB to 64 TiB (a number of bytes, optionally with K, M or G)", fn, getenv("CCL_REGION_BYTES"));
    if (e)
        region_cap = (size_t)v;
    /* How exchanges run on one node (vcoll.c, ccl__exchange_p2p). */
    const char *ex = getenv("CCL_EXCHANGE");
    int exchange = !ex || !*ex || !strcmp(ex, "auto") ? 0 : !strcmp(ex, "p2p") ? 1 : !strcmp(ex, "programs") ? -1 : 2;
    if (exchange == 2)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: CCL_EXCHANGE='%s' is not auto, p2p or programs", fn,
                              ex);

    char why[256] = "";
    const CclBackend *be = pick_backend(cfg.backend, why, sizeof why);
    if (!be)
        return ccl__set_error(NULL, CCL_ERR_UNSUPPORTED, "%s: the GPU backend is not available: %s", fn, why);
    if (be->kind == CCL_BACKEND_CPU && why[0])
        note_cpu_fallback(boot->rank, why);
    if (heap_default)
        heap = be->kind == CCL_BACKEND_GPU ? CCL__HEAP_DEFAULT_GPU : CCL__HEAP_DEFAULT;
    heap = (heap + 4095) / 4096 * 4096;

    ccl_comm_t *c = calloc(1, sizeof *c);
    if (!c)
        return ccl__set_error(NULL, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    c->rank = boot->rank;
    c->nranks = boot->nranks;
    c->timeout_ms = timeout;
    c->device = device;
    c->heap_bytes = heap;
    c->heap_default = heap_default;
    c->exchange = exchange;
    c->be = be;
    c->backend_kind = be->kind;
    const char *cache = cfg.cache_dir ? cfg.cache_dir : getenv("CCL_CACHE_DIR");
    c->cache_dir = cache ? strdup(cache) : NULL;
    c->heap_base = calloc((size_t)c->nranks, sizeof *c->heap_base);
    pthread_mutex_init(&c->async_lock, NULL);
    if (!c->heap_base || (cache && !c->cache_dir)) {
        free(c->heap_base);
        free(c->cache_dir);
        free(c);
        return ccl__set_error(NULL, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    CclCheckedBoot cb;
    ccl_bootstrap_t checked;
    ccl__boot_checked(&cb, boot, &checked);
    ccl_result_t r = resolve_nodes(c, &checked, net, ranks_per_node, fn);
    /* The comm's own bootstrap, for what is collective later (ccl_comm_split): over the
     * ranks' host mailboxes; on a comm of several nodes, over its node's mailboxes and the
     * transport (node_mbox: split only), made before the backend starts its proxy on the
     * transport (the user's bootstrap may run over the same connections: tcpboot.c). */
    if (r == CCL_OK && c->nnodes > 1)
        r = ccl__mbox_open(c, &checked, &c->node_mbox);
    int made = r == CCL_OK && (r = be->comm_init(c, &checked)) == CCL_OK;
    if (made && c->nnodes == 1 && (r = ccl__mbox_open(c, &checked, &c->mbox)) != CCL_OK)
        be->comm_fini(c);
    c->notes = ccl__mbox_notes(c->mbox);
    if (r != CCL_OK) {
        ccl__mbox_close(c->node_mbox);
        c->node_mbox = NULL;
    }
    if (r != CCL_OK && cb.why[0]) /* the bootstrap's damage is the cause, whatever the backend made of it */
        r = ccl__set_error(c, cb.ever_damaged ? CCL_ERR_INVALID_ARGUMENT : CCL_ERR_OUT_OF_MEMORY, "%s", cb.why);
    if (r == CCL_OK && ccl__handle_add(c) != 0) {
        ccl__mbox_close(c->mbox);
        ccl__mbox_close(c->node_mbox);
        be->comm_fini(c);
        r = ccl__set_error(c, CCL_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (r != CCL_OK) {
        ccl__set_error(NULL, r, "%s: %s", fn, c->last_error);
        pthread_mutex_destroy(&c->async_lock);
        free(c->heap_base);
        free(c->cache_dir);
        free(c);
        return r;
    }
    c->stage_off[0] = c->stage_off[1] = c->stage_off[2] = c->scratch_off = SIZE_MAX;
    c->region_cap = region_cap ? region_cap : c->heap_bytes / 4 / CCL__HEAP_ALIGN * CCL__HEAP_ALIGN;
    c->barrier_off = SIZE_MAX;
    /* What a split gives its children unless told otherwise: this comm's settings. */
    c->config = (ccl_config_t){.backend = be->kind, .timeout_ms = c->timeout_ms, .cache_dir = c->cache_dir,
                               .heap_bytes = c->heap_default ? 0 : c->heap_bytes};
    c->vring_off = c->varena_off = SIZE_MAX;
    ccl__heap_alloc_init(&c->sems, CCL__HEAP_HEADER, CCL__HEAP_DATA);
    ccl__heap_alloc_init(&c->data, CCL__HEAP_DATA, c->heap_bytes);
    c->p2p_off = SIZE_MAX;
    if (be->run_p2p)
        ccl__p2p_reserve(c);
    ccl__watchdog_start(c);
    CCL__LOG(CCL__LOG_INFO, CCL__SUB_INIT, c->rank, "%s: communicator %p ready: rank %d of %d (%d node%s of %d), %s "
             "backend, heap %zu bytes (shared regions of up to %zu), timeout %d ms", fn, (void *)c, c->rank,
             c->nranks, c->nnodes, c->nnodes > 1 ? "s" : "", c->local, be->name, c->heap_bytes, c->region_cap,
             c->timeout_ms);
    *out = c;
    return CCL_OK;
}

static ccl_result_t init_rank_checks(ccl_comm_t **comm, const ccl_bootstrap_t *boot, int device, const char *fn)
{
    if (!comm)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'comm' is NULL", fn);
    *comm = NULL;
    if (!boot)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'bootstrap' is NULL", fn);
    if (boot->nranks < 1 || boot->nranks > CCLC_MAX_RANKS)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'bootstrap': nranks %d is outside 1..%d", fn, boot->nranks, CCLC_MAX_RANKS);
    if (boot->rank < 0 || boot->rank >= boot->nranks)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'bootstrap': rank %d is outside 0..%d", fn, boot->rank, boot->nranks - 1);
    if (!boot->allgather || !boot->barrier)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'bootstrap': allgather and barrier must both be set", fn);
    if (device < 0 && device != CCL_DEVICE_AUTO)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'device' is %d (a GPU ordinal or CCL_DEVICE_AUTO)", fn, device);
    return CCL_OK;
}

ccl_result_t ccl_comm_init_rank(ccl_comm_t **comm, const ccl_bootstrap_t *boot, int device,
                                const ccl_config_t *config)
{
    const char *fn = "ccl_comm_init_rank";
    ccl_result_t r = init_rank_checks(comm, boot, device, fn);
    return r != CCL_OK ? r : comm_create(comm, boot, device, config, fn);
}

ccl_result_t ccl_comm_init_rank_net(ccl_comm_t **comm, const ccl_bootstrap_t *boot, const ccl_net_t *net,
                                    int ranks_per_node, int device, const ccl_config_t *config)
{
    return ccl__comm_init_net(comm, boot, net, ranks_per_node, device, config, "ccl_comm_init_rank_net");
}

ccl_result_t ccl__comm_init_net(ccl_comm_t **comm, const ccl_bootstrap_t *boot, const ccl_net_t *net,
                                int ranks_per_node, int device, const ccl_config_t *config, const char *fn)
{
    ccl_result_t r = init_rank_checks(comm, boot, device, fn);
    if (r == CCL_OK && !net)
        r = ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'net' is NULL", fn);
    if (r == CCL_OK && (ranks_per_node < 0 || ranks_per_node > boot->nranks))
        r = ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'ranks_per_node' is %d, outside 0..%d", fn,
                           ranks_per_node, boot->nranks);
    if (r != CCL_OK) {
        if (net && net->release)
            net->release(net->ctx);
        return r;
    }
    return comm_create_net(comm, boot, net, ranks_per_node, device, config, fn);
}

typedef struct {
    const ccl_bootstrap_t *boot;
    CclThreadBoot *tb;
    int device;
    const ccl_config_t *config;
    ccl_comm_t *comm;
    ccl_result_t result;
    char error[CCL__ERR_LEN];
} InitThread;

static void *init_thread(void *arg)
{
    InitThread *t = arg;
    t->result = comm_create(&t->comm, t->boot, t->device, t->config, "ccl_comm_init_all");
    if (t->result != CCL_OK) {
        snprintf(t->error, sizeof t->error, "%s", ccl_comm_last_error(NULL));
        ccl__thread_boot_fail(t->tb);
    }
    return NULL;
}

ccl_result_t ccl_comm_init_all(ccl_comm_t **comms, int nranks, const int *devices,
                               const ccl_config_t *config)
{
    const char *fn = "ccl_comm_init_all";
    if (!comms)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'comms' is NULL", fn);
    if (nranks < 1 || nranks > CCLC_MAX_RANKS)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'nranks' is %d, outside 1..%d", fn, nranks, CCLC_MAX_RANKS);
    for (int r = 0; r < nranks; r++)
        comms[r] = NULL;
    if (devices)
        for (int r = 0; r < nranks; r++)
            if (devices[r] < 0 && devices[r] != CCL_DEVICE_AUTO)
                return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'devices': devices[%d] is %d (a GPU ordinal or CCL_DEVICE_AUTO)", fn, r, devices[r]);
    ccl_bootstrap_t *boots = calloc((size_t)nranks, sizeof *boots);
    InitThread *ts = calloc((size_t)nranks, sizeof *ts);
    pthread_t *tids = calloc((size_t)nranks, sizeof *tids);
    CclThreadBoot *tb = boots ? ccl__thread_boot_new(nranks, boots) : NULL;
    if (!boots || !ts || !tids || !tb) {
        free(boots), free(ts), free(tids), ccl__thread_boot_free(tb);
        return ccl__set_error(NULL, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    int started = 0;
    for (int r = 0; r < nranks; r++) {
        ts[r] = (InitThread){.boot = &boots[r], .tb = tb, .device = devices ? devices[r] : CCL_DEVICE_AUTO, .config = config};
        if (pthread_create(&tids[r], NULL, init_thread, &ts[r]) != 0) {
            ts[r].result = CCL_ERR_SYSTEM;
            snprintf(ts[r].error, sizeof ts[r].error, "%s: cannot start a thread for rank %d", fn, r);
            ccl__thread_boot_fail(tb);
            break;
        }
        started++;
    }
    for (int r = 0; r < started; r++)
        pthread_join(tids[r], NULL);
    ccl_result_t result = CCL_OK;
    /* Report the first rank that failed on its own, not one that gave up because a peer did. */
    for (int r = 0; r < nranks && result == CCL_OK; r++)
        if (ts[r].result != CCL_OK && ts[r].result != CCL_ERR_PEER_FAILED) {
            result = ts[r].result;
            ccl__set_error(NULL, result, "%s", ts[r].error);
        }
    for (int r = 0; r < nranks && result == CCL_OK; r++)
        if (ts[r].result != CCL_OK) {
            result = ts[r].result;
            ccl__set_error(NULL, result, "%s", ts[r].error);
        }
    for (int r = 0; r < nranks; r++) {
        if (result != CCL_OK && ts[r].comm)
            ccl_comm_destroy(ts[r].comm);
        else
            comms[r] = ts[r].comm;
    }
    if (result != CCL_OK)
        for (int r = 0; r < nranks; r++)
            comms[r] = NULL;
    /* The group lets the ranks share what they compile (CclGroup). Without it (out of
     * memory) each rank compiles its own copy, which is only slower. */
    CclGroup *g = result == CCL_OK ? calloc(1, sizeof *g) : NULL;
    if (g) {
        pthread_mutex_init(&g->mu, NULL);
        g->refs = nranks;
        for (int r = 0; r < nranks; r++)
            comms[r]->group = g;
    }
    ccl__thread_boot_free(tb);
    free(boots), free(ts), free(tids);
    return result;
}

/* ---- splitting ----
 *
 * Collective over comm, through its mailboxes (mailbox.c; on a comm of several nodes, its
 * node's mailboxes and messages through the transport to the other nodes' ranks): one
 * exchange of every rank's (color, key) among all ranks, then, per color, the child made by comm_create over a
 * bootstrap of that color's members in (key, rank) order, and one more exchange that
 * lets children in one process share what they compile (CclGroup), as the comms of one
 * ccl_comm_init_all do. */

typedef struct {
    int32_t color, key;
} SplitVote;

typedef struct {
    int64_t pid;
    uint64_t group;                  /* member 0's CclGroup */
} SplitShare;

static const SplitVote *split_votes;

static int split_order(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    if (split_votes[x].key != split_votes[y].key)
        return split_votes[x].key < split_votes[y].key ? -1 : 1;
    return x - y;
}

static pthread_mutex_t split_sort_mu = PTHREAD_MUTEX_INITIALIZER;

/* The members of `color` in (key, rank) order into members; their number. */
static int split_members(const SplitVote *votes, int n, int color, int *members)
{
    int nm = 0;
    for (int p = 0; p < n; p++)
        if (votes[p].color == color)
            members[nm++] = p;
    pthread_mutex_lock(&split_sort_mu); /* qsort has no context argument in C11 */
    split_votes = votes;
    qsort(members, (size_t)nm, sizeof *members, split_order);
    pthread_mutex_unlock(&split_sort_mu);
    return nm;
}

/* Children in one process share a CclGroup (made by member 0); 0, or -1 when the
 * exchange failed (the members' child comms are then destroyed by the caller). */
static int split_share_group(ccl_comm_t *child, const ccl_bootstrap_t *b)
{
    CclGroup *g = NULL;
    if (child->rank == 0 && (g = calloc(1, sizeof *g))) {
        pthread_mutex_init(&g->mu, NULL);
        g->refs = child->nranks;
    }
    SplitShare mine = {.pid = getpid(), .group = (uint64_t)(uintptr_t)g};
    SplitShare *all = calloc((size_t)child->nranks, sizeof *all);
    if (!all || b->allgather(b->ctx, &mine, all, sizeof mine) != 0) {
        free(all);
        if (g) { /* no member took it */
            pthread_mutex_destroy(&g->mu);
            free(g);
        }
        return -1;
    }
    int local = all[0].group != 0;
    for (int p = 0; p < child->nranks; p++)
        local &= all[p].pid == all[0].pid;
    if (local)
        child->group = (CclGroup *)(uintptr_t)all[0].group;
    else if (g) {
        pthread_mutex_destroy(&g->mu);
        free(g);
    }
    free(all);
    return 0;
}

/* A child of a comm of several nodes keeps its members' nodes, so its layout must be one
 * the runtime runs: runs of equally many consecutive ranks (in the child's order) on each
 * node, no node in two runs. The ranks per node of the child (nm: one node), or 0 with
 * why saying which layout the members would make. */
static int split_layout(const ccl_comm_t *comm, const int *members, int nm, int color, char *why, size_t len)
{
    int L = comm->local, lc = 1;
    while (lc < nm && members[lc] / L == members[0] / L)
        lc++;
    int ok = nm % lc == 0;
    for (int i = 0; i < nm && ok; i++) {
        ok = members[i] / L == members[i / lc * lc] / L;
        for (int j = 0; j < i / lc && ok && i % lc == 0; j++)
            ok = members[j * lc] / L != members[i] / L;
    }
    if (ok)
        return lc;
    int k = snprintf(why, len, "color %d's %d members, in their new rank order (by key, then rank), sit on nodes", color,
                     nm);
    for (int i = 0; i < nm && k > 0 && (size_t)k < len - 64; i++)
        k += snprintf(why + k, len - (size_t)k, "%s%d", i ? ", " : " ", members[i] / L);
    if (k > 0 && (size_t)k < len)
        snprintf(why + k, len - (size_t)k, ": a communicator of several nodes needs the same number of ranks on each "
                 "of its nodes, each node's consecutive in rank order (docs/multinode.md); choose colors and keys that "
                 "keep every node's members together and give every node as many");
    return 0;
}

/* This rank gives up the split: its members' waits end at once, those on other nodes
 * told why (the start of msg). */
static void split_give_up(CclMboxBoot *sb, const char *msg)
{
    size_t n = strlen(msg) < sizeof sb->why - 1 ? strlen(msg) : sizeof sb->why - 1;
    memcpy(sb->why, msg, n);
    sb->why[n] = 0;
    ccl__mbox_boot_fail(sb);
}

ccl_result_t ccl__comm_split_now(ccl_comm_t *comm, int color, int key, ccl_comm_t **newcomm, const ccl_config_t *config)
{
    const char *fn = "ccl_comm_split";
    ccl_result_t r = CCL_OK;
    int n = comm->nranks, nodes = comm->nnodes > 1;
    CclMailboxes *mbox = nodes ? comm->node_mbox : comm->mbox;
    /* Every rank has the same kind of transport, so every rank refuses alike. */
    if (nodes && !comm->net.split)
        return ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "%s: this communicator of %d nodes has a transport that cannot "
                              "make its children's (ccl_net_t.split is NULL; the transports of ccl_mpi.h and of "
                              "ccl_comm_init_rank_id can)", fn, comm->nnodes);
    if (!mbox)
        return ccl__set_error(comm, CCL_ERR_INTERNAL, "%s: the communicator has no bootstrap of its own", fn);
    int *everyone = malloc(sizeof *everyone * (size_t)n), *members = malloc(sizeof *members * (size_t)n);
    SplitVote *votes = calloc((size_t)n, sizeof *votes);
    if (!everyone || !members || !votes) {
        free(everyone), free(members), free(votes);
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    for (int p = 0; p < n; p++)
        everyone[p] = p;
    uint32_t epoch = ++comm->mbox_ops;
    CclMboxBoot all_sb, sub_sb;
    ccl_bootstrap_t all_b, sub_b;
    ccl__mbox_boot(&all_sb, mbox, epoch, everyone, n, comm->rank, comm->timeout_ms, &all_b);
    SplitVote mine = {color, key};
    if (all_b.allgather(all_b.ctx, &mine, votes, sizeof mine) != 0) {
        r = ccl__set_error(comm, CCL_ERR_PEER_FAILED, "%s: rank %d: not every rank of the communicator came to the "
                           "split: %s", fn, comm->rank, all_sb.why);
        goto out;
    }
    /* Several nodes: the children's transports are made by the parent's, collectively
     * over every rank (MPI_Comm_split is), so a rank that joins none, or whose child needs
     * none, still calls it, with no color. */
    ccl_net_t cnet = {0};
    char nwhy[256] = "";
    if (color == CCL_SPLIT_NOCOLOR) {
        if (nodes && comm->net.split(comm->net.ctx, CCL_SPLIT_NOCOLOR, 0, NULL, &cnet, nwhy, sizeof nwhy) != 0)
            r = ccl__set_error(comm, CCL_ERR_PEER_FAILED, "%s: rank %d (no color): the transport's split failed%s%s", fn,
                               comm->rank, nwhy[0] ? ": " : "", nwhy);
        goto out;
    }
    int nm = split_members(votes, n, color, members), me = 0;
    while (members[me] != comm->rank)
        me++;
    ccl__mbox_boot(&sub_sb, mbox, epoch, members, nm, me, comm->timeout_ms, &sub_b);
    sub_sb.exchanges = all_sb.exchanges; /* the same operation goes on, among the members */
    /* The child's layout: its members keep their nodes; one node makes an ordinary comm
     * of one node (shared memory, no transport). */
    char lwhy[CCL__ERR_LEN / 2] = "";
    int lc = nodes ? split_layout(comm, members, nm, color, lwhy, sizeof lwhy) : nm;
    int need_net = nodes && lc && lc < nm;
    if (nodes && comm->net.split(comm->net.ctx, need_net ? color : CCL_SPLIT_NOCOLOR, me, need_net ? &sub_b : NULL,
                                 &cnet, nwhy, sizeof nwhy) != 0) {
        r = ccl__set_error(comm, CCL_ERR_PEER_FAILED, "%s: rank %d (color %d, key %d; %d members): the transport could "
                           "not make the new communicator's%s%s%s%s", fn, comm->rank, color, key, nm,
                           nwhy[0] ? ": " : "", nwhy, sub_sb.why[0] ? ": " : "", sub_sb.why);
        split_give_up(&sub_sb, comm->last_error);
        goto out;
    }
    if (!lc) {
        r = ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "%s: rank %d: %s", fn, comm->rank, lwhy);
        goto out;
    }
    ccl_comm_t *child;
    const ccl_config_t *cc = config ? config : &comm->config;
    /* The layout is given (lc ranks per node), never CCL_RANKS_PER_NODE's, which
     * describes the job's ranks, not a child's. */
    r = comm_create_net(&child, &sub_b, need_net ? &cnet : NULL, lc, comm->device, cc, fn);
    if (r != CCL_OK) {
        ccl__set_error(comm, r, "%s (color %d, key %d; %d members)%s%s", ccl_comm_last_error(NULL), color, key, nm,
                       sub_sb.why[0] ? ": " : "", sub_sb.why);
        split_give_up(&sub_sb, comm->last_error);
        goto out;
    }
    if (split_share_group(child, &sub_b) != 0) {
        ccl_comm_destroy(child);
        r = ccl__set_error(comm, CCL_ERR_PEER_FAILED, "%s: rank %d: a member of color %d gave up after the new "
                           "communicator was made: %s", fn, comm->rank, color, sub_sb.why);
        goto out;
    }
    CCL__LOG(CCL__LOG_INFO, CCL__SUB_INIT, comm->rank, "%s: color %d, key %d: rank %d of the new communicator %p "
             "(%d ranks, %d node%s)", fn, color, key, child->rank, (void *)child, child->nranks, child->nnodes,
             child->nnodes > 1 ? "s" : "");
    *newcomm = child;
out:
    free(everyone), free(members), free(votes);
    return r;
}

/* ccl_comm_abort and ccl_comm_get_async_error may run on a watchdog thread while the
 * user's thread destroys comm: both hold it (ccl__hold_comm) for their whole call, and
 * ccl_comm_destroy waits for them before it frees anything. */
ccl_result_t ccl_comm_abort(ccl_comm_t *comm)
{
    if (ccl__hold_comm(comm, "ccl_comm_abort") != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    /* The first failure wins: an abort after a failure keeps that failure's message. */
    ccl__set_async_error(comm, CCL_ERR_INVALID_USAGE,
                         "rank %d: the communicator was aborted (ccl_comm_abort); destroy it", comm->rank);
    comm->be->abort(comm);
    ccl__watchdog_halt(comm); /* the comm is stopped: nothing left to find */
    ccl__release_comm(comm);
    return CCL_OK;
}

ccl_result_t ccl_comm_get_async_error(ccl_comm_t *comm, ccl_result_t *result)
{
    const char *fn = "ccl_comm_get_async_error";
    if (ccl__hold_comm(comm, fn) != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    if (!result) {
        ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'result' is NULL", fn);
        ccl__release_comm(comm);
        return CCL_ERR_INVALID_ARGUMENT;
    }
    pthread_mutex_lock(&comm->async_lock);
    ccl_result_t r = comm->async_result != CCL_OK ? comm->async_result : comm->failed;
    if (r == CCL_OK && comm->be->poll)
        r = comm->be->poll(comm);
    pthread_mutex_unlock(&comm->async_lock);
    ccl__release_comm(comm);
    *result = r;
    return CCL_OK;
}

static ccl_result_t synchronize_body(ccl_comm_t *comm);

ccl_result_t ccl_comm_synchronize(ccl_comm_t *comm)
{
    ccl__range_push("ccl_comm_synchronize");
    return ccl__range_pop(synchronize_body(comm));
}

static ccl_result_t synchronize_body(ccl_comm_t *comm)
{
    if (ccl__check_comm(comm, "ccl_comm_synchronize") != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    ccl_result_t r = comm->be->synchronize(comm);
    if (r != CCL_OK)
        return r;
    r = ccl__take_async(comm, "ccl_comm_synchronize", 1);
    if (r != CCL_OK)
        return r;
    if (comm->failed)
        return ccl__set_error(comm, comm->failed, "ccl_comm_synchronize: the communicator failed earlier (%s: %s); "
                              "destroy it", ccl_result_string(comm->failed), comm->failed_why);
    comm->last_error[0] = 0;
    return CCL_OK;
}

ccl_result_t ccl_comm_destroy(ccl_comm_t *comm)
{
    /* Unregistered first: a second destroy, even from another thread, is refused. */
    if (!comm || !ccl__handle_remove(comm)) {
        ccl__check_comm(comm, "ccl_comm_destroy");
        return CCL_ERR_INVALID_ARGUMENT;
    }
    /* A watchdog's poll or abort that began before the handle went finishes first. */
    ccl__wait_unheld(comm);
    CCL__LOG(CCL__LOG_INFO, CCL__SUB_INIT, comm->rank, "ccl_comm_destroy: communicator %p (%d calls made)",
             (void *)comm, (int)comm->calls);
    /* The comm's work ends first, the watchdog still looking: work waiting on a peer that
     * died gives up instead of waiting out the timeout. */
    comm->be->synchronize(comm);
    ccl__reg_release_all(comm);
    ccl__watchdog_stop(comm);
    for (int i = comm->nalgs - 1; i >= 0; i--)
        ccl__algorithm_destroy(comm->algs[i]);
    free(comm->algs);
    free(comm->uses);
    free(comm->retired);
    free(comm->quarantine);
    free(comm->lib_tried);
    CclGroup *g = comm->group;
    if (g) {
        pthread_mutex_lock(&g->mu);
        int last = --g->refs == 0;
        pthread_mutex_unlock(&g->mu);
        if (last) {
            pthread_mutex_destroy(&g->mu);
            free(g);
        }
    }
    ccl__mbox_leave(comm->mbox); /* this rank's process may go now: no failure to its peers */
    ccl__mbox_leave(comm->node_mbox); /* (and a split waiting for it gives up at once) */
    comm->notes = NULL;
    ccl__mbox_close(comm->mbox);
    ccl__mbox_close(comm->node_mbox);
    comm->be->comm_fini(comm);
    if (comm->net.release)
        comm->net.release(comm->net.ctx);
    ccl__heap_alloc_fini(&comm->data);
    ccl__heap_alloc_fini(&comm->sems);
    pthread_mutex_destroy(&comm->async_lock);
    free(comm->heap_base);
    free(comm->cache_dir);
    free(comm->p2p_sent);               /* p2p_recvd is its second half */
    free(comm);
    return CCL_OK;
}

ccl_result_t ccl_comm_rank(const ccl_comm_t *comm, int *rank)
{
    if (ccl__check_comm(comm, "ccl_comm_rank") != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    if (!rank)
        return ccl__set_error((ccl_comm_t *)comm, CCL_ERR_INVALID_ARGUMENT, "ccl_comm_rank: argument 'rank' is NULL");
    *rank = comm->rank;
    return CCL_OK;
}

ccl_result_t ccl_comm_size(const ccl_comm_t *comm, int *nranks)
{
    if (ccl__check_comm(comm, "ccl_comm_size") != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    if (!nranks)
        return ccl__set_error((ccl_comm_t *)comm, CCL_ERR_INVALID_ARGUMENT, "ccl_comm_size: argument 'nranks' is NULL");
    *nranks = comm->nranks;
    return CCL_OK;
}

ccl_result_t ccl_comm_backend(const ccl_comm_t *comm, ccl_backend_t *backend)
{
    if (ccl__check_comm(comm, "ccl_comm_backend") != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    if (!backend)
        return ccl__set_error((ccl_comm_t *)comm, CCL_ERR_INVALID_ARGUMENT, "ccl_comm_backend: argument 'backend' is NULL");
    *backend = comm->backend_kind;
    return CCL_OK;
}

ccl_result_t ccl_mem_copy(ccl_comm_t *comm, void *dst, const void *src, size_t bytes)
{
    const char *fn = "ccl_mem_copy";
    if (ccl__check_comm(comm, fn) != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    if (bytes && !dst)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'dst' is NULL", fn);
    if (bytes && !src)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'src' is NULL", fn);
    if (!bytes)
        return CCL_OK;
    return comm->be->copy(comm, dst, src, bytes);
}

/* ---- symmetric memory ---- */

ccl_result_t ccl_mem_alloc(ccl_comm_t *comm, void **ptr, size_t bytes)
{
    const char *fn = "ccl_mem_alloc";
    if (ccl__check_comm(comm, fn) != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    if (!ptr)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'ptr' is NULL", fn);
    *ptr = NULL;
    if (bytes == 0)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'bytes' is 0", fn);
    /* A buffer of a dead communicator would only be a trap (its peers are gone). */
    ccl_result_t r = ccl__check_usable_poll(comm, fn);
    if (r != CCL_OK)
        return r;
    ccl__quarantine_release(comm);
    size_t off;
    if (bytes > comm->heap_bytes || ccl__heap_alloc(&comm->data, bytes, 1, &off) != 0)
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY,
                              "%s: argument 'bytes': %zu bytes do not fit in the symmetric heap (%zu bytes per rank; "
                              "raise ccl_config_t.heap_bytes or CCL_HEAP_BYTES)", fn, bytes, comm->heap_bytes);
    *ptr = comm->heap_base[comm->rank] + off;
    CCL__LOG(CCL__LOG_INFO, CCL__SUB_ALLOC, comm->rank, "%s: %zu bytes at heap offset %zu", fn, bytes, off);
    return CCL_OK;
}

ccl_result_t ccl_mem_free(ccl_comm_t *comm, void *ptr)
{
    const char *fn = "ccl_mem_free";
    if (ccl__check_comm(comm, fn) != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    if (!ptr)
        return CCL_OK;
    char *base = comm->heap_base[comm->rank];
    if ((char *)ptr < base || (char *)ptr >= base + comm->heap_bytes)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'ptr' (%p) is not in this communicator's symmetric heap", fn, ptr);
    size_t off = (size_t)((char *)ptr - base), start, size;
    if (ccl__heap_find_user(&comm->data, off, 1, &start, &size) != 0 || start != off)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'ptr' (%p) is not the start of a live ccl_mem_alloc allocation", fn, ptr);
    if (ccl__reg_holds_heap(comm, off, size))
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "%s: argument 'ptr' (%p) is registered (ccl_mem_register); "
                              "deregister it on every rank first", fn, ptr);
    /* Work still queued may use the buffer; freeing is a local point in the sequence. */
    comm->be->synchronize(comm);
    ccl__heap_free(&comm->data, off);
    CCL__LOG(CCL__LOG_INFO, CCL__SUB_ALLOC, comm->rank, "%s: the %zu-byte buffer at heap offset %zu", fn, size, off);
    return CCL_OK;
}
