/* collectives.c: ccl_barrier, ccl_all_reduce, ccl_all_gather, ccl_reduce_scatter, ccl_all_to_all,
 * ccl_broadcast and ccl_reduce on a communicator of several nodes, under mpirun
 * (tests/multinode/run.sh; docs/multinode.md).
 *
 *   CCL_RANKS_PER_NODE=2 mpirun -np 4 collectives [check|skip R|kill R|killmid R]
 *
 * The communicator comes from MPI_COMM_WORLD by ccl_comm_init_mpi_nodes, so ranks of
 * different nodes share no memory and their traffic goes through Open MPI (the
 * proxy's MPI_Isend/MPI_Irecv). check: the cases of cases.h on the counts below, every
 * dtype and op there, out of place and in place, three calls back to back each, every
 * element compared with what this rank computes itself (all-reduce; avg's division goes
 * through the all-rank barrier, whose arrivals cross nodes as messages), then the
 * all-gathers, reduce-scatters and all-to-alls likewise, then broadcasts and reduces from
 * every root (on several nodes also 8 MB ones, which run hier_chain, from roots 0,
 * size / 2 and size - 1); prints one line per case on rank 0 (with the program that ran, for the
 * reduce-scatters, broadcasts and reduces) and exits 1 on any wrong element. skip R:
 * rank R makes no call while the others all-reduce (CCL_TIMEOUT_MS bounds their wait);
 * every rank prints what its call returned and its message. kill R: rank R is killed
 * (SIGKILL) instead, and the others all-reduce until they fail (cases.h, run_kill_case);
 * killmid R: R is killed 300 ms into those all-reduces, in the middle of one. In both the
 * others end without MPI_Finalize, which would wait for the dead rank (under mpirun
 * --enable-recovery, which lets them report). bw: the net channel's rate against MPI's
 * own (bandwidth(), below); lat: point-to-point's latency against MPI's own (latency(),
 * below); vbw [MAX]: ccl_all_gather_v and ccl_all_to_all_v against MPI_Allgatherv and
 * MPI_Alltoallv, equal and uneven counts, 1 KiB to MAX (16 MiB) per rank, every element
 * of both checked once per size (vbandwidth(), below; exits 1 on a wrong one). p2p:
 * cases.h's point-to-point cases (a ring and pairwise exchanges in groups, crossing
 * nodes) on counts 1, 1001 and 2^20, f32 and i32.
 * p2p-mismatch [send|late] [S R]: rank 0 sends S i32 (10) to rank 2 (another node), which
 * receives R (11), with late 300 ms after the send (a small message waits in its proxy);
 * both print what they got (rank 0 also its next call's, an all-reduce), and rank 2 whether
 * its buffer stayed untouched. p2p-unmatched [send S|recv|kill]: rank 0 sends S i32 to
 * rank 2, which never receives (with recv: rank 1 receives from rank 3, which never
 * sends; with kill: rank 3 is killed); the waiting rank prints what it got
 * (CCL_TIMEOUT_MS bounds its wait). p2p-lone: rank 0's small sends to rank 2 are done
 * before rank 2 posts its recvs. p2p-killsend: rank 3 is killed while rank 0 sends it
 * small messages; rank 0 prints what it got. v: cases.h's ccl_all_gather_v and
 * ccl_all_to_all_v cases (uneven counts, a zero and a large segment, gaps checked; as
 * point-to-point across nodes). v-mismatch: an allgatherv whose ranks 1 and 2 expect 11
 * elements from rank 0, which sends 10; every rank prints what it got. split: cases.h's
 * splits of the communicator (by node, by local index, with a rank of no color, an uneven
 * layout refused), the collectives on every child checked, children destroyed before the
 * parent. chain [NAME]: the hier_chain programs (algorithms/broadcast/hier_chain.ccl and
 * algorithms/reduce/hier_chain.ccl, loaded from the working folder; with NAME, NAME.ccl's:
 * hier_tree) registered for every
 * size and root, then cases.h's broadcasts and reduces from every root on counts far below
 * their `sizes` hint (1, 5, 1001, 65539: slices of a few elements, and empty ones), three
 * calls back to back each, every element checked. */
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ccl.h"
#include "ccl_mpi.h"

#include "cases.h" /* after ccl_mpi.h: its globals rank and size would shadow that header's names */

static void fail_now(ccl_comm_t *comm, const char *what)
{
    fprintf(stderr, "rank %d: %s: %s\n", rank, what, ccl_comm_last_error(comm));
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static long sum_over_ranks(long wrong)
{
    long all;
    MPI_Allreduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    return all;
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

/* lat: on 2 ranks as 2 nodes of 1, point-to-point across the nodes against MPI's own, on
 * plain host buffers: a ping-pong (rank 0 ccl_send then ccl_recv, rank 1 the mirror: one
 * round trip per iteration) and an exchange (ccl_send and ccl_recv in one group on both
 * ranks), against MPI_Send/MPI_Recv and MPI_Sendrecv of the same bytes on MPI_COMM_WORLD;
 * the median of 9 timed runs of 200 iterations. Rank 0 prints a table (microseconds per
 * iteration). */
static void latency(ccl_comm_t *comm)
{
    enum { RUNS = 9, ITERS = 200 };
    static const size_t sizes[] = {8, 1024, 8192, 65536, 1048576};
    int peer = 1 - rank;
    if (rank == 0)
        printf("| bytes | ccl ping-pong (us) | MPI ping-pong (us) | ccl exchange in a group (us) | MPI_Sendrecv (us) |\n"
               "|---:|---:|---:|---:|---:|\n");
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t bytes = sizes[s];
        char *send = malloc(bytes), *recv = malloc(bytes);
        memset(send, rank + 1, bytes);
        double t[4][RUNS];
        for (int run = -1; run < RUNS; run++) {     /* run -1: warm-up */
            double t0[4];
            for (int way = 0; way < 4; way++) {
                MPI_Barrier(MPI_COMM_WORLD);
                t0[way] = MPI_Wtime();
                for (int i = 0; i < ITERS; i++) {
                    ccl_result_t r = CCL_OK;
                    if (way == 0) {
                        for (int k = 0; k < 2 && r == CCL_OK; k++)
                            r = (k == rank) ? ccl_send(send, bytes, CCL_U8, peer, comm, NULL)
                                            : ccl_recv(recv, bytes, CCL_U8, peer, comm, NULL);
                    } else if (way == 1) {
                        if (rank == 0) {
                            MPI_Send(send, (int)bytes, MPI_BYTE, peer, 7, MPI_COMM_WORLD);
                            MPI_Recv(recv, (int)bytes, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                        } else {
                            MPI_Recv(recv, (int)bytes, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                            MPI_Send(send, (int)bytes, MPI_BYTE, peer, 7, MPI_COMM_WORLD);
                        }
                    } else if (way == 2) {
                        ccl_group_start();
                        r = ccl_send(send, bytes, CCL_U8, peer, comm, NULL);
                        if (r == CCL_OK)
                            r = ccl_recv(recv, bytes, CCL_U8, peer, comm, NULL);
                        ccl_result_t e = ccl_group_end();
                        r = r != CCL_OK ? r : e;
                    } else {
                        MPI_Sendrecv(send, (int)bytes, MPI_BYTE, peer, 7, recv, (int)bytes, MPI_BYTE, peer, 7,
                                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    }
                    if (r != CCL_OK)
                        fail_now(comm, "ccl_send/ccl_recv");
                }
                if ((way == 0 || way == 2) && ccl_comm_synchronize(comm) != CCL_OK)
                    fail_now(comm, "ccl_comm_synchronize");
                if (run >= 0)
                    t[way][run] = (MPI_Wtime() - t0[way]) / ITERS;
            }
        }
        for (int way = 0; way < 4; way++)
            qsort(t[way], RUNS, sizeof t[way][0], cmp_double);
        if (rank == 0)
            printf("| %zu | %.1f | %.1f | %.1f | %.1f |\n", bytes, t[0][RUNS / 2] * 1e6, t[1][RUNS / 2] * 1e6,
                   t[2][RUNS / 2] * 1e6, t[3][RUNS / 2] * 1e6);
        free(send);
        free(recv);
    }
}

/* vbw: ccl_all_gather_v and ccl_all_to_all_v against MPI_Allgatherv and MPI_Alltoallv of
 * the same counts and displacements on the same plain host buffers (docs/multinode.md,
 * "The variable-size collectives against Open MPI's own"). Across nodes the ccl calls are
 * point-to-point messages through the proxy (runtime/src/vcoll.c), so this measures that
 * path against MPI's tuned collectives. Each rank receives `bytes` (1 KiB up to max_bytes
 * by 4x) of i32, in two patterns of counts: equal (bytes / N from every rank) and
 * proportional (rank q's segments scaled by q + 1: its allgatherv input and every block
 * of its alltoallv sendbuf, so rank q sends (q + 1) times rank 0's), rounded down to
 * whole elements; displacements packed, passed explicitly to both libraries. Before the
 * timing, one call of each library into a recvbuf that holds the complement of every
 * expected element, every element checked (v_wrong); then the median of 9 timed runs of
 * 20 calls, as bw. Rank 0 prints a table (us per call); returns the wrong elements over
 * all ranks. */
static int32_t vbw_value(int from, int to, size_t i)
{
    /* A key per sender and receiver, so that a segment from the wrong rank, or a block of
     * alltoallv meant for another rank, is caught, and the index, so that a shifted one is. */
    return (int32_t)(((uint32_t)(from + 1) * 0x9E3779B1u) ^ ((uint32_t)(to + 1) * 0x85EBCA77u) ^ (uint32_t)i);
}

/* The elements rank q sends each receiver, for `elems` received per rank: equal, or
 * proportional to q + 1 (the weights 1..N sum to N (N + 1) / 2). */
static size_t vbw_segment(size_t elems, int q, int proportional)
{
    return proportional ? elems * 2 * (size_t)(q + 1) / ((size_t)size * (size_t)(size + 1)) : elems / (size_t)size;
}

/* Counts the elements of recv (segments seg[q] from rank q, packed) that are not what
 * their sender put there, and prints the first; a2a: each block carries its receiver
 * too (alltoallv), else the sender's input is everyone's (allgatherv). */
static long v_wrong(const int32_t *recv, const size_t *seg, int a2a, const char *who, size_t bytes,
                    const char *pattern)
{
    long wrong = 0;
    size_t at = 0;
    for (int q = 0; q < size; q++)
        for (size_t i = 0; i < seg[q]; i++, at++) {
            int32_t want = vbw_value(q, a2a ? rank : q, i);
            if (recv[at] != want && wrong++ == 0)
                fprintf(stderr, "vbw: rank %d: %s, %zu bytes per rank, %s counts: element %zu of segment %d (from rank "
                        "%d, its element %zu) is %d, expected %d\n", rank, who, bytes, pattern, at, q, q, i,
                        (int)recv[at], (int)want);
        }
    if (wrong > 1)
        fprintf(stderr, "vbw: rank %d: %s, %zu bytes per rank, %s counts: %ld wrong elements in all\n", rank, who, bytes,
                pattern, wrong);
    return wrong;
}

/* Fills recv with the complement of what every element should become, so that one left
 * unwritten is wrong too. */
static void v_poison(int32_t *recv, const size_t *seg, int a2a)
{
    size_t at = 0;
    for (int q = 0; q < size; q++)
        for (size_t i = 0; i < seg[q]; i++)
            recv[at++] = ~vbw_value(q, a2a ? rank : q, i);
}

static long vbandwidth(ccl_comm_t *comm, size_t max_bytes)
{
    enum { RUNS = 9, CALLS = 20 };
    static const char *const names[4] = {"ccl_all_gather_v", "MPI_Allgatherv", "ccl_all_to_all_v", "MPI_Alltoallv"};
    long total = 0;
    size_t *seg = malloc(sizeof *seg * (size_t)size), *rdispl = malloc(sizeof *rdispl * (size_t)size);
    size_t *scount = malloc(sizeof *scount * (size_t)size), *sdispl = malloc(sizeof *sdispl * (size_t)size);
    int *mseg = malloc(sizeof *mseg * (size_t)size), *mrdispl = malloc(sizeof *mrdispl * (size_t)size);
    int *mscount = malloc(sizeof *mscount * (size_t)size), *msdispl = malloc(sizeof *msdispl * (size_t)size);
    if (rank == 0)
        printf("| bytes per rank | counts | ccl_all_gather_v (us) | MPI_Allgatherv (us) | ccl / MPI | ccl_all_to_all_v (us) "
               "| MPI_Alltoallv (us) | ccl / MPI |\n|---:|---|---:|---:|---:|---:|---:|---:|\n");
    for (size_t bytes = 1024; bytes <= max_bytes; bytes *= 4)
        for (int proportional = 0; proportional < 2; proportional++) {
            const char *pattern = proportional ? "proportional" : "equal";
            size_t elems = bytes / sizeof(int32_t), in = 0, out = 0;
            /* One table of counts and displacements, in both libraries' types: alltoallv
             * sends this rank's segment to every rank, and receives seg[q] from rank q,
             * which is also allgatherv's recvcounts. */
            for (int q = 0; q < size; q++)
                seg[q] = vbw_segment(elems, q, proportional);
            for (int q = 0; q < size; q++) {
                scount[q] = seg[rank];
                sdispl[q] = in;
                rdispl[q] = out;
                in += scount[q];
                out += seg[q];
                mseg[q] = (int)seg[q], mrdispl[q] = (int)rdispl[q];
                mscount[q] = (int)scount[q], msdispl[q] = (int)sdispl[q];
            }
            int32_t *send = malloc(in * sizeof *send), *recv = malloc(out * sizeof *recv);
            for (int p = 0; p < size; p++)
                for (size_t i = 0; i < scount[p]; i++)
                    send[sdispl[p] + i] = vbw_value(rank, p, i);
            /* allgatherv's input: one segment, the same for every receiver, keyed (rank, rank). */
            int32_t *gsend = malloc((seg[rank] ? seg[rank] : 1) * sizeof *gsend);
            for (size_t i = 0; i < seg[rank]; i++)
                gsend[i] = vbw_value(rank, rank, i);
            double t[4][RUNS];
            for (int run = -2; run < RUNS; run++) {  /* run -2: checked; -1: warm-up */
                int calls = run == -2 ? 1 : CALLS;
                for (int way = 0; way < 4; way++) {
                    int a2a = way >= 2;
                    if (run == -2)
                        v_poison(recv, seg, a2a);
                    MPI_Barrier(MPI_COMM_WORLD);
                    double t0 = MPI_Wtime();
                    for (int c = 0; c < calls; c++) {
                        ccl_result_t r = CCL_OK;
                        if (way == 0)
                            r = ccl_all_gather_v(gsend, seg[rank], recv, seg, rdispl, CCL_I32, comm, NULL);
                        else if (way == 1)
                            MPI_Allgatherv(gsend, mseg[rank], MPI_INT, recv, mseg, mrdispl, MPI_INT, MPI_COMM_WORLD);
                        else if (way == 2)
                            r = ccl_all_to_all_v(send, scount, sdispl, recv, seg, rdispl, CCL_I32, comm, NULL);
                        else
                            MPI_Alltoallv(send, mscount, msdispl, MPI_INT, recv, mseg, mrdispl, MPI_INT, MPI_COMM_WORLD);
                        if (r != CCL_OK)
                            fail_now(comm, names[way]);
                    }
                    if (way % 2 == 0 && ccl_comm_synchronize(comm) != CCL_OK)
                        fail_now(comm, "ccl_comm_synchronize");
                    if (run >= 0)
                        t[way][run] = (MPI_Wtime() - t0) / calls;
                    if (run == -2)
                        total += sum_over_ranks(v_wrong(recv, seg, a2a, names[way], bytes, pattern));
                }
            }
            for (int way = 0; way < 4; way++)
                qsort(t[way], RUNS, sizeof t[way][0], cmp_double);
            double m[4];
            for (int way = 0; way < 4; way++)
                m[way] = t[way][RUNS / 2] * 1e6;
            if (rank == 0)
                printf("| %zu | %s | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f |\n", bytes, pattern, m[0], m[1],
                       m[0] / m[1], m[2], m[3], m[2] / m[3]);
            fflush(stdout);
            free(send), free(recv), free(gsend);
        }
    free(seg), free(rdispl), free(scount), free(sdispl);
    free(mseg), free(mrdispl), free(mscount), free(msdispl);
    return total;
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
    } else if (!strcmp(mode, "lat")) {
        if (size == 2)
            latency(comm);
        else if (rank == 0)
            fprintf(stderr, "lat: run it on 2 ranks (CCL_RANKS_PER_NODE=1 mpirun -np 2)\n");
    } else if (!strcmp(mode, "vbw")) {
        /* argv[2]: the largest size, bytes received per rank (16 MiB unless given). */
        long wrong = vbandwidth(comm, argc > 2 ? (size_t)atol(argv[2]) : (size_t)16 << 20);
        if (rank == 0)
            printf("vbw wrong elements: %ld\n", wrong);
        status = wrong != 0;
    } else if (!strcmp(mode, "split")) {
        const char *rpn = getenv("CCL_RANKS_PER_NODE");
        status = run_split_cases(comm, rpn ? atoi(rpn) : size, sum_over_ranks) != 0;
    } else if (!strcmp(mode, "p2p")) {
        static const size_t counts[] = {1, 1001, 1 << 20};
        status = run_p2p_cases(comm, counts, 3, sum_over_ranks) != 0;
    } else if (!strcmp(mode, "chain")) {
        /* Every root's hier_chain (or argv[2]'s pair, hier_tree), registered for all sizes
         * (ccl_comm_use_algorithm), so the small counts run it too; rank 0 prints a line
         * per case naming it. */
        const char *name = argc > 2 ? argv[2] : "hier_chain";
        char files[2][128];
        snprintf(files[0], sizeof files[0], "algorithms/broadcast/%s.ccl", name);
        snprintf(files[1], sizeof files[1], "algorithms/reduce/%s.ccl", name);
        for (int root = 0; root < size; root++)
            for (int f = 0; f < 2; f++) {
                ccl_algorithm_t *alg;
                if (ccl_algorithm_load(comm, files[f], root, &alg) != CCL_OK ||
                    ccl_comm_use_algorithm(comm, alg, 0, 0) != CCL_OK)
                    fail_now(comm, files[f]);
            }
        static const size_t counts[] = {1, 5, 1001, 65539};
        static const Kind plain[] = {{CCL_F32, 0}, {CCL_I32, 0}}, ops[] = {{CCL_F32, CCL_SUM}, {CCL_I32, CCL_MAX}};
        long total = run_coll(comm, C_BROADCAST, counts, 4, plain, 2, sum_over_ranks, 0) +
                     run_coll(comm, C_ROOT_REDUCE, counts, 4, ops, 2, sum_over_ranks, 0);
        if (rank == 0)
            printf("chain wrong elements: %ld\n", total);
        status = total != 0;
    } else if (!strcmp(mode, "v")) {
        status = run_v_cases(comm, sum_over_ranks) != 0;
    } else if (!strcmp(mode, "v-mismatch")) {
        /* allgatherv of 10 elements from every rank, but ranks 1 and 2 expect 11 from
         * rank 0: each fails naming both ranks and both counts, its segment untouched. */
        size_t counts[16], n = 0;
        int32_t send[10], recv[16 * 11 + 1];
        for (int p = 0; p < size && p < 16; p++)
            n += counts[p] = p == 0 && (rank == 1 || rank == 2) ? 11 : 10;
        for (int i = 0; i < 10; i++)
            send[i] = rank * 100 + i;
        for (size_t i = 0; i < n; i++)
            recv[i] = -1;
        r = size <= 16 ? ccl_all_gather_v(send, 10, recv, counts, NULL, CCL_I32, comm, NULL) : CCL_ERR_INVALID_USAGE;
        if (r == CCL_OK)
            r = ccl_comm_synchronize(comm);
        int untouched = 1;
        for (size_t i = 0; i < counts[0]; i++)
            untouched &= recv[i] == -1;
        printf("rank %d: %s: %s%s\n", rank, ccl_result_string(r), ccl_comm_last_error(comm),
               (rank == 1 || rank == 2) && untouched ? " [segment untouched]" : "");
        fflush(stdout);
        MPI_Barrier(MPI_COMM_WORLD);
    } else if (!strcmp(mode, "p2p-mismatch") || !strcmp(mode, "p2p-unmatched")) {
        /* argv[2]: the variant; argv[3] and argv[4]: the send's and the recv's counts (i32;
         * 10 and 11 unless given: over 2048 the message is large, announced and cleared
         * before its data). A small send is done once it has left, so rank 0 learns of
         * rank 2's failure at its next call: the synchronize after the send where rank 2's
         * stop has come by then, else an all-reduce, whose result it prints too. */
        const char *variant = argc > 2 ? argv[2] : "send";
        size_t scount = argc > 3 ? (size_t)atol(argv[3]) : 10, rcount = argc > 4 ? (size_t)atol(argv[4]) : 11;
        size_t cap = (scount > rcount ? scount : rcount) + 2;
        int32_t *buf = malloc(cap * sizeof *buf);
        for (size_t i = 0; i < cap; i++)
            buf[i] = rank == 0 ? (int32_t)i : -1;
        r = CCL_OK;
        ccl_result_t next = CCL_OK;
        int kill_peer = !strcmp(variant, "kill"), recv_side = kill_peer || !strcmp(variant, "recv");
        if (kill_peer && rank == 3)
            raise(SIGKILL);
        if (rank == 0 && !recv_side) {
            r = ccl_send(buf, scount, CCL_I32, 2, comm, NULL);
            if (r == CCL_OK)
                r = ccl_comm_synchronize(comm);
            if (r == CCL_OK && !strcmp(mode, "p2p-mismatch")) {
                next = ccl_all_reduce(buf, buf, 1, CCL_I32, CCL_SUM, comm, NULL);
                if (next == CCL_OK)
                    next = ccl_comm_synchronize(comm);
            }
        } else if (rank == 2 && !strcmp(mode, "p2p-mismatch")) {
            if (!strcmp(variant, "late"))      /* the small message waits in rank 2's proxy first */
                nanosleep(&(struct timespec){0, 300 * 1000000L}, NULL);
            r = ccl_recv(buf, rcount, CCL_I32, 0, comm, NULL);
        }
        else if (rank == 1 && recv_side)
            r = ccl_recv(buf, 10, CCL_I32, 3, comm, NULL);
        if (r == CCL_OK && rank != 0)
            r = ccl_comm_synchronize(comm);
        int untouched = 1;
        for (size_t i = 0; i < cap; i++)
            untouched &= rank != 2 || buf[i] == -1;
        if (recv_side ? rank == 1 : rank == 0 || rank == 2)
            printf("rank %d: %s: %s%s\n", rank, ccl_result_string(r), r == CCL_OK ? "" : ccl_comm_last_error(comm),
                   rank == 2 && untouched ? " [buffer untouched]" : "");
        if (rank == 0 && r == CCL_OK && next != CCL_OK)
            printf("rank 0 then: %s: %s\n", ccl_result_string(next), ccl_comm_last_error(comm));
        fflush(stdout);
        free(buf);
        MPI_Barrier(MPI_COMM_WORLD);
    } else if (!strcmp(mode, "p2p-lone")) {
        /* Rank 0 sends rank 2 (another node) as many small messages as it has credits, in
         * one group, and must be done with them before rank 2 posts any recv: rank 2 waits
         * for rank 0's word (an MPI message) first, so a send that waited for its recv
         * would time out. Then rank 2 receives them, every element checked. */
        enum { LONE = 8, LONE_COUNT = 10 };
        int32_t buf[LONE][LONE_COUNT];
        long wrong = 0;
        int go = 0;
        for (int m = 0; m < LONE; m++)
            for (int i = 0; i < LONE_COUNT; i++)
                buf[m][i] = rank == 0 ? m * 100 + i : -1;
        r = CCL_OK;
        if (rank == 2)
            MPI_Recv(&go, 1, MPI_INT, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (rank == 0 || rank == 2) {
            ccl_group_start();
            for (int m = 0; m < LONE; m++)
                rank == 0 ? ccl_send(buf[m], LONE_COUNT, CCL_I32, 2, comm, NULL)
                          : ccl_recv(buf[m], LONE_COUNT, CCL_I32, 0, comm, NULL);
            r = ccl_group_end();
            if (r == CCL_OK)
                r = ccl_comm_synchronize(comm);
        }
        if (rank == 0) {
            go = r == CCL_OK;
            MPI_Send(&go, 1, MPI_INT, 2, 9, MPI_COMM_WORLD);
        }
        for (int m = 0; rank == 2 && m < LONE; m++)
            for (int i = 0; i < LONE_COUNT; i++)
                wrong += buf[m][i] != m * 100 + i;
        if (rank == 0 || rank == 2)
            printf("rank %d: %s%s%s; wrong elements: %ld\n", rank, ccl_result_string(r), r == CCL_OK ? "" : ": ",
                   r == CCL_OK ? "" : ccl_comm_last_error(comm), wrong);
        status = r != CCL_OK || wrong;
    } else if (!strcmp(mode, "p2p-killsend")) {
        /* Rank 3 (node 1) is killed at once; rank 0 sends it twelve small messages (they
         * leave before any recv, the first eight done at once, the ninth waiting for a
         * credit that never comes), ranks 1 and 2 all-reduce (rank 2, its node-mate, finds
         * it dead). Rank 0 prints what its sends got, then every survivor ends. */
        int32_t buf[10] = {0};
        if (rank == 3)
            raise(SIGKILL);
        if (rank == 0) {
            ccl_group_start();
            for (int m = 0; m < 12; m++)
                ccl_send(buf, 10, CCL_I32, 3, comm, NULL);
            r = ccl_group_end();
        } else {
            r = ccl_all_reduce(buf, buf, 10, CCL_I32, CCL_SUM, comm, NULL);
        }
        if (r == CCL_OK)
            r = ccl_comm_synchronize(comm);
        if (rank == 0)
            printf("rank %d: %s: %s\n", rank, ccl_result_string(r), ccl_comm_last_error(comm));
        fflush(stdout);
        ccl_comm_destroy(comm);
        _exit(r == CCL_OK);
    } else if (!strcmp(mode, "kill") || !strcmp(mode, "killmid")) {
        status = run_kill_case(comm, argc > 2 ? atoi(argv[2]) : size - 1, !strcmp(mode, "kill") ? 0 : 300);
        ccl_comm_destroy(comm);
        _exit(status);
    } else if (!strcmp(mode, "skip")) {
        int skip = argc > 2 ? atoi(argv[2]) : size - 1;
        float x[64] = {0};
        if (rank != skip) {
            r = ccl_all_reduce(x, x, 64, CCL_F32, CCL_SUM, comm, NULL);
            if (r == CCL_OK)
                r = ccl_comm_synchronize(comm);
            printf("rank %d: %s: %s\n", rank, ccl_result_string(r), ccl_comm_last_error(comm));
            status = r == CCL_OK;
        }
    } else {
        static const size_t counts[] = {1, 5, 1000, 1001, 65539, 1 << 20}, gcounts[] = {1, 3, 1001, 262147},
                            rcounts[] = {1, 5, 1001, 65539}, acounts[] = {1, 3, 1001, 65539},
                            bcounts[] = {1, 1001, 16383, 262147}, /* f32, i32: hier below 64 KB, hier_split from there */
                            big[] = {2097155};                    /* hier_chain from 8 MB, from three roots */
        /* The 8 MB cases on several nodes only (CCL_RANKS_PER_NODE below the size): they
         * are there for hier_chain, and cost seconds a shape. */
        const char *rpn = getenv("CCL_RANKS_PER_NODE");
        int nodes = rpn && atoi(rpn) > 0 ? size / atoi(rpn) : 1;
        const CaseCounts cc = {counts, gcounts, rcounts, acounts, bcounts, 6, 4, 4, 4, 4, big, nodes > 1};
        long total = run_cases(comm, &cc, sum_over_ranks);
        status = total != 0;
    }
    ccl_comm_destroy(comm);
    MPI_Finalize();
    return status;
}
