/* gpu.h: state shared by the GPU backend's files (gpu_mem.c: the symmetric heap;
 * gpu_backend.c: kernels, launches, errors; gpu_proxy.c: port channels). */
#ifndef CCL_GPU_H
#define CCL_GPU_H

#include "gpu_cuda.h"
#include "internal.h"

typedef struct GpuProxy GpuProxy;           /* gpu_proxy.c */
typedef struct GpuPortQueues GpuPortQueues;

/* comm->be_comm on the GPU backend. */
typedef struct {
    CUdevice dev;
    CUcontext ctx;            /* the device's primary context, current in every hook */
    int arch;                 /* compute capability as 90 for sm_90 */
    size_t heap_size;         /* comm->heap_bytes rounded up to the granularity */
    CUmemGenericAllocationHandle own;
    CUdeviceptr own_va;
    CUmemGenericAllocationHandle *imported; /* per rank: a peer process's heap, or 0 */
    CUdeviceptr *mapped;      /* per rank: where we mapped an imported heap, or 0 */
    CUdeviceptr peers;        /* device table: nranks heap bases (comm->heap_base) */
    CUdeviceptr bar_gen;      /* device counter: this rank's all-rank barrier generation */
    /* Device staging for unreachable user buffers that need no peer access (grow-only;
     * replaced buffers are freed at synchronize). */
    CUdeviceptr stage[2];
    size_t stage_bytes[2];
    int nretired;
    CUdeviceptr retired[16];
    GpuProxy *proxy;          /* serves port-channel puts; NULL until the first needs it */
} GpuComm;

/* gpu_mem.c */
ccl_result_t ccl__gpu_heap_create(ccl_comm_t *comm, GpuComm *g, const ccl_bootstrap_t *boot);
void ccl__gpu_heap_destroy(ccl_comm_t *comm, GpuComm *g);

#endif
