// The prelude (compiler/cuda/prelude.cuh) as a one-rank bf16 sum kernel sees it, for the
// tests that run its pieces alone on one GPU (ll128_lines.cu, xfer_copy.cu). A test sets
// CCL_PART_BYTES or CCL_SHIFTED_COPIES before including it, as the emitter would.
typedef unsigned short ccl_t;
typedef float ccl_acc;
#define CCL_LOAD(x) ccl_bf2f(x)
#define CCL_STORE(x) ccl_f2bf(x)
#define CCL_OP(a, b) ((a) + (b))
#define CCL_NRANKS 1
#define CCL_RANK 0
#include "prelude.cuh"
