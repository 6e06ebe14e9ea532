/* report.c: ccl-perf's results: the table on stdout (header, rows, footer), CSV, JSON and
 * a hand-written SVG plot. Every rank holds the same results (they were agreed); rank 0
 * writes them. Every ratio is ours over the faster NCCL mode's time (perf_nccl_faster),
 * in the table, the footer, the CSV and the JSON alike. */
#include "perf.h"

/* ===== the bar: the faster NCCL mode ===== */

/* The NCCL mode a row's ratio is taken against at one placement: IMPL_NCCL or
 * IMPL_NCCL_SYM, whichever was timed and is faster (plain on a tie: the simpler setup
 * wins when it costs nothing), or -1 when neither was timed. Wrong results do not
 * disqualify a mode; they fail the run instead. */
int perf_nccl_faster(const Row *row, int placement)
{
    const Stat *plain = &row->st[IMPL_NCCL][placement], *sym = &row->st[IMPL_NCCL_SYM][placement];
    if (sym->us > 0 && !(plain->us > 0 && plain->us <= sym->us))
        return IMPL_NCCL_SYM;
    return plain->us > 0 ? IMPL_NCCL : -1;
}

/* Our time over the faster NCCL mode's, and that mode in *against; -1 (and -1) when
 * there is nothing to compare. */
double perf_ratio(const Row *row, int placement, int *against)
{
    int m = perf_nccl_faster(row, placement);
    const Stat *ours = &row->st[IMPL_CCL][placement];
    *against = m;
    if (m < 0 || ours->us < 0) {
        *against = -1;
        return -1;
    }
    return ours->us / row->st[m][placement].us;
}

/* "plain" and "sym", as the table's vs column, the CSV and the JSON spell the modes. */
const char *perf_nccl_mode_name(int impl) { return impl == IMPL_NCCL ? "plain" : impl == IMPL_NCCL_SYM ? "sym" : ""; }

/* "symmetric", "plain" and "registered", as the header, the CSV and the JSON spell --buffers. */
const char *perf_buffers_name(int buffers)
{
    return buffers == PERF_BUF_PLAIN ? "plain" : buffers == PERF_BUF_REGISTERED ? "registered" : "symmetric";
}

/* ===== output ===== */

void perf_fmt_size(char *buf, size_t len, size_t bytes)
{
    static const char *unit[] = {"", "K", "M", "G", "T"};
    int u = 0;
    while (u < 4 && bytes >= 1024 && bytes % 1024 == 0)
        bytes /= 1024, u++;
    snprintf(buf, len, "%zu%s", bytes, unit[u]);
}

static double algbw(size_t bytes, double us) { return us > 0 ? (double)bytes / us / 1e3 : 0; }

void perf_print_header(const Shared *sh)
{
    const Opts *o = &sh->o;
    PerfColl c = sh->coll;
    printf("# ccl-perf %s: %s, %s", PERF_VERSION, perf_colls[c].name, ccl_dtype_name(o->dtype));
    if (perf_colls[c].reduces)
        printf(", op %s", ccl_op_name(o->op));
    if (perf_colls[c].rooted)
        printf(", root %d", o->root);
    printf(", %d ranks (%s), backend %s%s%s\n", sh->nranks,
           sh->processes ? "one process per rank" : "one process, a thread per rank",
           sh->backend == CCL_BACKEND_GPU ? "gpu" : "cpu", sh->devname[0] ? ": " : "", sh->devname);
    printf("# algorithm: %s\n", sh->algo_name);
    printf("# timing: %s\n", sh->method);
    printf("# check: %s\n", !o->check ? "off (#wrong: N/A; use --check)"
                           : o->graph ? "after the timed replays, each of --repeats untimed replays of the timed graph "
                                        "against exact expected data (#wrong = wrong elements, all ranks)"
                                      : "every timed op against exact expected data (#wrong = wrong elements, all ranks)");
    if (o->buffers == PERF_BUF_PLAIN)
        printf("# buffers: plain (%s, not in CCL's heap; CCL stages them where its algorithm needs symmetric memory)\n",
               sh->backend == CCL_BACKEND_GPU ? "cuMemAlloc" : "malloc");
    else if (o->buffers == PERF_BUF_REGISTERED && sh->backend == CCL_BACKEND_GPU)
        printf("# buffers: registered (cuMemCreate pages with POSIX file descriptors, as PyTorch's expandable segments "
               "make them, registered with ccl_mem_register once per buffer before timing; CCL uses them in place%s)\n",
               c == PERF_ALLTOALLV || c == PERF_ALLGATHERV ? ", but stages them for the v-collectives" : "");
    else if (o->buffers == PERF_BUF_REGISTERED)
        printf("# buffers: registered (malloc, registered with ccl_mem_register once per buffer before timing; on the "
               "CPU backend a registration is recorded only, so CCL stages them where its algorithm needs symmetric "
               "memory)\n");
    else
        printf("# buffers: symmetric (ccl_mem_alloc, CCL's heap, used in place)\n");
    if (sh->heap[0])
        printf("# heap: %s\n", sh->heap);
    if (!o->compare_nccl)
        printf("# nccl: not compared (use --compare nccl)\n");
    else if (sh->nc.available) {
        const char *nvls = getenv("NCCL_NVLS_ENABLE");
        printf("# nccl: %s (version %d), NCCL_NVLS_ENABLE=%s\n", sh->nc.path, sh->nc.version, nvls ? nvls : "(unset)");
        printf("# nccl modes: %s%s%s; ratio = our time / NCCL's in its faster mode (< 1: we are faster), vs = that mode\n",
               sh->nc.plain ? "plain (the buffers ours use, unregistered)" : "", sh->nc.plain && sh->nc.sym ? ", " : "",
               sh->nc.sym ? "sym (ncclMemAlloc buffers, ncclCommWindowRegister NCCL_WIN_COLL_SYMMETRIC)" : "");
        if (!sh->nc.plain)
            printf("# nccl plain: not timed (--nccl-mode sym)\n");
        if (!sh->nc.sym)
            printf("# nccl sym: not timed: %s\n", sh->nc.sym_why);
    } else {
        printf("# nccl: not compared: %s\n", sh->nc.why);
    }
    /* Settings that change what is measured, so a table says how it was made. */
    static const char *const env[] = {"CCL_GPU_THREADS", "CCL_GPU_INSTANCES", "CCL_GPU_SLICES", "CCL_TIMEOUT_MS",
        "CCL_ALGORITHM_DIR", "CUDA_VISIBLE_DEVICES", "NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL", "NCCL_MAX_NCHANNELS",
        "NCCL_MIN_NCHANNELS", "NCCL_CUMEM_ENABLE"};
    int nenv = 0;
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++)
        if (getenv(env[i]))
            printf("%s%s=%s", nenv++ ? " " : "# env: ", env[i], getenv(env[i]));
    if (nenv)
        printf("\n");
    if (c == PERF_ALLTOALLV && o->v_counts == PERF_VCOUNTS_ZIPF)
        printf("# sizes: bytes = what each rank sends in all, rank q to its k-th most loaded peer (a permutation "
               "per rank) a share proportional to 1/(k+1)^1.2, in multiples of 16 bytes (--v-counts zipf, see "
               "--help); busbw = algbw x (n-1)/n\n");
    else if (c == PERF_ALLTOALLV)
        printf("# sizes: bytes = what each rank sends in all, rank q to rank p a share proportional to "
               "1 + ((q + 2p) mod (n+1)) (see --help); busbw = algbw x (n-1)/n\n");
    else if (c == PERF_ALLGATHERV && o->v_counts == PERF_VCOUNTS_ZIPF)
        printf("# sizes: bytes = the receive buffer, rank p's part of it proportional to 1/(k+1)^1.2 for its place "
               "k in a fixed permutation, in multiples of 16 bytes (--v-counts zipf, see --help); "
               "busbw = algbw x (n-1)/n\n");
    else if (c == PERF_ALLGATHERV)
        printf("# sizes: bytes = the receive buffer, rank p's part of it proportional to 1 + (2p mod (n+1)) "
               "(see --help); busbw = algbw x (n-1)/n\n");
    else if (c == PERF_SENDRECV)
        printf("# sizes: bytes = the message each rank sends (to rank r+1) and receives (from rank r-1); "
               "busbw = algbw\n");
    else
        printf("# sizes: bytes = the full buffer as in nccl-tests (%s); busbw = algbw x %s\n",
               c == PERF_ALLGATHER ? "the receive size" : c == PERF_REDUCE_SCATTER || c == PERF_ALLTOALL ? "the send size" : "the message",
               c == PERF_ALLREDUCE ? "2(n-1)/n" : c == PERF_BROADCAST || c == PERF_REDUCE ? "1" : "(n-1)/n");
    if (perf_colls[c].p2p)
        printf("# in-place: not run (%s has no in-place form)\n", perf_colls[c].name);
    /* Per placement: ours (34 characters), each NCCL mode timed (25), ratio and vs (12). */
    int cmp = sh->nc.available, plain = cmp && sh->nc.plain, sym = cmp && sh->nc.sym;
    int width = 34 + 25 * (plain + sym) + (cmp ? 12 : 0) - 2;
    printf("#\n# %*s %*s %5s %6s %4s %-18s  %-*s  %-*s\n", 10, "", 11, "", "", "", "", "", width, "out-of-place",
           width, "in-place");
    printf("# %10s %11s %5s %6s %4s %-18s", "size", "count", "type", "redop", "root", "algorithm");
    for (int p = 0; p < 2; p++) {
        printf("  %9s %7s %7s %6s", "time", "algbw", "busbw", "#wrong");
        if (plain)
            printf(" %9s %7s %6s", "nccl", "busbw", "#wrong");
        if (sym)
            printf(" %9s %7s %6s", "nccl-sym", "busbw", "#wrong");
        if (cmp)
            printf(" %5s %5s", "ratio", "vs");
    }
    printf("\n# %10s %11s %5s %6s %4s %-18s", "(B)", "(elements)", "", "", "", "");
    for (int p = 0; p < 2; p++) {
        printf("  %9s %7s %7s %6s", "(us)", "(GB/s)", "(GB/s)", "");
        for (int m = 0; m < plain + sym; m++)
            printf(" %9s %7s %6s", "(us)", "(GB/s)", "");
        if (cmp)
            printf(" %5s %5s", "", "");
    }
    printf("\n");
}

static void fmt_wrong(char *buf, size_t len, long long w)
{
    if (w < 0)
        snprintf(buf, len, "N/A");
    else
        snprintf(buf, len, "%lld", w);
}

void perf_print_row(const Shared *sh, const Row *row)
{
    const Opts *o = &sh->o;
    PerfColl c = sh->coll;
    double f = busbw_factor(c, sh->nranks);
    printf("  %10zu %11zu %5s %6s %4d %-18s", row->bytes, row->count, ccl_dtype_name(o->dtype),
           perf_colls[c].reduces ? ccl_op_name(o->op) : "none", perf_colls[c].rooted ? o->root : -1, row->algo);
    for (int p = 0; p < 2; p++) {
        const Stat *s = &row->st[IMPL_CCL][p];
        char wb[32];
        fmt_wrong(wb, sizeof wb, s->wrong);
        if (s->us < 0 && s->refused) {
            printf("  %9s %7s %7s %6s", "refused", "-", "-", "-");
        } else if (s->us < 0) {
            printf("  %9s %7s %7s %6s", "n/a", "n/a", "n/a", "n/a");
        } else {
            printf("  %9.2f %7.2f %7.2f %6s", s->us, algbw(row->bytes, s->us), algbw(row->bytes, s->us) * f, wb);
        }
        if (!sh->nc.available)
            continue;
        for (int impl = IMPL_NCCL; impl <= IMPL_NCCL_SYM; impl++) {
            if (!(impl == IMPL_NCCL ? sh->nc.plain : sh->nc.sym))
                continue;
            const Stat *t = &row->st[impl][p];
            if (t->us < 0) {
                printf(" %9s %7s %6s", "n/a", "n/a", "n/a");
                continue;
            }
            fmt_wrong(wb, sizeof wb, t->wrong);
            printf(" %9.2f %7.2f %6s", t->us, algbw(row->bytes, t->us) * f, wb);
        }
        int m;
        double ratio = perf_ratio(row, p, &m);
        if (m < 0)
            printf(" %5s %5s", "n/a", "n/a");
        else
            printf(" %5.2f %5s", ratio, perf_nccl_mode_name(m));
    }
    printf("\n");
    fflush(stdout);
}

void perf_print_footer(const Shared *sh, long long *total_wrong)
{
    double f = busbw_factor(sh->coll, sh->nranks), sum[NIMPL][2] = {{0}};
    int cnt[NIMPL][2] = {{0}}, faster[2] = {0}, compared[2] = {0}, won[NIMPL] = {0}, refused = 0;
    *total_wrong = 0;
    for (int i = 0; i < sh->nsizes; i++) {
        const Row *row = &sh->rows[i];
        refused += row->st[IMPL_CCL][0].refused || row->st[IMPL_CCL][1].refused;
        for (int impl = 0; impl < NIMPL; impl++)
            for (int p = 0; p < 2; p++) {
                const Stat *s = &row->st[impl][p];
                if (s->us < 0)
                    continue;
                sum[impl][p] += algbw(row->bytes, s->us) * f;
                cnt[impl][p]++;
                if (s->wrong > 0)
                    *total_wrong += s->wrong;
            }
        for (int p = 0; p < 2 && sh->nc.available; p++) {
            int m;
            double ratio = perf_ratio(row, p, &m);
            if (m < 0)
                continue;
            compared[p]++;
            faster[p] += ratio < 1;
            won[m]++;
        }
    }
    printf("# wrong elements: %lld%s\n", *total_wrong, sh->o.check ? "" : " (not checked)");
    printf("# average busbw: %.2f GB/s out-of-place, ", cnt[0][0] ? sum[0][0] / cnt[0][0] : 0);
    printf(cnt[0][1] ? "%.2f in-place" : "n/a in-place", cnt[0][1] ? sum[0][1] / cnt[0][1] : 0);
    for (int impl = IMPL_NCCL; impl <= IMPL_NCCL_SYM && sh->nc.available; impl++) {
        if (!(impl == IMPL_NCCL ? sh->nc.plain : sh->nc.sym))
            continue;
        printf("; NCCL %s ", perf_nccl_mode_name(impl));
        for (int p = 0; p < 2; p++)
            printf(cnt[impl][p] ? "%s%.2f" : "%sn/a", p ? ", " : "", cnt[impl][p] ? sum[impl][p] / cnt[impl][p] : 0);
    }
    printf("\n");
    if (sh->nc.available)
        printf("# faster than NCCL (in its faster mode) at %d of %d sizes out-of-place, %d of %d in-place; "
               "NCCL's faster mode: plain at %d, sym at %d of %d (size, placement) pairs\n",
               faster[0], compared[0], faster[1], compared[1], won[IMPL_NCCL], won[IMPL_NCCL_SYM],
               compared[0] + compared[1]);
    if (refused)
        printf("# REFUSED: the library refused ours at %d of %d sizes (not timed): %s\n", refused, sh->nsizes,
               sh->refused_why);
    if (*total_wrong)
        printf("# FAILED: %lld wrong elements\n", *total_wrong);
}

/* Sizes at which the library refused ours (perf.c exits 1 when there are any). */
int perf_refused_sizes(const Shared *sh)
{
    int refused = 0;
    for (int i = 0; i < sh->nsizes; i++)
        refused += sh->rows[i].st[IMPL_CCL][0].refused || sh->rows[i].st[IMPL_CCL][1].refused;
    return refused;
}

static FILE *open_out(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        fprintf(stderr, "ccl-perf: error: cannot write %s: %s\n", path, strerror(errno));
    return f;
}

/* How the run was timed, as the CSV and JSON spell it. */
static const char *method_name(const Shared *sh)
{
    if (sh->o.graph)
        return "cuda-graph";
    return sh->backend == CCL_BACKEND_GPU ? "cuda-events" : "host-clock";
}

static const char *impl_name(int impl) { return impl == IMPL_CCL ? "ccl" : impl == IMPL_NCCL ? "nccl" : "nccl_sym"; }
static const char *place_name(int p) { return p ? "in-place" : "out-of-place"; }

/* The v-collectives' --v-counts, as the CSV and the JSON spell it; "none" for the rest. */
static const char *v_counts_name(const Shared *sh)
{
    return sh->coll == PERF_ALLTOALLV || sh->coll == PERF_ALLGATHERV ? perf_v_counts_name(sh->o.v_counts) : "none";
}

/* Long form: one line per size, placement and implementation (ccl, nccl: the plain
 * mode, nccl_sym); ccl lines carry the ratio and the mode it is against. Columns are
 * only ever added at the end (buffers, then v_counts), so readers by position keep
 * working. */
int perf_write_csv(const Shared *sh, const char *path)
{
    FILE *f = open_out(path);
    if (!f)
        return -1;
    const Opts *o = &sh->o;
    double fac = busbw_factor(sh->coll, sh->nranks);
    fprintf(f, "collective,dtype,op,root,nranks,backend,method,impl,algorithm,placement,bytes,count,time_us,algbw_GBs,"
               "busbw_GBs,wrong,ratio_vs_nccl,ratio_vs_nccl_mode,buffers,v_counts\n");
    for (int i = 0; i < sh->nsizes; i++) {
        const Row *row = &sh->rows[i];
        for (int p = 0; p < 2; p++)
            for (int impl = 0; impl < NIMPL; impl++) {
                const Stat *s = &row->st[impl][p];
                if (s->us < 0)
                    continue;
                fprintf(f, "%s,%s,%s,%d,%d,%s,%s,%s,%s,%s,%zu,%zu,%.3f,%.4f,%.4f,", perf_colls[sh->coll].name,
                        ccl_dtype_name(o->dtype), perf_colls[sh->coll].reduces ? ccl_op_name(o->op) : "none",
                        perf_colls[sh->coll].rooted ? o->root : -1, sh->nranks,
                        sh->backend == CCL_BACKEND_GPU ? "gpu" : "cpu",
                        method_name(sh),
                        impl_name(impl), impl == IMPL_CCL ? row->algo : impl_name(impl), place_name(p), row->bytes, row->count,
                        s->us, algbw(row->bytes, s->us),
                        algbw(row->bytes, s->us) * fac);
                if (s->wrong >= 0)
                    fprintf(f, "%lld", s->wrong);
                fputc(',', f);
                int m;
                double ratio = perf_ratio(row, p, &m);
                if (impl == IMPL_CCL && m >= 0)
                    fprintf(f, "%.4f,%s", ratio, perf_nccl_mode_name(m));
                else
                    fputc(',', f);
                /* NCCL's symmetric mode has its own windows, but the line says how the
                 * run was made, as backend and method do. */
                fprintf(f, ",%s,%s\n", perf_buffers_name(o->buffers), v_counts_name(sh));
            }
    }
    return fclose(f);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static void json_stat(FILE *f, const Stat *s, size_t bytes, double fac)
{
    if (s->us < 0) {
        fputs("null", f);
        return;
    }
    fprintf(f, "{\"time_us\": %.3f, \"algbw_GBs\": %.4f, \"busbw_GBs\": %.4f, \"wrong\": ", s->us,
            algbw(bytes, s->us), algbw(bytes, s->us) * fac);
    if (s->wrong >= 0)
        fprintf(f, "%lld}", s->wrong);
    else
        fputs("null}", f);
}

int perf_write_json(const Shared *sh, const char *path)
{
    FILE *f = open_out(path);
    if (!f)
        return -1;
    const Opts *o = &sh->o;
    double fac = busbw_factor(sh->coll, sh->nranks);
    fprintf(f, "{\n  \"tool\": \"ccl-perf\", \"version\": \"%s\",\n  \"collective\": \"%s\", \"dtype\": \"%s\", \"op\": ",
            PERF_VERSION, perf_colls[sh->coll].name, ccl_dtype_name(o->dtype));
    json_str(f, perf_colls[sh->coll].reduces ? ccl_op_name(o->op) : "none");
    fprintf(f, ", \"root\": %d, \"nranks\": %d,\n", perf_colls[sh->coll].rooted ? o->root : -1, sh->nranks);
    fprintf(f, "  \"mode\": \"%s\", \"backend\": \"%s\", \"device\": ", sh->processes ? "processes" : "threads",
            sh->backend == CCL_BACKEND_GPU ? "gpu" : "cpu");
    json_str(f, sh->devname);
    fputs(",\n  \"algorithm\": ", f);
    json_str(f, sh->algo_name);
    fprintf(f, ",\n  \"timing\": {\"method\": \"%s\", \"description\": ", method_name(sh));
    json_str(f, sh->method);
    fprintf(f, ", \"iters\": %d, \"warmup\": %d, \"repeats\": %d},\n", o->iters, o->warmup, o->repeats);
    fprintf(f, "  \"check\": %s, \"buffers\": \"%s\", \"v_counts\": \"%s\", \"busbw_factor\": %.6f,\n",
            o->check ? "true" : "false", perf_buffers_name(o->buffers), v_counts_name(sh), fac);
    if (sh->heap[0]) {
        fputs("  \"heap\": ", f);
        json_str(f, sh->heap);
        fputs(",\n", f);
    }
    static const char *const mode[] = {[PERF_NCCL_BEST] = "best", [PERF_NCCL_PLAIN] = "plain", [PERF_NCCL_SYM] = "sym"};
    fprintf(f, "  \"nccl\": {\"compared\": %s, \"mode\": \"%s\", \"path\": ", sh->nc.available ? "true" : "false",
            mode[o->nccl_mode]);
    json_str(f, sh->nc.available ? sh->nc.path : "");
    fprintf(f, ", \"version\": %d, \"why_not\": ", sh->nc.version);
    json_str(f, !o->compare_nccl ? "not requested" : sh->nc.available ? "" : sh->nc.why);
    fprintf(f, ",\n           \"plain\": %s, \"sym\": %s, \"sym_why_not\": ",
            sh->nc.available && sh->nc.plain ? "true" : "false", sh->nc.available && sh->nc.sym ? "true" : "false");
    json_str(f, !sh->nc.available ? (!o->compare_nccl ? "not requested" : sh->nc.why) : sh->nc.sym ? "" : sh->nc.sym_why);
    /* Sizes where ours is null because the library refused it, and its words. */
    fputs("},\n  \"ccl_refused\": ", f);
    json_str(f, sh->refused_why);
    fputs(",\n  \"results\": [\n", f);
    for (int i = 0; i < sh->nsizes; i++) {
        const Row *row = &sh->rows[i];
        for (int p = 0; p < 2; p++) {
            fprintf(f, "    {\"bytes\": %zu, \"count\": %zu, \"placement\": \"%s\", \"algorithm\": ", row->bytes,
                    row->count, place_name(p));
            json_str(f, row->algo);
            fputs(", \"ccl\": ", f);
            json_stat(f, &row->st[IMPL_CCL][p], row->bytes, fac);
            fputs(", \"nccl\": ", f);
            json_stat(f, &row->st[IMPL_NCCL][p], row->bytes, fac);
            fputs(", \"nccl_sym\": ", f);
            json_stat(f, &row->st[IMPL_NCCL_SYM][p], row->bytes, fac);
            int m;
            double ratio = perf_ratio(row, p, &m);
            if (m >= 0)
                fprintf(f, ", \"ratio_vs_nccl\": %.4f, \"ratio_vs_nccl_mode\": \"%s\"", ratio, perf_nccl_mode_name(m));
            else
                fputs(", \"ratio_vs_nccl\": null, \"ratio_vs_nccl_mode\": null", f);
            fprintf(f, "}%s\n", i == sh->nsizes - 1 && p == 1 ? "" : ",");
        }
    }
    fputs("  ]\n}\n", f);
    return fclose(f);
}

/* ===== the SVG plot: busbw and latency against size, log-x, ours and NCCL's ===== */

typedef struct {
    double x0, y0, w, h;       /* the plotting area in SVG units */
    double lx0, lx1;           /* log2 of the size range */
    double ylo, yhi;           /* value range (log10 when ylog) */
    int ylog;
} Panel;

static double px(const Panel *p, double bytes) { return p->x0 + (log2(bytes) - p->lx0) / (p->lx1 - p->lx0) * p->w; }
static double py(const Panel *p, double v)
{
    double t = p->ylog ? (log10(v) - p->ylo) / (p->yhi - p->ylo) : (v - p->ylo) / (p->yhi - p->ylo);
    return p->y0 + p->h - t * p->h;
}

/* A "nice" upper bound for a linear axis: 1, 2 or 5 times a power of ten. */
static double nice_ceil(double v)
{
    if (v <= 0)
        return 1;
    double e = pow(10, floor(log10(v))), m = v / e;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * e;
}

static void svg_panel(FILE *f, const Shared *sh, const Panel *p, const char *ylabel, int latency)
{
    /* Frame, grid and ticks. */
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"white\" stroke=\"#444\"/>\n", p->x0,
            p->y0, p->w, p->h);
    int span = (int)(p->lx1 - p->lx0), every = span <= 12 ? 1 : span <= 24 ? 2 : 4;
    for (int e = (int)ceil(p->lx0); e <= (int)floor(p->lx1); e++) {
        if ((e - (int)ceil(p->lx0)) % every)
            continue;
        double x = px(p, ldexp(1, e));
        char lab[32];
        perf_fmt_size(lab, sizeof lab, (size_t)1 << e);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x, p->y0, x, p->y0 + p->h);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n", x,
                p->y0 + p->h + 15, lab);
    }
    if (p->ylog) {
        /* Decades, and 2 and 5 within them when there are few decades. */
        static const double steps[] = {1, 2, 5};
        int nsteps = p->yhi - p->ylo <= 3 ? 3 : 1;
        for (int d = (int)p->ylo; d <= (int)p->yhi; d++)
            for (int k = 0; k < nsteps; k++) {
                double v = steps[k] * pow(10, d);
                if (log10(v) > p->yhi + 1e-9)
                    break;
                double y = py(p, v);
                fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n", p->x0, y,
                        p->x0 + p->w, y, k ? "#eee" : "#ddd");
                fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g</text>\n", p->x0 - 5,
                        y + 4, v);
            }
    } else {
        for (int k = 0; k <= 5; k++) {
            double v = p->ylo + (p->yhi - p->ylo) * k / 5, y = py(p, v);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", p->x0, y, p->x0 + p->w, y);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g</text>\n", p->x0 - 5, y + 4, v);
        }
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">message size (bytes, log scale)</text>\n",
            p->x0 + p->w / 2, p->y0 + p->h + 34);
    fprintf(f, "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" font-size=\"12\" text-anchor=\"middle\">%s</text>\n",
            p->x0 - 48, p->y0 + p->h / 2, ylabel);
    /* The series: ours blue, NCCL plain orange, NCCL sym green; out-of-place solid,
     * in-place dashed. */
    static const char *color[NIMPL] = {"#1f77b4", "#ff7f0e", "#2ca02c"};
    double fac = busbw_factor(sh->coll, sh->nranks);
    for (int impl = 0; impl < NIMPL; impl++)
        for (int pl = 0; pl < 2; pl++) {
            char pts[PERF_MAX_SIZES * 32];
            size_t used = 0;
            int npts = 0;
            for (int i = 0; i < sh->nsizes; i++) {
                const Stat *s = &sh->rows[i].st[impl][pl];
                if (s->us <= 0)
                    continue;
                double v = latency ? s->us : algbw(sh->rows[i].bytes, s->us) * fac;
                if (p->ylog && v <= 0)
                    continue;
                used += (size_t)snprintf(pts + used, sizeof pts - used, "%.1f,%.1f ", px(p, (double)sh->rows[i].bytes), py(p, v));
                npts++;
            }
            if (!npts)
                continue;
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"%s\"/>\n", color[impl],
                    pl ? " stroke-dasharray=\"6,4\"" : "", pts);
            for (int i = 0; i < sh->nsizes; i++) {
                const Stat *s = &sh->rows[i].st[impl][pl];
                if (s->us <= 0)
                    continue;
                double v = latency ? s->us : algbw(sh->rows[i].bytes, s->us) * fac;
                char lab[32];
                perf_fmt_size(lab, sizeof lab, sh->rows[i].bytes);
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s %s %s: %.2f %s (%s)</title></circle>\n",
                        px(p, (double)sh->rows[i].bytes), py(p, v), color[impl], impl_name(impl), place_name(pl), lab, v,
                        latency ? "us" : "GB/s", impl == IMPL_CCL ? sh->rows[i].algo : impl_name(impl));
            }
        }
}

int perf_write_svg(const Shared *sh, const char *path)
{
    FILE *f = open_out(path);
    if (!f)
        return -1;
    const Opts *o = &sh->o;
    double fac = busbw_factor(sh->coll, sh->nranks), bwmax = 0, tmin = INFINITY, tmax = 0;
    for (int i = 0; i < sh->nsizes; i++)
        for (int impl = 0; impl < NIMPL; impl++)
            for (int pl = 0; pl < 2; pl++) {
                const Stat *s = &sh->rows[i].st[impl][pl];
                if (s->us <= 0)
                    continue;
                double bw = algbw(sh->rows[i].bytes, s->us) * fac;
                bwmax = bw > bwmax ? bw : bwmax;
                tmin = s->us < tmin ? s->us : tmin;
                tmax = s->us > tmax ? s->us : tmax;
            }
    if (tmax <= 0)
        tmin = 1, tmax = 10;
    double lx0 = log2((double)sh->sizes[0]), lx1 = log2((double)sh->sizes[sh->nsizes - 1]);
    if (lx1 - lx0 < 1)
        lx0 -= 0.5, lx1 += 0.5;
    Panel bw = {80, 70, 420, 300, lx0, lx1, 0, nice_ceil(bwmax * 1.05), 0};
    Panel lat = {600, 70, 420, 300, lx0, lx1, floor(log10(tmin)), ceil(log10(tmax)), 1};
    if (lat.yhi <= lat.ylo)
        lat.yhi = lat.ylo + 1;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1060\" height=\"470\" viewBox=\"0 0 1060 470\" "
               "font-family=\"sans-serif\">\n<rect width=\"1060\" height=\"470\" fill=\"white\"/>\n");
    char title[256];
    int zipf = strcmp(v_counts_name(sh), "zipf") == 0;
    snprintf(title, sizeof title, "%s%s %s%s%s, %d ranks, %s backend, %s", perf_colls[sh->coll].name,
             zipf ? " (zipf counts)" : "", ccl_dtype_name(o->dtype),
             perf_colls[sh->coll].reduces ? " " : "", perf_colls[sh->coll].reduces ? ccl_op_name(o->op) : "", sh->nranks,
             sh->backend == CCL_BACKEND_GPU ? "gpu" : "cpu",
             o->graph ? "CUDA graph" : sh->backend == CCL_BACKEND_GPU ? "CUDA events" : "host clock");
    fprintf(f, "<text x=\"530\" y=\"24\" font-size=\"16\" text-anchor=\"middle\" font-weight=\"bold\">ccl-perf: ");
    for (const char *s = title; *s; s++)
        fputs(*s == '<' ? "&lt;" : *s == '&' ? "&amp;" : (char[2]){*s, 0}, f);
    fprintf(f, "</text>\n<text x=\"530\" y=\"44\" font-size=\"12\" text-anchor=\"middle\">algorithm: ");
    for (const char *s = sh->algo_name; *s; s++)
        fputs(*s == '<' ? "&lt;" : *s == '&' ? "&amp;" : (char[2]){*s, 0}, f);
    if (sh->nc.available)
        fprintf(f, "; NCCL %d.%d.%d", sh->nc.version / 10000, sh->nc.version % 10000 / 100, sh->nc.version % 100);
    fputs("</text>\n", f);
    fprintf(f, "<text x=\"%.1f\" y=\"62\" font-size=\"13\" text-anchor=\"middle\">bus bandwidth (higher is better)</text>\n",
            bw.x0 + bw.w / 2);
    fprintf(f, "<text x=\"%.1f\" y=\"62\" font-size=\"13\" text-anchor=\"middle\">time per op (lower is better)</text>\n",
            lat.x0 + lat.w / 2);
    svg_panel(f, sh, &bw, "busbw (GB/s)", 0);
    svg_panel(f, sh, &lat, "time (us, log scale)", 1);
    /* Legend. */
    static const char *color[NIMPL] = {"#1f77b4", "#ff7f0e", "#2ca02c"};
    const char *who[NIMPL] = {"ccl", "NCCL", "NCCL sym"};
    int shown[NIMPL] = {1, sh->nc.available && sh->nc.plain, sh->nc.available && sh->nc.sym};
    int nshown = shown[0] + shown[1] + shown[2];
    double lx = 530 - nshown * 150, ly = 440;
    for (int impl = 0; impl < NIMPL; impl++)
        for (int pl = 0; pl < 2 && shown[impl]; pl++) {
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n", lx, ly,
                    lx + 30, ly, color[impl], pl ? " stroke-dasharray=\"6,4\"" : "");
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">%s %s</text>\n", lx + 36, ly + 4, who[impl], place_name(pl));
            lx += 150;
        }
    fputs("</svg>\n", f);
    return fclose(f);
}
