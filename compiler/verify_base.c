/* verify_base.c: the base every analysis of the verifier uses (verify_base.h), and the
 * only verifier file they share: working memory, message strings, reporting (to a Diag,
 * or quietly), the program's Shape, the nodes that chunk contents are made of, what the
 * collective requires of each out chunk, and the simulated run's cells and steps.
 *
 * The analyses (verify_simulate.c, verify_contents.c, verify_deadlock.c, verify_port.c,
 * verify_slices.c) call only this file; only the driver, verify.c, calls them. This file
 * calls no analysis. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verify_base.h"

/* ---- working memory ---- */

void *cclc_vfy_xcalloc(size_t n, size_t size)
{
    return cclc_calloc(n, size);
}

void *cclc_vfy_xrealloc(void *p, size_t size)
{
    return cclc_realloc(p, size);
}

__attribute__((format(printf, 2, 3))) void cclc_vfy_str_printf(Str *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (b->n + (size_t)n + 1 > b->cap) {
        b->cap = (b->n + (size_t)n + 1) * 2;
        b->s = cclc_vfy_xrealloc(b->s, b->cap);
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

const char *cclc_vfy_str_get(const Str *b)
{
    return b->s ? b->s : "";
}

/* ---- reporting: to a Diag, or quietly (in-place and --explain re-runs) ---- */

__attribute__((format(printf, 3, 4))) void cclc_vfy_error(Reporter *rep, SrcLoc loc, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (rep->d)
        cclc_diag_error(rep->d, loc, "%s", msg);
    else if (!rep->nerrors) {
        size_t n = strlen(msg) < sizeof rep->first - 1 ? strlen(msg) : sizeof rep->first - 1;
        memcpy(rep->first, msg, n);
        rep->first[n] = 0;
    }
    rep->nerrors++;
}

__attribute__((format(printf, 3, 4))) void cclc_vfy_note(Reporter *rep, SrcLoc loc, const char *fmt, ...)
{
    if (!rep->d)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cclc_diag_note(rep->d, loc, "%s", msg);
}

int cclc_vfy_same_loc(SrcLoc a, SrcLoc b)
{
    return a.line == b.line && a.col == b.col;
}

int cclc_vfy_seen_before(Seen *s, SrcLoc loc)
{
    for (int i = 0; i < s->n; i++)
        if (cclc_vfy_same_loc(s->v[i], loc))
            return 1;
    if (s->n < MAX_SEEN)
        s->v[s->n++] = loc;
    return 0;
}

/* ---- the program's shape ---- */

void cclc_vfy_shape_init(Shape *sh, const Program *p)
{
    memset(sh, 0, sizeof *sh);
    sh->p = p;
    sh->n = p->nranks;
    sh->k = p->chunks > 0 ? p->chunks : 1;
    sh->nb = p->nblocks;
    for (int r = 0; r < p->nranks; r++)
        if (p->ntb[r] > sh->maxtb)
            sh->maxtb = p->ntb[r];
    if (sh->maxtb < 1)
        sh->maxtb = 1;
    sh->show_tb = sh->maxtb > 1;
    sh->blk = cclc_vfy_xcalloc((size_t)sh->n * (size_t)sh->maxtb, sizeof *sh->blk);
    for (int i = 0; i < sh->n * sh->maxtb; i++)
        sh->blk[i] = -1;
    for (int b = 0; b < p->nblocks; b++) {
        const Block *bl = &p->blocks[b];
        if (bl->rank < 0 || bl->rank >= sh->n || bl->tb < 0 || bl->tb >= sh->maxtb)
            internal_error("block %d has rank %d tb %d outside the program", b, bl->rank, bl->tb);
        sh->blk[bl->rank * sh->maxtb + bl->tb] = b;
    }
    sh->buf_base = cclc_vfy_xcalloc((size_t)p->nbufs, sizeof *sh->buf_base);
    for (int i = 0; i < p->nbufs; i++) {
        sh->buf_base[i] = sh->rank_cells;
        sh->rank_cells += p->buf_chunks[i];
    }
}

void cclc_vfy_shape_fini(Shape *sh)
{
    free(sh->blk);
    free(sh->buf_base);
    free(sh->vc_spare);
}

int cclc_vfy_block_of(const Shape *sh, int rank, int tb)
{
    if (rank < 0 || rank >= sh->n || tb < 0 || tb >= sh->maxtb)
        return -1;
    return sh->blk[rank * sh->maxtb + tb];
}

/* "rank 2" or "rank 2 tb 1", for messages. */
const char *cclc_vfy_where_text(const Shape *sh, int rank, int tb, char *buf, size_t size)
{
    if (sh->show_tb)
        snprintf(buf, size, "rank %d tb %d", rank, tb);
    else
        snprintf(buf, size, "rank %d", rank);
    return buf;
}

/* "in@0[1]", "s@2[3]" */
const char *cclc_vfy_cell_text(const Shape *sh, int rank, int buf, int chunk, char *out, size_t size)
{
    snprintf(out, size, "%s@%d[%d]", sh->p->buf_name[buf], rank, chunk);
    return out;
}

/* In place, the collective's in and out are one buffer (docs/language.md): maps a chunk
 * of in onto the chunk of out it is (or out onto in, for reduce_scatter). Contiguous
 * chunks stay contiguous, so a range maps by its first chunk. */
void cclc_vfy_inplace_alias(const Shape *sh, int rank, int *buf, int *chunk)
{
    switch (cclc_coll_base(sh->p->coll)) {
    case COLL_ALLREDUCE:
    case COLL_BROADCAST:
    case COLL_REDUCE:
        if (*buf == BUF_IN)
            *buf = BUF_OUT;
        break;
    case COLL_ALLGATHER:
        if (*buf == BUF_IN)
            *buf = BUF_OUT, *chunk += rank * sh->k;
        break;
    case COLL_REDUCE_SCATTER:
        if (*buf == BUF_OUT)
            *buf = BUF_IN, *chunk += rank * sh->k;
        break;
    case COLL_ALLTOALL:
    case COLL_ALLGATHERV: /* never: v-collectives have no in-place form */
    case COLL_ALLTOALLV:
        break;
    }
}

/* ---- chunk contents: the nodes the simulation gives chunks ---- */

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
uint64_t cclc_vfy_leaf_hash(int kind, int a, int b, int c)
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
        x.hash = x.shape = cclc_vfy_leaf_hash(kind, a, b, c);
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

/* ---- the postcondition: what each out chunk must hold ---- */

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

/* ---- the simulated run's state ---- */

/* The cell of chunk `chunk` of `buf` on `rank`: in-place aliasing maps in onto out (or
 * out onto in). Every call uses the same cells, scratch included (docs/internals.md). */
int cclc_vfy_sim_cell(const Sim *s, int rank, int buf, int chunk)
{
    const Shape *sh = s->sh;
    if (s->m.inplace)
        cclc_vfy_inplace_alias(sh, rank, &buf, &chunk);
    return rank * sh->rank_cells + sh->buf_base[buf] + chunk;
}

const Step *cclc_vfy_step_at(const Sim *s, int b, int i)
{
    return &s->sh->p->blocks[b].steps[i];
}
