/* verify_slices.c: transfers cut into parts, by instances or by pipeline slices.
 *
 * Takes the Shape of an expanded Program and what the contents run recorded of each data
 * step; gives cclc_vfy_size_by_content, which picks the scratch-only transfers of a
 * fixed-size collective that can be sized by the chunk position of their data
 * (Proof.content), cclc_vfy_check_instances, which reports each transfer that instances
 * would split at other points than the transfer that stored its data (an error), and
 * cclc_vfy_check_pipeline_safe, which records, without failing the proof, whether a
 * block's slices may interleave (schedule.c). Assumes what expand.c establishes: every
 * Ref is in range. */
#include <stdlib.h>

#include "verify.h"

typedef struct {
    int rank, buf, lo, hi;
} Range;

static int range_cmp(const void *x, const void *y)
{
    const Range *a = x, *b = y;
    if (a->rank != b->rank)
        return a->rank < b->rank ? -1 : 1;
    if (a->buf != b->buf)
        return a->buf < b->buf ? -1 : 1;
    if (a->lo != b->lo)
        return a->lo < b->lo ? -1 : 1;
    return (a->hi > b->hi) - (a->hi < b->hi);
}

/* Whether a data step touches only scratch. Such a transfer has no in/out operand to
 * size it: by default its length is the scratch chunk's, CS, while the transfer that
 * stored its data had the length of an in/out chunk's position, shorter for tail chunks;
 * cut into instances or slices, the two would split the data at different points
 * (docs/internals.md), so one part would read what another part, unordered with it,
 * writes. It is sized instead by the data it moves (PlanOp.content) where that is one
 * position for every transfer that touches its chunks: see content_why. */
static int scratch_only(const Step *st)
{
    if (st->kind > STEP_REDUCE || st->dst.buf < BUF_SCRATCH0)
        return 0;
    for (int o = 0; o < st->nsrc; o++)
        if (st->src[o].buf < BUF_SCRATCH0)
            return 0;
    return 1;
}

/* Positions per scratch cell, for a fixed-size collective: every data step of every
 * block has, per chunk j, a position: that of its in/out operands' chunk j (all one
 * position in a correct program), or, for a scratch-only step, that of the data the
 * run recorded it moving (raw[b][i][j]: -1 none, -2 mixed). A scratch cell takes the
 * position of the steps that touch it while they agree, else -2; line and other
 * remember the first step that touched it and the first that disagreed. */
typedef struct {
    int *pos, *line, *other;
    char *scr;                       /* touched by a scratch-only step (content_why's) */
} Cells;

static int step_pos(const Shape *sh, const Step *st, int ***raw, int b, int i, int j)
{
    if (scratch_only(st))
        return raw && raw[b] && raw[b][i] ? raw[b][i][j] : -2;
    int pos = -1;
    const Ref *ops[1 + 64];
    int nops = 0;
    ops[nops++] = &st->dst;
    for (int o = 0; o < st->nsrc && nops < 65; o++)
        ops[nops++] = &st->src[o];
    for (int o = 0; o < nops; o++) {
        if (ops[o]->buf >= BUF_SCRATCH0 || j >= ops[o]->count)
            continue;
        int c = (ops[o]->chunk + j) % sh->k;
        pos = pos == -1 || pos == c ? c : -2;
    }
    return pos;
}

static void cells_init(Cells *cl, const Shape *sh, int ***raw)
{
    const Program *p = sh->p;
    size_t n = (size_t)sh->n * (size_t)sh->rank_cells;
    cl->pos = cclc_vfy_xcalloc(n, sizeof *cl->pos);
    cl->line = cclc_vfy_xcalloc(n, sizeof *cl->line);
    cl->other = cclc_vfy_xcalloc(n, sizeof *cl->other);
    cl->scr = cclc_vfy_xcalloc(n, sizeof *cl->scr);
    for (size_t c = 0; c < n; c++)
        cl->pos[c] = -3; /* untouched */
    for (int b = 0; b < sh->nb; b++)
        for (int i = 0; i < p->blocks[b].nsteps; i++) {
            const Step *st = &p->blocks[b].steps[i];
            if (st->kind > STEP_REDUCE)
                continue;
            for (int j = 0; j < st->dst.count; j++) {
                int pos = step_pos(sh, st, raw, b, i, j);
                for (int o = -1; o < st->nsrc; o++) {
                    const Ref *r = o < 0 ? &st->dst : &st->src[o];
                    if (r->buf < BUF_SCRATCH0 || j >= r->count)
                        continue;
                    size_t c = (size_t)r->rank * (size_t)sh->rank_cells + (size_t)(sh->buf_base[r->buf] + r->chunk + j);
                    cl->scr[c] |= (char)scratch_only(st);
                    if (cl->pos[c] == -3) {
                        cl->pos[c] = pos;
                        cl->line[c] = st->loc.line;
                    } else if (cl->pos[c] != pos && cl->pos[c] != -2) {
                        cl->pos[c] = -2;
                        cl->other[c] = st->loc.line;
                    } else if (pos == -2 && !cl->other[c]) {
                        cl->other[c] = st->loc.line;
                    }
                }
            }
        }
}

static void cells_fini(Cells *cl)
{
    free(cl->pos);
    free(cl->line);
    free(cl->other);
    free(cl->scr);
}

/* Whether scratch-only step i of block b cannot be sized by the data it moves; then
 * why, in *why (may be NULL). It can when every chunk j moves data of one position c
 * and every data step that touches the chunk's scratch cells, on any rank, moves data
 * of position c too: then every transfer of those cells has the length of an in/out
 * chunk of position c, and instances and slices cut them all at the same points. */
static int content_why(const Shape *sh, const Cells *cl, int ***raw, int b, int i, Str *why)
{
    const Step *st = &sh->p->blocks[b].steps[i];
    char cell[96];
    if (!raw || !raw[b] || !raw[b][i]) {
        if (why)
            cclc_vfy_str_printf(why, "the data it moves is unknown");
        return 1;
    }
    for (int j = 0; j < st->dst.count; j++) {
        int pos = raw[b][i][j];
        if (pos < 0) {
            if (why)
                cclc_vfy_str_printf(why, "chunk %d of its destination, %s, receives %s", j,
                                    cclc_vfy_cell_text(sh, st->dst.rank, st->dst.buf, st->dst.chunk + j, cell, sizeof cell),
                                    pos == -1 ? "no input's data" : "data of several chunk positions");
            return 1;
        }
        for (int o = -1; o < st->nsrc; o++) {
            const Ref *r = o < 0 ? &st->dst : &st->src[o];
            if (j >= r->count)
                continue;
            size_t c = (size_t)r->rank * (size_t)sh->rank_cells + (size_t)(sh->buf_base[r->buf] + r->chunk + j);
            if (cl->pos[c] == pos)
                continue;
            if (why)
                cclc_vfy_str_printf(why, "%s, which it %s with data of position %d, is also %s (lines %d and %d)",
                                    cclc_vfy_cell_text(sh, r->rank, r->buf, r->chunk + j, cell, sizeof cell),
                                    o < 0 ? "writes" : "reads", pos,
                                    "touched by a transfer of another position or of mixed data",
                                    cl->line[c], cl->other[c] ? cl->other[c] : st->loc.line);
            return 1;
        }
    }
    return 0;
}

/* Whether ordinary step i of block b (one with an in/out operand) touches a scratch cell
 * that holds data of several chunk positions (and no scratch-only step does: content_why
 * speaks of those); then which, in *why (may be NULL). Such a step is sized by its in/out
 * operands' position, another step on the same cell by another's, and positions differ
 * in length (a tail chunk, or small counts): instances and slices would cut the two at
 * different points, and one part could overwrite data another part still reads. With
 * `first_other`, only cells whose first disagreeing step this is, so that each is told
 * once. */
static int mixed_why(const Shape *sh, const Cells *cl, int b, int i, int first_other, Str *why)
{
    const Step *st = &sh->p->blocks[b].steps[i];
    char cell[96];
    if (st->kind > STEP_REDUCE || scratch_only(st)) /* scratch-only steps: content_why */
        return 0;
    for (int o = -1; o < st->nsrc; o++) {
        const Ref *r = o < 0 ? &st->dst : &st->src[o];
        if (r->buf < BUF_SCRATCH0)
            continue;
        for (int j = 0; j < r->count; j++) {
            size_t c = (size_t)r->rank * (size_t)sh->rank_cells + (size_t)(sh->buf_base[r->buf] + r->chunk + j);
            if (cl->pos[c] != -2 || cl->scr[c] || (first_other && cl->other[c] != st->loc.line))
                continue;
            if (why)
                cclc_vfy_str_printf(why, "%s holds data of several chunk positions (lines %d and %d), whose lengths "
                                    "differ for some counts",
                                    cclc_vfy_cell_text(sh, r->rank, r->buf, r->chunk + j, cell, sizeof cell),
                                    cl->line[c], cl->other[c] ? cl->other[c] : st->loc.line);
            return 1;
        }
    }
    return 0;
}

int ***cclc_vfy_size_by_content(Arena *a, const Shape *sh, int ***raw)
{
    const Program *p = sh->p;
    Cells cl;
    cells_init(&cl, sh, raw);
    int ***t = cclc_arena_alloc(a, sizeof *t * (size_t)p->nblocks), kept = 0;
    for (int b = 0; b < p->nblocks; b++) {
        const Block *bl = &p->blocks[b];
        t[b] = cclc_arena_alloc(a, sizeof *t[b] * (size_t)(bl->nsteps ? bl->nsteps : 1));
        for (int i = 0; i < bl->nsteps; i++) {
            t[b][i] = NULL;
            if (scratch_only(&bl->steps[i]) && !content_why(sh, &cl, raw, b, i, NULL)) {
                t[b][i] = raw[b][i];
                kept++;
            }
        }
    }
    cells_fini(&cl);
    return kept ? t : NULL;
}

/* With instances, a scratch-only transfer that cannot be sized by its data is a race
 * between instances. In a v-collective every transfer is sized by the segment of the
 * data it moves (PlanOp.content), scratch-only ones included, so all transfers of one
 * piece of data have one length and split it at the same points. */
void cclc_vfy_check_instances(const Shape *sh, int ***raw, Reporter *rep)
{
    const Program *p = sh->p;
    Seen seen = {0};
    if (p->instances <= 1 || cclc_coll_is_v(p->coll))
        return;
    Cells cl;
    cells_init(&cl, sh, raw);
    for (int b = 0; b < sh->nb; b++)
        for (int i = 0; i < p->blocks[b].nsteps; i++) {
            const Step *st = &p->blocks[b].steps[i];
            Str why = {0};
            char w[48];
            if (scratch_only(st) && content_why(sh, &cl, raw, b, i, &why) && !cclc_vfy_seen_before(&seen, st->loc) &&
                seen.n <= MAX_STEP_REPORTS)
                cclc_vfy_error(rep, st->loc, "with instances %d, '%s' on %s moves data from scratch to scratch only and "
                               "cannot be sized by the chunk position of the data it moves: %s; so its instances may "
                               "split the data differently from the transfers that wrote it and read parts another "
                               "instance writes; give it an in/out operand of the same position, or use instances 1",
                               p->instances, cclc_step_name(st->kind),
                               cclc_vfy_where_text(sh, p->blocks[b].rank, p->blocks[b].tb, w, sizeof w),
                               cclc_vfy_str_get(&why));
            else if (mixed_why(sh, &cl, b, i, 1, &why) && !cclc_vfy_seen_before(&seen, st->loc) &&
                     seen.n <= MAX_STEP_REPORTS)
                cclc_vfy_error(rep, st->loc, "with instances %d, '%s' on %s: %s; so its instances may split it at other "
                               "points than another transfer of that scratch chunk and overwrite parts another "
                               "instance still reads; give each chunk position its own scratch chunk, or use "
                               "instances 1", p->instances, cclc_step_name(st->kind),
                               cclc_vfy_where_text(sh, p->blocks[b].rank, p->blocks[b].tb, w, sizeof w),
                               cclc_vfy_str_get(&why));
            free(why.s);
        }
    cells_fini(&cl);
}

/* Slices may interleave within a block only if its accesses to one buffer of one rank
 * use identical or disjoint chunk ranges (docs/internals.md), and every scratch-only
 * transfer can be sized by its data (see content_why). */
int cclc_vfy_check_pipeline_safe(const Shape *sh, int ***raw, Str *detail)
{
    const Program *p = sh->p;
    int ok = 1;
    Cells cl = {0};
    if (!cclc_coll_is_v(p->coll))
        cells_init(&cl, sh, raw);
    for (int b = 0; b < sh->nb && ok; b++)
        for (int i = 0; i < p->blocks[b].nsteps && ok; i++) {
            Str why = {0};
            if (scratch_only(&p->blocks[b].steps[i]) && !cclc_coll_is_v(p->coll) && /* see above */
                content_why(sh, &cl, raw, b, i, &why)) {
                ok = 0;
                if (detail)
                    cclc_vfy_str_printf(detail, "'%s' at line %d moves scratch to scratch only and cannot be sized by "
                                        "the chunk position of its data (%s), so its slices would not line up with "
                                        "those of the transfers that wrote the data",
                                        cclc_step_name(p->blocks[b].steps[i].kind), p->blocks[b].steps[i].loc.line,
                                        cclc_vfy_str_get(&why));
            } else if (!cclc_coll_is_v(p->coll) && mixed_why(sh, &cl, b, i, 0, &why)) {
                ok = 0;
                if (detail)
                    cclc_vfy_str_printf(detail, "'%s' at line %d: %s, so its slices would not line up with those of "
                                        "the other transfers of that scratch chunk",
                                        cclc_step_name(p->blocks[b].steps[i].kind), p->blocks[b].steps[i].loc.line,
                                        cclc_vfy_str_get(&why));
            }
            free(why.s);
        }
    cells_fini(&cl);
    for (int b = 0; b < sh->nb && ok; b++) {
        const Block *bl = &p->blocks[b];
        int n = 0;
        for (int i = 0; i < bl->nsteps; i++)
            if (bl->steps[i].kind <= STEP_REDUCE)
                n += 1 + bl->steps[i].nsrc;
        Range *rg = cclc_vfy_xcalloc((size_t)n, sizeof *rg);
        n = 0;
        for (int i = 0; i < bl->nsteps; i++) {
            const Step *st = &bl->steps[i];
            if (st->kind > STEP_REDUCE)
                continue;
            rg[n++] = (Range){st->dst.rank, st->dst.buf, st->dst.chunk, st->dst.chunk + st->dst.count};
            for (int o = 0; o < st->nsrc; o++)
                rg[n++] = (Range){st->src[o].rank, st->src[o].buf, st->src[o].chunk,
                                  st->src[o].chunk + st->src[o].count};
        }
        qsort(rg, (size_t)n, sizeof *rg, range_cmp);
        for (int i = 1, end = 0, last = -1; i <= n && ok; i++) {
            /* last: the index of the range that reaches furthest in this buffer */
            if (i == 1 || rg[i - 1].rank != rg[i - 2].rank || rg[i - 1].buf != rg[i - 2].buf)
                end = rg[i - 1].hi, last = i - 1;
            if (i == n)
                break;
            if (rg[i].rank != rg[i - 1].rank || rg[i].buf != rg[i - 1].buf)
                continue;
            if (rg[i].lo == rg[i - 1].lo && rg[i].hi == rg[i - 1].hi)
                continue;
            if (rg[i].lo < end) {
                ok = 0;
                if (detail)
                    cclc_vfy_str_printf(detail, "rank %d tb %d uses %s@%d[%d..%d] and [%d..%d]", bl->rank, bl->tb,
                                        p->buf_name[rg[i].buf], rg[i].rank, rg[last].lo, rg[last].hi, rg[i].lo, rg[i].hi);
            }
            if (rg[i].hi > end)
                end = rg[i].hi, last = i;
        }
        free(rg);
    }
    return ok;
}
