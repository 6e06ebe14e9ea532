/* nvrtc_compile: every rank's generated CUDA of one algorithm compiles through NVRTC.
 *
 *   nvrtc_compile FILE.ccl N [--arch SM] [--dtype T] [--op O] [--protocol P] [--emit R]
 *
 * Compiles FILE for N ranks (root 0), emits each rank's kernel and compiles it with
 * the runtime's JIT (runtime/src/gpu/jit.c, no cache) for sm_SM (default 90). Prints one
 * "ok" or "FAIL" line per rank; exits 0 when all passed, 1 otherwise, 77 when NVRTC is
 * not available or the algorithm does not admit N. With --emit R it only prints rank R's source (for golden files). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cclc.h"
#include "internal.h"
#include "gpu/jit.h"
#include "gpu/layout.h"

/* The bytes of line region the emitted kernel addresses for chunks of CS elements of
 * esize bytes, from its header ("after S scratch chunks: T chunks x ..., two sets: ..."):
 * 0 when it has no lines, -1 when it has lines but its header does not say where. */
static long emitted_ll_region(const char *src, long CS, long esize)
{
    int ll128 = strstr(src, " * LL128: ") != NULL;
    if (!ll128 && !strstr(src, " * LL: "))
        return 0;
    const char *at = strstr(src, "(after ");
    long s, t;
    if (!at || sscanf(at, "(after %ld scratch chunks: %ld chunks x", &s, &t) != 2)
        return -1;
    long sets = strstr(at, ", two sets: one per launch parity") ? 2 : 1;
    if (ll128) /* 128-byte lines of 120 data bytes, from a multiple of 128 bytes */
        return (s * CS * esize + 127) / 128 * 128 + sets * t * ((CS * esize + 119) / 120 * 128);
    return s * CS * esize + sets * t * 2 * CS * esize;
}

static char *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (buf) buf[n] = 0;
    *size = n;
    return buf;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: nvrtc_compile FILE.ccl N [--arch SM] [--dtype T] [--op O] [--protocol P] [--emit R]\n");
        return 2;
    }
    const char *file = argv[1];
    int nranks = atoi(argv[2]), arch = 90, emit_rank = -1;
    EmitOptions eo = {.dtype = "bf16", .op = "sum", .protocol = (Protocol)-1};
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--arch")) arch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dtype")) eo.dtype = argv[i + 1];
        else if (!strcmp(argv[i], "--op")) eo.op = argv[i + 1];
        else if (!strcmp(argv[i], "--emit")) emit_rank = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--protocol"))
            eo.protocol = !strcmp(argv[i + 1], "ll128") ? PROTO_LL128 : !strcmp(argv[i + 1], "ll") ? PROTO_LL : PROTO_SIMPLE;
        else {
            fprintf(stderr, "nvrtc_compile: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    size_t size;
    char *text = read_all(file, &size);
    if (!text) {
        printf("FAIL %s: cannot read\n", file);
        return 1;
    }
    Compilation c;
    int rc = cclc_compile_source(&c, file, text, size, nranks, 0);
    if (rc == COMPILE_NOT_ADMITTED) {
        printf("skipped: %s does not admit N=%d\n", file, nranks);
        cclc_compilation_free(&c);
        return 77;
    }
    if (rc != 0) {
        printf("FAIL %s N=%d: does not compile:\n%s", file, nranks, c.diag.out ? c.diag.out : "");
        cclc_compilation_free(&c);
        return 1;
    }
    if ((int)eo.protocol < 0) eo.protocol = c.prog->protocol;
    if (emit_rank >= 0) {
        cclc_emit_cuda(stdout, c.plan, emit_rank, &eo);
        cclc_compilation_free(&c);
        free(text);
        return 0;
    }
    char err[16384];
    if (ccl__jit_nvrtc_version(err, sizeof err) < 0) {
        printf("skipped: %s\n", err);
        return 77;
    }
    int failed = 0;
    for (int r = 0; r < nranks; r++) {
        char *src = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&src, &len);
        cclc_emit_cuda(m, c.plan, r, &eo);
        fclose(m);
        /* The runtime allocates the region the kernel will address (at a chunk stride
         * that is no multiple of a line's data). */
        const long CS = 1000, esize = 2;
        long ll = emitted_ll_region(src, CS, esize);
        size_t want = ccl__ll_region_bytes(c.prog, eo.protocol, CS, esize);
        if (cclc_coll_is_v(c.prog->coll)) /* its kernel lays its region out in the v arena and checks the fit */
            ll = 0;
        if (ll < 0) {
            printf("FAIL %s N=%d rank %d: the kernel has lines, but its header does not say where they are\n", file,
                   nranks, r);
            failed = 1;
        } else if (ll > 0 && (size_t)ll != want) {
            printf("FAIL %s N=%d rank %d: the kernel addresses %ld bytes of line region, the runtime allocates %zu\n",
                   file, nranks, r, ll, want);
            failed = 1;
        } else if (ll > 0 && (ccl__lines_chunk_capacity(c.prog, eo.protocol, want) < (size_t)(CS * esize) ||
                              ccl__lines_chunk_capacity(c.prog, eo.protocol, want) > (size_t)(CS * esize) + 120)) {
            /* At least the call's chunk (LL128: up to a line more fits the same lines). */
            printf("FAIL %s N=%d rank %d: a region of %zu bytes is laid out for chunks of %zu bytes, want %ld\n", file,
                   nranks, r, want, ccl__lines_chunk_capacity(c.prog, eo.protocol, want), CS * esize);
            failed = 1;
        }
        char name[64];
        snprintf(name, sizeof name, "rank%d.cu", r);
        CclJitResult res;
        if (ccl__jit_compile(src, name, arch, NULL, &res, err, sizeof err) != 0) {
            printf("FAIL %s N=%d rank %d %s/%s sm_%d:\n%s\n", file, nranks, r, eo.dtype, eo.op, arch, err);
            failed = 1;
        } else {
            printf("ok %s N=%d rank %d %s/%s sm_%d (%zu bytes, %.0f ms)\n", file, nranks, r, eo.dtype, eo.op, arch,
                   res.size, res.ms);
            free(res.image);
        }
        free(src);
    }
    cclc_compilation_free(&c);
    free(text);
    return failed;
}
