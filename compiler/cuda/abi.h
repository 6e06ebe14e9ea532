/* abi.h: the kernel ABI, the one definition shared by the generated kernels and the GPU
 * backend. It compiles as C11 on the host (runtime/src/gpu_backend.c, gpu_proxy.c) and as
 * CUDA in the kernel: the Makefile inlines it into prelude.cuh, and emit_cuda.c prints
 * that into every kernel. Every field is 8 bytes (a device pointer is its address on the
 * host), so host and device layouts agree. Bump CCL_ABI_VERSION on any change. */
#ifndef CCL_ABI_H
#define CCL_ABI_H

#define CCL_ABI_VERSION 4

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
    ccl_u64 ll_salt;         /* mixed into LL flags: stale lines of other uses never match */
    ccl_u64 in_stride, out_stride; /* peer p's in is at its heap + in_off + (p - rank) * in_stride */
    ccl_u64 port;            /* host-mapped struct ccl_port_fifo per block (0: no port puts) */
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

#endif
