/* tests/tuner/tuner.c: the tuning table (runtime/src/tuner.c) on the CPU backend.
 *
 *   tuner                  unit tests of the format, buckets and the built-in table, then
 *                          end to end on 4 ranks (threads): a table forces an algorithm
 *                          and a shape per size, a mismatched or malformed table is
 *                          ignored with its reason, a registration wins over the table
 *   tuner --use TABLE N    runs ccl_all_reduce at every allreduce bucket of TABLE (a
 *                          ccl-tune output) on N ranks and checks that each ran the
 *                          table's algorithm and instances (its ":plain" row where it
 *                          has one: malloc buffers), with correct results
 *                          (--use-sym: the same with ccl_mem_alloc'd buffers)
 *   tuner --builtin N      on 4 or 2 H200s without a table file: calls follow the
 *                          built-in table (elsewhere: skipped, says so)
 *   ... --gpu              (last) the GPU backend, symmetric buffers: tests/tuner/gpu.sh
 *
 * Prints "ok NAME" or "FAIL NAME: why" per check; exits 1 when one failed. */
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ccl.h"
#include "internal.h"

static int failures;

#define CHECK(name, cond, ...)                          \
    do {                                                \
        if (cond) {                                     \
            printf("ok %s\n", name);                    \
        } else {                                        \
            printf("FAIL %s: ", name);                  \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
            failures++;                                 \
        }                                               \
    } while (0)

/* ===== unit tests ===== */

static void test_buckets(void)
{
    static const struct { size_t bytes; int b; } cases[] = {
        {0, 0}, {1, 0}, {2, 1}, {3, 2}, {1024, 10}, {1025, 11}, {4096, 12}, {4097, 13}, {(size_t)1 << 40, 40},
    };
    int bad = -1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (ccl__tune_bucket(cases[i].bytes) != cases[i].b)
            bad = (int)i;
    CHECK("tuner.bucket", bad < 0, "bucket(%zu) = %d, want %d", cases[bad].bytes, ccl__tune_bucket(cases[bad].bytes),
          cases[bad].b);
}

static void test_parse(void)
{
    CclTuneTable t;
    char err[512] = "";
    const char *good = "ccl-tune-table 1\n# a comment\ndevice NVIDIA H200\nranks 4\ntopology p2p-all\nversion 0.1.0\n"
                       "allreduce 1024 allreduce/allpairs.ccl 1 - - -   # 6.25 us\n"
                       "allreduce 1M allreduce/twoshot.ccl 32 256 2 ll\n"
                       "allgather 4096 allgather/ring.ccl - - - simple\n"
                       "alltoall 64K alltoall/direct_ll.ccl 4 - - ll128\n"
                       "allreduce:plain 1M allreduce/ring.ccl 16 - - -\n";
    int rc = ccl__tune_parse(good, "good.tbl", &t, err, sizeof err);
    CHECK("tuner.parse.good", rc == 0, "%s", err);
    const CclTuneEntry *a = &t.e[COLL_ALLREDUCE][10], *b = &t.e[COLL_ALLREDUCE][20], *c = &t.e[COLL_ALLGATHER][12];
    CHECK("tuner.parse.key", !strcmp(t.device, "NVIDIA H200") && t.nranks == 4 && !strcmp(t.topology, "p2p-all") &&
          !strcmp(t.version, "0.1.0"), "device '%s' ranks %d topology '%s' version '%s'", t.device, t.nranks,
          t.topology, t.version);
    CHECK("tuner.parse.entries",
          a->file >= 0 && !strcmp(t.files[a->file], "allreduce/allpairs.ccl") && a->shape.instances == 1 &&
          a->shape.threads == 0 && a->time_us > 6.2 && a->time_us < 6.3 && b->file >= 0 &&
          !strcmp(t.files[b->file], "allreduce/twoshot.ccl") && b->shape.instances == 32 && b->shape.threads == 256 &&
          b->shape.slices == 2 && b->shape.protocol == 1 + PROTO_LL && c->file >= 0 && c->shape.protocol == 1 + PROTO_SIMPLE &&
          t.e[COLL_ALLREDUCE][11].file == -1 && t.e[COLL_ALLTOALL][16].shape.protocol == 1 + PROTO_LL128,
          "entries not as written");
    const CclTuneEntry *p = &t.plain[COLL_ALLREDUCE][20];
    CHECK("tuner.parse.plain",
          p->file >= 0 && !strcmp(t.files[p->file], "allreduce/ring.ccl") && p->shape.instances == 16 &&
          t.has_plain[COLL_ALLREDUCE] && !t.has_plain[COLL_ALLGATHER] && t.plain[COLL_ALLREDUCE][10].file == -1,
          "the ':plain' row not as written");

    /* The writer's output parses back to the same table; an entry's note (ccl-tune's
     * incumbent) follows its time in the comment, and the time still reads back. */
    const char *note = "incumbent allreduce/ring.ccl I=2 T=- S=1 simple: 7.10 us";
    t.e[COLL_ALLREDUCE][10].note = note;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ccl__tune_write(f, &t);
    fclose(f);
    CclTuneTable t2;
    rc = ccl__tune_parse(buf, "written.tbl", &t2, err, sizeof err);
    int same = rc == 0 && t2.nranks == 4 && !strcmp(t2.device, t.device);
    for (int cc = 0; same && cc < CCL__TUNE_COLLS; cc++)
        for (int k = 0; k < 2 * CCL__TUNE_BUCKETS; k++) {
            int kb = k % CCL__TUNE_BUCKETS, plain = k >= CCL__TUNE_BUCKETS;
            const CclTuneEntry *x = plain ? &t.plain[cc][kb] : &t.e[cc][kb], *y = plain ? &t2.plain[cc][kb] : &t2.e[cc][kb];
            if ((x->file < 0) != (y->file < 0) ||
                (x->file >= 0 && (strcmp(t.files[x->file], t2.files[y->file]) ||
                                  memcmp(&x->shape, &y->shape, sizeof x->shape))))
                same = 0;
        }
    CHECK("tuner.parse.roundtrip", same, "rc %d (%s); written:\n%s", rc, err, buf);
    CHECK("tuner.parse.note",
          rc == 0 && strstr(buf, "allreduce/allpairs.ccl 1 - - -  # 6.25 us (incumbent allreduce/ring.ccl I=2 T=- S=1 "
                                 "simple: 7.10 us)\n") && t2.e[COLL_ALLREDUCE][10].time_us == 6.25 &&
              !t2.e[COLL_ALLREDUCE][10].note,
          "want the note after the time and the time 6.25 read back (got %g); written:\n%s",
          t2.e[COLL_ALLREDUCE][10].time_us, buf);
    free(buf);

    static const struct { const char *name, *text, *want; } bad[] = {
        {"magic", "ccl-tune 2\n", "bad.tbl:1: expected 'ccl-tune-table 1'"},
        {"pow2", "ccl-tune-table 1\ndevice cpu\nranks 4\ntopology threads\nversion 0.1.0\nallreduce 3000 a.ccl 1 - - -\n",
         "bad.tbl:6: bytes '3000' is not a power of two"},
        {"fields", "ccl-tune-table 1\ndevice cpu\nranks 4\ntopology threads\nversion 0.1.0\nallreduce 4096 a.ccl 1\n",
         "bad.tbl:6: expected 'collective bytes algorithm instances threads slices protocol' (7 fields), found 4"},
        {"coll", "ccl-tune-table 1\ndevice cpu\nranks 4\ntopology threads\nversion 0.1.0\nallsum 4096 a.ccl 1 - - -\n",
         "bad.tbl:6: 'allsum' is not a collective"},
        {"instances", "ccl-tune-table 1\ndevice cpu\nranks 4\ntopology threads\nversion 0.1.0\nallreduce 4096 a.ccl 65 - - -\n",
         "bad.tbl:6: instances '65' is not '-' or 1..64"},
        {"threads", "ccl-tune-table 1\ndevice cpu\nranks 4\ntopology threads\nversion 0.1.0\nallreduce 4096 a.ccl 1 100 - -\n",
         "bad.tbl:6: threads '100' is not '-' or a multiple of 32"},
        {"protocol", "ccl-tune-table 1\ndevice cpu\nranks 4\ntopology threads\nversion 0.1.0\nallreduce 4096 a.ccl 1 - - ll64\n",
         "bad.tbl:6: protocol 'll64' is not '-', 'simple', 'll' or 'll128'"},
        {"dup", "ccl-tune-table 1\ndevice cpu\nranks 4\ntopology threads\nversion 0.1.0\nallreduce 4K a.ccl 1 - - -\n"
                "allreduce 4096 b.ccl 1 - - -\n", "bad.tbl:7: a second allreduce entry for bucket 4096 (the first is on line 6)"},
        /* Sizes as every tool option writes them (ccl__parse_size): 4KiB and 4kb are one
         * bucket; 010 is ten, never octal. */
        {"spellings", "ccl-tune-table 1\ndevice cpu\nranks 4\ntopology threads\nversion 0.1.0\nallreduce 4KiB a.ccl 1 - - -\n"
                      "allreduce 4kb b.ccl 1 - - -\n", "bad.tbl:7: a second allreduce entry for bucket 4kb (the first is on line 6)"},
        {"decimal", "ccl-tune-table 1\ndevice cpu\nranks 4\ntopology threads\nversion 0.1.0\nallreduce 010 a.ccl 1 - - -\n",
         "bad.tbl:6: bytes '010' is not a power of two"},
        {"kind", "ccl-tune-table 1\ndevice cpu\nranks 4\ntopology threads\nversion 0.1.0\nallreduce:sym 4096 a.ccl 1 - - -\n",
         "bad.tbl:6: 'allreduce:sym': the only buffer kind a row names is 'plain' (calls on ordinary buffers)"},
        {"dup-plain", "ccl-tune-table 1\ndevice cpu\nranks 4\ntopology threads\nversion 0.1.0\nallreduce 4K a.ccl 1 - - -\n"
                      "allreduce:plain 4K b.ccl 1 - - -\nallreduce:plain 4096 c.ccl 1 - - -\n",
         "bad.tbl:8: a second allreduce:plain entry for bucket 4096 (the first is on line 7)"},
        {"header", "ccl-tune-table 1\ndevice cpu\nranks 4\nallreduce 4096 a.ccl 1 - - -\n",
         "bad.tbl:4: an entry before the header's device, ranks, topology and version lines"},
        {"noheader", "ccl-tune-table 1\ndevice cpu\n", "lacks 'ranks'"},
        {"alltoallv", "ccl-tune-table 1\ndevice cpu\nranks 4\ntopology threads\nversion 0.1.0\nalltoallv 4K a.ccl 1 - - -\n",
         "bad.tbl:6: alltoallv 4K: alltoallv's only row is bucket 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "tuner.parse.bad.%s", bad[i].name);
        err[0] = 0;
        rc = ccl__tune_parse(bad[i].text, "bad.tbl", &t, err, sizeof err);
        CHECK(name, rc == -1 && strstr(err, bad[i].want), "rc %d, message '%s', want '%s'", rc, err, bad[i].want);
    }
}

/* The entry of the built-in table for (device, N, collective) at `bytes`: file and
 * instances. */
static int builtin_at(const char *device, int n, Collective coll, size_t bytes, const char **file, int *inst)
{
    static char buf[1 << 16];
    static CclTuneTable t;
    char name[128], err[256];
    if (ccl__tune_builtin(device, n, buf, sizeof buf, name, sizeof name) != 0)
        return -1;
    if (ccl__tune_parse(buf, name, &t, err, sizeof err) != 0) {
        printf("FAIL tuner.builtin.parse: %s\n", err);
        failures++;
        return -1;
    }
    const CclTuneEntry *e = &t.e[coll][ccl__tune_bucket(bytes)];
    if (e->file < 0)
        return -1;
    *file = t.files[e->file];
    *inst = e->shape.instances;
    return 0;
}

static void test_builtin(void)
{
    static const struct { int n; Collective coll; size_t bytes; const char *file; int inst; } cases[] = {
        {4, COLL_ALLREDUCE, 1024, "allreduce/allpairs.ccl", 1},     {4, COLL_ALLREDUCE, 4096, "allreduce/allpairs.ccl", 1},
        {4, COLL_ALLREDUCE, 16384, "allreduce/allpairs.ccl", 4},    {4, COLL_ALLREDUCE, 65536, "allreduce/allpairs.ccl", 32},
        {4, COLL_ALLREDUCE, 262144, "allreduce/allpairs.ccl", 32},
        {4, COLL_ALLREDUCE, 512 << 10, "allreduce/twoshot.ccl", 32},  {4, COLL_ALLREDUCE, 1 << 20, "allreduce/twoshot.ccl", 32},
        {4, COLL_ALLREDUCE, 4 << 20, "allreduce/twoshot.ccl", 32},  {4, COLL_ALLREDUCE, 16 << 20, "allreduce/twoshot.ccl", 32},
        {4, COLL_ALLREDUCE, 32 << 20, "allreduce/ring.ccl", 64},
        {4, COLL_ALLREDUCE, (size_t)1 << 30, "allreduce/ring.ccl", 64}, {4, COLL_ALLREDUCE, 100, "allreduce/allpairs.ccl", 1},
        {2, COLL_ALLREDUCE, 1024, "allreduce/allpairs.ccl", 1},     {2, COLL_ALLREDUCE, 16384, "allreduce/recursive_doubling.ccl", 16},
        {2, COLL_ALLREDUCE, 1 << 20, "allreduce/allpairs.ccl", 32},     {2, COLL_ALLREDUCE, (size_t)1 << 30, "allreduce/ring.ccl", 32},
        /* The other collectives: each GPU count has its own rows (docs/tuner.md). */
        {2, COLL_ALLGATHER, 4096, "allgather/direct_ll.ccl", 1},    {4, COLL_ALLGATHER, 65536, "allgather/direct_ll.ccl", 32},
        {2, COLL_ALLGATHER, (size_t)1 << 30, "allgather/ring.ccl", 32},
        {4, COLL_ALLGATHER, 1 << 20, "allgather/direct.ccl", 8},
        {2, COLL_REDUCE_SCATTER, 1 << 20, "reduce_scatter/direct.ccl", 32},
        {4, COLL_REDUCE_SCATTER, 256 << 10, "reduce_scatter/direct_ll.ccl", 32},
        {2, COLL_ALLTOALL, 16 << 20, "alltoall/direct_own.ccl", 64},
        {4, COLL_ALLTOALL, 16 << 20, "alltoall/direct.ccl", 32},    {2, COLL_BROADCAST, 16 << 20, "broadcast/tree.ccl", 64},
        {2, COLL_BROADCAST, 64 << 20, "broadcast/direct.ccl", 64},    {4, COLL_BROADCAST, 64 << 20, "broadcast/twostep.ccl", 40},
        {4, COLL_BROADCAST, (size_t)1 << 30, "broadcast/chain.ccl", 64},
        {4, COLL_REDUCE, 16384, "reduce/direct_ll.ccl", 4},        {4, COLL_REDUCE, 256 << 20, "reduce/chain.ccl", 64},
        {4, COLL_REDUCE, (size_t)1 << 30, "reduce/chain.ccl", 64},        {4, COLL_REDUCE, 32 << 20, "reduce/pull.ccl", 32},
        {4, COLL_REDUCE, 4 << 20, "reduce/pull.ccl", 32},          {4, COLL_REDUCE, 16 << 20, "reduce/pull.ccl", 32},
        {4, COLL_BROADCAST, 8 << 20, "broadcast/twostep.ccl", 32}, {4, COLL_BROADCAST, 1 << 20, "broadcast/tree.ccl", 32},
        /* 2x H200: the LL programs past their hints (x2-sweep probe/). */
        {2, COLL_ALLGATHER, 256 << 10, "allgather/direct_ll.ccl", 32}, {2, COLL_ALLGATHER, 1 << 20, "allgather/direct.ccl", 16},
        {2, COLL_REDUCE_SCATTER, 512 << 10, "reduce_scatter/direct_ll.ccl", 32},
        {2, COLL_BROADCAST, 512 << 10, "broadcast/direct.ccl", 64}, {2, COLL_BROADCAST, 1 << 20, "broadcast/direct.ccl", 64},
        {2, COLL_REDUCE, 1 << 20, "reduce/direct.ccl", 64},     {2, COLL_REDUCE, 2 << 20, "reduce/direct.ccl", 64},
        /* 2x H200, 16 MB .. 1 GB: ccl-tune (docs/perf/x2-head). */
        {2, COLL_ALLTOALL, 256 << 20, "alltoall/direct_own.ccl", 64}, {2, COLL_REDUCE, 128 << 20, "reduce/twostep.ccl", 64},
        {2, COLL_REDUCE, (size_t)1 << 30, "reduce/twostep.ccl", 64},
        /* 2x H200, the v-collectives (docs/perf/x2-vcoll): alltoallv's one row, by bucket 1
         * (the library passes 0 bytes); allgatherv by its sum. */
        {2, COLL_ALLTOALLV, 0, "alltoallv/direct_own.ccl", 64}, {2, COLL_ALLGATHERV, 1024, "allgatherv/direct_ll.ccl", 1},
        {2, COLL_ALLGATHERV, 64 << 10, "allgatherv/direct_ll.ccl", 16},
        {2, COLL_ALLGATHERV, (size_t)1 << 30, "allgatherv/direct.ccl", 64},
        {4, COLL_ALLGATHERV, 64 << 10, "allgatherv/direct.ccl", 8},
        /* 4x H200 (docs/perf/ipc, section 5): small allgatherv on direct, alltoallv's row. */
        {4, COLL_ALLGATHERV, 1024, "allgatherv/direct.ccl", 1},     {4, COLL_ALLGATHERV, 16 << 10, "allgatherv/direct.ccl", 1},
        {4, COLL_ALLTOALLV, 0, "alltoallv/direct_own.ccl", 32},
        {4, COLL_ALLGATHERV, (size_t)1 << 30, "allgatherv/ring.ccl", 64},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *file = "";
        int inst = 0;
        char name[64];
        snprintf(name, sizeof name, "tuner.builtin.%dxH200.%s.%zu", cases[i].n, cclc_coll_name(cases[i].coll),
                 cases[i].bytes);
        int rc = builtin_at("NVIDIA H200", cases[i].n, cases[i].coll, cases[i].bytes, &file, &inst);
        CHECK(name, rc == 0 && !strcmp(file, cases[i].file) && inst == cases[i].inst, "got %s with %d instances, want %s with %d",
              rc ? "(none)" : file, inst, cases[i].file, cases[i].inst);
    }
    static char buf[1 << 16];
    char name[128];
    CHECK("tuner.builtin.h100", ccl__tune_builtin("NVIDIA H100 80GB HBM3", 2, buf, sizeof buf, name, sizeof name) == 0 &&
          strstr(name, "h200x2.tbl") && strstr(buf, "device NVIDIA H100 80GB HBM3\n") &&
          ccl__tune_builtin("NVIDIA H100 80GB HBM3", 4, buf, sizeof buf, name, sizeof name) == 0 && strstr(name, "h200x4.tbl"),
          "the H200 tables for H100s: %s", name);
    CHECK("tuner.builtin.only-hopper", ccl__tune_builtin("NVIDIA A100-SXM4-80GB", 4, buf, sizeof buf, name, sizeof name) != 0 &&
          ccl__tune_builtin("NVIDIA H200", 8, buf, sizeof buf, name, sizeof name) != 0 &&
          ccl__tune_builtin("cpu", 4, buf, sizeof buf, name, sizeof name) != 0, "a built-in table for another machine");
}

/* Two tables are the same: key (device and version aside: the built-in table's are the
 * communicator's), files in order, and every entry's file, shape and time (its line
 * aside: the files carry comments). "" or what differs first, into why. */
static void table_diff(const CclTuneTable *a, const CclTuneTable *b, char *why, size_t len)
{
    why[0] = 0;
    if (a->nranks != b->nranks || strcmp(a->topology, b->topology)) {
        snprintf(why, len, "key: ranks %d/%d, topology '%s'/'%s'", a->nranks, b->nranks, a->topology, b->topology);
        return;
    }
    if (a->nfiles != b->nfiles) {
        snprintf(why, len, "%d files, %d files", a->nfiles, b->nfiles);
        return;
    }
    for (int i = 0; i < a->nfiles; i++)
        if (strcmp(a->files[i], b->files[i])) {
            snprintf(why, len, "file %d: %s, %s", i, a->files[i], b->files[i]);
            return;
        }
    for (int c = 0; c < CCL__TUNE_COLLS; c++)
        for (int k = 0; k < 2 * CCL__TUNE_BUCKETS; k++) {
            int kb = k % CCL__TUNE_BUCKETS, plain = k >= CCL__TUNE_BUCKETS;
            const CclTuneEntry *x = plain ? &a->plain[c][kb] : &a->e[c][kb], *y = plain ? &b->plain[c][kb] : &b->e[c][kb];
            if (x->file != y->file || memcmp(&x->shape, &y->shape, sizeof x->shape) || x->time_us != y->time_us) {
                snprintf(why, len, "%s%s bucket 2^%d: file %d/%d, instances %d/%d, threads %d/%d, slices %d/%d, "
                         "protocol %d/%d, time %g/%g", cclc_coll_name((Collective)c), plain ? ":plain" : "", kb,
                         x->file, y->file,
                         x->shape.instances, y->shape.instances, x->shape.threads, y->shape.threads, x->shape.slices,
                         y->shape.slices, x->shape.protocol, y->shape.protocol, x->time_us, y->time_us);
                return;
            }
        }
}

/* The built-in tables as libccl carries them (ccl__tune_texts, from runtime/tune/NAME.tbl
 * at build time): each is a file of runtime/tune/ with the same text (the tests run in
 * the repository's root), parses, names only files that exist under algorithms/, and is
 * what ccl__tune_builtin gives for its key, with the device's model and libccl's
 * version in the key and every entry on its file's line; every runtime/tune/ file is
 * built in. */
static void test_builtin_texts(void)
{
    char version[32];
    snprintf(version, sizeof version, "%d.%d.%d", CCL_VERSION_MAJOR, CCL_VERSION_MINOR, CCL_VERSION_PATCH);
    CHECK("tuner.builtin.texts", ccl__tune_ntexts >= 2 && !ccl__tune_texts[ccl__tune_ntexts].path,
          "%d built-in tables", ccl__tune_ntexts);
    for (int i = 0; i < ccl__tune_ntexts; i++) {
        const char *path = ccl__tune_texts[i].path;
        char tname[128], err[512] = "", name[256], dev[160], file[CCL__TUNE_PATH + 16];
        static char text[1 << 16], out[1 << 16];
        static CclTuneTable t, b;
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        snprintf(tname, sizeof tname, "tuner.builtin.text.%s", base);
        FILE *f = fopen(path, "r");
        size_t len = f ? fread(text, 1, sizeof text - 1, f) : 0;
        if (f)
            fclose(f);
        text[len] = 0;
        int rc = strncmp(path, "runtime/tune/", 13) || !f || strcmp(text, ccl__tune_texts[i].text);
        if (rc)
            snprintf(err, sizeof err, "%s: %s", path, f ? "not the file's text (rebuild?)" : "no such file");
        if (!rc && (rc = ccl__tune_parse(ccl__tune_texts[i].text, path, &t, err, sizeof err)) == 0)
            for (int k = 0; k < t.nfiles && !rc; k++) {
                snprintf(file, sizeof file, "algorithms/%s", t.files[k]);
                if (t.files[k][0] == '/' || access(file, R_OK) != 0) {
                    rc = -1;
                    snprintf(err, sizeof err, "%s names %s, not a file under algorithms/", path, t.files[k]);
                }
            }
        CHECK(tname, rc == 0, "%s", err);
        if (rc)
            continue;
        /* ccl__tune_builtin for this table's key: the same table, this key, the same lines. */
        snprintf(tname, sizeof tname, "tuner.builtin.text.%s.builtin", base);
        snprintf(dev, sizeof dev, "NVIDIA %s", t.device);
        char why[512] = "";
        if (ccl__tune_builtin(dev, t.nranks, out, sizeof out, name, sizeof name) != 0)
            snprintf(why, sizeof why, "no built-in table for '%s' with %d ranks", dev, t.nranks);
        else if (!strstr(name, path))
            snprintf(why, sizeof why, "its name '%s' does not name %s", name, path);
        else if (ccl__tune_parse(out, name, &b, err, sizeof err) != 0)
            snprintf(why, sizeof why, "%s", err);
        else if (strcmp(b.device, dev) || strcmp(b.version, version))
            snprintf(why, sizeof why, "key device '%s' version '%s', want '%s' '%s'", b.device, b.version, dev, version);
        else
            table_diff(&t, &b, why, sizeof why);
        for (int c = 0; c < CCL__TUNE_COLLS && !why[0]; c++)
            for (int k = 0; k < CCL__TUNE_BUCKETS && !why[0]; k++)
                if (t.e[c][k].line != b.e[c][k].line)
                    snprintf(why, sizeof why, "%s bucket 2^%d on line %d, the file's %d", cclc_coll_name((Collective)c), k,
                             b.e[c][k].line, t.e[c][k].line);
        CHECK(tname, !why[0], "%s", why);
    }
    glob_t g;
    int missing = 0;
    char which[256] = "";
    if (glob("runtime/tune/*.tbl", 0, NULL, &g) == 0) {
        for (size_t k = 0; k < g.gl_pathc; k++) {
            int in = 0;
            for (int i = 0; i < ccl__tune_ntexts; i++)
                in |= !strcmp(g.gl_pathv[k], ccl__tune_texts[i].path);
            if (!in) {
                missing++;
                snprintf(which, sizeof which, "%s", g.gl_pathv[k]);
            }
        }
        CHECK("tuner.builtin.texts.all", missing == 0 && (int)g.gl_pathc == ccl__tune_ntexts,
              "%zu files in runtime/tune/, %d built in (%s is not: rebuild?)", g.gl_pathc, ccl__tune_ntexts, which);
        globfree(&g);
    } else {
        CHECK("tuner.builtin.texts.all", 0, "no runtime/tune/*.tbl (not run from the repository's root?)");
    }
}

/* ===== end to end on the CPU backend ===== */


typedef struct {
    ccl_comm_t *comm;
    int rank, nranks;
    size_t count;
    int coll;                        /* 0 allreduce, 1 allgather */
    int sym;                         /* buffers from ccl_mem_alloc, moved with ccl_mem_copy (GPUs) */
    pthread_barrier_t *ready;        /* non-NULL: every rank's buffers are ready before any calls */
    ccl_result_t r;
    size_t wrong;
    char err[512];
} Job;

static void *job_main(void *arg)
{
    Job *j = arg;
    size_t n = j->count, outn = j->coll ? n * (size_t)j->nranks : n;
    float *in = malloc(sizeof *in * (n ? n : 1)), *out = malloc(sizeof *out * (outn ? outn : 1));
    for (size_t i = 0; i < n; i++)
        in[i] = (float)(j->rank + 1 + (int)(i % 7));
    /* Symmetric buffers work on every backend (device memory on GPUs); the data moves
     * with ccl_mem_copy. Every rank allocates the same sizes in the same order. */
    void *sin = in, *sout = out;
    j->r = CCL_OK;
    if (j->sym) {
        j->r = ccl_mem_alloc(j->comm, &sin, sizeof *in * (n ? n : 1));
        if (j->r == CCL_OK)
            j->r = ccl_mem_alloc(j->comm, &sout, sizeof *out * (outn ? outn : 1));
        if (j->r == CCL_OK)
            j->r = ccl_mem_copy(j->comm, sin, in, sizeof *in * n);
    }
    if (j->ready)
        pthread_barrier_wait(j->ready);
    if (j->r == CCL_OK)
        j->r = j->coll == 0 ? ccl_all_reduce(sin, sout, n, CCL_F32, CCL_SUM, j->comm, NULL)
                            : ccl_all_gather(sin, sout, n, CCL_F32, j->comm, NULL);
    if (j->r == CCL_OK)
        j->r = ccl_comm_synchronize(j->comm);
    if (j->r == CCL_OK && j->sym)
        j->r = ccl_mem_copy(j->comm, out, sout, sizeof *out * outn);
    if (j->sym) {
        if (sout != out)
            ccl_mem_free(j->comm, sout);
        if (sin != in)
            ccl_mem_free(j->comm, sin);
    }
    if (j->r != CCL_OK)
        snprintf(j->err, sizeof j->err, "%s", ccl_comm_last_error(j->comm));
    j->wrong = 0;
    for (size_t i = 0; j->r == CCL_OK && i < outn; i++) {
        float want = j->coll == 0 ? (float)(j->nranks * (j->nranks + 1) / 2 + j->nranks * (int)(i % 7))
                                  : (float)((int)(i / n) + 1 + (int)(i % n % 7));
        if (out[i] != want)
            j->wrong++;
    }
    free(in);
    free(out);
    return NULL;
}

/* Runs one collective of `count` f32 on every rank; 0 when every rank succeeded with
 * exact results, and rank 0's explanation in why. */
static int use_sym;                  /* --use/--builtin: symmetric buffers (any backend) */

static int run_all(ccl_comm_t **comms, int n, int coll, size_t count, char *why, size_t len)
{
    Job jobs[16];
    pthread_t th[16];
    for (int r = 0; r < n; r++) {
        jobs[r] = (Job){.comm = comms[r], .rank = r, .nranks = n, .count = count, .coll = coll, .sym = use_sym};
        pthread_create(&th[r], NULL, job_main, &jobs[r]);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    ccl_comm_explain_choice(comms[0], why, len);
    for (int r = 0; r < n; r++) {
        char other[1024];
        ccl_comm_explain_choice(comms[r], other, sizeof other);
        if (jobs[r].r != CCL_OK) {
            snprintf(why, len, "rank %d: %s: %s", r, ccl_result_string(jobs[r].r), jobs[r].err);
            return -1;
        }
        if (jobs[r].wrong) {
            CCL__FMT(why, len, "rank %d: %zu wrong elements (%s)", r, jobs[r].wrong, other);
            return -1;
        }
        if (strcmp(other, why)) {
            CCL__FMT(why, len, "rank %d explains differently: '%s'", r, other);
            return -1;
        }
    }
    return 0;
}

/* The loaded algorithm of comm whose file ends with `file` and has `instances`, or NULL. */
static ccl_algorithm_t *find_alg(ccl_comm_t *comm, const char *file, int instances)
{
    size_t fl = strlen(file);
    for (int i = 0; i < comm->nalgs; i++) {
        ccl_algorithm_t *a = comm->algs[i];
        size_t al = strlen(a->file);
        if (al >= fl && !strcmp(a->file + al - fl, file) && a->instances == instances)
            return a;
    }
    return NULL;
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

static char tmpdir[256];

/* A table file for comm's own key (or with `ranks` in place of N) plus `entries`. */
static void table_for(ccl_comm_t *comm, const char *path, int ranks, const char *entries)
{
    char dev[128], topo[64], ver[32], text[4096];
    ccl__tune_key(comm, dev, sizeof dev, topo, sizeof topo, ver, sizeof ver);
    snprintf(text, sizeof text, "ccl-tune-table 1\ndevice %s\nranks %d\ntopology %s\nversion %s\n%s", dev,
             ranks ? ranks : comm->nranks, topo, ver, entries);
    write_file(path, text);
}

static ccl_backend_t backend = CCL_BACKEND_CPU;

static int init(ccl_comm_t **comms, int n)
{
    ccl_config_t cfg = {.backend = backend};
    ccl_result_t r = ccl_comm_init_all(comms, n, NULL, &cfg);
    if (r != CCL_OK) {
        printf("FAIL tuner.init: %s\n", ccl_comm_last_error(NULL));
        failures++;
    }
    return r == CCL_OK ? 0 : -1;
}

static void fini(ccl_comm_t **comms, int n)
{
    for (int r = 0; r < n; r++)
        ccl_comm_destroy(comms[r]);
}

/* Whether the row's protocol moves every remote byte of alg's program as lines (the GPU
 * backend's lines_only, which these CPU comms do not set): peers then reach no buffer of
 * the caller's, whatever the program writes. */
static int plain_row_lines_only(const ccl_algorithm_t *alg, const CclTuneEntry *e)
{
    Protocol proto = ccl__shape_protocol(e->shape.protocol, alg->prog->protocol);
    return proto != PROTO_SIMPLE && cclc_emit_cuda_lines_only(alg->plan, proto);
}

/* Every ":plain" row of a built-in table names a program that stages no ordinary
 * buffer: at the table's rank count no peer reaches its in or out, or the row's
 * protocol carries all of it as lines, which is what the rows are for (docs/tuner.md).
 * Loaded on CPU ranks, as many as the table's. */
static void test_builtin_plain_rows(void)
{
    for (int i = 0; i < ccl__tune_ntexts; i++) {
        static CclTuneTable t;
        char err[512], tname[160], why[512] = "";
        const char *path = ccl__tune_texts[i].path, *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        snprintf(tname, sizeof tname, "tuner.builtin.plain-rows-stage-nothing.%s", base);
        ccl_comm_t *comms[16];
        if (ccl__tune_parse(ccl__tune_texts[i].text, path, &t, err, sizeof err) != 0 || t.nranks > 16 ||
            init(comms, t.nranks))
            continue; /* test_builtin_texts says why */
        int rows = 0, done[CCL__TUNE_FILES][4] = {{0}};
        for (int c = 0; c < CCL__TUNE_COLLS && !why[0]; c++)
            for (int k = 0; k < CCL__TUNE_BUCKETS && !why[0]; k++) {
                const CclTuneEntry *e = &t.plain[c][k];
                if (e->file < 0 || done[e->file][e->shape.protocol]++)
                    continue;
                rows++;
                char file[CCL__TUNE_PATH + 16];
                snprintf(file, sizeof file, "algorithms/%s", t.files[e->file]);
                ccl_algorithm_t *alg[16] = {0};
                int loaded = 1;
                for (int r = 0; r < t.nranks; r++)
                    loaded &= ccl_algorithm_load(comms[r], file, 0, &alg[r]) == CCL_OK;
                if (!loaded)
                    snprintf(why, sizeof why, "%s: %s", file, ccl_comm_last_error(comms[0]));
                else if (!plain_row_lines_only(alg[0], e) && (alg[0]->in_remote || alg[0]->out_remote))
                    snprintf(why, sizeof why, "line %d: %s lets peers reach its %s at N=%d, which stages an ordinary "
                             "buffer", e->line, file, alg[0]->in_remote ? "in" : "out", t.nranks);
                for (int r = 0; r < t.nranks; r++)
                    if (alg[r])
                        ccl_algorithm_free(alg[r]);
            }
        CHECK(tname, !why[0] && rows > 0, "%s", why[0] ? why : "no ':plain' rows");
        fini(comms, t.nranks);
    }
}

/* n ranks whose table is tmpdir/NAME with `entries` under their key (CCL_TUNE_FILE,
 * path written to `path`); -1 when the comms cannot start. */
static int init_with_table(ccl_comm_t **comms, int n, const char *name, const char *entries, char *path, size_t len)
{
    if (init(comms, n))
        return -1;
    snprintf(path, len, "%s/%s", tmpdir, name);
    table_for(comms[0], path, 0, entries);
    setenv("CCL_TUNE_FILE", path, 1);
    return 0;
}

static void test_forced(void)
{
    enum { N = 4 };
    ccl_comm_t *comms[N];
    char path[512], why[1024];
    if (init_with_table(comms, N, "forced.tbl",
                        "allreduce 4096 allreduce/ring.ccl 2 - 1 -\n"
                        "allreduce 1024 allreduce/recursive_doubling.ccl 1 - - -\n"
                        "allreduce 65536 allreduce/ring.ccl 3 - 2 -\n"
                        "allreduce 16384 allreduce/nonexistent.ccl 1 - - -\n"
                        "allreduce 32768 allgather/ring.ccl 1 - - -\n"
                        "allgather 4096 allgather/direct.ccl 2 - - -\n"
                        "allreduce 2048 allreduce/ring.ccl 1 256 - ll\n",
                        path, sizeof path))
        return;

    int rc = run_all(comms, N, 0, 1024, why, sizeof why); /* 4096 bytes */
    char want[1024];
    snprintf(want, sizeof want, "allreduce/ring.ccl (instances 2, threads default, slices 1, protocol simple) from %s:6 (bucket 4096)",
             path);
    CHECK("tuner.forced.4096", rc == 0 && strstr(why, want), "%s (want '%s')", why, want);
    ccl_algorithm_t *ring2 = find_alg(comms[0], "allreduce/ring.ccl", 2);
    CHECK("tuner.forced.ran", ring2 && ring2->ncalls == 1 && ring2->origin == CCL__ORIGIN_TUNER,
          "the ring with 2 instances %s", ring2 ? "did not run exactly once" : "was not loaded");

    rc = run_all(comms, N, 0, 700, why, sizeof why); /* 2800 bytes: rounds up to 4096 */
    CHECK("tuner.forced.roundup", rc == 0 && strstr(why, "allreduce/ring.ccl (instances 2") && strstr(why, "(bucket 4096)") &&
          ring2 && ring2->ncalls == 2, "%s", why);

    rc = run_all(comms, N, 0, 256, why, sizeof why); /* 1024 bytes */
    CHECK("tuner.forced.1024", rc == 0 && strstr(why, "allreduce/recursive_doubling.ccl (instances 1") && strstr(why, ":7 (bucket 1024)"),
          "%s", why);

    rc = run_all(comms, N, 0, 16384, why, sizeof why); /* 65536 bytes: 3 instances, 2 slices where pipeline-safe */
    ccl_algorithm_t *ring3 = find_alg(comms[0], "allreduce/ring.ccl", 3);
    CHECK("tuner.forced.shape", rc == 0 && strstr(why, "allreduce/ring.ccl (instances 3") && ring3 && ring3->ncalls == 1 &&
          ring3->slices == (ring3->plan->proof.pipeline_safe ? 2 : 1), "%s", why);

    rc = run_all(comms, N, 0, 20, why, sizeof why); /* 80 bytes: bucket 128 has no entry */
    snprintf(want, sizeof want, "by its sizes hint; %s has no allreduce entry for bucket 128", path);
    CHECK("tuner.forced.noentry", rc == 0 && strstr(why, want), "%s", why);

    rc = run_all(comms, N, 0, 4096, why, sizeof why); /* 16384 bytes: a file that does not exist */
    CHECK("tuner.forced.missing-file", rc == 0 && strstr(why, "by its sizes hint") && strstr(why, "nonexistent.ccl") &&
          strstr(why, ":9:"), "%s", why);

    rc = run_all(comms, N, 0, 8192, why, sizeof why); /* 32768 bytes: an allgather file for allreduce */
    CHECK("tuner.forced.wrong-collective", rc == 0 && strstr(why, "is a allgather algorithm, not allreduce"), "%s", why);

    rc = run_all(comms, N, 1, 1024, why, sizeof why); /* allgather 4096 bytes */
    CHECK("tuner.forced.allgather", rc == 0 && strstr(why, "allgather/direct.ccl (instances 2") && strstr(why, "(bucket 4096)"),
          "%s", why);

    /* The CPU backend has no threads per block and runs the program's protocol. */
    rc = run_all(comms, N, 0, 512, why, sizeof why); /* 2048 bytes */
    CHECK("tuner.forced.cpu-ignores-threads-protocol",
          rc == 0 && strstr(why, "allreduce/ring.ccl (instances 1, threads default, slices 1, protocol simple) from"), "%s", why);

    /* A registration wins over the table. */
    ccl_algorithm_t *mine[N];
    int ok = 1;
    char src[2048];
    snprintf(src, sizeof src, "%s/allreduce/allpairs.ccl", getenv("CCL_ALGORITHM_DIR") ? getenv("CCL_ALGORITHM_DIR") : "algorithms");
    for (int r = 0; r < N; r++)
        ok &= ccl_algorithm_load(comms[r], src, 0, &mine[r]) == CCL_OK &&
              ccl_comm_use_algorithm(comms[r], mine[r], 0, 0) == CCL_OK;
    rc = ok ? run_all(comms, N, 0, 1024, why, sizeof why) : -1;
    CHECK("tuner.forced.registration-wins", rc == 0 && strstr(why, "allpairs.ccl") && strstr(why, "registered with ccl_comm_use_algorithm"),
          "%s", ok ? why : ccl_comm_last_error(comms[0]));
    fini(comms, N);
}

/* Rows for ordinary buffers (":plain"): a call whose buffers are not in the heap takes
 * them, one on ccl_mem_alloc buffers the plain rows; a collective without plain rows
 * takes its rows whatever the buffers; ranks whose buffers differ in kind run
 * different programs, which every rank refuses, naming both. CPU backend only: malloc
 * buffers are ordinary there. */
static void test_plain_rows(void)
{
    enum { N = 4 };
    ccl_comm_t *comms[N];
    char path[512], why[1024];
    if (init_with_table(comms, N, "plain.tbl",
                        "allreduce 4096 allreduce/ring.ccl 2 - 1 -\n"
                        "allgather 4096 allgather/direct.ccl 2 - - -\n"
                        "allreduce:plain 4096 allreduce/recursive_doubling.ccl 1 - - -\n",
                        path, sizeof path))
        return;
    int rc = run_all(comms, N, 0, 1024, why, sizeof why);
    char want[1024];
    snprintf(want, sizeof want, "allreduce/recursive_doubling.ccl (instances 1, threads default, slices 1, protocol ll) "
             "from %s:8 (bucket 4096, ordinary buffers)", path);
    CHECK("tuner.plain.ordinary", rc == 0 && strstr(why, want), "%s (want '%s')", why, want);
    use_sym = 1;
    rc = run_all(comms, N, 0, 1024, why, sizeof why);
    use_sym = 0;
    snprintf(want, sizeof want, "allreduce/ring.ccl (instances 2, threads default, slices 1, protocol simple) from %s:6 "
             "(bucket 4096)", path);
    CHECK("tuner.plain.symmetric", rc == 0 && strstr(why, want), "%s (want '%s')", why, want);
    rc = run_all(comms, N, 1, 1024, why, sizeof why);
    CHECK("tuner.plain.none-for-collective", rc == 0 && strstr(why, "allgather/direct.ccl (instances 2") &&
          !strstr(why, "ordinary"), "%s", why);

    /* Ranks 0 and 1 on ccl_mem_alloc buffers, 2 and 3 on malloc ones. Every rank has its
     * buffers before any calls: a rank still allocating when the others' refusal stops the
     * communicator would fail its allocation instead of the call. */
    Job jobs[N];
    pthread_t th[N];
    pthread_barrier_t ready;
    pthread_barrier_init(&ready, NULL, N);
    for (int r = 0; r < N; r++) {
        jobs[r] = (Job){.comm = comms[r], .rank = r, .nranks = N, .count = 1024, .coll = 0, .sym = r < 2,
                        .ready = &ready};
        pthread_create(&th[r], NULL, job_main, &jobs[r]);
    }
    int refused = 0;
    for (int r = 0; r < N; r++) {
        pthread_join(th[r], NULL);
        refused += jobs[r].r != CCL_OK && strstr(jobs[r].err, "ring.ccl") && strstr(jobs[r].err, "recursive_doubling.ccl");
    }
    pthread_barrier_destroy(&ready);
    CHECK("tuner.plain.mixed-kinds-refused", refused == N, "%d of %d ranks failed naming both programs; rank 0: %s; rank 3: %s",
          refused, N, jobs[0].err, jobs[3].err);
    fini(comms, N);
    unsetenv("CCL_TUNE_FILE");
}

/* A table entry with an absolute path names a program anyone may have written: it is
 * loaded only when the file is this user's (or root's) and nobody else can write it or
 * its folder, as the algorithm library's files (before the fix: loaded whatever it
 * was, running another user's program in this process). */
static void test_absolute_trust(void)
{
    enum { N = 4 };
    ccl_comm_t *comms[N];
    if (init(comms, N))
        return;
    char lib[2048], alg[600], path[600], entries[1400], why[1024];
    snprintf(lib, sizeof lib, "%s/allreduce/allpairs.ccl", getenv("CCL_ALGORITHM_DIR") ? getenv("CCL_ALGORITHM_DIR")
             : "algorithms");
    snprintf(alg, sizeof alg, "%s/planted.ccl", tmpdir);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && chmod 666 '%s'", lib, alg, alg);
    if (system(cmd) != 0) {
        CHECK("tuner.absolute.setup", 0, "cannot copy %s", lib);
        fini(comms, N);
        return;
    }
    snprintf(path, sizeof path, "%s/absolute.tbl", tmpdir);
    snprintf(entries, sizeof entries, "allreduce 4096 %s 1 - - -\n", alg);
    table_for(comms[0], path, 0, entries);
    setenv("CCL_TUNE_FILE", path, 1);
    int rc = run_all(comms, N, 0, 1024, why, sizeof why);
    CHECK("tuner.absolute.writable-by-others",
          rc == 0 && strstr(why, "by its sizes hint") && strstr(why, "is writable by other users") &&
          !find_alg(comms[0], "planted.ccl", 1), "%s", why);
    fini(comms, N);

    /* The same file, private again: used. */
    if (init(comms, N))
        return;
    chmod(alg, 0644);
    rc = run_all(comms, N, 0, 1024, why, sizeof why);
    CHECK("tuner.absolute.own-file", rc == 0 && strstr(why, "planted.ccl (instances 1") && strstr(why, ":6 (bucket 4096)"),
          "%s", why);
    fini(comms, N);

    /* Another user's file (only root can make one here). */
    if (geteuid() == 0 && chown(alg, 65534, 65534) == 0) {
        if (init(comms, N))
            return;
        rc = run_all(comms, N, 0, 1024, why, sizeof why);
        CHECK("tuner.absolute.another-user", rc == 0 && strstr(why, "belongs to another user") &&
              !find_alg(comms[0], "planted.ccl", 1), "%s", why);
        fini(comms, N);
    }
    unsetenv("CCL_TUNE_FILE");
}

static void test_ignored(void)
{
    enum { N = 4 };
    ccl_comm_t *comms[N];
    char path[512], why[1024], want[1024];

    /* A key for 8 ranks on a 4-rank communicator. */
    if (init(comms, N))
        return;
    snprintf(path, sizeof path, "%s/eight.tbl", tmpdir);
    table_for(comms[0], path, 8, "allreduce 4096 allreduce/ring.ccl 2 - 1 -\n");
    setenv("CCL_TUNE_FILE", path, 1);
    int rc = run_all(comms, N, 0, 1024, why, sizeof why);
    snprintf(want, sizeof want, "%s is for 8 ranks, this communicator has 4", path);
    CHECK("tuner.mismatch.ranks", rc == 0 && strstr(why, "by its sizes hint") && strstr(why, want),
          "%s", why);
    CHECK("tuner.mismatch.not-loaded", !find_alg(comms[0], "allreduce/ring.ccl", 2), "the table's ring was loaded");
    fini(comms, N);

    /* Another device. */
    if (init(comms, N))
        return;
    snprintf(path, sizeof path, "%s/device.tbl", tmpdir);
    write_file(path, "ccl-tune-table 1\ndevice NVIDIA H200\nranks 4\ntopology p2p-all\nversion 0.1.0\n"
                     "allreduce 4096 allreduce/ring.ccl 2 - 1 -\n");
    setenv("CCL_TUNE_FILE", path, 1);
    rc = run_all(comms, N, 0, 1024, why, sizeof why);
    snprintf(want, sizeof want, "%s is for device 'NVIDIA H200', this communicator's is 'cpu'", path);
    CHECK("tuner.mismatch.device", rc == 0 && strstr(why, "by its sizes hint") && strstr(why, want), "%s", why);
    fini(comms, N);

    /* A malformed table is not used at all. */
    if (init(comms, N))
        return;
    snprintf(path, sizeof path, "%s/bad.tbl", tmpdir);
    table_for(comms[0], path, 0, "allreduce 4096 allreduce/ring.ccl 2 - 1 -\nallreduce 3000 allreduce/ring.ccl 2 - 1 -\n");
    setenv("CCL_TUNE_FILE", path, 1);
    rc = run_all(comms, N, 0, 1024, why, sizeof why);
    snprintf(want, sizeof want, "%s:7: bytes '3000' is not a power of two", path);
    CHECK("tuner.malformed", rc == 0 && strstr(why, "by its sizes hint") && strstr(why, want), "%s", why);
    fini(comms, N);

    /* A file that is not there; and "none". */
    if (init(comms, N))
        return;
    snprintf(path, sizeof path, "%s/absent.tbl", tmpdir);
    setenv("CCL_TUNE_FILE", path, 1);
    rc = run_all(comms, N, 0, 1024, why, sizeof why);
    CHECK("tuner.absent", rc == 0 && strstr(why, "by its sizes hint") && strstr(why, "absent.tbl': No such file"), "%s", why);
    fini(comms, N);
    if (init(comms, N))
        return;
    setenv("CCL_TUNE_FILE", "none", 1);
    rc = run_all(comms, N, 0, 1024, why, sizeof why);
    CHECK("tuner.none", rc == 0 && strstr(why, "no tuning table: CCL_TUNE_FILE=none"), "%s", why);
    fini(comms, N);

    /* The default location in the cache folder, found without CCL_TUNE_FILE. */
    char cache[512];
    snprintf(cache, sizeof cache, "%s/cache", tmpdir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", cache);
    if (system(cmd) != 0)
        printf("FAIL tuner.default: cannot make %s\n", cache), failures++;
    unsetenv("CCL_TUNE_FILE");
    setenv("CCL_CACHE_DIR", cache, 1);
    if (init(comms, N))
        return;
    CCL__FMT(path, sizeof path, "%s/tune-cpu-4.tbl", cache);
    table_for(comms[0], path, 0, "allreduce 4096 allreduce/ring.ccl 2 - 1 -\n");
    rc = run_all(comms, N, 0, 1024, why, sizeof why);
    CHECK("tuner.default-location", rc == 0 && strstr(why, "allreduce/ring.ccl (instances 2") && strstr(why, path), "%s", why);
    fini(comms, N);
    unsetenv("CCL_CACHE_DIR");
}

/* ===== --use TABLE N ===== */

static int use_table(const char *path, int n)
{
    CclTuneTable t;
    char err[512], why[1024];
    FILE *f = fopen(path, "r");
    if (!f) {
        printf("FAIL tuner.use: cannot open %s\n", path);
        return 1;
    }
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = 0;
    if (ccl__tune_parse(text, path, &t, err, sizeof err) != 0) {
        printf("FAIL tuner.use: %s\n", err);
        return 1;
    }
    setenv("CCL_TUNE_FILE", path, 1);
    ccl_comm_t *comms[16];
    if (n > 16 || init(comms, n))
        return 1;
    int used = 0;
    for (int b = 0; b < CCL__TUNE_BUCKETS; b++) {
        /* Ordinary buffers (malloc) take the bucket's ":plain" row where there is one. */
        const CclTuneEntry *e = &t.e[COLL_ALLREDUCE][b];
        if (!use_sym && t.plain[COLL_ALLREDUCE][b].file >= 0)
            e = &t.plain[COLL_ALLREDUCE][b];
        if (e->file < 0)
            continue;
        size_t bytes = (size_t)1 << b;
        char name[64], want[512];
        snprintf(name, sizeof name, "tuner.use.allreduce.%zu", bytes);
        snprintf(want, sizeof want, "%s (instances %d", t.files[e->file], e->shape.instances ? e->shape.instances : 1);
        int rc = run_all(comms, n, 0, bytes / 4, why, sizeof why);
        CHECK(name, rc == 0 && strstr(why, want) && strstr(why, path), "%s (want '%s' from %s)", why, want, path);
        used++;
    }
    CHECK("tuner.use.entries", used > 0, "%s has no allreduce entry", path);
    fini(comms, n);
    return failures != 0;
}

/* --builtin N: with no table file, a communicator on 4 or 2 H200s follows the built-in
 * table; elsewhere it says so and skips. */
static int use_builtin(int n)
{
    ccl_comm_t *comms[16];
    char why[1024], dev[128], topo[64], ver[32], name[128];
    static char text[1 << 16];
    unsetenv("CCL_TUNE_FILE");
    if (n > 16 || init(comms, n))
        return 1;
    ccl__tune_key(comms[0], dev, sizeof dev, topo, sizeof topo, ver, sizeof ver);
    if (ccl__tune_builtin(dev, n, text, sizeof text, name, sizeof name) != 0) {
        printf("ok tuner.builtin.use # skip: no built-in table for '%s' with %d ranks\n", dev, n);
        fini(comms, n);
        return 0;
    }
    static const size_t sizes[] = {1024, 16384, 65536, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const char *file = "";
        int inst = 0;
        char tname[64], want[256];
        snprintf(tname, sizeof tname, "tuner.builtin.use.%zu", sizes[i]);
        builtin_at(dev, n, COLL_ALLREDUCE, sizes[i], &file, &inst);
        snprintf(want, sizeof want, "%s (instances %d", file, inst);
        int rc = run_all(comms, n, 0, sizes[i] / 4, why, sizeof why);
        CHECK(tname, rc == 0 && strstr(why, want) && strstr(why, "from the built-in table"), "%s (want '%s')", why, want);
    }
    fini(comms, n);
    return failures != 0;
}

int main(int argc, char **argv)
{
    /* --gpu (last): the GPU backend and symmetric buffers, for the GPU machines. */
    if (argc >= 2 && !strcmp(argv[argc - 1], "--gpu")) {
        backend = CCL_BACKEND_GPU;
        use_sym = 1;
        argc--;
    }
    if (argc == 4 && !strcmp(argv[1], "--use"))
        return use_table(argv[2], atoi(argv[3]));
    if (argc == 3 && !strcmp(argv[1], "--builtin"))
        return use_builtin(atoi(argv[2]));
    if (argc == 4 && !strcmp(argv[1], "--use-sym")) {
        use_sym = 1;
        return use_table(argv[2], atoi(argv[3]));
    }
    const char *td = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/ccl-tuner-XXXXXX", td && *td ? td : "/tmp");
    if (!mkdtemp(tmpdir)) {
        printf("FAIL tuner: cannot make a temporary folder\n");
        return 1;
    }
    test_buckets();
    test_parse();
    test_builtin();
    test_builtin_texts();
    if (backend == CCL_BACKEND_CPU)
        test_builtin_plain_rows();
    test_forced();
    if (backend == CCL_BACKEND_CPU)
        test_plain_rows();
    test_absolute_trust();
    test_ignored();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        printf("note: could not remove %s\n", tmpdir);
    return failures != 0;
}
