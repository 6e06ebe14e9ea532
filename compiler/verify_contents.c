/* verify_contents.c: what every chunk holds, and the postcondition.
 *
 * Takes the contents that the simulation (verify_simulate.c) gives each chunk, as nodes
 * (verify_base.c makes them); gives cclc_vfy_check_postcondition, which reports every out chunk that does not
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
                            colhash[ec[0]] += cclc_vfy_leaf_hash(NODE_IN, er[e], ec[e], 0);
                    colset[ec[0]] = 1;
                    h = colhash[ec[0]];
                } else {
                    for (int e = 0; e < ne; e++)
                        h += cclc_vfy_leaf_hash(NODE_IN, er[e], ec[e], 0);
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
