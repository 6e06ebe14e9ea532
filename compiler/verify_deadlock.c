/* verify_deadlock.c: whether every wait, barrier and block completes.
 *
 * Takes the Shape of an expanded Program and, after a simulated run that got stuck, the
 * Sim where it stopped; gives cclc_vfy_check_sem_counts and cclc_vfy_check_barrier_counts, which
 * report, before any run, semaphores whose signals and waits do not balance in a call
 * and barriers some thread block of the rank does not reach, and cclc_vfy_report_deadlocks,
 * which reports each cycle of thread blocks that wait for each other. Assumes what
 * expand.c establishes: signal/wait peers exist and differ from the rank. */
#include <stdio.h>
#include <stdlib.h>

#include "verify.h"

/* ---- static checks: semaphore and barrier counts ---- */

static const Step *nth_step(const Block *bl, StepKind kind, int peer, int tag, int nth)
{
    for (int i = 0; i < bl->nsteps; i++)
        if (bl->steps[i].kind == kind &&
            (kind == STEP_BARRIER || (bl->steps[i].peer == peer && bl->steps[i].tag == tag)) && nth-- == 0)
            return &bl->steps[i];
    return NULL;
}

/* " (semaphore 'NAME')" for a named semaphore, else "". */
static const char *tag_text(const Program *p, int tag, char *buf, size_t size)
{
    if (tag > 0)
        snprintf(buf, size, " (semaphore '%s')", p->tag_name[tag]);
    else
        buf[0] = 0;
    return buf;
}

/* "once", "twice", "3 times" */
static void times_text(int n, char *buf, size_t size)
{
    if (n == 1 || n == 2)
        snprintf(buf, size, "%s", n == 1 ? "once" : "twice");
    else
        snprintf(buf, size, "%d times", n);
}

/* Every semaphore (signaler rank, waiter rank, tb) must see as many waits as signals in
 * one call: fewer signals leave a wait hanging; more leave the counter ahead, so the
 * next call's waits would pair with this call's signals. */
void cclc_vfy_check_sem_counts(const Shape *sh, Reporter *rep, SyncCounts *sc)
{
    const Program *p = sh->p;
    int n = sh->n, nt = p->ntags;
    /* Counts per (block, tag, peer): [(b * nt + tag) * n + peer]. */
    int *sig = cclc_vfy_xcalloc((size_t)sh->nb * (size_t)nt * (size_t)n, sizeof *sig);
    int *wt = cclc_vfy_xcalloc((size_t)sh->nb * (size_t)nt * (size_t)n, sizeof *wt);
    for (int b = 0; b < sh->nb; b++) {
        const Block *bl = &p->blocks[b];
        for (int i = 0; i < bl->nsteps; i++) {
            const Step *st = &bl->steps[i];
            if (st->kind == STEP_SIGNAL && st->peer >= 0 && st->peer < n)
                sig[(b * nt + st->tag) * n + st->peer]++, sc->nsignals++;
            else if (st->kind == STEP_WAIT && st->peer >= 0 && st->peer < n)
                wt[(b * nt + st->tag) * n + st->peer]++, sc->nwaits++;
            else if (st->kind == STEP_BARRIER)
                sc->nbarriers++;
        }
    }
    Seen seen = {0};
    char w1[48], w2[48], t1[24], t2[24], tt[96];
    for (int b = 0; b < sh->nb; b++) {
        const Block *bl = &p->blocks[b];
        for (int g = 0; g < nt * n; g++) {
            int q = g % n, tag = g / n;
            tag_text(p, tag, tt, sizeof tt);
            /* Block b waits for q: q's block of the same tb signals. */
            int sb = cclc_vfy_block_of(sh, q, bl->tb);
            int nw = wt[(b * nt + tag) * n + q], ns = sb >= 0 ? sig[(sb * nt + tag) * n + bl->rank] : 0;
            if (nw > ns) {
                const Step *st = nth_step(bl, STEP_WAIT, q, tag, ns);
                times_text(ns, t1, sizeof t1);
                times_text(nw, t2, sizeof t2);
                if (cclc_vfy_seen_before(&seen, st->loc)) {
                    /* reported for another rank already */
                } else if (sb < 0) {
                    cclc_vfy_error(rep, st->loc, "wait on %s for rank %d%s never completes: rank %d has no thread block "
                              "%d, so nothing signals it (waited %s)", cclc_vfy_where_text(sh, bl->rank, bl->tb, w1, sizeof w1),
                              q, tt, q, bl->tb, t2);
                } else {
                    cclc_vfy_error(rep, st->loc, "wait at line %d on %s for rank %d%s never completes: rank %d signals it "
                              "%s, waited %s", st->loc.line, cclc_vfy_where_text(sh, bl->rank, bl->tb, w1, sizeof w1), q, tt,
                              q, ns ? t1 : "never", t2);
                }
            }
            /* Block b signals q: q's block of the same tb waits. */
            int wb = cclc_vfy_block_of(sh, q, bl->tb);
            ns = sig[(b * nt + tag) * n + q];
            nw = wb >= 0 ? wt[(wb * nt + tag) * n + bl->rank] : 0;
            if (ns > nw) {
                const Step *st = nth_step(bl, STEP_SIGNAL, q, tag, nw);
                times_text(ns, t1, sizeof t1);
                times_text(nw, t2, sizeof t2);
                if (!cclc_vfy_seen_before(&seen, st->loc))
                    cclc_vfy_error(rep, st->loc, "signal at line %d on %s to rank %d%s is never waited for: it signals %s, "
                              "%s %s%s (counts must balance in every call, or the next call's waits pair with this "
                              "call's signals)", st->loc.line, cclc_vfy_where_text(sh, bl->rank, bl->tb, w1, sizeof w1),
                              q, tt, t1, cclc_vfy_where_text(sh, q, bl->tb, w2, sizeof w2), nw ? "waits " : "never waits",
                              nw ? t2 : "");
            }
        }
    }
    free(sig);
    free(wt);
}

/* A barrier joins every thread block of the rank's launch (tbs 0..maxtb-1), so each of
 * them must reach every barrier. */
void cclc_vfy_check_barrier_counts(const Shape *sh, Reporter *rep)
{
    const Program *p = sh->p;
    int *cnt = cclc_vfy_xcalloc((size_t)sh->maxtb, sizeof *cnt);
    Seen seen = {0};
    for (int r = 0; r < sh->n; r++) {
        int most = 0, tmost = 0, least = -1, tleast = 0;
        for (int t = 0; t < sh->maxtb; t++) {
            int b = cclc_vfy_block_of(sh, r, t);
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
        const Step *st = nth_step(&p->blocks[cclc_vfy_block_of(sh, r, tmost)], STEP_BARRIER, -1, 0, least);
        if (cclc_vfy_seen_before(&seen, st->loc))
            continue;
        if (cclc_vfy_block_of(sh, r, tleast) < 0)
            cclc_vfy_error(rep, st->loc, "barrier at line %d on rank %d tb %d never completes: tb %d of rank %d has no "
                      "steps, so it never reaches a barrier (every thread block of the launch, tbs 0..%d, must reach "
                      "each barrier)", st->loc.line, r, tmost, tleast, r, sh->maxtb - 1);
        else
            cclc_vfy_error(rep, st->loc, "barrier at line %d on rank %d tb %d never completes: tb %d of rank %d reaches "
                      "%d barrier%s, tb %d reaches %d (every thread block of the launch, tbs 0..%d, must reach each "
                      "barrier)", st->loc.line, r, tmost, tleast, r, least, least == 1 ? "" : "s", tmost, most,
                      sh->maxtb - 1);
    }
    free(cnt);
}

/* ---- deadlock: the cycle of blocked blocks ---- */

/* Whether block b, from where it stands to the end of the last call, still executes a
 * step of `kind` (for signals: to rank `peer`). */
static int will_execute(const Sim *s, int b, StepKind kind, int peer, int tag)
{
    const Block *bl = &s->sh->p->blocks[b];
    int from = s->pc[b] + (s->state[b] == AT_BARRIER && !s->boundary[b]);
    if (s->state[b] == DONE)
        return 0;
    for (int call = s->call[b]; call < s->m.ncalls; call++, from = 0)
        for (int i = from; i < bl->nsteps; i++)
            if (bl->steps[i].kind == kind &&
                (kind != STEP_SIGNAL || (bl->steps[i].peer == peer && bl->steps[i].tag == tag)))
                return 1;
    return 0;
}

/* Whom a blocked block waits for: the signaling block, or for a barrier the first block
 * of its rank that has not arrived; -1 when that one will never signal or arrive (then
 * the counts are wrong, which cclc_vfy_check_sem_counts/cclc_vfy_check_barrier_counts report). */
static int blocked_on(const Sim *s, int b)
{
    const Shape *sh = s->sh;
    const Block *bl = &sh->p->blocks[b];
    if (s->state[b] == RUN) {
        const Step *st = &bl->steps[s->pc[b]];
        int t = cclc_vfy_block_of(sh, st->peer, bl->tb);
        return t >= 0 && will_execute(s, t, STEP_SIGNAL, bl->rank, st->tag) ? t : -1;
    }
    if (s->state[b] == AT_BARRIER)
        for (int t = 0; t < sh->maxtb; t++) {
            int o = cclc_vfy_block_of(sh, bl->rank, t);
            if (o >= 0 && s->state[o] != AT_BARRIER)
                return will_execute(s, o, STEP_BARRIER, -1, 0) ? o : -1;
        }
    return -1;
}

static void blocked_text(const Sim *s, int b, int target, Str *out)
{
    const Shape *sh = s->sh;
    const Block *bl = &sh->p->blocks[b];
    char w[48];
    cclc_vfy_where_text(sh, bl->rank, bl->tb, w, sizeof w);
    if (s->state[b] == AT_BARRIER)
        cclc_vfy_str_printf(out, "%s waits at the barrier at line %d for tb %d", w,
                       s->pc[b] < bl->nsteps ? bl->steps[s->pc[b]].loc.line : 0, sh->p->blocks[target].tb);
    else
        cclc_vfy_str_printf(out, "%s waits at line %d for rank %d", w, bl->steps[s->pc[b]].loc.line,
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
int cclc_vfy_report_deadlocks(const Sim *s, int counts_reported)
{
    const Shape *sh = s->sh;
    int nb = sh->nb, ncycles = 0;
    int *color = cclc_vfy_xcalloc((size_t)nb, sizeof *color); /* 0 new, walk id + 1 while walking, -1 done */
    int *target = cclc_vfy_xcalloc((size_t)nb, sizeof *target);
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
            cclc_vfy_str_printf(&msg, "deadlock: ");
            int x = first;
            do {
                if (len < 8) {
                    if (len)
                        cclc_vfy_str_printf(&msg, ", ");
                    blocked_text(s, x, target[x], &msg);
                } else if (len == 8) {
                    cclc_vfy_str_printf(&msg, ", ...");
                }
                len++;
                x = target[x];
            } while (x != first);
            cclc_vfy_str_printf(&msg, "; these %d thread blocks wait for each other in a cycle, so none can proceed", len);
            cclc_vfy_error(s->rep, blocked_loc(s, first), "%s", cclc_vfy_str_get(&msg));
            free(msg.s);
            SrcLoc l0 = blocked_loc(s, first);
            x = target[first];
            for (int i = 1; i < len && i < 8; i++, x = target[x]) {
                SrcLoc l = blocked_loc(s, x);
                if (l.line != l0.line || l.col != l0.col) {
                    char w[48];
                    cclc_vfy_note(s->rep, l, "%s is blocked here",
                             cclc_vfy_where_text(sh, sh->p->blocks[x].rank, sh->p->blocks[x].tb, w, sizeof w));
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
                cclc_vfy_error(s->rep, blocked_loc(s, b), "deadlock: the run does not complete: %s is blocked here",
                          cclc_vfy_where_text(sh, sh->p->blocks[b].rank, sh->p->blocks[b].tb, w, sizeof w));
                break;
            }
    }
    free(color);
    free(target);
    return ncycles;
}
