/* gpu/layout.h: the GPU backend's heap regions that others size ahead of time (ccl-perf's
 * heap estimate, tests/cuda/nvrtc_compile's check against the emitter). Plain C, no
 * CUDA: it builds without the GPU backend too. */
#ifndef CCL_GPU_LAYOUT_H
#define CCL_GPU_LAYOUT_H

#include "internal.h"

/* Bytes of lines that carry a chunk of CS elements: LL's 16-byte lines carry 8 data
 * bytes, LL128's 128-byte lines 120 (emit_cuda.c's emit_ll_lines, the prelude's
 * ccl_ll128_lines_bytes); cclc_lines_ll128 says which. */
static inline size_t ccl__lines_bytes(const Program *p, Protocol proto, size_t CS, size_t esize)
{
    if (cclc_lines_ll128(p->coll, proto))
        return (CS * esize + 119) / 120 * 128;
    return 2 * CS * esize;
}

/* The region a run of p with lines (protocol ll or ll128) needs (emit_cuda.c's layout,
 * checked against the emitter by tests/cuda/nvrtc_compile): the scratch buffers, then
 * (LL128: from the next multiple of 128 bytes) two sets of lines for every chunk of in,
 * out and scratch, one per launch parity (a rank may start its next launch while a
 * peer still reads this one's lines: docs/internals.md, "The call entry"). */
static inline size_t ccl__ll_region_bytes(const Program *p, Protocol proto, size_t CS, size_t esize)
{
    size_t scratch = 0; /* chunks of the scratch buffers */
    for (int b = BUF_SCRATCH0; b < p->nbufs; b++)
        scratch += (size_t)p->buf_chunks[b];
    size_t all = (size_t)p->buf_chunks[BUF_IN] + (size_t)p->buf_chunks[BUF_OUT] + scratch;
    size_t lines_at = scratch * CS * esize;
    if (cclc_lines_ll128(p->coll, proto)) /* lines start on 128 bytes */
        lines_at = (lines_at + 127) / 128 * 128;
    return lines_at + 2 * all * ccl__lines_bytes(p, proto, CS, esize);
}

#endif
