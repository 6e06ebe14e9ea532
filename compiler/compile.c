/* compile.c: the whole pipeline as one library call, for libccl and for cclc.
 *
 * Source text in, Plan out (or rendered diagnostics): parse, check that the program
 * admits N, expand, verify, schedule. Each stage runs only when the one before it
 * reported nothing, so errors never cascade across passes. */
#include <stdlib.h>
#include <string.h>

#include "cclc.h"

/* The passes, in order. */
static CompileResult run_passes(Compilation *c, int nranks, int nnodes, int root)
{
    c->ast = cclc_parse_source(c->arena, &c->src, &c->diag);
    if (!c->ast)
        return COMPILE_ERRORS;
    if (!cclc_expand_admits(c->ast, nranks, nnodes, root, &c->diag))
        return COMPILE_NOT_ADMITTED;
    c->prog = cclc_expand_program(c->arena, c->ast, nranks, nnodes, root, &c->diag);
    if (!c->prog)
        return COMPILE_ERRORS;
    if (cclc_verify_program(c->arena, c->prog, &c->proof, &c->diag) != 0)
        return COMPILE_ERRORS;
    c->plan = cclc_schedule_program(c->arena, c->prog, &c->proof);
    return COMPILE_OK;
}

CompileResult cclc_compile_source(Compilation *c, const char *file, const char *text, size_t size, int nranks, int root)
{
    return cclc_compile_source_nodes(c, file, text, size, nranks, 1, root);
}

CompileResult cclc_compile_source_nodes(Compilation *c, const char *file, const char *text, size_t size, int nranks,
                                        int nnodes, int root)
{
    memset(c, 0, sizeof *c);
    c->src = (Source){.file = file, .text = text, .size = size};
    cclc_diag_init(&c->diag, &c->src);
    /* libccl compiles inside the user's process: running out of memory is an error to
     * report, not a reason to abort. The arena is c's and cclc_compilation_free frees it. */
    jmp_buf oom;
    jmp_buf *outer = cclc_oom_jump(&oom);
    if (setjmp(oom)) {
        cclc_oom_jump(outer);
        cclc_diag_plain(&c->diag, "out of memory while compiling for N = %d", nranks);
        return COMPILE_OUT_OF_MEMORY;
    }
    c->arena = cclc_arena_new();
    CompileResult rc = run_passes(c, nranks, nnodes, root);
    cclc_oom_jump(outer);
    return rc;
}

int cclc_compile_emit_cuda(FILE *out, const Plan *plan, int rank, const EmitOptions *opt)
{
    jmp_buf oom;
    jmp_buf *outer = cclc_oom_jump(&oom);
    if (setjmp(oom)) {
        cclc_oom_jump(outer);
        return -1;
    }
    cclc_emit_cuda(out, plan, rank, opt);
    cclc_oom_jump(outer);
    return 0;
}

void cclc_compilation_free(Compilation *c)
{
    cclc_diag_fini(&c->diag);
    cclc_arena_free(c->arena);
    memset(c, 0, sizeof *c);
}
