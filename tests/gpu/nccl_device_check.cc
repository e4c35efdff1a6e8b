// nccl_device_check: a program written only against NVIDIA's nccl.h and the CUDA
// runtime, linked with -lnccl and run on collie's libnccl.so.2 (LD_LIBRARY_PATH), with
// device buffers (cudaMalloc) on the caller's streams, as an NCCL user writes it. One
// rank per process, started by `collie run -n N -- nccl_device_check <id-file> [fault]`;
// rank and size come from COLLIE_RANK / COLLIE_WORLD_SIZE; every rank uses device
// rank % cudaGetDeviceCount() (all on one GPU where there is one). Checks, each result
// against exact values computed on the host, every rank the same bytes:
//   - ncclCommCuDevice is the device current at init; ncclMemAlloc gives device memory;
//   - all-reduce (float32 sum/avg/max, bfloat16, float16, int64 sum, PreMulSum with a
//     host scalar), broadcast, reduce, all-gather, reduce-scatter, all-to-all, and a
//     group of sends and receives around the ring (with one to itself), at several sizes;
//   - a call returns before its stream ran: the stream is held by a 300 ms host
//     function queued ahead of the collective (cudaLaunchHostFunc);
//   - an all-reduce captured into a CUDA graph (global capture mode, as torch's) and
//     launched 100 times with new inputs gives the new sums every time (#wrong 0);
//   - "fault": the last rank leaves after the first all-reduce; on the others the next
//     all-reduce is enqueued, ncclCommGetAsyncError turns to ncclRemoteError within the
//     timeout with nobody synchronising, and ncclCommAbort returns promptly.
// Exits 77 ("skipped: no CUDA device") where there is no device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

int rank = -1, nranks = 0;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "nccl_device_check rank %d: FAILED: %s\n", rank, what.c_str());
  std::exit(1);
}

#define NCCLCHECK(call)                                                        \
  do {                                                                         \
    ncclResult_t r_ = (call);                                                  \
    if (r_ != ncclSuccess) {                                                   \
      fail(std::string(#call) + " returned " + ncclGetErrorString(r_) + ": " + \
           ncclGetLastError(nullptr));                                         \
    }                                                                          \
  } while (0)
#define CUDACHECK(call)                                                              \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) fail(std::string(#call) + ": " + cudaGetErrorString(e_)); \
  } while (0)

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void exchangeId(const std::string& path, ncclUniqueId* id) {
  if (rank == 0) {
    NCCLCHECK(ncclGetUniqueId(id));
    const std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f || std::fwrite(id, sizeof(*id), 1, f) != 1 || std::fclose(f) != 0) fail("write id");
    if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("rename id");
    return;
  }
  const double deadline = seconds() + 60;
  while (seconds() < deadline) {
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      const size_t got = std::fread(id, sizeof(*id), 1, f);
      std::fclose(f);
      if (got == 1) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  fail("no ncclUniqueId in " + path + " after 60 s");
}

// Holds `stream` for 300 ms (a host function on it): a call that returns while it is
// held did not wait for its stream.
void CUDART_CB hold(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); }

// Element i of rank r's input: small integers, exact in every dtype and every sum here.
double inputOf(int r, size_t i) {
  return static_cast<double>((r + 1) * 3 + static_cast<int>(i % 13));
}

struct Dtype {
  ncclDataType_t nccl;
  size_t size;
  const char* name;
};
const Dtype kFloat{ncclFloat32, 4, "float32"}, kBf16{ncclBfloat16, 2, "bfloat16"},
    kHalf{ncclFloat16, 2, "float16"}, kInt64{ncclInt64, 8, "int64"};

void encode(const Dtype& t, double v, void* at) {
  if (t.nccl == ncclFloat32) {
    const float f = static_cast<float>(v);
    std::memcpy(at, &f, 4);
  } else if (t.nccl == ncclBfloat16) {
    const __nv_bfloat16 b = __float2bfloat16(static_cast<float>(v));
    std::memcpy(at, &b, 2);
  } else if (t.nccl == ncclFloat16) {
    const __half h = __float2half(static_cast<float>(v));
    std::memcpy(at, &h, 2);
  } else {
    const int64_t x = static_cast<int64_t>(v);
    std::memcpy(at, &x, 8);
  }
}

std::vector<uint8_t> encodeAll(const Dtype& t, size_t count, double (*value)(int, size_t), int r) {
  std::vector<uint8_t> bytes(count * t.size);
  for (size_t i = 0; i < count; ++i) encode(t, value(r, i), bytes.data() + i * t.size);
  return bytes;
}

// Device buffer holding `host`; the caller frees it.
void* toDevice(const std::vector<uint8_t>& host) {
  void* p = nullptr;
  CUDACHECK(cudaMalloc(&p, host.empty() ? 1 : host.size()));
  if (!host.empty()) CUDACHECK(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice));
  return p;
}
void* zeros(size_t bytes) {
  void* p = nullptr;
  CUDACHECK(cudaMalloc(&p, bytes ? bytes : 1));
  CUDACHECK(cudaMemset(p, 0, bytes ? bytes : 1));
  return p;
}
std::vector<uint8_t> fromDevice(const void* p, size_t bytes) {
  std::vector<uint8_t> host(bytes);
  if (bytes) CUDACHECK(cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost));
  return host;
}

void expectBytes(const std::string& what, const std::vector<uint8_t>& got,
                 const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) fail(what + ": wrong size");
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) fail(what + ": byte " + std::to_string(i) + " differs");
  }
}

// An all-reduce of `count` elements queued behind hold(): it must return at once, and
// its output match `expect(i)` once the stream finished.
void allReduceCase(ncclComm_t comm, cudaStream_t stream, const Dtype& t, ncclRedOp_t op,
                   size_t count, double (*expect)(size_t), const char* opName) {
  const std::string what =
      std::string("all-reduce ") + t.name + " " + opName + " count " + std::to_string(count);
  void* in = toDevice(encodeAll(t, count, inputOf, rank));
  void* out = zeros(count * t.size);
  CUDACHECK(cudaLaunchHostFunc(stream, hold, nullptr));
  const double t0 = seconds();
  NCCLCHECK(ncclAllReduce(in, out, count, t.nccl, op, comm, stream));
  const double took = seconds() - t0;
  CUDACHECK(cudaStreamSynchronize(stream));
  if (took > 0.2) fail(what + ": the call waited for its stream (" + std::to_string(took) + " s)");
  std::vector<uint8_t> want(count * t.size);
  for (size_t i = 0; i < count; ++i) encode(t, expect(i), want.data() + i * t.size);
  expectBytes(what, fromDevice(out, count * t.size), want);
  CUDACHECK(cudaFree(in));
  CUDACHECK(cudaFree(out));
}

double sumOf(size_t i) {
  double s = 0;
  for (int r = 0; r < nranks; ++r) s += inputOf(r, i);
  return s;
}
double maxOf(size_t i) { return inputOf(nranks - 1, i); }
double avgOf(size_t i) { return sumOf(i) / nranks; }
double premulOf(size_t i) { return 2 * sumOf(i); }  // every rank's factor is 2

void collectives(ncclComm_t comm, cudaStream_t stream, size_t count) {
  const size_t n = static_cast<size_t>(nranks);
  // Broadcast from the last rank, reduce to rank 0.
  {
    void* buf = toDevice(encodeAll(kFloat, count, inputOf, rank));
    NCCLCHECK(ncclBroadcast(buf, buf, count, ncclFloat32, nranks - 1, comm, stream));
    void* red = zeros(count * 4);
    void* in = toDevice(encodeAll(kFloat, count, inputOf, rank));
    NCCLCHECK(ncclReduce(in, red, count, ncclFloat32, ncclSum, 0, comm, stream));
    CUDACHECK(cudaStreamSynchronize(stream));
    expectBytes("broadcast", fromDevice(buf, count * 4),
                encodeAll(kFloat, count, inputOf, nranks - 1));
    if (rank == 0) {
      std::vector<uint8_t> want(count * 4);
      for (size_t i = 0; i < count; ++i) encode(kFloat, sumOf(i), want.data() + i * 4);
      expectBytes("reduce", fromDevice(red, count * 4), want);
    }
    for (void* p : {buf, red, in}) CUDACHECK(cudaFree(p));
  }
  // All-gather, reduce-scatter, all-to-all: block p is rank p's.
  {
    void* in = toDevice(encodeAll(kFloat, count, inputOf, rank));
    void* gathered = zeros(n * count * 4);
    NCCLCHECK(ncclAllGather(in, gathered, count, ncclFloat32, comm, stream));
    std::vector<uint8_t> wide(n * count * 4);
    for (size_t i = 0; i < n * count; ++i) encode(kFloat, inputOf(rank, i), wide.data() + i * 4);
    void* scatterIn = toDevice(wide);
    void* block = zeros(count * 4);
    NCCLCHECK(ncclReduceScatter(scatterIn, block, count, ncclFloat32, ncclSum, comm, stream));
    void* exchanged = zeros(n * count * 4);
    NCCLCHECK(ncclAlltoAll(scatterIn, exchanged, count, ncclFloat32, comm, stream));
    CUDACHECK(cudaStreamSynchronize(stream));
    std::vector<uint8_t> want(n * count * 4), wantBlock(count * 4), wantExchanged(n * count * 4);
    for (size_t p = 0; p < n; ++p) {
      for (size_t i = 0; i < count; ++i) {
        encode(kFloat, inputOf(static_cast<int>(p), i), want.data() + (p * count + i) * 4);
        encode(kFloat, inputOf(static_cast<int>(p), rank * count + i),
               wantExchanged.data() + (p * count + i) * 4);
      }
    }
    for (size_t i = 0; i < count; ++i) {
      double s = 0;
      for (int r = 0; r < nranks; ++r) s += inputOf(r, rank * count + i);
      encode(kFloat, s, wantBlock.data() + i * 4);
    }
    expectBytes("all-gather", fromDevice(gathered, n * count * 4), want);
    expectBytes("reduce-scatter", fromDevice(block, count * 4), wantBlock);
    expectBytes("all-to-all", fromDevice(exchanged, n * count * 4), wantExchanged);
    for (void* p : {in, gathered, scatterIn, block, exchanged}) CUDACHECK(cudaFree(p));
  }
  // A group of sends and receives around the ring, one to itself, behind hold().
  {
    const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    void* out = toDevice(encodeAll(kFloat, count, inputOf, rank));
    void* fromPrev = zeros(count * 4);
    void* fromSelf = zeros(count * 4);
    CUDACHECK(cudaLaunchHostFunc(stream, hold, nullptr));
    const double t0 = seconds();
    NCCLCHECK(ncclGroupStart());
    NCCLCHECK(ncclSend(out, count, ncclFloat32, next, comm, stream));
    NCCLCHECK(ncclRecv(fromPrev, count, ncclFloat32, prev, comm, stream));
    NCCLCHECK(ncclSend(out, count, ncclFloat32, rank, comm, stream));
    NCCLCHECK(ncclRecv(fromSelf, count, ncclFloat32, rank, comm, stream));
    NCCLCHECK(ncclGroupEnd());
    const double took = seconds() - t0;
    CUDACHECK(cudaStreamSynchronize(stream));
    if (took > 0.2) fail("the send/recv group waited for its stream");
    expectBytes("recv from prev", fromDevice(fromPrev, count * 4),
                encodeAll(kFloat, count, inputOf, prev));
    expectBytes("recv from self", fromDevice(fromSelf, count * 4),
                encodeAll(kFloat, count, inputOf, rank));
    for (void* p : {out, fromPrev, fromSelf}) CUDACHECK(cudaFree(p));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  const char* r = std::getenv("COLLIE_RANK");
  const char* w = std::getenv("COLLIE_WORLD_SIZE");
  if (argc < 2 || !r || !w) {
    std::fprintf(stderr, "usage: collie run -n N -- nccl_device_check <id-file> [fault]\n");
    return 2;
  }
  rank = std::atoi(r);
  nranks = std::atoi(w);
  const bool fault = argc > 2 && std::string(argv[2]) == "fault";
  const int device = rank % devices;
  CUDACHECK(cudaSetDevice(device));
  ncclUniqueId id;
  exchangeId(argv[1], &id);
  ncclComm_t comm = nullptr;
  NCCLCHECK(ncclCommInitRank(&comm, nranks, id, rank));
  int bound = -1;
  NCCLCHECK(ncclCommCuDevice(comm, &bound));
  if (bound != device) fail("ncclCommCuDevice is " + std::to_string(bound));
  cudaStream_t stream;
  CUDACHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  if (fault) {
    allReduceCase(comm, stream, kFloat, ncclSum, 1024, sumOf, "sum");
    if (rank == nranks - 1) std::_Exit(0);  // leaves without a word
    void* in = zeros(4096);
    void* out = zeros(4096);
    NCCLCHECK(ncclAllReduce(in, out, 1024, ncclFloat32, ncclSum, comm, stream));
    const double t0 = seconds();
    ncclResult_t async = ncclSuccess;
    while (async == ncclSuccess && seconds() - t0 < 120) {
      NCCLCHECK(ncclCommGetAsyncError(comm, &async));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (async != ncclRemoteError) fail(std::string("async error ") + ncclGetErrorString(async));
    const std::string text = ncclGetLastError(comm);
    if (text.find("rank " + std::to_string(nranks - 1)) == std::string::npos) {
      fail("the error does not name the rank that left: " + text);
    }
    const double a0 = seconds();
    NCCLCHECK(ncclCommAbort(comm));
    CUDACHECK(cudaStreamSynchronize(stream));
    if (seconds() - a0 > 5) fail("ncclCommAbort took " + std::to_string(seconds() - a0) + " s");
    std::printf("nccl_device_check rank %d: fault seen after %.1f s (%s), abort %.2f s\n", rank,
                seconds() - t0, text.c_str(), seconds() - a0);
    return 0;
  }

  void* memory = nullptr;
  NCCLCHECK(ncclMemAlloc(&memory, 1 << 20));
  cudaPointerAttributes attributes{};
  CUDACHECK(cudaPointerGetAttributes(&attributes, memory));
  if (attributes.type != cudaMemoryTypeDevice) fail("ncclMemAlloc did not return device memory");
  NCCLCHECK(ncclMemFree(memory));

  for (size_t count : {size_t{1}, size_t{1000}, size_t{1} << 20, (size_t{3} << 20) + 7}) {
    allReduceCase(comm, stream, kFloat, ncclSum, count, sumOf, "sum");
    allReduceCase(comm, stream, kFloat, ncclMax, count, maxOf, "max");
    allReduceCase(comm, stream, kBf16, ncclSum, count, sumOf, "sum");
    allReduceCase(comm, stream, kHalf, ncclSum, count, sumOf, "sum");
    allReduceCase(comm, stream, kInt64, ncclSum, count, sumOf, "sum");
    if (nranks == 2 || nranks == 4)
      allReduceCase(comm, stream, kFloat, ncclAvg, count, avgOf, "avg");
    ncclRedOp_t premul;
    float two = 2.0f;  // NCCL declares the scalar `void*`
    NCCLCHECK(ncclRedOpCreatePreMulSum(&premul, &two, ncclFloat32, ncclScalarHostImmediate, comm));
    allReduceCase(comm, stream, kFloat, premul, count, premulOf, "premulsum");
    NCCLCHECK(ncclRedOpDestroy(premul, comm));
    collectives(comm, stream, count);
  }

  // Graph capture (global mode, as torch captures): an all-reduce captured once and
  // launched 100 times, each with new inputs copied in on the stream first.
  {
    const size_t count = size_t{1} << 16;
    void* in = zeros(count * 4);
    void* out = zeros(count * 4);
    NCCLCHECK(ncclAllReduce(in, out, count, ncclFloat32, ncclSum, comm, stream));  // warm-up
    CUDACHECK(cudaStreamSynchronize(stream));
    CUDACHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    ncclResult_t captured = ncclAllReduce(in, out, count, ncclFloat32, ncclSum, comm, stream);
    cudaGraph_t graph = nullptr;
    CUDACHECK(cudaStreamEndCapture(stream, &graph));
    if (captured != ncclSuccess) {
      fail(std::string("all-reduce under graph capture: ") + ncclGetErrorString(captured) + ": " +
           ncclGetLastError(comm));
    }
    cudaGraphExec_t exec = nullptr;
    CUDACHECK(cudaGraphInstantiate(&exec, graph, 0));
    std::vector<float> host(count), result(count);
    int wrong = 0;
    for (int launch = 0; launch < 100; ++launch) {
      for (size_t i = 0; i < count; ++i) {
        host[i] = static_cast<float>(launch) + static_cast<float>(inputOf(rank, i));
      }
      CUDACHECK(cudaMemcpyAsync(in, host.data(), count * 4, cudaMemcpyHostToDevice, stream));
      CUDACHECK(cudaGraphLaunch(exec, stream));
      CUDACHECK(cudaMemcpyAsync(result.data(), out, count * 4, cudaMemcpyDeviceToHost, stream));
      CUDACHECK(cudaStreamSynchronize(stream));
      for (size_t i = 0; i < count; ++i) {
        if (result[i] != static_cast<float>(nranks * launch + sumOf(i))) {
          ++wrong;
          break;
        }
      }
    }
    if (wrong != 0) fail("graph launches: #wrong " + std::to_string(wrong) + " of 100");
    std::printf("nccl_device_check rank %d: graph capture: 100 launches, #wrong 0\n", rank);
    CUDACHECK(cudaGraphExecDestroy(exec));
    CUDACHECK(cudaGraphDestroy(graph));
    CUDACHECK(cudaFree(in));
    CUDACHECK(cudaFree(out));
  }

  ncclResult_t async = ncclSuccess;
  NCCLCHECK(ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess) fail("async error after success");
  NCCLCHECK(ncclCommDestroy(comm));
  CUDACHECK(cudaStreamDestroy(stream));
  std::printf("nccl_device_check rank %d: ok (%d ranks, device %d)\n", rank, nranks, device);
  return 0;
}
