/* route.c: CCL_NCCL_ROUTE, which calls go to libccl and which to the real NCCL.
 *
 * The variable holds one route for every call ("auto", "ccl" or "nccl") or a list of
 * collective:route pairs with an optional default ("allreduce:ccl,allgather:nccl,
 * default:auto"); unset means auto. A comm reads it once, at its init (a split's
 * children take their parent's), and every rank of a job must set the same value: a
 * route is decided from what every rank passes alike (the collective, datatype and
 * operator), never from a rank's own buffers, so that the ranks of one call always go
 * the same way (the decision itself is in coll.c). */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "shim.h"

static const char *const coll_names[SHIM_NUM_COLLS] = {
    [SHIM_ALLREDUCE] = "allreduce", [SHIM_ALLGATHER] = "allgather", [SHIM_REDUCESCATTER] = "reducescatter",
    [SHIM_BROADCAST] = "broadcast", [SHIM_REDUCE] = "reduce",       [SHIM_ALLTOALL] = "alltoall",
    [SHIM_GATHER] = "gather",       [SHIM_SCATTER] = "scatter",     [SHIM_SENDRECV] = "sendrecv",
};

const char *shim_coll_name(ShimColl c)
{
    return (unsigned)c < SHIM_NUM_COLLS ? coll_names[c] : "?";
}

const char *shim_route_name(ShimRoute r)
{
    return r == SHIM_ROUTE_CCL ? "ccl" : r == SHIM_ROUTE_NCCL ? "nccl" : "auto";
}

static int parse_route(const char *s, size_t n, ShimRoute *out)
{
    static const char *const names[] = {"auto", "ccl", "nccl"};
    for (int i = 0; i < 3; i++)
        if (strlen(names[i]) == n && !strncasecmp(s, names[i], n)) {
            *out = (ShimRoute)i;
            return 0;
        }
    return -1;
}

/* A collective's name, also with underscores ("reduce_scatter", "all_reduce") and
 * NCCL's spellings ("AllReduce"); "default" is SHIM_NUM_COLLS. */
static int parse_coll(const char *s, size_t n, int *out)
{
    char flat[32];
    size_t m = 0;
    for (size_t i = 0; i < n && m + 1 < sizeof flat; i++)
        if (s[i] != '_' && s[i] != '-')
            flat[m++] = s[i];
    flat[m] = 0;
    if (!strcasecmp(flat, "default")) {
        *out = SHIM_NUM_COLLS;
        return 0;
    }
    if (!strcasecmp(flat, "send") || !strcasecmp(flat, "recv") || !strcasecmp(flat, "p2p")) {
        *out = SHIM_SENDRECV;
        return 0;
    }
    for (int c = 0; c < SHIM_NUM_COLLS; c++)
        if (!strcasecmp(flat, coll_names[c])) {
            *out = c;
            return 0;
        }
    return -1;
}

/* A setting per collective: one VALUE for every collective, or pairs COLL:VALUE
 * separated by commas, the pair "default" for the collectives no pair names wherever it
 * stands; `value` reads each VALUE. out keeps what it held where nothing applies. 0, or
 * -1 with *bad the part that does not parse (*badlen bytes; the whole spec when it has
 * no pairs). */
static int parse_per_coll(const char *spec, int (*value)(const char *s, size_t n, size_t *v),
                          size_t out[SHIM_NUM_COLLS], const char **bad, size_t *badlen)
{
    size_t v;
    if (!strchr(spec, ':')) {
        *bad = spec, *badlen = strlen(spec);
        if (value(spec, strlen(spec), &v) != 0)
            return -1;
        for (int c = 0; c < SHIM_NUM_COLLS; c++)
            out[c] = v;
        return 0;
    }
    int named[SHIM_NUM_COLLS] = {0}, has_def = 0;
    size_t def = 0;
    for (const char *p = spec; *p;) {
        size_t n = strcspn(p, ",");
        const char *colon = memchr(p, ':', n);
        int coll;
        *bad = p, *badlen = n;
        if (!colon || parse_coll(p, (size_t)(colon - p), &coll) != 0 ||
            value(colon + 1, n - (size_t)(colon - p) - 1, &v) != 0)
            return -1;
        if (coll == SHIM_NUM_COLLS)
            def = v, has_def = 1;
        else
            out[coll] = v, named[coll] = 1;
        p += n + (p[n] == ',');
    }
    for (int c = 0; c < SHIM_NUM_COLLS && has_def; c++)
        if (!named[c])
            out[c] = def;
    return 0;
}

static int route_value(const char *s, size_t n, size_t *v)
{
    ShimRoute r;
    if (parse_route(s, n, &r) != 0)
        return -1;
    *v = (size_t)r;
    return 0;
}

int shim_routes_parse(const char *spec, ShimRoute out[SHIM_NUM_COLLS], char *err, size_t len)
{
    size_t v[SHIM_NUM_COLLS];
    for (int c = 0; c < SHIM_NUM_COLLS; c++)
        v[c] = SHIM_ROUTE_AUTO;
    const char *bad;
    size_t n;
    if (spec && *spec && parse_per_coll(spec, route_value, v, &bad, &n) != 0) {
        if (bad == spec && !strchr(spec, ':'))
            snprintf(err, len, "CCL_NCCL_ROUTE='%s' is not auto, ccl, nccl or a list such as "
                     "'allreduce:ccl,allgather:nccl,default:auto'", spec);
        else
            snprintf(err, len, "CCL_NCCL_ROUTE='%s': '%.*s' is not COLLECTIVE:ROUTE (collectives: allreduce, "
                     "allgather, reducescatter, broadcast, reduce, alltoall, gather, scatter, sendrecv, default; "
                     "routes: auto, ccl, nccl)", spec, (int)n, bad);
        return -1;
    }
    for (int c = 0; c < SHIM_NUM_COLLS; c++)
        out[c] = (ShimRoute)v[c];
    return 0;
}

int shim_routes_want_nccl(const ShimRoute routes[SHIM_NUM_COLLS])
{
    for (int c = 0; c < SHIM_NUM_COLLS; c++)
        if (routes[c] != SHIM_ROUTE_CCL)
            return 1;
    return 0;
}

int shim_routes_want_ccl(const ShimRoute routes[SHIM_NUM_COLLS])
{
    for (int c = 0; c < SHIM_NUM_COLLS; c++)
        if (routes[c] != SHIM_ROUTE_NCCL)
            return 1;
    return 0;
}

const char *shim_routes_need_nccl(const ShimRoute routes[SHIM_NUM_COLLS])
{
    for (int c = 0; c < SHIM_NUM_COLLS; c++)
        if (routes[c] == SHIM_ROUTE_NCCL)
            return coll_names[c];
    return NULL;
}

void shim_routes_describe(const ShimRoute routes[SHIM_NUM_COLLS], char *buf, size_t len)
{
    /* The route most collectives take is named once, as the rest's. */
    int n[3] = {0};
    for (int c = 0; c < SHIM_NUM_COLLS; c++)
        n[routes[c]]++;
    ShimRoute common = n[SHIM_ROUTE_CCL] > n[SHIM_ROUTE_AUTO] ? SHIM_ROUTE_CCL : SHIM_ROUTE_AUTO;
    if (n[SHIM_ROUTE_NCCL] > n[common])
        common = SHIM_ROUTE_NCCL;
    size_t used = 0;
    buf[0] = 0;
    for (int c = 0; c < SHIM_NUM_COLLS && used < len; c++)
        if (routes[c] != common)
            used += (size_t)snprintf(buf + used, len - used, "%s:%s, ", coll_names[c], shim_route_name(routes[c]));
    if (used < len)
        snprintf(buf + used, len - used, "%s for %s", shim_route_name(common), used ? "the rest" : "every call");
}

/* Auto's limits when CCL_NCCL_AUTO_LIMIT is unset, on GPUs: the sizes (nccl-tests'
 * bytes: the larger buffer) from which NCCL was faster than libccl on ordinary tensors,
 * measured on H200 (docs/nccl.md, "Which calls go where"): 2 ranks from
 * torch.distributed through this library (docs/perf/x2-head), more from ccl-perf on
 * cuMemAlloc buffers on 4 (docs/perf/x4-entry). */
static size_t default_limit(ShimColl c, int nranks)
{
    static const size_t two[SHIM_NUM_COLLS] = {
        [SHIM_ALLREDUCE] = (size_t)256 << 20, [SHIM_ALLGATHER] = (size_t)256 << 20,
        [SHIM_REDUCESCATTER] = (size_t)256 << 20, [SHIM_ALLTOALL] = (size_t)64 << 20,
        [SHIM_BROADCAST] = (size_t)16 << 20, [SHIM_REDUCE] = (size_t)16 << 20,
    };
    static const size_t more[SHIM_NUM_COLLS] = {
        [SHIM_ALLREDUCE] = (size_t)1 << 20, [SHIM_ALLGATHER] = (size_t)64 << 20,
        [SHIM_REDUCESCATTER] = (size_t)1 << 30, [SHIM_ALLTOALL] = (size_t)64 << 20,
        [SHIM_BROADCAST] = (size_t)1 << 20, [SHIM_REDUCE] = (size_t)1 << 20,
    };
    size_t v = (nranks <= 2 ? two : more)[c];
    return v ? v : SIZE_MAX;
}

/* "none", or digits with an optional K, M or G (powers of 1024). */
static int parse_limit(const char *s, size_t n, size_t *out)
{
    if (n == 4 && !strncasecmp(s, "none", 4)) {
        *out = SIZE_MAX;
        return 0;
    }
    size_t i = 0;
    unsigned long long v = 0;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        if (v > (~0ull - 9) / 10)
            return -1;
        v = v * 10 + (unsigned long long)(s[i] - '0');
    }
    int shift = 0;
    if (i + 1 == n)
        shift = s[i] == 'K' || s[i] == 'k' ? 10 : s[i] == 'M' || s[i] == 'm' ? 20 : s[i] == 'G' || s[i] == 'g' ? 30 : -1;
    else if (i != n)
        return -1;
    if (i == 0 || shift < 0 || v > (~0ull >> shift))
        return -1;
    *out = (size_t)(v << shift);
    return 0;
}

int shim_auto_limits_parse(const char *spec, int nranks, int gpu, size_t out[SHIM_NUM_COLLS], char *err, size_t len)
{
    for (int c = 0; c < SHIM_NUM_COLLS; c++)
        out[c] = gpu ? default_limit((ShimColl)c, nranks) : SIZE_MAX;
    const char *bad;
    size_t n;
    if (spec && *spec && parse_per_coll(spec, parse_limit, out, &bad, &n) != 0) {
        static const char form[] = "is not a size (bytes, with K, M or G), none, or a list such as "
                                   "'allreduce:256M,alltoall:none,default:64M'";
        if (bad == spec && !strchr(spec, ':'))
            snprintf(err, len, "CCL_NCCL_AUTO_LIMIT='%s' %s", spec, form);
        else
            snprintf(err, len, "CCL_NCCL_AUTO_LIMIT='%s': '%.*s' %s", spec, (int)n, bad, form);
        return -1;
    }
    return 0;
}

void shim_summary(const struct ncclComm *comm, char *buf, size_t len)
{
    unsigned long total[2] = {0, 0};
    size_t used = (size_t)snprintf(buf, len, "routing summary:");
    for (int c = 0; c < SHIM_NUM_COLLS; c++) {
        unsigned long to_ccl = atomic_load(&comm->calls[c][SHIM_TO_CCL]);
        unsigned long to_nccl = atomic_load(&comm->calls[c][SHIM_TO_NCCL]);
        total[0] += to_ccl;
        total[1] += to_nccl;
        if ((to_ccl || to_nccl) && used < len)
            used += (size_t)snprintf(buf + used, len - used, " %s %lu ccl %lu nccl,", coll_names[c], to_ccl, to_nccl);
    }
    if (used < len && !total[0] && !total[1])
        snprintf(buf + used, len - used, " no calls");
    else if (used < len)
        snprintf(buf + used, len - used, " in all %lu ccl %lu nccl", total[0], total[1]);
}
