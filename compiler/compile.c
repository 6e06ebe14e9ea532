/* compile.c: the whole pipeline as one library call, for libccl and for cclc.
 *
 * Source text in, Plan out (or rendered diagnostics): parse, check that the program
 * admits N, expand, verify, schedule. Each stage runs only when the one before it
 * reported nothing, so errors never cascade across passes. */
#include <stdlib.h>
#include <string.h>

#include "cclc.h"

/* The passes, in order. */
static int run_passes(Compilation *c, int nranks, int root)
{
    c->ast = parse_source(c->arena, &c->src, &c->diag);
    if (!c->ast)
        return -1;
    if (!expand_admits(c->ast, nranks, root, &c->diag))
        return COMPILE_NOT_ADMITTED;
    c->prog = expand_program(c->arena, c->ast, nranks, root, &c->diag);
    if (!c->prog)
        return -1;
    if (verify_program(c->arena, c->prog, &c->proof, &c->diag) != 0)
        return -1;
    c->plan = schedule_program(c->arena, c->prog, &c->proof);
    return 0;
}

int compile_source(Compilation *c, const char *file, const char *text, size_t size, int nranks, int root)
{
    memset(c, 0, sizeof *c);
    c->arena = arena_new();
    c->src = (Source){.file = file, .text = text, .size = size};
    diag_init(&c->diag, &c->src);
    /* libccl compiles inside the user's process: running out of memory is an error to
     * report, not a reason to abort. Everything allocated so far belongs to the arena. */
    jmp_buf oom;
    if (setjmp(oom)) {
        arena_on_oom(c->arena, NULL);
        diag_plain(&c->diag, "out of memory while compiling for N = %d", nranks);
        return -1;
    }
    arena_on_oom(c->arena, &oom);
    int rc = run_passes(c, nranks, root);
    arena_on_oom(c->arena, NULL);
    return rc;
}

void compilation_free(Compilation *c)
{
    diag_fini(&c->diag);
    arena_free(c->arena);
    memset(c, 0, sizeof *c);
}
