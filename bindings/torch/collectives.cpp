// The operations of ProcessGroupTutti: argument checks in the caller's thread, then a job for
// the worker that makes the synchronous tutti calls on host memory (stream NULL).
//
// Layout conventions of c10d: list-of-tensor operations (allgather, gather, scatter,
// reduce_scatter, alltoall) go through one contiguous buffer of world x count elements, the
// layout tutti's collectives take, with copies in or out; the *_base variants hand over that
// layout directly. Non-contiguous tensors are operated on through a contiguous copy.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <numeric>

#include "hugepages.hpp"
#include "process_group.hpp"

namespace tutti_torch {

namespace {

using c10d::OpType;
using c10d::Work;
using WorkPtr = c10::intrusive_ptr<Work>;

ncclDataType_t to_nccl_type(const ProcessGroupTutti &pg, at::ScalarType t) {
  switch (t) {
    case at::kChar:
      return ncclInt8;
    case at::kByte:
      return ncclUint8;
    case at::kBool:
      return ncclUint8;  // 0/1 bytes; reductions mapped in to_nccl_op
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    case at::kHalf:
      return ncclFloat16;
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kBFloat16:
      return ncclBfloat16;
    default:
      TORCH_CHECK(false, pg.who(), ": tensor dtype ", t, " is not supported by tutti");
  }
}

// Bool tensors reduce as bytes: sum/max = logical or, product/min = logical and.
ncclRedOp_t to_nccl_op(const ProcessGroupTutti &pg, const c10d::ReduceOp &op, at::ScalarType t) {
  bool is_bool = t == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return is_bool ? ncclMax : ncclSum;
    case c10d::ReduceOp::PRODUCT:
      return is_bool ? ncclMin : ncclProd;
    case c10d::ReduceOp::MIN:
      return ncclMin;
    case c10d::ReduceOp::MAX:
      return ncclMax;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!is_bool, pg.who(), ": ReduceOp.AVG is not defined for bool tensors");
      return ncclAvg;
    default:
      TORCH_CHECK(false, pg.who(), ": reduce op ", (int)op.op_,
                  " is not supported by tutti (SUM, PRODUCT, MIN, MAX, AVG are)");
  }
}

void check_tensor(const ProcessGroupTutti &pg, const at::Tensor &t, const char *what) {
  TORCH_CHECK(t.defined(), pg.who(), ": ", what, " is undefined");
  TORCH_CHECK(t.device().is_cpu(), pg.who(), ": ", what, " is on ", t.device(),
              "; tutti's torch backend takes CPU tensors");
  TORCH_CHECK(t.layout() == at::kStrided, pg.who(), ": ", what, " is not a dense tensor");
  to_nccl_type(pg, t.scalar_type());
}

const at::Tensor &single(const ProcessGroupTutti &pg, const std::vector<at::Tensor> &ts,
                         const char *what) {
  TORCH_CHECK(ts.size() == 1, pg.who(), ": ", what, " takes exactly one tensor per process (got ",
              ts.size(), ")");
  check_tensor(pg, ts[0], what);
  return ts[0];
}

void check_list(const ProcessGroupTutti &pg, const std::vector<at::Tensor> &list,
                const at::Tensor &like, size_t n, const char *what) {
  TORCH_CHECK(list.size() == n, pg.who(), ": ", what, " needs ", n, " tensors (got ", list.size(),
              ")");
  for (const at::Tensor &t : list) {
    check_tensor(pg, t, what);
    TORCH_CHECK(t.scalar_type() == like.scalar_type() && t.numel() == like.numel(), pg.who(), ": ",
                what, ": every tensor must have the dtype and size of the input (",
                like.scalar_type(), ", ", like.numel(), " elements)");
  }
}

void check_root(const ProcessGroupTutti &pg, int64_t root, int64_t root_tensor) {
  TORCH_CHECK(root >= 0 && root < pg.getSize(), pg.who(), ": root rank ", root, " is outside [0, ",
              pg.getSize(), ")");
  TORCH_CHECK(root_tensor == 0, pg.who(), ": rootTensor must be 0 (one tensor per process)");
}

void call(ProcessGroupTutti &pg, const char *fn, ncclResult_t res) {
  if (res != ncclSuccess) pg.fail(fn, res);
}

// A contiguous tensor with the contents of t; write_back() copies results into t if it was not.
struct Dense {
  at::Tensor t, d;
  explicit Dense(const at::Tensor &x) : t(x), d(x.is_contiguous() ? x : x.contiguous()) {}
  void *ptr() const { return d.data_ptr(); }
  void write_back() {
    if (!d.is_same(t)) t.copy_(d);
  }
};

size_t list_bytes(const std::vector<at::Tensor> &list) {
  size_t n = 0;
  for (const at::Tensor &t : list) n += t.nbytes();
  return n;
}

// Copies a list into one contiguous buffer (rows of the list's element size) and back.
at::Tensor flatten(const std::vector<at::Tensor> &list) {
  std::vector<at::Tensor> flat;
  for (const at::Tensor &t : list) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

void unflatten(const at::Tensor &flat, std::vector<at::Tensor> &list) {
  int64_t off = 0;
  for (at::Tensor &t : list) {
    t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
    off += t.numel();
  }
}

// All-reduce of a contiguous tensor in place, on the tensor's own (heap) memory: tutti pipelines
// it through its FIFOs. Copying through an ncclMemAlloc buffer so that tutti could read the
// peers' copies in place was slower at every size from 256 KiB to 256 MiB (docs/torch.md).
void allreduce_dense(ProcessGroupTutti &pg, void *ptr, size_t count, ncclDataType_t type,
                     ncclRedOp_t op) {
  call(pg, "ncclAllReduce", ncclAllReduce(ptr, ptr, count, type, op, pg.comm(), nullptr));
}

}  // namespace

WorkPtr ProcessGroupTutti::allreduce(std::vector<at::Tensor> &tensors,
                                     const c10d::AllreduceOptions &opts) {
  at::Tensor t = single(*this, tensors, "allreduce");
  ncclDataType_t type = to_nccl_type(*this, t.scalar_type());
  ncclRedOp_t op = to_nccl_op(*this, opts.reduceOp, t.scalar_type());
  auto work = c10::make_intrusive<WorkTutti>(this, OpType::ALLREDUCE, "allreduce", tensors);
  size_t bytes = t.nbytes();
  return enqueue(work, bytes, [this, t, type, op] {
    Dense d(t);
    if (d.d.is_same(t)) hugepages_note_buffer(d.ptr(), d.d.nbytes());  // DDP's buckets
    allreduce_dense(*this, d.ptr(), d.d.numel(), type, op);
    d.write_back();
  });
}

WorkPtr ProcessGroupTutti::allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                               const c10d::AllreduceCoalescedOptions &opts) {
  TORCH_CHECK(!tensors.empty(), who(), ": allreduce_coalesced needs at least one tensor");
  for (const at::Tensor &t : tensors) {
    check_tensor(*this, t, "allreduce_coalesced");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(), who(),
                ": allreduce_coalesced tensors must share one dtype");
  }
  ncclDataType_t type = to_nccl_type(*this, tensors[0].scalar_type());
  ncclRedOp_t op = to_nccl_op(*this, opts.reduceOp, tensors[0].scalar_type());
  auto work = c10::make_intrusive<WorkTutti>(this, OpType::ALLREDUCE_COALESCED,
                                             "allreduce_coalesced", tensors);
  size_t bytes = list_bytes(tensors);
  return enqueue(work, bytes, [this, tensors, type, op]() mutable {
    at::Tensor flat = flatten(tensors);
    allreduce_dense(*this, flat.data_ptr(), flat.numel(), type, op);
    unflatten(flat, tensors);
  });
}

WorkPtr ProcessGroupTutti::broadcast(std::vector<at::Tensor> &tensors,
                                     const c10d::BroadcastOptions &opts) {
  at::Tensor t = single(*this, tensors, "broadcast");
  check_root(*this, opts.rootRank, opts.rootTensor);
  ncclDataType_t type = to_nccl_type(*this, t.scalar_type());
  int root = (int)opts.rootRank;
  auto work = c10::make_intrusive<WorkTutti>(this, OpType::BROADCAST, "broadcast", tensors);
  size_t bytes = t.nbytes();
  return enqueue(work, bytes, [this, t, type, root] {
    Dense d(t);
    call(*this, "ncclBroadcast",
         ncclBroadcast(d.ptr(), d.ptr(), d.d.numel(), type, root, comm(), nullptr));
    d.write_back();
  });
}

WorkPtr ProcessGroupTutti::reduce(std::vector<at::Tensor> &tensors,
                                  const c10d::ReduceOptions &opts) {
  at::Tensor t = single(*this, tensors, "reduce");
  check_root(*this, opts.rootRank, opts.rootTensor);
  ncclDataType_t type = to_nccl_type(*this, t.scalar_type());
  ncclRedOp_t op = to_nccl_op(*this, opts.reduceOp, t.scalar_type());
  int root = (int)opts.rootRank;
  auto work = c10::make_intrusive<WorkTutti>(this, OpType::REDUCE, "reduce", tensors);
  size_t bytes = t.nbytes();
  return enqueue(work, bytes, [this, t, type, op, root] {
    Dense d(t);
    call(*this, "ncclReduce",
         ncclReduce(d.ptr(), d.ptr(), d.d.numel(), type, op, root, comm(), nullptr));
    if (rank_ == root) d.write_back();
  });
}

WorkPtr ProcessGroupTutti::allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                     std::vector<at::Tensor> &inputs,
                                     const c10d::AllgatherOptions &opts) {
  at::Tensor in = single(*this, inputs, "allgather input");
  TORCH_CHECK(outputs.size() == 1, who(), ": allgather takes one output list per process");
  check_list(*this, outputs[0], in, size_, "allgather output");
  ncclDataType_t type = to_nccl_type(*this, in.scalar_type());
  auto work = c10::make_intrusive<WorkTutti>(this, OpType::ALLGATHER, "allgather", outputs[0]);
  std::vector<at::Tensor> out = outputs[0];
  size_t bytes = size_ * in.nbytes();
  return enqueue(work, bytes, [this, in, out, type]() mutable {
    Dense d(in);
    at::Tensor flat = at::empty({size_ * d.d.numel()}, in.options());
    call(*this, "ncclAllGather",
         ncclAllGather(d.ptr(), flat.data_ptr(), d.d.numel(), type, comm(), nullptr));
    unflatten(flat, out);
  });
}

WorkPtr ProcessGroupTutti::_allgather_base(at::Tensor &output, at::Tensor &input,
                                           const c10d::AllgatherOptions &opts) {
  check_tensor(*this, input, "_allgather_base input");
  check_tensor(*this, output, "_allgather_base output");
  TORCH_CHECK(
      output.scalar_type() == input.scalar_type() && output.numel() == size_ * input.numel(), who(),
      ": _allgather_base output must have world_size x the input's elements (",
      size_ * input.numel(), ") of its dtype");
  TORCH_CHECK(output.is_contiguous(), who(), ": _allgather_base output must be contiguous");
  ncclDataType_t type = to_nccl_type(*this, input.scalar_type());
  auto work = c10::make_intrusive<WorkTutti>(this, OpType::_ALLGATHER_BASE, "_allgather_base",
                                             std::vector<at::Tensor>{output});
  at::Tensor out = output;
  size_t bytes = out.nbytes();
  return enqueue(work, bytes, [this, input, out, type] {
    Dense d(input);
    call(*this, "ncclAllGather",
         ncclAllGather(d.ptr(), out.data_ptr(), d.d.numel(), type, comm(), nullptr));
  });
}

WorkPtr ProcessGroupTutti::allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                                               std::vector<at::Tensor> &inputs,
                                               const c10d::AllgatherOptions &opts) {
  TORCH_CHECK(outputs.size() == (size_t)size_, who(),
              ": allgather_coalesced needs one output list per rank (", size_, ")");
  for (auto &list : outputs) {
    TORCH_CHECK(list.size() == inputs.size(), who(),
                ": allgather_coalesced: each output list needs one tensor per input");
    for (size_t i = 0; i < inputs.size(); i++) {
      check_tensor(*this, inputs[i], "allgather_coalesced input");
      check_list(*this, {list[i]}, inputs[i], 1, "allgather_coalesced output");
    }
  }
  std::vector<at::Tensor> flat_out;
  for (auto &list : outputs) flat_out.insert(flat_out.end(), list.begin(), list.end());
  auto work = c10::make_intrusive<WorkTutti>(this, OpType::ALLGATHER_COALESCED,
                                             "allgather_coalesced", flat_out);
  size_t bytes = size_ * list_bytes(inputs);
  return enqueue(work, bytes, [this, inputs, outputs]() mutable {
    for (size_t i = 0; i < inputs.size(); i++) {
      Dense d(inputs[i]);
      at::Tensor flat = at::empty({size_ * d.d.numel()}, inputs[i].options());
      call(*this, "ncclAllGather",
           ncclAllGather(d.ptr(), flat.data_ptr(), d.d.numel(),
                         to_nccl_type(*this, inputs[i].scalar_type()), comm(), nullptr));
      for (int r = 0; r < size_; r++)
        outputs[r][i].copy_(flat.narrow(0, r * d.d.numel(), d.d.numel()).view(inputs[i].sizes()));
    }
  });
}

WorkPtr ProcessGroupTutti::gather(std::vector<std::vector<at::Tensor>> &outputs,
                                  std::vector<at::Tensor> &inputs,
                                  const c10d::GatherOptions &opts) {
  at::Tensor in = single(*this, inputs, "gather input");
  check_root(*this, opts.rootRank, 0);
  int root = (int)opts.rootRank;
  std::vector<at::Tensor> out;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1, who(), ": gather at the root takes one output list");
    check_list(*this, outputs[0], in, size_, "gather output");
    out = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), who(),
                ": gather: only the root passes output tensors");
  }
  ncclDataType_t type = to_nccl_type(*this, in.scalar_type());
  auto work = c10::make_intrusive<WorkTutti>(this, OpType::GATHER, "gather", out);
  size_t bytes = size_ * in.nbytes();
  return enqueue(work, bytes, [this, in, out, type, root]() mutable {
    Dense d(in);
    at::Tensor flat;
    if (rank_ == root) flat = at::empty({size_ * d.d.numel()}, in.options());
    call(*this, "ncclGather",
         ncclGather(d.ptr(), flat.defined() ? flat.data_ptr() : nullptr, d.d.numel(), type, root,
                    comm(), nullptr));
    if (rank_ == root) unflatten(flat, out);
  });
}

WorkPtr ProcessGroupTutti::scatter(std::vector<at::Tensor> &outputs,
                                   std::vector<std::vector<at::Tensor>> &inputs,
                                   const c10d::ScatterOptions &opts) {
  at::Tensor out = single(*this, outputs, "scatter output");
  check_root(*this, opts.rootRank, 0);
  int root = (int)opts.rootRank;
  std::vector<at::Tensor> in;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1, who(), ": scatter at the root takes one input list");
    check_list(*this, inputs[0], out, size_, "scatter input");
    in = inputs[0];
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()), who(),
                ": scatter: only the root passes input tensors");
  }
  ncclDataType_t type = to_nccl_type(*this, out.scalar_type());
  auto work = c10::make_intrusive<WorkTutti>(this, OpType::SCATTER, "scatter", outputs);
  size_t bytes = size_ * out.nbytes();
  return enqueue(work, bytes, [this, in, out, type, root] {
    Dense d(out);
    at::Tensor flat;
    if (rank_ == root) flat = flatten(in);
    call(*this, "ncclScatter",
         ncclScatter(flat.defined() ? flat.data_ptr() : nullptr, d.ptr(), d.d.numel(), type, root,
                     comm(), nullptr));
    d.write_back();
  });
}

WorkPtr ProcessGroupTutti::reduce_scatter(std::vector<at::Tensor> &outputs,
                                          std::vector<std::vector<at::Tensor>> &inputs,
                                          const c10d::ReduceScatterOptions &opts) {
  at::Tensor out = single(*this, outputs, "reduce_scatter output");
  TORCH_CHECK(inputs.size() == 1, who(), ": reduce_scatter takes one input list per process");
  check_list(*this, inputs[0], out, size_, "reduce_scatter input");
  ncclDataType_t type = to_nccl_type(*this, out.scalar_type());
  ncclRedOp_t op = to_nccl_op(*this, opts.reduceOp, out.scalar_type());
  auto work =
      c10::make_intrusive<WorkTutti>(this, OpType::REDUCE_SCATTER, "reduce_scatter", outputs);
  std::vector<at::Tensor> in = inputs[0];
  size_t bytes = size_ * out.nbytes();
  return enqueue(work, bytes, [this, in, out, type, op] {
    Dense d(out);
    at::Tensor flat = flatten(in);
    call(*this, "ncclReduceScatter",
         ncclReduceScatter(flat.data_ptr(), d.ptr(), d.d.numel(), type, op, comm(), nullptr));
    d.write_back();
  });
}

WorkPtr ProcessGroupTutti::_reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                                const c10d::ReduceScatterOptions &opts) {
  check_tensor(*this, input, "_reduce_scatter_base input");
  check_tensor(*this, output, "_reduce_scatter_base output");
  TORCH_CHECK(
      output.scalar_type() == input.scalar_type() && input.numel() == size_ * output.numel(), who(),
      ": _reduce_scatter_base input must have world_size x the output's elements (",
      size_ * output.numel(), ") of its dtype");
  ncclDataType_t type = to_nccl_type(*this, output.scalar_type());
  ncclRedOp_t op = to_nccl_op(*this, opts.reduceOp, output.scalar_type());
  auto work = c10::make_intrusive<WorkTutti>(
      this, OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", std::vector<at::Tensor>{output});
  at::Tensor out = output;
  size_t bytes = input.nbytes();
  return enqueue(work, bytes, [this, input, out, type, op] {
    Dense in(input), d(out);
    call(*this, "ncclReduceScatter",
         ncclReduceScatter(in.ptr(), d.ptr(), d.d.numel(), type, op, comm(), nullptr));
    d.write_back();
  });
}

namespace {

// Offsets (in elements) of split sizes given in rows of `row` elements; empty splits mean
// equal parts of `total` elements.
std::vector<size_t> split_counts(const ProcessGroupTutti &pg, const std::vector<int64_t> &splits,
                                 int64_t total, int64_t rows, int64_t row, const char *what) {
  int n = pg.getSize();
  std::vector<size_t> counts(n);
  if (splits.empty()) {
    TORCH_CHECK(rows % n == 0, pg.who(), ": alltoall_base: ", what, " dimension 0 (", rows,
                ") is not divisible by the world size ", n, "; pass split sizes");
    for (int r = 0; r < n; r++) counts[r] = (size_t)(total / n);
    return counts;
  }
  TORCH_CHECK((int)splits.size() == n, pg.who(), ": alltoall_base: ", what, " split sizes has ",
              splits.size(), " entries, world size is ", n);
  int64_t sum = 0;
  for (int r = 0; r < n; r++) {
    TORCH_CHECK(splits[r] >= 0, pg.who(), ": alltoall_base: negative ", what, " split size");
    sum += splits[r];
    counts[r] = (size_t)(splits[r] * row);
  }
  TORCH_CHECK(sum == rows, pg.who(), ": alltoall_base: ", what, " split sizes add up to ", sum,
              ", dimension 0 is ", rows);
  return counts;
}

// Every rank sends counts_in[p] elements to p and receives counts_out[p] from p, in one group.
void alltoallv(ProcessGroupTutti &pg, const char *in, char *out, const std::vector<size_t> &cin,
               const std::vector<size_t> &cout, ncclDataType_t type) {
  size_t es = tuttiTypeSize(type), oi = 0, oo = 0;
  call(pg, "ncclGroupStart", ncclGroupStart());
  ncclResult_t res = ncclSuccess;
  for (int p = 0; p < pg.getSize() && res == ncclSuccess; p++) {
    res = ncclSend(in + oi * es, cin[p], type, p, pg.comm(), nullptr);
    if (res == ncclSuccess) res = ncclRecv(out + oo * es, cout[p], type, p, pg.comm(), nullptr);
    oi += cin[p], oo += cout[p];
  }
  ncclResult_t end = ncclGroupEnd();
  call(pg, "alltoall", res != ncclSuccess ? res : end);
}

}  // namespace

WorkPtr ProcessGroupTutti::alltoall_base(at::Tensor &output, at::Tensor &input,
                                         std::vector<int64_t> &outputSplits,
                                         std::vector<int64_t> &inputSplits,
                                         const c10d::AllToAllOptions &opts) {
  check_tensor(*this, input, "alltoall_base input");
  check_tensor(*this, output, "alltoall_base output");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), who(),
              ": alltoall_base input and output dtypes differ");
  TORCH_CHECK(input.dim() >= 1 && output.dim() >= 1, who(),
              ": alltoall_base needs tensors of dimension >= 1");
  TORCH_CHECK(output.is_contiguous(), who(), ": alltoall_base output must be contiguous");
  int64_t in_row = input.size(0) ? input.numel() / input.size(0) : 0;
  int64_t out_row = output.size(0) ? output.numel() / output.size(0) : 0;
  auto cin = split_counts(*this, inputSplits, input.numel(), input.size(0), in_row, "input");
  auto cout = split_counts(*this, outputSplits, output.numel(), output.size(0), out_row, "output");
  ncclDataType_t type = to_nccl_type(*this, input.scalar_type());
  auto work = c10::make_intrusive<WorkTutti>(this, OpType::ALLTOALL_BASE, "alltoall_base",
                                             std::vector<at::Tensor>{output});
  at::Tensor out = output;
  size_t bytes = std::max(input.nbytes(), out.nbytes());
  return enqueue(work, bytes, [this, input, out, cin, cout, type] {
    Dense d(input);
    alltoallv(*this, (const char *)d.ptr(), (char *)out.data_ptr(), cin, cout, type);
  });
}

WorkPtr ProcessGroupTutti::alltoall(std::vector<at::Tensor> &outputs,
                                    std::vector<at::Tensor> &inputs,
                                    const c10d::AllToAllOptions &opts) {
  TORCH_CHECK(inputs.size() == (size_t)size_ && outputs.size() == (size_t)size_, who(),
              ": alltoall needs world_size input and output tensors");
  std::vector<size_t> cin, cout;
  for (int r = 0; r < size_; r++) {
    check_tensor(*this, inputs[r], "alltoall input");
    check_tensor(*this, outputs[r], "alltoall output");
    TORCH_CHECK(inputs[r].scalar_type() == inputs[0].scalar_type() &&
                    outputs[r].scalar_type() == inputs[0].scalar_type(),
                who(), ": alltoall tensors must share one dtype");
    cin.push_back(inputs[r].numel()), cout.push_back(outputs[r].numel());
  }
  ncclDataType_t type = to_nccl_type(*this, inputs[0].scalar_type());
  auto work = c10::make_intrusive<WorkTutti>(this, OpType::ALLTOALL, "alltoall", outputs);
  size_t bytes = std::max(list_bytes(inputs), list_bytes(outputs));
  return enqueue(work, bytes, [this, inputs, outputs, cin, cout, type]() mutable {
    at::Tensor in = flatten(inputs);
    at::Tensor out = at::empty({(int64_t)std::accumulate(cout.begin(), cout.end(), (size_t)0)},
                               inputs[0].options());
    alltoallv(*this, (const char *)in.data_ptr(), (char *)out.data_ptr(), cin, cout, type);
    unflatten(out, outputs);
  });
}

WorkPtr ProcessGroupTutti::send(std::vector<at::Tensor> &tensors, int dst, int tag) {
  at::Tensor t = single(*this, tensors, "send");
  TORCH_CHECK(dst >= 0 && dst < size_, who(), ": send: destination rank ", dst, " is outside [0, ",
              size_, ")");
  ncclDataType_t type = to_nccl_type(*this, t.scalar_type());
  auto work = c10::make_intrusive<WorkTutti>(this, OpType::SEND, "send", tensors);
  size_t bytes = kNeverInline;
  return enqueue(work, bytes, [this, t, dst, type] {
    Dense d(t);
    call(*this, "ncclSend", ncclSend(d.ptr(), d.d.numel(), type, dst, comm(), nullptr));
  });
}

WorkPtr ProcessGroupTutti::recv(std::vector<at::Tensor> &tensors, int src, int tag) {
  at::Tensor t = single(*this, tensors, "recv");
  TORCH_CHECK(src >= 0 && src < size_, who(), ": recv: source rank ", src, " is outside [0, ",
              size_, ")");
  ncclDataType_t type = to_nccl_type(*this, t.scalar_type());
  auto work = c10::make_intrusive<WorkTutti>(this, OpType::RECV, "recv", tensors);
  size_t bytes = kNeverInline;
  return enqueue(work, bytes, [this, t, src, type] {
    Dense d(t);
    call(*this, "ncclRecv", ncclRecv(d.ptr(), d.d.numel(), type, src, comm(), nullptr));
    d.write_back();
  });
}

// A one-byte all-reduce queued behind everything this group has queued before it.
WorkPtr ProcessGroupTutti::barrier(const c10d::BarrierOptions &opts) {
  auto work =
      c10::make_intrusive<WorkTutti>(this, OpType::BARRIER, "barrier", std::vector<at::Tensor>{});
  size_t bytes = 1;
  return enqueue(work, bytes, [this] {
    uint8_t byte = 0;
    call(*this, "ncclAllReduce",
         ncclAllReduce(&byte, &byte, 1, ncclUint8, ncclMax, comm(), nullptr));
  });
}

}  // namespace tutti_torch
