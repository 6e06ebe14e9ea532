/* verify.c: the proof that an expanded program is a correct collective, for its N.
 *
 * Takes the Program of expand.c (straight-line steps per rank and logical thread block)
 * and proves, by simulating it:
 *  - the postcondition: symbolic execution where every chunk holds an expression over
 *    input contributions in@q[c]; each out chunk must hold exactly what the collective
 *    requires, every contribution once, and in/out chunks may only receive content of
 *    their own position i % K (docs/internals.md); `in` is read-only;
 *  - no data race: happens-before is program order per block, signal->wait pairs (the
 *    k-th `wait q` of rank r, block t pairs with the k-th `signal r` of rank q, block t)
 *    and barriers (all blocks of a rank), tracked with vector clocks; two accesses to
 *    one chunk of one rank's buffer, at least one a write, from different blocks, must
 *    be ordered; so must every write into a rank's out and that rank's caller reading
 *    the result after the call (a rank must not return before its output arrived);
 *  - port-channel puts, which a host proxy completes asynchronously (some time before
 *    the block's next `flush` of their peer), are placed at their statement like every
 *    other step; vfy_check_port_puts makes that exact by requiring, per thread block, a
 *    flush before any signal, wait or barrier and before the block ends, and no step of
 *    the block touching an unflushed put's chunks in between;
 *  - no deadlock: signal and wait counts balance per semaphore, barriers are reached by
 *    every block of the rank, and the simulated run completes (else the cycle of
 *    blocked blocks is reported);
 *  - safety across calls: back-to-back calls, the next starting on a rank once all
 *    blocks of that rank finished the previous one (a kernel boundary), and between
 *    them the caller reading out and writing the next in, are race-free; under
 *    protocol LL scratch is double-buffered by call parity, so three calls are
 *    simulated and calls 1 and 3 are the ones that share scratch;
 *  - and records, without failing the proof: in-place validity (in and out aliased as
 *    the collective's shapes allow), deterministic reduction order, pipeline safety.
 *
 * Why one simulated interleaving suffices: synchronization never depends on data, so
 * the happens-before relation is the same in every execution and the vector clocks
 * decide every race exactly; a race-free program has a single result, so the contents
 * of this interleaving are the program's. When races or a deadlock are found the
 * postcondition is not judged (its failures would be consequences, not causes).
 *
 * Assumes what expand.c establishes: every Ref is in range, a data step's operands
 * cover the dst's count, signal/wait peers exist and differ from the rank. Working
 * memory is malloc'd and freed before returning; only Proof strings use the arena. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verify.h"

/* ---- working memory ---- */

void *vfy_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        internal_error("out of memory (%zu x %zu bytes)", n, size);
    return p;
}

void *vfy_xrealloc(void *p, size_t size)
{
    p = realloc(p, size ? size : 1);
    if (!p)
        internal_error("out of memory (%zu bytes)", size);
    return p;
}

__attribute__((format(printf, 2, 3))) void vfy_str_printf(Str *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (b->n + (size_t)n + 1 > b->cap) {
        b->cap = (b->n + (size_t)n + 1) * 2;
        b->s = vfy_xrealloc(b->s, b->cap);
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

const char *vfy_str_get(const Str *b)
{
    return b->s ? b->s : "";
}

/* ---- reporting: to a Diag, or quietly (in-place and --explain re-runs) ---- */

__attribute__((format(printf, 3, 4))) void vfy_error(Reporter *rep, SrcLoc loc, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (rep->d)
        diag_error(rep->d, loc, "%s", msg);
    else if (!rep->nerrors) {
        size_t n = strlen(msg) < sizeof rep->first - 1 ? strlen(msg) : sizeof rep->first - 1;
        memcpy(rep->first, msg, n);
        rep->first[n] = 0;
    }
    rep->nerrors++;
}

__attribute__((format(printf, 3, 4))) void vfy_note(Reporter *rep, SrcLoc loc, const char *fmt, ...)
{
    if (!rep->d)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    diag_note(rep->d, loc, "%s", msg);
}

int vfy_same_loc(SrcLoc a, SrcLoc b)
{
    return a.line == b.line && a.col == b.col;
}

int vfy_seen_before(Seen *s, SrcLoc loc)
{
    for (int i = 0; i < s->n; i++)
        if (vfy_same_loc(s->v[i], loc))
            return 1;
    if (s->n < MAX_SEEN)
        s->v[s->n++] = loc;
    return 0;
}

/* ---- the program's shape ---- */

static void shape_init(Shape *sh, const Program *p)
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
    sh->blk = vfy_xcalloc((size_t)sh->n * (size_t)sh->maxtb, sizeof *sh->blk);
    for (int i = 0; i < sh->n * sh->maxtb; i++)
        sh->blk[i] = -1;
    for (int b = 0; b < p->nblocks; b++) {
        const Block *bl = &p->blocks[b];
        if (bl->rank < 0 || bl->rank >= sh->n || bl->tb < 0 || bl->tb >= sh->maxtb)
            internal_error("block %d has rank %d tb %d outside the program", b, bl->rank, bl->tb);
        sh->blk[bl->rank * sh->maxtb + bl->tb] = b;
    }
    sh->buf_base = vfy_xcalloc((size_t)p->nbufs, sizeof *sh->buf_base);
    for (int i = 0; i < p->nbufs; i++) {
        sh->buf_base[i] = sh->rank_cells;
        sh->rank_cells += p->buf_chunks[i];
    }
}

static void shape_fini(Shape *sh)
{
    free(sh->blk);
    free(sh->buf_base);
    free(sh->vc_spare);
}

int vfy_block_of(const Shape *sh, int rank, int tb)
{
    if (rank < 0 || rank >= sh->n || tb < 0 || tb >= sh->maxtb)
        return -1;
    return sh->blk[rank * sh->maxtb + tb];
}

/* Some block of the rank, or -1 when it has none. */
static int first_block(const Shape *sh, int rank)
{
    for (int t = 0; t < sh->maxtb; t++)
        if (vfy_block_of(sh, rank, t) >= 0)
            return vfy_block_of(sh, rank, t);
    return -1;
}

/* "rank 2" or "rank 2 tb 1", for messages. */
const char *vfy_where_text(const Shape *sh, int rank, int tb, char *buf, size_t size)
{
    if (sh->show_tb)
        snprintf(buf, size, "rank %d tb %d", rank, tb);
    else
        snprintf(buf, size, "rank %d", rank);
    return buf;
}

/* "in@0[1]", "s@2[3]" */
const char *vfy_cell_text(const Shape *sh, int rank, int buf, int chunk, char *out, size_t size)
{
    snprintf(out, size, "%s@%d[%d]", sh->p->buf_name[buf], rank, chunk);
    return out;
}

/* In place, the collective's in and out are one buffer (docs/language.md): maps a chunk
 * of in onto the chunk of out it is (or out onto in, for reduce_scatter). Contiguous
 * chunks stay contiguous, so a range maps by its first chunk. */
void vfy_inplace_alias(const Shape *sh, int rank, int *buf, int *chunk)
{
    switch (sh->p->coll) {
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
        break;
    }
}

/* ---- contents: expressions over input contributions ----
 *
 * A chunk holds a node: an input contribution in@q[c], the initial garbage of a chunk
 * that was read before anything was written to it, or the sum (the reduction op) of two
 * nodes. A copy shares its source's node. A reduce folds its operands left to right.
 * Each node carries two 64-bit hashes, so comparisons cost O(1):
 *  - `hash`, the multiset of its leaves (a sum of the leaves' hashes) with their count:
 *    equal to the expected set's hash means the right contributions, each once;
 *  - `shape`, the reduction tree up to swapping the operands of one sum (every op is
 *    commutative per pair): equal shapes give the same bits on every rank. */

enum { NODE_IN, NODE_GARBAGE, NODE_SUM };

typedef struct {
    int kind;
    int a, b, c;          /* IN: rank, chunk; GARBAGE: rank, buf, chunk; SUM: children */
    uint64_t hash;        /* sum of the leaves' hashes */
    uint64_t shape;       /* the tree, children unordered */
    int64_t count;        /* number of leaves, saturating */
    int pos;              /* position (chunk % K) of every IN leaf; -1 none, -2 mixed */
} Node;

typedef struct {
    Node *v;
    int n, cap;
    int k;
} Nodes;

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
static int node_new(Nodes *ns, int kind, int a, int b, int c)
{
    if (ns->n == ns->cap) {
        ns->cap = ns->cap ? ns->cap * 2 : 1024;
        ns->v = vfy_xrealloc(ns->v, sizeof *ns->v * (size_t)ns->cap);
    }
    Node x = {.kind = kind, .a = a, .b = b, .c = c};
    if (kind == NODE_SUM) {
        const Node *l = &ns->v[a], *r = &ns->v[b];
        uint64_t lo = l->shape < r->shape ? l->shape : r->shape, hi = l->shape ^ r->shape ^ lo;
        x.hash = l->hash + r->hash;
        x.shape = mix64(mix64(lo ^ 0x2545f4914f6cdd1dull) + hi);
        x.count = l->count > INT64_MAX - r->count ? INT64_MAX : l->count + r->count;
        x.pos = l->pos == -1 ? r->pos : r->pos == -1 ? l->pos : l->pos == r->pos ? l->pos : -2;
    } else {
        x.hash = x.shape = leaf_hash(kind, a, b, c);
        x.count = 1;
        x.pos = kind == NODE_IN ? b % ns->k : -1;
    }
    ns->v[ns->n] = x;
    return ns->n++;
}

static void nodes_fini(Nodes *ns)
{
    free(ns->v);
}

/* One leaf of a node's multiset with its multiplicity. */
typedef struct {
    int node;
    int64_t mult;
} Leaf;

static int leaf_cmp(const void *x, const void *y)
{
    const Leaf *l = x, *r = y;
    return l->node < r->node ? -1 : l->node > r->node;
}

/* The multiset of leaves under `root`: the DAG's nodes in descending index order (a
 * child is always created before its parent) pass their multiplicity down. Returns the
 * number of leaves written to *out (malloc'd, sorted by node). */
static int node_leaves(const Nodes *ns, int root, Leaf **out)
{
    int64_t *mult = vfy_xcalloc((size_t)ns->n, sizeof *mult);
    char *mark = vfy_xcalloc((size_t)ns->n, 1);
    int *stack = vfy_xcalloc((size_t)ns->n, sizeof *stack), sp = 0, hi = root;
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
    Leaf *leaves = vfy_xcalloc((size_t)nleaves, sizeof *leaves);
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
        vfy_str_printf(s, "in@%d[%d]", x->a, x->b);
    else
        vfy_str_printf(s, "uninitialized %s@%d[%d]", sh->p->buf_name[x->b], x->a, x->c);
}

/* The reduction tree of a node, e.g. "((in@0[0] + in@1[0]) + in@2[0])", cut short. */
static void node_tree_text(const Shape *sh, const Nodes *ns, int id, Str *s, int depth)
{
    const Node *x = &ns->v[id];
    if (s->n > 300 || depth > 40) {
        vfy_str_printf(s, "...");
        return;
    }
    if (x->kind != NODE_SUM) {
        leaf_text(sh, x, s);
        return;
    }
    vfy_str_printf(s, "(");
    node_tree_text(sh, ns, x->a, s, depth + 1);
    vfy_str_printf(s, " + ");
    node_tree_text(sh, ns, x->b, s, depth + 1);
    vfy_str_printf(s, ")");
}

/* ---- static checks: semaphore and barrier counts ---- */

static const Step *nth_step(const Block *bl, StepKind kind, int peer, int nth)
{
    for (int i = 0; i < bl->nsteps; i++)
        if (bl->steps[i].kind == kind && (kind == STEP_BARRIER || bl->steps[i].peer == peer) && nth-- == 0)
            return &bl->steps[i];
    return NULL;
}

/* "once", "twice", "3 times" */
static void times_text(int n, char *buf, size_t size)
{
    if (n == 1 || n == 2)
        snprintf(buf, size, "%s", n == 1 ? "once" : "twice");
    else
        snprintf(buf, size, "%d times", n);
}

typedef struct {
    long nsignals, nwaits, nbarriers;
} SyncCounts;

/* Every semaphore (signaler rank, waiter rank, tb) must see as many waits as signals in
 * one call: fewer signals leave a wait hanging; more leave the counter ahead, so the
 * next call's waits would pair with this call's signals. */
static void check_sem_counts(const Shape *sh, Reporter *rep, SyncCounts *sc)
{
    const Program *p = sh->p;
    int n = sh->n;
    int *sig = vfy_xcalloc((size_t)sh->nb * (size_t)n, sizeof *sig);
    int *wt = vfy_xcalloc((size_t)sh->nb * (size_t)n, sizeof *wt);
    for (int b = 0; b < sh->nb; b++) {
        const Block *bl = &p->blocks[b];
        for (int i = 0; i < bl->nsteps; i++) {
            const Step *st = &bl->steps[i];
            if (st->kind == STEP_SIGNAL && st->peer >= 0 && st->peer < n)
                sig[b * n + st->peer]++, sc->nsignals++;
            else if (st->kind == STEP_WAIT && st->peer >= 0 && st->peer < n)
                wt[b * n + st->peer]++, sc->nwaits++;
            else if (st->kind == STEP_BARRIER)
                sc->nbarriers++;
        }
    }
    Seen seen = {0};
    char w1[48], w2[48], t1[24], t2[24];
    for (int b = 0; b < sh->nb; b++) {
        const Block *bl = &p->blocks[b];
        for (int q = 0; q < n; q++) {
            /* Block b waits for q: q's block of the same tb signals. */
            int sb = vfy_block_of(sh, q, bl->tb);
            int nw = wt[b * n + q], ns = sb >= 0 ? sig[sb * n + bl->rank] : 0;
            if (nw > ns) {
                const Step *st = nth_step(bl, STEP_WAIT, q, ns);
                times_text(ns, t1, sizeof t1);
                times_text(nw, t2, sizeof t2);
                if (vfy_seen_before(&seen, st->loc)) {
                    /* reported for another rank already */
                } else if (sb < 0) {
                    vfy_error(rep, st->loc, "wait on %s for rank %d never completes: rank %d has no thread block %d, "
                              "so nothing signals it (waited %s)", vfy_where_text(sh, bl->rank, bl->tb, w1, sizeof w1),
                              q, q, bl->tb, t2);
                } else {
                    vfy_error(rep, st->loc, "wait at line %d on %s for rank %d never completes: rank %d signals it "
                              "%s, waited %s", st->loc.line, vfy_where_text(sh, bl->rank, bl->tb, w1, sizeof w1), q, q,
                              ns ? t1 : "never", t2);
                }
            }
            /* Block b signals q: q's block of the same tb waits. */
            int wb = vfy_block_of(sh, q, bl->tb);
            ns = sig[b * n + q];
            nw = wb >= 0 ? wt[wb * n + bl->rank] : 0;
            if (ns > nw) {
                const Step *st = nth_step(bl, STEP_SIGNAL, q, nw);
                times_text(ns, t1, sizeof t1);
                times_text(nw, t2, sizeof t2);
                if (!vfy_seen_before(&seen, st->loc))
                    vfy_error(rep, st->loc, "signal at line %d on %s to rank %d is never waited for: it signals %s, "
                              "%s %s%s (counts must balance in every call, or the next call's waits pair with this "
                              "call's signals)", st->loc.line, vfy_where_text(sh, bl->rank, bl->tb, w1, sizeof w1),
                              q, t1, vfy_where_text(sh, q, bl->tb, w2, sizeof w2), nw ? "waits " : "never waits",
                              nw ? t2 : "");
            }
        }
    }
    free(sig);
    free(wt);
}

/* A barrier joins every thread block of the rank's launch (tbs 0..maxtb-1), so each of
 * them must reach every barrier. */
static void check_barrier_counts(const Shape *sh, Reporter *rep)
{
    const Program *p = sh->p;
    int *cnt = vfy_xcalloc((size_t)sh->maxtb, sizeof *cnt);
    Seen seen = {0};
    for (int r = 0; r < sh->n; r++) {
        int most = 0, tmost = 0, least = -1, tleast = 0;
        for (int t = 0; t < sh->maxtb; t++) {
            int b = vfy_block_of(sh, r, t);
            cnt[t] = 0;
            if (b >= 0)
                for (int i = 0; i < p->blocks[b].nsteps; i++)
                    cnt[t] += p->blocks[b].steps[i].kind == STEP_BARRIER;
            if (cnt[t] > most)
                most = cnt[t], tmost = t;
            if (least < 0 || cnt[t] < least)
                least = cnt[t], tleast = t;
        }
        if (most == least)
            continue;
        const Step *st = nth_step(&p->blocks[vfy_block_of(sh, r, tmost)], STEP_BARRIER, -1, least);
        if (vfy_seen_before(&seen, st->loc))
            continue;
        if (vfy_block_of(sh, r, tleast) < 0)
            vfy_error(rep, st->loc, "barrier at line %d on rank %d tb %d never completes: tb %d of rank %d has no "
                      "steps, so it never reaches a barrier (every thread block of the launch, tbs 0..%d, must reach "
                      "each barrier)", st->loc.line, r, tmost, tleast, r, sh->maxtb - 1);
        else
            vfy_error(rep, st->loc, "barrier at line %d on rank %d tb %d never completes: tb %d of rank %d reaches "
                      "%d barrier%s, tb %d reaches %d (every thread block of the launch, tbs 0..%d, must reach each "
                      "barrier)", st->loc.line, r, tmost, tleast, r, least, least == 1 ? "" : "s", tmost, most,
                      sh->maxtb - 1);
    }
    free(cnt);
}

/* ---- the simulation ---- */

typedef struct {
    int ncalls;           /* 1, or 2 back-to-back calls */
    int inplace;          /* in and out aliased as the collective allows */
    int contents;         /* track contents: postcondition, layout, read-only input */
    int cross_only;       /* report only races between accesses of different calls */
} SimMode;

/* One access: block, step, call, and the block's own clock (its epoch) at the time. */
typedef struct {
    int block, step, call, epoch;
} Access;

/* FastTrack-style history of one chunk: the last write and, per block, the latest read
 * since. If an access is ordered after the last write it is ordered after all earlier
 * writes too, so this is exact for deciding whether a racing pair exists. */
typedef struct {
    Access w;
    int has_w;
    int nr, cap;
    Access *r;
} CellLog;

/* A vector clock sent by a signal, shared by consecutive signals of one block. */
typedef struct Snap {
    int refs;
    struct Snap *next;    /* on the spare list, once unused */
    int v[];
} Snap;

typedef struct QItem {
    Snap *snap;
    struct QItem *next;
} QItem;

typedef struct {
    QItem *head, *tail;
} Sem;

enum { RUN, AT_BARRIER, DONE };

typedef struct {
    Shape *sh;
    SimMode m;
    Reporter *rep;
    int nparity, ncells;
    int nt;               /* clock threads: the blocks, then one caller per rank */
    int *vc;              /* nt x nt: vc[b * nt + x] = what thread b knows of thread x */
    Snap **snap;          /* per block: its current clock as sent, or NULL */
    Snap *spare;          /* unused snapshots, recycled: they are nt ints each */
    QItem *spare_items;
    char *pending;        /* per block: a signal was sent; advance before the next access */
    int *pc, *call, *state;
    char *boundary;       /* per block: at the end of a call, waiting for its rank */
    Sem *sem;             /* [waiter block * n + signaler rank] */
    CellLog *log;
    int *content;         /* per cell: node, or -1 for the cell's initial garbage */
    int *wblock, *wstep;  /* per cell: the last writer, or -1 */
    Nodes nodes;
    long pairs;           /* access pairs from different blocks compared */
    long edges;           /* signal->wait pairs and barrier joins applied */
    int stuck;
    Seen race_seen;       /* statement pairs reported: one side here, */
    SrcLoc race_other[MAX_SEEN]; /* the other side at the same index */
    int nraces, races_hidden;
    Seen layout_seen, input_seen;
    int nlayout, ninput;
} Sim;

/* The cell of chunk `chunk` of `buf` on `rank`, in call `call`: in-place aliasing maps
 * in onto out (or out onto in); LL scratch alternates halves by call parity. */
static int sim_cell(const Sim *s, int rank, int buf, int chunk, int call)
{
    const Shape *sh = s->sh;
    if (s->m.inplace)
        vfy_inplace_alias(sh, rank, &buf, &chunk);
    int par = s->nparity == 2 && buf >= BUF_SCRATCH0 ? call & 1 : 0;
    return (par * sh->n + rank) * sh->rank_cells + sh->buf_base[buf] + chunk;
}

static int sim_init(Sim *s, Shape *sh, SimMode m, Reporter *rep)
{
    const Program *p = sh->p;
    memset(s, 0, sizeof *s);
    s->sh = sh;
    s->m = m;
    s->rep = rep;
    s->nparity = m.ncalls > 1 && p->protocol == PROTO_LL ? 2 : 1;

    int64_t cells = (int64_t)s->nparity * sh->n * sh->rank_cells;
    int nb = sh->nb, nt = nb + sh->n;
    if (cells > MAX_CELLS || (int64_t)nt * nt > MAX_SYNC_SLOTS || (int64_t)nb * sh->n > MAX_SYNC_SLOTS)
        return -1;
    s->ncells = (int)cells;
    s->nt = nt;
    size_t nvc = (size_t)nt * (size_t)nt;
    if (sh->vc_spare && sh->vc_spare_n == nvc) {
        s->vc = sh->vc_spare;
        memset(s->vc, 0, sizeof *s->vc * nvc);
    } else {
        free(sh->vc_spare);
        s->vc = vfy_xcalloc(nvc, sizeof *s->vc);
    }
    sh->vc_spare = NULL;
    for (int b = 0; b < nt; b++)
        s->vc[b * nt + b] = 1;
    s->snap = vfy_xcalloc((size_t)nb, sizeof *s->snap);
    s->pending = vfy_xcalloc((size_t)nb, 1);
    s->pc = vfy_xcalloc((size_t)nb, sizeof *s->pc);
    s->call = vfy_xcalloc((size_t)nb, sizeof *s->call);
    s->state = vfy_xcalloc((size_t)nb, sizeof *s->state);
    s->boundary = vfy_xcalloc((size_t)nb, 1);
    s->sem = vfy_xcalloc((size_t)nb * (size_t)sh->n, sizeof *s->sem);
    s->log = vfy_xcalloc((size_t)s->ncells, sizeof *s->log);
    if (m.contents) {
        s->content = vfy_xcalloc((size_t)s->ncells, sizeof *s->content);
        s->wblock = vfy_xcalloc((size_t)s->ncells, sizeof *s->wblock);
        s->wstep = vfy_xcalloc((size_t)s->ncells, sizeof *s->wstep);
        for (int i = 0; i < s->ncells; i++)
            s->content[i] = s->wblock[i] = s->wstep[i] = -1;
        s->nodes.k = sh->k;
        /* Inputs: in@r[c] holds the contribution (r, c); in place, that is the cell
         * in is aliased to. */
        for (int r = 0; r < sh->n; r++)
            for (int c = 0; c < p->buf_chunks[BUF_IN]; c++)
                s->content[sim_cell(s, r, BUF_IN, c, 0)] = node_new(&s->nodes, NODE_IN, r, c, 0);
    }
    return 0;
}

static void snap_unref(Sim *s, Snap *sn)
{
    if (sn && --sn->refs == 0) {
        sn->next = s->spare;
        s->spare = sn;
    }
}

static void sim_fini(Sim *s)
{
    if (!s->sh)
        return;
    int nb = s->sh->nb;
    if (s->sem)
        for (int i = 0; i < nb * s->sh->n; i++)
            for (QItem *q = s->sem[i].head, *next; q; q = next) {
                next = q->next;
                snap_unref(s, q->snap);
                free(q);
            }
    if (s->snap)
        for (int b = 0; b < nb; b++)
            snap_unref(s, s->snap[b]);
    for (Snap *sn = s->spare, *next; sn; sn = next) {
        next = sn->next;
        free(sn);
    }
    for (QItem *q = s->spare_items, *next; q; q = next) {
        next = q->next;
        free(q);
    }
    if (s->log)
        for (int i = 0; i < s->ncells; i++)
            free(s->log[i].r);
    if (s->vc) {
        s->sh->vc_spare = s->vc;
        s->sh->vc_spare_n = (size_t)s->nt * (size_t)s->nt;
    }
    free(s->snap);
    free(s->pending);
    free(s->pc);
    free(s->call);
    free(s->state);
    free(s->boundary);
    free(s->sem);
    free(s->log);
    free(s->content);
    free(s->wblock);
    free(s->wstep);
    nodes_fini(&s->nodes);
}

/* dst = max(dst, src) elementwise: the join of two vector clocks, the verifier's inner
 * loop. Written with GCC/Clang vector types (plain SSE2 on x86-64), four at a time. */
typedef int ClockVec __attribute__((vector_size(16)));

static void clock_join(int *restrict dst, const int *restrict src, int n)
{
    int x = 0;
    for (; x + 4 <= n; x += 4) {
        ClockVec a, b;
        memcpy(&a, dst + x, sizeof a);
        memcpy(&b, src + x, sizeof b);
        ClockVec m = b > a;
        a = (b & m) | (a & ~m);
        memcpy(dst + x, &a, sizeof a);
    }
    for (; x < n; x++)
        dst[x] = src[x] > dst[x] ? src[x] : dst[x];
}

/* The block's clock changed: the snapshot it would send is stale. */
static void clock_changed(Sim *s, int b)
{
    snap_unref(s, s->snap[b]);
    s->snap[b] = NULL;
}

static const Step *step_at(const Sim *s, int b, int i)
{
    return &s->sh->p->blocks[b].steps[i];
}

static int expected(const Shape *sh, int r, int i, int *exp_rank, int *exp_chunk, int *nexp);

/* The rank of an access's thread (a block, or the caller of a rank). */
static int access_rank(const Sim *s, Access x)
{
    return x.block < s->sh->nb ? s->sh->p->blocks[x.block].rank : x.block - s->sh->nb;
}

static SrcLoc access_loc(const Sim *s, Access x)
{
    return x.step >= 0 ? step_at(s, x.block, x.step)->loc : s->sh->p->name_loc;
}

/* "'put' at line 9 on rank 1 (in call 2) writes it", or the caller's part. */
static void access_text(const Sim *s, Access x, int is_write, int cross, Str *out)
{
    const Shape *sh = s->sh;
    if (x.step < 0) {
        if (is_write)
            vfy_str_printf(out, "the caller on rank %d writes the next call's input into it", access_rank(s, x));
        else if (cross)
            vfy_str_printf(out, "the caller on rank %d reads call %d's result in it", access_rank(s, x), x.call + 1);
        else
            vfy_str_printf(out, "the caller on rank %d reads the result after the call", access_rank(s, x));
        return;
    }
    const Block *bl = &sh->p->blocks[x.block];
    const Step *st = step_at(s, x.block, x.step);
    char w[48];
    vfy_str_printf(out, "'%s' at line %d on %s", step_name(st->kind), st->loc.line,
                   vfy_where_text(sh, bl->rank, bl->tb, w, sizeof w));
    if (cross)
        vfy_str_printf(out, " in call %d", x.call + 1);
    vfy_str_printf(out, " %s it", is_write ? "writes" : "reads");
}

/* Reports a race between an earlier access `prev` and the current one `cur` on chunk
 * (rank, buf, chunk): once per pair of statements, at most MAX_RACE_REPORTS. */
static void report_race(Sim *s, Access prev, int prev_w, Access cur, int cur_w, int rank, int buf, int chunk)
{
    const Shape *sh = s->sh;
    /* Within a call the message names the writer first and points at the reader (where
     * a wait belongs); across calls it names the first call's access first and points
     * at the other; the caller's accesses between calls are never pointed at. */
    if (prev.call == cur.call ? (cur_w && !prev_w) : prev.call > cur.call) {
        Access t = prev;
        int tw = prev_w;
        prev = cur, prev_w = cur_w;
        cur = t, cur_w = tw;
    }
    SrcLoc pl = access_loc(s, prev), cl = access_loc(s, cur);
    for (int i = 0; i < s->race_seen.n; i++) {
        SrcLoc x = s->race_seen.v[i], y = s->race_other[i];
        if ((vfy_same_loc(x, cl) && vfy_same_loc(y, pl)) || (vfy_same_loc(x, pl) && vfy_same_loc(y, cl)))
            return;
    }
    if (s->race_seen.n < MAX_SEEN) {
        s->race_other[s->race_seen.n] = pl;
        s->race_seen.v[s->race_seen.n++] = cl;
    }
    if (s->nraces >= MAX_RACE_REPORTS) {
        s->races_hidden++;
        return;
    }
    s->nraces++;
    char cell[96];
    vfy_cell_text(sh, rank, buf, chunk, cell, sizeof cell);
    const char *kind = buf >= BUF_SCRATCH0 ? "scratch " : "";
    int cross = prev.call != cur.call;
    Str msg = {0};
    vfy_str_printf(&msg, "%s on %s%s: ", cross ? "cross-call race" : "data race", kind, cell);
    access_text(s, prev, prev_w, cross, &msg);
    vfy_str_printf(&msg, " while ");
    access_text(s, cur, cur_w, cross, &msg);
    int pr = access_rank(s, prev), cr = access_rank(s, cur);
    if (!cross && cur.step < 0) {
        vfy_str_printf(&msg, "; nothing orders them (rank %d's call may end before the data arrives: make it wait for "
                       "rank %d after the write)", cr, pr);
    } else if (!cross) {
        vfy_str_printf(&msg, "; nothing orders them (add %s)", pr == cr ? "a barrier or signal/wait" : "signal/wait");
    } else if (prev.step < 0 || cur.step < 0) {
        /* The caller's side: the peer's next call may overwrite a result not yet
         * consumed, or the peer may still read an input the caller replaces. */
        int peer = prev.step < 0 ? cr : pr, owner = prev.step < 0 ? pr : cr;
        if (cur_w && cur.step >= 0)
            vfy_str_printf(&msg, "; nothing orders them (rank %d's next call may write it before rank %d's caller has "
                           "read it: make rank %d wait for a signal that rank %d sends in the new call)", peer, owner,
                           peer, owner);
        else
            vfy_str_printf(&msg, "; nothing orders them (rank %d's call may end while rank %d still reads its buffer: "
                           "make rank %d wait for rank %d before it ends)", owner, peer, owner, peer);
    } else {
        vfy_str_printf(&msg, "; nothing orders them (the next call may start on rank %d while rank %d is still in this "
                       "one: make rank %d wait for rank %d before reusing the buffer%s)", cr, pr, cr, pr,
                       buf >= BUF_SCRATCH0 ? ", or use protocol ll, whose scratch alternates between calls" : "");
    }
    SrcLoc at = cur.step >= 0 ? cl : pl;
    vfy_error(s->rep, at, "%s", vfy_str_get(&msg));
    free(msg.s);
    Access other = cur.step >= 0 ? prev : cur;
    if (other.step >= 0 && !vfy_same_loc(pl, cl)) {
        char w[48];
        const Block *ob = &sh->p->blocks[other.block];
        vfy_note(s->rep, access_loc(s, other), "the other access: '%s' on %s",
                 step_name(step_at(s, other.block, other.step)->kind),
                 vfy_where_text(sh, ob->rank, ob->tb, w, sizeof w));
    }
}

/* Checks one access against the chunk's history, then records it. */
static void sim_access(Sim *s, Access cur, int is_write, int rank, int buf, int chunk)
{
    int cell = sim_cell(s, rank, buf, chunk, cur.call);
    CellLog *L = &s->log[cell];
    const int *known = &s->vc[cur.block * s->nt];
    if (L->has_w && L->w.block != cur.block) {
        s->pairs++;
        if (L->w.epoch > known[L->w.block] && (!s->m.cross_only || L->w.call != cur.call))
            report_race(s, L->w, 1, cur, is_write, rank, buf, chunk);
    }
    if (is_write) {
        for (int i = 0; i < L->nr; i++) {
            if (L->r[i].block == cur.block)
                continue;
            s->pairs++;
            if (L->r[i].epoch > known[L->r[i].block] && (!s->m.cross_only || L->r[i].call != cur.call))
                report_race(s, L->r[i], 0, cur, 1, rank, buf, chunk);
        }
        L->nr = 0;
        L->w = cur;
        L->has_w = 1;
        return;
    }
    for (int i = 0; i < L->nr; i++)
        if (L->r[i].block == cur.block) {
            L->r[i] = cur;
            return;
        }
    if (L->nr == L->cap) {
        L->cap = L->cap ? 2 * L->cap : 2;
        L->r = vfy_xrealloc(L->r, sizeof *L->r * (size_t)L->cap);
    }
    L->r[L->nr++] = cur;
}

/* The content of a cell: its node, or its initial garbage (made on first read). */
static int sim_read_content(Sim *s, int cell)
{
    if (s->content[cell] < 0) {
        int per_rank = s->sh->rank_cells;
        int rank = (cell / per_rank) % s->sh->n, off = cell % per_rank, buf = 0;
        while (buf + 1 < s->sh->p->nbufs && s->sh->buf_base[buf + 1] <= off)
            buf++;
        s->content[cell] = node_new(&s->nodes, NODE_GARBAGE, rank, buf, off - s->sh->buf_base[buf]);
    }
    return s->content[cell];
}

/* In/out chunk i may only receive content of position i % K: shorter tail chunks
 * would otherwise be read or written past their length (docs/internals.md). */
static void check_layout(Sim *s, int b, const Step *st, int rank, int chunk, int node)
{
    const Shape *sh = s->sh;
    const Node *x = &s->nodes.v[node];
    int want = chunk % sh->k;
    if (x->pos == -1 || x->pos == want)
        return;
    if (vfy_seen_before(&s->layout_seen, st->loc))
        return;
    s->nlayout++;
    if (s->nlayout > MAX_STEP_REPORTS)
        return;
    Leaf *leaves;
    int nl = node_leaves(&s->nodes, node, &leaves);
    const Node *bad = NULL;
    for (int i = 0; i < nl && !bad; i++) {
        const Node *l = &s->nodes.v[leaves[i].node];
        if (l->kind == NODE_IN && l->b % sh->k != want)
            bad = l;
    }
    free(leaves);
    if (!bad)
        return;
    char cell[96], w[48];
    const Block *bl = &sh->p->blocks[b];
    vfy_error(s->rep, st->loc, "layout violation: '%s' on %s stores in@%d[%d] (position %d) into %s (position %d); "
              "an in/out chunk i may only receive content of position i %% K (K = %d), because chunk lengths "
              "depend on the position", step_name(st->kind), vfy_where_text(sh, bl->rank, bl->tb, w, sizeof w), bad->a,
              bad->b, bad->b % sh->k, vfy_cell_text(sh, rank, st->dst.buf, chunk, cell, sizeof cell), want, sh->k);
}

static void sim_data(Sim *s, int b, int i)
{
    const Step *st = step_at(s, b, i);
    const Block *bl = &s->sh->p->blocks[b];
    if (s->pending[b]) {
        s->vc[b * s->nt + b]++;
        s->pending[b] = 0;
        clock_changed(s, b);
    }
    Access cur = {b, i, s->call[b], s->vc[b * s->nt + b]};
    int count = st->dst.count;
    for (int o = 0; o < st->nsrc; o++)
        for (int j = 0; j < count && j < st->src[o].count; j++)
            sim_access(s, cur, 0, st->src[o].rank, st->src[o].buf, st->src[o].chunk + j);
    for (int j = 0; j < count; j++)
        sim_access(s, cur, 1, st->dst.rank, st->dst.buf, st->dst.chunk + j);
    if (!s->m.contents)
        return;
    if (st->dst.buf == BUF_IN && !s->m.inplace && !vfy_seen_before(&s->input_seen, st->loc) &&
        ++s->ninput <= MAX_STEP_REPORTS) {
        char cell[96], w[48];
        vfy_error(s->rep, st->loc, "'%s' on %s writes to the input buffer (%s); inputs are read-only, so stage "
                  "data in a scratch buffer", step_name(st->kind), vfy_where_text(s->sh, bl->rank, bl->tb, w, sizeof w),
                  vfy_cell_text(s->sh, st->dst.rank, BUF_IN, st->dst.chunk, cell, sizeof cell));
    }
    /* Every chunk's new content is computed before any is stored: the chunks of one op
     * move in parallel. */
    int stackbuf[16];
    int *val = count <= 16 ? stackbuf : vfy_xcalloc((size_t)count, sizeof *val);
    for (int j = 0; j < count; j++) {
        int acc = -1;
        for (int o = 0; o < st->nsrc; o++) {
            if (j >= st->src[o].count)
                continue;
            int x = sim_read_content(s, sim_cell(s, st->src[o].rank, st->src[o].buf, st->src[o].chunk + j, cur.call));
            acc = acc < 0 ? x : node_new(&s->nodes, NODE_SUM, acc, x, 0);
        }
        val[j] = acc;
    }
    for (int j = 0; j < count; j++) {
        if (val[j] < 0)
            continue;
        int cell = sim_cell(s, st->dst.rank, st->dst.buf, st->dst.chunk + j, cur.call);
        s->content[cell] = val[j];
        s->wblock[cell] = b;
        s->wstep[cell] = i;
        if (st->dst.buf == BUF_IN || st->dst.buf == BUF_OUT)
            check_layout(s, b, st, st->dst.rank, st->dst.chunk + j, val[j]);
    }
    if (val != stackbuf)
        free(val);
}

static void sim_signal(Sim *s, int b, const Step *st)
{
    const Shape *sh = s->sh;
    const Block *bl = &sh->p->blocks[b];
    int wb = vfy_block_of(sh, st->peer, bl->tb);
    if (wb < 0)
        return; /* reported by check_sem_counts */
    if (!s->snap[b]) {
        Snap *sn = s->spare;
        if (sn)
            s->spare = sn->next;
        else
            sn = vfy_xcalloc(1, sizeof *sn + sizeof(int) * (size_t)s->nt);
        memcpy(sn->v, &s->vc[b * s->nt], sizeof(int) * (size_t)s->nt);
        sn->refs = 1;
        s->snap[b] = sn;
    }
    QItem *q = s->spare_items;
    if (q)
        s->spare_items = q->next;
    else
        q = vfy_xcalloc(1, sizeof *q);
    q->next = NULL;
    q->snap = s->snap[b];
    q->snap->refs++;
    Sem *sem = &s->sem[wb * sh->n + bl->rank];
    if (sem->tail)
        sem->tail->next = q;
    else
        sem->head = q;
    sem->tail = q;
    s->pending[b] = 1;
}

/* Returns 0 when the matching signal has not happened yet. */
static int sim_wait(Sim *s, int b, const Step *st)
{
    const Shape *sh = s->sh;
    Sem *sem = &s->sem[b * sh->n + st->peer];
    QItem *q = sem->head;
    if (!q)
        return 0;
    sem->head = q->next;
    if (!sem->head)
        sem->tail = NULL;
    clock_join(&s->vc[b * s->nt], q->snap->v, s->nt);
    snap_unref(s, q->snap);
    q->next = s->spare_items;
    s->spare_items = q;
    clock_changed(s, b);
    s->edges++;
    return 1;
}

/* Runs block b until it blocks or ends; returns whether it moved. */
static int sim_block(Sim *s, int b)
{
    const Block *bl = &s->sh->p->blocks[b];
    int moved = 0;
    while (s->state[b] == RUN) {
        if (s->pc[b] == bl->nsteps) {
            if (s->call[b] + 1 < s->m.ncalls) {
                s->state[b] = AT_BARRIER;
                s->boundary[b] = 1;
            } else {
                s->state[b] = DONE;
            }
            return 1;
        }
        const Step *st = &bl->steps[s->pc[b]];
        switch (st->kind) {
        case STEP_WAIT:
            if (!sim_wait(s, b, st))
                return moved;
            break;
        case STEP_SIGNAL:
            sim_signal(s, b, st);
            break;
        case STEP_BARRIER:
            s->state[b] = AT_BARRIER;
            s->boundary[b] = 0;
            return 1;
        case STEP_FLUSH:
            break;
        case STEP_PUT:
        case STEP_GET:
        case STEP_COPY:
        case STEP_REDUCE:
            sim_data(s, b, s->pc[b]);
            break;
        }
        s->pc[b]++;
        moved = 1;
    }
    return moved;
}

/* When every block of rank r has ended call `call`, the caller on rank r consumes
 * out@r (where the collective defines it) and, before a next call, writes the next
 * in@r. Peers may still be in this call, or already in the next one, so these accesses
 * race with theirs unless a handshake orders them: this catches a rank that returns
 * before its output has arrived, and a next call that overwrites a result or an input
 * still in use. `join` is the rank's joined clock; it comes back with the caller's. */
static void sim_caller(Sim *s, int r, int call, int *join)
{
    const Shape *sh = s->sh;
    int h = sh->nb + r, nt = s->nt;
    memcpy(&s->vc[h * nt], join, sizeof *join * (size_t)nt);
    s->vc[h * nt + h]++;
    Access cur = {h, -1, call, s->vc[h * nt + h]};
    int *er = vfy_xcalloc((size_t)sh->n, sizeof *er), *ec = vfy_xcalloc((size_t)sh->n, sizeof *ec), ne;
    for (int i = 0; i < sh->p->buf_chunks[BUF_OUT]; i++)
        if (expected(sh, r, i, er, ec, &ne))
            sim_access(s, cur, 0, r, BUF_OUT, i);
    cur.call = call + 1;
    if (call + 1 < s->m.ncalls)
        for (int i = 0; i < sh->p->buf_chunks[BUF_IN]; i++)
            sim_access(s, cur, 1, r, BUF_IN, i);
    free(er);
    free(ec);
    memcpy(join, &s->vc[h * nt], sizeof *join * (size_t)nt);
}

/* The end of the last call: every rank's caller reads its result. Nothing happens
 * after, so doing this once the whole run is over respects happens-before. */
static void sim_end(Sim *s)
{
    const Shape *sh = s->sh;
    int nt = s->nt;
    int *join = vfy_xcalloc((size_t)nt, sizeof *join);
    for (int r = 0; r < sh->n; r++) {
        memset(join, 0, sizeof *join * (size_t)nt);
        for (int t = 0; t < sh->maxtb; t++) {
            int b = vfy_block_of(sh, r, t);
            if (b >= 0)
                clock_join(join, &s->vc[b * nt], nt);
        }
        sim_caller(s, r, s->m.ncalls - 1, join);
    }
    free(join);
}

/* Releases rank r's blocks when all of them stand at a barrier (or at the end of a
 * call: the next call's kernel starts once the whole previous one ended). */
static int sim_barrier(Sim *s, int r)
{
    const Shape *sh = s->sh;
    int nt = s->nt, any = 0, all_boundary = 1;
    for (int t = 0; t < sh->maxtb; t++) {
        int b = vfy_block_of(sh, r, t);
        if (b >= 0 && s->state[b] != AT_BARRIER)
            return 0;
        if (b >= 0)
            any = 1, all_boundary &= s->boundary[b];
    }
    if (!any)
        return 0;
    int *join = vfy_xcalloc((size_t)nt, sizeof *join);
    for (int t = 0; t < sh->maxtb; t++) {
        int b = vfy_block_of(sh, r, t);
        if (b >= 0)
            clock_join(join, &s->vc[b * nt], nt);
    }
    if (all_boundary)
        sim_caller(s, r, s->call[vfy_block_of(sh, r, 0) >= 0 ? vfy_block_of(sh, r, 0) : first_block(sh, r)], join);
    for (int t = 0; t < sh->maxtb; t++) {
        int b = vfy_block_of(sh, r, t);
        if (b < 0)
            continue;
        memcpy(&s->vc[b * nt], join, sizeof *join * (size_t)nt);
        s->vc[b * nt + b]++;
        s->pending[b] = 0;
        clock_changed(s, b);
        if (s->boundary[b]) {
            s->call[b]++;
            s->pc[b] = 0;
        } else {
            s->pc[b]++;
        }
        s->boundary[b] = 0;
        s->state[b] = RUN;
        s->edges++;
    }
    free(join);
    return 1;
}

/* Runs every block until all are done or none can move (a deadlock). */
static void sim_run(Sim *s)
{
    for (;;) {
        int progress = 0;
        for (int b = 0; b < s->sh->nb; b++)
            progress |= sim_block(s, b);
        for (int r = 0; r < s->sh->n; r++)
            progress |= sim_barrier(s, r);
        if (!progress)
            break;
    }
    for (int b = 0; b < s->sh->nb; b++)
        if (s->state[b] != DONE)
            s->stuck = 1;
    if (!s->stuck)
        sim_end(s);
}

/* ---- deadlock: the cycle of blocked blocks ---- */

/* Whether block b, from where it stands to the end of the last call, still executes a
 * step of `kind` (for signals: to rank `peer`). */
static int will_execute(const Sim *s, int b, StepKind kind, int peer)
{
    const Block *bl = &s->sh->p->blocks[b];
    int from = s->pc[b] + (s->state[b] == AT_BARRIER && !s->boundary[b]);
    if (s->state[b] == DONE)
        return 0;
    for (int call = s->call[b]; call < s->m.ncalls; call++, from = 0)
        for (int i = from; i < bl->nsteps; i++)
            if (bl->steps[i].kind == kind && (kind != STEP_SIGNAL || bl->steps[i].peer == peer))
                return 1;
    return 0;
}

/* Whom a blocked block waits for: the signaling block, or for a barrier the first block
 * of its rank that has not arrived; -1 when that one will never signal or arrive (then
 * the counts are wrong, which check_sem_counts/check_barrier_counts report). */
static int blocked_on(const Sim *s, int b)
{
    const Shape *sh = s->sh;
    const Block *bl = &sh->p->blocks[b];
    if (s->state[b] == RUN) {
        const Step *st = &bl->steps[s->pc[b]];
        int t = vfy_block_of(sh, st->peer, bl->tb);
        return t >= 0 && will_execute(s, t, STEP_SIGNAL, bl->rank) ? t : -1;
    }
    if (s->state[b] == AT_BARRIER)
        for (int t = 0; t < sh->maxtb; t++) {
            int o = vfy_block_of(sh, bl->rank, t);
            if (o >= 0 && s->state[o] != AT_BARRIER)
                return will_execute(s, o, STEP_BARRIER, -1) ? o : -1;
        }
    return -1;
}

static void blocked_text(const Sim *s, int b, int target, Str *out)
{
    const Shape *sh = s->sh;
    const Block *bl = &sh->p->blocks[b];
    char w[48];
    vfy_where_text(sh, bl->rank, bl->tb, w, sizeof w);
    if (s->state[b] == AT_BARRIER)
        vfy_str_printf(out, "%s waits at the barrier at line %d for tb %d", w,
                       s->pc[b] < bl->nsteps ? bl->steps[s->pc[b]].loc.line : 0, sh->p->blocks[target].tb);
    else
        vfy_str_printf(out, "%s waits at line %d for rank %d", w, bl->steps[s->pc[b]].loc.line,
                       bl->steps[s->pc[b]].peer);
}

static SrcLoc blocked_loc(const Sim *s, int b)
{
    const Block *bl = &s->sh->p->blocks[b];
    if (s->pc[b] < bl->nsteps)
        return bl->steps[s->pc[b]].loc;
    return s->sh->p->name_loc;
}

/* Each block has at most one block it waits for, so the blocked blocks form a
 * functional graph; every cycle in it is a deadlock, reported once. */
static int report_deadlocks(const Sim *s, int counts_reported)
{
    const Shape *sh = s->sh;
    int nb = sh->nb, ncycles = 0;
    int *color = vfy_xcalloc((size_t)nb, sizeof *color); /* 0 new, walk id + 1 while walking, -1 done */
    int *target = vfy_xcalloc((size_t)nb, sizeof *target);
    for (int b = 0; b < nb; b++)
        target[b] = s->state[b] == DONE ? -1 : blocked_on(s, b);
    for (int b0 = 0; b0 < nb; b0++) {
        if (s->state[b0] == DONE || color[b0])
            continue;
        int b = b0;
        while (b >= 0 && !color[b]) {
            color[b] = b0 + 1;
            b = target[b];
        }
        if (b >= 0 && color[b] == b0 + 1 && ncycles < MAX_RACE_REPORTS) {
            /* A new cycle through b: start it at its lowest block for a stable text. */
            int first = b, len = 0;
            for (int x = target[b]; x != b; x = target[x])
                if (x < first)
                    first = x;
            Str msg = {0};
            vfy_str_printf(&msg, "deadlock: ");
            int x = first;
            do {
                if (len < 8) {
                    if (len)
                        vfy_str_printf(&msg, ", ");
                    blocked_text(s, x, target[x], &msg);
                } else if (len == 8) {
                    vfy_str_printf(&msg, ", ...");
                }
                len++;
                x = target[x];
            } while (x != first);
            vfy_str_printf(&msg, "; these %d thread blocks wait for each other in a cycle, so none can proceed", len);
            vfy_error(s->rep, blocked_loc(s, first), "%s", vfy_str_get(&msg));
            free(msg.s);
            SrcLoc l0 = blocked_loc(s, first);
            x = target[first];
            for (int i = 1; i < len && i < 8; i++, x = target[x]) {
                SrcLoc l = blocked_loc(s, x);
                if (l.line != l0.line || l.col != l0.col) {
                    char w[48];
                    vfy_note(s->rep, l, "%s is blocked here",
                             vfy_where_text(sh, sh->p->blocks[x].rank, sh->p->blocks[x].tb, w, sizeof w));
                }
            }
            ncycles++;
        }
        for (int x = b0; x >= 0 && color[x] == b0 + 1; x = target[x])
            color[x] = -1;
    }
    if (!ncycles && !counts_reported) {
        /* Unreachable when the counts balance; kept so a stuck run never passes. */
        for (int b = 0; b < nb; b++)
            if (s->state[b] != DONE) {
                char w[48];
                vfy_error(s->rep, blocked_loc(s, b), "deadlock: the run does not complete: %s is blocked here",
                          vfy_where_text(sh, sh->p->blocks[b].rank, sh->p->blocks[b].tb, w, sizeof w));
                break;
            }
    }
    free(color);
    free(target);
    return ncycles;
}

/* ---- the postcondition ---- */

/* What out@r[i] must hold: *nexp contribution (rank, in chunk) pairs in exp (room for
 * N); returns 0 when the chunk is unconstrained. */
static int expected(const Shape *sh, int r, int i, int *exp_rank, int *exp_chunk, int *nexp)
{
    const Program *p = sh->p;
    int k = sh->k, n = sh->n, j = i / k, c = i % k;
    *nexp = 0;
    switch (p->coll) {
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
    }
    return 0;
}

/* Appends a list "a, b and c" of at most `limit` names, then "and N more". */
static void list_text(Str *out, char **names, int n, int limit)
{
    for (int i = 0; i < n && i < limit; i++)
        vfy_str_printf(out, "%s%s", i == 0 ? "" : (i == n - 1 && n <= limit) ? " and " : ", ", names[i]);
    if (n > limit)
        vfy_str_printf(out, " and %d more", n - limit);
}

/* Explains why out@r[i] (holding `node`, or never written when node < 0) is wrong. */
static void explain_cell(const Sim *s, int r, int i, int node, const int *er, const int *ec, int ne, Str *msg)
{
    const Shape *sh = s->sh;
    vfy_str_printf(msg, "postcondition fails: out@%d[%d] ", r, i);
    if (node < 0) {
        vfy_str_printf(msg, "is never written; it must hold ");
        for (int e = 0; e < ne && e < MAX_LISTED; e++)
            vfy_str_printf(msg, "%sin@%d[%d]", e ? " + " : "", er[e], ec[e]);
        if (ne > MAX_LISTED)
            vfy_str_printf(msg, " + ... (%d contributions)", ne);
        return;
    }
    Leaf *leaves;
    int nl = node_leaves(&s->nodes, node, &leaves);
    vfy_str_printf(msg, "holds ");
    if (nl <= MAX_LISTED) {
        for (int l = 0; l < nl; l++) {
            if (l)
                vfy_str_printf(msg, " + ");
            leaf_text(sh, &s->nodes.v[leaves[l].node], msg);
            if (leaves[l].mult == 2)
                vfy_str_printf(msg, " twice");
            else if (leaves[l].mult > 2)
                vfy_str_printf(msg, " %lld times", (long long)leaves[l].mult);
        }
    } else {
        vfy_str_printf(msg, "%lld contributions", (long long)s->nodes.v[node].count);
    }
    /* Sort the problems out: missing, double-counted, foreign, uninitialized. */
    char **missing = vfy_xcalloc((size_t)ne + 1, sizeof *missing);
    char **dup = vfy_xcalloc((size_t)nl + 1, sizeof *dup), **extra = vfy_xcalloc((size_t)nl + 1, sizeof *extra);
    char **garbage = vfy_xcalloc((size_t)nl + 1, sizeof *garbage);
    int nmiss = 0, ndup = 0, nextra = 0, ngarb = 0;
    for (int e = 0; e < ne; e++) {
        int found = 0;
        for (int l = 0; l < nl && !found; l++) {
            const Node *x = &s->nodes.v[leaves[l].node];
            found = x->kind == NODE_IN && x->a == er[e] && x->b == ec[e];
        }
        if (!found && nmiss < 8) {
            Str t = {0};
            vfy_str_printf(&t, "in@%d[%d]", er[e], ec[e]);
            missing[nmiss++] = t.s;
        } else if (!found) {
            nmiss++;
        }
    }
    for (int l = 0; l < nl; l++) {
        const Node *x = &s->nodes.v[leaves[l].node];
        Str t = {0};
        if (x->kind == NODE_GARBAGE) {
            vfy_str_printf(&t, "%s@%d[%d]", sh->p->buf_name[x->b], x->a, x->c);
            garbage[ngarb++] = t.s;
            continue;
        }
        int want = 0;
        for (int e = 0; e < ne && !want; e++)
            want = x->a == er[e] && x->b == ec[e];
        vfy_str_printf(&t, "in@%d[%d]", x->a, x->b);
        if (!want)
            extra[nextra++] = t.s;
        else if (leaves[l].mult > 1)
            dup[ndup++] = t.s;
        else
            free(t.s);
    }
    if (nmiss) {
        vfy_str_printf(msg, "; missing ");
        list_text(msg, missing, nmiss, nmiss > 8 ? 8 : nmiss);
    }
    if (ndup) {
        vfy_str_printf(msg, "; ");
        list_text(msg, dup, ndup, 4);
        vfy_str_printf(msg, ndup == 1 ? " is double-counted" : " are double-counted");
    }
    if (nextra) {
        vfy_str_printf(msg, "; ");
        list_text(msg, extra, nextra, 4);
        vfy_str_printf(msg, nextra == 1 ? " does not belong there" : " do not belong there");
    }
    if (ngarb) {
        vfy_str_printf(msg, "; ");
        list_text(msg, garbage, ngarb, 4);
        vfy_str_printf(msg, ngarb == 1 ? " is read before anything writes it"
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
static int check_postcondition(const Sim *s, int *checked)
{
    const Shape *sh = s->sh;
    const Program *p = sh->p;
    int nout = p->buf_chunks[BUF_OUT];
    int *er = vfy_xcalloc((size_t)sh->n, sizeof *er), *ec = vfy_xcalloc((size_t)sh->n, sizeof *ec);
    typedef struct {
        int r, i, node, block, step, count;
    } Group;
    Group groups[MAX_POST_REPORTS];
    int ngroups = 0, nbad = 0, hidden = 0;
    int nin = p->buf_chunks[BUF_IN];
    uint64_t *colhash = vfy_xcalloc((size_t)nin, sizeof *colhash);
    char *colset = vfy_xcalloc((size_t)nin, 1);
    *checked = 0;
    for (int r = 0; r < sh->n; r++)
        for (int i = 0; i < nout; i++) {
            int ne;
            if (!expected(sh, r, i, er, ec, &ne))
                continue;
            ++*checked;
            int cell = sim_cell(s, r, BUF_OUT, i, 0);
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
                SrcLoc a = groups[g].block >= 0 ? step_at(s, groups[g].block, groups[g].step)->loc : p->name_loc;
                SrcLoc b = wb >= 0 ? step_at(s, wb, ws)->loc : p->name_loc;
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
        expected(sh, gr->r, gr->i, er, ec, &ne);
        Str msg = {0};
        explain_cell(s, gr->r, gr->i, gr->node, er, ec, ne, &msg);
        if (gr->block >= 0) {
            const Block *bl = &p->blocks[gr->block];
            char w[48];
            vfy_str_printf(&msg, " (written last here, on %s)", vfy_where_text(sh, bl->rank, bl->tb, w, sizeof w));
            if (gr->count > 1)
                vfy_str_printf(&msg, "; this statement leaves %d more out chunk%s wrong", gr->count - 1,
                               gr->count == 2 ? "" : "s");
            vfy_error(s->rep, step_at(s, gr->block, gr->step)->loc, "%s", vfy_str_get(&msg));
        } else {
            if (gr->count > 1)
                vfy_str_printf(&msg, "; %d more out chunk%s never written", gr->count - 1,
                               gr->count == 2 ? " is" : "s are");
            vfy_error(s->rep, p->name_loc, "%s", vfy_str_get(&msg));
        }
        free(msg.s);
    }
    if (hidden)
        vfy_note(s->rep, (SrcLoc){0, 0, 0}, "%d more wrong out chunk%s, written by other statements, not shown",
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
static int check_deterministic(const Sim *s, Str *detail)
{
    const Shape *sh = s->sh;
    if (sh->p->coll != COLL_ALLREDUCE)
        return 1;
    for (int i = 0; i < sh->p->buf_chunks[BUF_OUT]; i++) {
        int n0 = s->content[sim_cell(s, 0, BUF_OUT, i, 0)];
        for (int r = 1; r < sh->n; r++) {
            int nr = s->content[sim_cell(s, r, BUF_OUT, i, 0)];
            if (nr == n0 || (nr >= 0 && n0 >= 0 && s->nodes.v[nr].shape == s->nodes.v[n0].shape))
                continue;
            if (detail && n0 >= 0 && nr >= 0) {
                vfy_str_printf(detail, "out@0[%d] = ", i);
                node_tree_text(sh, &s->nodes, n0, detail, 0);
                vfy_str_printf(detail, " but out@%d[%d] = ", r, i);
                node_tree_text(sh, &s->nodes, nr, detail, 0);
            }
            return 0;
        }
    }
    return 1;
}

/* ---- the whole proof ---- */

/* What the proof found, in detail, for --explain. */
typedef struct {
    SyncCounts sync;
    long pairs, cross_pairs, edges;
    long port_puts;       /* port-channel puts checked against vfy_check_port_puts' rules */
    int out_checked;
    Str det_detail, pipe_detail;
} Facts;

static int inplace_applicable(Collective c)
{
    return c != COLL_ALLTOALL;
}

static int analyze(Arena *a, const Program *p, Proof *proof, Reporter *rep, Facts *f)
{
    memset(proof, 0, sizeof *proof);
    Shape sh;
    shape_init(&sh, p);
    int errors0 = rep->nerrors;

    check_sem_counts(&sh, rep, &f->sync);
    check_barrier_counts(&sh, rep);
    vfy_check_instances(&sh, rep);
    int counts_bad = rep->nerrors > errors0;
    /* Before the simulation, which places every put at its statement: for port puts,
     * completed later by an asynchronous proxy, that is exact only under these rules. */
    int port_errors0 = rep->nerrors;
    f->port_puts = vfy_check_port_puts(&sh, 0, rep);
    int port_bad = rep->nerrors > port_errors0;

    Sim s = {0};
    double work = (double)(f->sync.nwaits + f->sync.nbarriers) * (sh.nb + sh.n);
    if (work > MAX_CLOCK_WORK || sim_init(&s, &sh, (SimMode){.ncalls = 1, .contents = 1}, rep) != 0) {
        vfy_error(rep, p->name_loc, "'%s' is too large to verify for N = %d (%d thread blocks, %d chunks per rank)",
                  p->name, p->nranks, sh.nb, sh.rank_cells);
        sim_fini(&s);
        shape_fini(&sh);
        return -1;
    }
    sim_run(&s);
    f->pairs = s.pairs;
    f->edges = s.edges;
    if (s.races_hidden)
        vfy_note(rep, (SrcLoc){0, 0, 0}, "%d more racing statement pair%s not shown", s.races_hidden,
                 s.races_hidden == 1 ? "" : "s");
    if (s.stuck)
        report_deadlocks(&s, counts_bad);
    int races = s.nraces + s.races_hidden;
    proof->race_free = !races && !s.stuck && !port_bad;
    proof->deadlock_free = !s.stuck && !counts_bad;
    if (races || s.stuck || s.nlayout) {
        vfy_note(rep, (SrcLoc){0, 0, 0}, "the postcondition was not checked: %s",
                 s.stuck ? "the run does not complete" : races ? "with races the result depends on timing"
                 : "chunks were stored at the wrong position");
    } else {
        int bad = check_postcondition(&s, &f->out_checked);
        proof->postcondition = !bad && !s.ninput;
        proof->deterministic = check_deterministic(&s, &f->det_detail);
    }
    sim_fini(&s);
    proof->pipeline_safe = vfy_check_pipeline_safe(&sh, &f->pipe_detail);

    /* Two back-to-back calls, only worth it when one call is sound. */
    int main_ok = rep->nerrors == errors0;
    if (main_ok) {
        Sim s2;
        /* LL alternates scratch halves, so calls 1 and 3 are the ones that share. */
        int ncalls = p->protocol == PROTO_LL ? 3 : 2;
        if (sim_init(&s2, &sh, (SimMode){.ncalls = ncalls, .cross_only = 1}, rep) == 0) {
            sim_run(&s2);
            f->cross_pairs = s2.pairs;
            if (s2.races_hidden)
                vfy_note(rep, (SrcLoc){0, 0, 0}, "%d more cross-call racing statement pair%s not shown",
                         s2.races_hidden, s2.races_hidden == 1 ? "" : "s");
            proof->cross_call_safe = !s2.nraces && !s2.races_hidden && !s2.stuck;
        }
        sim_fini(&s2);
    }

    /* In place: proved again quietly, with the buffers aliased; never fails the proof. */
    proof->inplace_applicable = inplace_applicable(p->coll);
    if (!proof->inplace_applicable) {
        proof->inplace_reason = arena_printf(a, "%s has no in-place form that the verifier models",
                                             coll_name(p->coll));
    } else if (rep->nerrors != errors0) {
        proof->inplace_reason = arena_printf(a, "not checked: the out-of-place proof failed");
    } else {
        Reporter quiet = {0};
        Sim s3 = {0};
        /* Aliased, a port put's source may be a chunk its block writes before the flush. */
        vfy_check_port_puts(&sh, 1, &quiet);
        int ran = quiet.nerrors > 0;
        if (!ran && sim_init(&s3, &sh, (SimMode){.ncalls = 1, .inplace = 1, .contents = 1}, &quiet) == 0) {
            ran = 1;
            sim_run(&s3);
            if (s3.stuck)
                vfy_error(&quiet, p->name_loc, "the run does not complete");
            else if (!s3.nraces && !s3.nlayout) {
                int checked;
                check_postcondition(&s3, &checked);
            }
        }
        if (ran) {
            proof->inplace_ok = quiet.nerrors == 0;
            if (!proof->inplace_ok)
                proof->inplace_reason = arena_printf(a, "with in and out as one buffer, %s", quiet.first);
        }
        sim_fini(&s3);
    }
    shape_fini(&sh);
    return rep->nerrors == errors0 ? 0 : -1;
}

int verify_program(Arena *a, const Program *p, Proof *proof, Diag *d)
{
    Reporter rep = {.d = d};
    Facts f = {0};
    int rc = analyze(a, p, proof, &rep, &f);
    free(f.det_detail.s);
    free(f.pipe_detail.s);
    return rc;
}

static const char *post_text(const Program *p)
{
    switch (p->coll) {
    case COLL_ALLREDUCE: return "out@r[c] = in@0[c] + ... + in@N-1[c], each contribution once, on every rank";
    case COLL_ALLGATHER: return "out@r[j*K+c] = in@j[c] on every rank";
    case COLL_REDUCE_SCATTER: return "out@r[c] = in@0[r*K+c] + ... + in@N-1[r*K+c], each contribution once";
    case COLL_ALLTOALL: return "out@r[j*K+c] = in@j[r*K+c] on every rank";
    case COLL_BROADCAST: return "out@r[c] = in@root[c] on every rank";
    case COLL_REDUCE: return "out@root[c] = in@0[c] + ... + in@N-1[c], each contribution once";
    }
    return "?";
}

void verify_explain(FILE *out, const Program *p, const Proof *proof)
{
    /* The proof is re-derived quietly for its numbers; the verdicts printed are the
     * ones verify_program recorded. */
    Arena *a = arena_new();
    Reporter quiet = {0};
    Facts f = {0};
    Proof again;
    analyze(a, p, &again, &quiet, &f);
    const char *yes = "proved", *no = "NOT proved";
    fprintf(out, "%s: %s for N = %d", p->name, coll_name(p->coll), p->nranks);
    if (p->coll == COLL_BROADCAST || p->coll == COLL_REDUCE)
        fprintf(out, ", root %d", p->root);
    int maxtb = 0;
    for (int r = 0; r < p->nranks; r++)
        maxtb = p->ntb[r] > maxtb ? p->ntb[r] : maxtb;
    fprintf(out, " (K = %d, protocol %s, %d thread block%s per rank)\n", p->chunks, proto_name(p->protocol), maxtb,
            maxtb == 1 ? "" : "s");
    fprintf(out, "  postcondition:    %s: %s", proof->postcondition ? yes : no, post_text(p));
    if (proof->postcondition)
        fprintf(out, " (%d out chunks checked)", f.out_checked);
    fprintf(out, "; in/out chunks only receive content of their own position\n");
    fprintf(out, "  no data race:     %s: %ld access pairs from different thread blocks checked against "
            "happens-before (%ld signal->wait and barrier edges)", proof->race_free ? yes : no, f.pairs, f.edges);
    if (f.port_puts)
        fprintf(out, "; %ld port-channel puts, each flushed before its block's next signal, wait or barrier (and "
                "before the block ends), its chunks untouched by the block until then", f.port_puts);
    fprintf(out, "\n");
    fprintf(out, "  no deadlock:      %s: %ld signals, each matched by a wait on the same semaphore; %ld barriers; "
            "the simulated run completes\n", proof->deadlock_free ? yes : no, f.sync.nsignals, f.sync.nbarriers);
    fprintf(out, "  across calls:     %s: %s back-to-back calls (each starting on a rank when that rank's previous "
            "call ends; between them the caller reads out and rewrites in) are race-free, %ld access pairs "
            "checked", proof->cross_call_safe ? yes : no, p->protocol == PROTO_LL ? "three" : "two", f.cross_pairs);
    if (p->protocol == PROTO_LL)
        fprintf(out, "; protocol ll double-buffers scratch by call parity, so consecutive calls never share scratch "
                "and calls 1 and 3 are checked instead");
    fprintf(out, "\n");
    if (!proof->inplace_applicable)
        fprintf(out, "  in-place:         not applicable: %s\n", proof->inplace_reason ? proof->inplace_reason : "");
    else if (proof->inplace_ok)
        fprintf(out, "  in-place:         yes: proved again with in and out as one buffer (%s)\n",
                p->coll == COLL_ALLGATHER        ? "in@r = out@r[r*K..r*K+K)"
                : p->coll == COLL_REDUCE_SCATTER ? "out@r = in@r[r*K..r*K+K)"
                                                 : "in@r = out@r");
    else
        fprintf(out, "  in-place:         no: %s\n", proof->inplace_reason ? proof->inplace_reason : "?");
    if (proof->deterministic)
        fprintf(out, "  deterministic:    yes: every out element is reduced in the same order on every rank\n");
    else
        fprintf(out, "  deterministic:    no: %s\n", f.det_detail.n ? f.det_detail.s : "reduction orders differ");
    if (proof->pipeline_safe)
        fprintf(out, "  pipeline-safe:    yes: within each thread block, accesses to a buffer use identical or "
                "disjoint chunk ranges\n");
    else
        fprintf(out, "  pipeline-safe:    no: %s (slices run one at a time)\n",
                f.pipe_detail.n ? f.pipe_detail.s : "overlapping chunk ranges");
    free(f.det_detail.s);
    free(f.pipe_detail.s);
    arena_free(a);
}
