#include "process_group.h"

namespace torch_collie {

CollieProcessGroup::CollieProcessGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int size, const c10::intrusive_ptr<c10d::Backend>& backend)
    : c10d::ProcessGroup(store, rank, size) {
  setBackend(c10::DeviceType::CPU, BackendType::CUSTOM, backend);
  setDefaultBackend(BackendType::CUSTOM);
}

}  // namespace torch_collie
