// ll128_probe: does a warp's 128-byte LL128 line arrive whole?
//
// LL128 (compiler/cuda/prelude.cuh, ccl_xfer_ll128) puts 15 data words and one flag
// word in a 128-byte line, written by eight lanes of a warp in one instruction, and
// trusts a reader whose load returns the flag to have the data too. This probe writes
// lines exactly so and reads them exactly as ccl_ll128_recv does, with data every
// reader can predict, and counts lines whose flag was this round's while some data
// word was not: torn lines.
//
//   nvcc -arch=sm_90 -O2 -o /tmp/ll128_probe bench/ll128_probe.cu
//   /tmp/ll128_probe [ROUNDS] [PEER]   PEER: 0 = one GPU (writer and reader blocks side
//                                       by side), 1 = writer on GPU 0, lines and reader
//                                       on GPU 1 (NVLink where the GPUs have it)
//
// Each of B block pairs owns LINES lines (two halves, by round parity): writer block b
// waits until reader block b has finished round r - 2 (same half), writes round r, and
// reader block b spins on every line's flag, then checks the line's data.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

typedef unsigned long long u64;
enum { B = 32, THREADS = 256, LINES = 1024 }; // lines per block pair per half (128 KB)

__device__ __forceinline__ u64 word(u64 round, u64 line, u64 w)
{
    u64 h = round * 0x9e3779b97f4a7c15ull ^ (line << 8 | w) * 0xc2b2ae3d27d4eb4full;
    return h ^ (h >> 31);
}
__device__ __forceinline__ u64 now()
{
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void writer(char *lines, volatile u64 *ack, u64 rounds, int *stuck)
{
    const u64 b = blockIdx.x, k = threadIdx.x % 8, grp = threadIdx.x % 32 / 8, warp = threadIdx.x / 32;
    for (u64 r = 1; r <= rounds; r++) {
        if (threadIdx.x == 0) {
            u64 t0 = now();
            while (r > 2 && ack[b * 16] < r - 2)
                if (now() - t0 > 5000000000ull) { *stuck = 1; break; }
        }
        __syncthreads();
        if (*(volatile int *)stuck) return;
        char *half = lines + ((r & 1) * B + b) * (u64)LINES * 128;
        for (u64 line = warp * 4 + grp; line < LINES; line += THREADS / 8) {
            const u64 w0 = word(r, line, 2 * k), w1 = k == 7 ? r : word(r, line, 2 * k + 1);
            asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" :: "l"(half + line * 128 + k * 16), "l"(w0),
                         "l"(w1) : "memory");
        }
    }
}

__global__ void reader(const char *lines, u64 *ack, u64 rounds, u64 *torn, u64 *torn_polled, int *stuck)
{
    const u64 b = blockIdx.x, k = threadIdx.x % 8, grp = threadIdx.x % 32 / 8, warp = threadIdx.x / 32;
    for (u64 r = 1; r <= rounds; r++) {
        const char *half = lines + ((r & 1) * B + b) * (u64)LINES * 128;
        for (u64 line = warp * 4 + grp; line < LINES; line += THREADS / 8) {
            u64 v0, v1, t0 = now();
            int polled = 0;
            for (;;) {
                asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(v0), "=l"(v1)
                             : "l"(half + line * 128 + k * 16) : "memory");
                const u64 f = __shfl_sync(0xffffffffu, v1, (threadIdx.x % 32) | 7);
                if (__all_sync(0xffffffffu, f == r)) break;
                polled = 1;
                if (__any_sync(0xffffffffu, now() - t0 > 5000000000ull)) { *stuck = 2; return; }
            }
            const int bad = v0 != word(r, line, 2 * k) || (k != 7 && v1 != word(r, line, 2 * k + 1));
            const unsigned any = __ballot_sync(0xffffffffu, bad);
            const unsigned mine = any >> (threadIdx.x % 32 / 8 * 8) & 0xffu; // this line's eight lanes
            if (k == 0 && mine) {
                atomicAdd(torn, 1ull);
                if (polled) atomicAdd(torn_polled, 1ull);
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence_system();
            *(volatile u64 *)&ack[b * 16] = r;
        }
    }
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

int main(int argc, char **argv)
{
    const u64 rounds = argc > 1 ? strtoull(argv[1], 0, 10) : 2000;
    const int peer = argc > 2 ? atoi(argv[2]) : 0;
    int ngpu = 0;
    CK(cudaGetDeviceCount(&ngpu));
    if (peer && ngpu < 2) { printf("skipped: PEER=1 needs two GPUs, this machine has %d\n", ngpu); return 0; }
    const int wdev = 0, rdev = peer ? 1 : 0;
    char *lines; u64 *ack, *torn; int *stuck;
    CK(cudaSetDevice(rdev));
    CK(cudaMalloc(&lines, 2ull * B * LINES * 128));
    CK(cudaMemset(lines, 0, 2ull * B * LINES * 128));
    CK(cudaMalloc(&ack, B * 16 * sizeof(u64)));
    CK(cudaMemset(ack, 0, B * 16 * sizeof(u64)));
    CK(cudaMallocManaged(&torn, 2 * sizeof(u64)));
    CK(cudaMallocManaged(&stuck, sizeof(int)));
    torn[0] = torn[1] = 0;
    *stuck = 0;
    if (peer) {
        CK(cudaSetDevice(wdev));
        CK(cudaDeviceEnablePeerAccess(rdev, 0));
        CK(cudaSetDevice(rdev));
        CK(cudaDeviceEnablePeerAccess(wdev, 0));
    }
    CK(cudaDeviceSynchronize());
    // Both kernels loaded before either runs: lazy loading of the writer while the reader
    // spins would wait for the reader, which waits for the writer.
    cudaFuncAttributes fa;
    CK(cudaSetDevice(rdev));
    CK(cudaFuncGetAttributes(&fa, reader));
    CK(cudaSetDevice(wdev));
    CK(cudaFuncGetAttributes(&fa, writer));
    cudaStream_t ws, rs;
    CK(cudaSetDevice(rdev));
    CK(cudaStreamCreateWithFlags(&rs, cudaStreamNonBlocking));
    reader<<<B, THREADS, 0, rs>>>(lines, ack, rounds, torn, torn + 1, stuck);
    CK(cudaSetDevice(wdev));
    CK(cudaStreamCreateWithFlags(&ws, cudaStreamNonBlocking));
    writer<<<B, THREADS, 0, ws>>>(lines, ack, rounds, stuck);
    CK(cudaStreamSynchronize(ws));
    CK(cudaSetDevice(rdev));
    CK(cudaStreamSynchronize(rs));
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, rdev));
    const u64 total = rounds * B * LINES;
    printf("ll128_probe: %s, %s: %llu rounds x %d x %d lines = %llu lines read: %llu torn (%llu of them while the "
           "reader polled the line)%s\n", p.name, peer ? "writer on GPU 0, lines and reader on GPU 1" : "one GPU",
           rounds, (int)B, (int)LINES, total, torn[0], torn[1],
           *stuck ? (*stuck == 1 ? " [writer timed out]" : " [reader timed out]") : "");
    return *stuck ? 1 : 0;
}
