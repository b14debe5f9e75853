// The Python module tutti_torch: importing it registers the torch.distributed backend "tutti".
//
//   import tutti_torch                      # registers the backend
//   torch.distributed.init_process_group("tutti", ...)
//   ddp.register_comm_hook(tutti_torch.hooks.CompressionState(None, "int8"),
//                          tutti_torch.hooks.int8_hook)       # compressed gradients (hooks.cpp)
//
// The creator torch.distributed calls takes (store, rank, world_size, timeout) and is called
// again, with a prefixed store, for every new_group; each call makes a new communicator.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "hugepages.hpp"
#include "process_group.hpp"

namespace py = pybind11;

namespace tutti_torch {
void define_hooks(py::module_ &parent);  // hooks.cpp: the submodule tutti_torch.hooks
}  // namespace tutti_torch

namespace {

c10::intrusive_ptr<c10d::ProcessGroup> tutti_create(const c10::intrusive_ptr<c10d::Store> &store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout) {
  py::gil_scoped_release no_gil;  // the rendezvous waits on the store and on the peers
  return tutti_torch::create_process_group(store, rank, size, timeout);
}

}  // namespace

PYBIND11_MODULE(tutti_torch, m) {
  m.doc() = "tutti's torch.distributed backend: import to register backend \"tutti\"";
  m.def("create_process_group", &tutti_create, py::arg("store"), py::arg("rank"),
        py::arg("world_size"), py::arg("timeout"),
        "Creates a tutti process group (the creator registered for backend \"tutti\").");
  m.def("version", [] { return std::string(tuttiVersionString()); });
  m.def(
      "_hugepage_stats",
      [] {
        tutti_torch::HugePageStats s = tutti_torch::hugepages_stats();
        return py::dict(py::arg("collapsed") = s.collapsed, py::arg("failed") = s.failed);
      },
      "2 MiB ranges of all-reduced tensors collapsed into huge pages, and refused (hugepages.cpp)");
  tutti_torch::define_hooks(m);
  py::object backend = py::module_::import("torch.distributed").attr("Backend");
  if (!py::hasattr(backend, "TUTTI"))
    backend.attr("register_backend")("tutti", m.attr("create_process_group"));
}
