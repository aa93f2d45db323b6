/* nccl_abi.c: the constants src/cuda/train/dist.cu assumes, checked against the
 * nccl.h of the machine (tests/gpu/dist.sh compiles and runs it). */
#include <nccl.h>
#include <stdio.h>

_Static_assert(ncclSuccess == 0, "ncclResult_t success");
_Static_assert(ncclFloat32 == 7, "ncclFloat32");
_Static_assert(ncclFloat64 == 8, "ncclFloat64");
_Static_assert(ncclSum == 0, "ncclSum");
_Static_assert(sizeof(ncclUniqueId) == 128, "ncclUniqueId");
_Static_assert(NCCL_UNIQUE_ID_BYTES == 128, "NCCL_UNIQUE_ID_BYTES");

int main(void) {
    int v = 0;
    ncclGetVersion(&v);
    printf("nccl.h %d.%d.%d, library %d: the ABI dist.cu uses holds\n", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, v);
    return 0;
}
