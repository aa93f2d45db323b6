/*
 * dist.cu: the NCCL communicator of data-parallel training (one process per
 * GPU). No CPU twin: the CPU trainer is one process; the CPU side of data
 * parallelism is the shard plan (mx_shard_plan, src/nn/llama.c) and the
 * process launcher (src/train/launch.c). NCCL is loaded at run time (dlopen of libnccl.so.2, or the file named
 * by MXLM_NCCL) with the few prototypes below, so the CUDA build needs no NCCL
 * headers or library to compile and link, and a single-GPU run never needs
 * NCCL. The prototypes and constants are NCCL's stable ABI (nccl.h 2.x:
 * ncclFloat32 = 7, ncclFloat64 = 8, ncclSum = 0, a 128-byte ncclUniqueId);
 * tests/gpu/dist.sh checks them against the nccl.h of the machine it runs on.
 * NVLink SHARP (multicast) is left off: NCCL_NVLS_ENABLE=0 unless the user
 * set it.
 */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/common.cuh"
#include "mxlm/gpu_model.h"

namespace {

typedef int nres_t; /* ncclResult_t: 0 success */
typedef void* ncomm_t;
struct nid_t {
    char internal[MXG_NCCL_ID_BYTES];
};
enum { kFloat32 = 7, kFloat64 = 8, kSum = 0 };

struct Nccl {
    void* h;
    nres_t (*GetUniqueId)(nid_t*);
    nres_t (*CommInitRank)(ncomm_t*, int, nid_t, int);
    nres_t (*CommDestroy)(ncomm_t);
    nres_t (*CommAbort)(ncomm_t);
    const char* (*GetErrorString)(nres_t);
    nres_t (*GetVersion)(int*);
    nres_t (*ReduceScatter)(const void*, void*, size_t, int, int, ncomm_t, cudaStream_t);
    nres_t (*AllGather)(const void*, void*, size_t, int, ncomm_t, cudaStream_t);
    nres_t (*GroupStart)(void);
    nres_t (*GroupEnd)(void);
};
Nccl g_nccl;
int g_loaded = 0;
char g_why[512];

#define NC_TRY(call)                                                                                     \
    do {                                                                                                 \
        nres_t r_ = (call);                                                                              \
        if (r_ != 0)                                                                                     \
            return mx_fail(MX_EIO, "NCCL: %s failed: %s (%d)", #call, g_nccl.GetErrorString(r_), r_);     \
    } while (0)

template <typename F> int sym(F* f, const char* name) {
    *(void**)f = dlsym(g_nccl.h, name);
    if (!*f) {
        snprintf(g_why, sizeof g_why, "NCCL library has no %s: %s", name, dlerror());
        return -1;
    }
    return 0;
}

}  // namespace

struct mxg_comm {
    ncomm_t comm;
    int rank, world;
    void* dev;  /* device scratch of the host exchanges */
    size_t dev_bytes;
};

extern "C" int mxg_nccl_load(char* why, size_t n) {
    if (g_loaded == 1) return 0;
    if (g_loaded < 0) {
        if (why) snprintf(why, n, "%s", g_why);
        return -1;
    }
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* NVLink multicast off (unless the user chose otherwise) */
    const char* env = getenv("MXLM_NCCL");
    const char* names[3] = {env && *env ? env : "libnccl.so.2", "libnccl.so", NULL};
    for (int i = 0; names[i] && !g_nccl.h; i++) g_nccl.h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!g_nccl.h) {
        snprintf(g_why, sizeof g_why,
                 "NCCL not found (%s): install NCCL 2 (libnccl2) or put libnccl.so.2 on LD_LIBRARY_PATH, or set "
                 "MXLM_NCCL=/path/to/libnccl.so.2", dlerror());
    } else if (sym(&g_nccl.GetUniqueId, "ncclGetUniqueId") || sym(&g_nccl.CommInitRank, "ncclCommInitRank") ||
               sym(&g_nccl.CommDestroy, "ncclCommDestroy") || sym(&g_nccl.CommAbort, "ncclCommAbort") ||
               sym(&g_nccl.GetErrorString, "ncclGetErrorString") || sym(&g_nccl.GetVersion, "ncclGetVersion") ||
               sym(&g_nccl.ReduceScatter, "ncclReduceScatter") || sym(&g_nccl.AllGather, "ncclAllGather") ||
               sym(&g_nccl.GroupStart, "ncclGroupStart") || sym(&g_nccl.GroupEnd, "ncclGroupEnd")) {
        dlclose(g_nccl.h);
        g_nccl.h = NULL;
    } else {
        int v = 0;
        if (g_nccl.GetVersion(&v) == 0 && v < 21000) {
            snprintf(g_why, sizeof g_why, "NCCL %d is too old (2.10 or newer needed)", v);
        } else {
            g_loaded = 1;
            return 0;
        }
    }
    g_loaded = -1;
    if (why) snprintf(why, n, "%s", g_why);
    return -1;
}

extern "C" int mxg_nccl_version(void) {
    int v = 0;
    if (mxg_nccl_load(NULL, 0) || g_nccl.GetVersion(&v)) return 0;
    return v;
}

extern "C" int mxg_select_device(int index) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return mx_fail(MX_EIO, "no CUDA device");
    }
    if (index < 0 || index >= n)
        return mx_fail(MX_EINVAL, "GPU %d requested (local rank) but %d GPU%s visible", index, n, n == 1 ? " is" : "s are");
    CU_TRY(cudaSetDevice(index));
    return MX_OK;
}

static int need_nccl(void) {
    char why[512];
    if (mxg_nccl_load(why, sizeof why)) return mx_fail(MX_EINVAL, "%s", why);
    return MX_OK;
}

extern "C" int mxg_comm_unique_id(unsigned char id[MXG_NCCL_ID_BYTES]) {
    int rc = need_nccl();
    if (rc) return rc;
    nid_t u;
    NC_TRY(g_nccl.GetUniqueId(&u));
    memcpy(id, u.internal, MXG_NCCL_ID_BYTES);
    return MX_OK;
}

extern "C" int mxg_comm_create(mxg_comm** out, int rank, int world, const unsigned char id[MXG_NCCL_ID_BYTES]) {
    *out = NULL;
    int rc = need_nccl();
    if (rc) return rc;
    if (world < 1 || rank < 0 || rank >= world)
        return mx_fail(MX_EINVAL, "NCCL: rank %d of world size %d is invalid", rank, world);
    mxg_comm* c = (mxg_comm*)calloc(1, sizeof *c);
    if (!c) return mx_fail(MX_ENOMEM, "NCCL: out of host memory");
    c->rank = rank;
    c->world = world;
    c->dev_bytes = 4096;
    if (cudaMalloc(&c->dev, c->dev_bytes) != cudaSuccess) {
        cudaGetLastError();
        free(c);
        return mx_fail(MX_ENOMEM, "NCCL: GPU out of memory (4 KiB exchange buffer)");
    }
    nid_t u;
    memcpy(u.internal, id, MXG_NCCL_ID_BYTES);
    nres_t r = g_nccl.CommInitRank(&c->comm, world, u, rank);
    if (r != 0) {
        cudaFree(c->dev);
        free(c);
        return mx_fail(MX_EIO, "NCCL: ncclCommInitRank (rank %d of %d) failed: %s (%d)", rank, world,
                       g_nccl.GetErrorString(r), r);
    }
    *out = c;
    return MX_OK;
}

extern "C" void mxg_comm_free(mxg_comm* c, int abort) {
    if (!c) return;
    if (c->comm) (abort ? g_nccl.CommAbort : g_nccl.CommDestroy)(c->comm);
    cudaFree(c->dev);
    free(c);
}

extern "C" int mxg_comm_rank(const mxg_comm* c) { return c ? c->rank : 0; }
extern "C" int mxg_comm_world(const mxg_comm* c) { return c ? c->world : 1; }

extern "C" int mxg_comm_allgather_host(mxg_comm* c, const void* mine, void* all, size_t bytes) {
    if (bytes * (size_t)c->world > c->dev_bytes || bytes % 8)
        return mx_fail(MX_EINVAL, "NCCL: host exchange of %zu bytes per rank is not supported", bytes);
    char* d = (char*)c->dev;
    CU_TRY(cudaMemcpy(d + bytes * (size_t)c->rank, mine, bytes, cudaMemcpyHostToDevice));
    /* in place: rank r's part at r * bytes */
    NC_TRY(g_nccl.AllGather(d + bytes * (size_t)c->rank, d, bytes / 8, kFloat64, c->comm, 0));
    CU_TRY(cudaStreamSynchronize(0));
    CU_TRY(cudaMemcpy(all, d, bytes * (size_t)c->world, cudaMemcpyDeviceToHost));
    return MX_OK;
}

extern "C" int mxg_comm_group(mxg_comm* c, int begin) {
    (void)c;
    if (begin) NC_TRY(g_nccl.GroupStart());
    else NC_TRY(g_nccl.GroupEnd());
    return MX_OK;
}

extern "C" int mxg_comm_reduce_scatter(mxg_comm* c, float* buf, size_t n, void* stream) {
    const size_t part = n / (size_t)c->world;
    NC_TRY(g_nccl.ReduceScatter(buf, buf + part * (size_t)c->rank, part, kFloat32, kSum, c->comm, MXG_STREAM(stream)));
    return MX_OK;
}

extern "C" int mxg_comm_all_gather(mxg_comm* c, float* buf, size_t n, void* stream) {
    const size_t part = n / (size_t)c->world;
    NC_TRY(g_nccl.AllGather(buf + part * (size_t)c->rank, buf, part, kFloat32, c->comm, MXG_STREAM(stream)));
    return MX_OK;
}
