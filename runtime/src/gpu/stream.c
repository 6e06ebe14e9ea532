/* gpu/stream.c: what the GPU backend's launches share (gpu/backend.c's kernels and
 * copies, gpu/p2p.c's point-to-point kernel), so that neither calls the other for it:
 * a driver failure as comm's error, the launch of a kernel that waits for the stream's
 * previous one (programmatic dependent launch), whether a user buffer is one the GPU can
 * use in place, and, where ranks of one comm share a GPU, the stream a call runs on, the note
 * of which thread makes this rank's calls, the wait for a co-located rank's launch and
 * the marks of the streams this comm queued work on (docs/gpu-backend.md, "Ranks and
 * GPUs"). Calls only gpu/device.c, the driver and the base. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"

ccl_result_t ccl__gpu_cu_fail(ccl_comm_t *comm, CUresult r, const char *what)
{
    return ccl__set_error(comm, CCL_ERR_CUDA, "rank %d: %s failed: %s", comm->rank, what, ccl__cuda_error(r));
}

static int gpu_in_heap(ccl_comm_t *comm, const void *p)
{
    const char *base = comm->heap_base[comm->rank];
    return (const char *)p >= base && (const char *)p < base + comm->heap_bytes;
}

/* A user buffer outside the heap must be memory the GPU can reach: device memory, or
 * pinned host memory mapped for it. Plain host memory would fault in a kernel, or make
 * the staging copy out wait on the host for this rank's kernel, which waits for peers
 * the same thread may be about to launch. */
ccl_result_t ccl__gpu_check_buffer(ccl_comm_t *comm, const void *p, size_t bytes, const char *what)
{
    if (!bytes || gpu_in_heap(comm, p)) return CCL_OK;
    CUdeviceptr dp = 0;
    CUresult r = ccl__cu.PointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, (CUdeviceptr)(uintptr_t)p);
    if (r == CUDA_SUCCESS && dp == (CUdeviceptr)(uintptr_t)p) return CCL_OK;
    return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                          "rank %d: argument '%s' (%p) is host memory the GPU cannot use in place: on the GPU backend "
                          "pass device memory (ccl_mem_alloc, cudaMalloc), filled with ccl_mem_copy or cudaMemcpy",
                          comm->rank, what, p);
}

/* A small number per host thread (from 1), to tell apart the threads that call. */
static _Thread_local uint64_t this_thread_id;
static _Atomic uint64_t thread_ids;

uint64_t ccl__gpu_thread_id(void)
{
    if (!this_thread_id) this_thread_id = atomic_fetch_add(&thread_ids, 1) + 1;
    return this_thread_id;
}

/* Records which thread makes this rank's call (before its first launch). */
void ccl__gpu_note_caller(ccl_comm_t *comm)
{
    GpuComm *g = gpu_comm(comm);
    if (g->launches) atomic_store(&g->launches->slot[comm->nranks + comm->rank], ccl__gpu_thread_id());
}

/* Ranks sharing a GPU: after launching a kernel that waits for its peers, a rank waits
 * until every rank on its GPU has launched its own. The GPU takes work from a few
 * hardware queues that streams share, and a queue entry that waits for earlier work of
 * its own stream (our next kernel or copy, the user's next work) holds the whole queue:
 * a peer's kernel queued behind it would never start while ours spins for it
 * (docs/gpu-backend.md, "Ranks and GPUs"). Every rank launches the same sequence of such
 * kernels per call, so counts line up. A peer whose calls come from this same thread is
 * not waited for (it launches after we return), nor one that has made no call yet;
 * nothing is queued under capture. */
int ccl__gpu_wait_launched(ccl_comm_t *comm, int p, _Atomic uint64_t *count, uint64_t want, double *t0)
{
    GpuComm *g = gpu_comm(comm);
    _Atomic uint64_t *caller = g->launches->slot + comm->nranks;
    uint64_t me = ccl__gpu_thread_id();
    for (unsigned spin = 0; atomic_load_explicit(count, memory_order_acquire) < want; spin++) {
        uint64_t t = atomic_load(&caller[p]);
        if (t == 0 || t == me) break;
        if (spin < 128) continue;
        sched_yield();
        if (spin % 1024) continue;
        double now = ccl__now_ms();
        if (*t0 == 0) *t0 = now;
        if (now - *t0 > comm->timeout_ms) return -1;
    }
    return 0;
}

/* The ranks of this comm that share this rank's GPU, for messages: "0, 1, 3". */
const char *ccl__gpu_colocated_list(const GpuComm *g, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < g->ncolocated && n + 16 < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%d", i ? ", " : "", g->colocated[i]);
    return buf;
}

/* The stream a call runs on. Where ranks of this comm share the GPU their kernels must
 * run at once: a call on the legacy or per-thread default stream (one stream for all
 * of them) runs on the comm's own stream, after the work queued there so far; a user's
 * stream must be non-blocking (a blocking one waits for the legacy stream, and so
 * makes one rank's kernel wait for another's) and this rank's alone. */
ccl_result_t ccl__gpu_call_stream(ccl_comm_t *comm, void *user, CUstream *out, int *capturing)
{
    GpuComm *g = gpu_comm(comm);
    CUstream s = (CUstream)user;
    *out = s;
    *capturing = 0;
    if (g->ncolocated == 1) return CCL_OK;
    char ranks[256];
    if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
        /* Made on first use: every stream may share a hardware queue with a peer's. */
        if (!g->own_stream) {
            CU_CHECK(ccl__cu.StreamCreate(&g->own_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
            CU_CHECK(ccl__cu.EventCreate(&g->order, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
        }
        CU_CHECK(ccl__cu.EventRecord(g->order, s), "cuEventRecord (the default stream's work so far)");
        CU_CHECK(ccl__cu.StreamWaitEvent(g->own_stream, g->order, 0), "cuStreamWaitEvent");
        *out = g->own_stream;
        return CCL_OK;
    }
    /* A capturing stream runs nothing now (and answers no flags query). */
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    CU_CHECK(ccl__cu.StreamIsCapturing(s, &cs), "cuStreamIsCapturing (argument 'stream')");
    *capturing = cs != CU_STREAM_CAPTURE_STATUS_NONE;
    unsigned flags = CU_STREAM_NON_BLOCKING;
    if (!*capturing) CU_CHECK(ccl__cu.StreamGetFlags(s, &flags), "cuStreamGetFlags (argument 'stream')");
    if (!(flags & CU_STREAM_NON_BLOCKING))
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                              "rank %d: argument 'stream' is a blocking stream, but ranks %s of this communicator share "
                              "GPU %d: a blocking stream waits for the legacy default stream, and through it for the "
                              "other ranks' kernels, which wait for this one. Create it with cudaStreamNonBlocking "
                              "(cudaStreamCreateWithFlags), or pass NULL to use the communicator's own stream",
                              comm->rank, ccl__gpu_colocated_list(g, ranks, sizeof ranks), comm->device);
    const void *holder;
    if (!ccl__gpu_stream_claim(g->device, s, comm, &holder))
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                              "rank %d: argument 'stream' already holds rank %d's unfinished work on GPU %d, which "
                              "ranks %s share: one rank's kernel would wait behind the other's, which waits for it. "
                              "Give each rank its own stream (or NULL, the communicator's own)", comm->rank,
                              ((const ccl_comm_t *)holder)->rank, comm->device,
                              ccl__gpu_colocated_list(g, ranks, sizeof ranks));
    return CCL_OK;
}

/* Remembers that this comm queued work on s up to now (shared GPU; gpu_wait_own_work).
 * Captured work is not: a graph's launches are its launcher's to wait for. */
ccl_result_t ccl__gpu_mark_stream(ccl_comm_t *comm, CUstream s, int capturing)
{
    GpuComm *g = gpu_comm(comm);
    if (g->ncolocated == 1 || capturing) return CCL_OK;
    int i = 0;
    while (i < g->nmarks && g->marks[i].stream != s) i++;
    if (i == g->nmarks) {
        if (g->nmarks == g->marks_cap) {
            int cap = g->marks_cap ? 2 * g->marks_cap : 4;
            GpuStreamMark *nm = realloc(g->marks, (size_t)cap * sizeof *nm);
            if (!nm) return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory", comm->rank);
            memset(nm + g->marks_cap, 0, (size_t)(cap - g->marks_cap) * sizeof *nm);
            g->marks = nm;
            g->marks_cap = cap;
        }
        if (!g->marks[i].done) CU_CHECK(ccl__cu.EventCreate(&g->marks[i].done, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
        g->marks[i].stream = s;
        g->nmarks++;
    }
    CU_CHECK(ccl__cu.EventRecord(g->marks[i].done, s), "cuEventRecord");
    return CCL_OK;
}

/* Launches one of our kernels (ccl_kernel, ccl_p2p: those that wait at their entry for
 * the stream's previous kernel) on s, as a programmatic dependent where g->pdl allows. */
CUresult ccl__gpu_launch(const GpuComm *g, CUfunction f, unsigned grid, unsigned threads, CUstream s, void **params)
{
    if (!g->pdl) return ccl__cu.LaunchKernel(f, grid, 1, 1, threads, 1, 1, 0, s, params, NULL);
    CUlaunchAttribute attr = {.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                              .value.programmaticStreamSerializationAllowed = 1};
    CUlaunchConfig cfg = {.gridDimX = grid, .gridDimY = 1, .gridDimZ = 1, .blockDimX = threads, .blockDimY = 1,
                          .blockDimZ = 1, .hStream = s, .attrs = &attr, .numAttrs = 1};
    return ccl__cu.LaunchKernelEx(&cfg, f, params, NULL);
}
