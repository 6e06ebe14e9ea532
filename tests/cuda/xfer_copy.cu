// xfer_copy: the prelude's ccl_xfer copies alone, on one GPU (no runtime, no generated
// kernel): every pair of source and destination offsets mod 16 (bf16: 8 x 8), counts
// around a vector's 8 elements and large ones, one and two destinations (the same
// alignment, and different: the element loop), 32 and 512 threads. Every element is
// compared, and the 64 bytes on each side of every destination must stay untouched.
// tests/run-gpu.sh runs it, built with nvcc as a v-collective kernel is (4 or 2 vectors
// in flight) and as a fixed-size one (no shifted copies: element by element):
//   nvcc -arch=sm_90 -Icompiler/cuda [-DCCL_SHIFTED_COPIES=4] -o /tmp/xfer_copy tests/cuda/xfer_copy.cu
#include <cstdio>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#include "prelude_bf16.cuh"

__global__ void copy1(char *dst, const char *src, u64 n)
{
    char *const d[1] = {dst};
    const char *const s[1] = {src};
    ccl_xfer<1, 1>(d, s, n, threadIdx.x, blockDim.x);
}
__global__ void copy2(char *dst0, char *dst1, const char *src, u64 n)
{
    char *const d[2] = {dst0, dst1};
    const char *const s[1] = {src};
    ccl_xfer<2, 1>(d, s, n, threadIdx.x, blockDim.x);
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    printf("FAIL cuda.xfer-copy: %s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

enum { GUARD = 64, FILL = 0xA5 };

// The destination region [GUARD + off, + n elements) must hold src's elements from its
// offset, the guards FILL.
static int check(const std::vector<unsigned char> &got, const std::vector<unsigned char> &src, size_t soff,
                 size_t doff, size_t n, const char *what)
{
    const size_t lo = GUARD + doff, hi = lo + 2 * n;
    for (size_t i = 0; i < got.size(); i++) {
        const unsigned char want = i >= lo && i < hi ? src[soff + (i - lo)] : (unsigned char)FILL;
        if (got[i] != want) {
            printf("FAIL cuda.xfer-copy: %s: n %zu, source offset %zu, destination offset %zu: byte %zd of the "
                   "destination is %#x, expected %#x\n", what, n, soff, doff, (ssize_t)i - (ssize_t)lo, got[i], want);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *build = argc > 1 ? argv[1] : "";
    const size_t counts[] = {0, 1, 7, 8, 9, 15, 16, 17, 23, 100, 1000, 4097, 100003};
    const size_t maxn = 100003, span = 2 * maxn + 16 + 2 * GUARD;
    std::vector<unsigned char> host(2 * maxn + 16), got(span);
    for (size_t i = 0; i < host.size(); i++) host[i] = (unsigned char)(i * 7 + 3 + (i >> 9));
    char *src, *dst0, *dst1;
    CK(cudaMalloc(&src, host.size()));
    CK(cudaMalloc(&dst0, span));
    CK(cudaMalloc(&dst1, span));
    CK(cudaMemcpy(src, host.data(), host.size(), cudaMemcpyHostToDevice));
    int cases = 0;
    for (int threads : {32, 512})
        for (size_t n : counts)
            for (size_t soff = 0; soff < 16; soff += 2)
                for (size_t doff = 0; doff < 16; doff += 2)
                    for (int two = 0; two < 3; two++) {
                        /* two: 0 one destination; 1 two alike; 2 the second 2 bytes off the first */
                        const size_t doff1 = two == 2 ? (doff + 2) % 16 : doff;
                        CK(cudaMemset(dst0, FILL, span));
                        CK(cudaMemset(dst1, FILL, span));
                        if (two == 0)
                            copy1<<<1, threads>>>(dst0 + GUARD + doff, src + soff, n);
                        else
                            copy2<<<1, threads>>>(dst0 + GUARD + doff, dst1 + GUARD + doff1, src + soff, n);
                        CK(cudaGetLastError());
                        CK(cudaDeviceSynchronize());
                        char what[128];
                        snprintf(what, sizeof what, "%s, %d threads, %s", build, threads,
                                 two == 0 ? "one destination" : two == 1 ? "two alike" : "two unlike");
                        CK(cudaMemcpy(got.data(), dst0, span, cudaMemcpyDeviceToHost));
                        if (check(got, host, soff, doff, n, what)) return 1;
                        if (two) {
                            CK(cudaMemcpy(got.data(), dst1, span, cudaMemcpyDeviceToHost));
                            if (check(got, host, soff, doff1, n, what)) return 1;
                        }
                        cases++;
                    }
    printf("ok cuda.xfer-copy (%s: %d cases)\n", build, cases);
    return 0;
}
