/* compiler/cuda/copy.cuh: the ccl_copy kernel, which both of libccl's CUDA sources carry:
 * the prelude of every generated module (compiler/cuda/prelude.cuh: a call's staging
 * copies) and the point-to-point kernel's (runtime/src/gpu/p2p.cu: the copies of a v
 * call run as messages). Inlined into each at its #include by compiler/cuda/embed.sh;
 * expects abi.h and the u64 typedef before it. */
/* Staging copies (a user buffer to or from the heap or private staging). A kernel of
 * ours, not cuMemcpyAsync: the driver's device-to-device copy may load code of its own
 * on first use, which waits for every kernel running in the context, and on a shared
 * GPU those are peers spinning for this rank's next kernel. Once this rank's abort word
 * (offset 0 of its heap, device memory) is set, by any failure of this rank's kernels
 * or a peer's, it copies nothing, so a failed call never writes what it did not compute
 * into recvbuf. The word is read once per thread from device memory (an L2 hit, not a
 * trip to the host); the loop then moves 16-byte vectors, four in flight per thread.
 * Where dst and src sit alike within 16 bytes (both aligned, or a block of an odd count
 * at the same offset in two aligned buffers), the bytes before dst's first 16-byte
 * boundary go one by one and the rest as vectors; otherwise every byte goes alone. */
extern "C" __global__ void ccl_copy(char *dst, const char *src, u64 bytes, const u64 *abort_word)
{
#if __CUDA_ARCH__ >= 900
    /* Launched as a programmatic dependent (gpu/stage.c), it may be resident before the
     * stream's previous kernel has ended (a collective's kernel lets its dependents launch
     * once all its blocks run): wait for that kernel and its memory. A no-op on a plain
     * launch. */
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    if (*(const volatile u64 *)abort_word) return;
    const u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x, step = (u64)gridDim.x * blockDim.x;
    u64 done = 0;
    if ((((u64)dst ^ (u64)src) & 15) == 0) {
        u64 head = (16 - ((u64)dst & 15)) & 15;
        if (head > bytes) head = bytes;
        if (i < head) dst[i] = src[i];
        dst += head, src += head, bytes -= head;
        const u64 n = bytes / 16;
        u64 j = i;
        for (; j + 3 * step < n; j += 4 * step) {
            uint4 v[4];
#pragma unroll
            for (int u = 0; u < 4; u++) v[u] = ((const uint4 *)src)[j + u * step];
#pragma unroll
            for (int u = 0; u < 4; u++) ((uint4 *)dst)[j + u * step] = v[u];
        }
        for (; j < n; j += step) ((uint4 *)dst)[j] = ((const uint4 *)src)[j];
        done = n * 16;
    }
    for (u64 j = done + i; j < bytes; j += step) dst[j] = src[j];
}
