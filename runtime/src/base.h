/* base.h: the base of libccl, under every other layer (docs/internals.md, "Layers"):
 * the objects every layer shares (a communicator, a loaded algorithm, the symmetric
 * heap's allocator) and the services they all need, the backends included: errors,
 * names, call identities, the layout of a call, the point-to-point channels' and the
 * v-collectives' tables, handles, logging, reductions on the host, folders and clocks.
 * Its files (heap.c, error.c, names.c, ident.c, handles.c, log.c, reduce.c, util.c,
 * libdir.c, datadir.c, boot_check.c) call nothing above the base.
 *
 * Symmetric memory model. Every rank owns one heap of comm->heap_bytes bytes; every
 * rank's process can address every peer's heap (comm->heap_base[p]; threads mode:
 * plain host memory, processes on the CPU: POSIX shm mapped by every peer, GPUs: device
 * memory mapped to every peer). Allocation is by offset and deterministic: the same
 * sequence of allocations and frees on every rank yields the same offsets, so a peer's
 * copy of my buffer at offset X is at heap_base[peer] + X. User buffers
 * (ccl_mem_alloc), scratch, staging buffers and semaphores all live in the heap.
 *
 * Heap layout (offsets, identical on every rank):
 *   [0, CCL__HEAP_HEADER)             CclHeapHeader (abort flag, all-rank barrier)
 *   [CCL__HEAP_HEADER, +CCL__SEM_BYTES)  semaphore arena: 64-bit counters, always zero
 *                                       when free (an algorithm zeroes its own on free)
 *   [CCL__HEAP_DATA, heap_bytes)       user buffers, scratch, staging
 */
#ifndef CCL_BASE_H
#define CCL_BASE_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ccl.h"
#include "cclc.h"
#include "cuda/abi.h"

/* ===== heap.c: the symmetric heap ===== */

enum {
    CCL__HEAP_HEADER = 64 << 10,                       /* CclHeapHeader, the identity ring, the inbox */
    CCL__SEM_BYTES = 1 << 20,                          /* 131072 counters per rank */
    CCL__HEAP_DATA = CCL__HEAP_HEADER + CCL__SEM_BYTES,
    CCL__HEAP_ALIGN = 256,                             /* every allocation's alignment */
};
/* heap_bytes 0, no CCL_HEAP_BYTES: room for the point-to-point channels at full size
 * (2 MiB a peer: channels.c) and for the regions calls share (a quarter of the heap
 * each: staging and scratch of messages up to a quarter of the heap run whole, larger
 * ones in pieces: call.c), with most of it left for ccl_mem_alloc. On GPUs 1 GiB of
 * device memory, taken at ccl_comm_init: on 256 MiB, a training job's ordinary tensors
 * of 64-256 MB ran in pieces at up to 5.7x NCCL's time (broadcast; 1.3-1.5x on 1 GiB,
 * 4x H200: docs/perf/x4-plain). On the CPU 256 MiB, reserved rather than committed. */
#define CCL__HEAP_DEFAULT_GPU ((size_t)1 << 30)
#define CCL__HEAP_DEFAULT ((size_t)256 << 20)
#define CCL__HEAP_MAX ((size_t)1 << 46)                /* the largest heap_bytes accepted */

/* At offset 0 of every rank's heap. Zero when the heap is created. Each backend reaches
 * it its own way: the CPU backend through heap_base on the host (its abort and barrier
 * helpers are static to cpu/backend.c, because on GPUs heap_base holds device
 * addresses the host must never dereference), the GPU backend on the device. */
typedef struct {
    /* Non-zero once this rank must stop: 1 + the rank whose failure stopped it. A
     * failing rank sets it in its own and every peer's header, so blocks spinning
     * anywhere give up at once instead of each waiting out its own timeout. */
    _Atomic uint64_t abort;
    /* All-rank barrier (around avg's division, and CclCall.fence): the number of
     * barriers this rank has reached. The k-th barrier of the comm stores k here and
     * waits until every rank's word reaches k; one that does not is named on timeout.
     * Monotonic, never reset. */
    _Atomic uint64_t arrived;
    /* Non-zero once this rank called ccl_comm_abort (CPU backend): peers stopped by its
     * abort word say so. */
    _Atomic uint64_t aborted;
    /* Non-zero once a peer found this rank's process gone (CPU backend, process mode),
     * set by that peer before it stops every rank on this rank's behalf: the cause is
     * recorded when it is found, so a rank that failed on its own and exited since is
     * not named as dead by whoever looks later. */
    _Atomic uint64_t gone;
    /* What this rank knew of the rank its abort word names when it set its node-mates'
     * abort words on that rank's behalf (CPU backend, several nodes): CCL__NET_* flags
     * (cpu/net.h) | (1 + the rank whose connection to it failed) << 8. Written before
     * those words, so that a node-mate stopped by it can say what the other nodes told
     * this rank (their ABORT messages) or what this rank's own proxy found. */
    _Atomic uint64_t why;
    /* At CCL_IDENT_OFF (cuda/abi.h): the identities of this rank's last CCL_IDENT_RING
     * calls (CclIdent), which peers compare with theirs before they touch this rank;
     * at CCL_LAUNCH_OFF, GPU kernels' launch count; at CCL_INBOX_OFF, the
     * {launch, hash} pairs GPU peers push here for this rank's kernels to compare. */
} CclHeapHeader;
_Static_assert(sizeof(CclHeapHeader) <= CCL_LAUNCH_OFF && CCL_LAUNCH_OFF + 8 <= CCL_IDENT_OFF &&
                   CCL_IDENT_OFF + CCL_IDENT_RING * sizeof(CclIdent) <= CCL_INBOX_OFF &&
                   CCL_INBOX_END <= CCL__HEAP_HEADER && CCL_INBOX_RANKS >= CCLC_MAX_RANKS,
               "the heap header holds the header, the identity ring and the inbox");

/* A deterministic first-fit offset allocator over [lo, hi). */
typedef struct {
    size_t lo, hi;
    int n, cap;
    struct CclRange { size_t off, size, bytes; int user; } *used; /* sorted by offset;
                                     size: rounded up, bytes: as asked */
    /* The live user allocations, kept as they come and go for the call identity
     * (CclIdent.heap, .allocs), so a call does not walk them: how many, and the sum of
     * one mixed word per (offset, bytes), which no order of allocation changes. */
    int nuser;
    uint64_t user_sum;
} CclHeapAlloc;

void ccl__heap_alloc_init(CclHeapAlloc *h, size_t lo, size_t hi);
void ccl__heap_alloc_fini(CclHeapAlloc *h);
/* Returns 0 and *off on success, -1 when nothing fits (or out of host memory). */
int ccl__heap_alloc(CclHeapAlloc *h, size_t bytes, int user, size_t *off);
/* Returns 0, or -1 when off is not the start of a live allocation. */
int ccl__heap_free(CclHeapAlloc *h, size_t off);
/* The live user allocation containing [off, off+bytes): 0 and its start; -1 when the
 * range is in no user allocation or runs past its end (*start then says which). */
int ccl__heap_find_user(const CclHeapAlloc *h, size_t off, size_t bytes, size_t *start, size_t *size);
/* The largest free gap, in bytes (a multiple of CCL__HEAP_ALIGN). */
size_t ccl__heap_largest_free(const CclHeapAlloc *h);

/* ===== launch shapes and the tuner's state, which every comm holds (tuner.c) ===== */

/* A launch shape: how one algorithm is laid out on the machine. 0 in a field: the
 * default (the program's, or the backend's environment knob). */
typedef struct {
    int instances;                   /* I: physical blocks per logical block (1..64) */
    int threads;                     /* threads per block (GPU; 32..512, multiple of 32) */
    int slices;                      /* S, where the program is pipeline-safe */
    int protocol;                    /* 1 + Protocol, 0: the program's (ccl__shape_protocol) */
} CclShape;
/* The protocol a program of protocol `own` runs with under a shape's protocol field
 * (1 + Protocol, 0: none): the shape's lines (ll, ll128), which may stand in for each
 * other or for Simple; else `own`. Simple never stands in for lines, whose cross-call
 * proof it lacks. */
static inline Protocol ccl__shape_protocol(int field, Protocol own)
{
    return field > 1 + PROTO_SIMPLE ? (Protocol)(field - 1) : own;
}

enum {
    CCL__TUNE_COLLS = CCLC_NUM_COLLS, /* Collective values with table entries: all of them.
                                        allgatherv's bucket is its recvcounts' sum, which
                                        every rank knows; alltoallv's size is known to no
                                        rank (each knows its own row and column), so its
                                        calls look up bucket 1 ("alltoallv 1 ..."): one
                                        row for every size */
    CCL__TUNE_BUCKETS = 48,          /* size buckets 2^0 .. 2^47 bytes */
    CCL__TUNE_FILES = 32,            /* distinct algorithm files in one table */
    CCL__TUNE_VARIANTS = 64,         /* loaded (file, shape, root) per comm */
    CCL__TUNE_PATH = 256,
};

/* One table line: what a standard collective runs for one power-of-two size bucket. */
typedef struct {
    int file;                        /* index into CclTuneTable.files; -1: no entry */
    int line;                        /* its line in the table's text, for messages */
    CclShape shape;
    double time_us;                  /* measured by ccl-tune (a comment); 0: unknown */
    const char *note;                /* ccl-tune's words after the time in that comment
                                        (the incumbent's); NULL: none. Not owned, and
                                        never read back: the parser leaves it NULL */
} CclTuneEntry;

/* A parsed table. The key (device, nranks, topology, version) must match the
 * communicator's for the table to be used. */
typedef struct {
    char device[128], topology[64], version[32];
    int nranks;
    int nfiles;
    char files[CCL__TUNE_FILES][CCL__TUNE_PATH]; /* as written: relative to the library */
    CclTuneEntry e[CCL__TUNE_COLLS][CCL__TUNE_BUCKETS]; /* by Collective, log2(bucket) */
    /* Rows for calls on ordinary buffers (written "allreduce:plain"): a call that hands
     * over a buffer neither in the heap nor registered takes its bucket's row here where
     * there is one, e's otherwise. */
    CclTuneEntry plain[CCL__TUNE_COLLS][CCL__TUNE_BUCKETS];
    int has_plain[CCL__TUNE_COLLS];  /* plain rows of the collective */
} CclTuneTable;

/* One algorithm loaded for the table (alg NULL: it failed to load, why says so). */
typedef struct {
    ccl_algorithm_t *alg;
    int file, root, slices0;         /* slices0: the algorithm's slices before any run */
    CclShape shape;                  /* instances and protocol (fixed per variant) */
    char why[256];
} CclTuneVariant;

/* What a backend says about the device a communicator runs on (CclBackend.describe):
 * the tuner's key and the launch-shape fields that mean something there. */
typedef struct {
    char device[128];                /* the tuning tables' device model: "cpu", "NVIDIA H200" */
    char topology[64];               /* how the ranks reach each other: "threads", "p2p-all" */
    int has_threads_per_block;       /* CclShape.threads applies (else it reads "default") */
    int can_run_simple_as_ll;        /* a Simple program may run with LL lines (CclShape.protocol) */
} CclDeviceInfo;

/* Whether the comm has looked for a tuning table yet, and found one. */
typedef enum {
    CCL__TUNE_NOT_LOOKED = 0,        /* before the first dispatch */
    CCL__TUNE_IN_USE,                /* a table matched and is used */
    CCL__TUNE_NONE,                  /* none matched (why says so) */
} CclTuneState;

/* Why a dispatch did not use the table: ccl_comm_explain_choice writes it out. */
typedef enum {
    CCL__MISS_NONE,
    CCL__MISS_NO_TABLE,              /* CclTuner.why says why */
    CCL__MISS_NO_COLL,               /* the tables have no entries for the collective */
    CCL__MISS_NO_ENTRY,              /* the table has no entry for the bucket */
    CCL__MISS_TEXT,                  /* CclTuner.miss_text */
} CclTuneMiss;

/* The last dispatch, kept as data and written out only when ccl_comm_explain_choice asks:
 * formatting it at every call cost more than the rest of a call's host path. */
typedef struct {
    Collective coll;
    size_t bytes;
    char file[CCL__TUNE_PATH];       /* the algorithm chosen (a copy: it may be freed since) */
    int instances, threads, slices;
    const char *protocol;            /* static */
    const char *how;                 /* static; NULL: the table's entry at `line`, `bucket` */
    int line;
    size_t bucket;
    int plain;                       /* the table's row for ordinary buffers */
    CclTuneMiss miss;
    size_t miss_bucket;
    char miss_text[512];             /* for CCL__MISS_TEXT (rare: copied then) */
} CclTuneChoice;

/* Per communicator (inside ccl_comm_t, so nothing to free: variants are in comm->algs). */
typedef struct {
    CclTuneState state;
    int described;                   /* dev is filled (be->describe, on first use) */
    CclDeviceInfo dev;
    char source[CCL__TUNE_PATH + 64];/* the table's file, or "built-in ..." */
    char why[1024];                  /* why tables were ignored (never printed) */
    CclTuneTable table;
    int nvar;
    CclTuneVariant var[CCL__TUNE_VARIANTS];
    CclTuneMiss miss;                /* why the current dispatch did not use the table */
    size_t miss_bucket;
    char miss_text[512];             /* for CCL__MISS_TEXT */
    CclTuneChoice last;              /* ccl_comm_explain_choice's */
} CclTuner;

/* ===== handles.c: live communicator and algorithm handles ===== */

/* Registers a handle as live (0), or -1 when out of memory. */
int ccl__handle_add(const void *h);
/* Unregisters it: 1 when it was live. */
int ccl__handle_remove(const void *h);
int ccl__handle_live(const void *h);
/* 1 when comm is a live handle, and then it is held (comm->holds) until
 * ccl__release_comm: a ccl_comm_destroy on another thread waits before it frees
 * anything. The look-up and the hold are one step under the handles' lock, so a destroy
 * either comes first (0) or waits for the caller (ccl__hold_comm, check.c). */
int ccl__handle_hold(ccl_comm_t *comm);
void ccl__release_comm(ccl_comm_t *comm);
/* For ccl_comm_destroy, after ccl__handle_remove: waits until no call holds comm. */
void ccl__wait_unheld(ccl_comm_t *comm);
/* Objects the ranks of one process share at an init travel through the bootstrap as
 * tokens: put registers one (a reference held; 0 when out of memory), get takes a
 * reference (NULL when the token names nothing live: gone, or damaged), drop gives one
 * back, the last calling release(obj). */
uint64_t ccl__share_put(void *obj, void (*release)(void *));
void *ccl__share_get(uint64_t token);
void ccl__share_drop(uint64_t token);

/* ===== util.c: sizes, hashes, folders, clocks, deep stacks ===== */

/* A size or count as every tool option and tuning table writes it: decimal digits (never
 * octal: "010" is ten), then optionally K, M, G or T (powers of 1024, any case), optionally
 * followed by "i" and then "B" ("64KB", "1MiB", "4k"); "4096B" is 4096. 0, or -1 when s is
 * anything else or the value does not fit 64 bits. */
int ccl__parse_size(const char *s, uint64_t *out);

/* FNV-1a, 64-bit, over n bytes, continuing from h (CCL__FNV_SEED to start). */
#define CCL__FNV_SEED 0xcbf29ce484222325ull
uint64_t ccl__fnv1a(uint64_t h, const void *p, size_t n);
/* The cache folder: `configured` (ccl_config_t.cache_dir), else $CCL_CACHE_DIR, else
 * $XDG_CACHE_HOME/ccl, else ~/.cache/ccl; into buf. NULL when none can be named. */
const char *ccl__cache_dir(const char *configured, char *buf, size_t len);
/* 0 when path is a folder this user owns and only they may write; -1 with why. */
int ccl__trusted_dir(const char *path, char *why, size_t len);
/* 0 when path (a folder or plain file of algorithms) is this user's or root's and
 * writable by nobody else; -1 with why ("PATH belongs to another user: skipped ..."). */
int ccl__trusted_source(const char *path, char *why, size_t len);
/* 0 when path is a plain file this user's or root's, writable by nobody else, in a
 * folder this user's or root's that nobody else may write (or a sticky one, as /tmp);
 * -1 with "PATH <what is wrong><consequence>" in why. */
int ccl__trusted_file(const char *path, const char *consequence, char *why, size_t len);
/* Creates path (and missing parents) mode 0700, then as ccl__trusted_dir. */
int ccl__private_dir(const char *path, char *why, size_t len);
/* 1 when process pid (of this host) is gone: no such process, or a zombie nobody has
 * reaped yet; 0 when it runs (or cannot be told). */
int ccl__pid_dead(long pid);
/* This host's name into buf ("?" when it has none), for messages about peers' processes,
 * which are all on this host. Returns buf. */
const char *ccl__host_name(char *buf, size_t len);
/* The first rank p >= from of n whose process pids[p] (of this host) is gone, by
 * ccl__pid_dead; ranks of this process and unknown pids (<= 0) are skipped. -1: none.
 * What every look for dead peers asks: the CPU backend's waits and the watchdog. */
int ccl__first_dead(const int64_t *pids, int n, int from);
/* Runs fn(arg) where the stack is known to be deep enough for the compiler: on this
 * thread when it has CCL__DEEP_STACK_MIN bytes of stack left, else on a thread of its
 * own with CCL__DEEP_STACK, waiting for it. The compiler recurses as deep as a program
 * nests (CCLC_MAX_EXPR_DEPTH operators in an expression, a few hundred blocks), which
 * needs up to about 256 KiB at the limits; a caller's thread may have less (musl's
 * default is 128 KiB; so may a language runtime's threads). 0, or -1 when no such
 * thread could be started (fn did not run). */
#define CCL__DEEP_STACK_MIN ((size_t)1 << 20)
#define CCL__DEEP_STACK ((size_t)8 << 20)
int ccl__with_stack(void (*fn)(void *), void *arg);
/* Starts fn(arg) on a thread that takes none of the process's signals (they stay the
 * user's threads'); detached when t is NULL. 0, or pthread_create's error. */
int ccl__thread_start(pthread_t *t, void *(*fn)(void *), void *arg);
/* How often waits look for dead peers' pids (ms). */
enum { CCL__PROBE_MS = 100 };
/* 1 when path is a folder. */
int ccl__is_dir(const char *path);

/* ===== libdir.c ===== */

/* The shipped library's folder: 0 and its path in out, or -1 with the reason in out. */
int ccl__library_dir(char *out, size_t len);

/* ===== datadir.c ===== */

/* Where `make install` put the shipped algorithms, for the libccl it installed; "" in
 * the build folder's. */
extern const char ccl__install_algorithm_dir[];

/* ===== the objects: a communicator and a loaded algorithm ===== */

typedef struct CclBackend CclBackend;
typedef struct CclGroup CclGroup;
typedef struct CclMailboxes CclMailboxes;
typedef struct CclWatchdog CclWatchdog;    /* internal.h (watchdog.c) */
typedef struct CclCompiled CclCompiled;    /* internal.h (algorithm.c) */
typedef struct CclRegs CclRegs;            /* register.c */

/* Notes between two ranks of one host (notes.c), for a backend's own handshakes that
 * must never wait (gpu/ipc.c's): per ordered pair of ranks and lane, one note of at most
 * CCL__NOTE_BYTES in flight, which its receiver takes whenever it looks. The slots lie
 * in the comm's mailboxes (mailbox.c), which every rank of the host maps; comm->notes
 * says where. ccl__note_send: 1 posted, 0 while the lane's previous note is not taken
 * yet, -1 where notes do not go (n NULL, a rank not mapped here, a sender at or past
 * CCL__NOTE_RANKS, a longer note). ccl__note_take: 1 with the note copied into `note`, 0
 * when none waits, -1 as for send. */
enum { CCL__NOTE_BYTES = 112, CCL__NOTE_LANES = 2, CCL__NOTE_RANKS = 64 };
/* A note slot: `sent` notes were posted, `taken` of them taken; the data are the
 * latest one's, valid while sent != taken. */
typedef struct {
    _Atomic uint64_t sent, taken;
    char data[CCL__NOTE_BYTES];
} CclNoteSlot;
/* inbox[p]: rank p's CCL__NOTE_RANKS x CCL__NOTE_LANES slots as mapped here (slot
 * q * CCL__NOTE_LANES + lane: rank q's notes to p), NULL where p is not mapped. */
typedef struct {
    int nranks, rank;
    CclNoteSlot **inbox;
} CclNotes;
int ccl__note_send(CclNotes *n, int to, int lane, const void *note, size_t bytes);
int ccl__note_take(CclNotes *n, int from, int lane, void *note, size_t bytes);

enum { CCL__ERR_LEN = 8192 };

/* A freed algorithm's heap blocks waiting to be reused (algorithm.c, "quarantine"). */
typedef struct {
    size_t sem_off, sem_bytes;
    size_t scratch_off;              /* SIZE_MAX: none */
    int fenced;                      /* a fenced call was issued after the free */
} CclQuarantine;

/* A standard-collective registration (ccl_comm_use_algorithm). */
typedef struct {
    ccl_algorithm_t *alg;
    size_t min_bytes, max_bytes;     /* 0,0: all sizes */
} CclUse;

struct ccl_comm {
    int rank, nranks;
    int timeout_ms;                  /* bound on every wait (config, CCL_TIMEOUT_MS, CCL_DEFAULT_TIMEOUT_MS) */
    char *cache_dir;                 /* malloc'd; for the GPU backend's kernel cache */
    int device;                      /* GPU ordinal (GPU backend only) */
    ccl_backend_t backend_kind;      /* CCL_BACKEND_CPU or CCL_BACKEND_GPU, never AUTO */
    const CclBackend *be;
    void *be_comm;                   /* the backend's per-comm state */

    /* Symmetric heap: heap_base[p] is this process's address of rank p's heap
     * (heap_base[rank] is our own). Set by be->comm_init. */
    size_t heap_bytes;
    /* heap_bytes is the default (neither config nor CCL_HEAP_BYTES gave it): comm_init
     * may lower it, every rank agreeing (the CPU backend fits processes' heaps into
     * /dev/shm so that touching them never faults). */
    int heap_default;
    char **heap_base;                /* nranks entries, malloc'd by the common code */
    CclHeapAlloc data;               /* [CCL__HEAP_DATA, heap_bytes) */
    CclHeapAlloc sems;               /* [CCL__HEAP_HEADER, CCL__HEAP_DATA) */
    /* Registered memory (ccl_mem_register, register.c): its table (NULL before the first
     * registration), and the window: heap offsets [win_off, win_off + win_bytes), past
     * the heap's end, where a backend maps registered memory into every rank's heap as
     * each process addresses it (the GPU backend reserves it with the heap; 0 bytes:
     * no window, as on the CPU backend). win_off and win_bytes are set by be->comm_init,
     * the same on every rank. */
    CclRegs *regs;
    size_t win_off, win_bytes;
    uint64_t barriers;               /* all-rank barriers done (see CclHeapHeader) */

    /* The regions calls share (call.c, "Regions"): staging of user buffers that peers
     * reach but that are not symmetric ([0] in, [1] out, [2] a second out that a call's
     * pieces take turns at with [1]), and the scratch of every algorithm without a
     * region of its own (SIZE_MAX: none yet). Each holds at most region_cap bytes for a
     * call that can run in pieces. Only the user's thread touches these; replaced
     * regions are retired, freed at destroy. */
    size_t stage_off[3], stage_bytes[3];
    size_t scratch_off, scratch_bytes;
    size_t region_cap;               /* CCL_REGION_BYTES, or heap_bytes / 4 */
    int nretired;
    size_t *retired;                 /* heap offsets freed at destroy */
    /* Heap blocks of freed algorithms, not reused until every rank is past them
     * (algorithm.c, "quarantine"); fence_pending: the next call fences. */
    int nquarantine, fence_pending;
    CclQuarantine *quarantine;
    CclTuner tune;                   /* the tuning table and its loaded variants */
    /* Standard collectives: which (collective, root) the shipped library was loaded
     * for, CCLC_NUM_COLLS * nranks flags (lazily allocated). */
    unsigned char *lib_tried;
    CclGroup *group;                 /* shared with the comms of one ccl_comm_init_all */

    /* Algorithms loaded by this comm: for free at destroy and for dispatch. */
    int nalgs, algs_cap;
    ccl_algorithm_t **algs;
    int nuses, uses_cap;
    CclUse *uses;

    /* Errors. last_error belongs to the user's thread; asynchronous failures of the
     * backend go to async_* under async_lock and move to last_error in synchronize. */
    char last_error[CCL__ERR_LEN];
    pthread_mutex_t async_lock;
    ccl_result_t async_result;       /* first asynchronous failure not yet reported */
    char async_error[CCL__ERR_LEN];
    ccl_result_t failed;             /* sticky: once a collective failed, the comm is dead */
    char failed_why[512];            /* that failure's message (maybe cut), for later calls */

    /* Calls enqueued so far: every rank makes the same calls, so the k-th has the same
     * number everywhere (CclIdent.seq, algorithm.c). */
    uint64_t calls;
    /* v-collectives (vcoll.c), both taken at the first v call, at the same point on
     * every rank, so at the same heap offsets; SIZE_MAX before. vring: each rank's
     * segment tables of its last CCL_IDENT_RING calls (CCL__VT_WORDS(N) words each),
     * read by peers; varena: scratch and staging of v calls, laid out per call once
     * every rank's sizes are known. */
    size_t vring_off, varena_off, varena_bytes;
    /* Point-to-point (p2p.c): the channels' heap region (SIZE_MAX: none), slot size
     * (bytes, CCL__P2P_HEADER of them the header) and semaphores; messages issued per
     * peer so far: p2p_sent[p] to rank p, p2p_recvd[p] from rank p (N each, one block). */
    size_t p2p_off, p2p_slot_bytes, p2p_sem_off;
    uint64_t *p2p_sent, *p2p_recvd;
    /* Exchanges (alltoall, alltoallv, allgatherv) run as point-to-point (vcoll.c): how
     * many so far, the same on every rank; they number the messages' calls. exchange:
     * CCL_EXCHANGE, read at creation (the same on every rank, as every CCL_ setting must
     * be): 0 auto (the backend's rule), 1 p2p, -1 programs (on one node). */
    uint64_t v_p2p_calls;
    int exchange;
    /* A standard collective is picking its algorithm for a stream under CUDA graph
     * capture (api.c): loading one then is refused (capture_refused), not half done. */
    int capturing, capture_refused;
    /* ccl_barrier (api.c): its algorithm and its symmetric buffer (in at barrier_off,
     * out 128 bytes further), made at the first barrier, at the same point on every
     * rank; NULL and SIZE_MAX before. */
    ccl_algorithm_t *barrier_alg;
    size_t barrier_off;
    /* The comm's own bootstrap (mailbox.c) and its operations so far (ccl_comm_split),
     * the same count on every rank. */
    CclMailboxes *mbox;              /* NULL on a comm of several nodes (no host spans them) */
    CclNotes *notes;                 /* the notes in mbox (base.h); NULL without it */
    /* A comm of several nodes: the same for ccl_comm_split only, its node's mailboxes
     * mapped, the other nodes' ranks reached through the transport (mailbox.c). */
    CclMailboxes *node_mbox;
    uint32_t mbox_ops;
    /* Nodes (docs/multinode.md): the ranks are nnodes nodes of `local` consecutive ranks,
     * rank r on node r / local (1 node of nranks unless ccl_comm_init_rank_net made
     * several). Ranks of different nodes share no memory (heap_base NULL): the CPU
     * backend's proxy carries what they exchange over `net`, the transport given. */
    int nnodes, local;
    ccl_net_t net;
    /* The thread that looks for dead peers (watchdog.c); NULL when every rank is a
     * thread of this process. */
    CclWatchdog *watchdog;
    /* What ccl_comm_split gives children by default: the config this comm was made
     * with (heap_bytes 0 when it was the default). */
    ccl_config_t config;
    /* Calls from other threads (ccl_comm_get_async_error, ccl_comm_abort) in progress
     * on this comm: ccl__hold_comm counts them while the handle is live, and
     * ccl_comm_destroy, once it has unregistered the handle, waits for none to be left
     * before it frees anything. */
    _Atomic int holds;
};

/* Who loaded an algorithm. The library's `sizes` search reuses only its own loads; a
 * tuner variant keeps its launch shape and lives until the comm is destroyed. */
typedef enum {
    CCL__ORIGIN_USER = 0,            /* ccl_algorithm_load */
    CCL__ORIGIN_LIBRARY,             /* the standard collectives' `sizes` search (library.c) */
    CCL__ORIGIN_TUNER,               /* a tuning table's variant (tuner.c) */
    CCL__ORIGIN_BARRIER,             /* ccl_barrier's own (api.c) */
} CclAlgOrigin;

struct ccl_algorithm {
    ccl_comm_t *comm;
    CclCompiled *compiled;           /* owns the source and the Plan */
    const char *source;              /* compiled->source */
    const char *file;                /* compiled->file: name shown in messages */
    const Plan *plan;
    const Program *prog;
    int root;
    int instances;                   /* I: physical blocks per logical block */
    int slices;                      /* S: Program.pipeline if Proof.pipeline_safe, else 1 */
    int nblocks;                     /* this rank's logical blocks */
    const PlanBlock **blocks;        /* this rank's PlanBlocks, by tb */
    int in_remote, out_remote;       /* some rank reaches a peer's in (out) */
    int lines_only;                  /* set by the backend's alg_prepare: peers reach this rank
                                        only through its line region, never its in or out (a GPU
                                        run with lines), so in_remote and out_remote stage nothing
                                        (ccl__peers_reach_in, _out) */
    /* Semaphores: nsems = plan->nsems * I counters at heap offset sem_off (every rank). */
    size_t sem_off;
    int nsems;
    /* Set by the backend's alg_prepare: peers write this rank's scratch before every
     * rank has entered the call (a GPU run with lines), so the algorithm keeps a scratch
     * region of its own, scratch_bytes at heap offset scratch_off (call.c, "Regions");
     * 0: it uses the comm's. */
    int own_scratch;
    size_t scratch_off, scratch_bytes;
    uint64_t ncalls;                 /* runs enqueued */
    CclAlgOrigin origin;             /* who loaded it: the user, the library's `sizes`
                                        search or the tuner (a variant) */
    /* The launch shape the tuner asked for (tuner.c); all zero otherwise. Non-zero
     * instances and protocol are applied before be->alg_prepare and win over a backend's
     * environment knobs (CCL_GPU_*). threads and `slices` above may change between runs:
     * the dispatch sets them just before ccl__run, which passes slices on in
     * CclCall.slices; a backend reads shape.threads when it enqueues the call. */
    CclShape shape;
    void *be_alg;                    /* the backend's per-algorithm state */
    uint64_t plan_hash;              /* FNV of the source, N and root (CclIdent.plan) */
};

/* Whether peers reach this rank's in (out) themselves, so that it must be symmetric (a
 * ccl_mem_alloc or registered buffer) or staged: some rank does, and not only through
 * line regions (lines_only). */
static inline int ccl__peers_reach_in(const ccl_algorithm_t *a) { return a->in_remote && !a->lines_only; }
static inline int ccl__peers_reach_out(const ccl_algorithm_t *a) { return a->out_remote && !a->lines_only; }

/* ===== error.c: where failures are said ===== */

/* Sets comm's last error to "FMT..." and returns r. With a NULL comm it sets the
 * calling thread's init error (ccl_comm_last_error(NULL)). Messages start with the
 * function name and name the argument: "ccl_all_reduce: argument 'count' ...". */
ccl_result_t ccl__set_error(ccl_comm_t *comm, ccl_result_t r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* For backends' worker threads: records the first asynchronous failure of comm (later
 * ones are dropped); ccl_comm_synchronize returns it. Thread-safe. */
void ccl__set_async_error(ccl_comm_t *comm, ccl_result_t r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* snprintf that may truncate on purpose (messages, paths); using the result keeps
 * -Wformat-truncation quiet about the intended truncation. */
#define CCL__FMT(buf, len, ...)                         \
    do {                                                \
        if (snprintf((buf), (len), __VA_ARGS__) < 0)    \
            (buf)[0] = 0;                               \
    } while (0)
/* Monotonic milliseconds (util.c). */
double ccl__now_ms(void);

/* ===== log.c: CCL_DEBUG (levels), CCL_DEBUG_SUBSYS, CCL_DEBUG_FILE ===== */

/* Levels, each including those before it; NONE (the default) prints nothing. */
enum { CCL__LOG_NONE, CCL__LOG_WARN, CCL__LOG_INFO, CCL__LOG_TRACE };
/* Subsystems of INFO and TRACE lines (WARN lines always pass). */
enum {
    CCL__SUB_INIT = 1,               /* communicators, bootstrap, heaps */
    CCL__SUB_CALL = 2,               /* collectives: calls, launches, synchronize */
    CCL__SUB_P2P = 4,                /* sends, recvs, groups */
    CCL__SUB_ALLOC = 8,              /* ccl_mem_alloc and free */
    CCL__SUB_COMPILE = 16,           /* algorithm loads */
    CCL__SUB_TUNE = 32,              /* which algorithm a standard collective runs */
    CCL__SUB_ALL = 63,
};
extern int ccl__log_level;
extern unsigned ccl__log_subsys;
/* Reads the environment once per process (cheap after the first call); every
 * communicator's creation and every error calls it. */
void ccl__log_init(void);
/* One event, one line per line of text, "host:pid ccl LEVEL ms rank R [subsys]: " first,
 * to stderr or CCL_DEBUG_FILE. rank -1: none (before a comm exists). Use CCL__LOG. */
void ccl__log(int level, unsigned subsys, int rank, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
#define CCL__LOG(level, subsys, rank, ...)                                                       \
    do {                                                                                         \
        if (ccl__log_level >= (level) && ((level) == CCL__LOG_WARN || (ccl__log_subsys & (subsys)))) \
            ccl__log(level, subsys, rank, __VA_ARGS__);                                          \
    } while (0)
/* CCL_NVTX=1: an NVTX range around each API call that does work (collectives, p2p
 * calls and groups, synchronize, loads, inits, splits), named after the function, for
 * Nsight Systems; libnvToolsExt is loaded with dlopen (CCL_NVTX_LIBRARY, else
 * libnvToolsExt.so.1 or .so), so nothing links it. Off: one branch on a cached flag. */
extern int ccl__nvtx;
void ccl__nvtx_push(const char *name);
void ccl__nvtx_pop(void);
static inline void ccl__range_push(const char *name)
{
    if (ccl__nvtx)
        ccl__nvtx_push(name);
}
static inline ccl_result_t ccl__range_pop(ccl_result_t r)
{
    if (ccl__nvtx)
        ccl__nvtx_pop();
    return r;
}
/* CCL_DEBUG=TRACE: one line per step of a call (launches, synchronize), for finding
 * which rank stalls where. Off: one branch on a cached level. */
#define CCL__TRACE(rank, ...) CCL__LOG(CCL__LOG_TRACE, CCL__SUB_CALL, rank, __VA_ARGS__)
/* Spin-then-yield-then-sleep backoff for waits (util.c); `iter` counts calls from 0. */
void ccl__backoff(unsigned iter);

/* ===== boot_check.c: the bootstrap a backend's comm_init gets ===== */

/* The state of a checked bootstrap: the user's, and what its allgathers found. */
typedef struct {
    const ccl_bootstrap_t *user;
    int exchanges;                   /* allgathers made so far */
    int damaged;                     /* the last one returned damaged data (why says how) */
    int ever_damaged;                /* one did */
    char why[512];
} CclCheckedBoot;
/* Makes *checked a bootstrap over user's that frames what every rank sends and checks
 * every entry its allgather returns before anyone sees it (cb holds its state; a
 * damaged exchange fails with what was wrong in cb->why). */
void ccl__boot_checked(CclCheckedBoot *cb, const ccl_bootstrap_t *user, ccl_bootstrap_t *checked);
/* 1 when boot is a checked bootstrap whose last allgather failed because the data came
 * back damaged (the user's allgather itself reported success), so a rank can still take
 * part in a final agreement instead of leaving its peers waiting. */
int ccl__boot_damaged(const ccl_bootstrap_t *boot);

/* ===== the layout of a call (docs/internals.md) and of the v-collectives' tables ===== */

/* Bytes of an algorithm's semaphore-arena block: its counters. */
static inline size_t ccl__sem_block_bytes(int nsems) { return (size_t)nsems * 8; }

/* Layout arithmetic of docs/internals.md, shared by every backend. */
static inline size_t ccl__align_elems(size_t esize) { return esize >= 16 ? 1 : 16 / esize; }
/* CS: round_up(ceil(U / K), A); 0 when U == 0. */
static inline size_t ccl__chunk_stride(size_t U, int K, size_t esize)
{
    if (U == 0)
        return 0;
    size_t A = ccl__align_elems(esize), cs = (U + (size_t)K - 1) / (size_t)K;
    return (cs + A - 1) / A * A;
}
/* Element offset and length of chunk i of buffer `buf` (BUF_IN, BUF_OUT or scratch);
 * in and out have units of U elements, `ustride` apart (CclCall.in_ustride). */
static inline void ccl__chunk_range(int buf, int i, size_t U, size_t ustride, int K, size_t CS, size_t *off,
                                    size_t *len)
{
    if (buf >= BUF_SCRATCH0) {
        *off = (size_t)i * CS;
        *len = CS;
        return;
    }
    size_t u = (size_t)(i / K), c = (size_t)(i % K);
    *off = u * ustride + c * CS;
    *len = c * CS >= U ? 0 : (U - c * CS < CS ? U - c * CS : CS);
}
/* Part q of P of a transfer of L elements: [round_down(q*L/P, A), round_down((q+1)*L/P, A)),
 * the last part ending at L. */
static inline void ccl__part(size_t L, int P, int q, size_t A, size_t *lo, size_t *hi)
{
    /* L * P stays far below 2^64: L < 2^48 elements, P = I * S < 2^16. */
    *lo = L * (size_t)q / (size_t)P / A * A;
    *hi = q + 1 == P ? L : L * (size_t)(q + 1) / (size_t)P / A * A;
}
/* Byte offset of scratch buffer b (>= BUF_SCRATCH0) inside the algorithm's scratch
 * region: the scratch buffers back to back, each buf_chunks[b] * CS elements, the same
 * for every call (docs/internals.md). With b == nbufs it is their size. */
static inline size_t ccl__scratch_offset(const Program *p, int b, size_t CS, size_t esize)
{
    size_t off = 0;
    for (int i = BUF_SCRATCH0; i < b && i < p->nbufs; i++)
        off += (size_t)p->buf_chunks[i] * CS * esize;
    return off;
}

/* A v-collective's segment table: for one rank and one call, the count and the
 * displacement (elements) of every unit of in and of out, CCL__VT_ROWS rows of N words
 * (allgatherv's in has one unit: its other words are 0), then the heap offsets of in
 * and out where peers reach them (~0: nowhere), the staging bytes this rank needs in
 * its v arena, and a word the GPU kernel fills (CCL_VT_FENCE). Published per call in the
 * rank's vring entry (seq % CCL_IDENT_RING), before the call's identity, so a peer that
 * sees the identity sees the table. The layout is the kernel ABI's (cuda/abi.h,
 * CCL_VT_*): GPU kernels read the tables. */
enum {
    CCL__VT_IN_COUNT = CCL_VT_IN_COUNT, CCL__VT_IN_DISPL = CCL_VT_IN_DISPL, CCL__VT_OUT_COUNT = CCL_VT_OUT_COUNT,
    CCL__VT_OUT_DISPL = CCL_VT_OUT_DISPL, CCL__VT_ROWS = CCL_VT_ROWS
};
enum {
    CCL__VT_IN_OFF = CCL_VT_IN_OFF, CCL__VT_OUT_OFF = CCL_VT_OUT_OFF, CCL__VT_STAGE_BYTES = CCL_VT_STAGE_BYTES,
    CCL__VT_FENCE = CCL_VT_FENCE, CCL__VT_TAIL = CCL_VT_TAIL
};
#define CCL__VT_WORDS(N) ((size_t)CCL__VT_ROWS * (size_t)(N) + CCL__VT_TAIL)

/* ===== the point-to-point channels' layout ===== */

/* Point-to-point channels (docs/internals.md, "Point-to-point"), reserved when a comm
 * starts on a backend that runs them, at the same offsets on every rank. In rank d's
 * heap, channel s carries what rank s sends to d. The CPU backend lays it out as
 * CCL__P2P_SLOTS slots of p2p_slot_bytes, each a CclP2pSlot header then payload, with
 * semaphores (64-bit counters at p2p_sem_off): [s] counts the slots rank s has filled in
 * this rank's channel s, [N + d] the slots rank d has emptied of what this rank sent it,
 * every count since the comm began. The GPU kernel lays the same region out its own way
 * (lanes of slots and LL lines: cuda/abi.h's CCL_P2P_*, runtime/src/gpu/p2p.cu). */
enum { CCL__P2P_SLOTS = 2, CCL__P2P_HEADER = 64 };

/* The header of a filled slot: which message it belongs to and what the sender asked,
 * so that the receiver checks the match before it takes a byte. */
typedef struct {
    uint64_t nth;                    /* the message's number on its channel, from 0 */
    uint64_t count;                  /* the send's elements */
    uint64_t dtype;
    uint64_t index, group_calls;     /* the send's place in its group: call `index` (1-based)
                                        of `group_calls` on this comm */
} CclP2pSlot;

/* Byte offset, in any rank's heap, of slot k of channel `sender`. */
static inline size_t ccl__p2p_slot_off(const ccl_comm_t *comm, int sender, int k)
{
    return comm->p2p_off + ((size_t)sender * CCL__P2P_SLOTS + (size_t)k) * comm->p2p_slot_bytes;
}

/* ===== ident.c: call identities ===== */

/* Sets id->hash from the fields after it. */
void ccl__ident_seal(CclIdent *id);
/* Reports that peer `peer` runs `theirs` where this rank runs `mine` (same seq, other
 * hash) as comm's asynchronous error, naming both sides and what differs:
 * CCL_ERR_NOT_SYMMETRIC when a buffer's heap offset differs, else
 * CCL_ERR_INVALID_ARGUMENT ("the ranks disagree"). Thread-safe like
 * ccl__set_async_error. */
void ccl__ident_report(ccl_comm_t *comm, const CclIdent *mine, const CclIdent *theirs, int peer);

/* ===== reduce.c: element types and reductions on the host ===== */

/* dst[e] = op(src[0][e], ..., src[nsrc-1][e]) for e in 0..n, in operand order, computed
 * in float for f16/bf16/fp8 (rounded to nearest even on store), in the type otherwise
 * (integers wrap). avg reduces as sum. dst may be any of the srcs. */
void ccl__reduce(void *dst, const void *const *src, int nsrc, size_t n, ccl_dtype_t t, ccl_op_t op);
/* x[e] /= divisor for e in 0..n (avg's final step; integers truncate). */
void ccl__divide(void *x, size_t n, ccl_dtype_t t, int divisor);
/* Conversions for the half types (round to nearest even; NaN stays NaN). */
float ccl__to_float(const void *x, ccl_dtype_t t);
void ccl__from_float(void *x, float f, ccl_dtype_t t);
double ccl__load_double(const void *x, ccl_dtype_t t);  /* any dtype, as a double */

#endif
