/* data.c: ccl-perf's collectives (names and buffer shapes, which every other file uses)
 * and its exactly verifiable data: per dtype and op, inputs whose reduction is one exact
 * bit pattern in any order (see perf.c, "Exactness"), as pattern tables; and alltoallv's
 * count matrix. */
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

/* ===== exactly verifiable data ===== */

/* The largest M such that every integer in 0..M is exact in the dtype (capped at 2^20:
 * the patterns never need more); u8 stays below 255, so the 0xff poison is never
 * expected. Elements are stored with tool_store_int. */
static uint64_t exact_max(ccl_dtype_t t)
{
    return t == CCL_U8 ? 200 : (uint64_t)tool_exact_max(t);
}

/* The value of element j (j < PERF_PERIOD) of rank r's input. Sums and averages: every
 * rank holds k(j) plus or minus s (pairs of ranks cancel), so the sum is N*k(j), a
 * multiple of N (avg is exact too) and every partial sum is at most N*cap <= M. Products:
 * ones and twos (powers of two are exact; at most 2^8 in all). Min, max and data movement:
 * any value up to min(M, 255) that depends on rank and position. */
static uint64_t gen_value(int r, int j, int n, ccl_op_t op, int reduces, ccl_dtype_t t)
{
    uint64_t M = exact_max(t), small = M < 255 ? M : 255;
    if (!reduces || op == CCL_MIN || op == CCL_MAX)
        return ((uint64_t)r * 37 + (uint64_t)j * 11 + 1) % (small + 1);
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
        return k;
    uint64_t s = (uint64_t)((j + pair) % 3 != 0);
    return r % 2 == 0 ? k + s : k - s;
}

/* The reduction of column j over all ranks, in integers (u8 wraps as the dtype does). */
static uint64_t reduced_value(int j, int n, ccl_op_t op, ccl_dtype_t t)
{
    uint64_t acc = gen_value(0, j, n, op, 1, t);
    for (int r = 1; r < n; r++) {
        uint64_t v = gen_value(r, j, n, op, 1, t);
        switch (op) {
        case CCL_PROD: acc *= v; break;
        case CCL_MIN: acc = v < acc ? v : acc; break;
        case CCL_MAX: acc = v > acc ? v : acc; break;
        default: acc += v; break;
        }
    }
    if (op == CCL_AVG)
        acc /= (uint64_t)n;
    if (t == CCL_U8)
        acc &= 0xff;
    return acc;
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
            tool_store_int(p->tab_in[r], (size_t)j, (int64_t)gen_value(r, j, n, op, perf_colls[c].reduces, t), t);
    }
    for (int j = 0; j < PERF_PERIOD; j++)
        tool_store_int(p->tab_red, (size_t)j, perf_colls[c].reduces ? (int64_t)reduced_value(j, n, op, t) : 0, t);
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
