/* timing.c: the host clock and the median the tools report, and the GPU's clock: event
 * pairs on a rank's stream and CUDA graphs captured from it (see harness.h). */
#include <stdlib.h>
#include <time.h>

#include "cuda_api.h"

double tool_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double tool_median(double *v, int n)
{
    if (n <= 0)
        return -1;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ===== the GPU's clock (the driver through cuda.c's table) ===== */

CuResult tool_gpu_mark(ToolGpu *g, int i, int end)
{
    return tool_cu_call(g, tool_cu.EventRecord(end ? g->ev1[i] : g->ev0[i], g->stream), "cuEventRecord");
}

CuResult tool_gpu_elapsed_us(ToolGpu *g, int i, double div, double *us)
{
    float ms = 0;
    CuResult r = tool_cu_call(g, tool_cu.EventSynchronize(g->ev1[i]), "cuEventSynchronize");
    if (!r)
        r = tool_cu_call(g, tool_cu.EventElapsedTime(&ms, g->ev0[i], g->ev1[i]), "cuEventElapsedTime");
    *us = (double)ms * 1e3 / div;
    return r;
}

CuResult tool_gpu_capture_begin(ToolGpu *g)
{
    tool_gpu_graph_free(g);
    return tool_cu_call(g, tool_cu.StreamBeginCapture(g->stream, (CuCaptureMode)TOOL_CU_CAPTURE_THREAD_LOCAL),
                        "cuStreamBeginCapture");
}

CuResult tool_gpu_capture_end(ToolGpu *g)
{
    CuResult r = tool_cu_call(g, tool_cu.StreamEndCapture(g->stream, &g->graph), "cuStreamEndCapture");
    return r ? r : tool_cu_call(g, tool_cu.GraphInstantiate(&g->exec, g->graph, 0), "cuGraphInstantiateWithFlags");
}

CuResult tool_gpu_replay(ToolGpu *g)
{
    return tool_cu_call(g, tool_cu.GraphLaunch(g->exec, g->stream), "cuGraphLaunch");
}
