/* collectives.c: ccl_barrier, ccl_all_reduce, ccl_all_gather, ccl_reduce_scatter, ccl_all_to_all,
 * ccl_broadcast and ccl_reduce on a communicator of several nodes, under mpirun
 * (tests/multinode/run.sh; docs/multinode.md).
 *
 *   CCL_RANKS_PER_NODE=2 mpirun -np 4 collectives [check|skip R|kill R]
 *
 * The communicator comes from MPI_COMM_WORLD by ccl_comm_init_mpi_nodes, so ranks of
 * different nodes share no memory and their traffic goes through Open MPI (the
 * proxy's MPI_Isend/MPI_Irecv). check: every count, dtype and op below, out of place
 * and in place, three calls back to back each, every element compared with what this
 * rank computes itself (all-reduce; avg's division goes through the all-rank barrier,
 * whose arrivals cross nodes as messages), then the all-gathers, reduce-scatters and
 * all-to-alls likewise, then broadcasts and reduces from every root; prints one line per
 * case on rank 0 (with the program that ran, for the reduce-scatters, broadcasts and
 * reduces) and exits 1 on any wrong element. skip R: rank R makes no call while the
 * others all-reduce (CCL_TIMEOUT_MS bounds their wait); every rank prints what its call
 * returned and its message. kill R: rank R is killed (SIGKILL) instead. bw: the net channel's rate against MPI's own
 * (bandwidth(), below). */
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccl.h"
#include "ccl_mpi.h"

static int rank, size;

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

static void fail_now(ccl_comm_t *comm, const char *what)
{
    fprintf(stderr, "rank %d: %s: %s\n", rank, what, ccl_comm_last_error(comm));
    MPI_Abort(MPI_COMM_WORLD, 1);
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

/* One case: `iters` calls back to back; 0 when every element of every call is right. */
static long run_case(ccl_comm_t *comm, size_t count, ccl_dtype_t t, ccl_op_t op, int inplace, int iters)
{
    long wrong = 0;
    void *send[3], *recv[3];
    alloc_bufs(send, recv, count, t, inplace, iters);
    for (int k = 0; k < iters; k++)
        if (ccl_all_reduce(send[k], recv[k], count, t, op, comm, NULL) != CCL_OK)
            fail_now(comm, "ccl_all_reduce");
    if (ccl_comm_synchronize(comm) != CCL_OK)
        fail_now(comm, "ccl_comm_synchronize");
    for (int k = 0; k < iters; k++) {
        for (size_t i = 0; i < count; i++) {
            if (op == CCL_AVG) {    /* f32: the sum (exact) divided by N in float, as the runtime does */
                float want = (float)(expect(CCL_SUM, i) + (int64_t)k * size) / (float)size, got = ((float *)recv[k])[i];
                if (got != want && wrong++ < 3)
                    fprintf(stderr, "rank %d: count %zu f32 avg call %d: element %zu is %g, expected %g\n", rank, count,
                            k, i, got, want);
                continue;
            }
            int64_t want = expect(op, i) + (op == CCL_SUM ? (int64_t)k * size : k);
            int64_t got = get(recv[k], t, i);
            if (got != want && wrong++ < 3)
                fprintf(stderr, "rank %d: count %zu %s %s%s call %d: element %zu is %lld, expected %lld\n", rank, count,
                        ccl_dtype_name(t), ccl_op_name(op), inplace ? " in place" : "", k, i, (long long)got,
                        (long long)want);
        }
        free(send[k]);
        if (!inplace)
            free(recv[k]);
    }
    return wrong;
}

/* One all-gather case: `iters` calls back to back, each rank's input its values + k;
 * in place, the input is this rank's slot of the output. 0 when every element is right. */
static long gather_case(ccl_comm_t *comm, size_t count, ccl_dtype_t t, int inplace, int iters)
{
    size_t es = ccl_dtype_size(t);
    long wrong = 0;
    void *send[3], *recv[3];
    for (int k = 0; k < iters; k++) {
        recv[k] = malloc(count * es * (size_t)size + 1);
        send[k] = inplace ? (char *)recv[k] + (size_t)rank * count * es : malloc(count * es + 1);
        for (size_t i = 0; i < count * (size_t)size; i++)
            put(recv[k], t, i, -999);
        for (size_t i = 0; i < count; i++)
            put(send[k], t, i, value(rank, i) + k);
    }
    for (int k = 0; k < iters; k++)
        if (ccl_all_gather(send[k], recv[k], count, t, comm, NULL) != CCL_OK)
            fail_now(comm, "ccl_all_gather");
    if (ccl_comm_synchronize(comm) != CCL_OK)
        fail_now(comm, "ccl_comm_synchronize");
    for (int k = 0; k < iters; k++) {
        for (int p = 0; p < size; p++)
            for (size_t i = 0; i < count; i++) {
                int64_t want = value(p, i) + k, got = get(recv[k], t, (size_t)p * count + i);
                if (got != want && wrong++ < 3)
                    fprintf(stderr, "rank %d: all-gather count %zu %s%s call %d: rank %d's element %zu is %lld, "
                            "expected %lld\n", rank, count, ccl_dtype_name(t), inplace ? " in place" : "", k, p, i,
                            (long long)got, (long long)want);
            }
        if (!inplace)
            free(send[k]);
        free(recv[k]);
    }
    return wrong;
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
    for (int k = 0; k < iters; k++)
        if (ccl_reduce_scatter(send[k], recv[k], count, t, op, comm, NULL) != CCL_OK)
            fail_now(comm, "ccl_reduce_scatter");
    if (ccl_comm_synchronize(comm) != CCL_OK)
        fail_now(comm, "ccl_comm_synchronize");
    for (int k = 0; k < iters; k++) {
        for (size_t i = 0; i < count; i++) {
            size_t g = (size_t)rank * count + i;
            int64_t want = expect(op, g) + (op == CCL_SUM ? (int64_t)k * size : k), got = get(recv[k], t, i);
            if (got != want && wrong++ < 3)
                fprintf(stderr, "rank %d: reduce-scatter count %zu %s %s%s call %d: element %zu is %lld, expected %lld\n",
                        rank, count, ccl_dtype_name(t), ccl_op_name(op), inplace ? " in place" : "", k, i,
                        (long long)got, (long long)want);
        }
        free(send[k]);
        if (!inplace)
            free(recv[k]);
    }
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
    for (int k = 0; k < iters; k++) {
        ccl_result_t r = op < 0 ? ccl_broadcast(send[k], recv[k], count, t, root, comm, NULL)
                                : ccl_reduce(send[k], recv[k], count, t, (ccl_op_t)op, root, comm, NULL);
        if (r != CCL_OK)
            fail_now(comm, op < 0 ? "ccl_broadcast" : "ccl_reduce");
    }
    if (ccl_comm_synchronize(comm) != CCL_OK)
        fail_now(comm, "ccl_comm_synchronize");
    for (int k = 0; k < iters; k++) {
        for (size_t i = 0; i < count && (op < 0 || rank == root); i++) {
            int64_t want = op < 0 ? value(root, i) + k : expect((ccl_op_t)op, i) + (op == CCL_SUM ? (int64_t)k * size : k);
            int64_t got = get(recv[k], t, i);
            if (got != want && wrong++ < 3)
                fprintf(stderr, "rank %d: %s root %d count %zu %s%s call %d: element %zu is %lld, expected %lld\n", rank,
                        op < 0 ? "broadcast" : "reduce", root, count, ccl_dtype_name(t), inplace ? " in place" : "", k,
                        i, (long long)got, (long long)want);
        }
        free(send[k]);
        if (!inplace)
            free(recv[k]);
    }
    return wrong;
}

/* The element i of the block that rank `from` sends rank `to` in call k: distinct for
 * every (from, to, i), so a block in the wrong slot shows. */
static int64_t a2a_value(int from, int to, size_t i, int k)
{
    return (int64_t)(from * 1000 + to * 37) + (int64_t)(i % 11) + k;
}

/* One all-to-all case: `iters` calls back to back, `count` elements to each peer; in
 * place, one buffer (the runtime copies the input aside: the program has no in-place
 * form). 0 when every element is right. */
static long alltoall_case(ccl_comm_t *comm, size_t count, ccl_dtype_t t, int inplace, int iters)
{
    size_t es = ccl_dtype_size(t), total = count * (size_t)size;
    long wrong = 0;
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
    for (int k = 0; k < iters; k++)
        if (ccl_all_to_all(send[k], recv[k], count, t, comm, NULL) != CCL_OK)
            fail_now(comm, "ccl_all_to_all");
    if (ccl_comm_synchronize(comm) != CCL_OK)
        fail_now(comm, "ccl_comm_synchronize");
    for (int k = 0; k < iters; k++) {
        for (int p = 0; p < size; p++)
            for (size_t i = 0; i < count; i++) {
                int64_t want = a2a_value(p, rank, i, k), got = get(recv[k], t, (size_t)p * count + i);
                if (got != want && wrong++ < 3)
                    fprintf(stderr, "rank %d: all-to-all count %zu %s%s call %d: rank %d's element %zu is %lld, "
                            "expected %lld\n", rank, count, ccl_dtype_name(t), inplace ? " in place" : "", k, p, i,
                            (long long)got, (long long)want);
            }
        if (!inplace)
            free(send[k]);
        free(recv[k]);
    }
    return wrong;
}

/* bw: on 2 ranks as 2 nodes of 1, ccl_all_gather of `bytes` per rank (each rank's input
 * crosses to the other through the proxy and MPI) against MPI_Sendrecv of the same bytes
 * on MPI_COMM_WORLD; the median of 9 timed runs of 20 calls. Rank 0 prints a table. */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void bandwidth(ccl_comm_t *comm)
{
    enum { RUNS = 9, CALLS = 20 };
    if (rank == 0)
        printf("| bytes | ccl_all_gather over the net channel (us) | GB/s | MPI_Sendrecv (us) | GB/s |\n|---:|---:|---:|---:|---:|\n");
    for (size_t bytes = 4096; bytes <= (64u << 20); bytes *= (getenv("BW_STEP") ? (size_t)atoi(getenv("BW_STEP")) : 4)) {
        char *send, *recv, *mrecv = malloc(bytes);
        if (ccl_mem_alloc(comm, (void **)&send, bytes) != CCL_OK || ccl_mem_alloc(comm, (void **)&recv, 2 * bytes) != CCL_OK)
            fail_now(comm, "ccl_mem_alloc");
        memset(send, rank, bytes);
        double t[2][RUNS];
        for (int run = -1; run < RUNS; run++) {     /* run -1: warm-up */
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int c = 0; c < CALLS; c++)
                if (ccl_all_gather(send, recv, bytes, CCL_U8, comm, NULL) != CCL_OK)
                    fail_now(comm, "ccl_all_gather");
            if (ccl_comm_synchronize(comm) != CCL_OK)
                fail_now(comm, "ccl_comm_synchronize");
            double t1 = MPI_Wtime();
            MPI_Barrier(MPI_COMM_WORLD);
            double t2 = MPI_Wtime();
            for (int c = 0; c < CALLS; c++)
                MPI_Sendrecv(send, (int)bytes, MPI_BYTE, 1 - rank, 7, mrecv, (int)bytes, MPI_BYTE, 1 - rank, 7,
                             MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            double t3 = MPI_Wtime();
            if (run >= 0) {
                t[0][run] = (t1 - t0) / CALLS;
                t[1][run] = (t3 - t2) / CALLS;
            }
        }
        qsort(t[0], RUNS, sizeof t[0][0], cmp_double);
        qsort(t[1], RUNS, sizeof t[1][0], cmp_double);
        if (rank == 0)
            printf("| %zu | %.1f | %.2f | %.1f | %.2f |\n", bytes, t[0][RUNS / 2] * 1e6, bytes / t[0][RUNS / 2] / 1e9,
                   t[1][RUNS / 2] * 1e6, bytes / t[1][RUNS / 2] / 1e9);
        ccl_mem_free(comm, send);
        ccl_mem_free(comm, recv);
        free(mrecv);
    }
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = argc > 1 ? argv[1] : "check";
    ccl_comm_t *comm;
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU};
    ccl_result_t r = ccl_comm_init_mpi_nodes(&comm, MPI_COMM_WORLD, 0, CCL_DEVICE_AUTO, &cfg);
    if (r != CCL_OK) {
        fprintf(stderr, "rank %d: init: %s\n", rank, ccl_comm_last_error(NULL));
        MPI_Finalize();
        return 2;
    }
    int status = 0;
    if (!strcmp(mode, "bw")) {
        if (size == 2)
            bandwidth(comm);
        else if (rank == 0)
            fprintf(stderr, "bw: run it on 2 ranks (CCL_RANKS_PER_NODE=1 mpirun -np 2)\n");
    } else if (!strcmp(mode, "skip") || !strcmp(mode, "kill")) {
        int skip = argc > 2 ? atoi(argv[2]) : size - 1;
        float x[64] = {0};
        if (rank == skip && !strcmp(mode, "kill"))
            raise(SIGKILL);
        if (rank != skip) {
            r = ccl_all_reduce(x, x, 64, CCL_F32, CCL_SUM, comm, NULL);
            if (r == CCL_OK)
                r = ccl_comm_synchronize(comm);
            printf("rank %d: %s: %s\n", rank, ccl_result_string(r), ccl_comm_last_error(comm));
            status = r == CCL_OK;
        }
    } else {
        /* ccl_barrier: its tree program for several nodes (runtime/src/api.c). */
        for (int k = 0; k < 3; k++)
            if (ccl_barrier(comm, NULL) != CCL_OK)
                fail_now(comm, "ccl_barrier");
        if (ccl_comm_synchronize(comm) != CCL_OK)
            fail_now(comm, "ccl_comm_synchronize after ccl_barrier");
        if (rank == 0)
            printf("barrier x3: ok\n");
        static const size_t counts[] = {1, 5, 1000, 1001, 65539, 1 << 20};
        static const struct { ccl_dtype_t t; ccl_op_t op; } kinds[] = {
            {CCL_F32, CCL_SUM}, {CCL_I32, CCL_MAX}, {CCL_F64, CCL_MIN}, {CCL_F32, CCL_AVG}};
        long total = 0;
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
            for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    long wrong = run_case(comm, counts[c], kinds[k].t, kinds[k].op, inplace, 3), all;
                    MPI_Allreduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
                    if (rank == 0)
                        printf("count %zu %s %s%s x3: %s\n", counts[c], ccl_dtype_name(kinds[k].t),
                               ccl_op_name(kinds[k].op), inplace ? " in place" : "", all ? "WRONG" : "ok");
                    total += all;
                }
        static const size_t gcounts[] = {1, 3, 1001, 262147};
        static const ccl_dtype_t gtypes[] = {CCL_F32, CCL_I32};
        for (size_t c = 0; c < sizeof gcounts / sizeof gcounts[0]; c++)
            for (size_t k = 0; k < sizeof gtypes / sizeof gtypes[0]; k++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    long wrong = gather_case(comm, gcounts[c], gtypes[k], inplace, 3), all;
                    MPI_Allreduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
                    if (rank == 0)
                        printf("all-gather count %zu %s%s x3: %s\n", gcounts[c], ccl_dtype_name(gtypes[k]),
                               inplace ? " in place" : "", all ? "WRONG" : "ok");
                    total += all;
                }
        static const size_t rcounts[] = {1, 5, 1001, 65539};
        static const struct { ccl_dtype_t t; ccl_op_t op; } rkinds[] = {{CCL_F32, CCL_SUM}, {CCL_I32, CCL_MAX}};
        for (size_t c = 0; c < sizeof rcounts / sizeof rcounts[0]; c++)
            for (size_t k = 0; k < sizeof rkinds / sizeof rkinds[0]; k++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    long wrong = scatter_case(comm, rcounts[c], rkinds[k].t, rkinds[k].op, inplace, 3), all;
                    MPI_Allreduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
                    if (rank == 0)
                        printf("reduce-scatter count %zu %s %s%s x3 (%s): %s\n", rcounts[c], ccl_dtype_name(rkinds[k].t),
                               ccl_op_name(rkinds[k].op), inplace ? " in place" : "", chosen(comm), all ? "WRONG" : "ok");
                    total += all;
                }
        static const size_t acounts[] = {1, 3, 1001, 65539};
        for (size_t c = 0; c < sizeof acounts / sizeof acounts[0]; c++)
            for (size_t k = 0; k < sizeof gtypes / sizeof gtypes[0]; k++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    long wrong = alltoall_case(comm, acounts[c], gtypes[k], inplace, 3), all;
                    MPI_Allreduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
                    if (rank == 0)
                        printf("all-to-all count %zu %s%s x3: %s\n", acounts[c], ccl_dtype_name(gtypes[k]),
                               inplace ? " in place" : "", all ? "WRONG" : "ok");
                    total += all;
                }
        /* Every root: broadcast (op -1) of f32 and i32, reduce of f32 sum and i32 max. */
        static const size_t bcounts[] = {1, 1001, 262147};
        static const struct { ccl_dtype_t t; int op; } bkinds[] = {
            {CCL_F32, -1}, {CCL_I32, -1}, {CCL_F32, CCL_SUM}, {CCL_I32, CCL_MAX}};
        for (int root = 0; root < size; root++)
            for (size_t c = 0; c < sizeof bcounts / sizeof bcounts[0]; c++)
                for (size_t k = 0; k < sizeof bkinds / sizeof bkinds[0]; k++)
                    for (int inplace = 0; inplace < 2; inplace++) {
                        long wrong = rooted_case(comm, bcounts[c], bkinds[k].t, bkinds[k].op, root, inplace, 3), all;
                        MPI_Allreduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
                        if (rank == 0)
                            printf("%s root %d count %zu %s%s%s%s x3 (%s): %s\n", bkinds[k].op < 0 ? "broadcast" : "reduce",
                                   root, bcounts[c], ccl_dtype_name(bkinds[k].t), bkinds[k].op < 0 ? "" : " ",
                                   bkinds[k].op < 0 ? "" : ccl_op_name((ccl_op_t)bkinds[k].op),
                                   inplace ? " in place" : "", chosen(comm), all ? "WRONG" : "ok");
                        total += all;
                    }
        if (rank == 0)
            printf("wrong elements: %ld\n", total);
        status = total != 0;
    }
    ccl_comm_destroy(comm);
    MPI_Finalize();
    return status;
}
