/* call.c: one call of a fixed-size algorithm, resolved for the backend (CclCall).
 *
 * Takes the user's arguments (ccl__run; algorithm.c loads the algorithm, api.c and
 * ccl_algorithm_run call here), checks every one, and decides where the plan's `in` and
 * `out` live:
 *  - a buffer some peer reaches (the plan has a remote Ref to it) must be symmetric: a
 *    ccl_mem_alloc buffer is used in place (every rank must pass one, at the same
 *    offset), any other buffer is staged through the comm's staging region;
 *  - send and recv that overlap are used as one buffer only when the Proof says the
 *    program is correct in place; otherwise `in` is staged first (a snapshot), which is
 *    always correct because out-of-place is what the verifier proved;
 *  - staging only this rank touches is private, the backend's own memory (host memory
 *    on the CPU, device memory on a GPU), so it cannot shift heap offsets.
 * Heap staging and scratch live in regions every call of the comm shares, of bounded
 * size ("Regions" below), taken in the user's thread in call order, so they stay
 * symmetric whenever the ranks make the same calls with the same sizes. A call whose
 * regions would pass that size, or not fit the heap's free space, runs in pieces, each
 * a call of the same algorithm on a sub-range ("Pieces" below). Gives the backend one
 * CclCall per piece, with its identity sealed (ident.c). */
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

/* ---- Regions ----
 *
 * Besides the user's buffers a call takes up to four heap regions: the staging of in
 * [0] and of out [1] where peers reach them (ordinary buffers), scratch [2] (with a
 * GPU's lines), and for the pieces of a large call a second staging of out [3] that
 * they take turns at with [1] (below, "Pieces"). They are what must stay bounded: a comm running many collectives at
 * many sizes on ordinary buffers would otherwise fill its heap with regions, and later
 * calls would find room only for tiny pieces.
 *
 * Shared. The comm keeps one region of each kind, and every call uses it, whatever its
 * algorithm, as NCCL's fixed buffers. Calls of a comm run in order (the API's contract:
 * one stream, or streams ordered by events; the CPU worker's queue), and no block of a
 * call touches a peer, or its own scratch, before every rank has entered the call, so
 * has ended its previous one (docs/internals.md, "The call entry"): the argument by
 * which one algorithm reuses its scratch across calls of different counts holds across
 * algorithms too, and staging is the caller's in and out, which a rank rewrites once
 * its own call has ended. The exception is a run whose peers write its scratch before
 * the entry (a GPU kernel with lines sends at once, into lines laid out by its program
 * and its region's size): such an algorithm keeps a region of its own
 * (alg->own_scratch, set by the backend), under the same rules.
 *
 * Bounded. A region grows to at most comm->region_cap bytes (CCL_REGION_BYTES, else a
 * quarter of the heap: a sixteenth cut calls on ordinary buffers of 64 MB and more into
 * 16 MiB pieces at 1.1-2x the time of whole ones on 2x H200; with a quarter most sizes
 * were within 1%, the worst reduce_scatter at 256 MB, 1.31x; docs/perf/x2-pdl) for any
 * call that can run in pieces: a larger call runs in pieces sized to the cap. A region
 * that needs at most cap/8 doubles (up to cap/8), a larger one takes the whole cap at
 * once; so, with room in the heap, the regions a region replaced total less than cap/4,
 * the comm's four hold at most 5 x cap, and each own-scratch algorithm's at most
 * 1.25 x cap. Only a call that cannot run in pieces (sendbuf and recvbuf overlapping
 * other than in place), or whose smallest piece exceeds the cap, takes more: what it
 * needs.
 *
 * Kept. A region is never resized in place nor freed before destroy: a replaced one
 * is retired. A call in flight, or a CUDA graph captured earlier and replayed later,
 * holds its regions' offsets (and lines laid out by their sizes), so they stay valid;
 * that a replay finds them unused by other calls is the same ordering contract.
 *
 * Rank-consistent. The allocator is a pure function of its requests, a block taken and
 * given back leaves it as before, the cap is the same on every rank (from heap_bytes,
 * or CCL_REGION_BYTES, which like heap_bytes must be the same everywhere), and what a
 * call needs follows from what every rank agrees on; so every rank that made the same
 * calls takes the same regions and cuts the same pieces.
 *
 * Not finer later. Regions only grow, so the pieces of a call that ran before fit as
 * they did, and the search below (the largest piece that fits) finds them or larger
 * ones: a call shape is never cut into more pieces than the first time it ran, and any
 * call larger than the cap runs in pieces of about the cap, whatever ran before it. */
enum { REGIONS = 4 };

/* The call's regions: the comm's staging, and the comm's scratch or alg's own. */
static void region_slots(ccl_comm_t *comm, ccl_algorithm_t *alg, size_t *off[REGIONS], size_t *bytes[REGIONS])
{
    off[0] = &comm->stage_off[0], bytes[0] = &comm->stage_bytes[0];
    off[1] = &comm->stage_off[1], bytes[1] = &comm->stage_bytes[1];
    off[2] = alg->own_scratch ? &alg->scratch_off : &comm->scratch_off;
    bytes[2] = alg->own_scratch ? &alg->scratch_bytes : &comm->scratch_bytes;
    off[3] = &comm->stage_off[2], bytes[3] = &comm->stage_bytes[2];
}

/* What a region of `bytes` (0: none) that must hold `need` is replaced by: the cap for
 * a need above cap/8, else twice the old size up to cap/8; a need above the cap (a call
 * that cannot run in pieces) gets exactly what it needs. */
static size_t region_want(size_t need, size_t bytes, size_t cap)
{
    if (need > cap)
        return need;
    if (need > cap / 8)
        return cap;
    size_t w = bytes > cap / 16 ? cap / 8 : 2 * bytes;
    return w > need ? w : need;
}

/* Gives the call's regions at least need[k] bytes each, all or none: 0, or -1 with the
 * heap as it was; with commit 0 it only finds out (the heap left as it was either
 * way). A region grows only where need[k] <= `ceil` (the cap, or SIZE_MAX for a call
 * that cannot run in pieces), by at most `limit` bytes of new blocks in all (a region
 * takes just its need where its want would pass the limit or not fit). */
static int take_regions(ccl_comm_t *comm, ccl_algorithm_t *alg, const size_t need[REGIONS], size_t ceil, size_t limit,
                        int commit)
{
    size_t *off[REGIONS], *bytes[REGIONS], noff[REGIONS], nbytes[REGIONS], taken = 0;
    region_slots(comm, alg, off, bytes);
    int k, fits = 1;
    for (k = 0; k < REGIONS && fits; k++) {
        noff[k] = SIZE_MAX;
        if (need[k] == 0 || (*off[k] != SIZE_MAX && *bytes[k] >= need[k]))
            continue;
        size_t want = region_want(need[k], *bytes[k], comm->region_cap);
        if (want > limit - taken)
            want = need[k];
        fits = need[k] <= ceil && need[k] <= limit - taken &&
               (ccl__heap_alloc(&comm->data, want, 0, &noff[k]) == 0 ||
                (want != need[k] && ccl__heap_alloc(&comm->data, want = need[k], 0, &noff[k]) == 0));
        if (!fits)
            noff[k] = SIZE_MAX;
        else
            nbytes[k] = want, taken += want;
    }
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
                CCL__LOG(CCL__LOG_INFO, CCL__SUB_CALL, comm->rank, "%s region: %zu bytes at heap offset %zu%s "
                         "(shared regions of up to %zu)", k == 0 ? "staging in" : k == 1 ? "staging out"
                         : k == 3 ? "second staging out" : alg->own_scratch ? "scratch (its own)" : "scratch", nbytes[k], noff[k],
                         *off[k] != SIZE_MAX ? ", replacing a smaller one" : "", comm->region_cap);
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

static int in_heap(const ccl_comm_t *comm, const char *p)
{
    const char *base = comm->heap_base[comm->rank];
    return p && p >= base && p < base + comm->heap_bytes;
}

int ccl__buffer_ordinary(const ccl_comm_t *comm, const void *ptr, size_t bytes)
{
    size_t at;
    return !in_heap(comm, ptr) && !ccl__reg_find(comm, ptr, bytes, &at);
}

/* Where peers reach this rank's user buffers, for staging: in the heap, or at their
 * registration's place in the window (register.c). */
CclBufPlace ccl__buffer_place(ccl_comm_t *comm, const void *ptr, size_t bytes, const char *fn, const char *arg)
{
    const char *base = comm->heap_base[comm->rank], *p = ptr;
    if (!in_heap(comm, p))
        return ccl__buffer_ordinary(comm, p, bytes) ? CCL__BUF_PRIVATE : CCL__BUF_REGISTERED;
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
 * A call whose staging (of buffers peers reach) and scratch would pass the regions'
 * cap, or do not fit the heap's free space, runs as a sequence of pieces, each a normal
 * call of the same algorithm on elements [off, off + n) of every unit: the largest n (a
 * multiple of 256 bytes) whose regions fit, evened out over the pieces. The decision
 * depends only on what every rank agrees on (algorithm, count, dtype, where peers reach
 * the buffers, the cap, the heap's layout),
 * so the ranks' pieces pair up; each piece's identity holds the user's count and its
 * number, so ranks that disagree still fail with both sides named. Where in (out) has
 * several units (allgather's out, reduce_scatter's in, alltoall's both), a piece's
 * units are strided in the user's buffer: the kernel reads and writes them there, a
 * unit stride apart (CclCall.in_ustride, out_ustride; a peer's symmetric or registered
 * buffer has the same layout), and a side staged for another reason is staged packed,
 * with strided staging copies (CclCall.send_pitch, recv_pitch). A piece reads only its own
 * elements of send and writes only its own of recv, so in place (NCCL's forms) and a
 * recvbuf before an overlapping sendbuf (elementwise collectives, pieces in order) stay
 * correct; other overlaps run whole or fail as before. On a backend that copies out
 * beside the next piece (the GPU's), a staged out that peers write gets a second region
 * of the same size where the heap has room for it without cutting smaller pieces, and
 * the pieces take turns at the two, so that a piece's copy out runs while the next
 * piece does. (Not half of one region each: a tuned shape pays a fixed cost per piece,
 * which is why pieces are as large as they can be; a chain broadcast of 1 GB in pieces
 * of 32 MB instead of 64 took 1.69x the time on 4x H200.) */

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
    /* Pieces only: a staged out in the heap has a second region, which the pieces take
     * turns at with the first (CclCall.alternate), so that the backend copies one piece
     * out while the next runs. */
    int turns;
} CallArgs;

/* Whether a piece of n elements stages its in and out, and the heap bytes of its
 * regions (staging that peers reach, scratch). A piece of an in-place call is in place
 * too: its units are a unit stride apart in the user's buffer, so the rank's slot of
 * the side with N units is exactly the other side, as in the whole call. */
static void piece_plan(const CallArgs *a, size_t n, int *stage_in, int *stage_out, size_t need[REGIONS], size_t *CS)
{
    const ccl_algorithm_t *alg = a->alg;
    const Program *prog = alg->prog;
    *stage_in = !a->send || (a->overlap && !a->inplace_ok) || (a->in_remote && a->send_at != CCL__BUF_SYMMETRIC);
    *stage_out = !a->recv || (a->out_remote && a->recv_at != CCL__BUF_SYMMETRIC);
    *CS = ccl__chunk_stride(n, prog->chunks, a->es);
    need[0] = *stage_in && a->in_remote ? a->in_units * n * a->es : 0;
    need[1] = *stage_out && a->out_remote ? a->out_units * n * a->es : 0;
    need[2] = alg->comm->be->scratch_bytes ? alg->comm->be->scratch_bytes(alg, *CS, a->es)
                                           : ccl__scratch_offset(prog, prog->nbufs, *CS, a->es);
    need[3] = a->turns ? need[1] : 0;
}

static int piece_fits(const CallArgs *a, size_t n, size_t ceil, size_t limit)
{
    int si, so;
    size_t need[REGIONS], CS;
    piece_plan(a, n, &si, &so, need, &CS);
    return take_regions(a->alg->comm, a->alg, need, ceil, limit, 0) == 0;
}

/* The largest piece (a multiple of 256 bytes, or the whole count) whose regions fit:
 * the regions as they are, or grown up to `ceil` bytes each by at most `limit` bytes
 * taken anew; 0 when not even the smallest does. */
static size_t piece_largest(const CallArgs *a, size_t ceil, size_t limit)
{
    size_t g = 256 / a->es, lo = 0, hi = (a->count + g - 1) / g;
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        if (piece_fits(a, mid * g < a->count ? mid * g : a->count, ceil, limit))
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
    c.in_ustride = c.send_pitch && !stage_in ? a->count : n;
    c.out_ustride = c.recv_pitch && !stage_out ? a->count : n;
    char *base = comm->heap_base[me];
    /* A registered buffer is used through its registration's alias in the heap's
     * window, at an offset every rank shares (zero-copy; both sides of an in-place call
     * through the same alias, so no kernel reads through one address what it wrote
     * through another). Staging only this rank touches is private, the backend's own
     * memory (NULL here); staging peers reach is the comm's heap region. */
    size_t *roff[REGIONS], *rbytes[REGIONS];
    region_slots(comm, alg, roff, rbytes);
    c.in = !stage_in ? (a->send_reg != SIZE_MAX ? base + a->send_reg + off * es : (void *)c.send)
           : a->in_remote ? base + *roff[0] : NULL;
    c.out = !stage_out ? (a->recv_reg != SIZE_MAX ? base + a->recv_reg + off * es : c.recv)
            : a->out_remote ? base + *roff[1] : NULL;
    if (a->turns && stage_out && a->out_remote) {
        c.alternate = 1, c.turn = (int)(piece % 2), c.last = off + n == a->count;
        c.out = base + *roff[c.turn ? 3 : 1];
    }
    c.stage_in = stage_in && c.send;    /* a NULL send stages nothing: its content is unused */
    c.stage_out = stage_out && c.recv;
    c.in_off = a->in_remote ? (size_t)((char *)c.in - base) : SIZE_MAX;
    c.out_off = a->out_remote ? (size_t)((char *)c.out - base) : SIZE_MAX;
    if (a->inplace_ok && !stage_in && !stage_out && coll == COLL_ALLGATHER)
        c.in_stride = c.out_ustride * es;
    if (a->inplace_ok && !stage_in && !stage_out && coll == COLL_REDUCE_SCATTER)
        c.out_stride = c.in_ustride * es;
    c.scratch_off = *roff[2] == SIZE_MAX ? 0 : *roff[2];
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

int ccl__on_plain_buffers(const ccl_comm_t *comm, Collective coll, const void *send, const void *recv, size_t count,
                          size_t esize)
{
    size_t in_bytes = (size_t)cclc_coll_in_chunks(coll, comm->nranks, 1) * count * esize,
           out_bytes = (size_t)cclc_coll_out_chunks(coll, comm->nranks, 1) * count * esize;
    return (send && ccl__buffer_ordinary(comm, send, in_bytes)) || (recv && ccl__buffer_ordinary(comm, recv, out_bytes));
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

/* Runs the call whole when its regions fit within the cap (growing them), else in
 * pieces (the largest whose regions fit within the cap, evened out), taking at most half
 * of the heap's largest free block anew where that is enough, so that ccl_mem_alloc
 * keeps room: regions are kept until destroy. Beyond the cap only where even a piece of
 * 256 bytes per unit needs more. Later calls reuse the regions, so the pieces of a
 * repeated call (a CUDA graph's warm-up and its capture) come out the same. */
static ccl_result_t run_call(const CallArgs *a, const char *fn)
{
    ccl_comm_t *comm = a->alg->comm;
    int si, so;
    size_t need[REGIONS], CS;
    /* Pieces write only their own elements of recv and read only their own of send:
     * enough where the buffers are disjoint or in place, and for elementwise
     * collectives whose recvbuf starts before sendbuf (each piece's snapshot is taken
     * before it writes, and it overwrites only its own or earlier pieces' input). */
    int elementwise = a->in_units == 1 && a->out_units == 1;
    int pieceable = !a->overlap || a->inplace_form || (elementwise && a->recv < a->send);
    piece_plan(a, a->count, &si, &so, need, &CS);
    if (take_regions(comm, a->alg, need, pieceable ? comm->region_cap : SIZE_MAX, SIZE_MAX, 1) == 0)
        return run_piece(a, 0, a->count, 0);
    if (!pieceable)
        return no_room(a, fn, "sendbuf and recvbuf overlap other than in place, so it cannot run in pieces");
    size_t half = ccl__heap_largest_free(&comm->data) / 2, n = 0, ceil = 0, limit = 0;
    const size_t tries[4][2] = {{comm->region_cap, half}, {comm->region_cap, SIZE_MAX}, {SIZE_MAX, half},
                                {SIZE_MAX, SIZE_MAX}};
    for (int t = 0; t < 4 && n == 0; t++)
        n = piece_largest(a, ceil = tries[t][0], limit = tries[t][1]);
    if (n == 0)
        return no_room(a, fn, "not even a piece of 256 bytes per unit fits");
    /* Even pieces: as many as the largest needs, each as short as that allows. */
    size_t g = 256 / a->es, pieces = (a->count + n - 1) / n, even = (a->count + pieces - 1) / pieces;
    even = n < a->count ? (even + g - 1) / g * g : n;
    /* A second staged out, where the backend copies out beside the next piece and the
     * heap has room for it at this piece size. */
    CallArgs turns = *a;
    turns.turns = 1;
    if (comm->be->alternates_out && piece_fits(&turns, even, ceil, limit))
        a = &turns;
    if (even < n) {
        piece_plan(a, even, &si, &so, need, &CS);
        if (take_regions(comm, a->alg, need, ceil, limit, 1) != 0)
            even = n;
    }
    if (even == n) {
        piece_plan(a, n, &si, &so, need, &CS);
        if (take_regions(comm, a->alg, need, ceil, limit, 1) != 0)
            return no_room(a, fn, "out of memory for its bookkeeping");
    }
    if (even < a->count)
        CCL__LOG(CCL__LOG_INFO, CCL__SUB_CALL, comm->rank, "%s: %s, count %zu of %s, runs in %zu pieces of %zu "
                 "elements: its staging and scratch %s", fn, a->alg->file, a->count, ccl_dtype_name(a->dtype),
                 (a->count + even - 1) / even, even,
                 ceil == SIZE_MAX ? "do not fit the heap's free space whole"
                                  : "take more than the shared regions' size (CCL_REGION_BYTES) or the heap's free space");
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
                  .in_remote = ccl__peers_reach_in(alg), .out_remote = ccl__peers_reach_out(alg),
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
