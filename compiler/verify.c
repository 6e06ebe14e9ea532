/* verify.c: the proof that an expanded program is a correct collective, for its N.
 *
 * Takes the Program of expand.c (straight-line steps per rank and logical thread block)
 * and proves, by simulating it (verify_simulate.c):
 *  - the postcondition (verify_contents.c): symbolic execution where every chunk holds
 *    an expression over input contributions in@q[c]; each out chunk must hold exactly
 *    what the collective requires, every contribution once, and in/out chunks may only
 *    receive content of their own position i % K (docs/internals.md); `in` is
 *    read-only;
 *  - no data race (verify_simulate.c): happens-before is program order per block,
 *    signal->wait pairs (the k-th `wait q` of rank r, block t pairs with the k-th
 *    `signal r` of rank q, block t) and barriers (all blocks of a rank), tracked with
 *    vector clocks; two accesses to one chunk of one rank's buffer, at least one a
 *    write, from different blocks, must be ordered; so must every write into a rank's
 *    out and that rank's caller reading the result after the call (a rank must not
 *    return before its output arrived);
 *  - port-channel puts, which a host proxy completes asynchronously (some time before
 *    the block's next `flush` of their peer), are placed at their statement like every
 *    other step; verify_port.c makes that exact by requiring, per thread block, a flush
 *    before any signal, wait or barrier and before the block ends, and no step of the
 *    block touching an unflushed put's chunks in between;
 *  - no deadlock (verify_deadlock.c): signal and wait counts balance per semaphore,
 *    barriers are reached by every block of the rank, and the simulated run completes
 *    (else the cycle of blocked blocks is reported);
 *  - safety across calls: two back-to-back calls, with between them each rank's caller
 *    reading out and writing the next in, are race-free. A rank ends a call when all
 *    its blocks did (a kernel boundary), and no block of the next call runs before
 *    every rank has entered it (the runtime's identity check: docs/language.md,
 *    "Across calls"), so what can race is a caller with a peer still in the call;
 *  - and records, without failing the proof: in-place validity (in and out aliased as
 *    the collective's shapes allow), deterministic reduction order (verify_contents.c),
 *    pipeline safety (verify_slices.c); instances that would split a transfer apart
 *    from the one that stored its data are an error (verify_slices.c).
 *
 * Why one simulated interleaving suffices: synchronization never depends on data, so
 * the happens-before relation is the same in every execution and the vector clocks
 * decide every race exactly; a race-free program has a single result, so the contents
 * of this interleaving are the program's. When races or a deadlock are found the
 * postcondition is not judged (its failures would be consequences, not causes).
 *
 * Diagnostics come cause first: unbalanced signal/wait and barrier counts are checked
 * before the run but reported after its races and deadlocks (cclc_diag_defer), as their
 * effects, or as the causes when the run finds nothing else (cclc_diag_settle).
 *
 * This file is the driver: the entry points, cclc_verify_program and cclc_verify_explain,
 * which run those analyses (verify.h) in the order their results need (counts and port
 * rules before the run, the postcondition only after a clean run, cross-call and in-place
 * runs only when one call is sound). It alone calls them; they share the base of
 * verify_base.c (verify_base.h): working memory, message strings, reporting, the
 * program's Shape, chunk contents, the simulated run's state.
 *
 * Assumes what expand.c establishes: every Ref is in range, a data step's operands
 * cover the dst's count, signal/wait peers exist and differ from the rank. Working
 * memory is malloc'd and freed before returning; only Proof strings use the arena. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verify.h"

/* ---- the whole proof ---- */

/* What the proof found, in detail, for --explain. */
typedef struct {
    SyncCounts sync;
    long pairs, cross_pairs, edges;
    long port_puts;       /* port-channel puts checked against cclc_vfy_check_port_puts' rules */
    int out_checked;
    Str det_detail, pipe_detail;
} Facts;

/* v-collectives have none: segment p of in and of out have different offsets on every
 * rank (displacements are the caller's), so in place is not one aliasing of chunks. */
static int inplace_applicable(Collective c)
{
    return c != COLL_ALLTOALL && !cclc_coll_is_v(c);
}

/* A table with a slot per chunk of every data step, where the run records the data the
 * chunk moves: for a v-collective its home (Proof.content), else its position; -1
 * until then. */
static int ***record_table(Arena *a, const Program *p)
{
    int ***t = cclc_arena_alloc(a, sizeof *t * (size_t)p->nblocks);
    for (int b = 0; b < p->nblocks; b++) {
        const Block *bl = &p->blocks[b];
        t[b] = cclc_arena_alloc(a, sizeof *t[b] * (size_t)(bl->nsteps ? bl->nsteps : 1));
        for (int i = 0; i < bl->nsteps; i++) {
            const Step *st = &bl->steps[i];
            if (st->kind != STEP_PUT && st->kind != STEP_GET && st->kind != STEP_COPY && st->kind != STEP_REDUCE)
                continue;
            t[b][i] = cclc_arena_alloc(a, sizeof *t[b][i] * (size_t)st->dst.count);
            for (int j = 0; j < st->dst.count; j++)
                t[b][i][j] = -1;
        }
    }
    return t;
}

/* A v-collective moves data without reducing it: a step whose chunk combines data of
 * two segments (a reduce of different inputs) has no one run-time size. */
static void check_unmixed(const Program *p, int ***content, Reporter *rep)
{
    SrcLoc seen[CCLC_MAX_ERRORS];
    int nseen = 0;
    for (int b = 0; b < p->nblocks; b++)
        for (int i = 0; i < p->blocks[b].nsteps; i++)
            for (int j = 0; content[b][i] && j < p->blocks[b].steps[i].dst.count; j++)
                if (content[b][i][j] == -2) {
                    const Step *st = &p->blocks[b].steps[i];
                    int dup = 0; /* one error per statement, at its first rank */
                    for (int k = 0; k < nseen; k++)
                        dup |= seen[k].line == st->loc.line && seen[k].col == st->loc.col;
                    if (dup || nseen == CCLC_MAX_ERRORS)
                        break;
                    seen[nseen++] = st->loc;
                    cclc_vfy_error(rep, st->loc, "'%s' on rank %d tb %d combines data of several segments (chunk %d "
                                   "of its destination); an %s moves each segment as it is, without reducing",
                                   cclc_step_name(st->kind), p->blocks[b].rank, p->blocks[b].tb, st->dst.chunk + j,
                                   cclc_coll_name(p->coll));
                    break;
                }
}

static int analyze(Arena *a, const Program *p, Proof *proof, Reporter *rep, Facts *f)
{
    memset(proof, 0, sizeof *proof);
    Shape sh;
    cclc_vfy_shape_init(&sh, p);
    int errors0 = rep->nerrors;

    /* Cause first: unbalanced counts are often the effect of a missing wait (or signal)
     * whose race or deadlock the run finds at its site; they are reported after the
     * run's errors, and as causes only when the run finds none (cclc_diag_settle). */
    int diag_errors0 = rep->d ? rep->d->nerrors : 0;
    if (rep->d)
        cclc_diag_defer(rep->d, 1);
    cclc_vfy_check_sem_counts(&sh, rep, &f->sync);
    cclc_vfy_check_barrier_counts(&sh, rep);
    if (rep->d)
        cclc_diag_defer(rep->d, 0);
    int counts_bad = rep->nerrors > errors0;
    /* Before the simulation, which places every put at its statement: for port puts,
     * completed later by an asynchronous proxy, that is exact only under these rules. */
    int port_errors0 = rep->nerrors;
    f->port_puts = cclc_vfy_check_port_puts(&sh, 0, rep);
    int port_bad = rep->nerrors > port_errors0;

    Sim s = {0};
    double work = (double)(f->sync.nwaits + f->sync.nbarriers) * (sh.nb + sh.n);
    if (work > MAX_CLOCK_WORK || cclc_vfy_sim_init(&s, &sh, (SimMode){.ncalls = 1, .contents = 1}, rep) != 0) {
        cclc_vfy_error(rep, p->name_loc, "'%s' is too large to verify for N = %d (%d thread blocks, %d chunks per rank)",
                  p->name, p->nranks, sh.nb, sh.rank_cells);
        cclc_vfy_sim_fini(&s);
        cclc_vfy_shape_fini(&sh);
        if (rep->d)
            cclc_diag_settle(rep->d, diag_errors0);
        return -1;
    }
    /* What each data step moves: it sizes a v-collective's chunks, and a fixed-size
     * collective's scratch-only transfers where it can (cclc_vfy_size_by_content). */
    int ***raw = s.record = record_table(a, p);
    cclc_vfy_sim_run(&s);
    cclc_vfy_sim_report_layout(&s);
    if (cclc_coll_is_v(p->coll)) {
        proof->content = raw;
        check_unmixed(p, proof->content, rep);
    } else if (!s.stuck) {
        proof->content = cclc_vfy_size_by_content(a, &sh, raw);
    }
    /* After the run, which tells what scratch-only transfers move; a run that did not
     * complete left some unrecorded, and its deadlock is the error to read. */
    if (!s.stuck)
        cclc_vfy_check_instances(&sh, raw, rep);
    f->pairs = s.pairs;
    f->edges = s.edges;
    if (s.races_hidden)
        cclc_vfy_note(rep, (SrcLoc){0, 0, 0}, "%d more racing statement pair%s not shown", s.races_hidden,
                 s.races_hidden == 1 ? "" : "s");
    if (s.stuck)
        cclc_vfy_report_deadlocks(&s, counts_bad);
    int races = s.nraces + s.races_hidden;
    proof->race_free = !races && !s.stuck && !port_bad;
    proof->deadlock_free = !s.stuck && !counts_bad;
    if (races || s.stuck || s.nlayout) {
        cclc_vfy_note(rep, (SrcLoc){0, 0, 0}, "the postcondition was not checked: %s",
                 s.stuck ? "the run does not complete" : races ? "with races the result depends on timing"
                 : cclc_coll_is_v(p->coll) ? "chunks were stored at the wrong position or segment"
                 : "chunks were stored at the wrong position");
    } else {
        int bad = cclc_vfy_check_postcondition(&s, &f->out_checked);
        proof->postcondition = !bad && !s.ninput;
        proof->deterministic = cclc_vfy_check_deterministic(&s, &f->det_detail);
    }
    cclc_vfy_sim_fini(&s);
    proof->pipeline_safe = cclc_vfy_check_pipeline_safe(&sh, raw, &f->pipe_detail);

    /* Two back-to-back calls, only worth it when one call is sound. */
    int main_ok = rep->nerrors == errors0;
    if (main_ok) {
        Sim s2;
        if (cclc_vfy_sim_init(&s2, &sh, (SimMode){.ncalls = 2, .cross_only = 1}, rep) == 0) {
            cclc_vfy_sim_run(&s2);
            f->cross_pairs = s2.pairs;
            if (s2.races_hidden)
                cclc_vfy_note(rep, (SrcLoc){0, 0, 0}, "%d more cross-call racing statement pair%s not shown",
                         s2.races_hidden, s2.races_hidden == 1 ? "" : "s");
            proof->cross_call_safe = !s2.nraces && !s2.races_hidden && !s2.stuck;
        }
        cclc_vfy_sim_fini(&s2);
    }

    /* In place: proved again quietly, with the buffers aliased; never fails the proof. */
    proof->inplace_applicable = inplace_applicable(p->coll);
    if (!proof->inplace_applicable) {
        proof->inplace_reason = cclc_arena_printf(a, "%s has no in-place form that the verifier models",
                                             cclc_coll_name(p->coll));
    } else if (rep->nerrors != errors0) {
        proof->inplace_reason = cclc_arena_printf(a, "not checked: the out-of-place proof failed");
    } else {
        Reporter quiet = {0};
        Sim s3 = {0};
        /* Aliased, a port put's source may be a chunk its block writes before the flush. */
        cclc_vfy_check_port_puts(&sh, 1, &quiet);
        int ran = quiet.nerrors > 0;
        if (!ran && cclc_vfy_sim_init(&s3, &sh, (SimMode){.ncalls = 1, .inplace = 1, .contents = 1}, &quiet) == 0) {
            ran = 1;
            cclc_vfy_sim_run(&s3);
            cclc_vfy_sim_report_layout(&s3);
            if (s3.stuck)
                cclc_vfy_error(&quiet, p->name_loc, "the run does not complete");
            else if (!s3.nraces && !s3.nlayout) {
                int checked;
                cclc_vfy_check_postcondition(&s3, &checked);
            }
        }
        if (ran) {
            proof->inplace_ok = quiet.nerrors == 0;
            if (!proof->inplace_ok)
                proof->inplace_reason = cclc_arena_printf(a, "with in and out as one buffer, %s", quiet.first);
        }
        cclc_vfy_sim_fini(&s3);
    }
    cclc_vfy_shape_fini(&sh);
    if (rep->d)
        cclc_diag_settle(rep->d, diag_errors0);
    return rep->nerrors == errors0 ? 0 : -1;
}

int cclc_verify_program(Arena *a, const Program *p, Proof *proof, Diag *d)
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
    case COLL_ALLGATHERV: return "out@r[j*K+c] = in@j[c] on every rank (segment j: rank j's count, any size)";
    case COLL_ALLTOALLV: return "out@r[j*K+c] = in@j[r*K+c] on every rank (each segment its own count, any size)";
    }
    return "?";
}

void cclc_verify_explain(FILE *out, const Program *p, const Proof *proof)
{
    /* The proof is re-derived quietly for its numbers; the verdicts printed are the
     * ones cclc_verify_program recorded. */
    Arena *a = cclc_arena_new();
    Reporter quiet = {0};
    Facts f = {0};
    Proof again;
    analyze(a, p, &again, &quiet, &f);
    const char *yes = "proved", *no = "NOT proved";
    fprintf(out, "%s: %s for N = %d", p->name, cclc_coll_name(p->coll), p->nranks);
    if (p->coll == COLL_BROADCAST || p->coll == COLL_REDUCE)
        fprintf(out, ", root %d", p->root);
    int maxtb = 0;
    for (int r = 0; r < p->nranks; r++)
        maxtb = p->ntb[r] > maxtb ? p->ntb[r] : maxtb;
    fprintf(out, " (K = %d, protocol %s, %d thread block%s per rank)\n", p->chunks, cclc_proto_name(p->protocol), maxtb,
            maxtb == 1 ? "" : "s");
    fprintf(out, "  postcondition:    %s: %s", proof->postcondition ? yes : no, post_text(p));
    if (proof->postcondition)
        fprintf(out, " (%d out chunks checked)", f.out_checked);
    if (cclc_coll_is_v(p->coll))
        fprintf(out, "; in/out chunks only receive content of their own segment and position\n");
    else
        fprintf(out, "; in/out chunks only receive content of their own position\n");
    fprintf(out, "  no data race:     %s: %ld access pairs from different thread blocks checked against "
            "happens-before (%ld signal->wait and barrier edges)", proof->race_free ? yes : no, f.pairs, f.edges);
    if (f.port_puts)
        fprintf(out, "; %ld %s puts, each flushed before its block's next signal, wait or barrier (and "
                "before the block ends), its chunks untouched by the block until then", f.port_puts,
                p->nnodes > 1 ? "port- and net-channel" : "port-channel");
    fprintf(out, "\n");
    fprintf(out, "  no deadlock:      %s: %ld signals, each matched by a wait on the same semaphore; %ld barriers; "
            "the simulated run completes\n", proof->deadlock_free ? yes : no, f.sync.nsignals, f.sync.nbarriers);
    fprintf(out, "  across calls:     %s: two back-to-back calls (each rank entering the next call once every rank "
            "ended this one and its caller read out and rewrote in) are race-free, %ld access pairs checked\n",
            proof->cross_call_safe ? yes : no, f.cross_pairs);
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
                "disjoint chunk ranges%s\n", proof->content && !cclc_coll_is_v(p->coll) ?
                "; transfers from scratch to scratch only move as much as an in/out chunk of their data's "
                "position holds, as the transfers that stored it" : "");
    else
        fprintf(out, "  pipeline-safe:    no: %s (slices run one at a time)\n",
                f.pipe_detail.n ? f.pipe_detail.s : "overlapping chunk ranges");
    free(f.det_detail.s);
    free(f.pipe_detail.s);
    cclc_arena_free(a);
}
