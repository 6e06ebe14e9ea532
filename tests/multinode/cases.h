/* cases.h: the checked cases of tests/multinode, shared by collectives.c (a communicator
 * from MPI_COMM_WORLD, under mpirun) and tests/uniqueid/uniqueid.c (one from a unique id,
 * forked processes, no MPI): ccl_barrier, then ccl_all_reduce, ccl_all_gather,
 * ccl_reduce_scatter and ccl_all_to_all, then ccl_broadcast and ccl_reduce from every
 * root (its large counts from three), on the counts a CaseCounts lists, out of place and in place, three calls back to
 * back each, every element compared with what this rank computes itself; the lines of
 * reduce-scatters, broadcasts and reduces name the program that ran. The program sets
 * rank and size, and defines fail_now (which must not return) and the combine function
 * that run_cases sums a case's wrong elements with (MPI_Allreduce over the ranks, or this
 * rank's own). And run_kill_case: a rank killed while the others all-reduce. */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ccl.h"

static int rank, size;

static void fail_now(ccl_comm_t *comm, const char *what);

/* Input element i of rank r: small integers, exact in every dtype and sum below. */
static int64_t value(int r, size_t i)
{
    return (int64_t)((r + 1) * (int)(i % 7 + 1)) - 3;
}

static int64_t expect(ccl_op_t op, size_t i)
{
    int64_t acc = value(0, i);
    for (int r = 1; r < size; r++) {
        int64_t v = value(r, i);
        acc = op == CCL_SUM ? acc + v : op == CCL_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);
    }
    return acc;
}

/* Element i of call k's reduction with op (all-reduce, reduce-scatter, reduce), whose
 * inputs are every rank's values + k. */
static int64_t reduced(ccl_op_t op, size_t i, int k)
{
    return expect(op, i) + (op == CCL_SUM ? (int64_t)k * size : k);
}

static void put(void *buf, ccl_dtype_t t, size_t i, int64_t v)
{
    if (t == CCL_F32)
        ((float *)buf)[i] = (float)v;
    else if (t == CCL_F64)
        ((double *)buf)[i] = (double)v;
    else
        ((int32_t *)buf)[i] = (int32_t)v;
}

static int64_t get(const void *buf, ccl_dtype_t t, size_t i)
{
    return t == CCL_F32 ? (int64_t)((const float *)buf)[i] : t == CCL_F64 ? (int64_t)((const double *)buf)[i]
                                                                           : ((const int32_t *)buf)[i];
}

/* The collectives: C_REDUCE is ccl_all_reduce, C_ROOT_REDUCE ccl_reduce. */
enum { C_REDUCE, C_GATHER, C_SCATTER, C_ALLTOALL, C_BROADCAST, C_ROOT_REDUCE };

/* `iters` calls of collective coll back to back (send[k] to recv[k]; root: broadcast and
 * reduce only), then ccl_comm_synchronize; any failure ends the program (fail_now). */
static void call_all(ccl_comm_t *comm, int coll, void **send, void **recv, size_t count, ccl_dtype_t t, ccl_op_t op,
                     int root, int iters)
{
    static const char *name[] = {"ccl_all_reduce", "ccl_all_gather", "ccl_reduce_scatter",
                                 "ccl_all_to_all", "ccl_broadcast",  "ccl_reduce"};
    for (int k = 0; k < iters; k++) {
        ccl_result_t r = coll == C_REDUCE      ? ccl_all_reduce(send[k], recv[k], count, t, op, comm, NULL)
                         : coll == C_GATHER    ? ccl_all_gather(send[k], recv[k], count, t, comm, NULL)
                         : coll == C_SCATTER   ? ccl_reduce_scatter(send[k], recv[k], count, t, op, comm, NULL)
                         : coll == C_ALLTOALL  ? ccl_all_to_all(send[k], recv[k], count, t, comm, NULL)
                         : coll == C_BROADCAST ? ccl_broadcast(send[k], recv[k], count, t, root, comm, NULL)
                                               : ccl_reduce(send[k], recv[k], count, t, op, root, comm, NULL);
        if (r != CCL_OK)
            fail_now(comm, name[coll]);
    }
    if (ccl_comm_synchronize(comm) != CCL_OK)
        fail_now(comm, "ccl_comm_synchronize");
}

/* The file name of the program the comm's last standard call ran ("hier.ccl"), from
 * ccl_comm_explain_choice; "?" if it says none. */
static const char *chosen(ccl_comm_t *comm)
{
    static char buf[1024];
    if (ccl_comm_explain_choice(comm, buf, sizeof buf) != CCL_OK)
        return "?";
    char *p = strstr(buf, " -> "), *e = p ? strchr(p + 4, ' ') : NULL;
    if (!e)
        return "?";
    *e = 0;
    char *slash = strrchr(p + 4, '/');
    return slash ? slash + 1 : p + 4;
}

/* The buffers of `iters` calls of `count` elements each way: input k holds this rank's
 * values + k, output k -999 (in place, one buffer). */
static void alloc_bufs(void **send, void **recv, size_t count, ccl_dtype_t t, int inplace, int iters)
{
    size_t es = ccl_dtype_size(t);
    for (int k = 0; k < iters; k++) {
        send[k] = malloc(count * es + 1);
        recv[k] = inplace ? send[k] : malloc(count * es + 1);
        for (size_t i = 0; i < count; i++) {
            put(send[k], t, i, value(rank, i) + k);
            if (!inplace)
                put(recv[k], t, i, -999);
        }
    }
}

/* Frees what alloc_bufs (or scatter_case) took: recv[k] only where it is a buffer of its own. */
static void free_bufs(void **send, void **recv, int inplace, int iters)
{
    for (int k = 0; k < iters; k++) {
        free(send[k]);
        if (!inplace)
            free(recv[k]);
    }
}

/* One case: `iters` calls back to back; 0 when every element of every call is right. */
static long run_case(ccl_comm_t *comm, size_t count, ccl_dtype_t t, ccl_op_t op, int inplace, int iters)
{
    long wrong = 0;
    void *send[3], *recv[3];
    alloc_bufs(send, recv, count, t, inplace, iters);
    call_all(comm, C_REDUCE, send, recv, count, t, op, 0, iters);
    for (int k = 0; k < iters; k++) {
        for (size_t i = 0; i < count; i++) {
            if (op == CCL_AVG) {    /* f32: the sum (exact) divided by N in float, as the runtime does */
                float want = (float)(expect(CCL_SUM, i) + (int64_t)k * size) / (float)size, got = ((float *)recv[k])[i];
                if (got != want && wrong++ < 3)
                    fprintf(stderr, "rank %d: count %zu f32 avg call %d: element %zu is %g, expected %g\n", rank, count,
                            k, i, got, want);
                continue;
            }
            int64_t want = reduced(op, i, k), got = get(recv[k], t, i);
            if (got != want && wrong++ < 3)
                fprintf(stderr, "rank %d: count %zu %s %s%s call %d: element %zu is %lld, expected %lld\n", rank, count,
                        ccl_dtype_name(t), ccl_op_name(op), inplace ? " in place" : "", k, i, (long long)got,
                        (long long)want);
        }
    }
    free_bufs(send, recv, inplace, iters);
    return wrong;
}

/* Compares the N blocks of `count` in recv[k] of every call k with want(p, i, k),
 * printing the first 3 wrong elements, and frees the buffers (send[k] where it is not
 * inside recv[k]); the wrong elements. */
static long check_blocks(void **send, void **recv, ccl_dtype_t t, size_t count, const char *what, int inplace,
                         int iters, int64_t (*want_of)(int p, size_t i, int k))
{
    long wrong = 0;
    for (int k = 0; k < iters; k++) {
        for (int p = 0; p < size; p++)
            for (size_t i = 0; i < count; i++) {
                int64_t want = want_of(p, i, k), got = get(recv[k], t, (size_t)p * count + i);
                if (got != want && wrong++ < 3)
                    fprintf(stderr, "rank %d: %s count %zu %s%s call %d: rank %d's element %zu is %lld, expected %lld\n",
                            rank, what, count, ccl_dtype_name(t), inplace ? " in place" : "", k, p, i, (long long)got,
                            (long long)want);
            }
        if (!inplace)
            free(send[k]);
        free(recv[k]);
    }
    return wrong;
}

/* All-gather: block p is rank p's input of call k. */
static int64_t gather_want(int p, size_t i, int k)
{
    return value(p, i) + k;
}

/* One all-gather case: `iters` calls back to back, each rank's input its values + k;
 * in place, the input is this rank's slot of the output. 0 when every element is right. */
static long gather_case(ccl_comm_t *comm, size_t count, ccl_dtype_t t, int inplace, int iters)
{
    size_t es = ccl_dtype_size(t);
    void *send[3], *recv[3];
    for (int k = 0; k < iters; k++) {
        recv[k] = malloc(count * es * (size_t)size + 1);
        send[k] = inplace ? (char *)recv[k] + (size_t)rank * count * es : malloc(count * es + 1);
        for (size_t i = 0; i < count * (size_t)size; i++)
            put(recv[k], t, i, -999);
        for (size_t i = 0; i < count; i++)
            put(send[k], t, i, value(rank, i) + k);
    }
    call_all(comm, C_GATHER, send, recv, count, t, (ccl_op_t)0, 0, iters);
    return check_blocks(send, recv, t, count, "all-gather", inplace, iters, gather_want);
}

/* One reduce-scatter case: `iters` calls back to back, each rank's input N blocks of
 * `count`, element i of block b being value(rank, b * count + i) + k; in place, the
 * output is this rank's block of the input. 0 when every element is right. */
static long scatter_case(ccl_comm_t *comm, size_t count, ccl_dtype_t t, ccl_op_t op, int inplace, int iters)
{
    size_t es = ccl_dtype_size(t), total = count * (size_t)size;
    long wrong = 0;
    void *send[3], *recv[3];
    for (int k = 0; k < iters; k++) {
        send[k] = malloc(total * es + 1);
        recv[k] = inplace ? (char *)send[k] + (size_t)rank * count * es : malloc(count * es + 1);
        for (size_t i = 0; i < total; i++)
            put(send[k], t, i, value(rank, i) + k);
        if (!inplace)
            for (size_t i = 0; i < count; i++)
                put(recv[k], t, i, -999);
    }
    call_all(comm, C_SCATTER, send, recv, count, t, op, 0, iters);
    for (int k = 0; k < iters; k++)
        for (size_t i = 0; i < count; i++) {
            int64_t want = reduced(op, (size_t)rank * count + i, k), got = get(recv[k], t, i);
            if (got != want && wrong++ < 3)
                fprintf(stderr, "rank %d: reduce-scatter count %zu %s %s%s call %d: element %zu is %lld, expected %lld\n",
                        rank, count, ccl_dtype_name(t), ccl_op_name(op), inplace ? " in place" : "", k, i,
                        (long long)got, (long long)want);
        }
    free_bufs(send, recv, inplace, iters);
    return wrong;
}

/* One broadcast (op < 0) or reduce case from `root`: `iters` calls back to back, each
 * rank's input its values + k; in place, one buffer. Every element of every output is
 * checked for a broadcast, the root's for a reduce (the other outputs are unspecified).
 * 0 when every element is right. */
static long rooted_case(ccl_comm_t *comm, size_t count, ccl_dtype_t t, int op, int root, int inplace, int iters)
{
    long wrong = 0;
    void *send[3], *recv[3];
    alloc_bufs(send, recv, count, t, inplace, iters);
    call_all(comm, op < 0 ? C_BROADCAST : C_ROOT_REDUCE, send, recv, count, t, (ccl_op_t)(op < 0 ? 0 : op), root,
             iters);
    for (int k = 0; k < iters; k++)
        for (size_t i = 0; i < count && (op < 0 || rank == root); i++) {
            int64_t want = op < 0 ? value(root, i) + k : reduced((ccl_op_t)op, i, k), got = get(recv[k], t, i);
            if (got != want && wrong++ < 3)
                fprintf(stderr, "rank %d: %s root %d count %zu %s%s call %d: element %zu is %lld, expected %lld\n", rank,
                        op < 0 ? "broadcast" : "reduce", root, count, ccl_dtype_name(t), inplace ? " in place" : "", k,
                        i, (long long)got, (long long)want);
        }
    free_bufs(send, recv, inplace, iters);
    return wrong;
}

/* The element i of the block that rank `from` sends rank `to` in call k: distinct for
 * every (from, to, i), so a block in the wrong slot shows. */
static int64_t a2a_value(int from, int to, size_t i, int k)
{
    return (int64_t)(from * 1000 + to * 37) + (int64_t)(i % 11) + k;
}

/* All-to-all: block p is what rank p sent this rank in call k. */
static int64_t a2a_want(int p, size_t i, int k)
{
    return a2a_value(p, rank, i, k);
}

/* One all-to-all case: `iters` calls back to back, `count` elements to each peer; in
 * place, one buffer (the runtime copies the input aside: the program has no in-place
 * form). 0 when every element is right. */
static long alltoall_case(ccl_comm_t *comm, size_t count, ccl_dtype_t t, int inplace, int iters)
{
    size_t es = ccl_dtype_size(t), total = count * (size_t)size;
    void *send[3], *recv[3];
    for (int k = 0; k < iters; k++) {
        send[k] = malloc(total * es + 1);
        recv[k] = inplace ? send[k] : malloc(total * es + 1);
        for (int p = 0; p < size; p++)
            for (size_t i = 0; i < count; i++) {
                put(send[k], t, (size_t)p * count + i, a2a_value(rank, p, i, k));
                if (!inplace)
                    put(recv[k], t, (size_t)p * count + i, -999);
            }
    }
    call_all(comm, C_ALLTOALL, send, recv, count, t, (ccl_op_t)0, 0, iters);
    return check_blocks(send, recv, t, count, "all-to-all", inplace, iters, a2a_want);
}

typedef struct {
    const size_t *reduce, *gather, *scatter, *alltoall, *rooted; /* counts of each collective (rooted: */
    int nreduce, ngather, nscatter, nalltoall, nrooted;            /* broadcast and reduce) */
    const size_t *rooted_few; /* broadcast and reduce counts run from three roots only (large ones) */
    int nrooted_few;
} CaseCounts;

typedef struct {
    ccl_dtype_t t;
    ccl_op_t op;                /* all-reduce, reduce-scatter and reduce only */
} Kind;

/* One collective's cases: every root (broadcast and reduce; with few_roots, only roots 0,
 * size / 2 and size - 1) x count x kind x (out of place, in place), a line each on rank 0,
 * naming the program that ran for the reduce-scatters, broadcasts and reduces; the wrong
 * elements, combined. */
static long run_coll(ccl_comm_t *comm, int coll, const size_t *counts, int ncounts, const Kind *kinds, int nkinds,
                     long (*combine)(long wrong), int few_roots)
{
    static const char *label[] = {"count", "all-gather count", "reduce-scatter count", "all-to-all count",
                                  "broadcast", "reduce"};
    int has_op = coll == C_REDUCE || coll == C_SCATTER || coll == C_ROOT_REDUCE;
    int rooted = coll == C_BROADCAST || coll == C_ROOT_REDUCE, names_program = rooted || coll == C_SCATTER;
    long total = 0;
    for (int root = 0; root < (rooted ? size : 1); root++)
        for (int c = 0; c < ncounts && (!few_roots || root == 0 || root == size / 2 || root == size - 1); c++)
            for (int k = 0; k < nkinds; k++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    ccl_dtype_t t = kinds[k].t;
                    ccl_op_t op = kinds[k].op;
                    long wrong = coll == C_REDUCE      ? run_case(comm, counts[c], t, op, inplace, 3)
                                 : coll == C_GATHER    ? gather_case(comm, counts[c], t, inplace, 3)
                                 : coll == C_SCATTER   ? scatter_case(comm, counts[c], t, op, inplace, 3)
                                 : coll == C_ALLTOALL  ? alltoall_case(comm, counts[c], t, inplace, 3)
                                 : coll == C_BROADCAST ? rooted_case(comm, counts[c], t, -1, root, inplace, 3)
                                                       : rooted_case(comm, counts[c], t, (int)op, root, inplace, 3);
                    long all = combine(wrong);
                    total += all;
                    if (rank != 0)
                        continue;
                    char what[64], program[80] = "";
                    if (rooted)
                        snprintf(what, sizeof what, "%s root %d count", label[coll], root);
                    else
                        snprintf(what, sizeof what, "%s", label[coll]);
                    if (names_program)
                        snprintf(program, sizeof program, " (%s)", chosen(comm));
                    printf("%s %zu %s%s%s%s x3%s: %s\n", what, counts[c], ccl_dtype_name(t), has_op ? " " : "",
                           has_op ? ccl_op_name(op) : "", inplace ? " in place" : "", program, all ? "WRONG" : "ok");
                }
    return total;
}

/* Every case of cc: rank 0 prints one line per case ("...: ok" or "...: WRONG") and
 * then "wrong elements: N"; the total that combine gave, 0 when every element was right. */
static long run_cases(ccl_comm_t *comm, const CaseCounts *cc, long (*combine)(long wrong))
{
    /* ccl_barrier: its tree program for several nodes (runtime/src/api.c). */
    for (int k = 0; k < 3; k++)
        if (ccl_barrier(comm, NULL) != CCL_OK)
            fail_now(comm, "ccl_barrier");
    if (ccl_comm_synchronize(comm) != CCL_OK)
        fail_now(comm, "ccl_comm_synchronize after ccl_barrier");
    if (rank == 0)
        printf("barrier x3: ok\n");
    /* scatter: the reduce-scatters' and the reduces' kinds; plain: the others' */
    static const Kind reduce[] = {{CCL_F32, CCL_SUM}, {CCL_I32, CCL_MAX}, {CCL_F64, CCL_MIN}, {CCL_F32, CCL_AVG}},
                      scatter[] = {{CCL_F32, CCL_SUM}, {CCL_I32, CCL_MAX}}, plain[] = {{CCL_F32, 0}, {CCL_I32, 0}};
    long total = run_coll(comm, C_REDUCE, cc->reduce, cc->nreduce, reduce, 4, combine, 0) +
                 run_coll(comm, C_GATHER, cc->gather, cc->ngather, plain, 2, combine, 0) +
                 run_coll(comm, C_SCATTER, cc->scatter, cc->nscatter, scatter, 2, combine, 0) +
                 run_coll(comm, C_ALLTOALL, cc->alltoall, cc->nalltoall, plain, 2, combine, 0) +
                 run_coll(comm, C_BROADCAST, cc->rooted, cc->nrooted, plain, 2, combine, 0) +
                 run_coll(comm, C_ROOT_REDUCE, cc->rooted, cc->nrooted, scatter, 2, combine, 0) +
                 run_coll(comm, C_BROADCAST, cc->rooted_few, cc->nrooted_few, plain, 2, combine, 1) +
                 run_coll(comm, C_ROOT_REDUCE, cc->rooted_few, cc->nrooted_few, scatter, 2, combine, 1);
    if (rank == 0)
        printf("wrong elements: %ld\n", total);
    return total;
}

/* ---- point-to-point (ccl_send, ccl_recv, groups) across nodes ---- */

/* Element i of message m (0.. of a call) from rank `from` to rank `to` in call k:
 * distinct for every (from, to, m), so a message in the wrong buffer shows. */
static int64_t p2p_value(int from, int to, int m, size_t i, int k)
{
    return (int64_t)(from * 1000 + to * 37 + m * 7) + (int64_t)(i % 13) + k;
}

/* The point-to-point patterns: a ring in one group (send to r + 1, recv from r - 1,
 * which crosses nodes), pairwise exchanges with r ^ 1 and r ^ 2 in one group each (both
 * directions in flight at once), 20 messages each way around the ring in one group
 * (more than the 8 credits of messages in flight to one peer), and ungrouped calls
 * with r ^ 2 (the lower rank sends first, the other receives first); then late partners
 * (p2p_late_case, below). */
enum { P_RING, P_XOR1, P_XOR2, P_RING20, P_PLAIN, P_NPATTERNS };

/* `iters` calls of pattern `pat` back back (call k's values + k), then
 * ccl_comm_synchronize; 0 when every element of every received message is right. */
static long p2p_case(ccl_comm_t *comm, int pat, size_t count, ccl_dtype_t t, int iters)
{
    int nmsg = pat == P_RING20 ? 20 : 1, right = (rank + 1) % size, left = (rank + size - 1) % size;
    int to = pat == P_XOR1 ? rank ^ 1 : pat == P_XOR2 || pat == P_PLAIN ? rank ^ 2 : right;
    int from = pat == P_RING || pat == P_RING20 ? left : to;
    if (to >= size || from >= size)      /* no partner in this shape */
        return 0;
    size_t es = ccl_dtype_size(t);
    void *send[3][20], *recv[3][20];
    for (int k = 0; k < iters; k++)
        for (int m = 0; m < nmsg; m++) {
            send[k][m] = malloc(count * es + 1);
            recv[k][m] = malloc(count * es + 1);
            for (size_t i = 0; i < count; i++) {
                put(send[k][m], t, i, p2p_value(rank, to, m, i, k));
                put(recv[k][m], t, i, -999);
            }
        }
    for (int k = 0; k < iters; k++) {
        ccl_result_t r = CCL_OK;
        if (pat == P_PLAIN) {
            int first_send = rank < to;
            for (int s = 0; s < 2 && r == CCL_OK; s++)
                r = s == !first_send ? ccl_send(send[k][0], count, t, to, comm, NULL)
                                     : ccl_recv(recv[k][0], count, t, from, comm, NULL);
        } else {
            ccl_group_start();
            for (int m = 0; m < nmsg && r == CCL_OK; m++) {
                r = ccl_send(send[k][m], count, t, to, comm, NULL);
                if (r == CCL_OK)
                    r = ccl_recv(recv[k][m], count, t, from, comm, NULL);
            }
            ccl_result_t e = ccl_group_end();
            r = r != CCL_OK ? r : e;
        }
        if (r != CCL_OK)
            fail_now(comm, pat == P_PLAIN ? "ccl_send/ccl_recv" : "ccl_group_end");
    }
    if (ccl_comm_synchronize(comm) != CCL_OK)
        fail_now(comm, "ccl_comm_synchronize after point-to-point calls");
    long wrong = 0;
    for (int k = 0; k < iters; k++)
        for (int m = 0; m < nmsg; m++) {
            for (size_t i = 0; i < count; i++) {
                int64_t want = p2p_value(from, rank, m, i, k), got = get(recv[k][m], t, i);
                if (got != want && wrong++ < 3)
                    fprintf(stderr, "rank %d: p2p pattern %d count %zu %s call %d: message %d from rank %d: element "
                            "%zu is %lld, expected %lld\n", rank, pat, count, ccl_dtype_name(t), k, m, from, i,
                            (long long)got, (long long)want);
            }
            free(send[k][m]);
            free(recv[k][m]);
        }
    return wrong;
}

/* Late partners (docs/multinode.md, "Point-to-point"): each rank of the lower half and
 * rank + size / 2 (a rank of another node, but on one node) exchange LATE_MSGS messages
 * in one group per side, first with the receiver calling 200 ms after the sender, then
 * with the sender calling 200 ms after the receiver. The first 12 messages are small (at
 * most 8 KiB: eager, more than the sender's 8 credits, so the receiving proxy keeps as
 * many as the credits allow while the sender waits for more), the rest mix small ones
 * (one of them empty) and one of 3000 elements in four (12 KB: announced, then cleared
 * by a CTS), so eager messages and CTS-cleared ones follow each other on one channel. Every element
 * of every message is checked: a message in the wrong recv shows. 0 when all are right. */
enum { LATE_MSGS = 40 };

static size_t late_count(int m)
{
    return m >= 12 && m % 4 == 3 ? 3000 : (size_t)(m * 37 % 2048);
}

static long p2p_late_case(ccl_comm_t *comm, ccl_dtype_t t, int late_side)
{
    if (size % 2)
        return 0;
    int low = rank < size / 2, peer = low ? rank + size / 2 : rank - size / 2;
    int sender = low == (late_side == 0);      /* side 0: the lower half sends, the receivers late */
    size_t es = ccl_dtype_size(t);
    void *buf[LATE_MSGS];
    for (int m = 0; m < LATE_MSGS; m++) {
        buf[m] = malloc(late_count(m) * es + 1);
        for (size_t i = 0; i < late_count(m); i++)
            put(buf[m], t, i, sender ? p2p_value(rank, peer, m, i, late_side) : -999);
    }
    if (sender == late_side) {
        struct timespec nap = {0, 200 * 1000000L};
        nanosleep(&nap, NULL);
    }
    ccl_group_start();
    ccl_result_t r = CCL_OK;
    for (int m = 0; m < LATE_MSGS && r == CCL_OK; m++)
        r = sender ? ccl_send(buf[m], late_count(m), t, peer, comm, NULL)
                   : ccl_recv(buf[m], late_count(m), t, peer, comm, NULL);
    ccl_result_t e = ccl_group_end();
    if ((r != CCL_OK ? r : e) != CCL_OK || ccl_comm_synchronize(comm) != CCL_OK)
        fail_now(comm, "late point-to-point group");
    long wrong = 0;
    for (int m = 0; m < LATE_MSGS; m++) {
        for (size_t i = 0; !sender && i < late_count(m); i++) {
            int64_t want = p2p_value(peer, rank, m, i, late_side), got = get(buf[m], t, i);
            if (got != want && wrong++ < 3)
                fprintf(stderr, "rank %d: late p2p %s side %d: message %d (%zu elements) from rank %d: element %zu "
                        "is %lld, expected %lld\n", rank, ccl_dtype_name(t), late_side, m, late_count(m), peer, i,
                        (long long)got, (long long)want);
        }
        free(buf[m]);
    }
    return wrong;
}

/* After a mode's cases, an all-reduce on the same comm (the proxies still agree after
 * them): rank 0 prints "WHAT then all-reduce ...: ok" and "WHAT wrong elements: N"; the
 * total with the all-reduce's wrong elements. */
static long then_all_reduce(ccl_comm_t *comm, const char *what, long total, long (*combine)(long wrong))
{
    long all = combine(run_case(comm, 1001, CCL_F32, CCL_SUM, 0, 3));
    total += all;
    if (rank == 0) {
        printf("%s then all-reduce count 1001 f32 sum x3: %s\n", what, all ? "WRONG" : "ok");
        printf("%s wrong elements: %ld\n", what, total);
    }
    return total;
}

/* Every pattern x count x (f32, i32), 3 calls back to back each, then an all-reduce:
 * rank 0 prints one line per case ("p2p ...: ok" or "...: WRONG") and then "p2p wrong
 * elements: N"; the total that combine gave. ring20 runs on counts up to 1001 only (20 x
 * 3 buffers each way). Then the late partners' cases (f32, i32 x receivers late, senders
 * late), one line each. */
static long run_p2p_cases(ccl_comm_t *comm, const size_t *counts, int ncounts, long (*combine)(long wrong))
{
    static const char *name[] = {"ring in one group", "exchange with rank ^ 1", "exchange with rank ^ 2",
                                 "ring of 20 messages each way in one group", "ungrouped exchange with rank ^ 2"};
    static const ccl_dtype_t types[] = {CCL_F32, CCL_I32};
    long total = 0;
    for (int pat = 0; pat < P_NPATTERNS; pat++)
        for (int c = 0; c < ncounts; c++)
            for (int d = 0; d < 2; d++) {
                if (pat == P_RING20 && counts[c] > 1001)
                    continue;
                long all = combine(p2p_case(comm, pat, counts[c], types[d], 3));
                total += all;
                if (rank == 0)
                    printf("p2p %s count %zu %s x3: %s\n", name[pat], counts[c], ccl_dtype_name(types[d]),
                           all ? "WRONG" : "ok");
            }
    for (int late = 0; late < 2; late++)
        for (int d = 0; d < 2; d++) {
            long all = combine(p2p_late_case(comm, types[d], late));
            total += all;
            if (rank == 0)
                printf("p2p %d messages, small and large, %s late, %s: %s\n", LATE_MSGS,
                       late ? "senders" : "receivers", ccl_dtype_name(types[d]), all ? "WRONG" : "ok");
        }
    /* A collective after them: the proxies' put counts (which point-to-point pieces share)
     * still agree, so its flushes complete. */
    return then_all_reduce(comm, "p2p", total, combine);
}

/* ---- ccl_all_gather_v and ccl_all_to_all_v ---- */

/* On several nodes they run as point-to-point messages (docs/multinode.md, "Variable-size
 * collectives"); on one node, the v programs. The counts: every call has a zero-size
 * segment and one of V_BIG elements (a different rank's each call), the rest small and
 * uneven; segments lie in reverse rank order with V_GAP elements before each and after
 * the last, which must stay untouched. */
enum { V_BIG = 262147, V_GAP = 3 };

/* Elements rank `from` sends rank `to` in call k (allgatherv: the same to every rank). */
static size_t v_count(int gather, int from, int to, int k)
{
    static const size_t small[] = {5, 1001, 17}, pair[] = {0, 1, 17, 1001, 0, 3};
    if (gather)
        return from == k % size ? V_BIG : from == (k + 1) % size ? 0 : small[(from + k) % 3];
    if (from == k % size && to == size - 1 - from)
        return V_BIG;
    return pair[(from * 3 + to * 5 + k) % 6];
}

/* Element i of the segment from rank `from` to rank `to` in call k (allgatherv: to 0). */
static int64_t v_value(int from, int to, size_t i, int k)
{
    return (int64_t)(from * 1000 + to * 37) + (int64_t)(i % 11) + k;
}

/* Displacements of `n` segments of counts c in reverse unit order, V_GAP before each;
 * the extent (with V_GAP after the last). */
static size_t v_layout(const size_t *c, size_t *d, int n)
{
    size_t at = 0;
    for (int u = n - 1; u >= 0; u--) {
        at += V_GAP;
        d[u] = at;
        at += c[u];
    }
    return at + V_GAP;
}

/* One case: `iters` calls of allgatherv (gather) or alltoallv back to back, each with its
 * own counts and buffers, then every element of each whole recvbuf checked: each segment
 * holds its sender's data, every other element what it held before the call (in place,
 * the sendbuf's own data where no segment lands). In place: allgatherv's sendbuf is its
 * own segment of recvbuf; alltoallv's is recvbuf itself (staged by the runtime). 0 when
 * every element is right. */
static long v_case(ccl_comm_t *comm, int gather, ccl_dtype_t t, int inplace, int iters)
{
    size_t es = ccl_dtype_size(t);
    int N = size;
    size_t *sc = malloc(sizeof *sc * (size_t)N * 4 * (size_t)iters), *sd = sc + N * iters,
           *rc = sd + N * iters, *rd = rc + N * iters;
    void *send[3], *recv[3];
    int64_t *before[3];
    size_t len[3];
    for (int k = 0; k < iters; k++) {
        size_t *c = sc + k * N, *d = sd + k * N, *q = rc + k * N, *e = rd + k * N;
        for (int p = 0; p < N; p++) {
            c[p] = gather ? v_count(1, rank, 0, k) : v_count(0, rank, p, k);
            q[p] = v_count(gather, p, rank, k);
        }
        size_t rext = v_layout(q, e, N), sext = gather ? c[0] : v_layout(c, d, N);
        len[k] = rext > sext ? rext : sext;
        recv[k] = malloc(len[k] * es + 1);
        for (size_t i = 0; i < len[k]; i++)
            put(recv[k], t, i, -999);
        send[k] = !inplace ? malloc(sext * es + 1) : gather ? (char *)recv[k] + e[rank] * es : recv[k];
        for (int p = 0; p < (gather ? 1 : N); p++)
            for (size_t i = 0; i < c[p]; i++)
                put(send[k], t, (gather ? 0 : d[p]) + i, v_value(rank, gather ? 0 : p, i, k));
        before[k] = malloc(sizeof *before[k] * (len[k] + 1));
        for (size_t i = 0; i < len[k]; i++)
            before[k][i] = get(recv[k], t, i);
    }
    for (int k = 0; k < iters; k++) {
        ccl_result_t r = gather ? ccl_all_gather_v(send[k], sc[k * N], recv[k], rc + k * N, rd + k * N, t, comm, NULL)
                                : ccl_all_to_all_v(send[k], sc + k * N, sd + k * N, recv[k], rc + k * N, rd + k * N, t,
                                                   comm, NULL);
        if (r != CCL_OK)
            fail_now(comm, gather ? "ccl_all_gather_v" : "ccl_all_to_all_v");
    }
    if (ccl_comm_synchronize(comm) != CCL_OK)
        fail_now(comm, "ccl_comm_synchronize after v-collectives");
    long wrong = 0;
    for (int k = 0; k < iters; k++) {
        const size_t *q = rc + k * N, *e = rd + k * N;
        for (int p = 0; p < N; p++)
            for (size_t i = 0; i < q[p]; i++)
                before[k][e[p] + i] = v_value(p, gather ? 0 : rank, i, k);
        for (size_t i = 0; i < len[k]; i++) {
            int64_t got = get(recv[k], t, i);
            if (got != before[k][i] && wrong++ < 3)
                fprintf(stderr, "rank %d: %s %s%s call %d: recvbuf element %zu is %lld, expected %lld\n", rank,
                        gather ? "allgatherv" : "alltoallv", ccl_dtype_name(t), inplace ? " in place" : "", k, i,
                        (long long)got, (long long)before[k][i]);
        }
        if (!inplace)
            free(send[k]);
        free(recv[k]);
        free(before[k]);
    }
    free(sc);
    return wrong;
}

/* allgatherv and alltoallv x (f32, i32) x (out of place, in place), 3 calls back to back
 * each, then an all-reduce on the same comm: rank 0 prints one line per case ("v ...:
 * ok" or "...: WRONG") and then "v wrong elements: N"; the total that combine gave. */
static long run_v_cases(ccl_comm_t *comm, long (*combine)(long wrong))
{
    static const ccl_dtype_t types[] = {CCL_F32, CCL_I32};
    long total = 0;
    for (int gather = 1; gather >= 0; gather--)
        for (int d = 0; d < 2; d++)
            for (int inplace = 0; inplace < 2; inplace++) {
                long all = combine(v_case(comm, gather, types[d], inplace, 3));
                total += all;
                if (rank == 0)
                    printf("v %s %s%s x3 (a segment of %d elements, a zero one, gaps checked): %s\n",
                           gather ? "allgatherv" : "alltoallv", ccl_dtype_name(types[d]), inplace ? " in place" : "",
                           V_BIG, all ? "WRONG" : "ok");
            }
    return then_all_reduce(comm, "v", total, combine);
}

/* ---- ccl_comm_split of a communicator of several nodes ---- */

/* A child's cases: all-reduce (f32 sum, i32 max), all-gather (f32) and broadcast (i32,
 * from every root) on counts 1, 1001 and 65539 (a broadcast of 256 KB runs hier_split
 * where the child spans nodes), out of place and in place, two calls each, every element
 * checked with the child's rank and size. */
static long split_child_cases(ccl_comm_t *child)
{
    static const size_t counts[] = {1, 1001, 65539};
    long wrong = 0;
    for (int c = 0; c < 3; c++)
        for (int inplace = 0; inplace < 2; inplace++) {
            wrong += run_case(child, counts[c], CCL_F32, CCL_SUM, inplace, 2);
            wrong += run_case(child, counts[c], CCL_I32, CCL_MAX, inplace, 2);
            wrong += gather_case(child, counts[c], CCL_F32, inplace, 2);
            for (int root = 0; root < size; root++)
                wrong += rooted_case(child, counts[c], CCL_I32, -1, root, inplace, 2);
        }
    return wrong;
}

/* Splits comm (nodes of L ranks) four ways, each key size - rank (so a child's ranks run
 * opposite to comm's): by-node (color node(r): each child one node, an ordinary comm of
 * one node), by-local (color local(r): each child spans the nodes, one rank on each),
 * nocolor (by-local, the last rank passing CCL_SPLIT_NOCOLOR: its node's child has one
 * rank fewer, and gets NULL), uneven (the last rank no color, every other color 0: with
 * L > 1 its node would hold fewer ranks than the others, so every member fails naming
 * the layout; with L = 1 it is a child of size - 1 nodes). Each member checks its rank and
 * size in the child, runs split_child_cases on it and destroys it; then comm all-reduces
 * once more. Rank 0 prints a line per split; the wrong elements and failed checks,
 * combined. */
static long run_split_cases(ccl_comm_t *comm, int L, long (*combine)(long wrong))
{
    static const char *pname[] = {"by-node", "by-local", "nocolor", "uneven"};
    const int prank = rank, psize = size;
    long total = 0;
    for (int pat = 0; pat < 4; pat++) {
        int colors[64];
        for (int q = 0; q < psize; q++) {
            colors[q] = pat == 0 ? q / L : pat == 1 || pat == 2 ? q % L : 0;
            if (pat >= 2 && q == psize - 1)
                colors[q] = CCL_SPLIT_NOCOLOR;
        }
        int color = colors[prank], want_size = 0, want_rank = 0, uneven = pat == 3 && L > 1 && psize > L;
        for (int q = 0; q < psize; q++)
            if (colors[q] == color) {
                want_size++;
                want_rank += q > prank; /* keys size - q: the higher ranks come first */
            }
        ccl_comm_t *child = NULL;
        ccl_result_t r = ccl_comm_split(comm, color, psize - prank, &child, NULL);
        long wrong = 0;
        int crank = -1, csize = -1;
        if (color == CCL_SPLIT_NOCOLOR || uneven) {
            ccl_result_t want = color == CCL_SPLIT_NOCOLOR ? CCL_OK : CCL_ERR_INVALID_USAGE;
            if (r != want || child || (uneven && color != CCL_SPLIT_NOCOLOR &&
                                       !strstr(ccl_comm_last_error(comm), "sit on nodes"))) {
                fprintf(stderr, "rank %d: split %s (color %d): %s (%s), child %p; expected %s and no child\n", prank,
                        pname[pat], color, ccl_result_string(r), ccl_comm_last_error(comm), (void *)child,
                        ccl_result_string(want));
                wrong++;
            } else if (uneven && prank == 0) {
                printf("split uneven: rank 0: %s\n", ccl_comm_last_error(comm));
            }
        } else if (r != CCL_OK) {
            fail_now(comm, "ccl_comm_split");
        } else if (ccl_comm_rank(child, &crank) != CCL_OK || ccl_comm_size(child, &csize) != CCL_OK ||
                   crank != want_rank || csize != want_size) {
            fprintf(stderr, "rank %d: split %s (color %d): rank %d of %d in the child, expected %d of %d\n", prank,
                    pname[pat], color, crank, csize, want_rank, want_size);
            wrong++;
        } else {
            rank = crank;
            size = csize;
            wrong += split_child_cases(child);
            rank = prank;
            size = psize;
        }
        if (child && ccl_comm_destroy(child) != CCL_OK)
            fail_now(comm, "ccl_comm_destroy of the child");
        long all = combine(wrong);
        total += all;
        if (prank == 0)
            printf("split %s: %s\n", pname[pat], all ? "WRONG" : "ok");
    }
    long all = combine(run_case(comm, 1001, CCL_F32, CCL_SUM, 0, 1));
    total += all;
    if (prank == 0)
        printf("split: the parent after the splits: %s\n", all ? "WRONG" : "ok");
    return total;
}

/* ---- a rank killed while the others are in a collective ---- */

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void *kill_later(void *ms)
{
    struct timespec t = {*(int *)ms / 1000, *(int *)ms % 1000 * 1000000L};
    nanosleep(&t, NULL);
    raise(SIGKILL);
    return NULL;
}

/* Every rank all-reduces 2^18 floats (1 MB) again and again, each call synchronized; rank
 * `victim` is killed (SIGKILL) once its first call has completed, which means that every
 * rank's communicator is made (the victim's init may return before the others'): at once
 * with after_ms 0, while the others finish that call or start the next; else after_ms
 * later, by a thread of its own, in the middle of a call with data in flight. Every other
 * rank stops at its first failure and prints "rank R: RESULT after N ms (rank V killed M
 * ms after its first call): MESSAGE", N counted from the start of its loop; its exit
 * status: 1 if every call succeeded for 60 s (the death went unnoticed), else 0. */
static int run_kill_case(ccl_comm_t *comm, int victim, int after_ms)
{
    enum { COUNT = 1 << 18 };
    static int ms;
    float *x = calloc(COUNT, sizeof *x);
    if (!x)
        fail_now(comm, "out of memory");
    ms = after_ms;
    pthread_t killer;
    double t0 = now_ms();
    ccl_result_t r = CCL_OK;
    for (int k = 0; r == CCL_OK && now_ms() - t0 < 60000; k++) {
        if (rank == victim && k == 1 && after_ms == 0)
            raise(SIGKILL);
        if (rank == victim && k == 1 && pthread_create(&killer, NULL, kill_later, &ms) != 0)
            fail_now(comm, "pthread_create");
        r = ccl_all_reduce(x, x, COUNT, CCL_F32, CCL_SUM, comm, NULL);
        if (r == CCL_OK)
            r = ccl_comm_synchronize(comm);
    }
    printf("rank %d: %s after %.0f ms (rank %d killed %d ms after its first call): %s\n", rank, ccl_result_string(r),
           now_ms() - t0, victim, after_ms, ccl_comm_last_error(comm));
    fflush(stdout);
    free(x);
    return r == CCL_OK;
}
