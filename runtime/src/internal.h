/* internal.h: libccl's common code (the .c files of runtime/src above the backends), over the
 * backend interface (backend.h) and the base (base.h).
 *
 * The layers, top to bottom (docs/internals.md, "Layers"; tests/layers/layers.txt):
 *   api.c      the standard collectives, ccl_barrier, ccl_comm_use_algorithm,
 *              ccl_comm_split: argument checks, dispatch
 *   vcoll.c    allgatherv and alltoallv: argument checks, segment tables, the v arena
 *   p2p.c      ccl_send, ccl_recv and groups: checks, held calls, message numbering
 *   library.c  the shipped algorithm library behind ccl_all_reduce and friends
 *   tuner.c    tuning tables: the algorithm and launch shape per (collective, size);
 *              the built-in ones are runtime/tune/NAME.tbl, compiled in
 *   comm.c     communicators: init (threads or processes), split, synchronize, abort,
 *              destroy, ccl_mem_alloc/free, the in-process bootstrap
 *   register.c registered memory (ccl_mem_register, _deregister) and the memory pools
 *              frameworks allocate from (ccl_mem_pool_*)
 *   algorithm.c  load (cclc_compile_source in-process), free (the quarantine),
 *              ccl_algorithm_run
 *   call.c     one call: checks, scratch, staging, pieces (a call larger than the
 *              heap's free space), the CclCalls handed to the backend
 *   mailbox.c  the bootstrap a comm keeps for its life (ccl_comm_split)
 *   watchdog.c the thread that finds peers whose process died (either backend)
 *   bootstrap_env.c  a bootstrap from mpirun's environment (cclc run; no MPI link)
 *   tcpboot.c  ccl_get_unique_id and ccl_comm_init_rank_id: a bootstrap by unique id
 *              over TCP; tcpnet.c, the inter-node transport (ccl_net_t) over its
 *              connections; tcp.c, the sockets under both (tcp.h)
 *   check.c    the checks every entry point starts with: live handles, a usable comm
 *   ---- backend.h: the interface (CclBackend); vlayout.c, channels.c ----
 *   cpu/       the CPU backend (backend.c: host threads run the Plan; heaps.c,
 *              segments.c, p2p.c, waits.c beside it)
 *   gpu/       the GPU backend (NVRTC kernels), same interface: gpu.h (its shared
 *              state), driver.c/.h (the CUDA driver API, dlopen'd), device.c (what
 *              the ranks on one GPU share), mem.c (the symmetric heap), backend.c
 *              (kernels, launches, staging, errors), stream.c (the stream a call runs
 *              on; what co-located ranks wait for), proxy.c/.h (port channels),
 *              jit.c/.h (NVRTC with a disk cache), p2p.c (point-to-point groups),
 *              layout.h (the LL region's size, for whoever sizes a heap: ccl-perf,
 *              tests); the kernel ABI is the compiler's cuda/abi.h
 *   ---- base.h: the base ----
 *
 * Common code reaches a backend only through CclBackend; the backends' headers are
 * included path-qualified ("gpu/gpu.h"), from -Iruntime/src. */
#ifndef CCL_INTERNAL_H
#define CCL_INTERNAL_H

#include "backend.h"

/* ===== tuner.c: tuning tables (docs/tuner.md) ===== */

/* Clears t and sets every entry to "none". */
void ccl__tune_table_init(CclTuneTable *t);
/* Parses a table's text (`name` names it in messages). 0, or -1 with "name:line: what"
 * in err. Strict: a table with one bad line is not used at all. */
int ccl__tune_parse(const char *text, const char *name, CclTuneTable *t, char *err, size_t errlen);
/* Writes t in the format ccl__tune_parse reads (ccl-tune's output): each entry's time
 * and note as a comment ("# 5.21 us (NOTE)"), which the parser reads back as the time. */
void ccl__tune_write(FILE *f, const CclTuneTable *t);
/* Adds (or finds) an algorithm file name; its index, or -1 when the table is full. */
int ccl__tune_file_index(CclTuneTable *t, const char *file);
/* This communicator's key: device model ("cpu", "NVIDIA H200"), topology, version. */
void ccl__tune_key(ccl_comm_t *comm, char *device, size_t dlen, char *topo, size_t tlen, char *version, size_t vlen);
/* The built-in tables: runtime/tune/NAME.tbl, built into libccl as they are
 * ($(BUILD)/tune_tables.c, written by runtime/tune/embed.sh): the path in the source
 * tree and the text, in path order, then {NULL, NULL}; ccl__tune_ntexts of them. */
typedef struct {
    const char *path, *text;
} CclTuneText;
extern const CclTuneText ccl__tune_texts[];
extern const int ccl__tune_ntexts;
/* The built-in table for (device, nranks) into buf: the first of ccl__tune_texts whose
 * "ranks" is nranks and whose "device" is part of `device`, with `device` and this
 * libccl's version in place of its "device" and "version" lines (line numbers kept), and
 * its name ("the built-in table runtime/tune/h200x4.tbl") into name. 0, or -1 when none
 * fits or buf is too small. */
int ccl__tune_builtin(const char *device, int nranks, char *buf, size_t len, char *name, size_t nlen);
/* The bucket of a call of `bytes`: log2 of the next power of two (0 for 0 and 1). */
int ccl__tune_bucket(size_t bytes);
/* Gives a freshly loaded algorithm (never run) the instances and protocol of shape, and
 * keeps shape's threads and slices for its runs; takes new semaphores and prepares the
 * backend again. On failure alg has no backend state: free it with
 * ccl__algorithm_destroy. Collective in the sense of ccl_algorithm_load. */
ccl_result_t ccl__tune_reshape(ccl_algorithm_t *alg, const CclShape *shape, const char *fn);
/* Sets the per-run part of a shape (threads, slices) on alg before ccl__run. */
void ccl__tune_apply_run(ccl_algorithm_t *alg, const CclShape *shape, int slices0);
/* Looks for comm's table now, if it has not yet (otherwise its first standard
 * collective does); once per comm: the table found, or none, stays for its life. */
void ccl__tune_look(ccl_comm_t *comm, const char *fn);
/* For ccl__pick: the table's algorithm for (coll, root, bytes), loaded on first use with
 * its shape, the per-run part applied; NULL when no table or no entry applies (the
 * reason goes to comm->tune.miss). `plain`: the call hands over ordinary buffers, so a
 * ":plain" row of the bucket comes first. The first call looks for the table. */
ccl_algorithm_t *ccl__tune_pick(ccl_comm_t *comm, Collective coll, int root, size_t bytes, int plain, const char *fn);
/* Whether the table in use has ":plain" rows for coll (looks for the table first). */
int ccl__tune_has_plain(ccl_comm_t *comm, Collective coll, const char *fn);
/* Records what dispatch chose without the table, for ccl_comm_explain_choice. */
void ccl__tune_note(ccl_comm_t *comm, Collective coll, size_t bytes, const ccl_algorithm_t *alg, const char *how);

/* ===== bootstraps: mailbox.c, comm.c's in-process one, bootstrap_env.c ===== */

/* Collective over boot, at comm creation: every rank's host mailbox, mapped by every
 * rank (comm->rank, nranks set). On failure the message is set, nothing is left. */
ccl_result_t ccl__mbox_open(ccl_comm_t *comm, const ccl_bootstrap_t *boot, CclMailboxes **out);
void ccl__mbox_close(CclMailboxes *m);
/* The note slots of m's mailboxes (base.h), for comm->notes; NULL for NULL. */
CclNotes *ccl__mbox_notes(CclMailboxes *m);
/* A bootstrap among `members` (comm ranks, in the new rank order; this rank is
 * members[me]) over the mailboxes, for one operation of the comm numbered `epoch`
 * (every member the same, every operation a new one); sb must outlive boot. */
typedef struct {
    CclMailboxes *mb;
    uint32_t epoch;
    uint32_t exchanges;
    const int *members;
    int n, timeout_ms;
    char why[256];                   /* why the last wait failed */
} CclMboxBoot;
void ccl__mbox_boot(CclMboxBoot *sb, CclMailboxes *mb, uint32_t epoch, const int *members, int n, int me,
                    int timeout_ms, ccl_bootstrap_t *boot);
/* Tells the members that this rank gave up in sb's operation: their waits end at once. */
void ccl__mbox_boot_fail(CclMboxBoot *sb);
/* 1 when some rank of m is another process (then every rank's mailbox is shm). */
int ccl__mbox_has_processes(const CclMailboxes *m);
/* A rank whose process is gone (ccl__first_dead) without having left (ccl__mbox_leave),
 * and its pid; -1 when none. */
int ccl__mbox_dead_peer(const CclMailboxes *m, int64_t *pid);
/* Says in this rank's mailbox that it leaves on purpose (from the rank's own process
 * only; m may be NULL): its process going away later is no failure to its peers. */
void ccl__mbox_leave(CclMailboxes *m);

/* comm.c: the timeout a comm made with config gets (config->timeout_ms, else
 * CCL_TIMEOUT_MS, else CCL_DEFAULT_TIMEOUT_MS); CCL_OK, or the init error set, naming fn. */
ccl_result_t ccl__config_timeout(const ccl_config_t *config, const char *fn, int *out);
/* comm.c: ccl_comm_init_rank_net, its messages naming fn (tcpboot.c's constructor). */
ccl_result_t ccl__comm_init_net(ccl_comm_t **comm, const ccl_bootstrap_t *boot, const ccl_net_t *net,
                                int ranks_per_node, int device, const ccl_config_t *config, const char *fn);

/* An in-process bootstrap for ccl_comm_init_all and tests: nranks threads, one
 * ccl_bootstrap_t each (boots[r].rank == r). */
typedef struct CclThreadBoot CclThreadBoot;
CclThreadBoot *ccl__thread_boot_new(int nranks, ccl_bootstrap_t *boots);
void ccl__thread_boot_free(CclThreadBoot *tb);
/* Makes every current and future wait of tb fail (a rank gave up), so peers blocked in
 * its barrier or allgather return -1 instead of waiting forever. */
void ccl__thread_boot_fail(CclThreadBoot *tb);

/* The environment bootstrap used by `cclc run` under mpirun (no MPI link): rank and size
 * from OMPI_COMM_WORLD_* (or PMI_RANK/PMI_SIZE), a rendezvous segment in POSIX shm named
 * after the job (PMIX_NAMESPACE / OMPI_MCA_ess_base_jobid / CCL_JOB_ID). Returns 1 when
 * the environment names no launcher (not under mpirun), 0 on success, -1 on failure
 * with a message in err. Waits are bounded by timeout_ms. */
typedef struct CclEnvBoot CclEnvBoot;
int ccl__env_boot_open(CclEnvBoot **eb, ccl_bootstrap_t *boot, int timeout_ms, char *err, size_t errlen);
void ccl__env_boot_close(CclEnvBoot *eb);
/* Why the last allgather or barrier of eb failed ("rank 2 (pid 4711) died", "ranks 3
 * never joined", "timed out ..."); "" when none did. */
const char *ccl__env_boot_error(const CclEnvBoot *eb);
/* This process's rank among those of its host, from the launcher's environment
 * (Open MPI, MPICH, Slurm, torchrun); `rank` when none says: it picks the GPU. */
int ccl__local_rank(int rank);

/* ===== watchdog.c: peers whose process died, on every backend ===== */

/* At the end of a comm's creation: where some rank is another process, a thread that
 * looks every CCL__PROBE_MS for a peer whose process is gone without having left
 * (ccl__mbox_dead_peer). On one, unless the comm has already failed, it sets the comm's
 * asynchronous error (CCL_ERR_PEER_FAILED, naming the rank, its pid and the host) and
 * stops every rank on that rank's behalf (CclBackend.peer_gone, else abort), so that
 * waits on it give up at once on either backend; then it ends. Nothing to start for
 * ranks that are all threads of this process; a thread that cannot be started is
 * logged (WARN) and the waits' timeouts are left to find dead peers. */
void ccl__watchdog_start(ccl_comm_t *comm);
/* ccl_comm_abort: the watchdog ends (not waited for). */
void ccl__watchdog_halt(ccl_comm_t *comm);
/* ccl_comm_destroy, before anything the watchdog reads is freed: ends it and joins its
 * thread (at once: it waits on a condition, not a sleep). In a forked child, which has
 * no such thread, it only forgets it. */
void ccl__watchdog_stop(ccl_comm_t *comm);

/* ===== check.c: the checks every entry point starts with ===== */

/* CCL_OK for a live handle; else CCL_ERR_INVALID_ARGUMENT with "FN: argument 'comm' ..."
 * in the thread's error (ccl_comm_last_error(NULL)): a NULL, destroyed or foreign one. */
ccl_result_t ccl__check_comm(const ccl_comm_t *comm, const char *fn);
/* As ccl__check_comm, and on CCL_OK the comm is held (ccl__handle_hold) until
 * ccl__release_comm. For the calls a watchdog thread may make while another destroys
 * (docs/api.md). */
ccl_result_t ccl__hold_comm(ccl_comm_t *comm, const char *fn);
ccl_result_t ccl__check_alg(const ccl_algorithm_t *alg, const char *fn);
/* Moves a pending asynchronous failure into last_error ("FN: ..."); the comm is dead
 * from then on. With `poll`, a failure the backend has seen but not reported yet
 * counts too (CclBackend.poll). Returns it, or CCL_OK. */
ccl_result_t ccl__take_async(ccl_comm_t *comm, const char *fn, int poll);
/* For entry points that start work: CCL_OK, or the failure that made comm unusable
 * (reported once as it happened, then as "failed earlier"), with the message set.
 * _poll: counting what the backend has seen, as ccl_comm_get_async_error does. */
ccl_result_t ccl__check_usable(ccl_comm_t *comm, const char *fn);
ccl_result_t ccl__check_usable_poll(ccl_comm_t *comm, const char *fn);
/* The checks every call that names a comm and a dtype starts with: a live comm
 * (ccl__check_comm), a usable one (ccl__check_usable), a dtype of ccl_dtype_t. */
ccl_result_t ccl__check_call(ccl_comm_t *comm, ccl_dtype_t dtype, const char *fn);

/* ===== algorithm.c, call.c and library.c: loading an algorithm, picking one, one call ===== */

/* One compiled program, shared by the ranks of a ccl_comm_init_all group (they load
 * the same text for the same N and root, so one Compilation serves them all: the
 * Program and Plan are read-only once built). Refcounted; see algorithm.c. */
struct CclCompiled {
    struct CclCompiled *next;        /* in the group's list */
    int refs;
    char *source, *file;             /* the text compiled, the name shown in messages */
    size_t len;
    int nranks, root;
    Compilation comp;                /* keeps the Plan's arena alive */
};

/* What the comms of one ccl_comm_init_all share (NULL for ccl_comm_init_rank). */
struct CclGroup {
    pthread_mutex_t mu;
    int refs;                        /* comms alive */
    CclCompiled *compiled;
};

/* ccl_algorithm_load's work, with `fn` naming the user's entry point in messages. */
ccl_result_t ccl__algorithm_load(ccl_comm_t *comm, const char *path_or_source, int root, const char *fn,
                                 ccl_algorithm_t **out);
/* Checks the arguments of one call, resolves buffers, scratch and staging into a
 * CclCall (one per piece where the heap cannot hold the whole call) and hands it to the
 * backend; `fn` names the user's entry point (call.c). */
ccl_result_t ccl__run(ccl_algorithm_t *alg, const void *send, void *recv, size_t count, ccl_dtype_t dtype,
                      ccl_op_t op, void *stream, const char *fn);
/* ccl_all_reduce and friends: the algorithm to run (registered or from the library);
 * `plain`: the call hands over ordinary buffers (ccl__on_plain_buffers). */
ccl_result_t ccl__pick(ccl_comm_t *comm, Collective coll, int root, size_t bytes, int plain, const char *fn,
                       ccl_algorithm_t **alg);

/* Frees alg (synchronizing its comm first) and drops it from the comm's lists. */
void ccl__algorithm_destroy(ccl_algorithm_t *alg);
/* Gives back the heap blocks of freed algorithms that every rank is known to be past
 * (waits for this rank's queued work first when there are any). Called before the
 * heap allocates: every rank calls it at the same point of the same API sequence. */
void ccl__quarantine_release(ccl_comm_t *comm);

/* ccl__run's argument checks and staging decisions, shared with vcoll.c. */
typedef enum {
    CCL__BUF_PRIVATE,                /* outside the heap: peers cannot reach it */
    CCL__BUF_SYMMETRIC,              /* inside one live ccl_mem_alloc buffer */
    CCL__BUF_MISPLACED,              /* in the heap but not inside one: an error */
    CCL__BUF_REGISTERED,             /* inside a registration mapped into the window
                                        (ccl__reg_find gives its heap offset); a caller
                                        that does not use that offset stages it */
} CclBufPlace;
/* Where ptr..ptr+bytes sits; CCL__BUF_MISPLACED with the message set, naming `arg`. */
CclBufPlace ccl__buffer_place(ccl_comm_t *comm, const void *ptr, size_t bytes, const char *fn, const char *arg);
/* Whether ptr..ptr+bytes is ordinary memory (CCL__BUF_PRIVATE: NULL too): outside the
 * heap and every registration, so no peer reaches it. Sets no error: the question of
 * routes chosen before a call's checks (the exchange rule, the tuner's ":plain" rows). */
int ccl__buffer_ordinary(const ccl_comm_t *comm, const void *ptr, size_t bytes);
/* Whether a standard collective's call hands over an ordinary buffer: a sendbuf or
 * recvbuf (not NULL) neither in the heap nor inside a registration, which the tuner's
 * ":plain" rows are for. Sets no error. */
int ccl__on_plain_buffers(const ccl_comm_t *comm, Collective coll, const void *send, const void *recv, size_t count,
                          size_t esize);
/* Fills and seals the call's identity from the call (call.c). */
void ccl__ident_fill(const CclCall *c, CclIdent *id);
/* After the backend accepted a call: the comm's and the algorithm's bookkeeping. */
void ccl__run_done(ccl_algorithm_t *alg, const CclCall *c);

/* ===== register.c: registered memory (ccl_mem_register) and pools ===== */

/* 1 and *off, the heap offset at which every rank's peers reach p, when [p, p + bytes)
 * lies inside one live registration mapped into the window; 0 otherwise. Cheap when
 * nothing is registered (one load). */
int ccl__reg_find(const ccl_comm_t *comm, const void *p, size_t bytes, size_t *off);
/* How many live registrations hold the ccl_mem_alloc buffer at heap offset off (its
 * `bytes` bytes): ccl_mem_free refuses it while one does. */
int ccl__reg_holds_heap(const ccl_comm_t *comm, size_t off, size_t bytes);
/* The window's layout as one word, for call identities (0: nothing registered). */
uint64_t ccl__reg_layout(const ccl_comm_t *comm);
/* ccl_comm_destroy, after its synchronize: detaches comm from the memory pools and
 * releases every registration, not collectively (peers may still run). */
void ccl__reg_release_all(ccl_comm_t *comm);

/* ===== vcoll.c: allgatherv and alltoallv ===== */

/* One call of a v-collective: sendcounts/sdispls have the collective's in units (1 for
 * allgatherv, N for alltoallv), recvcounts/rdispls N; NULL displacements: packed in
 * unit order. Checks every argument, resolves buffers and staging, hands the call to
 * the backend. */
ccl_result_t ccl__run_v(ccl_algorithm_t *alg, const void *send, const size_t *sendcounts, const size_t *sdispls,
                        void *recv, const size_t *recvcounts, const size_t *rdispls, ccl_dtype_t dtype, void *stream,
                        const char *fn);
/* 1 where the standard exchange coll (alltoall, alltoallv, allgatherv) of `bytes` in all
 * (alltoall's sendbuf, allgatherv's recvbuf; 0 for alltoallv) into recv (alltoall's
 * recvbuf, whose place the rule may ask) runs as point-to-point messages on comm, 0
 * where it runs a program; and ccl_all_to_all so. */
int ccl__exchange_p2p(const ccl_comm_t *comm, Collective coll, size_t bytes, const void *recv);
ccl_result_t ccl__all_to_all_p2p(const void *send, void *recv, size_t count, ccl_dtype_t dtype, ccl_comm_t *comm,
                                 void *stream, const char *fn);

/* ===== p2p.c: point-to-point and groups ===== */

/* 1 while the calling thread has a group open. */
int ccl__group_open(void);
/* A v-collective's segments as one group of ops on call->comm, launched at once (even
 * inside an open group: a collective is not held): numbers the messages and hands them
 * with call's staging to the backend. ops (call->nops of them) are filled in but for
 * nth, index and reg_off; call->ops is set here. */
ccl_result_t ccl__p2p_launch_v(CclP2pCall *call, CclP2pOp *ops, const char *fn);
/* ccl_comm_split inside a group (its arguments checked): held until the outermost
 * ccl_group_end, which makes every held split at once, each on a thread of its own,
 * and sets *newcomm then (config is copied). */
ccl_result_t ccl__group_defer_split(ccl_comm_t *comm, int color, int key, ccl_comm_t **newcomm,
                                    const ccl_config_t *config);
/* Fails the calling thread's open group (the first failure is kept): ccl_group_end
 * then launches nothing of it and says `why`. */
void ccl__group_fail(ccl_result_t r, const char *why);
/* comm.c: the split itself, blocking until every rank of comm has made its call. */
ccl_result_t ccl__comm_split_now(ccl_comm_t *comm, int color, int key, ccl_comm_t **newcomm,
                                 const ccl_config_t *config);

#endif
