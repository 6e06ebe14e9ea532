/* vcoll.c: allgatherv and alltoallv, the common code: their entry points, argument
 * checks and staging decisions, and the heap regions every v call uses.
 *
 * A v-collective's program is its fixed-size sibling's (cclc_coll_base): the same
 * chunks, proved the same way. What changes is the size of each unit ("segment"): a
 * run-time count and displacement per unit of in and out, different on every rank and
 * known to a rank only for its own buffers. So:
 *  - each call carries this rank's segment table (CclVCall); the backend publishes it
 *    in the rank's vring entry before the call's identity, reads every peer's once the
 *    identities agree, and checks that every out segment's count equals its sender's
 *    (rank q's sendcounts[p] == rank p's recvcounts[q]), failing every rank with a
 *    message naming both ranks, the segment and both counts, before any data moves;
 *  - a chunk's length is its segment's: the backend sizes chunk j of a data op by the
 *    segment of the data it moves (PlanOp.content), split into K chunks, instances and
 *    slices by the same rule as a fixed-size count (docs/internals.md);
 *  - scratch chunks are as long as the longest segment's chunks, and staging follows
 *    this rank's extents: both sizes depend on every rank's counts, which no rank knows
 *    when it makes the call, while heap allocations must be the same on every rank. So
 *    the first v call takes one region of the heap, the v arena (half the largest free
 *    block, the same on every rank), and every call lays out its scratch (at the
 *    arena's start, same offset everywhere) and this rank's staging (at its end,
 *    published in the table) inside it once all counts are known. A call whose scratch
 *    and staging do not fit fails on every rank, naming the sizes.
 * The counts identify nothing in the call's identity (CclIdent.count is 0): they may
 * differ per rank, and the table check names the disagreement precisely. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The vring and the v arena, taken at the first v call of the comm. Every rank makes
 * the same calls in the same order, so they sit at the same offsets everywhere. */
static ccl_result_t take_regions(ccl_comm_t *comm, const char *fn)
{
    if (comm->vring_off != SIZE_MAX)
        return CCL_OK;
    size_t ring = (size_t)CCL_VRING_BYTES((size_t)comm->nranks);
    if (ccl__heap_alloc(&comm->data, ring, 0, &comm->vring_off) != 0) {
        comm->vring_off = SIZE_MAX;
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY,
                              "%s: the heap has no room for the %zu bytes of segment tables a v-collective needs "
                              "(heap_bytes %zu; raise ccl_config_t.heap_bytes / CCL_HEAP_BYTES)", fn, ring,
                              comm->heap_bytes);
    }
    size_t arena = ccl__heap_largest_free(&comm->data) / 2 / CCL__HEAP_ALIGN * CCL__HEAP_ALIGN;
    if (arena == 0 || ccl__heap_alloc(&comm->data, arena, 0, &comm->varena_off) != 0) {
        ccl__heap_free(&comm->data, comm->vring_off);
        comm->vring_off = comm->varena_off = SIZE_MAX;
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY,
                              "%s: the heap has no room left for the scratch and staging of v-collectives (heap_bytes "
                              "%zu; raise ccl_config_t.heap_bytes / CCL_HEAP_BYTES)", fn, comm->heap_bytes);
    }
    comm->varena_bytes = arena;
    return CCL_OK;
}

typedef struct {
    size_t off, len;
    int unit;
} Span;

static int span_cmp(const void *a, const void *b)
{
    const Span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : x->unit - y->unit;
}

/* Fills one side (in or out) of the table from counts and displacements (NULL:
 * packed in unit order) and its extent; checks the bounds, and for out (written) that
 * no two segments overlap. Returns CCL_OK or the error, its message naming the
 * argument and the units. */
static ccl_result_t fill_side(ccl_comm_t *comm, const char *fn, int units, const size_t *counts, const size_t *displs,
                              const char *cname, const char *dname, size_t limit, uint64_t *trow, uint64_t *drow,
                              int written, size_t *extent)
{
    size_t packed = 0, ext = 0;
    Span *spans = written ? malloc(sizeof *spans * (size_t)units) : NULL;
    if (written && !spans)
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    int nspans = 0;
    for (int u = 0; u < units; u++) {
        size_t n = counts[u], d = displs ? displs[u] : packed;
        if (n > limit || d > limit) {
            free(spans);
            return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument '%s': %s[%d] is %zu; at most %zu elements "
                                  "fit", fn, n > limit ? cname : dname, n > limit ? cname : dname, u,
                                  n > limit ? n : d, limit);
        }
        trow[u] = n;
        drow[u] = d;
        packed = d + n;
        if (d + n > ext)
            ext = d + n;
        if (written && n > 0)
            spans[nspans++] = (Span){d, n, u};
    }
    if (written) {
        qsort(spans, (size_t)nspans, sizeof *spans, span_cmp);
        for (int i = 1; i < nspans; i++)
            if (spans[i].off < spans[i - 1].off + spans[i - 1].len) {
                ccl_result_t r = ccl__set_error(
                    comm, CCL_ERR_INVALID_ARGUMENT,
                    "%s: argument '%s': the segments of units %d ([%zu, %zu)) and %d ([%zu, %zu)) of recvbuf overlap; "
                    "every segment needs its own elements", fn, dname, spans[i - 1].unit, spans[i - 1].off,
                    spans[i - 1].off + spans[i - 1].len, spans[i].unit, spans[i].off, spans[i].off + spans[i].len);
                free(spans);
                return r;
            }
        free(spans);
    }
    *extent = ext;
    return CCL_OK;
}

/* The argument checks every v call makes, on one node or several: fills this rank's
 * table t (CCL__VT_WORDS(N) words, zeroed) with its counts and displacements (packed
 * where a displacement array is NULL) and the extents of its buffers in elements.
 * CCL_OK, or the error with its message set. */
static ccl_result_t v_checks(ccl_comm_t *comm, Collective coll, const char *fn, const void *send,
                             const size_t *sendcounts, const size_t *sdispls, const void *recv, const size_t *recvcounts,
                             const size_t *rdispls, ccl_dtype_t dtype, uint64_t *t, size_t *in_extent,
                             size_t *out_extent)
{
    ccl_result_t r = CCL_OK;
    int N = comm->nranks, me = comm->rank, nin = coll == COLL_ALLTOALLV ? N : 1;
    if (!sendcounts)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'sendcounts' is NULL", fn);
    if (!recvcounts)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'recvcounts' is NULL", fn);
    size_t es = ccl_dtype_size(dtype);
    /* Far from overflow in any byte offset, as ccl__run keeps counts. */
    size_t limit = ((size_t)1 << 46) / es;
    size_t in_ext = 0, out_ext = 0;
    const char *sc = coll == COLL_ALLGATHERV ? "sendcount" : "sendcounts";
    r = fill_side(comm, fn, nin, sendcounts, sdispls, sc, "sdispls", limit, &t[CCL__VT_IN_COUNT * N],
                  &t[CCL__VT_IN_DISPL * N], 0, &in_ext);
    if (r == CCL_OK)
        r = fill_side(comm, fn, N, recvcounts, rdispls, "recvcounts", coll == COLL_ALLGATHERV ? "displs" : "rdispls",
                      limit, &t[CCL__VT_OUT_COUNT * N], &t[CCL__VT_OUT_DISPL * N], 1, &out_ext);
    /* This rank's own segment is known here in full: a disagreement is an argument error
     * now, not only the backend's asynchronous one. */
    int q, v;
    ccl__v_home(coll, me, me, &q, &v);
    if (r == CCL_OK && recvcounts[me] != sendcounts[v])
        r = ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                           "%s: argument 'recvcounts': recvcounts[%d] is %zu, but this rank (%d) sends itself %zu "
                           "elements (%s%s)", fn, me, recvcounts[me], me, sendcounts[v], sc,
                           coll == COLL_ALLTOALLV ? "[rank]" : "");
    if (r == CCL_OK && in_ext > 0 && !send)
        r = ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'sendbuf' is NULL", fn);
    if (r == CCL_OK && out_ext > 0 && !recv)
        r = ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'recvbuf' is NULL", fn);
    if (r == CCL_OK && (uintptr_t)send % es)
        r = ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'sendbuf' (%p) is not aligned to the %zu-byte "
                           "size of %s", fn, send, es, ccl_dtype_name(dtype));
    if (r == CCL_OK && (uintptr_t)recv % es)
        r = ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'recvbuf' (%p) is not aligned to the %zu-byte "
                           "size of %s", fn, recv, es, ccl_dtype_name(dtype));

    *in_extent = in_ext;
    *out_extent = out_ext;
    return r;
}

static ccl_result_t run_v_body(ccl_algorithm_t *alg, const void *send, const size_t *sendcounts, const size_t *sdispls,
                               void *recv, const size_t *recvcounts, const size_t *rdispls, ccl_dtype_t dtype, void *stream,
                               const char *fn);

/* The v-collectives' entry, inside its NVTX range (CCL_NVTX). */
ccl_result_t ccl__run_v(ccl_algorithm_t *alg, const void *send, const size_t *sendcounts, const size_t *sdispls,
                        void *recv, const size_t *recvcounts, const size_t *rdispls, ccl_dtype_t dtype, void *stream,
                        const char *fn)
{
    ccl__range_push(fn);
    return ccl__range_pop(run_v_body(alg, send, sendcounts, sdispls, recv, recvcounts, rdispls, dtype, stream, fn));
}

static ccl_result_t run_v_body(ccl_algorithm_t *alg, const void *send, const size_t *sendcounts, const size_t *sdispls,
                               void *recv, const size_t *recvcounts, const size_t *rdispls, ccl_dtype_t dtype, void *stream,
                               const char *fn)
{
    ccl_comm_t *comm = alg->comm;
    ccl_result_t r = ccl__check_usable(comm, fn);
    if (r != CCL_OK)
        return r;
    const Program *prog = alg->prog;
    Collective coll = prog->coll;
    if (!cclc_coll_is_v(coll))
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                              "%s: argument 'alg': %s is a program for %s; %s runs allgatherv and alltoallv programs "
                              "(use ccl_algorithm_run)", fn, alg->file, cclc_coll_name(coll), fn);
    if ((unsigned)dtype >= CCL_NUM_DTYPES)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'dtype' is %d, not a ccl_dtype_t", fn, (int)dtype);
    int N = comm->nranks, me = comm->rank;
    size_t es = ccl_dtype_size(dtype);
    uint64_t *t = calloc(CCL__VT_WORDS(N), sizeof *t);
    if (!t)
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    size_t in_ext = 0, out_ext = 0;
    r = v_checks(comm, coll, fn, send, sendcounts, sdispls, recv, recvcounts, rdispls, dtype, t, &in_ext, &out_ext);

    CclCall c = {.alg = alg, .send = in_ext ? send : NULL, .recv = out_ext ? recv : NULL, .dtype = dtype, .op = CCL_SUM,
                 .stream = stream, .esize = es, .slices = alg->slices, .is_v = 1};
    c.in_bytes = in_ext * es;
    c.out_bytes = out_ext * es;
    CclBufPlace send_at = CCL__BUF_PRIVATE, recv_at = CCL__BUF_PRIVATE;
    if (r == CCL_OK && c.send && (send_at = ccl__buffer_place(comm, send, c.in_bytes, fn, "sendbuf")) == CCL__BUF_MISPLACED)
        r = CCL_ERR_NOT_SYMMETRIC;
    if (r == CCL_OK && c.recv && (recv_at = ccl__buffer_place(comm, recv, c.out_bytes, fn, "recvbuf")) == CCL__BUF_MISPLACED)
        r = CCL_ERR_NOT_SYMMETRIC;
    if (r == CCL_OK)
        r = take_regions(comm, fn);
    if (r != CCL_OK) {
        free(t);
        return r;
    }
    const char *s = c.send, *rv = c.recv, *base = comm->heap_base[me];
    /* No in-place form (the verifier proves none): overlapping buffers stage in. */
    int overlap = s && rv && s < rv + c.out_bytes && rv < s + c.in_bytes;
    /* A registered buffer is used through its registration's alias in the heap's window
     * (call.c's ccl__run does the same): zero-copy, at an offset every rank shares. */
    size_t reg;
    if (send_at == CCL__BUF_REGISTERED && ccl__reg_find(comm, send, c.in_bytes, &reg)) {
        send_at = CCL__BUF_SYMMETRIC;
        s = base + reg;
    }
    if (recv_at == CCL__BUF_REGISTERED && ccl__reg_find(comm, recv, c.out_bytes, &reg)) {
        recv_at = CCL__BUF_SYMMETRIC;
        rv = base + reg;
    }
    int in_remote = ccl__peers_reach_in(alg), out_remote = ccl__peers_reach_out(alg);
    int stage_in = !c.send || overlap || (in_remote && send_at != CCL__BUF_SYMMETRIC);
    int stage_out = !c.recv || (out_remote && recv_at != CCL__BUF_SYMMETRIC);
    c.in = stage_in ? NULL : (void *)s;
    c.out = stage_out ? NULL : (void *)rv;
    c.stage_in = stage_in && c.send;
    c.stage_out = stage_out && c.recv;
    c.in_off = c.out_off = SIZE_MAX; /* peers read them from the table, not the identity */
    t[CCL__VT_ROWS * N + CCL__VT_IN_OFF] = in_remote && !stage_in ? (uint64_t)(s - base) : ~0ull;
    t[CCL__VT_ROWS * N + CCL__VT_OUT_OFF] = out_remote && !stage_out ? (uint64_t)(rv - base) : ~0ull;
    c.v = (CclVCall){.table = t, .in_extent = in_ext, .out_extent = out_ext, .in_heap = stage_in && in_remote,
                     .out_heap = stage_out && out_remote, .ring_off = comm->vring_off,
                     .arena_off = comm->varena_off, .arena_bytes = comm->varena_bytes};
    c.scratch_off = comm->varena_off;
    c.call_index = alg->ncalls;
    if (comm->fence_pending) {
        c.fence = 1;
        c.fence_why = "the first call after an algorithm was freed";
    }
    ccl__ident_fill(&c, &c.id);
    CCL__TRACE(me, "call %llu of %s: %s, extents %zu in, %zu out%s%s%s%s%s", (unsigned long long)c.call_index,
               alg->file, ccl_dtype_name(dtype), in_ext, out_ext, c.fence ? ", fence first" : "",
               stage_in ? ", staging in" : "", stage_out ? ", staging out" : "",
               s != c.send ? ", sendbuf registered" : "", rv != c.recv ? ", recvbuf registered" : "");
    r = comm->be->run(&c);
    free(t);
    if (r != CCL_OK)
        return r;
    ccl__run_done(alg, &c);
    return CCL_OK;
}

ccl_result_t ccl_algorithm_run_v(ccl_algorithm_t *alg, const void *sendbuf, const size_t *sendcounts,
                                 const size_t *sdispls, void *recvbuf, const size_t *recvcounts, const size_t *rdispls,
                                 ccl_dtype_t dtype, void *stream)
{
    const char *fn = "ccl_algorithm_run_v";
    if (ccl__check_alg(alg, fn) != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    return ccl__run_v(alg, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype, stream, fn);
}

/* A v call as point-to-point messages, one group: always on a comm of several nodes,
 * and on one node where ccl__exchange_p2p (below) says so; ccl_all_to_all too. The v
 * programs' plans reach every peer's memory (scratch sized by every rank's counts,
 * staging in the v arena, a table every rank reads), which ranks of other nodes do not
 * share, while
 * point-to-point already crosses nodes through the proxy (CTS and P2P messages) and
 * keeps node-mates in shared memory; and a v call is a pure exchange, each segment
 * going from one rank to one rank once, the least any program could send. So every
 * rank sends its segment to each peer (allgatherv: its one input; alltoallv: unit p to
 * rank p) and receives each peer's into its recvbuf segment, straight from and into
 * the caller's buffers, all at once in one group; its own segment is a copy.
 * Guarantees as for the programs, by the point-to-point machinery:
 *  - counts: each message's header carries the sender's count and dtype, and the v
 *    call's tag, which the receiver (a node-mate, from the slot) or the sender (another
 *    node, from the receiver's CTS) compares with the receiver's recvcounts[q] before a
 *    byte of the segment moves; a difference fails the receiver with the v-collectives'
 *    message naming both ranks, the segment and both counts, and stops every rank
 *    (unlike a program, other segments may have landed by then);
 *  - nothing outside the segments: a message lands in its recv's buffer only;
 *  - no hang: the comm's timeout, aborts and dead peers bound every wait, as for
 *    ccl_send and ccl_recv.
 * The calls are numbered (comm->v_p2p_calls) for the messages; they share the
 * point-to-point channels' message numbers, which stay in step on both sides of every
 * pair because every rank makes the same collective calls in the same order. The
 * caller (standard_v) has checked the comm and dtype. */
static ccl_result_t run_v_p2p(Collective coll, const char *fn, const void *send, const size_t *sendcounts,
                              const size_t *sdispls, void *recv, const size_t *recvcounts, const size_t *rdispls,
                              ccl_dtype_t dtype, ccl_comm_t *comm, void *stream)
{
    if (!comm->be->run_p2p || comm->p2p_off == SIZE_MAX)
        return ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "%s: %s the exchanges run as point-to-point messages, and "
                              "this communicator has no point-to-point channels (the %s backend, or a heap of %zu bytes "
                              "too small for them)", fn, comm->nnodes > 1 ? "across nodes" : "here",
                              comm->be->name, comm->heap_bytes);
    int N = comm->nranks, me = comm->rank;
    size_t es = ccl_dtype_size(dtype);
    uint64_t *t = calloc(CCL__VT_WORDS(N), sizeof *t);
    CclP2pOp *ops = calloc(2 * (size_t)N, sizeof *ops);
    if (!t || !ops) {
        free(t), free(ops);
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    size_t in_ext = 0, out_ext = 0;
    Collective vc = coll == COLL_ALLTOALL ? COLL_ALLTOALLV : coll; /* alltoall: its counts made by the caller */
    ccl_result_t r =
        v_checks(comm, vc, fn, send, sendcounts, sdispls, recv, recvcounts, rdispls, dtype, t, &in_ext, &out_ext);
    if (r != CCL_OK) {
        free(t), free(ops);
        return r;
    }
    const uint64_t *in_count = &t[CCL__VT_IN_COUNT * N], *in_displ = &t[CCL__VT_IN_DISPL * N];
    const uint64_t *out_count = &t[CCL__VT_OUT_COUNT * N], *out_displ = &t[CCL__VT_OUT_DISPL * N];
    const char *s = in_ext ? send : NULL;
    char *rv = out_ext ? recv : NULL;
    int a2a = coll != COLL_ALLGATHERV, mine = a2a ? me : 0;
    int tag = coll == COLL_ALLTOALL ? CCL__P2P_VTAG_ALLTOALL
              : a2a                 ? CCL__P2P_VTAG_ALLTOALLV
                                    : CCL__P2P_VTAG_ALLGATHERV;
    uint64_t seq = comm->v_p2p_calls + 1;
    /* Step j: receive from rank me - j, send to rank me + j, so that in each step every
     * rank has one peer sending to it (all steps are in flight at once; the order only
     * spreads the first messages). Zero-size segments still go, as their header: it is
     * what checks their counts. */
    int n = 0;
    for (int j = 1; j < N; j++) {
        int from = (me + N - j) % N, to = (me + j) % N, v = a2a ? to : 0;
        ops[n++] = (CclP2pOp){.kind = CCL__P2P_RECV, .peer = from, .buf = rv ? rv + out_displ[from] * es : NULL,
                              .count = (size_t)out_count[from], .dtype = dtype, .vtag = tag, .vseq = seq};
        ops[n++] = (CclP2pOp){.kind = CCL__P2P_SEND, .peer = to, .buf = s ? (char *)s + in_displ[v] * es : NULL,
                              .count = (size_t)in_count[v], .dtype = dtype, .vtag = tag, .vseq = seq};
    }
    CclP2pCall call = {.comm = comm, .stream = stream, .nops = n};
    /* The own segment moves by a copy (none when it is already in place: allgatherv's
     * sendbuf as its own segment of recvbuf). Buffers that overlap otherwise are copied
     * aside first, as one node stages them: a recv could overwrite what a send has yet
     * to read. allgatherv in place needs no copy: its sendbuf is exactly its own
     * segment, which no message writes (segments of recvbuf do not overlap). */
    const char *self_src = s ? s + in_displ[mine] * es : NULL;
    char *self_dst = rv ? rv + out_displ[me] * es : NULL;
    size_t self_bytes = (size_t)out_count[me] * es;
    int overlap = s && rv && s < rv + out_ext * es && rv < s + in_ext * es;
    if (overlap && !(coll == COLL_ALLGATHERV && self_src == self_dst)) {
        call.stage_src = s;
        call.stage_bytes = in_ext * es;
    }
    if (self_bytes && self_src != self_dst) {
        call.self_src = self_src;
        call.self_dst = self_dst;
        call.self_bytes = self_bytes;
    }
    CCL__TRACE(me, "%s call %llu as point-to-point (%d node%s): %s, extents %zu in, %zu out%s", fn,
               (unsigned long long)seq, comm->nnodes, comm->nnodes > 1 ? "s" : "", ccl_dtype_name(dtype), in_ext,
               out_ext, call.stage_bytes ? ", sendbuf staged (it overlaps recvbuf)" : "");
    r = ccl__p2p_launch_v(&call, ops, fn);
    if (r == CCL_OK)
        comm->v_p2p_calls = seq;
    free(t), free(ops);
    return r;
}

/* Point-to-point or a program: what every rank decides alike. Across nodes the v calls
 * always run as messages. On one node, a program registered for the collective
 * (ccl_comm_use_algorithm) runs as asked; CCL_EXCHANGE=p2p or programs (the same on
 * every rank) decides; else the backend's rule, which on GPUs sends alltoall as
 * messages where its sendbuf is large (CclBackend.alltoall_p2p_min) and its recvbuf
 * an ordinary one, which peers cannot
 * reach (asked last, of a call the size admits: not on every call's path): the messages
 * go through the channels' slots, copied out as they arrive, where the program would
 * write a staged recvbuf and copy all of it out after (docs/perf/x2-exchange: 0.65-0.85x
 * the program's time from 64 MB on 2x H200, 0.79-0.97x on 4). Every rank decides alike:
 * the size is the same everywhere, and the ranks of an alltoall must pass the same kind
 * of recvbuf (its heap offset is in the call's identity: a rank with an ordinary one and
 * a rank with a ccl_mem_alloc one already fail). The v-collectives stay programs on one
 * node unless CCL_EXCHANGE=p2p: as messages they were slower at most sizes on
 * ccl_mem_alloc buffers (faster on ordinary ones on 4 GPUs), and the kinds of their
 * buffers may differ per rank. */
int ccl__exchange_p2p(const ccl_comm_t *comm, Collective coll, size_t bytes, const void *recv)
{
    if (comm->nnodes > 1)
        return coll != COLL_ALLTOALL;
    if (comm->exchange < 0)
        return 0;
    for (int i = 0; i < comm->nuses; i++)
        if (comm->uses[i].alg->prog->coll == coll)
            return 0;
    if (comm->exchange > 0)
        return 1;
    const CclBackend *be = comm->be;
    size_t min = coll == COLL_ALLTOALL && be->alltoall_p2p_min ? be->alltoall_p2p_min(comm) : 0;
    return min && bytes >= min && ccl__buffer_ordinary(comm, recv, bytes);
}

/* ccl_all_to_all as messages (ccl__exchange_p2p): count elements to every rank, blocks
 * packed in rank order on both sides. The caller has checked the comm and dtype. */
ccl_result_t ccl__all_to_all_p2p(const void *send, void *recv, size_t count, ccl_dtype_t dtype, ccl_comm_t *comm,
                                 void *stream, const char *fn)
{
    size_t *counts = malloc(sizeof *counts * (size_t)comm->nranks);
    if (!counts)
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    for (int p = 0; p < comm->nranks; p++)
        counts[p] = count;
    ccl_result_t r = run_v_p2p(COLL_ALLTOALL, fn, send, counts, NULL, recv, counts, NULL, dtype, comm, stream);
    free(counts);
    return r;
}

/* The standard v-collectives: point-to-point (above), or an algorithm as for the
 * fixed-size ones (a registration, else the shipped library's `sizes` hint), chosen by a
 * size every rank agrees on: allgatherv's total (recvcounts are the same on every
 * rank), alltoallv's none (each rank knows only its own row and column), so it passes
 * 0 bytes. */
static ccl_result_t standard_v(Collective coll, const char *fn, const void *send, const size_t *sendcounts,
                               const size_t *sdispls, void *recv, const size_t *recvcounts, const size_t *rdispls,
                               ccl_dtype_t dtype, ccl_comm_t *comm, void *stream)
{
    ccl_result_t r = ccl__check_call(comm, dtype, fn);
    if (r != CCL_OK)
        return r;
    if (!recvcounts)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'recvcounts' is NULL", fn);
    size_t elems = 0, es = ccl_dtype_size(dtype);
    for (int p = 0; coll == COLL_ALLGATHERV && p < comm->nranks; p++)
        elems = recvcounts[p] > SIZE_MAX - elems ? SIZE_MAX : elems + recvcounts[p];
    size_t bytes = elems > SIZE_MAX / es ? SIZE_MAX : elems * es;
    if (ccl__exchange_p2p(comm, coll, bytes, recv)) {
        ccl__range_push(fn);
        return ccl__range_pop(
            run_v_p2p(coll, fn, send, sendcounts, sdispls, recv, recvcounts, rdispls, dtype, comm, stream));
    }
    ccl_algorithm_t *alg;
    comm->capturing = comm->be->capturing && comm->be->capturing(comm, stream);
    comm->capture_refused = 0;
    /* A table's rows for ordinary buffers (`:plain`) apply where the recvbuf is one: the
     * buffer peers write, which a program writing peers' outs must stage. */
    int plain = recv && ccl__tune_has_plain(comm, coll, fn) && ccl__buffer_ordinary(comm, recv, 1);
    r = ccl__pick(comm, coll, 0, bytes, plain, fn, &alg);
    comm->capturing = 0;
    if (comm->capture_refused)
        return CCL_ERR_INVALID_USAGE;
    if (r != CCL_OK)
        return r;
    return ccl__run_v(alg, send, sendcounts, sdispls, recv, recvcounts, rdispls, dtype, stream, fn);
}

ccl_result_t ccl_all_gather_v(const void *sendbuf, size_t sendcount, void *recvbuf, const size_t *recvcounts,
                              const size_t *displs, ccl_dtype_t dtype, ccl_comm_t *comm, void *stream)
{
    return standard_v(COLL_ALLGATHERV, "ccl_all_gather_v", sendbuf, &sendcount, NULL, recvbuf, recvcounts, displs,
                      dtype, comm, stream);
}

ccl_result_t ccl_all_to_all_v(const void *sendbuf, const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
                              const size_t *recvcounts, const size_t *rdispls, ccl_dtype_t dtype, ccl_comm_t *comm,
                              void *stream)
{
    return standard_v(COLL_ALLTOALLV, "ccl_all_to_all_v", sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls,
                      dtype, comm, stream);
}
