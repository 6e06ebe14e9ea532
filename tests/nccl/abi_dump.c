/* abi_dump.c: what a program compiled against an nccl.h sees of NCCL's ABI: every enum
 * value and the layout of the structs passed by value or pointer. tests/nccl/run.sh
 * builds it against NVIDIA's header (abi_dump) and against runtime/nccl/nccl.h
 * (abi_dump_own) and compares the two outputs line by line. */
#include <stddef.h>
#include <stdio.h>

#include <nccl.h>

#define V(x) printf("%s %lld\n", #x, (long long)(x))

int main(void)
{
    V(NCCL_MAJOR), V(NCCL_MINOR), V(NCCL_PATCH), V(NCCL_VERSION_CODE), V(NCCL_VERSION(2, 28, 9));
    V(NCCL_UNIQUE_ID_BYTES), V(sizeof(ncclUniqueId)), V(NCCL_SPLIT_NOCOLOR), V(NCCL_CONFIG_UNDEF_INT);
    V(ncclSuccess), V(ncclUnhandledCudaError), V(ncclSystemError), V(ncclInternalError), V(ncclInvalidArgument);
    V(ncclInvalidUsage), V(ncclRemoteError), V(ncclInProgress), V(ncclNumResults);
    V(ncclSum), V(ncclProd), V(ncclMax), V(ncclMin), V(ncclAvg), V(ncclNumOps), V(ncclMaxRedOp);
    V(sizeof(ncclRedOp_t)), V(sizeof(ncclDataType_t)), V(sizeof(ncclResult_t));
    V(ncclInt8), V(ncclChar), V(ncclUint8), V(ncclInt32), V(ncclInt), V(ncclUint32), V(ncclInt64), V(ncclUint64);
    V(ncclFloat16), V(ncclHalf), V(ncclFloat32), V(ncclFloat), V(ncclFloat64), V(ncclDouble), V(ncclBfloat16);
    V(ncclFloat8e4m3), V(ncclFloat8e5m2), V(ncclNumTypes);
    V(ncclScalarDevice), V(ncclScalarHostImmediate);
    V(NCCL_WIN_DEFAULT), V(NCCL_WIN_COLL_SYMMETRIC), V(NCCL_WIN_REQUIRED_ALIGNMENT);
    V(NCCL_CTA_POLICY_DEFAULT), V(NCCL_CTA_POLICY_EFFICIENCY), V(NCCL_CTA_POLICY_ZERO);
    V(NCCL_SHRINK_DEFAULT), V(NCCL_SHRINK_ABORT), V(NCCL_REVOKE_DEFAULT);
    V(sizeof(ncclConfig_t)), V(offsetof(ncclConfig_t, magic)), V(offsetof(ncclConfig_t, version));
    V(offsetof(ncclConfig_t, blocking)), V(offsetof(ncclConfig_t, netName)), V(offsetof(ncclConfig_t, splitShare));
    V(offsetof(ncclConfig_t, commName)), V(offsetof(ncclConfig_t, CTAPolicy));
    V(offsetof(ncclConfig_t, nvlinkCentricSched));
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    V(c.size), V(c.magic), V(c.version), V(c.blocking), V(c.nvlinkCentricSched), V(c.commName == NULL);
    V(sizeof(ncclSimInfo_t)), V(offsetof(ncclSimInfo_t, estimatedTime));
    ncclSimInfo_t si = NCCL_SIM_INFO_INITIALIZER;
    V(si.magic), V(si.version), V((int)si.estimatedTime);
    return 0;
}
