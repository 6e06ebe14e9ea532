/* harness.h: what ccl-perf, ccl-tune and cclc (check, plan, cuda, run) share to drive
 * libccl from the command line. One section per file of tools/common/:
 *
 *   options.c  the command line: one reader of options ("-b 1K", "-b1K", "--minbytes=1K"),
 *              one parser of sizes and counts (ccl__parse_size's syntax), and the values
 *              every tool takes (--ranks, --dtype, --op, --iters, --timeout-ms, --backend),
 *              each with one message; choices among words; reading a named file whole.
 *   launch.c   the ranks: one process per rank under a launcher (the environment
 *              bootstrap), else one process with a thread per rank (ccl_comm_init_all).
 *   agree.c    agreement among ranks: an allgather of any size over a rank's bootstrap.
 *   cuda.c     the CUDA driver (dlopen, as the tools link nothing but libccl): a rank's
 *              GPU (its device's primary context, a stream, event pairs, a captured
 *              graph) and copies to and from device buffers. No tool calls the driver
 *              itself.
 *   timing.c   the host clock, the median of samples, and the GPU's clock: events around
 *              work on the rank's stream, and CUDA graphs captured from it and replayed
 *              (over cuda.c, which never calls it).
 *   data.c     exactly verifiable data: which integers a dtype holds exactly, and
 *              storing one as an element.
 *
 * The tools link this folder's archive (libtools.a) before libccl; nothing in runtime/ or compiler/ calls
 * back into them. Names carry the prefix tool_. */
#ifndef CCL_TOOLS_HARNESS_H
#define CCL_TOOLS_HARNESS_H

#include <stdint.h>
#include <stdio.h>

#include "ccl.h"

#ifdef CCL_TOOLS_CHECK_PROTOTYPES
/* tests/perf/run.sh compiles cuda.c once more with the real cuda.h, so the hand-written
 * prototypes (ToolCudaApi, in cuda.c) are checked against it. */
#include <cuda.h>
#endif

struct CclEnvBoot;
struct CclThreadBoot;

/* ===== options.c ===== */

/* Names the tool for its messages ("ccl-perf", "cclc run"), where its options are listed
 * ("ccl-perf --help"), and, where not NULL, a usage text printed after every usage error.
 * Call first. */
void tool_init(const char *name, const char *help_cmd, const char *usage_text);
const char *tool_name(void);

/* Under a launcher (mpirun, srun) only the process of rank 0 prints usage errors; the
 * others exit as quietly. 1 in those others. */
int tool_quiet_rank(void);

/* calloc, or "NAME: out of memory" and exit 1 (before any rank runs). */
void *tool_calloc(size_t n, size_t size);

/* "NAME: error: MESSAGE" on stderr (and the usage text), then exit 2. */
_Noreturn void tool_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

typedef struct ToolShared ToolShared;

/* Reads argv[first..] word by word; the options the tools share (ToolShared, below) are
 * read into `shared` on the way and not returned. After tool_next returns 1: arg is the
 * word as written; flag the option's name, split from a value written into it
 * ("--minbytes=1K" and "-b1K" give "--minbytes" and "-b"); a word not starting with '-'
 * (a FILE) has flag == arg. */
typedef struct {
    int argc;
    char **argv;
    int i;
    const ToolShared *shared;
    const char *arg, *flag, *inline_val;
    char name[64];
} ToolArgs;

ToolArgs tool_args(int argc, char **argv, int first, const ToolShared *shared);
int tool_next(ToolArgs *a);
/* 1 when the option is spelled s or l (l may be NULL). */
int tool_is(const ToolArgs *a, const char *s, const char *l);
/* 1 when the option is the flag `name`, which takes no value ("--check=1" is an error). */
int tool_flag(ToolArgs *a, const char *name);
/* The option's value: the part written into it, else the next word ("FLAG needs a value"). */
const char *tool_value(ToolArgs *a);
/* A flag that takes no value: an error when one is written into it ("--check=1"). */
void tool_no_value(const ToolArgs *a);
_Noreturn void tool_unknown(const ToolArgs *a);
/* 1 when the word is an operand, not an option (a FILE: "-" counts as one), stored in
 * *file; a second operand is an error ("unexpected argument ... (one FILE per run)"). */
int tool_operand(const ToolArgs *a, const char **file);

/* The options the tools share, with one spelling and one message each: --ranks N,
 * --backend cpu|gpu|auto, -d/--dtype T, --op O (and op_short, "-o" in ccl-perf),
 * -n/--iters N, -w/--warmup N, --timeout-ms MS. A tool points at where it keeps each
 * (NULL: it has no such option) and gives its bounds. */
struct ToolShared {
    int *ranks;
    int max_ranks;
    ccl_backend_t *backend;
    ccl_dtype_t *dtype;
    ccl_op_t *op;
    const char *op_short;
    int *op_given;
    int *iters, *warmup;
    int max_iters;
    int *timeout_ms;
};

/* Reads the option at a into s when it is one of the shared ones; 1 when it was. */
int tool_shared_option(ToolArgs *a, const ToolShared *s);

/* Values, each checked with one message naming the option and the value as written. */
uint64_t tool_size(const char *flag, const char *val);          /* bytes, "64KB" */
uint64_t tool_count(const char *flag, const char *val, uint64_t hi); /* elements, "1M" */
int tool_int(const char *flag, const char *val, int lo, int hi);
/* A comma-separated list of at most max integers in lo..hi ("1,2,4"; each as tool_int
 * reads it) into out; its length (at least 1). */
int tool_int_list(const char *flag, const char *val, int *out, int max, int lo, int hi);
ccl_dtype_t tool_dtype(const char *flag, const char *val);
ccl_op_t tool_op(const char *flag, const char *val);
ccl_backend_t tool_backend(const char *flag, const char *val);
/* The index of val in names[0..n), else "FLAG VAL: expected a, b or c". */
int tool_choice(const char *flag, const char *val, const char *const *names, int n);

/* The whole file, NUL-terminated, its length in *size; NULL with errno set when it
 * cannot be read (EISDIR for a folder, EFBIG when over max bytes, ENOMEM). */
char *tool_read_file(const char *path, size_t max, size_t *size);

/* ===== launch.c ===== */

typedef struct {
    int processes;              /* one process per rank under a launcher (else threads) */
    int nranks;
    int nlocal;                 /* ranks this process drives: 1, or nranks */
    int first_rank;             /* the rank of comms[0] */
    int device;                 /* processes: the GPU of this rank */
    ccl_bootstrap_t pboot;      /* processes: the launcher's bootstrap */
    struct CclEnvBoot *eb;
    struct CclThreadBoot *tb;   /* threads: fail it to wake ranks waiting on a failed one */
    ccl_comm_t **comms;         /* [nlocal] */
    ccl_bootstrap_t *boots;     /* [nlocal]: each rank's bootstrap for agreements */
} ToolLaunch;

/* Opens the launcher's bootstrap where a launcher started this process. 0, or -1 with
 * a message. */
int tool_launch_open(ToolLaunch *l, int timeout_ms);
/* The rank count: the launcher's (checked against --ranks), else --ranks, else every
 * visible GPU (gpu) or cpu_default. Usage errors exit. */
int tool_launch_ranks(ToolLaunch *l, int ranks, int gpu, int ndev, int cpu_default);
/* A comm and a bootstrap per rank this process drives. 0, or -1 with a message. */
int tool_launch_comms(ToolLaunch *l, const ccl_config_t *cfg, int ndev);
/* fn(args + i * stride) for each local rank i: in this thread under a launcher, else one
 * thread each, joined. 0, or -1 when a thread could not start (the others were joined). */
int tool_launch_run(ToolLaunch *l, void *(*fn)(void *), void *args, size_t stride);
/* Destroys the comms and closes the bootstraps. */
void tool_launch_close(ToolLaunch *l);

/* ===== agree.c ===== */

/* The launcher bootstraps move a few KB per call; larger agreements go in pieces. */
enum { TOOL_AGREE_PIECE = 2048 };

/* Every rank's `bytes` bytes of `in`, rank r's at out + r * bytes, on every rank.
 * scratch: TOOL_AGREE_PIECE * nranks bytes, used only when bytes > TOOL_AGREE_PIECE.
 * 0, or -1 when the bootstrap failed (a peer died or gave up). */
int tool_allgather(const ccl_bootstrap_t *boot, int nranks, const void *in, void *out, size_t bytes, void *scratch);

/* ===== cuda.c ===== */

/* The driver's handles, opaque as in cuda.h (under CCL_TOOLS_CHECK_PROTOTYPES, cuda.h's
 * own types). Results are the driver's CUresult numbers: 0 is success. */
#ifdef CCL_TOOLS_CHECK_PROTOTYPES
typedef CUresult CuResult;
typedef CUdevice CuDevice;
typedef CUcontext CuContext;
typedef CUstream CuStream;
typedef CUevent CuEvent;
typedef CUgraph CuGraph;
typedef CUgraphExec CuGraphExec;
typedef CUdeviceptr CuDevicePtr;
typedef CUstreamCaptureMode CuCaptureMode;
#else
typedef int CuResult;
typedef int CuDevice;
typedef struct CUctx_st *CuContext;
typedef struct CUstream_st *CuStream;
typedef struct CUevent_st *CuEvent;
typedef struct CUgraph_st *CuGraph;
typedef struct CUgraphExec_st *CuGraphExec;
typedef unsigned long long CuDevicePtr;
typedef int CuCaptureMode;
#endif

/* Loads libcuda and initializes the driver, once per process; 0 with the device count,
 * or -1 with why (no driver, too old, cuInit failed, no device visible). */
int tool_cuda_load(int *ndev, char *why, size_t len);
/* The driver's text for e ("unknown CUDA error" before the driver is loaded). */
const char *tool_cuda_error(CuResult e);

/* One rank's GPU. Every call below returns the driver's result, and on failure leaves
 * in `what` the driver call that failed ("cuEventRecord"), for the tool's message. */
typedef struct {
    int device;
    CuContext ctx;              /* the device's primary context: libccl's, NCCL's */
    CuStream stream;            /* non-blocking: the stream the tool times */
    CuEvent *ev0, *ev1;         /* [nev] event pairs: sample i is ev0[i]..ev1[i] */
    int nev;
    CuGraph graph;              /* the captured graph (tool_gpu_capture_*) */
    CuGraphExec exec;
    const char *what;
} ToolGpu;

/* What failed, for a message: "cuEventRecord failed: TEXT (CUDA error N)". */
void tool_gpu_why(const ToolGpu *g, CuResult e, char *buf, size_t len);

/* Makes the device's primary context current on this thread and creates the stream and
 * nev event pairs. tool_gpu_close releases what was made, also after a failure. */
CuResult tool_gpu_open(ToolGpu *g, int device, int nev);
void tool_gpu_close(ToolGpu *g);
/* The rank's context, current on this thread (for a library that asks for it: NCCL). */
CuResult tool_gpu_make_current(ToolGpu *g);
/* The device's name ("NVIDIA H200"). */
CuResult tool_gpu_name(ToolGpu *g, char *buf, int len);
/* Waits for the rank's stream. */
CuResult tool_gpu_sync(ToolGpu *g);
/* Copies between host and device memory and fills device bytes. Uploads and fills run on
 * the legacy stream, which does not order the rank's non-blocking stream, so they return
 * once the context is idle: the next launch sees the new bytes. */
CuResult tool_gpu_upload(ToolGpu *g, void *dst, const void *src, size_t bytes);
CuResult tool_gpu_fill(ToolGpu *g, void *dst, unsigned char byte, size_t bytes);
CuResult tool_gpu_download(ToolGpu *g, void *dst, const void *src, size_t bytes);
/* Ordinary device memory on the rank's device (cuMemAlloc; bytes > 0), as a framework's
 * tensors are: not in CCL's symmetric heap. Freed with tool_gpu_free (NULL: nothing to
 * do) while the ToolGpu is open. */
CuResult tool_gpu_alloc(ToolGpu *g, void **ptr, size_t bytes);
CuResult tool_gpu_free(ToolGpu *g, void *ptr);
/* Device memory on the rank's device as PyTorch's expandable segments make it (bytes >
 * 0): cuMemCreate pages exportable as POSIX file descriptors (2 MiB for up to 1 MiB,
 * else 20 MiB), mapped into one reserved range; what libccl's registration
 * (ccl_mem_register) maps for peers. *size: the bytes mapped (bytes rounded up to whole
 * pages), which tool_gpu_free_shareable takes back (NULL: nothing to do) while the
 * ToolGpu is open. */
CuResult tool_gpu_alloc_shareable(ToolGpu *g, void **ptr, size_t bytes, size_t *size);
CuResult tool_gpu_free_shareable(ToolGpu *g, void *ptr, size_t size);
/* Frees the graph captured on the rank's stream (tool_gpu_capture_*, timing.c), if any;
 * tool_gpu_close frees it too. */
void tool_gpu_graph_free(ToolGpu *g);

/* ===== timing.c ===== */

/* The host's monotonic clock, in microseconds. */
double tool_now_us(void);
/* Sorts v[0..n) and returns its median (the mean of the middle two when n is even);
 * -1 when n is 0. */
double tool_median(double *v, int n);

/* The GPU's clock: sample i starts at tool_gpu_mark(g, i, 0) and ends at
 * tool_gpu_mark(g, i, 1), both enqueued on the rank's stream; tool_gpu_elapsed_us waits
 * for the end and gives the time between them divided by div (the calls in the sample). */
CuResult tool_gpu_mark(ToolGpu *g, int i, int end);
CuResult tool_gpu_elapsed_us(ToolGpu *g, int i, double div, double *us);
/* A CUDA graph of the work enqueued on the stream between begin and end (thread-local
 * capture), instantiated by end; replayed on the stream; freed by tool_gpu_graph_free
 * (cuda.c; tool_gpu_close frees it too). end always ends the capture, also after failed
 * work. */
CuResult tool_gpu_capture_begin(ToolGpu *g);
CuResult tool_gpu_capture_end(ToolGpu *g);
CuResult tool_gpu_replay(ToolGpu *g);

/* ===== data.c ===== */

/* The largest M such that every integer of magnitude up to M is exact in t (fp8 e5m2 8,
 * e4m3 16, bf16 256, f16 2048, u8 255, i8 127; 2^20 for the wider types, more than any
 * data pattern needs). */
int64_t tool_exact_max(ccl_dtype_t t);
/* 1 for the unsigned dtypes (u8, u32, u64): data for them is never negative. */
int tool_dtype_unsigned(ccl_dtype_t t);
/* 1 for the integer dtypes (i8, i32, i64, u8, u32, u64), which hold every value of their
 * width exactly and wrap around; 0 for the floating ones. */
int tool_dtype_integer(ccl_dtype_t t);
/* Stores v, an integer exact in t (|v| <= tool_exact_max(t); for an integer dtype any
 * value of its width, u64's above 2^63 - 1 passed as the int64_t of their bits), as
 * element idx of buf. */
void tool_store_int(void *buf, size_t idx, int64_t v, ccl_dtype_t t);

#endif
