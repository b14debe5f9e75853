// tutti's c10d::ProcessGroup for PyTorch 1.13 (Debian's python3-torch, CPU tensors).
//
// Shape: the calling thread checks the arguments (a bad call raises at once, nothing is queued)
// and makes a job, a synchronous tutti call on host buffers (stream NULL). A collective of at
// most TUTTI_TORCH_INLINE_BYTES (default 16 MiB) that finds the group idle (nothing queued or
// running) runs at once on the calling thread, as NCCL's host path does, and returns completed
// work: no hand-off to another thread and back, and no second thread competing for the CPU the
// caller computes on. Everything else is queued; one worker thread per process group runs the
// queued jobs in order, and completes the job's Work and its Future. Either way the jobs of a
// group run one at a time in the order they were issued, and DDP's reducer gets the Future its
// comm hook chains on. send/recv always go to the worker, so isend returns before its peer
// has matched it.
//
// Timeouts: the timeout given to init_process_group becomes tutti's communicator timeout
// (TUTTI_TIMEOUT, when the user has not set it) and also bounds Work::wait(): a wait that
// outlives it aborts the communicator (ncclCommAbort releases the worker's blocked call) and
// raises. After a failure the group is broken: queued and later jobs fail at once with the first
// error, as NCCL's process group does, instead of each waiting out its own timeout.
#pragma once

#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

namespace tutti_torch {

class ProcessGroupTutti;

// One queued operation: completes once, from the worker, with its output tensors or an error.
class WorkTutti : public c10d::Work {
 public:
  WorkTutti(ProcessGroupTutti *pg, c10d::OpType type, const char *name,
            std::vector<at::Tensor> outputs);
  bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }
  void complete(std::exception_ptr error);
  const char *name() const { return name_; }

 private:
  ProcessGroupTutti *pg_;  // the group outlives its work: c10d keeps the group while in use
  const char *name_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupTutti : public c10d::ProcessGroup {
 public:
  ProcessGroupTutti(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                    std::chrono::milliseconds timeout);
  ~ProcessGroupTutti() override;
  const std::string getBackendName() const override { return "tutti"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                           const c10d::BroadcastOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                           const c10d::AllreduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor> &tensors, const c10d::AllreduceCoalescedOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                        const c10d::ReduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                           std::vector<at::Tensor> &inputs,
                                           const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                 const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                                                     std::vector<at::Tensor> &inputs,
                                                     const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                        std::vector<at::Tensor> &inputs,
                                        const c10d::GatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                         std::vector<std::vector<at::Tensor>> &inputs,
                                         const c10d::ScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                std::vector<std::vector<at::Tensor>> &inputs,
                                                const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor &output, at::Tensor &input, const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                               std::vector<int64_t> &outputSplits,
                                               std::vector<int64_t> &inputSplits,
                                               const c10d::AllToAllOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs,
                                          std::vector<at::Tensor> &inputs,
                                          const c10d::AllToAllOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts) override;

  // The compressed average (tuttiAllReduceCompressed, ncclAvg) of a contiguous fp32 CPU tensor
  // in place with compressor c, run like the collectives (hooks.cpp: the DDP comm hooks).
  c10::intrusive_ptr<c10d::Work> allreduce_compressed(at::Tensor &t,
                                                      std::shared_ptr<struct tuttiCompressor> c);

  // Used by WorkTutti and the collectives.
  std::chrono::milliseconds timeout() const { return timeout_; }
  void abort_after_timeout(const char *op);
  [[noreturn]] void fail(const char *op, ncclResult_t res);  // throws the error of a tutti call
  ncclComm_t comm() const { return comm_; }
  std::string who() const;  // "tutti: rank R of N (host)"

 private:
  using Job = std::function<void()>;
  // Runs job on the calling thread when it moves at most inline_max_bytes_ (kNeverInline: a
  // point-to-point call) and the group is idle; queues it for the worker otherwise.
  static constexpr size_t kNeverInline = SIZE_MAX;
  c10::intrusive_ptr<c10d::Work> enqueue(c10::intrusive_ptr<WorkTutti> work, size_t bytes, Job job);
  std::exception_ptr run_job(const Job &job, std::exception_ptr broken);
  void worker_loop();
  void rendezvous(const c10::intrusive_ptr<c10d::Store> &store);

  ncclComm_t comm_ = nullptr;
  std::chrono::milliseconds timeout_;
  std::string host_;

  size_t inline_max_bytes_;

  std::mutex mutex_;  // guards queue_, running_, stop_, broken_
  std::condition_variable cv_;
  std::deque<std::pair<c10::intrusive_ptr<WorkTutti>, Job>> queue_;
  bool running_ = false;  // a job runs (on the worker or inline); the next one waits for it
  bool stop_ = false;
  std::exception_ptr broken_;  // first failure; later jobs fail with it
  std::thread worker_;
};

// The creator torch.distributed calls for init_process_group and every new_group.
c10::intrusive_ptr<c10d::ProcessGroup> create_process_group(
    const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
    std::chrono::milliseconds timeout);

}  // namespace tutti_torch
