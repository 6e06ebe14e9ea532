/* gpu/proxy.h: the host proxy serving port-channel puts (gpu/proxy.c). */
#ifndef CCL_GPU_PROXY_H
#define CCL_GPU_PROXY_H

#include "gpu/gpu.h"
#include "cuda/abi.h"

/* Request queues for one algorithm's nblocks grid blocks, served from now on (the
 * proxy thread starts on first use). CCL_OK, or an error set on comm. */
ccl_result_t ccl__gpu_port_open(ccl_comm_t *comm, GpuComm *g, int nblocks, GpuPortQueues **out);
/* The queues' device address, for CclGpuArgs.port (0 for NULL). */
uint64_t ccl__gpu_port_address(const GpuPortQueues *q);
/* Finishes copies in flight and stops serving q; NULL is ignored. */
void ccl__gpu_port_close(GpuComm *g, GpuPortQueues *q);
/* 1 and the reason in buf once a copy failed (the proxy then serves nothing more). */
int ccl__gpu_proxy_error(GpuComm *g, char *buf, size_t len);
/* Stops the thread (at communicator destruction). */
void ccl__gpu_proxy_stop(GpuComm *g);

#endif
