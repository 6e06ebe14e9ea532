/* expand.h: what the files of the expansion share, private to compiler/expand*.c: the
 * Expander (one expansion's state) and expand_eval.c's errors, names, expressions and
 * sets, which expand.c's statements, references and steps are built on. Non-static
 * names carry the prefix cclc_xp_. */
#ifndef CCLC_EXPAND_H
#define CCLC_EXPAND_H

#include "cclc.h"
#include "ccl.tab.h"

enum {
    MAX_ITERATIONS = 1 << 22, /* loop iterations of one expansion, all loops together */
    MAX_TB = 256,             /* logical thread blocks per rank */
    MAX_REPORTED = 256,       /* distinct source locations remembered for de-duplication */
    MAX_FOLD_TERMS = 1 << 20, /* terms of one fold (sum, min, max over a range) */
};

typedef struct {
    const char *name;
    int64_t value;
    int is_loop;              /* loop variables are shown in error context */
    int shadows;              /* the binding of the same name this one hides, or -1 */
} Binding;

typedef VEC(Step) StepVec;

typedef struct {
    Arena *arena;
    Diag *diag;
    const Ast *ast;
    Program *prog;
    VEC(Binding) env;         /* innermost binding last */
    long iterations;
    long nsteps;
    int failed;               /* an error was reported; keep checking, build nothing */
    int aborted;              /* a limit was hit; stop expanding */
    int on_rank;              /* rank of the enclosing `on`, -1 outside */
    int on_tb;
    StepVec *blocks;          /* [rank * 2 * MAX_TB + tb]; auto-assigned blocks at MAX_TB + k */
    VEC(const Stmt *) auto_on; /* `on` statements without `tb`, in the order first reached */
    int max_explicit_tb;
    int any_connect;
    SrcLoc reported[MAX_REPORTED];
    int nreported;
    NameMap innermost;        /* name -> index in env of its innermost binding */
    int loops;                /* loop variables in env */
    VEC(const char *) scratch_names;
    NameMap scratch_index;    /* name -> index in scratch_names */
    VEC(int) scratch_chunks;
    VEC(SrcLoc) scratch_locs;
    NameMap tag_index;        /* semaphore name -> its tag, 1.. */
    VEC(const char *) tag_names;
    /* The header's values (ranks, where, chunks, instances, pipeline) may use top-level
     * lets: while `header` is set, a name with no binding is looked up among them and
     * its first top-level let evaluated on demand (header_let). */
    int header;
    NameMap toplets;          /* name -> index in ast->body of its first top-level let */
    signed char *let_state;   /* per body index: 0 not evaluated, 1 in progress, 2 done */
    int64_t *let_value;
    int let_depth;            /* operator depth of the header lets being evaluated */
} Expander;

typedef VEC(int64_t) IntVec;

/* ===== expand_eval.c ===== */

/* Reports once per source location, with the loop variables' values appended: one
 * line of source stands for many expanded steps. Marks the expansion failed. */
__attribute__((format(printf, 3, 4))) void cclc_xp_error(Expander *x, SrcLoc loc, const char *fmt, ...);
/* Binds name to value (innermost first; is_loop: shown in errors' context); drops the
 * bindings made since env held `mark` of them. */
void cclc_xp_bind(Expander *x, const char *name, int64_t value, int is_loop);
void cclc_xp_unbind_to(Expander *x, int mark);
/* Evaluates e into *out; on error reports it and returns 0. _in: e must also lie in
 * [lo, hi] (`what` names it in the error). */
int cclc_xp_eval(Expander *x, const Expr *e, int64_t *out);
int cclc_xp_eval_in(Expander *x, const Expr *e, int64_t lo, int64_t hi, const char *what, int64_t *out);
/* Spreads a set into its values, in order; 0 after an error. */
int cclc_xp_eval_set(Expander *x, const SetExpr *s, IntVec *out);
/* Counts one loop iteration against the bound of one expansion; 0 (reported, aborted)
 * past it. */
int cclc_xp_count_iteration(Expander *x, SrcLoc loc);

#endif
