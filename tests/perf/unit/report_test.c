/* tests/perf/unit/report_test.c: what ccl-perf decides about NCCL's two modes, tested
 * without a GPU: which mode a ratio is taken against (perf_nccl_faster, perf_ratio),
 * which modes run for --nccl-mode (perf_nccl_modes), why the symmetric mode is absent
 * (perf_nccl_sym_check, and perf_nccl_load on stand-in libraries built from
 * fake_nccl.c, and on the real libnccl where REAL_NCCL names it), and the report made
 * from given timings (symmetric and plain buffers): the tables on stdout, and the
 * CSV, JSON and SVG of the first in OUTDIR; and, in data.c, alltoallv's count matrix
 * (perf_v_counts) as --help describes it, its Zipf-skewed form (perf_v_counts_zipf), and
 * the integer dtypes' exact data. tests/perf/run.sh builds it against the
 * build's objects, compares stdout and the CSV with goldens (report.golden,
 * report.csv.golden) and checks the JSON and the SVG.
 *
 *   report_test OUTDIR FAKEDIR
 *
 * FAKEDIR holds libnccl-2.26.so (2.26.5 with ncclMemAlloc), libnccl-nowin.so (2.28.9
 * with ncclMemAlloc, no windows) and libnccl-2.28.so (2.28.9, everything). One line per
 * group of checks on stderr: "ok perf unit-NAME", or "FAIL perf unit-NAME: ..." with
 * both sides; exit 1 when any failed. */
#include "perf.h"

static const char *group_name;
static int group_failed, failures;

static void group(const char *name)
{
    if (group_name && !group_failed)
        fprintf(stderr, "ok perf unit-%s\n", group_name);
    group_name = name;
    group_failed = 0;
}

static void fail(const char *what, const char *got, const char *want)
{
    fprintf(stderr, "FAIL perf unit-%s: %s: got '%s', expected '%s'\n", group_name, what, got, want);
    group_failed = 1;
    failures++;
}

static void check_int(const char *what, long long got, long long want)
{
    char g[32], w[32];
    snprintf(g, sizeof g, "%lld", got);
    snprintf(w, sizeof w, "%lld", want);
    if (got != want)
        fail(what, g, w);
}

static void check_str(const char *what, const char *got, const char *want)
{
    if (strcmp(got, want) != 0)
        fail(what, got, want);
}

static void check_dbl(const char *what, double got, double want)
{
    char g[32], w[32];
    snprintf(g, sizeof g, "%.6f", got);
    snprintf(w, sizeof w, "%.6f", want);
    if (fabs(got - want) > 1e-9)
        fail(what, g, w);
}

/* One placement of a row: our time and NCCL's in both modes (< 0: not timed). */
static void set(Row *r, int p, double ccl, double plain, double sym)
{
    double us[NIMPL] = {ccl, plain, sym};
    for (int i = 0; i < NIMPL; i++)
        r->st[i][p] = (Stat){us[i], us[i] < 0 ? -1 : 0, 0};
}

static void test_faster(void)
{
    group("faster");
    static const struct {
        double plain, sym;
        int want;
    } cases[] = {
        {12, 6, IMPL_NCCL_SYM},   /* sym faster */
        {6, 12, IMPL_NCCL},       /* plain faster */
        {9, 9, IMPL_NCCL},        /* a tie: plain */
        {9, -1, IMPL_NCCL},       /* sym not timed (no windows, or in-place alltoall) */
        {-1, 9, IMPL_NCCL_SYM},   /* --nccl-mode sym */
        {-1, -1, -1},             /* no NCCL */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Row r = {0};
        set(&r, 1, 10, cases[i].plain, cases[i].sym);
        char what[64];
        snprintf(what, sizeof what, "plain %g, sym %g", cases[i].plain, cases[i].sym);
        check_int(what, perf_nccl_faster(&r, 1), cases[i].want);
        int m;
        double ratio = perf_ratio(&r, 1, &m);
        check_int(what, m, cases[i].want);
        check_dbl(what, ratio, cases[i].want < 0 ? -1 : 10 / r.st[cases[i].want][1].us);
    }
    /* The placements are independent. */
    Row r = {0};
    set(&r, 0, 10, 20, 5);
    set(&r, 1, 10, 5, 20);
    check_int("out-of-place", perf_nccl_faster(&r, 0), IMPL_NCCL_SYM);
    check_int("in-place", perf_nccl_faster(&r, 1), IMPL_NCCL);
    check_str("names", perf_nccl_mode_name(IMPL_NCCL), "plain");
    check_str("names", perf_nccl_mode_name(IMPL_NCCL_SYM), "sym");
}

static void test_sym_check(void)
{
    group("sym-check");
    char why[512];
    check_int("2.26.5", perf_nccl_sym_check(22605, "/x/libnccl.so.2", NULL, why, sizeof why), 0);
    check_str("2.26.5", why, "NCCL 2.26.5 has no symmetric windows (ncclCommWindowRegister came in 2.27)");
    /* A version too old wins over a missing symbol: it names the fix. */
    check_int("2.8.4", perf_nccl_sym_check(2804, "/x/libnccl.so.2", "ncclMemAlloc", why, sizeof why), 0);
    check_str("2.8.4", why, "NCCL 2.8.4 has no symmetric windows (ncclCommWindowRegister came in 2.27)");
    check_int("lacks", perf_nccl_sym_check(22809, "/x/libnccl.so.2", "ncclCommWindowRegister", why, sizeof why), 0);
    check_str("lacks", why, "NCCL 2.28.9 (/x/libnccl.so.2) lacks ncclCommWindowRegister");
    check_int("2.27.0", perf_nccl_sym_check(22700, "/x/libnccl.so.2", NULL, why, sizeof why), 1);
    check_str("2.27.0", why, "");
}

/* perf_nccl_load on a stand-in library: found, its version, and the symmetric mode. */
static void load(const char *dir, const char *file, NcclStatus *st)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    setenv("CCL_NCCL_LIB", path, 1);
    memset(st, 0, sizeof *st);
    memset(&perf_nccl, 0, sizeof perf_nccl);
    perf_nccl_load(st);
    check_str("path", st->path, path);
    check_int("available", st->available, 1);
}

static void test_load(const char *dir)
{
    group("load");
    NcclStatus st;
    char want[1024];
    load(dir, "libnccl-2.26.so", &st);
    check_int("2.26 version", st.version, 22605);
    check_int("2.26 sym_lib", st.sym_lib, 0);
    check_str("2.26 sym_why", st.sym_why, "NCCL 2.26.5 has no symmetric windows (ncclCommWindowRegister came in 2.27)");
    /* ncclMemAlloc exists in 2.26, but without windows none of the four is used. */
    check_int("2.26 MemAlloc unset", perf_nccl.MemAlloc == NULL, 1);

    load(dir, "libnccl-nowin.so", &st);
    check_int("nowin sym_lib", st.sym_lib, 0);
    snprintf(want, sizeof want, "NCCL 2.28.9 (%s/libnccl-nowin.so) lacks ncclCommWindowRegister", dir);
    check_str("nowin sym_why", st.sym_why, want);
    check_int("nowin AllReduce set", perf_nccl.AllReduce != NULL, 1);

    load(dir, "libnccl-2.28.so", &st);
    check_int("2.28 version", st.version, 22809);
    check_int("2.28 sym_lib", st.sym_lib, 1);
    check_str("2.28 sym_why", st.sym_why, "");
    check_int("2.28 window symbols", perf_nccl.MemAlloc && perf_nccl.MemFree && perf_nccl.CommWindowRegister &&
                                         perf_nccl.CommWindowDeregister, 1);
    unsetenv("CCL_NCCL_LIB");
}

/* The real libnccl, where the machine has one (REAL_NCCL: its path; no GPU needed to
 * load it): windows exactly from 2.27 on, and then all four window symbols. */
static void test_real(void)
{
    const char *path = getenv("REAL_NCCL");
    if (!path || !*path) {
        fprintf(stderr, "skip perf unit-real-nccl: no libnccl.so.2 given (REAL_NCCL)\n");
        return;
    }
    group("real-nccl");
    NcclStatus st = {0};
    setenv("CCL_NCCL_LIB", path, 1);
    memset(&perf_nccl, 0, sizeof perf_nccl);
    perf_nccl_load(&st);
    unsetenv("CCL_NCCL_LIB");
    check_int("available", st.available, 1);
    check_str("path", st.path, path);
    check_int("sym_lib", st.sym_lib, st.version >= 22700);
    if (st.sym_lib)
        check_int("window symbols", perf_nccl.MemAlloc && perf_nccl.MemFree && perf_nccl.CommWindowRegister &&
                                        perf_nccl.CommWindowDeregister, 1);
    else
        check_int("sym_why given", st.sym_why[0] != 0, 1);
    fprintf(stderr, "  (%s: NCCL version %d, symmetric windows: %s)\n", path, st.version,
            st.sym_lib ? "yes" : st.sym_why);
}

static void test_modes(void)
{
    group("modes");
    static const struct {
        int mode, sym_lib;
        int available, plain, sym;
        const char *why, *sym_why;
    } cases[] = {
        {PERF_NCCL_BEST, 1, 1, 1, 1, "", ""},
        {PERF_NCCL_BEST, 0, 1, 1, 0, "", "NCCL 2.26.5 has no symmetric windows"},
        {PERF_NCCL_PLAIN, 1, 1, 1, 0, "", "not asked for (--nccl-mode plain)"},
        {PERF_NCCL_SYM, 1, 1, 0, 1, "", ""},
        {PERF_NCCL_SYM, 0, 0, 0, 0, "--nccl-mode sym, but NCCL 2.26.5 has no symmetric windows",
         "NCCL 2.26.5 has no symmetric windows"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        NcclStatus st = {.wanted = 1, .available = 1, .sym_lib = cases[i].sym_lib};
        if (!cases[i].sym_lib)
            snprintf(st.sym_why, sizeof st.sym_why, "NCCL 2.26.5 has no symmetric windows");
        perf_nccl_modes(&st, cases[i].mode);
        char what[64];
        snprintf(what, sizeof what, "case %zu", i);
        check_int(what, st.available, cases[i].available);
        check_int(what, st.plain, cases[i].plain);
        check_int(what, st.sym, cases[i].sym);
        check_str(what, st.why, cases[i].why);
        check_str(what, st.sym_why, cases[i].sym_why);
    }
    /* No NCCL: no mode, and the reason stays. */
    NcclStatus st = {.wanted = 1};
    snprintf(st.why, sizeof st.why, "libnccl.so.2 not found");
    perf_nccl_modes(&st, PERF_NCCL_BEST);
    check_int("no NCCL", st.plain + st.sym, 0);
    check_str("no NCCL", st.why, "libnccl.so.2 not found");
}

/* A 4-rank bf16 allreduce with made-up timings that exercise every way a ratio is taken. */
static void fill_shared(Shared *sh)
{
    memset(sh, 0, sizeof *sh);
    sh->o = (Opts){.coll = PERF_ALLREDUCE, .dtype = CCL_BF16, .op = CCL_SUM, .graph = 1, .check = 1,
                   .compare_nccl = 1, .iters = 20, .warmup = 5, .repeats = 10};
    sh->coll = PERF_ALLREDUCE;
    sh->nranks = 4;
    sh->processes = 1;
    sh->backend = CCL_BACKEND_GPU;
    snprintf(sh->devname, sizeof sh->devname, "test device x4");
    snprintf(sh->algo_name, sizeof sh->algo_name, "the library's choice per size (ccl_all_reduce)");
    snprintf(sh->method, sizeof sh->method, "made-up timings (tests/perf/unit/report_test.c)");
    sh->nc = (NcclStatus){.wanted = 1, .available = 1, .version = 22809, .sym_lib = 1, .plain = 1, .sym = 1};
    snprintf(sh->nc.path, sizeof sh->nc.path, "/opt/nccl/lib/libnccl.so.2");
    static const struct {
        size_t bytes;
        const char *algo;
        double t[2][3];    /* [placement][ccl, plain, sym] */
    } rows[] = {
        {1024, "allpairs_ll", {{8, 12, 6}, {8.5, 12, 6.5}}},          /* sym wins; we are slower */
        {65536, "allpairs_ll", {{10, 11, 10.5}, {10, 11, -1}}},       /* sym wins out, in-place plain only */
        {1048576, "oneshot", {{20, 25, 30}, {21, 25, 30}}},           /* plain wins; we are faster */
        {16777216, "ring", {{100, 90, 90}, {101, 90, 90}}},           /* a tie: plain */
    };
    sh->nsizes = (int)(sizeof rows / sizeof rows[0]);
    for (int i = 0; i < sh->nsizes; i++) {
        Row *r = &sh->rows[i];
        sh->sizes[i] = rows[i].bytes;
        r->bytes = rows[i].bytes;
        r->count = rows[i].bytes / 2;
        snprintf(r->algo, sizeof r->algo, "%s", rows[i].algo);
        for (int p = 0; p < 2; p++)
            set(r, p, rows[i].t[p][0], rows[i].t[p][1], rows[i].t[p][2]);
    }
}

static void print_table(const Shared *sh)
{
    long long wrong;
    perf_print_header(sh);
    for (int i = 0; i < sh->nsizes; i++)
        perf_print_row(sh, &sh->rows[i]);
    perf_print_footer(sh, &wrong);
    check_int("wrong", wrong, 0);
}

static void test_report(const char *outdir)
{
    static Shared sh;
    char path[PATH_MAX];
    group("report");
    setenv("NCCL_NVLS_ENABLE", "0", 1);

    printf("# ==== both modes (--nccl-mode best, NCCL 2.28.9)\n");
    fill_shared(&sh);
    print_table(&sh);
    snprintf(path, sizeof path, "%s/report.csv", outdir);
    check_int("csv", perf_write_csv(&sh, path), 0);
    snprintf(path, sizeof path, "%s/report.json", outdir);
    check_int("json", perf_write_json(&sh, path), 0);
    snprintf(path, sizeof path, "%s/report.svg", outdir);
    check_int("svg", perf_write_svg(&sh, path), 0);

    printf("# ==== a library without windows (NCCL 2.26.5): plain only, the header says why\n");
    fill_shared(&sh);
    sh.nc.version = 22605;
    sh.nc.sym_lib = perf_nccl_sym_check(sh.nc.version, sh.nc.path, NULL, sh.nc.sym_why, sizeof sh.nc.sym_why);
    perf_nccl_modes(&sh.nc, PERF_NCCL_BEST);
    for (int i = 0; i < sh.nsizes; i++)
        for (int p = 0; p < 2; p++)
            sh.rows[i].st[IMPL_NCCL_SYM][p] = (Stat){-1, -1, 0};
    print_table(&sh);

    printf("# ==== --nccl-mode sym\n");
    fill_shared(&sh);
    sh.o.nccl_mode = PERF_NCCL_SYM;
    perf_nccl_modes(&sh.nc, PERF_NCCL_SYM);
    for (int i = 0; i < sh.nsizes; i++)
        for (int p = 0; p < 2; p++)
            sh.rows[i].st[IMPL_NCCL][p] = (Stat){-1, -1, 0};
    print_table(&sh);

    printf("# ==== registration failed with --nccl-mode sym: no NCCL columns\n");
    fill_shared(&sh);
    sh.o.nccl_mode = PERF_NCCL_SYM;
    perf_nccl_modes(&sh.nc, PERF_NCCL_SYM);
    snprintf(sh.nc.why, sizeof sh.nc.why, "--nccl-mode sym, but ncclCommWindowRegister (send buffer, 33554432 bytes, "
             "NCCL_WIN_COLL_SYMMETRIC) failed on 4 of 4 ranks (rank 0: invalid usage, NCCL error 5)");
    sh.nc.available = 0;
    for (int i = 0; i < sh.nsizes; i++)
        for (int p = 0; p < 2; p++)
            sh.rows[i].st[IMPL_NCCL][p] = sh.rows[i].st[IMPL_NCCL_SYM][p] = (Stat){-1, -1, 0};
    print_table(&sh);

    /* What only a GPU shows: sendrecv under --graph, with the library refusing ours at
     * the two largest sizes. */
    printf("# ==== sendrecv under --graph, ours refused at 1M and 16M: out-of-place only\n");
    fill_shared(&sh);
    sh.o.coll = PERF_SENDRECV;
    sh.coll = PERF_SENDRECV;
    snprintf(sh.algo_name, sizeof sh.algo_name, "none: ccl_send to rank r+1 and ccl_recv from rank r-1 in one group (a ring)");
    snprintf(sh.refused_why, sizeof sh.refused_why, "ccl_send/ccl_recv group: ccl_send: the gpu backend does not run "
             "point-to-point calls yet; use the CPU backend");
    for (int i = 0; i < sh.nsizes; i++) {
        snprintf(sh.rows[i].algo, sizeof sh.rows[i].algo, "send/recv");
        for (int impl = 0; impl < NIMPL; impl++)
            sh.rows[i].st[impl][1] = (Stat){-1, -1, 0};
        if (i >= 2)
            sh.rows[i].st[IMPL_CCL][0] = (Stat){-1, -1, 1};
    }
    long long wrong;
    perf_print_header(&sh);
    for (int i = 0; i < sh.nsizes; i++)
        perf_print_row(&sh, &sh.rows[i]);
    perf_print_footer(&sh, &wrong);
    check_int("sendrecv: refused sizes", perf_refused_sizes(&sh), 2);
    /* The CSV: ours at the two sizes it ran, NCCL's at all four, all graphed. */
    snprintf(path, sizeof path, "%s/sendrecv.csv", outdir);
    check_int("sendrecv csv", perf_write_csv(&sh, path), 0);
    FILE *f = fopen(path, "r");
    char line[512];
    int ccl_graph = 0, nccl_graph = 0, lines = 0;
    while (f && fgets(line, sizeof line, f)) {
        lines++;
        ccl_graph += strstr(line, ",cuda-graph,ccl,send/recv,out-of-place,") != NULL;
        nccl_graph += strstr(line, ",cuda-graph,nccl,nccl,out-of-place,") != NULL ||
                      strstr(line, ",cuda-graph,nccl_sym,nccl_sym,out-of-place,") != NULL;
    }
    if (f)
        fclose(f);
    check_int("sendrecv csv: lines", lines, 1 + 2 + 8);
    check_int("sendrecv csv: ours, graphed", ccl_graph, 2);
    check_int("sendrecv csv: NCCL's, graphed", nccl_graph, 8);
}

/* --buffers plain and registered on a GPU: the header names the driver's allocation, the
 * CSV's last column but one reads "plain" (or "registered") on every line (NCCL's
 * included: it says how the run was made) and the JSON has "buffers": "plain". The
 * symmetric default is in the goldens. */
static void test_buffers(const char *outdir)
{
    static Shared sh;
    char path[PATH_MAX], line[512];
    group("buffers");
    printf("# ==== --buffers plain: ordinary device memory, staged by CCL where it must\n");
    fill_shared(&sh);
    sh.o.buffers = PERF_BUF_PLAIN;
    print_table(&sh);
    snprintf(path, sizeof path, "%s/plain.csv", outdir);
    check_int("plain csv", perf_write_csv(&sh, path), 0);
    FILE *f = fopen(path, "r");
    int lines = 0, plain = 0;
    while (f && fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        lines++;
        if (lines == 1)
            check_str("plain csv: header's last columns", n > 18 ? line + n - 18 : line, ",buffers,v_counts\n");
        else
            plain += n > 12 && !strcmp(line + n - 12, ",plain,none\n");
    }
    if (f)
        fclose(f);
    check_int("plain csv: lines", lines, 1 + 4 * 2 * 3 - 1);    /* one NCCL sym cell is not timed */
    check_int("plain csv: lines ending in ,plain,none", plain, lines - 1);
    snprintf(path, sizeof path, "%s/plain.json", outdir);
    check_int("plain json", perf_write_json(&sh, path), 0);
    f = fopen(path, "r");
    int found = 0;
    while (f && fgets(line, sizeof line, f))
        found += strstr(line, "\"buffers\": \"plain\"") != NULL;
    if (f)
        fclose(f);
    check_int("plain json: \"buffers\": \"plain\"", found, 1);
    check_str("name", perf_buffers_name(PERF_BUF_SYMMETRIC), "symmetric");

    /* --buffers registered on a GPU: the header says how the memory was made and that
     * CCL uses it in place (but for the v-collectives, which stage it still); every CSV
     * line ends in "registered" and so does the JSON's field. */
    printf("# ==== --buffers registered: cuMemCreate memory registered with ccl_mem_register\n");
    fill_shared(&sh);
    sh.o.buffers = PERF_BUF_REGISTERED;
    perf_print_header(&sh);
    sh.coll = sh.o.coll = PERF_ALLGATHERV;
    perf_print_header(&sh);
    sh.coll = sh.o.coll = PERF_ALLREDUCE;
    snprintf(path, sizeof path, "%s/registered.csv", outdir);
    check_int("registered csv", perf_write_csv(&sh, path), 0);
    f = fopen(path, "r");
    lines = 0;
    int registered = 0;
    while (f && fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        registered += ++lines > 1 && n > 17 && !strcmp(line + n - 17, ",registered,none\n");
    }
    if (f)
        fclose(f);
    check_int("registered csv: lines ending in ,registered,none", registered, lines - 1);
    snprintf(path, sizeof path, "%s/registered.json", outdir);
    check_int("registered json", perf_write_json(&sh, path), 0);
    f = fopen(path, "r");
    found = 0;
    while (f && fgets(line, sizeof line, f))
        found += strstr(line, "\"buffers\": \"registered\"") != NULL;
    if (f)
        fclose(f);
    check_int("registered json: \"buffers\": \"registered\"", found, 1);
    check_str("name registered", perf_buffers_name(PERF_BUF_REGISTERED), "registered");

    /* A v-collective's lines end in its --v-counts; the JSON names it too. */
    fill_shared(&sh);
    sh.coll = PERF_ALLTOALLV;
    sh.o.coll = PERF_ALLTOALLV;
    sh.o.v_counts = PERF_VCOUNTS_ZIPF;
    snprintf(path, sizeof path, "%s/zipf.csv", outdir);
    check_int("zipf csv", perf_write_csv(&sh, path), 0);
    f = fopen(path, "r");
    lines = 0;
    int zipf = 0;
    while (f && fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        zipf += ++lines > 1 && n > 16 && !strcmp(line + n - 16, ",symmetric,zipf\n");
    }
    if (f)
        fclose(f);
    check_int("zipf csv: lines ending in ,symmetric,zipf", zipf, lines - 1);
    snprintf(path, sizeof path, "%s/zipf.json", outdir);
    check_int("zipf json", perf_write_json(&sh, path), 0);
    f = fopen(path, "r");
    found = 0;
    while (f && fgets(line, sizeof line, f))
        found += strstr(line, "\"v_counts\": \"zipf\"") != NULL;
    if (f)
        fclose(f);
    check_int("zipf json: \"v_counts\": \"zipf\"", found, 1);
}

/* alltoallv's matrix: each row sums to the total exactly, follows the weights
 * 1 + ((q + 2p) mod (n+1)) with the remainder to the first peers, and is uneven for
 * every n >= 2 (a matrix whose rows were all even would measure alltoall). */
static void test_v_counts(void)
{
    group("v-counts");
    size_t c[16];
    char what[64];
    perf_v_counts(2, 400, 0, c);    /* weights 1, 3 */
    check_int("n=2 q=0 p=0", (long long)c[0], 100);
    check_int("n=2 q=0 p=1", (long long)c[1], 300);
    perf_v_counts(2, 400, 1, c);    /* weights 2, 1: 266.67 and 133.33, one left over */
    check_int("n=2 q=1 p=0", (long long)c[0], 267);
    check_int("n=2 q=1 p=1", (long long)c[1], 133);
    perf_v_counts(4, 13, 3, c);     /* weights 4, 1, 3, 5 */
    check_int("n=4 q=3 p=0", (long long)c[0], 4);
    check_int("n=4 q=3 p=1", (long long)c[1], 1);
    check_int("n=4 q=3 p=2", (long long)c[2], 3);
    check_int("n=4 q=3 p=3", (long long)c[3], 5);
    for (int n = 1; n <= 16; n++)
        for (size_t total = 0; total < 200; total += n < 4 ? 1 : 7) {
            int uneven = 0;
            for (int q = 0; q < n; q++) {
                perf_v_counts(n, total, q, c);
                size_t sum = 0;
                for (int p = 0; p < n; p++) {
                    sum += c[p];
                    uneven |= c[p] != c[0];
                }
                snprintf(what, sizeof what, "n=%d total=%zu q=%d: row sum", n, total, q);
                check_int(what, (long long)sum, (long long)total);
            }
            if (n >= 2 && total >= 100) {
                snprintf(what, sizeof what, "n=%d total=%zu: uneven", n, total);
                check_int(what, uneven, 1);
            }
        }
    perf_v_counts(3, SIZE_MAX, 2, c);    /* no overflow on the way */
    check_int("huge total", (long long)(c[0] + c[1] + c[2] == SIZE_MAX), 1);
}

/* Element j of an integer dtype's table: its bits, zero-extended to 64. */
static uint64_t elem_bits(const unsigned char *tab, int j, size_t es)
{
    uint64_t bits = 0;
    memcpy(&bits, tab + (size_t)j * es, es);    /* little-endian, as the machines are */
    return bits;
}

/* A key whose unsigned order is the order of es-byte integers read as signed or as
 * unsigned: signed ones sign-extended, then offset by 2^63. */
static uint64_t order_key(uint64_t bits, size_t es, int as_signed)
{
    if (!as_signed)
        return bits;
    if (es < 8 && bits >> (es * 8 - 1))
        bits |= ~((UINT64_C(1) << (es * 8)) - 1);
    return bits ^ (UINT64_C(1) << 63);
}

/* The min or max of column j over n ranks in the given signedness: its bits. */
static uint64_t column_pick(const Pattern *pat, int n, int j, size_t es, ccl_op_t op, int as_signed)
{
    uint64_t pick = elem_bits(pat->tab_in[0], j, es);
    for (int r = 1; r < n; r++) {
        uint64_t v = elem_bits(pat->tab_in[r], j, es), a = order_key(v, es, as_signed), b = order_key(pick, es, as_signed);
        if (op == CCL_MIN ? a < b : a > b)
            pick = v;
    }
    return pick;
}

/* The exact data of the integer dtypes (data.c): min and max expect what the dtype's own
 * order gives, and the data tells that order from the other signedness (a library that
 * compared u32 as signed, or i8 as unsigned, would fail --check); no input or expected
 * element is the poison (all ones). And NCCL's number for every dtype (nccl.h). */
static void test_patterns(void)
{
    group("patterns");
    static const ccl_dtype_t ints[] = {CCL_I8, CCL_I32, CCL_I64, CCL_U8, CCL_U32, CCL_U64};
    char what[96];
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
        ccl_dtype_t t = ints[k];
        size_t es = ccl_dtype_size(t);
        int as_signed = !tool_dtype_unsigned(t);
        uint64_t ones = es == 8 ? UINT64_MAX : (UINT64_C(1) << (es * 8)) - 1;
        for (ccl_op_t op = CCL_MIN; op <= CCL_MAX; op++) {
            const int n = 3;
            Pattern pat;
            perf_pattern_init(&pat, n, PERF_ALLREDUCE, op, t);
            int differs = 0, poison = 0, wrong = 0;
            for (int j = 0; j < PERF_PERIOD; j++) {
                for (int r = 0; r < n; r++)
                    poison += elem_bits(pat.tab_in[r], j, es) == ones;
                uint64_t want = column_pick(&pat, n, j, es, op, as_signed), got = elem_bits(pat.tab_red, j, es);
                wrong += got != want;
                poison += got == ones;
                differs += column_pick(&pat, n, j, es, op, !as_signed) != want;
            }
            snprintf(what, sizeof what, "%s %s: expected elements that are not the dtype's %s", ccl_dtype_name(t),
                     ccl_op_name(op), ccl_op_name(op));
            check_int(what, wrong, 0);
            snprintf(what, sizeof what, "%s %s: inputs or results equal to the poison", ccl_dtype_name(t),
                     ccl_op_name(op));
            check_int(what, poison, 0);
            /* u8's values reach 200 (exact_max), so they have the top bit set too. */
            snprintf(what, sizeof what, "%s %s: columns where the other signedness picks another element",
                     ccl_dtype_name(t), ccl_op_name(op));
            check_int(what, differs > PERF_PERIOD / 10, 1);
            perf_pattern_fini(&pat, n);
        }
    }
    static const int nccl[CCL_NUM_DTYPES] = {[CCL_F32] = 7, [CCL_F64] = 8, [CCL_F16] = 6, [CCL_BF16] = 9,
        [CCL_I32] = 2, [CCL_I64] = 4, [CCL_U8] = 1, [CCL_FP8_E4M3] = 10, [CCL_FP8_E5M2] = 11, [CCL_I8] = 0,
        [CCL_U32] = 3, [CCL_U64] = 5};
    for (int t = 0; t < CCL_NUM_DTYPES; t++) {
        snprintf(what, sizeof what, "NCCL's number for %s", ccl_dtype_name((ccl_dtype_t)t));
        check_int(what, perf_nccl_dtype((ccl_dtype_t)t), nccl[t]);
    }
}

/* --v-counts zipf (perf_v_counts_zipf): rows sum to the total; every count but the most
 * loaded one is a multiple of the unit; shares follow 1/(k+1)^1.2 (the most loaded
 * peer gets the most, and more than twice the least at large totals); rows are
 * permuted differently; the same arguments give the same row. */
static void test_v_counts_zipf(void)
{
    group("v-counts-zipf");
    size_t c[64], d[64];
    char what[96];
    perf_v_counts_zipf(4, 1000, 0, 4, c);
    snprintf(what, sizeof what, "%zu %zu %zu %zu", c[0], c[1], c[2], c[3]);
    check_str("n=4 total=1000 unit=4 q=0", what, "228 532 140 100");
    perf_v_counts_zipf(4, 7, 0, 4, c);    /* less than a unit: all of it to the most loaded */
    snprintf(what, sizeof what, "%zu %zu %zu %zu", c[0], c[1], c[2], c[3]);
    check_str("n=4 total=7 unit=4 q=0", what, "0 7 0 0");
    int permuted = 0;
    for (int n = 1; n <= 64; n += n < 8 ? 1 : 7)
        for (size_t total = 0; total < 5000; total += 1 + total * 3) {
            size_t unit = (size_t)(1 + n % 4) * 2;
            for (int q = 0; q < n; q++) {
                perf_v_counts_zipf(n, total, q, unit, c);
                perf_v_counts_zipf(n, total, q, unit, d);
                size_t sum = 0, most = 0, least = SIZE_MAX;
                int odd = 0, top = 0;
                for (int p = 0; p < n; p++) {
                    sum += c[p];
                    odd += c[p] % unit != 0;
                    top = c[p] > c[top] ? p : top;
                    most = c[p] > most ? c[p] : most;
                    least = c[p] < least ? c[p] : least;
                }
                snprintf(what, sizeof what, "n=%d total=%zu q=%d: row sum", n, total, q);
                check_int(what, (long long)sum, (long long)total);
                snprintf(what, sizeof what, "n=%d total=%zu q=%d: counts not a multiple of %zu", n, total, q, unit);
                check_int(what, odd - (c[top] % unit != 0), 0);
                snprintf(what, sizeof what, "n=%d total=%zu q=%d: the same twice", n, total, q);
                check_int(what, memcmp(c, d, sizeof *c * (size_t)n), 0);
                if (n >= 2 && total >= 1000 * unit) {
                    snprintf(what, sizeof what, "n=%d total=%zu q=%d: skewed (most > 2 x least)", n, total, q);
                    check_int(what, most > 2 * least, 1);
                }
                perf_v_counts_zipf(n, total, 0, unit, d);
                permuted |= q > 0 && total >= 1000 && memcmp(c, d, sizeof *c * (size_t)n) != 0;
            }
        }
    check_int("rows permuted differently", permuted, 1);
    perf_v_counts_zipf(3, SIZE_MAX, 1, 2, c);    /* no overflow on the way */
    check_int("huge total", (long long)(c[0] + c[1] + c[2] == SIZE_MAX), 1);
    check_str("names", perf_v_counts_name(PERF_VCOUNTS_ZIPF), "zipf");
    check_str("names", perf_v_counts_name(PERF_VCOUNTS_PROPORTIONAL), "proportional");
    /* perf_v_row: zipf in units of 16 bytes; proportional as perf_v_counts. */
    perf_v_row(PERF_VCOUNTS_ZIPF, 4, 1000, 0, 4, c);
    check_int("perf_v_row zipf f32: unit 4 elements", (long long)c[1], 532);
    perf_v_row(PERF_VCOUNTS_ZIPF, 4, 1000, 0, 1, c);
    perf_v_counts_zipf(4, 1000, 0, 16, d);
    check_int("perf_v_row zipf u8: unit 16 elements", memcmp(c, d, 4 * sizeof *c), 0);
    perf_v_row(PERF_VCOUNTS_PROPORTIONAL, 4, 13, 3, 4, c);
    check_int("perf_v_row proportional", (long long)(c[0] * 1000 + c[1] * 100 + c[2] * 10 + c[3]), 4135);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: report_test OUTDIR FAKEDIR\n");
        return 2;
    }
    test_faster();
    test_sym_check();
    test_load(argv[2]);
    test_real();
    test_modes();
    test_report(argv[1]);
    test_buffers(argv[1]);
    test_v_counts();
    test_v_counts_zipf();
    test_patterns();
    group(NULL);
    fflush(stdout);
    return failures ? 1 : 0;
}
