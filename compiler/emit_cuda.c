/* emit_cuda.c: CUDA C for one rank of a scheduled Plan (`cclc cuda`).
 *
 * Takes a Plan and a rank; writes one self-contained CUDA C translation unit (no
 * #include, so NVRTC needs no header path and `nvcc -arch=sm_90 --cubin` works on the
 * file alone). It holds:
 *
 *   - the element type, accumulator type and operator picked by EmitOptions, and the
 *     rank and rank count, as typedefs and macros;
 *   - the prelude, compiler/cuda/prelude.cuh (with the kernel ABI, compiler/cuda/abi.h,
 *     inlined), the same in every kernel: element conversions, 16-byte vectorized
 *     transfer templates with a scalar path for misaligned operands and tails, the
 *     semaphore primitives, LL lines, port-channel puts, and the kernels ccl_avg (the
 *     final division for op avg) and ccl_rank_barrier (the all-rank barrier around it);
 *   - `extern "C" __global__ void ccl_kernel(const ccl_args a)`: a switch over logical
 *     thread blocks (physical block b runs logical block b / a.ninst as instance
 *     b % a.ninst), each case straight-line code with rank, peers, chunk indices and
 *     semaphore slots folded in as constants.
 *
 * The kernel ABI (struct ccl_args, struct ccl_err) is abi.h's, shared with the GPU
 * backend; bump CCL_ABI_VERSION there on any change. Layout follows docs/internals.md
 * exactly: units of `n` elements (stride in_ustride/out_ustride between units in in/out),
 * chunk stride cs = round_up(ceil(n/K), A), padded scratch, instances and slices cut at
 * round_down(q*L/P, A), semaphore slot (t*I + i)*N + peer, expected values in device
 * memory so graph replays need no host work.
 *
 * Remote operands are reached through `a.peers`, a device table of every rank's symmetric
 * heap base as mapped on this GPU; scratch, semaphores and (when the user's buffers are
 * symmetric or staged) in/out live at the same offsets on every rank.
 *
 * Protocols. Simple: data stores, then a release-add on the peer's semaphore; waits
 * acquire-spin. LL (protocol ll): every remote write becomes 16-byte lines {data, flag,
 * data, flag} in the peer's LL region, and the signal that would publish it disappears:
 * the waiter's matching wait (the k-th wait pairs with the k-th signal, so the waiter
 * knows which writes it receives) spins on those lines' flags and copies the data into
 * place. Signal/wait pairs that publish no data stay semaphores, without the system
 * fence (nothing to publish: no peer reads an LL kernel's memory). Several receives of
 * one wait, and consecutive transfers that share no memory, run at once, one warp group
 * each (emit_warp_groups). Flags are the launch number (ccl_announce's: equal on every
 * rank, new at every launch of the comm), so stale lines never match and nothing is
 * cleared between calls. An LL kernel does not wait for its peers at its entry: it
 * sends at once, into the set of lines of its launch's parity (two sets), and its
 * first block checks the peers' announcements at its exit, so no rank starts launch
 * L + 1 before every peer has started L, and no line of a set is rewritten while a
 * peer may still read it (docs/internals.md, "The call entry"). A wait whose lines a
 * one-chunk transfer right after it consumes (and nothing else reads: the one-shot
 * reductions' scratch slots) is fused with it (cclc_emit_fusable, ccl_ll_reduce): each
 * received word goes from the lines into the reduction, never through scratch. LL128
 * (protocol ll128) is the same with 128-byte lines of 15 data words and one flag word,
 * written and read by eight lanes of a warp in one instruction (the prelude's
 * ccl_xfer_ll128): 6% of the bytes go to flags instead of LL's 50%, so it
 * carries medium messages at near Simple's bandwidth and LL's latency; its parts start
 * on a line (CCL_PART_BYTES 240). A v-collective asked for LL128 gets LL's lines. An
 * LL or LL128 program that reads peers' memory or uses port channels runs as Simple.
 *
 * v-collectives (allgatherv, alltoallv): the kernel takes this rank's segment table as
 * a second parameter (struct ccl_vtable) and pushes it into every peer's v inbox with
 * the call's announcement; every block waits for every peer's table of this launch and
 * call, which is its entry wait too, copies every rank's table into shared memory (`vt`)
 * and checks it (the prelude's ccl_vload: a peer in another call, counts that disagree,
 * or a layout that does not fit the v arena, fail every rank before any data moves). Each data op's
 * chunk is then sized by the segment of the data it moves (PlanOp.content, a constant
 * here), exactly as the CPU backend's ccl__segs_chunk: offsets and lengths come from
 * `vt`, peers' in and out from their tables' heap offsets, scratch and LL lines from
 * the kernel's vcs (the longest segment's chunk stride) instead of a.cs. Up to N =
 * CCLC_EMIT_V_MAX_RANKS (the tables' shared memory).
 *
 * Port channels: a put is posted by thread 0 as a request {dst, src, bytes} to the
 * block's queue in host-mapped memory (a.port); the runtime's proxy thread copies it
 * with the copy engine, and `flush` waits until the proxy reports it landed. Signals
 * stay SM release-adds; the verifier requires a flush between a port put and the
 * block's next signal, wait or barrier.
 *
 * Output is deterministic: it depends only on the plan, the rank and the options.
 */
#include <stdlib.h>
#include <string.h>

#include "emit_cuda.h"

/* compiler/cuda/prelude.cuh with abi.h inlined, as text ($(BUILD)/prelude_cuh.c, made by
 * compiler/cuda/embed.sh): the part of every kernel that does not depend on the plan. */
extern const char ccl__prelude_cuh[];

/* An element type. Integers wrap around in their own width and min and max compare
 * them as the type (ccl.h; the CPU backend's runtime/src/reduce.c does the same): an
 * unsigned accumulator wraps by itself; i8's int accumulator is brought back into
 * i8's range after every sum and product (`wrap`), so that a chain of NS operands never
 * overflows int and every step wraps as the CPU's does. */
typedef struct {
    const char *name;     /* EmitOptions spelling */
    const char *storage;  /* element storage type in CUDA */
    const char *acc;      /* accumulator type */
    int size;             /* bytes per element */
    const char *load;     /* CCL_LOAD(x): storage -> acc */
    const char *store;    /* CCL_STORE(x): acc -> storage */
    const char *wrap;     /* a cast around a sum's or product's value, or NULL */
} EmitType;

static const EmitType emit_types[] = {
    {"f32", "float", "float", 4, "(x)", "(x)", NULL},
    {"f64", "double", "double", 8, "(x)", "(x)", NULL},
    {"f16", "unsigned short", "float", 2, "ccl_h2f(x)", "ccl_f2h(x)", NULL},
    {"bf16", "unsigned short", "float", 2, "ccl_bf2f(x)", "ccl_f2bf(x)", NULL},
    {"i32", "int", "int", 4, "(x)", "(x)", NULL},
    {"i64", "long long", "long long", 8, "(x)", "(x)", NULL},
    {"u8", "unsigned char", "unsigned int", 1, "(unsigned int)(x)", "(unsigned char)(x)", NULL},
    {"fp8_e4m3", "unsigned char", "float", 1, "ccl_fp8_dec(x, 4, 3, 7)", "ccl_fp8_enc(x, 4, 3, 7)", NULL},
    {"fp8_e5m2", "unsigned char", "float", 1, "ccl_fp8_dec(x, 5, 2, 15)", "ccl_fp8_enc(x, 5, 2, 15)", NULL},
    {"i8", "signed char", "int", 1, "(int)(x)", "(signed char)(x)", "(int)(signed char)"},
    {"u32", "unsigned int", "unsigned int", 4, "(x)", "(x)", NULL},
    {"u64", "unsigned long long", "unsigned long long", 8, "(x)", "(x)", NULL},
};

static const char *const emit_ops[][2] = {
    {"sum", "((a) + (b))"},
    {"prod", "((a) * (b))"},
    {"min", "((b) < (a) ? (b) : (a))"},
    {"max", "((b) > (a) ? (b) : (a))"},
    {"avg", "((a) + (b))"}, /* divided by N afterwards, in ccl_avg */
};

static const EmitType *emit_find_type(const char *name)
{
    for (size_t i = 0; i < sizeof emit_types / sizeof emit_types[0]; i++)
        if (strcmp(emit_types[i].name, name) == 0) return &emit_types[i];
    return NULL;
}

static const char *emit_find_op(const char *name)
{
    for (size_t i = 0; i < sizeof emit_ops / sizeof emit_ops[0]; i++)
        if (strcmp(emit_ops[i][0], name) == 0) return emit_ops[i][1];
    return NULL;
}

/* The index in the kernel's `vt` (every rank's segment table, rank-major) of word
 * `unit` of row `row` of rank `rank`'s table; row CCL_VT_ROWS is the tail. */
static int emit_vt_index(const Emit *e, int rank, int row, int unit)
{
    int n = e->prog->nranks;
    return rank * (int)CCL_VT_WORDS(n) + row * n + unit;
}

/* Writes a C expression for the base pointer (char *) of operand r's buffer. */
static void emit_base(Emit *e, const Ref *r)
{
    FILE *o = e->out;
    int local = r->rank == e->rank;
    if (r->buf == BUF_IN || r->buf == BUF_OUT) {
        const char *which = r->buf == BUF_IN ? "in" : "out";
        /* NCCL-style in-place calls place in inside out (or out inside in) at the rank's
         * slot, so a peer's buffer sits (peer - rank) strides from ours. */
        if (local) fprintf(o, "a.%s", which);
        else if (e->v) /* where the peer's table says it is */
            fprintf(o, "(p%d + vt[%d])", r->rank, emit_vt_index(e, r->rank, CCL_VT_ROWS,
                                                                r->buf == BUF_IN ? CCL_VT_IN_OFF : CCL_VT_OUT_OFF));
        else fprintf(o, "(p%d + a.%s_off + (%d) * (long long)a.%s_stride)", r->rank, which, r->rank - e->rank, which);
    } else {
        long chunks = e->scratch_prefix[r->buf]; /* chunks of the scratch buffers before this one */
        if (chunks == 0) fprintf(o, "(p%d + a.scratch_off)", r->rank);
        else fprintf(o, "(p%d + a.scratch_off + %ldull * %s * sizeof(ccl_t))", r->rank, chunks, e->cs);
    }
}

/* Declares span variable NAME for chunk ci of operand r. */
static void emit_span(Emit *e, const char *name, const Ref *r, int ci)
{
    FILE *o = e->out;
    int k = e->prog->chunks;
    if (r->buf == BUF_IN || r->buf == BUF_OUT)
        fprintf(o, "            const struct ccl_span %s = ccl_io(a, a.%s_ustride, %d, %d);\n", name,
                r->buf == BUF_IN ? "in" : "out", ci / k, ci % k);
    else if (ci == 0)
        fprintf(o, "            const struct ccl_span %s = {0, a.cs};\n", name);
    else if (ci == 1)
        fprintf(o, "            const struct ccl_span %s = {a.cs, a.cs};\n", name);
    else
        fprintf(o, "            const struct ccl_span %s = {(u64)%d * a.cs, a.cs};\n", name, ci);
}

static void emit_lines_comment(FILE *o, const PlanOp *op)
{
    if (op->nlines == 0) return;
    fprintf(o, " (line%s", op->nlines > 1 ? "s" : "");
    for (int i = 0; i < op->nlines; i++) fprintf(o, "%s%d", i ? "," : " ", op->lines[i]);
    fputc(')', o);
}

static void emit_ref_comment(Emit *e, const Ref *r, int j)
{
    const char *name = e->prog->buf_name ? e->prog->buf_name[r->buf] : NULL;
    if (!name) name = r->buf == BUF_IN ? "in" : r->buf == BUF_OUT ? "out" : "scratch";
    if (r->rank == e->rank) fprintf(e->out, "%s[%d]", name, r->chunk + j);
    else fprintf(e->out, "%s@%d[%d]", name, r->rank, r->chunk + j);
}

/* Opens a transfer's block with a comment naming chunk j of its operands, each
 * destination, then "<-", then each source. */
static void emit_xfer_comment(Emit *e, const PlanOp *op, int j, const char *tag)
{
    FILE *o = e->out;
    fprintf(o, "        { /* %s", tag);
    for (int d = 0; d < op->ndst; d++) {
        if (d) fprintf(o, ", ");
        emit_ref_comment(e, &op->dst[d], j);
    }
    fprintf(o, " <- ");
    for (int k = 0; k < op->nsrc; k++) {
        if (k) fprintf(o, ", ");
        emit_ref_comment(e, &op->src[k], j);
    }
    fprintf(o, " */\n");
}

static void emit_op_part(Emit *e, const PlanOp *op, int j);

/* The threads of a transfer: the block's, or a warp group's (see emit_warp_groups). */
static const char *emit_share(const Emit *e)
{
    return e->item < 0 ? "threadIdx.x, blockDim.x" : "gtid, gnt";
}

/* In a run of transfers at once, only transfer `item` of warp group item % G runs this
 * one; the next transfer gets the next item. */
static void emit_share_guard(Emit *e)
{
    if (e->item >= 0) fprintf(e->out, " && g == (u64)%d %% G", e->item++);
}

/* Splits the block into G = min(warps, n) warp groups for n pieces of work that run at
 * once: warp group g (gtid of gnt threads) takes pieces g, g + G, ... */
static void emit_warp_groups(FILE *o, int n)
{
    fprintf(o, "        const u64 nwarp = blockDim.x / 32, G = nwarp < %d ? nwarp : %d;\n", n, n);
    fprintf(o, "        const u64 w = threadIdx.x / 32, g = w %% G;\n");
    fprintf(o, "        const u64 gtid = w / G * 32 + threadIdx.x %% 32, gnt = ((nwarp - 1 - g) / G + 1) * 32;\n");
}

/* The transfer's source pointers `s` (the spans s<ndst>.. of emit_op_part), then the
 * opening of the call's condition: "if (hi > lo" and, in a run, this warp group's turn. */
static void emit_sources_and_guard(Emit *e, const PlanOp *op)
{
    FILE *o = e->out;
    fprintf(o, "            const char *const s[%d] = {", op->nsrc);
    for (int x = 0; x < op->nsrc; x++) {
        fprintf(o, "%s", x ? ", " : "");
        emit_base(e, &op->src[x]);
        fprintf(o, " + (s%d.off + lo) * sizeof(ccl_t)", op->ndst + x);
    }
    fprintf(o, "};\n");
    fprintf(o, "            if (hi > lo");
    emit_share_guard(e);
}

/* One chunk of an OP_XFER: spans of every operand, the shortest length, this
 * instance's and slice's part of it, then the transfer. */
static void emit_xfer_chunk(Emit *e, const PlanOp *op, int j)
{
    FILE *o = e->out;
    emit_xfer_comment(e, op, j, "");
    emit_op_part(e, op, j);
    fprintf(o, "            char *const d[%d] = {", op->ndst);
    for (int x = 0; x < op->ndst; x++) {
        fprintf(o, "%s", x ? ", " : "");
        emit_base(e, &op->dst[x]);
        fprintf(o, " + (s%d.off + lo) * sizeof(ccl_t)", x);
    }
    fprintf(o, "};\n");
    emit_sources_and_guard(e, op);
    fprintf(o, ") ccl_xfer<%d, %d>(d, s, hi - lo, %s);\n", op->ndst, op->nsrc, emit_share(e));
    fprintf(o, "        }\n");
}

/* The global chunk index of a buffer chunk (in, then out, then scratch). */
static long emit_global_chunk(Emit *e, int buf, int chunk)
{
    const Program *p = e->prog;
    if (buf == BUF_IN) return chunk;
    if (buf == BUF_OUT) return p->buf_chunks[BUF_IN] + chunk;
    return (long)p->buf_chunks[BUF_IN] + p->buf_chunks[BUF_OUT] + e->scratch_prefix[buf] + chunk;
}

/* A char * expression for rank `rank`'s LL lines of chunk (buf, chunk), advanced to
 * element `lo` of the chunk: from the line set's start, total_chunks chunks of lines,
 * each 2*CS*esize bytes (LL) or ccl_ll128_lines_bytes(CS) (LL128, whose parts start on
 * a line). A v kernel's one set follows its scratch buffers (lines on 128 bytes for
 * LL128: ccl_ll128_align). A fixed-size kernel has two sets, laid out for chunks of
 * a.lines_chunk bytes whatever the call's count, and uses the one of its launch's
 * parity (line_set: the kernel's prologue). */
static void emit_ll_lines(Emit *e, int rank, int buf, int chunk)
{
    long g = emit_global_chunk(e, buf, chunk);
    if (!e->v && e->ll128)
        fprintf(e->out, "(p%d + a.scratch_off + line_set + %ldull * ccl_ll128_lines_bytes(a.cs) + lo * sizeof(ccl_t) / "
                        "120 * 128)", rank, g);
    else if (!e->v)
        fprintf(e->out, "(p%d + a.scratch_off + line_set + %ldull * a.cs * sizeof(ccl_t) + lo * 2 * sizeof(ccl_t))",
                rank, 2 * g);
    else if (e->ll128)
        fprintf(e->out, "(p%d + a.scratch_off + ccl_ll128_align(%ldull * %s * sizeof(ccl_t)) + %ldull * "
                        "ccl_ll128_lines_bytes(%s) + lo * sizeof(ccl_t) / 120 * 128)",
                rank, e->scratch_chunks, e->cs, g, e->cs);
    else
        fprintf(e->out, "(p%d + a.scratch_off + %ldull * %s * sizeof(ccl_t) + lo * 2 * sizeof(ccl_t))",
                rank, e->scratch_chunks + 2 * g, e->cs);
}

/* emit_op_part for a v-collective, as the CPU backend's ccl__segs_chunk: the length of
 * chunk j is that of the segment whose data it moves (op->content[j], the in chunk
 * q * in_chunks + i: rank q's unit i / K, its chunk i % K), cut into K chunks of the
 * segment's stride scs; an in/out operand's chunk c of unit u sits at its rank's
 * displacement of u plus c * scs, a scratch chunk at its index times vcs. Chunks that
 * carry no input's data (content -1) move nothing. */
static void emit_op_part_v(Emit *e, const PlanOp *op, int j)
{
    FILE *o = e->out;
    const Program *p = e->prog;
    int k = p->chunks, h = op->content ? op->content[j] : -1;
    if (h < 0) {
        fprintf(o, "            const u64 scs = 0, len = 0; /* no input's data */\n");
    } else {
        int q = h / p->buf_chunks[BUF_IN], i = h % p->buf_chunks[BUF_IN];
        fprintf(o, "            u64 scs; /* the data of in@%d[%d]: chunk %d of rank %d's in segment %d */\n", q, i,
                i % k, q, i / k);
        fprintf(o, "            const u64 len = ccl_vchunk(vt[%d], %d, %d, &scs);\n",
                emit_vt_index(e, q, CCL_VT_IN_COUNT, i / k), k, i % k);
    }
    for (int x = 0; x < op->ndst + op->nsrc; x++) {
        const Ref *r = x < op->ndst ? &op->dst[x] : &op->src[x - op->ndst];
        int idx = r->chunk + j;
        if (r->buf >= BUF_SCRATCH0)
            fprintf(o, "            const struct ccl_span s%d = {(u64)%d * vcs, len};\n", x, idx);
        else
            fprintf(o, "            const struct ccl_span s%d = {vt[%d] + %d * scs, len};\n", x,
                    emit_vt_index(e, r->rank, r->buf == BUF_IN ? CCL_VT_IN_DISPL : CCL_VT_OUT_DISPL, idx / k), idx % k);
    }
    fprintf(o, "            (void)scs;\n");
    fprintf(o, "            u64 lo, hi;\n");
    if (e->v_idles)
        fprintf(o, "            ccl_part_of(vinst, a.nslices, inst, sl, len, &lo, &hi);\n");
    else
        fprintf(o, "            ccl_part(a, inst, sl, len, &lo, &hi);\n");
}

/* Declares s0.. for every operand of op at chunk j, len (the shortest) and this
 * instance's and slice's part [lo, hi). */
static void emit_op_part(Emit *e, const PlanOp *op, int j)
{
    if (e->v) {
        emit_op_part_v(e, op, j);
        return;
    }
    FILE *o = e->out;
    int nops = op->ndst + op->nsrc;
    char name[32];
    for (int x = 0; x < nops; x++) {
        const Ref *r = x < op->ndst ? &op->dst[x] : &op->src[x - op->ndst];
        snprintf(name, sizeof name, "s%d", x);
        emit_span(e, name, r, r->chunk + j);
    }
    fprintf(o, "            u64 len = s0.len;\n");
    for (int x = 1; x < nops; x++) fprintf(o, "            if (s%d.len < len) len = s%d.len;\n", x, x);
    /* From scratch to scratch only, sized by the position of the data it moves
     * (PlanOp.content), as the CPU backend does: no more than an in/out chunk of that
     * position holds. */
    if (op->content && op->content[j] < 0)
        fprintf(o, "            len = 0; /* no input's data */\n");
    else if (op->content)
        fprintf(o, "            if (ccl_io(a, 0, 0, %d).len < len) len = ccl_io(a, 0, 0, %d).len; /* data of position "
                   "%d */\n", op->content[j], op->content[j], op->content[j]);
    fprintf(o, "            u64 lo, hi;\n");
    fprintf(o, "            ccl_part(a, inst, sl, len, &lo, &hi);\n");
}

/* One chunk of an OP_XFER with remote destinations, as LL: local destinations get
 * plain stores, remote ones the peer's LL lines. */
static void emit_xfer_chunk_ll(Emit *e, const PlanOp *op, int j)
{
    FILE *o = e->out;
    int nl = 0, nr = 0;
    for (int d = 0; d < op->ndst; d++) {
        if (op->dst[d].rank == e->rank) nl++;
        else nr++;
    }
    emit_xfer_comment(e, op, j, "LL: ");
    emit_op_part(e, op, j);
    fprintf(o, "            char *const dl[%d] = {", nl ? nl : 1);
    int first = 1;
    for (int d = 0; d < op->ndst; d++) {
        if (op->dst[d].rank != e->rank) continue;
        fprintf(o, "%s", first ? "" : ", ");
        first = 0;
        emit_base(e, &op->dst[d]);
        fprintf(o, " + (s%d.off + lo) * sizeof(ccl_t)", d);
    }
    if (!nl) fprintf(o, "0");
    fprintf(o, "};\n");
    fprintf(o, "            char *const dr[%d] = {", nr);
    first = 1;
    for (int d = 0; d < op->ndst; d++) {
        if (op->dst[d].rank == e->rank) continue;
        fprintf(o, "%s", first ? "" : ", ");
        first = 0;
        emit_ll_lines(e, op->dst[d].rank, op->dst[d].buf, op->dst[d].chunk + j);
    }
    fprintf(o, "};\n");
    emit_sources_and_guard(e, op);
    fprintf(o, ") ccl_xfer_ll%s<%d, %d, %d>(dl, dr, s, hi - lo, flag, %s);\n", e->ll128 ? "128" : "", nl, nr, op->nsrc,
            emit_share(e));
    fprintf(o, "        }\n");
}

/* Receives one delivered item (sender op, destination d) into this rank's buffer: the
 * same spans and part as the sender computed, read from our LL lines. Each chunk is one
 * receive, by the whole block or, with several receives in one wait (see OP_WAIT), by
 * the warp group whose turn it is (emit_share_guard). */
static void emit_ll_recv_item(Emit *e, const LLItem *it, int peer, int tb, int line)
{
    FILE *o = e->out;
    const Ref *dst = &it->op->dst[it->d];
    for (int j = 0; j < dst->count; j++) {
        fprintf(o, "        { /* LL receive from rank %d: ", peer);
        emit_ref_comment(e, dst, j);
        fprintf(o, " */\n");
        emit_op_part(e, it->op, j);
        Ref mine = *dst;
        mine.rank = e->rank;
        fprintf(o, "            char *const dst = ");
        emit_base(e, &mine);
        fprintf(o, " + (s%d.off + lo) * sizeof(ccl_t);\n", it->d);
        fprintf(o, "            const char *const lines = ");
        emit_ll_lines(e, e->rank, dst->buf, dst->chunk + j);
        fprintf(o, ";\n");
        fprintf(o, "            if (hi > lo");
        emit_share_guard(e);
        fprintf(o, " &&\n                !ccl_ll%s_recv(dst, lines, hi - lo, flag, %s, a, launch, %d, inst, %d, %d)) "
                   "failed = 1;\n", e->ll128 ? "128" : "", emit_share(e), tb, line, peer);
        if (e->hears) fprintf(o, "            if (threadIdx.x == 0 && hi > lo) heard |= 1ull << %d;\n", peer);
        fprintf(o, "        }\n");
    }
}

/* Whether the kernel checks its peers' announcements at its exit instead of its entry:
 * a fixed-size kernel whose remote writes are all lines (the prelude's
 * ccl_await_peers). Its waits then also give up on a peer found running another call. */
static int emit_exit_checked(const Emit *e) { return e->ll && !e->v; }

/* Whether this rank's v kernel leaves the instances its longest segment does not need
 * idle (the prelude's CCL_V_INST_SHIFT): Simple kernels only (LL's lines ran slower on
 * fewer), and none with a barrier of every block of the grid (OP_BARRIER), which an idle
 * instance would never reach. */
static int emit_v_idles(const Emit *e, const Plan *plan, int rank)
{
    if (!e->v || e->ll || e->ll128)
        return 0;
    for (int i = 0; i < plan->nblocks; i++)
        for (int j = 0; plan->blocks[i].rank == rank && j < plan->blocks[i].nops; j++)
            if (plan->blocks[i].ops[j].kind == OP_BARRIER) return 0;
    return 1;
}

/* The peers whose lines this rank's block tb receives, as a mask (N <= 64). Lines carry the launch
 * and the call's identity (ccl_ll_flags), so once a peer's lines have arrived, that peer
 * has started this launch and runs this call: what the exit check waits for
 * (emit_exit_check). */
static unsigned long long emit_tb_heard_peers(Emit *e, int tb)
{
    unsigned long long mask = 0;
    for (int p = 0; p < e->prog->nranks; p++) {
        if (p == e->rank) continue;
        int bi = cclc_emit_block_index(e, p, tb), any = 0;
        for (int k = 0; bi >= 0 && k < e->deliv[bi].n && !any; k++) any = e->deliv[bi].v[k].n > 0;
        if (any) mask |= 1ull << p;
    }
    return mask;
}

/* The exit check of a kernel checked at its exit: every peer's announcement of this
 * launch and call. Where the rank's blocks together receive lines from every peer, each
 * block awaits only the peers it receives from but did not hear (an empty part): its
 * `heard` starts as every peer but those (emit_block), so what is left is one
 * complement away, with no division to find the block's tb again. Elsewhere (broadcast's
 * and reduce's ranks that hear one peer or none) the first block awaits every peer, as
 * it would have to for the peers it never hears: recording the others bought nothing
 * there and cost 1-3.5% of broadcast's 1-64 KB calls on 4x H200 (docs/perf/x4-parts). */
static void emit_exit_check(Emit *e)
{
    FILE *out = e->out;
    if (!e->heard_all) {
        fprintf(out, "    /* No rank ends this launch before every peer has announced it, and the same call. */\n"
                     "    if (first) ccl_await_peers(a, launch);\n");
        return;
    }
    fprintf(out, "    /* No rank ends this launch before every peer has announced it, and the same call:\n"
                 "     * lines of this launch from a peer say so (ccl_ll_flags). A block waits for the\n"
                 "     * announcements of the peers it receives from but did not hear. */\n");
    fprintf(out, "    (void)first;\n    const u64 unheard = ~heard;\n");
    fprintf(out, "    if (unheard) ccl_await_peers(a, launch, unheard);\n");
}

/* The semaphore slot of logical slot `sem` (t*N + peer, for one instance) for
 * instance `inst`: (t*I + inst)*N + peer. */
static void emit_slot(FILE *o, int sem, int nranks)
{
    if (sem / nranks == 0) fprintf(o, "inst * %d + %d", nranks, sem % nranks);
    else fprintf(o, "((u64)%d * a.ninst + inst) * %d + %d", sem / nranks, nranks, sem % nranks);
}

/* A port-channel put: thread 0 posts one request per chunk to the host proxy (after
 * the barrier that orders the block's earlier stores to the source); the data moves by
 * copy engine while the block goes on, until its next flush. */
static void emit_port_put(Emit *e, const PlanBlock *b, const PlanOp *op, int count)
{
    FILE *o = e->out;
    fprintf(o, "        __syncthreads();\n");
    for (int j = 0; j < count; j++) {
        emit_xfer_comment(e, op, j, "port ");
        emit_op_part(e, op, j);
        fprintf(o, "            char *const d = ");
        emit_base(e, &op->dst[0]);
        fprintf(o, " + (s0.off + lo) * sizeof(ccl_t);\n");
        fprintf(o, "            const char *const s = ");
        emit_base(e, &op->src[0]);
        fprintf(o, " + (s1.off + lo) * sizeof(ccl_t);\n");
        fprintf(o, "            if (threadIdx.x == 0 && hi > lo && !failed &&\n"
                   "                !ccl_port_put(a, posted, d, s, (hi - lo) * sizeof(ccl_t), %d, inst, %d, %d))\n"
                   "                failed = 1;\n", b->tb, emit_first_line(op), op->dst[0].rank);
        fprintf(o, "        }\n");
    }
    fprintf(o, "        __syncthreads();\n");
    fprintf(o, "        if (failed) return;\n");
}

static void emit_op_comment(FILE *o, const PlanOp *op, int idx)
{
    static const char *const kind_names[] = {"xfer", "signal", "wait", "barrier", "flush", "sync"};
    fprintf(o, "        /* op %d: %s", idx, kind_names[op->kind]);
    if (op->chan == CHAN_PORT) fprintf(o, " [port channel: the host proxy copies]");
    emit_lines_comment(o, op);
    fprintf(o, " */\n");
}

/* An OP_XFER through the SMs, chunk by chunk (a remote one as LL lines in an LL kernel). */
static void emit_xfer(Emit *e, const PlanOp *op)
{
    int remote = 0;
    for (int d = 0; d < op->ndst; d++)
        if (op->dst[d].rank != e->rank) {
            remote = 1;
            if (e->ll) e->pend[op->dst[d].rank]++;
        }
    for (int j = 0; j < emit_op_chunks(op); j++) {
        if (e->ll && remote) emit_xfer_chunk_ll(e, op, j);
        else emit_xfer_chunk(e, op, j);
    }
}

static void emit_op(Emit *e, const PlanBlock *b, const PlanOp *op, int idx)
{
    FILE *o = e->out;
    int n = e->prog->nranks;
    emit_op_comment(o, op, idx);
    switch (op->kind) {
    case OP_XFER:
        if (op->chan == CHAN_PORT) emit_port_put(e, b, op, emit_op_chunks(op));
        else emit_xfer(e, op);
        break;
    case OP_SIGNAL: {
        /* The barrier orders every thread's stores before the release by thread k; a
         * signal carried by LL lines needs none. */
        int sems = 0;
        for (int k = 0; k < op->npeer; k++) sems += !(e->ll && e->pend[op->peer[k]]);
        if (sems) fprintf(o, "        __syncthreads();\n");
        for (int k = 0; k < op->npeer; k++) {
            if (e->ll && e->pend[op->peer[k]]) {
                /* The LL lines written since the last signal carry this one. */
                fprintf(o, "        /* signal %d: carried by LL lines */\n", op->peer[k]);
                e->pend[op->peer[k]] = 0;
                continue;
            }
            /* The slot on the peer: same logical block, indexed by this (signalling) rank. */
            int t = op->sem[k] / n;
            fprintf(o, "        if (threadIdx.x == %d) %s((u64 *)(p%d + a.sem_off) + ", k,
                    e->ll ? "ccl_notify" : "ccl_signal", op->peer[k]);
            emit_slot(o, t * n + e->rank, n);
            fprintf(o, ");\n");
        }
        break;
    }
    case OP_WAIT:
        for (int k = 0; k < op->npeer; k++) {
            if (e->ll && cclc_emit_delivery(e, op->peer[k], b->tb, e->waits[op->peer[k]])) continue;
            fprintf(o, "        if (threadIdx.x == %d) {\n", k);
            fprintf(o, "            const u64 slot = ");
            emit_slot(o, op->sem[k], n);
            fprintf(o, ";\n");
            fprintf(o, "            if (!ccl_wait(a, sem + slot, a.expected + slot, 1, %s, slot, %d, inst, %d, %d)) "
                       "failed = 1;\n", emit_exit_checked(e) ? "launch" : "0", b->tb, emit_first_line(op), op->peer[k]);
            fprintf(o, "        }\n");
        }
        if (e->ll) {
            /* Several receives (peers, chunks) run at once, one warp group each, so a
             * rank waiting on N-1 peers pays one round of line polls, not N-1 (each
             * round is a trip to memory the peers wrote). */
            int nrecv = 0;
            for (int k = 0; k < op->npeer; k++) {
                const LLDelivery *dv = cclc_emit_delivery(e, op->peer[k], b->tb, e->waits[op->peer[k]]);
                for (int i = 0; dv && i < dv->n; i++) nrecv += dv->items[i].op->dst[dv->items[i].d].count;
            }
            if (nrecv > 1) {
                fprintf(o, "        { /* %d LL receives at once: warp group g of G takes receives g, g + G, ... */\n", nrecv);
                emit_warp_groups(o, nrecv);
                e->item = 0;
            }
            for (int k = 0; k < op->npeer; k++) {
                const LLDelivery *dv = cclc_emit_delivery(e, op->peer[k], b->tb, e->waits[op->peer[k]]++);
                for (int i = 0; dv && i < dv->n; i++)
                    emit_ll_recv_item(e, &dv->items[i], op->peer[k], b->tb, emit_first_line(op));
            }
            if (nrecv > 1) {
                e->item = -1;
                fprintf(o, "        }\n");
            }
        }
        fprintf(o, "        __syncthreads();\n");
        fprintf(o, "        if (failed) return;\n");
        break;
    case OP_BARRIER:
        /* Rank-local, so it lives in `expected` (device memory, never in the heap): the
         * counter after the slots' expected values, then each block's generation. */
        fprintf(o, "        __syncthreads();\n");
        fprintf(o, "        if (threadIdx.x == 0) {\n");
        fprintf(o, "            u64 *const ctr = a.expected + %d * a.ninst;\n", e->nslots);
        fprintf(o, "            __threadfence();\n");
        fprintf(o, "            atomicAdd(ctr, 1ull);\n");
        fprintf(o, "            if (!ccl_wait(a, ctr, ctr + 1 + blockIdx.x, gridDim.x, 0, %d * a.ninst, %d, inst, %d, "
                   "%d)) failed = 1;\n", e->nslots, b->tb, emit_first_line(op), e->rank);
        fprintf(o, "        }\n");
        fprintf(o, "        __syncthreads();\n");
        fprintf(o, "        if (failed) return;\n");
        break;
    case OP_FLUSH:
        /* Waits for all of the block's puts (not only those to these peers): the proxy
         * serves one queue per block in order, so that costs nothing extra. */
        if (e->port)
            fprintf(o, "        if (threadIdx.x == 0 && !ccl_port_flush(a, posted, %d, inst, %d, %d)) failed = 1;\n",
                    b->tb, emit_first_line(op), op->npeer ? op->peer[0] : e->rank);
        fprintf(o, "        __syncthreads();\n");
        fprintf(o, "        if (failed) return;\n");
        break;
    case OP_SYNC:
        fprintf(o, "        __syncthreads();\n");
        break;
    }
}

/* An LL wait and the transfer that consumes what it receives, as one pass
 * (ccl_ll_reduce): each word of the received chunks is read from this rank's lines,
 * reduced with the other sources in the transfer's order and stored, never written to
 * scratch. The wait's barrier and failure check follow, as after any wait. */
static void emit_ll_reduce(Emit *e, const PlanBlock *b, int i, const int *from)
{
    FILE *o = e->out;
    const PlanOp *w = &b->ops[i], *x = &b->ops[i + 1];
    emit_op_comment(o, w, i);
    emit_op_comment(o, x, i + 1);
    emit_xfer_comment(e, x, 0, "LL receives fused with: ");
    emit_op_part(e, x, 0);
    fprintf(o, "            char *const d[%d] = {", x->ndst);
    for (int k = 0; k < x->ndst; k++) {
        fprintf(o, "%s", k ? ", " : "");
        emit_base(e, &x->dst[k]);
        fprintf(o, " + (s%d.off + lo) * sizeof(ccl_t)", k);
    }
    fprintf(o, "};\n");
    unsigned mask = 0;
    fprintf(o, "            const char *const s[%d] = {", x->nsrc);
    for (int s = 0; s < x->nsrc; s++) {
        fprintf(o, "%s", s ? ", " : "");
        if (from[s] >= 0) {
            mask |= 1u << s;
            emit_ll_lines(e, e->rank, x->src[s].buf, x->src[s].chunk);
        } else {
            emit_base(e, &x->src[s]);
            fprintf(o, " + (s%d.off + lo) * sizeof(ccl_t)", x->ndst + s);
        }
    }
    fprintf(o, "};\n");
    fprintf(o, "            const u64 from[%d] = {", x->nsrc);
    for (int s = 0; s < x->nsrc; s++) fprintf(o, "%s%d", s ? ", " : "", from[s] >= 0 ? from[s] : 0);
    fprintf(o, "};\n");
    fprintf(o, "            if (hi > lo && !ccl_ll_reduce<%d, %d, %#xu>(d, s, from, hi - lo, flag, threadIdx.x, "
               "blockDim.x, a, launch, %d, inst, %d)) failed = 1;\n", x->ndst, x->nsrc, mask, b->tb,
            emit_first_line(w));
    for (int s = 0; e->hears && s < x->nsrc; s++)
        if (from[s] >= 0) fprintf(o, "            if (threadIdx.x == 0 && hi > lo) heard |= 1ull << %d;\n", from[s]);
    fprintf(o, "        }\n");
    for (int k = 0; k < w->npeer; k++) e->waits[w->peer[k]]++;
    fprintf(o, "        __syncthreads();\n");
    fprintf(o, "        if (failed) return;\n");
}

/* Whether op ends with a barrier of the block (every wait, barrier, flush and sync does). */
static int emit_ends_with_barrier(const PlanOp *op)
{
    return op->kind == OP_WAIT || op->kind == OP_BARRIER || op->kind == OP_FLUSH || op->kind == OP_SYNC;
}

/* Ops first..end-1 (independent transfers) at once, one warp group per chunk. Barriers
 * on both sides (the one before unless the op before, the block's last one for the
 * first op, ended with one): the ops around them share data out thread by thread,
 * these by warp group. */
static void emit_xfer_run(Emit *e, const PlanBlock *b, int first, int end)
{
    FILE *o = e->out;
    int chunks = 0;
    for (int i = first; i < end; i++) chunks += emit_op_chunks(&b->ops[i]);
    if (!emit_ends_with_barrier(&b->ops[first > 0 ? first - 1 : b->nops - 1])) fprintf(o, "        __syncthreads();\n");
    fprintf(o, "        { /* %d independent transfers at once: warp group g of G takes transfers g, g + G, ... */\n",
            chunks);
    emit_warp_groups(o, chunks);
    e->item = 0;
    for (int i = first; i < end; i++) {
        emit_op_comment(o, &b->ops[i], i);
        emit_xfer(e, &b->ops[i]);
    }
    e->item = -1;
    fprintf(o, "        }\n");
    fprintf(o, "        __syncthreads();\n");
}

/* Marks in used[] every rank whose heap the block touches remotely (data or semaphores). */
static void emit_block_peers(Emit *e, const PlanBlock *b, char *used)
{
    for (int i = 0; i < b->nops; i++) {
        const PlanOp *op = &b->ops[i];
        for (int d = 0; d < op->ndst; d++) used[op->dst[d].rank] = 1;
        for (int s = 0; s < op->nsrc; s++) used[op->src[s].rank] = 1;
        if (op->kind == OP_SIGNAL)
            for (int k = 0; k < op->npeer; k++) used[op->peer[k]] = 1;
    }
}

static void emit_block(Emit *e, const PlanBlock *b)
{
    FILE *o = e->out;
    int n = e->prog->nranks;
    fprintf(o, "    case %d: {\n", b->tb);
    char *used = cclc_calloc((size_t)n, 1);
    emit_block_peers(e, b, used);
    if (e->ll) used[e->rank] = 1; /* our own LL lines */
    for (int p = 0; p < n; p++)
        if (used[p]) fprintf(o, "        char *const p%d = a.peers[%d];\n", p, p);
    free(used);
    if (e->ll) {
        /* The launch number and the call's identity (ccl_ll_flags): the same on every
         * rank for the same call, new at every launch of the comm, so no line left by an
         * earlier launch, of any algorithm, matches, nor one of a rank running another call. */
        fprintf(o, "        const u64 flag = ccl_ll_flags(launch, a.id.hash);\n");
        unsigned long long hears = e->heard_all ? emit_tb_heard_peers(e, b->tb) : 0;
        if (hears) fprintf(o, "        if (threadIdx.x == 0) heard = ~%#llxull; /* until their lines come */\n", hears);
        e->hears = hears != 0;
        memset(e->pend, 0, sizeof *e->pend * (size_t)n);
        memset(e->waits, 0, sizeof *e->waits * (size_t)n);
    }
    fprintf(o, "        for (u64 sl = 0; sl < a.nslices; sl++) {\n");
    /* The ops print at the block's level; inside the slice loop they sit one deeper
     * (printed to memory first; without memory for that, at the block's level). */
    char *body = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&body, &len);
    if (mem) e->out = mem;
    for (int i = 0; i < b->nops;) {
        int end = e->ll ? cclc_emit_xfer_run_end(b, i) : i;
        int *from = cclc_calloc(EMIT_FUSE_MAX_SOURCES, sizeof *from);
        int fuse = cclc_emit_fusable(e, b, i, from);
        if (fuse) emit_ll_reduce(e, b, i, from);
        free(from);
        if (fuse) {
            i += 2;
        } else if (end > i) {
            emit_xfer_run(e, b, i, end);
            i = end;
        } else {
            emit_op(e, b, &b->ops[i], i);
            i++;
        }
    }
    if (mem) {
        fclose(mem);
        e->out = o;
        for (const char *line = body; *line;) {
            const char *nl = strchr(line, '\n');
            size_t width = nl ? (size_t)(nl - line) + 1 : strlen(line);
            if (width > 1) fputs("    ", o);
            fwrite(line, 1, width, o);
            line += width;
        }
        free(body);
    }
    fprintf(o, "        }\n");
    fprintf(o, "        break;\n");
    fprintf(o, "    }\n");
}

int cclc_emit_cuda_lines_only(const Plan *plan, Protocol proto)
{
    if (proto == PROTO_SIMPLE || !cclc_plan_can_run_lines(plan)) return 0;
    int ok = 1;
    for (int r = 0; r < plan->nranks && ok; r++) {
        Emit e = {.plan = plan, .prog = plan->prog, .rank = r};
        ok = cclc_emit_ll_analyze(&e);
        cclc_emit_ll_free(&e);
    }
    return ok;
}

const char *cclc_emit_cuda_refusal(const Plan *plan)
{
    /* Net channels (between nodes) are served by the CPU backend's proxy only so far. */
    if (plan->prog->nnodes > 1)
        return "CUDA emission of programs for several nodes (net channels) is not implemented yet; they run on the "
               "CPU backend (docs/multinode.md)";
    /* A v-collective's kernel keeps every rank's segment table in each block's shared
     * memory, N * (4N + 4) words: at N = 32, 33 KB of the 48 KB a block may declare. */
    if (cclc_coll_is_v(plan->prog->coll) && plan->nranks > CCLC_EMIT_V_MAX_RANKS)
        return plan->prog->coll == COLL_ALLGATHERV
                   ? "CUDA emission of allgatherv programs is limited to N <= 32 ranks (every thread block keeps "
                     "every rank's segment table in shared memory); run larger ones on the CPU backend"
                   : "CUDA emission of alltoallv programs is limited to N <= 32 ranks (every thread block keeps "
                     "every rank's segment table in shared memory); run larger ones on the CPU backend";
    return NULL;
}

void cclc_emit_cuda(FILE *out, const Plan *plan, int rank, const EmitOptions *opt)
{
    const Program *prog = plan->prog;
    const char *dtype = opt && opt->dtype ? opt->dtype : "f32";
    const char *opname = opt && opt->op ? opt->op : "sum";
    const EmitType *ty = emit_find_type(dtype);
    const char *opexpr = emit_find_op(opname);
    if (!ty) internal_error("cclc_emit_cuda: unknown dtype '%s'", dtype);
    if (!opexpr) internal_error("cclc_emit_cuda: unknown op '%s'", opname);
    if (cclc_emit_cuda_refusal(plan)) internal_error("cclc_emit_cuda: %s", cclc_emit_cuda_refusal(plan));
    if (rank < 0 || rank >= plan->nranks) internal_error("cclc_emit_cuda: rank %d out of range", rank);
    Protocol proto = opt ? opt->protocol : prog->protocol;

    Emit e = {.out = out, .plan = plan, .prog = prog, .rank = rank, .nslots = plan->nsems, .item = -1,
              .v = cclc_coll_is_v(prog->coll)};
    e.cs = e.v ? "vcs" : "a.cs";
    e.scratch_prefix = cclc_calloc((size_t)prog->nbufs, sizeof(long));
    long acc = 0;
    for (int b = BUF_SCRATCH0; b < prog->nbufs; b++) {
        e.scratch_prefix[b] = acc;
        acc += prog->buf_chunks[b];
    }
    e.scratch_chunks = acc;
    e.total_chunks = (long)prog->buf_chunks[BUF_IN] + prog->buf_chunks[BUF_OUT] + acc;
    e.ll = proto != PROTO_SIMPLE && cclc_emit_ll_analyze(&e);
    e.ll128 = e.ll && cclc_lines_ll128(prog->coll, proto);
    e.port = cclc_plan_has_port_puts(plan, rank);
    e.pend = cclc_calloc((size_t)prog->nranks, sizeof *e.pend);
    e.waits = cclc_calloc((size_t)prog->nranks, sizeof *e.waits);

    fprintf(out, "/* Generated by cclc %s (emit_cuda, ABI %d): do not edit.\n", CCLC_VERSION, CCL_ABI_VERSION);
    fprintf(out, " * algorithm %s : %s, N = %d, rank %d, K = %d\n", prog->name ? prog->name : "?",
            cclc_coll_name(prog->coll), prog->nranks, rank, prog->chunks);
    fprintf(out, " * dtype %s, op %s, protocol %s", dtype, opname, cclc_proto_name(proto));
    /* The line region, in words tests/cuda/nvrtc_compile parses. */
    const char *sets = e.v ? "" : ", two sets: one per launch parity, for chunks of a.lines_chunk bytes";
    if (e.ll128)
        fprintf(out, "\n * LL128: remote writes are 128-byte lines of 15 data words and a flag word into the peer's\n"
                     " * LL region (after %ld scratch chunks: %ld chunks x ccl_ll128_lines_bytes(CS)%s, from the\n"
                     " * next multiple of 128 bytes); the signals they publish and the waits that receive them\n"
                     " * are the lines' flags",
                acc, e.total_chunks, sets);
    else if (e.ll)
        fprintf(out, "%s\n * LL: remote writes are 16-byte lines {data, flag, data, flag} into the peer's LL region\n"
                     " * (after %ld scratch chunks: %ld chunks x 2*CS*esize bytes%s);\n"
                     " * the signals they publish and the waits that receive them are the lines' flags",
                proto == PROTO_LL128 ? " (run as ll: a v-collective's lines are LL's)" : "", acc, e.total_chunks,
                sets);
    else if (proto != PROTO_SIMPLE)
        fprintf(out, " (run as simple: the program reads peers' memory, uses port channels or named\n"
                     " * semaphores, which lines cannot carry)");
    if (e.v)
        fprintf(out, "\n * %s: every chunk is as long as its segment's chunks (segment tables in vt, every rank's;\n"
                     " * in/out chunk c of a segment at its displacement + c * its stride, scratch chunks at\n"
                     " * their index * vcs, the longest segment's stride)", cclc_coll_name(prog->coll));
    fprintf(out, "\n * logical thread blocks %d, semaphore slots per instance %d, scratch chunks %ld\n",
            plan->ntb, plan->nsems, acc);
    fprintf(out, " * Launch: grid = %d * ninst blocks; one heap of every rank mapped (a.peers). */\n",
            plan->ntb);
    fprintf(out, "typedef %s ccl_t;\n", ty->storage);
    fprintf(out, "typedef %s ccl_acc;\n", ty->acc);
    fprintf(out, "#define CCL_LOAD(x) %s\n", ty->load);
    fprintf(out, "#define CCL_STORE(x) %s\n", ty->store);
    if (ty->wrap && (!strcmp(opname, "sum") || !strcmp(opname, "prod") || !strcmp(opname, "avg")))
        fprintf(out, "#define CCL_OP(a, b) (%s%s)\n", ty->wrap, opexpr);
    else
        fprintf(out, "#define CCL_OP(a, b) %s\n", opexpr);
    fprintf(out, "#define CCL_NRANKS %d\n", prog->nranks);
    fprintf(out, "#define CCL_RANK %d\n", rank);
    if (e.ll128) fprintf(out, "#define CCL_PART_BYTES 240 /* parts start on an LL128 line */\n");
    /* Segments at any element: 16-byte copies of misaligned ones, this many vectors in
     * flight per thread (2 where LL's registers leave no room for 4 without spills). */
    if (e.v) fprintf(out, "#define CCL_SHIFTED_COPIES %d\n", e.ll || e.ll128 ? 2 : 4);
    if (!(opt && opt->kernel_only)) fputs(ccl__prelude_cuh, out);

    /* The prologue: the call's announcement and launch number, then (but in a kernel
     * checked at its exit, and a v kernel, whose ccl_vload waits for the peers' tables
     * instead) the wait until every peer has announced the same call. */
    static const char announce[] = "    int first;\n    const u64 launch = ccl_announce(a, &first);\n";
    static const char await_entry[] = "    if (!ccl_await_peers(a, launch)) return; /* a peer runs another call, or "
                                      "none: the error says which */\n";
    if (e.v) {
        /* Its own table comes by value (graph-capturable); the chunks of the region it
         * lays out from the v arena's start, for ccl_vload's check that it fits. */
        long region = e.ll ? acc + 2 * e.total_chunks : acc;
        fprintf(out, "struct ccl_vtable { u64 w[%d]; }; /* this rank's segment table (abi.h's CCL_VT_*) */\n",
                (int)CCL_VT_WORDS(prog->nranks));
        fprintf(out, "extern \"C\" __global__ void __launch_bounds__(512, 1) ccl_kernel(const CCL_GRID_CONSTANT struct "
                     "ccl_args a, const CCL_GRID_CONSTANT struct ccl_vtable t)\n{\n");
        fprintf(out, "    int first;\n    const u64 launch = ccl_announce(a, &first, t.w); /* the table first */\n");
        fprintf(out, "    __shared__ u64 vt[%d];\n", prog->nranks * (int)CCL_VT_WORDS(prog->nranks));
        fprintf(out, "    __shared__ u64 vload_cs;\n");
        fprintf(out, "    char *const mine = a.peers[%d];\n", rank);
        fprintf(out, "    if (!ccl_vload(a, launch, launch ^ a.id.hash, mine, mine + a.vring_off, a.varena_bytes, t.w, vt, %d, %d, "
                     "%ld, &vload_cs))\n        return; /* a peer runs another call or none, or the counts disagree or do "
                     "not fit: the error says which */\n", prog->chunks, prog->coll == COLL_ALLTOALLV, region);
        fprintf(out, "    const u64 vcs = vload_cs; /* scratch's chunk stride: the longest segment's */\n");
        fprintf(out, "    (void)vcs; /* unused without scratch */\n");
    } else {
        fprintf(out, "extern \"C\" __global__ void __launch_bounds__(512, 1) ccl_kernel(const CCL_GRID_CONSTANT struct "
                     "ccl_args a)\n{\n");
        fputs(announce, out);
        if (!emit_exit_checked(&e)) {
            fputs(await_entry, out);
        } else if (e.ll128) {
            fprintf(out, "    /* This launch's set of lines: two sets by launch parity, after the scratch buffers,\n"
                         "     * laid out for chunks of a.lines_chunk bytes. */\n");
            fprintf(out, "    const u64 line_set = ccl_ll128_align(%ldull * a.lines_chunk) + (launch & 1) * %ldull * "
                         "ccl_ll128_bytes_lines(a.lines_chunk);\n", acc, e.total_chunks);
        } else {
            fprintf(out, "    /* This launch's set of lines: two sets by launch parity, after the scratch buffers,\n"
                         "     * laid out for chunks of a.lines_chunk bytes. */\n");
            fprintf(out, "    const u64 line_set = (%ldull + (launch & 1) * %ldull) * a.lines_chunk;\n", acc,
                    2 * e.total_chunks);
        }
    }
    fprintf(out, "    const u64 inst = blockIdx.x %% a.ninst;\n");
    e.v_idles = emit_v_idles(&e, plan, rank);
    if (e.v_idles)
        fprintf(out, "    /* The instances the longest segment (at most %d x vcs elements) needs; idle ones return, on every "
                     "rank alike. */\n"
                     "    const u64 vneed = ((u64)%d * vcs * sizeof(ccl_t) >> CCL_V_INST_SHIFT) + 1;\n"
                     "    const u64 vinst = vneed < a.ninst ? vneed : a.ninst;\n"
                     "    if (inst >= vinst) return;\n", prog->chunks, prog->chunks);
    fprintf(out, "    u64 *const sem = (u64 *)(a.peers[%d] + a.sem_off);\n", rank);
    fprintf(out, "    (void)sem; /* unused when LL lines carry every signal */\n");
    if (e.port)
        fprintf(out, "    u64 *const posted = a.expected + %d * a.ninst + 1 + gridDim.x + blockIdx.x; /* port puts */\n",
                plan->nsems);
    /* The peers some block of this rank receives lines from, as a 64-bit mask: with more
     * ranks the first block awaits every peer (emit_exit_check). */
    unsigned long long received = 0;
    for (int i = 0; i < plan->nblocks && emit_exit_checked(&e) && prog->nranks <= 64; i++)
        if (plan->blocks[i].rank == rank) received |= emit_tb_heard_peers(&e, plan->blocks[i].tb);
    e.heard_all = received && received == ((prog->nranks == 64 ? ~0ull : (1ull << prog->nranks) - 1) & ~(1ull << rank));
    fprintf(out, "    __shared__ int failed;\n");
    if (e.heard_all) {
        fprintf(out, "    __shared__ u64 heard; /* the peers this block need not await at its exit */\n");
        fprintf(out, "    if (threadIdx.x == 0) failed = 0, heard = ~0ull;\n");
    } else {
        fprintf(out, "    if (threadIdx.x == 0) failed = 0;\n");
    }
    fprintf(out, "    __syncthreads();\n");
    fprintf(out, "    switch (blockIdx.x / a.ninst) {\n");
    for (int i = 0; i < plan->nblocks; i++)
        if (plan->blocks[i].rank == rank) emit_block(&e, &plan->blocks[i]);
    fprintf(out, "    default:\n        break;\n    }\n");
    if (emit_exit_checked(&e))
        emit_exit_check(&e);
    else
        fprintf(out, "    (void)first;\n");
    fprintf(out, "}\n");
    cclc_emit_ll_free(&e);
    free(e.pend);
    free(e.waits);
    free(e.scratch_prefix);
}
