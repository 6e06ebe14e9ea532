/* gpu/abi.h: the kernel ABI between compiler/emit_cuda.c's generated code and the GPU
 * backend. Field for field the `struct ccl_args` and `struct ccl_err` of the generated
 * prelude (every field 8 bytes, so host and device layouts agree); change both together
 * and bump CCL_ABI_VERSION in emit_cuda.c (now 4). */
#ifndef CCL_GPU_ABI_H
#define CCL_GPU_ABI_H

#include <stdint.h>

/* Written by the first wait that times out on a rank (host-mapped pinned memory). */
typedef struct {
    uint64_t flag;            /* 0: none; 2: being written; 1: complete */
    uint64_t rank, tb, inst, line, peer, slot, expected, seen;
} CclGpuErr;

/* ccl_kernel's one parameter, passed by value. */
typedef struct {
    uint64_t in, out;         /* this rank's in and out */
    uint64_t peers;           /* device table of every rank's heap base (as mapped here) */
    uint64_t in_off, out_off; /* heap offsets of in/out for remote access (~0: none) */
    uint64_t scratch_off, sem_off;
    uint64_t expected;        /* device: nsems*I + 1 + grid counters, zero at first */
    uint64_t err;             /* device address of the host-mapped CclGpuErr */
    uint64_t n;               /* U: elements per unit */
    uint64_t in_ustride, out_ustride;
    uint64_t cs;              /* chunk stride, elements */
    uint64_t ninst, nslices;
    uint64_t timeout_ns;
    uint64_t ll_salt;         /* mixed into LL flags (per LL region, equal on every rank) */
    uint64_t in_stride, out_stride; /* peer p's in: its heap + in_off + (p - rank) * in_stride */
    uint64_t port;            /* device address of the host-mapped CclPortFifo array, or 0 */
} CclGpuArgs;

/* Port channels: one request queue per grid block, in host-mapped pinned memory. The
 * block's thread 0 fills req[k % DEPTH] and then sets its seq to k + 1; the proxy
 * (gpu/proxy.c) copies requests in order and stores in `done` how many have landed. */
#define CCL_PORT_DEPTH 64
#define CCL_SLOT_PORT (~2ull) /* CclGpuErr.slot of a timed-out port-channel wait */

typedef struct {
    uint64_t dst, src, bytes, seq;
} CclPortReq;

typedef struct {
    uint64_t done;
    uint64_t pad[7];
    CclPortReq req[CCL_PORT_DEPTH];
} CclPortFifo;

#endif
