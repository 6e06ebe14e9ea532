/* emit_cuda.c: CUDA C for one rank of a scheduled Plan (`cclc cuda`).
 *
 * Takes a Plan and a rank; writes one self-contained CUDA C translation unit (no
 * #include, so NVRTC needs no header path and `nvcc -arch=sm_90 --cubin` works on the
 * file alone). It holds:
 *
 *   - a prelude: the element type, accumulator type and operator picked by EmitOptions
 *     (macros and small device functions), 16-byte vectorized transfer templates with a
 *     scalar path for misaligned operands and tails, and the semaphore primitives;
 *   - `extern "C" __global__ void ccl_kernel(const ccl_args a)`: a switch over logical
 *     thread blocks (physical block b runs logical block b / a.ninst as instance
 *     b % a.ninst), each case straight-line code with rank, peers, chunk indices and
 *     semaphore slots folded in as constants;
 *   - `extern "C" __global__ void ccl_avg(...)`: the final division for op avg, and
 *     `ccl_rank_barrier(...)`, the all-rank barrier launched around it.
 *
 * The kernel ABI (struct ccl_args, struct ccl_err) is mirrored by runtime/src/gpu_abi.h;
 * change both together (CCL_ABI_VERSION below and there). Layout follows docs/internals.md
 * exactly: units of `n` elements (stride in_ustride/out_ustride between units in in/out),
 * chunk stride cs = round_up(ceil(n/K), A), padded scratch, instances and slices cut at
 * round_down(q*L/P, A), semaphore slot (t*I + i)*N + peer, expected values in device
 * memory so graph replays need no host work.
 *
 * Remote operands are reached through `a.peers`, a device table of every rank's symmetric
 * heap base as mapped on this GPU; scratch, semaphores and (when the user's buffers are
 * symmetric or staged) in/out live at the same offsets on every rank.
 *
 * Protocols: Simple is implemented. LL and LL128 programs run as Simple with their
 * scratch double-buffered by call parity (a per-block call counter in `expected`), which
 * is what the verifier's cross-call proof of an LL program assumes: the runtime gives
 * such kernels a scratch region twice the program's size. They are correct, only not
 * latency-optimized (no flag packets yet). Port channels run as SM copies (flush is a
 * block barrier).
 *
 * Output is deterministic: it depends only on the plan, the rank and the options.
 */
#include <stdlib.h>
#include <string.h>

#include "cclc.h"

#define CCL_ABI_VERSION 1

typedef struct {
    const char *name;     /* EmitOptions spelling */
    const char *storage;  /* element storage type in CUDA */
    const char *acc;      /* accumulator type */
    int size;             /* bytes per element */
    const char *load;     /* CCL_LOAD(x): storage -> acc */
    const char *store;    /* CCL_STORE(x): acc -> storage */
    int is_int;
} EmitType;

static const EmitType emit_types[] = {
    {"f32", "float", "float", 4, "(x)", "(x)", 0},
    {"f64", "double", "double", 8, "(x)", "(x)", 0},
    {"f16", "unsigned short", "float", 2, "ccl_h2f(x)", "ccl_f2h(x)", 0},
    {"bf16", "unsigned short", "float", 2, "ccl_bf2f(x)", "ccl_f2bf(x)", 0},
    {"i32", "int", "int", 4, "(x)", "(x)", 1},
    {"i64", "long long", "long long", 8, "(x)", "(x)", 1},
    {"u8", "unsigned char", "unsigned int", 1, "(unsigned int)(x)", "(unsigned char)(x)", 1},
    {"fp8_e4m3", "unsigned char", "float", 1, "ccl_fp8_dec(x, 4, 3, 7)", "ccl_fp8_enc(x, 4, 3, 7)", 0},
    {"fp8_e5m2", "unsigned char", "float", 1, "ccl_fp8_dec(x, 5, 2, 15)", "ccl_fp8_enc(x, 5, 2, 15)", 0},
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

/* The part of the source that does not depend on the plan, only on dtype and op.
 * Everything here must compile under NVRTC with no headers and under nvcc for any arch
 * from sm_60 up; sm_70+ get the release/acquire PTX, older ones fences. */
static const char emit_prelude[] =
    "typedef unsigned long long u64;\n"
    "\n"
    "/* The kernel ABI; runtime/src/gpu_abi.h mirrors it field for field (all 8 bytes). */\n"
    "struct ccl_err {\n"
    "    u64 flag;      /* 0 until the first timeout on this rank */\n"
    "    u64 rank, tb, inst, line, peer, slot, expected, seen;\n"
    "};\n"
    "struct ccl_args {\n"
    "    char *in, *out;          /* this rank's in and out for this launch */\n"
    "    char *const *peers;      /* device table: every rank's heap base, mapped here */\n"
    "    u64 in_off, out_off;     /* heap offsets of in and out (for remote access) */\n"
    "    u64 scratch_off;         /* heap offset of this algorithm's scratch */\n"
    "    u64 sem_off;             /* heap offset of this algorithm's semaphores */\n"
    "    u64 *expected;           /* local device memory: slots*ninst + 1 + 3*grid entries */\n"
    "    struct ccl_err *err;     /* host-mapped */\n"
    "    u64 n;                   /* elements per unit */\n"
    "    u64 in_ustride, out_ustride; /* elements between units of in / out */\n"
    "    u64 cs;                  /* chunk stride in elements */\n"
    "    u64 ninst, nslices;      /* instances per logical block, slices per chunk */\n"
    "    u64 timeout_ns;          /* bound on every wait */\n"
    "};\n"
    "\n"
    "#define CCL_VE (16 / (int)sizeof(ccl_t)) /* elements per 16-byte vector */\n"
    "\n"
    "__device__ __forceinline__ float ccl_bf2f(unsigned short x)\n"
    "{\n"
    "    return __uint_as_float((unsigned int)x << 16);\n"
    "}\n"
    "__device__ __forceinline__ unsigned short ccl_f2bf(float f)\n"
    "{\n"
    "    unsigned int u = __float_as_uint(f);\n"
    "    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);\n"
    "    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */\n"
    "    return (unsigned short)(u >> 16);\n"
    "}\n"
    "__device__ __forceinline__ float ccl_h2f(unsigned short x)\n"
    "{\n"
    "    float f;\n"
    "    asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(x));\n"
    "    return f;\n"
    "}\n"
    "__device__ __forceinline__ unsigned short ccl_f2h(float f)\n"
    "{\n"
    "    unsigned short x;\n"
    "    asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(x) : \"f\"(f));\n"
    "    return x;\n"
    "}\n"
    "/* FP8 (OCP e4m3fn and e5m2) in software, so every arch gives the same bits:\n"
    " * round to nearest even, saturating to the largest finite value. */\n"
    "__device__ __forceinline__ float ccl_fp8_dec(unsigned char x, int eb, int mb, int bias)\n"
    "{\n"
    "    int e = (x >> mb) & ((1 << eb) - 1), m = x & ((1 << mb) - 1);\n"
    "    float s = (x & 0x80) ? -1.0f : 1.0f;\n"
    "    if (eb == 4 && e == 15 && m == 7) return __int_as_float(0x7fc00000);\n"
    "    if (eb == 5 && e == 31) return m ? __int_as_float(0x7fc00000) : s * __int_as_float(0x7f800000);\n"
    "    if (e == 0) return s * ldexpf((float)m, 1 - bias - mb);\n"
    "    return s * ldexpf((float)(m + (1 << mb)), e - bias - mb);\n"
    "}\n"
    "__device__ __forceinline__ unsigned char ccl_fp8_enc(float f, int eb, int mb, int bias)\n"
    "{\n"
    "    unsigned int sign = (__float_as_uint(f) >> 24) & 0x80u;\n"
    "    int maxcode = eb == 4 ? 0x7e : 0x7b; /* 448 and 57344 */\n"
    "    float a = fabsf(f);\n"
    "    if (a != a) return (unsigned char)(sign | (eb == 4 ? 0x7f : 0x7e));\n"
    "    int ex;\n"
    "    frexpf(a, &ex);\n"
    "    int e = ex - 1; /* a in [2^e, 2^(e+1)) */\n"
    "    int code;\n"
    "    if (a == 0.0f) code = 0;\n"
    "    else if (e < 1 - bias) code = (int)rintf(ldexpf(a, bias - 1 + mb));\n"
    "    else {\n"
    "        int q = (int)fminf(rintf(ldexpf(a, mb - e)), (float)(1 << (mb + 2)));\n"
    "        if (q == (2 << mb)) { q = 1 << mb; e++; }\n"
    "        code = e + bias > (1 << eb) - 1 ? 0xff : ((e + bias) << mb) | (q - (1 << mb));\n"
    "    }\n"
    "    if (code > maxcode) code = maxcode;\n"
    "    return (unsigned char)(sign | (unsigned int)code);\n"
    "}\n"
    "\n"
    "/* Loads that bypass L1: data written by peers or by other blocks is never read stale. */\n"
    "__device__ __forceinline__ uint4 ccl_ld16(const char *p)\n"
    "{\n"
    "    uint4 v;\n"
    "    asm volatile(\"ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];\"\n"
    "                 : \"=r\"(v.x), \"=r\"(v.y), \"=r\"(v.z), \"=r\"(v.w) : \"l\"(p) : \"memory\");\n"
    "    return v;\n"
    "}\n"
    "__device__ __forceinline__ ccl_t ccl_ld1(const char *p)\n"
    "{\n"
    "    return *(const volatile ccl_t *)p;\n"
    "}\n"
    "\n"
    "union ccl_vec {\n"
    "    uint4 v;\n"
    "    ccl_t e[CCL_VE];\n"
    "};\n"
    "\n"
    "/* dst[d] = op(src[0], src[1], ...) for n elements, every thread of the block taking a\n"
    " * share. 16-byte vectors when every operand is 16-byte aligned; the rest (and any\n"
    " * misaligned transfer) element by element. A one-source transfer copies bits. */\n"
    "template <int ND, int NS>\n"
    "__device__ __forceinline__ void ccl_xfer(char *const (&dst)[ND], const char *const (&src)[NS], u64 n)\n"
    "{\n"
    "    const u64 tid = threadIdx.x, nt = blockDim.x;\n"
    "    u64 mis = 0, done = 0;\n"
    "#pragma unroll\n"
    "    for (int d = 0; d < ND; d++) mis |= (u64)dst[d];\n"
    "#pragma unroll\n"
    "    for (int s = 0; s < NS; s++) mis |= (u64)src[s];\n"
    "    if ((mis & 15) == 0) {\n"
    "        const u64 nv = n / CCL_VE;\n"
    "        enum { UNROLL = NS <= 2 ? 4 : NS <= 4 ? 2 : 1 };\n"
    "        for (u64 base = tid; base < nv; base += UNROLL * nt) {\n"
    "            union ccl_vec in[UNROLL][NS];\n"
    "#pragma unroll\n"
    "            for (int u = 0; u < UNROLL; u++)\n"
    "#pragma unroll\n"
    "                for (int s = 0; s < NS; s++)\n"
    "                    if (base + u * nt < nv) in[u][s].v = ccl_ld16(src[s] + 16 * (base + u * nt));\n"
    "#pragma unroll\n"
    "            for (int u = 0; u < UNROLL; u++) {\n"
    "                if (base + u * nt >= nv) break;\n"
    "                union ccl_vec r;\n"
    "                if (NS == 1) {\n"
    "                    r = in[u][0];\n"
    "                } else {\n"
    "#pragma unroll\n"
    "                    for (int k = 0; k < CCL_VE; k++) {\n"
    "                        ccl_acc x = CCL_LOAD(in[u][0].e[k]);\n"
    "#pragma unroll\n"
    "                        for (int s = 1; s < NS; s++) x = CCL_OP(x, CCL_LOAD(in[u][s].e[k]));\n"
    "                        r.e[k] = CCL_STORE(x);\n"
    "                    }\n"
    "                }\n"
    "#pragma unroll\n"
    "                for (int d = 0; d < ND; d++) *(uint4 *)(dst[d] + 16 * (base + u * nt)) = r.v;\n"
    "            }\n"
    "        }\n"
    "        done = nv * CCL_VE;\n"
    "    }\n"
    "    for (u64 i = done + tid; i < n; i += nt) {\n"
    "        ccl_t r;\n"
    "        if (NS == 1) {\n"
    "            r = ccl_ld1(src[0] + i * sizeof(ccl_t));\n"
    "        } else {\n"
    "            ccl_acc x = CCL_LOAD(ccl_ld1(src[0] + i * sizeof(ccl_t)));\n"
    "#pragma unroll\n"
    "            for (int s = 1; s < NS; s++) x = CCL_OP(x, CCL_LOAD(ccl_ld1(src[s] + i * sizeof(ccl_t))));\n"
    "            r = CCL_STORE(x);\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int d = 0; d < ND; d++) *(ccl_t *)(dst[d] + i * sizeof(ccl_t)) = r;\n"
    "    }\n"
    "}\n"
    "\n"
    "/* An in/out chunk at unit u, position c: element offset and true length (short or\n"
    " * empty at the tail, docs/internals.md). */\n"
    "struct ccl_span {\n"
    "    u64 off, len;\n"
    "};\n"
    "__device__ __forceinline__ struct ccl_span ccl_io(const struct ccl_args &a, u64 ustride, u64 u, u64 c)\n"
    "{\n"
    "    struct ccl_span s;\n"
    "    u64 start = c * a.cs;\n"
    "    s.off = u * ustride + start;\n"
    "    s.len = a.n > start ? (a.n - start < a.cs ? a.n - start : a.cs) : 0;\n"
    "    return s;\n"
    "}\n"
    "/* This instance's and slice's part [lo, hi) of a transfer of len elements: the cut\n"
    " * points are round_down(q*len/P, A), the last part ending at len. */\n"
    "__device__ __forceinline__ void ccl_part(const struct ccl_args &a, u64 inst, u64 sl, u64 len, u64 *lo, u64 *hi)\n"
    "{\n"
    "    const u64 A = CCL_VE;\n"
    "    u64 ilo = inst * len / a.ninst / A * A;\n"
    "    u64 ihi = inst + 1 == a.ninst ? len : (inst + 1) * len / a.ninst / A * A;\n"
    "    u64 il = ihi - ilo;\n"
    "    *lo = ilo + sl * il / a.nslices / A * A;\n"
    "    *hi = sl + 1 == a.nslices ? ihi : ilo + (sl + 1) * il / a.nslices / A * A;\n"
    "}\n"
    "\n"
    "__device__ __forceinline__ u64 ccl_now(void)\n"
    "{\n"
    "    u64 t;\n"
    "    asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t));\n"
    "    return t;\n"
    "}\n"
    "__device__ __forceinline__ u64 ccl_ld_acquire(const u64 *p)\n"
    "{\n"
    "    u64 v;\n"
    "#if __CUDA_ARCH__ >= 700\n"
    "    asm volatile(\"ld.acquire.sys.global.u64 %0, [%1];\" : \"=l\"(v) : \"l\"(p) : \"memory\");\n"
    "#else\n"
    "    v = *(const volatile u64 *)p;\n"
    "    __threadfence_system();\n"
    "#endif\n"
    "    return v;\n"
    "}\n"
    "/* Called by one thread after a __syncthreads() that ordered the block's stores: the\n"
    " * barrier makes them visible to this thread and the release (cumulative, system scope)\n"
    " * publishes them with the increment, so no separate fence.sc.sys is needed. */\n"
    "__device__ __forceinline__ void ccl_signal(u64 *sem)\n"
    "{\n"
    "#if __CUDA_ARCH__ >= 700\n"
    "    asm volatile(\"red.release.sys.global.add.u64 [%0], %1;\" :: \"l\"(sem), \"l\"(1ull) : \"memory\");\n"
    "#else\n"
    "    __threadfence_system();\n"
    "    atomicAdd(sem, 1ull);\n"
    "#endif\n"
    "}\n"
    "/* Waits until *sem reaches *expected + step, then advances *expected (kept in device\n"
    " * memory, so it persists across launches and graph replays). On timeout records who\n"
    " * waited for whom in the host-visible error record, sets the abort word (offset 0 of\n"
    " * every rank's heap, internal.h's CclHeapHeader) and returns 0; a set abort word makes\n"
    " * every wait give up within microseconds. A barrier of all\n"
    " * blocks of the rank is the same wait on a counter every block adds 1 to (step =\n"
    " * gridDim.x; all blocks must be resident). */\n"
    "__device__ __noinline__ int ccl_wait(const u64 *sem, u64 *expected, u64 step, char *const *peers,\n"
    "                                     struct ccl_err *err, u64 timeout_ns, u64 slot, u64 rank, u64 tb,\n"
    "                                     u64 inst, u64 line, u64 peer)\n"
    "{\n"
    "    const u64 want = *expected + step;\n"
    "    const volatile u64 *abort_flag = (const volatile u64 *)peers[rank];\n"
    "    u64 t0 = 0, v = 0;\n"
    "    for (unsigned int it = 0;; it++) {\n"
    "        v = ccl_ld_acquire(sem);\n"
    "        if (v >= want) break;\n"
    "        if ((it & 255) == 0) {\n"
    "            if (*abort_flag) return 0; /* a peer failed: give up at once */\n"
    "            u64 now = ccl_now();\n"
    "            if (t0 == 0) t0 = now;\n"
    "            else if (now - t0 > timeout_ns) {\n"
    "                if (atomicCAS(&err->flag, 0ull, 2ull) == 0ull) {\n"
    "                    err->rank = rank; err->tb = tb; err->inst = inst; err->line = line; err->peer = peer;\n"
    "                    err->slot = slot; err->expected = want; err->seen = v;\n"
    "                    __threadfence_system();\n"
    "                    *(volatile u64 *)&err->flag = 1;\n"
    "                }\n"
    "                /* Stop every rank: the abort word at offset 0 of each heap. */\n"
    "                for (int p = 0; p < CCL_NRANKS; p++)\n"
    "                    atomicCAS((u64 *)peers[p], 0ull, rank + 1);\n"
    "                __threadfence_system();\n"
    "                return 0;\n"
    "            }\n"
    "        }\n"
    "    }\n"
    "    *expected = want;\n"
    "    return 1;\n"
    "}\n"
    "\n"
"/* All ranks: every rank adds 1 to rank 0's heap-header barrier word (offset 8) and\n"
    " * waits for N more arrivals than its last barrier saw (gen: this rank's device\n"
    " * counter). Launched with one block around avg's division. */\n"
    "extern \"C\" __global__ void ccl_rank_barrier(char *const *peers, u64 *gen, struct ccl_err *err, u64 timeout_ns)\n"
    "{\n"
    "    if (threadIdx.x != 0) return;\n"
    "    u64 *ctr = (u64 *)(peers[0] + 8);\n"
    "    ccl_signal(ctr);\n"
    "    ccl_wait(ctr, gen, CCL_NRANKS, peers, err, timeout_ns, ~0ull, CCL_RANK, ~0ull, 0, 0, 0);\n"
    "}\n"
    "\n"
    "/* op avg: the collective reduced as sum; every element of out is divided once. */\n"
    "extern \"C\" __global__ void ccl_avg(char *out, u64 count, u64 nranks)\n"
    "{\n"
    "    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < count; i += (u64)gridDim.x * blockDim.x) {\n"
    "        ccl_t *p = (ccl_t *)(out + i * sizeof(ccl_t));\n"
    "        *p = CCL_STORE(CCL_LOAD(*p) / (ccl_acc)nranks);\n"
    "    }\n"
    "}\n"
    "\n";

/* Everything the per-rank code emission needs in one place. */
typedef struct {
    FILE *out;
    const Plan *plan;
    const Program *prog;
    int rank;
    int nslots;           /* semaphore slots for one instance: plan->nsems */
    long *scratch_prefix; /* per buffer: chunks of the scratch buffers before it */
    long scratch_chunks;  /* all scratch buffers together */
    int double_buffer;    /* LL program run as Simple: scratch alternates by call parity */
} Emit;

/* Writes a C expression for the base pointer (char *) of operand r's buffer. */
static void emit_base(Emit *e, const Ref *r)
{
    FILE *o = e->out;
    int local = r->rank == e->rank;
    if (r->buf == BUF_IN || r->buf == BUF_OUT) {
        const char *which = r->buf == BUF_IN ? "in" : "out";
        if (local) fprintf(o, "a.%s", which);
        else fprintf(o, "(p%d + a.%s_off)", r->rank, which);
    } else {
        fprintf(o, "(p%d + sbase + %ldull * a.cs * sizeof(ccl_t))", r->rank, e->scratch_prefix[r->buf]);
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

static int emit_first_line(const PlanOp *op) { return op->nlines ? op->lines[0] : 0; }

/* One chunk of an OP_XFER: spans of every operand, the shortest length, this
 * instance's and slice's part of it, then the transfer. */
static void emit_xfer_chunk(Emit *e, const PlanOp *op, int j)
{
    FILE *o = e->out;
    int nops = op->ndst + op->nsrc;
    fprintf(o, "        { /* ");
    for (int d = 0; d < op->ndst; d++) {
        if (d) fprintf(o, ", ");
        emit_ref_comment(e, &op->dst[d], j);
    }
    fprintf(o, " <- ");
    for (int s = 0; s < op->nsrc; s++) {
        if (s) fprintf(o, ", ");
        emit_ref_comment(e, &op->src[s], j);
    }
    fprintf(o, " */\n");
    char name[32];
    for (int x = 0; x < nops; x++) {
        const Ref *r = x < op->ndst ? &op->dst[x] : &op->src[x - op->ndst];
        snprintf(name, sizeof name, "s%d", x);
        emit_span(e, name, r, r->chunk + j);
    }
    fprintf(o, "            u64 len = s0.len;\n");
    for (int x = 1; x < nops; x++) fprintf(o, "            if (s%d.len < len) len = s%d.len;\n", x, x);
    fprintf(o, "            u64 lo, hi;\n");
    fprintf(o, "            ccl_part(a, inst, sl, len, &lo, &hi);\n");
    fprintf(o, "            char *const d[%d] = {", op->ndst);
    for (int x = 0; x < op->ndst; x++) {
        fprintf(o, "%s", x ? ", " : "");
        emit_base(e, &op->dst[x]);
        fprintf(o, " + (s%d.off + lo) * sizeof(ccl_t)", x);
    }
    fprintf(o, "};\n");
    fprintf(o, "            const char *const s[%d] = {", op->nsrc);
    for (int x = 0; x < op->nsrc; x++) {
        fprintf(o, "%s", x ? ", " : "");
        emit_base(e, &op->src[x]);
        fprintf(o, " + (s%d.off + lo) * sizeof(ccl_t)", op->ndst + x);
    }
    fprintf(o, "};\n");
    fprintf(o, "            if (hi > lo) ccl_xfer<%d, %d>(d, s, hi - lo);\n", op->ndst, op->nsrc);
    fprintf(o, "        }\n");
}

/* The semaphore slot of logical slot `sem` (t*N + peer, for one instance) for
 * instance `inst`: (t*I + inst)*N + peer. */
static void emit_slot(FILE *o, int sem, int nranks)
{
    fprintf(o, "((u64)%d * a.ninst + inst) * %d + %d", sem / nranks, nranks, sem % nranks);
}

static void emit_op(Emit *e, const PlanBlock *b, const PlanOp *op, int idx)
{
    FILE *o = e->out;
    int n = e->prog->nranks;
    static const char *const kind_names[] = {"xfer", "signal", "wait", "barrier", "flush", "sync"};
    fprintf(o, "        /* op %d: %s", idx, kind_names[op->kind]);
    if (op->chan == CHAN_PORT) fprintf(o, " [port channel: run as SM copies]");
    emit_lines_comment(o, op);
    fprintf(o, " */\n");
    switch (op->kind) {
    case OP_XFER: {
        int count = op->ndst ? op->dst[0].count : op->src[0].count;
        for (int j = 0; j < count; j++) emit_xfer_chunk(e, op, j);
        break;
    }
    case OP_SIGNAL:
        /* The barrier orders every thread's stores before the release by thread k. */
        fprintf(o, "        __syncthreads();\n");
        for (int k = 0; k < op->npeer; k++) {
            /* The slot on the peer: same logical block, indexed by this (signalling) rank. */
            int t = op->sem[k] / n;
            fprintf(o, "        if (threadIdx.x == %d) ccl_signal((u64 *)(p%d + a.sem_off) + ", k, op->peer[k]);
            emit_slot(o, t * n + e->rank, n);
            fprintf(o, ");\n");
        }
        break;
    case OP_WAIT:
        for (int k = 0; k < op->npeer; k++) {
            fprintf(o, "        if (threadIdx.x == %d) {\n", k);
            fprintf(o, "            const u64 slot = ");
            emit_slot(o, op->sem[k], n);
            fprintf(o, ";\n");
            fprintf(o, "            if (!ccl_wait(sem + slot, a.expected + slot, 1, a.peers, a.err, a.timeout_ns, slot, %d, %d, "
                       "inst, %d, %d)) failed = 1;\n", e->rank, b->tb, emit_first_line(op), op->peer[k]);
            fprintf(o, "        }\n");
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
        fprintf(o, "            if (!ccl_wait(ctr, ctr + 1 + blockIdx.x, gridDim.x, a.peers, a.err, a.timeout_ns, "
                   "%d * a.ninst, %d, %d, inst, %d, %d)) failed = 1;\n", e->nslots, e->rank, b->tb,
                emit_first_line(op), e->rank);
        fprintf(o, "        }\n");
        fprintf(o, "        __syncthreads();\n");
        fprintf(o, "        if (failed) return;\n");
        break;
    case OP_FLUSH:
        /* Port-channel puts are SM stores here; the next signal's fence publishes them. */
        fprintf(o, "        __syncthreads();\n");
        break;
    case OP_SYNC:
        fprintf(o, "        __syncthreads();\n");
        break;
    }
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
    char *used = calloc((size_t)n, 1);
    if (!used) internal_error("out of memory");
    emit_block_peers(e, b, used);
    for (int p = 0; p < n; p++)
        if (used[p]) fprintf(o, "        char *const p%d = a.peers[%d];\n", p, p);
    free(used);
    if (e->double_buffer) {
        /* This block's call count (after the expected values, the barrier counter and
         * the barrier generations) picks the scratch half; every rank counts the same. */
        fprintf(o, "        u64 *const epoch = a.expected + %d * a.ninst + 1 + 2 * gridDim.x + blockIdx.x;\n",
                e->nslots);
        fprintf(o, "        const u64 ep = *epoch;\n");
        fprintf(o, "        const u64 sbase = a.scratch_off + (ep & 1) * %ldull * a.cs * sizeof(ccl_t);\n",
                e->scratch_chunks);
    } else {
        fprintf(o, "        const u64 sbase = a.scratch_off;\n");
    }
    fprintf(o, "        for (u64 sl = 0; sl < a.nslices; sl++) {\n");
    for (int i = 0; i < b->nops; i++) emit_op(e, b, &b->ops[i], i);
    fprintf(o, "        }\n");
    if (e->double_buffer) {
        fprintf(o, "        __syncthreads();\n");
        fprintf(o, "        if (threadIdx.x == 0) *epoch = ep + 1;\n");
    }
    fprintf(o, "        break;\n");
    fprintf(o, "    }\n");
}

void emit_cuda(FILE *out, const Plan *plan, int rank, const EmitOptions *opt)
{
    const Program *prog = plan->prog;
    const char *dtype = opt && opt->dtype ? opt->dtype : "f32";
    const char *opname = opt && opt->op ? opt->op : "sum";
    const EmitType *ty = emit_find_type(dtype);
    const char *opexpr = emit_find_op(opname);
    if (!ty) internal_error("emit_cuda: unknown dtype '%s'", dtype);
    if (!opexpr) internal_error("emit_cuda: unknown op '%s'", opname);
    if (rank < 0 || rank >= plan->nranks) internal_error("emit_cuda: rank %d out of range", rank);
    Protocol proto = opt ? opt->protocol : prog->protocol;

    Emit e = {.out = out, .plan = plan, .prog = prog, .rank = rank, .nslots = plan->nsems};
    e.scratch_prefix = calloc((size_t)prog->nbufs, sizeof(long));
    if (!e.scratch_prefix) internal_error("out of memory");
    long acc = 0;
    for (int b = BUF_SCRATCH0; b < prog->nbufs; b++) {
        e.scratch_prefix[b] = acc;
        acc += prog->buf_chunks[b];
    }
    e.scratch_chunks = acc;
    e.double_buffer = proto != PROTO_SIMPLE && acc > 0;

    fprintf(out, "/* Generated by cclc %s (emit_cuda, ABI %d): do not edit.\n", CCLC_VERSION, CCL_ABI_VERSION);
    fprintf(out, " * algorithm %s : %s, N = %d, rank %d, K = %d\n", prog->name ? prog->name : "?",
            coll_name(prog->coll), prog->nranks, rank, prog->chunks);
    fprintf(out, " * dtype %s, op %s, protocol %s", dtype, opname, proto_name(proto));
    if (proto != PROTO_SIMPLE)
        fprintf(out, " (run as simple with scratch double-buffered by call parity, as the\n"
                     " * verifier's cross-call proof of an LL program assumes; scratch region = 2 x %ld chunks)", acc);
    fprintf(out, "\n * logical thread blocks %d, semaphore slots per instance %d, scratch chunks %ld\n",
            plan->ntb, plan->nsems, acc);
    fprintf(out, " * Launch: grid = %d * ninst blocks; one heap of every rank mapped (a.peers). */\n",
            plan->ntb);
    fprintf(out, "typedef %s ccl_t;\n", ty->storage);
    fprintf(out, "typedef %s ccl_acc;\n", ty->acc);
    fprintf(out, "#define CCL_LOAD(x) %s\n", ty->load);
    fprintf(out, "#define CCL_STORE(x) %s\n", ty->store);
    fprintf(out, "#define CCL_OP(a, b) %s\n", opexpr);
    fprintf(out, "#define CCL_NRANKS %d\n", prog->nranks);
    fprintf(out, "#define CCL_RANK %d\n", rank);
    fputs(emit_prelude, out);

    fprintf(out, "extern \"C\" __global__ void __launch_bounds__(512) ccl_kernel(const struct ccl_args a)\n{\n");
    fprintf(out, "    const u64 inst = blockIdx.x %% a.ninst;\n");
    fprintf(out, "    u64 *const sem = (u64 *)(a.peers[%d] + a.sem_off);\n", rank);
    fprintf(out, "    __shared__ int failed;\n");
    fprintf(out, "    if (threadIdx.x == 0) failed = 0;\n");
    fprintf(out, "    __syncthreads();\n");
    fprintf(out, "    switch (blockIdx.x / a.ninst) {\n");
    for (int i = 0; i < plan->nblocks; i++)
        if (plan->blocks[i].rank == rank) emit_block(&e, &plan->blocks[i]);
    fprintf(out, "    default:\n        break;\n    }\n}\n");
    free(e.scratch_prefix);
}
