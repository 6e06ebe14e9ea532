/* verify.h: the verifier's analyses, private to compiler/verify*.c.
 *
 * verify.c holds the proof's entry points (cclc_verify_program and cclc_verify_explain,
 * declared in cclc.h), the driver, which alone calls the analyses declared here, one
 * section per file. Each analysis uses only the base (verify_base.h): none calls another.
 * Non-static names carry the prefix cclc_vfy_. */
#ifndef VERIFY_H
#define VERIFY_H

#include "verify_base.h"

/* ===== verify_port.c: port-channel puts ===== */

/* Reports each port put the simulation cannot place at its statement (`inplace`: with
 * in and out aliased); returns the number of port puts. */
long cclc_vfy_check_port_puts(const Shape *sh, int inplace, Reporter *rep);

/* ===== verify_slices.c: instances and pipeline slices ===== */

/* raw: what the contents run recorded of every data step (Proof.content for a
 * v-collective; for a fixed-size one, per chunk, the position of the data it moves: -1
 * none, -2 mixed). */
/* A fixed-size collective's Proof.content: raw's rows of the scratch-only steps that
 * can be sized by the position of the data they move (every step touching their
 * scratch cells moves data of that position), NULL for every other step; NULL when
 * there is none. */
int ***cclc_vfy_size_by_content(Arena *a, const Shape *sh, int ***raw);
/* Reports every scratch-only transfer of a program with instances that cannot be sized
 * by its data. */
void cclc_vfy_check_instances(const Shape *sh, int ***raw, Reporter *rep);
/* Whether slices may interleave within a block; else why, in *detail (may be NULL). */
int cclc_vfy_check_pipeline_safe(const Shape *sh, int ***raw, Str *detail);

/* ===== verify_deadlock.c: counts and cycles ===== */

typedef struct {
    long nsignals, nwaits, nbarriers;
} SyncCounts;

/* Reports semaphores whose signals and waits do not balance; counts them in *sc. */
void cclc_vfy_check_sem_counts(const Shape *sh, Reporter *rep, SyncCounts *sc);
/* Reports barriers that some thread block of the rank does not reach. */
void cclc_vfy_check_barrier_counts(const Shape *sh, Reporter *rep);
/* Reports each cycle of blocked blocks of a stuck run (or, when there is none and
 * counts_reported is 0, one blocked block); returns the number of cycles. */
int cclc_vfy_report_deadlocks(const Sim *s, int counts_reported);

/* ===== verify_contents.c: the postcondition ===== */

/* Reports every wrong out chunk; returns their number, and in *checked how many out
 * chunks the collective constrains. */
int cclc_vfy_check_postcondition(const Sim *s, int *checked);
/* Whether every rank's out holds the same reduction trees; else an example in *detail
 * (which may be NULL). */
int cclc_vfy_check_deterministic(const Sim *s, Str *detail);

/* ===== verify_simulate.c: the simulated run ===== */

/* Prepares a run; -1 when the program is too large to simulate (then cclc_vfy_sim_fini). */
int cclc_vfy_sim_init(Sim *s, Shape *sh, SimMode m, Reporter *rep);
/* Runs every block until all are done or none can move (then s->stuck). */
void cclc_vfy_sim_run(Sim *s);
/* Reports the layout violations the run kept, unless it found a race (then the
 * contents, and any violation in them, are one interleaving's, not the program's). */
void cclc_vfy_sim_report_layout(Sim *s);
/* Frees the run; its clock matrix stays in the Shape for the next. */
void cclc_vfy_sim_fini(Sim *s);

#endif
