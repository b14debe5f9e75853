// DDP communication hooks on tutti's compressed all-reduce (tuttiAllReduceCompressed): the
// submodule tutti_torch.hooks.
//
//   import tutti_torch.hooks as hooks   (or: from tutti_torch import hooks)
//   state = hooks.CompressionState(None, "powersgd:2")   # None: the default group
//   ddp.register_comm_hook(state, hooks.powersgd_hook)
//
// A CompressionState owns one compressor per DDP bucket (keyed by the bucket's index), so each
// bucket keeps its own error-feedback residual and PowerSGD warm start, as the trainer's buckets
// do. The compressor learns the bucket's tensors (tuttiCompressorSetLayout: a tensor of shape
// (out, ...) as rows of numel / out, PyTorch's view(out, -1); PowerSGD compresses each matrix and
// sends 1-D and small tensors exactly). DDP rebuilds its buckets once, after the first step; a
// bucket whose size or tensors changed gets a fresh compressor (its residual, at most one step's
// worth, is dropped: PyTorch's PowerSGD hook avoids the same loss with start_powerSGD_iter >= 2,
// here the dense warm-up steps of the spec).
//
// The all-reduce is queued on the group's worker like every other operation of the group, so it
// is ordered with them; the hook returns that job's future, whose value is the bucket's buffer
// (averaged in place). Only fp32 CPU buckets: compression is defined on fp32.
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "process_group.hpp"
#include "tutti.h"

namespace py = pybind11;

namespace tutti_torch {

namespace {

using CompressorPtr = std::shared_ptr<struct tuttiCompressor>;

// A bucket's compressor and the shape it was made for.
struct BucketCompressor {
  CompressorPtr c;
  size_t count = 0;
  std::vector<size_t> counts, rows;
};

class CompressionState {
 public:
  CompressionState(const py::object &group, const std::string &spec, int warmup_steps)
      : spec_(spec) {
    py::object g = group;
    if (g.is_none())
      g = py::module_::import("torch.distributed")
              .attr("distributed_c10d")
              .attr("_get_default_group")();
    auto base = g.cast<c10::intrusive_ptr<c10d::ProcessGroup>>();
    pg_ = c10::dynamic_intrusive_pointer_cast<ProcessGroupTutti>(base);
    TORCH_CHECK(pg_, "tutti_torch.hooks: the process group is a \"", base->getBackendName(),
                "\" group; compressed hooks need a \"tutti\" one");
    check(tuttiCompressorParse(spec.c_str(), &cfg_), "spec");
    TORCH_CHECK(warmup_steps >= -1, "tutti_torch.hooks: warmup_steps ", warmup_steps,
                " is negative (-1: the spec's default)");
    if (warmup_steps >= 0) cfg_.warmupSteps = warmup_steps;
  }

  // The compressed average of the bucket, as a future of its buffer.
  py::object run(const py::object &bucket, tuttiCompressKind_t want, const char *hook) {
    TORCH_CHECK(want == tuttiCompressNone || cfg_.kind == want, "tutti_torch.hooks.", hook,
                ": the state was made for \"", spec_, "\"");
    at::Tensor buf = bucket.attr("buffer")().cast<at::Tensor>();
    TORCH_CHECK(buf.scalar_type() == at::kFloat && buf.is_contiguous() && buf.device().is_cpu(),
                "tutti_torch.hooks.", hook, ": the bucket must be a contiguous float32 CPU tensor");
    auto grads = bucket.attr("gradients")().cast<std::vector<at::Tensor>>();
    CompressorPtr c = compressor_for(bucket.attr("index")().cast<int64_t>(), buf, grads);
    c10::intrusive_ptr<c10d::Work> work;
    {
      py::gil_scoped_release no_gil;
      work = pg_->allreduce_compressed(buf, c);
    }
    // DDP takes the value of a Python future (a Python object): the work's future of [buffer]
    // chained, in Python, to its first element, as PyTorch's own all-reduce hook does.
    py::object fut = py::cast(std::make_shared<torch::jit::PythonFutureWrapper>(work->getFuture()));
    py::cpp_function first(
        [](py::object f) -> py::object { return f.attr("value")()[py::int_(0)]; });
    return fut.attr("then")(first);
  }

  // Bytes the compressors of this state have sent from this rank (headers included).
  uint64_t bytes_sent() const {
    uint64_t total = 0;
    for (const auto &kv : buckets_) {
      uint64_t b = 0;
      if (tuttiCompressorBytesSent(kv.second.c.get(), &b) == ncclSuccess) total += b;
    }
    return total + dropped_bytes_;
  }

  const std::string &spec() const { return spec_; }

 private:
  void check(ncclResult_t res, const char *what) const {
    TORCH_CHECK(res == ncclSuccess, "tutti_torch.hooks: ", what, " \"", spec_,
                "\": ", ncclGetLastError(nullptr));
  }

  CompressorPtr compressor_for(int64_t index, const at::Tensor &buf,
                               const std::vector<at::Tensor> &grads) {
    std::vector<size_t> counts, rows;
    for (const at::Tensor &g : grads) {
      size_t n = (size_t)g.numel();
      if (n == 0) continue;
      counts.push_back(n);
      rows.push_back(g.dim() >= 2 ? n / (size_t)g.size(0) : n);
    }
    size_t count = (size_t)buf.numel();
    BucketCompressor &b = buckets_[index];
    if (b.c && b.count == count && b.counts == counts && b.rows == rows) return b.c;
    if (b.c) {  // DDP rebuilt its buckets: this index now holds other tensors
      uint64_t sent = 0;
      if (tuttiCompressorBytesSent(b.c.get(), &sent) == ncclSuccess) dropped_bytes_ += sent;
    }
    tuttiCompressor_t raw = nullptr;
    check(tuttiCompressorCreate(&raw, &cfg_, count, ncclFloat), "cannot create a compressor for");
    b.c = CompressorPtr(raw, [](tuttiCompressor_t p) { tuttiCompressorDestroy(p); });
    size_t covered = 0;
    for (size_t n : counts) covered += n;
    if (covered == count && !counts.empty())
      check(tuttiCompressorSetLayout(b.c.get(), (int)counts.size(), counts.data(), rows.data()),
            "cannot set the bucket's layout for");
    b.count = count, b.counts = counts, b.rows = rows;
    return b.c;
  }

  c10::intrusive_ptr<ProcessGroupTutti> pg_;
  std::string spec_;
  tuttiCompressorConfig_t cfg_;
  std::map<int64_t, BucketCompressor> buckets_;
  uint64_t dropped_bytes_ = 0;  // sent by compressors replaced after a bucket rebuild
};

// DDP checks a hook's signature with inspect.signature, which reads a builtin's from a docstring
// that opens with "name(args)\n--\n\n" (__text_signature__): pybind11's own signature line is
// turned off for the hooks and this one written instead.
void def_hook(py::module_ &m, const char *name, tuttiCompressKind_t kind, const char *doc) {
  py::options options;
  options.disable_function_signatures();
  std::string text = std::string(name) + "(state, bucket)\n--\n\n" + doc;
  m.def(
      name,
      [kind, name](CompressionState &state, const py::object &bucket) {
        return state.run(bucket, kind, name);
      },
      py::arg("state"), py::arg("bucket"), text.c_str());
}

}  // namespace

// The compressed average of a contiguous fp32 CPU tensor, in place, run like the collectives.
c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::allreduce_compressed(
    at::Tensor &t, std::shared_ptr<struct tuttiCompressor> c) {
  auto work = c10::make_intrusive<WorkTutti>(this, c10d::OpType::ALLREDUCE, "allreduce_compressed",
                                             std::vector<at::Tensor>{t});
  return enqueue(work, t.nbytes(), [this, t, c] {
    ncclResult_t res = tuttiAllReduceCompressed(t.data_ptr(), t.data_ptr(), (size_t)t.numel(),
                                                ncclFloat, ncclAvg, c.get(), comm(), nullptr);
    if (res != ncclSuccess) fail("tuttiAllReduceCompressed", res);
  });
}

void define_hooks(py::module_ &parent) {
  py::module_ m = parent.def_submodule(
      "hooks", "DDP communication hooks on tutti's compressed all-reduce (docs/compression.md)");
  py::class_<CompressionState>(m, "CompressionState",
                               "One compressor per DDP bucket (error-feedback residual, PowerSGD "
                               "warm start) for a compression spec")
      .def(py::init<const py::object &, const std::string &, int>(), py::arg("process_group"),
           py::arg("spec"), py::arg("warmup_steps") = -1,
           "process_group: a \"tutti\" group or None (the default group); spec: bf16, fp16, "
           "int8, topk:F, powersgd:R (tuttiCompressorParse); warmup_steps: topk's fraction "
           "falls from all to F over them, powersgd's first ones are exact (-1: the spec's "
           "default, 0 for topk, 10 for powersgd)")
      .def("bytes_sent", &CompressionState::bytes_sent,
           "bytes this rank's compressed all-reduces have sent")
      .def_property_readonly("spec", &CompressionState::spec);
  // `import tutti_torch.hooks` finds the submodule too
  py::module_::import("sys").attr("modules")["tutti_torch.hooks"] = m;
  def_hook(m, "compress_hook", tuttiCompressNone, "the state's compressor, whatever its kind");
  def_hook(m, "bf16_hook", tuttiCompressBf16, "bf16 on the wire, fp32 sums");
  def_hook(m, "fp16_hook", tuttiCompressFp16, "fp16 on the wire (scaled first), fp32 sums");
  def_hook(m, "int8_hook", tuttiCompressInt8, "int8 per 256 elements, error feedback");
  def_hook(m, "topk_hook", tuttiCompressTopk, "largest fraction of elements, error feedback");
  def_hook(m, "powersgd_hook", tuttiCompressPowerSgd,
           "PowerSGD per matrix, error feedback, warm start");
}

}  // namespace tutti_torch
