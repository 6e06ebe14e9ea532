/* perf.h: what the files of ccl-perf share (see perf.c for the tool).
 *
 *   perf.c     options, the --algo file's proof, the communicators and ranks: main
 *   worker.c   one rank: agreement among ranks, buffers, ops, checks, timing, the sweep
 *   data.c     the collectives' table; exactly verifiable data (the pattern tables)
 *   driver.c   NCCL, loaded with dlopen (the CUDA driver is the harness's)
 *   report.c   the table on stdout, CSV, JSON and the SVG plot; which NCCL mode a ratio
 *              is taken against */
#ifndef CCL_PERF_H
#define CCL_PERF_H

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ccl.h"
/* The runtime's bootstraps (threads in one process; processes under a launcher) and the
 * compiler's entry point, used to prove an --algo file before any communicator exists. */
#include "internal.h"
#include "harness.h"

#ifdef CCL_TOOLS_CHECK_PROTOTYPES
/* tests/perf/run.sh compiles driver.c once more with the real NCCL header so the
 * hand-written prototypes below are checked against it (see PERF_SAME_TYPE). */
#include <nccl.h>
#endif

#define PERF_VERSION "0.1.0"

enum {
    PERF_PERIOD = 1021,        /* the data pattern repeats every PERF_PERIOD elements */
    PERF_MAX_ITERS = 10000,
    PERF_MAX_SIZES = 64,
};

/* ===== the collectives, with nccl-tests' accounting ===== */

/* What -c names: the language's fixed-size collectives (in the compiler's order, so
 * perf_colls[c].lib converts), alltoallv (ccl_all_to_all_v on a count matrix) and
 * allgatherv (ccl_all_gather_v on a count vector; both from perf_v_row, as --v-counts
 * says), and sendrecv, which is no collective of the language: a ring of grouped
 * ccl_send/ccl_recv, as nccl-tests' sendrecv_perf. */
typedef enum {
    PERF_ALLREDUCE,
    PERF_ALLGATHER,
    PERF_REDUCE_SCATTER,
    PERF_ALLTOALL,
    PERF_BROADCAST,
    PERF_REDUCE,
    PERF_ALLTOALLV,
    PERF_SENDRECV,
    PERF_ALLGATHERV,
    PERF_NCOLLS
} PerfColl;

typedef struct {
    const char *name;       /* CCL's name, as in algorithm headers */
    const char *alias;      /* NCCL's spelling, accepted too */
    int reduces, rooted;
    int in_n, out_n;        /* buffer sizes: 1 = count elements, 0 = N * count */
    int lib;                /* the library's Collective (dispatch, --algo); -1: none */
    int p2p;                /* sendrecv and the v-collectives: out-of-place only */
} CollInfo;

extern const CollInfo perf_colls[PERF_NCOLLS];

static inline size_t in_elems(PerfColl c, int n, size_t count) { return perf_colls[c].in_n ? count : (size_t)n * count; }
static inline size_t out_elems(PerfColl c, int n, size_t count) { return perf_colls[c].out_n ? count : (size_t)n * count; }

/* nccl-tests: "bytes" is the full buffer (allgather: the receive size; reduce_scatter
 * and alltoall: the send size), and count is what the API takes for it. alltoallv's
 * bytes and count are what each rank sends in all (its sendcounts' sum), allgatherv's
 * the receive buffer, as allgather's (the recvcounts' sum), sendrecv's the one message
 * each rank sends. */
static inline size_t units_per_size(PerfColl c, int n)
{
    return c == PERF_ALLGATHER || c == PERF_REDUCE_SCATTER || c == PERF_ALLTOALL ? (size_t)n : 1;
}

/* busbw = algbw * factor (nccl-tests' PERFORMANCE.md; sendrecv as its sendrecv_perf). */
static inline double busbw_factor(PerfColl c, int n)
{
    switch (c) {
    case PERF_ALLREDUCE: return 2.0 * (n - 1) / n;
    case PERF_ALLGATHER:
    case PERF_ALLGATHERV:
    case PERF_REDUCE_SCATTER:
    case PERF_ALLTOALL:
    case PERF_ALLTOALLV: return (double)(n - 1) / n;
    default: return 1.0;
    }
}

/* ===== options ===== */

/* --nccl-mode: which ways NCCL is timed. plain: on the same unregistered buffers as ours
 * (CCL's heap, or ordinary memory under --buffers plain); sym: on buffers from
 * ncclMemAlloc registered as symmetric windows (NCCL 2.27+); best: both, where the
 * library has windows, and ratios against the faster. */
enum { PERF_NCCL_BEST, PERF_NCCL_PLAIN, PERF_NCCL_SYM };

/* --v-counts: the counts of alltoallv's matrix and allgatherv's vector (perf_v_row).
 * proportional: shares of 1 + ((q + 2p) mod (N+1)); zipf: a skewed expert load. */
enum { PERF_VCOUNTS_PROPORTIONAL, PERF_VCOUNTS_ZIPF };

/* --buffers: where the send and receive buffers come from. symmetric: ccl_mem_alloc (CCL's
 * heap, used in place); plain: ordinary memory (cuMemAlloc on a GPU, malloc on the CPU
 * backend), as a framework's tensors are, which CCL stages where its algorithm needs
 * symmetric memory; registered: the user's own memory registered with ccl_mem_register
 * once per buffer before any timing (on a GPU cuMemCreate memory as PyTorch's expandable
 * segments make it, which CCL then uses in place; on the CPU backend, in one process,
 * malloc memory, whose registration is recorded only, so CCL still stages it). NCCL's
 * plain mode runs on the same buffers in every case. */
enum { PERF_BUF_SYMMETRIC, PERF_BUF_PLAIN, PERF_BUF_REGISTERED };
/* --heap: fit (sized to the sweep, regions as large: every size runs whole), default
 * (libccl's, as a user who sizes nothing gets it), or a size; UNSET: fit for symmetric
 * buffers (they live in the heap), default for the others. */
enum { PERF_HEAP_UNSET, PERF_HEAP_FIT, PERF_HEAP_DEFAULT, PERF_HEAP_SIZE };

typedef struct {
    int coll;               /* PerfColl, or -1 until known */
    size_t minbytes, maxbytes;
    unsigned long step;     /* -f */
    ccl_dtype_t dtype;
    ccl_op_t op;
    int root;
    const char *algo;       /* --algo FILE */
    int graph, check;
    int hint_range;         /* --hint-range: only sizes in the --algo file's `sizes` hint */
    int compare_nccl;
    int nccl_mode;          /* PERF_NCCL_*: --nccl-mode */
    int buffers;            /* PERF_BUF_*: --buffers */
    int heap;               /* PERF_HEAP_*: --heap */
    size_t heap_bytes;      /* --heap SIZE */
    int v_counts;           /* PERF_VCOUNTS_*: --v-counts */
    int v_counts_given;     /* --v-counts was given (checked against --algo's collective) */
    const char *csv, *json, *plot;
    ccl_backend_t backend;
    int iters, warmup, repeats;
    int large_ops;          /* --large-ops: ops per graph from 16 MiB; 0: perf_graph_ops's default */
    int ranks;              /* --ranks; 0 = default */
    int timeout_ms;
    const char *size_arg[2];/* -b and -e as written, for messages */
} Opts;

/* Ops captured in one CUDA graph for a size: -n, and from 16 MiB on --large-ops or a fifth
 * of -n, as the NCCL baselines in ../shared/perf were timed. */
static inline int perf_graph_ops(const Opts *o, size_t bytes)
{
    if (bytes < ((size_t)16 << 20))
        return o->iters;
    if (o->large_ops)
        return o->large_ops;
    return o->iters >= 5 ? o->iters / 5 : o->iters;
}

/* Pattern tables: tab_in[r] holds rank r's PERF_PERIOD encoded input elements, tab_red
 * the reduced ones. Element i of any buffer built from a table is table[(pos0+i) % P]. */
typedef struct {
    size_t esize;
    unsigned char **tab_in;
    unsigned char *tab_red;
} Pattern;

/* ===== NCCL, loaded with dlopen (driver.c); the CUDA driver is the harness's (cuda.c) ===== */

#ifdef CCL_TOOLS_CHECK_PROTOTYPES
typedef ncclResult_t NcclResult;
typedef ncclComm_t NcclComm;
typedef ncclUniqueId NcclUniqueId;
typedef ncclDataType_t NcclDataType;
typedef ncclRedOp_t NcclRedOp;
#else
typedef int NcclResult;
typedef struct ncclComm *NcclComm;
typedef struct { char internal[128]; } NcclUniqueId;
typedef int NcclDataType;
typedef int NcclRedOp;
#endif
/* NCCL 2.27+'s window handle, and its flag for windows its symmetric kernels may use. */
#ifdef CCL_TOOLS_CHECK_PROTOTYPES
typedef ncclWindow_t NcclWindow;
#else
typedef struct ncclWindow_vidmem *NcclWindow;
#endif
enum { PERF_NCCL_WIN_COLL_SYMMETRIC = 0x01, PERF_NCCL_SYM_VERSION = 22700 };

typedef struct {
    NcclResult (*GetVersion)(int *);
    NcclResult (*GetUniqueId)(NcclUniqueId *);
    NcclResult (*CommInitRank)(NcclComm *, int, NcclUniqueId, int);
    NcclResult (*CommDestroy)(NcclComm);
    NcclResult (*AllReduce)(const void *, void *, size_t, NcclDataType, NcclRedOp, NcclComm, CuStream);
    NcclResult (*AllGather)(const void *, void *, size_t, NcclDataType, NcclComm, CuStream);
    NcclResult (*ReduceScatter)(const void *, void *, size_t, NcclDataType, NcclRedOp, NcclComm, CuStream);
    NcclResult (*Broadcast)(const void *, void *, size_t, NcclDataType, int, NcclComm, CuStream);
    NcclResult (*Reduce)(const void *, void *, size_t, NcclDataType, NcclRedOp, int, NcclComm, CuStream);
    NcclResult (*Send)(const void *, size_t, NcclDataType, int, NcclComm, CuStream);
    NcclResult (*Recv)(void *, size_t, NcclDataType, int, NcclComm, CuStream);
    NcclResult (*GroupStart)(void);
    NcclResult (*GroupEnd)(void);
    const char *(*GetErrorString)(NcclResult);
    /* Optional (NCCL 2.27+): NULL where the library lacks them. */
    NcclResult (*MemAlloc)(void **, size_t);
    NcclResult (*MemFree)(void *);
    NcclResult (*CommWindowRegister)(NcclComm, void *, size_t, NcclWindow *, int);
    NcclResult (*CommWindowDeregister)(NcclComm, NcclWindow);
} NcclApi;


/* What is known about NCCL: found or not, and which of its modes are timed. A mode
 * that is not timed has its reason, which the report prints. */
typedef struct {
    int wanted, available;    /* available: NCCL runs, in at least one mode */
    char path[PATH_MAX];
    int version;
    char why[512];            /* when not available */
    int sym_lib;              /* the library has symmetric windows (perf_nccl_load) */
    int plain, sym;           /* the modes timed; sym is cleared when registration fails */
    char sym_why[512];        /* why sym is not timed */
} NcclStatus;

/* ===== per-rank state ===== */

typedef struct Shared Shared;

typedef struct {
    double us;                /* median over samples of the max across ranks; <0: not run */
    long long wrong;          /* summed over ranks and checked ops; -1: not checked */
    int refused;              /* not run: the library returned CCL_ERR_UNSUPPORTED (ours only) */
} Stat;

/* What a Stat measured: ours, NCCL on plain buffers, NCCL on symmetric windows. */
enum { IMPL_CCL, IMPL_NCCL, IMPL_NCCL_SYM, NIMPL };
typedef struct {
    size_t bytes, count;
    char algo[40];            /* the algorithm our op ran */
    Stat st[NIMPL][2];        /* [IMPL_*][0 out-of-place, 1 in-place] */
} Row;

struct Shared {
    Opts o;
    PerfColl coll;
    int nranks;
    int processes;            /* one process per rank (else threads) */
    ccl_backend_t backend;    /* CPU or GPU, decided before init */
    size_t sizes[PERF_MAX_SIZES];
    int nsizes;
    Pattern pat;
    NcclStatus nc;
    char algo_name[128];
    Compilation algo_comp;    /* --algo, proved for N (its Program sizes the scratch) */
    char *algo_text;
    int64_t hint_lo, hint_hi; /* --algo's `sizes` hint (bytes of the API count); 0, 0: none */
    char method[512];         /* the timing method, for the header and outputs */
    char heap[160];           /* the heap the comms got, for the header ("": not said) */
    char devname[128];
    char refused_why[512];    /* the library's message for the first op it refused; "": none */
    size_t v_recv_max;        /* alltoallv: the most elements a rank receives (v_max_recv) */
    Row rows[PERF_MAX_SIZES];
};

typedef struct {
    Shared *sh;
    const Opts *o;
    ccl_comm_t *comm;
    const ccl_bootstrap_t *boot;
    int rank, nranks, device;
    int gpu;
    ToolGpu g;                   /* GPU backend: the rank's stream, events, graph */
    void *sendbuf, *recvbuf;     /* ours and NCCL's plain mode's (--buffers) */
    size_t send_cap, recv_cap;   /* bytes */
    size_t mapped[2];            /* --buffers registered on a GPU: the bytes mapped for each */
    ccl_mem_reg_t *reg[2];       /* --buffers registered: their registrations; NULL: none */
    /* The v-collectives at the current size (v_setup), in elements, segments packed in
     * rank order: what this rank sends each peer and where, what it receives from each
     * and where, and where that segment starts in the sender's input (for --check).
     * allgatherv: v_recv is the count vector (this rank sends v_recv[rank], from the
     * start of its input); v_send and v_sdispl are unused. */
    size_t *v_send, *v_sdispl, *v_recv, *v_rdispl, *v_src_pos;
    size_t v_recv_total;
    unsigned char *host;         /* host image of a device buffer (GPU backend) */
    ccl_algorithm_t *alg;
    NcclComm ncomm;
    int nccl_on;
    int nccl_plain, nccl_sym;    /* the NCCL modes this rank times (agreed) */
    void *sym_sendbuf, *sym_recvbuf;  /* ncclMemAlloc'd, send_cap and recv_cap bytes */
    NcclWindow sym_win[2];       /* their windows; NULL: not registered */
    int exit_code;
    /* A failing rank never exit()s: other ranks' threads (and, on GPUs, the CUDA
     * driver's) still run, and exit() in a thread tears down libraries under them
     * (several ranks failing at once called exit() concurrently and corrupted the C
     * heap). worker_fail longjmps back to perf_worker(), which frees what the rank holds;
     * main() destroys the comms after every thread returned. */
    jmp_buf fail_jmp;
    int in_worker;               /* fail_jmp is set */
    int failed;                  /* worker_fail ran: peers may be anywhere */
    CclThreadBoot *tb;           /* threads mode: failed by worker_fail to wake peers */
    void *agree_buf[3];          /* agree_*'s scratch, freed by perf_worker(), so a failure
                                    inside an agreement leaks nothing */
    size_t agree_cap[3];
} Worker;

extern NcclApi perf_nccl;

/* worker.c: one rank's run, a thread of tool_launch_run (arg: its Worker); the sum of
 * v over every rank (-1 when any is negative), collective; CCL_PERF_INJECT_WRONG and
 * CCL_PERF_INJECT_UNSUPPORTED, read by main (tests/perf: a wrong result and a refusal,
 * made on purpose). */
void *perf_worker(void *arg);
long long perf_agree_sum(Worker *w, long long v);
extern size_t perf_inject_wrong, perf_inject_unsupported;

/* data.c */
void perf_pattern_init(Pattern *p, int n, PerfColl c, ccl_op_t op, ccl_dtype_t t);
void perf_v_counts(int n, size_t total, int q, size_t *counts);
void perf_v_counts_zipf(int n, size_t total, int q, size_t unit, size_t *counts);
void perf_v_row(int kind, int n, size_t total, int q, size_t esize, size_t *counts);
const char *perf_v_counts_name(int kind);
void perf_pattern_fini(Pattern *p, int n);
void perf_pattern_fill(unsigned char *dst, size_t pos0, size_t n, const unsigned char *tab, size_t es);
long long perf_pattern_wrong(const unsigned char *buf, size_t pos0, size_t n, const unsigned char *tab, size_t es);

/* driver.c */
NcclDataType perf_nccl_dtype(ccl_dtype_t t);
NcclRedOp perf_nccl_op(ccl_op_t op);
void perf_nccl_load(NcclStatus *st);
int perf_nccl_sym_check(int version, const char *path, const char *missing, char *why, size_t len);
void perf_nccl_modes(NcclStatus *st, int mode);

/* report.c */
void perf_fmt_size(char *buf, size_t len, size_t bytes);
int perf_nccl_faster(const Row *row, int placement);
double perf_ratio(const Row *row, int placement, int *against);
const char *perf_nccl_mode_name(int impl);
const char *perf_buffers_name(int buffers);
void perf_print_header(const Shared *sh);
void perf_print_row(const Shared *sh, const Row *row);
void perf_print_footer(const Shared *sh, long long *total_wrong);
int perf_refused_sizes(const Shared *sh);
int perf_write_csv(const Shared *sh, const char *path);
int perf_write_json(const Shared *sh, const char *path);
int perf_write_svg(const Shared *sh, const char *path);

#endif
