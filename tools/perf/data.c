/* data.c: ccl-perf's collectives (names and buffer shapes, which every other file uses)
 * and its exactly verifiable data: per dtype and op, inputs whose reduction is one exact
 * bit pattern in any order (see perf.c, "Exactness"), as pattern tables; and the
 * v-collectives' counts (alltoallv's matrix, allgatherv's vector), proportional or
 * Zipf-skewed. */
#include "perf.h"

/* ===== the collectives ===== */

const CollInfo perf_colls[PERF_NCOLLS] = {
    [PERF_ALLREDUCE] = {"allreduce", "all_reduce", 1, 0, 1, 1, COLL_ALLREDUCE, 0},
    [PERF_ALLGATHER] = {"allgather", "all_gather", 0, 0, 1, 0, COLL_ALLGATHER, 0},
    [PERF_REDUCE_SCATTER] = {"reduce_scatter", "reducescatter", 1, 0, 0, 1, COLL_REDUCE_SCATTER, 0},
    [PERF_ALLTOALL] = {"alltoall", "all_to_all", 0, 0, 0, 0, COLL_ALLTOALL, 0},
    [PERF_BROADCAST] = {"broadcast", "bcast", 0, 1, 1, 1, COLL_BROADCAST, 0},
    [PERF_REDUCE] = {"reduce", "reduce", 1, 1, 1, 1, COLL_REDUCE, 0},
    /* in_n and out_n: the count is what a rank sends in all; what it receives differs
     * per rank (perf_v_counts), and perf.c sizes the receive buffer from the matrix. */
    [PERF_ALLTOALLV] = {"alltoallv", "all_to_all_v", 0, 0, 1, 1, COLL_ALLTOALLV, 1},
    [PERF_SENDRECV] = {"sendrecv", "send_recv", 0, 0, 1, 1, -1, 1},
    /* count: the receive buffer (the vector's sum); a rank sends its own entry of it. */
    [PERF_ALLGATHERV] = {"allgatherv", "all_gather_v", 0, 0, 1, 1, COLL_ALLGATHERV, 1},
};

/* Row q of alltoallv's count matrix: counts[p] is what rank q sends rank p, in
 * elements, proportional to the weight 1 + ((q + 2p) mod (n + 1)), and summing to
 * exactly `total` (the floors' remainder goes one element each to the first peers).
 * Uneven for every n >= 2 (mod n would make every weight of a row equal at n = 2), the
 * same on every rank, and small totals give zero-size segments, which the call must
 * handle too. The help text (perf.c) describes it; keep the two alike. */
void perf_v_counts(int n, size_t total, int q, size_t *counts)
{
    size_t wsum = 0, given = 0;
    for (int p = 0; p < n; p++)
        wsum += 1 + (size_t)(q + 2 * p) % (size_t)(n + 1);
    for (int p = 0; p < n; p++) {
        size_t w = 1 + (size_t)(q + 2 * p) % (size_t)(n + 1);
        /* total * w / wsum without overflowing for any total. */
        counts[p] = total / wsum * w + total % wsum * w / wsum;
        given += counts[p];
    }
    for (int p = 0; given < total; p++, given++)
        counts[p]++;
}

/* A 64-bit mix (splitmix64's finalizer): the Zipf rows' permutations. */
static uint64_t mix(uint64_t x)
{
    x += UINT64_C(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* Row q of a Zipf-skewed count matrix, as a mixture-of-experts dispatch makes one: rank
 * q sends its k-th most loaded peer a share of `total` proportional to 1/(k+1)^1.2, and
 * which peer is its k-th is a permutation of its own (Fisher-Yates on mix(n, q, i)), so
 * the load of a peer (a column) differs too. Counts are whole multiples of `unit`
 * elements (16 bytes' worth: the rows of a token tensor), the floors' remainder one unit
 * each to the most loaded first; what does not fill a unit goes to the most loaded peer,
 * so a row sums to exactly `total` and every other count stays a multiple of `unit`.
 * The weights are integers (65536 / (k+1)^1.2, rounded, at least 1), fixed before any
 * division, so every rank computes the same matrix. Deterministic: the same (n, total,
 * q, unit) gives the same row on every run. */
void perf_v_counts_zipf(int n, size_t total, int q, size_t unit, size_t *counts)
{
    int perm[CCLC_MAX_RANKS];
    size_t w[CCLC_MAX_RANKS], wsum = 0, units = total / unit, given = 0;
    for (int k = 0; k < n; k++) {
        perm[k] = k;
        double v = floor(65536.0 / pow((double)(k + 1), 1.2) + 0.5);
        w[k] = v < 1 ? 1 : (size_t)v;
        wsum += w[k];
    }
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(mix((uint64_t)n << 40 ^ (uint64_t)q << 20 ^ (uint64_t)i) % (uint64_t)(i + 1));
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int k = 0; k < n; k++) {
        /* units * w / wsum without overflowing: wsum < 2^27, w <= 2^16. */
        size_t u = units / wsum * w[k] + units % wsum * w[k] / wsum;
        counts[perm[k]] = u;
        given += u;
    }
    for (int k = 0; given < units; k = (k + 1) % n, given++)
        counts[perm[k]]++;
    for (int p = 0; p < n; p++)
        counts[p] *= unit;
    counts[perm[0]] += total % unit;
}

/* Row q of the --v-counts matrix: what rank q sends each rank at `total` elements (a
 * row sums to total). allgatherv's vector is row 0: counts[p] is what rank p gives. */
void perf_v_row(int kind, int n, size_t total, int q, size_t esize, size_t *counts)
{
    if (kind == PERF_VCOUNTS_ZIPF)
        perf_v_counts_zipf(n, total, q, esize < 16 ? 16 / esize : 1, counts);
    else
        perf_v_counts(n, total, q, counts);
}

/* "proportional" and "zipf", as --v-counts, the header, the CSV and the JSON spell them. */
const char *perf_v_counts_name(int kind) { return kind == PERF_VCOUNTS_ZIPF ? "zipf" : "proportional"; }

/* ===== exactly verifiable data ===== */

/* The largest M such that every integer in 0..M is exact in the dtype (capped at 2^20:
 * the patterns never need more); u8 stays below 255, so the 0xff poison is never
 * expected. Elements are stored with tool_store_int. */
static uint64_t exact_max(ccl_dtype_t t)
{
    return t == CCL_U8 ? 200 : (uint64_t)tool_exact_max(t);
}

/* An integer dtype's value v (as the library computes it: in the dtype's width, wrapping
 * around) sign-extended (i8, i32) or zero-extended (u8, u32) to 64 bits; i64's and u64's
 * as they are. */
static int64_t wrap(int64_t v, ccl_dtype_t t)
{
    int bits = (int)ccl_dtype_size(t) * 8;
    if (!tool_dtype_integer(t) || bits == 64)
        return v;
    uint64_t u = (uint64_t)v & ((UINT64_C(1) << bits) - 1);
    if (!tool_dtype_unsigned(t) && u >> (bits - 1))
        return (int64_t)(u | ~((UINT64_C(1) << bits) - 1));
    return (int64_t)u;
}

/* a < b as the dtype orders them: u64's above 2^63 - 1 are negative int64_t's here. */
static int less(int64_t a, int64_t b, ccl_dtype_t t)
{
    return tool_dtype_unsigned(t) ? (uint64_t)a < (uint64_t)b : a < b;
}

/* The value of element j (j < PERF_PERIOD) of rank r's input. Sums and averages: every
 * rank holds k(j) plus or minus s (pairs of ranks cancel), so the sum is N*k(j), a
 * multiple of N (avg is exact too) and every partial sum is at most N*cap <= M. Products:
 * ones and twos (powers of two are exact; at most 2^3 in all). Min, max and data
 * movement: any value up to min(M, 255) that depends on rank and position; for the
 * integer dtypes, whose every value is exact, a third of them negative (-2 .. -(M-1) in
 * the signed ones) or half of them with the top bit set (u32, u64), so that min and max
 * order them as the dtype does (a signed comparison of u32, or an unsigned one of i8,
 * picks other elements). No value is -1 or all ones: the poison stays unexpected. */
static int64_t gen_value(int r, int j, int n, ccl_op_t op, int reduces, ccl_dtype_t t)
{
    uint64_t M = exact_max(t), small = M < 255 ? M : 255;
    if (!reduces || op == CCL_MIN || op == CCL_MAX) {
        int64_t v = (int64_t)(((uint64_t)r * 37 + (uint64_t)j * 11 + 1) % (small + 1));
        int bits = (int)ccl_dtype_size(t) * 8;
        if (tool_dtype_integer(t) && !tool_dtype_unsigned(t) && (r + 2 * j) % 3 == 0)
            v = -(v % (int64_t)(small - 1)) - 2;
        else if (tool_dtype_unsigned(t) && bits >= 32 && (r + j) % 2 == 0)
            v = wrap((int64_t)(UINT64_C(1) << (bits - 1) | (uint64_t)v), t);
        return v;
    }
    if (op == CCL_PROD)
        return (r < 8 && (r + j) % 3 == 0) ? 2 : 1;
    uint64_t cap = M / (uint64_t)n;
    if (cap == 0)
        return r == 0;             /* too many ranks for the dtype: only rank 0 counts */
    if (cap == 1)
        return 1;
    uint64_t k = 1 + (uint64_t)j * 7 % (cap - 1);
    int pair = r / 2;
    if (n % 2 && r == n - 1)
        return (int64_t)k;
    uint64_t s = (uint64_t)((j + pair) % 3 != 0);
    return (int64_t)(r % 2 == 0 ? k + s : k - s);
}

/* The reduction of column j over all ranks, in integers, as the dtype computes it. */
static int64_t reduced_value(int j, int n, ccl_op_t op, ccl_dtype_t t)
{
    int64_t acc = gen_value(0, j, n, op, 1, t);
    for (int r = 1; r < n; r++) {
        int64_t v = gen_value(r, j, n, op, 1, t);
        switch (op) {
        case CCL_PROD: acc *= v; break;
        case CCL_MIN: acc = less(v, acc, t) ? v : acc; break;
        case CCL_MAX: acc = less(acc, v, t) ? v : acc; break;
        default: acc += v; break;
        }
    }
    if (op == CCL_AVG)
        acc /= n;
    return wrap(acc, t);
}

void perf_pattern_init(Pattern *p, int n, PerfColl c, ccl_op_t op, ccl_dtype_t t)
{
    p->esize = ccl_dtype_size(t);
    p->tab_in = calloc((size_t)n, sizeof *p->tab_in);
    p->tab_red = malloc(PERF_PERIOD * p->esize);
    if (!p->tab_in || !p->tab_red) {
        fprintf(stderr, "ccl-perf: out of memory\n");
        exit(1);
    }
    for (int r = 0; r < n; r++) {
        p->tab_in[r] = malloc(PERF_PERIOD * p->esize);
        if (!p->tab_in[r]) {
            fprintf(stderr, "ccl-perf: out of memory\n");
            exit(1);
        }
        for (int j = 0; j < PERF_PERIOD; j++)
            tool_store_int(p->tab_in[r], (size_t)j, gen_value(r, j, n, op, perf_colls[c].reduces, t), t);
    }
    for (int j = 0; j < PERF_PERIOD; j++)
        tool_store_int(p->tab_red, (size_t)j, perf_colls[c].reduces ? reduced_value(j, n, op, t) : 0, t);
}

void perf_pattern_fini(Pattern *p, int n)
{
    for (int r = 0; r < n; r++)
        free(p->tab_in[r]);
    free(p->tab_in);
    free(p->tab_red);
}

void perf_pattern_fill(unsigned char *dst, size_t pos0, size_t n, const unsigned char *tab, size_t es)
{
    size_t j = pos0 % PERF_PERIOD;
    while (n) {
        size_t m = PERF_PERIOD - j < n ? PERF_PERIOD - j : n;
        memcpy(dst, tab + j * es, m * es);
        dst += m * es, n -= m, j = 0;
    }
}

/* Elements of buf[0..n) that differ from the pattern (bitwise). */
long long perf_pattern_wrong(const unsigned char *buf, size_t pos0, size_t n, const unsigned char *tab, size_t es)
{
    long long wrong = 0;
    size_t j = pos0 % PERF_PERIOD;
    while (n) {
        size_t m = PERF_PERIOD - j < n ? PERF_PERIOD - j : n;
        if (memcmp(buf, tab + j * es, m * es) != 0)
            for (size_t e = 0; e < m; e++)
                wrong += memcmp(buf + e * es, tab + (j + e) * es, es) != 0;
        buf += m * es, n -= m, j = 0;
    }
    return wrong;
}
