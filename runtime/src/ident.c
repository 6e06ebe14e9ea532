/* ident.c: call identities.
 *
 * Every call carries what it runs (cuda/abi.h's CclIdent): the algorithm, its launch
 * shape, count, dtype and op, the heap offsets peers will use and the heap layout. A
 * backend publishes it in this rank's heap header and compares it with each peer's
 * before it touches that peer, so ranks that run different calls stop with an error
 * naming both sides instead of mixing data (a signal of one plan would otherwise
 * release a wait of another). algorithm.c fills a call's identity; this file seals it
 * and says how two differ. Part of the base: calls only the base. */
#include <stdio.h>
#include <string.h>

#include "base.h"

void ccl__ident_seal(CclIdent *id)
{
    id->hash = ccl__fnv1a(CCL__FNV_SEED, &id->plan, (size_t)((char *)(&id->allocs + 1) - (char *)&id->plan));
}

static void ident_describe(const CclIdent *id, char *buf, size_t len)
{
    char name[sizeof id->name + 1];
    memcpy(name, id->name, sizeof id->name);
    name[sizeof id->name] = 0;
    unsigned prot = (unsigned)(id->shape >> 32 & 0xff), threads = (unsigned)(id->shape >> 40 & 0xffff);
    char shape[96] = "";
    if (prot || threads)
        snprintf(shape, sizeof shape, ", protocol %s, %u threads",
                 prot >= 1 && prot <= 1 + PROTO_LL128 ? cclc_proto_name((Protocol)(prot - 1)) : "?", threads);
    char in[48] = "not reached by peers", out[48] = "not reached by peers";
    if (id->in_off != ~0ull)
        snprintf(in, sizeof in, "at heap offset %llu", (unsigned long long)id->in_off);
    if (id->out_off != ~0ull)
        snprintf(out, sizeof out, "at heap offset %llu", (unsigned long long)id->out_off);
    char piece[32] = "";
    if (id->kind >> 16)
        snprintf(piece, sizeof piece, " (piece %llu)", (unsigned long long)(id->kind >> 16));
    CCL__FMT(buf, len,
             "%s (plan %016llx, instances %llu, slices %llu%s), count %llu%s, %s %s, sendbuf %s, recvbuf %s, %llu live "
             "ccl_mem_alloc buffers (heap layout %016llx)",
             name[0] ? name : "?", (unsigned long long)id->plan, (unsigned long long)(id->shape & 0xffff),
             (unsigned long long)(id->shape >> 16 & 0xffff), shape, (unsigned long long)id->count, piece,
             (id->kind >> 8 & 0xff) < CCL_NUM_DTYPES ? ccl_dtype_name((ccl_dtype_t)(id->kind >> 8 & 0xff)) : "?",
             (id->kind & 0xff) < CCL_NUM_OPS ? ccl_op_name((ccl_op_t)(id->kind & 0xff)) : "?", in, out,
             (unsigned long long)id->allocs, (unsigned long long)id->heap);
}

void ccl__ident_report(ccl_comm_t *comm, const CclIdent *mine, const CclIdent *theirs, int peer)
{
    char what[256] = "", me[512], them[512];
    size_t n = 0;
    const struct { int differs; const char *name; } f[] = {
        {mine->plan != theirs->plan, "algorithm"},
        {(mine->shape & 0xffffffffu) != (theirs->shape & 0xffffffffu), "instances/slices"},
        {(mine->shape >> 32) != (theirs->shape >> 32), "protocol/threads"},
        {mine->count != theirs->count, "count"},
        {(mine->kind >> 8 & 0xff) != (theirs->kind >> 8 & 0xff), "dtype"},
        {(mine->kind & 0xff) != (theirs->kind & 0xff), "op"},
        {(mine->kind >> 16) != (theirs->kind >> 16), "piece"},
        {mine->in_off != theirs->in_off, "sendbuf's heap offset"},
        {mine->out_off != theirs->out_off, "recvbuf's heap offset"},
        {mine->heap != theirs->heap || mine->allocs != theirs->allocs, "heap layout (ccl_mem_alloc buffers)"},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].differs && n < sizeof what)
            n += (size_t)snprintf(what + n, sizeof what - n, "%s%s", n ? ", " : "", f[i].name);
    ident_describe(mine, me, sizeof me);
    ident_describe(theirs, them, sizeof them);
    /* The call's arguments first: a standard collective picks its algorithm, scratch and
     * staging by the message size, so a count (or dtype) that differs makes the
     * algorithm, the buffers' offsets and the heap layout differ too; naming those first
     * read as if the ranks had loaded different algorithms. */
    char args[256] = "";
    size_t na = 0;
    if (mine->count != theirs->count)
        na += (size_t)snprintf(args + na, sizeof args - na, "the count (%llu on this rank, %llu on rank %d)",
                               (unsigned long long)mine->count, (unsigned long long)theirs->count, peer);
    for (int k = 0; k < 2 && na < sizeof args; k++) {
        uint64_t a = k ? mine->kind & 0xff : mine->kind >> 8 & 0xff, b = k ? theirs->kind & 0xff : theirs->kind >> 8 & 0xff;
        const char *x = k ? (a < CCL_NUM_OPS ? ccl_op_name((ccl_op_t)a) : "?") : a < CCL_NUM_DTYPES ? ccl_dtype_name((ccl_dtype_t)a) : "?";
        const char *y = k ? (b < CCL_NUM_OPS ? ccl_op_name((ccl_op_t)b) : "?") : b < CCL_NUM_DTYPES ? ccl_dtype_name((ccl_dtype_t)b) : "?";
        if (a != b)
            na += (size_t)snprintf(args + na, sizeof args - na, "%sthe %s (%s on this rank, %s on rank %d)",
                                   na ? " and " : "", k ? "op" : "dtype", x, y, peer);
    }
    if (args[0]) {
        char rest[256] = "";
        size_t nr = 0;
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
            if (f[i].differs && strcmp(f[i].name, "count") && strcmp(f[i].name, "dtype") && strcmp(f[i].name, "op") &&
                nr < sizeof rest)
                nr += (size_t)snprintf(rest + nr, sizeof rest - nr, "%s%s", nr ? ", " : "", f[i].name);
        ccl__set_async_error(comm, CCL_ERR_INVALID_ARGUMENT,
                             "rank %d, call %llu: the ranks disagree on %s%s%s%s: this rank runs %s; rank %d runs %s "
                             "(every rank must pass the same count, dtype and op to a collective)", comm->rank,
                             (unsigned long long)mine->seq, args, rest[0] ? " (so the " : "", rest,
                             rest[0] ? " differ too, which follow from the size)" : "", me, peer, them);
        return;
    }
    /* Offsets are the user's to fix only where both run the same plan (another plan
     * reaches other buffers). */
    int offsets = mine->plan == theirs->plan && mine->shape == theirs->shape &&
                  (mine->in_off != theirs->in_off || mine->out_off != theirs->out_off);
    if (offsets)
        ccl__set_async_error(comm, CCL_ERR_NOT_SYMMETRIC,
                             "rank %d, call %llu: a buffer is not symmetric (%s differ%s): this rank runs %s; rank %d "
                             "runs %s (pass ccl_mem_alloc buffers at the same offset on every rank, or ordinary buffers "
                             "on every rank, after the same ccl_mem_alloc/free calls)",
                             comm->rank, (unsigned long long)mine->seq, what, strchr(what, ',') ? "" : "s", me, peer, them);
    else
        ccl__set_async_error(comm, CCL_ERR_INVALID_ARGUMENT,
                             "rank %d, call %llu: the ranks disagree on what this call runs (%s differ%s): this rank "
                             "runs %s; rank %d runs %s (every rank must run the same algorithm with the same launch "
                             "shape, count, dtype and op, after the same ccl_mem_alloc/free calls; a standard collective's "
                             "tuning table may choose by the kind of buffers, so pass ordinary buffers on every rank or "
                             "ccl_mem_alloc/registered ones on every rank)",
                             comm->rank, (unsigned long long)mine->seq, what, strchr(what, ',') ? "" : "s", me, peer, them);
}
