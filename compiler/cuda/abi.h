/* abi.h: the kernel ABI, the one definition shared by the generated kernels and the GPU
 * backend. It compiles as C11 on the host (runtime/src/gpu_backend.c, gpu_proxy.c) and as
 * CUDA in the kernel: the Makefile inlines it into prelude.cuh, and emit_cuda.c prints
 * that into every kernel. Every field is 8 bytes (a device pointer is its address on the
 * host), so host and device layouts agree. Bump CCL_ABI_VERSION on any change. */
#ifndef CCL_ABI_H
#define CCL_ABI_H

#define CCL_ABI_VERSION 13

#ifdef __CUDACC__
typedef unsigned long long ccl_u64;
#define CCL_DEVPTR(T) T
#else
#include <stdint.h>
typedef uint64_t ccl_u64;
#define CCL_DEVPTR(T) ccl_u64
#endif

/* Written by the first wait that times out on a rank (host-mapped pinned memory). */
typedef struct ccl_err {
    ccl_u64 flag;            /* 0: none; 2: being written; 1: complete */
    ccl_u64 rank, tb, inst, line, peer, slot, expected, seen;
} CclGpuErr;

/* What one call runs, so that ranks running different calls fail instead of mixing
 * data. The common code (runtime/src/algorithm.c) fills it per call; each rank
 * publishes it in its own heap header (ring entry seq % CCL_IDENT_RING at offset
 * CCL_IDENT_OFF) before it touches a peer, and compares its hash with every peer's of
 * the same call: the CPU backend's worker reads the peers' entries; a GPU kernel's
 * prologue also pushes {launch, hash} (one 16-byte store) into every peer's inbox and
 * polls its own, so that it waits on local memory, not on a round trip over the link.
 * A peer is never more than one call ahead of a rank that waits for it there, so
 * neither ring overwrites an entry still read. The host reads the entries to name both
 * sides of a difference. */
#define CCL_IDENT_OFF 256
#define CCL_IDENT_RING 4
/* GPU kernels number their launches, per rank (the word at CCL_LAUNCH_OFF: launches
 * << 32 | blocks of the current launch that arrived), because a replayed CUDA graph
 * repeats its calls' seq: the launch number is new at every launch and the same on
 * every rank for the same call. The inbox holds the 16-byte pair {launch, hash} that
 * rank `from` pushed for its launch L, in rank `to`'s heap at
 * CCL_INBOX_OFF + ((L % CCL_INBOX_RING) * CCL_INBOX_RANKS + from) * 16. */
#define CCL_LAUNCH_OFF 64
#define CCL_INBOX_OFF 4096
#define CCL_INBOX_RING 2
#define CCL_INBOX_RANKS 1024 /* cclc.h's CCLC_MAX_RANKS */
#define CCL_INBOX_END (CCL_INBOX_OFF + CCL_INBOX_RING * CCL_INBOX_RANKS * 16)
typedef struct ccl_ident {
    ccl_u64 seq;             /* 1 + the comm's calls before this one (the CPU backend writes it last) */
    ccl_u64 hash;            /* of the fields from plan to allocs: the one word compared */
    ccl_u64 plan;            /* the algorithm: FNV of its source, N and root */
    ccl_u64 shape;           /* instances | slices << 16 | protocol << 32 | threads << 40 */
    ccl_u64 count;
    ccl_u64 kind;            /* dtype << 8 | op (0 where the collective does not reduce) */
    ccl_u64 in_off, out_off; /* heap offsets peers use (rank-independent form; ~0: none) */
    ccl_u64 heap;            /* FNV of the live ccl_mem_alloc buffers (offset, size) and the
                                semaphore and scratch offsets: the heap layout peers rely on */
    ccl_u64 allocs;          /* live ccl_mem_alloc buffers */
    ccl_u64 name[6];         /* the algorithm's file name, NUL-padded (not hashed: for messages) */
} CclIdent;
#define CCL_SLOT_IDENT (~3ull) /* the error record's slot for a call that differs from a peer's
                                  (line: seq, peer, expected: our hash, seen: the peer's) */
#define CCL_SLOT_IDENT_WAIT (~4ull) /* ... for a peer that did not start the call in time */

/* A v-collective's segment table (runtime/src/vcoll.c fills it, internal.h says more):
 * for one rank and one call, CCL_VT_ROWS rows of N words (the count and displacement,
 * in elements, of every unit of in and of out), then CCL_VT_TAIL words: the heap offsets
 * where peers reach this rank's in and out (~0: nowhere), the staging bytes it keeps at
 * the end of its v arena, and the fence count. Each rank publishes its table in its
 * vring entry (seq % CCL_IDENT_RING, at heap offset ccl_args.vring_off) before the
 * call's identity; the kernel gets its own as its second parameter (struct ccl_vtable,
 * emitted per N). */
#define CCL_VT_IN_COUNT 0
#define CCL_VT_IN_DISPL 1
#define CCL_VT_OUT_COUNT 2
#define CCL_VT_OUT_DISPL 3
#define CCL_VT_ROWS 4
#define CCL_VT_IN_OFF 0
#define CCL_VT_OUT_OFF 1
#define CCL_VT_STAGE_BYTES 2
#define CCL_VT_FENCE 3       /* 0, unused (a word kept so that the layout stays put) */
#define CCL_VT_TAIL 4
#define CCL_VT_WORDS(N) (CCL_VT_ROWS * (N) + CCL_VT_TAIL)
/* The vring: CCL_IDENT_RING entries of a table each, then (GPU) the v inbox, into which
 * the block that announces a v call pushes its table to every peer, so that no kernel
 * reads a peer's table over the link: line k of rank `from`'s table for launch L is the
 * 16-byte pair {word, L ^ hash} (hash: the call identity's; one 16-byte store, so a load
 * sees both words or neither, and a stale line never passes for this launch's) at
 * CCL_VINBOX_LINE bytes from the vring's start. Two sets by launch parity: a rank pushes
 * launch L + 2's table only after every peer has entered launch L + 1, so has read L's. */
#define CCL_VRING_ENTRIES_BYTES(N) (CCL_IDENT_RING * CCL_VT_WORDS(N) * 8)
#define CCL_VINBOX_LINE(N, L, from, k) \
    (CCL_VRING_ENTRIES_BYTES(N) + ((((L) % 2) * (N) + (from)) * CCL_VT_WORDS(N) + (k)) * 16)
#define CCL_VRING_BYTES(N) (CCL_VRING_ENTRIES_BYTES(N) + 2 * (N) * CCL_VT_WORDS(N) * 16)
/* The error record of a v call whose tables fail the kernel's checks (every rank finds
 * the same, so none stops its peers). CCL_SLOT_VCOUNT: segment `inst` of rank `tb`'s
 * recvbuf, which rank `peer` sends: `seen` elements sent, `expected` expected.
 * CCL_SLOT_VSPACE: `expected` bytes of scratch (for a longest segment of `inst`
 * elements of dtype `tb`) and rank `peer`'s `seen` bytes of staging exceed the v
 * arena. `line`: the call's seq. */
#define CCL_SLOT_VCOUNT (~5ull)
#define CCL_SLOT_VSPACE (~6ull)

/* ccl_kernel's one parameter, passed by value. */
typedef struct ccl_args {
    CCL_DEVPTR(char *) in;   /* this rank's in and out for this launch */
    CCL_DEVPTR(char *) out;
    CCL_DEVPTR(char *const *) peers; /* device table: every rank's heap base, as mapped here */
    ccl_u64 in_off, out_off; /* heap offsets of in and out (for remote access; ~0: none) */
    ccl_u64 scratch_off;     /* heap offset of this algorithm's scratch */
    ccl_u64 sem_off;         /* heap offset of this algorithm's semaphores */
    CCL_DEVPTR(ccl_u64 *) expected; /* local device memory: slots*ninst + 1 + grid counters, zero at first */
    CCL_DEVPTR(struct ccl_err *) err; /* the host-mapped error record */
    ccl_u64 n;               /* elements per unit */
    ccl_u64 in_ustride, out_ustride; /* elements between units of in / out */
    ccl_u64 cs;              /* chunk stride in elements */
    ccl_u64 ninst, nslices;  /* instances per logical block, slices per chunk */
    ccl_u64 timeout_ns;      /* bound on every wait */
    ccl_u64 in_stride, out_stride; /* peer p's in is at its heap + in_off + (p - rank) * in_stride */
    ccl_u64 port;            /* host-mapped struct ccl_port_fifo per block (0: no port puts) */
    ccl_u64 vring_off;       /* v-collectives: heap offset of the vring (segment tables) */
    ccl_u64 varena_bytes;    /* ... and bytes of the v arena, at scratch_off (0 otherwise) */
    ccl_u64 lines_chunk;     /* a fixed-size run with lines: the bytes of a chunk its region is
                                laid out for (runtime/src/gpu/layout.h); its two sets of lines
                                sit where chunks of that size put them, whatever this call's
                                count, so a peer's next launch never writes lines this rank
                                still reads */
    struct ccl_ident id;     /* this call's identity (checked in the kernel's prologue) */
} CclGpuArgs;

/* Port channels: one request queue per grid block, in host-mapped pinned memory. The
 * block's thread 0 fills req[k % DEPTH] and then sets its seq to k + 1; the proxy
 * (runtime/src/gpu_proxy.c) copies requests in order and stores in `done` how many
 * have landed. */
#define CCL_PORT_DEPTH 64
#define CCL_SLOT_PORT (~2ull) /* the error record's slot for a timed-out port-channel wait */

typedef struct ccl_port_req {
    ccl_u64 dst, src, bytes; /* addresses as mapped in this process */
    ccl_u64 seq;             /* k + 1 once request k is complete */
} CclPortReq;

typedef struct ccl_port_fifo {
    ccl_u64 done;            /* written by the proxy: requests landed */
    ccl_u64 pad[7];
    struct ccl_port_req req[CCL_PORT_DEPTH];
} CclPortFifo;

/* Point-to-point (runtime/src/gpu/p2p.cu's ccl_p2p, the blocks of each channel of a
 * group; docs/gpu-backend.md, "Point-to-point groups"). The GPU lays out each channel
 * region its own way: the region of rank q in rank r's heap (chan_bytes at chan_off + q *
 * chan_bytes, what the common code reserves as q's channel: internal.h's CCL__P2P_*)
 * holds what the pair r, q needs on r's side, at these offsets:
 *   CCL_P2P_FULL   [lane]  written by q: chunks of q -> r that q published, per lane
 *   CCL_P2P_EMPTY  [lane]  written by q: chunks of r -> q that q emptied, per lane
 *   CCL_P2P_SSTART [lane]  r's own: chunks of r -> q per lane before this launch
 *   CCL_P2P_RSTART [lane]  r's own: the same for q -> r
 *   CCL_P2P_SZSTART        r's own: arrivals at CCL_P2P_SZC before this launch
 *   CCL_P2P_SZC            r's own: blocks' arrivals after their part of a direct send
 *   CCL_P2P_SBEGUN, CCL_P2P_RBEGUN  r's own: blocks of this launch's send (receive)
 *                          channel with q that have read the start counts
 *   CCL_P2P_DESC   [CCL_P2P_RING] written by q: the receives q posted for messages r -> q
 *                          (entry nth % CCL_P2P_RING), eight words each: nth, count,
 *                          dtype and direct as 32-bit halves, each with a flag, then the
 *                          receive's number (its lane-0 start + 1)
 *   CCL_P2P_HDRS   [lane][slot] written by q: each slot's header, six LL lines (128 bytes)
 *   ll_off         [lane][LL slot] written by q: LL lines (2 x ll_chunk bytes an LL slot)
 *   pay_off        [lane][slot] written by q: payloads (`payload` bytes a slot). */
#define CCL_P2P_MAX_CALLS 128 /* calls of one group on one comm (kernel parameter space) */
#define CCL_P2P_MAX_LANES 16
#define CCL_P2P_FULL 0
#define CCL_P2P_EMPTY 128
#define CCL_P2P_SSTART 256
#define CCL_P2P_RSTART 384
#define CCL_P2P_SZSTART 512
#define CCL_P2P_SZC 640
#define CCL_P2P_SBEGUN 768
#define CCL_P2P_RBEGUN 896
#define CCL_P2P_DESC 1024
#define CCL_P2P_RING 256      /* > twice the messages of one channel in one launch (p2p.cu says why) */
#define CCL_P2P_HDRS (CCL_P2P_DESC + CCL_P2P_RING * 64)
#define CCL_P2P_HDR_BYTES 128
#define CCL_P2P_NO_DIRECT (~0ull) /* a receive whose buffer the sender cannot write */

typedef struct ccl_p2p_call {
    ccl_u64 kind;            /* 0: send, 1: recv */
    ccl_u64 peer;
    CCL_DEVPTR(char *) buf;
    ccl_u64 count, dtype, bytes;
    ccl_u64 nth;             /* the message's number on its channel */
    ccl_u64 index;           /* 1-based place among the group's calls on this comm */
    ccl_u64 direct;          /* recv, bytes >= direct_min: buf as an offset from the sender's
                                view of this rank's heap base, where the sender may write it (a
                                ccl_mem_alloc or registered buffer, or ordinary memory the
                                sender's process mapped: gpu/ipc.c); else CCL_P2P_NO_DIRECT */
    ccl_u64 chunk;           /* bytes of its chunks (<= payload; a function of bytes alone) */
    ccl_u64 chunks;          /* max(1, ceil(bytes / chunk)): its chunks on its channel */
    ccl_u64 lanes;           /* min(chunks, the layout's lanes): chunk k goes to lane k % lanes */
    ccl_u64 rows, extra;     /* chunks / lanes and chunks % lanes (no 64-bit division on the GPU) */
    ccl_u64 first_block, blocks; /* its channel's blocks (the same for every call of a channel) */
} CclP2pGpuCall;

/* Written by the first call of a rank that fails (host-mapped pinned memory). */
typedef struct ccl_p2p_err {
    ccl_u64 flag;            /* 0: none; 2: being written; 1: complete */
    ccl_u64 what;            /* CCL_P2P_TIMEOUT or CCL_P2P_MISMATCH */
    ccl_u64 group;           /* the failing group's launch number on this comm */
    ccl_u64 calls;           /* and its calls on this comm */
    struct ccl_p2p_call call;
    ccl_u64 header[5];       /* mismatch: the slot header found (nth, count, dtype, index, calls) */
    ccl_u64 first;           /* the call's first chunk in lane 0 of its channel */
    ccl_u64 expected, seen;  /* timeout: lane 0's chunk count the message ends (send) or starts
                                (recv, 1-based) at, and the partner's count as last seen */
} CclP2pGpuErr;
#define CCL_P2P_TIMEOUT 1
#define CCL_P2P_MISMATCH 2

/* ccl_p2p's one parameter, passed by value (about 16 KB: CUDA 12.1's large kernel
 * parameters). Calls come grouped by channel (a channel's calls together, in call
 * order); layout fields are gpu/p2p.c's p2p_layout. */
typedef struct ccl_p2p_args {
    CCL_DEVPTR(char *const *) peers; /* every rank's heap base, as mapped here */
    CCL_DEVPTR(struct ccl_p2p_err *) err;
    ccl_u64 rank, nranks;
    ccl_u64 chan_off, chan_bytes; /* rank q's region at chan_off + q * chan_bytes of every heap */
    ccl_u64 lanes, slots;    /* lanes of a channel, slots of a lane (a power of two) */
    ccl_u64 payload;         /* bytes of a slot's payload (a multiple of 256) */
    ccl_u64 ll_max;          /* messages of at most this many bytes go as LL lines, in chunks
                                spread over the lanes (at most lanes x ll_chunk) */
    ccl_u64 ll_chunk;        /* bytes of an LL chunk at most */
    ccl_u64 ll_slots;        /* LL slots of a lane (a power of two, at most slots): a lane's
                                chunk g in LL slot g % ll_slots */
    ccl_u64 direct_min;      /* sends of at least this many bytes ask for the receiver's buffer */
    ccl_u64 ll_off, pay_off; /* offsets in a region (above) */
    ccl_u64 timeout_ns;
    ccl_u64 group;           /* this launch's number on this comm (for the error record) */
    ccl_u64 ncalls;
    struct ccl_p2p_call call[CCL_P2P_MAX_CALLS];
} CclP2pGpuArgs;

#endif
