/* worker.c: one rank of ccl-perf (perf_worker), the same code in both ways to run (one
 * process per rank, or a thread per rank: perf.c): its agreement with the other ranks
 * over the bootstrap, its buffers, each op of ours and of NCCL's, the check of every
 * result, the timing of one size (eagerly or as a CUDA graph), and the loop over the
 * sweep. Takes the Shared state perf.c set up (options, sizes, patterns, NCCL's status)
 * and fills its rows; calls nothing of perf.c. */
#include "perf.h"

static _Noreturn __attribute__((format(printf, 2, 3))) void worker_fail(Worker *w, const char *fmt, ...)
{
    fflush(stdout);
    /* One fputs, so the lines of ranks failing at once do not interleave. */
    char msg[16384];
    int n = snprintf(msg, sizeof msg, "ccl-perf: rank %d: ", w->rank);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof msg - (size_t)n - 1, fmt, ap);
    va_end(ap);
    strcat(msg, "\n");
    fputs(msg, stderr);
    if (!w->in_worker)
        exit(1);    /* main()'s own agreement, single-threaded: nothing runs under us */
    w->exit_code = 1;
    w->failed = 1;
    /* Peers blocked in an agreement with us give up too, and unwind the same way. */
    if (w->tb)
        ccl__thread_boot_fail(w->tb);
    longjmp(w->fail_jmp, 1);
}

/* Scratch slot `slot` of at least `bytes` bytes, kept until perf_worker() returns. */
static void *agree_mem(Worker *w, int slot, size_t bytes)
{
    if (w->agree_cap[slot] < bytes) {
        void *p = realloc(w->agree_buf[slot], bytes);
        if (!p)
            worker_fail(w, "out of memory");
        w->agree_buf[slot] = p;
        w->agree_cap[slot] = bytes;
    }
    return w->agree_buf[slot];
}

/* A call of the harness's GPU (tools/common/cuda.c, timing.c): on failure, the driver
 * call that failed and why. */
static void cu_check(Worker *w, CuResult e)
{
    char why[256];
    if (e != 0) {
        tool_gpu_why(&w->g, e, why, sizeof why);
        worker_fail(w, "%s", why);
    }
}

static void ccl_check(Worker *w, ccl_result_t r, const char *what)
{
    if (r != CCL_OK)
        worker_fail(w, "%s failed: %s: %s", what, ccl_result_string(r), ccl_comm_last_error(w->comm));
}

static void nccl_check(Worker *w, NcclResult r, const char *what)
{
    if (r != 0)
        worker_fail(w, "%s failed: %s (NCCL error %d)", what, perf_nccl.GetErrorString ? perf_nccl.GetErrorString(r) : "?", (int)r);
}

/* Agreement among ranks, through the bootstrap (same result on every rank). */
static void agree_gather(Worker *w, const void *in, void *out, size_t bytes)
{
    void *scratch = bytes > TOOL_AGREE_PIECE ? agree_mem(w, 0, TOOL_AGREE_PIECE * (size_t)w->nranks) : NULL;
    if (tool_allgather(w->boot, w->nranks, in, out, bytes, scratch) != 0)
        worker_fail(w, "the bootstrap's allgather failed (a peer died?)");
}

static void agree_barrier(Worker *w)
{
    if (w->boot->barrier(w->boot->ctx) != 0)
        worker_fail(w, "the bootstrap's barrier failed (a peer died?)");
}

long long perf_agree_sum(Worker *w, long long v)
{
    long long *all = agree_mem(w, 1, sizeof v * (size_t)w->nranks), s = 0;
    agree_gather(w, &v, all, sizeof v);
    for (int r = 0; r < w->nranks; r++)
        s = all[r] < 0 || s < 0 ? -1 : s + all[r];
    return s;
}

/* Per sample the maximum over ranks, then the median of those. */
static double agree_median_of_max(Worker *w, const double *samples, int ns)
{
    double *all = agree_mem(w, 1, sizeof *all * (size_t)ns * (size_t)w->nranks);
    double *mx = agree_mem(w, 2, sizeof *mx * (size_t)ns);
    agree_gather(w, samples, all, sizeof *samples * (size_t)ns);
    for (int i = 0; i < ns; i++) {
        mx[i] = all[i];
        for (int r = 1; r < w->nranks; r++)
            if (all[(size_t)r * (size_t)ns + (size_t)i] > mx[i])
                mx[i] = all[(size_t)r * (size_t)ns + (size_t)i];
    }
    return tool_median(mx, ns);
}

/* ===== buffers: host memory on the CPU backend, device memory on the GPU ===== */

/* Uploads and fills return once the context is idle (tool_gpu_upload): an op launched
 * next on the op stream sees the new bytes. Empty ranges (alltoallv's: a rank may
 * receive nothing at small sizes) ask nothing of the driver. */
static void buf_upload(Worker *w, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0)
        return;
    if (!w->gpu) {
        memcpy(dst, src, bytes);
        return;
    }
    cu_check(w, tool_gpu_upload(&w->g, dst, src, bytes));
}

static void buf_poison(Worker *w, void *dst, size_t bytes)
{
    if (bytes == 0)
        return;
    if (!w->gpu) {
        memset(dst, 0xff, bytes);
        return;
    }
    cu_check(w, tool_gpu_fill(&w->g, dst, 0xff, bytes));
}

/* The buffer's bytes, readable on the host (valid until the next call). */
static const unsigned char *buf_read(Worker *w, const void *src, size_t bytes)
{
    if (!w->gpu || bytes == 0)
        return w->gpu ? w->host : src;
    cu_check(w, tool_gpu_download(&w->g, w->host, src, bytes));
    return w->host;
}

/* Fills [pos0, pos0+n) of rank r's input pattern into dst (device or host). */
static void buf_fill(Worker *w, void *dst, size_t pos0, size_t n, int r)
{
    size_t es = w->sh->pat.esize;
    unsigned char *img = w->gpu ? w->host : dst;
    perf_pattern_fill(img, pos0, n, w->sh->pat.tab_in[r], es);
    if (w->gpu)
        buf_upload(w, dst, img, n * es);
}

/* An implementation's two buffers: the --buffers pair for ours and for NCCL's plain mode
 * (the same pointers), NCCL's registered windows for its symmetric mode. Both pairs have
 * send_cap and recv_cap bytes. */
static void impl_buffers(const Worker *w, int impl, char **sendbuf, char **recvbuf)
{
    *sendbuf = impl == IMPL_NCCL_SYM ? w->sym_sendbuf : w->sendbuf;
    *recvbuf = impl == IMPL_NCCL_SYM ? w->sym_recvbuf : w->recvbuf;
}

/* The send and receive pointers of one op (nccl-tests' in-place conventions). */
static void op_buffers(const Worker *w, int impl, int inplace, size_t count, const void **send, void **recv)
{
    size_t es = w->sh->pat.esize;
    PerfColl c = w->sh->coll;
    char *sb, *rb;
    impl_buffers(w, impl, &sb, &rb);
    if (!inplace) {
        *send = sb, *recv = rb;
    } else if (c == PERF_ALLGATHER) {
        *recv = rb;
        *send = rb + (size_t)w->rank * count * es;
    } else if (c == PERF_REDUCE_SCATTER) {
        *send = sb;
        *recv = sb + (size_t)w->rank * count * es;
    } else {
        *send = *recv = rb;
    }
}

/* Whether c takes counts per rank (v_setup, --v-counts). */
static int is_v(PerfColl c) { return c == PERF_ALLTOALLV || c == PERF_ALLGATHERV; }

/* Elements of the op's output on this rank: alltoallv's differ per rank (v_setup). */
static size_t recv_elems(const Worker *w, size_t count)
{
    return is_v(w->sh->coll) ? w->v_recv_total : out_elems(w->sh->coll, w->nranks, count);
}

/* Writes the op's input and poisons its output (synchronously). */
static void prepare(Worker *w, int impl, int inplace, size_t count)
{
    PerfColl c = w->sh->coll;
    size_t es = w->sh->pat.esize, nin = in_elems(c, w->nranks, count), nout = recv_elems(w, count);
    int root = w->o->root;
    if (c == PERF_ALLGATHERV)
        nin = w->v_recv[w->rank];    /* its own part of the vector */
    char *sb, *rb;
    impl_buffers(w, impl, &sb, &rb);
    if (!inplace) {
        buf_fill(w, sb, 0, nin, w->rank);
        buf_poison(w, rb, nout * es);
    } else if (c == PERF_ALLGATHER) {
        buf_poison(w, rb, nout * es);
        buf_fill(w, rb + (size_t)w->rank * count * es, 0, count, w->rank);
    } else if (c == PERF_REDUCE_SCATTER) {
        buf_fill(w, sb, 0, nin, w->rank);
    } else if (c == PERF_BROADCAST && w->rank != root) {
        buf_poison(w, rb, nout * es);
    } else {
        buf_fill(w, rb, 0, nin, w->rank);
    }
}

/* CCL_PERF_INJECT_WRONG=K: rank 0 spoils K elements of every checked CCL result. */
size_t perf_inject_wrong;

/* Wrong elements of this rank's output; -1 when this op's result is not checkable. */
static long long verify(Worker *w, int impl, int inplace, size_t count)
{
    PerfColl c = w->sh->coll;
    const Pattern *p = &w->sh->pat;
    size_t es = p->esize;
    int n = w->nranks, root = w->o->root;
    if (c == PERF_REDUCE && w->rank != root)
        return 0;                         /* non-root outputs are undefined */
    /* NCCL's avg of floating types multiplies by 1/N before summing: exact only for
     * powers of two. Its integer avg sums, then divides, as ours. */
    if (impl != IMPL_CCL && w->o->op == CCL_AVG && perf_colls[c].reduces && (n & (n - 1)) &&
        !tool_dtype_integer(w->o->dtype))
        return -1;
    const void *send;
    void *recv;
    op_buffers(w, impl, inplace, count, &send, &recv);
    size_t nout = recv_elems(w, count);
    /* The checker's own test (tests/perf): spoil rank 0's first elements. */
    if (perf_inject_wrong && w->rank == 0 && impl == IMPL_CCL)
        buf_poison(w, recv, (perf_inject_wrong < nout ? perf_inject_wrong : nout) * es);
    const unsigned char *b = buf_read(w, recv, nout * es);
    long long wrong = 0;
    switch (c) {
    case PERF_ALLREDUCE:
    case PERF_REDUCE:
        wrong = perf_pattern_wrong(b, 0, count, p->tab_red, es);
        break;
    case PERF_REDUCE_SCATTER:
        wrong = perf_pattern_wrong(b, (size_t)w->rank * count, count, p->tab_red, es);
        break;
    case PERF_BROADCAST:
        wrong = perf_pattern_wrong(b, 0, count, p->tab_in[root], es);
        break;
    case PERF_ALLGATHER:
        for (int q = 0; q < n; q++)
            wrong += perf_pattern_wrong(b + (size_t)q * count * es, 0, count, p->tab_in[q], es);
        break;
    case PERF_ALLTOALL:
        for (int q = 0; q < n; q++)
            wrong += perf_pattern_wrong(b + (size_t)q * count * es, (size_t)w->rank * count, count, p->tab_in[q], es);
        break;
    case PERF_ALLGATHERV:
    case PERF_ALLTOALLV:
        /* Segment q: the part of rank q's input that q sends this rank (allgatherv: all
         * of rank q's part, from the start of its input). */
        for (int q = 0; q < n; q++)
            wrong += perf_pattern_wrong(b + w->v_rdispl[q] * es, w->v_src_pos[q], w->v_recv[q], p->tab_in[q], es);
        break;
    case PERF_SENDRECV:
        wrong = perf_pattern_wrong(b, 0, count, p->tab_in[(w->rank + n - 1) % n], es);
        break;
    case PERF_NCOLLS:
        break;
    }
    return wrong;
}

/* CCL_PERF_INJECT_UNSUPPORTED=B: every op of ours of B bytes or more acts as if the
 * library had refused it (tests/perf: the refusal's report, where no backend refuses). */
size_t perf_inject_unsupported;

/* Enqueues one op of NCCL's (either mode); fails the rank on an error. */
static void issue_nccl(Worker *w, int impl, int inplace, size_t count)
{
    const Opts *o = w->o;
    const void *send;
    void *recv;
    op_buffers(w, impl, inplace, count, &send, &recv);
    NcclDataType t = perf_nccl_dtype(o->dtype);
    NcclRedOp op = perf_nccl_op(o->op);
    NcclComm nc = w->ncomm;
    CuStream s = w->g.stream;
    size_t es = w->sh->pat.esize;
    int n = w->nranks;
    NcclResult r = 0;
    switch (w->sh->coll) {
    case PERF_ALLREDUCE: r = perf_nccl.AllReduce(send, recv, count, t, op, nc, s); break;
    case PERF_ALLGATHER: r = perf_nccl.AllGather(send, recv, count, t, nc, s); break;
    case PERF_REDUCE_SCATTER: r = perf_nccl.ReduceScatter(send, recv, count, t, op, nc, s); break;
    case PERF_BROADCAST: r = perf_nccl.Broadcast(send, recv, count, t, o->root, nc, s); break;
    case PERF_REDUCE: r = perf_nccl.Reduce(send, recv, count, t, op, o->root, nc, s); break;
    case PERF_ALLGATHERV: {
        /* As PyTorch's ProcessGroupNCCL gathers tensors of unequal sizes: one broadcast
         * per rank, rooted there, into that rank's segment, all in one group. NCCL reads
         * the send buffer on the root only. */
        nccl_check(w, perf_nccl.GroupStart(), "ncclGroupStart");
        for (int q = 0; q < n && r == 0; q++)
            r = perf_nccl.Broadcast(send, (char *)recv + w->v_rdispl[q] * es, w->v_recv[q], t, q, nc, s);
        NcclResult e = perf_nccl.GroupEnd();
        r = r ? r : e;
        break;
    }
    case PERF_ALLTOALL:
    case PERF_ALLTOALLV:
    case PERF_SENDRECV: {
        /* As nccl-tests does: the sends and receives of one op in a group (alltoall:
         * one of each per peer; alltoallv: the same with the count matrix's segments;
         * sendrecv: one send right and one receive from the left). */
        nccl_check(w, perf_nccl.GroupStart(), "ncclGroupStart");
        if (w->sh->coll == PERF_SENDRECV) {
            r = perf_nccl.Send(send, count, t, (w->rank + 1) % n, nc, s);
            if (r == 0)
                r = perf_nccl.Recv(recv, count, t, (w->rank + n - 1) % n, nc, s);
        }
        for (int p = 0; w->sh->coll != PERF_SENDRECV && p < n && r == 0; p++) {
            int v = w->sh->coll == PERF_ALLTOALLV;
            r = perf_nccl.Send((const char *)send + (v ? w->v_sdispl[p] : (size_t)p * count) * es,
                               v ? w->v_send[p] : count, t, p, nc, s);
            if (r == 0)
                r = perf_nccl.Recv((char *)recv + (v ? w->v_rdispl[p] : (size_t)p * count) * es,
                                   v ? w->v_recv[p] : count, t, p, nc, s);
        }
        NcclResult e = perf_nccl.GroupEnd();
        r = r ? r : e;
        break;
    }
    case PERF_NCOLLS:
        break;
    }
    nccl_check(w, r, "NCCL collective");
}

/* sendrecv's group: a send to the right and a receive from the left. ccl_group_end runs
 * even after a call inside failed, so this thread's group is closed; the first failure
 * is the one returned, its message in why (ccl_group_end's own would only say that the
 * group was dropped). */
static ccl_result_t issue_sendrecv(Worker *w, const void *send, void *recv, size_t count, void *stream, char *why,
                                   size_t len)
{
    int n = w->nranks;
    ccl_dtype_t t = w->o->dtype;
    ccl_result_t r = ccl_group_start();
    if (r != CCL_OK) {
        snprintf(why, len, "%s", ccl_comm_last_error(NULL));
        return r;
    }
    ccl_result_t calls[2] = {ccl_send(send, count, t, (w->rank + 1) % n, w->comm, stream), CCL_OK};
    if (calls[0] != CCL_OK)
        snprintf(why, len, "%s", ccl_comm_last_error(w->comm));
    calls[1] = ccl_recv(recv, count, t, (w->rank + n - 1) % n, w->comm, stream);
    if (calls[1] != CCL_OK && calls[0] == CCL_OK)
        snprintf(why, len, "%s", ccl_comm_last_error(w->comm));
    ccl_result_t end = ccl_group_end();
    if (calls[0] != CCL_OK || calls[1] != CCL_OK)
        return calls[0] != CCL_OK ? calls[0] : calls[1];
    if (end != CCL_OK)
        snprintf(why, len, "%s", ccl_comm_last_error(NULL));
    return end;
}

/* Enqueues one op of ours. Returns the library's result; on failure, its message is in
 * why. */
static ccl_result_t issue_ccl(Worker *w, int inplace, size_t count, char *why, size_t len)
{
    const Opts *o = w->o;
    const void *send;
    void *recv;
    op_buffers(w, IMPL_CCL, inplace, count, &send, &recv);
    if (perf_inject_unsupported && count * w->sh->pat.esize >= perf_inject_unsupported) {
        snprintf(why, len, "CCL_PERF_INJECT_UNSUPPORTED=%zu: ccl-perf refuses ops of this size itself (a test)",
                 perf_inject_unsupported);
        return CCL_ERR_UNSUPPORTED;
    }
    ccl_result_t r = CCL_ERR_INTERNAL;
    void *stream = w->gpu ? (void *)w->g.stream : NULL;
    if (w->alg && w->sh->coll == PERF_ALLTOALLV) {
        r = ccl_algorithm_run_v(w->alg, send, w->v_send, w->v_sdispl, recv, w->v_recv, w->v_rdispl, o->dtype, stream);
    } else if (w->alg && w->sh->coll == PERF_ALLGATHERV) {
        r = ccl_algorithm_run_v(w->alg, send, &w->v_recv[w->rank], NULL, recv, w->v_recv, w->v_rdispl, o->dtype, stream);
    } else if (w->alg) {
        r = ccl_algorithm_run(w->alg, send, recv, count, o->dtype, o->op, stream);
    } else {
        switch (w->sh->coll) {
        case PERF_ALLREDUCE: r = ccl_all_reduce(send, recv, count, o->dtype, o->op, w->comm, stream); break;
        case PERF_ALLGATHER: r = ccl_all_gather(send, recv, count, o->dtype, w->comm, stream); break;
        case PERF_REDUCE_SCATTER: r = ccl_reduce_scatter(send, recv, count, o->dtype, o->op, w->comm, stream); break;
        case PERF_ALLTOALL: r = ccl_all_to_all(send, recv, count, o->dtype, w->comm, stream); break;
        case PERF_BROADCAST: r = ccl_broadcast(send, recv, count, o->dtype, o->root, w->comm, stream); break;
        case PERF_REDUCE: r = ccl_reduce(send, recv, count, o->dtype, o->op, o->root, w->comm, stream); break;
        case PERF_ALLTOALLV:
            r = ccl_all_to_all_v(send, w->v_send, w->v_sdispl, recv, w->v_recv, w->v_rdispl, o->dtype, w->comm, stream);
            break;
        case PERF_ALLGATHERV:
            r = ccl_all_gather_v(send, w->v_recv[w->rank], recv, w->v_recv, w->v_rdispl, o->dtype, w->comm, stream);
            break;
        case PERF_SENDRECV: return issue_sendrecv(w, send, recv, count, stream, why, len);
        case PERF_NCOLLS: snprintf(why, len, "no such collective"); return CCL_ERR_INTERNAL;
        }
    }
    if (r != CCL_OK)
        snprintf(why, len, "%s", ccl_comm_last_error(w->comm));
    return r;
}

/* The name of ours as the messages give it: the library's entry point, or --algo's. */
static const char *ccl_call_name(const Worker *w)
{
    static const char *const name[PERF_NCOLLS] = {
        [PERF_ALLREDUCE] = "ccl_all_reduce", [PERF_ALLGATHER] = "ccl_all_gather",
        [PERF_REDUCE_SCATTER] = "ccl_reduce_scatter", [PERF_ALLTOALL] = "ccl_all_to_all",
        [PERF_BROADCAST] = "ccl_broadcast", [PERF_REDUCE] = "ccl_reduce", [PERF_ALLTOALLV] = "ccl_all_to_all_v",
        [PERF_SENDRECV] = "ccl_send/ccl_recv group", [PERF_ALLGATHERV] = "ccl_all_gather_v"};
    if (w->alg)
        return w->sh->coll == PERF_ALLTOALLV || w->sh->coll == PERF_ALLGATHERV ? "ccl_algorithm_run_v" : "ccl_algorithm_run";
    return name[w->sh->coll];
}

/* Enqueues one op of the given implementation; fails the rank on any error. */
static void issue(Worker *w, int impl, int inplace, size_t count)
{
    if (impl != IMPL_CCL) {
        issue_nccl(w, impl, inplace, count);
        return;
    }
    char why[1024];
    ccl_result_t r = issue_ccl(w, inplace, count, why, sizeof why);
    if (r != CCL_OK)
        worker_fail(w, "%s failed: %s: %s", ccl_call_name(w), ccl_result_string(r), why);
}

/* Waits for everything this rank enqueued; for CCL also collects asynchronous errors. */
static void wait_idle(Worker *w, int impl)
{
    if (w->gpu)
        cu_check(w, tool_gpu_sync(&w->g));
    if (impl == IMPL_CCL)
        ccl_check(w, ccl_comm_synchronize(w->comm), "ccl_comm_synchronize");
}

static double event_us(Worker *w, int i, double div)
{
    double us;
    cu_check(w, tool_gpu_elapsed_us(&w->g, i, div, &us));
    return us;
}

/* The first op of ours at a size, which is where the library refuses what it does not
 * run (CCL_ERR_UNSUPPORTED: a backend without point-to-point or a v-collective). Refusal is
 * agreed: if any rank's call was refused, every rank gets 1 and skips the size (a rank
 * whose call went through then fails at its wait, naming the peer that never came),
 * and rank 0 keeps the first message for the report. Any other error fails the rank. */
static int first_op_refused(Worker *w, int inplace, size_t count)
{
    char why[1024] = "";
    ccl_result_t r = issue_ccl(w, inplace, count, why, sizeof why);
    int refused = r == CCL_ERR_UNSUPPORTED;
    if (perf_agree_sum(w, refused) == 0) {
        if (r != CCL_OK)
            worker_fail(w, "%s failed: %s: %s", ccl_call_name(w), ccl_result_string(r), why);
        return 0;
    }
    if (r != CCL_OK && !refused)
        worker_fail(w, "%s failed: %s: %s", ccl_call_name(w), ccl_result_string(r), why);
    if (!refused)
        wait_idle(w, IMPL_CCL);
    /* Only rank 0 reports, so only rank 0 writes (the threads share sh). */
    if (w->rank == 0 && !w->sh->refused_why[0])
        snprintf(w->sh->refused_why, sizeof w->sh->refused_why, "%s: %.400s", ccl_call_name(w),
                 refused ? why : "refused on other ranks, not on rank 0");
    return 1;
}

/* Times one (implementation, placement, size) on this rank. Every rank calls it in the
 * same order; the result is agreed (identical on every rank). */
static Stat measure(Worker *w, int impl, int inplace, size_t count, size_t bytes)
{
    const Opts *o = w->o;
    int check = o->check, n = o->iters;
    double samples[PERF_MAX_ITERS];
    int ns = 0;
    long long wrong = check ? 0 : -1;
    int graph = o->graph;

    agree_barrier(w);
    prepare(w, impl, inplace, count);
    agree_barrier(w);
    /* At least one op before a capture: the first call of a size may compile, load or
     * allocate, none of which belongs in a graph. Ours gets at least one everywhere, as
     * the probe for a refusal. */
    int warm = (graph || impl == IMPL_CCL) && o->warmup < 1 ? 1 : o->warmup;
    if (impl == IMPL_CCL && first_op_refused(w, inplace, count))
        return (Stat){-1, -1, 1};
    for (int i = impl == IMPL_CCL; i < warm; i++)
        issue(w, impl, inplace, count);
    wait_idle(w, impl);

    if (graph) {
        /* perf_graph_ops per graph, replayed --repeats times after one untimed replay. */
        int ops = perf_graph_ops(o, bytes);
        if (check && inplace) {
            /* In-place data changes with every op of a graph; check one eager op. */
            agree_barrier(w);
            prepare(w, impl, inplace, count);
            agree_barrier(w);
            issue(w, impl, inplace, count);
            wait_idle(w, impl);
            long long v = verify(w, impl, inplace, count);
            wrong = v < 0 ? -1 : wrong + v;
        }
        agree_barrier(w);
        prepare(w, impl, inplace, count);
        agree_barrier(w);
        cu_check(w, tool_gpu_capture_begin(&w->g));
        for (int k = 0; k < ops; k++)
            issue(w, impl, inplace, count);
        CuResult e = tool_gpu_capture_end(&w->g);
        if (e != 0 && !strcmp(w->g.what, "cuStreamEndCapture"))
            worker_fail(w, "--graph: capturing %s ops failed: %s (CUDA error %d); the collective is not graph-capturable",
                        impl == IMPL_CCL ? "ccl" : impl == IMPL_NCCL ? "NCCL" : "NCCL (symmetric windows)",
                        tool_cuda_error(e), e);
        cu_check(w, e);
        cu_check(w, tool_gpu_replay(&w->g));
        wait_idle(w, impl);
        /* Replays back to back, so ranks' launch skew touches only the first. */
        agree_barrier(w);
        for (int rep = 0; rep < o->repeats; rep++) {
            cu_check(w, tool_gpu_mark(&w->g, rep, 0));
            cu_check(w, tool_gpu_replay(&w->g));
            cu_check(w, tool_gpu_mark(&w->g, rep, 1));
        }
        wait_idle(w, impl);
        for (int rep = 0; rep < o->repeats; rep++)
            samples[ns++] = event_us(w, rep, ops);
        /* Checked after the timing, as many replays again, each alone with its output
         * poisoned first: checked inside the timed loop, every replay would carry the
         * ranks' launch skew after the host's check (50-260 us per op at 256 MB-1 GB on
         * 2x H200, docs/perf/x2-tables), not the collective's time. */
        for (int rep = 0; check && !inplace && rep < o->repeats; rep++) {
            /* Every rank is done with the previous replay before anyone poisons. */
            agree_barrier(w);
            char *sb, *rb;
            impl_buffers(w, impl, &sb, &rb);
            buf_poison(w, rb, recv_elems(w, count) * w->sh->pat.esize);
            agree_barrier(w);
            cu_check(w, tool_gpu_replay(&w->g));
            wait_idle(w, impl);
            long long v = verify(w, impl, inplace, count);
            wrong = v < 0 || wrong < 0 ? -1 : wrong + v;
        }
        tool_gpu_graph_free(&w->g);
    } else if (w->gpu && !check) {
        /* Ops back to back, one event pair each: the host's launch cost shows where it
         * is slower than the GPU, as it would in an eager application. */
        agree_barrier(w);
        for (int i = 0; i < n; i++) {
            cu_check(w, tool_gpu_mark(&w->g, i, 0));
            issue(w, impl, inplace, count);
            cu_check(w, tool_gpu_mark(&w->g, i, 1));
        }
        wait_idle(w, impl);
        for (int i = 0; i < n; i++)
            samples[ns++] = event_us(w, i, 1);
    } else {
        /* One op at a time: fresh input and poisoned output before each (all ranks done
         * with the previous op first, so nobody still reads what we rewrite). */
        for (int i = 0; i < n; i++) {
            agree_barrier(w);
            if (check) {
                prepare(w, impl, inplace, count);
                agree_barrier(w);
            }
            double t0 = 0;
            if (w->gpu)
                cu_check(w, tool_gpu_mark(&w->g, i, 0));
            else
                t0 = tool_now_us();
            issue(w, impl, inplace, count);
            if (w->gpu)
                cu_check(w, tool_gpu_mark(&w->g, i, 1));
            wait_idle(w, impl);
            samples[ns++] = w->gpu ? event_us(w, i, 1) : tool_now_us() - t0;
            if (check) {
                long long v = verify(w, impl, inplace, count);
                wrong = v < 0 || wrong < 0 ? -1 : wrong + v;
            }
        }
    }
    Stat st = {0};
    st.us = agree_median_of_max(w, samples, ns);
    st.wrong = perf_agree_sum(w, wrong);
    return st;
}

/* ===== one rank ===== */

/* The device's primary context (the one the CUDA runtime and NCCL use), the op stream
 * and an event pair per sample (tools/common/cuda.c). */
static void worker_setup_gpu(Worker *w)
{
    int nev = w->o->iters > w->o->repeats ? w->o->iters : w->o->repeats;
    cu_check(w, tool_gpu_open(&w->g, w->device, nev));
    if (w->rank == 0 && tool_gpu_name(&w->g, w->sh->devname, sizeof w->sh->devname - 16) == 0)
        snprintf(w->sh->devname + strlen(w->sh->devname), 16, " x%d", w->nranks);
}

/* Whether the step `what` failed on any rank (agreed); if so, `why` says where and NCCL's
 * words for the first failure, the same text on every rank. */
static int agree_nccl_failure(Worker *w, NcclResult r, const char *what, char *why, size_t len)
{
    long long mine = r, *all = agree_mem(w, 1, sizeof mine * (size_t)w->nranks);
    agree_gather(w, &mine, all, sizeof mine);
    int failed = 0, first = -1;
    for (int q = 0; q < w->nranks; q++)
        if (all[q] != 0) {
            failed++;
            first = first < 0 ? q : first;
        }
    if (failed)
        snprintf(why, len, "%s failed on %d of %d ranks (rank %d: %s, NCCL error %lld)", what, failed, w->nranks, first,
                 perf_nccl.GetErrorString((NcclResult)all[first]), all[first]);
    return failed != 0;
}

/* NCCL's symmetric mode: a send and a receive buffer from ncclMemAlloc, as large as ours,
 * each registered once as a symmetric window before any timing, collectively and in the
 * same order on every rank (as NCCL requires). A failure anywhere (agreed) turns the
 * mode off on every rank and is reported once, in the header; the plain mode goes on.
 * Windows registered on every rank are deregistered by perf_worker(); one that failed on some
 * rank is left to ncclCommDestroy, and the buffers are freed after it. */
static void worker_setup_windows(Worker *w)
{
    Shared *sh = w->sh;
    void **buf[2] = {&w->sym_sendbuf, &w->sym_recvbuf};
    size_t cap[2] = {w->send_cap, w->recv_cap};
    const char *name[2] = {"send", "receive"};
    char why[sizeof sh->nc.sym_why] = "", what[128];
    for (int i = 0; i < 2; i++) {
        NcclResult r = perf_nccl.MemAlloc(buf[i], cap[i]);
        if (r != 0)
            *buf[i] = NULL;
        snprintf(what, sizeof what, "ncclMemAlloc (%s buffer, %zu bytes)", name[i], cap[i]);
        if (agree_nccl_failure(w, r, what, why, sizeof why))
            break;
        r = perf_nccl.CommWindowRegister(w->ncomm, *buf[i], cap[i], &w->sym_win[i], PERF_NCCL_WIN_COLL_SYMMETRIC);
        snprintf(what, sizeof what, "ncclCommWindowRegister (%s buffer, %zu bytes, NCCL_WIN_COLL_SYMMETRIC)", name[i], cap[i]);
        if (agree_nccl_failure(w, r, what, why, sizeof why)) {
            w->sym_win[i] = NULL;    /* not on every rank: ncclCommDestroy's to release */
            break;
        }
    }
    w->nccl_sym = !why[0];
    if (!why[0] || w->rank != 0)
        return;
    /* Only rank 0 reports, so only rank 0 writes (the threads share sh). */
    snprintf(sh->nc.sym_why, sizeof sh->nc.sym_why, "%s", why);
    sh->nc.sym = 0;
    if (!sh->nc.plain) {
        snprintf(sh->nc.why, sizeof sh->nc.why, "--nccl-mode sym, but %.450s", why);
        sh->nc.available = 0;
    }
    fprintf(stderr, "ccl-perf: note: NCCL's symmetric mode is off: %s\n", why);
}

static void worker_setup_nccl(Worker *w)
{
    Shared *sh = w->sh;
    /* Read before the first agreement: rank 0 may rewrite sh->nc after it. */
    int plain = sh->nc.plain, sym = sh->nc.sym;
    NcclUniqueId id, *all = agree_mem(w, 2, sizeof id * (size_t)w->nranks);
    memset(&id, 0, sizeof id);
    NcclResult r = w->rank == 0 ? perf_nccl.GetUniqueId(&id) : 0;
    agree_gather(w, &id, all, sizeof id);
    if (r != 0)
        worker_fail(w, "ncclGetUniqueId failed: %s", perf_nccl.GetErrorString(r));
    cu_check(w, tool_gpu_make_current(&w->g));
    r = perf_nccl.CommInitRank(&w->ncomm, w->nranks, all[0], w->rank);
    long long failed = perf_agree_sum(w, r != 0);
    if (r != 0)
        fprintf(stderr, "ccl-perf: rank %d: ncclCommInitRank failed: %s\n", w->rank, perf_nccl.GetErrorString(r));
    if (failed) {
        /* Only rank 0 prints, so only rank 0 records why (the threads share sh). */
        if (w->rank == 0) {
            snprintf(sh->nc.why, sizeof sh->nc.why, "ncclCommInitRank failed on %lld rank(s)", failed);
            sh->nc.available = 0;
        }
        agree_barrier(w);
        return;
    }
    w->nccl_on = 1;
    w->nccl_plain = plain;
    if (sym)
        worker_setup_windows(w);
}

/* The algorithm our op of this size ran: the --algo file, or the one the standard
 * collective's dispatch picks (ccl__pick with the byte count api.c gives it: the API
 * count times the element size (allgatherv's: the recvcounts' sum), and 0 for alltoallv,
 * whose ranks know only their own counts; every rank picks the same). sendrecv runs no
 * algorithm, nor an exchange that runs as point-to-point messages (vcoll.c). */
static void op_algorithm(Worker *w, size_t count, char *name, size_t len)
{
    int lib = perf_colls[w->sh->coll].lib;
    if (lib < 0) {
        snprintf(name, len, "send/recv");
        return;
    }
    size_t bytes = w->sh->coll == PERF_ALLTOALLV ? 0 : count * w->sh->pat.esize;
    size_t total = lib == COLL_ALLTOALL ? bytes * (size_t)w->sh->nranks : bytes; /* alltoall's sendbuf */
    const void *send;
    void *recv;
    op_buffers(w, IMPL_CCL, 0, count, &send, &recv);
    if (!w->alg && (lib == COLL_ALLTOALL || lib == COLL_ALLTOALLV || lib == COLL_ALLGATHERV) &&
        ccl__exchange_p2p(w->comm, (Collective)lib, total, recv)) {
        snprintf(name, len, "send/recv");
        return;
    }
    ccl_algorithm_t *alg = w->alg;
    int plain = ccl__on_plain_buffers(w->comm, (Collective)lib, send, recv, count, w->sh->pat.esize);
    if (!alg && ccl__pick(w->comm, (Collective)lib, w->o->root, bytes, plain, "ccl-perf", &alg) != CCL_OK)
        alg = NULL;
    snprintf(name, len, "%s", alg ? ccl_algorithm_name(alg) : "?");
}

/* The v-collectives' segments at `count` elements (--v-counts' rows, perf_v_row), packed
 * in rank order. alltoallv: this rank's row of the matrix as its sendcounts, its column
 * as its recvcounts. allgatherv: the vector (row 0) as every rank's recvcounts, this
 * rank sending its own entry. */
static void v_setup(Worker *w, size_t count)
{
    int n = w->nranks, me = w->rank, kind = w->o->v_counts;
    size_t *row = w->v_src_pos + n, es = w->sh->pat.esize;   /* scratch: the sixth array of worker_run's block */
    w->v_recv_total = 0;
    if (w->sh->coll == PERF_ALLGATHERV) {
        perf_v_row(kind, n, count, 0, es, w->v_recv);
        for (int q = 0; q < n; q++) {
            w->v_rdispl[q] = w->v_recv_total;
            w->v_recv_total += w->v_recv[q];
            w->v_src_pos[q] = 0;
        }
        return;
    }
    perf_v_row(kind, n, count, me, es, w->v_send);
    for (int p = 0; p < n; p++)
        w->v_sdispl[p] = p ? w->v_sdispl[p - 1] + w->v_send[p - 1] : 0;
    for (int q = 0; q < n; q++) {
        perf_v_row(kind, n, count, q, es, row);
        w->v_recv[q] = row[me];
        w->v_rdispl[q] = w->v_recv_total;
        w->v_recv_total += row[me];
        w->v_src_pos[q] = 0;
        for (int p = 0; p < me; p++)
            w->v_src_pos[q] += row[p];
    }
}

/* --buffers registered: the user's own memory (on a GPU as PyTorch's expandable segments
 * make it, tool_gpu_alloc_shareable; on the CPU backend malloc), each buffer registered
 * once with ccl_mem_register, before any timing. The ranks first agree that every one
 * allocated (registration is collective: a rank that failed alone would leave its peers
 * waiting in the exchange), then register the send buffer and the receive buffer, in
 * that order on every rank; a refusal fails every rank alike, with libccl's reason. */
static void setup_registered(Worker *w)
{
    void **buf[2] = {&w->sendbuf, &w->recvbuf};
    size_t cap[2] = {w->send_cap, w->recv_cap};
    const char *name[2] = {"send", "receive"};
    char why[256] = "", what[128];
    for (int i = 0; i < 2 && !why[0]; i++) {
        CuResult e = 0;
        if (w->gpu && (e = tool_gpu_alloc_shareable(&w->g, buf[i], cap[i], &w->mapped[i])) != 0)
            tool_gpu_why(&w->g, e, why, sizeof why);
        else if (!w->gpu && !(*buf[i] = malloc(cap[i])))
            snprintf(why, sizeof why, "out of memory (%zu bytes)", cap[i]);
        if (why[0])
            snprintf(what, sizeof what, "the %s buffer (%zu bytes): ", name[i], cap[i]);
    }
    long long failed = perf_agree_sum(w, why[0] != 0);
    if (why[0])
        worker_fail(w, "allocating %s%s", what, why);
    if (failed)
        worker_fail(w, "%lld other rank(s) could not allocate their buffers for --buffers registered", failed);
    for (int i = 0; i < 2; i++) {
        snprintf(what, sizeof what, "ccl_mem_register (the %s buffer, %zu bytes)", name[i], cap[i]);
        ccl_check(w, ccl_mem_register(w->comm, *buf[i], cap[i], &w->reg[i]), what);
    }
}

/* The send and receive buffers, as large as the sweep's largest size needs, from where
 * --buffers says: CCL's heap (ccl_mem_alloc), ordinary memory as a framework's tensors
 * are (the driver's cuMemAlloc on a GPU, malloc on the CPU backend), which CCL stages
 * where its algorithm needs symmetric memory, or registered memory (setup_registered).
 * On a GPU also the host image the fills and checks go through. worker_free_buffers
 * releases them, after a failure too. */
static void worker_setup_buffers(Worker *w, size_t maxcount)
{
    PerfColl c = w->sh->coll;
    size_t es = w->sh->pat.esize;
    w->send_cap = in_elems(c, w->nranks, maxcount) * es;
    w->recv_cap = (c == PERF_ALLTOALLV ? w->sh->v_recv_max : out_elems(c, w->nranks, maxcount)) * es;
    if (w->recv_cap < w->send_cap && c != PERF_REDUCE_SCATTER)
        w->recv_cap = w->send_cap;
    if (w->o->buffers == PERF_BUF_SYMMETRIC) {
        ccl_check(w, ccl_mem_alloc(w->comm, &w->sendbuf, w->send_cap), "ccl_mem_alloc (send buffer)");
        ccl_check(w, ccl_mem_alloc(w->comm, &w->recvbuf, w->recv_cap), "ccl_mem_alloc (receive buffer)");
    } else if (w->o->buffers == PERF_BUF_REGISTERED) {
        setup_registered(w);
    } else if (w->gpu) {
        cu_check(w, tool_gpu_alloc(&w->g, &w->sendbuf, w->send_cap));
        cu_check(w, tool_gpu_alloc(&w->g, &w->recvbuf, w->recv_cap));
    } else if (!(w->sendbuf = malloc(w->send_cap)) || !(w->recvbuf = malloc(w->recv_cap))) {
        worker_fail(w, "out of memory for the buffers (%zu and %zu bytes)", w->send_cap, w->recv_cap);
    }
    if (w->gpu) {
        w->host = malloc(w->send_cap > w->recv_cap ? w->send_cap : w->recv_cap);
        if (!w->host)
            worker_fail(w, "out of memory for the host copy of the buffers");
    }
}

/* Releases what worker_setup_buffers got (NULL where it got nothing); on a GPU while
 * the rank's ToolGpu is still open. Registrations go first, collectively and in the same
 * order on every rank (ccl_mem_deregister waits for the rank's queued work); a rank that
 * failed skips that (its peers may be anywhere) and leaves them to ccl_comm_destroy,
 * which main() calls once every rank returned: until then they hold the GPU memory
 * freed here, so nothing else can come to sit at its address meanwhile. */
static void worker_free_buffers(Worker *w)
{
    for (int i = 1; i >= 0; i--) {
        if (w->reg[i] && !w->failed) {
            ccl_result_t r = ccl_mem_deregister(w->comm, w->reg[i]);
            if (r != CCL_OK) {
                fprintf(stderr, "ccl-perf: rank %d: ccl_mem_deregister (the %s buffer) failed: %s: %s\n", w->rank,
                        i ? "receive" : "send", ccl_result_string(r), ccl_comm_last_error(w->comm));
                w->exit_code = 1;
            }
        }
        w->reg[i] = NULL;
    }
    void *buf[2] = {w->sendbuf, w->recvbuf};
    for (int i = 0; i < 2; i++) {
        if (w->o->buffers == PERF_BUF_SYMMETRIC)
            ccl_mem_free(w->comm, buf[i]);
        else if (w->gpu && w->o->buffers == PERF_BUF_REGISTERED)
            tool_gpu_free_shareable(&w->g, buf[i], w->mapped[i]);
        else if (w->gpu)
            tool_gpu_free(&w->g, buf[i]);    /* at the end of the run: nothing to do on failure */
        else
            free(buf[i]);
        w->mapped[i] = 0;
    }
    w->sendbuf = w->recvbuf = NULL;
    free(w->host);
    w->host = NULL;
}

/* The rank's whole run; returns normally, or by worker_fail's longjmp to perf_worker(). */
static void worker_run(Worker *w)
{
    Shared *sh = w->sh;
    const Opts *o = &sh->o;
    PerfColl c = sh->coll;
    size_t es = sh->pat.esize, maxb = sh->sizes[sh->nsizes - 1], units = units_per_size(c, w->nranks);
    size_t maxcount = maxb / es / units;

    if (w->gpu)
        worker_setup_gpu(w);

    /* --algo: loaded on every rank; main() already proved it for this N. */
    if (o->algo) {
        ccl_result_t r = ccl_algorithm_load(w->comm, o->algo, o->root, &w->alg);
        long long failed = perf_agree_sum(w, r != CCL_OK);
        if (failed) {
            if (r != CCL_OK)
                fprintf(stderr, "ccl-perf: rank %d: ccl_algorithm_load %s failed: %s: %s\n", w->rank, o->algo,
                        ccl_result_string(r), ccl_comm_last_error(w->comm));
            w->exit_code = 1;
            return;
        }
    }

    if (is_v(c)) {
        w->v_send = tool_calloc(6 * (size_t)w->nranks, sizeof *w->v_send);
        w->v_sdispl = w->v_send + w->nranks;
        w->v_recv = w->v_sdispl + w->nranks;
        w->v_rdispl = w->v_recv + w->nranks;
        w->v_src_pos = w->v_rdispl + w->nranks;
    }
    worker_setup_buffers(w, maxcount);
    if (sh->nc.available)
        worker_setup_nccl(w);
    if (w->rank == 0)
        perf_print_header(sh);

    for (int i = 0; i < sh->nsizes; i++) {
        size_t bytes = sh->sizes[i], count = bytes / es / units;
        Row row = {.bytes = bytes, .count = count};
        if (is_v(c))
            v_setup(w, count);
        for (int p = 0; p < 2; p++) {
            /* sendrecv and the v-collectives have no in-place form: a send buffer must
             * stay unchanged until the op completes, and overlapping v buffers are staged. */
            row.st[IMPL_CCL][p] = (Stat){-1, -1, 0};
            if (!(p == 1 && perf_colls[c].p2p))
                row.st[IMPL_CCL][p] = measure(w, IMPL_CCL, p, count, bytes);
            /* NCCL's modes, each where it runs; NCCL has no in-place alltoall (its
             * send/receive pairs would race). */
            for (int impl = IMPL_NCCL; impl <= IMPL_NCCL_SYM; impl++) {
                int on = impl == IMPL_NCCL ? w->nccl_plain : w->nccl_sym;
                row.st[impl][p] = (Stat){-1, -1, 0};
                if (w->nccl_on && on && !(p == 1 && (c == PERF_ALLTOALL || perf_colls[c].p2p)))
                    row.st[impl][p] = measure(w, impl, p, count, bytes);
            }
        }
        if (w->rank == 0) {
            op_algorithm(w, count, row.algo, sizeof row.algo);
            sh->rows[i] = row;
            perf_print_row(sh, &row);
        }
    }

}

void *perf_worker(void *arg)
{
    Worker *w = arg;
    if (setjmp(w->fail_jmp) == 0) {
        w->in_worker = 1;
        worker_run(w);
    }
    w->in_worker = 0;
    /* What the rank holds, after a normal run or a failure anywhere in it. The comm
     * itself (and its queued work) is destroyed by main() once every rank returned. */
    if (w->nccl_on) {
        /* Collective, in the same order on every rank; a failed rank skips it (its peers
         * may be anywhere) and leaves its windows to ncclCommDestroy. */
        for (int i = 1; i >= 0 && !w->failed; i--)
            if (w->sym_win[i])
                perf_nccl.CommWindowDeregister(w->ncomm, w->sym_win[i]);
        perf_nccl.CommDestroy(w->ncomm);
    }
    /* After the communicator, which releases any window still registered on them. */
    if (w->sym_sendbuf)
        perf_nccl.MemFree(w->sym_sendbuf);
    if (w->sym_recvbuf)
        perf_nccl.MemFree(w->sym_recvbuf);
    if (w->alg)
        ccl_algorithm_free(w->alg);
    worker_free_buffers(w);
    tool_gpu_close(&w->g);
    free(w->v_send);
    for (int i = 0; i < 3; i++) {
        free(w->agree_buf[i]);
        w->agree_buf[i] = NULL;
        w->agree_cap[i] = 0;
    }
    return NULL;
}
