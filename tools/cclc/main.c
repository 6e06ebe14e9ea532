/* main.c: cclc, the CCL compiler's command line.
 *
 *   cclc check FILE --ranks N [--nodes M] [--root R] [--explain] [--all-errors]
 *   cclc plan  FILE --ranks N [--nodes M] [--root R] [--json]
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

#include "ccl.h"
#include "cclc.h"
#include "harness.h"
#include "run.h"

enum { EXIT_PROGRAM_ERROR = 1, EXIT_USAGE = 2 };
enum { MAX_SOURCE_BYTES = 16 << 20 };

static const char usage[] =
    "usage: cclc COMMAND FILE --ranks N [options]\n"
    "\n"
    "commands:\n"
    "  check FILE --ranks N [--nodes M] [--root R] [--explain] [--all-errors]\n"
    "        prove the algorithm for N ranks: postcondition, no data race, no deadlock,\n"
    "        safe across back-to-back calls; --explain prints what was proved.\n"
    "        --nodes M: the N ranks are M nodes of N / M (programs with 'nodes M x L')\n"
    "        Errors come cause first (a race or a missing wait at its site before its\n"
    "        effects, such as a signal never waited for); the effects are left out\n"
    "        unless --all-errors\n"
    "  plan FILE --ranks N [--nodes M] [--root R] [--json]\n"
    "        print the scheduled plan: per rank and thread block, each op and its line\n"
    "  cuda FILE --ranks N --rank R [--root R] [--protocol simple|ll|ll128] [--dtype T] [--op O]\n"
    "        [--kernel-only]\n"
    "        print the CUDA C kernel for one rank (--kernel-only: without the prelude\n"
    "        every kernel shares, compiler/cuda/prelude.cuh)\n"
    "  run FILE --ranks N [--backend cpu|gpu] [--count C] [--dtype T] [--op O] [--iters K]\n"
    "        [--inplace] [--back-to-back] [--seed S] [--root R] [--host-buffers]\n"
    "        [--timeout-ms MS]\n"
    "        run the algorithm on real data and check every element:\n"
    "        --iters K         K calls in a row (default 3)\n"
    "        --inplace         in and out as one buffer; where the verifier did not prove\n"
    "                          the program in place, the runtime copies in first (and\n"
    "                          says so)\n"
    "        --back-to-back    the calls without waiting in between, each on its own\n"
    "                          buffers, checked at the end\n"
    "        --host-buffers    the user buffers in ordinary host memory, not the heap\n"
    "        --timeout-ms MS   give up on a call that takes longer\n"
    "\n"
    "  cclc --help | --version\n"
    "\n"
    "exit status: 0 success, 1 errors in the program, 2 usage errors (including N not\n"
    "admitted by the algorithm's 'ranks' and 'where' lines)\n";

typedef struct {
    const char *command;
    const char *file;
    int nranks;
    int nnodes;           /* --nodes M: N ranks as M nodes (1: one node) */
    int rank;
    int root;
    int explain;
    int json;
    int all_errors;       /* check: print every error, not only the root causes */
    EmitOptions emit;
} Options;

/* Each command's line, printed after its usage errors (as `cclc run` prints its own). */
static const char *command_usage(const char *command)
{
    if (!strcmp(command, "check"))
        return "usage: cclc check FILE --ranks N [--nodes M] [--root R] [--explain] [--all-errors]\n";
    if (!strcmp(command, "plan"))
        return "usage: cclc plan FILE --ranks N [--nodes M] [--root R] [--json]\n";
    return "usage: cclc cuda FILE --ranks N --rank R [--root R] [--protocol simple|ll|ll128] [--dtype T] [--op O]\n"
           "                 [--kernel-only]\n";
}

/* check, plan and cuda read their options with the harness (tools/common/options.c), as
 * `cclc run`, ccl-perf and ccl-tune do: one spelling, one number syntax (decimal, K/M/G)
 * and one message per bad value, naming the option and the value as written. */
static Options parse_args(int argc, char **argv)
{
    Options o = {.nranks = -1, .nnodes = 1, .rank = -1, .emit = {.dtype = "f32", .op = "sum", .protocol = -1}};
    o.command = argv[1];
    static char name[16];   /* tool_init keeps the pointer */
    snprintf(name, sizeof name, "cclc %s", o.command);
    tool_init(name, "cclc --help", command_usage(o.command));
    int cuda = !strcmp(o.command, "cuda");
    ccl_dtype_t dtype = CCL_F32;
    ccl_op_t op = CCL_SUM;
    /* --dtype and --op only where they mean something: the kernel's element and op. */
    const ToolShared shared = {.ranks = &o.nranks, .max_ranks = CCLC_MAX_RANKS, .dtype = cuda ? &dtype : NULL,
                               .op = cuda ? &op : NULL};
    ToolArgs args = tool_args(argc, argv, 2, &shared);
    while (tool_next(&args)) {
        const char *a = args.flag;
        if (tool_operand(&args, &o.file))
            continue;
        if (tool_is(&args, "--root", NULL)) {
            o.root = tool_int(a, tool_value(&args), 0, CCLC_MAX_RANKS - 1);
        } else if (!cuda && tool_is(&args, "--nodes", NULL)) {
            o.nnodes = tool_int(a, tool_value(&args), 1, CCLC_MAX_RANKS);
        } else if (!strcmp(o.command, "check") && tool_flag(&args, "--explain")) {
            o.explain = 1;
        } else if (!strcmp(o.command, "check") && tool_flag(&args, "--all-errors")) {
            o.all_errors = 1;
        } else if (!strcmp(o.command, "plan") && tool_flag(&args, "--json")) {
            o.json = 1;
        } else if (cuda && tool_is(&args, "--rank", NULL)) {
            o.rank = tool_int(a, tool_value(&args), 0, CCLC_MAX_RANKS - 1);
        } else if (cuda && tool_flag(&args, "--kernel-only")) {
            o.emit.kernel_only = 1;
        } else if (cuda && tool_is(&args, "--protocol", NULL)) {
            static const char *const protocols[] = {[PROTO_SIMPLE] = "simple", [PROTO_LL] = "ll", [PROTO_LL128] = "ll128"};
            o.emit.protocol = (Protocol)tool_choice(a, tool_value(&args), protocols, 3);
        } else {
            tool_unknown(&args);
        }
    }
    /* Canonical names for the emitter: "e4m3" and "fp8_e4m3" are one dtype. */
    o.emit.dtype = ccl_dtype_name(dtype);
    o.emit.op = ccl_op_name(op);
    if (!o.file)
        tool_usage_error("no algorithm FILE given");
    if (o.nranks == -1)
        tool_usage_error("--ranks N is required");
    if (o.nranks % o.nnodes != 0)
        tool_usage_error("--nodes %d: %d ranks are not %d nodes of equal size", o.nnodes, o.nranks, o.nnodes);
    if (cuda && o.rank == -1)
        tool_usage_error("--rank R is required (the rank whose kernel to print, 0..%d)", o.nranks - 1);
    if (cuda && o.rank >= o.nranks)
        tool_usage_error("--rank %d: expected an integer in 0..%d (--ranks %d)", o.rank, o.nranks - 1, o.nranks);
    return o;
}

/* Reads the whole FILE (tool_read_file); a usage error when it cannot. */
static char *read_source(const char *path, size_t *size)
{
    char *text = tool_read_file(path, MAX_SOURCE_BYTES, size);
    if (!text && errno == EISDIR)
        tool_usage_error("'%s' is a directory, not a .ccl file", path);
    if (!text && errno == EFBIG)
        tool_usage_error("'%s' is over %d MiB; CCL sources are small", path, MAX_SOURCE_BYTES >> 20);
    if (!text)
        tool_usage_error("cannot read '%s': %s", path, strerror(errno));
    return text;
}

/* Prints the diagnostics, cause first (cclc_compile_source orders them so): without
 * --all-errors only the root causes, and a note on how many effects were left out. */
static int exit_with_diagnostics(Compilation *c, int status, int all_errors)
{
    const Diag *d = &c->diag;
    int shown = d->nerrors;
    if (d->out && d->effects > 0 && !all_errors) {
        fwrite(d->out, 1, d->causes_len, stderr);
        shown = d->nerrors - d->effects;
        fprintf(stderr, "%s: note: %d more error%s not shown, which may follow from %s (a signal never waited "
                "for after a missing wait, ...): fix %s first, or see all with --all-errors\n", c->src.file,
                d->effects, d->effects == 1 ? "" : "s", shown == 1 ? "this one" : "these", shown == 1 ? "it" : "them");
    } else {
        fputs(d->out ? d->out : "", stderr);
    }
    if (shown > 1)
        fprintf(stderr, "%d errors\n", shown);
    cclc_compilation_free(c);
    return status;
}

/* Compiles the file (cclc_compile_source: parse, admit N, expand, verify, schedule), then
 * prints what the command asks for. */
static int compile_file(const Options *o, const char *text, size_t size)
{
    Compilation c;
    int rc = cclc_compile_source_nodes(&c, o->file, text, size, o->nranks, o->nnodes, o->root);
    if (rc == COMPILE_NOT_ADMITTED)
        return exit_with_diagnostics(&c, EXIT_USAGE, o->all_errors);
    if (rc != 0)
        return exit_with_diagnostics(&c, EXIT_PROGRAM_ERROR, o->all_errors);

    if (!strcmp(o->command, "check")) {
        if (o->explain)
            cclc_verify_explain(stdout, c.prog, &c.proof);
    } else if (!strcmp(o->command, "plan")) {
        if (o->json)
            cclc_plan_print_json(stdout, c.plan);
        else
            cclc_plan_print_text(stdout, c.plan);
    } else if (cclc_emit_cuda_refusal(c.plan)) {
        cclc_diag_error(&c.diag, c.ast->coll_loc, "%s", cclc_emit_cuda_refusal(c.plan));
        return exit_with_diagnostics(&c, EXIT_PROGRAM_ERROR, o->all_errors);
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
    tool_init("cclc", "cclc --help", "usage: cclc COMMAND FILE --ranks N [options] (see cclc --help)\n");
    if (argc < 2)
        tool_usage_error("no command given");
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
        tool_usage_error("unknown command '%s' (expected check, plan, cuda or run)", argv[1]);
    Options o = parse_args(argc, argv);
    size_t size;
    char *text = read_source(o.file, &size);
    int status = compile_file(&o, text, size);
    free(text);
    return status;
}
