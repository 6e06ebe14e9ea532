/* gpu/device.c: what the communicators of this process that use one GPU share.
 *
 * Ranks driven by one process on one GPU share its primary context, and a rank's
 * kernel spins until its peers' kernels run. On an H100 (bench/probes/shared-gpu-*.txt)
 * cuModuleLoadData, cuModuleUnload, cuMemFree, cuMemFreeHost and cuCtxSynchronize
 * wait for every kernel running in the context; cuMemAlloc, cuMemHostAlloc, work on a
 * non-blocking stream and event records do not. A rank that made one of the waiting
 * calls while a peer's kernel waits for this rank's next launch would deadlock until
 * the kernel's timeout. This file keeps the GPU backend clear of that:
 *
 *  - one kernel cache per GPU: the first rank to need a kernel loads that kernel for
 *    every rank of its communicator on this GPU (gpu/backend.c, gpu_kernel), so no rank
 *    loads a module once a peer may have launched;
 *  - releases that wait (device and host-mapped memory, modules, heap mappings) are
 *    parked while another communicator uses the GPU, and done when the last one goes;
 *  - stream claims: two ranks that share a GPU must not queue on one stream (the
 *    second rank's kernel would wait behind the first's, which waits for it);
 *  - few streams: streams share the GPU's hardware queues (CUDA_DEVICE_MAX_CONNECTIONS,
 *    which gpu/driver.c raises to 32), and work queued behind a spinning kernel in a
 *    shared queue waits for it, so the comms of a GPU share one stream for short
 *    synchronous work and make their own stream only when a call needs it.
 *
 * A GPU with one communicator behaves as before: releases happen at once. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/gpu.h"

enum { GPU_MAX_DEVICES = 64 };

typedef enum { PARK_DEVICE_MEM, PARK_HOST_MEM, PARK_MAPPING } ParkKind;

typedef struct {
    ParkKind kind;
    CUdeviceptr ptr;                 /* device memory, or a mapping's address */
    void *host;
    size_t size;                     /* a mapping's size */
    size_t reserved;                 /* the reservation it lies in, freed with it (0: kept) */
    CUmemGenericAllocationHandle handle; /* a mapping's allocation (0: none to release) */
} Parked;

typedef struct {
    CUstream stream;
    const void *owner;               /* the comm that queued on it since its last synchronize */
} StreamClaim;

struct GpuDevice {
    int ordinal, users;
    CUdevice dev;
    CUcontext ctx;                   /* retained while the entry lives */
    CUstream quiet;                  /* non-blocking, for short synchronous work */
    pthread_mutex_t mu;
    pthread_cond_t loaded;           /* a module left the LOADING state */
    GpuModule *modules;
    Parked *parked;
    int nparked, parked_cap;
    StreamClaim *claims;
    int nclaims, claims_cap;
};

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static GpuDevice *registry[GPU_MAX_DEVICES];

GpuDevice *ccl__gpu_device_acquire(int ordinal, CUresult *err)
{
    *err = CUDA_SUCCESS;
    if (ordinal < 0 || ordinal >= GPU_MAX_DEVICES) {
        *err = CUDA_ERROR_INVALID_DEVICE;
        return NULL;
    }
    pthread_mutex_lock(&registry_mu);
    GpuDevice *d = registry[ordinal];
    if (!d && (d = calloc(1, sizeof *d))) {
        d->ordinal = ordinal;
        if ((*err = ccl__cu.DeviceGet(&d->dev, ordinal)) != CUDA_SUCCESS ||
            (*err = ccl__cu.DevicePrimaryCtxRetain(&d->ctx, d->dev)) != CUDA_SUCCESS) {
            free(d);
            d = NULL;
        } else if ((*err = ccl__cu.CtxSetCurrent(d->ctx)) != CUDA_SUCCESS ||
                   (*err = ccl__cu.StreamCreate(&d->quiet, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
            ccl__cu.DevicePrimaryCtxRelease(d->dev);
            free(d);
            d = NULL;
        } else {
            pthread_mutex_init(&d->mu, NULL);
            pthread_cond_init(&d->loaded, NULL);
            registry[ordinal] = d;
        }
    } else if (!d) {
        *err = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (d) d->users++;
    pthread_mutex_unlock(&registry_mu);
    return d;
}

static void release_now(const Parked *p)
{
    switch (p->kind) {
    case PARK_DEVICE_MEM: ccl__cu.MemFree(p->ptr); break;
    case PARK_HOST_MEM: ccl__cu.MemFreeHost(p->host); break;
    case PARK_MAPPING:
        if (p->size) ccl__cu.MemUnmap(p->ptr, p->size);
        if (p->reserved) ccl__cu.MemAddressFree(p->ptr, p->reserved);
        if (p->handle) ccl__cu.MemRelease(p->handle);
        break;
    }
}

void ccl__gpu_device_release(GpuDevice *d)
{
    if (!d) return;
    pthread_mutex_lock(&registry_mu);
    int last = --d->users == 0;
    if (last) registry[d->ordinal] = NULL;
    pthread_mutex_unlock(&registry_mu);
    if (!last) return;
    ccl__cu.CtxSetCurrent(d->ctx);
    for (int i = 0; i < d->nparked; i++) release_now(&d->parked[i]);
    for (GpuModule *m = d->modules, *next; m; m = next) {
        next = m->next;
        if (m->mod) ccl__cu.ModuleUnload(m->mod);
        free(m->source);
        free(m->error);
        free(m);
    }
    ccl__cu.StreamDestroy(d->quiet);
    free(d->parked);
    free(d->claims);
    pthread_cond_destroy(&d->loaded);
    pthread_mutex_destroy(&d->mu);
    ccl__cu.DevicePrimaryCtxRelease(d->dev);
    free(d);
}

int ccl__gpu_device_shared(GpuDevice *d)
{
    pthread_mutex_lock(&registry_mu);
    int shared = d->users > 1;
    pthread_mutex_unlock(&registry_mu);
    return shared;
}

CUcontext ccl__gpu_device_context(const GpuDevice *d) { return d->ctx; }

CUstream ccl__gpu_device_quiet_stream(const GpuDevice *d) { return d->quiet; }

/* Parks p, or releases it at once when no other communicator uses the GPU. Parking
 * never fails: without room for the entry, the memory is leaked rather than freed
 * under a peer's running kernel. */
static void park(GpuDevice *d, Parked p)
{
    if (!ccl__gpu_device_shared(d)) {
        release_now(&p);
        return;
    }
    pthread_mutex_lock(&d->mu);
    if (d->nparked == d->parked_cap) {
        int cap = d->parked_cap ? 2 * d->parked_cap : 16;
        Parked *np = realloc(d->parked, (size_t)cap * sizeof *np);
        if (np) {
            d->parked = np;
            d->parked_cap = cap;
        }
    }
    if (d->nparked < d->parked_cap) d->parked[d->nparked++] = p;
    pthread_mutex_unlock(&d->mu);
}

void ccl__gpu_free_device_mem(GpuDevice *d, CUdeviceptr p)
{
    if (p) park(d, (Parked){.kind = PARK_DEVICE_MEM, .ptr = p});
}

void ccl__gpu_free_host_mem(GpuDevice *d, void *p)
{
    if (p) park(d, (Parked){.kind = PARK_HOST_MEM, .host = p});
}

void ccl__gpu_unmap(GpuDevice *d, CUdeviceptr va, size_t size, size_t reserved, CUmemGenericAllocationHandle handle)
{
    if (va) park(d, (Parked){.kind = PARK_MAPPING, .ptr = va, .size = size, .reserved = reserved, .handle = handle});
    else if (handle) ccl__cu.MemRelease(handle);
}

/* ---- the kernel cache ---- */

GpuModule *ccl__gpu_module_claim(GpuDevice *d, const char *source, size_t len, int *load)
{
    *load = 0;
    uint64_t h = ccl__fnv1a(CCL__FNV_SEED, source, len);
    pthread_mutex_lock(&d->mu);
    GpuModule *m = d->modules;
    while (m && !(m->hash == h && m->len == len && !memcmp(m->source, source, len))) m = m->next;
    if (!m && (m = calloc(1, sizeof *m))) {
        char *copy = malloc(len + 1);
        if (!copy) {
            free(m);
            pthread_mutex_unlock(&d->mu);
            return NULL;
        }
        memcpy(copy, source, len);
        copy[len] = 0;
        *m = (GpuModule){.next = d->modules, .hash = h, .len = len, .source = copy, .state = GPU_MODULE_LOADING};
        d->modules = m;
        *load = 1;
    }
    pthread_mutex_unlock(&d->mu);
    return m;
}

void ccl__gpu_module_wait(GpuDevice *d, GpuModule *m)
{
    /* The loader is another rank's thread; it finishes without this one (NVRTC, then a
     * module load that waits only for kernels whose peers have all launched). */
    pthread_mutex_lock(&d->mu);
    while (m->state == GPU_MODULE_LOADING) pthread_cond_wait(&d->loaded, &d->mu);
    pthread_mutex_unlock(&d->mu);
}

void ccl__gpu_module_publish(GpuDevice *d, GpuModule *m, CUmodule mod, const char *error)
{
    pthread_mutex_lock(&d->mu);
    m->mod = mod;
    if (mod) {
        m->state = GPU_MODULE_READY;
    } else {
        m->state = GPU_MODULE_FAILED;
        m->error = strdup(error ? error : "unknown error");
    }
    pthread_cond_broadcast(&d->loaded);
    pthread_mutex_unlock(&d->mu);
}

/* ---- stream claims ---- */

int ccl__gpu_stream_claim(GpuDevice *d, CUstream s, const void *owner, const void **holder)
{
    pthread_mutex_lock(&d->mu);
    int ok = 1;
    *holder = NULL;
    int i = 0;
    while (i < d->nclaims && d->claims[i].stream != s) i++;
    if (i < d->nclaims) {
        ok = d->claims[i].owner == owner;
        *holder = d->claims[i].owner;
    } else {
        if (d->nclaims == d->claims_cap) {
            int cap = d->claims_cap ? 2 * d->claims_cap : 16;
            StreamClaim *nc = realloc(d->claims, (size_t)cap * sizeof *nc);
            if (nc) {
                d->claims = nc;
                d->claims_cap = cap;
            }
        }
        /* Without room the stream goes unclaimed: the check is lost, not the call. */
        if (d->nclaims < d->claims_cap) d->claims[d->nclaims++] = (StreamClaim){s, owner};
    }
    pthread_mutex_unlock(&d->mu);
    return ok;
}

void ccl__gpu_stream_unclaim_all(GpuDevice *d, const void *owner)
{
    pthread_mutex_lock(&d->mu);
    int k = 0;
    for (int i = 0; i < d->nclaims; i++)
        if (d->claims[i].owner != owner) d->claims[k++] = d->claims[i];
    d->nclaims = k;
    pthread_mutex_unlock(&d->mu);
}

/* ---- which GPU each rank uses ---- */

static uint64_t host_hash(void)
{
    char name[256] = "";
    gethostname(name, sizeof name - 1);
    return ccl__fnv1a(CCL__FNV_SEED, name, strlen(name));
}

int ccl__gpu_auto_ordinal(const GpuRankPlace *all, int p)
{
    int local = 0;
    for (int q = 0; q < p; q++) local += all[q].host == all[p].host;
    return all[p].ngpus > 0 ? local % (int)all[p].ngpus : 0;
}

ccl_result_t ccl__gpu_check_places(const GpuRankPlace *all, int n, int me, int64_t asked, int *colocated,
                                   int *ncolocated, char *err, size_t len)
{
    *ncolocated = 0;
    for (int p = 0; p < n; p++)
        if (all[p].ordinal < 0) {
            if (p == me)
                snprintf(err, len, "rank %d: argument 'device' is %lld but this machine has %lld GPU%s", me,
                         (long long)asked, (long long)all[p].ngpus, all[p].ngpus == 1 ? "" : "s");
            else
                snprintf(err, len, "rank %d: rank %d asked for a GPU its machine does not have (it has %lld)", me, p,
                         (long long)all[p].ngpus);
            return p == me ? CCL_ERR_INVALID_ARGUMENT : CCL_ERR_PEER_FAILED;
        }
    for (int p = 0; p < n; p++)
        for (int q = p + 1; q < n; q++)
            if (all[p].host == all[q].host && all[p].pid != all[q].pid && !memcmp(all[p].uuid, all[q].uuid, 16)) {
                snprintf(err, len,
                         "rank %d: ranks %d and %d are separate processes on one GPU (GPU %lld): kernels of different "
                         "processes do not run at once, so their waits for each other would time out. Give each "
                         "process its own GPU, drive the ranks that share a GPU from one process (ccl_comm_init_all; "
                         "`cclc run` without mpirun), or use the CPU backend (--backend cpu, CCL_BACKEND=cpu)",
                         me, p, q, (long long)all[p].ordinal);
                return CCL_ERR_UNSUPPORTED;
            }
    for (int p = 0; p < n; p++)
        if (all[p].pid == all[me].pid && all[p].host == all[me].host && !memcmp(all[p].uuid, all[me].uuid, 16))
            colocated[(*ncolocated)++] = p;
    return CCL_OK;
}

void ccl__gpu_launch_counts_release(GpuComm *g)
{
    if (g->launches && atomic_fetch_sub(&g->launches->refs, 1) == 1) free(g->launches);
    g->launches = NULL;
}

ccl_result_t ccl__gpu_agree_device(ccl_comm_t *comm, GpuComm *g, const ccl_bootstrap_t *boot)
{
    int n = comm->nranks, me = comm->rank, ngpus = 0;
    ccl__cu.DeviceGetCount(&ngpus);
    GpuRankPlace *all = calloc((size_t)n, sizeof *all);
    g->colocated = calloc((size_t)n, sizeof *g->colocated);
    if (!all || !g->colocated) {
        free(all);
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory", me);
    }
    /* Round one: where every rank is, so that AUTO can count the ranks of each host. */
    GpuRankPlace mine = {.pid = getpid(), .host = host_hash(), .ordinal = comm->device, .ngpus = ngpus};
    ccl_result_t res = CCL_OK;
    if (boot->allgather(boot->ctx, &mine, all, sizeof mine) != 0) {
        res = ccl__set_error(comm, CCL_ERR_PEER_FAILED, "rank %d: bootstrap all-gather failed while choosing GPUs", me);
        goto out;
    }
    if (mine.ordinal == CCL_DEVICE_AUTO) mine.ordinal = ccl__gpu_auto_ordinal(all, me);
    if (mine.ordinal >= ngpus) mine.ordinal = -1;
    CUdevice dev;
    if (mine.ordinal >= 0 && (ccl__cu.DeviceGet(&dev, (int)mine.ordinal) != CUDA_SUCCESS ||
                              ccl__cu.DeviceGetUuid((CUuuid *)mine.uuid, dev) != CUDA_SUCCESS))
        mine.ordinal = -1;
    /* Round two: every rank learns every rank's GPU, so that all fail together, at once. */
    if (boot->allgather(boot->ctx, &mine, all, sizeof mine) != 0) {
        res = ccl__set_error(comm, CCL_ERR_PEER_FAILED, "rank %d: bootstrap all-gather failed while choosing GPUs", me);
        goto out;
    }
    char err[1024];
    res = ccl__gpu_check_places(all, n, me, comm->device, g->colocated, &g->ncolocated, err, sizeof err);
    if (res != CCL_OK) {
        ccl__set_error(comm, res, "%s", err);
        goto out;
    }
    /* Round three, where ranks share this GPU (and so this process): the first of them
     * makes their launch counts and every one takes its address from it. */
    if (g->ncolocated > 1) {
        GpuLaunchCounts *made = NULL, **addrs = calloc((size_t)n, sizeof *addrs);
        if (addrs && me == g->colocated[0] &&
            (made = calloc(1, sizeof *made + (2 * (size_t)n + 2 * (size_t)n * (size_t)n) * sizeof made->slot[0])))
            atomic_store(&made->refs, g->ncolocated);
        if (!addrs || boot->allgather(boot->ctx, &made, addrs, sizeof made) != 0 || !addrs[g->colocated[0]]) {
            free(addrs);
            free(made);
            res = ccl__set_error(comm, CCL_ERR_PEER_FAILED, "rank %d: sharing the launch counts of GPU %d's ranks "
                                 "failed (out of memory or a bootstrap all-gather)", me, (int)mine.ordinal);
            goto out;
        }
        g->launches = addrs[g->colocated[0]];
        free(addrs);
    }
    comm->device = (int)mine.ordinal;
    CUresult r;
    if (!(g->device = ccl__gpu_device_acquire(comm->device, &r)))
        res = ccl__set_error(comm, CCL_ERR_CUDA, "rank %d: opening GPU %d failed: %s", me, comm->device,
                             ccl__cuda_error(r));
out:
    free(all);
    return res;
}
