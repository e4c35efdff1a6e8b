// A rank of the emulated-device multiprocess test (run through `collie run` with
// COLLIE_DEVICE_EMULATION=1): ranks in separate processes cannot map each other's
// emulated device memory, so the communicator stages device buffers through host
// memory. Each rank all-reduces and all-gathers emulated device buffers (in place and
// not, one multi-chunk size) and checks the exact bytes. Exit 0 on success, 1 with a
// message naming the rank and the collective otherwise.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "collie/communicator.h"
#include "core/device/device_runtime.h"
#include "support/reference.h"

namespace {

using collie::DataType;
using collie::ReduceOp;

int failed(int rank, const std::string& what) {
  std::fprintf(stderr, "device_rank %d: %s\n", rank, what.c_str());
  return 1;
}

}  // namespace

int main() {
  auto created = collie::Communicator::createFromEnvironment();
  if (!created.isOk()) return failed(-1, created.status().toString());
  collie::Communicator& comm = **created;
  collie::DeviceRuntime& device = *collie::emulatedDeviceRuntime();
  const int r = comm.rank();
  const int n = comm.size();
  for (size_t count : {size_t{1}, size_t{1021}, size_t{40'000}}) {
    const size_t bytes = count * sizeof(float);
    auto in = device.allocate(bytes * n);
    auto out = device.allocate(bytes * n);
    if (!in.isOk() || !out.isOk() || !comm.isDeviceBuffer(*in)) {
      return failed(r, "emulated device memory is not device memory to the communicator");
    }
    std::vector<uint8_t> input =
        collie::testing::makeInput(DataType::kFloat32, ReduceOp::kSum, r, count);
    std::memcpy(*in, input.data(), bytes);
    auto work = comm.allReduce(*in, *in, count, DataType::kFloat32, ReduceOp::kSum);
    collie::Status status = work.isOk() ? work->wait() : work.status();
    if (!status.isOk()) return failed(r, "allReduce: " + status.toString());
    if (std::memcmp(
            *in,
            collie::testing::expectedReduction(DataType::kFloat32, ReduceOp::kSum, n, 0, count)
                .data(),
            bytes) != 0) {
      return failed(r, "allReduce count " + std::to_string(count) + ": wrong bytes");
    }
    std::memcpy(
        *in,
        collie::testing::makeInput(DataType::kFloat32, ReduceOp::kSum, 0, count, r * count).data(),
        bytes);
    work = comm.allGather(*in, *out, count, DataType::kFloat32);
    status = work.isOk() ? work->wait() : work.status();
    if (!status.isOk()) return failed(r, "allGather: " + status.toString());
    if (std::memcmp(
            *out,
            collie::testing::makeInput(DataType::kFloat32, ReduceOp::kSum, 0, count * n).data(),
            bytes * n) != 0) {
      return failed(r, "allGather count " + std::to_string(count) + ": wrong bytes");
    }
    device.free(*in);
    device.free(*out);
  }
  std::printf("device_rank %d: ok\n", r);
  return 0;
}
