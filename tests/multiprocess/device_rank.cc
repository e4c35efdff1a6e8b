// A rank of the emulated-device multiprocess test (run through `collie run` with
// COLLIE_DEVICE_EMULATION=1): ranks in separate processes map each other's emulated
// device regions (memfd through /proc/<pid>/fd), so the device path runs step kernels
// on flags shared between processes. Usage: device_rank [staged]: with "staged" the
// ranks claim different hosts and device buffers are staged through host memory over
// tcp instead. Each rank all-reduces (in place) and all-gathers emulated device
// buffers, sizes 1, 1021 and a multi-chunk 40,000, and checks the exact bytes and
// which path ran. Exit 0 on success, 1 with a message naming the rank otherwise.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collie/communicator.h"
#include "core/device/device_runtime.h"
#include "kernels/cuda/emulation/emulated_runtime.h"
#include "support/reference.h"

namespace {

using collie::DataType;
using collie::ReduceOp;

int failed(int rank, const std::string& what) {
  std::fprintf(stderr, "device_rank %d: %s\n", rank, what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const bool staged = argc > 1 && std::string(argv[1]) == "staged";
  collie::Options options;
  if (staged) {
    options.transport = "tcp";
    options.hostId = "emulated-host-" + std::string(std::getenv("COLLIE_RANK"));
  }
  auto created = collie::Communicator::createFromEnvironment(options);
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
  const uint64_t launches = collie::emulatedKernelLaunches();
  if (staged ? launches != 0 : launches == 0) {
    return failed(r, std::string(staged ? "staged run launched kernels"
                                        : "no kernel launched: "
                                          "the device path did "
                                          "not run"));
  }
  std::printf("device_rank %d: ok (%llu kernel launches)\n", r,
              static_cast<unsigned long long>(launches));
  return 0;
}
