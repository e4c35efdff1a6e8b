// The torch_collie._C module: the backend creator that torch_collie/__init__.py
// registers with torch.distributed.Backend.register_backend.
#include <pybind11/chrono.h>
#include <torch/extension.h>

#include "backend.h"
#include "shared_tensor.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "collie backend for torch.distributed";
  m.def("create_backend", &torch_collie::CollieBackend::create, py::arg("store"), py::arg("rank"),
        py::arg("size"), py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
        "Create the collie c10d backend for one process group (rendezvous over `store`).");
  m.def("empty_shared", &torch_collie::emptyShared, py::arg("sizes"), py::arg("dtype"),
        "A zero-filled CPU tensor in collie shared memory (zero-copy all-reduce on shm).");
}
