/* tests/perf/unit/report_test.c: what ccl-perf decides about NCCL's two modes, tested
 * without a GPU: which modes run for --nccl-mode (perf_nccl_modes) and why the
 * symmetric mode is absent (perf_nccl_sym_check, and perf_nccl_load on stand-in
 * libraries built from fake_nccl.c). tests/perf/run.sh builds it against the build's
 * objects.
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

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: report_test OUTDIR FAKEDIR\n");
        return 2;
    }
    test_sym_check();
    test_load(argv[2]);
    test_modes();
    group(NULL);
    fflush(stdout);
    return failures ? 1 : 0;
}
