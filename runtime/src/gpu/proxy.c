/* gpu/proxy.c: the host proxy that serves port-channel puts with the copy engine.
 *
 * A kernel that uses port channels posts each put as a request in its block's queue
 * (compiler/cuda/abi.h's CclPortFifo, host-mapped pinned memory) and goes on; `flush`
 * spins until the queue's `done` count reaches what the block posted. One proxy thread
 * per GPU communicator polls every registered queue, issues each new request as a
 * cuMemcpyAsync on the block's own non-blocking stream (a copy engine, over NVLink to
 * the peer's heap as mapped in this process), records an event behind each round, and
 * stores the new `done` once that event has completed. Requests of one block are
 * copied in order; blocks run concurrently.
 *
 * The thread starts with the first algorithm that has port puts, runs on cores other
 * than the caller's (see proxy_leave_caller_cores), and polls without sleeping while
 * there is work; after about a million empty polls it naps between polls
 * (a flush then waits up to a nap longer). It stops with the communicator.
 *
 * A copy that fails is not retried: the proxy keeps the first error, stops serving, and
 * the kernel's flush times out; the backend reports both (ccl__gpu_proxy_error). */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu/proxy.h"

enum {
    BLOCK_MARKS = 16,            /* completions in flight per block */
    PROXY_IDLE_POLLS = 1 << 20,  /* empty polls (a fraction of a second) before napping */
    PROXY_NAP_NS = 20000,
};

/* One grid block's queue as the proxy sees it. Its copies go on a stream of its own
 * (on a GPU that ranks share, block 0's stream serves every block: streams share the
 * GPU's hardware queues, where a copy behind a peer's spinning kernel would wait),
 * so blocks that put to different peers use different copy engines at once. Each
 * round of issued requests gets an event; once mark i's event has completed, `done`
 * becomes count[i]. */
typedef struct {
    CUstream stream;
    int owns_stream;             /* 0: block 0's, shared */
    CUevent event[BLOCK_MARKS];
    uint64_t count[BLOCK_MARKS];
    int head, nmarks;
    uint64_t taken;              /* requests handed to the copy engine */
} PortBlock;

struct GpuPortQueues {
    CclPortFifo *fifo;           /* host view, nblocks queues */
    CUdeviceptr fifo_dev;        /* the kernels' view (CclGpuArgs.port) */
    int nblocks;
    PortBlock *blk;
    GpuPortQueues *next;
};

struct GpuProxy {
    CUcontext ctx;
    int rank;
    pthread_t thread;
    pthread_mutex_t lock;        /* guards the queue list against (un)registration */
    int stop;
    GpuPortQueues *queues;
    char error[256];             /* the first failure, "" when none */
};

static void proxy_fail(GpuProxy *p, CUresult r, const char *what)
{
    if (!p->error[0])
        snprintf(p->error, sizeof p->error, "the port-channel proxy of rank %d stopped: %s failed: %s", p->rank, what,
                 ccl__cuda_error(r));
}

/* Issues block b's new requests; returns how many. */
static int proxy_issue(GpuProxy *p, GpuPortQueues *q, int b)
{
    CclPortFifo *f = &q->fifo[b];
    PortBlock *k = &q->blk[b];
    if (k->nmarks == BLOCK_MARKS) return 0;
    uint64_t t = k->taken;
    int n = 0;
    for (;;) {
        CclPortReq *req = &f->req[t % CCL_PORT_DEPTH];
        if (__atomic_load_n(&req->seq, __ATOMIC_ACQUIRE) != t + 1) break;
        CUresult r = ccl__cu.MemcpyAsync((CUdeviceptr)req->dst, (CUdeviceptr)req->src, (size_t)req->bytes, k->stream);
        if (r != CUDA_SUCCESS) {
            proxy_fail(p, r, "cuMemcpyAsync (a port-channel put)");
            break;
        }
        t++;
        n++;
    }
    if (n == 0) return 0;
    k->taken = t;
    int m = (k->head + k->nmarks) % BLOCK_MARKS;
    CUresult r = ccl__cu.EventRecord(k->event[m], k->stream);
    if (r != CUDA_SUCCESS) {
        proxy_fail(p, r, "cuEventRecord (a port-channel put)");
        return n;
    }
    k->count[m] = t;
    k->nmarks++;
    return n;
}

/* Publishes block b's completed copies, oldest first; returns how many marks completed. */
static int proxy_complete(GpuProxy *p, GpuPortQueues *q, int b)
{
    PortBlock *k = &q->blk[b];
    int n = 0;
    while (k->nmarks > 0) {
        CUresult r = ccl__cu.EventQuery(k->event[k->head]);
        if (r == CUDA_ERROR_NOT_READY) break;
        if (r != CUDA_SUCCESS) {
            proxy_fail(p, r, "a port-channel copy");
            break;
        }
        __atomic_store_n(&q->fifo[b].done, k->count[k->head], __ATOMIC_RELEASE);
        k->head = (k->head + 1) % BLOCK_MARKS;
        k->nmarks--;
        n++;
    }
    return n;
}

/* mpirun binds each process to one core, and the thread calling ccl_* (or CUDA's
 * spin-waiting synchronize) keeps that core busy: a proxy sharing it ran only every
 * scheduler tick, adding ~4 ms to every flush (2x H200). Run on the other cores. */
static void proxy_leave_caller_cores(void)
{
    cpu_set_t mine, others;
    if (sched_getaffinity(0, sizeof mine, &mine) != 0) return;
    CPU_ZERO(&others);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < n && c < CPU_SETSIZE; c++)
        if (!CPU_ISSET(c, &mine)) CPU_SET(c, &others);
    if (CPU_COUNT(&others) > 0) pthread_setaffinity_np(pthread_self(), sizeof others, &others);
}

static void *proxy_main(void *arg)
{
    GpuProxy *p = arg;
    proxy_leave_caller_cores();
    ccl__cu.CtxSetCurrent(p->ctx);
    /* While the user captures a CUDA graph (global mode by default), every other thread
     * is barred from "unsafe" calls such as cuEventQuery, and one such call invalidates
     * the capture. The proxy's copies and queries never touch the captured stream:
     * relaxed mode lets them run during a capture. */
    CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
    ccl__cu.ThreadExchangeStreamCaptureMode(&relaxed);
    long idle = 0;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        if (p->stop) {
            pthread_mutex_unlock(&p->lock);
            break;
        }
        int work = 0;
        for (GpuPortQueues *q = p->queues; q && !p->error[0]; q = q->next)
            for (int b = 0; b < q->nblocks; b++) work += proxy_issue(p, q, b) + proxy_complete(p, q, b);
        pthread_mutex_unlock(&p->lock);
        idle = work ? 0 : idle + 1;
        if (idle > PROXY_IDLE_POLLS) {
            struct timespec nap = {0, PROXY_NAP_NS};
            nanosleep(&nap, NULL);
        }
    }
    return NULL;
}

static GpuProxy *proxy_start(GpuComm *g, int rank)
{
    GpuProxy *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->ctx = g->ctx;
    p->rank = rank;
    pthread_mutex_init(&p->lock, NULL);
    if (pthread_create(&p->thread, NULL, proxy_main, p) != 0) {
        pthread_mutex_destroy(&p->lock);
        free(p);
        return NULL;
    }
    return p;
}

/* Frees q's queues, streams and events (after its copies finished). */
static void port_free(GpuComm *g, GpuPortQueues *q)
{
    for (int b = 0; q->blk && b < q->nblocks; b++) {
        PortBlock *k = &q->blk[b];
        if (k->stream && k->owns_stream) {
            ccl__cu.StreamSynchronize(k->stream);
            ccl__cu.StreamDestroy(k->stream);
        }
        for (int i = 0; i < BLOCK_MARKS; i++)
            if (k->event[i]) ccl__cu.EventDestroy(k->event[i]);
    }
    ccl__gpu_free_host_mem(g->device, q->fifo);
    free(q->blk);
    free(q);
}

ccl_result_t ccl__gpu_port_open(ccl_comm_t *comm, GpuComm *g, int nblocks, GpuPortQueues **out)
{
    *out = NULL;
    if (!g->proxy && !(g->proxy = proxy_start(g, comm->rank)))
        return ccl__set_error(comm, CCL_ERR_SYSTEM, "rank %d: could not start the port-channel proxy thread",
                              comm->rank);
    GpuPortQueues *q = calloc(1, sizeof *q);
    if (!q || !(q->blk = calloc((size_t)nblocks, sizeof *q->blk))) {
        free(q);
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory", comm->rank);
    }
    q->nblocks = nblocks;
    size_t bytes = (size_t)nblocks * sizeof(CclPortFifo);
    CUresult r = ccl__cu.MemHostAlloc((void **)&q->fifo, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
    if (r == CUDA_SUCCESS) r = ccl__cu.MemHostGetDevicePointer(&q->fifo_dev, q->fifo, 0);
    for (int b = 0; r == CUDA_SUCCESS && b < nblocks; b++) {
        q->blk[b].owns_stream = b == 0 || g->ncolocated == 1;
        if (q->blk[b].owns_stream) r = ccl__cu.StreamCreate(&q->blk[b].stream, CU_STREAM_NON_BLOCKING);
        else q->blk[b].stream = q->blk[0].stream;
        for (int i = 0; r == CUDA_SUCCESS && i < BLOCK_MARKS; i++)
            r = ccl__cu.EventCreate(&q->blk[b].event[i], CU_EVENT_DISABLE_TIMING);
    }
    if (r != CUDA_SUCCESS) {
        port_free(g, q);
        return ccl__set_error(comm, CCL_ERR_CUDA, "rank %d: setting up port-channel queues failed: %s", comm->rank,
                              ccl__cuda_error(r));
    }
    memset(q->fifo, 0, bytes);
    GpuProxy *p = g->proxy;
    pthread_mutex_lock(&p->lock);
    q->next = p->queues;
    p->queues = q;
    pthread_mutex_unlock(&p->lock);
    *out = q;
    return CCL_OK;
}

uint64_t ccl__gpu_port_address(const GpuPortQueues *q) { return q ? (uint64_t)q->fifo_dev : 0; }

void ccl__gpu_port_close(GpuComm *g, GpuPortQueues *q)
{
    if (!q) return;
    GpuProxy *p = g->proxy;
    pthread_mutex_lock(&p->lock);
    for (GpuPortQueues **link = &p->queues; *link; link = &(*link)->next)
        if (*link == q) {
            *link = q->next;
            break;
        }
    pthread_mutex_unlock(&p->lock);
    port_free(g, q); /* waits for copies still in flight: they touch memory freed next */
}

int ccl__gpu_proxy_error(GpuComm *g, char *buf, size_t len)
{
    GpuProxy *p = g->proxy;
    if (!p) return 0;
    pthread_mutex_lock(&p->lock);
    int failed = p->error[0] != 0;
    if (failed) snprintf(buf, len, "%s", p->error);
    pthread_mutex_unlock(&p->lock);
    return failed;
}

void ccl__gpu_proxy_stop(GpuComm *g)
{
    GpuProxy *p = g->proxy;
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_mutex_unlock(&p->lock);
    pthread_join(p->thread, NULL);
    pthread_mutex_destroy(&p->lock);
    free(p);
    g->proxy = NULL;
}
