/* tutti — public API.
 *
 * NCCL's names, signatures, types and enum values (so `#include <nccl.h>` works unchanged),
 * plus a few tutti* extensions. Plain C, usable from C++.
 *
 * Host memory is first class: host buffers with a NULL stream run synchronously in the caller.
 */
#ifndef TUTTI_H_
#define TUTTI_H_

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* Version of the NCCL API we implement (every function of NCCL 2.28's nccl.h is exported; see
 * the notes on ncclCommWindowRegister and ncclGroupSimulateEnd for what tutti cannot do), and
 * tutti's own version. */
#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 0
#define NCCL_SUFFIX ""
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

#define TUTTI_VERSION_MAJOR 0
#define TUTTI_VERSION_MINOR 1
#define TUTTI_VERSION_PATCH 0
#define TUTTI_VERSION_STRING "0.1.0"

#if defined(TUTTI_HAVE_CUDA_HEADERS) || defined(__CUDA_RUNTIME_H__) || defined(__CUDACC__)
/* With CUDA's headers, what NCCL's nccl.h brings in too: programs written for NCCL use half,
 * __nv_bfloat16 and the fp8 types without including their headers (nccl-tests does). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#if defined(__cplusplus) && CUDART_VERSION >= 11080
#include <cuda_fp8.h>
#endif
#else
/* Same opaque pointer type as CUDA's, so code written for NCCL compiles without CUDA. */
typedef struct CUstream_st *cudaStream_t;
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ncclComm *ncclComm_t;
typedef struct ncclWindow_vidmem *ncclWindow_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

/* Window registration flags, CTA policies, shrink and revoke flags (NCCL 2.28). */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01
#define NCCL_REVOKE_DEFAULT 0x00

/* Communicator configuration (NCCL 2.28's layout). tutti reads only size and magic: a config
 * from an older NCCL header (a smaller size) is accepted too. The GPU tuning fields (CTAs,
 * traffic class, collnet, NVLS) have no meaning on host memory and are ignored. */
typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;
  int splitShare;
  int trafficClass;
  const char *commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                         \
  {                                                                                     \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT                                    \
  }

/* Filled by ncclGroupSimulateEnd. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER                                                        \
  {                                                                                      \
    sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), \
        NCCL_UNDEF_FLOAT                                                                 \
  }

typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff /* user-created ops (PreMulSum) take values from ncclNumOps up */
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

/* Version, ids, errors. */
ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
const char *ncclGetErrorString(ncclResult_t result);
const char *ncclGetLastError(ncclComm_t comm);

/* Communicator lifecycle. */
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);
ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);

/* NCCL 2.28 lifecycle additions (src/api_compat.c).
 * ncclCommInitRankScalable bootstraps from commIds[0]; rank k (0 < k < nId) also consumes the
 * bootstrap root of commIds[k], so no root is left waiting. ncclCommShrink builds the new
 * communicator over the parent's point-to-point links (the parent must still be healthy).
 * ncclCommRevoke releases every operation waiting on the communicator; afterwards only
 * ncclCommDestroy / ncclCommAbort are accepted. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId *commIds, ncclConfig_t *config);
ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                            ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags);
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
/* Re-reads NCCL_DEBUG / TUTTI_DEBUG and the other logging settings (deprecated in NCCL). */
void ncclResetDebugInit(void);

/* Reduction operators. */
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* Memory other ranks of the host can read in place (NCCL 2.19's API). On a thread with a
 * current CUDA context ncclMemAlloc returns device memory of that context's GPU, as NCCL's does;
 * elsewhere (or with TUTTI_MEM_ALLOC=shared or private) it returns shared host memory: an
 * all-reduce, reduce-scatter or all-gather whose send and receive buffers come from it on every
 * rank of a single-host communicator reads the peers' buffers directly instead of copying through
 * the FIFOs (TUTTI_DIRECT=0 turns that off). Being shared memory, it stays shared with children
 * forked after the allocation (no copy-on-write). ncclCommRegister/ncclCommDeregister are accepted
 * and checked for NCCL programs; on host memory they change nothing else. */
ncclResult_t ncclMemAlloc(void **ptr, size_t size);
ncclResult_t ncclMemFree(void *ptr);
ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle);
/* Symmetric memory windows need device memory mapped into every rank's address space by the
 * CUDA driver; tutti has none, so both return ncclInvalidUsage with a message. */
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
                                    int winFlags);
ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
/* NCCL's device API (the nccl_device headers: device communicators, teams, barriers) is not
 * available. Its host functions are exported all the same, so that programs built against
 * NVIDIA's NCCL load (src/api_device.c says what each returns); they are not declared here. */

/* Collectives. */
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

/* Point to point. */
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);

/* Groups. */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
/* tutti cannot simulate a group (NCCL's GPU timing model does not apply): returns
 * ncclInvalidUsage and leaves the group open, so ncclGroupEnd still runs or ends it. */
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo);

/* Profiling interface (as MPI's PMPI_*): every nccl* function also answers to pnccl*. In the
 * shared libraries nccl* are weak and pnccl* are aliases of the same code, so a tool that
 * defines ncclAllReduce (LD_PRELOAD or linked first) can call pncclAllReduce to reach tutti.
 * Not in libtutti.a. */
ncclResult_t pncclGetVersion(int *version);
ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId);
const char *pncclGetErrorString(ncclResult_t result);
const char *pncclGetLastError(ncclComm_t comm);
ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t pncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t *config);
ncclResult_t pncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                            ncclConfig_t *config);
ncclResult_t pncclCommFinalize(ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t pncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank);
ncclResult_t pncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                       ncclUniqueId *commIds, ncclConfig_t *config);
ncclResult_t pncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                             ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags);
void pncclResetDebugInit(void);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclMemAlloc(void **ptr, size_t size);
ncclResult_t pncclMemFree(void *ptr);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void *handle);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
                                     int winFlags);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                         cudaStream_t stream);
ncclResult_t pncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream);
ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                            cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream);
ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclGather(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclGroupStart(void);
ncclResult_t pncclGroupEnd(void);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t *simInfo);

/* ---- tutti extensions ---- */

/* Creates this process's communicator from a launcher's environment: tutti-run
 * (TUTTI_RANK, TUTTI_NRANKS, TUTTI_ROOT_ADDR, ...), torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
 * MASTER_ADDR, MASTER_PORT), Open MPI (OMPI_COMM_WORLD_*) or Slurm (SLURM_PROCID, ...). */
ncclResult_t tuttiCommInitFromEnv(ncclComm_t *comm);

/* Returns tutti's own version string, e.g. "0.1.0 (cuda=off)". */
const char *tuttiVersionString(void);

/* Size of one element of a datatype in bytes (0 for an invalid type). */
size_t tuttiTypeSize(ncclDataType_t datatype);

/* ---- gradient compression (docs/compression.md) ----
 * A compressor belongs to one gradient buffer: it owns that buffer's error-feedback residual and
 * any warm-start state, so the same compressor is passed to every all-reduce of that buffer and
 * never shared between buffers. tuttiAllReduceCompressed is a collective like ncclAllReduce
 * (every rank calls it with the same count, datatype, op and kind of compressor); the result is
 * the same bits on every rank. Only ncclFloat buffers and ncclSum / ncclAvg are accepted. */
typedef enum {
  tuttiCompressNone = 0,     /* exact: ncclAllReduce */
  tuttiCompressBf16 = 1,     /* bf16 on the wire, fp32 accumulation */
  tuttiCompressFp16 = 2,     /* fp16 on the wire, fp32 accumulation */
  tuttiCompressInt8 = 3,     /* int8 with a scale per 256 elements, error feedback */
  tuttiCompressTopk = 4,     /* largest-magnitude fraction, error feedback, all-gathered */
  tuttiCompressPowerSgd = 5, /* rank-r factors of the gradient as a matrix, error feedback */
  tuttiCompressNumKinds = 6
} tuttiCompressKind_t;

typedef struct {
  tuttiCompressKind_t kind;
  float topkFraction;   /* topk: fraction of the elements sent, in (0, 1] */
  int powerSgdRank;     /* powersgd: rank r of the factors, >= 1 */
  int warmupSteps;      /* powersgd: dense (exact) all-reduces before compression starts; topk:
                         * calls over which the fraction sent falls from all to topkFraction */
  int hierarchical;     /* 0: compressed among all ranks; 1: exact inside a host, compressed
                         * only between hosts' leaders; 2: the tuner chooses at the first call
                         * (registry entries cblock/ctopk/cpsgd against chier, by cost) */
  int minCompressCount; /* topk, powersgd with a layout: tensors of fewer elements are sent
                         * exactly (topk: every element as a pair, powersgd: in the exact
                         * part), the others compressed; 0 (the default): none */
} tuttiCompressorConfig_t;

typedef struct tuttiCompressor *tuttiCompressor_t;

/* Parses "none", "bf16", "fp16", "int8", "topk:0.01", "powersgd:2" (an optional ",hier" suffix
 * sets hierarchical to 1, ",auto" to 2) into a config with the other fields at their defaults
 * (warmupSteps: 10 for powersgd, 0 for topk). */
ncclResult_t tuttiCompressorParse(const char *spec, tuttiCompressorConfig_t *config);
ncclResult_t tuttiCompressorCreate(tuttiCompressor_t *compressor,
                                   const tuttiCompressorConfig_t *config, size_t count,
                                   ncclDataType_t datatype);
ncclResult_t tuttiCompressorDestroy(tuttiCompressor_t compressor);
/* Tells a compressor which tensors its buffer holds, before its first all-reduce: tensor i is the
 * next counts[i] elements, row-major rows of rowLengths[i] elements (a weight of shape
 * (out, ...) has rowLength numel / out, as PyTorch's view(out, -1); a 1-D tensor: its count).
 * The counts add up to the compressor's count. PowerSGD compresses each matrix on its own and
 * sends 1-D tensors and matrices too small to gain exactly; without a layout it views the whole
 * buffer as one matrix. topk uses it only with minCompressCount; the other kinds keep it and
 * do not use it. */
ncclResult_t tuttiCompressorSetLayout(tuttiCompressor_t compressor, int ntensors,
                                      const size_t *counts, const size_t *rowLengths);
/* Bytes this compressor's all-reduces have sent from this rank so far (headers included). */
ncclResult_t tuttiCompressorBytesSent(tuttiCompressor_t compressor, uint64_t *bytes);
ncclResult_t tuttiAllReduceCompressed(const void *sendbuff, void *recvbuff, size_t count,
                                      ncclDataType_t datatype, ncclRedOp_t op,
                                      tuttiCompressor_t compressor, ncclComm_t comm,
                                      cudaStream_t stream);
/* Bytes one rank sends in one compressed all-reduce of `count` fp32 elements over `nranks`
 * ranks of a flat communicator (pure: no communicator needed; the tuner's and the simulator's
 * view). PowerSGD is given for a step after its warm-up. */
ncclResult_t tuttiCompressedWireBytes(const tuttiCompressorConfig_t *config, size_t count,
                                      int nranks, size_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* TUTTI_H_ */
