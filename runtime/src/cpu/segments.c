/* cpu/segments.c: allgatherv and alltoallv on the CPU backend.
 *
 * Takes a v call (CclCall.is_v, its table in CclVCall) on its way through
 * cpu/backend.c; gives what the executor needs beyond a fixed-size call: staging in the
 * v arena, this rank's published table, every rank's tables once the call's identities
 * agree (with the cross-rank count check), and per chunk of a data op its offsets and
 * length by the segment of the data it moves. Assumes a proved plan: an in/out chunk
 * only ever holds its own segment's data at its own position (the verifier's segment
 * rule), so the segment named by PlanOp.content sizes every operand of the chunk.
 *
 * Layout of one call (docs/internals.md, "Variable-size collectives"): segment s of
 * count n is cut into K chunks of stride ccl__chunk_stride(n, K, esize), chunk c at
 * element displacement + c * stride (in/out) or at chunk index * cs_max (scratch, where
 * cs_max is the stride of the longest segment of any rank); instances and slices cut
 * each chunk as for fixed sizes (ccl__part). A zero-size segment has empty chunks. */
#include <stdlib.h>
#include <string.h>

#include "cpu/segments.h"

static uint64_t *ring_entry(ccl_comm_t *comm, int rank, const CclCall *c)
{
    size_t words = CCL__VT_WORDS(comm->nranks);
    return (uint64_t *)(comm->heap_base[rank] + c->v.ring_off) + (c->id.seq % CCL_IDENT_RING) * words;
}

static const uint64_t *table_of(const CpuSegs *sg, int rank)
{
    return sg->tab + (size_t)rank * CCL__VT_WORDS(sg->N);
}

void ccl__segs_publish(ccl_comm_t *comm, const CclCall *c)
{
    /* Peers read it only after the identity (written after it, with release). */
    memcpy(ring_entry(comm, comm->rank, c), c->v.table, ccl__segs_table_bytes(comm->nranks));
}

ccl_result_t ccl__segs_load(ccl_comm_t *comm, const CclCall *c, CpuSegs *sg, char *err, size_t len)
{
    int N = comm->nranks, me = comm->rank;
    const Program *prog = c->alg->prog;
    size_t words = CCL__VT_WORDS(N);
    memset(sg, 0, sizeof *sg);
    sg->coll = prog->coll;
    sg->N = N;
    sg->K = prog->chunks;
    sg->in_chunks = prog->buf_chunks[BUF_IN];
    sg->es = c->esize;
    if (!(sg->tab = calloc(words * (size_t)N, sizeof *sg->tab))) {
        snprintf(err, len, "rank %d: out of memory reading the ranks' segment tables", me);
        return CCL_ERR_OUT_OF_MEMORY;
    }
    /* Every peer has published this call (its identity matched), and none is more than
     * one call ahead, so its entry for this seq is intact. */
    for (int p = 0; p < N; p++)
        memcpy(sg->tab + (size_t)p * words, p == me ? c->v.table : ring_entry(comm, p, c), words * sizeof *sg->tab);
    sg->hash = ccl__fnv1a(CCL__FNV_SEED, sg->tab, words * (size_t)N * sizeof *sg->tab);

    /* The count check: what every rank expects in each out segment is what its sender
     * sends. Every rank checks every pair, so all fail alike, naming the first. */
    uint64_t longest = 0;
    for (int p = 0; p < N; p++) {
        for (int u = 0; u < N; u++) {
            int q, v;
            ccl__v_home(sg->coll, p, u, &q, &v);
            uint64_t want = table_of(sg, p)[CCL__VT_OUT_COUNT * N + u], sent = table_of(sg, q)[CCL__VT_IN_COUNT * N + v];
            if (want == sent)
                continue;
            ccl__v_count_message(err, len, sg->coll, me, c->id.seq, p, u, (unsigned long long)sent,
                                 (unsigned long long)want, c->alg->file);
            return CCL_ERR_INVALID_ARGUMENT;
        }
        for (int v = 0; v < (sg->coll == COLL_ALLTOALLV ? N : 1); v++)
            if (table_of(sg, p)[CCL__VT_IN_COUNT * N + v] > longest)
                longest = table_of(sg, p)[CCL__VT_IN_COUNT * N + v];
    }
    sg->cs_max = ccl__chunk_stride((size_t)longest, sg->K, sg->es);

    /* Where peers say their buffers are is used as given: it must lie in their heaps
     * (every table was checked by its own rank's entry point; this catches a corrupt
     * one before any access instead of writing past a heap). */
    for (int p = 0; p < N; p++) {
        const uint64_t *t = table_of(sg, p), *tail = t + (size_t)CCL__VT_ROWS * (size_t)N;
        for (int side = 0; side < 2; side++) {
            uint64_t off = tail[side ? CCL__VT_OUT_OFF : CCL__VT_IN_OFF], ext = 0;
            int crow = side ? CCL__VT_OUT_COUNT : CCL__VT_IN_COUNT, drow = side ? CCL__VT_OUT_DISPL : CCL__VT_IN_DISPL;
            for (int u = 0; u < N; u++)
                if (t[crow * N + u] + t[drow * N + u] > ext)
                    ext = t[crow * N + u] + t[drow * N + u];
            if (off == ~0ull || (off <= comm->heap_bytes && ext <= (comm->heap_bytes - off) / sg->es))
                continue;
            snprintf(err, len, "rank %d, call %llu: rank %d's segment table puts its %s (%llu elements) at heap offset "
                     "%llu, outside its %zu-byte heap (a bug in libccl)", me, (unsigned long long)c->id.seq, p,
                     side ? "recvbuf" : "sendbuf", (unsigned long long)ext, (unsigned long long)off, comm->heap_bytes);
            return CCL_ERR_INTERNAL;
        }
    }

    /* Scratch at the arena's start (the same offset on every rank), each rank's staging
     * at its end: they must not meet on any rank. */
    size_t scratch = ccl__scratch_offset(prog, prog->nbufs, sg->cs_max, sg->es);
    for (int p = 0; p < N; p++) {
        uint64_t stage = table_of(sg, p)[CCL__VT_ROWS * N + CCL__VT_STAGE_BYTES];
        if (scratch <= c->v.arena_bytes && stage <= c->v.arena_bytes - scratch)
            continue;
        ccl__v_space_message(err, len, me, c->id.seq, c->alg->file, scratch, (unsigned long long)longest, c->dtype, p,
                             (unsigned long long)stage, c->v.arena_bytes);
        return CCL_ERR_OUT_OF_MEMORY;
    }
    return CCL_OK;
}

void ccl__segs_free(CpuSegs *sg)
{
    free(sg->tab);
    sg->tab = NULL;
}

void ccl__segs_chunk(const CpuSegs *sg, const PlanOp *op, int j, size_t *offs, size_t *len)
{
    int N = sg->N, K = sg->K;
    int h = op->content ? op->content[j] : -1;
    *len = 0;
    if (h < 0)
        return; /* data that never came from an input: nothing worth moving */
    int q = h / sg->in_chunks, i = h % sg->in_chunks, c = i % K;
    size_t n = (size_t)table_of(sg, q)[CCL__VT_IN_COUNT * N + i / K];
    size_t cs = ccl__chunk_stride(n, K, sg->es);
    *len = c * cs >= n ? 0 : (n - c * cs < cs ? n - c * cs : cs);
    for (int k = 0; k < op->ndst + op->nsrc; k++) {
        const Ref *r = k < op->ndst ? &op->dst[k] : &op->src[k - op->ndst];
        int idx = r->chunk + j;
        if (r->buf >= BUF_SCRATCH0) {
            offs[k] = (size_t)idx * sg->cs_max;
            continue;
        }
        int row = r->buf == BUF_IN ? CCL__VT_IN_DISPL : CCL__VT_OUT_DISPL;
        offs[k] = (size_t)table_of(sg, r->rank)[row * N + idx / K] + (size_t)(idx % K) * cs;
    }
}

void ccl__segs_stage_out(const CpuSegs *sg, int rank, void *recv, const void *out)
{
    const uint64_t *t = table_of(sg, rank);
    for (int u = 0; u < sg->N; u++) {
        size_t at = (size_t)t[CCL__VT_OUT_DISPL * sg->N + u] * sg->es;
        memcpy((char *)recv + at, (const char *)out + at, (size_t)t[CCL__VT_OUT_COUNT * sg->N + u] * sg->es);
    }
}

int ccl__segs_moved(CpuSegsLast *last, const void *alg, const CpuSegs *sg)
{
    int moved = last->alg != alg || last->hash != sg->hash;
    last->alg = alg;
    last->hash = sg->hash;
    return moved;
}

void ccl__segs_peer_bases(const CpuSegs *sg, ccl_comm_t *comm, int p, char **in, char **out)
{
    const uint64_t *tail = table_of(sg, p) + (size_t)CCL__VT_ROWS * (size_t)sg->N;
    *in = tail[CCL__VT_IN_OFF] == ~0ull ? NULL : comm->heap_base[p] + tail[CCL__VT_IN_OFF];
    *out = tail[CCL__VT_OUT_OFF] == ~0ull ? NULL : comm->heap_base[p] + tail[CCL__VT_OUT_OFF];
}
