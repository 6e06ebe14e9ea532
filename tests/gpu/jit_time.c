/* jit_time: cold and warm JIT cost of one algorithm's kernel.
 *
 *   jit_time FILE.ccl N RANK [DTYPE] [CACHE_DIR]
 *
 * Cold: emit + NVRTC compile into an empty cache directory (a fresh temporary one by
 * default). Warm: the same call again, answered by the disk cache. Where a GPU is
 * present, also cuModuleLoadData of the cubin. Prints one line per measurement. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cclc.h"
#include "gpu/driver.h"
#include "gpu/jit.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: jit_time FILE.ccl N RANK [DTYPE] [CACHE_DIR]\n");
        return 2;
    }
    int n = atoi(argv[2]), rank = atoi(argv[3]);
    const char *dtype = argc > 4 ? argv[4] : "bf16";
    char dir[256];
    if (argc > 5) snprintf(dir, sizeof dir, "%s", argv[5]);
    else {
        snprintf(dir, sizeof dir, "/tmp/ccl-jit-time-XXXXXX");
        if (!mkdtemp(dir)) return 1;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 1;
    static char text[1 << 20];
    size_t size = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    double t0 = now_ms();
    Compilation c;
    if (cclc_compile_source(&c, argv[1], text, size, n, 0) != 0) {
        printf("FAIL: %s\n", c.diag.out ? c.diag.out : "does not compile");
        return 1;
    }
    char *src = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&src, &len);
    EmitOptions eo = {.dtype = dtype, .op = "sum", .protocol = c.prog->protocol};
    cclc_emit_cuda(m, c.plan, rank, &eo);
    fclose(m);
    double t1 = now_ms();
    printf("cclc (parse, expand, verify, schedule, emit) %s N=%d rank %d: %.2f ms, %zu bytes of CUDA\n", argv[1], n,
           rank, t1 - t0, len);
    char err[16384];
    int arch = 90;
    int gpu = ccl__cuda_load(NULL, 0) == 0;
    CUcontext ctx;
    if (gpu) {
        CUdevice dev;
        int ma, mi;
        ccl__cu.DeviceGet(&dev, 0);
        ccl__cu.DeviceGetAttribute(&ma, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
        ccl__cu.DeviceGetAttribute(&mi, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
        arch = ma * 10 + mi;
        ccl__cu.DevicePrimaryCtxRetain(&ctx, dev);
        ccl__cu.CtxSetCurrent(ctx);
    }
    for (int pass = 0; pass < 2; pass++) {
        CclJitResult r;
        if (ccl__jit_compile(src, "kernel.cu", arch, dir, &r, err, sizeof err) != 0) {
            printf("FAIL: %s\n", err);
            return 1;
        }
        printf("%s JIT (sm_%d, cache %s): %.2f ms%s, cubin %zu bytes\n", pass ? "warm" : "cold", arch, dir, r.ms,
               r.cache_hit ? " (disk cache hit)" : " (NVRTC)", r.size);
        if (gpu) {
            double l0 = now_ms();
            CUmodule mod;
            CUresult cr = ccl__cu.ModuleLoadData(&mod, r.image);
            printf("%s cuModuleLoadData: %.2f ms (%s)\n", pass ? "warm" : "cold", now_ms() - l0,
                   cr == CUDA_SUCCESS ? "ok" : ccl__cuda_error(cr));
            if (cr == CUDA_SUCCESS) ccl__cu.ModuleUnload(mod);
        }
        free(r.image);
    }
    free(src);
    cclc_compilation_free(&c);
    return 0;
}
