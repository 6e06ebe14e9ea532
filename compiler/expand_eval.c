/* expand_eval.c: what expand.c evaluates with, for one program and N (expand.h): the
 * errors it reports (once per source location, with the loop variables' values), the
 * names in scope (N, root, K, loop variables and lets; the header's top-level lets on
 * demand), expressions (64-bit, checked; `%` Euclidean; folds over a range) and sets
 * (others, all, comprehensions). Calls nothing of expand.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expand.h"

/* ---- errors ---- */

static int already_reported(Expander *x, SrcLoc loc)
{
    for (int i = 0; i < x->nreported; i++)
        if (x->reported[i].line == loc.line && x->reported[i].col == loc.col)
            return 1;
    if (x->nreported < MAX_REPORTED)
        x->reported[x->nreported++] = loc;
    return 0;
}

/* Reports once per source location, with the loop variables' values appended: one
 * line of source stands for many expanded steps. */
__attribute__((format(printf, 3, 4))) void cclc_xp_error(Expander *x, SrcLoc loc, const char *fmt, ...)
{
    x->failed = 1;
    if (already_reported(x, loc))
        return;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    int first = 1;
    for (int i = 0; i < x->env.n && (size_t)n < sizeof msg - 40; i++) {
        if (!x->env.v[i].is_loop)
            continue;
        n += snprintf(msg + n, sizeof msg - (size_t)n, "%s%s = %lld", first ? " (when " : ", ",
                      x->env.v[i].name, (long long)x->env.v[i].value);
        first = 0;
    }
    if (!first && (size_t)n < sizeof msg - 2)
        snprintf(msg + n, sizeof msg - (size_t)n, ")");
    cclc_diag_error(x->diag, loc, "%s", msg);
    if (x->diag->nerrors >= CCLC_MAX_ERRORS)
        x->aborted = 1;
}

/* ---- names ---- */

/* env is a stack (inner bindings shadow outer ones); `innermost` finds a name's top
 * binding in constant time, and each binding remembers the one it hides, so popping
 * back to a mark restores the map. */
static int lookup(Expander *x, const char *name, int64_t *out)
{
    int i = cclc_namemap_get(&x->innermost, name);
    if (i < 0)
        return 0;
    *out = x->env.v[i].value;
    return 1;
}

void cclc_xp_bind(Expander *x, const char *name, int64_t value, int is_loop)
{
    Binding b = {name, value, is_loop, cclc_namemap_get(&x->innermost, name)};
    vec_push(x->arena, &x->env, b);
    cclc_namemap_put(&x->innermost, x->arena, name, x->env.n - 1);
    x->loops += is_loop;
}

/* Drops the bindings made since env held `mark` of them. */
void cclc_xp_unbind_to(Expander *x, int mark)
{
    while (x->env.n > mark) {
        Binding *b = &x->env.v[--x->env.n];
        cclc_namemap_put(&x->innermost, x->arena, b->name, b->shadows);
        x->loops -= b->is_loop;
    }
}

/* ---- expressions: 64-bit, checked; `%` is Euclidean ---- */

/* A name the header uses that nothing binds yet: its first top-level let, evaluated
 * once (in header mode, where only N, root and the top-level lets are known). 1 and
 * the value, 0 after an error, -1 when no top-level let binds the name. The lets'
 * operator depths add up along a chain and stay within CCLC_MAX_EXPR_DEPTH, so the
 * recursion is as bounded as one expression's. */
static int header_let(Expander *x, const Expr *e, int64_t *out)
{
    int i = cclc_namemap_get(&x->toplets, e->name);
    if (i < 0)
        return -1;
    if (x->let_state[i] == 2) {
        *out = x->let_value[i];
        return 1;
    }
    const Stmt *s = x->ast->body.v[i];
    if (x->let_state[i] == 1) {
        cclc_xp_error(x, e->loc, "'%s' is defined through itself: the top-level let at line %d needs its own value",
              e->name, s->loc.line);
        return 0;
    }
    if (x->let_depth + s->value->depth > CCLC_MAX_EXPR_DEPTH) {
        cclc_xp_error(x, e->loc, "the header's values nest more than %d operators deep through top-level lets",
              CCLC_MAX_EXPR_DEPTH);
        return 0;
    }
    x->let_state[i] = 1;
    x->let_depth += s->value->depth;
    int ok = cclc_xp_eval(x, s->value, &x->let_value[i]);
    x->let_depth -= s->value->depth;
    x->let_state[i] = ok ? 2 : 0;
    if (ok)
        *out = x->let_value[i];
    return ok;
}

/* Evaluates e into *out; on error reports it and returns 0. */
/* The built-ins beyond log2, abs, min and max (eval): 1 and the value, 0 after an
 * error, -1 when e names none of them. */
static int builtin(Expander *x, const Expr *e, int nargs, int64_t a, int64_t b, int64_t *out)
{
    if (!strcmp(e->name, "clog2") && nargs == 1) {
        if (a <= 0) {
            cclc_xp_error(x, e->loc, "clog2 of %lld: the argument must be positive", (long long)a);
            return 0;
        }
        int64_t r = 0;
        while (r < 62 && ((int64_t)1 << r) < a)
            r++;
        *out = r;
        return 1;
    }
    if ((!strcmp(e->name, "node") || !strcmp(e->name, "local")) && nargs == 1) {
        /* The ranks are M nodes of L ranks (`nodes M x L`; one node of N without it):
         * rank r is local rank r % L of node r / L. */
        const Program *p = x->prog;
        if (a < 0 || a >= p->nranks) {
            cclc_xp_error(x, e->loc, "%s(%lld): rank %lld does not exist for N = %d", e->name, (long long)a, (long long)a,
                  p->nranks);
            return 0;
        }
        *out = e->name[0] == 'n' ? a / p->local : a % p->local;
        return 1;
    }
    if (!strcmp(e->name, "popcount") && nargs == 1) {
        if (a < 0) {
            cclc_xp_error(x, e->loc, "popcount of %lld: the argument must not be negative", (long long)a);
            return 0;
        }
        *out = __builtin_popcountll((unsigned long long)a);
        return 1;
    }
    if (!strcmp(e->name, "bitrev") && nargs == 2) {
        if (b < 0 || b > 62 || a < 0 || (b < 62 && a >= (int64_t)1 << b)) {
            cclc_xp_error(x, e->loc, "bitrev(%lld, %lld): the value must fit in the bits (0 <= x < 2^bits, bits <= 62)",
                  (long long)a, (long long)b);
            return 0;
        }
        int64_t r = 0;
        for (int64_t i = 0; i < b; i++)
            r |= (a >> i & 1) << (b - 1 - i);
        *out = r;
        return 1;
    }
    return -1;
}

/* sum(v in lo..hi: body), min(...), max(...): the body evaluated with v bound to each
 * value of the half-open range, in order. Bounded: at most MAX_FOLD_TERMS terms, and
 * every term counts against the expansion's iterations. An empty range sums to 0 and
 * has no min or max. The recursion is the expression's depth (CCLC_MAX_EXPR_DEPTH). */
static int eval_fold(Expander *x, const Expr *e, int64_t *out)
{
    int kind = !strcmp(e->name, "sum") ? 0 : !strcmp(e->name, "min") ? 1 : !strcmp(e->name, "max") ? 2 : -1;
    if (kind < 0) {
        cclc_xp_error(x, e->loc, "unknown fold '%s' (known: sum, min and max over a range, e.g. sum(i in 0..N: f(i)))",
              e->name);
        return 0;
    }
    int64_t lo, hi;
    if (!cclc_xp_eval(x, e->cond, &lo) || !cclc_xp_eval(x, e->rhs, &hi))
        return 0;
    int64_t span;
    if (hi > lo && (__builtin_sub_overflow(hi, lo, &span) || span > MAX_FOLD_TERMS)) {
        cclc_xp_error(x, e->loc, "%s over %lld..%lld has more than %d terms", e->name, (long long)lo, (long long)hi,
              MAX_FOLD_TERMS);
        return 0;
    }
    if (hi <= lo && kind) {
        cclc_xp_error(x, e->loc, "%s over the empty range %lld..%lld has no value", e->name, (long long)lo, (long long)hi);
        return 0;
    }
    int mark = x->env.n, ok = 1;
    int64_t acc = 0;
    for (int64_t i = lo; i < hi; i++) {
        if (!cclc_xp_count_iteration(x, e->loc)) {
            ok = 0;
            break;
        }
        cclc_xp_unbind_to(x, mark);
        cclc_xp_bind(x, e->var, i, 1);
        int64_t v;
        if (!cclc_xp_eval(x, e->lhs, &v)) {
            ok = 0;
            break;
        }
        if (i == lo && kind)
            acc = v;
        else if (kind == 1)
            acc = v < acc ? v : acc;
        else if (kind == 2)
            acc = v > acc ? v : acc;
        else if (__builtin_add_overflow(acc, v, &acc)) {
            cclc_xp_error(x, e->loc, "integer overflow in %s (the result does not fit in 64 bits)", e->name);
            ok = 0;
            break;
        }
    }
    cclc_xp_unbind_to(x, mark);
    if (ok)
        *out = acc;
    return ok;
}

int cclc_xp_eval(Expander *x, const Expr *e, int64_t *out)
{
    int64_t a = 0, b = 0;
    switch (e->kind) {
    case EX_INT:
        *out = e->value;
        return 1;
    case EX_NAME: {
        if (lookup(x, e->name, out))
            return 1;
        int found = x->header ? header_let(x, e, out) : -1;
        if (found >= 0)
            return found;
        const char *kname = x->ast->chunks_name ? x->ast->chunks_name : "K";
        if (x->header && !strcmp(e->name, kname))
            cclc_xp_error(x, e->loc, "'%s' is the chunk count, which is not known yet here: 'ranks', 'where' and "
                  "'chunks' (and the top-level lets they use) cannot depend on it", kname);
        else if (!strcmp(e->name, "root"))
            cclc_xp_error(x, e->loc, "'root' is only defined in broadcast and reduce algorithms");
        else
            cclc_xp_error(x, e->loc, "unknown name '%s'", e->name);
        return 0;
    }
    case EX_UNARY:
        if (!cclc_xp_eval(x, e->lhs, &a))
            return 0;
        if (e->op == '!') {
            *out = !a;
            return 1;
        }
        if (a == INT64_MIN) {
            cclc_xp_error(x, e->loc, "integer overflow in negation");
            return 0;
        }
        *out = -a;
        return 1;
    case EX_CALL: {
        int nargs = e->rhs ? 2 : 1;
        if (!cclc_xp_eval(x, e->lhs, &a) || (e->rhs && !cclc_xp_eval(x, e->rhs, &b)))
            return 0;
        if (!strcmp(e->name, "log2") && nargs == 1) {
            if (a <= 0) {
                cclc_xp_error(x, e->loc, "log2 of %lld: the argument must be positive", (long long)a);
                return 0;
            }
            int64_t r = 0;
            while (a >>= 1)
                r++;
            *out = r;
            return 1;
        }
        if (!strcmp(e->name, "abs") && nargs == 1) {
            if (a == INT64_MIN) {
                cclc_xp_error(x, e->loc, "integer overflow in abs(%lld)", (long long)a);
                return 0;
            }
            *out = a < 0 ? -a : a;
            return 1;
        }
        if (!strcmp(e->name, "min") && nargs == 2) {
            *out = a < b ? a : b;
            return 1;
        }
        if (!strcmp(e->name, "max") && nargs == 2) {
            *out = a > b ? a : b;
            return 1;
        }
        int known = builtin(x, e, nargs, a, b, out);
        if (known >= 0)
            return known;
        cclc_xp_error(x, e->loc, "unknown function '%s' with %d argument%s (known: log2(x), clog2(x), popcount(x), abs(x), "
              "min(a, b), max(a, b), bitrev(x, bits), node(r), local(r))", e->name, nargs, nargs == 1 ? "" : "s");
        return 0;
    }
    case EX_FOLD:
        return eval_fold(x, e, out);
    case EX_COND:
        /* Only the branch taken is evaluated: `v > 0 ? log2(v) : 0` is fine at v = 0. */
        if (!cclc_xp_eval(x, e->cond, &a))
            return 0;
        return cclc_xp_eval(x, a ? e->lhs : e->rhs, out);
    case EX_BINARY:
        break;
    }
    /* Short-circuit operators evaluate their right side only when needed. */
    if (e->op == ANDAND || e->op == OROR) {
        if (!cclc_xp_eval(x, e->lhs, &a))
            return 0;
        if ((e->op == ANDAND && !a) || (e->op == OROR && a)) {
            *out = e->op == OROR;
            return 1;
        }
        if (!cclc_xp_eval(x, e->rhs, &b))
            return 0;
        *out = b != 0;
        return 1;
    }
    if (!cclc_xp_eval(x, e->lhs, &a) || !cclc_xp_eval(x, e->rhs, &b))
        return 0;
    int64_t r = 0;
    int overflow = 0;
    switch (e->op) {
    case '+': overflow = __builtin_add_overflow(a, b, &r); break;
    case '-': overflow = __builtin_sub_overflow(a, b, &r); break;
    case '*': overflow = __builtin_mul_overflow(a, b, &r); break;
    case '/':
    case '%':
        if (b == 0) {
            cclc_xp_error(x, e->loc, "division by zero");
            return 0;
        }
        if (a == INT64_MIN && b == -1) {
            overflow = 1;
            break;
        }
        if (e->op == '/') {
            r = a / b;
        } else {
            r = a % b;
            if (r < 0)
                r += b < 0 ? -b : b;
        }
        break;
    case SHL:
    case SHR:
        if (b < 0 || b > 62) {
            cclc_xp_error(x, e->loc, "shift by %lld is out of range 0..62", (long long)b);
            return 0;
        }
        if (e->op == SHR) {
            r = a >> b;
        } else {
            overflow = a < 0 || a > (INT64_MAX >> b);
            r = overflow ? 0 : a << b;
        }
        break;
    case '&': r = a & b; break;
    case '|': r = a | b; break;
    case '^': r = a ^ b; break;
    case '<': r = a < b; break;
    case '>': r = a > b; break;
    case LE: r = a <= b; break;
    case GE: r = a >= b; break;
    case EQ: r = a == b; break;
    case NE: r = a != b; break;
    default: internal_error("unknown binary operator %d", e->op);
    }
    if (overflow) {
        cclc_xp_error(x, e->loc, "integer overflow (the result does not fit in 64 bits)");
        return 0;
    }
    *out = r;
    return 1;
}

/* Evaluates an expression that must lie in [lo, hi]; `what` names it in the error. */
int cclc_xp_eval_in(Expander *x, const Expr *e, int64_t lo, int64_t hi, const char *what, int64_t *out)
{
    if (!cclc_xp_eval(x, e, out))
        return 0;
    if (*out < lo || *out > hi) {
        cclc_xp_error(x, e->loc, "%s is %lld, outside %lld..%lld", what, (long long)*out, (long long)lo, (long long)hi);
        return 0;
    }
    return 1;
}

/* Counts loop iterations against the global bound, so a loop of billions of empty
 * iterations fails fast instead of running for hours. */
int cclc_xp_count_iteration(Expander *x, SrcLoc loc)
{
    if (++x->iterations <= MAX_ITERATIONS)
        return 1;
    cclc_xp_error(x, loc, "the program expands to more than %d loop iterations; is a loop bound wrong?", MAX_ITERATIONS);
    x->aborted = 1;
    return 0;
}

/* ---- sets ---- */

/* Spreads a set into its values, in order. `others` excludes the enclosing `on`'s rank;
 * `all` is 0..N-1. Returns 0 after an error. */
int cclc_xp_eval_set(Expander *x, const SetExpr *s, IntVec *out)
{
    int n = x->prog->nranks;
    switch (s->kind) {
    case SET_ONE: {
        int64_t v;
        if (!cclc_xp_eval(x, s->elem, &v))
            return 0;
        vec_push(x->arena, out, v);
        return 1;
    }
    case SET_OTHERS:
    case SET_ALL:
        if (s->kind == SET_OTHERS && x->on_rank < 0) {
            cclc_xp_error(x, s->loc, "'others' means every rank but this one, so it needs an enclosing 'on'");
            return 0;
        }
        for (int p = 0; p < n; p++)
            if (s->kind == SET_ALL || p != x->on_rank)
                vec_push(x->arena, out, p);
        return 1;
    case SET_COMPREHENSION: {
        int64_t lo, hi;
        if (!cclc_xp_eval(x, s->lo, &lo) || !cclc_xp_eval(x, s->hi, &hi))
            return 0;
        int mark = x->env.n;
        for (int64_t i = lo; i < hi && !x->aborted; i++) {
            if (!cclc_xp_count_iteration(x, s->loc))
                break;
            cclc_xp_unbind_to(x, mark);
            cclc_xp_bind(x, s->var, i, 1);
            int64_t keep = 1, v;
            if (s->cond && !cclc_xp_eval(x, s->cond, &keep))
                break;
            if (keep && cclc_xp_eval(x, s->elem, &v))
                vec_push(x->arena, out, v);
        }
        cclc_xp_unbind_to(x, mark);
        return !x->failed || out->n > 0;
    }
    }
    return 0;
}
