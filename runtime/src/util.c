/* util.c: helpers that the runtime and the tools share: sizes, hashes, file-system
 * helpers (the kernel cache, tuning tables, the algorithm library), the monotonic clock
 * and the waits' backoff, deep stacks.
 *
 * A cache folder is trusted only when this user owns it and nobody else may write to
 * it: a cubin or table planted there by another local user would otherwise be loaded
 * as ours. Folders this code creates are private (0700). Algorithm files and folders
 * may also be root's (an installed library), never another user's or writable by one. */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base.h"

int ccl__parse_size(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    int shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && (*end == 'i' || *end == 'I'))
        end++;
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end || v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

uint64_t ccl__fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

const char *ccl__cache_dir(const char *configured, char *buf, size_t len)
{
    const char *c = configured && *configured ? configured : getenv("CCL_CACHE_DIR");
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    int n;
    if (c && *c)
        n = snprintf(buf, len, "%s", c);
    else if (x && *x)
        n = snprintf(buf, len, "%s/ccl", x);
    else if (h && *h)
        n = snprintf(buf, len, "%s/.cache/ccl", h);
    else
        return NULL;
    return n > 0 && (size_t)n < len ? buf : NULL;
}

/* 0 when path is a folder (or, with files, a plain file) this user may trust: this
 * user's own (or, with root_ok, root's, as installed files are) and writable by nobody
 * else; else -1 with "PATH <why> <consequence>" in why. */
static int trusted(const char *path, int files, int root_ok, const char *consequence, char *why, size_t len)
{
    struct stat st;
    const char *bad = NULL;
    if (lstat(path, &st) != 0) {
        snprintf(why, len, "cannot inspect %s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode) && !(files && S_ISREG(st.st_mode)))
        bad = files ? "is neither a folder nor a plain file" : "is not a folder";
    else if (st.st_uid != geteuid() && !(root_ok && st.st_uid == 0))
        bad = "belongs to another user";
    else if (st.st_mode & (S_IWGRP | S_IWOTH))
        bad = "is writable by other users";
    if (bad)
        snprintf(why, len, "%s %s%s", path, bad, consequence);
    return bad ? -1 : 0;
}

int ccl__trusted_source(const char *path, char *why, size_t len)
{
    return trusted(path, 1, 1, ": skipped (another user could plant algorithms there)", why, len);
}

int ccl__trusted_file(const char *path, const char *consequence, char *why, size_t len)
{
    if (trusted(path, 1, 1, consequence, why, len) != 0)
        return -1;
    /* Its folder: whoever may write there may replace the file (unless the folder is
     * sticky, as /tmp is: then only the file's owner may). */
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    struct stat st;
    const char *bad = NULL;
    if (stat(dir, &st) != 0)
        bad = "cannot be inspected";
    else if (st.st_uid != geteuid() && st.st_uid != 0)
        bad = "belongs to another user";
    else if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
        bad = "is writable by other users (and not sticky)";
    if (bad)
        snprintf(why, len, "%s: its folder %s %s%s", path, dir, bad, consequence);
    return bad ? -1 : 0;
}

int ccl__trusted_dir(const char *path, char *why, size_t len)
{
    return trusted(path, 0, 0, " (it must be this user's own and writable only by them, mode 0700)", why, len);
}

int ccl__private_dir(const char *path, char *why, size_t len)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) {
        snprintf(why, len, "%s: path too long", path);
        return -1;
    }
    /* Parents are created as needed (private, like the folder); existing ones are
     * left as they are: only the folder itself holds what we load. */
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (mkdir(p, 0700) != 0 && errno != EEXIST) {
            snprintf(why, len, "cannot create %s: %s", p, strerror(errno));
            return -1;
        }
        *s = '/';
    }
    if (mkdir(p, 0700) != 0 && errno != EEXIST) {
        snprintf(why, len, "cannot create %s: %s", p, strerror(errno));
        return -1;
    }
    return ccl__trusted_dir(p, why, len);
}

int ccl__pid_dead(long pid)
{
    if (pid <= 0)
        return 0;
    if (kill((pid_t)pid, 0) != 0)
        return errno == ESRCH;
    /* Killed but not reaped (a parent that waits only at the end) still answers kill. */
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *st = strrchr(buf, ')');
    return st && st[1] == ' ' && (st[2] == 'Z' || st[2] == 'X');
}

const char *ccl__host_name(char *buf, size_t len)
{
    if (len == 0)
        return buf;
    if (gethostname(buf, len) != 0)
        snprintf(buf, len, "?");
    buf[len - 1] = 0;
    return buf;
}

int ccl__first_dead(const int64_t *pids, int n, int from)
{
    int64_t self = getpid();
    for (int p = from < 0 ? 0 : from; p < n; p++)
        if (pids[p] > 0 && pids[p] != self && ccl__pid_dead((long)pids[p]))
            return p;
    return -1;
}

/* ---- deep work on a known stack ---- */

typedef struct {
    void (*fn)(void *);
    void *arg;
} StackJob;

static void *stack_job(void *p)
{
    StackJob *j = p;
    j->fn(j->arg);
    return NULL;
}

/* Bytes of stack left below this frame on the calling thread; SIZE_MAX when the
 * system cannot say (then the caller's thread is not trusted either way: 0). */
static size_t stack_left(void)
{
    pthread_attr_t a;
    void *lo;
    size_t size;
    if (pthread_getattr_np(pthread_self(), &a) != 0)
        return 0;
    int ok = pthread_attr_getstack(&a, &lo, &size) == 0;
    pthread_attr_destroy(&a);
    char here;
    if (!ok || (char *)&here < (char *)lo || (char *)&here > (char *)lo + size)
        return 0;
    return (size_t)(&here - (char *)lo);
}

int ccl__with_stack(void (*fn)(void *), void *arg)
{
    if (stack_left() >= CCL__DEEP_STACK_MIN) {
        fn(arg);
        return 0;
    }
    StackJob j = {fn, arg};
    pthread_attr_t a;
    pthread_t t;
    if (pthread_attr_init(&a) != 0)
        return -1;
    int rc = pthread_attr_setstacksize(&a, CCL__DEEP_STACK) == 0 && pthread_create(&t, &a, stack_job, &j) == 0 ? 0 : -1;
    pthread_attr_destroy(&a);
    if (rc == 0)
        pthread_join(t, NULL);
    return rc;
}

int ccl__thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
    sigset_t all, old;
    pthread_attr_t a;
    pthread_t mine;
    int rc = pthread_attr_init(&a);
    if (rc != 0)
        return rc;
    if (!t)
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(t ? t : &mine, &a, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
    return rc;
}

double ccl__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Waits run on few cores with many threads (ranks x blocks), so after a short spin a
 * waiter yields, and after a while sleeps, leaving the cores to whoever can progress. */
void ccl__backoff(unsigned iter)
{
    if (iter < 32)
        return;
    if (iter < 2000) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, iter < 20000 ? 20000 : 200000};
    nanosleep(&ts, NULL);
}

/* 1 when path is a folder (stat follows links). */
int ccl__is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}
