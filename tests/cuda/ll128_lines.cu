// ll128_lines: the prelude's LL128 send and receive alone, on one GPU (no runtime, no
// generated kernel). Block 0 sends n bf16 elements as lines (ccl_xfer_ll128), block 1
// receives them (ccl_ll128_recv) into dst; every element is compared, for counts around
// a line's 60 elements, several calls over the same lines (new flag each), 32 or 512
// threads, and source and destination aligned or 2 bytes off (an in-place call's unit
// of an odd count). tests/run-gpu.sh runs it; built there with nvcc:
//   nvcc -arch=sm_90 -Icompiler/cuda -o /tmp/ll128_lines tests/cuda/ll128_lines.cu
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#define CCL_PART_BYTES 240
#include "prelude_bf16.cuh"

// a: the fields a receive reads (peers, err, timeout); launch 0: no peer to check.
__global__ void pair(const char *src, char *lines, char *dst, u64 n, u64 flag, const struct ccl_args a, int *failed)
{
    if (blockIdx.x == 0) {
        char *const dl[1] = {0};
        char *const dr[1] = {lines};
        const char *const s[1] = {src};
        ccl_xfer_ll128<0, 1, 1>(dl, dr, s, n, flag, threadIdx.x, blockDim.x);
    } else if (!ccl_ll128_recv(dst, lines, n, flag, threadIdx.x, blockDim.x, a, 0, 0, 0, 0, 0)) {
        *failed = 1;
    }
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    printf("FAIL cuda.ll128-lines: %s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

int main()
{
    const size_t counts[] = {1, 4, 59, 60, 61, 119, 120, 121, 4099, 1000003};
    const size_t maxn = 1000003, lines_bytes = (maxn * 2 + 119) / 120 * 128;
    char *src, *dst, *lines, *heap, **peers;
    struct ccl_err *err;
    int *failed;
    CK(cudaMalloc(&src, maxn * 2 + 16));
    CK(cudaMalloc(&dst, maxn * 2 + 16));
    CK(cudaMalloc(&lines, lines_bytes));
    CK(cudaMemset(lines, 0, lines_bytes));
    CK(cudaMalloc(&heap, 4096));
    CK(cudaMemset(heap, 0, 4096));
    CK(cudaMallocManaged(&peers, sizeof *peers));
    CK(cudaMallocManaged(&err, sizeof *err));
    CK(cudaMallocManaged(&failed, sizeof *failed));
    peers[0] = heap;
    memset(err, 0, sizeof *err);
    unsigned short *h = new unsigned short[maxn], *back = new unsigned short[maxn];
    int bad = 0;
    u64 flag = 0x5eed0000ull;
    for (int threads = 32; threads <= 512; threads *= 16)
        for (int skew = 0; skew < 4; skew++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
            for (int call = 0; call < 3; call++) {
                char *const s_at = src + 2 * (skew & 1), *const d_at = dst + (skew & 2);
                const size_t n = counts[c];
                for (size_t i = 0; i < n; i++) h[i] = (unsigned short)(0x3f80 + (i * 7 + call) % 97); // bf16 values
                CK(cudaMemcpy(s_at, h, n * 2, cudaMemcpyHostToDevice));
                CK(cudaMemset(d_at, 0xff, n * 2));
                *failed = 0;
                struct ccl_args a = {};
                a.peers = peers;
                a.err = err;
                a.timeout_ns = 2000000000ull;
                pair<<<2, threads>>>(s_at, lines, d_at, n, ++flag, a, failed);
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(back, d_at, n * 2, cudaMemcpyDeviceToHost));
                size_t wrong = 0, first = 0;
                for (size_t i = 0; i < n; i++)
                    if (back[i] != h[i] && !wrong++) first = i;
                if (wrong || *failed) {
                    printf("FAIL cuda.ll128-lines: %d threads, source %d and destination %d bytes off 16, n = %zu, "
                           "call %d: %zu elements wrong, the first %zu (got %#x want %#x)%s\n", threads, 2 * (skew & 1),
                           skew & 2, n, call, wrong, first, back[first], h[first],
                           *failed ? ", the receive gave up" : "");
                    bad = 1;
                }
            }
    if (!bad) printf("ok cuda.ll128-lines\n");
    return bad;
}
