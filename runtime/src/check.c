/* check.c: the checks every entry point starts with, and the one place a comm's
 * failures become the user's: a live handle (handles.c's set: ccl__check_comm,
 * ccl__check_alg, and ccl__hold_comm for calls that may race a destroy), a usable comm
 * (an asynchronous failure moved into last_error, and the comm dead from then on), a
 * dtype of ccl_dtype_t, and one the backend has kernels for. Every failure names the
 * user's entry point and the argument (error.c). The bottom of the common code: called
 * by comm.c, algorithm.c and everything above them. */
#include "internal.h"

ccl_result_t ccl__check_comm(const ccl_comm_t *comm, const char *fn)
{
    if (!comm)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'comm' is NULL", fn);
    if (!ccl__handle_live(comm))
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'comm' (%p) is not a live communicator "
                              "(destroyed already, or not made by ccl_comm_init_all/ccl_comm_init_rank)", fn,
                              (const void *)comm);
    return CCL_OK;
}

ccl_result_t ccl__hold_comm(ccl_comm_t *comm, const char *fn)
{
    return ccl__handle_hold(comm) ? CCL_OK : ccl__check_comm(comm, fn);
}

ccl_result_t ccl__check_alg(const ccl_algorithm_t *alg, const char *fn)
{
    if (!alg)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'alg' is NULL", fn);
    if (!ccl__handle_live(alg))
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'alg' (%p) is not a live algorithm "
                              "(freed already, its communicator destroyed, or not made by ccl_algorithm_load)", fn,
                              (const void *)alg);
    return CCL_OK;
}

/* Moves a pending asynchronous failure into last_error; the comm is dead from then on.
 * With `poll`, a failure the backend has seen but not reported yet (a peer's abort
 * reaching an idle rank: no wait of its own ever saw it) counts too, as
 * ccl_comm_get_async_error counts it: what that call says, synchronize and
 * ccl_mem_alloc say as well. Not on every collective's path: a call enqueued there
 * meets the failure itself, and the GPU backend's poll reads pinned memory. */
ccl_result_t ccl__take_async(ccl_comm_t *comm, const char *fn, int poll)
{
    pthread_mutex_lock(&comm->async_lock);
    if (poll && comm->async_result == CCL_OK && comm->failed == CCL_OK && comm->be->poll) {
        ccl_result_t p = comm->be->poll(comm);
        if (p != CCL_OK) {
            char why[256] = "";
            if (comm->be->poll_message)
                comm->be->poll_message(comm, why, sizeof why);
            CCL__FMT(comm->async_error, sizeof comm->async_error, "rank %d: the communicator stopped: %s; destroy it",
                     comm->rank, why[0] ? why : ccl_result_string(p));
            comm->async_result = p;
        }
    }
    ccl_result_t r = comm->async_result;
    if (r != CCL_OK) {
        CCL__FMT(comm->last_error, sizeof comm->last_error, "%s: %s", fn, comm->async_error);
        CCL__FMT(comm->failed_why, sizeof comm->failed_why, "%s", comm->async_error);
        comm->async_result = CCL_OK;
        comm->failed = r;
    }
    pthread_mutex_unlock(&comm->async_lock);
    return r;
}

static ccl_result_t check_usable(ccl_comm_t *comm, const char *fn, int poll)
{
    ccl_result_t r = ccl__take_async(comm, fn, poll);
    if (r != CCL_OK)
        return r;
    if (comm->failed)
        return ccl__set_error(comm, comm->failed, "%s: the communicator failed earlier (%s: %s); destroy it", fn,
                              ccl_result_string(comm->failed), comm->failed_why);
    return CCL_OK;
}

ccl_result_t ccl__check_usable(ccl_comm_t *comm, const char *fn)
{
    return check_usable(comm, fn, 0);
}

ccl_result_t ccl__check_usable_poll(ccl_comm_t *comm, const char *fn)
{
    return check_usable(comm, fn, 1);
}

ccl_result_t ccl__check_call(ccl_comm_t *comm, ccl_dtype_t dtype, const char *fn)
{
    if (ccl__check_comm(comm, fn) != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    ccl_result_t r = ccl__check_usable(comm, fn);
    if (r != CCL_OK)
        return r;
    if ((unsigned)dtype >= CCL_NUM_DTYPES)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'dtype' is %d, not a ccl_dtype_t", fn, (int)dtype);
    return CCL_OK;
}
