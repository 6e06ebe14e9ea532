/* error.c: where failures are said. Messages go to the comm's last_error (the user's
 * thread) or, from backends' worker threads, to async_error, which the common code
 * reports at the next synchronize (check.c); failures before a comm exists go to a
 * thread-local buffer read by ccl_comm_last_error(NULL). Every failure is also a WARN
 * line when CCL_DEBUG asks (log.c). Part of the base: calls only the base. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base.h"

static _Thread_local char init_error[CCL__ERR_LEN];

static void vformat(char *buf, const char *fmt, va_list ap)
{
    vsnprintf(buf, CCL__ERR_LEN, fmt, ap);
}

/* Every failure is a WARN line when CCL_DEBUG asks (log.c), as it is set. */
ccl_result_t ccl__set_error(ccl_comm_t *comm, ccl_result_t r, const char *fmt, ...)
{
    char *msg = comm ? comm->last_error : init_error;
    va_list ap;
    va_start(ap, fmt);
    vformat(msg, fmt, ap);
    va_end(ap);
    ccl__log_init();
    CCL__LOG(CCL__LOG_WARN, CCL__SUB_ALL, comm ? comm->rank : -1, "%s (%s)", msg, ccl_result_string(r));
    return r;
}

void ccl__set_async_error(ccl_comm_t *comm, ccl_result_t r, const char *fmt, ...)
{
    char msg[CCL__ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vformat(msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&comm->async_lock);
    int first = comm->async_result == CCL_OK;
    if (first) {
        memcpy(comm->async_error, msg, sizeof msg);
        comm->async_result = r;
    }
    pthread_mutex_unlock(&comm->async_lock);
    ccl__log_init();
    if (first)
        CCL__LOG(CCL__LOG_WARN, CCL__SUB_ALL, comm->rank, "%s (%s)", msg, ccl_result_string(r));
    else /* only the first failure is reported; the later ones are its consequences */
        CCL__LOG(CCL__LOG_INFO, CCL__SUB_ALL, comm->rank, "%s (%s; not reported: an earlier failure was)", msg,
                 ccl_result_string(r));
}

const char *ccl_comm_last_error(const ccl_comm_t *comm)
{
    if (comm && !ccl__handle_live(comm))
        return "ccl_comm_last_error: argument 'comm' is not a live communicator (destroyed already?)";
    return comm ? comm->last_error : init_error;
}
