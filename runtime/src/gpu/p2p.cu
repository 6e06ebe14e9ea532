/* p2p.cu: ccl_p2p, the kernel that runs one group of ccl_send and ccl_recv calls on the
 * GPU backend: a few thread blocks per call (more for longer messages), all of them at
 * once, so no call of a group waits for another, only for its partner on the other rank (runtime/src/p2p.c
 * says why a group cannot deadlock). The blocks of a call copy a slot's parts side by
 * side; the one that completes a slot publishes it, in slot order. The protocol is the CPU backend's (cpu/p2p.c,
 * docs/internals.md "Point-to-point"): a message takes max(1, ceil(bytes / payload))
 * consecutive slots of its channel, two slots per channel;
 *   send: fill slot g once the receiver emptied its previous use (g - emptied < 2) and
 *         the channel's earlier slots are filled (calls on one channel go in order):
 *         header, payload, a system fence, then the fill count in this rank's own copy
 *         and in the receiver's semaphore; done when the receiver emptied them all;
 *   recv: once the sender's count says slot g is full, check its header against the
 *         call before copying a byte (a mismatch is recorded, every rank stopped), copy
 *         the payload out, then raise the emptied counts.
 * Semaphores (64-bit, at sem_off in every heap, N ranks): [s] slots rank s filled of
 * this rank's channel s, [N + d] slots rank d emptied of this rank's channel to d;
 * this rank's own: [2N + d] slots it filled toward d, [3N + s] slots it emptied from s
 * (they order the calls of one channel), [4N + d] and [5N + s] the same counts as they
 * stood when this launch began, [6N] blocks of this launch done, then per peer and slot
 * parity the parts of the slot in hand done: [6N + 1 + 2d + parity] sending to d,
 * [8N + 1 + 2s + parity] receiving from s.
 *
 * Where a call's slots start is read here, not given by the host: [4N + d] (or [5N +
 * s]) plus the slots of the launch's earlier calls on that channel (`before`, fixed per
 * group). The last block to finish moves [4N..6N) up to the counts it leaves, so the
 * next launch on the stream starts there. A launch is then the same every time it runs,
 * which lets a CUDA graph capture and replay it.
 *
 * Built by the Makefile into libccl as a C string (ccl__p2p_cu, compiler/cuda/embed.sh,
 * abi.h inlined); the GPU backend compiles it with NVRTC once per GPU model (disk cache)
 * and loads it when a comm starts (gpu/p2p.c). */
#include "abi.h"

typedef ccl_u64 u64;

__device__ __forceinline__ u64 p2p_now(void)
{
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ u64 p2p_load(const u64 *p)
{
    u64 v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void p2p_store(u64 *p, u64 v)
{
    asm volatile("st.release.sys.global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}

/* Stops every rank (the abort word at offset 0 of each heap: 1 + this rank). */
__device__ void p2p_abort_all(const struct ccl_p2p_args &a)
{
    for (u64 p = 0; p < a.nranks; p++) atomicCAS((u64 *)a.peers[p], 0ull, a.rank + 1);
    __threadfence_system();
}

/* Records this block's failure, first one only. */
__device__ void p2p_fail(const struct ccl_p2p_args &a, const struct ccl_p2p_call &c, u64 first, u64 what,
                         const u64 *header, u64 expected, u64 seen)
{
    struct ccl_p2p_err *e = a.err;
    if (atomicCAS(&e->flag, 0ull, 2ull) == 0ull) {
        e->what = what;
        e->group = a.group;
        e->calls = a.ncalls;
        e->call = c;
        for (int k = 0; k < 5; k++) e->header[k] = header ? header[k] : 0;
        e->first = first;
        e->expected = expected;
        e->seen = seen;
        __threadfence_system();
        *(volatile u64 *)&e->flag = 1;
    }
    p2p_abort_all(a);
}

/* Thread 0: waits until *x >= xwant and (y NULL or) *y > ylimit; 1, or 0 after an
 * abort or a timeout (recorded as c's, with the value of the one still short). */
__device__ int p2p_wait(const struct ccl_p2p_args &a, const struct ccl_p2p_call &c, u64 first, const u64 *x,
                        u64 xwant, const u64 *y, u64 ylimit)
{
    const volatile u64 *abort_flag = (const volatile u64 *)a.peers[a.rank];
    u64 t0 = 0, vx = 0, vy = 0;
    for (unsigned it = 0;; it++) {
        vx = p2p_load(x);
        vy = y ? p2p_load(y) : 0;
        if (vx >= xwant && (!y || vy > ylimit)) return 1;
        if ((it & 255) != 0) continue;
        if (*abort_flag) return 0;
        u64 now = p2p_now();
        if (t0 == 0) t0 = now;
        else if (now - t0 > a.timeout_ns) {
            p2p_fail(a, c, first, CCL_P2P_TIMEOUT, 0, vx < xwant ? xwant : ylimit + 1, vx < xwant ? vx : vy);
            return 0;
        }
    }
}

__device__ void p2p_copy(char *dst, const char *src, u64 bytes)
{
    u64 done = 0;
    if ((((u64)dst | (u64)src) & 15) == 0) {
        u64 n = bytes / 16;
        for (u64 j = threadIdx.x; j < n; j += blockDim.x) ((uint4 *)dst)[j] = ((const uint4 *)src)[j];
        done = n * 16;
    }
    for (u64 j = done + threadIdx.x; j < bytes; j += blockDim.x) dst[j] = src[j];
}

/* Bytes [lo, hi) of a slot's len that part b of B copies: 16-byte aligned cuts. */
__device__ __forceinline__ void p2p_part(u64 len, u64 b, u64 B, u64 *lo, u64 *hi)
{
    *lo = b * len / B / 16 * 16;
    *hi = b + 1 == B ? len : (b + 1) * len / B / 16 * 16;
}

/* Thread 0 of every block of a call, once its part of slot g is done: the block that
 * completes the slot (parts[g % 2] reaches B; it resets the count, which no block of
 * slot g + 2 can touch before slot g is published) publishes it, after slot g - 1:
 * *count (this rank's own) and *peer_count become g + 1. 0 after an abort or a timeout. */
__device__ int p2p_part_done(const struct ccl_p2p_args &a, const struct ccl_p2p_call &c, u64 first, u64 *parts,
                             u64 g, u64 *count, u64 *peer_count)
{
    __threadfence_system();
    if (atomicAdd(&parts[g % 2], 1ull) + 1 != c.blocks) return 1;
    parts[g % 2] = 0;
    if (!p2p_wait(a, c, first, count, g, 0, 0)) return 0;
    __threadfence_system();
    p2p_store(count, g + 1);
    p2p_store(peer_count, g + 1);
    return 1;
}

extern "C" __global__ void ccl_p2p(const struct ccl_p2p_args a)
{
    u64 i = 0;
    while (i + 1 < a.ncalls && a.call[i + 1].first_block <= blockIdx.x) i++;
    const struct ccl_p2p_call &c = a.call[i];
    const u64 B = c.blocks, b = blockIdx.x - c.first_block;
    const u64 N = a.nranks, me = a.rank, p = c.peer, payload = a.slot_bytes - 64;
    u64 *own = (u64 *)(a.peers[me] + a.sem_off), *theirs = (u64 *)(a.peers[p] + a.sem_off);
    u64 *parts = own + 6 * N + 1 + (c.kind == 0 ? 0 : 2 * N) + 2 * p;
    const u64 first = own[(c.kind == 0 ? 4 : 5) * N + p] + c.before;
    __shared__ int go;
    for (u64 k = 0; k < c.slots; k++) {
        const u64 g = first + k, at = k * payload, len = c.bytes - at < payload ? c.bytes - at : payload;
        u64 lo, hi;
        p2p_part(len, b, B, &lo, &hi);
        if (c.kind == 0) {
            /* send: this slot emptied of its last use, then every block its part */
            char *slot = a.peers[p] + a.chan_off + (me * 2 + g % 2) * a.slot_bytes;
            if (threadIdx.x == 0) go = g < 2 || p2p_wait(a, c, first, &own[N + p], g - 1, 0, 0);
            __syncthreads();
            if (!go) return;
            if (threadIdx.x == 0 && b == 0) {
                u64 *h = (u64 *)slot;
                h[0] = c.nth, h[1] = c.count, h[2] = c.dtype, h[3] = c.index, h[4] = a.ncalls;
            }
            p2p_copy(slot + 64 + lo, c.buf + at + lo, hi - lo);
            __syncthreads();
            if (threadIdx.x == 0) go = p2p_part_done(a, c, first, parts, g, &own[2 * N + p], &theirs[me]);
        } else {
            /* recv: this slot filled and its header the call's, then every block its part */
            const char *slot = a.peers[me] + a.chan_off + (p * 2 + g % 2) * a.slot_bytes;
            if (threadIdx.x == 0) {
                go = p2p_wait(a, c, first, &own[p], g + 1, 0, 0);
                const u64 *h = (const u64 *)slot;
                u64 hdr[5] = {h[0], h[1], h[2], h[3], h[4]};
                if (go && (hdr[0] != c.nth || hdr[1] != c.count || hdr[2] != c.dtype)) {
                    p2p_fail(a, c, first, CCL_P2P_MISMATCH, hdr, 0, 0);
                    go = 0;
                }
            }
            __syncthreads();
            if (!go) return;
            p2p_copy(c.buf + at + lo, slot + 64 + lo, hi - lo);
            __syncthreads();
            if (threadIdx.x == 0) go = p2p_part_done(a, c, first, parts, g, &own[3 * N + p], &theirs[N + me]);
        }
        __syncthreads();
        if (!go) return;
    }
    if (threadIdx.x != 0) return;
    /* A send is done when its receiver has emptied every slot of it. */
    if (c.kind == 0 && b == 0 && !p2p_wait(a, c, first, &own[N + p], first + c.slots, 0, 0)) return;
    /* The launch's last block moves the starting counts up for the next launch. */
    __threadfence();
    if (atomicAdd(&own[6 * N], 1ull) + 1 == gridDim.x) {
        __threadfence();
        for (u64 q = 0; q < 2 * N; q++) own[4 * N + q] = *(volatile u64 *)&own[2 * N + q];
        own[6 * N] = 0;
        __threadfence();
    }
}
