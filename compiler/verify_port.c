/* verify_port.c: port-channel puts, which complete asynchronously.
 *
 * Takes the Shape of an expanded Program; gives cclc_vfy_check_port_puts, which reports
 * every port-channel put the simulation (verify_simulate.c) could not place exactly at
 * its statement under the rules below, and counts the port puts for --explain. Assumes
 * what expand.c establishes: every Ref is in range.
 *
 * A port-channel put is only posted by its thread block: a host proxy has the copy
 * engine perform it later, at some time before the block's next `flush P` (P the put's
 * destination rank) returns. The simulation places every put at its statement. For a
 * port put that is exact only if nothing can tell that point from any later one up to
 * the flush, which these rules ensure, per thread block in program order (a put is
 * *open* from its statement to the block's next `flush P`):
 *  - no signal, wait or barrier while any port put is open: they are the points other
 *    blocks and ranks order their accesses against, so none of those can then see a
 *    put half done, and happens-before from the put's statement is its true order;
 *  - no open port put when the block ends: the call would return (and its caller read
 *    out, or the next call begin) while the copy engine may still be writing;
 *  - no step of the block writes a chunk an open put reads, or reads or writes a chunk
 *    it writes: the copy engine may access them at any time until the flush. Port puts
 *    among themselves are served in order, so they never conflict with each other.
 * Slices (pipeline) repeat a block's whole step list with all puts flushed at its end,
 * so one pass over the list covers every slice. */
#include <stdlib.h>

#include "verify.h"

/* Where r's first chunk lives: its buffer and chunk, or, with `inplace`, the ones
 * in/out aliasing maps them to. */
/* How messages name an asynchronous put's channel and what completes it: a port put is
 * the copy engine's, a net put the network proxy's (Open MPI between nodes). */
static const char *chan_word(const Step *put)
{
    return put->chan == CHAN_NET ? "net" : "port";
}

static const char *engine(const Step *put)
{
    return put->chan == CHAN_NET ? "the network proxy" : "the copy engine";
}

static void ref_place(const Shape *sh, int inplace, const Ref *r, int *buf, int *chunk)
{
    *buf = r->buf;
    *chunk = r->chunk;
    if (inplace)
        cclc_vfy_inplace_alias(sh, r->rank, buf, chunk);
}

/* Whether Refs a and b share a chunk (in and out aliased when `inplace`); *first gets
 * the first shared chunk, numbered as in a. */
static int refs_overlap(const Shape *sh, int inplace, const Ref *a, const Ref *b, int *first)
{
    int abuf, achunk, bbuf, bchunk;
    if (a->rank != b->rank)
        return 0;
    ref_place(sh, inplace, a, &abuf, &achunk);
    ref_place(sh, inplace, b, &bbuf, &bchunk);
    int lo = achunk > bchunk ? achunk : bchunk;
    int hi = achunk + a->count < bchunk + b->count ? achunk + a->count : bchunk + b->count;
    if (abuf != bbuf || lo >= hi)
        return 0;
    *first = a->chunk + (lo - achunk);
    return 1;
}

/* Appends "'flush 1'", "'flush 1' and 'flush 2'", ... for the peers of the open puts
 * open[0..nopen) that `pick` selects (all of them when pick is NULL), each once. */
static void flush_text(const Block *bl, const int *open, const char *pick, int nopen, Str *out)
{
    int npeers = 0, nlisted = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < nopen; i++) {
            int peer = bl->steps[open[i]].dst.rank, dup = 0;
            for (int j = 0; j < i && !dup; j++)
                dup = (!pick || pick[j]) && bl->steps[open[j]].dst.rank == peer;
            if ((pick && !pick[i]) || dup)
                continue;
            if (pass == 0) {
                npeers++;
                continue;
            }
            nlisted++;
            cclc_vfy_str_printf(out, "%s'flush %d'", nlisted == 1 ? "" : nlisted == npeers ? " and " : ", ", peer);
        }
}

/* Drops the open puts to the peers of those that `pick` selects (a `flush` of each of
 * them, as the messages advise); returns the new count. */
static int close_port_puts(const Block *bl, int *open, const char *pick, int nopen)
{
    int kept = 0;
    for (int i = 0; i < nopen; i++) {
        int peer = bl->steps[open[i]].dst.rank, closed = 0;
        for (int j = 0; j < nopen && !closed; j++)
            closed = pick[j] && bl->steps[open[j]].dst.rank == peer;
        if (!closed)
            open[kept++] = open[i];
    }
    return kept;
}

/* Whether st is a copy onto itself (one source, the same chunks as its destination),
 * as in-place aliasing makes `copy out[r] <- in[0]` of an all-gather. It stores the
 * values already there, so a copy engine reading those bytes meanwhile reads the same
 * data either way: not a conflict with a port put's source. */
static int identity_copy(const Shape *sh, int inplace, const Step *st)
{
    if (st->kind != STEP_COPY || st->nsrc != 1 || st->dst.rank != st->src[0].rank || st->dst.count != st->src[0].count)
        return 0;
    int dbuf, dchunk, sbuf, schunk;
    ref_place(sh, inplace, &st->dst, &dbuf, &dchunk);
    ref_place(sh, inplace, &st->src[0], &sbuf, &schunk);
    return dbuf == sbuf && dchunk == schunk;
}

/* Whether data step st conflicts with the open port put `put`: it writes a chunk the
 * put reads (*what 0), writes a chunk the put writes (1), or reads one (2). *chunk
 * names the chunk, as st's operand numbers it. (expand.c lets a block reach a port
 * peer with puts only, so today just the first case can occur; the others are what the
 * copy engine needs all the same, should channels ever mix.) */
static int port_conflict(const Shape *sh, int inplace, const Step *st, const Step *put, int *what, int *chunk)
{
    if (refs_overlap(sh, inplace, &st->dst, &put->src[0], chunk) && !identity_copy(sh, inplace, st))
        return *what = 0, 1;
    if (refs_overlap(sh, inplace, &st->dst, &put->dst, chunk))
        return *what = 1, 1;
    for (int o = 0; o < st->nsrc; o++)
        if (refs_overlap(sh, inplace, &st->src[o], &put->dst, chunk))
            return *what = 2, 1;
    return 0;
}

/* Checks the rules above for every block; `inplace` aliases in and out (for the quiet
 * in-place proof). Returns the number of port puts. */
long cclc_vfy_check_port_puts(const Shape *sh, int inplace, Reporter *rep)
{
    const Program *p = sh->p;
    Seen seen_sync = {0}, seen_data = {0}, seen_end = {0};
    int nreports = 0;
    long nputs = 0;
    char w[48], cell[96];
    for (int b = 0; b < sh->nb; b++) {
        const Block *bl = &p->blocks[b];
        int *open = cclc_vfy_xcalloc((size_t)bl->nsteps, sizeof *open), nopen = 0;
        char *pick = cclc_vfy_xcalloc((size_t)bl->nsteps, 1);
        cclc_vfy_where_text(sh, bl->rank, bl->tb, w, sizeof w);
        for (int i = 0; i < bl->nsteps; i++) {
            const Step *st = &bl->steps[i];
            if (st->kind == STEP_PUT && cclc_chan_async(st->chan)) {
                open[nopen++] = i;
                nputs++;
                continue;
            }
            if (st->kind == STEP_FLUSH) {
                for (int j = 0; j < nopen; j++)
                    pick[j] = bl->steps[open[j]].dst.rank == st->peer;
                nopen = close_port_puts(bl, open, pick, nopen);
                continue;
            }
            if (!nopen)
                continue;
            const Step *put = &bl->steps[open[0]];
            if (st->kind == STEP_SIGNAL || st->kind == STEP_WAIT || st->kind == STEP_BARRIER) {
                if (!cclc_vfy_seen_before(&seen_sync, st->loc) && nreports++ < MAX_STEP_REPORTS) {
                    Str fix = {0};
                    flush_text(bl, open, NULL, nopen, &fix);
                    cclc_vfy_error(rep, st->loc, "%s-channel put at line %d on %s to rank %d may still be in flight "
                                   "at this '%s': add %s before it (%s completes a %s put only by the "
                                   "block's next flush to its peer, so whoever this '%s' synchronizes with may see it "
                                   "unfinished)", chan_word(put), put->loc.line, w, put->dst.rank, cclc_step_name(st->kind),
                                   cclc_vfy_str_get(&fix), engine(put), chan_word(put), cclc_step_name(st->kind));
                    cclc_vfy_note(rep, put->loc, "the %s-channel put to rank %d, not yet flushed there", chan_word(put),
                                  put->dst.rank);
                    free(fix.s);
                }
                nopen = 0; /* as if flushed, so one missing flush gives one error */
                continue;
            }
            if (st->kind > STEP_REDUCE)
                continue;
            int first = -1, what = 0, chunk = 0;
            for (int j = 0; j < nopen; j++) {
                int wj, cj;
                pick[j] = (char)port_conflict(sh, inplace, st, &bl->steps[open[j]], &wj, &cj);
                if (pick[j] && first < 0)
                    first = j, what = wj, chunk = cj;
            }
            if (first < 0)
                continue;
            put = &bl->steps[open[first]];
            if (!cclc_vfy_seen_before(&seen_data, st->loc) && nreports++ < MAX_STEP_REPORTS) {
                const Ref *ref = what == 0 || what == 1 ? &st->dst : NULL;
                for (int o = 0; !ref && o < st->nsrc; o++)
                    if (refs_overlap(sh, inplace, &st->src[o], &put->dst, &chunk))
                        ref = &st->src[o];
                Str fix = {0};
                flush_text(bl, open, pick, nopen, &fix);
                cclc_vfy_error(rep, st->loc, "'%s' at line %d on %s %s %s, which the %s-channel put at line %d to rank "
                               "%d %s: %s may be %s it until the put is flushed; add %s before this '%s'",
                               cclc_step_name(st->kind), st->loc.line, w, what == 2 ? "reads" : "writes",
                               cclc_vfy_cell_text(sh, ref->rank, ref->buf, chunk, cell, sizeof cell), chan_word(put),
                               put->loc.line, put->dst.rank, what == 0 ? "reads" : "writes", engine(put),
                               what == 0 ? "reading" : "writing", cclc_vfy_str_get(&fix), cclc_step_name(st->kind));
                cclc_vfy_note(rep, put->loc, "the %s-channel put to rank %d, not yet flushed there", chan_word(put),
                              put->dst.rank);
                free(fix.s);
            }
            nopen = close_port_puts(bl, open, pick, nopen);
        }
        /* Never flushed: one error per peer, at its last open put (one flush after it
         * closes them all). */
        for (int j = 0; j < nopen; j++) {
            const Step *put = &bl->steps[open[j]];
            int later = 0;
            for (int x = j + 1; x < nopen && !later; x++)
                later = bl->steps[open[x]].dst.rank == put->dst.rank;
            if (!later && !cclc_vfy_seen_before(&seen_end, put->loc) && nreports++ < MAX_STEP_REPORTS)
                cclc_vfy_error(rep, put->loc, "%s-channel put at line %d on %s to rank %d is never flushed: add "
                               "'flush %d' after it (%s may still be writing when the call returns)",
                               chan_word(put), put->loc.line, w, put->dst.rank, put->dst.rank, engine(put));
        }
        free(open);
        free(pick);
    }
    return nputs;
}
