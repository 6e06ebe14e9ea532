/* errors.c: NCCL's results and strings, the last errors, and the shim's debug lines.
 *
 * Takes libccl's results and messages; gives NCCL's codes with NCCL's meanings and
 * ncclGetLastError's text. A failure sets the message of the calling thread (what
 * ncclGetLastError(NULL) and a failed init report) and of the comm it happened on (what
 * ncclGetLastError(comm) reports, also to another thread such as torch's watchdog).
 * Like libccl, the shim never prints unless CCL_DEBUG asks: WARN for every failure,
 * INFO for communicators and their routing summary, in libccl's line format, on stderr. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "shim.h"

static _Thread_local char thread_error[SHIM_ERR_LEN];

ncclResult_t shim_result(ccl_result_t r)
{
    switch (r) {
    case CCL_OK:
        return ncclSuccess;
    case CCL_ERR_INVALID_ARGUMENT:
        return ncclInvalidArgument;
    case CCL_ERR_INVALID_USAGE:
    case CCL_ERR_UNSUPPORTED:
    case CCL_ERR_NOT_SYMMETRIC:
        return ncclInvalidUsage;
    case CCL_ERR_TIMEOUT:
    case CCL_ERR_PEER_FAILED:
        return ncclRemoteError;
    case CCL_ERR_CUDA:
        return ncclUnhandledCudaError;
    case CCL_ERR_OUT_OF_MEMORY:
    case CCL_ERR_SYSTEM:
        return ncclSystemError;
    case CCL_ERR_COMPILE:
    case CCL_ERR_NO_ALGORITHM:
    case CCL_ERR_NVRTC:
    case CCL_ERR_INTERNAL:
    default:
        return ncclInternalError;
    }
}

const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with CCL_DEBUG=INFO for details)";
    case ncclSystemError:
        return "unhandled system error (run with CCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error (see ncclGetLastError)";
    case ncclInvalidArgument:
        return "invalid argument (run with CCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
        return "invalid usage (run with CCL_DEBUG=WARN for details)";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    default:
        return "unknown result code";
    }
}

/* ---- the debug log ---- */

static int log_level = -1;
static char host[64] = "?";
static struct timespec t0;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void log_read_env(void)
{
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = 0;
    const char *v = getenv("CCL_DEBUG");
    if (!v || !*v || !strcmp(v, "0") || !strcasecmp(v, "NONE"))
        log_level = SHIM_LOG_NONE;
    else if (!strcasecmp(v, "INFO"))
        log_level = SHIM_LOG_INFO;
    else if (!strcasecmp(v, "TRACE") || !strcmp(v, "1"))
        log_level = SHIM_LOG_TRACE;
    else /* WARN, and what libccl reads as WARN (it says so itself) */
        log_level = SHIM_LOG_WARN;
}

int shim_log_level(void)
{
    pthread_once(&log_once, log_read_env);
    return log_level;
}

void shim_log(int level, int rank, const char *fmt, ...)
{
    if (shim_log_level() < level)
        return;
    char text[SHIM_ERR_LEN], who[16];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double ms = (double)(now.tv_sec - t0.tv_sec) * 1e3 + (double)(now.tv_nsec - t0.tv_nsec) / 1e6;
    if (rank >= 0)
        snprintf(who, sizeof who, "%d", rank);
    else
        snprintf(who, sizeof who, "?");
    /* One write per line, so that ranks' threads and processes interleave whole lines. */
    fprintf(stderr, "%s:%ld ccl %-5s %10.3f ms rank %s%s: %s\n", host, (long)getpid(),
            level == SHIM_LOG_WARN ? "WARN" : level == SHIM_LOG_INFO ? "INFO" : "TRACE", ms, who,
            level > SHIM_LOG_WARN ? " [nccl]" : "", text);
}

/* ---- last errors ---- */

static const char *result_name(ncclResult_t r)
{
    static const char *const names[] = {"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError",
                                        "ncclInternalError", "ncclInvalidArgument", "ncclInvalidUsage",
                                        "ncclRemoteError", "ncclInProgress"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "?";
}

/* The message as this thread's last error and, with a comm, the comm's. */
static void record(ncclComm_t comm, const char *fmt, va_list ap)
{
    vsnprintf(thread_error, sizeof thread_error, fmt, ap);
    if (comm) {
        pthread_mutex_lock(&comm->mu);
        memcpy(comm->last_error, thread_error, sizeof comm->last_error);
        pthread_mutex_unlock(&comm->mu);
    }
}

ncclResult_t shim_fail(ncclComm_t comm, ncclResult_t r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(comm, fmt, ap);
    va_end(ap);
    shim_log(SHIM_LOG_WARN, comm ? comm->rank : -1, "%s (%s)", thread_error, result_name(r));
    return r;
}

void shim_warn(ncclComm_t comm, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(comm, fmt, ap);
    va_end(ap);
    shim_log(SHIM_LOG_WARN, comm ? comm->rank : -1, "%s", thread_error);
}

ncclResult_t shim_fail_ccl(ncclComm_t comm, ccl_result_t r, const ccl_comm_t *cc, const char *what)
{
    const char *msg = ccl_comm_last_error(cc);
    return shim_fail(comm, shim_result(r), "%s: %s (libccl: %s)", what, msg && *msg ? msg : "no message",
                     ccl_result_string(r));
}

const char *shim_thread_error(void)
{
    return thread_error;
}

/* Deprecated by NVIDIA: NCCL rereads its logging variables; libccl reads its own once.
 * (NVIDIA's header declares both without a prototype.) */
void ncclResetDebugInit(void);
void pncclResetDebugInit(void);

void ncclResetDebugInit(void)
{
}

void pncclResetDebugInit(void)
{
}

int shim_timeout_ms(void)
{
    const char *v = getenv("CCL_TIMEOUT_MS");
    char *end;
    long t = v ? strtol(v, &end, 10) : 0;
    return v && *v && !*end && t > 0 && t <= (1L << 30) ? (int)t : CCL_DEFAULT_TIMEOUT_MS;
}

int shim_env_cpu(void)
{
    const char *v = getenv("CCL_BACKEND");
    return v && !strcasecmp(v, "cpu");
}

int shim_real_on_cpu(void)
{
    const char *v = getenv("CCL_NCCL_REAL_ON_CPU");
    return v && !strcmp(v, "1");
}

int shim_real_fits(ccl_backend_t backend)
{
    return backend == CCL_BACKEND_GPU || shim_real_on_cpu();
}

/* NCCL's profiling names. */
SHIM_PROFILING_NAME(ncclGetErrorString);
