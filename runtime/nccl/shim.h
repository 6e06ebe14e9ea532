/* shim.h: libccl_nccl's internals, one section per file.
 *
 * libccl_nccl is NCCL's API over libccl's public API (ccl.h) and nothing else of it: an
 * ncclComm_t wraps a ccl communicator and, where a real libnccl is found and the comm
 * runs on GPUs, a real NCCL communicator on the same ranks; each call goes to one of
 * the two (route.c), on the user's stream, so calls stay in order whichever way each
 * one went. Internal names carry the prefix shim_ (functions) or Shim (types); only
 * NCCL's functions are exported (libccl_nccl.map). docs/nccl.md is the user's view. */
#ifndef CCL_NCCL_SHIM_H
#define CCL_NCCL_SHIM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* NVIDIA's header where the build found one (every definition here is then checked
 * against its prototypes), else this folder's copy of the same API. */
#ifdef CCL_NCCL_SYSTEM_HEADER
#include <nccl.h>
#else
#include "nccl.h"
#endif
#include "ccl.h"

#define SHIM_ERR_LEN 2048

/* ---- errors.c: results, last errors and the debug log ---- */

enum { SHIM_LOG_NONE, SHIM_LOG_WARN, SHIM_LOG_INFO, SHIM_LOG_TRACE };

/* NCCL's result for a ccl result (docs/nccl.md, "Errors"). */
ncclResult_t shim_result(ccl_result_t r);
/* Sets the last error of this thread and, when comm is not NULL, of comm (the caller
 * holds it), writes a WARN line when CCL_DEBUG asks, and returns r. */
ncclResult_t shim_fail(ncclComm_t comm, ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The same for a failed ccl call: its result mapped, its message after `what`. */
ncclResult_t shim_fail_ccl(ncclComm_t comm, ccl_result_t r, const ccl_comm_t *cc, const char *what);
/* A warning about a call that still succeeds: the last errors as shim_fail sets them
 * (NCCL's ncclGetLastError gives its last warning too) and a WARN line. */
void shim_warn(ncclComm_t comm, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* What CCL_DEBUG asks for (read once). */
int shim_log_level(void);
void shim_log(int level, int rank, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The thread's last error message ("" when none). */
const char *shim_thread_error(void);
/* CCL_TIMEOUT_MS, else CCL_DEFAULT_TIMEOUT_MS: the rendezvous waits as long as libccl. */
int shim_timeout_ms(void);
/* Whether the environment asks for the CPU backend (CCL_BACKEND=cpu): the test mode. */
int shim_env_cpu(void);
/* Whether a real NCCL may run beside a comm of this backend: on GPUs, and on the CPU
 * backend only where CCL_NCCL_REAL_ON_CPU=1 says that the "real" library is a stand-in
 * that works on host memory (tests/nccl's fake NCCL); NVIDIA's needs GPU buffers. */
int shim_real_fits(ccl_backend_t backend);
int shim_real_on_cpu(void);

/* ---- real.c: the real libnccl, by dlopen ---- */

/* Every function of the real library the shim may call: X(name, return type, parameters).
 * The real communicators and windows are NCCL's objects, held as the opaque pointers
 * ncclComm_t and ncclWindow_t; the shim never looks inside them. */
#define SHIM_REAL_FUNCS(X)                                                                                          \
    X(GetVersion, ncclResult_t, (int *))                                                                            \
    X(GetUniqueId, ncclResult_t, (ncclUniqueId *))                                                                  \
    X(CommInitRankConfig, ncclResult_t, (ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *))                     \
    X(CommInitAll, ncclResult_t, (ncclComm_t *, int, const int *))                                                 \
    X(CommInitRankScalable, ncclResult_t, (ncclComm_t *, int, int, int, ncclUniqueId *, ncclConfig_t *))           \
    X(CommFinalize, ncclResult_t, (ncclComm_t))                                                                     \
    X(CommDestroy, ncclResult_t, (ncclComm_t))                                                                      \
    X(CommAbort, ncclResult_t, (ncclComm_t))                                                                        \
    X(CommRevoke, ncclResult_t, (ncclComm_t, int))                                                                  \
    X(CommSplit, ncclResult_t, (ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *))                               \
    X(CommShrink, ncclResult_t, (ncclComm_t, int *, int, ncclComm_t *, ncclConfig_t *, int))                       \
    X(GetLastError, const char *, (ncclComm_t))                                                                     \
    X(CommCount, ncclResult_t, (ncclComm_t, int *))                                                                 \
    X(CommUserRank, ncclResult_t, (ncclComm_t, int *))                                                              \
    X(CommCuDevice, ncclResult_t, (ncclComm_t, int *))                                                              \
    X(CommGetAsyncError, ncclResult_t, (ncclComm_t, ncclResult_t *))                                               \
    X(CommRegister, ncclResult_t, (ncclComm_t, void *, size_t, void **))                                           \
    X(CommDeregister, ncclResult_t, (ncclComm_t, void *))                                                           \
    X(CommWindowRegister, ncclResult_t, (ncclComm_t, void *, size_t, ncclWindow_t *, int))                         \
    X(CommWindowDeregister, ncclResult_t, (ncclComm_t, ncclWindow_t))                                              \
    X(MemAlloc, ncclResult_t, (void **, size_t))                                                                    \
    X(MemFree, ncclResult_t, (void *))                                                                              \
    X(RedOpCreatePreMulSum, ncclResult_t, (ncclRedOp_t *, void *, ncclDataType_t, ncclScalarResidence_t, ncclComm_t)) \
    X(RedOpDestroy, ncclResult_t, (ncclRedOp_t, ncclComm_t))                                                        \
    X(Reduce, ncclResult_t, (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t)) \
    X(Broadcast, ncclResult_t, (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))      \
    X(AllReduce, ncclResult_t, (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t)) \
    X(ReduceScatter, ncclResult_t, (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t)) \
    X(AllGather, ncclResult_t, (const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t))           \
    X(AlltoAll, ncclResult_t, (const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t))            \
    X(Gather, ncclResult_t, (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))         \
    X(Scatter, ncclResult_t, (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))        \
    X(Send, ncclResult_t, (const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))                   \
    X(Recv, ncclResult_t, (void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))                         \
    X(GroupStart, ncclResult_t, (void))                                                                             \
    X(GroupEnd, ncclResult_t, (void))

typedef struct {
#define SHIM_REAL_FIELD(name, ret, params) ret(*name) params;
    SHIM_REAL_FUNCS(SHIM_REAL_FIELD)
#undef SHIM_REAL_FIELD
    int version;      /* what its ncclGetVersion says */
    char path[1024];  /* the file the loader opened */
} ShimReal;

/* The real library, loaded at the first call (CCL_NCCL_LIB, an already loaded libnccl,
 * the one of torch's nvidia.nccl package, the loader's path; never libccl_nccl itself);
 * NULL when there is none, and then shim_real_why() says why. Functions the library
 * lacks (an older NCCL) are NULL. Thread-safe. */
const ShimReal *shim_real(void);
const char *shim_real_why(void);
/* The loaded library or NULL, without loading it. */
const ShimReal *shim_real_loaded(void);
/* The last error of the real library, for messages ("" when none). */
const char *shim_real_error(ncclComm_t real);

/* ---- device.c: the CUDA driver, by dlopen, for what the shim itself needs of it ---- */

/* This thread's current CUDA device (the CUDA runtime's, as NCCL takes it), or -1 when
 * no CUDA runtime or driver is loaded or usable. */
int shim_current_device(void);
/* Makes dev current on this thread (a deferred init runs on a thread of its own); 0 on
 * success. */
int shim_set_device(int dev);
/* 1 when stream is being captured into a CUDA graph, 0 when not or unknown. */
int shim_stream_capturing(cudaStream_t stream);
/* Device memory from the CUDA runtime or driver (no real libnccl): 0 on success, -1 when
 * the allocation failed, -2 when there is no CUDA at all. */
int shim_cuda_alloc(void **ptr, size_t bytes);
int shim_cuda_free(void *ptr);

/* ---- route.c: which calls go where ---- */

typedef enum {
    SHIM_ALLREDUCE, SHIM_ALLGATHER, SHIM_REDUCESCATTER, SHIM_BROADCAST, SHIM_REDUCE, SHIM_ALLTOALL, SHIM_GATHER,
    SHIM_SCATTER, SHIM_SENDRECV, SHIM_NUM_COLLS
} ShimColl;

typedef enum { SHIM_ROUTE_AUTO, SHIM_ROUTE_CCL, SHIM_ROUTE_NCCL } ShimRoute;
enum { SHIM_TO_CCL, SHIM_TO_NCCL };

/* The collective's name in CCL_NCCL_ROUTE and in summaries ("allreduce", "sendrecv"). */
const char *shim_coll_name(ShimColl c);
const char *shim_route_name(ShimRoute r);
/* Parses CCL_NCCL_ROUTE ("auto", "ccl", "nccl", or "allreduce:ccl,allgather:nccl,
 * default:auto"); 0, or -1 with the reason in err. */
int shim_routes_parse(const char *spec, ShimRoute out[SHIM_NUM_COLLS], char *err, size_t len);
/* Whether any collective may go to NCCL (some route is not "ccl"), or to libccl (some
 * route is not "nccl"). */
int shim_routes_want_nccl(const ShimRoute routes[SHIM_NUM_COLLS]);
int shim_routes_want_ccl(const ShimRoute routes[SHIM_NUM_COLLS]);
/* Whether some collective must go to NCCL (a route says "nccl"); its name or NULL. */
const char *shim_routes_need_nccl(const ShimRoute routes[SHIM_NUM_COLLS]);
/* The routes as one phrase ("auto for every call", "allreduce ccl, allgather nccl, ...
 * auto for the rest"). */
void shim_routes_describe(const ShimRoute routes[SHIM_NUM_COLLS], char *buf, size_t len);
/* Parses CCL_NCCL_AUTO_LIMIT for a comm of nranks ranks: per collective, the bytes (of
 * the call's larger buffer) from which an auto-routed call goes to NCCL; SIZE_MAX for
 * none. Unset: on GPUs the built-in limits (measured), on the CPU backend none. 0, or -1
 * with the reason in err. */
int shim_auto_limits_parse(const char *spec, int nranks, int gpu, size_t out[SHIM_NUM_COLLS], char *err, size_t len);
/* How many calls of each collective went where on comm, as one line ("allreduce 12 ccl
 * 0 nccl, ..."); "no calls" when none. */
struct ncclComm;
void shim_summary(const struct ncclComm *comm, char *buf, size_t len);

/* ---- comm.c: communicators (create.c: the calls that make one inside a group) ---- */

/* A reduction operator made by ncclRedOpCreatePreMulSum: ncclNumOps + its index. */
typedef struct {
    int used;
    ncclDataType_t dtype;
    ncclScalarResidence_t residence;
    unsigned char scalar[8];  /* the value (host-immediate) */
    const void *scalar_ptr;   /* where to read it at each call (device residence) */
    ncclRedOp_t real_op;      /* the real comm's operator, where there is one */
    int has_real_op;
} ShimRedOp;

struct ncclComm {
    uint64_t magic;           /* SHIM_COMM_MAGIC while the comm lives */
    struct ncclComm *next;    /* in the registry of live comms */
    ccl_comm_t *ccl;          /* NULL for a comm only NCCL has (ncclCommShrink) */
    ncclComm_t real;          /* the real NCCL's communicator, or NULL */
    int rank, nranks, device;
    ccl_backend_t backend;
    ShimRoute routes[SHIM_NUM_COLLS];
    size_t auto_limit[SHIM_NUM_COLLS]; /* auto: from these bytes a call goes to NCCL */
    /* (collective, dtype, op kind) that libccl refused in auto mode; they go to NCCL. */
    unsigned char refused[SHIM_NUM_COLLS][ncclNumTypes][2];
    atomic_ulong calls[SHIM_NUM_COLLS][2]; /* [collective][SHIM_TO_CCL or SHIM_TO_NCCL] */
    int finalized, aborted;
    /* One thread made this comm with other ranks of its clique (ncclCommInitAll, several
     * inits of one id in one group; a split's child inherits it), so that thread may
     * drive them all: a call that waits for the peers (libccl's collective registration)
     * is made only inside a group, where the group's end runs it per comm on threads of
     * its own (mem.c). */
    int shared_thread;
    /* mem.c's, set with the comm's first registration: forgets its registrations and
     * windows at its end (the real NCCL frees its own, ccl_comm_destroy libccl's). */
    void (*drop_regs)(struct ncclComm *comm);
    char name[64];            /* ncclConfig_t.commName, for messages */

    pthread_mutex_t mu;       /* last_error, redops */
    char last_error[SHIM_ERR_LEN];
    ShimRedOp *redops;
    int nredops;

    /* Calls in progress (shim_comm_get), which destroy and abort wait for. */
    int refs, dying;
    pthread_cond_t idle;
};

/* Makes a comm's wrapper, not yet live: ranks, backend and routes from its parts. */
ncclComm_t shim_comm_new(void);
/* Fills rank, size and backend from c->ccl (or c->real), and makes the comm live. */
ncclResult_t shim_comm_publish(ncclComm_t c, const ShimRoute routes[SHIM_NUM_COLLS], const char *fn);
/* Frees a wrapper that never went live, with what it holds; shim_comm_free frees the
 * wrapper alone. */
void shim_comm_discard(ncclComm_t c);
void shim_comm_free(ncclComm_t c);
/* The comm's route table from CCL_NCCL_ROUTE; ncclInvalidArgument with the message set. */
ncclResult_t shim_routes_from_env(ShimRoute routes[SHIM_NUM_COLLS], const char *fn);
/* ncclInvalidArgument (the message set) for a config NCCL_CONFIG_INITIALIZER did not
 * start; the config the real NCCL gets (the user's, blocking: a copy in *copy, or NULL);
 * the comm's name from the config. */
ncclResult_t shim_check_config(const ncclConfig_t *config, const char *fn);
ncclConfig_t *shim_real_config(const ncclConfig_t *config, ncclConfig_t *copy);
void shim_copy_name(ncclComm_t c, const ncclConfig_t *config);
/* Makes a split's child live once both libraries wrote their halves into it (or frees
 * it: *newcomm NULL for NCCL_SPLIT_NOCOLOR); `fn` names the call in messages. The
 * group's end calls shim_group_split_done for held splits (fn: ncclCommSplit). */
ncclResult_t shim_split_finish(ncclComm_t parent, ncclComm_t child, ncclComm_t *newcomm, const char *fn);
ncclResult_t shim_group_split_done(ncclComm_t parent, ncclComm_t child, ncclComm_t *newcomm);
/* Makes a comm from an id now (outside a group, or from a group's init thread). */
ncclResult_t shim_init_rank_now(ncclComm_t *out, int nranks, int nid, const ncclUniqueId *ids, int rank,
                                const ncclConfig_t *config, const char *fn);

/* ---- registry.c: the live communicators ---- */

/* Makes c live (shim_comm_publish). */
void shim_comm_register(ncclComm_t c);
/* Holds a live comm for the length of a call: ncclSuccess, or ncclInvalidArgument naming
 * `fn`'s argument 'comm' (the message set). */
ncclResult_t shim_comm_get(ncclComm_t comm, const char *fn);
void shim_comm_put(ncclComm_t comm);
/* The same without a message: 1 when held, 0 when comm is not live. */
int shim_comm_hold(ncclComm_t comm);
/* The real library's comms: adopted when a comm holding one goes live, dropped once the
 * real destroy or abort returned (the real library's own calls during it may name it). */
void shim_real_adopt(ncclComm_t real);
void shim_real_drop(ncclComm_t real);
/* shim_comm_get for the functions the real library calls by their names: ncclSuccess
 * and *pass NULL with comm held, as shim_comm_get; ncclSuccess and *pass the real
 * library when comm is one of its comms (the call is the real library's own: pass it
 * back with the same arguments, comm not held); else shim_comm_get's error. */
ncclResult_t shim_comm_get_or_real(ncclComm_t comm, const char *fn, const ShimReal **pass);
/* Whether comm is live (a group checks the comms it touched). */
int shim_comm_live(ncclComm_t comm);
/* Takes comm out of the registry (after stopping its work, for an abort) and waits
 * until no call holds it; ncclSuccess, or ncclInvalidArgument when it is not live (a
 * second destroy). */
ncclResult_t shim_comm_retire(ncclComm_t comm, const char *fn, int abort);

/* ---- rendezvous.c: ncclUniqueId and the TCP rendezvous behind it ---- */

/* What an id says: where its root listens and the job's nonce. */
typedef struct {
    uint64_t nonce;
    int family;               /* AF_INET or AF_INET6 */
    uint16_t port;            /* host order */
    unsigned char addr[16];
    char text[80];            /* "10.0.0.1:41234", for messages */
} ShimId;

/* Starts a root (a thread of this process that serves one communicator's init) and
 * writes its id; real_id, when not NULL, travels to every rank at its join. */
ncclResult_t shim_id_make(ncclUniqueId *id, const ncclUniqueId *real_id);
/* Reads an id; -1 with the reason when it is not one of ours or is damaged. */
int shim_id_parse(const ncclUniqueId *id, ShimId *out, char *err, size_t len);
/* Tells the root of an id no rank will join (ncclCommInitRankScalable's other ids) to
 * stop, and gets the real NCCL id it carries; 0 on success. */
int shim_id_release(const ShimId *id, ncclUniqueId *real_id, int *has_real, char *err, size_t len);

typedef struct ShimClient ShimClient;
/* Joins the rendezvous as `rank` of `nranks`; returns once every rank has joined, with
 * the real NCCL id the root carries (has_real 0 when none). NULL with the reason in err
 * and NCCL's result for it in *code (the root's verdict: ncclInvalidArgument for ranks
 * that disagree on nranks or share a rank, ncclRemoteError for a rank that left or never
 * came; ncclSystemError for a root that cannot be reached). */
ShimClient *shim_client_join(const ShimId *id, int nranks, int rank, ncclUniqueId *real_id, int *has_real,
                             ncclResult_t *code, char *err, size_t len);
/* An all-gather over the rendezvous (rank order); 0, or -1 with the reason in
 * shim_client_why and NCCL's result for it in shim_client_code. */
int shim_client_allgather(ShimClient *c, const void *in, void *out, size_t bytes);
const char *shim_client_why(const ShimClient *c);
ncclResult_t shim_client_code(const ShimClient *c);
/* libccl's bootstrap over the client (valid while the client is). */
ccl_bootstrap_t shim_client_bootstrap(ShimClient *c);
/* Leaves the rendezvous (the root stops once every rank has left) and frees c. */
void shim_client_leave(ShimClient *c);

/* ---- group.c: ncclGroupStart/End ---- */

/* Whether this thread is inside a group. */
int shim_group_depth(void);
/* Opens the real library's group to this thread's depth before a real call inside a
 * group (the real group is opened only where a real call is made). */
void shim_group_real_enter(const ShimReal *real);
/* Records a comm that a call used inside the group (CPU backend: synchronized at the
 * group's end), a buffer to free at the end, the first failure of a call in the group. */
void shim_group_touch(ncclComm_t comm);
int shim_group_keep(void *buffer);
void shim_group_fail(ncclResult_t r);
/* A step the outermost ncclGroupEnd runs for comm: run(comm, step, comm_live), on a
 * thread of comm's own (comm_live: whether comm is still live, held for the run; a step
 * of a comm destroyed meanwhile is only to be freed), each comm's steps in the order
 * held. Its result is the group's failure, if any. */
typedef ncclResult_t (*ShimHeldRun)(ncclComm_t comm, void *step, int comm_live);
/* Holds such a step (mem.c's registrations: libccl's is collective, so one thread may
 * register every rank only through a thread per comm) until the outermost group's end;
 * ncclSystemError (the message set) out of memory. */
ncclResult_t shim_group_hold(ncclComm_t comm, void *step, ShimHeldRun run);
/* Defers an init or a split to the end of the outermost group. */
ncclResult_t shim_group_defer_init(ncclComm_t *out, int nranks, int nid, const ncclUniqueId *ids, int rank,
                                   const ncclConfig_t *config, const char *fn);
ncclResult_t shim_group_defer_split(ncclComm_t parent, ncclComm_t child, ncclComm_t *newcomm);

/* ---- coll.c: collectives and point-to-point ---- */

/* ccl's dtype and op for NCCL's; -1 when there is none. */
int shim_dtype(ncclDataType_t t, ccl_dtype_t *out);
size_t shim_dtype_size(ncclDataType_t t);

/* ---- mem.c: ncclMemAlloc, registrations ---- */

/* (The comm's drop_regs forgets its registrations and windows at its end.) */

/* ---- premul.c: ncclRedOpCreatePreMulSum on the CPU backend ---- */

/* out[i] = scalar * in[i] in dtype's arithmetic (the CPU backend's host buffers). */
void shim_premul(void *out, const void *in, size_t count, ncclDataType_t dtype, const void *scalar);

/* NCCL's profiling name (pncclAllReduce) for a function defined above it in the same
 * file (an alias must sit next to its target); the library exports both names. */
#define SHIM_PROFILING_NAME(name) extern __typeof__(name) p##name __attribute__((alias(#name)))

#define SHIM_COMM_MAGIC 0x63636c6e63636c31ULL /* "cclnccl1" */

#endif
