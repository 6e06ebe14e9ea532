/* ccl.h: the whole public API of libccl.
 *
 * libccl runs collective algorithms written in the CCL language (see docs/language.md)
 * on GPUs (CUDA, symmetric memory over NVLink) or, where no GPU is present, on the CPU
 * backend (ranks as host threads or as processes sharing POSIX shared memory).
 *
 * Conventions, as in NCCL:
 *  - every call returns a ccl_result_t; CCL_OK is 0. On failure ccl_comm_last_error()
 *    says what went wrong and which argument, function or peer was at fault. The library
 *    never prints, exits or aborts on its own.
 *  - collectives are asynchronous: they are enqueued on `stream` (a cudaStream_t /
 *    CUstream on the GPU backend; ignored, pass NULL, on the CPU backend) and complete
 *    in order. ccl_comm_synchronize() waits for everything a communicator enqueued and
 *    returns the first asynchronous error (a timeout naming rank, thread block,
 *    statement and peer, for example).
 *  - `count` is in elements, with NCCL's meaning per collective (docs/api.md).
 */
#ifndef CCL_H
#define CCL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CCL_VERSION_MAJOR 0
#define CCL_VERSION_MINOR 1
#define CCL_VERSION_PATCH 0

/* The version of the library a program runs with, "MAJOR.MINOR.PATCH" (the macros above
 * are the version it was compiled against); never NULL. */
const char *ccl_version(void);

/* Results, with their strings, from one table. */
#define CCL_RESULTS(X)                                                                       \
    X(CCL_OK, "success")                                                                     \
    X(CCL_ERR_INVALID_ARGUMENT, "invalid argument")                                          \
    X(CCL_ERR_INVALID_USAGE, "invalid usage (a call out of order or on the wrong object)")  \
    X(CCL_ERR_COMPILE, "the algorithm did not compile or could not be proved")              \
    X(CCL_ERR_NO_ALGORITHM, "no loaded algorithm serves this collective")                   \
    X(CCL_ERR_UNSUPPORTED, "not supported by this backend or build")                        \
    X(CCL_ERR_NOT_SYMMETRIC, "buffer is not in symmetric memory where it must be")          \
    X(CCL_ERR_OUT_OF_MEMORY, "out of memory")                                               \
    X(CCL_ERR_TIMEOUT, "a wait timed out (a peer is dead, slow or the plan is wrong)")      \
    X(CCL_ERR_PEER_FAILED, "a peer failed or left")                                         \
    X(CCL_ERR_CUDA, "CUDA driver error")                                                    \
    X(CCL_ERR_NVRTC, "NVRTC compilation failed")                                            \
    X(CCL_ERR_SYSTEM, "system call failed")                                                 \
    X(CCL_ERR_INTERNAL, "internal error in libccl")

typedef enum {
#define CCL_RESULT_ENUM(name, str) name,
    CCL_RESULTS(CCL_RESULT_ENUM)
#undef CCL_RESULT_ENUM
    CCL_NUM_RESULTS
} ccl_result_t;

/* The fixed string for a result ("invalid argument"); never NULL. */
const char *ccl_result_string(ccl_result_t r);

/* Integers wrap around in their own width; min and max compare them as their type.
 * CCL_I8, CCL_U32 and CCL_U64 are NCCL's ncclInt8, ncclUint32, ncclUint64. */
typedef enum {
    CCL_F32, CCL_F64, CCL_F16, CCL_BF16, CCL_I32, CCL_I64, CCL_U8,
    CCL_FP8_E4M3, CCL_FP8_E5M2,
    CCL_I8, CCL_U32, CCL_U64,
    CCL_NUM_DTYPES
} ccl_dtype_t;

typedef enum { CCL_SUM, CCL_PROD, CCL_MIN, CCL_MAX, CCL_AVG, CCL_NUM_OPS } ccl_op_t;

typedef enum { CCL_BACKEND_AUTO, CCL_BACKEND_CPU, CCL_BACKEND_GPU } ccl_backend_t;

size_t ccl_dtype_size(ccl_dtype_t t);          /* 0 for an invalid dtype */
const char *ccl_dtype_name(ccl_dtype_t t);     /* "f32", "bf16", ...; "?" if invalid */
const char *ccl_op_name(ccl_op_t op);          /* "sum", ...; "?" if invalid */
/* Parse "bf16", "f32", "sum", ... ; return 0 on success, -1 for an unknown name. */
int ccl_dtype_parse(const char *name, ccl_dtype_t *out);
int ccl_op_parse(const char *name, ccl_op_t *out);

typedef struct ccl_comm ccl_comm_t;
typedef struct ccl_algorithm ccl_algorithm_t;

/* The default bound on every wait (timeout_ms 0, no CCL_TIMEOUT_MS): 10 minutes, as
 * PyTorch's. A timeout stops the communicator, so it must never end a wait that would
 * have completed (a rank writing a checkpoint or compiling before it joins); a dead peer
 * is found by other means, at once (docs/api.md, "Reliability"). */
#define CCL_DEFAULT_TIMEOUT_MS 600000

/* Communicator settings; zero-initialize and set what you need. */
typedef struct {
    ccl_backend_t backend;    /* AUTO: GPU when one is present, else CPU */
    int timeout_ms;           /* bound on every wait; 0: CCL_TIMEOUT_MS or CCL_DEFAULT_TIMEOUT_MS */
    const char *cache_dir;    /* compiled-kernel cache; NULL: CCL_CACHE_DIR or ~/.cache/ccl */
    size_t heap_bytes;        /* symmetric heap per rank; 0: CCL_HEAP_BYTES, else 1 GiB (GPU), 256 MiB (CPU) */
} ccl_config_t;

/* Bootstrap for one process per rank: the runtime needs only an all-gather and a
 * barrier among the processes, and only during ccl_comm_init_rank. ccl_mpi.h adapts an
 * MPI_Comm to this. */
typedef struct {
    int nranks, rank;
    /* Gathers `bytes` from every rank into out (nranks * bytes, rank order). 0 on success.
     * What it returns is checked (a frame per entry): damaged data fails the init. */
    int (*allgather)(void *ctx, const void *in, void *out, size_t bytes);
    int (*barrier)(void *ctx);
    void *ctx;
} ccl_bootstrap_t;

/* A `device` that lets the library choose: the rank's index among the ranks on its host,
 * modulo the GPUs there. Ranks beyond the GPU count share GPUs in threads mode
 * (ccl_comm_init_all; for correctness and development, not speed: docs/gpu-backend.md);
 * separate processes never share one (ccl_comm_init_rank fails on every rank, saying so). */
#define CCL_DEVICE_AUTO (-1)

/* One process per rank (mpirun -np N): every process calls this collectively. `device` is
 * the GPU this process drives, or CCL_DEVICE_AUTO (ignored on the CPU backend). */
ccl_result_t ccl_comm_init_rank(ccl_comm_t **comm, const ccl_bootstrap_t *bootstrap, int device,
                                const ccl_config_t *config);

/* The inter-node transport of a communicator that spans several nodes (docs/multinode.md):
 * point-to-point messages between processes, which libccl's proxy thread (one per
 * communicator) posts and polls; the communicator's worker thread does the same while it
 * waits for point-to-point messages, never while the proxy does (one of them at a time
 * calls the transport). ccl_mpi.h fills one from an MPI_Comm; libccl itself
 * links no MPI. Messages between two ranks must arrive in the order they were sent
 * (MPI's non-overtaking rule on one communicator and tag). Every function returns 0 on
 * success, anything else on an error of the transport. An error of a call about one peer
 * (isend, irecv, or the test of a request with that peer) is taken as that peer lost: the
 * proxy calls the transport for it no more (its requests are neither tested nor cancelled
 * again, and their buffers may be freed before release, so the transport must not touch
 * them after such an error) and goes on with the other peers, to tell them which rank is
 * gone. */
typedef struct ccl_net {
    /* Starts sending `bytes` at buf to rank `peer`; *req is the request to test. */
    int (*isend)(void *ctx, int peer, const void *buf, size_t bytes, void **req);
    /* Starts receiving the next message from `peer`, of at most `bytes`, into buf. */
    int (*irecv)(void *ctx, int peer, void *buf, size_t bytes, void **req);
    /* *done = 1 once req completed (then *bytes is a receive's length and req is
     * released), else 0. */
    int (*test)(void *ctx, void *req, int *done, size_t *bytes);
    /* Cancels a receive that will not complete (the communicator is going away) and
     * releases req: 0. Non-zero where it cannot (a receive already matched to a message
     * whose sender died): req then stays the transport's, and libccl never frees or
     * reuses the buffer it names. */
    int (*cancel)(void *ctx, void *req);
    /* Called once, when the communicator is destroyed (or its init failed): releases ctx. */
    void (*release)(void *ctx);
    void *ctx;
    /* Non-zero when the transport may be called from libccl's threads (the proxy's, or
     * the worker's, one at a time) while the application calls it from its own
     * (MPI_THREAD_MULTIPLE); required. */
    int thread_safe;
    /* Optional (NULL: ccl_comm_split refuses such a communicator): the transport of a
     * child of ccl_comm_split. Called from the application's thread on every rank of the
     * communicator, in the same order everywhere, once the ranks have agreed on the
     * split: `color` is the rank's color, or CCL_SPLIT_NOCOLOR where the rank's child
     * needs no transport (it joins none, or its child sits on one node, or cannot be
     * made); `rank` is its rank in the child; `members` a bootstrap among the child's
     * ranks, in the child's rank order, valid during the call (NULL with no color). Fills
     * *child with a transport among the child's ranks (rank i is the child's rank i),
     * released by the child; 0, or an error, whose reason it may write into why (len
     * bytes). ccl_mpi.h's is MPI_Comm_split; ccl_comm_init_rank_id's makes new TCP
     * connections among the members. */
    int (*split)(void *ctx, int color, int rank, const ccl_bootstrap_t *members, struct ccl_net *child, char *why,
                 size_t len);
} ccl_net_t;

/* ccl_comm_init_rank for a communicator whose ranks are ranks_per_node consecutive ranks
 * on each of nranks / ranks_per_node nodes: rank r on node r / ranks_per_node. Ranks of
 * one node share memory as ccl_comm_init_rank's do; ranks of different nodes exchange
 * data only through `net`, driven by a proxy thread. ranks_per_node 0: CCL_RANKS_PER_NODE,
 * else every rank on one host is a node. Only algorithms with a `nodes M x L` line run
 * on a communicator of several nodes (docs/multinode.md); CPU backend only so far. */
ccl_result_t ccl_comm_init_rank_net(ccl_comm_t **comm, const ccl_bootstrap_t *bootstrap, const ccl_net_t *net,
                                    int ranks_per_node, int device, const ccl_config_t *config);

/* A communicator of one process per rank without MPI (torchrun, a job's own launcher), as
 * NCCL's ncclGetUniqueId and ncclCommInitRank (docs/multinode.md, "A unique id over TCP"):
 * one process calls ccl_get_unique_id and hands the id to every rank by its own means (a
 * file, a pipe, a key-value store); every rank then calls ccl_comm_init_rank_id with it.
 *
 * ccl_get_unique_id opens a listening TCP socket, the root (on CCL_BOOTSTRAP_ADDR,
 * "host[:port]", when set; else on the first interface CCL_SOCKET_IFNAME admits; else on
 * this host's first non-loopback IPv4 address; else 127.0.0.1), with a thread of this
 * process that waits for the ranks (bounded by CCL_TIMEOUT_MS, from the first rank's
 * arrival by that rank's timeout), and writes into *id where it listens and a random
 * cookie: a connection without it is refused, with a message. One id serves one
 * communicator. */
#define CCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[CCL_UNIQUE_ID_BYTES];
} ccl_unique_id_t;
ccl_result_t ccl_get_unique_id(ccl_unique_id_t *id);

/* Collective over the nranks processes given the same id: this process becomes `rank`.
 * Every rank connects to the root, which answers once all have come with where each
 * listens; the ranks then connect to each other (one TCP connection per pair), and the
 * communicator's inter-node transport (a ccl_net_t, as ccl_comm_init_rank_net takes) runs
 * over those connections. ranks_per_node as ccl_comm_init_rank_net's (0: CCL_RANKS_PER_NODE,
 * else each host a node). A rank that never comes fails the others within the timeout
 * (config->timeout_ms, else CCL_TIMEOUT_MS), naming it. Several nodes run on the CPU
 * backend only so far; one node, on either. */
ccl_result_t ccl_comm_init_rank_id(ccl_comm_t **comm, int nranks, ccl_unique_id_t id, int rank, int ranks_per_node,
                                   int device, const ccl_config_t *config);

/* One process driving all ranks: comms[i] is rank i, on GPU devices[i] (devices may be
 * NULL: every rank CCL_DEVICE_AUTO, rank i on GPU i modulo the GPU count; ignored on the
 * CPU backend). */
ccl_result_t ccl_comm_init_all(ccl_comm_t **comms, int nranks, const int *devices,
                               const ccl_config_t *config);

ccl_result_t ccl_comm_destroy(ccl_comm_t *comm);

/* Splits comm as ncclCommSplit does: every rank of comm calls it (collectively, blocking,
 * as an init); ranks that pass the same color get a new communicator *newcomm of their
 * own, ranked by key (ties by their rank in comm). A rank passing CCL_SPLIT_NOCOLOR joins
 * none (*newcomm = NULL). config NULL: the children get comm's settings (backend,
 * timeout, cache folder, heap size). With ccl_comm_init_all's comms, call it from one
 * thread per rank, or for every rank between ccl_group_start and ccl_group_end. */
#define CCL_SPLIT_NOCOLOR (-1)
ccl_result_t ccl_comm_split(ccl_comm_t *comm, int color, int key, ccl_comm_t **newcomm, const ccl_config_t *config);
ccl_result_t ccl_comm_rank(const ccl_comm_t *comm, int *rank);
ccl_result_t ccl_comm_size(const ccl_comm_t *comm, int *nranks);
ccl_result_t ccl_comm_backend(const ccl_comm_t *comm, ccl_backend_t *backend);

/* Waits for every operation enqueued on comm; returns the first asynchronous error. */
ccl_result_t ccl_comm_synchronize(ccl_comm_t *comm);

/* NCCL-style control, safe from any thread while another uses comm (docs/api.md).
 * ccl_comm_abort stops this rank's in-flight and queued work and makes every peer's
 * work fail at once (CCL_ERR_PEER_FAILED naming this rank); comm is dead afterwards
 * (CCL_ERR_INVALID_USAGE) and must still be destroyed, by the thread that uses it.
 * ccl_comm_get_async_error stores in *result the first asynchronous failure seen so
 * far without waiting (CCL_OK: none yet) and does not consume it. Both may also overlap
 * ccl_comm_destroy of comm on another thread: the destroy waits for a call in progress,
 * and a call made once it has begun is refused (CCL_ERR_INVALID_ARGUMENT). */
ccl_result_t ccl_comm_abort(ccl_comm_t *comm);
ccl_result_t ccl_comm_get_async_error(ccl_comm_t *comm, ccl_result_t *result);

/* The last error on comm, with details ("ccl_all_reduce: argument 'count' ..."). Empty
 * when none. Valid until the next call on comm. A NULL comm gives the last error of a
 * failed init on this thread. */
const char *ccl_comm_last_error(const ccl_comm_t *comm);

/* Symmetric memory: a buffer that every peer can reach (zero-copy collectives). Collective
 * in the sense that every rank must allocate the same sizes in the same order (then a
 * buffer sits at the same heap offset on every rank); pass symmetric buffers to a
 * collective on every rank or on none. Ordinary buffers work too, through staging. */
ccl_result_t ccl_mem_alloc(ccl_comm_t *comm, void **ptr, size_t bytes);
ccl_result_t ccl_mem_free(ccl_comm_t *comm, void *ptr);

/* Registration: makes the user's memory [ptr, ptr + bytes) reachable by every peer in
 * place, so that calls on buffers inside it run zero-copy, as on ccl_mem_alloc buffers
 * (NCCL's ncclCommWindowRegister). Collective: every rank calls it, in the same order,
 * with the same `bytes`; every rank fails alike (naming the rank at fault) when one
 * cannot register. What qualifies (docs/api.md, "Registered memory"): on GPUs, device
 * memory of this rank's GPU from cuMemCreate (with a POSIX file-descriptor handle type
 * when ranks run in several processes); a ccl_mem_alloc buffer on either backend; on
 * the CPU backend in one process any memory (recorded; calls still stage it). Other
 * memory (cudaMalloc, host memory) is refused with the reason and what to do. A range
 * that is registered already, or lies inside a registration, is answered from a cache
 * with no exchange: *reg is that registration, with one more reference. The
 * registration holds the memory's allocations: deregister before freeing the memory. */
typedef struct ccl_mem_reg ccl_mem_reg_t;
ccl_result_t ccl_mem_register(ccl_comm_t *comm, void *ptr, size_t bytes, ccl_mem_reg_t **reg);
/* Drops one reference; the last is collective (every rank deregisters the same
 * registration at the same point of its calls): it waits for the communicator's work
 * and unmaps the memory on every rank. CUDA graphs that captured calls on it must not be
 * replayed afterwards. On a communicator that failed it releases locally. */
ccl_result_t ccl_mem_deregister(ccl_comm_t *comm, ccl_mem_reg_t *reg);

/* Memory pools for frameworks, with torch.cuda.memory.CUDAPluggableAllocator's
 * signatures (the Python package's ccl.torch.mem_pool; docs/python.md). attach makes
 * comm serve ccl_mem_pool_alloc for its GPU (one comm per GPU in a process; destroy
 * detaches). ccl_mem_pool_alloc makes device memory peers can map and registers it:
 * collective, so every rank's pool must allocate the same sizes in the same order (as
 * ccl_mem_alloc); NULL on failure, the reason in ccl_comm_last_error(comm).
 * ccl_mem_pool_free frees it at once on this rank; its registration's mappings go when
 * every rank has freed it (at the next registration call, or destroy). GPU backend only
 * (CCL_ERR_UNSUPPORTED elsewhere). */
ccl_result_t ccl_mem_pool_attach(ccl_comm_t *comm);
ccl_result_t ccl_mem_pool_detach(ccl_comm_t *comm);
void *ccl_mem_pool_alloc(ptrdiff_t bytes, int device, void *stream);
void ccl_mem_pool_free(void *ptr, ptrdiff_t bytes, int device, void *stream);

/* Copies `bytes` between host memory and memory of this communicator's backend (its
 * ccl_mem_alloc buffers, or device memory on the GPU backend), either way, after the
 * communicator's queued work and before returning: for filling and checking buffers in
 * code that runs on either backend (on GPUs, cudaMemcpy does the same). */
ccl_result_t ccl_mem_copy(ccl_comm_t *comm, void *dst, const void *src, size_t bytes);

/* Compiles (or loads from cache) an algorithm for this communicator's rank count and rank.
 * `path_or_source`: a file path, or CCL source text when it starts (after blanks and #
 * comments) with the word "algorithm". `root` is used by rooted collectives (broadcast,
 * reduce) and ignored otherwise. The full compiler diagnostics are in
 * ccl_comm_last_error() on CCL_ERR_COMPILE; a program whose `ranks`/`where` lines do not
 * admit this N gives CCL_ERR_INVALID_ARGUMENT (argument 'comm') with the compiler's
 * message. Every rank loads the same algorithms in the same order. */
ccl_result_t ccl_algorithm_load(ccl_comm_t *comm, const char *path_or_source, int root,
                                ccl_algorithm_t **alg);
ccl_result_t ccl_algorithm_free(ccl_algorithm_t *alg);
/* The algorithm's name and its collective ("allreduce", ...), as in its header. */
const char *ccl_algorithm_name(const ccl_algorithm_t *alg);
const char *ccl_algorithm_collective(const ccl_algorithm_t *alg);

/* Proves an algorithm for `nranks` ranks (and `root`, for broadcast and reduce) without a
 * communicator, as `cclc check FILE --ranks N --explain` does; path_or_source as for
 * ccl_algorithm_load. The report goes to buf (at most len bytes, NUL-terminated; buf may
 * be NULL when len is 0) and *needed (may be NULL) gets its full size with the NUL, so a
 * caller can ask again with a larger buffer. On CCL_OK the report says what was proved;
 * on CCL_ERR_COMPILE (the program does not parse, expand or prove) and on
 * CCL_ERR_INVALID_ARGUMENT for a program whose `ranks`/`where` lines do not admit
 * nranks, it holds the compiler's `file:line:col: error:` diagnostics with carets. An
 * unreadable file or nranks out of range also give CCL_ERR_INVALID_ARGUMENT. The
 * message is in ccl_comm_last_error(NULL) too (possibly truncated). Thread-safe. */
ccl_result_t ccl_algorithm_check(const char *path_or_source, int nranks, int root, char *buf,
                                 size_t len, size_t *needed);

/* Runs a loaded algorithm. count is in elements with the collective's meaning; op is
 * ignored by collectives that do not reduce. In place is NCCL's (send == recv; allgather:
 * send == recv + rank*count; reduce_scatter: recv == send + rank*count); where the
 * program is not proved in place, the input is copied aside first. */
ccl_result_t ccl_algorithm_run(ccl_algorithm_t *alg, const void *sendbuf, void *recvbuf,
                               size_t count, ccl_dtype_t dtype, ccl_op_t op, void *stream);

/* Standard collectives, NCCL's argument order. They run the latest algorithm registered
 * with ccl_comm_use_algorithm() whose collective, root and byte range fit, else one from
 * the shipped library ($CCL_ALGORITHM_DIR, else the installed share/ccl/algorithms next
 * to libccl, or the build tree's algorithms/; docs/api.md), picked by its `sizes` hint. */
ccl_result_t ccl_all_reduce(const void *sendbuf, void *recvbuf, size_t count, ccl_dtype_t dtype,
                            ccl_op_t op, ccl_comm_t *comm, void *stream);
ccl_result_t ccl_all_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                            ccl_dtype_t dtype, ccl_comm_t *comm, void *stream);
ccl_result_t ccl_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                ccl_dtype_t dtype, ccl_op_t op, ccl_comm_t *comm, void *stream);
ccl_result_t ccl_all_to_all(const void *sendbuf, void *recvbuf, size_t count, ccl_dtype_t dtype,
                            ccl_comm_t *comm, void *stream);
ccl_result_t ccl_broadcast(const void *sendbuf, void *recvbuf, size_t count, ccl_dtype_t dtype,
                           int root, ccl_comm_t *comm, void *stream);
ccl_result_t ccl_reduce(const void *sendbuf, void *recvbuf, size_t count, ccl_dtype_t dtype,
                        ccl_op_t op, int root, ccl_comm_t *comm, void *stream);

/* A barrier on stream: enqueued like a collective (every rank calls it, in the same
 * place of its call sequence); it completes on a rank only once every rank has reached
 * it, so what a rank enqueues after it runs after every rank's work before it has
 * started, and ccl_comm_synchronize after it returns only once every rank is there.
 * A one-element all-reduce inside (docs/api.md). */
ccl_result_t ccl_barrier(ccl_comm_t *comm, void *stream);

/* Variable-size collectives, MPI's argument meaning: counts and displacements in
 * elements, one per rank; rank p's segment of recvbuf is recvcounts[p] elements at
 * displs[p] (rdispls[p]); alltoallv sends sendcounts[p] elements at sdispls[p] to rank p.
 * Displacements may be NULL: segments packed in rank order. Every count may be 0. Counts
 * are checked across ranks: a rank whose recvcounts[q] differs from what rank q sends
 * fails, on every rank, with an error naming both ranks, the segment and both counts
 * (asynchronously, at ccl_comm_synchronize), before any data moves. No in-place form:
 * overlapping buffers are staged. Both backends run them (the GPU backend for programs
 * of at most 32 ranks). */
ccl_result_t ccl_all_gather_v(const void *sendbuf, size_t sendcount, void *recvbuf, const size_t *recvcounts,
                              const size_t *displs, ccl_dtype_t dtype, ccl_comm_t *comm, void *stream);
ccl_result_t ccl_all_to_all_v(const void *sendbuf, const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
                              const size_t *recvcounts, const size_t *rdispls, ccl_dtype_t dtype, ccl_comm_t *comm,
                              void *stream);
/* Runs a loaded allgatherv or alltoallv algorithm: sendcounts and sdispls have one entry
 * per unit of the program's in (allgatherv: 1, alltoallv: N), recvcounts and rdispls N;
 * the displacements may be NULL (packed). */
ccl_result_t ccl_algorithm_run_v(ccl_algorithm_t *alg, const void *sendbuf, const size_t *sendcounts,
                                 const size_t *sdispls, void *recvbuf, const size_t *recvcounts, const size_t *rdispls,
                                 ccl_dtype_t dtype, void *stream);

/* Point-to-point: count elements of buf to (from) rank `peer` of comm, on stream. The
 * k-th ccl_send from rank a to rank b matches the k-th ccl_recv on b from a, whatever
 * groups they are in; the two must name the same count and dtype (a disagreement fails
 * both ranks, asynchronously, naming both calls, before any element is written; a send
 * that completed already, below, leaves its rank to fail at its next call). Only the two
 * ranks take part: other ranks make no call. A send completes only once its receiver
 * has posted the matching receive (rendezvous; the CPU backend waits until the receiver
 * has taken every element, the GPU backend until the data are in the channel or the
 * receiver's buffer), so a send and a recv that wait for each other must be in one
 * group; a call never matched fails when comm's timeout passes, naming it. One
 * exception, as MPI's eager sends: on the CPU backend a send of at most 8 KiB to a rank
 * of another node completes once it has left, within 8 such messages to that rank that
 * its receives have not taken yet (docs/multinode.md); portable code groups them all the
 * same. buf may be any memory this rank can address (ccl_mem_alloc'd or not); it must stay
 * valid and, for a send, unchanged until ccl_comm_synchronize. peer may be the rank
 * itself (a send and a recv to self in one group copy locally). count may be 0. Both
 * backends run them; on the GPU backend buf is device memory (ccl_mem_alloc, cudaMalloc),
 * a group holds at most 128 calls per comm, a group may be captured into a CUDA graph,
 * and a comm's point-to-point launches must run in the order they were made (one
 * stream, or streams ordered by events). */
ccl_result_t ccl_send(const void *buf, size_t count, ccl_dtype_t dtype, int peer, ccl_comm_t *comm, void *stream);
ccl_result_t ccl_recv(void *buf, size_t count, ccl_dtype_t dtype, int peer, ccl_comm_t *comm, void *stream);

/* Groups, as NCCL's: ccl_send and ccl_recv calls between ccl_group_start and the
 * matching ccl_group_end (groups nest; the outermost end counts) are held, then launched
 * together at ccl_group_end, one launch per communicator, all of them progressing at
 * once: so any exchange pattern inside one group completes (a ring's sends and recvs, an
 * all-to-all), none waits for another. Every call of a group on one comm must use the
 * same stream. A call that fails its argument checks inside a group returns its error at
 * once and fails the whole group: ccl_group_end then launches nothing and returns
 * CCL_ERR_INVALID_USAGE naming it (peers waiting for its messages time out, naming
 * theirs). Groups are per thread, and one group may span several comms (one thread
 * driving the ranks of a ccl_comm_init_all communicator). Outside a group a send or recv
 * is a group of one. A group holds at most CCL_GROUP_MAX_CALLS calls, all comms together:
 * the next fails (CCL_ERR_INVALID_USAGE) and so does the group. */
#define CCL_GROUP_MAX_CALLS (1 << 20)   /* calls one group may hold, all comms together */
ccl_result_t ccl_group_start(void);
ccl_result_t ccl_group_end(void);

/* Makes the standard collective of alg's kind use alg for messages of
 * [min_bytes, max_bytes] (0, 0: all sizes). Later registrations win on overlap. */
ccl_result_t ccl_comm_use_algorithm(ccl_comm_t *comm, ccl_algorithm_t *alg, size_t min_bytes,
                                    size_t max_bytes);

/* What the last standard collective on comm ran and why, as one line in buf (at most
 * len bytes, NUL-terminated; "" before the first): the algorithm file and its launch
 * shape (instances, threads per block, slices, protocol), and where the choice came
 * from: a registration, a tuning table's line (CCL_TUNE_FILE, the cache folder's table,
 * or the built-in one; docs/tuner.md) or the library's `sizes` hint, with the reason no
 * table was used. For tests and tuning; reads nothing, loads nothing. */
ccl_result_t ccl_comm_explain_choice(const ccl_comm_t *comm, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
