// The torch_collie._C module: the backend and process group that torch_collie's
// creator (registered with torch.distributed.Backend.register_backend) returns.
#include <dlfcn.h>
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/extension.h>

#include "backend.h"
#include "process_group.h"
#include "shared_allocator.h"
#include "shared_tensor.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "collie backend for torch.distributed";
  // torch's ProcessGroup type must be known to pybind11 before ours derives from it.
  py::module_::import("torch.distributed");
  py::class_<torch_collie::CollieProcessGroup, c10d::ProcessGroup,
             torch_collie::NoGilHolder<torch_collie::CollieProcessGroup>>(m, "ProcessGroup");
  // collie's Backend as its own Python type (what create_backend returns), for what
  // torch binds only on its backends' own types: _set_default_timeout, as gloo's.
  py::class_<torch_collie::CollieBackend, c10d::Backend,
             torch_collie::NoGilHolder<torch_collie::CollieBackend>>(m, "Backend")
      .def(
          "_set_default_timeout",
          [](torch_collie::CollieBackend& self, std::chrono::milliseconds timeout) {
            self.setTimeout(timeout);
          },
          py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
          "The group's default timeout for later calls (and getBackendOptions' timeout).")
      .def(
          "_all_reduce_now",
          [](torch_collie::CollieBackend& self, at::Tensor& tensor, const c10d::ReduceOp& op) {
            self.allreduceNow(tensor, op);
          },
          py::arg("tensor"), py::arg("op"), py::call_guard<py::gil_scoped_release>(),
          "All-reduce `tensor` in place on the calling thread (torch_collie.all_reduce_).");
  m.def(
      "make_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         const c10::intrusive_ptr<c10d::Backend>& backend) {
        return torch_collie::NoGilHolder<torch_collie::CollieProcessGroup>(
            c10::make_intrusive<torch_collie::CollieProcessGroup>(store, rank, size, backend));
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("backend"),
      "torch's ProcessGroup over `backend` (for CPU), named \"collie\".");
  m.def("create_backend", &torch_collie::CollieBackend::create, py::arg("store"), py::arg("rank"),
        py::arg("size"), py::arg("timeout"),
        py::arg("config") = std::map<std::string, std::string>{},
        py::call_guard<py::gil_scoped_release>(),
        "Create the collie c10d backend for one process group (rendezvous over `store`); "
        "`config` holds the group's collie knobs (name -> value).");
  m.def(
      "collie_version", [] { return std::string(COLLIE_VERSION); },
      "The collie version libcollie and this extension were built from.");
  m.def(
      "library_path",
      [] {
        Dl_info info{};
        // Any libcollie function: where the dynamic linker found the library.
        void* symbol = reinterpret_cast<void*>(&collie::UniqueId::parse);
        return std::string(dladdr(symbol, &info) != 0 && info.dli_fname ? info.dli_fname : "");
      },
      "The file of the libcollie this process loaded.");
  m.def("empty_shared", &torch_collie::emptyShared, py::arg("sizes"), py::arg("dtype"),
        "A zero-filled CPU tensor in collie shared memory (zero-copy all-reduce on shm).");
  m.def("install_shared_allocator", &torch_collie::installSharedAllocator, py::arg("min_bytes"),
        py::arg("max_cached_bytes"),
        "Serve CPU allocations of at least min_bytes from collie's shared-memory pool.");
  m.def("uninstall_shared_allocator", &torch_collie::uninstallSharedAllocator,
        "Restore the CPU allocator that install_shared_allocator replaced.");
  m.def("shared_allocator_installed", &torch_collie::sharedAllocatorInstalled);
  m.def("is_pool_tensor", [](const at::Tensor& t) {
    return t.has_storage() && t.nbytes() > 0 &&
           torch_collie::SharedPool::instance().find(t.data_ptr(), t.nbytes()).has_value();
  });
  m.def(
      "completion_stats",
      [] {
        py::dict d;
        d["on_caller"] = torch_collie::CompletionQueue::completedOnCaller();
        d["on_thread"] = torch_collie::CompletionQueue::completedOnThread();
        d["by_waiter"] = torch_collie::CompletionQueue::completedByWaiter();
        return d;
      },
      "Calls completed on the calling thread as they were issued, on a completion thread, "
      "and by the thread that waited for them, so far.");
  m.def("shared_allocator_stats", [] {
    torch_collie::SharedPoolStats s = torch_collie::SharedPool::instance().stats();
    py::dict d;
    d["blocks_in_use"] = s.blocksInUse;
    d["bytes_in_use"] = s.bytesInUse;
    d["blocks_cached"] = s.blocksCached;
    d["bytes_cached"] = s.bytesCached;
    d["hits"] = s.hits;
    d["misses"] = s.misses;
    d["fallbacks"] = s.fallbacks;
    d["released"] = s.released;
    d["registered_allreduces"] = torch_collie::CollieBackend::registeredAllreduces();
    return d;
  });
}
