/* compile.c: the whole pipeline as one library call, for libccl and for cclc.
 *
 * Source text in, Plan out (or rendered diagnostics): parse, check that the program
 * admits N, expand, verify, schedule. Each stage runs only when the one before it
 * reported nothing, so errors never cascade across passes. */
#include <stdlib.h>
#include <string.h>

#include "cclc.h"

/* The passes, in order. */
static CompileResult run_passes(Compilation *c, int nranks, int root)
{
    c->ast = parse_source(c->arena, &c->src, &c->diag);
    if (!c->ast)
        return COMPILE_ERRORS;
    if (!expand_admits(c->ast, nranks, root, &c->diag))
        return COMPILE_NOT_ADMITTED;
    c->prog = expand_program(c->arena, c->ast, nranks, root, &c->diag);
    if (!c->prog)
        return COMPILE_ERRORS;
    if (verify_program(c->arena, c->prog, &c->proof, &c->diag) != 0)
        return COMPILE_ERRORS;
    c->plan = schedule_program(c->arena, c->prog, &c->proof);
    return COMPILE_OK;
}

CompileResult compile_source(Compilation *c, const char *file, const char *text, size_t size, int nranks, int root)
{
    memset(c, 0, sizeof *c);
    c->src = (Source){.file = file, .text = text, .size = size};
    diag_init(&c->diag, &c->src);
    /* libccl compiles inside the user's process: running out of memory is an error to
     * report, not a reason to abort. The arena is c's and compilation_free frees it. */
    jmp_buf oom;
    jmp_buf *outer = cclc_oom_jump(&oom);
    if (setjmp(oom)) {
        cclc_oom_jump(outer);
        diag_plain(&c->diag, "out of memory while compiling for N = %d", nranks);
        return COMPILE_OUT_OF_MEMORY;
    }
    c->arena = arena_new();
    CompileResult rc = run_passes(c, nranks, root);
    cclc_oom_jump(outer);
    return rc;
}

int compile_emit_cuda(FILE *out, const Plan *plan, int rank, const EmitOptions *opt)
{
    jmp_buf oom;
    jmp_buf *outer = cclc_oom_jump(&oom);
    if (setjmp(oom)) {
        cclc_oom_jump(outer);
        return -1;
    }
    emit_cuda(out, plan, rank, opt);
    cclc_oom_jump(outer);
    return 0;
}

void compilation_free(Compilation *c)
{
    diag_fini(&c->diag);
    arena_free(c->arena);
    memset(c, 0, sizeof *c);
}
