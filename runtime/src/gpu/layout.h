/* gpu/layout.h: the GPU backend's heap regions that others size ahead of time (ccl-perf's
 * heap estimate, tests/cuda/nvrtc_compile's check against the emitter). Plain C, no
 * CUDA: it builds without the GPU backend too. */
#ifndef CCL_GPU_LAYOUT_H
#define CCL_GPU_LAYOUT_H

#include "internal.h"

/* The region an LL run of p needs (emit_cuda.c's layout, checked against the emitter by
 * tests/cuda/nvrtc_compile): the scratch buffers in two halves by call parity, then two
 * halves of LL lines (2 bytes of line per data byte) for every chunk of in, out and one
 * scratch half. */
static inline size_t ccl__ll_region_bytes(const Program *p, size_t CS, size_t esize)
{
    size_t scratch = 0; /* chunks of one copy of the scratch buffers, whatever p's protocol */
    for (int b = BUF_SCRATCH0; b < p->nbufs; b++)
        scratch += (size_t)p->buf_chunks[b];
    size_t all = (size_t)p->buf_chunks[BUF_IN] + (size_t)p->buf_chunks[BUF_OUT] + scratch;
    return (2 * scratch + 2 * 2 * all) * CS * esize;
}

#endif
