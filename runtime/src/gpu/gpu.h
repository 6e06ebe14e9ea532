/* gpu/gpu.h: state shared by the GPU backend's files (gpu/device.c: what the ranks on one
 * GPU share; gpu/mem.c: the symmetric heap; gpu/window.c: registered memory and pools;
 * gpu/backend.c: kernels, launches, errors;
 * gpu/stream.c: the stream a call runs on, what co-located ranks wait for; gpu/p2p.c:
 * point-to-point; gpu/proxy.c: port channels). */
#ifndef CCL_GPU_H
#define CCL_GPU_H

#include "gpu/driver.h"
#include "gpu/layout.h"
#include "backend.h"

typedef struct GpuProxy GpuProxy;           /* gpu/proxy.c */
typedef struct GpuPortQueues GpuPortQueues;
typedef struct GpuDevice GpuDevice;         /* gpu/device.c */
typedef struct GpuIpc GpuIpc;               /* gpu/ipc.c */
/* How many kernels that wait for peers each rank of a comm has launched, shared by the
 * ranks of the comm that share a GPU (threads of one process): made by the first of
 * them in ccl__gpu_agree_device, freed by the last in ccl__gpu_launch_counts_release. */
typedef struct {
    _Atomic int refs;
    /* [rank]: kernels launched; [nranks + rank]: the thread of its latest call (an id
     * from gpu/backend.c's ccl__gpu_thread_id, 0 before the first); point-to-point (gpu/p2p.c):
     * [2 nranks + a * nranks + b] messages from rank a to rank b whose send a has
     * launched, [2 nranks + nranks^2 + a * nranks + b] those whose recv b has launched. */
    _Atomic uint64_t slot[];
} GpuLaunchCounts;
/* What a rank says about its GPU in ccl__gpu_agree_device's two bootstrap rounds. */
typedef struct {
    int64_t pid;
    uint64_t host;            /* hash of the host name */
    int64_t ordinal;          /* round one: as asked; round two: the GPU it drives, or -1 */
    int64_t ngpus;            /* GPUs its process sees */
    uint8_t uuid[16];         /* round two: the GPU's */
} GpuRankPlace;
/* Rank p's GPU under CCL_DEVICE_AUTO: its index among the ranks on its host, modulo the
 * GPUs there (threads mode: rank % GPUs; processes: local rank % GPUs). */
int ccl__gpu_auto_ordinal(const GpuRankPlace *all, int p);
/* Judges round two from rank me's view (every rank reaches the same verdict): CCL_OK and
 * the ranks that share me's GPU in me's process (me included), or an error in err: a
 * rank without a GPU, or two processes on one GPU (the message says what to do). */
ccl_result_t ccl__gpu_check_places(const GpuRankPlace *all, int n, int me, int64_t asked, int *colocated,
                                   int *ncolocated, char *err, size_t len);

/* A compiled kernel module in a GPU's cache, keyed by its CUDA source. */
typedef enum { GPU_MODULE_LOADING, GPU_MODULE_READY, GPU_MODULE_FAILED } GpuModuleState;
typedef struct GpuModule {
    struct GpuModule *next;
    uint64_t hash;
    size_t len;
    char *source;
    GpuModuleState state;
    CUmodule mod;             /* READY: loaded, functions resolved by the loader */
    CUfunction kernel, avg, barrier, copy;
    /* ccl_kernel's resident blocks per multiprocessor at 32 * i threads per block, read
     * at load time (a driver query at launch could wait behind a peer's kernel). */
    int blocks_per_sm[17];
    char *error;              /* FAILED: why, for every rank that wanted it */
} GpuModule;

/* The last event recorded on a stream this comm queued work on (shared GPUs). */
typedef struct {
    CUstream stream;
    CUevent done;
} GpuStreamMark;

/* comm->be_comm on the GPU backend. */
typedef struct {
    GpuDevice *device;        /* gpu/device.c: shared with every comm on this GPU */
    CUdevice dev;
    CUcontext ctx;            /* the device's primary context, current in every hook */
    int sms;                  /* multiprocessors */
    /* The ranks of this comm that run in this process on this GPU, this one included
     * (one unless several ranks share the GPU: threads mode on fewer GPUs than ranks). */
    int ncolocated;
    int *colocated;
    /* Shared GPU only: the co-located ranks' launch counts (gpu/backend.c,
     * gpu_wait_colocated_launches), one block for all of them. */
    GpuLaunchCounts *launches;
    /* Shared GPU only. `own_stream` runs calls made on the legacy or per-thread default stream
     * (those would serialize the ranks' kernels), after an event (`order`) recorded
     * there; `marks` are the streams queued on since the last synchronize, which waits
     * for them instead of the whole context (that would wait for the peers' kernels). */
    CUstream own_stream;
    CUevent order;
    GpuStreamMark *marks;
    int nmarks, marks_cap;
    /* The GPU's stream for synchronous copies and memsets, which must not wait for
     * the ranks' kernels (gpu/device.c). */
    CUstream quiet;
    int arch;                 /* compute capability as 90 for sm_90 */
    int pdl;                  /* ccl_kernel launches with programmatic dependent launch (gpu_open_device) */
    size_t heap_size;         /* comm->heap_bytes rounded up to the granularity */
    /* Each heap's reservation is heap_size + win_bytes: the window of registered memory
     * follows the heap (comm->win_off = heap_size; gpu/window.c maps there). */
    size_t win_bytes;
    CUmemGenericAllocationHandle own;
    CUdeviceptr own_va;
    CUmemGenericAllocationHandle *imported; /* per rank: a peer process's heap, or 0 */
    CUdeviceptr *mapped;      /* per rank: where we mapped an imported heap, or 0 */
    /* Who is where (gpu/mem.c, for gpu/window.c): every rank's pid, the GPUs of this
     * process's ranks (which this rank grants access to what it maps in its own heap),
     * whether any rank runs in another process, the nonce the ranks' sockets are named
     * after, and the registrations that passed descriptors so far (their sockets' tag). */
    int64_t *pids;
    int *proc_devs;
    int nproc_devs;
    int remote;
    uint64_t nonce;
    uint32_t fd_rounds;
    CUdeviceptr peers;        /* device table: nranks heap bases (comm->heap_base) */
    CUdeviceptr bar_gen;      /* device counter: this rank's all-rank barrier generation */
    /* Private staging (CclCall's NULL in/out), from a stream-ordered pool of our own:
     * cuMemAlloc would be an implicit synchronization (work queued after it never runs
     * beside work queued before), so a co-located peer's kernel, already spinning for
     * this rank, would keep this rank's next kernel from starting. Grow-only; replaced
     * buffers are freed at synchronize. */
    CUmemoryPool stage_pool;
    CUdeviceptr stage[2];
    size_t stage_bytes[2];
    int nretired;
    CUdeviceptr retired[16];
    /* Copies out beside the next piece (CclCall.alternate): their own stream, the event
     * a piece's kernel ends with, and per staged out (CclCall.turn) the end of its latest
     * copy out. */
    CUstream side;
    CUevent piece_done, copied[2];
    GpuProxy *proxy;          /* serves port-channel puts; NULL until the first needs it */
    struct GpuP2p *p2p;       /* gpu/p2p.c's state */
    GpuIpc *ipc;              /* gpu/ipc.c's; NULL where no peer is another process (or it is off) */
} GpuComm;

/* gpu/device.c */
/* Collective: agrees on every rank's GPU (comm->device, or CCL_DEVICE_AUTO: the rank's
 * index among its host's ranks modulo the GPUs there), fails on every rank at once when
 * one has no GPU or two processes would share one, and sets comm->device, g->device,
 * g->colocated and, where ranks share the GPU, g->launches. */
ccl_result_t ccl__gpu_agree_device(ccl_comm_t *comm, GpuComm *g, const ccl_bootstrap_t *boot);
void ccl__gpu_launch_counts_release(GpuComm *g);
/* The entry of GPU `ordinal`, created on first use (retaining its primary context); one
 * reference per comm. NULL with the driver's error in *err. */
GpuDevice *ccl__gpu_device_acquire(int ordinal, CUresult *err);
/* Drops a reference; the last releases everything parked and every cached module. */
void ccl__gpu_device_release(GpuDevice *d);
/* 1 while more than one comm of this process uses the GPU. */
int ccl__gpu_device_shared(GpuDevice *d);
CUcontext ccl__gpu_device_context(const GpuDevice *d);
/* A non-blocking stream of the GPU's for short synchronous work (memsets, copies). */
CUstream ccl__gpu_device_quiet_stream(const GpuDevice *d);
/* Releases that may wait for running kernels: at once on an unshared GPU, else parked
 * until the GPU's last comm is destroyed. */
void ccl__gpu_free_device_mem(GpuDevice *d, CUdeviceptr p);
void ccl__gpu_free_host_mem(GpuDevice *d, void *p);
/* Unmaps [va, va + size) (size 0: nothing), frees the reservation of `reserved` bytes at
 * va (0: it stays, as a window mapping's does) and releases handle (0: none). */
void ccl__gpu_unmap(GpuDevice *d, CUdeviceptr va, size_t size, size_t reserved, CUmemGenericAllocationHandle handle);
/* The cached module of `source`. When it is new, the caller gets it in state LOADING
 * with *load = 1 and must ccl__gpu_module_publish it; otherwise it may still be LOADING
 * by another rank's thread: ccl__gpu_module_wait. NULL when out of memory. */
GpuModule *ccl__gpu_module_claim(GpuDevice *d, const char *source, size_t len, int *load);
void ccl__gpu_module_wait(GpuDevice *d, GpuModule *m);
/* Ends a load: mod (functions set in m by the caller) or the error that stopped it. */
void ccl__gpu_module_publish(GpuDevice *d, GpuModule *m, CUmodule mod, const char *error);
/* Claims stream s for owner (a comm) until ccl__gpu_stream_unclaim_all(owner). 0 and
 * the holder when another comm holds it. */
int ccl__gpu_stream_claim(GpuDevice *d, CUstream s, const void *owner, const void **holder);
void ccl__gpu_stream_unclaim_all(GpuDevice *d, const void *owner);

/* comm->be_comm: the comm's GPU state. */
static inline GpuComm *gpu_comm(ccl_comm_t *comm) { return comm->be_comm; }

/* gpu/backend.c: makes comm's GPU context current on the calling thread (tools that
 * create their own streams, ccl-tune). */
void ccl__gpu_make_current(const ccl_comm_t *comm);
/* gpu/stream.c, shared by gpu/backend.c and gpu/p2p.c (each says more where it is
 * defined): a driver failure as comm's error; a user buffer the GPU can use in place;
 * the calling thread's id and its note as this rank's caller (shared GPU); the stream a
 * call runs on, and the note that this comm queued work there; the ranks that share
 * this rank's GPU, for messages ("0, 1, 3"). */
ccl_result_t ccl__gpu_cu_fail(ccl_comm_t *comm, CUresult r, const char *what);
/* Launches ccl_kernel or ccl_p2p: with programmatic dependent launch where g->pdl (gpu/stream.c). */
CUresult ccl__gpu_launch(const GpuComm *g, CUfunction f, unsigned grid, unsigned threads, CUstream s, void **params);
/* Returns ccl__gpu_cu_fail(comm, ...) from the enclosing function when a driver call
 * fails (`comm` in scope). */
#define CU_CHECK(call, what)                                                                            \
    do {                                                                                                \
        CUresult r_ = (call);                                                                           \
        if (r_ != CUDA_SUCCESS) return ccl__gpu_cu_fail(comm, r_, what);                                \
    } while (0)
ccl_result_t ccl__gpu_check_buffer(ccl_comm_t *comm, const void *p, size_t bytes, const char *what);
uint64_t ccl__gpu_thread_id(void);
void ccl__gpu_note_caller(ccl_comm_t *comm);
ccl_result_t ccl__gpu_call_stream(ccl_comm_t *comm, void *user, CUstream *out, int *capturing);
/* Shared GPU, after a launch whose kernel waits for co-located rank p: waits until p's
 * launch count *count reaches want, unless p is driven by this thread (it launches after
 * we return) or has made no call yet. 0, or -1 once comm's timeout has passed since *t0
 * (0: not yet started; one clock for all the waits of a launch). */
int ccl__gpu_wait_launched(ccl_comm_t *comm, int p, _Atomic uint64_t *count, uint64_t want, double *t0);
ccl_result_t ccl__gpu_mark_stream(ccl_comm_t *comm, CUstream s, int capturing);
const char *ccl__gpu_colocated_list(const GpuComm *g, char *buf, size_t len);

/* gpu/stage.c: this rank's private staging `which` (0 in, 1 out) of at least `bytes`,
 * usable on stream s (grow-only; what it replaced is freed by free_retired once
 * wait_own_work, which waits for what this comm queued, has returned); staging copies
 * with the module's ccl_copy kernel `copy`: bytes from src to dst on s; in rows of
 * `row` bytes where a side is strided (dpitch, spitch; 0: packed); and a piece's copy
 * out of `out` beside the next piece (CclCall.alternate). */
ccl_result_t ccl__gpu_private_stage(ccl_comm_t *comm, int which, size_t bytes, CUstream s, void **out);
CUresult ccl__gpu_wait_own_work(ccl_comm_t *comm);
void ccl__gpu_free_retired(GpuComm *g);
ccl_result_t ccl__gpu_stage_copy(ccl_comm_t *comm, CUfunction copy, void *dst, const void *src, size_t bytes,
                                 CUstream s, const char *what);
ccl_result_t ccl__gpu_stage_rows(ccl_comm_t *comm, CUfunction copy, char *dst, size_t dpitch, const char *src,
                                 size_t spitch, size_t bytes, size_t row, CUstream s, const char *what);
ccl_result_t ccl__gpu_copy_out_beside(ccl_comm_t *comm, CUfunction copy, const CclCall *call, const void *out,
                                      CUstream s);

/* gpu/p2p.c: point-to-point groups (CclBackend.run_p2p). Open, when a comm starts,
 * compiles (disk cache) and loads the ccl_p2p kernel once per GPU; a failure there only
 * makes later sends and receives fail, saying why. The error formats a kernel's failure
 * record as comm's asynchronous error (1) when there is one. */
void ccl__gpu_p2p_open(ccl_comm_t *comm, GpuComm *g);
void ccl__gpu_p2p_close(GpuComm *g);
ccl_result_t ccl__gpu_p2p_run(const CclP2pCall *call);
int ccl__gpu_p2p_error(ccl_comm_t *comm);
ccl_result_t ccl__gpu_p2p_poll(ccl_comm_t *comm);
/* The sizes where comm's point-to-point messages change path (tests): the bytes of a
 * slot's payload (0 when the heap left no room), the largest message sent as LL lines,
 * the smallest receive that offers its ccl_mem_alloc buffer to the sender, and the lanes
 * (slots in flight: lanes x slots). */
void ccl__gpu_p2p_sizes(const ccl_comm_t *comm, size_t *payload, size_t *ll_max, size_t *direct_min, size_t *lanes,
                        size_t *slots);

/* gpu/ipc.c: ordinary receive buffers that a peer process's sends write directly. Open
 * (after the heap: it needs every rank's pid) and close with the comm; serve, at every
 * point-to-point launch, answers the peers' requests and takes their answers; direct is
 * the word a receive from peer p into [buf, buf + bytes) offers its sender
 * (CclP2pGpuCall.direct), or CCL_P2P_NO_DIRECT while p has not mapped that allocation
 * (asking it to, where it may). */
void ccl__gpu_ipc_open(ccl_comm_t *comm, GpuComm *g);
void ccl__gpu_ipc_close(GpuComm *g);
void ccl__gpu_ipc_serve(ccl_comm_t *comm, GpuComm *g);
uint64_t ccl__gpu_ipc_direct(ccl_comm_t *comm, GpuComm *g, int p, const void *buf, size_t bytes);
/* For tests: how many of this rank's allocations peer p has mapped (0 when none, or
 * off); with buf, 1 when p has mapped the allocation buf lies in, else 0. */
int ccl__gpu_ipc_mapped(const ccl_comm_t *comm, int p, const void *buf);

/* gpu/mem.c */
ccl_result_t ccl__gpu_heap_create(ccl_comm_t *comm, GpuComm *g, const ccl_bootstrap_t *boot);
void ccl__gpu_heap_destroy(ccl_comm_t *comm, GpuComm *g);
/* File descriptors between the processes of a comm (the heaps at init, registered memory
 * later), over abstract Unix sockets (SOCK_SEQPACKET) named after the comm's nonce, a
 * tag and the receiving rank. listen: the socket, or -1. send: one message to rank
 * `to`, `head` bytes of data and nfds descriptors (at most CCL__GPU_MAX_FDS); 0 or -1.
 * recv: accepts one message within timeout_ms: its data into head (up to hlen bytes),
 * its descriptors into fds (up to maxfds, *nfds of them); 0 or -1. */
enum { CCL__GPU_MAX_FDS = 250 };
int ccl__gpu_fd_listen(uint64_t nonce, uint32_t tag, int rank, int backlog);
int ccl__gpu_fd_send(uint64_t nonce, uint32_t tag, int to, const void *head, size_t hlen, const int *fds, int nfds);
int ccl__gpu_fd_recv(int ls, int timeout_ms, void *head, size_t hlen, int *fds, int maxfds, int *nfds);

/* The window's size for a device (CCL_WINDOW_BYTES, else twice the GPU's memory rounded
 * up to 4 GiB; SIZE_MAX when the variable is no size). */
size_t ccl__gpu_window_bytes(CUdevice dev);

/* gpu/window.c: registered memory (CclBackend.reg_*) and memory pools (pool_alloc,
 * pool_free). */
ccl_result_t ccl__gpu_reg_inspect(ccl_comm_t *comm, const void *ptr, size_t bytes, CclRegSpan *span, void **state);
ccl_result_t ccl__gpu_reg_map(ccl_comm_t *comm, void *state, const CclRegSpan *all, const size_t *at,
                              const ccl_bootstrap_t *boot);
void ccl__gpu_reg_release(ccl_comm_t *comm, void *state, int at_destroy);
int ccl__gpu_reg_same(ccl_comm_t *comm, void *state, const void *ptr, size_t bytes);
ccl_result_t ccl__gpu_pool_alloc(ccl_comm_t *comm, size_t bytes, void **ptr, size_t *size, void **state);
void ccl__gpu_pool_free(void *state);

#endif
