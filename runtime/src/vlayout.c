/* vlayout.c: the v-collectives' segment tables as both sides of the backend interface
 * read them (backend.h): whose data out segment u of a rank holds, where a call's
 * staging that peers reach goes in the v arena (for a backend's run hook, once every
 * rank's table is known), and what the backends' checks of every rank's table say
 * when counts disagree or do not fit, the same on every rank and backend. vcoll.c fills
 * the tables; the backends check and use them. Calls only the base. */
#include <stdio.h>

#include "backend.h"

void ccl__v_home(Collective coll, int rank, int u, int *q, int *v)
{
    /* allgatherv: out unit u is rank u's only in unit; alltoallv: rank u's unit `rank`. */
    *q = u;
    *v = coll == COLL_ALLTOALLV ? rank : 0;
}

void ccl__v_place(ccl_comm_t *comm, const CclCall *c, uint64_t *table, void **in, void **out)
{
    int N = comm->nranks;
    char *arena = comm->heap_base[comm->rank] + c->v.arena_off;
    size_t in_b = (c->in_bytes + CCL__HEAP_ALIGN - 1) / CCL__HEAP_ALIGN * CCL__HEAP_ALIGN;
    size_t out_b = (c->out_bytes + CCL__HEAP_ALIGN - 1) / CCL__HEAP_ALIGN * CCL__HEAP_ALIGN;
    size_t need = (c->v.in_heap ? in_b : 0) + (c->v.out_heap ? out_b : 0), end = c->v.arena_bytes;
    uint64_t *tail = table + (size_t)CCL__VT_ROWS * (size_t)N;
    tail[CCL__VT_STAGE_BYTES] = need;
    if (need > end)
        return; /* the backend's check of every table fails the call on every rank before anything is touched */
    /* Staging at the arena's end, out last; scratch grows from its start. */
    if (c->v.out_heap) {
        end -= out_b;
        *out = arena + end;
        tail[CCL__VT_OUT_OFF] = c->v.arena_off + end;
    }
    if (c->v.in_heap) {
        end -= in_b;
        *in = arena + end;
        tail[CCL__VT_IN_OFF] = c->v.arena_off + end;
    }
}

void ccl__v_count_message(char *err, size_t len, Collective coll, int me, uint64_t seq, int p, int u,
                          unsigned long long sent, unsigned long long want, const char *file)
{
    int q, v;
    ccl__v_home(coll, p, u, &q, &v);
    char what[48];
    if (coll == COLL_ALLGATHERV)
        snprintf(what, sizeof what, "its sendcount");
    else
        snprintf(what, sizeof what, "its sendcounts[%d]", v);
    snprintf(err, len,
             "rank %d, call %llu: the ranks disagree on the size of segment %d of rank %d's recvbuf (the data from "
             "rank %d): rank %d sends %llu elements (%s), rank %d expects %llu (its recvcounts[%d]); every rank's "
             "recvcounts[q] must equal what rank q sends it (%s)", me, (unsigned long long)seq, u, p, q, q, sent, what,
             p, want, u, file);
}

void ccl__v_space_message(char *err, size_t len, int me, uint64_t seq, const char *file, size_t scratch,
                          unsigned long long longest, ccl_dtype_t dtype, int p, unsigned long long stage,
                          size_t arena_bytes)
{
    /* Name what does not fit: the scratch (sized by the longest segment), rank p's
     * staging (its buffers peers cannot reach), or the two together; never a part of 0
     * bytes as if it were the cause. */
    char need[320];
    if (stage == 0)
        snprintf(need, sizeof need, "%s needs %zu bytes of scratch for its longest segment (%llu elements of %s)", file,
                 scratch, longest, ccl_dtype_name(dtype));
    else if (scratch == 0)
        snprintf(need, sizeof need, "rank %d needs %llu bytes of staging for its sendbuf and recvbuf (buffers peers "
                 "cannot reach where they are)", p, stage);
    else
        snprintf(need, sizeof need, "%s needs %zu bytes of scratch (its longest segment is %llu elements of %s) and "
                 "rank %d %llu bytes of staging, together", file, scratch, longest, ccl_dtype_name(dtype), p, stage);
    snprintf(err, len,
             "rank %d, call %llu: %s, more than the %zu bytes of the heap that v-collectives use (half of what was "
             "free at the first v call; raise ccl_config_t.heap_bytes / CCL_HEAP_BYTES%s, or set CCL_EXCHANGE=p2p on "
             "every rank: the standard v calls then run as point-to-point messages, which stage nothing)", me,
             (unsigned long long)seq, need, arena_bytes,
             stage ? ", or pass ccl_mem_alloc buffers, which need no staging" : "");
}
