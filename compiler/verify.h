/* verify.h: what the verifier's files share; private to compiler/verify*.c.
 *
 * verify.c holds the proof's entry points (verify_program and verify_explain, declared
 * in cclc.h), which run the analyses of the other verify_*.c files, and the base those
 * all use: working memory, message strings, reporting, and the Shape of the program
 * being proved. A section below per file; non-static names carry the prefix vfy_. */
#ifndef VERIFY_H
#define VERIFY_H

#include "cclc.h"

enum {
    MAX_RACE_REPORTS = 4,     /* distinct statement pairs reported as races */
    MAX_POST_REPORTS = 4,     /* postcondition errors (one per writing statement) */
    MAX_STEP_REPORTS = 8,     /* layout / read-only errors (one per statement) */
    MAX_LISTED = 6,           /* contributions spelled out in one message */
    MAX_SEEN = 256,           /* remembered statement locations for de-duplication */
    MAX_CELLS = 1 << 23,      /* chunk cells simulated, all ranks and buffers */
    MAX_SYNC_SLOTS = 1 << 24, /* vector-clock entries: threads x threads, blocks x ranks */
};
#define MAX_CLOCK_WORK 2e9    /* vector-clock entries joined in one simulated call */

/* ===== verify.c: the base ===== */

/* calloc and realloc that never return NULL (out of memory is an internal error). */
void *vfy_xcalloc(size_t n, size_t size);
void *vfy_xrealloc(void *p, size_t size);

/* A growable string for building messages. */
typedef struct {
    char *s;
    size_t n, cap;
} Str;

__attribute__((format(printf, 2, 3))) void vfy_str_printf(Str *b, const char *fmt, ...);
const char *vfy_str_get(const Str *b); /* "" while empty */

/* Where errors go: to a Diag, or quietly (in-place and --explain re-runs). */
typedef struct {
    Diag *d;              /* NULL: quiet; count errors and keep the first message */
    int nerrors;
    char first[640];
} Reporter;

__attribute__((format(printf, 3, 4))) void vfy_error(Reporter *rep, SrcLoc loc, const char *fmt, ...);
__attribute__((format(printf, 3, 4))) void vfy_note(Reporter *rep, SrcLoc loc, const char *fmt, ...);

/* Remembers statement locations already reported, so one wrong line in a loop over N
 * ranks gives one message, not N. */
typedef struct {
    SrcLoc v[MAX_SEEN];
    int n;
} Seen;

int vfy_same_loc(SrcLoc a, SrcLoc b);
int vfy_seen_before(Seen *s, SrcLoc loc); /* whether loc was seen; remembers it */

/* The program's shape: its blocks by rank and thread block, its cells by buffer. */
typedef struct {
    const Program *p;
    int n, k, nb;
    int maxtb;            /* thread blocks of the launch: the most any rank uses */
    int *blk;             /* [rank * maxtb + tb]: block index, or -1 */
    int rank_cells;       /* chunks of all buffers of one rank */
    int *buf_base;        /* per buffer: its first cell within a rank */
    int show_tb;          /* messages name thread blocks only when there are several */
    int *vc_spare;        /* the last simulation's clock matrix, reused by the next: */
    size_t vc_spare_n;    /* at N = 64 with 64 blocks per rank it is 64 MB */
} Shape;

int vfy_block_of(const Shape *sh, int rank, int tb); /* the block index, or -1 */
const char *vfy_where_text(const Shape *sh, int rank, int tb, char *buf, size_t size);
const char *vfy_cell_text(const Shape *sh, int rank, int buf, int chunk, char *out, size_t size);
/* In place: maps a chunk of in onto the chunk of out it is (or out onto in). */
void vfy_inplace_alias(const Shape *sh, int rank, int *buf, int *chunk);

/* ===== verify_port.c: port-channel puts ===== */

/* Reports each port put the simulation cannot place at its statement (`inplace`: with
 * in and out aliased); returns the number of port puts. */
long vfy_check_port_puts(const Shape *sh, int inplace, Reporter *rep);

/* ===== verify_slices.c: instances and pipeline slices ===== */

/* Reports every scratch-only transfer of a program with instances. */
void vfy_check_instances(const Shape *sh, Reporter *rep);
/* Whether slices may interleave within a block; else why, in *detail (may be NULL). */
int vfy_check_pipeline_safe(const Shape *sh, Str *detail);

#endif
