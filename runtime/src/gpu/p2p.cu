/* p2p.cu: ccl_p2p, the kernel that runs one group of ccl_send and ccl_recv calls on the
 * GPU backend. gpu/p2p.c groups the calls by channel (sends to one peer, receives from
 * one peer) and gives each channel its own thread blocks, all resident at once, so no
 * channel waits for another, only for its partner on the other rank (runtime/src/p2p.c
 * says why a group cannot deadlock); a channel's blocks take its calls in call order, as
 * both ranks number them. The channel regions' layout is cuda/abi.h's (CCL_P2P_*).
 *
 * A message of M bytes is `chunks` chunks of `chunk` bytes (both functions of M: a
 * slot's payload for long messages, less for shorter ones so that they spread over every
 * lane), dealt round robin to L = min(lanes, chunks) lanes: chunk k goes to lane k % L.
 * Each lane is a ring of `slots` slots with its own counts, FULL (chunks the sender
 * published) and EMPTY (chunks the receiver emptied), so lanes move independently, each
 * owned on either side by one block of the channel (lane j by block j % B): a lane's
 * counts are written by one thread, in order. A lane's chunk number g (counted since the
 * comm began) lives in slot g % slots, which the sender fills only once EMPTY >= g -
 * slots + 1. Every message takes one of three paths, chosen alike on both ranks:
 *   LL (M <= ll_max: at most one chunk a lane, of at most ll_chunk bytes): 16-byte
 *     lines {data, flag, data, flag} in the chunk's LL slot of its lane (ll_slots of
 *     them), no fence and no count to wait for; the receiver spins on the flags, then
 *     empties the slot.
 *   eager: the sender copies each chunk into its slot, fences, writes the slot's header
 *     and raises FULL; the receiver checks the header, copies the chunk out and raises
 *     EMPTY. A block's chunks are pipelined: a chunk is published while the next one is
 *     copied, and the next slot's room is awaited by another warp meanwhile.
 *   direct (zero copy): a receive of at least direct_min bytes whose buffer its sender
 *     can write (a ccl_mem_alloc or registered buffer, or ordinary memory the sender's
 *     process has mapped: gpu/ipc.c) posts where it is, as an offset from the sender's
 *     view of the receiver's heap base; the sender, having read that post, writes
 *     its data straight into the receiver's buffer with all of the channel's blocks,
 *     which then meet (CCL_P2P_SZC), and each lane owner moves its lane's FULL past the
 *     message's chunks (no slot holds its data) after one header in lane 0.
 * Every chunk's slot carries a header (the message's number, count, dtype, place in its
 * group, and its path) as six LL lines flagged with the chunk's number, so a receiver
 * can always read it, whatever the sender did, and compares it with its own call before
 * it writes a byte: a mismatch is recorded and every rank stopped.
 *
 * Posts: every receive writes, when its launch starts, a descriptor into the sender's
 * heap (entry nth % CCL_P2P_RING, nth the message's number on its channel): its number,
 * count, dtype and the buffer's offset (or CCL_P2P_NO_DIRECT), each 32-bit half stored
 * with the receive's flag in one 8-byte word (so a word is never half old, half new),
 * then the receive's number, its lane-0 start + 1 (so a graph's replays, which repeat
 * nth, differ). The sender reads it before a direct send, and before its launch ends for
 * every send: a send is done once its data are in the channel (or the receiver's buffer)
 * and its receive was posted and matches; it never waits for the receiver to drain a
 * slot unless it needs that slot again. A send whose receive never comes times out
 * naming it; one whose receive does not match waits until the receiver, which finds the
 * mismatch in the header, stops every rank. An entry is rewritten only by a receive
 * posted after the one it holds; a receiver posts a launch's receives (at most
 * CCL_P2P_MAX_CALLS a channel) only once its earlier launches are done, which needs
 * every earlier message sent, so a newer post in an entry means the receiver is past
 * that message: it matched.
 *
 * Where a channel stands when a launch begins is read here, not given by the host: the
 * START counts in this rank's region (chunks per lane; direct-send arrivals). Each lane's
 * owner moves its lane's count on when it is done; lane 0's (which every block of the
 * channel reads) and the arrivals' only once every block has read them (CCL_P2P_*BEGUN).
 * So a launch is the same every time it runs, which lets a CUDA graph capture and replay
 * it, and no block waits for the others at the end.
 *
 * Memory ordering: data are stored by every thread, then __syncthreads(), then one
 * thread's __threadfence_system() and the count's store; the reader's one thread spins
 * with ld.acquire.sys, then __syncthreads(), then every thread reads (with ld.global.cg:
 * remote stores land in L2). LL lines need neither: a line is valid when both flags are
 * the chunk's (8-byte halves arrive whole over NVLink, as for the prelude's LL). EMPTY is
 * a release after the readers' __syncthreads(). Blocks of one direct send meet through
 * an atomic counter, a system fence before each arrival and an acquire after the last.
 *
 * Built by the Makefile into libccl as a C string (ccl__p2p_cu, compiler/cuda/embed.sh,
 * abi.h inlined); the GPU backend compiles it with NVRTC once per GPU model (disk cache)
 * and loads it when a comm starts (gpu/p2p.c). */
#include "abi.h"

typedef ccl_u64 u64;
typedef unsigned int u32;
typedef const struct ccl_p2p_args P2pArgs;
typedef const struct ccl_p2p_call P2pCall;

#include "copy.cuh"

/* The header's last word: how the message travels. */
enum { P2P_LL = 1, P2P_EAGER = 2, P2P_DIRECT = 3 };

/* ---- memory operations ---- */

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

/* A relaxed read and write (8-byte words are single-copy atomic). */
__device__ __forceinline__ u64 p2p_peek(const u64 *p)
{
    return *(const volatile u64 *)p;
}

__device__ __forceinline__ void p2p_poke(u64 *p, u64 v)
{
    *(volatile u64 *)p = v;
}

/* One more arrival at a counter, after this thread's (and, behind a barrier, its
 * block's) earlier reads and writes. */
__device__ __forceinline__ void p2p_arrive(u64 *p)
{
    asm volatile("red.release.gpu.global.add.u64 [%0], 1;" :: "l"(p) : "memory");
}

/* 16 bytes, cached in L2 only: a slot may hold another GPU's newer stores. */
__device__ __forceinline__ uint4 p2p_ld16(const char *p)
{
    uint4 v;
    asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p)
                 : "memory");
    return v;
}

__device__ __forceinline__ void p2p_st16(char *p, uint4 v)
{
    asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}

__device__ __forceinline__ u32 p2p_ld1(const char *p)
{
    unsigned short v;
    asm volatile("ld.global.cg.u8 %0, [%1];" : "=h"(v) : "l"(p) : "memory");
    return v;
}

/* ---- copies: every thread of the block, 16-byte stores wherever dst allows ---- */

/* Vectors [0, nv) of 16 bytes, src and dst both 16-byte aligned, by threads tid of nt:
 * U loads in flight a thread (a chunk through the slots, about 1900 vectors, is one
 * round of U for every thread of the block). */
__device__ __forceinline__ void p2p_copy_aligned(char *dst, const char *src, u64 nv, u64 tid, u64 nt)
{
    enum { U = 4 };
    u64 i = tid;
    for (; i + (U - 1) * nt < nv; i += U * nt) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = p2p_ld16(src + (i + u * nt) * 16);
#pragma unroll
        for (int u = 0; u < U; u++) p2p_st16(dst + (i + u * nt) * 16, v[u]);
    }
    for (; i < nv; i += nt) p2p_st16(dst + i * 16, p2p_ld16(src + i * 16));
}

/* Vector i of a source R = 4Q + sh/8 bytes past the 16-byte aligned `base`: bytes [R,
 * R + 16) of the aligned blocks i and i + 1, by funnel shifts of their 32-bit words. */
template <int Q>
__device__ __forceinline__ uint4 p2p_shifted(const char *base, u64 i, u32 sh)
{
    const uint4 x = p2p_ld16(base + i * 16), y = p2p_ld16(base + i * 16 + 16);
    const u32 w[8] = {x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w};
    uint4 o;
    o.x = __funnelshift_r(w[Q], w[Q + 1], sh);
    o.y = __funnelshift_r(w[Q + 1], w[Q + 2], sh);
    o.z = __funnelshift_r(w[Q + 2], w[Q + 3], sh);
    o.w = __funnelshift_r(w[Q + 3], w[Q + 4], sh);
    return o;
}

/* Vectors [0, nv) to an aligned dst from src = base + 4Q + sh/8 (not aligned): every
 * aligned block it loads holds a byte of the source, so it reads nothing outside the
 * source's first and last 16-byte blocks. */
template <int Q>
__device__ __forceinline__ void p2p_copy_shifted(char *dst, const char *base, u32 sh, u64 nv, u64 tid, u64 nt)
{
    enum { U = 4 };
    u64 i = tid;
    for (; i + (U - 1) * nt < nv; i += U * nt) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = p2p_shifted<Q>(base, i + u * nt, sh);
#pragma unroll
        for (int u = 0; u < U; u++) p2p_st16(dst + (i + u * nt) * 16, v[u]);
    }
    for (; i < nv; i += nt) p2p_st16(dst + i * 16, p2p_shifted<Q>(base, i, sh));
}

/* n bytes from src to dst, any alignment, by the block's threads from `skip` on: the
 * bytes before dst's first 16-byte boundary and after its last one singly, the rest as
 * 16-byte stores (from 16-byte loads, shifted into place when src sits elsewhere modulo
 * 16). */
__device__ __noinline__ void p2p_copy(char *dst, const char *src, u64 n, u32 skip)
{
    if (threadIdx.x < skip) return;
    const u64 tid = threadIdx.x - skip, nt = blockDim.x - skip;
    u64 head = (16 - ((u64)dst & 15)) & 15;
    if (head > n) head = n;
    if (tid < head) dst[tid] = (char)p2p_ld1(src + tid);
    dst += head, src += head, n -= head;
    const u64 nv = n / 16, tail = n % 16;
    const u32 r = (u32)((u64)src & 15), sh = (r & 3) * 8;
    const char *base = src - r;
    switch (nv ? r >> 2 : 4) {
    case 0: if (r == 0) p2p_copy_aligned(dst, src, nv, tid, nt); else p2p_copy_shifted<0>(dst, base, sh, nv, tid, nt); break;
    case 1: p2p_copy_shifted<1>(dst, base, sh, nv, tid, nt); break;
    case 2: p2p_copy_shifted<2>(dst, base, sh, nv, tid, nt); break;
    case 3: p2p_copy_shifted<3>(dst, base, sh, nv, tid, nt); break;
    default: break;
    }
    if (tid < tail) dst[nv * 16 + tid] = (char)p2p_ld1(src + nv * 16 + tid);
}

/* The whole block copies. */
__device__ __forceinline__ void p2p_copy_all(char *dst, const char *src, u64 n)
{
    p2p_copy(dst, src, n, 0);
}

/* Through the slots, warps 0 and 1 publish and wait while the others copy (where the
 * block has more than them). */
__device__ __forceinline__ void p2p_copy_workers(char *dst, const char *src, u64 n)
{
    p2p_copy(dst, src, n, blockDim.x >= 128 ? 64 : 0);
}

/* ---- LL lines: {low word, flag, high word, flag} ---- */

/* A chunk's flag: never 0 (fresh memory), different for the 2^31 - 1 chunks around it. */
__device__ __forceinline__ u32 p2p_flag(u64 g)
{
    return (u32)(g % 0x7fffffffull) + 1;
}

__device__ __forceinline__ void p2p_ll_put(char *line, u64 w, u32 flag)
{
    asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(line), "r"((u32)w), "r"(flag),
                 "r"((u32)(w >> 32)), "r"(flag) : "memory");
}

/* 1 when the line carries flag, its word in *w. */
__device__ __forceinline__ int p2p_ll_get(const char *line, u32 flag, u64 *w)
{
    u32 d0, f0, d1, f1;
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1)
                 : "l"(line) : "memory");
    *w = (u64)d0 | (u64)d1 << 32;
    return f0 == flag && f1 == flag;
}

/* The m <= 8 bytes at p as one word, and back: one 8-byte access when whole and aligned. */
__device__ __forceinline__ u64 p2p_ld_word(const char *p, u64 m)
{
    if (m == 8 && ((u64)p & 7) == 0) return *(const u64 *)p;
    u64 w = 0;
    for (u64 k = 0; k < m; k++) w |= (u64)(unsigned char)p[k] << (8 * k);
    return w;
}

__device__ __forceinline__ void p2p_st_word(char *p, u64 w, u64 m)
{
    if (m == 8 && ((u64)p & 7) == 0) *(u64 *)p = w;
    else for (u64 k = 0; k < m; k++) p[k] = (char)(w >> (8 * k));
}

/* ---- the channel's regions and a message's shape ---- */

/* Rank `owner`'s region for its peer `other` (cuda/abi.h). */
__device__ __forceinline__ char *p2p_region(P2pArgs &a, u64 owner, u64 other)
{
    return a.peers[owner] + a.chan_off + other * a.chan_bytes;
}

/* Chunks of call c's message that lane j carries (the host divides: c.rows = chunks /
 * lanes, c.extra = chunks % lanes). */
__device__ __forceinline__ u64 p2p_lane_chunks(P2pCall &c, u64 j)
{
    return j < c.lanes ? c.rows + (j < c.extra) : 0;
}

/* How a receive expects its message (the sender decides alike: gpu/p2p.c). */
__device__ __forceinline__ u64 p2p_kind(P2pArgs &a, P2pCall &c)
{
    return c.bytes <= a.ll_max ? P2P_LL : c.direct != CCL_P2P_NO_DIRECT ? P2P_DIRECT : P2P_EAGER;
}

/* Chunk g's slot in its lane (slots is a power of two). */
__device__ __forceinline__ u64 p2p_slot(P2pArgs &a, u64 g)
{
    return g & (a.slots - 1);
}

__device__ __forceinline__ char *p2p_header_at(P2pArgs &a, char *region, u64 j, u64 g)
{
    return region + CCL_P2P_HDRS + (j * a.slots + p2p_slot(a, g)) * CCL_P2P_HDR_BYTES;
}

__device__ __forceinline__ char *p2p_payload_at(P2pArgs &a, char *region, u64 j, u64 g)
{
    return region + a.pay_off + (j * a.slots + p2p_slot(a, g)) * a.payload;
}

/* Lane j's LL slot of its chunk g (ll_slots a lane, a power of two). */
__device__ __forceinline__ char *p2p_ll_at(P2pArgs &a, char *region, u64 j, u64 g)
{
    return region + a.ll_off + (j * a.ll_slots + (g & (a.ll_slots - 1))) * 2 * a.ll_chunk;
}

/* ---- failures ---- */

/* Stops every rank (the abort word at offset 0 of each heap: 1 + this rank). */
__device__ void p2p_abort_all(P2pArgs &a)
{
    for (u64 p = 0; p < a.nranks; p++) atomicCAS((u64 *)a.peers[p], 0ull, a.rank + 1);
    __threadfence_system();
}

/* Records this rank's first failure, then stops every rank. */
__device__ __noinline__ void p2p_record(P2pArgs &a, P2pCall &c, u64 first, u64 what, u64 h0, u64 h1, u64 h2,
                                        u64 h3, u64 h4, u64 expected, u64 seen)
{
    struct ccl_p2p_err *e = a.err;
    if (atomicCAS(&e->flag, 0ull, 2ull) == 0ull) {
        e->what = what;
        e->group = a.group;
        e->calls = a.ncalls;
        e->call = c;
        e->header[0] = h0, e->header[1] = h1, e->header[2] = h2, e->header[3] = h3, e->header[4] = h4;
        e->first = first;
        e->expected = expected;
        e->seen = seen;
        __threadfence_system();
        *(volatile u64 *)&e->flag = 1;
    }
    p2p_abort_all(a);
}

/* Call c (lane-0 start `first`) timed out: recorded with lane 0's counts (a send: what
 * its receiver emptied, and where the message ends; a receive: what its sender
 * published, and where it starts). */
__device__ __noinline__ void p2p_timeout(P2pArgs &a, P2pCall &c, u64 first)
{
    const char *mine = p2p_region(a, a.rank, c.peer);
    const u64 K0 = p2p_lane_chunks(c, 0);
    if (c.kind == 0)
        p2p_record(a, c, first, CCL_P2P_TIMEOUT, 0, 0, 0, 0, 0, first + K0, p2p_peek((const u64 *)(mine + CCL_P2P_EMPTY)));
    else
        p2p_record(a, c, first, CCL_P2P_TIMEOUT, 0, 0, 0, 0, 0, first + 1, p2p_peek((const u64 *)(mine + CCL_P2P_FULL)));
}

/* A spinning thread's clock. */
typedef struct {
    u64 t0;
    u32 it;
} P2pSpin;

/* After a poll that found nothing: 1 to poll again; 0 once this rank is stopped, or when
 * the timeout has passed (recorded as c's). */
__device__ __forceinline__ int p2p_spin(P2pArgs &a, P2pSpin &s, P2pCall &c, u64 first)
{
    if ((++s.it & 255) != 0) return 1;
    if (p2p_peek((const u64 *)a.peers[a.rank])) return 0;
    const u64 now = p2p_now();
    if (s.t0 == 0) s.t0 = now;
    else if (now - s.t0 > a.timeout_ns) {
        p2p_timeout(a, c, first);
        return 0;
    }
    return 1;
}

/* One thread: until *p >= want (acquire). 1, or 0 (stopped, timed out). */
__device__ __forceinline__ int p2p_wait(P2pArgs &a, P2pCall &c, u64 first, const u64 *p, u64 want)
{
    P2pSpin s = {0, 0};
    while (p2p_load(p) < want)
        if (!p2p_spin(a, s, c, first)) return 0;
    return 1;
}

/* One thread: until slot h's header carries chunk g's flag, then checks it against c
 * and `kind`. 1 when it matches; 0 after a mismatch (recorded: every rank stops), a stop
 * or a timeout. */
__device__ __noinline__ int p2p_take_header(P2pArgs &a, P2pCall &c, u64 first, const char *h, u64 g, u64 kind)
{
    const u32 flag = p2p_flag(g);
    u64 w0, w1, w2, w3, w4, w5;
    P2pSpin s = {0, 0};
    for (;;) {
        int ok = p2p_ll_get(h, flag, &w0);
        ok &= p2p_ll_get(h + 16, flag, &w1);
        ok &= p2p_ll_get(h + 32, flag, &w2);
        ok &= p2p_ll_get(h + 48, flag, &w3);
        ok &= p2p_ll_get(h + 64, flag, &w4);
        ok &= p2p_ll_get(h + 80, flag, &w5);
        if (ok) break;
        if (!p2p_spin(a, s, c, first)) return 0;
    }
    if (w0 != c.nth || w1 != c.count || w2 != c.dtype || w5 != kind) {
        p2p_record(a, c, first, CCL_P2P_MISMATCH, w0, w1, w2, w3, w4, 0, 0);
        return 0;
    }
    return 1;
}

__device__ __forceinline__ void p2p_put_header(char *h, P2pCall &c, u64 ncalls, u64 kind, u64 g)
{
    const u32 flag = p2p_flag(g);
    p2p_ll_put(h, c.nth, flag);
    p2p_ll_put(h + 16, c.count, flag);
    p2p_ll_put(h + 32, c.dtype, flag);
    p2p_ll_put(h + 48, c.index, flag);
    p2p_ll_put(h + 64, ncalls, flag);
    p2p_ll_put(h + 80, kind, flag);
}

/* ---- receive posts ---- */

/* The entry, in a region, of the post of message nth. */
__device__ __forceinline__ u64 *p2p_post_at(char *region, u64 nth)
{
    return (u64 *)(region + CCL_P2P_DESC + nth % CCL_P2P_RING * 64);
}

/* Posts receive c, whose message starts at chunk g0 of lane 0: each half word with the
 * receive's flag, then its number. Relaxed stores: the words check themselves. */
__device__ __forceinline__ void p2p_post(u64 *e, P2pCall &c, u64 g0)
{
    const u64 f = (u64)p2p_flag(g0) << 32, m = 0xffffffffull;
    p2p_poke(&e[0], (c.nth & m) | f);
    p2p_poke(&e[1], (c.nth >> 32) | f);
    p2p_poke(&e[2], (c.count & m) | f);
    p2p_poke(&e[3], (c.count >> 32) | f);
    p2p_poke(&e[4], (c.dtype & m) | f);
    p2p_poke(&e[5], (c.direct & m) | f);
    p2p_poke(&e[6], (c.direct >> 32) | f);
    p2p_poke(&e[7], g0 + 1);
}

/* One thread: the post, in entry e, of the receive matching send c (lane-0 start g0).
 * 2 when it is there and agrees (*direct: the buffer it offers), -1 when it is there and
 * does not; 1 when a later receive's post is there: the receiver is past this message,
 * so it matched; 0 after a stop or a timeout. */
__device__ __forceinline__ int p2p_read_post(P2pArgs &a, P2pCall &c, u64 g0, const u64 *e, u64 *direct)
{
    const u64 f = p2p_flag(g0), m = 0xffffffffull;
    P2pSpin s = {0, 0};
    for (;;) {
        const u64 w0 = p2p_peek(&e[0]), w1 = p2p_peek(&e[1]), w2 = p2p_peek(&e[2]), w3 = p2p_peek(&e[3]);
        const u64 w4 = p2p_peek(&e[4]), w5 = p2p_peek(&e[5]), w6 = p2p_peek(&e[6]), n = p2p_peek(&e[7]);
        if ((w0 >> 32) == f && (w1 >> 32) == f && (w2 >> 32) == f && (w3 >> 32) == f && (w4 >> 32) == f &&
            (w5 >> 32) == f && (w6 >> 32) == f) {
            *direct = (w5 & m) | (w6 & m) << 32;
            return ((w0 & m) | (w1 & m) << 32) == c.nth && ((w2 & m) | (w3 & m) << 32) == c.count &&
                           (w4 & m) == c.dtype ? 2 : -1;
        }
        if (n > g0 + 1) return 1;
        if (!p2p_spin(a, s, c, g0)) return 0;
    }
}

/* ---- per block ---- */

/* The block's view of its channel: each lane's chunk count where the current message
 * starts (thread 0 moves it on between messages, behind barriers), and a word thread 0
 * hands the block. */
__shared__ u64 p2p_gen[CCL_P2P_MAX_LANES];
__shared__ u64 p2p_word;

/* The thread that awaits the next chunk while thread 0 publishes the last one. */
__device__ __forceinline__ bool p2p_is_waiter(void)
{
    return threadIdx.x == (blockDim.x > 32 ? 32u : 0u);
}

/* Reads the start counts the block uses (its lanes, lane 0) into p2p_gen. */
__device__ __forceinline__ void p2p_read_starts(P2pArgs &a, const u64 *start, u64 b, u64 B)
{
    const u64 j = threadIdx.x;
    if (j < a.lanes && ((u32)j % (u32)B == b || j == 0)) p2p_gen[j] = p2p_peek(&start[j]);
}

/* The block is done with its channel: it moves the start counts of the lanes it owns
 * past this launch; block 0 (lane 0's owner) first waits until every block of the
 * channel has read them (`begun`), then clears that count and moves `zstart` (sends) on
 * to `zend`. */
__device__ int p2p_channel_done(P2pArgs &a, P2pCall &c0, u64 b, u64 B, u64 first, u64 *start, u64 *begun,
                                u64 *zstart, u64 zend)
{
    int ok = 1;
    if (b == 0 && threadIdx.x == 0) ok = p2p_wait(a, c0, first, begun, B);
    if (!__syncthreads_and(ok)) return 0;
    const u64 j = threadIdx.x;
    if (j < a.lanes && (u32)j % (u32)B == b) p2p_poke(&start[j], p2p_gen[j]);
    if (b == 0 && j == 0) {
        p2p_poke(begun, 0);
        if (zstart) p2p_poke(zstart, zend);
    }
    return 1;
}

/* ---- sends ---- */

/* Chunk j of an LL message, lane j's only one (its chunk g): its lines and header once
 * the slot is free. Two lines in flight a thread: the registers of this function (and of
 * p2p_recv_ll) are ones the kernel saves around the call, and it has none to spare
 * (tests/cuda fails on a spill). */
__device__ __noinline__ int p2p_send_ll(P2pArgs &a, P2pCall &c, u64 j, u64 g, char *theirs, const u64 *empty, u64 *full)
{
    enum { U = 2 };
    const u64 at = j * c.chunk, n = c.bytes - at < c.chunk ? c.bytes - at : c.chunk;
    const u64 tid = threadIdx.x, nt = blockDim.x, nl = (n + 7) / 8;
    const char *src = c.buf + at;
    char *lines = p2p_ll_at(a, theirs, j, g);
    const u32 flag = p2p_flag(g);
    /* This thread's first lines are read while thread 0 waits for the slot. */
    u64 w[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        const u64 l = tid + u * nt;
        w[u] = l < nl ? p2p_ld_word(src + 8 * l, n - 8 * l < 8 ? n - 8 * l : 8) : 0;
    }
    int ok = 1;
    /* Free once the lane's chunk ll_slots back is emptied (so is its header's slot). */
    if (tid == 0) ok = g < a.ll_slots || p2p_wait(a, c, g, &empty[j], g - a.ll_slots + 1);
    if (!__syncthreads_and(ok)) return 0;
#pragma unroll
    for (int u = 0; u < U; u++)
        if (tid + u * nt < nl) p2p_ll_put(lines + 16 * (tid + u * nt), w[u], flag);
    for (u64 l = tid + U * nt; l < nl; l += nt)
        p2p_ll_put(lines + 16 * l, p2p_ld_word(src + 8 * l, n - 8 * l < 8 ? n - 8 * l : 8), flag);
    if (tid == 0) {
        p2p_put_header(p2p_header_at(a, theirs, j, g), c, a.ncalls, P2P_LL, g);
        p2p_poke(&full[j], g + 1); /* for the record only: receivers read the flags */
    }
    return 1;
}

/* Thread 0, after a barrier behind every thread's copy of chunk g of lane j: publishes
 * it (the fence orders the block's copy before the header and the count). */
__device__ __forceinline__ void p2p_publish(P2pArgs &a, P2pCall &c, char *theirs, u64 *full, u64 j, u64 g)
{
    __threadfence_system();
    p2p_put_header(p2p_header_at(a, theirs, j, g), c, a.ncalls, P2P_EAGER, g);
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" :: "l"(&full[j]), "l"(g + 1) : "memory");
}

/* An eager message of K chunks over L lanes: this block's lanes (j = b, b + B, ...), in
 * chunk order. */
__device__ __noinline__ int p2p_send_eager(P2pArgs &a, P2pCall &c, u64 K, u64 L, u64 b, u64 B, char *theirs, const u64 *empty,
                              u64 *full)
{
    const u64 first = p2p_gen[0];
    u64 pj = 0, pg = 0;
    int have = 0;
    for (u64 row = 0; row * L < K; row++)
        for (u64 j = b; j < L && row * L + j < K; j += B) {
            const u64 k = row * L + j, g = p2p_gen[j] + row, at = k * c.chunk;
            int ok = 1;
            if (p2p_is_waiter() && g >= a.slots) ok = p2p_wait(a, c, first, &empty[j], g - a.slots + 1);
            ok = __syncthreads_and(ok);
            if (threadIdx.x == 0 && have) p2p_publish(a, c, theirs, full, pj, pg);
            if (!ok) return 0;
            p2p_copy_workers(p2p_payload_at(a, theirs, j, g), c.buf + at,
                             c.bytes - at < c.chunk ? c.bytes - at : c.chunk);
            have = 1, pj = j, pg = g;
        }
    __syncthreads();
    if (threadIdx.x == 0 && have) p2p_publish(a, c, theirs, full, pj, pg);
    return 1;
}

/* A direct message (the receiver offered its buffer at heap offset `direct`): every
 * block of the channel writes its share straight into it and arrives at `zc`; once all
 * have (`target`), each lane owner moves its lane's FULL past the message. */
__device__ __noinline__ int p2p_send_direct(P2pArgs &a, P2pCall &c, u64 K, u64 L, u64 b, u64 B, u64 direct, u64 target,
                               char *theirs, const u64 *empty, u64 *full, u64 *zc)
{
    const u64 g0 = p2p_gen[0];
    int ok = 1;
    if (b == 0 && threadIdx.x == 0) {
        ok = g0 < a.slots || p2p_wait(a, c, g0, &empty[0], g0 - a.slots + 1);
        if (ok) p2p_put_header(p2p_header_at(a, theirs, 0, g0), c, a.ncalls, P2P_DIRECT, g0);
    }
    char *dst = a.peers[c.peer] + direct;
    /* Part b of B, cut about b * M / B (in floating point, which is monotone in b and
     * needs no 64-bit division) where dst is 16-byte aligned. */
    const u64 M = c.bytes, d = (u64)dst;
    u64 lo = (u64)((double)M * (double)b / (double)B), hi = (u64)((double)M * (double)(b + 1) / (double)B);
    lo = b == 0 ? 0 : ((d + lo + 15) & ~15ull) - d;
    hi = b + 1 == B ? M : ((d + hi + 15) & ~15ull) - d;
    lo = lo > M ? M : lo, hi = hi > M ? M : hi;
    if (hi > lo) p2p_copy_all(dst + lo, c.buf + lo, hi - lo);
    if (!__syncthreads_and(ok)) return 0;
    if (threadIdx.x == 0) {
        __threadfence_system();
        atomicAdd(zc, 1ull);
        ok = p2p_wait(a, c, g0, zc, target);
        for (u64 j = b; ok && j < L; j += B) p2p_store(&full[j], p2p_gen[j] + p2p_lane_chunks(c, j));
    }
    return __syncthreads_and(ok);
}

/* One thread: the sends [i0, i1) of a channel (the first's lane-0 start g0) are done
 * once each one's receive was posted and matches, in message order, so a missing receive
 * names the first send it leaves waiting. 1, or 0 (stopped, timed out). */
__device__ __noinline__ int p2p_sends_done(P2pArgs &a, u64 i0, u64 i1, char *mine, u64 g0)
{
    for (u64 i = i0; i < i1; i++) {
        P2pCall &c = a.call[i];
        const u64 *e = p2p_post_at(mine, c.nth);
        const int r = p2p_read_post(a, c, g0, e, &p2p_word);
        if (r == 0) return 0;
        if (r < 0) {
            /* The receiver finds the mismatch in the header and stops every rank. */
            p2p_wait(a, c, g0, &e[7], ~0ull);
            return 0;
        }
        g0 += p2p_lane_chunks(c, 0);
    }
    return 1;
}

/* The calls [i0, i1) of one send channel, block b of its B. */
__device__ int p2p_send(P2pArgs &a, u64 i0, u64 i1, u64 b, u64 B)
{
    P2pCall &c0 = a.call[i0];
    char *mine = p2p_region(a, a.rank, c0.peer), *theirs = p2p_region(a, c0.peer, a.rank);
    const u64 *empty = (const u64 *)(mine + CCL_P2P_EMPTY);
    u64 *start = (u64 *)(mine + CCL_P2P_SSTART), *full = (u64 *)(theirs + CCL_P2P_FULL);
    u64 *zc = (u64 *)(mine + CCL_P2P_SZC), *zstart = (u64 *)(mine + CCL_P2P_SZSTART);
    u64 *begun = (u64 *)(mine + CCL_P2P_SBEGUN);
    p2p_read_starts(a, start, b, B);
    if (threadIdx.x == 0) p2p_word = p2p_peek(zstart);
    __syncthreads();
    const u64 first = p2p_gen[0], zbase = p2p_word;
    __syncthreads();
    if (threadIdx.x == 0) p2p_arrive(begun);
    u64 zk = 0;
    for (u64 i = i0; i < i1; i++) {
        P2pCall &c = a.call[i];
        const u64 K = c.chunks, L = c.lanes;
        if (c.bytes <= a.ll_max) {
            for (u64 j = b; j < L; j += B)
                if (!p2p_send_ll(a, c, j, p2p_gen[j], theirs, empty, full)) return 0;
        } else {
            /* At direct_min bytes and above, the receiver's post says whether it takes the
             * data directly (the same message, count and dtype, and a buffer offered). */
            u64 direct = CCL_P2P_NO_DIRECT;
            if (c.bytes >= a.direct_min) {
                int ok = 1;
                if (threadIdx.x == 0) {
                    const int r = p2p_read_post(a, c, p2p_gen[0], p2p_post_at(mine, c.nth), &p2p_word);
                    ok = r != 0;
                    if (r != 2) p2p_word = CCL_P2P_NO_DIRECT;
                }
                if (!__syncthreads_and(ok)) return 0;
                direct = p2p_word;
            }
            if (direct != CCL_P2P_NO_DIRECT) {
                if (!p2p_send_direct(a, c, K, L, b, B, direct, zbase + B * ++zk, theirs, empty, full, zc)) return 0;
            } else if (b < L && !p2p_send_eager(a, c, K, L, b, B, theirs, empty, full)) {
                return 0;
            }
        }
        __syncthreads();
        if (threadIdx.x == 0)
            for (u64 j = 0; j < L; j++) p2p_gen[j] += p2p_lane_chunks(c, j);
        __syncthreads();
    }
    int ok = 1;
    if (b == 0 && threadIdx.x == 0) ok = p2p_sends_done(a, i0, i1, mine, first);
    if (!__syncthreads_and(ok)) return 0;
    return p2p_channel_done(a, c0, b, B, first, start, begun, zstart, zbase + B * zk);
}

/* ---- receives ---- */

/* One thread: waits until its lines base, base + nt, ... (U of them, those below nl)
 * carry flag, their words into w. 1, or 0 (stopped, timed out). */
template <int U>
__device__ __forceinline__ int p2p_ll_take(P2pArgs &a, P2pCall &c, u64 first, const char *lines, u64 base, u64 nt,
                                           u64 nl, u32 flag, u64 (&w)[U])
{
    u32 todo = 0;
#pragma unroll
    for (int u = 0; u < U; u++)
        if (base + u * nt < nl) todo |= 1u << u;
    P2pSpin s = {0, 0};
    while (todo) {
#pragma unroll
        for (int u = 0; u < U; u++)
            if ((todo >> u & 1) && p2p_ll_get(lines + (base + u * nt) * 16, flag, &w[u])) todo &= ~(1u << u);
        if (todo && !p2p_spin(a, s, c, first)) return 0;
    }
    return 1;
}

/* Chunk j of an LL message, lane j's only one (its chunk g): every thread takes its
 * first lines while thread 0 checks the header, and writes them only once it matched;
 * then the slot is emptied. The chunk's bytes are recomputed from the call where they
 * are used, for registers (p2p_send_ll says why). */
__device__ __noinline__ int p2p_recv_ll(P2pArgs &a, P2pCall &c, u64 j, u64 g, char *mine)
{
    enum { U = 2 };
    u64 *empty = (u64 *)(p2p_region(a, c.peer, a.rank) + CCL_P2P_EMPTY);
    const u64 at = j * c.chunk, tid = threadIdx.x, nt = blockDim.x;
    const u64 nl = ((c.bytes - at < c.chunk ? c.bytes - at : c.chunk) + 7) / 8;
    const char *lines = p2p_ll_at(a, mine, j, g);
    const u32 flag = p2p_flag(g);
    u64 w[U];
    int ok = 1;
    if (tid == 0) ok = p2p_take_header(a, c, g, p2p_header_at(a, mine, j, g), g, P2P_LL);
    if (ok) ok = p2p_ll_take<U>(a, c, g, lines, tid, nt, nl, flag, w);
    if (!__syncthreads_and(ok)) return 0;
#pragma unroll
    for (int u = 0; u < U; u++) {
        const u64 l = tid + u * nt;
        if (l < nl) p2p_st_word(c.buf + at + 8 * l, w[u], c.bytes - at - 8 * l < 8 ? c.bytes - at - 8 * l : 8);
    }
    if (nl > U * nt) {
        for (u64 base = tid + U * nt; ok && base < nl; base += U * nt) {
            ok = p2p_ll_take<U>(a, c, g, lines, base, nt, nl, flag, w);
#pragma unroll
            for (int u = 0; ok && u < U; u++) {
                const u64 l = base + u * nt;
                if (l < nl) p2p_st_word(c.buf + at + 8 * l, w[u], c.bytes - at - 8 * l < 8 ? c.bytes - at - 8 * l : 8);
            }
        }
        if (!__syncthreads_and(ok)) return 0;
    }
    if (tid == 0) p2p_store(&empty[j], g + 1);
    return 1;
}

/* An eager message: this block's lanes, in chunk order; a chunk's slot is given back
 * while the next one is copied out. */
__device__ __noinline__ int p2p_recv_eager(P2pArgs &a, P2pCall &c, u64 K, u64 L, u64 b, u64 B, char *mine, const u64 *full,
                              u64 *empty)
{
    const u64 first = p2p_gen[0];
    u64 pj = 0, pg = 0;
    int have = 0;
    for (u64 row = 0; row * L < K; row++)
        for (u64 j = b; j < L && row * L + j < K; j += B) {
            const u64 k = row * L + j, g = p2p_gen[j] + row, at = k * c.chunk;
            int ok = 1;
            if (p2p_is_waiter())
                ok = p2p_take_header(a, c, first, p2p_header_at(a, mine, j, g), g, P2P_EAGER) &&
                     p2p_wait(a, c, first, &full[j], g + 1);
            ok = __syncthreads_and(ok);
            if (threadIdx.x == 0 && have) p2p_store(&empty[pj], pg + 1);
            if (!ok) return 0;
            p2p_copy_workers(c.buf + at, p2p_payload_at(a, mine, j, g),
                             c.bytes - at < c.chunk ? c.bytes - at : c.chunk);
            have = 1, pj = j, pg = g;
        }
    __syncthreads();
    if (threadIdx.x == 0 && have) p2p_store(&empty[pj], pg + 1);
    return 1;
}

/* A direct message: the sender wrote it into c.buf. Lane 0's owner checks the header;
 * one thread a lane this block owns waits until the lane's FULL is past the message,
 * and empties it. */
__device__ __noinline__ int p2p_recv_direct(P2pArgs &a, P2pCall &c, u64 K, u64 L, u64 b, u64 B, char *mine, const u64 *full,
                               u64 *empty)
{
    const u64 g0 = p2p_gen[0], tid = threadIdx.x, nt = blockDim.x;
    int ok = 1;
    if (b == 0 && tid == 0) ok = p2p_take_header(a, c, g0, p2p_header_at(a, mine, 0, g0), g0, P2P_DIRECT);
    for (u64 j = b + (tid - 32) * B; tid >= 32 && ok && j < L; j += (nt - 32) * B) {
        const u64 end = p2p_gen[j] + p2p_lane_chunks(c, j);
        ok = p2p_wait(a, c, g0, &full[j], end);
        if (ok) p2p_store(&empty[j], end);
    }
    return __syncthreads_and(ok);
}

/* The calls [i0, i1) of one receive channel, block b of its B. Block 0 first posts every
 * receive of the channel in the sender's heap. */
__device__ int p2p_recv(P2pArgs &a, u64 i0, u64 i1, u64 b, u64 B)
{
    P2pCall &c0 = a.call[i0];
    char *mine = p2p_region(a, a.rank, c0.peer), *theirs = p2p_region(a, c0.peer, a.rank);
    const u64 *full = (const u64 *)(mine + CCL_P2P_FULL);
    u64 *start = (u64 *)(mine + CCL_P2P_RSTART), *empty = (u64 *)(theirs + CCL_P2P_EMPTY);
    u64 *begun = (u64 *)(mine + CCL_P2P_RBEGUN);
    p2p_read_starts(a, start, b, B);
    if (b == 0)
        for (u64 i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
            u64 g0 = p2p_peek(&start[0]);
            for (u64 x = i0; x < i; x++) g0 += p2p_lane_chunks(a.call[x], 0);
            p2p_post(p2p_post_at(theirs, a.call[i].nth), a.call[i], g0);
        }
    __syncthreads();
    const u64 first = p2p_gen[0];
    if (threadIdx.x == 0) p2p_arrive(begun);
    for (u64 i = i0; i < i1; i++) {
        P2pCall &c = a.call[i];
        const u64 K = c.chunks, L = c.lanes, kind = p2p_kind(a, c);
        if (kind == P2P_LL) {
            for (u64 j = b; j < L; j += B)
                if (!p2p_recv_ll(a, c, j, p2p_gen[j], mine)) return 0;
        } else if (kind == P2P_DIRECT) {
            if (b < L && !p2p_recv_direct(a, c, K, L, b, B, mine, full, empty)) return 0;
        } else if (b < L && !p2p_recv_eager(a, c, K, L, b, B, mine, full, empty)) {
            return 0;
        }
        __syncthreads();
        if (threadIdx.x == 0)
            for (u64 j = 0; j < L; j++) p2p_gen[j] += p2p_lane_chunks(c, j);
        __syncthreads();
    }
    return p2p_channel_done(a, c0, b, B, first, start, begun, 0, 0);
}

/* ---- the launch ---- */

extern "C" __global__ void __launch_bounds__(512) ccl_p2p(const __grid_constant__ struct ccl_p2p_args a)
{
#if __CUDA_ARCH__ >= 900
    /* Launched as a programmatic dependent (gpu/backend.c's ccl__gpu_launch), it may be
     * resident before the stream's previous kernel has ended: wait for it and its memory. */
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    /* This block's channel: the calls [i0, i1) that share its first block. */
    u64 i0 = 0;
    while (i0 + 1 < a.ncalls && a.call[i0].first_block + a.call[i0].blocks <= blockIdx.x) i0++;
    u64 i1 = i0 + 1;
    while (i1 < a.ncalls && a.call[i1].first_block == a.call[i0].first_block) i1++;
    const u64 B = a.call[i0].blocks, b = blockIdx.x - a.call[i0].first_block;
    if (a.call[i0].kind == 0) p2p_send(a, i0, i1, b, B);
    else p2p_recv(a, i0, i1, b, B);
}
