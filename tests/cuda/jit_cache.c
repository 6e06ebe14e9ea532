/* jit_cache: the kernel cache trusts only its own folder and its entries' full keys
 * (runtime/src/jit.c, util.c). NVRTC only, no GPU.
 *
 *   jit_cache TMPDIR
 *
 * Prints "ok cuda/jit-cache: WHAT" or "FAIL cuda/jit-cache: WHAT: ..."; exits 77 with
 * "skipped: ..." where NVRTC cannot be loaded. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "gpu/jit.h"

static int failures;
static const char *source_a = "extern \"C\" __global__ void k(int *x) { x[threadIdx.x] += 1; }\n";
static const char *source_b = "extern \"C\" __global__ void k(int *x) { x[threadIdx.x] += 2; }\n";

static void check(const char *what, int ok, const char *detail)
{
    printf("%s cuda/jit-cache: %s%s%s\n", ok ? "ok" : "FAIL", what, ok ? "" : ": ", ok ? "" : detail);
    failures += !ok;
}

/* Compiles src with dir as the cache: -1 on failure, else whether it was a cache hit. */
static int compile(const char *src, const char *dir)
{
    CclJitResult r;
    char err[4096];
    if (ccl__jit_compile(src, "k.cu", 90, dir, &r, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    free(r.image);
    return r.cache_hit;
}

/* The one entry in dir (its path into out): 0, or -1 when there is not exactly one. */
static int only_entry(const char *dir, char *out, size_t len)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strstr(e->d_name, ".ccljit")) {
            snprintf(out, len, "%s/%s", dir, e->d_name);
            n++;
        }
    if (d) closedir(d);
    return n == 1 ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: jit_cache TMPDIR\n");
        return 2;
    }
    char why[256];
    if (ccl__jit_nvrtc_version(why, sizeof why) < 0) {
        printf("skipped: %s\n", why);
        return 77;
    }
    char dir[1024], entry[2048], detail[256];
    snprintf(dir, sizeof dir, "%s/new/cache", argv[1]);

    int first = compile(source_a, dir), second = compile(source_a, dir);
    struct stat st;
    int mode = stat(dir, &st) == 0 ? (int)(st.st_mode & 0777) : -1;
    snprintf(detail, sizeof detail, "first %d, second %d, folder mode %o", first, second, mode);
    check("a new folder is made 0700; a miss, then a hit", first == 0 && second == 1 && mode == 0700, detail);

    /* A planted entry: another source's cubin under this source's name. */
    int have = only_entry(dir, entry, sizeof entry) == 0;
    char other[1024];
    snprintf(other, sizeof other, "%s/other", argv[1]);
    compile(source_b, other);
    char planted[2048];
    int ok = have && only_entry(other, planted, sizeof planted) == 0 && rename(planted, entry) == 0;
    int after = ok ? compile(source_a, dir) : -2, again = ok ? compile(source_a, dir) : -2;
    snprintf(detail, sizeof detail, "planted %d, then %d, then %d", ok, after, again);
    check("an entry whose key differs is a miss, and is replaced", ok && after == 0 && again == 1, detail);

    /* A folder others can write: not used, and the compile still works. */
    chmod(dir, 0777);
    int open1 = compile(source_a, dir), open2 = compile(source_a, dir);
    snprintf(detail, sizeof detail, "%d then %d", open1, open2);
    check("a group/world-writable folder is not used", open1 == 0 && open2 == 0, detail);
    chmod(dir, 0700);

    /* A folder of another user (as root: give it to nobody). */
    if (geteuid() == 0 && chown(dir, 65534, 65534) == 0) {
        int foreign = compile(source_a, dir);
        snprintf(detail, sizeof detail, "%d", foreign);
        check("another user's folder is not used", foreign == 0, detail);
        if (chown(dir, 0, 0) != 0) perror("chown");
    }
    char err[256];
    snprintf(detail, sizeof detail, "%s", ccl__trusted_dir(dir, err, sizeof err) == 0 ? "" : err);
    check("ccl__trusted_dir accepts our own 0700 folder", detail[0] == 0, detail);
    return failures ? 1 : 0;
}
