/* tuner.c: tuning tables, and the algorithm and launch shape a standard collective runs.
 *
 * Takes a table (text, docs/tuner.md): a key (device model, rank count, topology,
 * library version) and one line per (collective, power-of-two size bucket) naming an
 * algorithm file and its launch shape (instances, threads per block, slices, protocol).
 * Gives ccl__pick (library.c) the algorithm for a call: the size rounded up to the next
 * power of two, that bucket's entry, loaded on first use as a "variant" (the file
 * compiled for this N with the entry's instances and protocol; threads and slices are
 * set per run). No table, or no entry for the bucket: the caller falls back to the
 * library's `sizes` hints.
 *
 * Which table: on the first standard collective of a comm, $CCL_TUNE_FILE ("none": no
 * table at all), else <cache dir>/tune-<device>-<N>.tbl when it exists, else the
 * built-in table when the device model and N have one (runtime/tune/NAME.tbl, in the
 * same format, embedded at build time: 4x and 2x H200). A table whose text is
 * malformed or whose key does not match this comm is ignored; the reason is kept
 * (comm->tune.why, shown by ccl_comm_explain_choice), never printed.
 *
 * Invariant: every rank makes the same choices in the same order (same table, same
 * calls), so variants are loaded in the same order everywhere and the heap stays
 * symmetric, as for the library's own lazy loading. Every rank must therefore see the
 * same table; docs/tuner.md says so. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define TUNE_MAGIC "ccl-tune-table 1"

#define STR_(x) #x
#define STR(x) STR_(x)
#define TUNE_VERSION STR(CCL_VERSION_MAJOR) "." STR(CCL_VERSION_MINOR) "." STR(CCL_VERSION_PATCH)

void ccl__tune_table_init(CclTuneTable *t)
{
    memset(t, 0, sizeof *t);
    for (int c = 0; c < CCL__TUNE_COLLS; c++)
        for (int b = 0; b < CCL__TUNE_BUCKETS; b++)
            t->e[c][b].file = t->plain[c][b].file = -1;
}

int ccl__tune_bucket(size_t bytes)
{
    int b = 0;
    while (b < 63 && ((size_t)1 << b) < bytes)
        b++;
    return b;
}

int ccl__tune_file_index(CclTuneTable *t, const char *file)
{
    for (int i = 0; i < t->nfiles; i++)
        if (!strcmp(t->files[i], file))
            return i;
    if (t->nfiles == CCL__TUNE_FILES || strlen(file) >= CCL__TUNE_PATH)
        return -1;
    snprintf(t->files[t->nfiles], CCL__TUNE_PATH, "%s", file);
    return t->nfiles++;
}

/* ===== the text format ===== */

/* A size: ccl__parse_size's syntax, the one every tool option takes. 0 or -1. */
static int parse_size(const char *s, size_t *out)
{
    uint64_t v;
    if (ccl__parse_size(s, &v) || v != (size_t)v)
        return -1;
    *out = (size_t)v;
    return 0;
}

/* A shape field: "-" (the default, 0) or an integer in [lo, hi]. 0 or -1. */
static int parse_field(const char *s, int lo, int hi, int *out)
{
    if (!strcmp(s, "-")) {
        *out = 0;
        return 0;
    }
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

static int coll_parse(const char *s)
{
    for (int c = 0; c < CCL__TUNE_COLLS; c++)
        if (!strcmp(s, cclc_coll_name((Collective)c)))
            return c;
    return -1;
}

/* The rest of a "key value..." header line, blanks trimmed, into out. */
static void header_value(const char *p, char *out, size_t len)
{
    while (*p == ' ' || *p == '\t')
        p++;
    size_t n = strlen(p);
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\r'))
        n--;
    if (n >= len)
        n = len - 1;
    memcpy(out, p, n);
    out[n] = 0;
}

#define PARSE_FAIL(...)                                \
    do {                                               \
        int o_ = snprintf(err, errlen, "%s:%d: ", name, lineno); \
        if (o_ >= 0 && (size_t)o_ < errlen)            \
            snprintf(err + o_, errlen - (size_t)o_, __VA_ARGS__); \
        free(copy);                                    \
        return -1;                                     \
    } while (0)

int ccl__tune_parse(const char *text, const char *name, CclTuneTable *t, char *err, size_t errlen)
{
    ccl__tune_table_init(t);
    char *copy = strdup(text);
    int lineno = 0;
    if (!copy)
        PARSE_FAIL("out of memory");
    int magic = 0, have_dev = 0, have_ranks = 0, have_topo = 0, have_ver = 0;
    char *save = NULL;
    for (char *line = copy, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        lineno++;
        char *hash = strchr(line, '#');
        double time_us = 0;
        if (hash) {
            /* ccl-tune writes the measured time as a comment: "# 12.3 us". */
            char *e;
            double v = strtod(hash + 1, &e);
            if (e != hash + 1 && v > 0)
                time_us = v;
            *hash = 0;
        }
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (!*p)
            continue;
        if (!magic) {
            header_value(p, p, strlen(p) + 1);
            if (strcmp(p, TUNE_MAGIC))
                PARSE_FAIL("expected '" TUNE_MAGIC "' as the first line, not '%.60s'", p);
            magic = 1;
            continue;
        }
        if (!strncmp(p, "device ", 7) || !strncmp(p, "device\t", 7)) {
            header_value(p + 7, t->device, sizeof t->device);
            have_dev = 1;
            continue;
        }
        if (!strncmp(p, "topology ", 9) || !strncmp(p, "topology\t", 9)) {
            header_value(p + 9, t->topology, sizeof t->topology);
            have_topo = 1;
            continue;
        }
        if (!strncmp(p, "version ", 8) || !strncmp(p, "version\t", 8)) {
            header_value(p + 8, t->version, sizeof t->version);
            have_ver = 1;
            continue;
        }
        if (!strncmp(p, "ranks ", 6) || !strncmp(p, "ranks\t", 6)) {
            char v[32];
            header_value(p + 6, v, sizeof v);
            if (parse_field(v, 1, 1 << 20, &t->nranks) || t->nranks == 0)
                PARSE_FAIL("'ranks %s' is not a rank count", v);
            have_ranks = 1;
            continue;
        }
        /* collective bytes file instances threads slices protocol */
        char *f[8];
        int nf = 0;
        for (char *tok = strtok_r(p, " \t\r", &save); tok; tok = strtok_r(NULL, " \t\r", &save))
            if (nf < 8)
                f[nf++] = tok;
            else
                nf++;
        if (nf != 7)
            PARSE_FAIL("expected 'collective bytes algorithm instances threads slices protocol' (7 fields), "
                       "found %d field%s", nf, nf == 1 ? "" : "s");
        if (!have_dev || !have_ranks || !have_topo || !have_ver)
            PARSE_FAIL("an entry before the header's device, ranks, topology and version lines");
        char *kind = strchr(f[0], ':');
        if (kind)
            *kind++ = 0;
        if (kind && strcmp(kind, "plain"))
            PARSE_FAIL("'%s:%s': the only buffer kind a row names is 'plain' (calls on ordinary buffers)", f[0], kind);
        int c = coll_parse(f[0]);
        if (c < 0)
            PARSE_FAIL("'%s' is not a collective (allreduce, allgather, reduce_scatter, alltoall, broadcast, reduce, "
                       "allgatherv, alltoallv)",
                       f[0]);
        CclTuneEntry *row = kind ? t->plain[c] : t->e[c];
        size_t bytes;
        if (parse_size(f[1], &bytes) || bytes == 0 || (bytes & (bytes - 1)))
            PARSE_FAIL("bytes '%s' is not a power of two (a size bucket: 1024, 4K, 1M ...)", f[1]);
        int b = ccl__tune_bucket(bytes);
        if (c == COLL_ALLTOALLV && b != 0)
            PARSE_FAIL("alltoallv %s: alltoallv's only row is bucket 1, which its every call takes (no rank knows "
                       "the size of an alltoallv: each knows its own row and column of the counts)", f[1]);
        if (b >= CCL__TUNE_BUCKETS)
            PARSE_FAIL("bytes '%s' is above the largest bucket (2^%d)", f[1], CCL__TUNE_BUCKETS - 1);
        CclShape sh = {0};
        if (parse_field(f[3], 1, 64, &sh.instances))
            PARSE_FAIL("instances '%s' is not '-' or 1..64", f[3]);
        if (parse_field(f[4], 32, 512, &sh.threads) || sh.threads % 32)
            PARSE_FAIL("threads '%s' is not '-' or a multiple of 32 in 32..512", f[4]);
        if (parse_field(f[5], 1, 1024, &sh.slices))
            PARSE_FAIL("slices '%s' is not '-' or 1..1024", f[5]);
        sh.protocol = 1 + cclc_proto_parse(f[6]); /* 0 for '-' and for anything else */
        if (!sh.protocol && strcmp(f[6], "-"))
            PARSE_FAIL("protocol '%s' is not '-', 'simple', 'll' or 'll128'", f[6]);
        if (row[b].file >= 0)
            PARSE_FAIL("a second %s%s entry for bucket %s (the first is on line %d)", f[0], kind ? ":plain" : "", f[1],
                       row[b].line);
        int fi = ccl__tune_file_index(t, f[2]);
        if (fi < 0)
            PARSE_FAIL("more than %d algorithm files, or a path of %d characters or more", CCL__TUNE_FILES,
                       CCL__TUNE_PATH);
        row[b] = (CclTuneEntry){.file = fi, .line = lineno, .shape = sh, .time_us = time_us};
        if (kind)
            t->has_plain[c] = 1;
    }
    if (!magic)
        PARSE_FAIL("empty (expected '" TUNE_MAGIC "')");
    if (!have_dev || !have_ranks || !have_topo || !have_ver)
        PARSE_FAIL("the header lacks %s", !have_dev ? "'device'" : !have_ranks ? "'ranks'" : !have_topo ? "'topology'" : "'version'");
    free(copy);
    return 0;
}

static void write_field(FILE *f, int v)
{
    if (v)
        fprintf(f, " %d", v);
    else
        fputs(" -", f);
}

/* The rows of one kind: every collective's (rows[coll][bucket]), its name followed by
 * `suffix`. */
static void write_rows(FILE *f, const CclTuneTable *t, const CclTuneEntry (*rows)[CCL__TUNE_BUCKETS],
                       const char *suffix)
{
    for (int c = 0; c < CCL__TUNE_COLLS; c++)
        for (int b = 0; b < CCL__TUNE_BUCKETS; b++) {
            const CclTuneEntry *e = &rows[c][b];
            if (e->file < 0)
                continue;
            fprintf(f, "%s%s %zu %s", cclc_coll_name((Collective)c), suffix, (size_t)1 << b, t->files[e->file]);
            write_field(f, e->shape.instances);
            write_field(f, e->shape.threads);
            write_field(f, e->shape.slices);
            fprintf(f, " %s", e->shape.protocol ? cclc_proto_name((Protocol)(e->shape.protocol - 1)) : "-");
            if (e->time_us > 0)
                fprintf(f, "  # %.2f us%s%s%s", e->time_us, e->note ? " (" : "", e->note ? e->note : "",
                        e->note ? ")" : "");
            else if (e->note)
                fprintf(f, "  # %s", e->note);
            fputc('\n', f);
        }
}

void ccl__tune_write(FILE *f, const CclTuneTable *t)
{
    fprintf(f, TUNE_MAGIC "\n# libccl tuning table (docs/tuner.md). The key: a table is used only where all four match.\n");
    fprintf(f, "device %s\nranks %d\ntopology %s\nversion %s\n", t->device, t->nranks, t->topology, t->version);
    fprintf(f, "# collective  bytes  algorithm  instances  threads  slices  protocol   (- : default)\n");
    write_rows(f, t, t->e, "");
    write_rows(f, t, t->plain, ":plain");
}

/* ===== the key ===== */

/* What the backend says about comm's device, asked once per comm. */
static const CclDeviceInfo *device_info(ccl_comm_t *comm)
{
    CclTuner *t = &comm->tune;
    if (!t->described) {
        memset(&t->dev, 0, sizeof t->dev);
        comm->be->describe(comm, &t->dev);
        t->described = 1;
    }
    return &t->dev;
}

void ccl__tune_key(ccl_comm_t *comm, char *device, size_t dlen, char *topo, size_t tlen, char *version, size_t vlen)
{
    const CclDeviceInfo *d = device_info(comm);
    snprintf(version, vlen, "%s", TUNE_VERSION);
    snprintf(device, dlen, "%s", d->device);
    snprintf(topo, tlen, "%s", d->topology);
}

/* ===== the built-in tables ===== */

/* Whether line (up to its end) is the header line `key` ("device", "version"), as
 * ccl__tune_parse reads it: blanks, the key, then a blank. */
static int is_key_line(const char *line, const char *key)
{
    while (*line == ' ' || *line == '\t')
        line++;
    size_t n = strlen(key);
    return !strncmp(line, key, n) && (line[n] == ' ' || line[n] == '\t');
}

/* Whether the device model contains one of the models a built-in table's "device" line
 * lists, separated by '|' ("H200|H100"). */
static int models_match(const char *device, const char *models)
{
    for (const char *m = models; *m;) {
        size_t n = strcspn(m, "|");
        char one[sizeof ((CclTuneTable *)0)->device];
        if (n > 0 && n < sizeof one) {
            memcpy(one, m, n);
            one[n] = 0;
            if (strstr(device, one))
                return 1;
        }
        m += n + (m[n] == '|');
    }
    return 0;
}

/* The tables are runtime/tune/NAME.tbl (docs/tuner.md, "The built-in tables"), embedded at
 * build time. Each is written for models ("device H200|H100": any device whose model
 * contains H200 or H100) and a rank count; its "device" and "version" lines are replaced by this
 * device's model and libccl's version, line for line, so that the key matches and
 * ccl_comm_explain_choice's line numbers are the file's. Topology is not checked (the
 * files say "topology *"; tune_load passes any_topology). */
int ccl__tune_builtin(const char *device, int nranks, char *buf, size_t len, char *name, size_t nlen)
{
    CclTuneTable *t = malloc(sizeof *t);
    char err[512];
    int found = -1;
    if (!t)
        return -1;
    for (int i = 0; i < ccl__tune_ntexts && found < 0; i++)
        if (ccl__tune_parse(ccl__tune_texts[i].text, ccl__tune_texts[i].path, t, err, sizeof err) == 0 &&
            t->nranks == nranks && t->device[0] && models_match(device, t->device))
            found = i;
    free(t);
    if (found < 0)
        return -1;
    snprintf(name, nlen, "the built-in table %s", ccl__tune_texts[found].path);
    FILE *f = fmemopen(buf, len, "w");
    if (!f)
        return -1;
    for (const char *line = ccl__tune_texts[found].text; *line;) {
        size_t n = strcspn(line, "\n");
        if (is_key_line(line, "device"))
            fprintf(f, "device %s\n", device);
        else if (is_key_line(line, "version"))
            fprintf(f, "version %s\n", TUNE_VERSION);
        else
            fprintf(f, "%.*s\n", (int)n, line);
        line += n + (line[n] == '\n');
    }
    int bad = ferror(f);
    long used = ftell(f);
    fclose(f);
    return bad || used < 0 || (size_t)used + 1 >= len ? -1 : 0;
}

/* ===== finding the table ===== */

static void add_why(CclTuner *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_why(CclTuner *t, const char *fmt, ...)
{
    size_t n = strlen(t->why);
    if (n + 3 >= sizeof t->why)
        return;
    if (n)
        n += (size_t)snprintf(t->why + n, sizeof t->why - n, "; ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->why + n, sizeof t->why - n, fmt, ap);
    va_end(ap);
}

/* NULL and the reason in why when the file cannot be read. */
static char *read_text(const char *path, char *why, size_t len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, len, "%s", strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            snprintf(why, len, "out of memory");
            return NULL;
        }
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n + 1 < cap || feof(f) || ferror(f))
            break;
        if (cap >= (size_t)1 << 24) {
            fclose(f);
            free(buf);
            snprintf(why, len, "larger than 16 MB");
            return NULL;
        }
        char *nb = realloc(buf, cap *= 2);
        if (!nb)
            free(buf);
        buf = nb;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        snprintf(why, len, "read error");
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

/* Parses text and checks its key; 0 and the table in t->table, or -1 (reason added). */
static int try_table(ccl_comm_t *comm, const char *text, const char *name, int any_topology)
{
    CclTuner *t = &comm->tune;
    char err[512], dev[128], topo[64], ver[32];
    if (ccl__tune_parse(text, name, &t->table, err, sizeof err) != 0) {
        add_why(t, "%s", err);
        return -1;
    }
    ccl__tune_key(comm, dev, sizeof dev, topo, sizeof topo, ver, sizeof ver);
    const CclTuneTable *tb = &t->table;
    if (strcmp(tb->device, dev))
        add_why(t, "%s is for device '%s', this communicator's is '%s'", name, tb->device, dev);
    else if (tb->nranks != comm->nranks)
        add_why(t, "%s is for %d ranks, this communicator has %d", name, tb->nranks, comm->nranks);
    else if (!any_topology && strcmp(tb->topology, topo))
        add_why(t, "%s is for topology '%s', this communicator's is '%s'", name, tb->topology, topo);
    else if (strcmp(tb->version, ver))
        add_why(t, "%s is for libccl %s, this is %s", name, tb->version, ver);
    else {
        snprintf(t->source, sizeof t->source, "%s", name);
        return 0;
    }
    ccl__tune_table_init(&t->table);
    return -1;
}

/* The default table file of this comm's key: <cache>/tune-<device>-<N>.tbl, the device
 * model with every character but letters, digits, '-' and '.' as '_'. */
static int default_path(ccl_comm_t *comm, char *out, size_t len)
{
    char dev[128], topo[64], ver[32], cache[1024];
    ccl__tune_key(comm, dev, sizeof dev, topo, sizeof topo, ver, sizeof ver);
    for (char *p = dev; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '.')
            *p = '_';
    const char *dir = ccl__cache_dir(comm->cache_dir, cache, sizeof cache);
    if (!dir)
        return -1;
    CCL__FMT(out, len, "%s/tune-%s-%d.tbl", dir, dev, comm->nranks);
    return 0;
}

static void tune_load(ccl_comm_t *comm)
{
    CclTuner *t = &comm->tune;
    t->state = CCL__TUNE_NONE;
    t->why[0] = 0;
    const char *env = getenv("CCL_TUNE_FILE");
    char why[256], name[CCL__TUNE_PATH + 64];
    if (env && !strcmp(env, "none")) {
        add_why(t, "CCL_TUNE_FILE=none");
        return;
    }
    if (env && *env) {
        char *text = read_text(env, why, sizeof why);
        if (!text) {
            add_why(t, "CCL_TUNE_FILE '%s': %s", env, why);
        } else {
            int ok = try_table(comm, text, env, 0) == 0;
            free(text);
            if (ok) {
                t->state = CCL__TUNE_IN_USE;
                return;
            }
        }
    } else {
        char path[2048], dir[1024];
        if (default_path(comm, path, sizeof path) == 0) {
            /* A table in a folder another user can write could be planted: not used. */
            int trusted = ccl__trusted_dir(ccl__cache_dir(comm->cache_dir, dir, sizeof dir), why, sizeof why) == 0;
            char *text = trusted ? read_text(path, why, sizeof why) : NULL;
            if (!trusted) {
                add_why(t, "the cache folder's table %s is not used: %s", path, why);
            } else if (text) {
                int ok = try_table(comm, text, path, 0) == 0;
                free(text);
                if (ok) {
                    t->state = CCL__TUNE_IN_USE;
                    return;
                }
            } else {
                add_why(t, "no table file %s (CCL_TUNE_FILE unset)", path);
            }
        }
    }
    char dev[128], topo[64], ver[32];
    ccl__tune_key(comm, dev, sizeof dev, topo, sizeof topo, ver, sizeof ver);
    size_t blen = 1 << 16;
    char *buf = malloc(blen);
    if (buf && ccl__tune_builtin(dev, comm->nranks, buf, blen, name, sizeof name) == 0 &&
        try_table(comm, buf, name, 1) == 0) {
        t->state = CCL__TUNE_IN_USE;
    } else if (buf) {
        add_why(t, "no built-in table for '%s' with %d ranks", dev, comm->nranks);
    }
    free(buf);
}

/* ===== variants ===== */

ccl_result_t ccl__tune_reshape(ccl_algorithm_t *alg, const CclShape *shape, const char *fn)
{
    ccl_comm_t *comm = alg->comm;
    if (alg->ncalls)
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "%s: %s already ran; a launch shape is set before its first run",
                              fn, alg->file);
    int inst = shape->instances > 0 ? shape->instances : alg->instances;
    if (inst < 1 || inst > 64)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: %d instances for %s (1..64)", fn, inst, alg->file);
    if (shape->protocol == 1 + PROTO_SIMPLE && alg->prog->protocol != PROTO_SIMPLE)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                              "%s: %s is an LL program; it cannot run as Simple (it lacks Simple's cross-call proof)",
                              fn, alg->file);
    /* The semaphores scale with instances (docs/internals.md): a new block from the
     * same deterministic allocator on every rank, taken before the old one is given
     * back so that a failure leaves alg as it was. Never run, so the old one is zero. */
    int nsems = alg->plan->nsems * inst;
    size_t off;
    if (ccl__heap_alloc(&comm->sems, ccl__sem_block_bytes(nsems), 0, &off) != 0)
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: the semaphore arena is full (%s with %d instances needs %d counters)",
                              fn, alg->file, inst, nsems);
    comm->be->alg_release(alg);
    ccl__heap_free(&comm->sems, alg->sem_off);
    alg->sem_off = off;
    alg->nsems = nsems;
    alg->instances = inst;
    alg->shape = *shape;
    alg->shape.instances = inst;
    /* A Simple program runs with LL lines only where the backend can; elsewhere the
     * program's protocol. */
    if (!device_info(comm)->can_run_simple_as_ll)
        alg->shape.protocol = 0;
    return comm->be->alg_prepare(alg);
}

void ccl__tune_apply_run(ccl_algorithm_t *alg, const CclShape *shape, int slices0)
{
    /* Threads per block mean something only where the backend has them; say "default"
     * elsewhere. */
    alg->shape.threads = device_info(alg->comm)->has_threads_per_block ? shape->threads : 0;
    if (!alg->plan->proof.pipeline_safe)
        alg->slices = 1;
    else
        alg->slices = shape->slices > 0 ? shape->slices : slices0;
}

static const char *tune_proto_name(const ccl_algorithm_t *alg)
{
    return cclc_proto_name(ccl__shape_protocol(alg->shape.protocol, alg->prog->protocol));
}

/* Records the dispatch of (coll, bytes) to alg as t->last: how it was chosen (NULL:
 * the table's entry at line, bucket; `plain`: its row for ordinary buffers) and why the
 * table was not used (t->miss). Copies
 * only: the text is written when asked for (ccl_comm_explain_choice). */
static void note_choice(CclTuner *t, Collective coll, size_t bytes, const ccl_algorithm_t *alg, const char *how,
                        int line, size_t bucket, int plain)
{
    CclTuneChoice *c = &t->last;
    c->coll = coll;
    c->bytes = bytes;
    size_t n = strlen(alg->file);
    if (n >= sizeof c->file)
        n = sizeof c->file - 1;
    memcpy(c->file, alg->file, n);
    c->file[n] = 0;
    c->instances = alg->instances;
    c->threads = alg->shape.threads;
    c->slices = alg->slices;
    c->protocol = tune_proto_name(alg);
    c->how = how;
    c->line = line;
    c->bucket = bucket;
    c->plain = plain;
    c->miss = t->miss;
    c->miss_bucket = t->miss_bucket;
    if (t->miss == CCL__MISS_TEXT)
        memcpy(c->miss_text, t->miss_text, sizeof c->miss_text);
    t->miss = CCL__MISS_NONE;
}

static void set_miss(CclTuner *t, const char *why)
{
    size_t n = strlen(why);
    if (n >= sizeof t->miss_text)
        n = sizeof t->miss_text - 1;
    memmove(t->miss_text, why, n);
    t->miss_text[n] = 0;
    t->miss = CCL__MISS_TEXT;
}

/* The variant for entry e (loaded now if new); NULL when it cannot be (why in miss). */
static ccl_algorithm_t *variant(ccl_comm_t *comm, Collective coll, int root, const CclTuneEntry *e, const char *fn,
                                int *slices0)
{
    CclTuner *t = &comm->tune;
    CclShape want = e->shape;
    want.threads = 0;
    want.slices = 0;
    if (!device_info(comm)->can_run_simple_as_ll)
        want.protocol = 0;
    for (int i = 0; i < t->nvar; i++) {
        CclTuneVariant *v = &t->var[i];
        if (v->file == e->file && v->root == root && v->shape.instances == want.instances &&
            v->shape.protocol == want.protocol) {
            if (!v->alg)
                set_miss(t, v->why);
            *slices0 = v->slices0;
            return v->alg;
        }
    }
    if (t->nvar == CCL__TUNE_VARIANTS) {
        CCL__FMT(t->miss_text, sizeof t->miss_text, "more than %d algorithm variants in use", CCL__TUNE_VARIANTS);
        t->miss = CCL__MISS_TEXT;
        return NULL;
    }
    CclTuneVariant *v = &t->var[t->nvar++];
    *v = (CclTuneVariant){.file = e->file, .root = root, .shape = want};
    /* Local copies: messages go into comm->tune too, and snprintf's arguments must not
     * overlap its destination. */
    char file[CCL__TUNE_PATH], where[sizeof t->source + 16];
    snprintf(file, sizeof file, "%s", t->table.files[e->file]);
    CCL__FMT(where, sizeof where, "%s:%d", t->source, e->line);
    char dir[1024], path[2048], why[2200];
    if (file[0] == '/') {
        /* Relative names resolve in the library folder, which is trusted; an absolute one
         * may name any file on the machine, so it must pass the same trust rule. */
        CCL__FMT(path, sizeof path, "%s", file);
        if (ccl__trusted_file(path, ": not loaded (another user could make this process run their program)", why,
                              sizeof why) != 0) {
            CCL__FMT(v->why, sizeof v->why, "%s: %s", where, why);
            set_miss(t, v->why);
            return NULL;
        }
    } else if (ccl__library_dir(dir, sizeof dir) == 0) {
        CCL__FMT(path, sizeof path, "%s/%s", dir, file);
    } else {
        CCL__FMT(v->why, sizeof v->why, "%s: %s", where, dir);
        set_miss(t, v->why);
        return NULL;
    }
    ccl_algorithm_t *alg;
    if (ccl__algorithm_load(comm, path, root, fn, &alg) != CCL_OK) {
        if (comm->capture_refused) {
            t->nvar--; /* under capture nothing was loaded: the next call loads */
            return NULL;
        }
        const char *msg = comm->last_error, *colon = strstr(msg, ": ");
        msg = colon ? colon + 2 : msg;
        CCL__FMT(v->why, sizeof v->why, "%s: %.*s", where, (int)strcspn(msg, "\n"), msg);
        set_miss(t, v->why);
        return NULL;
    }
    /* A variant that turns out unusable stays loaded (and is never picked: the hint
     * search takes CCL__ORIGIN_LIBRARY only) until the comm is destroyed: freeing it here,
     * inside a collective, would make the next call pay an all-rank fence (algorithm.c,
     * "quarantine") for nothing. */
    alg->origin = CCL__ORIGIN_TUNER;
    if (alg->prog->coll != coll) {
        CCL__FMT(v->why, sizeof v->why, "%s: %s is a %s algorithm, not %s", where, file,
                 cclc_coll_name(alg->prog->coll), cclc_coll_name(coll));
        set_miss(t, v->why);
        return NULL;
    }
    v->slices0 = alg->slices;
    if (ccl__tune_reshape(alg, &want, fn) != CCL_OK) {
        const char *msg = comm->last_error, *colon = strstr(msg, ": ");
        msg = colon ? colon + 2 : msg;
        CCL__FMT(v->why, sizeof v->why, "%s: %.*s", where, (int)strcspn(msg, "\n"), msg);
        set_miss(t, v->why);
        return NULL;
    }
    v->alg = alg;
    *slices0 = v->slices0;
    return alg;
}

void ccl__tune_look(ccl_comm_t *comm, const char *fn)
{
    CclTuner *t = &comm->tune;
    if (t->state != CCL__TUNE_NOT_LOOKED)
        return;
    tune_load(comm);
    if (t->state == CCL__TUNE_IN_USE)
        CCL__LOG(CCL__LOG_INFO, CCL__SUB_TUNE, comm->rank, "%s: tuning table %s", fn, t->source);
    else
        CCL__LOG(CCL__LOG_INFO, CCL__SUB_TUNE, comm->rank, "%s: no tuning table: %s", fn, t->why);
}

int ccl__tune_has_plain(ccl_comm_t *comm, Collective coll, const char *fn)
{
    CclTuner *t = &comm->tune;
    ccl__tune_look(comm, fn);
    return t->state == CCL__TUNE_IN_USE && (int)coll < CCL__TUNE_COLLS && t->table.has_plain[coll];
}

ccl_algorithm_t *ccl__tune_pick(ccl_comm_t *comm, Collective coll, int root, size_t bytes, int plain, const char *fn)
{
    CclTuner *t = &comm->tune;
    t->miss = CCL__MISS_NONE;
    ccl__tune_look(comm, fn);
    if (t->state != CCL__TUNE_IN_USE) {
        t->miss = CCL__MISS_NO_TABLE;
        return NULL;
    }
    if ((int)coll >= CCL__TUNE_COLLS) {
        t->miss = CCL__MISS_NO_COLL;
        return NULL;
    }
    int b = ccl__tune_bucket(bytes);
    const CclTuneEntry *e = b < CCL__TUNE_BUCKETS ? &t->table.e[coll][b] : NULL;
    plain = plain && e && t->table.plain[coll][b].file >= 0;
    if (plain)
        e = &t->table.plain[coll][b];
    if (!e || e->file < 0) {
        t->miss = CCL__MISS_NO_ENTRY;
        t->miss_bucket = b < 64 ? (size_t)1 << b : bytes;
        return NULL;
    }
    int slices0 = 1;
    ccl_algorithm_t *alg = variant(comm, coll, root, e, fn, &slices0);
    if (!alg)
        return NULL;
    ccl__tune_apply_run(alg, &e->shape, slices0);
    note_choice(t, coll, bytes, alg, NULL, e->line, (size_t)1 << b, plain);
    return alg;
}

void ccl__tune_note(ccl_comm_t *comm, Collective coll, size_t bytes, const ccl_algorithm_t *alg, const char *how)
{
    note_choice(&comm->tune, coll, bytes, alg, how, 0, 0, 0);
}

/* t->last as ccl_comm_explain_choice's text. */
static void explain(const CclTuner *t, char *buf, size_t len)
{
    const CclTuneChoice *c = &t->last;
    if (!c->file[0]) { /* no dispatch yet */
        buf[0] = 0;
        return;
    }
    char th[16], miss[1200] = "";
    if (c->threads)
        snprintf(th, sizeof th, "%d", c->threads);
    else
        snprintf(th, sizeof th, "default");
    switch (c->miss) {
    case CCL__MISS_NONE: break;
    case CCL__MISS_NO_TABLE: snprintf(miss, sizeof miss, "; no tuning table: %s", t->why); break;
    case CCL__MISS_NO_COLL:
        snprintf(miss, sizeof miss, "; tuning tables have no %s entries", cclc_coll_name(c->coll));
        break;
    case CCL__MISS_NO_ENTRY:
        snprintf(miss, sizeof miss, "; %s has no %s entry for bucket %zu", t->source, cclc_coll_name(c->coll),
                 c->miss_bucket);
        break;
    case CCL__MISS_TEXT: snprintf(miss, sizeof miss, "; %s", c->miss_text); break;
    }
    char how[sizeof miss + sizeof t->source + 64]; /* either line below fits */
    if (c->how)
        snprintf(how, sizeof how, "%s%s", c->how, miss);
    else
        snprintf(how, sizeof how, "from %s:%d (bucket %zu%s)", t->source, c->line, c->bucket,
                 c->plain ? ", ordinary buffers" : "");
    snprintf(buf, len, "%s %zu B -> %s (instances %d, threads %s, slices %d, protocol %s) %s", cclc_coll_name(c->coll),
             c->bytes, c->file, c->instances, th, c->slices, c->protocol, how);
}

ccl_result_t ccl_comm_explain_choice(const ccl_comm_t *comm, char *buf, size_t len)
{
    const char *fn = "ccl_comm_explain_choice";
    if (ccl__check_comm(comm, fn) != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    if (!buf || !len)
        return ccl__set_error((ccl_comm_t *)comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument '%s' is %s", fn,
                              !buf ? "buf" : "len", !buf ? "NULL" : "0");
    explain(&comm->tune, buf, len);
    return CCL_OK;
}
