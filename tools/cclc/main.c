/* main.c: cclc, the CCL compiler's command line.
 *
 *   cclc check FILE --ranks N [--root R] [--explain]
 *   cclc plan  FILE --ranks N [--root R] [--json]
 *   cclc cuda  FILE --ranks N --rank R [--root R] [--protocol P] [--dtype T] [--op O]
 *   cclc run   FILE --ranks N ...          (runs it; see tools/cclc/run.c)
 *
 * Exit status: 0 proved (or printed); 1 the program has errors (diagnostics on stderr);
 * 2 a usage error: unknown flag, unreadable file, N out of range or not admitted by the
 * algorithm's `ranks`/`where` lines.
 *
 * The pipeline itself is cclc_compile_source() in compile.c: every pass, in order, in one
 * function that libccl calls too. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ccl.h"
#include "cclc.h"
#include "run.h"

enum { EXIT_PROGRAM_ERROR = 1, EXIT_USAGE = 2 };
enum { MAX_SOURCE_BYTES = 16 << 20 };

static const char usage[] =
    "usage: cclc COMMAND FILE --ranks N [options]\n"
    "\n"
    "commands:\n"
    "  check FILE --ranks N [--root R] [--explain]\n"
    "        prove the algorithm for N ranks: postcondition, no data race, no deadlock,\n"
    "        safe across back-to-back calls; --explain prints what was proved\n"
    "  plan FILE --ranks N [--root R] [--json]\n"
    "        print the scheduled plan: per rank and thread block, each op and its line\n"
    "  cuda FILE --ranks N --rank R [--root R] [--protocol simple|ll] [--dtype T] [--op O]\n"
    "        [--kernel-only]\n"
    "        print the CUDA C kernel for one rank (--kernel-only: without the prelude\n"
    "        every kernel shares, compiler/cuda/prelude.cuh)\n"
    "  run FILE --ranks N [--backend cpu|gpu] [--count C] [--dtype T] [--op O] [--iters K]\n"
    "        [--inplace] [--seed S] [--root R]\n"
    "        run the algorithm on real data and check every element\n"
    "\n"
    "  cclc --help | --version\n"
    "\n"
    "exit status: 0 success, 1 errors in the program, 2 usage errors (including N not\n"
    "admitted by the algorithm's 'ranks' and 'where' lines)\n";

typedef struct {
    const char *command;
    const char *file;
    int nranks;
    int rank;
    int root;
    int explain;
    int json;
    EmitOptions emit;
} Options;

__attribute__((format(printf, 1, 2))) static _Noreturn void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cclc: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(run 'cclc --help' for usage)\n");
    va_end(ap);
    exit(EXIT_USAGE);
}

static int parse_int_arg(const char *flag, const char *s)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || end == s || *end || errno || v < -1000000000L || v > 1000000000L)
        usage_error("%s needs an integer, got '%s'", flag, s ? s : "(nothing)");
    return (int)v;
}

static Options parse_args(int argc, char **argv)
{
    Options o = {.nranks = -1, .rank = -1, .emit = {.dtype = "f32", .op = "sum", .protocol = -1}};
    o.command = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--ranks")) {
            o.nranks = parse_int_arg(a, val), i++;
        } else if (!strcmp(a, "--rank")) {
            o.rank = parse_int_arg(a, val), i++;
        } else if (!strcmp(a, "--root")) {
            o.root = parse_int_arg(a, val), i++;
        } else if (!strcmp(a, "--explain")) {
            o.explain = 1;
        } else if (!strcmp(a, "--json")) {
            o.json = 1;
        } else if (!strcmp(a, "--kernel-only")) {
            o.emit.kernel_only = 1;
        } else if (!strcmp(a, "--dtype") || !strcmp(a, "--op") || !strcmp(a, "--protocol")) {
            if (!val)
                usage_error("%s needs a value", a);
            ccl_dtype_t dtype;
            ccl_op_t op;
            /* Canonical names for the emitter: "e4m3" and "fp8_e4m3" are one dtype. */
            if (!strcmp(a, "--dtype") && ccl_dtype_parse(val, &dtype) == 0)
                o.emit.dtype = ccl_dtype_name(dtype);
            else if (!strcmp(a, "--dtype"))
                usage_error("unknown dtype '%s' (f32, f64, f16, bf16, i32, i64, u8, fp8_e4m3, fp8_e5m2)", val);
            else if (!strcmp(a, "--op") && ccl_op_parse(val, &op) == 0)
                o.emit.op = ccl_op_name(op);
            else if (!strcmp(a, "--op"))
                usage_error("unknown op '%s' (sum, prod, min, max, avg)", val);
            else if (!strcmp(val, "simple"))
                o.emit.protocol = PROTO_SIMPLE;
            else if (!strcmp(val, "ll"))
                o.emit.protocol = PROTO_LL;
            else
                usage_error("unknown protocol '%s' (expected simple or ll)", val);
            i++;
        } else if (a[0] == '-' && a[1]) {
            usage_error("unknown option '%s'", a);
        } else if (!o.file) {
            o.file = a;
        } else {
            usage_error("unexpected argument '%s' (one FILE per run)", a);
        }
    }
    if (!o.file)
        usage_error("'%s' needs a FILE", o.command);
    if (o.nranks == -1)
        usage_error("'%s' needs --ranks N", o.command);
    if (o.nranks < 1 || o.nranks > CCLC_MAX_RANKS)
        usage_error("--ranks %d is out of range 1..%d", o.nranks, CCLC_MAX_RANKS);
    if (!strcmp(o.command, "cuda") && (o.rank < 0 || o.rank >= o.nranks))
        usage_error("'cuda' needs --rank R with 0 <= R < %d", o.nranks);
    return o;
}

/* Reads a whole file, NUL-terminated. Exits with a usage error when it cannot. */
static char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        usage_error("cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode))
        usage_error("'%s' is a directory, not a .ccl file", path);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf)
            usage_error("out of memory reading '%s'", path);
        n += fread(buf + n, 1, cap - n - 1, f);
        if (ferror(f))
            usage_error("cannot read '%s': %s", path, strerror(errno));
        if (feof(f))
            break;
        if (n > MAX_SOURCE_BYTES)
            usage_error("'%s' is over %d MiB; CCL sources are small", path, MAX_SOURCE_BYTES >> 20);
        cap *= 2;
        buf = realloc(buf, cap);
    }
    fclose(f);
    buf[n] = 0;
    *size = n;
    return buf;
}

static int exit_with_diagnostics(Compilation *c, int status)
{
    fputs(c->diag.out ? c->diag.out : "", stderr);
    if (c->diag.nerrors > 1)
        fprintf(stderr, "%d errors\n", c->diag.nerrors);
    cclc_compilation_free(c);
    return status;
}

/* Compiles the file (cclc_compile_source: parse, admit N, expand, verify, schedule), then
 * prints what the command asks for. */
static int compile_file(const Options *o, const char *text, size_t size)
{
    Compilation c;
    int rc = cclc_compile_source(&c, o->file, text, size, o->nranks, o->root);
    if (rc == COMPILE_NOT_ADMITTED)
        return exit_with_diagnostics(&c, EXIT_USAGE);
    if (rc != 0)
        return exit_with_diagnostics(&c, EXIT_PROGRAM_ERROR);

    if (!strcmp(o->command, "check")) {
        if (o->explain)
            cclc_verify_explain(stdout, c.prog, &c.proof);
    } else if (!strcmp(o->command, "plan")) {
        if (o->json)
            cclc_plan_print_json(stdout, c.plan);
        else
            cclc_plan_print_text(stdout, c.plan);
    } else {
        EmitOptions emit = o->emit;
        if ((int)emit.protocol < 0)
            emit.protocol = c.prog->protocol;
        cclc_emit_cuda(stdout, c.plan, o->rank, &emit);
    }
    cclc_compilation_free(&c);
    return fflush(stdout) == 0 ? 0 : EXIT_USAGE;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage_error("no command given");
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(usage, stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("cclc %s\n", CCLC_VERSION);
        return 0;
    }
    if (!strcmp(argv[1], "run"))
        return cclc_run_command(argc - 2, argv + 2);
    if (strcmp(argv[1], "check") && strcmp(argv[1], "plan") && strcmp(argv[1], "cuda"))
        usage_error("unknown command '%s' (expected check, plan, cuda or run)", argv[1]);
    Options o = parse_args(argc, argv);
    size_t size;
    char *text = read_file(o.file, &size);
    int status = compile_file(&o, text, size);
    free(text);
    return status;
}
