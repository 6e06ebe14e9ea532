/* library.c: which algorithm a standard collective (ccl_all_reduce ...) runs.
 *
 * First the registrations of ccl_comm_use_algorithm, latest first, whose collective,
 * root and byte range fit. Otherwise the shipped library: on the first call for a
 * (collective, root), every algorithms/<dir>/<file>.ccl whose header names that
 * collective is loaded for this N (files that do not admit N, or do not compile, are
 * skipped); a call then takes the loaded algorithm whose `sizes` hint holds its byte
 * count (the narrowest such), else one without a hint, else the first. Files and
 * folders are read in name order, so every rank makes the same choices and the heap
 * stays symmetric. Between the two, a tuning table's entry wins over the hints
 * (tuner.c); the algorithms it loads are not candidates of the hint search.
 *
 * The library folder is libdir.c's (ccl__library_dir). */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* The collective named in a file's header ("algorithm NAME : COLL"), or -1. The blanks
 * and # comments before it are skipped as they are read, however long: a shipped file's
 * opening comment may run past any fixed window (a file whose header lay past one would
 * silently drop out of the library). */
static int header_collective(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int ch;
    while ((ch = getc(f)) != EOF) {
        if (ch == '#')
            while ((ch = getc(f)) != EOF && ch != '\n')
                ;
        else if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r')
            break;
    }
    char buf[4096];
    size_t n = 0;
    if (ch != EOF) {
        buf[n++] = (char)ch;
        n += fread(buf + 1, 1, sizeof buf - 2, f);
    }
    fclose(f);
    buf[n] = 0;
    char name[64], coll[64];
    if (sscanf(buf, "algorithm %63[A-Za-z0-9_] : %63[A-Za-z0-9_]", name, coll) != 2)
        return -1;
    for (int c = COLL_ALLREDUCE; c < CCLC_NUM_COLLS; c++)
        if (!strcmp(coll, cclc_coll_name((Collective)c)))
            return c;
    return -1;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of a folder's entries (without . and ..); NULL on error. */
static char **list_dir(const char *path, int *count)
{
    *count = 0;
    DIR *d = opendir(path);
    if (!d)
        return NULL;
    int cap = 16, n = 0;
    char **names = malloc(sizeof *names * (size_t)cap);
    struct dirent *e;
    while (names && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            char **nn = realloc(names, sizeof *names * (size_t)(cap *= 2));
            if (!nn) {
                for (int i = 0; i < n; i++)
                    free(names[i]);
                free(names);
                names = NULL;
                break;
            }
            names = nn;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (names)
        qsort(names, (size_t)n, sizeof *names, name_cmp);
    *count = n;
    return names;
}

static void free_list(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* Appends "\n  LINE" to why (at length *wl), as far as it fits. */
static void note(char *why, size_t whylen, size_t *wl, const char *line)
{
    if (*wl + 1 >= whylen)
        return;
    *wl += (size_t)snprintf(why + *wl, whylen - *wl, "\n  %s", line);
    if (*wl >= whylen)
        *wl = whylen - 1;
}

/* Loads every library file of collective coll for this comm; appends a note per skipped
 * file to why. Returns how many loaded. */
static int load_library(ccl_comm_t *comm, Collective coll, int root, const char *fn, char *why, size_t whylen)
{
    char dir[PATH_MAX];
    if (ccl__library_dir(dir, sizeof dir) != 0) {
        snprintf(why, whylen, "%s", dir);
        return 0;
    }
    int nsub, loaded = 0;
    size_t wl = strlen(why);
    char **subs = list_dir(dir, &nsub);
    for (int i = 0; subs && i < nsub; i++) {
        char sub[PATH_MAX];
        CCL__FMT(sub, sizeof sub, "%s/%s", dir, subs[i]);
        char trust[PATH_MAX + 128];
        if (!ccl__is_dir(sub))
            continue;
        if (ccl__trusted_source(sub, trust, sizeof trust) != 0) {
            note(why, whylen, &wl, trust);
            continue;
        }
        int nfiles;
        char **files = list_dir(sub, &nfiles);
        for (int j = 0; files && j < nfiles; j++) {
            size_t fl = strlen(files[j]);
            if (fl < 5 || strcmp(files[j] + fl - 4, ".ccl"))
                continue;
            char path[2 * PATH_MAX];
            CCL__FMT(path, sizeof path, "%s/%s", sub, files[j]);
            if (ccl__trusted_source(path, trust, sizeof trust) != 0) {
                note(why, whylen, &wl, trust);
                continue;
            }
            if (header_collective(path) != (int)coll)
                continue;
            ccl_algorithm_t *alg;
            if (ccl__algorithm_load(comm, path, root, fn, &alg) == CCL_OK) {
                alg->origin = CCL__ORIGIN_LIBRARY;
                loaded++;
            } else {
                /* Keep the first line of the reason only. */
                const char *msg = comm->last_error, *colon = strstr(msg, ": ");
                msg = colon ? colon + 2 : msg;
                char line[PATH_MAX + 512];
                CCL__FMT(line, sizeof line, "%s: %.*s", path, (int)strcspn(msg, "\n"), msg);
                note(why, whylen, &wl, line);
            }
        }
        free_list(files, nfiles);
    }
    free_list(subs, nsub);
    if (!loaded && wl == 0)
        CCL__FMT(why, whylen, "%s has no %s algorithm", dir, cclc_coll_name(coll));
    return loaded;
}

static int fits(const CclUse *u, size_t bytes)
{
    return (u->min_bytes == 0 && u->max_bytes == 0) || (bytes >= u->min_bytes && bytes <= u->max_bytes);
}

ccl_result_t ccl__pick(ccl_comm_t *comm, Collective coll, int root, size_t bytes, int plain, const char *fn,
                       ccl_algorithm_t **out)
{
    int rooted = coll == COLL_BROADCAST || coll == COLL_REDUCE;
    if (!rooted)
        root = 0;
    for (int i = comm->nuses - 1; i >= 0; i--) {
        ccl_algorithm_t *a = comm->uses[i].alg;
        if (a->prog->coll == coll && (!rooted || a->root == root) && fits(&comm->uses[i], bytes)) {
            *out = a;
            ccl__tune_note(comm, coll, bytes, a, "registered with ccl_comm_use_algorithm");
            return CCL_OK;
        }
    }
    /* Then the tuning table (tuner.c); without one, or without an entry, the hints. The
     * tables know one node only: a comm of several takes the library's programs for
     * several nodes (docs/multinode.md), by their hints. */
    if (comm->nnodes == 1 && (*out = ccl__tune_pick(comm, coll, root, bytes, plain, fn)))
        return CCL_OK;
    if (comm->capture_refused)
        return CCL_ERR_INVALID_USAGE;
    if (!comm->lib_tried && !(comm->lib_tried = calloc(CCLC_NUM_COLLS * (size_t)comm->nranks, 1)))
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    unsigned char *tried = &comm->lib_tried[(size_t)coll * (size_t)comm->nranks + (size_t)root];
    char why[CCL__ERR_LEN / 2] = "";
    if (!*tried) {
        *tried = 1;
        load_library(comm, coll, root, fn, why, sizeof why);
        if (comm->capture_refused) {
            *tried = 0; /* under capture nothing was loaded: the next call loads */
            return CCL_ERR_INVALID_USAGE;
        }
    }
    ccl_algorithm_t *best = NULL, *nohint = NULL, *first = NULL;
    for (int i = 0; i < comm->nalgs; i++) {
        ccl_algorithm_t *a = comm->algs[i];
        if (a->origin != CCL__ORIGIN_LIBRARY || a->prog->coll != coll || (rooted && a->root != root))
            continue;
        if (!first)
            first = a;
        int64_t lo = a->prog->size_lo, hi = a->prog->size_hi;
        if (lo == 0 && hi == 0) {
            if (!nohint)
                nohint = a;
        } else if ((int64_t)bytes >= lo && (int64_t)bytes <= hi &&
                   (!best || hi - lo < best->prog->size_hi - best->prog->size_lo)) {
            best = a;
        }
    }
    *out = best ? best : nohint ? nohint : first;
    if (*out) {
        ccl__tune_note(comm, coll, bytes, *out, best ? "by its sizes hint" : nohint ? "(it has no sizes hint)" : "(the first loaded; no sizes hint fits)");
        return CCL_OK;
    }
    /* One rank: every collective is a copy. Built in, so a single-GPU job works without
     * a library that admits N = 1 (it still goes through the verifier and the backend);
     * once loaded, the search above finds it. */
    if (comm->nranks == 1) {
        char src[160];
        snprintf(src, sizeof src, "algorithm self : %s\nranks N in 1..1\nfor r in 0..N on r tb 0 { copy out[0] <- in[0] }\n",
                 cclc_coll_name(coll));
        ccl_algorithm_t *alg;
        if (ccl__algorithm_load(comm, src, 0, fn, &alg) == CCL_OK) {
            alg->origin = CCL__ORIGIN_LIBRARY;
            *out = alg;
            ccl__tune_note(comm, coll, bytes, alg, "(the built-in copy for one rank)");
            return CCL_OK;
        }
    }
    return ccl__set_error(comm, CCL_ERR_NO_ALGORITHM,
                          "%s: no %s algorithm for N=%d: none registered with ccl_comm_use_algorithm, and none in the "
                          "shipped library admits it%s%s", fn, cclc_coll_name(coll), comm->nranks, why[0] ? ":" : "",
                          why[0] ? why : " (see an earlier call's error)");
}
