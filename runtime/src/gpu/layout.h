/* gpu/layout.h: the GPU backend's heap regions that others size ahead of time (ccl-perf's
 * heap estimate, tests/cuda/nvrtc_compile's check against the emitter). Plain C, no
 * CUDA: it builds without the GPU backend too. */
#ifndef CCL_GPU_LAYOUT_H
#define CCL_GPU_LAYOUT_H

#include "base.h"

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

/* The chunk bytes a region of `bytes` is laid out for (ccl_args.lines_chunk): the most C,
 * a multiple of 16, with ccl__ll_region_bytes(p, proto, C, 1) <= bytes. A multiple of 16
 * because an LL kernel's sets of lines start at multiples of C, and its lines are 16-byte
 * vectors (a region of any size, such as the capped shared ones of call.c, would leave
 * them misaligned); a call's chunk, CS * esize, is one too (ccl__chunk_stride), so it
 * still fits. The region only ever grows into a new allocation, so C is the same for
 * every call that uses it, and a set of lines stays where it is when the count changes:
 * a call's own chunks (CS * esize <= C) use the first bytes of each chunk's lines. */
static inline size_t ccl__lines_chunk_capacity(const Program *p, Protocol proto, size_t bytes)
{
    size_t scratch = 0;
    for (int b = BUF_SCRATCH0; b < p->nbufs; b++)
        scratch += (size_t)p->buf_chunks[b];
    size_t all = (size_t)p->buf_chunks[BUF_IN] + (size_t)p->buf_chunks[BUF_OUT] + scratch;
    /* Bytes of region per chunk byte, times 120 (LL128's lines carry 120 of 128 bytes):
     * the estimate is exact for LL and within a line of it for LL128. */
    size_t per120 = 120 * scratch + 2 * all * (cclc_lines_ll128(p->coll, proto) ? 128 : 240);
    size_t c = bytes / per120 * 120 + bytes % per120 * 120 / per120;
    while (c > 0 && ccl__ll_region_bytes(p, proto, c, 1) > bytes)
        c--;
    while (ccl__ll_region_bytes(p, proto, c + 1, 1) <= bytes)
        c++;
    return c / 16 * 16;
}

#endif
