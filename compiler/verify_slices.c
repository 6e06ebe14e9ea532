/* verify_slices.c: transfers cut into parts, by instances or by pipeline slices.
 *
 * Takes the Shape of an expanded Program; gives cclc_vfy_check_instances, which reports each
 * transfer that instances would split at other points than the transfer that stored its
 * data (an error), and cclc_vfy_check_pipeline_safe, which records, without failing the
 * proof, whether a block's slices may interleave (schedule.c). Assumes what expand.c
 * establishes: every Ref is in range. */
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

/* Whether a data step touches only scratch. Such a transfer has the scratch chunk's
 * length CS, while the transfer that stored its data had the length of an in/out
 * chunk's position, shorter for tail chunks; cut into instances or slices, the two
 * split the data at different points (docs/internals.md), so one part would read what
 * another part, unordered with it, writes. */
static int scratch_only(const Step *st)
{
    if (st->kind > STEP_REDUCE || st->dst.buf < BUF_SCRATCH0)
        return 0;
    for (int o = 0; o < st->nsrc; o++)
        if (st->src[o].buf < BUF_SCRATCH0)
            return 0;
    return 1;
}

/* With instances, every scratch-only transfer is a race between instances. Not in a
 * v-collective: there every transfer is sized by the segment of the data it moves
 * (PlanOp.content), scratch-only ones included, so all transfers of one piece of data
 * have one length and split it at the same points. */
void cclc_vfy_check_instances(const Shape *sh, Reporter *rep)
{
    const Program *p = sh->p;
    Seen seen = {0};
    if (p->instances <= 1 || cclc_coll_is_v(p->coll))
        return;
    for (int b = 0; b < sh->nb; b++)
        for (int i = 0; i < p->blocks[b].nsteps; i++) {
            const Step *st = &p->blocks[b].steps[i];
            if (scratch_only(st) && !cclc_vfy_seen_before(&seen, st->loc) && seen.n <= MAX_STEP_REPORTS)
                cclc_vfy_error(rep, st->loc, "with instances %d, '%s' moves data from scratch to scratch only: its length "
                               "is a whole scratch chunk, not that of the in/out chunk position the data came from (tail "
                               "chunks are shorter), so its instances split the data differently from the transfer that "
                               "wrote it and read parts another instance writes; give it an in/out operand of the same "
                               "position, or use instances 1", p->instances, cclc_step_name(st->kind));
        }
}

/* Slices may interleave within a block only if its accesses to one buffer of one rank
 * use identical or disjoint chunk ranges (docs/internals.md), and no transfer is
 * scratch-only (see scratch_only). */
int cclc_vfy_check_pipeline_safe(const Shape *sh, Str *detail)
{
    const Program *p = sh->p;
    int ok = 1;
    for (int b = 0; b < sh->nb && ok; b++)
        for (int i = 0; i < p->blocks[b].nsteps && ok; i++)
            if (scratch_only(&p->blocks[b].steps[i]) && !cclc_coll_is_v(p->coll)) { /* see above */
                ok = 0;
                if (detail)
                    cclc_vfy_str_printf(detail, "'%s' at line %d moves scratch to scratch only, so its slices would "
                                        "not line up with those of the transfer that wrote the data",
                                        cclc_step_name(p->blocks[b].steps[i].kind), p->blocks[b].steps[i].loc.line);
            }
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
