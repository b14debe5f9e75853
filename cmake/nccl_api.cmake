# The NCCL API functions tutti exports (NCCL 2.28's nccl.h, without the "nccl" prefix), and
# the profiling twins: in each shared library p<name> is an alias of nccl<name> (the linker's
# --defsym), while nccl<name> is weak (API in src/*.c), as in NVIDIA's libnccl.
# tests/test_nccl_symbols checks this list against the nccl.h of the CUDA toolkit.
set(TUTTI_NCCL_API_FUNCTIONS
  GetVersion GetUniqueId GetErrorString GetLastError CommInitRank CommInitRankConfig
  CommInitAll CommSplit CommFinalize CommDestroy CommAbort CommGetAsyncError
  CommCount CommCuDevice CommUserRank CommInitRankScalable CommShrink CommRevoke
  ResetDebugInit RedOpCreatePreMulSum RedOpDestroy MemAlloc MemFree CommRegister
  CommDeregister CommWindowRegister CommWindowDeregister Reduce Bcast Broadcast
  AllReduce ReduceScatter AllGather AlltoAll Gather Scatter
  Send Recv GroupStart GroupEnd GroupSimulateEnd
  # the host entry points of the device API (nccl_device/*.h; src/api_device.c)
  DevCommCreate DevCommDestroy TeamWorld TeamLsa TeamRail TeamRankToWorld TeamRankToLsa
  LsaBarrierCreateRequirement GinBarrierCreateRequirement LLA2ACalcSlots
  LLA2ACreateRequirement)

function(tutti_add_profiling_aliases target)
  foreach(f ${TUTTI_NCCL_API_FUNCTIONS})
    target_link_options(${target} PRIVATE "LINKER:--defsym,pnccl${f}=nccl${f}")
  endforeach()
endfunction()
