/* verify_simulate.c: the simulated run, with happens-before and races.
 *
 * Takes the Shape of an expanded Program and a SimMode (how many back-to-back calls,
 * in place or not, contents tracked or not); gives a Sim that cclc_vfy_sim_run executes, one
 * thread block at a time, until every block is done or none can move (s->stuck). On
 * the way it reports every data race (two accesses to a chunk, one a write, unordered
 * by program order, signal->wait pairs and barriers, decided with vector clocks), and,
 * with contents tracked, writes into the input and chunks stored at the wrong position;
 * it also models each rank's caller, who reads out after the call and writes the next
 * call's in. Assumes the counts were checked (cclc_vfy_check_sem_counts: a signal to a rank
 * without that thread block is skipped here) and that port puts may be placed at their
 * statement (verify_port.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "verify.h"

int cclc_vfy_sim_init(Sim *s, Shape *sh, SimMode m, Reporter *rep)
{
    const Program *p = sh->p;
    memset(s, 0, sizeof *s);
    s->sh = sh;
    s->m = m;
    s->rep = rep;

    int64_t cells = (int64_t)sh->n * sh->rank_cells;
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
        s->vc = cclc_vfy_xcalloc(nvc, sizeof *s->vc);
    }
    sh->vc_spare = NULL;
    for (int b = 0; b < nt; b++)
        s->vc[b * nt + b] = 1;
    s->snap = cclc_vfy_xcalloc((size_t)nb, sizeof *s->snap);
    s->pending = cclc_vfy_xcalloc((size_t)nb, 1);
    s->pc = cclc_vfy_xcalloc((size_t)nb, sizeof *s->pc);
    s->call = cclc_vfy_xcalloc((size_t)nb, sizeof *s->call);
    s->state = cclc_vfy_xcalloc((size_t)nb, sizeof *s->state);
    s->boundary = cclc_vfy_xcalloc((size_t)nb, 1);
    s->entered = cclc_vfy_xcalloc((size_t)sh->n, 1);
    s->sem = cclc_vfy_xcalloc((size_t)nb * (size_t)p->ntags * (size_t)sh->n, sizeof *s->sem);
    s->log = cclc_vfy_xcalloc((size_t)s->ncells, sizeof *s->log);
    if (m.contents) {
        s->content = cclc_vfy_xcalloc((size_t)s->ncells, sizeof *s->content);
        s->wblock = cclc_vfy_xcalloc((size_t)s->ncells, sizeof *s->wblock);
        s->wstep = cclc_vfy_xcalloc((size_t)s->ncells, sizeof *s->wstep);
        for (int i = 0; i < s->ncells; i++)
            s->content[i] = s->wblock[i] = s->wstep[i] = -1;
        s->nodes.k = sh->k;
        s->nodes.in_chunks = p->buf_chunks[BUF_IN];
        /* Inputs: in@r[c] holds the contribution (r, c); in place, that is the cell
         * in is aliased to. */
        for (int r = 0; r < sh->n; r++)
            for (int c = 0; c < p->buf_chunks[BUF_IN]; c++)
                s->content[cclc_vfy_sim_cell(s, r, BUF_IN, c)] = cclc_vfy_node_new(&s->nodes, NODE_IN, r, c, 0);
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

void cclc_vfy_sim_fini(Sim *s)
{
    for (int i = 0; i < s->layout_kept; i++)
        free(s->layout_msg[i]);
    s->layout_kept = 0;
    if (!s->sh)
        return;
    int nb = s->sh->nb;
    if (s->sem)
        for (int i = 0; i < nb * s->sh->p->ntags * s->sh->n; i++)
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
    free(s->entered);
    free(s->sem);
    free(s->log);
    free(s->content);
    free(s->wblock);
    free(s->wstep);
    cclc_vfy_nodes_fini(&s->nodes);
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

/* The rank of an access's thread (a block, or the caller of a rank). */
static int access_rank(const Sim *s, Access x)
{
    return x.block < s->sh->nb ? s->sh->p->blocks[x.block].rank : x.block - s->sh->nb;
}

static SrcLoc access_loc(const Sim *s, Access x)
{
    return x.step >= 0 ? cclc_vfy_step_at(s, x.block, x.step)->loc : s->sh->p->name_loc;
}

/* "'put' at line 9 on rank 1 (in call 2) writes it", or the caller's part. */
static void access_text(const Sim *s, Access x, int is_write, int cross, Str *out)
{
    const Shape *sh = s->sh;
    if (x.step < 0) {
        if (is_write)
            cclc_vfy_str_printf(out, "the caller on rank %d writes the next call's input into it", access_rank(s, x));
        else if (cross)
            cclc_vfy_str_printf(out, "the caller on rank %d reads call %d's result in it", access_rank(s, x), x.call + 1);
        else
            cclc_vfy_str_printf(out, "the caller on rank %d reads the result after the call", access_rank(s, x));
        return;
    }
    const Block *bl = &sh->p->blocks[x.block];
    const Step *st = cclc_vfy_step_at(s, x.block, x.step);
    char w[48];
    cclc_vfy_str_printf(out, "'%s' at line %d on %s", cclc_step_name(st->kind), st->loc.line,
                   cclc_vfy_where_text(sh, bl->rank, bl->tb, w, sizeof w));
    if (cross)
        cclc_vfy_str_printf(out, " in call %d", x.call + 1);
    cclc_vfy_str_printf(out, " %s it", is_write ? "writes" : "reads");
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
        if ((cclc_vfy_same_loc(x, cl) && cclc_vfy_same_loc(y, pl)) || (cclc_vfy_same_loc(x, pl) && cclc_vfy_same_loc(y, cl)))
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
    cclc_vfy_cell_text(sh, rank, buf, chunk, cell, sizeof cell);
    const char *kind = buf >= BUF_SCRATCH0 ? "scratch " : "";
    int cross = prev.call != cur.call;
    Str msg = {0};
    cclc_vfy_str_printf(&msg, "%s on %s%s: ", cross ? "cross-call race" : "data race", kind, cell);
    access_text(s, prev, prev_w, cross, &msg);
    cclc_vfy_str_printf(&msg, " while ");
    access_text(s, cur, cur_w, cross, &msg);
    int pr = access_rank(s, prev), cr = access_rank(s, cur);
    if (!cross && cur.step < 0) {
        cclc_vfy_str_printf(&msg, "; nothing orders them (rank %d's call may end before the data arrives: make it wait for "
                       "rank %d after the write)", cr, pr);
    } else if (!cross) {
        cclc_vfy_str_printf(&msg, "; nothing orders them (add %s)", pr == cr ? "a barrier or signal/wait" : "signal/wait");
    } else {
        /* Across calls only a caller's access can race (every rank enters a call once
         * all of them ended the previous one: sim_entry): the caller replaces an input
         * (or, in place, a result) that a peer still reads or writes in this call. */
        int peer = prev.step < 0 ? cr : pr, owner = prev.step < 0 ? pr : cr;
        cclc_vfy_str_printf(&msg, "; nothing orders them (rank %d's call may end while rank %d still %s its buffer: "
                       "make rank %d wait for rank %d before it ends)", owner, peer,
                       (prev.step < 0 ? cur_w : prev_w) ? "writes" : "reads", owner, peer);
    }
    SrcLoc at = cur.step >= 0 ? cl : pl;
    cclc_vfy_error(s->rep, at, "%s", cclc_vfy_str_get(&msg));
    free(msg.s);
    Access other = cur.step >= 0 ? prev : cur;
    if (other.step >= 0 && !cclc_vfy_same_loc(pl, cl)) {
        char w[48];
        const Block *ob = &sh->p->blocks[other.block];
        cclc_vfy_note(s->rep, access_loc(s, other), "the other access: '%s' on %s",
                 cclc_step_name(cclc_vfy_step_at(s, other.block, other.step)->kind),
                 cclc_vfy_where_text(sh, ob->rank, ob->tb, w, sizeof w));
    }
}

/* Checks one access against the chunk's history, then records it. */
static void sim_access(Sim *s, Access cur, int is_write, int rank, int buf, int chunk)
{
    int cell = cclc_vfy_sim_cell(s, rank, buf, chunk);
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
        L->r = cclc_vfy_xrealloc(L->r, sizeof *L->r * (size_t)L->cap);
    }
    L->r[L->nr++] = cur;
}

/* The content of a cell: its node, or its initial garbage (made on first read). */
static int sim_read_content(Sim *s, int cell)
{
    if (s->content[cell] < 0) {
        int per_rank = s->sh->rank_cells;
        int rank = cell / per_rank, off = cell % per_rank, buf = 0;
        while (buf + 1 < s->sh->p->nbufs && s->sh->buf_base[buf + 1] <= off)
            buf++;
        s->content[cell] = cclc_vfy_node_new(&s->nodes, NODE_GARBAGE, rank, buf, off - s->sh->buf_base[buf]);
    }
    return s->content[cell];
}

/* A v-collective's in/out chunk may only receive its own segment's data (the in chunk
 * cclc_coll_home names): each segment has its own run-time size and displacement, so
 * another segment's data would not fit, or land elsewhere. */
static void check_segment(Sim *s, int b, const Step *st, int rank, int chunk, int node)
{
    const Shape *sh = s->sh;
    const Program *p = sh->p;
    const Node *x = &s->nodes.v[node];
    int want = cclc_coll_home(p->coll, sh->n, sh->k, p->root, st->dst.buf, rank, chunk);
    if (x->home == -1 || x->home == want)
        return;
    if (cclc_vfy_seen_before(&s->layout_seen, st->loc))
        return;
    s->nlayout++;
    if (s->layout_kept == MAX_STEP_REPORTS)
        return;
    char cell[96], w[48];
    const Block *bl = &p->blocks[b];
    int inch = p->buf_chunks[BUF_IN];
    Str msg = {0};
    cclc_vfy_str_printf(&msg, "segment violation: '%s' on %s stores ", cclc_step_name(st->kind),
                        cclc_vfy_where_text(sh, bl->rank, bl->tb, w, sizeof w));
    if (x->home == -2)
        cclc_vfy_str_printf(&msg, "data of several segments");
    else
        cclc_vfy_str_printf(&msg, "in@%d[%d] (segment %d of rank %d)", x->home / inch, x->home % inch,
                            x->home % inch / sh->k, x->home / inch);
    cclc_vfy_str_printf(&msg, " into %s, the place of in@%d[%d] (segment %d of rank %d); in an %s every in/out "
                        "chunk may only receive its own segment's data, because each segment has its own run-time "
                        "size and place", cclc_vfy_cell_text(sh, rank, st->dst.buf, chunk, cell, sizeof cell),
                        want / inch, want % inch, want % inch / sh->k, want / inch, cclc_coll_name(p->coll));
    s->layout_loc[s->layout_kept] = st->loc;
    s->layout_msg[s->layout_kept++] = msg.s;
}

/* In/out chunk i may only receive content of position i % K: shorter tail chunks
 * would otherwise be read or written past their length (docs/internals.md). */
static void check_layout(Sim *s, int b, const Step *st, int rank, int chunk, int node)
{
    const Shape *sh = s->sh;
    const Node *x = &s->nodes.v[node];
    if (cclc_coll_is_v(sh->p->coll)) {
        check_segment(s, b, st, rank, chunk, node);
        return;
    }
    int want = chunk % sh->k;
    if (x->pos == -1 || x->pos == want)
        return;
    if (cclc_vfy_seen_before(&s->layout_seen, st->loc))
        return;
    s->nlayout++;
    if (s->nlayout > MAX_STEP_REPORTS)
        return;
    Leaf *leaves;
    int nl = cclc_vfy_node_leaves(&s->nodes, node, &leaves);
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
    if (s->layout_kept == MAX_STEP_REPORTS)
        return;
    Str msg = {0};
    cclc_vfy_str_printf(&msg, "layout violation: '%s' on %s stores in@%d[%d] (position %d) into %s (position %d); "
                   "an in/out chunk i may only receive content of position i %% K (K = %d), because chunk lengths "
                   "depend on the position", cclc_step_name(st->kind), cclc_vfy_where_text(sh, bl->rank, bl->tb, w, sizeof w),
                   bad->a, bad->b, bad->b % sh->k, cclc_vfy_cell_text(sh, rank, st->dst.buf, chunk, cell, sizeof cell),
                   want, sh->k);
    s->layout_loc[s->layout_kept] = st->loc;
    s->layout_msg[s->layout_kept++] = msg.s;
}

void cclc_vfy_sim_report_layout(Sim *s)
{
    if (s->nraces || s->races_hidden)
        return;
    for (int i = 0; i < s->layout_kept; i++)
        cclc_vfy_error(s->rep, s->layout_loc[i], "%s", s->layout_msg[i] ? s->layout_msg[i] : "layout violation");
}

static void sim_data(Sim *s, int b, int i)
{
    const Step *st = cclc_vfy_step_at(s, b, i);
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
    /* A copy onto itself (in place, an all-gather's `copy out[r] <- in[0]`) stores the
     * values already there: a read, not a write, as for the port-put rules
     * (verify_port.c). */
    if (st->kind == STEP_COPY && st->nsrc == 1 && st->src[0].count == count &&
        cclc_vfy_sim_cell(s, st->dst.rank, st->dst.buf, st->dst.chunk) ==
            cclc_vfy_sim_cell(s, st->src[0].rank, st->src[0].buf, st->src[0].chunk))
        return;
    for (int j = 0; j < count; j++)
        sim_access(s, cur, 1, st->dst.rank, st->dst.buf, st->dst.chunk + j);
    if (!s->m.contents)
        return;
    if (st->dst.buf == BUF_IN && !s->m.inplace && !cclc_vfy_seen_before(&s->input_seen, st->loc) &&
        ++s->ninput <= MAX_STEP_REPORTS) {
        char cell[96], w[48];
        cclc_vfy_error(s->rep, st->loc, "'%s' on %s writes to the input buffer (%s); inputs are read-only, so stage "
                  "data in a scratch buffer", cclc_step_name(st->kind), cclc_vfy_where_text(s->sh, bl->rank, bl->tb, w, sizeof w),
                  cclc_vfy_cell_text(s->sh, st->dst.rank, BUF_IN, st->dst.chunk, cell, sizeof cell));
    }
    /* Every chunk's new content is computed before any is stored: the chunks of one op
     * move in parallel. */
    int stackbuf[16];
    int *val = count <= 16 ? stackbuf : cclc_vfy_xcalloc((size_t)count, sizeof *val);
    for (int j = 0; j < count; j++) {
        int acc = -1;
        for (int o = 0; o < st->nsrc; o++) {
            if (j >= st->src[o].count)
                continue;
            int cell = cclc_vfy_sim_cell(s, st->src[o].rank, st->src[o].buf, st->src[o].chunk + j);
            int x = sim_read_content(s, cell);
            acc = acc < 0 ? x : cclc_vfy_node_new(&s->nodes, NODE_SUM, acc, x, 0);
        }
        val[j] = acc;
        if (s->record && s->record[b] && s->record[b][i] && !s->m.inplace)
            s->record[b][i][j] = acc < 0 ? -1 : cclc_coll_is_v(s->sh->p->coll) ? s->nodes.v[acc].home
                                                                               : s->nodes.v[acc].pos;
    }
    for (int j = 0; j < count; j++) {
        if (val[j] < 0)
            continue;
        int cell = cclc_vfy_sim_cell(s, st->dst.rank, st->dst.buf, st->dst.chunk + j);
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
    int wb = cclc_vfy_block_of(sh, st->peer, bl->tb);
    if (wb < 0)
        return; /* reported by cclc_vfy_check_sem_counts */
    if (!s->snap[b]) {
        Snap *sn = s->spare;
        if (sn)
            s->spare = sn->next;
        else
            sn = cclc_vfy_xcalloc(1, sizeof *sn + sizeof(int) * (size_t)s->nt);
        memcpy(sn->v, &s->vc[b * s->nt], sizeof(int) * (size_t)s->nt);
        sn->refs = 1;
        s->snap[b] = sn;
    }
    QItem *q = s->spare_items;
    if (q)
        s->spare_items = q->next;
    else
        q = cclc_vfy_xcalloc(1, sizeof *q);
    q->next = NULL;
    q->snap = s->snap[b];
    q->snap->refs++;
    Sem *sem = &s->sem[(wb * sh->p->ntags + st->tag) * sh->n + bl->rank];
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
    Sem *sem = &s->sem[(b * sh->p->ntags + st->tag) * sh->n + st->peer];
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
    int *er = cclc_vfy_xcalloc((size_t)sh->n, sizeof *er), *ec = cclc_vfy_xcalloc((size_t)sh->n, sizeof *ec), ne;
    for (int i = 0; i < sh->p->buf_chunks[BUF_OUT]; i++)
        if (cclc_vfy_expected(sh, r, i, er, ec, &ne))
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
    int *join = cclc_vfy_xcalloc((size_t)nt, sizeof *join);
    for (int r = 0; r < sh->n; r++) {
        memset(join, 0, sizeof *join * (size_t)nt);
        for (int t = 0; t < sh->maxtb; t++) {
            int b = cclc_vfy_block_of(sh, r, t);
            if (b >= 0)
                clock_join(join, &s->vc[b * nt], nt);
        }
        sim_caller(s, r, s->m.ncalls - 1, join);
    }
    free(join);
}

/* Some block of the rank, or -1 when it has none. */
static int first_block(const Shape *sh, int rank)
{
    for (int t = 0; t < sh->maxtb; t++)
        if (cclc_vfy_block_of(sh, rank, t) >= 0)
            return cclc_vfy_block_of(sh, rank, t);
    return -1;
}

/* Releases rank r's blocks when all of them stand at a barrier. At the end of a call
 * (every block at its boundary) the rank's caller acts instead and the rank waits at the
 * next call's entry (sim_entry). */
static int sim_barrier(Sim *s, int r)
{
    const Shape *sh = s->sh;
    int nt = s->nt, any = 0, all_boundary = 1;
    if (s->entered[r])
        return 0;
    for (int t = 0; t < sh->maxtb; t++) {
        int b = cclc_vfy_block_of(sh, r, t);
        if (b >= 0 && s->state[b] != AT_BARRIER)
            return 0;
        if (b >= 0)
            any = 1, all_boundary &= s->boundary[b];
    }
    if (!any)
        return 0;
    int *join = cclc_vfy_xcalloc((size_t)nt, sizeof *join);
    for (int t = 0; t < sh->maxtb; t++) {
        int b = cclc_vfy_block_of(sh, r, t);
        if (b >= 0)
            clock_join(join, &s->vc[b * nt], nt);
    }
    if (all_boundary) {
        sim_caller(s, r, s->call[first_block(sh, r)], join);
        s->entered[r] = 1;
        free(join);
        return 1;
    }
    for (int t = 0; t < sh->maxtb; t++) {
        int b = cclc_vfy_block_of(sh, r, t);
        if (b < 0)
            continue;
        memcpy(&s->vc[b * nt], join, sizeof *join * (size_t)nt);
        s->vc[b * nt + b]++;
        s->pending[b] = 0;
        clock_changed(s, b);
        s->pc[b]++;
        s->state[b] = RUN;
        s->edges++;
    }
    free(join);
    return 1;
}

/* The entry of the next call: the runtime's identity check lets no block of a call
 * touch anything before every rank has started that call (docs/language.md, "Across
 * calls"), and a rank starts it once its previous call ended and its caller acted. So
 * once every rank with blocks waits at the entry, every block starts the call knowing
 * all the ranks' callers' clocks, and through them the whole previous call. */
static int sim_entry(Sim *s)
{
    const Shape *sh = s->sh;
    int nt = s->nt;
    for (int r = 0; r < sh->n; r++)
        if (!s->entered[r] && first_block(sh, r) >= 0)
            return 0;
    int *join = cclc_vfy_xcalloc((size_t)nt, sizeof *join), any = 0;
    for (int r = 0; r < sh->n; r++)
        if (s->entered[r])
            clock_join(join, &s->vc[(sh->nb + r) * nt], nt), any = 1;
    for (int b = 0; any && b < sh->nb; b++) {
        memcpy(&s->vc[b * nt], join, sizeof *join * (size_t)nt);
        s->vc[b * nt + b]++;
        s->pending[b] = 0;
        clock_changed(s, b);
        s->call[b]++;
        s->pc[b] = 0;
        s->boundary[b] = 0;
        s->state[b] = RUN;
        s->edges++;
    }
    memset(s->entered, 0, (size_t)sh->n);
    free(join);
    return any;
}

/* Runs every block until all are done or none can move (a deadlock). */
void cclc_vfy_sim_run(Sim *s)
{
    for (;;) {
        int progress = 0;
        for (int b = 0; b < s->sh->nb; b++)
            progress |= sim_block(s, b);
        for (int r = 0; r < s->sh->n; r++)
            progress |= sim_barrier(s, r);
        progress |= sim_entry(s);
        if (!progress)
            break;
    }
    for (int b = 0; b < s->sh->nb; b++)
        if (s->state[b] != DONE)
            s->stuck = 1;
    if (!s->stuck)
        sim_end(s);
}
