/* cclc.h: the compiler's one internal header, a section per file.
 *
 * The pipeline (cclc_compile_source() in compile.c is the flat list of calls; the cclc driver
 * that calls it lives in tools/cclc/, libccl calls it from runtime/src/algorithm.c):
 *
 *   source --grammar/ccl.l, ccl.y (parse_ctx.h)--> Ast
 *          --expand.c (for a concrete N)--> Program   (per rank, per thread block steps)
 *          --verify.c--> proof or diagnostics          (its analyses in verify_simulate.c,
 *                        verify_contents.c, verify_deadlock.c, verify_port.c,
 *                        verify_slices.c, sharing verify.h)
 *          --schedule.c--> Plan                       (fused ops, semaphores, barriers)
 *          --plan.c--> text or JSON                   (cclc plan)
 *          --emit_cuda.c--> CUDA C                    (cclc cuda; the device code it
 *                        prepends is cuda/prelude.cuh over cuda/abi.h, embedded at build
 *                        time)
 *
 * Underneath: arena.c (allocation, out of memory), diag.c (messages), namemap.c (name
 * lookups), ast.c (names of the enumerations). Every structure a compilation builds
 * lives in one Arena and is freed with it. The compiler includes nothing from runtime/
 * or tools/.
 */
#ifndef CCLC_H
#define CCLC_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CCLC_VERSION "0.1.0"

/* Hard limits, each reported as a clear error when a program exceeds it. */
enum {
    CCLC_MAX_RANKS = 1024,        /* the largest N any program may be expanded for */
    CCLC_MAX_STEPS = 1 << 18,     /* steps of one expanded program, all ranks together (peak memory at the limit: about 200 MB) */
    CCLC_MAX_NESTING = 64,        /* nested blocks (for/if/on) in the source */
    CCLC_MAX_CHUNKS = 1 << 16,    /* chunks of any one buffer */
    CCLC_MAX_ERRORS = 20,         /* diagnostics kept per compilation */
};

/* ===== arena.c: bump allocation, freed whole ===== */

typedef struct Arena Arena;
Arena *cclc_arena_new(void);
void cclc_arena_free(Arena *a);
/* Zeroed; never returns NULL: on failure it jumps to this thread's cclc_oom_jump (or,
 * with none set, internal_error). */
void *cclc_arena_alloc(Arena *a, size_t size);
char *cclc_arena_strndup(Arena *a, const char *s, size_t n);
char *cclc_arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Heap memory a pass frees itself (calloc/realloc), failing as cclc_arena_alloc does. */
void *cclc_calloc(size_t n, size_t size);
void *cclc_realloc(void *p, size_t size);
/* Makes this thread's allocation failures longjmp(*env, 1) (NULL: internal_error);
 * returns the previous setting, to be restored. cclc_compile_source uses it. */
jmp_buf *cclc_oom_jump(jmp_buf *env);

/* A growable array of pointers or small structs, backed by the arena. */
#define VEC(T) struct { T *v; int n, cap; }
#define vec_push(arena, vec, item)                                                        \
    do {                                                                                  \
        if ((vec)->n == (vec)->cap) {                                                     \
            int ncap_ = (vec)->cap ? 2 * (vec)->cap : 8;                                  \
            void *nv_ = cclc_arena_alloc((arena), sizeof(*(vec)->v) * (size_t)ncap_);          \
            if ((vec)->n) memcpy(nv_, (vec)->v, sizeof(*(vec)->v) * (size_t)(vec)->n);   \
            (vec)->v = nv_;                                                               \
            (vec)->cap = ncap_;                                                           \
        }                                                                                 \
        (vec)->v[(vec)->n++] = (item);                                                    \
    } while (0)

/* ===== namemap.c: names to small integers, for lookups in constant time ===== */

typedef struct {
    const char **keys;        /* NULL: an empty slot */
    int *vals;
    int n, cap;               /* cap: 0 or a power of two */
} NameMap;                    /* zero-initialized: empty */
int cclc_namemap_get(const NameMap *m, const char *name); /* -1 when absent */
void cclc_namemap_put(NameMap *m, Arena *a, const char *name, int value);

/* ===== diag.c: diagnostics with source lines and carets ===== */

/* A source position. line and col are 1-based; len is the underline width (>= 1). */
typedef struct {
    int line, col, len;
} SrcLoc;

typedef struct {
    const char *file;   /* name shown in messages */
    const char *text;   /* the whole source, NUL-terminated (NULs inside are reported) */
    size_t size;
} Source;

/* Collects errors of one compilation. Messages are rendered into `out` as
 *   FILE:LINE:COL: error: MESSAGE
 *    SOURCE LINE
 *        ^~~~
 * and optional notes ("FILE:LINE:COL: note: ..."). */
typedef struct Diag {
    const Source *src;
    int nerrors;
    int truncated;      /* more than CCLC_MAX_ERRORS errors were reported */
    char *out;          /* malloc'd, NUL-terminated rendering of everything reported */
    size_t len, cap;
    /* Cause first: while `deferring`, errors and notes go to `later` instead (effects
     * such as a signal never waited for, which follow from a race or a missing wait
     * elsewhere); cclc_diag_settle appends them after the causes. */
    int deferring;
    size_t later_at;    /* where in out the deferral began */
    char *later;
    size_t later_len, later_cap;
    int nlater;
    /* After cclc_diag_settle: out[0 .. causes_len) holds the root causes, and `effects`
     * errors (counted in nerrors) follow them. effects == 0: everything is a cause. */
    size_t causes_len;
    int causes, effects;
} Diag;

void cclc_diag_init(Diag *d, const Source *src);
void cclc_diag_fini(Diag *d);
void cclc_diag_error(Diag *d, SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void cclc_diag_note(Diag *d, SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Starts (on = 1) or stops deferring errors as possible effects of others. */
void cclc_diag_defer(Diag *d, int on);
/* Appends the deferred errors after those reported since `errors_before` errors: when
 * there were some, they are the causes and the deferred ones their effects; when there
 * were none, the deferred errors are the causes. */
void cclc_diag_settle(Diag *d, int errors_before);
/* An error with no source position (usage-level problems such as "N out of range"). */
void cclc_diag_plain(Diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Bugs in the compiler itself; never for user mistakes. */
#define internal_error(...) ccl__internal_error(__FILE__, __LINE__, __VA_ARGS__)
_Noreturn void ccl__internal_error(const char *file, int line, const char *fmt, ...);

/* ===== ast.c: the syntax tree built by grammar/ccl.y ===== */

typedef enum {
    COLL_ALLREDUCE,
    COLL_ALLGATHER,
    COLL_REDUCE_SCATTER,
    COLL_ALLTOALL,
    COLL_BROADCAST,
    COLL_REDUCE,
    /* Variable-size collectives: each rank's segment has its own element count, known
     * only at run time. A program for one is written, and proved, exactly as for its
     * fixed-size sibling (cclc_coll_base); sizes never change which chunk holds what. */
    COLL_ALLGATHERV,
    COLL_ALLTOALLV,
} Collective;
#define CCLC_NUM_COLLS 8

typedef enum { PROTO_SIMPLE, PROTO_LL, PROTO_LL128 } Protocol;
/* memory: loads and stores into a peer's mapped memory; port: puts a host proxy serves (the
 * copy engine on one node); net: puts and signals between nodes, which a host proxy posts
 * to the inter-node transport (Open MPI). Port and net puts are asynchronous alike:
 * each lands some time before its block's next flush of the peer (cclc_chan_async). */
typedef enum { CHAN_NONE, CHAN_MEMORY, CHAN_PORT, CHAN_NET } ChannelKind;
static inline int cclc_chan_async(ChannelKind c) { return c == CHAN_PORT || c == CHAN_NET; }
#define CHAN_BIT(c) (1u << (c))

typedef enum {
    STEP_PUT,     /* dst on a peer, src local */
    STEP_GET,     /* dst local, src on a peer */
    STEP_COPY,    /* both local */
    STEP_REDUCE,  /* dst = op(srcs), any mix of local and remote operands */
    STEP_SIGNAL,
    STEP_WAIT,
    STEP_BARRIER,
    STEP_FLUSH,
} StepKind;

typedef enum {
    EX_INT, EX_NAME, EX_UNARY, EX_BINARY, EX_CALL,
    EX_COND,              /* cond ? lhs : rhs */
    EX_FOLD,              /* name(var in cond..rhs : lhs): sum, min or max of lhs */
} ExprKind;

typedef struct Expr Expr;
struct Expr {
    ExprKind kind;
    SrcLoc loc;
    int64_t value;        /* EX_INT */
    const char *name;     /* EX_NAME, EX_CALL (function name) */
    int op;               /* EX_UNARY, EX_BINARY: a token code from the grammar */
    Expr *lhs, *rhs;      /* operands; EX_CALL arguments are lhs and rhs (rhs may be NULL) */
    Expr *cond;           /* EX_COND: the condition; only the branch it picks is evaluated;
                             EX_FOLD: the range's low end (rhs its high end, lhs the body) */
    const char *var;      /* EX_FOLD: the variable bound to each value of the range */
    int depth;            /* 1 + the deeper operand's: at most CCLC_MAX_EXPR_DEPTH */
};

/* How deep an expression's operator tree may be. The parser's stack bounds nesting by
 * parentheses and right-leaning operators; left-leaning chains (`0 + 0 + ... + 0`) it
 * reduces as it goes, so the grammar counts their depth itself: every later pass may
 * then walk an expression recursively without exhausting the stack. */
#define CCLC_MAX_EXPR_DEPTH 1000

/* A set of integers: a single expression, `others`, `all`, or a comprehension
 * { elem : var in lo..hi, cond }. */
typedef enum { SET_ONE, SET_OTHERS, SET_ALL, SET_COMPREHENSION } SetKind;
typedef struct {
    SetKind kind;
    SrcLoc loc;
    Expr *elem;           /* SET_ONE: the value; SET_COMPREHENSION: the element */
    const char *var;      /* SET_COMPREHENSION */
    Expr *lo, *hi, *cond; /* SET_COMPREHENSION; cond may be NULL */
} SetExpr;

/* buf[index], buf[lo..hi], buf@peer[index]; peer and index may be sets. */
typedef struct {
    SrcLoc loc;
    const char *buf;
    SetExpr *peer;        /* NULL for a local reference */
    SetExpr *index;       /* the chunk (or chunk set); NULL when a range is given */
    Expr *lo, *hi;        /* a half-open chunk range lo..hi */
} AstRef;

typedef enum {
    ST_FOR, ST_IF, ST_LET, ST_ON, ST_STEP, ST_CONNECT, ST_SCRATCH,
} StmtKind;

typedef struct Stmt Stmt;
typedef VEC(Stmt *) StmtList;
typedef VEC(AstRef *) RefList;

struct Stmt {
    StmtKind kind;
    SrcLoc loc;
    /* ST_FOR: var in lo..hi { body }; ST_LET: var = value */
    const char *var;
    Expr *lo, *hi, *value;
    /* ST_IF: if cond { body } else { orelse } */
    Expr *cond;
    StmtList body, orelse;
    /* ST_ON: on rank [tb tb] { body }; tb may be NULL (the scheduler picks) */
    Expr *rank, *tb;
    /* ST_STEP */
    StepKind step;
    AstRef *dst;
    RefList srcs;
    SetExpr *peers;       /* signal, wait, flush */
    const char *tag;      /* signal[tag], wait[tag]: a named semaphore; NULL: the unnamed one */
    /* ST_CONNECT: connect KIND all | connect KIND a <-> b. ST_STEP (put, get, reduce): the
     * channel the step names, CHAN_NONE when it names none. */
    ChannelKind chan;
    Expr *end_a, *end_b;  /* both NULL for `all` */
    /* ST_SCRATCH: scratch var[value] */
};

typedef struct {
    const char *name;
    SrcLoc name_loc;
    Collective coll;
    SrcLoc coll_loc;
    const char *nvar;         /* the rank-count variable of `ranks N in lo..hi` */
    Expr *ranks_lo, *ranks_hi;/* inclusive bounds */
    SrcLoc ranks_loc;
    const char *nodes_var;    /* `nodes M x L`: the node count's name (NULL: one node) */
    const char *local_var;    /* ... and the name of the ranks per node */
    SrcLoc nodes_loc;
    VEC(Expr *) where;        /* constraints that must hold for N */
    Expr *chunks;             /* chunk factor K (default 1) */
    const char *chunks_name;  /* `chunks NAME = EXPR`: the name K goes by; NULL: "K" */
    SrcLoc chunks_name_loc;
    Protocol protocol;
    int64_t size_lo, size_hi; /* `sizes` hint in bytes; 0 when absent */
    Expr *instances;          /* default 1 */
    Expr *pipeline;           /* default slices, 1 when absent */
    StmtList body;            /* lets, scratch, connect, for, if, on */
} Ast;

const char *cclc_coll_name(Collective c);
/* The fixed-size collective whose chunk structure, pre- and postcondition c shares:
 * allgather for allgatherv, alltoall for alltoallv, c itself otherwise. */
Collective cclc_coll_base(Collective c);
/* 1 for allgatherv and alltoallv. */
int cclc_coll_is_v(Collective c);
/* 1 where a run of c with protocol p uses LL128's lines: ll128 on a fixed-size collective
 * (a v-collective asked for ll128 gets LL's lines; the emitter and the GPU backend's
 * layout both ask here). */
int cclc_lines_ll128(Collective c, Protocol p);
const char *cclc_proto_name(Protocol p);
int cclc_proto_parse(const char *name); /* the Protocol spelt `name`, or -1 */
const char *cclc_step_name(StepKind k);

/* ===== grammar/ccl.y (with ccl.l): the reentrant Flex/Bison front end ===== */

/* Parses src into an Ast in the arena. Returns NULL after reporting every syntax error
 * (without cascades) to d. */
Ast *cclc_parse_source(Arena *a, const Source *src, Diag *d);

/* ===== expand.c: instantiate for a concrete N ===== */

/* Buffer ids in a Program: 0 is `in`, 1 is `out`, 2.. are the scratch buffers in
 * declaration order. */
enum { BUF_IN = 0, BUF_OUT = 1, BUF_SCRATCH0 = 2 };

/* A run of chunks [chunk, chunk+count) of buffer `buf` on rank `rank`. */
typedef struct {
    int buf;
    int rank;
    int chunk;
    int count;
} Ref;

/* Whether a and b share a chunk: the same buffer of the same rank, overlapping ranges. */
static inline int ref_ranges_overlap(Ref a, Ref b)
{
    return a.rank == b.rank && a.buf == b.buf && a.chunk < b.chunk + b.count && b.chunk < a.chunk + a.count;
}

/* One expanded step, on one rank and thread block. */
typedef struct {
    StepKind kind;
    SrcLoc loc;           /* the statement it came from */
    Ref dst;              /* data steps */
    int nsrc;
    Ref *src;
    int peer;             /* signal, wait, flush */
    int tag;              /* signal, wait: the semaphore's name, 0 (unnamed) .. ntags-1 */
    ChannelKind chan;     /* the channel a remote operand goes through (CHAN_NONE if local) */
} Step;

typedef struct {
    int rank;
    int tb;               /* logical thread block on that rank */
    int nsteps;
    Step *steps;
} Block;

typedef struct {
    const char *name;
    SrcLoc name_loc;
    Collective coll;
    int nranks;           /* N */
    int nnodes;           /* M: the ranks are M nodes of N / M ranks, rank r on node r / (N / M) */
    int local;            /* L = N / M, ranks per node */
    int root;             /* broadcast, reduce; 0 otherwise */
    int chunks;           /* K: chunks per unit */
    Protocol protocol;
    int instances;
    int pipeline;         /* default slices per chunk */
    int64_t size_lo, size_hi;
    int nbufs;            /* 2 + number of scratch buffers */
    const char **buf_name;
    int *buf_chunks;      /* chunk count of each buffer (same on every rank) */
    SrcLoc *buf_loc;      /* declaration of each scratch buffer (in/out: the header) */
    unsigned char *chans; /* nranks*nranks: chans[a*nranks+b], the channels connecting a and b,
                           * as bits CHAN_BIT(CHAN_MEMORY) | CHAN_BIT(CHAN_PORT) within a node,
                           * CHAN_BIT(CHAN_NET) between nodes; 0: none */
    int ntags;            /* semaphore names: 1 (the unnamed one) + those signal[NAME] uses */
    const char **tag_name;/* [ntags]: tag_name[0] is NULL */
    int nblocks;
    Block *blocks;        /* ordered by rank, then tb; tbs of a rank are 0..ntb(rank)-1 */
    int *ntb;             /* per rank: number of logical thread blocks */
} Program;

/* Chunk counts of `in` and `out` for a collective (units of K chunks each). */
int cclc_coll_in_chunks(Collective c, int nranks, int k);
int cclc_coll_out_chunks(Collective c, int nranks, int k);
/* The in chunk (as q * in_chunks + i, for in@q[i]) whose data belongs in chunk `chunk`
 * of buffer `buf` (BUF_IN or BUF_OUT) of rank `rank` of a collective that moves data
 * without reducing it (allgather(v), alltoall(v), broadcast); -1 for the others. For a
 * v-collective this names the segment (the in unit q, i / K) and so its run-time size. */
int cclc_coll_home(Collective c, int nranks, int k, int root, int buf, int rank, int chunk);

/* Checks that the Ast admits N ranks (its `ranks` range and `where` constraints) and
 * `root`; reports why not and returns 0 otherwise. Not admitting N is a usage matter
 * (cclc exits 2), unlike an error in the program. */
int cclc_expand_admits(const Ast *ast, int nranks, int nnodes, int root, Diag *d);

/* Expands the Ast for N ranks (and `root` for rooted collectives). Returns NULL after
 * reporting every well-formedness error (bad indices, missing channels, empty sets,
 * failed constraints, limits) to d. */
Program *cclc_expand_program(Arena *a, const Ast *ast, int nranks, int nnodes, int root, Diag *d);

/* ===== verify.c: the proof (its analyses in verify_*.c share verify.h) ===== */

/* What cclc_verify_program established; printed by `cclc check --explain`. */
typedef struct {
    int postcondition;    /* every out chunk holds exactly what the collective requires */
    int race_free;
    int deadlock_free;
    int cross_call_safe;  /* two back-to-back calls are race-free */
    int inplace_ok;       /* the program is also correct with in == out (when shapes allow) */
    int inplace_applicable;
    int deterministic;    /* every element reduced in the same order on every rank */
    int pipeline_safe;    /* slices of chunks may be interleaved (see schedule.c) */
    char *inplace_reason; /* why in-place fails, arena string; NULL when it holds */
    /* What data step i of block b moves, per chunk j: content[b][i][j]. v-collectives:
     * the in chunk (q * in_chunks + i, as cclc_coll_home) whose data it moves, or -1 for
     * data that never came from an input (uninitialized scratch); it fixes the segment,
     * and so the run-time length, of every chunk a data op moves. Fixed-size
     * collectives: only for the scratch-only steps that are sized by their data (else
     * content[b][i] is NULL, and content is NULL when there is none), the position c
     * (0..K-1) of the data, so that the step moves as much as an in/out chunk of
     * position c holds (verify_slices.c, docs/internals.md). */
    int ***content;
} Proof;

/* Proves the program; returns 0 when every property holds, else reports each failure
 * (with counter-examples and source locations) to d and returns -1. The in-place and
 * determinism results never fail the proof; they are recorded in *proof. */
int cclc_verify_program(Arena *a, const Program *p, Proof *proof, Diag *d);
void cclc_verify_explain(FILE *out, const Program *p, const Proof *proof);

/* ===== schedule.c: the plan IR ===== */

typedef enum {
    OP_XFER,      /* for each dst: dst = reduce(src...) (one src: a copy), chunk by chunk */
    OP_SIGNAL,    /* release-add 1 to each peer's semaphore for this thread block */
    OP_WAIT,      /* acquire-wait for the next signal from each peer */
    OP_BARRIER,   /* all thread blocks of this rank */
    OP_FLUSH,     /* port channels: wait until earlier puts to the peers completed */
    OP_SYNC,      /* intra-block barrier (threads of one block) inserted for a hazard */
} OpKind;

typedef struct {
    OpKind kind;
    int ndst, nsrc;
    Ref *dst, *src;       /* all Refs of one op have the same count */
    ChannelKind chan;     /* CHAN_PORT or CHAN_NET when the op is served by a host proxy */
    int npeer;
    int *peer;            /* signal, wait, flush */
    int *sem;             /* per peer: semaphore slot index (see plan_sem_slot) */
    int nlines;
    int *lines;           /* source lines this op came from, ascending */
    /* OP_XFER only (else NULL), per chunk j of the op, what it moves (Proof.content):
     * v-collectives: the in chunk whose data it moves; the backend sizes chunk j by that
     * segment. Fixed-size collectives, ops from scratch to scratch only: the position c
     * of the data it moves; the backend moves no more than an in/out chunk of position c
     * holds. */
    int *content;
} PlanOp;

typedef struct {
    int rank, tb;
    int nops;
    PlanOp *ops;
} PlanBlock;

typedef struct {
    const Program *prog;  /* what the plan was scheduled from */
    Proof proof;
    int nranks;
    int ntb;              /* logical thread blocks per rank (max over ranks) */
    int nsems;            /* semaphore slots per rank */
    int nblocks;
    PlanBlock *blocks;    /* ordered by rank, then tb */
} Plan;

/* The semaphore slot on rank `waiter` that `signaler` increments for thread block tb.
 * Slots are per (logical tb, peer); instances multiply them at launch. A named semaphore
 * (tag t of ntags) has its own slots: tb is then t * ntb + the block's tb, as if each
 * name had thread blocks of its own (the backends compute slots from sem / nranks). */
static inline int plan_sem_slot(int nranks, int tb, int signaler) { return tb * nranks + signaler; }

Plan *cclc_schedule_program(Arena *a, const Program *p, const Proof *proof);
/* Whether rank `rank`'s blocks (any rank's, for rank < 0) have port-channel puts, the
 * transfers a GPU's host proxy serves. */
int cclc_plan_has_port_puts(const Plan *plan, int rank);
/* The most logical thread blocks of any rank whose blocks meet at a barrier of all of
 * them (OP_BARRIER), or 0 where no rank has one. Times the instances, that is the grid
 * a GPU must hold at once: a block that never gets a multiprocessor leaves the others
 * waiting at the barrier. The same number on every rank. */
int cclc_plan_barrier_blocks(const Plan *plan);
/* Whether a line protocol (ll, ll128) can carry the program's data at all: not where it
 * uses named semaphores (lines pair a wait with the signal at the same position), reads
 * a peer's memory or puts by port channel. Where it cannot, a GPU runs the program as
 * Simple whatever protocol is asked for. */
int cclc_plan_can_run_lines(const Plan *plan);
/* Whether the plan is one copy of the whole of in into out on a single rank, chunk i to
 * chunk i (every fixed-size collective at N = 1): a backend may run it as a plain copy,
 * and in place as nothing. */
int cclc_plan_is_copy(const Plan *plan);

/* ===== plan.c: printing the plan ===== */

void cclc_plan_print_text(FILE *out, const Plan *plan);
void cclc_plan_print_json(FILE *out, const Plan *plan);

/* ===== emit_cuda.c: CUDA C for one rank ===== */

typedef struct {
    const char *dtype;    /* "f32", "bf16", ... */
    const char *op;       /* "sum", "prod", "min", "max", "avg" */
    Protocol protocol;    /* may override the program's default */
    int kernel_only;      /* leave out the prelude (compiler/cuda/prelude.cuh): for golden files */
} EmitOptions;

/* The most ranks a v-collective's kernel serves (its blocks keep every rank's segment
 * table in shared memory). */
enum { CCLC_EMIT_V_MAX_RANKS = 32 };
/* Why the emitter cannot write CUDA for this plan (a v-collective for more than
 * CCLC_EMIT_V_MAX_RANKS ranks), or NULL when it can. Callers check it first. */
const char *cclc_emit_cuda_refusal(const Plan *plan);
/* Writes the kernel source for `rank` to out. Deterministic: same plan, same bytes.
 * The plan must pass cclc_emit_cuda_refusal. */
void cclc_emit_cuda(FILE *out, const Plan *plan, int rank, const EmitOptions *opt);
/* Whether every rank's kernel for protocol `proto` moves all its remote data as lines
 * (LL or LL128) into the peers' line regions: then no rank touches a peer's in or out
 * (each receives lines into its own buffers), and ordinary buffers need no staging. Never
 * for Simple. */
int cclc_emit_cuda_lines_only(const Plan *plan, Protocol proto);

/* ===== compile.c: the whole pipeline as a library call (used by libccl) ===== */

typedef struct {
    Arena *arena;
    Source src;
    Ast *ast;
    Program *prog;
    Plan *plan;
    Proof proof;
    Diag diag;            /* rendered diagnostics when compilation failed */
} Compilation;

/* What cclc_compile_source says. */
typedef enum {
    COMPILE_OK = 0,
    COMPILE_ERRORS = -1,          /* errors in the program (in c->diag.out) */
    COMPILE_NOT_ADMITTED = -2,    /* its `ranks`/`where` lines exclude N (or root is invalid) */
    COMPILE_OUT_OF_MEMORY = -3,   /* an allocation failed; c->diag.out says so where it could */
} CompileResult;

/* Parses, expands, verifies and schedules. Never aborts on allocation failure. On
 * failure the diagnostics are in c->diag.out. Call cclc_compilation_free in every case. */
CompileResult cclc_compile_source(Compilation *c, const char *file, const char *text, size_t size, int nranks,
                   int root);
/* The same for N ranks that are `nnodes` nodes of N / nnodes ranks each (rank r on node
 * r / (N / nnodes)): only a program with a `nodes M x L` line admits nnodes > 1, and
 * cclc_compile_source is this with nnodes = 1. */
CompileResult cclc_compile_source_nodes(Compilation *c, const char *file, const char *text, size_t size, int nranks,
                                        int nnodes, int root);
void cclc_compilation_free(Compilation *c);
/* cclc_emit_cuda for libccl (the GPU backend): 0, or -1 when out of memory instead of an
 * abort (heap memory cclc_emit_cuda held then is lost). */
int cclc_compile_emit_cuda(FILE *out, const Plan *plan, int rank, const EmitOptions *opt);

#endif
