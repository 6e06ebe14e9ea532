/* verify_base.h: the verifier's shared base (verify_base.c), private to compiler/verify*.c.
 *
 * What every analysis uses and none owns: working memory, message strings, reporting,
 * the Shape of the program being proved, the nodes chunk contents are made of and what
 * the collective requires of each out chunk, and the state of a simulated run. The
 * analyses (verify.h) include it; it calls nothing of theirs. Non-static names carry
 * the prefix cclc_vfy_. */
#ifndef VERIFY_BASE_H
#define VERIFY_BASE_H

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

typedef struct Sim Sim;       /* a simulated run, below */

/* ===== working memory, messages, reporting, the Shape ===== */

/* calloc and realloc that never return NULL (out of memory is an internal error). */
void *cclc_vfy_xcalloc(size_t n, size_t size);
void *cclc_vfy_xrealloc(void *p, size_t size);

/* A growable string for building messages. */
typedef struct {
    char *s;
    size_t n, cap;
} Str;

__attribute__((format(printf, 2, 3))) void cclc_vfy_str_printf(Str *b, const char *fmt, ...);
const char *cclc_vfy_str_get(const Str *b); /* "" while empty */

/* Where errors go: to a Diag, or quietly (in-place and --explain re-runs). */
typedef struct {
    Diag *d;              /* NULL: quiet; count errors and keep the first message */
    int nerrors;
    char first[640];
} Reporter;

__attribute__((format(printf, 3, 4))) void cclc_vfy_error(Reporter *rep, SrcLoc loc, const char *fmt, ...);
__attribute__((format(printf, 3, 4))) void cclc_vfy_note(Reporter *rep, SrcLoc loc, const char *fmt, ...);

/* Remembers statement locations already reported, so one wrong line in a loop over N
 * ranks gives one message, not N. */
typedef struct {
    SrcLoc v[MAX_SEEN];
    int n;
} Seen;

int cclc_vfy_same_loc(SrcLoc a, SrcLoc b);
int cclc_vfy_seen_before(Seen *s, SrcLoc loc); /* whether loc was seen; remembers it */

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

/* Fills sh from p (freed by cclc_vfy_shape_fini, with the last simulation's clocks). */
void cclc_vfy_shape_init(Shape *sh, const Program *p);
void cclc_vfy_shape_fini(Shape *sh);
int cclc_vfy_block_of(const Shape *sh, int rank, int tb); /* the block index, or -1 */
const char *cclc_vfy_where_text(const Shape *sh, int rank, int tb, char *buf, size_t size);
const char *cclc_vfy_cell_text(const Shape *sh, int rank, int buf, int chunk, char *out, size_t size);
/* In place: maps a chunk of in onto the chunk of out it is (or out onto in). */
void cclc_vfy_inplace_alias(const Shape *sh, int rank, int *buf, int *chunk);

/* ===== chunk contents, and what the collective requires of them ===== */

/* A chunk's content: an input contribution, initial garbage, or a sum of two nodes. */
enum { NODE_IN, NODE_GARBAGE, NODE_SUM };

typedef struct {
    int kind;
    int a, b, c;          /* IN: rank, chunk; GARBAGE: rank, buf, chunk; SUM: children */
    uint64_t hash;        /* sum of the leaves' hashes */
    uint64_t shape;       /* the tree, children unordered */
    int64_t count;        /* number of leaves, saturating */
    int pos;              /* position (chunk % K) of every IN leaf; -1 none, -2 mixed */
    int home;             /* the in chunk (rank * in_chunks + chunk) of every IN leaf, as
                             cclc_coll_home names it; -1 none, -2 mixed */
} Node;

typedef struct {
    Node *v;
    int n, cap;
    int k;
    int in_chunks;        /* chunks of `in` per rank, for Node.home */
} Nodes;

/* One leaf of a node's multiset with its multiplicity. */
typedef struct {
    int node;
    int64_t mult;
} Leaf;

/* The content hash of one leaf, independent of node numbering (expected sets are hashed
 * without creating nodes). */
uint64_t cclc_vfy_leaf_hash(int kind, int a, int b, int c);
/* Adds a node (a SUM's children a and b exist already); returns its index. */
int cclc_vfy_node_new(Nodes *ns, int kind, int a, int b, int c);
void cclc_vfy_nodes_fini(Nodes *ns);
/* The multiset of leaves under root, malloc'd in *out, sorted; returns their number. */
int cclc_vfy_node_leaves(const Nodes *ns, int root, Leaf **out);
/* What out@r[i] must hold: *nexp (rank, in chunk) pairs; 0 when unconstrained. */
int cclc_vfy_expected(const Shape *sh, int r, int i, int *exp_rank, int *exp_chunk, int *nexp);
/* ===== the simulated run's state (verify_simulate.c runs it) ===== */

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

struct Sim {
    Shape *sh;
    SimMode m;
    Reporter *rep;
    int ncells;
    int nt;               /* clock threads: the blocks, then one caller per rank */
    int *vc;              /* nt x nt: vc[b * nt + x] = what thread b knows of thread x */
    Snap **snap;          /* per block: its current clock as sent, or NULL */
    Snap *spare;          /* unused snapshots, recycled: they are nt ints each */
    QItem *spare_items;
    char *pending;        /* per block: a signal was sent; advance before the next access */
    int *pc, *call, *state;
    char *boundary;       /* per block: at the end of a call, waiting for its rank */
    char *entered;        /* per rank: its blocks ended the call and its caller acted; it waits
                             at the next call's entry for every rank */
    Sem *sem;             /* [(waiter block * ntags + tag) * n + signaler rank] */
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
    /* Layout violations are judged on this run's contents, which are the program's only
     * when it has no race: they are kept here and reported by cclc_vfy_sim_report_layout. */
    SrcLoc layout_loc[MAX_STEP_REPORTS];
    char *layout_msg[MAX_STEP_REPORTS];
    int layout_kept;
    /* Where the run records, per block, step and chunk, what data each data step moves:
     * for a v-collective its home (Proof.content), else its position (-1 none, -2
     * mixed; cclc_vfy_size_by_content); NULL: not recorded. */
    int ***record;
};

/* The cell of a chunk, as in-place aliasing places it. */
int cclc_vfy_sim_cell(const Sim *s, int rank, int buf, int chunk);
const Step *cclc_vfy_step_at(const Sim *s, int b, int i);
#endif
