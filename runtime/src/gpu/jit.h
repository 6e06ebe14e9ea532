/* gpu/jit.h: NVRTC compilation with a disk cache (runtime/src/gpu/jit.c).
 *
 * libnvrtc is loaded with dlopen on first use, so libccl links and runs on machines
 * without the CUDA toolkit; there every call fails with a message saying so. */
#ifndef CCL_JIT_H
#define CCL_JIT_H

#include <stddef.h>

typedef struct {
    void *image;        /* malloc'd cubin; free() it */
    size_t size;
    int cache_hit;      /* 1: read from the disk cache, NVRTC not run */
    double ms;          /* wall time of the whole call */
} CclJitResult;

/* Compiles `source` (a translation unit named `name` in messages) for sm_<arch> (e.g.
 * 90) into a cubin. With cache_dir non-NULL, the cubin is looked up first under a key
 * hashed from source, options, NVRTC version and arch, and stored there after a
 * compile (the directory is created, mode 0700; one that another user owns or can write
 * is not used; a cache that cannot be written is not an error).
 * Returns 0, or -1 with a message in err: NVRTC's log plus the generated source line
 * the first error points at. */
int ccl__jit_compile(const char *source, const char *name, int arch, const char *cache_dir,
                     CclJitResult *res, char *err, size_t errlen);

/* NVRTC's version as major*1000 + minor*10, or -1 (message in err) when libnvrtc cannot
 * be loaded. */
int ccl__jit_nvrtc_version(char *err, size_t errlen);

#endif
