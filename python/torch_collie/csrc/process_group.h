// CollieProcessGroup: the torch ProcessGroup that init_process_group("collie") and
// new_group(backend="collie") get from torch_collie's creator.
//
// torch's own ProcessGroup names every plugin backend "custom" (getBackendName maps
// its backend type to a fixed list), and DistributedDataParallel logs that name. This
// subclass is torch's ProcessGroup with the group's backend registered for CPU, as
// torch registers a plugin's Backend, but it answers "collie". Everything else
// (dispatch of collectives to the backend, group names, hooks) is torch's.
//
// NoGilHolder is its Python holder: dropping the last reference releases the GIL first,
// since destroying the backend waits for calls in flight, whose completions (DDP's
// future callbacks) may need the GIL (torch holds its process groups the same way).
//
// Thread safety: as c10d::ProcessGroup.
#pragma once

#include <pybind11/pybind11.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace torch_collie {

class CollieProcessGroup : public c10d::ProcessGroup {
 public:
  CollieProcessGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     const c10::intrusive_ptr<c10d::Backend>& backend);

  const std::string getBackendName() const override { return "collie"; }
};

template <typename T>
class NoGilHolder {
 public:
  NoGilHolder() = default;
  explicit NoGilHolder(T* ptr) : ptr_(c10::intrusive_ptr<T>::unsafe_reclaim_from_nonowning(ptr)) {}
  explicit NoGilHolder(c10::intrusive_ptr<T> ptr) : ptr_(std::move(ptr)) {}
  NoGilHolder(const NoGilHolder&) = default;
  NoGilHolder(NoGilHolder&&) noexcept = default;
  NoGilHolder& operator=(const NoGilHolder&) = default;
  NoGilHolder& operator=(NoGilHolder&&) noexcept = default;
  ~NoGilHolder() {
    if (ptr_ && PyGILState_Check()) {
      pybind11::gil_scoped_release nogil;
      ptr_.reset();
    }
  }
  T* get() const { return ptr_.get(); }

 private:
  c10::intrusive_ptr<T> ptr_;  // the only member: layout of an intrusive_ptr, as torch's holders
};

}  // namespace torch_collie

PYBIND11_DECLARE_HOLDER_TYPE(T, torch_collie::NoGilHolder<T>, true);
