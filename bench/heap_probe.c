/* heap_probe.c: copy-engine rate between two ranks' symmetric heaps (one process, two
 * GPUs, libccl's own memory), to tell a slow heap mapping from a slow proxy path.
 *
 *   cc -std=c11 -O2 -Iruntime/include -Iruntime/src -Icompiler -I/usr/local/cuda/include \
 *      bench/heap_probe.c build-gpu/libccl.a -o heap_probe -ldl -lm -lrt -lpthread
 *   ./heap_probe [MiB] */
#include <stdio.h>
#include <stdlib.h>

#include "ccl.h"
#include "gpu/driver.h"

int main(int argc, char **argv)
{
    size_t bytes = (size_t)(argc > 1 ? atoi(argv[1]) : 256) << 20;
    ccl_comm_t *comms[2];
    ccl_config_t cfg = {0};
    cfg.heap_bytes = 4 * bytes + ((size_t)256 << 20);
    if (ccl_comm_init_all(comms, 2, NULL, &cfg) != CCL_OK) {
        fprintf(stderr, "init: %s\n", ccl_comm_last_error(NULL));
        return 1;
    }
    void *buf[2];
    for (int r = 0; r < 2; r++)
        if (ccl_mem_alloc(comms[r], &buf[r], bytes) != CCL_OK) return 1;
    CUcontext ctx;
    CUdevice d;
    ccl__cu.DeviceGet(&d, 0);
    ccl__cu.DevicePrimaryCtxRetain(&ctx, d);
    ccl__cu.CtxSetCurrent(ctx);
    CUstream s;
    CUevent a, b;
    ccl__cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING);
    ccl__cu.EventCreate(&a, 0);
    ccl__cu.EventCreate(&b, 0);
    for (int w = 0; w < 2; w++) {
        ccl__cu.EventRecord(a, s);
        for (int i = 0; i < 10; i++)
            ccl__cu.MemcpyAsync((CUdeviceptr)buf[1], (CUdeviceptr)buf[0], bytes, s);
        ccl__cu.EventRecord(b, s);
        ccl__cu.EventSynchronize(b);
    }
    float ms;
    ccl__cu.EventElapsedTime(&ms, a, b);
    printf("rank 0 heap -> rank 1 heap, cuMemcpyAsync: %.1f GB/s (%p -> %p)\n", 10.0 * bytes / (ms * 1e-3) / 1e9,
           buf[0], buf[1]);
    return 0;
}
