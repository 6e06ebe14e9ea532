/* library_trust: the shipped library is read only from folders and files that this
 * user (or root) owns and nobody else can write (runtime/src/libdir.c, library.c, util.c).
 *
 *   CCL_ALGORITHM_DIR=algorithms library_trust
 *
 * Builds small libraries in a temporary folder from $CCL_ALGORITHM_DIR/allreduce/ring.ccl
 * and runs ccl_all_reduce on two CPU ranks against each. Prints "ok library-trust: WHAT" or
 * "FAIL library-trust: WHAT: ...". Also that a file whose opening comment runs past the
 * library's read window (4 KB) is still found. */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ccl.h"

static int failures;

static void check(const char *what, int ok, const char *detail)
{
    printf("%s library-trust: %s%s%s\n", ok ? "ok" : "FAIL", what, ok ? "" : ": ", ok ? "" : detail);
    failures += !ok;
}

static int copy_file(const char *from, const char *to, mode_t mode)
{
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    char buf[4096];
    size_t n;
    while (out && (n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
    if (in) fclose(in);
    if (!out) return -1;
    fclose(out);
    return chmod(to, mode);
}

/* A library at TMPDIR/name with one file, allreduce/FILE, of the given modes. */
static void make_library(const char *algs, const char *tmp, const char *name, mode_t dir_mode, mode_t file_mode,
                         char *out, size_t len)
{
    char sub[2048], from[2048], to[2100];
    snprintf(out, len, "%s/%s", tmp, name);
    snprintf(sub, sizeof sub, "%s/allreduce", out);
    mkdir(out, 0755);
    mkdir(sub, 0755);
    snprintf(from, sizeof from, "%s/allreduce/ring.ccl", algs);
    snprintf(to, sizeof to, "%s/ring.ccl", sub);
    copy_file(from, to, file_mode);
    chmod(out, dir_mode);
}

/* Puts `bytes` of # comment lines before the text of the file at path. */
static int prepend_comment(const char *path, size_t bytes)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text, f);
    fclose(f);
    if (!(f = fopen(path, "wb")))
        return -1;
    for (size_t at = 0; at < bytes; at += 80)
        fprintf(f, "# a long opening comment, as the programs for several nodes have: %12zu\n", at);
    fwrite(text, 1, n, f);
    return fclose(f);
}

/* ccl_all_reduce of one float on two CPU ranks with the library at dir: the result and
 * rank 0's message. */
static ccl_result_t try_library(const char *dir, char *msg, size_t len)
{
    setenv("CCL_ALGORITHM_DIR", dir, 1);
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU};
    ccl_comm_t *comms[2];
    msg[0] = 0;
    if (ccl_comm_init_all(comms, 2, NULL, &cfg) != CCL_OK) {
        snprintf(msg, len, "init: %s", ccl_comm_last_error(NULL));
        return CCL_ERR_INTERNAL;
    }
    float in[2] = {1, 2}, out[2];
    ccl_result_t r = CCL_OK;
    for (int k = 0; k < 2; k++) {
        ccl_result_t rk = ccl_all_reduce(&in[k], &out[k], 1, CCL_F32, CCL_SUM, comms[k], NULL);
        if (rk != CCL_OK && r == CCL_OK) {
            r = rk;
            snprintf(msg, len, "%s", ccl_comm_last_error(comms[k]));
        }
    }
    for (int k = 0; k < 2; k++) ccl_comm_synchronize(comms[k]);
    if (r == CCL_OK && (out[0] != 3 || out[1] != 3)) {
        snprintf(msg, len, "wrong sum %g %g", out[0], out[1]);
        r = CCL_ERR_INTERNAL;
    }
    for (int k = 0; k < 2; k++) ccl_comm_destroy(comms[k]);
    return r;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

int main(void)
{
    const char *env = getenv("CCL_ALGORITHM_DIR");
    char algs[1024], tmp[] = "/tmp/ccl-library-trust-XXXXXX";
    snprintf(algs, sizeof algs, "%s", env && *env ? env : "algorithms");
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    char *argv[] = {NULL, algs, tmp};
    char lib[1024], msg[4096], detail[4400];
    make_library(argv[1], argv[2], "good", 0755, 0644, lib, sizeof lib);
    ccl_result_t r = try_library(lib, msg, sizeof msg);
    snprintf(detail, sizeof detail, "%s: %s", ccl_result_string(r), msg);
    check("a library of this user's, 0755/0644, is used", r == CCL_OK, detail);

    make_library(argv[1], argv[2], "long_comment", 0755, 0644, lib, sizeof lib);
    char file[2048];
    snprintf(file, sizeof file, "%s/allreduce/ring.ccl", lib);
    r = prepend_comment(file, 6000) == 0 ? try_library(lib, msg, sizeof msg) : CCL_ERR_INTERNAL;
    snprintf(detail, sizeof detail, "%s: %s", ccl_result_string(r), msg);
    check("a file whose opening comment runs past 4 KB is found", r == CCL_OK, detail);

    make_library(argv[1], argv[2], "open_file", 0755, 0666, lib, sizeof lib);
    r = try_library(lib, msg, sizeof msg);
    snprintf(detail, sizeof detail, "%s: %s", ccl_result_string(r), msg);
    check("a world-writable algorithm file is skipped, saying why",
          r == CCL_ERR_NO_ALGORITHM && strstr(msg, "ring.ccl is writable by other users: skipped"), detail);

    make_library(argv[1], argv[2], "open_dir", 0777, 0644, lib, sizeof lib);
    r = try_library(lib, msg, sizeof msg);
    snprintf(detail, sizeof detail, "%s: %s", ccl_result_string(r), msg);
    check("a world-writable CCL_ALGORITHM_DIR is refused, saying why",
          r == CCL_ERR_NO_ALGORITHM && strstr(msg, "CCL_ALGORITHM_DIR") && strstr(msg, "writable by other users"),
          detail);

    if (geteuid() == 0) {
        make_library(argv[1], argv[2], "foreign", 0755, 0644, lib, sizeof lib);
        snprintf(file, sizeof file, "%s/allreduce/ring.ccl", lib);
        if (chown(file, 65534, 65534) == 0) {
            r = try_library(lib, msg, sizeof msg);
            snprintf(detail, sizeof detail, "%s: %s", ccl_result_string(r), msg);
            check("another user's algorithm file is skipped",
                  r == CCL_ERR_NO_ALGORITHM && strstr(msg, "belongs to another user"), detail);
        }
    }
    nftw(tmp, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    return failures ? 1 : 0;
}
