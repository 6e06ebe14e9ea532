/* call.c: one call of a fixed-size algorithm, resolved for the backend (CclCall).
 *
 * Takes the user's arguments (ccl__run; algorithm.c loads the algorithm, api.c and
 * ccl_algorithm_run call here), checks every one, and decides where the plan's `in` and
 * `out` live:
 *  - a buffer some peer reaches (the plan has a remote Ref to it) must be symmetric: a
 *    ccl_mem_alloc buffer is used in place (every rank must pass one, at the same
 *    offset), any other buffer is staged through a grow-only heap staging buffer;
 *  - send and recv that overlap are used as one buffer only when the Proof says the
 *    program is correct in place; otherwise `in` is staged first (a snapshot), which is
 *    always correct because out-of-place is what the verifier proved;
 *  - staging only this rank touches is private, the backend's own memory (host memory
 *    on the CPU, device memory on a GPU), so it cannot shift heap offsets.
 * Heap allocations happen in the user's thread in call order, so they stay symmetric
 * whenever the ranks make the same calls with the same sizes. Scratch grows the same
 * way: the size follows from count and dtype, equal on all ranks. A call whose heap
 * staging and scratch do not fit the heap's free space runs in pieces, each a call of
 * the same algorithm on a sub-range ("Pieces" below). Gives the backend one CclCall per
 * piece, with its identity sealed (ident.c). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static int coll_reduces(Collective c) { return c == COLL_ALLREDUCE || c == COLL_REDUCE_SCATTER || c == COLL_REDUCE; }

/* ---- call identities (sealed and compared: ident.c) ---- */

void ccl__ident_fill(const CclCall *c, CclIdent *id)
{
    const ccl_algorithm_t *alg = c->alg;
    const ccl_comm_t *comm = alg->comm;
    memset(id, 0, sizeof *id);
    id->seq = comm->calls + 1;
    id->plan = alg->plan_hash;
    id->shape = (uint64_t)alg->instances | (uint64_t)c->slices << 16;
    /* The user's count, and a piece's number above dtype and op (call.c, "Pieces"):
     * ranks that pass different counts are told so, not about the pieces'. */
    id->count = c->whole ? c->whole : c->count;
    id->kind = (uint64_t)c->piece << 16 | (uint64_t)c->dtype << 8 | (coll_reduces(alg->prog->coll) ? (uint64_t)c->op : 0);
    /* Rank-independent: where rank 0's buffer would be (in place, in sits at a per-rank slot). */
    id->in_off = c->in_off == SIZE_MAX ? ~0ull : (uint64_t)c->in_off - (uint64_t)comm->rank * c->in_stride;
    id->out_off = c->out_off == SIZE_MAX ? ~0ull : (uint64_t)c->out_off - (uint64_t)comm->rank * c->out_stride;
    /* The layout, not the history: a buffer allocated and freed again changes nothing.
     * A piece's own count goes in too (pieces of one call have one size on ranks that
     * agree on the rest; should they not, they must not run together). */
    id->allocs = (uint64_t)comm->data.nuser;
    uint64_t lay[6] = {comm->data.user_sum, id->allocs, alg->sem_off, c->scratch_off, ccl__reg_layout(comm), c->count};
    id->heap = ccl__fnv1a(CCL__FNV_SEED, lay, sizeof lay);
    const char *base = strrchr(alg->file, '/');
    base = base ? base + 1 : alg->file;
    memcpy(id->name, base, strlen(base) < sizeof id->name ? strlen(base) : sizeof id->name - 1);
    ccl__ident_seal(id);
}

/* ---- one call ---- */

/* Heap regions a call takes besides the user's buffers: the staging of in [0] and of
 * out [1] where peers reach them, and the algorithm's scratch [2] (with the backend's
 * lines). Staging regions are the comm's, scratch the algorithm's; all are grow-only. */
enum { REGIONS = 3 };

/* A region of `bytes` at `off` (SIZE_MAX: none yet) that must hold `need`: 0 with *noff
 * SIZE_MAX when it does, 0 with a new block at *noff of *nbytes when the heap has one
 * (with `doubling`, twice the old size where that fits, so that a growing sweep
 * replaces few regions), -1 when it has none. */
static int region_take(CclHeapAlloc *h, size_t off, size_t bytes, size_t need, int doubling, size_t *noff,
                       size_t *nbytes)
{
    *noff = SIZE_MAX;
    if (need == 0 || (off != SIZE_MAX && bytes >= need))
        return 0;
    size_t want = need;
    if (doubling && off != SIZE_MAX && bytes <= SIZE_MAX / 2 && 2 * bytes > want)
        want = 2 * bytes;
    if (ccl__heap_alloc(h, want, 0, noff) == 0 || (want != need && ccl__heap_alloc(h, want = need, 0, noff) == 0)) {
        *nbytes = want;
        return 0;
    }
    *noff = SIZE_MAX;
    return -1;
}

/* Gives the call's regions at least need[k] bytes each, all or none, taking at most
 * `limit` bytes of new blocks: 0, or -1 with the heap as it was; with commit 0 it only
 * finds out (the heap left as it was either way).
 * The allocator is a pure function of its requests and a block taken and given back
 * leaves it exactly as before, so every rank that made the same calls decides alike.
 * A replaced region is retired, freed at destroy: a call in flight, or a captured CUDA
 * graph, may still use it. */
static int take_regions(ccl_comm_t *comm, ccl_algorithm_t *alg, const size_t need[REGIONS], int doubling,
                        size_t limit, int commit)
{
    size_t *off[REGIONS] = {&comm->stage_off[0], &comm->stage_off[1], &alg->scratch_off};
    size_t *bytes[REGIONS] = {&comm->stage_bytes[0], &comm->stage_bytes[1], &alg->scratch_bytes};
    size_t noff[REGIONS], nbytes[REGIONS];
    int k = 0;
    size_t taken = 0;
    while (k < REGIONS && region_take(&comm->data, *off[k], *bytes[k], need[k], doubling, &noff[k], &nbytes[k]) == 0 &&
           (taken += noff[k] == SIZE_MAX ? 0 : nbytes[k]) <= limit)
        k++;
    if (k < REGIONS && noff[k] != SIZE_MAX)   /* taken, but past the limit */
        ccl__heap_free(&comm->data, noff[k]);
    int fits = k == REGIONS;
    if (fits && commit && taken > 0) {
        /* Room to retire every replaced region first, so that committing cannot fail halfway. */
        size_t *nr = realloc(comm->retired, sizeof *nr * (size_t)(comm->nretired + REGIONS));
        if (nr)
            comm->retired = nr;
        fits = nr != NULL;
    }
    if (fits && commit) {
        for (k = 0; k < REGIONS; k++)
            if (noff[k] != SIZE_MAX) {
                if (*off[k] != SIZE_MAX)
                    comm->retired[comm->nretired++] = *off[k];
                *off[k] = noff[k];
                *bytes[k] = nbytes[k];
            }
        return 0;
    }
    while (k-- > 0)
        if (noff[k] != SIZE_MAX)
            ccl__heap_free(&comm->data, noff[k]);
    return fits ? 0 : -1;
}

/* Where peers reach this rank's user buffers, for staging: in the heap, or at their
 * registration's place in the window (register.c). */
CclBufPlace ccl__buffer_place(ccl_comm_t *comm, const void *ptr, size_t bytes, const char *fn, const char *arg)
{
    const char *base = comm->heap_base[comm->rank], *p = ptr;
    size_t at;
    if (!p || p < base || p >= base + comm->heap_bytes)
        return ccl__reg_find(comm, p, bytes, &at) ? CCL__BUF_REGISTERED : CCL__BUF_PRIVATE;
    size_t off = (size_t)(p - base), start, size;
    if (ccl__heap_find_user(&comm->data, off, bytes, &start, &size) == 0)
        return CCL__BUF_SYMMETRIC;
    if (size)
        ccl__set_error(comm, CCL_ERR_NOT_SYMMETRIC,
                       "%s: argument '%s' (%p) runs past the end of its ccl_mem_alloc buffer: %zu bytes from offset %zu "
                       "of a %zu-byte buffer", fn, arg, ptr, bytes, off - start, size);
    else
        ccl__set_error(comm, CCL_ERR_NOT_SYMMETRIC,
                       "%s: argument '%s' (%p) points into the symmetric heap but not into a live ccl_mem_alloc buffer",
                       fn, arg, ptr);
    return CCL__BUF_MISPLACED;
}

/* ---- Pieces ----
 *
 * A call whose staging (of buffers peers reach) and scratch do not fit the heap's free
 * space runs as a sequence of pieces, each a normal call of the same algorithm on
 * elements [off, off + n) of every unit: the largest n (a multiple of 256 bytes) whose
 * regions fit, evened out over the pieces. The decision depends only on what every rank
 * agrees on (algorithm, count, dtype, where peers reach the buffers, the heap's layout),
 * so the ranks' pieces pair up; each piece's identity holds the user's count and its
 * number, so ranks that disagree still fail with both sides named. Where in (out) has
 * several units (allgather's out, reduce_scatter's in, alltoall's both), a piece's
 * units are strided in the user's buffer: such a side is always staged, packed, with
 * strided staging copies (CclCall.send_pitch, recv_pitch). A piece reads only its own
 * elements of send and writes only its own of recv, so in place (NCCL's forms) and a
 * recvbuf before an overlapping sendbuf (elementwise collectives, pieces in order) stay
 * correct; other overlaps run whole or fail as before. */

/* What every piece of one call shares, resolved once. */
typedef struct {
    ccl_algorithm_t *alg;
    const char *send;
    char *recv;
    size_t count, es, in_units, out_units;
    ccl_dtype_t dtype;
    ccl_op_t op;
    void *stream;
    int in_remote, out_remote;       /* peers reach in (out) themselves, not through lines */
    CclBufPlace send_at, recv_at;    /* CCL__BUF_SYMMETRIC for a registered buffer too */
    size_t send_reg, recv_reg;       /* a registered buffer's heap offset; SIZE_MAX: none */
    int overlap, inplace_form, inplace_ok;
} CallArgs;

/* Whether a piece of n elements stages its in and out, and the heap bytes of its
 * regions (staging that peers reach, scratch). A piece shorter than the call stages
 * every side that has several units (strided in the user's buffer). */
static void piece_plan(const CallArgs *a, size_t n, int *stage_in, int *stage_out, size_t need[REGIONS], size_t *CS)
{
    const ccl_algorithm_t *alg = a->alg;
    const Program *prog = alg->prog;
    int strided_in = n < a->count && a->in_units > 1, strided_out = n < a->count && a->out_units > 1;
    int inplace = a->inplace_ok && !strided_in && !strided_out;
    *stage_in = !a->send || (a->overlap && !inplace) || (a->in_remote && a->send_at != CCL__BUF_SYMMETRIC) || strided_in;
    *stage_out = !a->recv || (a->out_remote && a->recv_at != CCL__BUF_SYMMETRIC) || strided_out;
    *CS = ccl__chunk_stride(n, prog->chunks, a->es);
    need[0] = *stage_in && a->in_remote ? a->in_units * n * a->es : 0;
    need[1] = *stage_out && a->out_remote ? a->out_units * n * a->es : 0;
    need[2] = alg->comm->be->scratch_bytes ? alg->comm->be->scratch_bytes(alg, *CS, a->es)
                                           : ccl__scratch_offset(prog, prog->nbufs, *CS, a->es);
}

static int piece_fits(const CallArgs *a, size_t n, size_t limit)
{
    int si, so;
    size_t need[REGIONS], CS;
    piece_plan(a, n, &si, &so, need, &CS);
    return take_regions(a->alg->comm, a->alg, need, 0, limit, 0) == 0;
}

/* The largest piece (a multiple of 256 bytes, or the whole count) whose regions fit the
 * heap now, the regions it already has reused and at most `limit` bytes taken anew; 0
 * when not even the smallest does. */
static size_t piece_largest(const CallArgs *a, size_t limit)
{
    size_t g = 256 / a->es, lo = 0, hi = (a->count + g - 1) / g;
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        if (piece_fits(a, mid * g < a->count ? mid * g : a->count, limit))
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo * g < a->count ? lo * g : a->count;
}

/* Enqueues elements [off, off + n) of every unit as one call (the whole call: off 0, n
 * the count, piece 0), its regions already taken. */
static ccl_result_t run_piece(const CallArgs *a, size_t off, size_t n, uint64_t piece)
{
    ccl_algorithm_t *alg = a->alg;
    ccl_comm_t *comm = alg->comm;
    Collective coll = alg->prog->coll;
    int me = comm->rank, N = comm->nranks;
    size_t es = a->es, need[REGIONS];
    int stage_in, stage_out;
    CclCall c = {.alg = alg, .send = a->send ? a->send + off * es : NULL, .recv = a->recv ? a->recv + off * es : NULL,
                 .count = n, .dtype = a->dtype, .op = a->op, .stream = a->stream, .esize = es, .slices = alg->slices,
                 .whole = a->count, .piece = piece};
    piece_plan(a, n, &stage_in, &stage_out, need, &c.CS);
    c.in_bytes = a->in_units * n * es;
    c.out_bytes = a->out_units * n * es;
    c.send_pitch = a->in_units > 1 && n < a->count ? a->count * es : 0;
    c.recv_pitch = a->out_units > 1 && n < a->count ? a->count * es : 0;
    char *base = comm->heap_base[me];
    /* A registered buffer is used through its registration's alias in the heap's
     * window, at an offset every rank shares (zero-copy; both sides of an in-place call
     * through the same alias, so no kernel reads through one address what it wrote
     * through another). Staging only this rank touches is private, the backend's own
     * memory (NULL here); staging peers reach is the comm's heap region. */
    c.in = !stage_in ? (a->send_reg != SIZE_MAX ? base + a->send_reg + off * es : (void *)c.send)
           : a->in_remote ? base + comm->stage_off[0] : NULL;
    c.out = !stage_out ? (a->recv_reg != SIZE_MAX ? base + a->recv_reg + off * es : c.recv)
            : a->out_remote ? base + comm->stage_off[1] : NULL;
    c.stage_in = stage_in && c.send;    /* a NULL send stages nothing: its content is unused */
    c.stage_out = stage_out && c.recv;
    c.in_off = a->in_remote ? (size_t)((char *)c.in - base) : SIZE_MAX;
    c.out_off = a->out_remote ? (size_t)((char *)c.out - base) : SIZE_MAX;
    if (a->inplace_ok && !stage_in && !stage_out && coll == COLL_ALLGATHER)
        c.in_stride = n * es;
    if (a->inplace_ok && !stage_in && !stage_out && coll == COLL_REDUCE_SCATTER)
        c.out_stride = n * es;
    c.scratch_off = alg->scratch_off == SIZE_MAX ? 0 : alg->scratch_off;
    c.call_index = alg->ncalls;
    /* A count that changes the scratch layout needs no fence: no block of this call runs
     * before every rank has ended its previous one (docs/internals.md). */
    if (comm->fence_pending) {
        c.fence = 1;
        c.fence_why = "the first call after an algorithm was freed";
    }
    if (a->op == CCL_AVG && coll_reduces(coll) && N > 1) { /* on one rank, x / 1 is x */
        c.divide = N;
        c.divide_here = !(coll == COLL_REDUCE && me != alg->root);
    }
    ccl__ident_fill(&c, &c.id);
    CCL__TRACE(me, "call %llu of %s: %s %s, count %zu%s%s%s%s%s", (unsigned long long)c.call_index, alg->file,
               ccl_dtype_name(a->dtype), ccl_op_name(a->op), n, c.fence ? ", fence first" : "",
               c.stage_in ? ", staging in" : "", c.stage_out ? ", staging out" : "",
               !stage_in && a->send_reg != SIZE_MAX ? ", sendbuf registered" : "",
               !stage_out && a->recv_reg != SIZE_MAX ? ", recvbuf registered" : "");
    ccl_result_t r = comm->be->run(&c);
    if (r != CCL_OK)
        return r;
    ccl__run_done(alg, &c);
    return CCL_OK;
}

/* The call's regions do not fit and no piece can run: what it needs, and why. */
static ccl_result_t no_room(const CallArgs *a, const char *fn, const char *why)
{
    ccl_comm_t *comm = a->alg->comm;
    int si, so;
    size_t need[REGIONS], CS;
    piece_plan(a, a->count, &si, &so, need, &CS);
    return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY,
                          "%s: %s, count %zu of %s, needs %zu bytes of the heap (staging %zu of sendbuf and %zu of "
                          "recvbuf, which peers reach, and %zu of scratch), more than it has free (heap_bytes %zu, %zu "
                          "in its largest free block), and %s; free ccl_mem_alloc buffers or raise "
                          "ccl_config_t.heap_bytes / CCL_HEAP_BYTES", fn, a->alg->file, a->count,
                          ccl_dtype_name(a->dtype), need[0] + need[1] + need[2], need[0], need[1], need[2],
                          comm->heap_bytes, ccl__heap_largest_free(&comm->data), why);
}

/* Runs the call whole when its regions fit (growing them, doubling), else in pieces
 * whose regions take at most half of the heap's largest free block (all of it only when
 * not even the smallest piece fits in half), so that ccl_mem_alloc keeps room: regions
 * are kept until destroy. Later calls reuse those regions, so the pieces of a repeated
 * call (a CUDA graph's warm-up and its capture) come out the same. */
static ccl_result_t run_call(const CallArgs *a, const char *fn)
{
    ccl_comm_t *comm = a->alg->comm;
    int si, so;
    size_t need[REGIONS], CS;
    piece_plan(a, a->count, &si, &so, need, &CS);
    if (take_regions(comm, a->alg, need, 1, SIZE_MAX, 1) == 0)
        return run_piece(a, 0, a->count, 0);
    /* Pieces write only their own elements of recv and read only their own of send:
     * enough where the buffers are disjoint or in place, and for elementwise
     * collectives whose recvbuf starts before sendbuf (each piece's snapshot is taken
     * before it writes, and it overwrites only its own or earlier pieces' input). */
    int elementwise = a->in_units == 1 && a->out_units == 1;
    if (a->overlap && !a->inplace_form && !(elementwise && a->recv < a->send))
        return no_room(a, fn, "sendbuf and recvbuf overlap other than in place, so it cannot run in pieces");
    size_t limit = ccl__heap_largest_free(&comm->data) / 2, n = piece_largest(a, limit);
    if (n == 0)
        n = piece_largest(a, limit = SIZE_MAX);
    if (n == 0)
        return no_room(a, fn, "not even a piece of 256 bytes per unit fits");
    /* Even pieces: as many as the largest needs, each as short as that allows. */
    size_t g = 256 / a->es, pieces = (a->count + n - 1) / n, even = (a->count + pieces - 1) / pieces;
    even = n < a->count ? (even + g - 1) / g * g : n;
    if (even < n) {
        piece_plan(a, even, &si, &so, need, &CS);
        if (take_regions(comm, a->alg, need, 0, limit, 1) != 0)
            even = n;
    }
    if (even == n) {
        piece_plan(a, n, &si, &so, need, &CS);
        if (take_regions(comm, a->alg, need, 0, limit, 1) != 0)
            return no_room(a, fn, "out of memory for its bookkeeping");
    }
    if (even < a->count)
        CCL__LOG(CCL__LOG_INFO, CCL__SUB_CALL, comm->rank, "%s: %s, count %zu of %s, runs in %zu pieces of %zu "
                 "elements: its staging and scratch do not fit the heap's free space whole", fn, a->alg->file,
                 a->count, ccl_dtype_name(a->dtype), (a->count + even - 1) / even, even);
    uint64_t piece = 0;
    for (size_t off = 0; off < a->count; off += even) {
        size_t len = a->count - off < even ? a->count - off : even;
        ccl_result_t r = run_piece(a, off, len, even < a->count ? ++piece : 0);
        if (r != CCL_OK)
            return r;
    }
    return CCL_OK;
}

ccl_result_t ccl__run(ccl_algorithm_t *alg, const void *send, void *recv, size_t count, ccl_dtype_t dtype,
                      ccl_op_t op, void *stream, const char *fn)
{
    ccl_comm_t *comm = alg->comm;
    ccl_result_t r = ccl__check_usable(comm, fn);
    if (r != CCL_OK)
        return r;
    if ((unsigned)dtype >= CCL_NUM_DTYPES)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'dtype' is %d, not a ccl_dtype_t", fn, (int)dtype);
    if ((unsigned)op >= CCL_NUM_OPS)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'op' is %d, not a ccl_op_t", fn, (int)op);
    const Program *prog = alg->prog;
    Collective coll = prog->coll;
    if (cclc_coll_is_v(coll))
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                              "%s: argument 'alg': %s is an %s program, whose segments have their own counts: run it "
                              "with ccl_algorithm_run_v", fn, alg->file, cclc_coll_name(coll));
    int N = comm->nranks, K = prog->chunks;
    size_t es = ccl_dtype_size(dtype);
    size_t in_units = (size_t)cclc_coll_in_chunks(coll, N, 1), out_units = (size_t)cclc_coll_out_chunks(coll, N, 1);
    size_t max_units = in_units > out_units ? in_units : out_units;
    /* Keep every byte offset (and scratch: chunks * CS) far from overflow. */
    size_t scratch_chunks = 0;
    for (int b = BUF_SCRATCH0; b < prog->nbufs; b++)
        scratch_chunks += (size_t)prog->buf_chunks[b];
    size_t limit = ((size_t)1 << 50) / es / (max_units + scratch_chunks / (size_t)K + 1);
    if (count > limit)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                              "%s: argument 'count' is %zu; a %s of %s with N=%d allows at most %zu elements", fn, count,
                              cclc_coll_name(coll), ccl_dtype_name(dtype), N, limit);
    if (count == 0)
        return CCL_OK;
    int me = comm->rank;
    CallArgs a = {.alg = alg, .send = send, .recv = recv, .count = count, .es = es, .in_units = in_units,
                  .out_units = out_units, .dtype = dtype, .op = op, .stream = stream,
                  .in_remote = alg->in_remote && !alg->lines_only, .out_remote = alg->out_remote && !alg->lines_only,
                  .send_reg = SIZE_MAX, .recv_reg = SIZE_MAX};
    int send_optional = coll == COLL_BROADCAST && me != alg->root && !a.in_remote;
    int recv_optional = coll == COLL_REDUCE && me != alg->root && !a.out_remote;
    if (!send && !send_optional)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'sendbuf' is NULL", fn);
    if (!recv && !recv_optional)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'recvbuf' is NULL", fn);
    if ((uintptr_t)send % es)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'sendbuf' (%p) is not aligned to the %zu-byte size of %s",
                              fn, send, es, ccl_dtype_name(dtype));
    if ((uintptr_t)recv % es)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'recvbuf' (%p) is not aligned to the %zu-byte size of %s",
                              fn, recv, es, ccl_dtype_name(dtype));
    size_t in_bytes = in_units * count * es, out_bytes = out_units * count * es;
    if ((a.send_at = ccl__buffer_place(comm, send, in_bytes, fn, "sendbuf")) == CCL__BUF_MISPLACED ||
        (a.recv_at = ccl__buffer_place(comm, recv, out_bytes, fn, "recvbuf")) == CCL__BUF_MISPLACED)
        return CCL_ERR_NOT_SYMMETRIC;
    const char *s = send, *rv = recv;
    a.overlap = s && rv && s < rv + out_bytes && rv < s + in_bytes;
    /* In place means NCCL's forms: allgather sends from its own slot of recv,
     * reduce_scatter receives into its own slot of send, the rest use one buffer. */
    size_t slot = (size_t)me * count * es;
    a.inplace_form = coll == COLL_ALLGATHER ? s == rv + slot : coll == COLL_REDUCE_SCATTER ? rv == s + slot : s == rv;
    a.inplace_ok = a.overlap && a.inplace_form && alg->plan->proof.inplace_applicable && alg->plan->proof.inplace_ok;
    if (a.send_at == CCL__BUF_REGISTERED && ccl__reg_find(comm, send, in_bytes, &a.send_reg))
        a.send_at = CCL__BUF_SYMMETRIC;
    if (a.recv_at == CCL__BUF_REGISTERED && ccl__reg_find(comm, recv, out_bytes, &a.recv_reg))
        a.recv_at = CCL__BUF_SYMMETRIC;
    return run_call(&a, fn);
}

void ccl__run_done(ccl_algorithm_t *alg, const CclCall *c)
{
    ccl_comm_t *comm = alg->comm;
    comm->calls++;
    if (comm->fence_pending) {
        for (int i = 0; i < comm->nquarantine; i++)
            comm->quarantine[i].fenced = 1;
        comm->fence_pending = 0;
    }
    alg->ncalls++;
}
