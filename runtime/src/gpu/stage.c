/* gpu/stage.c: the staging copies between a user's buffer and CCL's (gpu/backend.c decides
 * where a call stages): one copy, a copy in rows where a side is strided, and the copy
 * out of a piece that runs beside the next piece on a stream of its own. Each is the
 * module's ccl_copy kernel (compiler/cuda/copy.cuh: it copies nothing once this rank's
 * abort word is set); and the private staging they copy into, with the waits its
 * replacement needs. Calls the driver, the base and gpu/stream.c. */
#include <stdio.h>

#include "gpu/gpu.h"

/* Releases staging buffers replaced since the last synchronize: this rank's work is
 * done, so a free ordered on the quiet stream is safe at once. */
void ccl__gpu_free_retired(GpuComm *g)
{
    for (int i = 0; i < g->nretired; i++) ccl__cu.MemFreeAsync(g->retired[i], g->quiet);
    g->nretired = 0;
}

/* Waits for the work this comm queued. On a shared GPU only for the streams it queued
 * on: the whole context would include the peers' kernels, which may be waiting for
 * this rank's next call. The first failure, if any. */
CUresult ccl__gpu_wait_own_work(ccl_comm_t *comm)
{
    GpuComm *g = gpu_comm(comm);
    if (g->ncolocated == 1) return ccl__cu.CtxSynchronize();
    CUresult first = CUDA_SUCCESS;
    for (int i = 0; i < g->nmarks; i++) {
        CUresult r = ccl__cu.EventSynchronize(g->marks[i].done);
        if (first == CUDA_SUCCESS) first = r;
    }
    g->nmarks = 0;
    ccl__gpu_stream_unclaim_all(g->device, comm);
    return first;
}

/* Private staging `which` ([0] in, [1] out) of at least `bytes`, usable on stream s from
 * here on; grow-only, replaced buffers freed at the next synchronize (a launch may
 * still use them). Only this rank's kernels read it (a call's snapshot of its sendbuf:
 * gpu/backend.c's, and gpu/p2p.c's for exchanges run as messages). */
ccl_result_t ccl__gpu_private_stage(ccl_comm_t *comm, int which, size_t bytes, CUstream s, void **out)
{
    GpuComm *g = gpu_comm(comm);
    if (g->stage_bytes[which] < bytes) {
        if (g->stage[which]) {
            if (g->nretired == (int)(sizeof g->retired / sizeof g->retired[0])) {
                ccl__gpu_wait_own_work(comm);
                ccl__gpu_free_retired(g);
            }
            g->retired[g->nretired++] = g->stage[which];
            g->stage[which] = 0;
            g->stage_bytes[which] = 0;
        }
        size_t want = bytes < ((size_t)1 << 20) ? (size_t)1 << 20 : bytes;
        CU_CHECK(ccl__cu.MemAllocFromPoolAsync(&g->stage[which], want, g->stage_pool, s), "cuMemAllocFromPoolAsync (staging)");
        g->stage_bytes[which] = want;
    }
    *out = (void *)(uintptr_t)g->stage[which];
    return CCL_OK;
}


/* A staging copy on stream s. Up to four vectors per thread in flight, so blocks to
 * cover the bytes in one pass, up to 4 per SM. */
ccl_result_t ccl__gpu_stage_copy(ccl_comm_t *comm, CUfunction copy, void *dst, const void *src, size_t bytes,
                                 CUstream s, const char *what)
{
    GpuComm *g = gpu_comm(comm);
    uint64_t d = (uint64_t)(uintptr_t)dst, sp = (uint64_t)(uintptr_t)src, n = bytes, abort_word = g->own_va;
    void *args[] = {&d, &sp, &n, &abort_word};
    size_t blocks = (bytes / 64 + 511) / 512, most = 4 * (size_t)(g->sms > 0 ? g->sms : 32);
    blocks = blocks < 1 ? 1 : blocks > most ? most : blocks;
    /* A copy of one block goes as a programmatic dependent where the GPU allows
     * (ccl__gpu_launch): a copy out is then resident and waiting when the collective's
     * kernel ends, not launched then (0.3-0.5 us). A larger grid is launched plainly: its
     * blocks, resident early, would crowd onto the few SMs the collective's kernel leaves
     * free and copy from there (1.04-1.15x at 256 KB-4 MB: docs/perf/x2-vcoll section 9). */
    CUresult r = blocks == 1 ? ccl__gpu_launch(g, copy, 1, 512, s, args)
                             : ccl__cu.LaunchKernel(copy, (unsigned)blocks, 1, 1, 512, 1, 1, 0, s, args, NULL);
    if (r == CUDA_SUCCESS) return CCL_OK;
    char why[64];
    snprintf(why, sizeof why, "cuLaunchKernel (ccl_copy, staging %s)", what);
    return ccl__gpu_cu_fail(comm, r, why);
}

/* A staging copy of `bytes` in rows of `row` bytes where a side is strided (a piece of
 * a call too large for the heap, CclCall.send_pitch / recv_pitch; 0: packed): a
 * ccl_copy per row, else one for all. */
ccl_result_t ccl__gpu_stage_rows(ccl_comm_t *comm, CUfunction copy, char *dst, size_t dpitch, const char *src,
                                 size_t spitch, size_t bytes, size_t row, CUstream s, const char *what)
{
    if (!dpitch && !spitch) return ccl__gpu_stage_copy(comm, copy, dst, src, bytes, s, what);
    ccl_result_t res = CCL_OK;
    for (size_t u = 0; res == CCL_OK && u * row < bytes; u++)
        res = ccl__gpu_stage_copy(comm, copy, dst + u * (dpitch ? dpitch : row), src + u * (spitch ? spitch : row),
                                  row, s, what);
    return res;
}

/* The copy out of a piece that takes turns at two staged outs (CclCall.alternate):
 * on the side stream once the piece's kernel ended, so that it runs beside the next
 * piece's. The side stream runs its copies in order, so the call's last piece joins
 * them all back into s with its own. */
ccl_result_t ccl__gpu_copy_out_beside(ccl_comm_t *comm, CUfunction copy, const CclCall *call, const void *out,
                                      CUstream s)
{
    GpuComm *g = gpu_comm(comm);
    CU_CHECK(ccl__cu.EventRecord(g->piece_done, s), "cuEventRecord (a piece's kernel)");
    CU_CHECK(ccl__cu.StreamWaitEvent(g->side, g->piece_done, 0), "cuStreamWaitEvent (a piece's copy out)");
    ccl_result_t res = ccl__gpu_stage_rows(comm, copy, call->recv, call->recv_pitch, out, 0, call->out_bytes,
                                           call->count * call->esize, g->side, "recvbuf");
    if (res != CCL_OK) return res;
    CU_CHECK(ccl__cu.EventRecord(g->copied[call->turn], g->side), "cuEventRecord (a piece's copy out)");
    if (call->last)
        CU_CHECK(ccl__cu.StreamWaitEvent(s, g->copied[call->turn], 0), "cuStreamWaitEvent (the call's copies out)");
    return CCL_OK;
}
