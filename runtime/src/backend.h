/* backend.h: the backend interface (CclBackend): what the common code hands a backend
 * (a call, a group of point-to-point calls), what a backend supplies, and what else a
 * backend may use beyond the base (base.h): the v-collectives' segment tables
 * (vlayout.c) and the point-to-point channels (channels.c), which both sides read.
 *
 * A backend (runtime/src/cpu/, runtime/src/gpu/) includes this header and base.h only;
 * it is called through CclBackend and never calls into the code that calls it: what it
 * needs arrives in the call (the sealed identity, the scratch layout) or lives in the
 * base. The common code (internal.h) reaches a backend only through CclBackend and the
 * two entry points declared with it, ccl__cpu_backend and ccl__gpu_backend. */
#ifndef CCL_BACKEND_H
#define CCL_BACKEND_H

#include "base.h"

/* ===== a call, as the common code hands it to a backend ===== */

/* What a CclCall of a v-collective adds (vcoll.c fills it). */
typedef struct {
    const uint64_t *table;           /* this rank's CCL__VT_ROWS x N words; valid only during
                                        be->run, which copies it */
    size_t in_extent, out_extent;    /* elements: the largest displacement + count */
    /* in (out) is NULL and peers reach it: stage it in this rank's v arena (at its
     * end), not in private memory. */
    int in_heap, out_heap;
    size_t ring_off, arena_off, arena_bytes; /* ccl_comm's vring and varena */
} CclVCall;

/* One call, resolved by call.c before it reaches the backend. */
typedef struct {
    ccl_algorithm_t *alg;
    const void *send;                /* the user's buffers */
    void *recv;
    size_t count;                    /* U, in elements (internals.md's units) */
    ccl_dtype_t dtype;
    ccl_op_t op;
    void *stream;
    size_t esize, CS;
    size_t in_bytes, out_bytes;      /* units * U * esize */
    /* What the plan's `in` and `out` are on this rank: the user's buffer, a staging
     * buffer in the heap, or NULL: private staging that no peer reaches, which the
     * backend supplies from its own memory (in_bytes, out_bytes; grow-only, replaced
     * buffers kept until synchronize). When stage_in, copy send -> in (in_bytes) before
     * the plan runs; when stage_out, copy out -> recv (out_bytes) after it. */
    void *in, *out;
    int stage_in, stage_out;
    /* A piece of a larger call (call.c, "Pieces"): the user's buffers hold each
     * unit of the piece's in (out) send_pitch (recv_pitch) bytes after the previous
     * one, not count * esize, so the staging copies move in_bytes (out_bytes) as one
     * row of count * esize bytes per unit. 0: packed, one copy. */
    size_t send_pitch, recv_pitch;
    /* Elements between units of in (out) as the plan reads and writes them: count where
     * the side is packed (one unit, staged, or the whole call), the user's count where a
     * piece runs on the user's buffer in place, its units strided there. */
    size_t in_ustride, out_ustride;
    /* The count the user passed (count is the piece's) and this piece's number, from
     * 1 (0: the call runs whole); both go into the identity. */
    size_t whole;
    uint64_t piece;
    /* Pieces whose staged out is in the heap (peers write it), on a backend that takes
     * them (CclBackend.alternates_out): with `alternate` set, the pieces take turns at
     * two staging regions, `turn` (0 or 1) saying which one out is. The backend may then
     * copy a piece out while the next one runs, as long as a piece never starts before
     * the copy out of the last piece in its region ended (peers write that region once
     * the piece started); `last` on the call's last piece: the call ends only when every
     * copy out did. */
    int alternate, turn, last;
    /* Heap offsets of this rank's in/out when the plan lets peers reach them
     * (alg->in_remote / out_remote); SIZE_MAX otherwise. Peer p's in is at
     * comm->heap_base[p] + in_off + (p - rank) * in_stride (signed arithmetic): the
     * stride is 0 except for NCCL-style in-place calls, where in sits inside out at the
     * rank's slot (allgather: in_stride = count * esize) or out inside in
     * (reduce_scatter: out_stride = count * esize). */
    size_t in_off, out_off;
    size_t in_stride, out_stride;
    size_t scratch_off;              /* heap offset of the call's scratch region */
    uint64_t call_index;             /* calls of this algorithm before this one (for traces) */
    /* Every rank must finish its previous calls before any rank starts this one, staging
     * copies included: an all-rank barrier first. Set on the first call after an
     * algorithm was freed (algorithm.c, "quarantine"): its memory may already be a
     * user's buffer. A changed count needs none: the kernel's entry keeps every block
     * off the call until every rank has ended the previous one. Same value on every
     * rank; fence_why says why, for error messages. (Backends fence v calls on their
     * own where the layout needs it: a v call's staging moves with every rank's
     * counts.) */
    int fence;
    const char *fence_why;
    /* avg on a reducing collective: divide = N on every rank, which then, after the
     * plan, passes an all-rank barrier, divides its out by N when divide_here (every
     * rank but a reduce's non-roots), and passes a second barrier, before the copy-out.
     * The barriers keep peers from reading out while it is being divided. 0: no avg. */
    int divide, divide_here;
    int slices;
    /* What this call runs (cuda/abi.h), sealed (ccl__ident_seal). A backend publishes it
     * and compares it with every peer's before it touches a peer; one whose shape
     * differs from the common code's view (the GPU's protocol and threads) sets `shape`
     * in its copy and seals it again. */
    CclIdent id;
    /* A v-collective (allgatherv, alltoallv): count is 0, and the segments' sizes and
     * places are in v; in_bytes and out_bytes are the extents of the user's buffers.
     * The backend sizes every chunk by its segment (PlanOp.content) from every rank's
     * published table and checks that the ranks' counts agree (vcoll.c). */
    int is_v;
    CclVCall v;
} CclCall;

/* ===== a group of point-to-point calls, as p2p.c hands it to a backend ===== */

typedef enum { CCL__P2P_SEND, CCL__P2P_RECV } CclP2pKind;

/* One ccl_send or ccl_recv, as its group hands it to the backend. */
typedef struct {
    CclP2pKind kind;
    int peer;
    void *buf;                       /* a send's is const: only read */
    size_t count;
    ccl_dtype_t dtype;
    uint64_t nth;                    /* messages on its channel (rank -> peer for a send,
                                        peer -> rank for a recv) before this one */
    int index;                       /* 1-based place among its group's calls on this comm */
    size_t reg_off;                  /* a recv into registered memory: its offset from this
                                        rank's heap base, where peers reach it as they reach a
                                        ccl_mem_alloc buffer (ccl_mem_register); else SIZE_MAX */
    /* A segment of a v-collective that runs as point-to-point (vcoll.c: a comm of
     * several nodes): CCL__P2P_VTAG_ALLGATHERV or _ALLTOALLV, and the v call's number
     * on the comm (from 1), for messages; 0 for a ccl_send or ccl_recv. The tag travels
     * in the message's header with the dtype (ccl__p2p_wire_dtype), so a recv of one
     * collective never takes a send of another, or a user's, as its own. */
    int vtag;
    uint64_t vseq;
} CclP2pOp;

enum { CCL__P2P_VTAG_ALLGATHERV = 1, CCL__P2P_VTAG_ALLTOALLV = 2, CCL__P2P_VTAG_ALLTOALL = 3 };

/* The dtype word of a message's header (CclP2pSlot.dtype, the CTS's): the dtype in
 * its low byte, the v tag above it. Both sides compare all of it. */
static inline uint64_t ccl__p2p_wire_dtype(const CclP2pOp *op)
{
    return (uint64_t)op->dtype | (uint64_t)op->vtag << 8;
}

/* One group's calls on one comm, in call order. ops is the caller's until
 * be->run_p2p returns (which copies it). */
typedef struct {
    ccl_comm_t *comm;
    void *stream;
    int nops;
    const CclP2pOp *ops;
    /* Every comm with calls in the same group (this one included), which the calling
     * thread launches one after another: a backend must not wait for one of them to
     * launch before it returns. */
    ccl_comm_t *const *group_comms;
    int ngroup_comms;
    /* A v-collective run as point-to-point (vcoll.c): in stream order, before any
     * message, the backend copies stage_bytes of stage_src aside (memory of its own,
     * which no peer reads) and rebases the sends whose buffers lie in it onto the copy
     * (sendbuf overlaps recvbuf), then copies self_bytes from self_src (rebased
     * likewise) to self_dst: the rank's own segment, which moves by no message. 0
     * bytes: nothing. */
    const void *stage_src;
    size_t stage_bytes;
    const void *self_src;
    void *self_dst;
    size_t self_bytes;
} CclP2pCall;

/* ===== registered memory, as register.c hands it to a backend ===== */

/* Where one rank's registered range lies, when its backend maps it into the window
 * (reg_inspect): the whole allocations the range lies in, back to back in its address
 * space. Every rank learns every rank's. */
typedef struct {
    uint64_t lead;                   /* bytes from the first allocation's start to the range */
    uint64_t span;                   /* bytes of the allocations, together */
    uint64_t align;                  /* the alignment a mapping of them needs (their granularity) */
    uint64_t pieces;                 /* how many allocations */
} CclRegSpan;

/* ===== the backend interface ===== */

/* A backend. The common code (api.c, comm.c, algorithm.c, tuner.c) does argument
 * checks, heap offsets, compilation, scratch/staging decisions and dispatch; a backend
 * supplies memory, execution and what its device is (describe). Every hook returns
 * CCL_OK or a failure whose message it has set with ccl__set_error(comm, ...). Hooks
 * are called from the user's thread, never concurrently for one comm. */
struct CclBackend {
    const char *name;                /* "cpu", "gpu" */
    ccl_backend_t kind;              /* CCL_BACKEND_CPU or CCL_BACKEND_GPU (ccl_comm_backend) */
    /* 1 where run takes pieces that alternate between two staged outs (CclCall.alternate):
     * the GPU copies a piece out beside the next piece; the CPU runs its pieces one
     * after the other anyway, and takes them so that its tests cover call.c's side. */
    int alternates_out;
    /* Where alltoall on one node runs as point-to-point messages by default (vcoll.c,
     * ccl__exchange_p2p): an ordinary recvbuf, from this many bytes of sendbuf (0, or
     * no hook: always programs). The same on every rank of comm: it may depend only on
     * what every rank knows alike. */
    size_t (*alltoall_p2p_min)(const ccl_comm_t *comm);

    /* Collective over the ranks of boot (boot is valid only during this call). Creates
     * comm->be_comm and this rank's symmetric heap of comm->heap_bytes bytes, zeroed,
     * and maps every peer's: fills comm->heap_base[0..nranks). comm->rank, nranks,
     * timeout_ms, device, cache_dir and heap_bytes are set (it may lower heap_bytes when
     * heap_default is set, the same on every rank). On failure it releases whatever it
     * made (comm_fini is not called). */
    ccl_result_t (*comm_init)(ccl_comm_t *comm, const ccl_bootstrap_t *boot);

    /* Releases everything comm_init made. Called after synchronize; not collective:
     * peers may still be running (a heap must stay valid for a peer that still maps it
     * only as long as that peer's process lives). */
    void (*comm_fini)(ccl_comm_t *comm);

    /* A communicator of several nodes only (NULL elsewhere): ccl_comm_split's bootstrap
     * with a rank of another node (mailbox.c), through the inter-node transport. boot_send
     * sends `bytes` (at most 4 KiB) of exchange `tag`, or with gave_up the news that this
     * rank gave up the split numbered tag >> 32 (the bytes: why, a string); 0, or -1. boot_take: 1 once exchange
     * tag's bytes from peer are in buf, 0 while they have not come, -1 with why when peer
     * gave up, left, sent another size, or the comm was stopped. Any thread but the
     * backend's own. */
    int (*boot_send)(ccl_comm_t *comm, int peer, uint64_t tag, int gave_up, const void *buf, size_t bytes);
    int (*boot_take)(ccl_comm_t *comm, int peer, uint64_t tag, void *buf, size_t bytes, char *why, size_t len);

    /* Zeroes [off, off+bytes) of this rank's heap, synchronously (semaphores). */
    ccl_result_t (*heap_zero)(ccl_comm_t *comm, size_t off, size_t bytes);

    /* Prepares alg for this rank (alg->plan, blocks, instances, slices, sem_off, nsems
     * set): compile kernels, allocate per-algorithm state such as the waiters' expected
     * semaphore values (which start at 0 and persist across calls). Sets alg->be_alg,
     * and alg->own_scratch where a peer may write this rank's scratch region before
     * every rank has entered a call (its region is then the algorithm's own, not the
     * one the comm's calls share: call.c, "Regions"). */
    ccl_result_t (*alg_prepare)(ccl_algorithm_t *alg);
    /* Releases alg->be_alg; alg is idle (the comm was synchronized). */
    void (*alg_release)(ccl_algorithm_t *alg);
    /* Bytes of alg's scratch region for a call at chunk stride CS (elements of esize
     * bytes), the same on every rank, where its kernels lay out more there than the
     * scratch buffers (the GPU's LL lines: gpu/layout.h). NULL: the scratch buffers,
     * ccl__scratch_offset(prog, prog->nbufs, CS, esize). */
    size_t (*scratch_bytes)(const ccl_algorithm_t *alg, size_t CS, size_t esize);

    /* Enqueues one call (asynchronous: returns before it ran, must not wait for peers).
     * In order: stage_in copy, the plan (every block x instance x slice of this rank,
     * docs/internals.md), avg division (call->divide), stage_out copy. A failure while
     * running (timeout, peer abort) goes to ccl__set_async_error with a message naming
     * rank, thread block, source line (file:line) and peer; the backend then stops
     * every peer (CclHeapHeader.abort, set its own way) and drops later calls. *call
     * is copied; the buffers it names stay valid until synchronize (the common code
     * never frees heap regions before that). */
    ccl_result_t (*run)(const CclCall *call);

    /* Waits until everything enqueued on comm ran. Returns CCL_OK; asynchronous failures
     * are reported by the common code from async_result. */
    ccl_result_t (*synchronize)(ccl_comm_t *comm);

    /* ccl_comm_abort, from any thread, concurrently with the user's: stops this rank's
     * running and queued work and sets every peer's abort word (their waits give up),
     * without waiting for anything. */
    void (*abort)(ccl_comm_t *comm);
    /* From the watchdog's thread (watchdog.c), concurrently with the user's, once rank
     * `dead`'s process is gone and the comm has not failed otherwise: stops this rank's
     * running and queued work and every peer's on `dead`'s behalf (their abort words
     * name `dead`, as if it had failed), without waiting for anything. NULL: abort. */
    void (*peer_gone)(ccl_comm_t *comm, int dead);
    /* ccl_comm_get_async_error, from any thread, under comm->async_lock (so comm->algs
     * holds still; it must not take the lock): a failure the backend has seen but not yet
     * reported through ccl__set_async_error, or CCL_OK. Never waits. NULL: none. */
    ccl_result_t (*poll)(ccl_comm_t *comm);
    /* Under the same lock, after poll returned a failure: what it is, naming the rank
     * at fault where the backend knows it ("rank 1 aborted the communicator
     * (ccl_comm_abort)"), into buf. NULL: the result's string is said. */
    void (*poll_message)(ccl_comm_t *comm, char *buf, size_t len);
    /* 1 when `stream` is being captured into a CUDA graph (a call may then only enqueue:
     * no compiling, allocating or waiting). NULL: never. */
    int (*capturing)(ccl_comm_t *comm, void *stream);

    /* Enqueues one group's sends and receives on one comm (p2p.c has checked them and
     * numbered their messages), all of them to progress at once, after the comm's
     * earlier work on call->stream; asynchronous like run, failures the same way: a
     * mismatched pair names both calls, an unmatched call times out naming itself. NULL:
     * the backend has no point-to-point (ccl_send and ccl_recv say so). */
    ccl_result_t (*run_p2p)(const CclP2pCall *call);

    /* A synchronous copy of `bytes` between host memory and this rank's heap
     * (ccl_mem_alloc buffers), either way, after the comm's earlier work: ccl_mem_copy. */
    ccl_result_t (*copy)(ccl_comm_t *comm, void *dst, const void *src, size_t bytes);

    /* Fills *out for comm (after comm_init). Never fails: what it cannot find out it
     * names "unknown". May ask the driver: the tuner calls it once per comm. */
    void (*describe)(const ccl_comm_t *comm, CclDeviceInfo *out);

    /* Registered memory (ccl_mem_register; register.c does the rest: the cache, the
     * exchanges, the window's offsets). What this rank's [ptr, ptr + bytes), outside
     * the heap, is: CCL_OK with *state (the allocations it lies in, held) and *span
     * when the backend maps it into the window; CCL_OK with *state NULL when peers
     * cannot reach it in place but calls may still use it, staged (then it is only
     * recorded); else a failure whose message says why and what to do instead. NULL:
     * every range is only recorded. */
    ccl_result_t (*reg_inspect)(ccl_comm_t *comm, const void *ptr, size_t bytes, CclRegSpan *span, void **state);
    /* Collective over boot (the comm's mailboxes), once every rank's reg_inspect has
     * held its range: maps rank p's allocations (all[p]) at heap offset at[p] of rank
     * p's heap as this process addresses it (heap_base[p] + at[p]), this rank's own
     * included, so that every rank's range starts at one offset. A failure sets the
     * message; what it mapped stays in state for reg_release. */
    ccl_result_t (*reg_map)(ccl_comm_t *comm, void *state, const CclRegSpan *all, const size_t *at,
                            const ccl_bootstrap_t *boot);
    /* Unmaps what reg_map mapped and lets go of what reg_inspect held. Not collective:
     * the caller knows no rank uses the mappings any more, or, with at_destroy, that
     * the comm is being destroyed (releases that may wait for running kernels may then
     * be deferred). */
    void (*reg_release)(ccl_comm_t *comm, void *state, int at_destroy);
    /* 1 when [ptr, ptr + bytes) still lies in the very allocations state holds (a
     * cache hit's check: memory freed and allocated again at the same address is not). */
    int (*reg_same)(ccl_comm_t *comm, void *state, const void *ptr, size_t bytes);
    /* Memory pools (ccl_mem_pool_alloc): memory of at least `bytes` on this rank's
     * device that reg_inspect accepts, mapped at *ptr, *size bytes; pool_free(state)
     * frees it and needs no comm (the comm may be gone by then). NULL: no pools. */
    ccl_result_t (*pool_alloc)(ccl_comm_t *comm, size_t bytes, void **ptr, size_t *size, void **state);
    void (*pool_free)(void *state);
};

extern const CclBackend ccl__cpu_backend;
/* The GPU backend (runtime/src/gpu/) defines `const CclBackend *ccl__gpu_backend(char
 * *why, size_t len)`: the backend when a usable GPU and driver are present, else NULL with
 * the reason in why. */
const CclBackend *ccl__gpu_backend(char *why, size_t len);

/* ===== vlayout.c: the v-collectives' segment tables ===== */

/* The unit of in that out unit u of rank `rank` receives: its rank and unit. */
void ccl__v_home(Collective coll, int rank, int u, int *q, int *v);
/* For a backend's run hook, on the user's thread: places in and out that peers reach
 * but the user's buffers cannot be (CclVCall.in_heap, out_heap) at the end of the v
 * arena, setting *in and *out and recording in `table` (the backend's copy of
 * CclVCall.table) the heap offsets peers use and the staging bytes the arena must hold.
 * When they do not fit it places nothing: the backend's check of every rank's table
 * (scratch plus each rank's staging within the arena) fails the call on every rank. */
void ccl__v_place(ccl_comm_t *comm, const CclCall *c, uint64_t *table, void **in, void **out);
/* The messages of the backends' checks of every rank's table, the same on every rank
 * and backend: out segment u of rank p expects `want` elements, its sender sends `sent`;
 * or the scratch (for a longest segment of `longest` elements) and rank p's staging do
 * not fit the v arena. */
void ccl__v_count_message(char *err, size_t len, Collective coll, int me, uint64_t seq, int p, int u,
                          unsigned long long sent, unsigned long long want, const char *file);
void ccl__v_space_message(char *err, size_t len, int me, uint64_t seq, const char *file, size_t scratch,
                          unsigned long long longest, ccl_dtype_t dtype, int p, unsigned long long stage,
                          size_t arena_bytes);

/* ===== channels.c: the point-to-point channels ===== */

/* What every backend says when a call fails, so that both say it alike (rank: comm's):
 * "ccl_send (call 2 of 3 of its group) to rank 1, 100 f32" into buf; the receiver's
 * error for a slot header `found` that does not match its call `op` (of `calls` in its
 * group); the timeout of a call whose partner `seen` is the partner's count of the
 * channel's slots (a send: emptied; a recv: filled) and `slot` the message's last
 * (send) or first (recv) slot, counted from 1. */
const char *ccl__p2p_describe(const CclP2pOp *op, uint64_t calls, char *buf, size_t len);
/* "ccl_all_gather_v" for CCL__P2P_VTAG_ALLGATHERV, ...; NULL for 0 (a ccl_send or recv). */
const char *ccl__p2p_vname(int vtag);
void ccl__p2p_mismatch_error(ccl_comm_t *comm, const CclP2pOp *op, uint64_t calls, const CclP2pSlot *found);
void ccl__p2p_timeout_error(ccl_comm_t *comm, const CclP2pOp *op, uint64_t calls, uint64_t seen, uint64_t slot);
/* At comm creation, on a backend with run_p2p: takes the channels and their semaphores
 * (the same on every rank). Leaves p2p_off at SIZE_MAX when the heap has no room, which
 * a send or recv then reports. */
void ccl__p2p_reserve(ccl_comm_t *comm);
#endif
