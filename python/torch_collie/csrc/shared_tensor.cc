#include "shared_tensor.h"

#include <c10/core/Storage.h>
#include <c10/util/Exception.h>

#include "collie/shared_memory.h"

namespace torch_collie {

namespace {
// The storage's deleter; its address also marks storages made here.
void freeSharedStorage(void* ptr) { (void)collie::freeShared(ptr); }
}  // namespace

at::Tensor emptyShared(const std::vector<int64_t>& sizes, at::ScalarType type) {
  const auto options = at::TensorOptions().dtype(type).device(at::kCPU);
  int64_t numel = 1;
  for (int64_t s : sizes) {
    TORCH_CHECK(s >= 0, "torch_collie.empty_shared: negative size ", s);
    numel *= s;
  }
  if (numel == 0) return at::empty(sizes, options);
  const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(type);
  auto made = collie::allocShared(bytes);
  TORCH_CHECK(made.isOk(), "torch_collie.empty_shared: cannot allocate ", bytes,
              " bytes of shared memory: ", made.status().toString());
  c10::DataPtr data(*made, *made, &freeSharedStorage, c10::Device(c10::kCPU));
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, std::move(data),
                       /*allocator=*/nullptr, /*resizable=*/false);
  return at::empty({0}, options).set_(storage, 0, sizes);
}

bool isShared(const at::Tensor& t) {
  return t.has_storage() && t.storage().data_ptr().get_deleter() == &freeSharedStorage;
}

}  // namespace torch_collie
