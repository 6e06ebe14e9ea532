/* gpu/jit.c: NVRTC compilation of generated kernels, with a disk cache.
 *
 * Takes CUDA C source (from cclc_emit_cuda) and a target arch; gives a cubin. libnvrtc is
 * dlopen'd once (CCL_NVRTC names a file to try first), so nothing here needs the CUDA
 * toolkit at link time. An entry's file name is a 128-bit hash of everything that
 * determines the cubin (source, options, NVRTC version, arch), and the entry holds that
 * key in full (the whole source included), so a collision or a planted file is a miss.
 * The cache folder is used only when it is this user's and nobody else can write it
 * (util.c; created 0700). Entries are written to a temporary file and renamed into
 * place, so concurrent processes (one per GPU) never read a torn file; a cache that
 * cannot be read, written or trusted only costs a compile. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "gpu/jit.h"

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

static struct {
    pthread_once_t once;
    void *lib;
    char why[512];
    nvrtcResult (*version)(int *, int *);
    nvrtcResult (*create)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                          const char *const *);
    nvrtcResult (*compile)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*log_size)(nvrtcProgram, size_t *);
    nvrtcResult (*log)(nvrtcProgram, char *);
    nvrtcResult (*cubin_size)(nvrtcProgram, size_t *);
    nvrtcResult (*cubin)(nvrtcProgram, char *);
    nvrtcResult (*destroy)(nvrtcProgram *);
    const char *(*errstr)(nvrtcResult);
    int major, minor;
} jit = {.once = PTHREAD_ONCE_INIT};

static void jit_load(void)
{
    const char *names[] = {getenv("CCL_NVRTC"), "libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                           "/usr/local/cuda/lib64/libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so.13",
                           "/usr/local/cuda/lib64/libnvrtc.so.12"};
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !jit.lib; i++)
        if (names[i] && names[i][0]) jit.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!jit.lib) {
        const char *e = dlerror();
        snprintf(jit.why, sizeof jit.why, "cannot load libnvrtc (tried CCL_NVRTC, libnvrtc.so, "
                 "/usr/local/cuda/lib64): %s", e ? e : "not found");
        return;
    }
    struct { void **fn; const char *name; } syms[] = {
        {(void **)&jit.version, "nvrtcVersion"},
        {(void **)&jit.create, "nvrtcCreateProgram"},
        {(void **)&jit.compile, "nvrtcCompileProgram"},
        {(void **)&jit.log_size, "nvrtcGetProgramLogSize"},
        {(void **)&jit.log, "nvrtcGetProgramLog"},
        {(void **)&jit.cubin_size, "nvrtcGetCUBINSize"},
        {(void **)&jit.cubin, "nvrtcGetCUBIN"},
        {(void **)&jit.destroy, "nvrtcDestroyProgram"},
        {(void **)&jit.errstr, "nvrtcGetErrorString"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].fn = dlsym(jit.lib, syms[i].name);
        if (!*syms[i].fn) {
            snprintf(jit.why, sizeof jit.why, "libnvrtc lacks %s (too old?)", syms[i].name);
            dlclose(jit.lib);
            jit.lib = NULL;
            return;
        }
    }
    if (jit.version(&jit.major, &jit.minor) != 0) {
        snprintf(jit.why, sizeof jit.why, "nvrtcVersion failed");
        dlclose(jit.lib);
        jit.lib = NULL;
    }
}

static void jit_error(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void jit_error(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int ccl__jit_nvrtc_version(char *err, size_t errlen)
{
    pthread_once(&jit.once, jit_load);
    if (!jit.lib) {
        jit_error(err, errlen, "%s", jit.why);
        return -1;
    }
    return jit.major * 1000 + jit.minor * 10;
}

static void *jit_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    void *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n)) != NULL) {
            if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
                free(buf);
                buf = NULL;
            } else {
                *size = (size_t)n;
            }
        }
    }
    fclose(f);
    return buf;
}

/* A cache entry: this header, the whole source, the cubin. The lookup's name is a hash;
 * the entry itself carries the full key, so a collision or a planted file is a miss. */
typedef struct {
    char magic[8];            /* JIT_MAGIC */
    uint32_t arch, nvrtc;     /* sm_<arch>; NVRTC major * 1000 + minor * 10 */
    uint64_t opts_hash;       /* of the compile options */
    uint64_t source_len, image_len;
} JitEntry;
#define JIT_MAGIC "ccljit1\n"

/* The cubin of a cache file whose key matches (the caller owns it), else NULL. */
static void *jit_entry_image(const char *data, size_t size, const JitEntry *want, const char *source,
                             size_t *image_len)
{
    JitEntry e;
    if (size < sizeof e) return NULL;
    memcpy(&e, data, sizeof e);
    if (memcmp(e.magic, want->magic, sizeof e.magic) || e.arch != want->arch || e.nvrtc != want->nvrtc ||
        e.opts_hash != want->opts_hash || e.source_len != want->source_len ||
        size - sizeof e < e.source_len || size - sizeof e - e.source_len != e.image_len ||
        memcmp(data + sizeof e, source, e.source_len))
        return NULL;
    void *image = malloc(e.image_len ? e.image_len : 1);
    if (image) memcpy(image, data + sizeof e + e.source_len, e.image_len);
    *image_len = e.image_len;
    return image;
}

static int jit_write_all(int fd, const void *p, size_t n)
{
    return write(fd, p, n) == (ssize_t)n ? 0 : -1;
}

static void jit_write_entry(const char *dir, const char *path, const JitEntry *e, const char *source,
                            const void *image)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s/.tmp-XXXXXX", dir);
    int fd = mkstemp(tmp);
    if (fd < 0) return;
    int bad = jit_write_all(fd, e, sizeof *e) || jit_write_all(fd, source, e->source_len) ||
              jit_write_all(fd, image, e->image_len);
    close(fd);
    if (bad || rename(tmp, path) != 0) unlink(tmp);
}

/* Appends to err the generated source line that the first "NAME(LINE): error" of the
 * log names, so a message shows what was compiled, not only where. */
static void jit_append_line(char *err, size_t errlen, const char *log, const char *name, const char *source)
{
    char pat[300];
    snprintf(pat, sizeof pat, "%s(", name);
    const char *at = strstr(log, pat);
    if (!at) return;
    long line = strtol(at + strlen(pat), NULL, 10);
    if (line <= 0) return;
    const char *p = source;
    for (long l = 1; l < line && p; l++) {
        p = strchr(p, '\n');
        if (p) p++;
    }
    if (!p) return;
    const char *end = strchr(p, '\n');
    int len = end ? (int)(end - p) : (int)strlen(p);
    size_t used = strlen(err);
    if (used < errlen)
        snprintf(err + used, errlen - used, "\n%s:%ld: %.*s", name, line, len > 400 ? 400 : len, p);
}

int ccl__jit_compile(const char *source, const char *name, int arch, const char *cache_dir,
                     CclJitResult *res, char *err, size_t errlen)
{
    double t0 = ccl__now_ms();
    memset(res, 0, sizeof *res);
    pthread_once(&jit.once, jit_load);
    if (!jit.lib) {
        jit_error(err, errlen, "%s", jit.why);
        return -1;
    }
    char archopt[64];
    snprintf(archopt, sizeof archopt, "--gpu-architecture=sm_%d", arch);
    const char *opts[] = {archopt, "--std=c++17", "-default-device"};
    int nopts = (int)(sizeof opts / sizeof opts[0]);

    char path[4200] = "", why[512];
    JitEntry key = {.magic = JIT_MAGIC, .arch = (uint32_t)arch, .nvrtc = (uint32_t)(jit.major * 1000 + jit.minor * 10),
                    .opts_hash = CCL__FNV_SEED, .source_len = strlen(source)};
    for (int i = 0; i < nopts; i++) key.opts_hash = ccl__fnv1a(key.opts_hash, opts[i], strlen(opts[i]) + 1);
    /* Only a folder of this user's that nobody else can write holds cubins we load. */
    if (cache_dir && cache_dir[0] && ccl__private_dir(cache_dir, why, sizeof why) == 0) {
        uint64_t h[2] = {CCL__FNV_SEED, 0x9e3779b97f4a7c15ull};
        for (int k = 0; k < 2; k++) {
            h[k] = ccl__fnv1a(h[k], source, key.source_len + 1);
            h[k] = ccl__fnv1a(h[k], &key.opts_hash, sizeof key.opts_hash);
            uint32_t ver[2] = {key.nvrtc, key.arch};
            h[k] = ccl__fnv1a(h[k], ver, sizeof ver);
        }
        snprintf(path, sizeof path, "%s/%016llx%016llx.sm%d.ccljit", cache_dir, (unsigned long long)h[0],
                 (unsigned long long)h[1], arch);
        size_t size = 0;
        char *data = jit_read_file(path, &size);
        res->image = data ? jit_entry_image(data, size, &key, source, &res->size) : NULL;
        free(data);
        if (res->image) {
            res->cache_hit = 1;
            res->ms = ccl__now_ms() - t0;
            return 0;
        }
    }

    nvrtcProgram prog;
    nvrtcResult r = jit.create(&prog, source, name, 0, NULL, NULL);
    if (r != 0) {
        jit_error(err, errlen, "nvrtcCreateProgram: %s", jit.errstr(r));
        return -1;
    }
    r = jit.compile(prog, nopts, opts);
    size_t logsize = 0;
    char *log = NULL;
    if (jit.log_size(prog, &logsize) == 0 && logsize > 1 && (log = malloc(logsize)) != NULL &&
        jit.log(prog, log) != 0) {
        free(log);
        log = NULL;
    }
    if (r != 0) {
        jit_error(err, errlen, "NVRTC (%d.%d, sm_%d) failed to compile %s: %s\n%s", jit.major, jit.minor, arch,
                  name, jit.errstr(r), log ? log : "(no log)");
        if (log) jit_append_line(err, errlen, log, name, source);
        free(log);
        jit.destroy(&prog);
        return -1;
    }
    free(log);
    if ((r = jit.cubin_size(prog, &res->size)) != 0 || !(res->image = malloc(res->size)) ||
        (r = jit.cubin(prog, res->image)) != 0) {
        jit_error(err, errlen, "nvrtcGetCUBIN: %s", r ? jit.errstr(r) : "out of memory");
        free(res->image);
        res->image = NULL;
        jit.destroy(&prog);
        return -1;
    }
    jit.destroy(&prog);
    key.image_len = res->size;
    if (path[0]) jit_write_entry(cache_dir, path, &key, source, res->image);
    res->ms = ccl__now_ms() - t0;
    return 0;
}
