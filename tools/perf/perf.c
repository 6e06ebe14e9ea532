/* ccl-perf: measures CCL collectives like nccl-tests, with NCCL side by side in one run.
 *
 *   ccl-perf -c allreduce -b 1K -e 1G -f 2 -d bf16 --graph --check --compare nccl
 *
 * What it takes: a collective (or an --algo file, whose header names it), a sweep of
 * message sizes in nccl-tests' sense (the full buffer: allgather's receive size,
 * reduce_scatter's and alltoall's send size), a dtype and a reduction op. What it gives:
 * per size, out-of-place and in-place, the time per op, algbw and busbw with nccl-tests'
 * formulas, the number of wrong elements under --check, and with --compare nccl the same
 * numbers for NCCL and the ratio of our time to NCCL's; as a table on stdout and
 * optionally as CSV, JSON and a hand-written SVG plot.
 *
 * Besides the six collectives, three calls of the variable-size and point-to-point
 * API: alltoallv (ccl_all_to_all_v on an uneven count matrix; NCCL, which has none, as
 * grouped ncclSend/ncclRecv of the same segments), allgatherv (ccl_all_gather_v on an
 * uneven count vector; NCCL as grouped ncclBroadcast, one per rank, which is what
 * PyTorch's ProcessGroupNCCL does for an all-gather of unequal sizes) and sendrecv (a
 * ring of ccl_send/ccl_recv in one group, as nccl-tests' sendrecv_perf). The v counts
 * are --v-counts': proportional shares (data.c, perf_v_counts) or a Zipf-skewed expert
 * load (perf_v_counts_zipf). All three are out-of-place only. A backend that refuses
 * one (CCL_ERR_UNSUPPORTED, at the call) is not a failure of the run: the size's row
 * reads "refused", NCCL is still timed, the footer quotes the library, and the exit
 * status is 1.
 *
 * Buffers (--buffers). By default ("symmetric") the send and receive buffers come from
 * ccl_mem_alloc, CCL's symmetric heap, which its algorithms use in place. Users pass
 * ordinary framework tensors instead, so "plain" times that path: the buffers are
 * ordinary memory (cuMemAlloc on a GPU, malloc on the CPU backend), outside the heap,
 * and CCL stages them through its heap wherever its algorithm needs symmetric memory.
 * The table's header, the CSV and the JSON say which buffers a run used.
 *
 * NCCL is timed two ways (--nccl-mode best, the default): "plain", on the very buffers
 * ours use (CCL's heap, or ordinary memory under --buffers plain: NCCL sees either as
 * ordinary device memory), and "sym", on buffers from ncclMemAlloc registered with
 * ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC), where NCCL 2.27+ runs its
 * symmetric kernels (built for small and medium messages). The ratio is taken against
 * the faster of the two (perf_nccl_faster), so the bar is the strongest NCCL. A library
 * without windows is timed plain only, and the header says why.
 *
 * Two ways to run, one code path per rank (worker()):
 *  - one process per rank under mpirun (or any launcher the runtime's environment
 *    bootstrap knows): ccl_comm_init_rank over that bootstrap, no MPI link;
 *  - one process driving every rank (--ranks N on the CPU backend, every visible GPU on
 *    the GPU backend): ccl_comm_init_all and one thread per rank.
 * Ranks agree on everything (timings, wrong counts, failures) through a ccl_bootstrap_t,
 * so both ways print the same table.
 *
 * Timing. The GPU backend times with CUDA events (driver API, loaded with dlopen so the
 * tool links nothing but libccl): eagerly, one event pair per op; or, with --graph, a
 * CUDA graph of many ops replayed several times, time per op = replay time / ops. The CPU
 * backend times with the host's monotonic clock around each op and
 * ccl_comm_synchronize. Every sample is the maximum over ranks; the reported time is the
 * median of the samples. The header says which method ran.
 *
 * Exactness. Input element i of rank r is a small integer that depends on r and i mod
 * PERF_PERIOD, chosen per dtype and op so that every partial result of the reduction is
 * an integer the dtype represents exactly (bf16 and fp8 included). The expected output is
 * therefore one exact bit pattern, whatever the reduction order, and --check compares
 * bits. Outputs are poisoned (0xff bytes: NaN or -1, never an expected value) before
 * every checked op, so an op that writes nothing is caught.
 *
 * Exit status: 0; 1 when a run failed, the library refused ours at some size, or --check
 * found wrong elements; 2 for bad arguments (one line on stderr saying which and why).
 */
#include "gpu/layout.h"
#include "perf.h"

static void usage(FILE *f)
{
    fputs("usage: ccl-perf -c COLLECTIVE [options]\n"
          "       mpirun -np N ccl-perf -c COLLECTIVE [options]   (one process per rank)\n"
          "\n"
          "  -c, --collective C   allreduce, allgather, reduce_scatter, alltoall, broadcast, reduce,\n"
          "                       alltoallv, allgatherv or sendrecv (below)\n"
          "  -b, --minbytes S     smallest size (bytes; K, M, G suffixes are powers of 1024) [1K]\n"
          "  -e, --maxbytes S     largest size [1M]\n"
          "  -f, --stepfactor F   multiply the size by F (an integer >= 2) [2]\n"
          "  -d, --dtype T        f32 f64 f16 bf16 i32 i64 u8 fp8_e4m3 fp8_e5m2 i8 u32 u64 [f32]\n"
          "  -o, --op OP          sum prod min max avg (reducing collectives) [sum]\n"
          "  -r, --root R         root of broadcast and reduce [0]\n"
          "      --algo FILE      run this algorithm (proved first) instead of the library's choice\n"
          "      --hint-range     only the sizes inside the --algo file's `sizes` hint\n"
          "      --graph          time a CUDA graph of many ops (GPU backend only; see below)\n"
          "      --check          check every timed op against the exact expected result\n"
          "      --compare nccl   time NCCL in the same run (GPU backend; CCL_NCCL_LIB=path)\n"
          "      --nccl-mode M    plain (NCCL on our buffers), sym (on its symmetric windows, 2.27+)\n"
          "                       or best (both; ratios against the faster) [best]\n"
          "      --v-counts K     alltoallv's and allgatherv's counts: proportional or zipf (below)\n"
          "                       [proportional]\n"
          "      --buffers B      symmetric (ccl_mem_alloc: CCL's heap) or plain (ordinary memory, as\n"
          "                       a framework's tensors: cuMemAlloc, malloc on the CPU; CCL stages it\n"
          "                       where it needs symmetric memory; NCCL plain runs on it too) [symmetric]\n"
          "      --csv F, --json F, --plot F.svg   write the results\n"
          "      --backend B      cpu, gpu or auto [auto: gpu when one is present]\n"
          "  -n, --iters N        timed ops per size (ops per graph with --graph) [20]\n"
          "  -w, --warmup N       untimed ops first (ours: at least 1) [5]\n"
          "      --repeats N      graph replays per size (--graph) [10]\n"
          "      --ranks N        ranks in one process (default: 4 on the CPU, every GPU)\n"
          "      --timeout-ms MS  bound on every wait in the runtime [the library's: 10 minutes]\n"
          "  -h, --help, --version\n"
          "\n"
          "sendrecv: every rank r sends S bytes (each size of the sweep) to rank (r+1)%N and\n"
          "  receives S from (r-1)%N, in one group (ccl_group_start, ccl_send, ccl_recv,\n"
          "  ccl_group_end; NCCL: the same with ncclSend and ncclRecv); busbw = algbw.\n"
          "alltoallv: ccl_all_to_all_v; rank q sends rank p a share of its S bytes proportional\n"
          "  to 1 + ((q + 2p) mod (N+1)), rounded down, the remainder one element each to the first\n"
          "  peers (NCCL, which has no alltoallv: the same exchange as grouped ncclSend/ncclRecv);\n"
          "  busbw = algbw x (N-1)/N.\n"
          "allgatherv: ccl_all_gather_v; S bytes is the receive buffer, rank p's part of it\n"
          "  proportional to 1 + (2p mod (N+1)) (row 0 of alltoallv's matrix; NCCL, which has no\n"
          "  allgatherv: one ncclBroadcast per rank in a group, as PyTorch does); busbw = algbw x (N-1)/N.\n"
          "--v-counts zipf: instead, rank q's k-th most loaded peer (a permutation of its own) gets\n"
          "  a share proportional to 1/(k+1)^1.2, in multiples of 16 bytes (the rest to the most\n"
          "  loaded), as a mixture-of-experts dispatch; allgatherv: row 0, rank p's part.\n"
          "All three: out-of-place only. A size the library refuses (CCL_ERR_UNSUPPORTED) shows\n"
          "  'refused' and the run goes on, then exits 1.\n",
          f);
}

static int parse_collective(const char *s)
{
    for (int c = 0; c < PERF_NCOLLS; c++)
        if (!strcmp(s, perf_colls[c].name) || !strcmp(s, perf_colls[c].alias))
            return c;
    return -1;
}

static void parse_args(int argc, char **argv, Opts *o)
{
    *o = (Opts){.coll = -1, .minbytes = 1024, .maxbytes = 1 << 20, .step = 2, .dtype = CCL_F32,
                .op = CCL_SUM, .iters = 20, .warmup = 5, .repeats = 10,
                .size_arg = {"1K", "1M"}};
    int op_given = 0, root_given = 0;
    const char *nccl_mode = NULL, *v_counts = NULL;
    tool_init("ccl-perf", "ccl-perf --help", NULL);
    /* Values are written "-b 1K", "--minbytes=1K" or "-b1K". */
    const ToolShared shared = {.ranks = &o->ranks, .max_ranks = CCLC_MAX_RANKS, .backend = &o->backend,
                               .dtype = &o->dtype, .op = &o->op, .op_short = "-o", .op_given = &op_given,
                               .iters = &o->iters, .warmup = &o->warmup, .max_iters = PERF_MAX_ITERS,
                               .timeout_ms = &o->timeout_ms};
    ToolArgs a = tool_args(argc, argv, 1, &shared);
    while (tool_next(&a)) {
        const char *flag = a.flag;
        if (tool_is(&a, "-h", "--help")) {
            usage(stdout);
            exit(0);
        } else if (tool_is(&a, "--version", NULL)) {
            printf("ccl-perf %s (libccl %d.%d.%d)\n", PERF_VERSION, CCL_VERSION_MAJOR, CCL_VERSION_MINOR, CCL_VERSION_PATCH);
            exit(0);
        } else if (tool_flag(&a, "--graph")) {
            o->graph = 1;
        } else if (tool_flag(&a, "--check")) {
            o->check = 1;
        } else if (tool_flag(&a, "--hint-range")) {
            o->hint_range = 1;
        } else if (tool_is(&a, "-c", "--collective")) {
            const char *val = tool_value(&a);
            o->coll = parse_collective(val);
            if (o->coll < 0)
                tool_usage_error("%s %s: unknown collective (expected allreduce, allgather, reduce_scatter, alltoall, broadcast, "
                                 "reduce, alltoallv, allgatherv or sendrecv)", flag, val);
        } else if (tool_is(&a, "-b", "--minbytes") || tool_is(&a, "-e", "--maxbytes")) {
            int which = tool_is(&a, "-e", "--maxbytes");
            const char *val = tool_value(&a);
            uint64_t v = tool_size(flag, val);
            if (v == 0)
                tool_usage_error("%s %s: sizes must be at least one element", flag, val);
            *(which ? &o->maxbytes : &o->minbytes) = (size_t)v;
            o->size_arg[which] = val;
        } else if (tool_is(&a, "-f", "--stepfactor")) {
            o->step = (unsigned long)tool_int(flag, tool_value(&a), 2, 1 << 20);
        } else if (tool_is(&a, "-r", "--root")) {
            o->root = tool_int(flag, tool_value(&a), 0, CCLC_MAX_RANKS - 1);
            root_given = 1;
        } else if (tool_is(&a, "--algo", NULL)) {
            o->algo = tool_value(&a);
        } else if (tool_is(&a, "--compare", NULL)) {
            const char *val = tool_value(&a);
            if (strcmp(val, "nccl") != 0)
                tool_usage_error("--compare %s: only 'nccl' can be compared", val);
            o->compare_nccl = 1;
        } else if (tool_is(&a, "--nccl-mode", NULL)) {
            nccl_mode = tool_value(&a);
            if (!strcmp(nccl_mode, "best"))
                o->nccl_mode = PERF_NCCL_BEST;
            else if (!strcmp(nccl_mode, "plain"))
                o->nccl_mode = PERF_NCCL_PLAIN;
            else if (!strcmp(nccl_mode, "sym"))
                o->nccl_mode = PERF_NCCL_SYM;
            else
                tool_usage_error("--nccl-mode %s: expected plain, sym or best", nccl_mode);
        } else if (tool_is(&a, "--v-counts", NULL)) {
            v_counts = tool_value(&a);
            if (!strcmp(v_counts, "proportional"))
                o->v_counts = PERF_VCOUNTS_PROPORTIONAL;
            else if (!strcmp(v_counts, "zipf"))
                o->v_counts = PERF_VCOUNTS_ZIPF;
            else
                tool_usage_error("--v-counts %s: expected proportional or zipf", v_counts);
        } else if (tool_is(&a, "--buffers", NULL)) {
            const char *val = tool_value(&a);
            if (!strcmp(val, "symmetric"))
                o->buffers = PERF_BUF_SYMMETRIC;
            else if (!strcmp(val, "plain"))
                o->buffers = PERF_BUF_PLAIN;
            else
                tool_usage_error("--buffers %s: expected symmetric or plain", val);
        } else if (tool_is(&a, "--csv", NULL)) {
            o->csv = tool_value(&a);
        } else if (tool_is(&a, "--json", NULL)) {
            o->json = tool_value(&a);
        } else if (tool_is(&a, "--plot", NULL)) {
            o->plot = tool_value(&a);
        } else if (tool_is(&a, "--repeats", NULL)) {
            o->repeats = tool_int(flag, tool_value(&a), 1, PERF_MAX_ITERS);
        } else {
            tool_unknown(&a);
        }
    }
    if (nccl_mode && !o->compare_nccl)
        tool_usage_error("--nccl-mode %s needs --compare nccl", nccl_mode);
    if (o->minbytes > o->maxbytes)
        tool_usage_error("-b %s is larger than -e %s", o->size_arg[0], o->size_arg[1]);
    if (o->plot) {
        size_t n = strlen(o->plot);
        if (n < 4 || strcmp(o->plot + n - 4, ".svg") != 0)
            tool_usage_error("--plot %s: the plot is an SVG file; name it *.svg", o->plot);
    }
    if (o->coll >= 0 && op_given && !perf_colls[o->coll].reduces)
        tool_usage_error("-o %s: %s does not reduce", ccl_op_name(o->op), perf_colls[o->coll].name);
    if (o->coll >= 0 && root_given && !perf_colls[o->coll].rooted)
        tool_usage_error("-r %d: %s has no root", o->root, perf_colls[o->coll].name);
    if (v_counts && o->coll != PERF_ALLTOALLV && o->coll != PERF_ALLGATHERV)
        tool_usage_error("--v-counts %s: only alltoallv and allgatherv take counts%s%s", v_counts,
                         o->coll >= 0 ? ", not " : "", o->coll >= 0 ? perf_colls[o->coll].name : "");
}

/* The sweep: minbytes, *step, ... up to maxbytes. */
static int sweep_sizes(const Opts *o, size_t *sizes)
{
    int n = 0;
    for (size_t s = o->minbytes; s <= o->maxbytes && n < PERF_MAX_SIZES; n++) {
        sizes[n] = s;
        if (s > SIZE_MAX / o->step)
            return n + 1;
        s *= o->step;
    }
    return n;
}

static _Noreturn __attribute__((format(printf, 2, 3))) void worker_fail(Worker *w, const char *fmt, ...)
{
    fflush(stdout);
    /* One fputs, so the lines of ranks failing at once do not interleave. */
    char msg[16384];
    int n = snprintf(msg, sizeof msg, "ccl-perf: rank %d: ", w->rank);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof msg - (size_t)n - 1, fmt, ap);
    va_end(ap);
    strcat(msg, "\n");
    fputs(msg, stderr);
    if (!w->in_worker)
        exit(1);    /* main()'s own agreement, single-threaded: nothing runs under us */
    w->exit_code = 1;
    w->failed = 1;
    /* Peers blocked in an agreement with us give up too, and unwind the same way. */
    if (w->tb)
        ccl__thread_boot_fail(w->tb);
    longjmp(w->fail_jmp, 1);
}

/* Scratch slot `slot` of at least `bytes` bytes, kept until worker() returns. */
static void *agree_mem(Worker *w, int slot, size_t bytes)
{
    if (w->agree_cap[slot] < bytes) {
        void *p = realloc(w->agree_buf[slot], bytes);
        if (!p)
            worker_fail(w, "out of memory");
        w->agree_buf[slot] = p;
        w->agree_cap[slot] = bytes;
    }
    return w->agree_buf[slot];
}

/* A call of the harness's GPU (tools/common/cuda.c, timing.c): on failure, the driver
 * call that failed and why. */
static void cu_check(Worker *w, CuResult e)
{
    char why[256];
    if (e != 0) {
        tool_gpu_why(&w->g, e, why, sizeof why);
        worker_fail(w, "%s", why);
    }
}

static void ccl_check(Worker *w, ccl_result_t r, const char *what)
{
    if (r != CCL_OK)
        worker_fail(w, "%s failed: %s: %s", what, ccl_result_string(r), ccl_comm_last_error(w->comm));
}

static void nccl_check(Worker *w, NcclResult r, const char *what)
{
    if (r != 0)
        worker_fail(w, "%s failed: %s (NCCL error %d)", what, perf_nccl.GetErrorString ? perf_nccl.GetErrorString(r) : "?", (int)r);
}

/* Agreement among ranks, through the bootstrap (same result on every rank). */
static void agree_gather(Worker *w, const void *in, void *out, size_t bytes)
{
    void *scratch = bytes > TOOL_AGREE_PIECE ? agree_mem(w, 0, TOOL_AGREE_PIECE * (size_t)w->nranks) : NULL;
    if (tool_allgather(w->boot, w->nranks, in, out, bytes, scratch) != 0)
        worker_fail(w, "the bootstrap's allgather failed (a peer died?)");
}

static void agree_barrier(Worker *w)
{
    if (w->boot->barrier(w->boot->ctx) != 0)
        worker_fail(w, "the bootstrap's barrier failed (a peer died?)");
}

static long long agree_sum(Worker *w, long long v)
{
    long long *all = agree_mem(w, 1, sizeof v * (size_t)w->nranks), s = 0;
    agree_gather(w, &v, all, sizeof v);
    for (int r = 0; r < w->nranks; r++)
        s = all[r] < 0 || s < 0 ? -1 : s + all[r];
    return s;
}

/* Per sample the maximum over ranks, then the median of those. */
static double agree_median_of_max(Worker *w, const double *samples, int ns)
{
    double *all = agree_mem(w, 1, sizeof *all * (size_t)ns * (size_t)w->nranks);
    double *mx = agree_mem(w, 2, sizeof *mx * (size_t)ns);
    agree_gather(w, samples, all, sizeof *samples * (size_t)ns);
    for (int i = 0; i < ns; i++) {
        mx[i] = all[i];
        for (int r = 1; r < w->nranks; r++)
            if (all[(size_t)r * (size_t)ns + (size_t)i] > mx[i])
                mx[i] = all[(size_t)r * (size_t)ns + (size_t)i];
    }
    return tool_median(mx, ns);
}

/* ===== buffers: host memory on the CPU backend, device memory on the GPU ===== */

/* Uploads and fills return once the context is idle (tool_gpu_upload): an op launched
 * next on the op stream sees the new bytes. Empty ranges (alltoallv's: a rank may
 * receive nothing at small sizes) ask nothing of the driver. */
static void buf_upload(Worker *w, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0)
        return;
    if (!w->gpu) {
        memcpy(dst, src, bytes);
        return;
    }
    cu_check(w, tool_gpu_upload(&w->g, dst, src, bytes));
}

static void buf_poison(Worker *w, void *dst, size_t bytes)
{
    if (bytes == 0)
        return;
    if (!w->gpu) {
        memset(dst, 0xff, bytes);
        return;
    }
    cu_check(w, tool_gpu_fill(&w->g, dst, 0xff, bytes));
}

/* The buffer's bytes, readable on the host (valid until the next call). */
static const unsigned char *buf_read(Worker *w, const void *src, size_t bytes)
{
    if (!w->gpu || bytes == 0)
        return w->gpu ? w->host : src;
    cu_check(w, tool_gpu_download(&w->g, w->host, src, bytes));
    return w->host;
}

/* Fills [pos0, pos0+n) of rank r's input pattern into dst (device or host). */
static void buf_fill(Worker *w, void *dst, size_t pos0, size_t n, int r)
{
    size_t es = w->sh->pat.esize;
    unsigned char *img = w->gpu ? w->host : dst;
    perf_pattern_fill(img, pos0, n, w->sh->pat.tab_in[r], es);
    if (w->gpu)
        buf_upload(w, dst, img, n * es);
}

/* An implementation's two buffers: the --buffers pair for ours and for NCCL's plain mode
 * (the same pointers), NCCL's registered windows for its symmetric mode. Both pairs have
 * send_cap and recv_cap bytes. */
static void impl_buffers(const Worker *w, int impl, char **sendbuf, char **recvbuf)
{
    *sendbuf = impl == IMPL_NCCL_SYM ? w->sym_sendbuf : w->sendbuf;
    *recvbuf = impl == IMPL_NCCL_SYM ? w->sym_recvbuf : w->recvbuf;
}

/* The send and receive pointers of one op (nccl-tests' in-place conventions). */
static void op_buffers(const Worker *w, int impl, int inplace, size_t count, const void **send, void **recv)
{
    size_t es = w->sh->pat.esize;
    PerfColl c = w->sh->coll;
    char *sb, *rb;
    impl_buffers(w, impl, &sb, &rb);
    if (!inplace) {
        *send = sb, *recv = rb;
    } else if (c == PERF_ALLGATHER) {
        *recv = rb;
        *send = rb + (size_t)w->rank * count * es;
    } else if (c == PERF_REDUCE_SCATTER) {
        *send = sb;
        *recv = sb + (size_t)w->rank * count * es;
    } else {
        *send = *recv = rb;
    }
}

/* Whether c takes counts per rank (v_setup, --v-counts). */
static int is_v(PerfColl c) { return c == PERF_ALLTOALLV || c == PERF_ALLGATHERV; }

/* Elements of the op's output on this rank: alltoallv's differ per rank (v_setup). */
static size_t recv_elems(const Worker *w, size_t count)
{
    return is_v(w->sh->coll) ? w->v_recv_total : out_elems(w->sh->coll, w->nranks, count);
}

/* Writes the op's input and poisons its output (synchronously). */
static void prepare(Worker *w, int impl, int inplace, size_t count)
{
    PerfColl c = w->sh->coll;
    size_t es = w->sh->pat.esize, nin = in_elems(c, w->nranks, count), nout = recv_elems(w, count);
    int root = w->o->root;
    if (c == PERF_ALLGATHERV)
        nin = w->v_recv[w->rank];    /* its own part of the vector */
    char *sb, *rb;
    impl_buffers(w, impl, &sb, &rb);
    if (!inplace) {
        buf_fill(w, sb, 0, nin, w->rank);
        buf_poison(w, rb, nout * es);
    } else if (c == PERF_ALLGATHER) {
        buf_poison(w, rb, nout * es);
        buf_fill(w, rb + (size_t)w->rank * count * es, 0, count, w->rank);
    } else if (c == PERF_REDUCE_SCATTER) {
        buf_fill(w, sb, 0, nin, w->rank);
    } else if (c == PERF_BROADCAST && w->rank != root) {
        buf_poison(w, rb, nout * es);
    } else {
        buf_fill(w, rb, 0, nin, w->rank);
    }
}

/* CCL_PERF_INJECT_WRONG=K: rank 0 spoils K elements of every checked CCL result. */
static size_t inject_wrong;

/* Wrong elements of this rank's output; -1 when this op's result is not checkable. */
static long long verify(Worker *w, int impl, int inplace, size_t count)
{
    PerfColl c = w->sh->coll;
    const Pattern *p = &w->sh->pat;
    size_t es = p->esize;
    int n = w->nranks, root = w->o->root;
    if (c == PERF_REDUCE && w->rank != root)
        return 0;                         /* non-root outputs are undefined */
    /* NCCL's avg of floating types multiplies by 1/N before summing: exact only for
     * powers of two. Its integer avg sums, then divides, as ours. */
    if (impl != IMPL_CCL && w->o->op == CCL_AVG && perf_colls[c].reduces && (n & (n - 1)) &&
        !tool_dtype_integer(w->o->dtype))
        return -1;
    const void *send;
    void *recv;
    op_buffers(w, impl, inplace, count, &send, &recv);
    size_t nout = recv_elems(w, count);
    /* The checker's own test (tests/perf): spoil rank 0's first elements. */
    if (inject_wrong && w->rank == 0 && impl == IMPL_CCL)
        buf_poison(w, recv, (inject_wrong < nout ? inject_wrong : nout) * es);
    const unsigned char *b = buf_read(w, recv, nout * es);
    long long wrong = 0;
    switch (c) {
    case PERF_ALLREDUCE:
    case PERF_REDUCE:
        wrong = perf_pattern_wrong(b, 0, count, p->tab_red, es);
        break;
    case PERF_REDUCE_SCATTER:
        wrong = perf_pattern_wrong(b, (size_t)w->rank * count, count, p->tab_red, es);
        break;
    case PERF_BROADCAST:
        wrong = perf_pattern_wrong(b, 0, count, p->tab_in[root], es);
        break;
    case PERF_ALLGATHER:
        for (int q = 0; q < n; q++)
            wrong += perf_pattern_wrong(b + (size_t)q * count * es, 0, count, p->tab_in[q], es);
        break;
    case PERF_ALLTOALL:
        for (int q = 0; q < n; q++)
            wrong += perf_pattern_wrong(b + (size_t)q * count * es, (size_t)w->rank * count, count, p->tab_in[q], es);
        break;
    case PERF_ALLGATHERV:
    case PERF_ALLTOALLV:
        /* Segment q: the part of rank q's input that q sends this rank (allgatherv: all
         * of rank q's part, from the start of its input). */
        for (int q = 0; q < n; q++)
            wrong += perf_pattern_wrong(b + w->v_rdispl[q] * es, w->v_src_pos[q], w->v_recv[q], p->tab_in[q], es);
        break;
    case PERF_SENDRECV:
        wrong = perf_pattern_wrong(b, 0, count, p->tab_in[(w->rank + n - 1) % n], es);
        break;
    case PERF_NCOLLS:
        break;
    }
    return wrong;
}

/* CCL_PERF_INJECT_UNSUPPORTED=B: every op of ours of B bytes or more acts as if the
 * library had refused it (tests/perf: the refusal's report, where no backend refuses). */
static size_t inject_unsupported;

/* Enqueues one op of NCCL's (either mode); fails the rank on an error. */
static void issue_nccl(Worker *w, int impl, int inplace, size_t count)
{
    const Opts *o = w->o;
    const void *send;
    void *recv;
    op_buffers(w, impl, inplace, count, &send, &recv);
    NcclDataType t = perf_nccl_dtype(o->dtype);
    NcclRedOp op = perf_nccl_op(o->op);
    NcclComm nc = w->ncomm;
    CuStream s = w->g.stream;
    size_t es = w->sh->pat.esize;
    int n = w->nranks;
    NcclResult r = 0;
    switch (w->sh->coll) {
    case PERF_ALLREDUCE: r = perf_nccl.AllReduce(send, recv, count, t, op, nc, s); break;
    case PERF_ALLGATHER: r = perf_nccl.AllGather(send, recv, count, t, nc, s); break;
    case PERF_REDUCE_SCATTER: r = perf_nccl.ReduceScatter(send, recv, count, t, op, nc, s); break;
    case PERF_BROADCAST: r = perf_nccl.Broadcast(send, recv, count, t, o->root, nc, s); break;
    case PERF_REDUCE: r = perf_nccl.Reduce(send, recv, count, t, op, o->root, nc, s); break;
    case PERF_ALLGATHERV: {
        /* As PyTorch's ProcessGroupNCCL gathers tensors of unequal sizes: one broadcast
         * per rank, rooted there, into that rank's segment, all in one group. NCCL reads
         * the send buffer on the root only. */
        nccl_check(w, perf_nccl.GroupStart(), "ncclGroupStart");
        for (int q = 0; q < n && r == 0; q++)
            r = perf_nccl.Broadcast(send, (char *)recv + w->v_rdispl[q] * es, w->v_recv[q], t, q, nc, s);
        NcclResult e = perf_nccl.GroupEnd();
        r = r ? r : e;
        break;
    }
    case PERF_ALLTOALL:
    case PERF_ALLTOALLV:
    case PERF_SENDRECV: {
        /* As nccl-tests does: the sends and receives of one op in a group (alltoall:
         * one of each per peer; alltoallv: the same with the count matrix's segments;
         * sendrecv: one send right and one receive from the left). */
        nccl_check(w, perf_nccl.GroupStart(), "ncclGroupStart");
        if (w->sh->coll == PERF_SENDRECV) {
            r = perf_nccl.Send(send, count, t, (w->rank + 1) % n, nc, s);
            if (r == 0)
                r = perf_nccl.Recv(recv, count, t, (w->rank + n - 1) % n, nc, s);
        }
        for (int p = 0; w->sh->coll != PERF_SENDRECV && p < n && r == 0; p++) {
            int v = w->sh->coll == PERF_ALLTOALLV;
            r = perf_nccl.Send((const char *)send + (v ? w->v_sdispl[p] : (size_t)p * count) * es,
                               v ? w->v_send[p] : count, t, p, nc, s);
            if (r == 0)
                r = perf_nccl.Recv((char *)recv + (v ? w->v_rdispl[p] : (size_t)p * count) * es,
                                   v ? w->v_recv[p] : count, t, p, nc, s);
        }
        NcclResult e = perf_nccl.GroupEnd();
        r = r ? r : e;
        break;
    }
    case PERF_NCOLLS:
        break;
    }
    nccl_check(w, r, "NCCL collective");
}

/* sendrecv's group: a send to the right and a receive from the left. ccl_group_end runs
 * even after a call inside failed, so this thread's group is closed; the first failure
 * is the one returned, its message in why (ccl_group_end's own would only say that the
 * group was dropped). */
static ccl_result_t issue_sendrecv(Worker *w, const void *send, void *recv, size_t count, void *stream, char *why,
                                   size_t len)
{
    int n = w->nranks;
    ccl_dtype_t t = w->o->dtype;
    ccl_result_t r = ccl_group_start();
    if (r != CCL_OK) {
        snprintf(why, len, "%s", ccl_comm_last_error(NULL));
        return r;
    }
    ccl_result_t calls[2] = {ccl_send(send, count, t, (w->rank + 1) % n, w->comm, stream), CCL_OK};
    if (calls[0] != CCL_OK)
        snprintf(why, len, "%s", ccl_comm_last_error(w->comm));
    calls[1] = ccl_recv(recv, count, t, (w->rank + n - 1) % n, w->comm, stream);
    if (calls[1] != CCL_OK && calls[0] == CCL_OK)
        snprintf(why, len, "%s", ccl_comm_last_error(w->comm));
    ccl_result_t end = ccl_group_end();
    if (calls[0] != CCL_OK || calls[1] != CCL_OK)
        return calls[0] != CCL_OK ? calls[0] : calls[1];
    if (end != CCL_OK)
        snprintf(why, len, "%s", ccl_comm_last_error(NULL));
    return end;
}

/* Enqueues one op of ours. Returns the library's result; on failure, its message is in
 * why. */
static ccl_result_t issue_ccl(Worker *w, int inplace, size_t count, char *why, size_t len)
{
    const Opts *o = w->o;
    const void *send;
    void *recv;
    op_buffers(w, IMPL_CCL, inplace, count, &send, &recv);
    if (inject_unsupported && count * w->sh->pat.esize >= inject_unsupported) {
        snprintf(why, len, "CCL_PERF_INJECT_UNSUPPORTED=%zu: ccl-perf refuses ops of this size itself (a test)",
                 inject_unsupported);
        return CCL_ERR_UNSUPPORTED;
    }
    ccl_result_t r = CCL_ERR_INTERNAL;
    void *stream = w->gpu ? (void *)w->g.stream : NULL;
    if (w->alg) {
        r = ccl_algorithm_run(w->alg, send, recv, count, o->dtype, o->op, stream);
    } else {
        switch (w->sh->coll) {
        case PERF_ALLREDUCE: r = ccl_all_reduce(send, recv, count, o->dtype, o->op, w->comm, stream); break;
        case PERF_ALLGATHER: r = ccl_all_gather(send, recv, count, o->dtype, w->comm, stream); break;
        case PERF_REDUCE_SCATTER: r = ccl_reduce_scatter(send, recv, count, o->dtype, o->op, w->comm, stream); break;
        case PERF_ALLTOALL: r = ccl_all_to_all(send, recv, count, o->dtype, w->comm, stream); break;
        case PERF_BROADCAST: r = ccl_broadcast(send, recv, count, o->dtype, o->root, w->comm, stream); break;
        case PERF_REDUCE: r = ccl_reduce(send, recv, count, o->dtype, o->op, o->root, w->comm, stream); break;
        case PERF_ALLTOALLV:
            r = ccl_all_to_all_v(send, w->v_send, w->v_sdispl, recv, w->v_recv, w->v_rdispl, o->dtype, w->comm, stream);
            break;
        case PERF_ALLGATHERV:
            r = ccl_all_gather_v(send, w->v_recv[w->rank], recv, w->v_recv, w->v_rdispl, o->dtype, w->comm, stream);
            break;
        case PERF_SENDRECV: return issue_sendrecv(w, send, recv, count, stream, why, len);
        case PERF_NCOLLS: snprintf(why, len, "no such collective"); return CCL_ERR_INTERNAL;
        }
    }
    if (r != CCL_OK)
        snprintf(why, len, "%s", ccl_comm_last_error(w->comm));
    return r;
}

/* The name of ours as the messages give it: the library's entry point, or --algo's. */
static const char *ccl_call_name(const Worker *w)
{
    static const char *const name[PERF_NCOLLS] = {
        [PERF_ALLREDUCE] = "ccl_all_reduce", [PERF_ALLGATHER] = "ccl_all_gather",
        [PERF_REDUCE_SCATTER] = "ccl_reduce_scatter", [PERF_ALLTOALL] = "ccl_all_to_all",
        [PERF_BROADCAST] = "ccl_broadcast", [PERF_REDUCE] = "ccl_reduce", [PERF_ALLTOALLV] = "ccl_all_to_all_v",
        [PERF_SENDRECV] = "ccl_send/ccl_recv group", [PERF_ALLGATHERV] = "ccl_all_gather_v"};
    return w->alg ? "ccl_algorithm_run" : name[w->sh->coll];
}

/* Enqueues one op of the given implementation; fails the rank on any error. */
static void issue(Worker *w, int impl, int inplace, size_t count)
{
    if (impl != IMPL_CCL) {
        issue_nccl(w, impl, inplace, count);
        return;
    }
    char why[1024];
    ccl_result_t r = issue_ccl(w, inplace, count, why, sizeof why);
    if (r != CCL_OK)
        worker_fail(w, "%s failed: %s: %s", ccl_call_name(w), ccl_result_string(r), why);
}

/* Waits for everything this rank enqueued; for CCL also collects asynchronous errors. */
static void wait_idle(Worker *w, int impl)
{
    if (w->gpu)
        cu_check(w, tool_gpu_sync(&w->g));
    if (impl == IMPL_CCL)
        ccl_check(w, ccl_comm_synchronize(w->comm), "ccl_comm_synchronize");
}

static double event_us(Worker *w, int i, double div)
{
    double us;
    cu_check(w, tool_gpu_elapsed_us(&w->g, i, div, &us));
    return us;
}

/* The first op of ours at a size, which is where the library refuses what it does not
 * run (CCL_ERR_UNSUPPORTED: a backend without point-to-point or a v-collective). Refusal is
 * agreed: if any rank's call was refused, every rank gets 1 and skips the size (a rank
 * whose call went through then fails at its wait, naming the peer that never came),
 * and rank 0 keeps the first message for the report. Any other error fails the rank. */
static int first_op_refused(Worker *w, int inplace, size_t count)
{
    char why[1024] = "";
    ccl_result_t r = issue_ccl(w, inplace, count, why, sizeof why);
    int refused = r == CCL_ERR_UNSUPPORTED;
    if (agree_sum(w, refused) == 0) {
        if (r != CCL_OK)
            worker_fail(w, "%s failed: %s: %s", ccl_call_name(w), ccl_result_string(r), why);
        return 0;
    }
    if (r != CCL_OK && !refused)
        worker_fail(w, "%s failed: %s: %s", ccl_call_name(w), ccl_result_string(r), why);
    if (!refused)
        wait_idle(w, IMPL_CCL);
    /* Only rank 0 reports, so only rank 0 writes (the threads share sh). */
    if (w->rank == 0 && !w->sh->refused_why[0])
        snprintf(w->sh->refused_why, sizeof w->sh->refused_why, "%s: %.400s", ccl_call_name(w),
                 refused ? why : "refused on other ranks, not on rank 0");
    return 1;
}

/* Times one (implementation, placement, size) on this rank. Every rank calls it in the
 * same order; the result is agreed (identical on every rank). */
static Stat measure(Worker *w, int impl, int inplace, size_t count, size_t bytes)
{
    const Opts *o = w->o;
    int check = o->check, n = o->iters;
    double samples[PERF_MAX_ITERS];
    int ns = 0;
    long long wrong = check ? 0 : -1;
    int graph = o->graph;

    agree_barrier(w);
    prepare(w, impl, inplace, count);
    agree_barrier(w);
    /* At least one op before a capture: the first call of a size may compile, load or
     * allocate, none of which belongs in a graph. Ours gets at least one everywhere, as
     * the probe for a refusal. */
    int warm = (graph || impl == IMPL_CCL) && o->warmup < 1 ? 1 : o->warmup;
    if (impl == IMPL_CCL && first_op_refused(w, inplace, count))
        return (Stat){-1, -1, 1};
    for (int i = impl == IMPL_CCL; i < warm; i++)
        issue(w, impl, inplace, count);
    wait_idle(w, impl);

    if (graph) {
        /* Like the NCCL baselines: n ops per graph (a fifth of them from 16 MiB on),
         * replayed --repeats times after one untimed replay. */
        int ops = bytes >= (16u << 20) && n >= 5 ? n / 5 : n;
        if (check && inplace) {
            /* In-place data changes with every op of a graph; check one eager op. */
            agree_barrier(w);
            prepare(w, impl, inplace, count);
            agree_barrier(w);
            issue(w, impl, inplace, count);
            wait_idle(w, impl);
            long long v = verify(w, impl, inplace, count);
            wrong = v < 0 ? -1 : wrong + v;
        }
        agree_barrier(w);
        prepare(w, impl, inplace, count);
        agree_barrier(w);
        cu_check(w, tool_gpu_capture_begin(&w->g));
        for (int k = 0; k < ops; k++)
            issue(w, impl, inplace, count);
        CuResult e = tool_gpu_capture_end(&w->g);
        if (e != 0 && !strcmp(w->g.what, "cuStreamEndCapture"))
            worker_fail(w, "--graph: capturing %s ops failed: %s (CUDA error %d); the collective is not graph-capturable",
                        impl == IMPL_CCL ? "ccl" : impl == IMPL_NCCL ? "NCCL" : "NCCL (symmetric windows)",
                        tool_cuda_error(e), e);
        cu_check(w, e);
        cu_check(w, tool_gpu_replay(&w->g));
        wait_idle(w, impl);
        /* Replays back to back, so ranks' launch skew touches only the first; when
         * checking, one at a time with the output poisoned before each. */
        int each = check && !inplace;
        if (!each)
            agree_barrier(w);
        for (int rep = 0; rep < o->repeats; rep++) {
            if (each) {
                /* Every rank is done with the previous replay before anyone poisons. */
                agree_barrier(w);
                char *sb, *rb;
                impl_buffers(w, impl, &sb, &rb);
                buf_poison(w, rb, recv_elems(w, count) * w->sh->pat.esize);
                agree_barrier(w);
            }
            cu_check(w, tool_gpu_mark(&w->g, rep, 0));
            cu_check(w, tool_gpu_replay(&w->g));
            cu_check(w, tool_gpu_mark(&w->g, rep, 1));
            if (each) {
                wait_idle(w, impl);
                long long v = verify(w, impl, inplace, count);
                wrong = v < 0 || wrong < 0 ? -1 : wrong + v;
            }
        }
        wait_idle(w, impl);
        for (int rep = 0; rep < o->repeats; rep++)
            samples[ns++] = event_us(w, rep, ops);
        tool_gpu_graph_free(&w->g);
    } else if (w->gpu && !check) {
        /* Ops back to back, one event pair each: the host's launch cost shows where it
         * is slower than the GPU, as it would in an eager application. */
        agree_barrier(w);
        for (int i = 0; i < n; i++) {
            cu_check(w, tool_gpu_mark(&w->g, i, 0));
            issue(w, impl, inplace, count);
            cu_check(w, tool_gpu_mark(&w->g, i, 1));
        }
        wait_idle(w, impl);
        for (int i = 0; i < n; i++)
            samples[ns++] = event_us(w, i, 1);
    } else {
        /* One op at a time: fresh input and poisoned output before each (all ranks done
         * with the previous op first, so nobody still reads what we rewrite). */
        for (int i = 0; i < n; i++) {
            agree_barrier(w);
            if (check) {
                prepare(w, impl, inplace, count);
                agree_barrier(w);
            }
            double t0 = 0;
            if (w->gpu)
                cu_check(w, tool_gpu_mark(&w->g, i, 0));
            else
                t0 = tool_now_us();
            issue(w, impl, inplace, count);
            if (w->gpu)
                cu_check(w, tool_gpu_mark(&w->g, i, 1));
            wait_idle(w, impl);
            samples[ns++] = w->gpu ? event_us(w, i, 1) : tool_now_us() - t0;
            if (check) {
                long long v = verify(w, impl, inplace, count);
                wrong = v < 0 || wrong < 0 ? -1 : wrong + v;
            }
        }
    }
    Stat st = {0};
    st.us = agree_median_of_max(w, samples, ns);
    st.wrong = agree_sum(w, wrong);
    return st;
}

/* ===== one rank ===== */

/* The device's primary context (the one the CUDA runtime and NCCL use), the op stream
 * and an event pair per sample (tools/common/cuda.c). */
static void worker_setup_gpu(Worker *w)
{
    int nev = w->o->iters > w->o->repeats ? w->o->iters : w->o->repeats;
    cu_check(w, tool_gpu_open(&w->g, w->device, nev));
    if (w->rank == 0 && tool_gpu_name(&w->g, w->sh->devname, sizeof w->sh->devname - 16) == 0)
        snprintf(w->sh->devname + strlen(w->sh->devname), 16, " x%d", w->nranks);
}

/* Whether the step `what` failed on any rank (agreed); if so, `why` says where and NCCL's
 * words for the first failure, the same text on every rank. */
static int agree_nccl_failure(Worker *w, NcclResult r, const char *what, char *why, size_t len)
{
    long long mine = r, *all = agree_mem(w, 1, sizeof mine * (size_t)w->nranks);
    agree_gather(w, &mine, all, sizeof mine);
    int failed = 0, first = -1;
    for (int q = 0; q < w->nranks; q++)
        if (all[q] != 0) {
            failed++;
            first = first < 0 ? q : first;
        }
    if (failed)
        snprintf(why, len, "%s failed on %d of %d ranks (rank %d: %s, NCCL error %lld)", what, failed, w->nranks, first,
                 perf_nccl.GetErrorString((NcclResult)all[first]), all[first]);
    return failed != 0;
}

/* NCCL's symmetric mode: a send and a receive buffer from ncclMemAlloc, as large as ours,
 * each registered once as a symmetric window before any timing, collectively and in the
 * same order on every rank (as NCCL requires). A failure anywhere (agreed) turns the
 * mode off on every rank and is reported once, in the header; the plain mode goes on.
 * Windows registered on every rank are deregistered by worker(); one that failed on some
 * rank is left to ncclCommDestroy, and the buffers are freed after it. */
static void worker_setup_windows(Worker *w)
{
    Shared *sh = w->sh;
    void **buf[2] = {&w->sym_sendbuf, &w->sym_recvbuf};
    size_t cap[2] = {w->send_cap, w->recv_cap};
    const char *name[2] = {"send", "receive"};
    char why[sizeof sh->nc.sym_why] = "", what[128];
    for (int i = 0; i < 2; i++) {
        NcclResult r = perf_nccl.MemAlloc(buf[i], cap[i]);
        if (r != 0)
            *buf[i] = NULL;
        snprintf(what, sizeof what, "ncclMemAlloc (%s buffer, %zu bytes)", name[i], cap[i]);
        if (agree_nccl_failure(w, r, what, why, sizeof why))
            break;
        r = perf_nccl.CommWindowRegister(w->ncomm, *buf[i], cap[i], &w->sym_win[i], PERF_NCCL_WIN_COLL_SYMMETRIC);
        snprintf(what, sizeof what, "ncclCommWindowRegister (%s buffer, %zu bytes, NCCL_WIN_COLL_SYMMETRIC)", name[i], cap[i]);
        if (agree_nccl_failure(w, r, what, why, sizeof why)) {
            w->sym_win[i] = NULL;    /* not on every rank: ncclCommDestroy's to release */
            break;
        }
    }
    w->nccl_sym = !why[0];
    if (!why[0] || w->rank != 0)
        return;
    /* Only rank 0 reports, so only rank 0 writes (the threads share sh). */
    snprintf(sh->nc.sym_why, sizeof sh->nc.sym_why, "%s", why);
    sh->nc.sym = 0;
    if (!sh->nc.plain) {
        snprintf(sh->nc.why, sizeof sh->nc.why, "--nccl-mode sym, but %.450s", why);
        sh->nc.available = 0;
    }
    fprintf(stderr, "ccl-perf: note: NCCL's symmetric mode is off: %s\n", why);
}

static void worker_setup_nccl(Worker *w)
{
    Shared *sh = w->sh;
    /* Read before the first agreement: rank 0 may rewrite sh->nc after it. */
    int plain = sh->nc.plain, sym = sh->nc.sym;
    NcclUniqueId id, *all = agree_mem(w, 2, sizeof id * (size_t)w->nranks);
    memset(&id, 0, sizeof id);
    NcclResult r = w->rank == 0 ? perf_nccl.GetUniqueId(&id) : 0;
    agree_gather(w, &id, all, sizeof id);
    if (r != 0)
        worker_fail(w, "ncclGetUniqueId failed: %s", perf_nccl.GetErrorString(r));
    cu_check(w, tool_gpu_make_current(&w->g));
    r = perf_nccl.CommInitRank(&w->ncomm, w->nranks, all[0], w->rank);
    long long failed = agree_sum(w, r != 0);
    if (r != 0)
        fprintf(stderr, "ccl-perf: rank %d: ncclCommInitRank failed: %s\n", w->rank, perf_nccl.GetErrorString(r));
    if (failed) {
        /* Only rank 0 prints, so only rank 0 records why (the threads share sh). */
        if (w->rank == 0) {
            snprintf(sh->nc.why, sizeof sh->nc.why, "ncclCommInitRank failed on %lld rank(s)", failed);
            sh->nc.available = 0;
        }
        agree_barrier(w);
        return;
    }
    w->nccl_on = 1;
    w->nccl_plain = plain;
    if (sym)
        worker_setup_windows(w);
}

/* The algorithm our op of this size ran: the --algo file, or the one the standard
 * collective's dispatch picks (ccl__pick with the byte count api.c gives it: the API
 * count times the element size (allgatherv's: the recvcounts' sum), and 0 for alltoallv,
 * whose ranks know only their own counts; every rank picks the same). sendrecv runs no
 * algorithm. */
static void op_algorithm(Worker *w, size_t count, char *name, size_t len)
{
    int lib = perf_colls[w->sh->coll].lib;
    if (lib < 0) {
        snprintf(name, len, "send/recv");
        return;
    }
    size_t bytes = w->sh->coll == PERF_ALLTOALLV ? 0 : count * w->sh->pat.esize;
    ccl_algorithm_t *alg = w->alg;
    if (!alg && ccl__pick(w->comm, (Collective)lib, w->o->root, bytes, "ccl-perf", &alg) != CCL_OK)
        alg = NULL;
    snprintf(name, len, "%s", alg ? ccl_algorithm_name(alg) : "?");
}

/* The v-collectives' segments at `count` elements (--v-counts' rows, perf_v_row), packed
 * in rank order. alltoallv: this rank's row of the matrix as its sendcounts, its column
 * as its recvcounts. allgatherv: the vector (row 0) as every rank's recvcounts, this
 * rank sending its own entry. */
static void v_setup(Worker *w, size_t count)
{
    int n = w->nranks, me = w->rank, kind = w->o->v_counts;
    size_t *row = w->v_src_pos + n, es = w->sh->pat.esize;   /* scratch: the sixth array of worker_run's block */
    w->v_recv_total = 0;
    if (w->sh->coll == PERF_ALLGATHERV) {
        perf_v_row(kind, n, count, 0, es, w->v_recv);
        for (int q = 0; q < n; q++) {
            w->v_rdispl[q] = w->v_recv_total;
            w->v_recv_total += w->v_recv[q];
            w->v_src_pos[q] = 0;
        }
        return;
    }
    perf_v_row(kind, n, count, me, es, w->v_send);
    for (int p = 0; p < n; p++)
        w->v_sdispl[p] = p ? w->v_sdispl[p - 1] + w->v_send[p - 1] : 0;
    for (int q = 0; q < n; q++) {
        perf_v_row(kind, n, count, q, es, row);
        w->v_recv[q] = row[me];
        w->v_rdispl[q] = w->v_recv_total;
        w->v_recv_total += row[me];
        w->v_src_pos[q] = 0;
        for (int p = 0; p < me; p++)
            w->v_src_pos[q] += row[p];
    }
}

/* The send and receive buffers, as large as the sweep's largest size needs, from where
 * --buffers says: CCL's heap (ccl_mem_alloc), or ordinary memory as a framework's
 * tensors are (the driver's cuMemAlloc on a GPU, malloc on the CPU backend), which CCL
 * stages where its algorithm needs symmetric memory. On a GPU also the host image the
 * fills and checks go through. worker_free_buffers releases them, after a failure too. */
static void worker_setup_buffers(Worker *w, size_t maxcount)
{
    PerfColl c = w->sh->coll;
    size_t es = w->sh->pat.esize;
    w->send_cap = in_elems(c, w->nranks, maxcount) * es;
    w->recv_cap = (c == PERF_ALLTOALLV ? w->sh->v_recv_max : out_elems(c, w->nranks, maxcount)) * es;
    if (w->recv_cap < w->send_cap && c != PERF_REDUCE_SCATTER)
        w->recv_cap = w->send_cap;
    if (w->o->buffers == PERF_BUF_SYMMETRIC) {
        ccl_check(w, ccl_mem_alloc(w->comm, &w->sendbuf, w->send_cap), "ccl_mem_alloc (send buffer)");
        ccl_check(w, ccl_mem_alloc(w->comm, &w->recvbuf, w->recv_cap), "ccl_mem_alloc (receive buffer)");
    } else if (w->gpu) {
        cu_check(w, tool_gpu_alloc(&w->g, &w->sendbuf, w->send_cap));
        cu_check(w, tool_gpu_alloc(&w->g, &w->recvbuf, w->recv_cap));
    } else if (!(w->sendbuf = malloc(w->send_cap)) || !(w->recvbuf = malloc(w->recv_cap))) {
        worker_fail(w, "out of memory for the buffers (%zu and %zu bytes)", w->send_cap, w->recv_cap);
    }
    if (w->gpu) {
        w->host = malloc(w->send_cap > w->recv_cap ? w->send_cap : w->recv_cap);
        if (!w->host)
            worker_fail(w, "out of memory for the host copy of the buffers");
    }
}

/* Releases what worker_setup_buffers got (NULL where it got nothing); on a GPU while
 * the rank's ToolGpu is still open. */
static void worker_free_buffers(Worker *w)
{
    void *buf[2] = {w->sendbuf, w->recvbuf};
    for (int i = 0; i < 2; i++) {
        if (w->o->buffers == PERF_BUF_SYMMETRIC)
            ccl_mem_free(w->comm, buf[i]);
        else if (w->gpu)
            tool_gpu_free(&w->g, buf[i]);    /* at the end of the run: nothing to do on failure */
        else
            free(buf[i]);
    }
    w->sendbuf = w->recvbuf = NULL;
    free(w->host);
    w->host = NULL;
}

/* The rank's whole run; returns normally, or by worker_fail's longjmp to worker(). */
static void worker_run(Worker *w)
{
    Shared *sh = w->sh;
    const Opts *o = &sh->o;
    PerfColl c = sh->coll;
    size_t es = sh->pat.esize, maxb = sh->sizes[sh->nsizes - 1], units = units_per_size(c, w->nranks);
    size_t maxcount = maxb / es / units;

    if (w->gpu)
        worker_setup_gpu(w);

    /* --algo: loaded on every rank; main() already proved it for this N. */
    if (o->algo) {
        ccl_result_t r = ccl_algorithm_load(w->comm, o->algo, o->root, &w->alg);
        long long failed = agree_sum(w, r != CCL_OK);
        if (failed) {
            if (r != CCL_OK)
                fprintf(stderr, "ccl-perf: rank %d: ccl_algorithm_load %s failed: %s: %s\n", w->rank, o->algo,
                        ccl_result_string(r), ccl_comm_last_error(w->comm));
            w->exit_code = 1;
            return;
        }
    }

    if (is_v(c)) {
        w->v_send = tool_calloc(6 * (size_t)w->nranks, sizeof *w->v_send);
        w->v_sdispl = w->v_send + w->nranks;
        w->v_recv = w->v_sdispl + w->nranks;
        w->v_rdispl = w->v_recv + w->nranks;
        w->v_src_pos = w->v_rdispl + w->nranks;
    }
    worker_setup_buffers(w, maxcount);
    if (sh->nc.available)
        worker_setup_nccl(w);
    if (w->rank == 0)
        perf_print_header(sh);

    for (int i = 0; i < sh->nsizes; i++) {
        size_t bytes = sh->sizes[i], count = bytes / es / units;
        Row row = {.bytes = bytes, .count = count};
        if (is_v(c))
            v_setup(w, count);
        for (int p = 0; p < 2; p++) {
            /* sendrecv and the v-collectives have no in-place form: a send buffer must
             * stay unchanged until the op completes, and overlapping v buffers are staged. */
            row.st[IMPL_CCL][p] = (Stat){-1, -1, 0};
            if (!(p == 1 && perf_colls[c].p2p))
                row.st[IMPL_CCL][p] = measure(w, IMPL_CCL, p, count, bytes);
            /* NCCL's modes, each where it runs; NCCL has no in-place alltoall (its
             * send/receive pairs would race). */
            for (int impl = IMPL_NCCL; impl <= IMPL_NCCL_SYM; impl++) {
                int on = impl == IMPL_NCCL ? w->nccl_plain : w->nccl_sym;
                row.st[impl][p] = (Stat){-1, -1, 0};
                if (w->nccl_on && on && !(p == 1 && (c == PERF_ALLTOALL || perf_colls[c].p2p)))
                    row.st[impl][p] = measure(w, impl, p, count, bytes);
            }
        }
        if (w->rank == 0) {
            op_algorithm(w, count, row.algo, sizeof row.algo);
            sh->rows[i] = row;
            perf_print_row(sh, &row);
        }
    }

}

static void *worker(void *arg)
{
    Worker *w = arg;
    if (setjmp(w->fail_jmp) == 0) {
        w->in_worker = 1;
        worker_run(w);
    }
    w->in_worker = 0;
    /* What the rank holds, after a normal run or a failure anywhere in it. The comm
     * itself (and its queued work) is destroyed by main() once every rank returned. */
    if (w->nccl_on) {
        /* Collective, in the same order on every rank; a failed rank skips it (its peers
         * may be anywhere) and leaves its windows to ncclCommDestroy. */
        for (int i = 1; i >= 0 && !w->failed; i--)
            if (w->sym_win[i])
                perf_nccl.CommWindowDeregister(w->ncomm, w->sym_win[i]);
        perf_nccl.CommDestroy(w->ncomm);
    }
    /* After the communicator, which releases any window still registered on them. */
    if (w->sym_sendbuf)
        perf_nccl.MemFree(w->sym_sendbuf);
    if (w->sym_recvbuf)
        perf_nccl.MemFree(w->sym_recvbuf);
    if (w->alg)
        ccl_algorithm_free(w->alg);
    worker_free_buffers(w);
    tool_gpu_close(&w->g);
    free(w->v_send);
    for (int i = 0; i < 3; i++) {
        free(w->agree_buf[i]);
        w->agree_buf[i] = NULL;
        w->agree_cap[i] = 0;
    }
    return NULL;
}

/* ===== main: arguments, the algorithm's proof, communicators, ranks ===== */

/* Proves --algo for N ranks before anything starts, so a file that does not prove is a
 * bad argument (exit 2) and -c can default to the file's collective. */
static void prove_algo(Shared *sh)
{
    Opts *o = &sh->o;
    size_t size;
    char *text = tool_read_file(o->algo, (size_t)16 << 20, &size);
    if (!text)
        tool_usage_error("--algo %s: cannot read: %s", o->algo, strerror(errno));
    Compilation comp;
    int r = cclc_compile_source(&comp, o->algo, text, size, sh->nranks, o->root);
    if (r != 0) {
        const char *d = comp.diag.out ? comp.diag.out : "";
        const char *nl = strchr(d, '\n');
        int first = nl ? (int)(nl - d) : (int)strlen(d);
        if (!tool_quiet_rank()) {
            if (r == COMPILE_NOT_ADMITTED)
                fprintf(stderr, "ccl-perf: error: --algo %s does not admit N = %d: %.*s\n", o->algo, sh->nranks,
                        first, d);
            else
                fprintf(stderr, "ccl-perf: error: --algo %s is not proved for %d ranks: %.*s\n", o->algo, sh->nranks,
                        first, d);
            if (nl && nl[1])
                fputs(nl + 1, stderr);
        }
        exit(2);
    }
    Collective lib = comp.prog->coll;
    if (cclc_coll_is_v(lib))
        tool_usage_error("--algo %s implements %s, which ccl-perf does not run from a file yet (use cclc run, or -c %s "
                         "for the library's)", o->algo, cclc_coll_name(lib), cclc_coll_name(lib));
    PerfColl c = PERF_ALLREDUCE;
    while (perf_colls[c].lib != (int)lib)
        c++;
    sh->hint_lo = comp.prog->size_lo;
    sh->hint_hi = comp.prog->size_hi;
    snprintf(sh->algo_name, sizeof sh->algo_name, "%s (%s)", comp.prog->name, o->algo);
    /* Kept for the heap size, which needs the sweep (see main). */
    sh->algo_comp = comp;
    sh->algo_text = text;
    if (o->coll >= 0 && (PerfColl)o->coll != c)
        tool_usage_error("--algo %s implements %s, but -c says %s", o->algo, perf_colls[c].name, perf_colls[o->coll].name);
    o->coll = (int)c;
}

/* --hint-range: keeps the sizes whose dispatch byte count (the API count times the
 * element size, as the library's `sizes` hints mean it) lies in the --algo file's hint. */
static void hint_filter(Shared *sh)
{
    const Opts *o = &sh->o;
    if (!o->algo)
        tool_usage_error("--hint-range needs --algo FILE");
    if (sh->hint_lo == 0 && sh->hint_hi == 0)
        return;
    size_t units = units_per_size(sh->coll, sh->nranks);
    int n = 0;
    for (int i = 0; i < sh->nsizes; i++) {
        int64_t b = (int64_t)(sh->sizes[i] / units);
        if (b >= sh->hint_lo && b <= sh->hint_hi)
            sh->sizes[n++] = sh->sizes[i];
    }
    if (n == 0)
        tool_usage_error("--hint-range: no size of the sweep is inside %s's `sizes` hint (%lld..%lld bytes per rank's count)",
                    o->algo, (long long)sh->hint_lo, (long long)sh->hint_hi);
    sh->nsizes = n;
}

/* Checks what needs N and the dtype: sizes divisible as the collective needs them. */
static void validate(Shared *sh)
{
    const Opts *o = &sh->o;
    PerfColl c = sh->coll;
    size_t es = ccl_dtype_size(o->dtype), unit = es * units_per_size(c, sh->nranks);
    for (int i = 0; i < sh->nsizes; i++) {
        if (sh->sizes[i] % unit == 0)
            continue;
        char b[32];
        perf_fmt_size(b, sizeof b, sh->sizes[i]);
        if (unit == es)
            tool_usage_error("size %s (%zu bytes) is not a whole number of %s elements (%zu bytes each)", b, sh->sizes[i],
                        ccl_dtype_name(o->dtype), es);
        tool_usage_error("size %s (%zu bytes): %s on %d ranks needs sizes divisible by %zu bytes (ranks x %s size)", b,
                    sh->sizes[i], perf_colls[c].name, sh->nranks, unit, ccl_dtype_name(o->dtype));
    }
    if (o->graph && sh->backend != CCL_BACKEND_GPU)
        tool_usage_error("--graph needs the GPU backend (CUDA graphs); this run uses the CPU backend");
}

/* alltoallv: the most elements any rank receives at any size of the sweep (a column sum
 * of --v-counts' matrix), which sizes every rank's receive buffer. */
static size_t v_max_recv(const Shared *sh)
{
    int n = sh->nranks;
    size_t *row = tool_calloc((size_t)n, sizeof *row), *col = tool_calloc((size_t)n, sizeof *col), most = 0;
    for (int i = 0; i < sh->nsizes; i++) {
        memset(col, 0, sizeof *col * (size_t)n);
        for (int q = 0; q < n; q++) {
            perf_v_row(sh->o.v_counts, n, sh->sizes[i] / sh->pat.esize, q, sh->pat.esize, row);
            for (int p = 0; p < n; p++)
                col[p] += row[p];
        }
        for (int p = 0; p < n; p++)
            most = col[p] > most ? col[p] : most;
    }
    free(row);
    free(col);
    return most;
}

static void describe_method(Shared *sh)
{
    const Opts *o = &sh->o;
    if (o->graph)
        snprintf(sh->method, sizeof sh->method,
                 "CUDA graph of %d ops (%d from 16M), %d timed replays after 1 warm-up replay; CUDA events; "
                 "time per op = replay / ops; median of replays of the max across ranks",
                 o->iters, o->iters >= 5 ? o->iters / 5 : o->iters, o->repeats);
    else if (sh->backend == CCL_BACKEND_GPU)
        snprintf(sh->method, sizeof sh->method,
                 "CUDA events around each op, eager (host launch included), %d ops after %d warm-up%s; "
                 "median over ops of the max across ranks",
                 o->iters, o->warmup, o->check ? ", one at a time (--check)" : " back to back");
    else
        snprintf(sh->method, sizeof sh->method,
                 "host clock (CLOCK_MONOTONIC) around each op and ccl_comm_synchronize, ranks started together; "
                 "%d ops after %d warm-up; median over ops of the max across ranks",
                 o->iters, o->warmup);
}

int main(int argc, char **argv)
{
    static Shared shared;
    Shared *sh = &shared;
    Opts *o = &sh->o;
    parse_args(argc, argv, o);
    if (o->coll < 0 && !o->algo)
        tool_usage_error("-c COLLECTIVE is required (allreduce, allgather, reduce_scatter, alltoall, broadcast, reduce, "
                         "alltoallv, allgatherv or sendrecv)");

    /* NVLink multicast (NVLS) stays off on these machines, for NCCL as for us. */
    const char *nvls = getenv("NCCL_NVLS_ENABLE");
    if (nvls && strcmp(nvls, "0") != 0 && !tool_quiet_rank())
        fprintf(stderr, "ccl-perf: note: NCCL_NVLS_ENABLE=%s overridden to 0 (NVLink multicast stays off)\n", nvls);
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    const char *inj = getenv("CCL_PERF_INJECT_WRONG");
    inject_wrong = inj ? (size_t)strtoull(inj, NULL, 10) : 0;
    inj = getenv("CCL_PERF_INJECT_UNSUPPORTED");
    inject_unsupported = inj ? (size_t)strtoull(inj, NULL, 10) : 0;

    /* One process per rank when a launcher started us, else one process for all. */
    ToolLaunch launch;
    if (tool_launch_open(&launch, o->timeout_ms ? o->timeout_ms : 60000) != 0)
        return 1;
    sh->processes = launch.processes;

    /* The backend, decided here so argument checks and the runtime agree. */
    int ndev = 0;
    char why[256] = "";
    int have_gpu = o->backend != CCL_BACKEND_CPU && tool_cuda_load(&ndev, why, sizeof why) == 0;
    if (o->backend == CCL_BACKEND_GPU && !have_gpu)
        tool_usage_error("--backend gpu: %s", why);
    sh->backend = have_gpu ? CCL_BACKEND_GPU : CCL_BACKEND_CPU;

    sh->nranks = tool_launch_ranks(&launch, o->ranks, sh->backend == CCL_BACKEND_GPU, ndev, 4);
    if (o->root >= sh->nranks)
        tool_usage_error("-r %d: the root must be a rank, 0..%d", o->root, sh->nranks - 1);
    if (o->algo)
        prove_algo(sh);
    else if (o->coll == PERF_SENDRECV)
        snprintf(sh->algo_name, sizeof sh->algo_name,
                 "none: ccl_send to rank r+1 and ccl_recv from rank r-1 in one group (a ring)");
    else
        snprintf(sh->algo_name, sizeof sh->algo_name, "the library's choice per size (ccl_%s)",
                 o->coll == PERF_ALLREDUCE ? "all_reduce" : o->coll == PERF_ALLGATHER ? "all_gather"
                 : o->coll == PERF_ALLTOALL ? "all_to_all" : o->coll == PERF_ALLTOALLV ? "all_to_all_v"
                 : o->coll == PERF_ALLGATHERV ? "all_gather_v"
                 : perf_colls[o->coll].name);
    sh->coll = (PerfColl)o->coll;
    if (perf_colls[sh->coll].rooted == 0)
        o->root = 0;
    sh->nsizes = sweep_sizes(o, sh->sizes);
    if (o->hint_range)
        hint_filter(sh);
    validate(sh);
    describe_method(sh);

    sh->nc.wanted = o->compare_nccl;
    if (o->compare_nccl && sh->backend != CCL_BACKEND_GPU)
        snprintf(sh->nc.why, sizeof sh->nc.why, "NCCL needs the GPU backend; this run uses the CPU backend%s%s%s",
                 why[0] ? " (" : "", why, why[0] ? ")" : "");
    else if (o->compare_nccl)
        perf_nccl_load(&sh->nc);
    perf_nccl_modes(&sh->nc, o->nccl_mode);

    perf_pattern_init(&sh->pat, sh->nranks, sh->coll, o->op, o->dtype);

    /* The symmetric heap (physical memory on each GPU) holds both buffers (under
     * --buffers plain they live outside it), staging copies of them where a program is
     * not valid in place or, under --buffers plain, where peers reach them, and the
     * algorithms' scratch: the --algo file's exactly (docs/internals.md's layout; an LL
     * program's lines too), or for the library at most 4x the larger buffer (the shipped
     * algorithms within their `sizes` hints, LL lines included). Staging and scratch
     * grow with the sweep and the runtime keeps the smaller regions until the
     * communicator is destroyed, so each counts twice (the sum of a doubling sweep).
     * CCL_HEAP_BYTES, when set, decides instead. */
    size_t maxb = sh->sizes[sh->nsizes - 1], es = sh->pat.esize, units = units_per_size(sh->coll, sh->nranks);
    size_t maxcount = maxb / es / units;
    if (sh->coll == PERF_ALLTOALLV)
        sh->v_recv_max = v_max_recv(sh);
    size_t inb = in_elems(sh->coll, sh->nranks, maxcount) * es, outb = out_elems(sh->coll, sh->nranks, maxcount) * es;
    if (sh->coll == PERF_ALLTOALLV)
        outb = sh->v_recv_max * es;
    size_t big = inb > outb ? inb : outb, scratch = 4 * big;
    if (o->algo) {
        const Program *prog = sh->algo_comp.prog;
        size_t CS = ccl__chunk_stride(maxcount, prog->chunks, es);
        scratch = prog->protocol == PROTO_SIMPLE ? ccl__scratch_offset(prog, prog->nbufs, CS, es)
                                                 : ccl__ll_region_bytes(prog, prog->protocol, CS, es);
        cclc_compilation_free(&sh->algo_comp);
        free(sh->algo_text);
    }
    size_t heap = 3 * (inb + outb) + 2 * scratch + (64u << 20);
    /* The library's table may pick LL programs beyond their hints, whose lines take
     * many times the buffer (allpairs at 512 KB on 4 GPUs: 8 MB), so on a GPU the
     * library runs with at least the heap its users get by default. */
    if (!o->algo && sh->backend == CCL_BACKEND_GPU && heap < CCL__HEAP_DEFAULT)
        heap = CCL__HEAP_DEFAULT;
    ccl_config_t cfg = {.backend = sh->backend, .timeout_ms = o->timeout_ms,
                        .heap_bytes = getenv("CCL_HEAP_BYTES") ? 0 : heap};

    if (tool_launch_comms(&launch, &cfg, ndev) != 0)
        return 1;
    int nw = launch.nlocal;
    Worker *ws = tool_calloc((size_t)nw, sizeof *ws);
    for (int i = 0; i < nw; i++)
        ws[i] = (Worker){.sh = sh, .o = o, .comm = launch.comms[i], .boot = &launch.boots[i],
                         .rank = launch.first_rank + i, .device = sh->processes ? launch.device : i,
                         .nranks = sh->nranks, .gpu = sh->backend == CCL_BACKEND_GPU, .tb = launch.tb};
    if (tool_launch_run(&launch, worker, ws, sizeof *ws) != 0)
        return 1;
    int code = 0;
    for (int i = 0; i < nw; i++)
        code = ws[i].exit_code > code ? ws[i].exit_code : code;

    if (code == 0 && ws[0].rank == 0) {
        long long wrong;
        perf_print_footer(sh, &wrong);
        if (wrong || perf_refused_sizes(sh))
            code = 1;
        if (o->csv && perf_write_csv(sh, o->csv) != 0)
            code = 1;
        if (o->json && perf_write_json(sh, o->json) != 0)
            code = 1;
        if (o->plot && perf_write_svg(sh, o->plot) != 0)
            code = 1;
    }
    fflush(stdout);
    /* Every process learns the outcome (rank 0 alone knows the wrong count) and they
     * leave together, so no peer unmaps a heap another still reads. A process that
     * failed skips it: its peers may be in any other agreement, which then fails. */
    if (sh->processes && !ws[0].failed && agree_sum(&ws[0], code) > 0 && code == 0)
        code = 1;
    for (int i = 0; i < 3; i++)
        free(ws[0].agree_buf[i]);
    tool_launch_close(&launch);
    perf_pattern_fini(&sh->pat, sh->nranks);
    free(ws);
    return code;
}
