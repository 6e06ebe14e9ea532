/* expand.c: instantiate a program for a concrete rank count N.
 *
 * Takes the Ast and N (and the root of rooted collectives); gives a Program: for each
 * rank and logical thread block, the straight-line list of steps it executes, with every
 * loop unrolled, every expression folded, every set (others, comprehensions) spread into
 * single steps and every buffer reference resolved to (buffer, rank, chunk, count).
 *
 * Well-formedness is checked here, where the values are known: indices in range, a
 * reduce with an operand (empty sets are empty lists), peers valid, remote references
 * carried by a channel (memory and port within a node, net between nodes), constraints of the
 * header satisfied, and limits on size (steps, loop iterations) that keep a wrong
 * program from expanding forever. Errors name the loop variables' values, since one
 * source line stands for many expanded steps; each source location is reported once.
 *
 * Names: N (the `ranks` variable), M and L (`nodes M x L`: M nodes of L ranks; rank r on
 * node r / L, which the built-ins node(r) and local(r) give), root, the chunk count K (or the name `chunks NAME =`
 * gives it) from the header's `chunks` on, loop variables and lets. The header's values
 * are evaluated first, in header mode, where a name nothing binds yet is taken from its
 * first top-level let (header_let). Folds (sum/min/max over a range) bind their
 * variable like a loop and count their terms as iterations. Named semaphores get tags
 * 1.. in the order first reached (0 is the unnamed one).
 *
 * This file holds buffer references, steps, statements, the header, channels and the
 * pass itself; errors, names, expressions and sets are expand_eval.c's (expand.h), which
 * calls nothing here.
 */
#include <stdlib.h>
#include <string.h>

#include "expand.h"

/* ---- buffer references ---- */

/* Whether ranks a and b are on one node (`nodes M x L`: rank r on node r / L). */
static int same_node(const Program *p, int a, int b)
{
    return a / p->local == b / p->local;
}

static int find_buffer(Expander *x, const char *name)
{
    if (!strcmp(name, "in"))
        return BUF_IN;
    if (!strcmp(name, "out"))
        return BUF_OUT;
    int i = cclc_namemap_get(&x->scratch_index, name);
    return i < 0 ? -1 : BUF_SCRATCH0 + i;
}

static int buffer_chunks(Expander *x, int buf)
{
    const Program *p = x->prog;
    if (buf == BUF_IN)
        return cclc_coll_in_chunks(p->coll, p->nranks, p->chunks);
    if (buf == BUF_OUT)
        return cclc_coll_out_chunks(p->coll, p->nranks, p->chunks);
    return x->scratch_chunks.v[buf - BUF_SCRATCH0];
}

typedef VEC(Ref) RefVec;

/* Resolves a reference into one Ref per (peer, index) pair, peers outermost. */
static int eval_ref(Expander *x, const AstRef *r, RefVec *out)
{
    int buf = find_buffer(x, r->buf);
    if (buf < 0) {
        cclc_xp_error(x, r->loc, "unknown buffer '%s' (buffers are in, out and those declared with 'scratch')", r->buf);
        return 0;
    }
    int nchunks = buffer_chunks(x, buf);
    IntVec peers = {0}, idx = {0};
    /* An empty set (a comprehension that keeps nothing) is an empty list: the step it
     * is in does less, or nothing (expand_data_step says when that is an error). */
    if (r->peer) {
        if (!cclc_xp_eval_set(x, r->peer, &peers))
            return 0;
    } else {
        vec_push(x->arena, &peers, x->on_rank);
    }
    int64_t count = 1;
    if (r->index) {
        if (!cclc_xp_eval_set(x, r->index, &idx))
            return 0;
    } else if (r->lo) {
        int64_t lo, hi;
        if (!cclc_xp_eval(x, r->lo, &lo) || !cclc_xp_eval(x, r->hi, &hi))
            return 0;
        if (lo < 0 || hi > nchunks || lo >= hi) {
            cclc_xp_error(x, r->loc, "chunk range %lld..%lld is not within '%s' (%d chunks: 0..%d)", (long long)lo,
                  (long long)hi, r->buf, nchunks, nchunks);
            return 0;
        }
        vec_push(x->arena, &idx, lo);
        count = hi - lo;
    } else {
        vec_push(x->arena, &idx, 0);
        count = nchunks;
    }
    for (int i = 0; i < peers.n; i++) {
        if (peers.v[i] < 0 || peers.v[i] >= x->prog->nranks) {
            cclc_xp_error(x, r->loc, "rank %lld does not exist (N = %d: ranks 0..%d)", (long long)peers.v[i],
                  x->prog->nranks, x->prog->nranks - 1);
            return 0;
        }
        for (int j = 0; j < idx.n; j++) {
            if (idx.v[j] < 0 || idx.v[j] >= nchunks) {
                cclc_xp_error(x, r->loc, "chunk %lld is out of range for '%s' (%d chunk%s: 0..%d)", (long long)idx.v[j],
                      r->buf, nchunks, nchunks == 1 ? "" : "s", nchunks - 1);
                return 0;
            }
            Ref ref = {buf, (int)peers.v[i], (int)idx.v[j], (int)count};
            vec_push(x->arena, out, ref);
        }
    }
    return 1;
}

/* ---- steps ---- */

static StepVec *current_block(Expander *x)
{
    return &x->blocks[x->on_rank * 2 * MAX_TB + x->on_tb];
}

/* Counts every step, kept or not: after an error the expansion goes on only to find more
 * errors, and a program too large to expand must stop there too, not run through all its
 * steps (each one's evaluation takes memory until the compilation ends). */
static void emit_step(Expander *x, Step s)
{
    if (++x->nsteps > CCLC_MAX_STEPS) {
        cclc_xp_error(x, s.loc, "the program expands to more than %d steps for N = %d", CCLC_MAX_STEPS, x->prog->nranks);
        x->aborted = 1;
        return;
    }
    if (x->failed)
        return;
    vec_push(x->arena, current_block(x), s);
}

static const char *ref_text(Expander *x, Ref r)
{
    const char *name = r.buf == BUF_IN ? "in" : r.buf == BUF_OUT ? "out" : x->scratch_names.v[r.buf - BUF_SCRATCH0];
    if (r.count == 1)
        return cclc_arena_printf(x->arena, "%s@%d[%d]", name, r.rank, r.chunk);
    return cclc_arena_printf(x->arena, "%s@%d[%d..%d]", name, r.rank, r.chunk, r.chunk + r.count);
}

/* Data steps: put, get, copy, reduce. Destinations and each source spread into lists;
 * a list of one pairs with every destination, otherwise lists pair up in order. No
 * destination (an empty set) is no step; a reduce into one destination takes whatever
 * its operand lists hold, empty ones included, but needs one operand at least. */
static void expand_data_step(Expander *x, const Stmt *s)
{
    RefVec dsts = {0};
    if (!eval_ref(x, s->dst, &dsts))
        return;
    if (dsts.n == 0)
        return;
    int nsrc_lists = s->srcs.n;
    RefVec *srcs = cclc_arena_alloc(x->arena, sizeof *srcs * (size_t)nsrc_lists);
    for (int i = 0; i < nsrc_lists; i++) {
        if (!eval_ref(x, s->srcs.v[i], &srcs[i]))
            return;
    }
    /* A reduce into one destination takes every operand of every list. */
    int per_dst = s->step == STEP_REDUCE && dsts.n == 1;
    for (int i = 0; i < nsrc_lists && !per_dst; i++) {
        if (srcs[i].n != 1 && srcs[i].n != dsts.n) {
            cclc_xp_error(x, s->srcs.v[i]->loc, "'%s' has %d destinations but this operand stands for %d chunks; give one "
                  "or as many as destinations", cclc_step_name(s->step), dsts.n, srcs[i].n);
            return;
        }
    }
    for (int d = 0; d < dsts.n; d++) {
        Step st = {.kind = s->step, .loc = s->loc, .dst = dsts.v[d], .chan = s->chan};
        VEC(Ref) ops = {0};
        for (int i = 0; i < nsrc_lists; i++) {
            if (per_dst)
                for (int j = 0; j < srcs[i].n; j++)
                    vec_push(x->arena, &ops, srcs[i].v[j]);
            else
                vec_push(x->arena, &ops, srcs[i].v[srcs[i].n == 1 ? 0 : d]);
        }
        st.nsrc = ops.n;
        st.src = ops.v;
        if (st.nsrc == 0) {
            cclc_xp_error(x, s->loc, "this reduce has no operand: every operand set is empty here");
            return;
        }
        int me = x->on_rank;
        for (int i = 0; i < st.nsrc; i++) {
            if (st.src[i].count != st.dst.count) {
                cclc_xp_error(x, s->loc, "'%s' writes %d chunk%s of %s from %d chunk%s of %s; operands must cover the same "
                      "number of chunks", cclc_step_name(s->step), st.dst.count, st.dst.count == 1 ? "" : "s",
                      ref_text(x, st.dst), st.src[i].count, st.src[i].count == 1 ? "" : "s", ref_text(x, st.src[i]));
                return;
            }
        }
        /* A step's chunks run one after another, each split over the threads, so a
         * destination that overlaps a source at another position would read chunks the
         * step itself has just written (the proof, like the program text, means all at
         * once). The same position is fine: element by element, in place. (Between in
         * and out in place, the verifier's layout rule keeps every chunk at its own
         * position, which rules the same out.) */
        for (int i = 0; i < st.nsrc; i++) {
            if (st.dst.chunk != st.src[i].chunk && ref_ranges_overlap(st.dst, st.src[i])) {
                cclc_xp_error(x, s->loc, "'%s' writes %s while reading %s: the ranges overlap at different positions, so "
                      "the result would depend on the order its chunks are done in; read from another buffer "
                      "(e.g. a scratch copy) or split the step", cclc_step_name(s->step), ref_text(x, st.dst),
                      ref_text(x, st.src[i]));
                return;
            }
        }
        if (s->step == STEP_PUT && st.src[0].rank != me) {
            cclc_xp_error(x, s->srcs.v[0]->loc, "the source of a put is local, but this is %s on rank %d (use 'get' to read "
                  "a peer)", ref_text(x, st.src[0]), me);
            return;
        }
        if (s->step == STEP_GET && st.dst.rank != me) {
            cclc_xp_error(x, s->dst->loc, "the destination of a get is local, but this is %s on rank %d (use 'put' to write "
                  "a peer)", ref_text(x, st.dst), me);
            return;
        }
        if (s->step == STEP_COPY && (st.dst.rank != me || st.src[0].rank != me)) {
            cclc_xp_error(x, s->loc, "copy is local to rank %d; use put or get to move data between ranks", me);
            return;
        }
        emit_step(x, st);
    }
}

static void expand_sync_step(Expander *x, const Stmt *s)
{
    if (s->step == STEP_BARRIER) {
        emit_step(x, (Step){.kind = STEP_BARRIER, .loc = s->loc, .peer = -1});
        return;
    }
    IntVec peers = {0};
    if (!cclc_xp_eval_set(x, s->peers, &peers))
        return;
    int tag = 0;
    if (s->tag) {
        tag = cclc_namemap_get(&x->tag_index, s->tag);
        if (tag < 0) {
            vec_push(x->arena, &x->tag_names, s->tag);
            tag = x->tag_names.n;
            cclc_namemap_put(&x->tag_index, x->arena, s->tag, tag);
        }
    }
    /* An empty set of ranks (a comprehension that keeps nothing) signals or waits for
     * no one. */
    for (int i = 0; i < peers.n; i++) {
        int64_t p = peers.v[i];
        if (p < 0 || p >= x->prog->nranks) {
            cclc_xp_error(x, s->peers->loc, "'%s' names rank %lld, which does not exist (N = %d)", cclc_step_name(s->step),
                  (long long)p, x->prog->nranks);
            return;
        }
        if (p == x->on_rank) {
            cclc_xp_error(x, s->peers->loc, "rank %lld cannot %s itself", (long long)p, cclc_step_name(s->step));
            return;
        }
        emit_step(x, (Step){.kind = s->step, .loc = s->loc, .peer = (int)p, .tag = tag});
    }
}

/* ---- statements ---- */

static void expand_stmts(Expander *x, const StmtList *list);

static void expand_on(Expander *x, const Stmt *s)
{
    if (x->on_rank >= 0) {
        cclc_xp_error(x, s->loc, "'on' blocks do not nest: this one is already inside 'on %d'", x->on_rank);
        return;
    }
    int64_t rank, tb;
    if (!cclc_xp_eval_in(x, s->rank, 0, x->prog->nranks - 1, "the rank of 'on'", &rank))
        return;
    if (s->tb) {
        if (!cclc_xp_eval_in(x, s->tb, 0, MAX_TB - 1, "the thread block", &tb))
            return;
        if (tb > x->max_explicit_tb)
            x->max_explicit_tb = (int)tb;
    } else {
        /* Auto-assigned blocks get numbers after every explicit one, fixed in
         * cclc_expand_program once all are known; until then they sit at MAX_TB + k, k
         * counting `on` statements (not executions), so one statement is one block. */
        int k = 0;
        while (k < x->auto_on.n && x->auto_on.v[k] != s)
            k++;
        if (k == x->auto_on.n) {
            if (k == MAX_TB) {
                cclc_xp_error(x, s->loc, "too many thread blocks (at most %d per rank)", MAX_TB);
                return;
            }
            vec_push(x->arena, &x->auto_on, s);
        }
        tb = MAX_TB + k;
    }
    x->on_rank = (int)rank;
    x->on_tb = (int)tb;
    int mark = x->env.n;
    expand_stmts(x, &s->body);
    cclc_xp_unbind_to(x, mark);
    x->on_rank = -1;
}

static void expand_stmt(Expander *x, const Stmt *s)
{
    switch (s->kind) {
    case ST_LET: {
        if (!s->var)
            return; /* a lone ';' */
        int64_t v;
        if (cclc_xp_eval(x, s->value, &v))
            cclc_xp_bind(x, s->var, v, 0);
        return;
    }
    case ST_FOR: {
        int64_t lo, hi;
        if (!cclc_xp_eval(x, s->lo, &lo) || !cclc_xp_eval(x, s->hi, &hi))
            return;
        int mark = x->env.n;
        for (int64_t i = lo; i < hi && !x->aborted; i++) {
            if (!cclc_xp_count_iteration(x, s->loc))
                break;
            cclc_xp_unbind_to(x, mark);
            cclc_xp_bind(x, s->var, i, 1);
            expand_stmts(x, &s->body);
        }
        cclc_xp_unbind_to(x, mark);
        return;
    }
    case ST_IF: {
        int64_t c;
        if (!cclc_xp_eval(x, s->cond, &c))
            return;
        int mark = x->env.n;
        expand_stmts(x, c ? &s->body : &s->orelse);
        cclc_xp_unbind_to(x, mark);
        return;
    }
    case ST_ON:
        expand_on(x, s);
        return;
    case ST_STEP:
        if (x->on_rank < 0) {
            cclc_xp_error(x, s->loc, "'%s' must be inside an 'on RANK { ... }' block, which says where it runs",
                  cclc_step_name(s->step));
            return;
        }
        if (s->step <= STEP_REDUCE)
            expand_data_step(x, s);
        else
            expand_sync_step(x, s);
        return;
    case ST_CONNECT: {
        /* A connect adds its channel to the pair's set: a pair may have a memory and a
         * port channel at once, and its steps say which they take (resolve_channels).
         * Across nodes only a net channel connects, and only across nodes: `all` means
         * every pair the kind can connect. */
        Program *p = x->prog;
        int n = p->nranks;
        unsigned bit = CHAN_BIT(s->chan);
        x->any_connect = 1;
        if (!s->end_a) {
            for (int a = 0; a < n; a++)
                for (int b = 0; b < n; b++)
                    if (a != b && same_node(p, a, b) == (s->chan != CHAN_NET))
                        p->chans[a * n + b] |= bit;
            return;
        }
        int64_t a, b;
        if (!cclc_xp_eval_in(x, s->end_a, 0, n - 1, "the rank", &a) || !cclc_xp_eval_in(x, s->end_b, 0, n - 1, "the rank", &b))
            return;
        if (a == b) {
            cclc_xp_error(x, s->loc, "a channel connects two different ranks, but both ends are rank %lld", (long long)a);
            return;
        }
        if (s->chan == CHAN_NET && same_node(p, (int)a, (int)b)) {
            cclc_xp_error(x, s->loc, "a net channel connects ranks of different nodes, but rank %lld and rank %lld are both "
                  "on node %lld (use 'connect memory' or 'connect port')", (long long)a, (long long)b,
                  (long long)(a / p->local));
            return;
        }
        if (s->chan != CHAN_NET && !same_node(p, (int)a, (int)b)) {
            cclc_xp_error(x, s->loc, "rank %lld (node %lld) and rank %lld (node %lld) are on different nodes, which only a "
                  "net channel connects ('connect net %lld <-> %lld')", (long long)a, (long long)(a / p->local),
                  (long long)b, (long long)(b / p->local), (long long)a, (long long)b);
            return;
        }
        p->chans[a * n + b] |= bit;
        p->chans[b * n + a] |= bit;
        return;
    }
    case ST_SCRATCH: {
        if (x->on_rank >= 0) {
            cclc_xp_error(x, s->loc, "scratch buffers are declared at the top level, not inside 'on'");
            return;
        }
        if (x->loops) {
            cclc_xp_error(x, s->loc, "scratch buffers are declared once, at the top level, not inside a loop");
            return;
        }
        if (find_buffer(x, s->var) >= 0) {
            cclc_xp_error(x, s->loc, "buffer '%s' is already declared", s->var);
            return;
        }
        int64_t n;
        if (!cclc_xp_eval_in(x, s->value, 1, CCLC_MAX_CHUNKS, "the scratch size in chunks", &n))
            return;
        cclc_namemap_put(&x->scratch_index, x->arena, s->var, x->scratch_names.n);
        vec_push(x->arena, &x->scratch_names, s->var);
        vec_push(x->arena, &x->scratch_chunks, (int)n);
        vec_push(x->arena, &x->scratch_locs, s->loc);
        return;
    }
    }
}

static void expand_stmts(Expander *x, const StmtList *list)
{
    for (int i = 0; i < list->n && !x->aborted; i++)
        expand_stmt(x, list->v[i]);
}

/* ---- the header ---- */

/* Binds N (and root) and checks the header's constraints. Reports why N is not admitted
 * and returns 0 in that case. */
static int check_header(Expander *x, int nranks, int nnodes, int root)
{
    const Ast *ast = x->ast;
    int64_t lo, hi;
    x->header = 1;
    if (nnodes < 1 || nranks % nnodes != 0) {
        cclc_diag_plain(x->diag, "N = %d ranks are not %d nodes of equal size", nranks, nnodes);
        return 0;
    }
    if (nnodes > 1 && !ast->nodes_var) {
        cclc_diag_error(x->diag, ast->name_loc, "algorithm '%s' runs on one node (its header has no 'nodes M x L' line), "
                        "not on %d nodes", ast->name, nnodes);
        return 0;
    }
    x->prog->nnodes = nnodes;
    x->prog->local = nranks / nnodes;
    if (!cclc_xp_eval(x, ast->ranks_lo, &lo) || !cclc_xp_eval(x, ast->ranks_hi, &hi))
        return 0;
    if (nranks < lo || nranks > hi) {
        cclc_diag_error(x->diag, ast->ranks_loc, "algorithm '%s' is for %s in %lld..%lld, not %s = %d", ast->name,
                   ast->nvar, (long long)lo, (long long)hi, ast->nvar, nranks);
        return 0;
    }
    cclc_xp_bind(x, ast->nvar, nranks, 0);
    if (ast->nodes_var) {
        cclc_xp_bind(x, ast->nodes_var, nnodes, 0);
        cclc_xp_bind(x, ast->local_var, nranks / nnodes, 0);
    }
    if (ast->coll == COLL_BROADCAST || ast->coll == COLL_REDUCE) {
        if (root < 0 || root >= nranks) {
            cclc_diag_plain(x->diag, "root %d does not exist for N = %d", root, nranks);
            return 0;
        }
        cclc_xp_bind(x, "root", root, 0);
    }
    for (int i = 0; i < ast->where.n; i++) {
        int64_t ok;
        if (!cclc_xp_eval(x, ast->where.v[i], &ok))
            return 0;
        if (!ok) {
            if (ast->nodes_var)
                cclc_diag_error(x->diag, ast->where.v[i]->loc, "algorithm '%s' requires this for %s = %d (%s = %d "
                                "nodes x %s = %d ranks)", ast->name, ast->nvar, nranks, ast->nodes_var, nnodes,
                                ast->local_var, nranks / nnodes);
            else
                cclc_diag_error(x->diag, ast->where.v[i]->loc, "algorithm '%s' requires this for %s = %d", ast->name,
                           ast->nvar, nranks);
            return 0;
        }
    }
    return !x->failed;
}

static void expander_init(Expander *x, Arena *a, const Ast *ast, int nranks, Diag *d)
{
    memset(x, 0, sizeof *x);
    x->arena = a;
    x->diag = d;
    x->ast = ast;
    x->on_rank = -1;
    x->max_explicit_tb = -1;
    x->prog = cclc_arena_alloc(a, sizeof *x->prog);
    x->prog->nranks = nranks;
    int n = ast->body.n;
    x->let_state = cclc_arena_alloc(a, (size_t)(n ? n : 1));
    x->let_value = cclc_arena_alloc(a, sizeof *x->let_value * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) {
        const Stmt *s = ast->body.v[i];
        if (s->kind == ST_LET && s->var && cclc_namemap_get(&x->toplets, s->var) < 0)
            cclc_namemap_put(&x->toplets, a, s->var, i);
    }
}

/* ---- channels ---- */

static const char *chan_name(ChannelKind c)
{
    return c == CHAN_PORT ? "port" : c == CHAN_NET ? "net" : "memory";
}

/* Gives data step s on rank r the channel its remote operands go through, and checks
 * that signal, wait and flush reach their peer. Declared channels must carry every
 * remote operand; with no `connect` at all, memory channels are inferred. A pair has a
 * set of channels (memory, port or both). A step that names one (`put port ...`) takes
 * it, and the pair must have it; one that names none takes the pair's only channel
 * that can carry it, and where both could (a put between ranks with both) it must name
 * one. Port channels carry puts only (the host proxy copies local data into the
 * peer's buffer). A step that stays on its rank goes through no channel, named or not
 * (s->chan becomes CHAN_NONE). */
static void resolve_channels(Expander *x, int r, Step *s)
{
    Program *p = x->prog;
    int n = p->nranks;
    if (s->kind > STEP_REDUCE && s->kind != STEP_SIGNAL && s->kind != STEP_WAIT && s->kind != STEP_FLUSH)
        return;
    ChannelKind named = s->kind <= STEP_REDUCE ? s->chan : CHAN_NONE;
    const char *step = cclc_step_name(s->kind);
    /* The ranks it reaches: a data step's remote operands (destination, then sources),
     * or the peer of a signal, wait or flush. */
    int data = s->kind <= STEP_REDUCE, nops = data ? 1 + s->nsrc : 1, remote = !data;
    if (data) {
        s->chan = CHAN_NONE;
        for (int k = 0; k < nops; k++)
            remote |= (k ? s->src[k - 1].rank : s->dst.rank) != r;
    }
    if (cclc_chan_async(named) && s->kind != STEP_PUT && remote) {
        cclc_xp_error(x, s->loc, "'%s %s': a %s channel carries puts only; '%s' goes through a memory channel "
              "(write '%s memory' or name no channel)", step, chan_name(named), chan_name(named), step, step);
        return;
    }
    for (int k = 0; k < nops; k++) {
        int q = !data ? s->peer : k ? s->src[k - 1].rank : s->dst.rank;
        if (data && q == r)
            continue;
        unsigned char *c = &p->chans[r * n + q];
        int near = same_node(p, r, q);
        /* Without any connect, memory channels are inferred, within a node only. */
        if (*c == 0 && !x->any_connect && near)
            *c = p->chans[q * n + r] = CHAN_BIT(CHAN_MEMORY);
        if (*c == 0 && !near) {
            cclc_xp_error(x, s->loc, "rank %d (node %d) reaches rank %d (node %d) here, but ranks on different nodes are "
                  "connected only by a net channel (add 'connect net %d <-> %d' or 'connect net all')", r, r / p->local,
                  q, q / p->local, r, q);
            return;
        }
        if (*c == 0 && named != CHAN_NONE) {
            cclc_xp_error(x, s->loc, "'%s %s' on rank %d reaches rank %d, but no channel connects them (add 'connect %s "
                  "%d <-> %d')", step, chan_name(named), r, q, chan_name(named), r, q);
            return;
        }
        if (*c == 0) {
            cclc_xp_error(x, s->loc, "rank %d reaches rank %d here, but no channel connects them (add "
                  "'connect memory %d <-> %d' or 'connect memory all')", r, q, r, q);
            return;
        }
        if (s->kind > STEP_REDUCE) {
            if (s->kind == STEP_FLUSH && !(*c & (CHAN_BIT(CHAN_PORT) | CHAN_BIT(CHAN_NET)))) {
                cclc_xp_error(x, s->loc, "'flush %d' on rank %d: flush waits for port-channel puts, but rank %d is "
                      "reached through a memory channel", q, r, q);
                return;
            }
            continue;
        }
        ChannelKind chan;
        if (named != CHAN_NONE) {
            if (!(*c & CHAN_BIT(named))) {
                if (named == CHAN_NET || *c == CHAN_BIT(CHAN_NET))
                    cclc_xp_error(x, s->loc, "'%s %s' on rank %d reaches rank %d, %s", step, chan_name(named), r, q,
                          near ? "but a net channel connects ranks of different nodes and both are on one node"
                               : "but ranks on different nodes are connected only by a net channel (write 'put net')");
                else if (x->any_connect)
                    cclc_xp_error(x, s->loc, "'%s %s' on rank %d reaches rank %d, but only a %s channel connects them "
                          "(add 'connect %s %d <-> %d')", step, chan_name(named), r, q,
                          chan_name(named == CHAN_PORT ? CHAN_MEMORY : CHAN_PORT), chan_name(named), r, q);
                else
                    cclc_xp_error(x, s->loc, "'%s %s' on rank %d reaches rank %d, but no port channel connects them (add "
                          "'connect port %d <-> %d'; with a 'connect', memory channels are no longer inferred, so "
                          "declare those the program uses too, e.g. 'connect memory all')", step, chan_name(named), r, q, r, q);
                return;
            }
            chan = named;
        } else if (*c == (CHAN_BIT(CHAN_MEMORY) | CHAN_BIT(CHAN_PORT))) {
            if (s->kind == STEP_PUT) {
                cclc_xp_error(x, s->loc, "rank %d and rank %d are connected by both a memory and a port channel, so "
                      "this 'put' must name one: 'put memory ...' (SM stores) or 'put port ...' (the copy "
                      "engine)", r, q);
                return;
            }
            chan = CHAN_MEMORY; /* the one of the two that can carry a get or a reduce */
        } else {
            chan = *c == CHAN_BIT(CHAN_PORT) ? CHAN_PORT : *c == CHAN_BIT(CHAN_NET) ? CHAN_NET : CHAN_MEMORY;
        }
        if (cclc_chan_async(chan) && s->kind != STEP_PUT) {
            cclc_xp_error(x, s->loc, "rank %d reaches rank %d through a %s channel, which carries puts only; "
                  "'%s' needs a memory channel%s", r, q, chan_name(chan), step,
                  chan == CHAN_NET ? ", and ranks on different nodes have none: send the data with 'put'" : "");
            return;
        }
        s->chan = chan;
    }
}

/* ---- the pass ---- */

int cclc_expand_admits(const Ast *ast, int nranks, int nnodes, int root, Diag *d)
{
    if (nranks < 1 || nranks > CCLC_MAX_RANKS) {
        cclc_diag_plain(d, "N = %d is out of range: cclc expands programs for 1..%d ranks", nranks, CCLC_MAX_RANKS);
        return 0;
    }
    Arena *a = cclc_arena_new();
    Expander x;
    expander_init(&x, a, ast, nranks, d);
    int ok = check_header(&x, nranks, nnodes, root);
    cclc_arena_free(a);
    return ok;
}

Program *cclc_expand_program(Arena *a, const Ast *ast, int nranks, int nnodes, int root, Diag *d)
{
    if (nranks < 1 || nranks > CCLC_MAX_RANKS) {
        cclc_diag_plain(d, "N = %d is out of range: cclc expands programs for 1..%d ranks", nranks, CCLC_MAX_RANKS);
        return NULL;
    }
    Expander x;
    expander_init(&x, a, ast, nranks, d);
    Program *p = x.prog;
    if (!check_header(&x, nranks, nnodes, root))
        return NULL;

    p->name = ast->name;
    p->name_loc = ast->name_loc;
    p->coll = ast->coll;
    p->root = (ast->coll == COLL_BROADCAST || ast->coll == COLL_REDUCE) ? root : 0;
    p->protocol = ast->protocol;
    p->size_lo = ast->size_lo;
    p->size_hi = ast->size_hi;
    int64_t v = 1;
    if (ast->chunks && !cclc_xp_eval_in(&x, ast->chunks, 1, CCLC_MAX_CHUNKS, "the chunk factor", &v))
        return NULL;
    p->chunks = (int)v;
    if ((int64_t)nranks * p->chunks > CCLC_MAX_CHUNKS) {
        cclc_diag_error(d, ast->chunks->loc, "N x chunks = %lld chunks per buffer is over the limit of %d",
                   (long long)nranks * p->chunks, CCLC_MAX_CHUNKS);
        return NULL;
    }
    /* The chunk count goes by K (or the name `chunks NAME = ...` gives it) in the rest of
     * the program, the header's later items included. */
    const char *kname = ast->chunks_name ? ast->chunks_name : "K";
    if (!strcmp(kname, ast->nvar) || ((p->coll == COLL_BROADCAST || p->coll == COLL_REDUCE) && !strcmp(kname, "root"))) {
        if (ast->chunks_name) {
            cclc_diag_error(d, ast->chunks_name_loc, "'%s' already names the %s; the chunk count needs another name",
                       kname, strcmp(kname, "root") ? "rank count" : "root");
            return NULL;
        }
    } else {
        cclc_xp_bind(&x, kname, p->chunks, 0);
    }
    v = 1;
    if (ast->instances && !cclc_xp_eval_in(&x, ast->instances, 1, 64, "'instances'", &v))
        return NULL;
    p->instances = (int)v;
    v = 1;
    if (ast->pipeline && !cclc_xp_eval_in(&x, ast->pipeline, 1, 1024, "'pipeline'", &v))
        return NULL;
    p->pipeline = (int)v;
    x.header = 0;
    p->chans = cclc_arena_alloc(a, sizeof *p->chans * (size_t)nranks * (size_t)nranks);
    x.blocks = cclc_calloc((size_t)nranks * 2 * MAX_TB, sizeof *x.blocks);

    expand_stmts(&x, &ast->body);

    /* Buffers: in, out, then the scratch buffers in declaration order. */
    p->nbufs = 2 + x.scratch_names.n;
    p->buf_name = cclc_arena_alloc(a, sizeof *p->buf_name * (size_t)p->nbufs);
    p->buf_chunks = cclc_arena_alloc(a, sizeof *p->buf_chunks * (size_t)p->nbufs);
    p->buf_loc = cclc_arena_alloc(a, sizeof *p->buf_loc * (size_t)p->nbufs);
    p->buf_name[BUF_IN] = "in";
    p->buf_name[BUF_OUT] = "out";
    p->buf_chunks[BUF_IN] = cclc_coll_in_chunks(p->coll, nranks, p->chunks);
    p->buf_chunks[BUF_OUT] = cclc_coll_out_chunks(p->coll, nranks, p->chunks);
    p->buf_loc[BUF_IN] = p->buf_loc[BUF_OUT] = ast->coll_loc;
    for (int i = 0; i < x.scratch_names.n; i++) {
        p->buf_name[BUF_SCRATCH0 + i] = x.scratch_names.v[i];
        p->buf_chunks[BUF_SCRATCH0 + i] = x.scratch_chunks.v[i];
        p->buf_loc[BUF_SCRATCH0 + i] = x.scratch_locs.v[i];
    }

    p->ntags = 1 + x.tag_names.n;
    p->tag_name = cclc_arena_alloc(a, sizeof *p->tag_name * (size_t)p->ntags);
    for (int i = 0; i < x.tag_names.n; i++)
        p->tag_name[1 + i] = x.tag_names.v[i];

    /* Auto-assigned thread blocks take the numbers after the largest explicit one, in
     * the order their `on` statements were first reached: the same on every rank, so
     * semaphores (per logical block) pair up across ranks. */
    int first_auto = x.max_explicit_tb + 1;
    if (first_auto + x.auto_on.n > MAX_TB) {
        cclc_diag_error(d, ast->name_loc, "the program uses more than %d thread blocks per rank", MAX_TB);
        x.failed = 1;
    }
    for (int r = 0; r < nranks && !x.failed; r++)
        for (int k = 0; k < x.auto_on.n; k++)
            x.blocks[r * 2 * MAX_TB + first_auto + k] = x.blocks[r * 2 * MAX_TB + MAX_TB + k];

    for (int r = 0; r < nranks && !x.failed; r++)
        for (int t = 0; t < MAX_TB; t++) {
            StepVec *b = &x.blocks[r * 2 * MAX_TB + t];
            for (int i = 0; i < b->n; i++)
                resolve_channels(&x, r, &b->v[i]);
        }

    if (x.failed || d->nerrors) {
        free(x.blocks);
        return NULL;
    }

    /* Lay the blocks out: ranks in order, thread blocks 0..ntb-1 (gaps stay empty). */
    p->ntb = cclc_arena_alloc(a, sizeof *p->ntb * (size_t)nranks);
    for (int r = 0; r < nranks; r++)
        for (int t = 0; t < MAX_TB; t++)
            if (x.blocks[r * 2 * MAX_TB + t].n)
                p->ntb[r] = t + 1;
    for (int r = 0; r < nranks; r++)
        p->nblocks += p->ntb[r];
    p->blocks = cclc_arena_alloc(a, sizeof *p->blocks * (size_t)(p->nblocks ? p->nblocks : 1));
    int k = 0;
    for (int r = 0; r < nranks; r++)
        for (int t = 0; t < p->ntb[r]; t++) {
            StepVec *b = &x.blocks[r * 2 * MAX_TB + t];
            p->blocks[k++] = (Block){.rank = r, .tb = t, .nsteps = b->n, .steps = b->v};
        }
    free(x.blocks);
    if (p->nblocks == 0) {
        cclc_diag_error(d, ast->name_loc, "algorithm '%s' has no steps for N = %d (no 'on' block ran)", ast->name, nranks);
        return NULL;
    }
    return p;
}
