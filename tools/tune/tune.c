/* ccl-tune: measures the shipped algorithms and launch shapes per message size and
 * writes the tuning table that libccl's standard collectives follow (docs/tuner.md).
 *
 *   ccl-tune -c allreduce -b 1K -e 1G -o tune.tbl            (GPU: every visible GPU)
 *   ccl-tune --ranks 4 -c allreduce,allgather -b 1K -e 64K   (CPU backend)
 *   mpirun -np 4 ccl-tune -c all -o tune.tbl                  (one process per rank)
 *
 * What it takes: collectives, a power-of-two size range (the dispatch's bytes: count x
 * element size, count with NCCL's per-collective meaning, so allgather's send size),
 * and the shape space: instances, threads per block and protocols (GPU) and slices.
 * What it gives: per collective and size, the fastest candidate as one table line
 * (with its time and the incumbent's as a comment), written by rank 0 to -o FILE or to
 * the default table location in the cache folder (after every collective, so that a run
 * cut short keeps what it measured), every row it did not measure copied from the table
 * in force; and a summary on stdout. With --buffers plain it times ordinary buffers
 * (cuMemAlloc, malloc on the CPU), as a framework's tensors, and writes the rows for
 * them (NAME:plain), the incumbent being what libccl runs for such buffers today.
 *
 * How. Candidates are the library's algorithm files of the collective that admit N
 * (each loaded once to read its Plan), times every shape. A simple alpha-beta model
 * (below) ranks them per size; the --keep best, plus the best shape of every file that
 * the model puts within --slack of the best, are timed, and with them the incumbent:
 * what the standard collective runs for that size today (libccl's own choice, ccl__pick:
 * the entry of the table in force before this run writes one, else the `sizes` hints),
 * so that the row written never timed slower than the choice it replaces (the model
 * alone once chose shapes at 2x the built-in table's time); --no-incumbent leaves it
 * out, to study the model alone. Candidates are grouped by variant (file, instances,
 * protocol), loaded one at a time (its scratch freed after), and timed at every size
 * where they were kept: on GPUs a CUDA graph of --iters calls replayed --reps times
 * between CUDA events (or events around eager calls with --no-graph); on the CPU the
 * host's monotonic clock around --iters calls and ccl_comm_synchronize. Each sample is
 * the maximum over ranks (a bootstrap allgather), the time the median of the samples;
 * every rank computes the same choices from the same agreed numbers, so all ranks agree
 * on the table.
 *
 * Exit status: 0; 1 when a run failed; 2 for bad arguments (one line saying which). */
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tune.h"

/* ===== options ===== */

static const char *help =
    "usage: ccl-tune [options]\n"
    "  -c LIST          collectives: allreduce,allgather,reduce_scatter,alltoall,broadcast,reduce or all (allreduce)\n"
    "  -b SIZE -e SIZE  smallest and largest size, powers of two (1K and 1G on GPUs, 1K and 64K on the CPU)\n"
    "  -d DTYPE         element type (bf16 on GPUs, f32 on the CPU); --op OP (sum)\n"
    "  --ranks N        ranks in one process (CPU: 4; GPU: every visible GPU); under mpirun: the launcher's\n"
    "  --backend cpu|gpu  (default: GPU when one is present)\n"
    "  --instances LIST instances per logical block (1,2,4,8,16,32,64 on GPUs; 1,2,4 on the CPU)\n"
    "  --threads LIST   threads per block, GPU (512); --slices LIST (1, and the program's default)\n"
    "  --protocols LIST of simple, ll, ll128 (GPU; default all: a Simple program runs any,\n"
    "                   an LL or LL128 one either line protocol)\n"
    "  --keep K         candidates timed per size, the model's best (4); and per algorithm its --per-algo P\n"
    "                   best shapes (GPU 3, CPU 2) where the model puts them within --slack X of the best (3.0)\n"
    "  --buffers B      symmetric (ccl_mem_alloc, the default) or plain (ordinary memory, as a framework's\n"
    "                   tensors: cuMemAlloc, malloc on the CPU): plain writes the rows for such buffers,\n"
    "                   NAME:plain (docs/tuner.md), and keeps the others as they are in force\n"
    "  --no-incumbent   time only the model's candidates; by default the incumbent, what libccl runs for\n"
    "                   the size today (its table's entry, else the sizes hints), is timed with them, so the\n"
    "                   row written is never slower than the choice it replaces\n"
    "  --iters I --reps R --warmup W   calls per sample, samples, warm-up calls (20, 5, 2; CPU: 5, 3, 1)\n"
    "  --no-graph       GPU: time eager calls between events instead of CUDA graphs\n"
    "  --alpha-us X --block-gbps X --peak-gbps X   the model's latency per step, bandwidth per block, peak\n"
    "  -o FILE          the table (default: the cache folder's tune-<device>-<N>.tbl, which libccl reads)\n"
    "  --dry-run        print the candidates the model keeps, time nothing; -v: every timing\n"
    "  --model cpu|gpu  the model's parameters and shape space (default: the backend's; for --dry-run studies)\n"
    "  --timeout-ms MS  bound on every wait (60000)\n";

/* --protocols' comma-separated list as bits (1 << Protocol). */
static int parse_protocols(const char *list)
{
    int bits = 0;
    char buf[64];
    CCL__FMT(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *name = strtok_r(buf, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        int p = cclc_proto_parse(name);
        if (p < 0)
            tool_usage_error("--protocols %s: '%s' is not simple, ll or ll128", list, name);
        bits |= 1 << p;
    }
    if (!bits)
        tool_usage_error("--protocols '%s': expected a list of simple, ll, ll128", list);
    return bits;
}

static void parse_args(int argc, char **argv, Opts *o)
{
    *o = (Opts){.dtype = CCL_NUM_DTYPES, .op = CCL_SUM, .keep = 4, .slack = 3.0, .graph = -1,
                .backend = CCL_BACKEND_AUTO, .timeout_ms = 60000, .model = -1, .incumbent = 1};
    int any_coll = 0;
    tool_init("ccl-tune", "ccl-tune --help", NULL);
    const ToolShared shared = {.ranks = &o->ranks, .max_ranks = 64, .backend = &o->backend, .dtype = &o->dtype,
                               .op = &o->op, .iters = &o->iters, .warmup = &o->warmup, .max_iters = MAX_REPS,
                               .timeout_ms = &o->timeout_ms};
    ToolArgs args = tool_args(argc, argv, 1, &shared);
    while (tool_next(&args)) {
        const char *a = args.flag, *v;
        if (tool_is(&args, "-h", "--help")) {
            fputs(help, stdout);
            exit(0);
        } else if (tool_is(&args, "-c", NULL)) {
            v = tool_value(&args);
            char buf[256];
            CCL__FMT(buf, sizeof buf, "%s", v);
            char *save = NULL;
            for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                int found = 0;
                for (int c = 0; c < CCL__TUNE_COLLS; c++) {
                    int named = !strcmp(t, cclc_coll_name((Collective)c));
                    if (named && cclc_coll_is_v((Collective)c))
                        tool_usage_error("-c %s: ccl-tune times the fixed-size collectives only; a table's %s rows "
                                         "are written by hand from ccl-perf sweeps (docs/tuner.md)", v, t);
                    if (named || (!strcmp(t, "all") && !cclc_coll_is_v((Collective)c))) {
                        o->colls[c] = 1;
                        found = 1;
                    }
                }
                if (!found)
                    tool_usage_error("-c %s: '%s' is not a collective (allreduce, allgather, reduce_scatter, "
                                     "alltoall, broadcast, reduce, all)", v, t);
                any_coll = 1;
            }
        } else if (tool_is(&args, "-b", NULL) || tool_is(&args, "-e", NULL)) {
            v = tool_value(&args);
            uint64_t s = tool_size(a, v);
            if (s == 0 || (s & (s - 1)) || s > (1ull << 47))
                tool_usage_error("%s %s: not a power of two up to 2^47 (1024, 4K, 1M ...)", a, v);
            *(a[1] == 'b' ? &o->lo : &o->hi) = (size_t)s;
        } else if (tool_is(&args, "--instances", NULL)) {
            o->ninst = tool_int_list(a, tool_value(&args), o->inst, MAX_LIST, 1, 64);
        } else if (tool_is(&args, "--threads", NULL)) {
            v = tool_value(&args);
            o->nthreads = tool_int_list(a, v, o->threads, MAX_LIST, 32, 512);
            for (int k = 0; k < o->nthreads; k++)
                if (o->threads[k] % 32)
                    tool_usage_error("--threads %s: %d is not a multiple of 32", v, o->threads[k]);
        } else if (tool_is(&args, "--slices", NULL)) {
            o->nslices = tool_int_list(a, tool_value(&args), o->slices, MAX_LIST, 1, 64);
        } else if (tool_is(&args, "--protocols", NULL)) {
            o->protos = parse_protocols(tool_value(&args));
        } else if (tool_is(&args, "--keep", NULL)) {
            o->keep = tool_int(a, tool_value(&args), 1, 64);
        } else if (tool_is(&args, "--per-algo", NULL)) {
            o->per_algo = tool_int(a, tool_value(&args), 1, 64);
        } else if (tool_is(&args, "--slack", NULL)) {
            v = tool_value(&args);
            o->slack = atof(v);
            if (!(o->slack >= 1.0))
                tool_usage_error("--slack %s: not a factor >= 1", v);
        } else if (tool_is(&args, "--reps", NULL)) {
            o->reps = tool_int(a, tool_value(&args), 1, MAX_REPS);
        } else if (tool_flag(&args, "--no-graph")) {
            o->graph = 0;
        } else if (tool_flag(&args, "--no-incumbent")) {
            o->incumbent = 0;
        } else if (tool_is(&args, "--buffers", NULL)) {
            static const char *const kinds[] = {"symmetric", "plain"};
            o->plain = tool_choice(a, tool_value(&args), kinds, 2);
        } else if (tool_is(&args, "--alpha-us", NULL) || tool_is(&args, "--block-gbps", NULL) ||
                   tool_is(&args, "--peak-gbps", NULL)) {
            v = tool_value(&args);
            double x = atof(v);
            if (!(x > 0))
                tool_usage_error("%s %s: not a positive number", a, v);
            *(a[2] == 'a' ? &o->alpha_us : a[2] == 'b' ? &o->block_gbps : &o->peak_gbps) = x;
        } else if (tool_is(&args, "-o", NULL)) {
            o->out = tool_value(&args);
        } else if (tool_is(&args, "--model", NULL)) {
            static const char *const models[] = {"cpu", "gpu"};
            o->model = tool_choice(a, tool_value(&args), models, 2);
        } else if (tool_flag(&args, "--dry-run")) {
            o->dry_run = 1;
        } else if (tool_is(&args, "-v", NULL)) {
            o->verbose = 1;
        } else {
            tool_unknown(&args);
        }
    }
    if (!any_coll)
        o->colls[COLL_ALLREDUCE] = 1;
}

/* ===== ranks ===== */

typedef struct Shared Shared;

typedef struct {
    Shared *sh;
    int rank, nranks;
    ccl_comm_t *comm;
    ccl_bootstrap_t *boot;
    CclThreadBoot *tb;
    int gpu;
    ToolGpu g;                       /* GPU: the stream timed, an event pair, the graph */
    void *stream;                    /* g's stream (NULL on the CPU), for ccl_algorithm_run */
    void *in, *out;
    int code;                        /* exit status of this rank */
    char err[1024];
} Worker;

struct Shared {
    Opts o;
    int nranks, gpu, processes;
    size_t sizes[MAX_SIZES];
    int nsizes;
    CclTuneTable table;
    char notes[CCL__TUNE_COLLS][CCL__TUNE_BUCKETS][320]; /* table.e's notes (rank 0's) */
};

static void say(Worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(Worker *w, const char *fmt, ...)
{
    if (w->rank != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

/* The maximum of v over ranks (every rank gets it); NAN when the bootstrap failed. */
static double agree_max(Worker *w, double v)
{
    double all[64];
    if (tool_allgather(w->boot, w->nranks, &v, all, sizeof v, NULL) != 0)
        return NAN;
    double m = all[0];
    for (int r = 1; r < w->nranks; r++)
        if (all[r] > m || isnan(all[r]))
            m = all[r];
    return m;
}

/* Counts of the call for `bytes` of collective c (the dispatch's bytes: count x esize). */
static size_t count_for(const Shared *sh, size_t bytes)
{
    size_t es = ccl_dtype_size(sh->o.dtype);
    return bytes / es;
}

/* Times alg at `bytes`; the agreed median of per-sample maxima (us), or a negative
 * number when the call failed on some rank (-1: skip the candidate; -2: the
 * communicator is dead, stop). */
static double time_one(Worker *w, ccl_algorithm_t *alg, size_t bytes)
{
    Shared *sh = w->sh;
    const Opts *o = &sh->o;
    size_t count = count_for(sh, bytes);
    ccl_result_t r = CCL_OK;
    /* Large calls need fewer per sample (as ccl-perf: 4 per graph from 16 MB). */
    int iters = !o->iters_given && bytes >= ((size_t)16 << 20) && o->iters > 4 ? 4 : o->iters;
    /* Warm-up, eager: compiles the kernel and grows scratch before any capture. */
    for (int i = 0; i < (o->warmup > 0 ? o->warmup : 1) && r == CCL_OK; i++)
        r = ccl_algorithm_run(alg, w->in, w->out, count, o->dtype, o->op, w->stream);
    ccl_result_t s = ccl_comm_synchronize(w->comm);
    if (r == CCL_OK)
        r = s;
    /* 1: this call failed before it ran (out of heap, say; the same on every rank);
     * 2: the communicator failed while running (sticky: stop). */
    double bad = agree_max(w, w->comm->failed ? 2 : r != CCL_OK ? 1 : 0);
    if (bad != 0) {
        if (r != CCL_OK && w->rank == 0 && o->verbose)
            printf("  skip %s at %zu: %s\n", alg->file, bytes, ccl_comm_last_error(w->comm));
        return isnan(bad) || bad >= 2 ? -2 : -1;
    }
    double samples[MAX_REPS];
    int n = 0;
    if (w->gpu) {
        /* The harness's GPU clock (tools/common/timing.c): a graph of `iters` calls
         * replayed between an event pair, or the calls themselves between it. */
        ToolGpu *g = &w->g;
        int ok = 1;
        int graph = o->graph != 0;
        if (graph) {
            int began = tool_gpu_capture_begin(g) == 0;
            for (int i = 0; began && ok && i < iters; i++)
                ok = ccl_algorithm_run(alg, w->in, w->out, count, o->dtype, o->op, w->stream) == CCL_OK;
            /* The capture ends even after a failed call (the stream must leave it). */
            int made = began && tool_gpu_capture_end(g) == 0;
            ok = ok && made;
            /* Replay only where every rank has its graph: a lone replay would wait for
             * peers that never come (until the kernels' timeout kills the comm). */
            if (agree_max(w, ok ? 0 : 1) != 0)
                ok = 0;
            else
                ok = tool_gpu_replay(g) == 0 && tool_gpu_sync(g) == 0;
        }
        for (int rep = 0; rep < o->reps; rep++) {
            if (agree_max(w, ok ? 0 : 1) != 0) {
                ok = 0;
                break;
            }
            w->boot->barrier(w->boot->ctx);
            ok = tool_gpu_mark(g, 0, 0) == 0;
            if (graph)
                ok = ok && tool_gpu_replay(g) == 0;
            else
                for (int i = 0; ok && i < iters; i++)
                    ok = ccl_algorithm_run(alg, w->in, w->out, count, o->dtype, o->op, w->stream) == CCL_OK;
            double us = 0;
            ok = ok && tool_gpu_mark(g, 0, 1) == 0 && tool_gpu_elapsed_us(g, 0, iters, &us) == 0;
            double m = agree_max(w, ok ? us : INFINITY);
            if (isnan(m) || isinf(m)) {
                ok = 0;
                break;
            }
            samples[n++] = m;
        }
        tool_gpu_graph_free(g);
        if (ccl_comm_synchronize(w->comm) != CCL_OK)
            return -2;
        if (!ok)
            return -1;
    } else {
        for (int rep = 0; rep < o->reps; rep++) {
            w->boot->barrier(w->boot->ctx);
            double t0 = tool_now_us();
            for (int i = 0; i < iters && r == CCL_OK; i++)
                r = ccl_algorithm_run(alg, w->in, w->out, count, o->dtype, o->op, w->stream);
            if (r == CCL_OK)
                r = ccl_comm_synchronize(w->comm);
            double m = agree_max(w, r == CCL_OK ? (tool_now_us() - t0) / iters : INFINITY);
            if (isnan(m) || isinf(m))
                return -2;
            samples[n++] = m;
        }
    }
    return tool_median(samples, n);
}

/* After freeing algorithms: every rank has zeroed their semaphore blocks before any
 * rank runs an algorithm that reuses those offsets (a free zeroes only this rank's
 * copy, and a faster peer's signals into the new algorithm would be wiped). */
static void settle(Worker *w)
{
    w->boot->barrier(w->boot->ctx);
}

/* Loads the file at path (in the library folder dir, or elsewhere) to read what the
 * model needs into *a, and frees it again: 1 when it is an algorithm of collective c
 * that admits N, else 0 (the same on every rank). The caller settles after its loads. */
static int read_algo(Worker *w, Collective c, const char *dir, const char *path, Algo *a)
{
    ccl_algorithm_t *alg;
    if (ccl_algorithm_load(w->comm, path, 0, &alg) != CCL_OK)
        return 0;
    int ours = alg->prog->coll == c;
    if (ours) {
        memset(a, 0, sizeof *a);
        CCL__FMT(a->path, sizeof a->path, "%s", path);
        /* Named as tables name it: relative to the library folder, else absolute. */
        size_t dl = strlen(dir);
        const char *rel = dl && !strncmp(path, dir, dl) && path[dl] == '/' ? path + dl + 1 : path;
        CCL__FMT(a->rel, sizeof a->rel, "%s", rel);
        a->coll = c;
        tune_algo_features(a, alg);
    }
    ccl_algorithm_free(alg);
    return ours;
}

/* The library's files of collective c that admit N, in name order (as libccl). */
static int find_algos(Worker *w, Collective c, Algo *algos, int max)
{
    char dir[PATH_MAX];
    if (ccl__library_dir(dir, sizeof dir) != 0) {
        CCL__FMT(w->err, sizeof w->err, "%s", dir);
        return -1;
    }
    /* Every folder's files, in name order: a file's header, not its folder, names its
     * collective (as library.c reads them). */
    char pattern[PATH_MAX + 16];
    CCL__FMT(pattern, sizeof pattern, "%s/*/*.ccl", dir);
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0) {
        CCL__FMT(w->err, sizeof w->err, "no algorithm files in %s", dir);
        return -1;
    }
    int n = 0, np = (int)g.gl_pathc;
    char **paths = g.gl_pathv;
    for (int i = 0; i < np && n < max; i++)
        n += read_algo(w, c, dir, paths[i], &algos[n]);
    globfree(&g);
    settle(w);
    return n;
}

/* Whether the GPU's model and shape space apply (the backend's, or --model). */
static int model_gpu(const Shared *sh)
{
    return sh->o.model >= 0 ? sh->o.model : sh->gpu;
}

/* The incumbent of collective c at `bytes`: what the standard collective runs on this
 * comm today, as its dispatch picks it (ccl__pick: the table's entry, else the `sizes`
 * hints; the table was looked for before anything was written, see worker), as a
 * candidate: the index in cands of one with its file and shape (the model's grid may
 * have it), else of one added (and its file to algos, where the grid lacks it). -1 and
 * the reason in why when it cannot be timed. Every rank makes the same calls: what
 * ccl__pick loads stays loaded in the same order everywhere, as for the library. */
static int incumbent(Worker *w, Collective c, size_t bytes, Algo *algos, int *na, Cand *cands, int *nc, int max,
                     char *why, size_t len)
{
    ccl_algorithm_t *alg;
    if (ccl__pick(w->comm, c, 0, bytes, w->sh->o.plain, "ccl-tune", &alg) != CCL_OK) {
        const char *e = ccl_comm_last_error(w->comm);
        CCL__FMT(why, len, "%.*s", (int)strcspn(e, "\n"), e);
        return -1;
    }
    if (w->sh->o.verbose) {
        char how[1024];
        if (ccl_comm_explain_choice(w->comm, how, sizeof how) == CCL_OK)
            say(w, "  incumbent: %s\n", how);
    }
    /* Copies: the loads below may move what alg points into. */
    char path[PATH_MAX];
    CCL__FMT(path, sizeof path, "%s", alg->file);
    CclShape shape = {.instances = alg->instances, .threads = w->gpu ? alg->shape.threads : 0, .slices = alg->slices};
    int field = alg->shape.protocol;
    int a = 0;
    while (a < *na && strcmp(algos[a].path, path))
        a++;
    if (a == *na) {
        char dir[PATH_MAX];
        if (*na == MAX_ALGOS) {
            CCL__FMT(why, len, "%s: more than %d algorithm files", path, MAX_ALGOS);
            return -1;
        }
        if (ccl__library_dir(dir, sizeof dir) != 0)
            dir[0] = 0;
        int ok = read_algo(w, c, dir, path, &algos[a]);
        settle(w);
        if (!ok) {
            CCL__FMT(why, len, "%s: %s", path, ccl_comm_last_error(w->comm));
            return -1;
        }
        (*na)++;
    }
    /* As make_cands writes shapes: the protocol by name where a GPU runs the program
     * with lines (so that the same variant compares equal), else the program's. */
    const Algo *al = &algos[a];
    shape.protocol = w->gpu && al->lines ? 1 + (int)ccl__shape_protocol(field, al->proto) : 0;
    for (int k = 0; k < *nc; k++)
        if (cands[k].algo == a && !memcmp(&cands[k].shape, &shape, sizeof shape))
            return k;
    if (*nc == max) {
        CCL__FMT(why, len, "%s: more than %d candidates", al->rel, max);
        return -1;
    }
    cands[*nc] = (Cand){.algo = a, .shape = shape};
    return (*nc)++;
}

/* Tunes collective c: fills sh->table's entries (rank 0 writes them; every rank
 * computes the same). 0, or -1 when the communicator failed. */
static int tune_collective(Worker *w, Collective c)
{
    Shared *sh = w->sh;
    const Opts *o = &sh->o;
    Algo *algos = calloc(MAX_ALGOS, sizeof *algos);
    Cand *cands = calloc(MAX_CANDS, sizeof *cands);
    /* keep[s][k]: candidate k is timed at size s; t[s][k]: its time. */
    unsigned char *keep = calloc((size_t)MAX_SIZES * MAX_CANDS, 1);
    double *t = calloc((size_t)MAX_SIZES * MAX_CANDS, sizeof *t);
    int rc = 0;
    if (!algos || !cands || !keep || !t) {
        CCL__FMT(w->err, sizeof w->err, "out of memory");
        rc = -1;
        goto done;
    }
    int na = find_algos(w, c, algos, MAX_ALGOS);
    if (na < 0) {
        rc = -1;
        goto done;
    }
    if (na == 0) {
        say(w, "%s: no library algorithm admits N=%d; skipped\n", cclc_coll_name(c), w->nranks);
        goto done;
    }
    /* The grid's candidates, then the incumbents that the grid lacks (inc[s]: size s's,
     * or -1 with inc_why[s]). The model chooses among the grid's alone (k < ngrid), as
     * with --no-incumbent; the incumbents are timed besides. */
    int ngrid = tune_make_cands(o, model_gpu(sh), algos, na, cands, MAX_CANDS - MAX_SIZES), nc = ngrid;
    int inc[MAX_SIZES];
    char inc_why[MAX_SIZES][200];
    for (int s = 0; s < sh->nsizes; s++) {
        inc[s] = -1;
        CCL__FMT(inc_why[s], sizeof inc_why[s], "--no-incumbent");
        if (o->incumbent)
            inc[s] = incumbent(w, c, sh->sizes[s], algos, &na, cands, &nc, MAX_CANDS, inc_why[s], sizeof inc_why[s]);
    }
    Model m = tune_model_for(o, model_gpu(sh));
    for (int s = 0; s < sh->nsizes; s++) {
        double best = INFINITY;
        double *mt = &t[(size_t)s * MAX_CANDS];
        for (int k = 0; k < nc; k++) {
            mt[k] = tune_model_us(&m, &algos[cands[k].algo], &cands[k].shape, sh->sizes[s]);
            if (k < ngrid && mt[k] < best)
                best = mt[k];
        }
        /* The --keep best overall ... */
        for (int j = 0; j < o->keep && j < ngrid; j++) {
            int bk = -1;
            for (int k = 0; k < ngrid; k++)
                if (!keep[(size_t)s * MAX_CANDS + k] && (bk < 0 || mt[k] < mt[bk]))
                    bk = k;
            keep[(size_t)s * MAX_CANDS + bk] = 1;
        }
        /* ... and every algorithm's --per-algo best shapes that the model does not rule
         * out (within --slack of the best): the model ranks shapes of one algorithm
         * better than it ranks algorithms against each other. */
        for (int a = 0; a < na; a++) {
            unsigned char *mine = calloc((size_t)ngrid, 1);
            for (int j = 0; mine && j < o->per_algo; j++) {
                int bk = -1;
                for (int k = 0; k < ngrid; k++)
                    if (cands[k].algo == a && !mine[k] && (bk < 0 || mt[k] < mt[bk]))
                        bk = k;
                if (bk < 0 || mt[bk] > o->slack * best)
                    break;
                mine[bk] = 1;
                keep[(size_t)s * MAX_CANDS + bk] = 1;
            }
            free(mine);
        }
        /* ... and the incumbent, whatever the model thinks of it. */
        if (inc[s] >= 0)
            keep[(size_t)s * MAX_CANDS + inc[s]] = 1;
        if (o->dry_run) {
            /* The kept set, best estimate first, with the estimates. */
            say(w, "%s %zu:", cclc_coll_name(c), sh->sizes[s]);
            for (;;) {
                int bk = -1;
                for (int k = 0; k < nc; k++)
                    if (keep[(size_t)s * MAX_CANDS + k] == 1 && (bk < 0 || mt[k] < mt[bk]))
                        bk = k;
                if (bk < 0)
                    break;
                keep[(size_t)s * MAX_CANDS + bk] = 2;
                char txt[512];
                tune_shape_text(&cands[bk], &algos[cands[bk].algo], txt, sizeof txt);
                say(w, "  [%s ~%.1f us%s]", txt, mt[bk], bk == inc[s] ? ", incumbent" : "");
            }
            if (o->incumbent && inc[s] < 0)
                say(w, "  (no incumbent: %s)", inc_why[s]);
            say(w, "\n");
        }
        for (int k = 0; k < nc; k++)
            mt[k] = keep[(size_t)s * MAX_CANDS + k] ? 0 : -1;
    }
    if (o->dry_run)
        goto done;
    /* Variant by variant: (algorithm, instances, protocol) loaded once, timed at every
     * size and per-run shape kept for it, then freed with its scratch. */
    unsigned char *done_k = calloc((size_t)nc, 1);
    for (int k0 = 0; done_k && k0 < nc && rc == 0; k0++) {
        if (done_k[k0])
            continue;
        const Cand *v = &cands[k0];
        int any = 0;
        for (int k = k0; k < nc; k++) {
            const Cand *x = &cands[k];
            if (x->algo != v->algo || x->shape.instances != v->shape.instances || x->shape.protocol != v->shape.protocol)
                continue;
            done_k[k] = 1;
            for (int s = 0; s < sh->nsizes; s++)
                any |= keep[(size_t)s * MAX_CANDS + k];
        }
        if (!any)
            continue;
        const Algo *a = &algos[v->algo];
        ccl_algorithm_t *alg;
        CclShape vs = {.instances = v->shape.instances, .protocol = v->shape.protocol};
        if (ccl_algorithm_load(w->comm, a->path, 0, &alg) != CCL_OK) {
            CCL__FMT(w->err, sizeof w->err, "%s", ccl_comm_last_error(w->comm));
            rc = -1;
            break;
        }
        if (ccl__tune_reshape(alg, &vs, "ccl-tune") != CCL_OK) {
            if (o->verbose)
                say(w, "  skip %s I=%d: %s\n", a->rel, vs.instances, ccl_comm_last_error(w->comm));
            ccl__algorithm_destroy(alg);
            settle(w);
            for (int k = k0; k < nc; k++)
                if (cands[k].algo == v->algo && cands[k].shape.instances == vs.instances &&
                    cands[k].shape.protocol == vs.protocol)
                    for (int s = 0; s < sh->nsizes; s++)
                        t[(size_t)s * MAX_CANDS + k] = -1;
            continue;
        }
        for (int k = k0; k < nc && rc == 0; k++) {
            const Cand *x = &cands[k];
            if (x->algo != v->algo || x->shape.instances != vs.instances || x->shape.protocol != vs.protocol)
                continue;
            ccl__tune_apply_run(alg, &x->shape, a->slices0);
            for (int s = 0; s < sh->nsizes; s++) {
                double *tt = &t[(size_t)s * MAX_CANDS + k];
                if (*tt < 0)
                    continue;
                *tt = time_one(w, alg, sh->sizes[s]);
                if (*tt == -2) {
                    CCL__FMT(w->err, sizeof w->err, "%s at %zu bytes: %s", a->rel, sh->sizes[s], ccl_comm_last_error(w->comm));
                    rc = -1;
                    break;
                }
                if (o->verbose && *tt > 0) {
                    char txt[512];
                    tune_shape_text(x, a, txt, sizeof txt);
                    say(w, "  %s %zu  %-48s %10.2f us\n", cclc_coll_name(c), sh->sizes[s], txt, *tt);
                }
            }
        }
        ccl_algorithm_free(alg);
        settle(w);
    }
    free(done_k);
    if (rc)
        goto done;
    /* The winners: the fastest timed, the incumbent among them (so never slower than it),
     * and what the incumbent took, for the summary and the row's comment. */
    for (int s = 0; s < sh->nsizes; s++) {
        int bk = -1;
        for (int k = 0; k < nc; k++) {
            double x = t[(size_t)s * MAX_CANDS + k];
            if (x > 0 && (bk < 0 || x < t[(size_t)s * MAX_CANDS + bk]))
                bk = k;
        }
        char txt[512], note[sizeof sh->notes[0][0]] = "";
        if (o->incumbent && inc[s] < 0) {
            CCL__FMT(note, sizeof note, "no incumbent: %s", inc_why[s]);
        } else if (inc[s] >= 0 && inc[s] == bk) {
            CCL__FMT(note, sizeof note, "the incumbent, kept");
        } else if (inc[s] >= 0) {
            double ti = t[(size_t)s * MAX_CANDS + inc[s]];
            tune_shape_text(&cands[inc[s]], &algos[cands[inc[s]].algo], txt, sizeof txt);
            if (ti > 0)
                CCL__FMT(note, sizeof note, "incumbent %s: %.2f us", txt, ti);
            else
                CCL__FMT(note, sizeof note, "incumbent %s: did not run", txt);
        }
        if (bk < 0) {
            say(w, "%-14s %10zu  (no candidate ran)%s%s\n", cclc_coll_name(c), sh->sizes[s], note[0] ? "  " : "", note);
            continue;
        }
        tune_shape_text(&cands[bk], &algos[cands[bk].algo], txt, sizeof txt);
        say(w, "%-14s %10zu  %-48s %10.2f us%s%s%s\n", cclc_coll_name(c), sh->sizes[s], txt,
            t[(size_t)s * MAX_CANDS + bk], note[0] ? "  (" : "", note, note[0] ? ")" : "");
        if (w->rank != 0)
            continue;
        int fi = ccl__tune_file_index(&sh->table, algos[cands[bk].algo].rel);
        if (fi < 0)
            continue;
        CclShape shp = cands[bk].shape;
        /* The CPU runs the program's protocol; say "-" rather than pretend a choice. */
        if (!w->gpu)
            shp.protocol = 0;
        int b = ccl__tune_bucket(sh->sizes[s]);
        CCL__FMT(sh->notes[c][b], sizeof sh->notes[c][b], "%s", note);
        (o->plain ? sh->table.plain : sh->table.e)[c][b] =
            (CclTuneEntry){.file = fi, .shape = shp, .time_us = t[(size_t)s * MAX_CANDS + bk],
                           .note = note[0] ? sh->notes[c][b] : NULL};
        sh->table.has_plain[c] |= o->plain;
    }
done:
    free(algos);
    free(cands);
    free(keep);
    free(t);
    return rc;
}

/* Writes the table to -o FILE or the default place libccl reads; `partial` (rank 0, after
 * each collective) names the collectives done so far in a comment, so that a run cut
 * short (a time limit) leaves what it measured. 0, or -1 with the error printed. */
static int write_table(Shared *sh, const char *partial)
{
    const Opts *o = &sh->o;
    CclTuneTable *t = &sh->table;
    t->nranks = sh->nranks;
    char path[PATH_MAX];
    if (o->out) {
        CCL__FMT(path, sizeof path, "%s", o->out);
    } else {
        /* The default location libccl reads (tuner.c: <cache>/tune-<device>-<N>.tbl),
         * in a folder only this user may write (libccl ignores tables elsewhere). */
        char dev[128], dir[PATH_MAX - 200], dir_why[PATH_MAX];
        CCL__FMT(dev, sizeof dev, "%.127s", t->device);
        for (char *p = dev; *p; p++)
            if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
                  *p == '.'))
                *p = '_';
        if (!ccl__cache_dir(NULL, dir, sizeof dir))
            CCL__FMT(dir, sizeof dir, ".");
        else if (!partial && ccl__private_dir(dir, dir_why, sizeof dir_why) != 0)
            fprintf(stderr, "ccl-tune: note: %s; libccl will not read the table from there\n", dir_why);
        CCL__FMT(path, sizeof path, "%s/tune-%s-%d.tbl", dir, dev, sh->nranks);
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "ccl-tune: error: cannot write %s\n", path);
        return -1;
    }
    fprintf(f, "# written by ccl-tune: %s %s, %d ranks (%s), %zu..%zu bytes\n", ccl_dtype_name(o->dtype),
            ccl_op_name(o->op), sh->nranks, sh->processes ? "processes" : "threads", o->lo, o->hi);
    if (partial)
        fprintf(f, "# partial: %s done so far\n", partial);
    ccl__tune_write(f, t);
    if (fclose(f) != 0) {
        fprintf(stderr, "ccl-tune: error: writing %s failed\n", path);
        return -1;
    }
    if (!partial)
        printf("# table: %s\n", path);
    return 0;
}

/* The table in force's rows, as the base of the one this run writes: a table file
 * replaces the table libccl would use otherwise (the built-in one, say) whole, so a file
 * of only the collectives and sizes tuned here would send every other call back to the
 * programs' sizes hints. Tuned rows overwrite these as they are measured; the rows for
 * ordinary buffers (":plain"), which ccl-tune does not time, are kept as they are. */
static void keep_rows_in_force(CclTuneTable *t, const CclTuneTable *in_force)
{
    for (int c = 0; c < CCL__TUNE_COLLS; c++) {
        for (int b = 0; b < CCL__TUNE_BUCKETS; b++)
            for (int plain = 0; plain < 2; plain++) {
                CclTuneEntry e = plain ? in_force->plain[c][b] : in_force->e[c][b];
                if (e.file < 0 || (e.file = ccl__tune_file_index(t, in_force->files[e.file])) < 0)
                    continue;
                e.note = "kept from the table in force";
                if (plain)
                    t->plain[c][b] = e;
                else
                    t->e[c][b] = e;
            }
        t->has_plain[c] = in_force->has_plain[c];
    }
}

/* This rank failed: its exit status, and peers waiting for it in an agreement wake. */
static void rank_failed(Worker *w)
{
    w->code = 1;
    if (w->tb)
        ccl__thread_boot_fail(w->tb);
}

/* The rank's in and out, `bytes` each: ccl_mem_alloc buffers (freed with the comm), or
 * ordinary ones with --buffers plain. 0, or -1 with the reason in w->err. */
static int alloc_buffers(Worker *w, size_t bytes)
{
    if (!w->sh->o.plain) {
        if (ccl_mem_alloc(w->comm, &w->in, bytes) == CCL_OK && ccl_mem_alloc(w->comm, &w->out, bytes) == CCL_OK)
            return 0;
        CCL__FMT(w->err, sizeof w->err, "%s", ccl_comm_last_error(w->comm));
        return -1;
    }
    if (!w->gpu) {
        w->in = malloc(bytes);
        w->out = malloc(bytes);
        if (w->in && w->out)
            return 0;
        CCL__FMT(w->err, sizeof w->err, "out of memory for two buffers of %zu bytes", bytes);
        return -1;
    }
    CuResult e = tool_gpu_alloc(&w->g, &w->in, bytes);
    if (e == 0)
        e = tool_gpu_alloc(&w->g, &w->out, bytes);
    if (e == 0)
        return 0;
    tool_gpu_why(&w->g, e, w->err, sizeof w->err);
    return -1;
}

static void free_buffers(Worker *w)
{
    if (!w->sh->o.plain)
        return;
    if (!w->gpu) {
        free(w->in);
        free(w->out);
    } else {
        tool_gpu_free(&w->g, w->in);
        tool_gpu_free(&w->g, w->out);
    }
    w->in = w->out = NULL;
}

static void *worker(void *arg)
{
    Worker *w = arg;
    Shared *sh = w->sh;
    const Opts *o = &sh->o;
    int wide = o->colls[COLL_ALLGATHER] || o->colls[COLL_REDUCE_SCATTER] || o->colls[COLL_ALLTOALL];
    size_t big = sh->sizes[sh->nsizes - 1] * (size_t)(wide ? w->nranks : 1);
    /* GPU: the comm's device's primary context (libccl's), a stream and an event pair. */
    CuResult e = w->gpu ? tool_gpu_open(&w->g, w->comm->device, 1) : 0;
    if (e != 0) {
        tool_gpu_why(&w->g, e, w->err, sizeof w->err);
        rank_failed(w);
    } else if (alloc_buffers(w, big) != 0) {
        rank_failed(w);
    } else {
        w->stream = w->gpu ? (void *)w->g.stream : NULL;
        if (w->rank == 0)
            ccl__tune_key(w->comm, sh->table.device, sizeof sh->table.device, sh->table.topology,
                          sizeof sh->table.topology, sh->table.version, sizeof sh->table.version);
        /* The incumbents are libccl's choices as they stand before this run, and the
         * rows this run does not measure keep them. A comm looks for its table once and
         * keeps it (tuner.c), so it looks now, before rank 0 writes one (by default into
         * the file libccl reads, the cache folder's), and the barrier has every process
         * read the file before that. Asking with table files ignored instead would be
         * wrong: a table from an earlier run is in force, and it is what a new row must
         * beat. */
        ccl__tune_look(w->comm, "ccl-tune");
        settle(w);
        const CclTuner *tt = &w->comm->tune;
        if (w->rank == 0 && w->comm->nnodes == 1 && tt->state == CCL__TUNE_IN_USE)
            keep_rows_in_force(&sh->table, &tt->table);
        say(w, "# buffers: %s\n", o->plain ? "plain (ordinary memory: the table's rows for such buffers, NAME:plain)"
                                            : "symmetric (ccl_mem_alloc)");
        if (o->incumbent) {
            if (w->comm->nnodes > 1)
                say(w, "# incumbent: libccl's choice today: the sizes hints (tables know one node only)\n");
            else if (tt->state == CCL__TUNE_IN_USE)
                say(w, "# incumbent: libccl's choice today: the entries of %s, else the sizes hints\n", tt->source);
            else
                say(w, "# incumbent: libccl's choice today: the sizes hints (no tuning table: %s)\n", tt->why);
        }
        char done[256] = "";
        for (int c = 0; c < CCL__TUNE_COLLS; c++) {
            if (!o->colls[c])
                continue;
            if (tune_collective(w, (Collective)c) != 0) {
                rank_failed(w);
                break;
            }
            CCL__FMT(done + strlen(done), sizeof done - strlen(done), "%s%s", done[0] ? ", " : "", cclc_coll_name(c));
            if (w->rank == 0 && !o->dry_run)
                write_table(sh, done);
        }
    }
    free_buffers(w);
    tool_gpu_close(&w->g);
    return NULL;
}

int main(int argc, char **argv)
{
    static Shared shared;
    Shared *sh = &shared;
    Opts *o = &sh->o;
    parse_args(argc, argv, o);

    ToolLaunch launch;
    if (tool_launch_open(&launch, o->timeout_ms) != 0)
        return 1;
    sh->processes = launch.processes;
    int ndev = 0;
#ifdef CCL_HAVE_GPU_BACKEND
    char why[256] = "";
    if (o->backend != CCL_BACKEND_CPU && tool_cuda_load(&ndev, why, sizeof why) != 0)
        ndev = 0;
    if (o->backend == CCL_BACKEND_GPU && ndev == 0)
        tool_usage_error("--backend gpu: no usable GPU (%s)", why[0] ? why : "none visible");
#else
    if (o->backend == CCL_BACKEND_GPU)
        tool_usage_error("--backend gpu: this build has no GPU backend");
#endif
    sh->gpu = o->backend != CCL_BACKEND_CPU && ndev > 0;
    sh->nranks = tool_launch_ranks(&launch, o->ranks, sh->gpu, ndev, 4);
    if (sh->nranks > 64)
        tool_usage_error("%d ranks: at most 64", sh->nranks);

    /* Defaults per backend. */
    if (o->dtype == CCL_NUM_DTYPES)
        o->dtype = sh->gpu ? CCL_BF16 : CCL_F32;
    if (!o->lo)
        o->lo = 1024;
    if (!o->hi)
        o->hi = sh->gpu ? (size_t)1 << 30 : (size_t)64 << 10;
    if (o->lo > o->hi)
        tool_usage_error("-b %zu is above -e %zu", o->lo, o->hi);
    if (o->lo < ccl_dtype_size(o->dtype))
        tool_usage_error("-b %zu is smaller than one %s element", o->lo, ccl_dtype_name(o->dtype));
    if (!o->ninst) {
        static const int gi[] = {1, 2, 4, 8, 16, 32, 64}, ci[] = {1, 2, 4};
        const int *src = model_gpu(sh) ? gi : ci;
        o->ninst = model_gpu(sh) ? 7 : 3;
        memcpy(o->inst, src, sizeof *src * (size_t)o->ninst);
    }
    if (!o->nthreads) {
        o->threads[0] = 0;           /* the backend's default (512 on GPUs) */
        o->nthreads = 1;
    } else if (!sh->gpu) {
        o->threads[0] = 0;           /* the CPU backend has no threads per block */
        o->nthreads = 1;
    }
    if (!o->per_algo)
        o->per_algo = model_gpu(sh) ? 3 : 2;
    if (!o->iters)
        o->iters = sh->gpu ? 20 : 5;
    else
        o->iters_given = 1;
    if (!o->reps)
        o->reps = sh->gpu ? 5 : 3;
    if (!o->warmup)
        o->warmup = sh->gpu ? 2 : 1;
    for (size_t s = o->lo; s <= o->hi && sh->nsizes < MAX_SIZES; s *= 2)
        sh->sizes[sh->nsizes++] = s;

    ccl__tune_table_init(&sh->table);
    /* Both buffers (N x the largest size where a collective's in or out has N units),
     * and scratch for the one variant being timed, with room for the shipped LL
     * programs' lines (gpu/layout.h's region). CCL_HEAP_BYTES decides instead when
     * set. */
    int wide = o->colls[COLL_ALLGATHER] || o->colls[COLL_REDUCE_SCATTER] || o->colls[COLL_ALLTOALL];
    size_t maxb = o->hi * (size_t)(wide ? sh->nranks : 1);
    ccl_config_t cfg = {.backend = sh->gpu ? CCL_BACKEND_GPU : CCL_BACKEND_CPU, .timeout_ms = o->timeout_ms,
                        .heap_bytes = getenv("CCL_HEAP_BYTES") ? 0 : 2 * maxb + 24 * o->hi + (64u << 20)};
    /* That heap runs every size whole (regions as large as the heap, not the runtime's
     * sixteenth), so variants are timed without pieces. CCL_REGION_BYTES, when set,
     * decides instead. */
    char region[32];
    snprintf(region, sizeof region, "%zu", cfg.heap_bytes);
    if (cfg.heap_bytes)
        setenv("CCL_REGION_BYTES", region, 0);
    if (tool_launch_comms(&launch, &cfg, ndev) != 0)
        return 1;
    int nw = launch.nlocal;
    Worker *ws = tool_calloc((size_t)nw, sizeof *ws);
    for (int i = 0; i < nw; i++) {
        ws[i].sh = sh;
        ws[i].rank = launch.first_rank + i;
        ws[i].comm = launch.comms[i];
        ws[i].boot = &launch.boots[i];
        ws[i].nranks = sh->nranks;
        ws[i].gpu = sh->gpu;
        ws[i].tb = launch.tb;
    }
    if (ws[0].rank == 0) {
        printf("# ccl-tune: %d ranks (%s), %s backend, %s %s, %zu..%zu bytes, %s\n", sh->nranks,
               sh->processes ? "processes" : "threads", sh->gpu ? "GPU" : "CPU", ccl_dtype_name(o->dtype),
               ccl_op_name(o->op), o->lo, o->hi,
               sh->gpu ? (o->graph ? "CUDA graph per sample, events" : "events around eager calls")
                       : "host clock around calls and synchronize");
        printf("# each time: median over %d samples of the max over ranks of (sample / %d calls)\n", o->reps, o->iters);
        fflush(stdout);
    }
    if (tool_launch_run(&launch, worker, ws, sizeof *ws) != 0)
        return 1;
    int code = 0;
    for (int i = 0; i < nw; i++)
        if (ws[i].code) {
            if (!code)
                fprintf(stderr, "ccl-tune: rank %d: error: %s\n", ws[i].rank, ws[i].err[0] ? ws[i].err : "a peer failed");
            code = 1;
        }
    if (code == 0 && ws[0].rank == 0 && !o->dry_run)
        code = write_table(sh, NULL) != 0;
    tool_launch_close(&launch);
    free(ws);
    return code;
}
