/* libdir.c: the shipped library's folder (ccl__library_dir), for library.c, tuner.c and
 * ccl-tune.
 *
 * $CCL_ALGORITHM_DIR when set (and only it), else the first of
 *   1. next to the libccl.so in use, or the shared object that linked libccl.a in (its
 *      real path, found with dladdr): LIB/../share/ccl/algorithms, where `make install`
 *      puts them (relocated installs too), then LIB/../algorithms, the source tree of a
 *      build folder's libccl.so;
 *   2. next to the executable: EXE/../share/ccl/algorithms (an installed cclc), then the
 *      `algorithms` folder of the build tree it came from (next to it or up to three
 *      levels above: build/, build/examples/, build/tests/SUITE/);
 *   3. the folder `make install` put them in, compiled into the libccl it installed
 *      (ccl__install_algorithm_dir, datadir.c), for programs linked with libccl.a.
 * Never the current folder, which anyone's downloads may fill. Only folders and files
 * that this user (or root) owns and nobody else can write are read; others are skipped,
 * and the reason kept for messages. Part of the base: calls only the base. */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

/* The folder of the file at path (resolved to its real path) in dir (PATH_MAX bytes);
 * -1 when there is none. */
static int folder_of(const char *path, char *dir)
{
    if (!realpath(path, dir))
        return -1;
    char *slash = strrchr(dir, '/');
    if (!slash)
        return -1;
    *slash = 0;
    return 0;
}

/* The folder of the shared object this code is in (libccl.so, or one that linked
 * libccl.a in), in dir (PATH_MAX bytes); -1 when libccl is linked into the executable
 * (the loader names the main program ""), or the loader's name for the object is
 * relative (dlopen'ed by a relative path: it would be read against today's current
 * folder). */
static int shared_lib_folder(char *dir)
{
    Dl_info info;
    struct link_map *map = NULL;
    if (!dladdr1((void *)ccl__library_dir, &info, (void **)&map, RTLD_DL_LINKMAP) || !map || map->l_name[0] != '/')
        return -1;
    return folder_of(map->l_name, dir);
}

/* 0 and the folder in out, or -1 with the reason in out. */
int ccl__library_dir(char *out, size_t len)
{
    const char *env = getenv("CCL_ALGORITHM_DIR");
    char why[PATH_MAX + 128] = "";
    if (env && *env) {
        if (!ccl__is_dir(env)) {
            snprintf(out, len, "CCL_ALGORITHM_DIR='%s' is not a folder", env);
            return -1;
        }
        if (ccl__trusted_source(env, why, sizeof why) != 0) {
            snprintf(out, len, "CCL_ALGORITHM_DIR: %s", why);
            return -1;
        }
        snprintf(out, len, "%s", env);
        return 0;
    }
    /* The candidates, in the order of the comment at the top. */
    static const char *lib_ups[] = {"/../share/ccl/algorithms", "/../algorithms"};
    static const char *exe_ups[] = {"/../share/ccl/algorithms", "/algorithms", "/../algorithms", "/../../algorithms",
                                    "/../../../algorithms"};
    enum { MAX_CANDIDATES = 8 };
    char lib[PATH_MAX], exe[PATH_MAX], candidates[MAX_CANDIDATES][PATH_MAX + 32];
    int have_lib = shared_lib_folder(lib) == 0, have_exe = folder_of("/proc/self/exe", exe) == 0, n = 0;
    for (size_t i = 0; have_lib && i < sizeof lib_ups / sizeof lib_ups[0]; i++)
        snprintf(candidates[n++], sizeof candidates[0], "%s%s", lib, lib_ups[i]);
    for (size_t i = 0; have_exe && i < sizeof exe_ups / sizeof exe_ups[0]; i++)
        snprintf(candidates[n++], sizeof candidates[0], "%s%s", exe, exe_ups[i]);
    if (ccl__install_algorithm_dir[0])
        snprintf(candidates[n++], sizeof candidates[0], "%s", ccl__install_algorithm_dir);
    for (int i = 0; i < n; i++) {
        if (ccl__is_dir(candidates[i]) && ccl__trusted_source(candidates[i], why, sizeof why) == 0) {
            char real[PATH_MAX];
            CCL__FMT(out, len, "%s", realpath(candidates[i], real) ? real : candidates[i]);
            return 0;
        }
    }
    char at_lib[PATH_MAX + 32] = "", at_install[PATH_MAX + 16] = "";
    if (have_lib)
        CCL__FMT(at_lib, sizeof at_lib, "libccl.so (%s) or ", lib);
    if (ccl__install_algorithm_dir[0])
        CCL__FMT(at_install, sizeof at_install, " or in %s", ccl__install_algorithm_dir);
    CCL__FMT(out, len, "no algorithm library found next to %sthe executable%s%s%s (set CCL_ALGORITHM_DIR to the "
             "repository's algorithms/ folder)", at_lib, at_install, why[0] ? ": " : "", why);
    return -1;
}
