/* rendezvous.c: ncclUniqueId, and the TCP rendezvous behind it (POSIX sockets only).
 *
 * libccl's ccl_comm_init_rank needs a bootstrap (an all-gather and a barrier among the
 * ranks, during the init only); NCCL's programs have nothing but 128 bytes that rank 0
 * made and sent to every rank. So, as NCCL itself does, ncclGetUniqueId starts a root:
 * a thread of the calling process listening on a TCP port, and the id holds where
 * (address, port) and a random nonce that names the job. Every rank's ncclCommInitRank
 * connects, says hello (nonce, nranks, rank), and once all have joined the root answers
 * each with a welcome that carries the real NCCL's own unique id (made next to ours
 * when the job will use NCCL too: NCCL's id is 128 bytes as well, so it travels here
 * rather than inside ours). Then the root serves all-gathers, one at a time, each
 * complete when every rank has sent its part, until every rank has said bye; then it
 * stops. A rank that leaves early (dies, or its init failed) makes the root fail every
 * other rank at once, naming it; a rank that never comes is named when the timeout
 * (CCL_TIMEOUT_MS, as libccl's) has passed since the first one came.
 *
 * Id layout (bytes, big-endian): 0-7 "CCLNCCL1", 8-15 nonce, 16-17 family (4 or 6),
 * 18-19 port, 20-35 address, 36-39 FNV-1a of bytes 0-35; the rest zero.
 * Frames: type, arg (a rank or an exchange's number) and payload length (4, 4 and 8
 * bytes), then the payload. The root's address: the first interface that
 * CCL_NCCL_SOCKET_IFNAME (else NCCL_SOCKET_IFNAME: "eth", "^docker,lo", "=eth0") admits,
 * IPv4 before IPv6 (NCCL_SOCKET_FAMILY=AF_INET6 reverses that), by default any but
 * loopback and docker, and loopback where there is nothing else. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "shim.h"

#define ID_MAGIC "CCLNCCL1"
#define FRAME_MAX (256u << 20) /* an all-gather larger than this is not an init's */

enum { MSG_HELLO = 1, MSG_WELCOME, MSG_FAIL, MSG_GATHER, MSG_GATHERED, MSG_BYE, MSG_RELEASE, MSG_REAL };

/* ---- bytes ---- */

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (24 - 8 * i));
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

static uint64_t get64(const unsigned char *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

static uint32_t fnv1a(const unsigned char *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Milliseconds left until deadline for poll (-1: none). */
static int left_ms(double deadline)
{
    if (deadline < 0)
        return -1;
    double left = deadline - now_ms();
    return left <= 0 ? 0 : left > 1e9 ? 1000000000 : (int)left + 1;
}

/* ---- frames ---- */

typedef struct {
    uint32_t type, arg;
    size_t len;
    unsigned char *data; /* malloc'd, len bytes (NULL when 0) */
} Frame;

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads n bytes by the deadline: 0, -1 (error or end of stream), -2 (timeout). */
static int read_all(int fd, void *buf, size_t n, double deadline)
{
    char *p = buf;
    while (n) {
        struct pollfd pf = {fd, POLLIN, 0};
        int k = poll(&pf, 1, left_ms(deadline));
        if (k < 0 && errno == EINTR)
            continue;
        if (k == 0)
            return -2;
        if (k < 0)
            return -1;
        ssize_t r = recv(fd, p, n, 0);
        if (r < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int send_frame(int fd, uint32_t type, uint32_t arg, const void *data, size_t len)
{
    unsigned char h[16];
    put32(h, type);
    put32(h + 4, arg);
    put64(h + 8, len);
    return write_all(fd, h, sizeof h) == 0 && (len == 0 || write_all(fd, data, len) == 0) ? 0 : -1;
}

static int recv_frame(int fd, Frame *f, double deadline)
{
    unsigned char h[16];
    f->data = NULL;
    int r = read_all(fd, h, sizeof h, deadline);
    if (r != 0)
        return r;
    f->type = get32(h);
    f->arg = get32(h + 4);
    uint64_t len = get64(h + 8);
    if (len > FRAME_MAX)
        return -1;
    f->len = (size_t)len;
    if (f->len && !(f->data = malloc(f->len)))
        return -1;
    if (f->len && (r = read_all(fd, f->data, f->len, deadline)) != 0) {
        free(f->data);
        f->data = NULL;
        return r;
    }
    return 0;
}

/* A failure's text, with NCCL's result for it in the frame's arg. */
static int send_fail(int fd, ncclResult_t code, const char *text)
{
    return send_frame(fd, MSG_FAIL, (uint32_t)code, text, strlen(text) + 1);
}

/* ---- the id ---- */

int shim_id_parse(const ncclUniqueId *id, ShimId *out, char *err, size_t len)
{
    const unsigned char *p = (const unsigned char *)id->internal;
    if (memcmp(p, ID_MAGIC, 8) != 0) {
        snprintf(err, len, "it was not made by libccl_nccl's ncclGetUniqueId (a real NCCL's id, or not an id; "
                 "every rank must use libccl_nccl)");
        return -1;
    }
    if (get32(p + 36) != fnv1a(p, 36)) {
        snprintf(err, len, "it is damaged (its checksum does not match)");
        return -1;
    }
    memset(out, 0, sizeof *out);
    out->nonce = get64(p + 8);
    unsigned fam = (unsigned)p[16] << 8 | p[17];
    out->family = fam == 6 ? AF_INET6 : AF_INET;
    out->port = (uint16_t)(p[18] << 8 | p[19]);
    memcpy(out->addr, p + 20, 16);
    char a[INET6_ADDRSTRLEN] = "?";
    inet_ntop(out->family, out->addr, a, sizeof a);
    snprintf(out->text, sizeof out->text, out->family == AF_INET6 ? "[%s]:%u" : "%s:%u", a, out->port);
    if (fam != 4 && fam != 6) {
        snprintf(err, len, "it is damaged (address family %u)", fam);
        return -1;
    }
    return 0;
}

static void id_write(ncclUniqueId *id, const ShimId *s)
{
    unsigned char *p = (unsigned char *)id->internal;
    memset(p, 0, sizeof id->internal);
    memcpy(p, ID_MAGIC, 8);
    put64(p + 8, s->nonce);
    p[16] = 0;
    p[17] = s->family == AF_INET6 ? 6 : 4;
    p[18] = (unsigned char)(s->port >> 8);
    p[19] = (unsigned char)s->port;
    memcpy(p + 20, s->addr, 16);
    put32(p + 36, fnv1a(p, 36));
}

static uint64_t random64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) == (ssize_t)sizeof v && v)
        return v;
    return ((uint64_t)getpid() << 32) ^ (uint64_t)(now_ms() * 1e3) ^ (uint64_t)(uintptr_t)&v;
}

/* ---- the root's address ---- */

/* Whether interface `name` passes the filter ("eth,ib", "^docker,lo", "=eth0"). */
static int if_admitted(const char *name, const char *filter)
{
    int exclude = filter[0] == '^', exact = filter[0] == '=';
    char list[256];
    snprintf(list, sizeof list, "%s", filter + (exclude || exact));
    int match = 0;
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok && !match; tok = strtok_r(NULL, ",", &save))
        match = exact ? !strcmp(name, tok) : !strncmp(name, tok, strlen(tok));
    return exclude ? !match : match;
}

/* The address to listen on; 0, or -1 with the reason in err. */
static int pick_address(ShimId *s, char *err, size_t len)
{
    const char *filter = getenv("CCL_NCCL_SOCKET_IFNAME");
    if (!filter || !*filter)
        filter = getenv("NCCL_SOCKET_IFNAME");
    const char *fam = getenv("NCCL_SOCKET_FAMILY");
    int v6_first = fam && !strcmp(fam, "AF_INET6");
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) != 0) {
        snprintf(err, len, "getifaddrs failed: %s", strerror(errno));
        return -1;
    }
    /* Passes: the filter's choice, then (no filter) loopback as the last resort. */
    int found = 0;
    for (int pass = 0; pass < 2 && !found; pass++)
        for (int f = 0; f < 2 && !found; f++) {
            int want = (f == 0) != v6_first ? AF_INET : AF_INET6;
            for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
                if (!i->ifa_addr || i->ifa_addr->sa_family != want || !(i->ifa_flags & IFF_UP))
                    continue;
                int lo = (i->ifa_flags & IFF_LOOPBACK) != 0;
                int ok = filter && *filter ? if_admitted(i->ifa_name, filter)
                                           : pass == 0 ? !lo && strncmp(i->ifa_name, "docker", 6) != 0 : lo;
                if (!ok)
                    continue;
                if (want == AF_INET6) {
                    const struct in6_addr *a6 = &((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
                    if (IN6_IS_ADDR_LINKLOCAL(a6))
                        continue; /* needs a scope the id has no room to name */
                    memcpy(s->addr, a6, 16);
                } else {
                    memcpy(s->addr, &((const struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
                }
                s->family = want;
                found = 1;
            }
        }
    freeifaddrs(ifs);
    if (!found)
        snprintf(err, len, "no network interface to listen on%s%s%s", filter ? " (the filter '" : "",
                 filter ? filter : "", filter ? "' admits none)" : "");
    return found ? 0 : -1;
}

static socklen_t sockaddr_of(const ShimId *s, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    if (s->family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(s->port);
        memcpy(&a->sin6_addr, s->addr, 16);
        return sizeof *a;
    }
    struct sockaddr_in *a = (struct sockaddr_in *)ss;
    a->sin_family = AF_INET;
    a->sin_port = htons(s->port);
    memcpy(&a->sin_addr, s->addr, 4);
    return sizeof *a;
}

/* ---- the root ---- */

typedef struct {
    int lfd;
    uint64_t nonce;
    int has_real;
    unsigned char real_id[NCCL_UNIQUE_ID_BYTES];
    int timeout_ms;
    char host[65];
    int nranks, joined;
    int *fd;
    int *local;              /* the rank runs in this process */
    int *order;              /* root_order */
    char (*who)[96];
} Root;

/* The order in which the root answers the ranks: other processes' first. A rank of this
 * process may end the process (and the root with it) as soon as it has its answer, so
 * it gets its own last. Filled once every rank has joined. */
static void root_order(Root *rt)
{
    int i = 0;
    for (int local = 0; local < 2; local++)
        for (int r = 0; r < rt->nranks; r++)
            if (rt->local[r] == local)
                rt->order[i++] = r;
}

/* Tells every joined rank why the init cannot go on (in answer order once there is one). */
static void root_fail_all(Root *rt, ncclResult_t code, const char *text)
{
    for (int local = 0; rt->fd && local < 2; local++)
        for (int r = 0; r < rt->nranks; r++)
            if (rt->fd[r] >= 0 && rt->local[r] == local)
                send_fail(rt->fd[r], code, text);
}

static void root_free(Root *rt)
{
    for (int r = 0; r < rt->nranks; r++)
        if (rt->fd && rt->fd[r] >= 0)
            close(rt->fd[r]);
    close(rt->lfd);
    free(rt->fd);
    free(rt->local);
    free(rt->order);
    free(rt->who);
    free(rt);
}

/* The ranks not yet in `have` (a 0/1 array), as "1, 3 and 7" (at most 8 named). */
static void missing_list(const Root *rt, const int *have, char *buf, size_t len)
{
    size_t n = 0;
    int shown = 0, total = 0;
    for (int r = 0; r < rt->nranks; r++)
        total += !have[r];
    buf[0] = 0;
    for (int r = 0; r < rt->nranks && n < len; r++)
        if (!have[r] && shown < 8)
            n += (size_t)snprintf(buf + n, len - n, "%s%d", shown++ ? ", " : "", r);
    if (total > shown && n < len)
        snprintf(buf + n, len - n, " and %d more", total - shown);
}

/* One connection's first frame: a hello (kept: 1), a release (answered: 2), or
 * nothing of ours (0). */
static int root_accept(Root *rt, int cfd, char *err, size_t len)
{
    Frame f;
    if (recv_frame(cfd, &f, now_ms() + 10000) != 0)
        return 0;
    int kept = 0;
    if (f.type == MSG_RELEASE && f.len == 8 && get64(f.data) == rt->nonce) {
        unsigned char reply[4 + NCCL_UNIQUE_ID_BYTES];
        put32(reply, (uint32_t)rt->has_real);
        memcpy(reply + 4, rt->real_id, NCCL_UNIQUE_ID_BYTES);
        send_frame(cfd, MSG_REAL, 0, reply, sizeof reply);
        kept = 2;
    } else if (f.type == MSG_HELLO && f.len >= 24 + 64) {
        uint64_t nonce = get64(f.data);
        int nranks = (int)get32(f.data + 8), rank = (int)get32(f.data + 12);
        long pid = (long)get64(f.data + 16);
        char host[65];
        memcpy(host, f.data + 24, 64);
        host[64] = 0;
        if (nonce != rt->nonce) {
            send_fail(cfd, ncclInvalidArgument, "this unique id's root serves another job (its nonce differs): every rank must use the "
                           "id of the same ncclGetUniqueId call");
        } else if (rt->nranks && nranks != rt->nranks) {
            snprintf(err, len, "rank %d (%s, pid %ld) passed nranks %d, but the ranks before it passed %d", rank,
                     host, pid, nranks, rt->nranks);
            send_fail(cfd, ncclInvalidArgument, err);
            kept = -1;
        } else if (nranks < 1 || rank < 0 || rank >= nranks) {
            snprintf(err, len, "a rank joined as rank %d of %d (%s, pid %ld)", rank, nranks, host, pid);
            send_fail(cfd, ncclInvalidArgument, err);
            kept = -1;
        } else {
            if (!rt->nranks) {
                rt->nranks = nranks;
                rt->fd = malloc(sizeof *rt->fd * (size_t)nranks);
                rt->local = calloc((size_t)nranks, sizeof *rt->local);
                rt->order = calloc((size_t)nranks, sizeof *rt->order);
                rt->who = calloc((size_t)nranks, sizeof *rt->who);
                if (!rt->fd || !rt->local || !rt->order || !rt->who) {
                    snprintf(err, len, "the rendezvous' root ran out of memory for %d ranks", nranks);
                    send_fail(cfd, ncclInvalidArgument, err);
                    rt->nranks = 0;
                    free(f.data);
                    return -1;
                }
                for (int r = 0; r < nranks; r++)
                    rt->fd[r] = -1;
            }
            if (rt->fd[rank] >= 0) {
                snprintf(err, len, "two ranks joined as rank %d (%s and %s, pid %ld)", rank, rt->who[rank], host, pid);
                send_fail(cfd, ncclInvalidArgument, err);
                kept = -1;
            } else {
                rt->fd[rank] = cfd;
                rt->local[rank] = pid == (long)getpid() && !strcmp(host, rt->host);
                snprintf(rt->who[rank], sizeof rt->who[rank], "rank %d (%s, pid %ld)", rank, host, pid);
                rt->joined++;
                kept = 1;
            }
        }
    }
    free(f.data);
    return kept;
}

/* Phase 1: every rank joins. 0 when all did; -1 when the root stops (it told them why). */
static int root_join(Root *rt)
{
    char err[512];
    double deadline = -1;
    while (!rt->nranks || rt->joined < rt->nranks) {
        int n = rt->nranks;
        struct pollfd *pf = calloc((size_t)n + 1, sizeof *pf);
        if (!pf) {
            root_fail_all(rt, ncclSystemError, "the rendezvous' root ran out of memory");
            return -1;
        }
        pf[0] = (struct pollfd){rt->lfd, POLLIN, 0};
        for (int r = 0; r < n; r++)
            pf[r + 1] = (struct pollfd){rt->fd[r], POLLIN, 0}; /* a joined rank sends nothing until welcomed */
        int k = poll(pf, (nfds_t)n + 1, left_ms(deadline));
        if (k < 0 && errno == EINTR) {
            free(pf);
            continue;
        }
        if (k == 0) {
            int *have = calloc((size_t)n, sizeof *have);
            char list[160] = "?";
            if (have) {
                for (int r = 0; r < n; r++)
                    have[r] = rt->fd[r] >= 0;
                missing_list(rt, have, list, sizeof list);
            }
            snprintf(err, sizeof err, "rank %s of %d never joined the init (waited %d ms, CCL_TIMEOUT_MS)", list, n,
                     rt->timeout_ms);
            free(have);
            free(pf);
            root_fail_all(rt, ncclRemoteError, err);
            return -1;
        }
        for (int r = 0; r < n; r++)
            if (pf[r + 1].revents) {
                snprintf(err, sizeof err, "%s left the init before every rank had joined", rt->who[r]);
                free(pf);
                close(rt->fd[r]);
                rt->fd[r] = -1;
                root_fail_all(rt, ncclRemoteError, err);
                return -1;
            }
        int ready = pf[0].revents != 0;
        free(pf);
        if (!ready)
            continue;
        int cfd = accept(rt->lfd, NULL, NULL);
        if (cfd < 0)
            continue;
        int one = 1;
        setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        int kept = root_accept(rt, cfd, err, sizeof err);
        if (kept != 1)
            close(cfd);
        if (kept == -1) {
            root_fail_all(rt, ncclInvalidArgument, err);
            return -1;
        }
        if (kept == 2 && !rt->joined)
            return -1; /* released: no rank will come */
        if (kept == 1 && deadline < 0)
            deadline = now_ms() + rt->timeout_ms;
    }
    unsigned char w[4 + NCCL_UNIQUE_ID_BYTES];
    put32(w, (uint32_t)rt->has_real);
    memcpy(w + 4, rt->real_id, NCCL_UNIQUE_ID_BYTES);
    root_order(rt);
    for (int i = 0; i < rt->nranks; i++)
        send_frame(rt->fd[rt->order[i]], MSG_WELCOME, 0, w, sizeof w);
    return 0;
}

/* Phase 2: all-gathers until every rank has left. */
static void root_serve(Root *rt)
{
    int n = rt->nranks;
    Frame *got = calloc((size_t)n, sizeof *got);
    int *state = calloc((size_t)n, sizeof *state); /* 0 waiting, 1 sent its part, 2 left */
    struct pollfd *pf = calloc((size_t)n, sizeof *pf);
    char err[512];
    if (!got || !state || !pf) {
        root_fail_all(rt, ncclSystemError, "the rendezvous' root ran out of memory");
        goto out;
    }
    for (uint32_t seq = 0;; seq++) {
        double deadline = now_ms() + rt->timeout_ms;
        int pending = n;
        for (int r = 0; r < n; r++) {
            if (state[r] == 1)
                state[r] = 0;
            if (state[r] == 2)
                pending--;
        }
        while (pending) {
            for (int r = 0; r < n; r++)
                pf[r] = (struct pollfd){state[r] == 0 ? rt->fd[r] : -1, POLLIN, 0};
            int k = poll(pf, (nfds_t)n, left_ms(deadline));
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                int *have = calloc((size_t)n, sizeof *have);
                char list[160] = "?";
                if (have) {
                    for (int r = 0; r < n; r++)
                        have[r] = state[r] != 0;
                    missing_list(rt, have, list, sizeof list);
                }
                free(have);
                snprintf(err, sizeof err, "rank %s did not reach exchange %u of the init within %d ms "
                         "(CCL_TIMEOUT_MS)", list, seq + 1, rt->timeout_ms);
                root_fail_all(rt, ncclRemoteError, err);
                goto out;
            }
            for (int r = 0; r < n; r++) {
                if (!pf[r].revents)
                    continue;
                Frame f;
                if (recv_frame(rt->fd[r], &f, now_ms() + rt->timeout_ms) != 0 ||
                    (f.type != MSG_GATHER && f.type != MSG_BYE) || (f.type == MSG_GATHER && f.arg != seq)) {
                    if (f.type == MSG_GATHER || f.type == MSG_BYE)
                        free(f.data);
                    snprintf(err, sizeof err, "%s left the init during exchange %u (its process died, or its "
                             "init failed)", rt->who[r], seq + 1);
                    close(rt->fd[r]);
                    rt->fd[r] = -1;
                    root_fail_all(rt, ncclRemoteError, err);
                    goto out;
                }
                free(got[r].data);
                got[r] = f;
                state[r] = f.type == MSG_GATHER ? 1 : 2;
                pending--;
            }
        }
        int gathering = -1, left = -1;
        for (int r = 0; r < n; r++) {
            if (state[r] == 1 && gathering < 0)
                gathering = r;
            if (state[r] == 2 && left < 0)
                left = r;
        }
        if (gathering < 0)
            goto out; /* every rank has left: done */
        if (left >= 0) {
            snprintf(err, sizeof err, "%s left the init while %s asked for exchange %u (their inits disagree, or "
                     "one of them failed)", rt->who[left], rt->who[gathering], seq + 1);
            root_fail_all(rt, ncclRemoteError, err);
            goto out;
        }
        size_t bytes = got[0].len, total = bytes * (size_t)n;
        for (int r = 1; r < n; r++)
            if (got[r].len != bytes) {
                snprintf(err, sizeof err, "the ranks disagree on the size of exchange %u of the init: %s sends %zu "
                         "bytes, %s %zu", seq + 1, rt->who[0], bytes, rt->who[r], got[r].len);
                root_fail_all(rt, ncclInvalidUsage, err);
                goto out;
            }
        unsigned char *all = total ? malloc(total) : NULL;
        if (total && !all) {
            root_fail_all(rt, ncclSystemError, "the rendezvous' root ran out of memory");
            goto out;
        }
        for (int r = 0; r < n; r++)
            if (bytes)
                memcpy(all + (size_t)r * bytes, got[r].data, bytes);
        for (int i = 0; i < n; i++)
            send_frame(rt->fd[rt->order[i]], MSG_GATHERED, seq, all, total);
        free(all);
    }
out:
    for (int r = 0; got && r < n; r++)
        free(got[r].data);
    free(got);
    free(state);
    free(pf);
}

static void *root_main(void *arg)
{
    Root *rt = arg;
    if (root_join(rt) == 0)
        root_serve(rt);
    root_free(rt);
    return NULL;
}

ncclResult_t shim_id_make(ncclUniqueId *id, const ncclUniqueId *real_id)
{
    const char *fn = "ncclGetUniqueId";
    if (!id)
        return shim_fail(NULL, ncclInvalidArgument, "%s: argument 'uniqueId' is NULL", fn);
    ShimId s = {.nonce = random64()};
    char err[256];
    if (pick_address(&s, err, sizeof err) != 0)
        return shim_fail(NULL, ncclSystemError, "%s: %s", fn, err);
    Root *rt = calloc(1, sizeof *rt);
    if (!rt)
        return shim_fail(NULL, ncclSystemError, "%s: out of memory", fn);
    struct sockaddr_storage ss;
    socklen_t sl = sockaddr_of(&s, &ss);
    rt->lfd = socket(s.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (rt->lfd < 0 || bind(rt->lfd, (struct sockaddr *)&ss, sl) != 0 || listen(rt->lfd, SOMAXCONN) != 0 ||
        getsockname(rt->lfd, (struct sockaddr *)&ss, &sl) != 0) {
        int e = errno;
        char a[INET6_ADDRSTRLEN] = "?";
        inet_ntop(s.family, s.addr, a, sizeof a);
        if (rt->lfd >= 0)
            close(rt->lfd);
        free(rt);
        return shim_fail(NULL, ncclSystemError, "%s: cannot listen on %s: %s", fn, a, strerror(e));
    }
    s.port = ntohs(s.family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                        : ((struct sockaddr_in *)&ss)->sin_port);
    rt->nonce = s.nonce;
    rt->timeout_ms = shim_timeout_ms();
    gethostname(rt->host, sizeof rt->host - 1);
    if (real_id) {
        rt->has_real = 1;
        memcpy(rt->real_id, real_id->internal, NCCL_UNIQUE_ID_BYTES);
    }
    /* The root takes no signal meant for the program's own threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&t, &attr, root_main, rt);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0) {
        close(rt->lfd);
        free(rt);
        return shim_fail(NULL, ncclSystemError, "%s: cannot start the rendezvous' thread: %s", fn, strerror(e));
    }
    id_write(id, &s);
    return ncclSuccess;
}

/* ---- a rank ---- */

struct ShimClient {
    int fd, nranks, rank;
    uint32_t seq;
    int timeout_ms;
    char why[512];
    ncclResult_t code;
};

/* A rank waits for the root a little longer than the root waits for the ranks, so that
 * the root's verdict (naming the rank that did not come) arrives first. */
static int grace_ms(int timeout_ms)
{
    return timeout_ms / 10 > 1000 ? timeout_ms / 10 : 1000;
}

/* Connects to the root, retrying while it refuses (it listens before its id exists, so
 * only a lost packet or a full backlog makes it refuse). */
static int connect_root(const ShimId *id, double deadline, char *err, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sockaddr_of(id, &ss);
    for (;;) {
        int fd = socket(id->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            snprintf(err, len, "socket: %s", strerror(errno));
            return -1;
        }
        if (connect(fd, (struct sockaddr *)&ss, sl) == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            return fd;
        }
        int e = errno;
        close(fd);
        if ((e != ECONNREFUSED && e != EINTR && e != ETIMEDOUT && e != EAGAIN) || left_ms(deadline) == 0) {
            snprintf(err, len, "cannot reach the id's root at %s: %s (is the process that called ncclGetUniqueId "
                     "still running, and its address reachable? CCL_NCCL_SOCKET_IFNAME picks the interface)",
                     id->text, strerror(e));
            return -1;
        }
        usleep(50000);
    }
}

/* Why an answer was not the one expected; NCCL's result for it. */
static ncclResult_t frame_error(const Frame *f, int r, const ShimId *id, char *err, size_t len, const char *waiting)
{
    if (r == 0 && f->type == MSG_FAIL && f->len) {
        snprintf(err, len, "%.*s", (int)f->len, (const char *)f->data);
        return f->arg > 0 && f->arg < ncclNumResults ? (ncclResult_t)f->arg : ncclRemoteError;
    }
    if (r == -2)
        snprintf(err, len, "the rendezvous%s%s did not answer %s", id ? " at " : "", id ? id->text : "", waiting);
    else
        snprintf(err, len, "the rendezvous' root%s%s closed the connection %s (its process died?)",
                 id ? " at " : "", id ? id->text : "", waiting);
    return ncclRemoteError;
}

ShimClient *shim_client_join(const ShimId *id, int nranks, int rank, ncclUniqueId *real_id, int *has_real,
                             ncclResult_t *code, char *err, size_t len)
{
    *code = ncclSystemError;
    ShimClient *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, len, "out of memory");
        return NULL;
    }
    c->nranks = nranks;
    c->rank = rank;
    c->timeout_ms = shim_timeout_ms();
    double deadline = now_ms() + c->timeout_ms + grace_ms(c->timeout_ms);
    if ((c->fd = connect_root(id, deadline, err, len)) < 0) {
        free(c);
        return NULL;
    }
    unsigned char hello[24 + 64] = {0};
    put64(hello, id->nonce);
    put32(hello + 8, (uint32_t)nranks);
    put32(hello + 12, (uint32_t)rank);
    put64(hello + 16, (uint64_t)getpid());
    gethostname((char *)hello + 24, 63);
    Frame f = {0};
    int r = send_frame(c->fd, MSG_HELLO, 0, hello, sizeof hello) == 0 ? recv_frame(c->fd, &f, deadline) : -1;
    if (r != 0 || f.type != MSG_WELCOME || f.len != 4 + NCCL_UNIQUE_ID_BYTES) {
        char waiting[64];
        snprintf(waiting, sizeof waiting, "within %d ms (CCL_TIMEOUT_MS) of rank %d's hello", c->timeout_ms, rank);
        *code = frame_error(&f, r, id, err, len, waiting);
        free(f.data);
        close(c->fd);
        free(c);
        return NULL;
    }
    *has_real = (int)get32(f.data);
    memcpy(real_id->internal, f.data + 4, NCCL_UNIQUE_ID_BYTES);
    free(f.data);
    return c;
}

int shim_client_allgather(ShimClient *c, const void *in, void *out, size_t bytes)
{
    Frame f = {0};
    double deadline = now_ms() + c->timeout_ms + grace_ms(c->timeout_ms);
    int r = send_frame(c->fd, MSG_GATHER, c->seq, in, bytes) == 0 ? recv_frame(c->fd, &f, deadline) : -1;
    if (r != 0 || f.type != MSG_GATHERED || f.arg != c->seq || f.len != bytes * (size_t)c->nranks) {
        char waiting[64];
        snprintf(waiting, sizeof waiting, "in exchange %u of the init", c->seq + 1);
        c->code = ncclInternalError;
        if (r == 0 && f.type == MSG_GATHERED)
            snprintf(c->why, sizeof c->why, "the rendezvous answered exchange %u with %zu bytes, not %zu", c->seq + 1,
                     f.len, bytes * (size_t)c->nranks);
        else
            c->code = frame_error(&f, r, NULL, c->why, sizeof c->why, waiting);
        free(f.data);
        return -1;
    }
    if (bytes)
        memcpy(out, f.data, f.len);
    free(f.data);
    c->seq++;
    return 0;
}

const char *shim_client_why(const ShimClient *c)
{
    return c->why;
}

ncclResult_t shim_client_code(const ShimClient *c)
{
    return c->code;
}

static int boot_allgather(void *ctx, const void *in, void *out, size_t bytes)
{
    return shim_client_allgather(ctx, in, out, bytes);
}

static int boot_barrier(void *ctx)
{
    return shim_client_allgather(ctx, NULL, NULL, 0);
}

ccl_bootstrap_t shim_client_bootstrap(ShimClient *c)
{
    return (ccl_bootstrap_t){.nranks = c->nranks, .rank = c->rank, .allgather = boot_allgather,
                             .barrier = boot_barrier, .ctx = c};
}

void shim_client_leave(ShimClient *c)
{
    if (!c)
        return;
    send_frame(c->fd, MSG_BYE, 0, NULL, 0);
    close(c->fd);
    free(c);
}

int shim_id_release(const ShimId *id, ncclUniqueId *real_id, int *has_real, char *err, size_t len)
{
    int fd = connect_root(id, now_ms() + 10000, err, len);
    if (fd < 0)
        return -1;
    unsigned char nonce[8];
    put64(nonce, id->nonce);
    Frame f = {0};
    int r = send_frame(fd, MSG_RELEASE, 0, nonce, sizeof nonce) == 0 ? recv_frame(fd, &f, now_ms() + 10000) : -1;
    close(fd);
    if (r != 0 || f.type != MSG_REAL || f.len != 4 + NCCL_UNIQUE_ID_BYTES) {
        frame_error(&f, r, id, err, len, "to a release");
        free(f.data);
        return -1;
    }
    *has_real = (int)get32(f.data);
    memcpy(real_id->internal, f.data + 4, NCCL_UNIQUE_ID_BYTES);
    free(f.data);
    return 0;
}
