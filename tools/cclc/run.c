/* run.c: `cclc run FILE --ranks N ...`, an algorithm run on real data and checked.
 *
 * Takes an algorithm file and a run's shape; loads the algorithm through libccl (the
 * same path users take), fills every rank's input with data whose correct result is
 * exactly representable, runs K calls (each synchronized, with fresh data), and
 * compares every element of every rank's output with a host reference. Exactness by
 * construction: inputs are small integers chosen per dtype and op so that every partial
 * result of any reduction order is an integer the dtype holds exactly (fp8 e5m2 holds
 * every integer up to 8, e4m3 up to 16, bf16 256, f16 2048, f32 2^24); products use
 * {-1, 1, 2}, so they are powers of two; avg uses x + d_r with the d_r cancelling in
 * pairs, so the sum is N*x and avg is x. The tolerance is therefore zero for every
 * dtype (integers wrap exactly as the library does).
 *
 * --back-to-back: the K calls are enqueued with no host synchronization between them
 * (one ccl_comm_synchronize at the end), so a rank's next call overlaps its peers'
 * current one, as in an application that never waits: races between consecutive calls
 * (a peer's next call overwriting scratch, staging or outputs still in use) can show.
 * Consecutive calls must differ in their data, or a premature overwrite would write
 * the very bytes it replaces; so each call has its own buffers and input, from a pool
 * of B_SETS buffer sets used in turn (call k: set k % B_SETS). Out of place, a set's
 * input never changes, so a set's output is right after any number of its calls and
 * the last call of each set is checked. In place the output overwrites the input, so
 * a set can serve only one call: K is then at most B_SETS. Set s also has its own
 * count, C - (s % 4) * (C / 5), so consecutive calls differ in count and scratch layout
 * too, with no fence between them, as in an application that never waits between
 * sizes.
 *
 * Modes: by default one process drives all N ranks as threads (ccl_comm_init_all).
 * Under mpirun (OMPI_COMM_WORLD_SIZE / PMI_SIZE set) every process is one rank
 * (ccl_comm_init_rank over the shm bootstrap of runtime/src/bootstrap_env.c, so cclc
 * does not link MPI); ranks exchange verdicts at the end and rank 0 prints.
 *
 * Exit: 0 every element right, 1 something wrong (wrong data, a failed call, an
 * algorithm that does not compile), 2 usage (bad options, an unreadable FILE, N not
 * admitted). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cclc.h"
#include "internal.h"
#include "harness.h"
#include "run.h"

_Static_assert(sizeof(Verdict) <= TOOL_AGREE_PIECE, "a verdict is agreed in one piece (no scratch)");

static const char run_usage[] =
    "usage: cclc run FILE --ranks N [--backend cpu|gpu] [--count C] [--dtype T] [--op O]\n"
    "                [--iters K] [--inplace] [--seed S] [--root R] [--host-buffers]\n"
    "                [--timeout-ms T] [--back-to-back]\n"
    "                [--counts C0,C1,... | --counts-matrix C00,C01,...]   (allgatherv, alltoallv)\n";

/* --counts and --counts-matrix: comma-separated element counts (K, M suffixes allowed). */
static void parse_counts(const char *flag, const char *val, RunOpts *o)
{
    int cap = 1;
    for (const char *p = val; *p; p++)
        cap += *p == ',';
    free(o->counts);
    o->counts = tool_calloc((size_t)cap, sizeof *o->counts);
    o->ncounts = 0;
    char item[64];
    for (const char *p = val;;) {
        size_t n = strcspn(p, ",");
        if (n == 0 || n >= sizeof item)
            tool_usage_error("%s %s: expected element counts separated by commas", flag, val);
        memcpy(item, p, n);
        item[n] = 0;
        o->counts[o->ncounts++] = (size_t)tool_count(flag, item, (uint64_t)1 << 36);
        if (!p[n])
            break;
        p += n + 1;
    }
}

static void parse_opts(int argc, char **argv, RunOpts *o)
{
    *o = (RunOpts){.count = 4096, .dtype = CCL_F32, .op = CCL_SUM, .iters = 3, .seed = 1};
    tool_init("cclc run", "cclc --help", run_usage);
    const ToolShared shared = {.ranks = &o->nranks, .max_ranks = CCLC_MAX_RANKS, .backend = &o->backend,
                               .dtype = &o->dtype, .op = &o->op, .iters = &o->iters, .max_iters = 1000000,
                               .timeout_ms = &o->timeout_ms};
    ToolArgs args = tool_args(argc, argv, 0, &shared);
    while (tool_next(&args)) {
        const char *a = args.flag;
        if (tool_operand(&args, &o->file))
            continue;
        if (tool_flag(&args, "--inplace")) {
            o->inplace = 1;
        } else if (tool_flag(&args, "--host-buffers")) {
            o->host_buffers = 1;
        } else if (tool_flag(&args, "--back-to-back")) {
            o->back_to_back = 1;
        } else if (tool_is(&args, "--count", NULL)) {
            o->count = (size_t)tool_count(a, tool_value(&args), (uint64_t)1 << 36);
        } else if (tool_is(&args, "--seed", NULL)) {
            const char *v = tool_value(&args);
            if (ccl__parse_size(v, &o->seed))
                tool_usage_error("--seed %s: not a number", v);
        } else if (tool_is(&args, "--root", NULL)) {
            o->root = tool_int(a, tool_value(&args), 0, CCLC_MAX_RANKS - 1);
        } else if (tool_is(&args, "--counts", NULL)) {
            parse_counts(a, tool_value(&args), o);
            o->counts_matrix = 0;
        } else if (tool_is(&args, "--counts-matrix", NULL)) {
            parse_counts(a, tool_value(&args), o);
            o->counts_matrix = 1;
        } else {
            tool_unknown(&args);
        }
    }
    if (!o->file)
        tool_usage_error("no algorithm FILE given");
    if (o->back_to_back && o->inplace && o->iters > B_SETS)
        tool_usage_error("--back-to-back --inplace: at most %d calls (--iters %d): an in-place call overwrites its "
                         "input, so each needs its own buffers", B_SETS, o->iters);
}

/* ---- data ---- */

#define mix cclc_run_mix

typedef struct {
    const RunOpts *o;
    Collective coll;
    int N;
    int iter;
    int shown;               /* the call named in messages (1-based); gen_iter: iter + 1 */
    uint64_t base;           /* mix(seed, iter): set by gen_iter */
    int64_t a, m;            /* value bound; avg: the delta bound */
} Gen;

/* One hash per value: mix is a bijection, and rank, salt and idx occupy separate bits
 * (idx < 2^40), so distinct (rank, idx, salt) never share an input within a call. */
static uint64_t h(const Gen *g, int rank, size_t idx, uint64_t salt)
{
    return mix(g->base ^ ((uint64_t)rank << 50 | salt << 40 | (uint64_t)idx));
}

static int64_t uniform(uint64_t r, int64_t lo, int64_t hi)
{
    /* Multiply-high instead of a division: the generator runs per element. */
    return lo + (int64_t)(((unsigned __int128)r * (uint64_t)(hi - lo + 1)) >> 64);
}

/* Rank `rank`'s input element idx (index into its whole `in` buffer). */
static int64_t gen_value(const Gen *g, int rank, size_t idx)
{
    int is_unsigned = tool_dtype_unsigned(g->o->dtype); /* no negative data */
    int reducing = g->coll == COLL_ALLREDUCE || g->coll == COLL_REDUCE_SCATTER || g->coll == COLL_REDUCE;
    uint64_t r = h(g, rank, idx, 1);
    if (!reducing || g->o->op == CCL_MIN || g->o->op == CCL_MAX || g->o->op == CCL_SUM)
        return uniform(r, is_unsigned ? 0 : -g->a, g->a);
    if (g->o->op == CCL_PROD) {
        static const int64_t s[] = {-1, 1, 1, 2}, u[] = {1, 1, 1, 2};
        return is_unsigned ? u[r % 4] : s[r % 4];
    }
    /* avg: x (shared by all ranks at idx) + d, where ranks 2j and 2j+1 get +d and -d. */
    uint64_t rx = h(g, 0, idx, 2), rd = h(g, rank & ~1, idx, 3);
    int64_t x = is_unsigned ? uniform(rx, g->m, g->a - g->m) : uniform(rx, -(g->a - g->m), g->a - g->m);
    int64_t d = uniform(rd, 0, g->m);
    if ((rank | 1) >= g->N)
        d = 0; /* the unpaired last rank */
    return rank & 1 ? x - d : x + d;
}

static void gen_setup(Gen *g, const RunOpts *o, Collective coll, int N)
{
    g->o = o;
    g->coll = coll;
    g->N = N;
    int64_t R = tool_exact_max(o->dtype);
    int reducing = coll == COLL_ALLREDUCE || coll == COLL_REDUCE_SCATTER || coll == COLL_REDUCE;
    g->a = reducing && (o->op == CCL_SUM || o->op == CCL_AVG) ? R / N : R;
    if (g->a < 1)
        g->a = 1;
    g->m = g->a / 2;
}

static void gen_iter(Gen *g, int iter)
{
    g->iter = iter;
    g->shown = iter + 1;
    g->base = mix(mix(g->o->seed) ^ (uint64_t)iter * 0x9e3779b97f4a7c15ull);
}


static double load(const void *buf, size_t idx, ccl_dtype_t t)
{
    return ccl__load_double((const char *)buf + idx * ccl_dtype_size(t), t);
}

/* The exact result of reducing element idx of every rank's input, as the dtype holds it. */
static double reduced(const Gen *g, size_t idx)
{
    const RunOpts *o = g->o;
    int64_t acc = gen_value(g, 0, idx);
    for (int r = 1; r < g->N; r++) {
        int64_t v = gen_value(g, r, idx);
        switch (o->op) {
        case CCL_SUM: case CCL_AVG: acc += v; break;
        case CCL_PROD: acc = (int64_t)((uint64_t)acc * (uint64_t)v); break;
        case CCL_MIN: acc = v < acc ? v : acc; break;
        case CCL_MAX: acc = v > acc ? v : acc; break;
        default: break;
        }
    }
    if (o->op == CCL_AVG)
        acc /= g->N;
    if (o->dtype == CCL_U8)
        acc = (uint8_t)acc;
    else if (o->dtype == CCL_I8)
        acc = (int8_t)(uint8_t)acc;
    else if (o->dtype == CCL_I32)
        acc = (int32_t)(uint32_t)acc;
    else if (o->dtype == CCL_U32)
        acc = (uint32_t)acc;
    return (double)acc;
}

/* The expected element j of rank r's out, or NAN-free flag 0 when unspecified. */
static int expected(const Gen *g, int r, size_t j, size_t count, double *out)
{
    const RunOpts *o = g->o;
    switch (g->coll) {
    case COLL_ALLREDUCE: *out = reduced(g, j); return 1;
    case COLL_REDUCE:
        if (r != o->root)
            return 0;
        *out = reduced(g, j);
        return 1;
    case COLL_REDUCE_SCATTER: *out = reduced(g, (size_t)r * count + j); return 1;
    case COLL_ALLGATHER: *out = (double)gen_value(g, (int)(j / count), j % count); break;
    case COLL_ALLTOALL: *out = (double)gen_value(g, (int)(j / count), (size_t)r * count + j % count); break;
    case COLL_BROADCAST: *out = (double)gen_value(g, o->root, j); break;
    case COLL_ALLGATHERV: /* run_v.c checks these */
    case COLL_ALLTOALLV: return 0;
    }
    /* Copies: inputs are integers the dtype holds exactly (gen_setup's bound). */
    return 1;
}

/* ---- one rank's buffers ---- */

/* The buffers live where the backend wants them (device memory for ccl_mem_alloc on
 * GPUs), so they are filled and checked through a host mirror of the whole allocation
 * and ccl_mem_copy. */
typedef struct {
    void *mem;               /* what was allocated: total bytes */
    char *mirror;            /* host copy of mem */
    size_t total;
    size_t send_at, recv_at; /* byte offsets of send and recv in mem */
    void *send, *recv;       /* mem + send_at, mem + recv_at */
    size_t in_elems, out_elems;
} Bufs;

static int alloc_bufs(ccl_comm_t *comm, const RunOpts *o, Collective coll, int N, int rank, Bufs *b, char *err, size_t len)
{
    size_t es = ccl_dtype_size(o->dtype);
    b->in_elems = (size_t)cclc_coll_in_chunks(coll, N, 1) * o->count;
    b->out_elems = (size_t)cclc_coll_out_chunks(coll, N, 1) * o->count;
    size_t in_bytes = b->in_elems * es, out_bytes = b->out_elems * es;
    /* In place, NCCL's way: one buffer; allgather sends from its own slot of recv,
     * reduce_scatter receives into its own slot of send. */
    size_t total = o->inplace ? (in_bytes > out_bytes ? in_bytes : out_bytes) : in_bytes + out_bytes + 256;
    if (total == 0)
        total = 16;
    b->total = total;
    if (!(b->mirror = malloc(total))) {
        snprintf(err, len, "out of host memory for %zu bytes", total);
        return -1;
    }
    if (o->host_buffers) {
        b->mem = aligned_alloc(256, (total + 255) / 256 * 256);
        if (!b->mem) {
            snprintf(err, len, "out of host memory for %zu bytes", total);
            return -1;
        }
    } else if (ccl_mem_alloc(comm, &b->mem, total) != CCL_OK) {
        snprintf(err, len, "%s", ccl_comm_last_error(comm));
        return -1;
    }
    char *m = b->mem;
    if (o->inplace) {
        b->send_at = coll == COLL_ALLGATHER ? (size_t)rank * o->count * es : 0;
        b->recv_at = coll == COLL_REDUCE_SCATTER ? (size_t)rank * o->count * es : 0;
    } else {
        b->send_at = 0;
        b->recv_at = (in_bytes + 255) / 256 * 256;
    }
    b->send = m + b->send_at;
    b->recv = m + b->recv_at;
    return 0;
}

static void free_bufs(ccl_comm_t *comm, const RunOpts *o, Bufs *b)
{
    if (o->host_buffers)
        free(b->mem);
    else if (b->mem)
        ccl_mem_free(comm, b->mem);
    free(b->mirror);
}

/* Fills rank's input (after poisoning the output, differently per call, so stale
 * results are caught) and copies it where the backend reads it. */
static int fill(const Gen *g, int rank, ccl_comm_t *comm, Bufs *b, char *err, size_t len)
{
    const RunOpts *o = g->o;
    size_t es = ccl_dtype_size(o->dtype);
    memset(b->mirror + b->recv_at, 0xA5 ^ (g->iter & 0xff), b->out_elems * es);
    for (size_t i = 0; i < b->in_elems; i++)
        tool_store_int(b->mirror + b->send_at, i, gen_value(g, rank, i), o->dtype);
    if (ccl_mem_copy(comm, b->mem, b->mirror, b->total) != CCL_OK) {
        snprintf(err, len, "copying rank %d's input: %s", rank, ccl_comm_last_error(comm));
        return -1;
    }
    return 0;
}

/* Brings rank's output back into the mirror. */
static int fetch(ccl_comm_t *comm, int rank, Bufs *b, size_t es, char *err, size_t len)
{
    if (ccl_mem_copy(comm, b->mirror + b->recv_at, b->recv, b->out_elems * es) != CCL_OK) {
        snprintf(err, len, "copying rank %d's output: %s", rank, ccl_comm_last_error(comm));
        return -1;
    }
    return 0;
}

/* Outputs equal on every rank (allreduce, allgather, broadcast) are computed once per
 * call into ref (when given); the others element by element. */
static int same_on_all_ranks(Collective c)
{
    return c == COLL_ALLREDUCE || c == COLL_ALLGATHER || c == COLL_BROADCAST;
}

static void fill_ref(const Gen *g, double *ref, size_t n)
{
    for (size_t j = 0; j < n; j++)
        expected(g, 0, j, g->o->count, &ref[j]);
}

static void check(const Gen *g, int rank, const Bufs *b, const double *ref, Verdict *v)
{
    const RunOpts *o = g->o;
    for (size_t j = 0; j < b->out_elems; j++) {
        double want = 0;
        if (ref)
            want = ref[j];
        else if (!expected(g, rank, j, o->count, &want))
            continue;
        double got = load(b->mirror + b->recv_at, j, o->dtype);
        if (got == want)
            continue;
        if (!v->wrong++)
            snprintf(v->first, sizeof v->first, "call %d: rank %d out[%zu] = %.17g, expected %.17g", g->shown, rank, j,
                     got, want);
    }
}

static Collective collective_of(const ccl_algorithm_t *alg)
{
    const char *name = ccl_algorithm_collective(alg);
    for (int c = COLL_ALLREDUCE; c < CCLC_NUM_COLLS; c++)
        if (!strcmp(name, cclc_coll_name((Collective)c)))
            return (Collective)c;
    return COLL_ALLREDUCE;
}

/* Prints the summary line; returns the exit status. */
/* With --inplace, says so when the program is not proved in place for this N: the
 * runtime then copies `in` aside before each call (docs/api.md), so the run checks
 * that path, not the program on one buffer. The proof is the compiler's; a file that
 * cannot be read or compiled here says nothing (the run itself reports it). */
static void inplace_note(const RunOpts *o, int N)
{
    FILE *f = fopen(o->file, "rb");
    if (!f)
        return;
    size_t cap = 1 << 16, n = 0;
    char *text = malloc(cap);
    while (text) {
        n += fread(text + n, 1, cap - n, f);
        if (n < cap || cap >= (size_t)16 << 20)
            break;
        char *bigger = realloc(text, cap *= 2);
        if (!bigger) {
            free(text);
            text = NULL;
        }
        text = bigger;
    }
    fclose(f);
    if (!text)
        return;
    Compilation c;
    if (cclc_compile_source(&c, o->file, text, n, N, o->root) == COMPILE_OK && c.proof.inplace_applicable &&
        !c.proof.inplace_ok)
        printf("cclc run: note: %s is not proved in place for N = %d (%s), so each in-place call copies its input "
               "aside first\n", o->file, N, c.proof.inplace_reason ? c.proof.inplace_reason : "?");
    cclc_compilation_free(&c);
    free(text);
}

static int summarize(const RunOpts *o, const char *name, Collective coll, int N, const char *backend, const Verdict *v,
                     int nv, const char *mode)
{
    if (o->inplace)
        inplace_note(o, N);
    uint64_t wrong = 0;
    double ms = 0;
    const char *first = "";
    int failed = 0;
    for (int r = 0; r < nv; r++) {
        wrong += v[r].wrong;
        if (v[r].ms > ms)
            ms = v[r].ms;
        if (!*first && (v[r].failed_call || v[r].wrong))
            first = v[r].first;
        failed |= v[r].failed_call;
    }
    const char *result = failed ? "ERROR" : wrong ? "WRONG" : "ok";
    char count[160];
    if (cclc_coll_is_v(coll))
        cclc_run_v_describe(o, count, sizeof count);
    else
        snprintf(count, sizeof count, "count=%zu", o->count);
    printf("cclc run: %s (%s) N=%d %s backend=%s dtype=%s op=%s %s iters=%d %s%s%s: %s",
           name, cclc_coll_name(coll), N, mode, backend, ccl_dtype_name(o->dtype),
           (coll == COLL_ALLREDUCE || coll == COLL_REDUCE_SCATTER || coll == COLL_REDUCE) ? ccl_op_name(o->op) : "-",
           count, o->iters, o->inplace ? "in-place" : "out-of-place", o->host_buffers ? " host-buffers" : "",
           o->back_to_back ? " back-to-back" : "", result);
    if (wrong)
        printf(" (%llu wrong elements; first: %s)", (unsigned long long)wrong, first);
    else if (failed)
        printf(" (%s)", first);
    printf(", %.1f us/call\n", ms * 1000.0 / o->iters);
    fflush(stdout);
    return failed || wrong ? 1 : 0;
}

static int load_status(ccl_result_t r)
{
    return r == CCL_ERR_INVALID_ARGUMENT ? 2 : 1;
}

/* Buffer sets per rank: 1, or for --back-to-back one per call up to B_SETS. */
static int buffer_sets(const RunOpts *o)
{
    return o->back_to_back ? (o->iters < B_SETS ? o->iters : B_SETS) : 1;
}

/* The options of each of --back-to-back's buffer sets: o's, with set s's count. */
static void set_options(const RunOpts *o, int sets, RunOpts *so)
{
    for (int s = 0; s < sets; s++) {
        so[s] = *o;
        so[s].count = o->count - (size_t)(s % 4) * (o->count / 5);
    }
}

/* --back-to-back: the data of set s is call s's (gen_iter(s)); the last call that used
 * it is the one its output shows. */
static void gen_set(Gen *g, const RunOpts *o, int sets, int s)
{
    gen_iter(g, s);
    g->shown = s + (o->iters - 1 - s) / sets * sets + 1;
}

/* --back-to-back for the ranks comms[0..n) (all ranks, or this process's one; rank of
 * comms[i] is rank0 + i): fills every set, enqueues the K calls round-robin over the
 * ranks with no synchronization in between, synchronizes once, checks every set.
 * bufs[i * sets + s]; ms gets the time from the first call to the end of the sync. */
static void run_back_to_back(const RunOpts *o, const RunOpts *so, Gen *g, int n, int rank0, ccl_comm_t **comms,
                             ccl_algorithm_t **algs, Bufs *bufs, int sets, double *ref, Verdict *v, double *ms)
{
    char err[512];
    for (int s = 0; s < sets; s++) {
        gen_setup(g, &so[s], g->coll, g->N);
        gen_set(g, o, sets, s);
        for (int i = 0; i < n; i++)
            if (fill(g, rank0 + i, comms[i], &bufs[i * sets + s], err, sizeof err) != 0) {
                cclc_run_fail(&v[i], err);
                return;
            }
    }
    int failed = 0;
    double t0 = ccl__now_ms();
    for (int k = 0; k < o->iters && !failed; k++)
        for (int i = 0; i < n && !failed; i++) {
            Bufs *b = &bufs[i * sets + k % sets];
            if (ccl_algorithm_run(algs[i], b->send, b->recv, so[k % sets].count, o->dtype, o->op, NULL) != CCL_OK) {
                snprintf(err, sizeof err, "call %d: %s", k + 1, ccl_comm_last_error(comms[i]));
                cclc_run_fail(&v[i], err);
                failed = 1;
            }
        }
    failed = cclc_run_sync(comms, n, v, failed);
    *ms = ccl__now_ms() - t0;
    if (failed)
        return;
    for (int s = 0; s < sets; s++) {
        gen_setup(g, &so[s], g->coll, g->N);
        gen_set(g, o, sets, s);
        if (ref)
            fill_ref(g, ref, bufs[s].out_elems);   /* rank 0's set s */
        for (int i = 0; i < n; i++) {
            Bufs *b = &bufs[i * sets + s];
            if (fetch(comms[i], rank0 + i, b, ccl_dtype_size(o->dtype), err, sizeof err) != 0) {
                cclc_run_fail(&v[i], err);
                return;
            }
            check(g, rank0 + i, b, ref, &v[i]);
        }
    }
}

/* ---- threads mode: one process, N ranks ---- */

static int run_threads(const RunOpts *o)
{
    int N = o->nranks;
    ccl_config_t cfg = {.backend = o->backend, .timeout_ms = o->timeout_ms};
    ccl_comm_t **comms = calloc((size_t)N, sizeof *comms);
    ccl_algorithm_t **algs = calloc((size_t)N, sizeof *algs);
    int sets = buffer_sets(o);
    RunOpts so[B_SETS];
    set_options(o, sets, so);
    Bufs *bufs = calloc((size_t)N * (size_t)sets, sizeof *bufs);
    Verdict *v = calloc((size_t)N, sizeof *v);
    int status = 1;
    if (!comms || !algs || !bufs || !v) {
        fprintf(stderr, "cclc run: out of memory\n");
        goto out_free;
    }
    ccl_result_t r = ccl_comm_init_all(comms, N, NULL, &cfg);
    if (r != CCL_OK) {
        fprintf(stderr, "cclc run: %s\n", ccl_comm_last_error(NULL));
        status = r == CCL_ERR_UNSUPPORTED ? 2 : 1;
        goto out_free;
    }
    for (int q = 0; q < N; q++) {
        r = ccl_algorithm_load(comms[q], o->file, o->root, &algs[q]);
        if (r != CCL_OK) {
            fprintf(stderr, "cclc run: %s\n", ccl_comm_last_error(comms[q]));
            status = load_status(r);
            goto out;
        }
    }
    Collective coll = collective_of(algs[0]);
    if (cclc_coll_is_v(coll)) {
        status = cclc_run_v(o, coll, N, N, 0, comms, algs, v);
        if (status == 2)
            fprintf(stderr, "cclc run: %s\n", v[0].first);
        if (status == 0) {
            ccl_backend_t vbe;
            ccl_comm_backend(comms[0], &vbe);
            status = summarize(o, ccl_algorithm_name(algs[0]), coll, N, vbe == CCL_BACKEND_GPU ? "gpu" : "cpu", v, N,
                               "threads");
        }
        goto out;
    }
    char err[512];
    for (int q = 0; q < N * sets; q++)
        if (alloc_bufs(comms[q / sets], &so[q % sets], coll, N, q / sets, &bufs[q], err, sizeof err) != 0) {
            fprintf(stderr, "cclc run: rank %d: %s\n", q / sets, err);
            goto out;
        }
    Gen g;
    gen_setup(&g, o, coll, N);
    double *ref = NULL;
    if (same_on_all_ranks(coll) && !(ref = malloc(sizeof *ref * (bufs[0].out_elems + 1)))) {
        fprintf(stderr, "cclc run: out of memory for the reference\n");
        goto out;
    }
    double ms = 0;
    int failed = 0;
    if (o->back_to_back)
        run_back_to_back(o, so, &g, N, 0, comms, algs, bufs, sets, ref, v, &ms);
    for (int it = 0; it < o->iters && !failed && !o->back_to_back; it++) {
        gen_iter(&g, it);
        for (int q = 0; q < N && !failed; q++)
            if (fill(&g, q, comms[q], &bufs[q], err, sizeof err) != 0) {
                v[q].failed_call = 1;
                CCL__FMT(v[q].first, sizeof v[q].first, "%s", err);
                failed = 1;
            }
        if (failed)
            break;
        double t0 = ccl__now_ms();
        for (int q = 0; q < N && !failed; q++) {
            r = ccl_algorithm_run(algs[q], bufs[q].send, bufs[q].recv, o->count, o->dtype, o->op, NULL);
            if (r != CCL_OK) {
                v[q].failed_call = 1;
                snprintf(v[q].first, sizeof v[q].first, "%s", ccl_comm_last_error(comms[q]));
                failed = 1;
            }
        }
        for (int q = 0; q < N; q++) {
            r = ccl_comm_synchronize(comms[q]);
            if (r != CCL_OK && !failed) {
                v[q].failed_call = 1;
                snprintf(v[q].first, sizeof v[q].first, "%s", ccl_comm_last_error(comms[q]));
                failed = 1;
            }
        }
        ms += ccl__now_ms() - t0;
        for (int q = 0; q < N && !failed; q++)
            if (fetch(comms[q], q, &bufs[q], ccl_dtype_size(o->dtype), err, sizeof err) != 0) {
                v[q].failed_call = 1;
                CCL__FMT(v[q].first, sizeof v[q].first, "%s", err);
                failed = 1;
            }
        if (!failed) {
            if (ref)
                fill_ref(&g, ref, bufs[0].out_elems);
            for (int q = 0; q < N; q++)
                check(&g, q, &bufs[q], ref, &v[q]);
        }
    }
    for (int q = 0; q < N; q++)
        v[q].ms = ms;
    ccl_backend_t be;
    ccl_comm_backend(comms[0], &be);
    status = summarize(o, ccl_algorithm_name(algs[0]), coll, N, be == CCL_BACKEND_GPU ? "gpu" : "cpu", v, N, "threads");
    free(ref);
out:
    for (int q = 0; q < N; q++)
        if (comms[q]) {
            for (int s = 0; s < sets; s++)
                free_bufs(comms[q], o, &bufs[q * sets + s]);
            ccl_comm_destroy(comms[q]);
        }
out_free:
    free(comms), free(algs), free(bufs), free(v);
    return status;
}

/* ---- processes mode: this process is one rank ---- */

static int run_process(const RunOpts *o, CclEnvBoot *eb, ccl_bootstrap_t *boot)
{
    int N = boot->nranks, me = boot->rank;
    ccl_config_t cfg = {.backend = o->backend, .timeout_ms = o->timeout_ms};
    int device = CCL_DEVICE_AUTO; /* the local rank modulo the GPUs: the library counts them */
    ccl_comm_t *comm = NULL;
    ccl_algorithm_t *alg = NULL;
    int sets = buffer_sets(o);
    RunOpts so[B_SETS];
    set_options(o, sets, so);
    Bufs bset[B_SETS] = {{0}};
    Verdict mine = {0};
    Collective coll = COLL_ALLREDUCE;
    const char *name = "?";
    int status = 0;
    ccl_result_t r = ccl_comm_init_rank(&comm, boot, device, &cfg);
    if (r != CCL_OK) {
        mine.failed_call = 1;
        snprintf(mine.first, sizeof mine.first, "rank %d: %s", me, ccl_comm_last_error(NULL));
        status = r == CCL_ERR_UNSUPPORTED ? 2 : 1;
    }
    if (!status && (r = ccl_algorithm_load(comm, o->file, o->root, &alg)) != CCL_OK) {
        mine.failed_call = 1;
        snprintf(mine.first, sizeof mine.first, "rank %d: %s", me, ccl_comm_last_error(comm));
        status = load_status(r);
    }
    if (!status) {
        name = ccl_algorithm_name(alg);
        coll = collective_of(alg);
    }
    if (!status && cclc_coll_is_v(coll)) {
        status = cclc_run_v(o, coll, N, 1, me, &comm, &alg, &mine);
    } else if (!status) {
        char err[400];
        for (int s = 0; s < sets && !status; s++)
            if (alloc_bufs(comm, &so[s], coll, N, me, &bset[s], err, sizeof err) != 0) {
                mine.failed_call = 1;
                snprintf(mine.first, sizeof mine.first, "rank %d: %s", me, err);
                status = 1;
            }
    }
    if (!status && cclc_coll_is_v(coll)) {
        /* run_v did the calls */
    } else if (!status && o->back_to_back) {
        Gen g;
        gen_setup(&g, o, coll, N);
        run_back_to_back(o, so, &g, 1, me, &comm, &alg, bset, sets, NULL, &mine, &mine.ms);
    } else if (!status) {
        Bufs *b = &bset[0];
        Gen g;
        gen_setup(&g, o, coll, N);
        for (int it = 0; it < o->iters; it++) {
            gen_iter(&g, it);
            char err[400];
            if (fill(&g, me, comm, b, err, sizeof err) != 0) {
                mine.failed_call = 1;
                snprintf(mine.first, sizeof mine.first, "%s", err);
                break;
            }
            double t0 = ccl__now_ms();
            r = ccl_algorithm_run(alg, b->send, b->recv, o->count, o->dtype, o->op, NULL);
            if (r == CCL_OK)
                r = ccl_comm_synchronize(comm);
            mine.ms += ccl__now_ms() - t0;
            if (r != CCL_OK) {
                mine.failed_call = 1;
                snprintf(mine.first, sizeof mine.first, "%s", ccl_comm_last_error(comm));
                break;
            }
            if (fetch(comm, me, b, ccl_dtype_size(o->dtype), err, sizeof err) != 0) {
                mine.failed_call = 1;
                snprintf(mine.first, sizeof mine.first, "%s", err);
                break;
            }
            check(&g, me, b, NULL, &mine);
        }
    }
    /* Every rank reports, so rank 0 can print one line for the whole job. */
    Verdict *all = calloc((size_t)N, sizeof *all);
    int exchanged = all && tool_allgather(boot, N, &mine, all, sizeof mine, NULL) == 0;
    int exit_status;
    if (!exchanged) {
        const char *why = ccl__env_boot_error(eb);
        fprintf(stderr, "cclc run: rank %d: could not collect the other ranks' verdicts: %s%s%s\n", me,
                why[0] ? why : "a rank died?", mine.first[0] ? "; this rank: " : "", mine.first);
        exit_status = 1;
    } else if (status == 2) {
        if (me == 0)
            fprintf(stderr, "cclc run: %s\n", mine.first);
        exit_status = 2;
    } else {
        exit_status = 0;
        for (int q = 0; q < N; q++)
            if (all[q].failed_call || all[q].wrong)
                exit_status = 1;
        if (me == 0) {
            ccl_backend_t be = CCL_BACKEND_CPU;
            if (comm)
                ccl_comm_backend(comm, &be);
            summarize(o, name, coll, N, be == CCL_BACKEND_GPU ? "gpu" : "cpu", all, N, "processes");
        }
    }
    free(all);
    if (comm) {
        for (int s = 0; s < sets; s++)
            free_bufs(comm, o, &bset[s]);
        ccl_comm_destroy(comm);
    }
    return exit_status;
}

static int run_command(RunOpts *o);

int cclc_run_command(int argc, char **argv)
{
    /* Static: what it owns (--counts) stays reachable when a usage error exits. */
    static RunOpts o;
    parse_opts(argc, argv, &o);
    int rc = run_command(&o);
    free(o.counts);
    o.counts = NULL;
    return rc;
}

static int run_command(RunOpts *o)
{
    ToolLaunch launch;
    /* The bootstrap's waits (joining, the verdicts) are bounded by the same timeout as
     * the calls': a rank that never joins is named after it, one that dies (its pid) at
     * once. */
    const char *te = getenv("CCL_TIMEOUT_MS");
    int boot_ms = o->timeout_ms ? o->timeout_ms : te && atoi(te) > 0 ? atoi(te) : CCL_DEFAULT_TIMEOUT_MS;
    if (tool_launch_open(&launch, boot_ms) != 0)
        return 1;
    if (launch.processes) {
        o->nranks = tool_launch_ranks(&launch, o->nranks, 0, 0, 0);
        if (o->root >= o->nranks) {
            tool_launch_close(&launch);
            tool_usage_error("--root %d is not below the %d processes", o->root, o->nranks);
        }
        int rc = run_process(o, launch.eb, &launch.pboot);
        tool_launch_close(&launch);
        return rc;
    }
    if (!o->nranks)
        tool_usage_error("--ranks N is required (outside mpirun)");
    if (o->root >= o->nranks)
        tool_usage_error("--root %d is not below --ranks %d", o->root, o->nranks);
    return run_threads(o);
}
