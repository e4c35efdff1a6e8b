// Uses the installed C++ API: a one-rank communicator all-reduces four ints.
#include <collie/communicator.h>

#include <cstdio>

int main() {
  auto id = collie::UniqueId::generate("127.0.0.1", 0);
  collie::Options options;
  options.store = collie::makeInMemoryStore();
  auto comm = collie::Communicator::create(*id, 0, 1, options);
  if (!comm.isOk()) {
    std::fprintf(stderr, "%s\n", comm.status().toString().c_str());
    return 1;
  }
  int in[4] = {1, 2, 3, 4}, out[4] = {};
  auto work = (*comm)->allReduce(in, out, 4, collie::DataType::kInt32, collie::ReduceOp::kSum);
  if (!work.isOk() || !work->wait().isOk() || out[3] != 4) return 2;
  std::printf("consumer ok\n");
  return 0;
}
