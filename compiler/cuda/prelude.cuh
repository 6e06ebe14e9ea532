/* prelude.cuh: the device code every generated kernel starts with: element conversions,
 * loads and stores, the transfer templates (ccl_xfer, ccl_xfer_ll, ccl_xfer_ll128), semaphore
 * waits and signals, LL and LL128 lines, port-channel puts, and the ccl_rank_barrier, ccl_avg and ccl_copy kernels.
 *
 * How it gets into a kernel: the Makefile (compiler/cuda/embed.sh) turns this file, with
 * abi.h inlined at its #include (NVRTC compiles with no include path) and both files'
 * opening comments left out, into the C string ccl__prelude_cuh in $(BUILD)/prelude_cuh.c;
 * emit_cuda.c prints that after the kernel's own definitions and before ccl_kernel.
 *
 * It needs, defined before it: ccl_t (element storage type), ccl_acc (accumulator type),
 * CCL_LOAD(x), CCL_STORE(x), CCL_OP(a, b), CCL_NRANKS and CCL_RANK. It compiles under
 * NVRTC and nvcc for any arch from sm_60 up (sm_70+ get the release/acquire PTX, older
 * ones fences); tests/cuda/run.sh compiles it alone with nvcc (cuda.prelude-lint). */
#include "abi.h"

typedef ccl_u64 u64;

/* ccl_kernel's arguments stay in parameter memory, read where they are used: without
 * it, the helpers that take them by reference made every thread copy the whole struct
 * into a stack frame (and spill in the data loops). sm_70 and later. */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 700
#define CCL_GRID_CONSTANT __grid_constant__
#else
#define CCL_GRID_CONSTANT
#endif

#define CCL_VE (16 / (int)sizeof(ccl_t)) /* elements per 16-byte vector */

__device__ __forceinline__ float ccl_bf2f(unsigned short x)
{
    return __uint_as_float((unsigned int)x << 16);
}
/* One instruction from sm_80 (the integer version made bf16 reductions ~15% slower
 * than f32 at large sizes on H200); both round to nearest even, NaN stays NaN. */
__device__ __forceinline__ unsigned short ccl_f2bf(float f)
{
#if __CUDA_ARCH__ >= 800
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (unsigned short)(u >> 16);
#endif
}
__device__ __forceinline__ float ccl_h2f(unsigned short x)
{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return f;
}
__device__ __forceinline__ unsigned short ccl_f2h(float f)
{
    unsigned short x;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(x) : "f"(f));
    return x;
}
/* FP8 (OCP e4m3fn and e5m2) in software, so every arch gives the same bits:
 * round to nearest even, saturating to the largest finite value. */
__device__ __forceinline__ float ccl_fp8_dec(unsigned char x, int eb, int mb, int bias)
{
    int e = (x >> mb) & ((1 << eb) - 1), m = x & ((1 << mb) - 1);
    float s = (x & 0x80) ? -1.0f : 1.0f;
    if (eb == 4 && e == 15 && m == 7) return __int_as_float(0x7fc00000);
    if (eb == 5 && e == 31) return m ? __int_as_float(0x7fc00000) : s * __int_as_float(0x7f800000);
    if (e == 0) return s * ldexpf((float)m, 1 - bias - mb);
    return s * ldexpf((float)(m + (1 << mb)), e - bias - mb);
}
__device__ __forceinline__ unsigned char ccl_fp8_enc(float f, int eb, int mb, int bias)
{
    unsigned int sign = (__float_as_uint(f) >> 24) & 0x80u;
    int maxcode = eb == 4 ? 0x7e : 0x7b; /* 448 and 57344 */
    float a = fabsf(f);
    if (a != a) return (unsigned char)(sign | (eb == 4 ? 0x7f : 0x7e));
    int ex;
    frexpf(a, &ex);
    int e = ex - 1; /* a in [2^e, 2^(e+1)) */
    int code;
    if (a == 0.0f) code = 0;
    else if (e < 1 - bias) code = (int)rintf(ldexpf(a, bias - 1 + mb));
    else {
        int q = (int)fminf(rintf(ldexpf(a, mb - e)), (float)(1 << (mb + 2)));
        if (q == (2 << mb)) { q = 1 << mb; e++; }
        code = e + bias > (1 << eb) - 1 ? 0xff : ((e + bias) << mb) | (q - (1 << mb));
    }
    if (code > maxcode) code = maxcode;
    return (unsigned char)(sign | (unsigned int)code);
}

/* Loads that bypass L1: data written by peers or by other blocks is never read stale. */
__device__ __forceinline__ uint4 ccl_ld16(const char *p)
{
    uint4 v;
    asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ ccl_t ccl_ld1(const char *p)
{
    return *(const volatile ccl_t *)p;
}

union ccl_vec {
    uint4 v;
    ccl_t e[CCL_VE];
};

/* The 16 bytes at base + sh (base 16-byte aligned, sh < 16) from the aligned
 * vectors lo (at base) and hi (at base + 16): four funnel shifts of the five words
 * that hold them, chosen by sh / 4, which is the same in every thread of a transfer
 * (sh = 0: lo itself). */
__device__ __forceinline__ uint4 ccl_shift16(uint4 lo, uint4 hi, u64 sh)
{
    const unsigned int q = (unsigned int)sh >> 2, r = ((unsigned int)sh & 3) * 8;
    unsigned int w0 = lo.x, w1 = lo.y, w2 = lo.z, w3 = lo.w, w4 = hi.x;
    if (q >= 2) { w0 = w2; w1 = w3; w2 = w4; w3 = hi.y; w4 = hi.z; }
    if (q & 1) { w0 = w1; w1 = w2; w2 = w3; w3 = w4; w4 = q >= 2 ? hi.w : hi.y; }
    return make_uint4(__funnelshift_r(w0, w1, r), __funnelshift_r(w1, w2, r), __funnelshift_r(w2, w3, r),
                      __funnelshift_r(w3, w4, r));
}

/* A copy of n elements whose destinations share their alignment mod 16 but whose
 * source has another: the head up to the destinations' next 16-byte boundary element
 * by element, then 16-byte stores, each built from the two aligned source vectors
 * that hold it (ccl_shift16; the second, read only when the source is misaligned,
 * holds a byte the copy reads, so lies inside the source's allocation), then the tail
 * element by element. Returns 0, or n when the destinations disagree (the caller's
 * element loop copies all). Only v-collective kernels have it (CCL_SHIFTED_COPIES,
 * emit_cuda.c): their segments sit at any element, while a fixed-size kernel's chunks
 * are aligned, and its registers would count against every kernel's data loops. */
#ifdef CCL_SHIFTED_COPIES
template <int ND>
__device__ __forceinline__ u64 ccl_copy_shifted(char *const (&dst)[ND], const char *src, u64 n, u64 tid, u64 nt)
{
    const u64 dmis = (u64)dst[0] & 15;
#pragma unroll
    for (int d = 1; d < ND; d++)
        if (((u64)dst[d] & 15) != dmis) return n;
    u64 head = ((16 - dmis) & 15) / sizeof(ccl_t);
    if (head > n) head = n;
    const u64 nv = (n - head) / CCL_VE, body = head + nv * CCL_VE;
    const char *s0 = src + head * sizeof(ccl_t);
    const u64 sh = (u64)s0 & 15;
    const char *base = s0 - sh;
    enum { UNROLL = CCL_SHIFTED_COPIES };
    for (u64 i = tid; i < nv; i += UNROLL * nt) {
        uint4 lo[UNROLL], hi[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            if (i + u * nt < nv) {
                lo[u] = ccl_ld16(base + 16 * (i + u * nt));
                hi[u] = sh ? ccl_ld16(base + 16 * (i + u * nt) + 16) : lo[u];
            }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            if (i + u * nt >= nv) break;
            const uint4 v = ccl_shift16(lo[u], hi[u], sh);
#pragma unroll
            for (int d = 0; d < ND; d++) *(uint4 *)(dst[d] + (head + (i + u * nt) * CCL_VE) * sizeof(ccl_t)) = v;
        }
    }
    /* The head and the tail: fewer than 2 * CCL_VE elements, one per thread. */
    for (u64 k = tid; k < n - nv * CCL_VE; k += nt) {
        const u64 e = k < head ? k : body + (k - head);
        const ccl_t x = ccl_ld1(src + e * sizeof(ccl_t));
#pragma unroll
        for (int d = 0; d < ND; d++) *(ccl_t *)(dst[d] + e * sizeof(ccl_t)) = x;
    }
    return 0;
}
#endif

/* dst[d] = op(src[0], src[1], ...) for n elements, thread tid of the nt taking part
 * (the block, or its warp group when independent transfers run at once) taking a
 * share. 16-byte vectors when every operand is 16-byte aligned, and in a v-collective
 * kernel for a misaligned copy (ccl_copy_shifted); the rest element by element.
 * A one-source transfer copies bits. */
template <int ND, int NS>
__device__ __forceinline__ void ccl_xfer(char *const (&dst)[ND], const char *const (&src)[NS], u64 n, u64 tid,
                                         u64 nt)
{
    u64 mis = 0, done = 0;
#pragma unroll
    for (int d = 0; d < ND; d++) mis |= (u64)dst[d];
#pragma unroll
    for (int s = 0; s < NS; s++) mis |= (u64)src[s];
#ifdef CCL_SHIFTED_COPIES
    if ((mis & 15) != 0 && NS == 1 && n >= 2 * CCL_VE && ccl_copy_shifted(dst, src[0], n, tid, nt) == 0) return;
#endif
    if ((mis & 15) == 0) {
        const u64 nv = n / CCL_VE;
        enum { UNROLL = NS <= 2 ? 4 : NS <= 4 ? 2 : 1 };
        for (u64 base = tid; base < nv; base += UNROLL * nt) {
            union ccl_vec in[UNROLL][NS];
#pragma unroll
            for (int u = 0; u < UNROLL; u++)
#pragma unroll
                for (int s = 0; s < NS; s++)
                    if (base + u * nt < nv) in[u][s].v = ccl_ld16(src[s] + 16 * (base + u * nt));
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                if (base + u * nt >= nv) break;
                union ccl_vec r;
                if (NS == 1) {
                    r = in[u][0];
                } else {
#pragma unroll
                    for (int k = 0; k < CCL_VE; k++) {
                        ccl_acc x = CCL_LOAD(in[u][0].e[k]);
#pragma unroll
                        for (int s = 1; s < NS; s++) x = CCL_OP(x, CCL_LOAD(in[u][s].e[k]));
                        r.e[k] = CCL_STORE(x);
                    }
                }
#pragma unroll
                for (int d = 0; d < ND; d++) *(uint4 *)(dst[d] + 16 * (base + u * nt)) = r.v;
            }
        }
        done = nv * CCL_VE;
    }
    for (u64 i = done + tid; i < n; i += nt) {
        ccl_t r;
        if (NS == 1) {
            r = ccl_ld1(src[0] + i * sizeof(ccl_t));
        } else {
            ccl_acc x = CCL_LOAD(ccl_ld1(src[0] + i * sizeof(ccl_t)));
#pragma unroll
            for (int s = 1; s < NS; s++) x = CCL_OP(x, CCL_LOAD(ccl_ld1(src[s] + i * sizeof(ccl_t))));
            r = CCL_STORE(x);
        }
#pragma unroll
        for (int d = 0; d < ND; d++) *(ccl_t *)(dst[d] + i * sizeof(ccl_t)) = r;
    }
}

/* An in/out chunk at unit u, position c: element offset and true length (short or
 * empty at the tail, docs/internals.md). */
struct ccl_span {
    u64 off, len;
};
__device__ __forceinline__ struct ccl_span ccl_io(const struct ccl_args &a, u64 ustride, u64 u, u64 c)
{
    struct ccl_span s;
    u64 start = c * a.cs;
    s.off = u * ustride + start;
    s.len = a.n > start ? (a.n - start < a.cs ? a.n - start : a.cs) : 0;
    return s;
}
/* This instance's and slice's part [lo, hi) of a transfer of len elements: the cut
 * points are round_down(q*len/P, A), A = CCL_PART_BYTES of elements, the last part
 * ending at len. */
#ifndef CCL_PART_BYTES
#define CCL_PART_BYTES 16 /* an LL128 kernel defines 240: its parts start on a line (ccl_xfer_ll128) */
#endif
__device__ __forceinline__ void ccl_part_of(u64 ninst, u64 nslices, u64 inst, u64 sl, u64 len, u64 *lo, u64 *hi)
{
    const u64 A = CCL_PART_BYTES / sizeof(ccl_t);
    /* One instance or one slice is the whole: no 64-bit division (tens of instructions
     * each) on the path of a small message. */
    u64 ilo = 0, ihi = len;
    if (ninst > 1) {
        ilo = inst * len / ninst / A * A;
        ihi = inst + 1 == ninst ? len : (inst + 1) * len / ninst / A * A;
    }
    *lo = ilo;
    *hi = ihi;
    if (nslices > 1) {
        const u64 il = ihi - ilo;
        *lo = ilo + sl * il / nslices / A * A;
        *hi = sl + 1 == nslices ? ihi : ilo + (sl + 1) * il / nslices / A * A;
    }
}
__device__ __forceinline__ void ccl_part(const struct ccl_args &a, u64 inst, u64 sl, u64 len, u64 *lo, u64 *hi)
{
    ccl_part_of(a.ninst, a.nslices, inst, sl, len, lo, hi);
}

__device__ __forceinline__ u64 ccl_now(void)
{
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ u64 ccl_ld_acquire(const u64 *p)
{
    u64 v;
#if __CUDA_ARCH__ >= 700
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
#else
    v = *(const volatile u64 *)p;
    __threadfence_system();
#endif
    return v;
}
/* Called by one thread after a __syncthreads() that ordered the block's stores. The
 * system fence is needed: without it (release-add alone) a waiter on another GPU was
 * seen reading stale data after the signal (4x H200, Simple ring and twoshot). */
__device__ __forceinline__ void ccl_signal(u64 *sem)
{
    __threadfence_system();
#if __CUDA_ARCH__ >= 700
    asm volatile("red.release.sys.global.add.u64 [%0], %1;" :: "l"(sem), "l"(1ull) : "memory");
#else
    atomicAdd(sem, 1ull);
#endif
}
/* The same without the fence, for LL kernels: no peer reads this rank's memory there
 * (data moves only as self-checking LL lines), so a semaphore signal publishes no data,
 * only that the block got this far; the release orders the block's earlier reads
 * ("done with that scratch"). */
__device__ __forceinline__ void ccl_notify(u64 *sem)
{
#if __CUDA_ARCH__ >= 700
    asm volatile("red.release.sys.global.add.u64 [%0], %1;" :: "l"(sem), "l"(1ull) : "memory");
#else
    __threadfence_system();
    atomicAdd(sem, 1ull);
#endif
}

/* Records a failure in the error record (the first one only: the host reads it after
 * the kernel) and stops every rank through the abort word at offset 0 of each heap. */
__device__ __noinline__ void ccl_fail(struct ccl_err *err, char *const *peers, u64 rank, u64 tb, u64 inst, u64 line,
                                      u64 peer, u64 slot, u64 expected, u64 seen)
{
    if (atomicCAS(&err->flag, 0ull, 2ull) == 0ull) {
        err->rank = rank; err->tb = tb; err->inst = inst; err->line = line; err->peer = peer;
        err->slot = slot; err->expected = expected; err->seen = seen;
        __threadfence_system();
        *(volatile u64 *)&err->flag = 1;
    }
    for (int p = 0; p < CCL_NRANKS; p++) atomicCAS((u64 *)peers[p], 0ull, rank + 1);
    __threadfence_system();
}

/* Rank `to`'s inbox entry (abi.h) that rank `from` pushes for its launch L. */
__device__ __forceinline__ u64 *ccl_inbox(char *const *peers, u64 to, u64 from, u64 L)
{
    return (u64 *)(peers[to] + CCL_INBOX_OFF + ((L % CCL_INBOX_RING) * CCL_INBOX_RANKS + from) * 16);
}

/* Whether peer p runs this rank's call as its launch L, from the pair {launch, hash} it
 * pushed into this rank's inbox (one 16-byte load sees both words or neither): 1 when
 * it does, 0 when its pair for L is not there yet, -1 when it runs another call (its
 * hash differs) or another call sequence (a later launch in L's slot: it launched more
 * kernels than this rank did), which is recorded (CCL_SLOT_IDENT; the host reads both
 * ring entries to name the two sides) and stops every rank. */
__device__ __forceinline__ int ccl_peer_agrees(const struct ccl_args &a, u64 L, u64 p, u64 tb, u64 inst)
{
    u64 theirs_launch, theirs;
    asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];"
                 : "=l"(theirs_launch), "=l"(theirs) : "l"(ccl_inbox(a.peers, CCL_RANK, p, L)) : "memory");
    if (theirs_launch < L) return 0;
    if (theirs_launch == L && theirs == a.id.hash) return 1;
    ccl_fail(a.err, a.peers, CCL_RANK, tb, inst, a.id.seq, p, CCL_SLOT_IDENT, a.id.hash, theirs);
    return -1;
}

/* Waits until *sem reaches want. On timeout records who waited for whom in the
 * host-visible error record, sets the abort word (offset 0 of every rank's heap,
 * internal.h's CclHeapHeader) and returns 0; a set abort word makes every wait give up
 * within microseconds. L != 0 (a kernel that did not wait for its peers at its entry:
 * an LL one) also gives up, recorded, once `peer` turns out to run another call
 * (ccl_peer_agrees). */
__device__ __forceinline__ int ccl_wait_for(const struct ccl_args &a, const u64 *sem, u64 want, u64 L, u64 slot, u64 tb,
                                         u64 inst, u64 line, u64 peer)
{
    const volatile u64 *abort_flag = (const volatile u64 *)a.peers[CCL_RANK];
    u64 t0 = 0, v = 0;
    for (unsigned int it = 0;; it++) {
        v = ccl_ld_acquire(sem);
        if (v >= want) return 1;
        if ((it & 255) == 0) {
            /* A peer that runs another call first (so that every rank names both sides,
             * not only the first to see it), then one that failed: give up at once. */
            if (L && peer != CCL_RANK && ccl_peer_agrees(a, L, peer, tb, inst) < 0) return 0;
            if (*abort_flag) return 0;
            u64 now = ccl_now();
            if (t0 == 0) t0 = now;
            else if (now - t0 > a.timeout_ns) {
                ccl_fail(a.err, a.peers, CCL_RANK, tb, inst, line, peer, slot, want, v);
                return 0;
            }
        }
    }
}
/* ccl_wait_for(*expected + step), then advances *expected (kept in device memory, so it
 * persists across launches and graph replays). A barrier of all blocks of the rank is
 * the same wait on a counter every block adds 1 to (step = gridDim.x; all blocks must
 * be resident). */
__device__ __forceinline__ int ccl_wait(const struct ccl_args &a, const u64 *sem, u64 *expected, u64 step, u64 L,
                                        u64 slot, u64 tb, u64 inst, u64 line, u64 peer)
{
    const u64 want = *expected + step;
    if (!ccl_wait_for(a, sem, want, L, slot, tb, inst, line, peer)) return 0;
    *expected = want;
    return 1;
}

/* This launch's number on this rank (abi.h's CCL_LAUNCH_OFF), for thread 0 of every
 * block: every block adds one arrival, and the grid's last arrival moves the count on
 * and clears the arrivals, after every block of this launch has read the count; the
 * next launch starts only once this one has ended. *first: this block arrived first.
 * A grid of one block owns the word for its launch, so it moves the count on with a
 * load and a store: an atomic's round trip to L2 is on every kernel's critical path
 * (nothing moves before the launch number flags it), 0.2 us of a small call on 4x H200
 * (docs/perf/x4-parts). */
__device__ __forceinline__ u64 ccl_launch_number(const struct ccl_args &a, int *first)
{
    unsigned long long *w = (unsigned long long *)(a.peers[CCL_RANK] + CCL_LAUNCH_OFF);
    if (gridDim.x == 1) {
        const unsigned long long count = *(volatile unsigned long long *)w; /* no arrivals: none in flight */
        *(volatile unsigned long long *)w = count + (1ull << 32);
        *first = 1;
        return (count >> 32) + 1;
    }
    const unsigned long long before = atomicAdd(w, 1ull);
    if ((before & 0xffffffffull) == gridDim.x - 1ull) atomicAdd(w, (1ull << 32) - gridDim.x);
    *first = (before & 0xffffffffull) == 0;
    return (before >> 32) + 1;
}

/* The call's announcement, every kernel's first step: returns the launch number in
 * every thread (the same on every rank for the same call, new at every launch: it also
 * flags the call's LL lines) and whether this block arrived first. The first block
 * pushes {launch, hash} into every peer's inbox (one 16-byte store per peer: a load of
 * the pair sees both words or neither) and a v call's table (vtable; NULL for a
 * fixed-size call) into every peer's v inbox, then writes this call's identity (abi.h's struct ccl_ident)
 * into this rank's ring entry, which only the host reads, after the kernel, to name the
 * sides of a difference. Nothing here waits for a peer. */
__device__ __forceinline__ u64 ccl_announce(const struct ccl_args &a, int *first, const u64 *vtable = 0)
{
    __shared__ u64 launch;
    __shared__ int arrived_first;
#if __CUDA_ARCH__ >= 900
    /* Launched with programmatic dependent launch (gpu/backend.c), this grid may be
     * resident before the stream's previous kernel has ended: wait for that kernel and
     * its memory before anything else. Then let the stream's next kernel be scheduled
     * (once every block is here): it waits here in turn, and starts without a launch
     * gap. Both are no-ops on a plain launch. */
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    if (threadIdx.x == 0) launch = ccl_launch_number(a, &arrived_first);
    __syncthreads();
    const u64 L = launch;
    *first = arrived_first;
    if (arrived_first) {
        for (u64 p = threadIdx.x; p < CCL_NRANKS; p += blockDim.x)
            if (p != CCL_RANK)
                asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" :: "l"(ccl_inbox(a.peers, p, CCL_RANK, L)),
                             "l"(L), "l"(a.id.hash) : "memory");
        if (vtable) { /* the table, a line per word, into every peer's v inbox (abi.h) */
            const u64 W = CCL_VT_WORDS(CCL_NRANKS);
            for (u64 i = threadIdx.x; i < CCL_NRANKS * W; i += blockDim.x) {
                const u64 p = i / W, k = i % W;
                if (p != CCL_RANK)
                    asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};"
                                 :: "l"(a.peers[p] + a.vring_off + CCL_VINBOX_LINE(CCL_NRANKS, L, CCL_RANK, k)),
                                 "l"(vtable[k]), "l"(L ^ a.id.hash) : "memory");
            }
        }
        if (threadIdx.x == 0) {
            volatile u64 *e = (volatile u64 *)(a.peers[CCL_RANK] + CCL_IDENT_OFF +
                                               (a.id.seq % CCL_IDENT_RING) * sizeof(struct ccl_ident));
            const u64 *src = (const u64 *)&a.id;
            for (int k = 0; k < (int)(sizeof(struct ccl_ident) / 8); k++) e[k] = src[k];
        }
    }
    return L;
}

/* Waits (bounded, abort-aware; thread p for peer p) until every peer in `peers` (a
 * mask of ranks 0..63, which emit_cuda.c passes only where N <= 64; every peer by
 * default, and always those from 64 up) has announced launch L and checks that it runs the same
 * call (ccl_peer_agrees). 1 in every thread
 * of the block when all do; else 0 in every thread, the failure recorded (a peer that
 * did not announce in time: CCL_SLOT_IDENT_WAIT) and every rank stopped. Once a peer
 * announced L, its previous launch has ended (a rank's launches run in order). A Simple
 * or v kernel calls it at its entry, before any block touches a peer (docs/internals.md,
 * "The call entry"); an LL kernel at its exit, but for the peers whose lines of launch L
 * reached the block, which say the same (emit_cuda.c's emit_exit_check; its lines
 * alternate between two sets by launch parity, and no rank ends launch L before every
 * peer has started it, so ranks are never more than one launch apart). */
__device__ __forceinline__ int ccl_await_peers(const struct ccl_args &a, u64 L, u64 peers = ~0ull)
{
    const u64 tb = blockIdx.x / a.ninst, inst = blockIdx.x % a.ninst;
    const volatile u64 *abort_flag = (const volatile u64 *)a.peers[CCL_RANK];
    int bad = 0;
    for (u64 p = threadIdx.x; p < CCL_NRANKS; p += blockDim.x) {
        if (p == CCL_RANK || (p < 64 && !(peers >> p & 1))) continue;
        u64 t0 = 0;
        for (unsigned int it = 0;; it++) {
            const int agrees = ccl_peer_agrees(a, L, p, tb, inst);
            if (agrees) {
                bad |= agrees < 0;
                break;
            }
            if ((it & 255) != 255) continue;
            if (*abort_flag) { /* a peer failed: give up at once */
                bad = 1;
                break;
            }
            const u64 now = ccl_now();
            if (t0 == 0) t0 = now;
            else if (now - t0 > a.timeout_ns) {
                ccl_fail(a.err, a.peers, CCL_RANK, tb, inst, a.id.seq, p, CCL_SLOT_IDENT_WAIT, L, 0);
                bad = 1;
                break;
            }
        }
    }
    return !__syncthreads_or(bad);
}

/* ---- v-collectives (allgatherv, alltoallv): every chunk is sized by its segment, a
 * run-time count in the segment table of the rank that sends it (abi.h's CCL_VT_*).
 * Each rank publishes its table before the call's identity (ccl_announce); once the
 * identities agree, every block copies every rank's table into shared memory and
 * checks them, and the kernel's data ops read sizes and displacements from there
 * (emit_cuda.c). ---- */

/* The chunk stride of a segment of n elements cut into K chunks, round_up(ceil(n/K), A)
 * (0 for n = 0), as *cs; returns the length of its chunk c (0 past the segment's end).
 * The same arithmetic as the runtime's ccl__chunk_stride and ccl__segs_chunk. */
__device__ __forceinline__ u64 ccl_vchunk(u64 n, u64 K, u64 c, u64 *cs)
{
    const u64 A = CCL_VE;
    *cs = n == 0 ? 0 : ((n + K - 1) / K + A - 1) / A * A;
    const u64 start = c * *cs;
    return start >= n ? 0 : (n - start < *cs ? n - start : *cs);
}

/* A v kernel's instances each move a part of every segment (ccl_part_of), so a launch
 * of many instances moving small segments mostly signals and waits around empty parts,
 * each signal and wait an NVLink crossing. A Simple v kernel runs only as many instances
 * as its longest segment needs, about one per 2^CCL_V_INST_SHIFT bytes of it (of K
 * chunks of ccl_vload's stride; the rest return once the tables are loaded): every rank
 * computes that alike from the same tables, so semaphores still pair up. On 2x H200,
 * alltoallv of 1 KB to 256 KB took 13-19% less time so, and 16 KB an instance beat 4 and
 * 64 KB from 16 to 256 KB (docs/perf/x2-vinst). LL kernels keep every instance: their
 * lines ran slower on fewer. */
#ifndef CCL_V_INST_SHIFT
#define CCL_V_INST_SHIFT 14
#endif

/* A v kernel's entry: waits until every peer's table for launch L has arrived in this
 * rank's v inbox (ccl_announce pushed it, after the peer's announcement). A table line
 * tagged with this launch and call says what ccl_await_peers would: the peer announced
 * the same call and ended its previous launch. So a v kernel has no other entry wait,
 * and while a line is missing the poll reads the peer's announcement every 256 tries, so
 * a peer that runs another call fails every rank at once with both sides named (a peer
 * that does not come in time is reported as one that did not start the call). Then it
 * copies every peer's table and this rank's own (`own`,
 * the kernel's parameter) into vt (shared memory, CCL_NRANKS tables of CCL_VT_WORDS
 * words), checks
 * that every out segment's count equals what its sender sends (out unit u of rank p
 * comes from rank u's in unit p for alltoallv, its only in unit for allgatherv), and
 * that the region the kernel lays out in the v arena (region_chunks chunks of the
 * longest segment's stride, at a.scratch_off) leaves room for every rank's staging (at
 * the arena's end). Sets *cs_max (scratch's chunk stride; shared memory) and returns 1; or records the
 * first failure in the error record (CCL_SLOT_VCOUNT, CCL_SLOT_VSPACE; the first pair
 * (p, u) in order, as the CPU backend names it) and returns 0, in every thread. Every
 * rank reads the same tables and fails alike before any data moves, so none stops its
 * peers (an abort would hide their own messages); it sets only its own abort word.
 *
 * What the fast path reads comes by value, loaded by the kernel from its parameters: `a`,
 * a reference, is read through a generic pointer into parameter space, one dependent
 * load after another, and serves the failure paths only. tag: L ^ the call's hash;
 * mine: this rank's heap; vinbox: its v inbox (mine + a.vring_off). */
__device__ __noinline__ int ccl_vload(const struct ccl_args &a, u64 L, u64 tag, const char *mine, const char *vinbox,
                                      u64 varena_bytes, const u64 *own, u64 *vt, u64 K, int alltoallv,
                                      u64 region_chunks, u64 *cs_max)
{
    const u64 N = CCL_NRANKS, W = CCL_VT_WORDS(CCL_NRANKS);
    __shared__ u64 bad, longest;
    if (threadIdx.x == 0) { /* ordered before their use by the barrier after the loads */
        bad = ~0ull;
        longest = 0;
    }
    /* Word k of peer p's table from its line in this rank's v inbox (local memory), once
     * the line is this launch's: a thread per word, each bounded and abort-aware. */
    const volatile u64 *abort_flag = (const volatile u64 *)mine;
    int late = 0;
    for (u64 i = threadIdx.x; i < N * W && !late; i += blockDim.x) {
        const u64 p = i / W, k = i % W;
        if (p == CCL_RANK) {
            vt[i] = own[k];
            continue;
        }
        const char *line = vinbox + CCL_VINBOX_LINE(N, L, p, k);
        u64 word, seen, t0 = 0;
        for (unsigned int it = 0;; it++) {
            asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(word), "=l"(seen) : "l"(line) : "memory");
            if (seen == tag) {
                vt[i] = word;
                break;
            }
            if ((it & 255) != 255) continue;
            if (ccl_peer_agrees(a, L, p, blockIdx.x / a.ninst, blockIdx.x % a.ninst) < 0 || *abort_flag) {
                late = 1;
                break;
            }
            const u64 now = ccl_now();
            if (t0 == 0) t0 = now;
            else if (now - t0 > a.timeout_ns) {
                ccl_fail(a.err, a.peers, CCL_RANK, blockIdx.x / a.ninst, blockIdx.x % a.ninst, a.id.seq, p,
                         CCL_SLOT_IDENT_WAIT, L, 0);
                late = 1;
                break;
            }
        }
    }
    if (__syncthreads_or(late)) return 0;
    for (u64 k = threadIdx.x; k < N * N; k += blockDim.x) {
        const u64 p = k / N, u = k % N, want = vt[p * W + CCL_VT_OUT_COUNT * N + u];
        const u64 sent = vt[u * W + CCL_VT_IN_COUNT * N + (alltoallv ? p : 0)];
        if (want != sent) atomicMin(&bad, k);
        const u64 n = vt[p * W + CCL_VT_IN_COUNT * N + u]; /* allgatherv's unused units are 0 */
        if (n > longest) atomicMax(&longest, n);
    }
    __syncthreads();
    u64 cs, over = N;
    ccl_vchunk(longest, K, 0, &cs);
    const u64 need = region_chunks * cs * sizeof(ccl_t);
    for (u64 p = 0; p < N && over == N; p++) {
        const u64 stage = vt[p * W + CCL_VT_ROWS * N + CCL_VT_STAGE_BYTES];
        if (need > varena_bytes || stage > varena_bytes - need) over = p;
    }
    if (bad == ~0ull && over == N) {
        *cs_max = cs;
        return 1;
    }
    /* This rank's own abort word only (its staging copies out then copy nothing). */
    if (threadIdx.x == 0) atomicCAS((u64 *)a.peers[CCL_RANK], 0ull, CCL_RANK + 1ull);
    if (threadIdx.x == 0 && atomicCAS(&a.err->flag, 0ull, 2ull) == 0ull) {
        a.err->rank = CCL_RANK;
        a.err->line = a.id.seq;
        if (bad != ~0ull) {
            const u64 p = bad / N, u = bad % N;
            a.err->slot = CCL_SLOT_VCOUNT; a.err->tb = p; a.err->inst = u; a.err->peer = u;
            a.err->expected = vt[p * W + CCL_VT_OUT_COUNT * N + u];
            a.err->seen = vt[u * W + CCL_VT_IN_COUNT * N + (alltoallv ? p : 0)];
        } else {
            a.err->slot = CCL_SLOT_VSPACE; a.err->tb = a.id.kind >> 8; a.err->inst = longest; a.err->peer = over;
            a.err->expected = need;
            a.err->seen = vt[over * W + CCL_VT_ROWS * N + CCL_VT_STAGE_BYTES];
        }
        __threadfence_system();
        *(volatile u64 *)&a.err->flag = 1;
    }
    return 0;
}

/* ---- Port channels: a put is a request in this block's queue in host-mapped memory
 * (abi.h's struct ccl_port_fifo); the host proxy (runtime/src/gpu_proxy.c) serves the
 * requests in order with the copy engine and publishes how many have landed in `done`.
 * `posted` (device memory) counts this block's requests across launches; a flush waits
 * until done catches up. ---- */
/* Called by thread 0 after a __syncthreads() that ordered the block's stores: the
 * system fence makes them, and the request, visible to the proxy before seq is. */
__device__ __noinline__ int ccl_port_put(const struct ccl_args &a, u64 *posted, char *dst, const char *src,
                                         u64 bytes, u64 tb, u64 inst, u64 line, u64 peer)
{
    struct ccl_port_fifo *f = (struct ccl_port_fifo *)a.port + blockIdx.x;
    const u64 k = *posted;
    /* Full: wait until request k - DEPTH has landed. */
    if (k >= CCL_PORT_DEPTH && !ccl_wait_for(a, &f->done, k - CCL_PORT_DEPTH + 1, 0, CCL_SLOT_PORT, tb, inst, line, peer))
        return 0;
    volatile struct ccl_port_req *q = &f->req[k % CCL_PORT_DEPTH];
    q->dst = (u64)dst;
    q->src = (u64)src;
    q->bytes = bytes;
    __threadfence_system();
    q->seq = k + 1;
    *posted = k + 1;
    return 1;
}
/* Waits until every put this block posted has landed. */
__device__ __noinline__ int ccl_port_flush(const struct ccl_args &a, const u64 *posted, u64 tb, u64 inst,
                                           u64 line, u64 peer)
{
    struct ccl_port_fifo *f = (struct ccl_port_fifo *)a.port + blockIdx.x;
    return ccl_wait_for(a, &f->done, *posted, 0, CCL_SLOT_PORT, tb, inst, line, peer);
}

/* ---- LL: 16-byte lines {data0, flag0, data1, flag1} carry 8 data bytes each; a line
 * is valid when both flags equal this call's (ccl_ll_flags), so data needs no separate
 * signal. ---- */
#define CCL_WE (8 / (int)sizeof(ccl_t)) /* elements per 8-byte word */
union ccl_word {
    u64 w;
    ccl_t e[CCL_WE];
};
/* A launch's flags, flag0 in the low word and flag1 in the high one (LL128's flag word is
 * the pair): flag0 is the launch number's low 32 bits, never 0 (fresh memory), so no
 * line left by another launch of the last 2^32 matches it, whatever call left it; flag1
 * mixes the call's identity into it, so a line of this launch from a rank that runs
 * another call never matches either, and a line received is a peer's identity checked
 * (the peer's lines then stand for its announcement: emit_cuda.c, "heard"). Each
 * 8-byte half of an LL line carries a flag, as one 8-byte store lands whole: a half
 * left by launch L - 2 of the same call differs in flag1 too (L and L - 2 differ above
 * bit 0). */
__device__ __forceinline__ u64 ccl_ll_flags(u64 launch, u64 hash)
{
    unsigned int f0 = (unsigned int)launch;
    if (f0 == 0) f0 = 1;
    const unsigned int f1 = (f0 ^ (unsigned int)hash ^ (unsigned int)(hash >> 32)) | 1u;
    return (u64)f0 | (u64)f1 << 32;
}
__device__ __forceinline__ void ccl_ll_put(char *line, u64 w, u64 flag)
{
    asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(line), "r"((unsigned int)w),
                 "r"((unsigned int)flag), "r"((unsigned int)(w >> 32)), "r"((unsigned int)(flag >> 32)) : "memory");
}
/* One element's bits at p, and storing the low bits of w as one element: by shifts, so
 * that a part of a word never takes a local array (a stack frame) to assemble. */
__device__ __forceinline__ u64 ccl_ld_bits(const char *p)
{
    if (sizeof(ccl_t) == 8) return *(const volatile unsigned long long *)p;
    if (sizeof(ccl_t) == 4) return *(const volatile unsigned int *)p;
    if (sizeof(ccl_t) == 2) return *(const volatile unsigned short *)p;
    return *(const volatile unsigned char *)p;
}
__device__ __forceinline__ void ccl_st_bits(char *p, u64 w)
{
    if (sizeof(ccl_t) == 8) *(unsigned long long *)p = w;
    else if (sizeof(ccl_t) == 4) *(unsigned int *)p = (unsigned int)w;
    else if (sizeof(ccl_t) == 2) *(unsigned short *)p = (unsigned short)w;
    else *(unsigned char *)p = (unsigned char)w;
}
/* The m (<= CCL_WE) elements at p as one word: one 8-byte access when whole and aligned. */
__device__ __forceinline__ u64 ccl_ld_word(const char *p, int m)
{
    u64 w = 0;
    if (m == CCL_WE && ((u64)p & 7) == 0) {
        asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(w) : "l"(p) : "memory");
    } else {
        for (int k = 0; k < m; k++) w |= ccl_ld_bits(p + k * sizeof(ccl_t)) << (8 * sizeof(ccl_t) * k);
    }
    return w;
}
__device__ __forceinline__ void ccl_st_word(char *p, u64 w, int m)
{
    if (m == CCL_WE && ((u64)p & 7) == 0) *(u64 *)p = w;
    else for (int k = 0; k < m; k++) ccl_st_bits(p + k * sizeof(ccl_t), w >> (8 * sizeof(ccl_t) * k));
}
/* Elements of data word j of a transfer of n elements (0 past its end). */
__device__ __forceinline__ int ccl_word_elems(u64 j, u64 n)
{
    return j * CCL_WE >= n ? 0 : n - j * CCL_WE < (u64)CCL_WE ? (int)(n - j * CCL_WE) : CCL_WE;
}
/* The reduction of NS source words, element by element (one source: its bits). */
template <int NS>
__device__ __forceinline__ u64 ccl_reduce_word(const union ccl_word (&x)[NS])
{
    union ccl_word r = x[0];
    if (NS > 1) {
#pragma unroll
        for (int k = 0; k < CCL_WE; k++) {
            ccl_acc v = CCL_LOAD(x[0].e[k]);
#pragma unroll
            for (int s = 1; s < NS; s++) v = CCL_OP(v, CCL_LOAD(x[s].e[k]));
            r.e[k] = CCL_STORE(v);
        }
    }
    return r.w;
}
/* Like ccl_xfer, word by word: NL local destinations get plain stores, NR remote ones
 * (dr: the peer's LL lines for this part) get LL lines. */
template <int NL, int NR, int NS>
__device__ __forceinline__ void ccl_xfer_ll(char *const *dl, char *const (&dr)[NR], const char *const (&src)[NS],
                                            u64 n, u64 flag, u64 tid, u64 nt)
{
    enum { U = NS <= 2 ? 4 : 2 }; /* words per thread in flight */
    const u64 nw = (n + CCL_WE - 1) / CCL_WE;
    for (u64 base = tid; base < nw; base += U * nt) {
        union ccl_word x[U][NS];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const u64 j = base + u * nt;
            const int m = ccl_word_elems(j, n);
#pragma unroll
            for (int s = 0; s < NS; s++) x[u][s].w = m ? ccl_ld_word(src[s] + j * 8, m) : 0;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const u64 j = base + u * nt;
            if (j >= nw) break;
            const int m = ccl_word_elems(j, n);
            const u64 r = ccl_reduce_word<NS>(x[u]);
#pragma unroll
            for (int d = 0; d < NL; d++) ccl_st_word(dl[d] + j * 8, r, m);
#pragma unroll
            for (int d = 0; d < NR; d++) ccl_ll_put(dr[d] + j * 16, r, flag);
        }
    }
}
/* Receives n elements from this rank's LL lines into dst, thread tid of the nt taking
 * part (the block, or its share when several sources are received at once), four
 * lines in flight per thread; spins (bounded, abort-aware and identity-aware like
 * ccl_wait with launch L) until each line carries this call's flag. */
__device__ __noinline__ int ccl_ll_recv(char *dst, const char *lines, u64 n, u64 flag, u64 tid, u64 nt,
                                        const struct ccl_args &a, u64 L, u64 tb, u64 inst, u64 line, u64 peer)
{
    enum { U = 4 };
    const u64 nw = (n + CCL_WE - 1) / CCL_WE;
    const volatile u64 *abort_flag = (const volatile u64 *)a.peers[CCL_RANK];
    for (u64 base = tid; base < nw; base += U * nt) {
        unsigned int todo = 0;
#pragma unroll
        for (int u = 0; u < U; u++) if (base + u * nt < nw) todo |= 1u << u;
        u64 t0 = 0;
        unsigned int f0 = 0;
        for (unsigned int it = 0; todo; it++) {
            unsigned int d[U][4];
#pragma unroll
            for (int u = 0; u < U; u++)
                if (todo & (1u << u))
                    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                                 : "=r"(d[u][0]), "=r"(d[u][1]), "=r"(d[u][2]), "=r"(d[u][3])
                                 : "l"(lines + (base + u * nt) * 16) : "memory");
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (!(todo & (1u << u))) continue;
                if (d[u][1] != (unsigned int)flag || d[u][3] != (unsigned int)(flag >> 32)) {
                    f0 = d[u][1];
                    continue;
                }
                const u64 j = base + u * nt;
                ccl_st_word(dst + j * 8, (u64)d[u][0] | ((u64)d[u][2] << 32), ccl_word_elems(j, n));
                todo &= ~(1u << u);
            }
            if (todo && (it & 255) == 255) {
                if ((L && ccl_peer_agrees(a, L, peer, tb, inst) < 0) || *abort_flag) return 0; /* as ccl_wait_for */
                u64 now = ccl_now();
                if (t0 == 0) t0 = now;
                else if (now - t0 > a.timeout_ns) {
                    ccl_fail(a.err, a.peers, CCL_RANK, tb, inst, line, peer, ~1ull, flag, f0);
                    return 0;
                }
            }
        }
    }
    return 1;
}

/* A wait's LL receives fused with the reduce (or copy) that consumes them: dst[d] =
 * op(src[0], src[1], ...) for n elements, where the sources whose bit is set in LINES
 * are this rank's LL lines for that part (spun on until they carry `flag`, as
 * ccl_ll_recv; from[s] names the sender), the others ordinary memory. Each word is
 * read, reduced in source order (the bits of a reduce that went through scratch) and
 * stored once; nothing goes through scratch. Two words per thread in flight, every
 * pending line of both polled at once. 1, or 0 after a timeout, a peer found running
 * another call, or a set abort word (recorded as ccl_ll_recv does). */
template <int ND, int NS, unsigned LINES>
__device__ __forceinline__ int ccl_ll_reduce(char *const (&dst)[ND], const char *const (&src)[NS],
                                             const u64 (&from)[NS], u64 n, u64 flag, u64 tid, u64 nt,
                                             const struct ccl_args &a, u64 L, u64 tb, u64 inst, u64 line)
{
    enum { U = 2 };
    const u64 nw = (n + CCL_WE - 1) / CCL_WE;
    const volatile u64 *abort_flag = (const volatile u64 *)a.peers[CCL_RANK];
    for (u64 base = tid; base < nw; base += U * nt) {
        union ccl_word x[U][NS];
        unsigned int todo = 0; /* bit u * NS + s: word u's line from source s not in yet */
#pragma unroll
        for (int u = 0; u < U; u++) {
            const u64 j = base + u * nt;
            const int m = ccl_word_elems(j, n);
#pragma unroll
            for (int s = 0; s < NS; s++) {
                x[u][s].w = 0;
                if (!(LINES >> s & 1)) x[u][s].w = m ? ccl_ld_word(src[s] + j * 8, m) : 0;
                else if (m) todo |= 1u << (u * NS + s);
            }
        }
        u64 t0 = 0;
        unsigned int f0 = 0;
        for (unsigned int it = 0; todo; it++) {
            unsigned int d[U][NS][4];
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int s = 0; s < NS; s++)
                    if (todo >> (u * NS + s) & 1)
                        asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                                     : "=r"(d[u][s][0]), "=r"(d[u][s][1]), "=r"(d[u][s][2]), "=r"(d[u][s][3])
                                     : "l"(src[s] + (base + u * nt) * 16) : "memory");
            u64 waiting = 0;
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int s = 0; s < NS; s++) {
                    if (!(todo >> (u * NS + s) & 1)) continue;
                    if (d[u][s][1] != (unsigned int)flag || d[u][s][3] != (unsigned int)(flag >> 32)) {
                        f0 = d[u][s][1];
                        waiting = from[s];
                        continue;
                    }
                    x[u][s].w = (u64)d[u][s][0] | ((u64)d[u][s][2] << 32);
                    todo &= ~(1u << (u * NS + s));
                }
            if (todo && (it & 255) == 255) {
                if ((L && ccl_peer_agrees(a, L, waiting, tb, inst) < 0) || *abort_flag) return 0; /* as ccl_wait_for */
                const u64 now = ccl_now();
                if (t0 == 0) t0 = now;
                else if (now - t0 > a.timeout_ns) {
                    ccl_fail(a.err, a.peers, CCL_RANK, tb, inst, line, waiting, ~1ull, flag, f0);
                    return 0;
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const u64 j = base + u * nt;
            const int m = ccl_word_elems(j, n);
            if (!m) continue;
            const u64 r = ccl_reduce_word<NS>(x[u]);
#pragma unroll
            for (int k = 0; k < ND; k++) ccl_st_word(dst[k] + j * 8, r, m);
        }
    }
    return 1;
}

/* ---- LL128: 128-byte lines of 15 data words and a flag word (the last). Eight
 * consecutive lanes of a warp carry a line, 16 bytes each, in one warp-wide 16-byte
 * store or load: lane k of the eight holds data words 2k and 2k + 1, lane 7 word 14
 * and the flag. NVLink and the L2 move a warp's aligned 128-byte access as one
 * transaction, so a reader whose load returns the flag got the whole line with it (the
 * property NCCL's LL128 rests on). Nothing else orders data and flag, so both sides
 * keep every access to a line in one warp instruction: the loops below are uniform
 * across the warp, the warp is made whole (__syncwarp) before it touches lines, and a
 * line's accesses are single predicated instructions (ccl_ll128_put, ccl_ll128_get),
 * never branches that a diverged warp could run lane group by lane group: a sender
 * whose lanes diverged while loading (misaligned sources go element by element) once
 * stored a line's flag ahead of its data. A part of a transfer
 * starts on a line (CCL_PART_BYTES = 240: two lines' data, 16-byte aligned), at line
 * lo * esize / 120 of its chunk's lines; a chunk of cs elements has ccl_ll128_lines_bytes
 * of lines. ---- */
#define CCL_LL128_DATA 15 /* data words per line */
/* Lines start on 128 bytes (one transaction each): the region's offset past its scratch
 * rounded up (the region itself starts on the heap's 256-byte alignment). */
__device__ __forceinline__ u64 ccl_ll128_align(u64 off)
{
    return (off + 127) / 128 * 128;
}
__device__ __forceinline__ u64 ccl_ll128_bytes_lines(u64 bytes)
{
    return (bytes + 8 * CCL_LL128_DATA - 1) / (8 * CCL_LL128_DATA) * 128;
}
__device__ __forceinline__ u64 ccl_ll128_lines_bytes(u64 cs)
{
    return ccl_ll128_bytes_lines(cs * sizeof(ccl_t));
}
/* One lane's 16 bytes of a line, stored or loaded only where `on`, as one instruction
 * for the whole warp. */
__device__ __forceinline__ void ccl_ll128_put(char *p, u64 w0, u64 w1, unsigned int on)
{
    asm volatile("{\n\t.reg .pred on;\n\tsetp.ne.u32 on, %3, 0;\n\t@on st.volatile.global.v2.u64 [%0], {%1,%2};\n\t}"
                 :: "l"(p), "l"(w0), "l"(w1), "r"(on) : "memory");
}
__device__ __forceinline__ void ccl_ll128_get(const char *p, u64 *w0, u64 *w1, unsigned int on)
{
    asm volatile("{\n\t.reg .pred on;\n\tsetp.ne.u32 on, %2, 0;\n\t@on ld.volatile.global.v2.u64 {%0,%1}, [%3];\n\t}"
                 : "+l"(*w0), "+l"(*w1) : "r"(on), "l"(p) : "memory");
}
/* Words j and j + 1 at p (m0, m1 elements): one 16-byte access when whole and aligned. */
__device__ __forceinline__ void ccl_ld_pair(const char *p, int m0, int m1, u64 *w0, u64 *w1)
{
    if (m0 == CCL_WE && m1 == CCL_WE && ((u64)p & 15) == 0) {
        asm volatile("ld.global.cg.v2.u64 {%0,%1}, [%2];" : "=l"(*w0), "=l"(*w1) : "l"(p) : "memory");
    } else {
        *w0 = m0 ? ccl_ld_word(p, m0) : 0;
        *w1 = m1 ? ccl_ld_word(p + 8, m1) : 0;
    }
}
__device__ __forceinline__ void ccl_st_pair(char *p, u64 w0, u64 w1, int m0, int m1)
{
    if (m0 == CCL_WE && m1 == CCL_WE && ((u64)p & 15) == 0) {
        asm volatile("st.global.v2.u64 [%0], {%1,%2};" :: "l"(p), "l"(w0), "l"(w1) : "memory");
    } else {
        if (m0) ccl_st_word(p, w0, m0);
        if (m1) ccl_st_word(p + 8, w1, m1);
    }
}
/* Like ccl_xfer_ll with LL128 lines: NL local destinations get plain stores, NR remote
 * ones (dr: the peer's lines for this part) LL128 lines. tid and nt: whole warps. */
template <int NL, int NR, int NS>
__device__ __forceinline__ void ccl_xfer_ll128(char *const *dl, char *const (&dr)[NR], const char *const (&src)[NS],
                                               u64 n, u64 flag, u64 tid, u64 nt)
{
    enum { U = NS <= 2 ? 2 : 1 }; /* lines per lane group in flight */
    const u64 nw = (n + CCL_WE - 1) / CCL_WE, nl = (nw + CCL_LL128_DATA - 1) / CCL_LL128_DATA;
    const u64 k = tid % 8, grp = tid % 32 / 8;
    for (u64 base = tid / 32 * 4 * U; base < nl; base += nt / 32 * 4 * U) {
        union ccl_word x[U][2][NS];
        int m[U][2];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const u64 j = (base + 4 * u + grp) * CCL_LL128_DATA + 2 * k; /* this lane's first word */
            m[u][0] = ccl_word_elems(j, n);
            m[u][1] = k == 7 ? 0 : ccl_word_elems(j + 1, n);
#pragma unroll
            for (int s = 0; s < NS; s++) ccl_ld_pair(src[s] + j * 8, m[u][0], m[u][1], &x[u][0][s].w, &x[u][1][s].w);
        }
        u64 w[U][2];
#pragma unroll
        for (int u = 0; u < U; u++) {
            w[u][0] = ccl_reduce_word<NS>(x[u][0]);
            w[u][1] = k == 7 ? flag : ccl_reduce_word<NS>(x[u][1]);
        }
        __syncwarp();
#pragma unroll
        for (int u = 0; u < U; u++) {
            const u64 line = base + 4 * u + grp;
#pragma unroll
            for (int d = 0; d < NR; d++) ccl_ll128_put(dr[d] + line * 128 + k * 16, w[u][0], w[u][1], line < nl);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const u64 line = base + 4 * u + grp, j = line * CCL_LL128_DATA + 2 * k;
#pragma unroll
            for (int d = 0; d < NL; d++)
                if (line < nl) ccl_st_pair(dl[d] + j * 8, w[u][0], w[u][1], m[u][0], m[u][1]);
        }
    }
}
/* Receives n elements from this rank's LL128 lines into dst (tid and nt: whole warps,
 * as the sender's), U lines per lane group in flight; spins (bounded, abort-aware like
 * ccl_ll_recv) until each line's flag word is this call's. Lane 0 of each warp decides
 * about the abort and the timeout for its warp, which leaves and returns as one. */
__device__ __noinline__ int ccl_ll128_recv(char *dst, const char *lines, u64 n, u64 flag, u64 tid, u64 nt,
                                           const struct ccl_args &a, u64 L, u64 tb, u64 inst, u64 line, u64 peer)
{
    enum { U = 4 };
    const u64 nw = (n + CCL_WE - 1) / CCL_WE, nl = (nw + CCL_LL128_DATA - 1) / CCL_LL128_DATA;
    const u64 k = tid % 8, grp = tid % 32 / 8;
    const volatile u64 *abort_flag = (const volatile u64 *)a.peers[CCL_RANK];
    for (u64 base = tid / 32 * 4 * U; base < nl; base += nt / 32 * 4 * U) {
        unsigned int todo = 0;
#pragma unroll
        for (int u = 0; u < U; u++) if (base + 4 * u + grp < nl) todo |= 1u << u;
        u64 v[U][2] = {}, t0 = 0, f0 = 0;
        for (unsigned int it = 0; __any_sync(0xffffffffu, todo); it++) {
            __syncwarp();
#pragma unroll
            for (int u = 0; u < U; u++)
                ccl_ll128_get(lines + (base + 4 * u + grp) * 128 + k * 16, &v[u][0], &v[u][1], todo >> u & 1);
#pragma unroll
            for (int u = 0; u < U; u++) {
                /* Lane 7 of the eight holds the flag; the eight agree on their line. */
                const u64 f = __shfl_sync(0xffffffffu, v[u][1], (tid % 32) | 7);
                if (!(todo & (1u << u))) continue;
                if (f != flag) {
                    f0 = f;
                    continue;
                }
                const u64 j = (base + 4 * u + grp) * CCL_LL128_DATA + 2 * k;
                ccl_st_pair(dst + j * 8, v[u][0], v[u][1], ccl_word_elems(j, n), k == 7 ? 0 : ccl_word_elems(j + 1, n));
                todo &= ~(1u << u);
            }
            if ((it & 255) == 255) {
                int give_up = 0;
                if (tid % 32 == 0) {
                    const u64 now = ccl_now();
                    if (t0 == 0) t0 = now;
                    give_up = (L && ccl_peer_agrees(a, L, peer, tb, inst) < 0) || *abort_flag ? 1
                              : now - t0 > a.timeout_ns                                   ? 2
                                                                                          : 0;
                }
                give_up = __shfl_sync(0xffffffffu, give_up, 0);
                const u64 seen = __shfl_sync(0xffffffffu, f0, 0);
                if (give_up == 2 && tid % 32 == 0)
                    ccl_fail(a.err, a.peers, CCL_RANK, tb, inst, line, peer, ~1ull, flag, seen);
                if (give_up) return 0;
            }
        }
    }
    return 1;
}

/* The all-rank barrier (the fence before a call, and around avg's division): this
 * rank's k-th barrier stores k in the `arrived` word of its own heap header (offset 8,
 * internal.h's CclHeapHeader) and waits until every rank's word reaches k; *gen (device
 * memory) counts this rank's barriers. The warp reads the peers' words, 32 at a time.
 * On timeout the error record names the first rank that did not arrive. */
extern "C" __global__ void ccl_rank_barrier(char *const *peers, u64 *gen, struct ccl_err *err, u64 timeout_ns)
{
    const unsigned lane = threadIdx.x;
    const u64 k = *gen + 1;
    __syncwarp();
    if (lane == 0) {
        __threadfence_system();
#if __CUDA_ARCH__ >= 700
        asm volatile("st.release.sys.global.u64 [%0], %1;" :: "l"(peers[CCL_RANK] + 8), "l"(k) : "memory");
#else
        *(volatile u64 *)(peers[CCL_RANK] + 8) = k;
#endif
    }
    const volatile u64 *abort_flag = (const volatile u64 *)peers[CCL_RANK];
    u64 t0 = 0;
    for (unsigned int it = 0;; it++) {
        int missing = -1; /* the first rank of this lane's share not yet at k */
        u64 seen = 0;
        for (int p = (int)lane; p < CCL_NRANKS && missing < 0; p += 32) {
            u64 v = ccl_ld_acquire((const u64 *)(peers[p] + 8));
            if (v < k) missing = p, seen = v;
        }
        unsigned behind = __ballot_sync(0xffffffffu, missing >= 0);
        if (!behind) break;
        if ((it & 255) != 0) continue;
        if (*abort_flag) return; /* a peer failed: give up at once */
        u64 now = ccl_now();
        if (t0 == 0) t0 = now;
        if (t0 == now || now - t0 <= timeout_ns) continue;
        /* The lowest lane that sees a rank behind reports it (and stops every rank). */
        if ((int)lane == __ffs(behind) - 1 && atomicCAS(&err->flag, 0ull, 2ull) == 0ull) {
            err->rank = CCL_RANK; err->tb = 0; err->inst = 0; err->line = 0; err->peer = (u64)missing;
            err->slot = ~0ull; err->expected = k; err->seen = seen;
            __threadfence_system();
            *(volatile u64 *)&err->flag = 1;
        }
        if (lane == 0) {
            for (int p = 0; p < CCL_NRANKS; p++) atomicCAS((u64 *)peers[p], 0ull, (u64)CCL_RANK + 1);
            __threadfence_system();
        }
        return;
    }
    if (lane == 0) *gen = k;
}

/* op avg: the collective reduced as sum; every element of out is divided once. */
extern "C" __global__ void ccl_avg(char *out, u64 count, u64 nranks)
{
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < count; i += (u64)gridDim.x * blockDim.x) {
        ccl_t *p = (ccl_t *)(out + i * sizeof(ccl_t));
        *p = CCL_STORE(CCL_LOAD(*p) / (ccl_acc)nranks);
    }
}

#include "copy.cuh"
