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
 * "registered" times the user's own memory made reachable by ccl_mem_register: on a GPU
 * cuMemCreate memory as PyTorch's expandable segments make it (tool_gpu_alloc_shareable),
 * registered once per buffer before any timing and deregistered at the end, which CCL
 * then uses in place; on the CPU backend malloc memory, in one process only (a
 * registration there is recorded, and CCL still stages; across processes private memory
 * cannot be registered at all, so the run is refused). The table's header, the CSV and
 * the JSON say which buffers a run used.
 *
 * NCCL is timed two ways (--nccl-mode best, the default): "plain", on the very buffers
 * ours use (CCL's heap, ordinary memory under --buffers plain, the registered memory
 * under --buffers registered: NCCL sees each as ordinary device memory, unregistered with
 * it), and "sym", on buffers from ncclMemAlloc registered with
 * ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC), where NCCL 2.27+ runs its
 * symmetric kernels (built for small and medium messages). The ratio is taken against
 * the faster of the two (perf_nccl_faster), so the bar is the strongest NCCL. A library
 * without windows is timed plain only, and the header says why.
 *
 * Two ways to run, one code path per rank (perf_worker(), worker.c):
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
#include <ctype.h>

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
          "      --check          check every op against the exact expected result (--graph: as many\n"
          "                       replays of the timed graph again, untimed, each checked)\n"
          "      --compare nccl   time NCCL in the same run (GPU backend; CCL_NCCL_LIB=path)\n"
          "      --nccl-mode M    plain (NCCL on our buffers), sym (on its symmetric windows, 2.27+)\n"
          "                       or best (both; ratios against the faster) [best]\n"
          "      --v-counts K     alltoallv's and allgatherv's counts: proportional or zipf (below)\n"
          "                       [proportional]\n"
          "      --buffers B      symmetric (ccl_mem_alloc: CCL's heap) or plain (ordinary memory, as\n"
          "                       a framework's tensors: cuMemAlloc, malloc on the CPU; CCL stages it\n"
          "                       where it needs symmetric memory; NCCL plain runs on it too) or\n"
          "                       registered (the user's memory, registered with ccl_mem_register once\n"
          "                       per buffer before timing: on GPUs cuMemCreate memory as PyTorch's\n"
          "                       expandable segments make it, used in place; on the CPU, threads only,\n"
          "                       malloc, still staged; NCCL plain runs on it too) [symmetric]\n"
          "      --heap H         CCL's heap: fit (sized to the sweep, regions as large: every size runs\n"
          "                       whole), default (libccl's, as a user who sizes nothing gets it: ordinary\n"
          "                       buffers' staging may run in pieces) or a size [fit for symmetric buffers,\n"
          "                       default for plain and registered; CCL_HEAP_BYTES decides where set]\n"
          "      --csv F, --json F, --plot F.svg   write the results\n"
          "      --backend B      cpu, gpu or auto [auto: gpu when one is present]\n"
          "  -n, --iters N        timed ops per size (ops per graph with --graph) [20]\n"
          "  -w, --warmup N       untimed ops first (ours: at least 1) [5]\n"
          "      --repeats N      graph replays per size (--graph) [10]\n"
          "      --large-ops N    ops per graph from 16 MB (--graph) [a fifth of -n, as the NCCL\n"
          "                       baselines; NCCL's kernels gain more than ours from back-to-back ops]\n"
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
            else if (!strcmp(val, "registered"))
                o->buffers = PERF_BUF_REGISTERED;
            else
                tool_usage_error("--buffers %s: expected symmetric, plain or registered", val);
        } else if (tool_is(&a, "--heap", NULL)) {
            const char *val = tool_value(&a);
            o->heap = !strcmp(val, "fit") ? PERF_HEAP_FIT : !strcmp(val, "default") ? PERF_HEAP_DEFAULT : PERF_HEAP_SIZE;
            if (o->heap == PERF_HEAP_SIZE &&
                (!isdigit((unsigned char)val[0]) || (o->heap_bytes = (size_t)tool_size(flag, val)) == 0))
                tool_usage_error("--heap %s: expected fit, default or a size in bytes (K, M, G suffixes)", val);
        } else if (tool_is(&a, "--csv", NULL)) {
            o->csv = tool_value(&a);
        } else if (tool_is(&a, "--json", NULL)) {
            o->json = tool_value(&a);
        } else if (tool_is(&a, "--plot", NULL)) {
            o->plot = tool_value(&a);
        } else if (tool_is(&a, "--repeats", NULL)) {
            o->repeats = tool_int(flag, tool_value(&a), 1, PERF_MAX_ITERS);
        } else if (tool_is(&a, "--large-ops", NULL)) {
            o->large_ops = tool_int(flag, tool_value(&a), 1, PERF_MAX_ITERS);
        } else {
            tool_unknown(&a);
        }
    }
    if (o->large_ops && !o->graph)
        tool_usage_error("--large-ops %d: the ops per CUDA graph from 16 MB; it needs --graph", o->large_ops);
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
    /* With --algo and no -c, the file's collective decides (prove_algo checks it there). */
    o->v_counts_given = v_counts != NULL;
    if (v_counts && (o->coll >= 0 || !o->algo) && o->coll != PERF_ALLTOALLV && o->coll != PERF_ALLGATHERV)
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
    if (o->v_counts_given && c != PERF_ALLTOALLV && c != PERF_ALLGATHERV)
        tool_usage_error("--v-counts: only alltoallv and allgatherv take counts, not %s (--algo %s)", perf_colls[c].name,
                         o->algo);
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
    if (o->buffers == PERF_BUF_REGISTERED && sh->backend != CCL_BACKEND_GPU && sh->processes)
        tool_usage_error("--buffers registered is not available on the CPU backend with one process per rank: "
                         "libccl registers there only memory every process can map, and a process's malloc memory "
                         "is its own (docs/api.md, \"Registered memory\"); run the ranks as threads of one process "
                         "(--ranks N, no launcher) or on GPUs");
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
                 o->iters, perf_graph_ops(o, (size_t)16 << 20), o->repeats);
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
    perf_inject_wrong = inj ? (size_t)strtoull(inj, NULL, 10) : 0;
    inj = getenv("CCL_PERF_INJECT_UNSUPPORTED");
    perf_inject_unsupported = inj ? (size_t)strtoull(inj, NULL, 10) : 0;

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
     * --buffers plain and registered they live outside it), staging copies of them where
     * a program is not valid in place or, under --buffers plain (and registered on the
     * CPU backend, or for the v-collectives), where peers reach them, and the
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
    if (!o->algo && sh->backend == CCL_BACKEND_GPU && heap < CCL__HEAP_DEFAULT_GPU)
        heap = CCL__HEAP_DEFAULT_GPU;
    /* --heap fit: a heap sized for the sweep runs every size whole, with regions as large
     * as the heap (the runtime's default, a quarter of it, would cut the largest sizes
     * into pieces; CCL_REGION_BYTES, when set, decides instead): CCL's best case, and
     * what symmetric buffers need. --heap default: what a user who sizes nothing gets,
     * ordinary buffers' staging in pieces where it passes libccl's regions. */
    int mode = o->heap != PERF_HEAP_UNSET                ? o->heap
               : o->buffers == PERF_BUF_SYMMETRIC ? PERF_HEAP_FIT
                                                  : PERF_HEAP_DEFAULT;
    ccl_config_t cfg = {.backend = sh->backend, .timeout_ms = o->timeout_ms};
    const char *env_heap = getenv("CCL_HEAP_BYTES");
    if (env_heap) {
        snprintf(sh->heap, sizeof sh->heap, "CCL_HEAP_BYTES=%s, regions a quarter of it unless CCL_REGION_BYTES says",
                 env_heap);
    } else if (mode == PERF_HEAP_FIT) {
        char region[32];
        snprintf(region, sizeof region, "%zu", heap);
        setenv("CCL_REGION_BYTES", region, 0);
        cfg.heap_bytes = heap;
        snprintf(sh->heap, sizeof sh->heap, "%zu bytes, sized to the sweep, regions as large (--heap fit)", heap);
    } else if (mode == PERF_HEAP_SIZE) {
        cfg.heap_bytes = o->heap_bytes;
        snprintf(sh->heap, sizeof sh->heap, "%zu bytes (--heap), regions a quarter of it", o->heap_bytes);
    } else {
        snprintf(sh->heap, sizeof sh->heap, "libccl's default (--heap default: %s, regions a quarter of it)",
                 sh->backend == CCL_BACKEND_GPU ? "1 GiB" : "256 MiB, less where /dev/shm has less");
    }

    if (tool_launch_comms(&launch, &cfg, ndev) != 0)
        return 1;
    int nw = launch.nlocal;
    Worker *ws = tool_calloc((size_t)nw, sizeof *ws);
    for (int i = 0; i < nw; i++)
        ws[i] = (Worker){.sh = sh, .o = o, .comm = launch.comms[i], .boot = &launch.boots[i],
                         .rank = launch.first_rank + i, .device = sh->processes ? launch.device : i,
                         .nranks = sh->nranks, .gpu = sh->backend == CCL_BACKEND_GPU, .tb = launch.tb};
    if (tool_launch_run(&launch, perf_worker, ws, sizeof *ws) != 0)
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
    if (sh->processes && !ws[0].failed && perf_agree_sum(&ws[0], code) > 0 && code == 0)
        code = 1;
    for (int i = 0; i < 3; i++)
        free(ws[0].agree_buf[i]);
    tool_launch_close(&launch);
    perf_pattern_fini(&sh->pat, sh->nranks);
    free(ws);
    return code;
}
