/* verify_contents.c: what every chunk holds, and the postcondition.
 *
 * Takes the contents that the simulation (verify_simulate.c) gives each chunk, as nodes
 * made here; gives cclc_vfy_check_postcondition, which reports every out chunk that does not
 * hold what the collective requires, one error per statement that wrote such chunks
 * last, and cclc_vfy_check_deterministic, which records whether an all-reduce reduces every
 * element in the same order on every rank. Assumes a run that completed without races,
 * whose contents are then the same in every execution.
 *
 * A chunk holds a node: an input contribution in@q[c], the initial garbage of a chunk
 * that was read before anything was written to it, or the sum (the reduction op) of two
 * nodes. A copy shares its source's node. A reduce folds its operands left to right.
 * Each node carries two 64-bit hashes, so comparisons cost O(1):
 *  - `hash`, the multiset of its leaves (a sum of the leaves' hashes) with their count:
 *    equal to the expected set's hash means the right contributions, each once;
 *  - `shape`, the reduction tree up to swapping the operands of one sum (every op is
 *    commutative per pair): equal shapes give the same bits on every rank. */
#include <stdint.h>
#include <stdlib.h>

#include "verify.h"

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t key_hash(int kind, int a, int b, int c)
{
    return mix64((uint64_t)kind ^ mix64((uint64_t)(uint32_t)a ^ mix64((uint64_t)(uint32_t)b ^ mix64((uint32_t)c))));
}

/* The content hash of one leaf: independent of node numbering, so expected sets can be
 * hashed without creating nodes. */
static uint64_t leaf_hash(int kind, int a, int b, int c)
{
    return mix64(key_hash(kind, a, b, c) ^ 0x5bd1e9955bd1e995ull);
}

/* Adds a node; a SUM's children a and b are existing nodes. Returns its index. */
int cclc_vfy_node_new(Nodes *ns, int kind, int a, int b, int c)
{
    if (ns->n == ns->cap) {
        ns->cap = ns->cap ? ns->cap * 2 : 1024;
        ns->v = cclc_vfy_xrealloc(ns->v, sizeof *ns->v * (size_t)ns->cap);
    }
    Node x = {.kind = kind, .a = a, .b = b, .c = c};
    if (kind == NODE_SUM) {
        const Node *l = &ns->v[a], *r = &ns->v[b];
        uint64_t lo = l->shape < r->shape ? l->shape : r->shape, hi = l->shape ^ r->shape ^ lo;
        x.hash = l->hash + r->hash;
        x.shape = mix64(mix64(lo ^ 0x2545f4914f6cdd1dull) + hi);
        x.count = l->count > INT64_MAX - r->count ? INT64_MAX : l->count + r->count;
        x.pos = l->pos == -1 ? r->pos : r->pos == -1 ? l->pos : l->pos == r->pos ? l->pos : -2;
        x.home = l->home == -1 ? r->home : r->home == -1 ? l->home : l->home == r->home ? l->home : -2;
    } else {
        x.hash = x.shape = leaf_hash(kind, a, b, c);
        x.count = 1;
        x.pos = kind == NODE_IN ? b % ns->k : -1;
        x.home = kind == NODE_IN ? a * ns->in_chunks + b : -1;
    }
    ns->v[ns->n] = x;
    return ns->n++;
}

void cclc_vfy_nodes_fini(Nodes *ns)
{
    free(ns->v);
}

static int leaf_cmp(const void *x, const void *y)
{
    const Leaf *l = x, *r = y;
    return l->node < r->node ? -1 : l->node > r->node;
}

/* The multiset of leaves under `root`: the DAG's nodes in descending index order (a
 * child is always created before its parent) pass their multiplicity down. Returns the
 * number of leaves written to *out (malloc'd, sorted by node). */
int cclc_vfy_node_leaves(const Nodes *ns, int root, Leaf **out)
{
    int64_t *mult = cclc_vfy_xcalloc((size_t)ns->n, sizeof *mult);
    char *mark = cclc_vfy_xcalloc((size_t)ns->n, 1);
    int *stack = cclc_vfy_xcalloc((size_t)ns->n, sizeof *stack), sp = 0, hi = root;
    mark[root] = 1;
    stack[sp++] = root;
    int lo = root;
    while (sp) {
        int x = stack[--sp];
        if (x < lo)
            lo = x;
        if (ns->v[x].kind != NODE_SUM)
            continue;
        int ch[2] = {ns->v[x].a, ns->v[x].b};
        for (int i = 0; i < 2; i++)
            if (!mark[ch[i]]) {
                mark[ch[i]] = 1;
                stack[sp++] = ch[i];
            }
    }
    mult[root] = 1;
    int nleaves = 0;
    for (int x = hi; x >= lo; x--) {
        if (!mark[x] || !mult[x])
            continue;
        const Node *nd = &ns->v[x];
        if (nd->kind != NODE_SUM) {
            nleaves++;
            continue;
        }
        int ch[2] = {nd->a, nd->b};
        for (int i = 0; i < 2; i++)
            mult[ch[i]] = mult[ch[i]] > INT64_MAX - mult[x] ? INT64_MAX : mult[ch[i]] + mult[x];
    }
    Leaf *leaves = cclc_vfy_xcalloc((size_t)nleaves, sizeof *leaves);
    int k = 0;
    for (int x = lo; x <= hi; x++)
        if (mark[x] && mult[x] && ns->v[x].kind != NODE_SUM)
            leaves[k++] = (Leaf){x, mult[x]};
    qsort(leaves, (size_t)k, sizeof *leaves, leaf_cmp);
    free(mult);
    free(mark);
    free(stack);
    *out = leaves;
    return k;
}

static void leaf_text(const Shape *sh, const Node *x, Str *s)
{
    if (x->kind == NODE_IN)
        cclc_vfy_str_printf(s, "in@%d[%d]", x->a, x->b);
    else
        cclc_vfy_str_printf(s, "uninitialized %s@%d[%d]", sh->p->buf_name[x->b], x->a, x->c);
}

/* The reduction tree of a node, e.g. "((in@0[0] + in@1[0]) + in@2[0])", cut short. */
static void node_tree_text(const Shape *sh, const Nodes *ns, int id, Str *s, int depth)
{
    const Node *x = &ns->v[id];
    if (s->n > 300 || depth > 40) {
        cclc_vfy_str_printf(s, "...");
        return;
    }
    if (x->kind != NODE_SUM) {
        leaf_text(sh, x, s);
        return;
    }
    cclc_vfy_str_printf(s, "(");
    node_tree_text(sh, ns, x->a, s, depth + 1);
    cclc_vfy_str_printf(s, " + ");
    node_tree_text(sh, ns, x->b, s, depth + 1);
    cclc_vfy_str_printf(s, ")");
}

/* ---- the postcondition ---- */

/* What out@r[i] must hold: *nexp contribution (rank, in chunk) pairs in exp (room for
 * N); returns 0 when the chunk is unconstrained. */
int cclc_vfy_expected(const Shape *sh, int r, int i, int *exp_rank, int *exp_chunk, int *nexp)
{
    const Program *p = sh->p;
    int k = sh->k, n = sh->n, j = i / k, c = i % k;
    *nexp = 0;
    switch (cclc_coll_base(p->coll)) {
    case COLL_ALLREDUCE:
        for (int q = 0; q < n; q++)
            exp_rank[q] = q, exp_chunk[q] = i;
        *nexp = n;
        return 1;
    case COLL_REDUCE:
        if (r != p->root)
            return 0;
        for (int q = 0; q < n; q++)
            exp_rank[q] = q, exp_chunk[q] = i;
        *nexp = n;
        return 1;
    case COLL_REDUCE_SCATTER:
        for (int q = 0; q < n; q++)
            exp_rank[q] = q, exp_chunk[q] = r * k + i;
        *nexp = n;
        return 1;
    case COLL_ALLGATHER:
        exp_rank[0] = j, exp_chunk[0] = c;
        *nexp = 1;
        return 1;
    case COLL_ALLTOALL:
        exp_rank[0] = j, exp_chunk[0] = r * k + c;
        *nexp = 1;
        return 1;
    case COLL_BROADCAST:
        exp_rank[0] = p->root, exp_chunk[0] = i;
        *nexp = 1;
        return 1;
    case COLL_ALLGATHERV: /* never: cclc_coll_base maps them to their siblings */
    case COLL_ALLTOALLV:
        break;
    }
    return 0;
}

/* Appends a list "a, b and c" of at most `limit` names, then "and N more". */
static void list_text(Str *out, char **names, int n, int limit)
{
    for (int i = 0; i < n && i < limit; i++)
        cclc_vfy_str_printf(out, "%s%s", i == 0 ? "" : (i == n - 1 && n <= limit) ? " and " : ", ", names[i]);
    if (n > limit)
        cclc_vfy_str_printf(out, " and %d more", n - limit);
}

/* Explains why out@r[i] (holding `node`, or never written when node < 0) is wrong. */
static void explain_cell(const Sim *s, int r, int i, int node, const int *er, const int *ec, int ne, Str *msg)
{
    const Shape *sh = s->sh;
    cclc_vfy_str_printf(msg, "postcondition fails: out@%d[%d] ", r, i);
    if (node < 0) {
        cclc_vfy_str_printf(msg, "is never written; it must hold ");
        for (int e = 0; e < ne && e < MAX_LISTED; e++)
            cclc_vfy_str_printf(msg, "%sin@%d[%d]", e ? " + " : "", er[e], ec[e]);
        if (ne > MAX_LISTED)
            cclc_vfy_str_printf(msg, " + ... (%d contributions)", ne);
        return;
    }
    Leaf *leaves;
    int nl = cclc_vfy_node_leaves(&s->nodes, node, &leaves);
    cclc_vfy_str_printf(msg, "holds ");
    if (nl <= MAX_LISTED) {
        for (int l = 0; l < nl; l++) {
            if (l)
                cclc_vfy_str_printf(msg, " + ");
            leaf_text(sh, &s->nodes.v[leaves[l].node], msg);
            if (leaves[l].mult == 2)
                cclc_vfy_str_printf(msg, " twice");
            else if (leaves[l].mult > 2)
                cclc_vfy_str_printf(msg, " %lld times", (long long)leaves[l].mult);
        }
    } else {
        cclc_vfy_str_printf(msg, "%lld contributions", (long long)s->nodes.v[node].count);
    }
    /* Sort the problems out: missing, double-counted, foreign, uninitialized. */
    char **missing = cclc_vfy_xcalloc((size_t)ne + 1, sizeof *missing);
    char **dup = cclc_vfy_xcalloc((size_t)nl + 1, sizeof *dup), **extra = cclc_vfy_xcalloc((size_t)nl + 1, sizeof *extra);
    char **garbage = cclc_vfy_xcalloc((size_t)nl + 1, sizeof *garbage);
    int nmiss = 0, ndup = 0, nextra = 0, ngarb = 0;
    for (int e = 0; e < ne; e++) {
        int found = 0;
        for (int l = 0; l < nl && !found; l++) {
            const Node *x = &s->nodes.v[leaves[l].node];
            found = x->kind == NODE_IN && x->a == er[e] && x->b == ec[e];
        }
        if (!found && nmiss < 8) {
            Str t = {0};
            cclc_vfy_str_printf(&t, "in@%d[%d]", er[e], ec[e]);
            missing[nmiss++] = t.s;
        } else if (!found) {
            nmiss++;
        }
    }
    for (int l = 0; l < nl; l++) {
        const Node *x = &s->nodes.v[leaves[l].node];
        Str t = {0};
        if (x->kind == NODE_GARBAGE) {
            cclc_vfy_str_printf(&t, "%s@%d[%d]", sh->p->buf_name[x->b], x->a, x->c);
            garbage[ngarb++] = t.s;
            continue;
        }
        int want = 0;
        for (int e = 0; e < ne && !want; e++)
            want = x->a == er[e] && x->b == ec[e];
        cclc_vfy_str_printf(&t, "in@%d[%d]", x->a, x->b);
        if (!want)
            extra[nextra++] = t.s;
        else if (leaves[l].mult > 1)
            dup[ndup++] = t.s;
        else
            free(t.s);
    }
    if (nmiss) {
        cclc_vfy_str_printf(msg, "; missing ");
        list_text(msg, missing, nmiss, nmiss > 8 ? 8 : nmiss);
    }
    if (ndup) {
        cclc_vfy_str_printf(msg, "; ");
        list_text(msg, dup, ndup, 4);
        cclc_vfy_str_printf(msg, ndup == 1 ? " is double-counted" : " are double-counted");
    }
    if (nextra) {
        cclc_vfy_str_printf(msg, "; ");
        list_text(msg, extra, nextra, 4);
        cclc_vfy_str_printf(msg, nextra == 1 ? " does not belong there" : " do not belong there");
    }
    if (ngarb) {
        cclc_vfy_str_printf(msg, "; ");
        list_text(msg, garbage, ngarb, 4);
        cclc_vfy_str_printf(msg, ngarb == 1 ? " is read before anything writes it"
                                       : " are read before anything writes them");
    }
    for (int x = 0; x < nmiss && x < 8; x++)
        free(missing[x]);
    for (int x = 0; x < ndup; x++)
        free(dup[x]);
    for (int x = 0; x < nextra; x++)
        free(extra[x]);
    for (int x = 0; x < ngarb; x++)
        free(garbage[x]);
    free(missing);
    free(dup);
    free(extra);
    free(garbage);
    free(leaves);
}

/* Checks every constrained out chunk; wrong chunks are grouped by the statement that
 * wrote them last, one error per statement. Returns the number of wrong chunks. */
int cclc_vfy_check_postcondition(const Sim *s, int *checked)
{
    const Shape *sh = s->sh;
    const Program *p = sh->p;
    int nout = p->buf_chunks[BUF_OUT];
    int *er = cclc_vfy_xcalloc((size_t)sh->n, sizeof *er), *ec = cclc_vfy_xcalloc((size_t)sh->n, sizeof *ec);
    typedef struct {
        int r, i, node, block, step, count;
    } Group;
    Group groups[MAX_POST_REPORTS];
    int ngroups = 0, nbad = 0, hidden = 0;
    int nin = p->buf_chunks[BUF_IN];
    uint64_t *colhash = cclc_vfy_xcalloc((size_t)nin, sizeof *colhash);
    char *colset = cclc_vfy_xcalloc((size_t)nin, 1);
    *checked = 0;
    for (int r = 0; r < sh->n; r++)
        for (int i = 0; i < nout; i++) {
            int ne;
            if (!cclc_vfy_expected(sh, r, i, er, ec, &ne))
                continue;
            ++*checked;
            int cell = cclc_vfy_sim_cell(s, r, BUF_OUT, i);
            int node = s->content[cell];
            if (node >= 0) {
                const Node *x = &s->nodes.v[node];
                uint64_t h = 0;
                if (ne == sh->n && ec[0] == ec[ne - 1]) {
                    /* All ranks' contributions to one chunk: the same sum for every
                     * out chunk that needs it, computed once. */
                    if (!colset[ec[0]])
                        for (int e = 0; e < ne; e++)
                            colhash[ec[0]] += leaf_hash(NODE_IN, er[e], ec[e], 0);
                    colset[ec[0]] = 1;
                    h = colhash[ec[0]];
                } else {
                    for (int e = 0; e < ne; e++)
                        h += leaf_hash(NODE_IN, er[e], ec[e], 0);
                }
                if (x->count == ne && x->hash == h)
                    continue;
            }
            nbad++;
            int wb = s->wblock[cell], ws = s->wstep[cell], g;
            for (g = 0; g < ngroups; g++) {
                SrcLoc a = groups[g].block >= 0 ? cclc_vfy_step_at(s, groups[g].block, groups[g].step)->loc : p->name_loc;
                SrcLoc b = wb >= 0 ? cclc_vfy_step_at(s, wb, ws)->loc : p->name_loc;
                if ((groups[g].block < 0) == (wb < 0) && a.line == b.line && a.col == b.col)
                    break;
            }
            if (g < ngroups)
                groups[g].count++;
            else if (ngroups < MAX_POST_REPORTS)
                groups[ngroups++] = (Group){r, i, node, wb, ws, 1};
            else
                hidden++;
        }
    for (int g = 0; g < ngroups; g++) {
        Group *gr = &groups[g];
        int ne;
        cclc_vfy_expected(sh, gr->r, gr->i, er, ec, &ne);
        Str msg = {0};
        explain_cell(s, gr->r, gr->i, gr->node, er, ec, ne, &msg);
        if (gr->block >= 0) {
            const Block *bl = &p->blocks[gr->block];
            char w[48];
            cclc_vfy_str_printf(&msg, " (written last here, on %s)", cclc_vfy_where_text(sh, bl->rank, bl->tb, w, sizeof w));
            if (gr->count > 1)
                cclc_vfy_str_printf(&msg, "; this statement leaves %d more out chunk%s wrong", gr->count - 1,
                                    gr->count == 2 ? "" : "s");
            cclc_vfy_error(s->rep, cclc_vfy_step_at(s, gr->block, gr->step)->loc, "%s", cclc_vfy_str_get(&msg));
        } else {
            if (gr->count > 1)
                cclc_vfy_str_printf(&msg, "; %d more out chunk%s never written", gr->count - 1,
                                    gr->count == 2 ? " is" : "s are");
            cclc_vfy_error(s->rep, p->name_loc, "%s", cclc_vfy_str_get(&msg));
        }
        free(msg.s);
    }
    if (hidden)
        cclc_vfy_note(s->rep, (SrcLoc){0, 0, 0}, "%d more wrong out chunk%s, written by other statements, not shown",
                      hidden, hidden == 1 ? "" : "s");
    free(er);
    free(ec);
    free(colhash);
    free(colset);
    return nbad;
}

/* ---- recorded properties: determinism ---- */

/* allreduce: out@r[i] must be the same reduction tree on every rank. The other
 * collectives produce each reduced element on one rank only (or copy it). */
int cclc_vfy_check_deterministic(const Sim *s, Str *detail)
{
    const Shape *sh = s->sh;
    if (sh->p->coll != COLL_ALLREDUCE)
        return 1;
    for (int i = 0; i < sh->p->buf_chunks[BUF_OUT]; i++) {
        int n0 = s->content[cclc_vfy_sim_cell(s, 0, BUF_OUT, i)];
        for (int r = 1; r < sh->n; r++) {
            int nr = s->content[cclc_vfy_sim_cell(s, r, BUF_OUT, i)];
            if (nr == n0 || (nr >= 0 && n0 >= 0 && s->nodes.v[nr].shape == s->nodes.v[n0].shape))
                continue;
            if (detail && n0 >= 0 && nr >= 0) {
                cclc_vfy_str_printf(detail, "out@0[%d] = ", i);
                node_tree_text(sh, &s->nodes, n0, detail, 0);
                cclc_vfy_str_printf(detail, " but out@%d[%d] = ", r, i);
                node_tree_text(sh, &s->nodes, nr, detail, 0);
            }
            return 0;
        }
    }
    return 1;
}
