// Argument checks, conversions and byte views shared by the backend's calls.
//
// Checks raise c10::Error (Python: RuntimeError) before anything is issued, with a
// message that starts "collie: <call> on rank <r>: " and, where pytorch's own tests
// check gloo's wording, uses those words ("invalid root rank", "requires non-empty
// tensor list", "invalid tensor type", "invalid tensor size", ...). Conversions map
// torch dtypes and reduce ops onto collie's; reductions that collie has no type for
// are rewritten (bool as uint8 with OR/AND, complex as pairs of reals, PREMUL_SUM as a
// local multiply and a SUM).
//
// Thread safety: pure functions of their arguments.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

#include "collie/communicator.h"
#include "collie/types.h"

namespace torch_collie {

// "collie: <what> on rank <rank>: "
std::string prefix(const char* what, int rank);
// Raises RuntimeError: prefix(what, rank) + message.
[[noreturn]] void invalid(const char* what, int rank, const std::string& message);

// One tensor: CPU, strided (dense) layout.
void checkCpu(const at::Tensor& t, const char* what, int rank);
// checkCpu, except that a CUDA tensor passes when `allowCuda` (the calls that take one
// check it further: CollieBackend::deviceStream).
void checkTensor(const at::Tensor& t, const char* what, int rank, bool allowCuda);
// A non-empty list of CPU dense tensors.
void checkNonEmpty(c10::ArrayRef<at::Tensor> tensors, const char* what, int rank);
// Exactly one tensor in the list (gloo: "requires a single-element tensor list").
void checkSingle(const std::vector<at::Tensor>& tensors, const char* what, int rank,
                 const char* list = "tensor list", bool allowCuda = false);
// Every tensor has `ref`'s dtype and sizes ("invalid tensor type/size at index i").
void checkTypeAndSize(c10::ArrayRef<at::Tensor> tensors, const at::Tensor& ref, const char* what,
                      int rank, bool allowCuda = false);
void checkRoot(int64_t root, int size, const char* what, int rank);
// The pairs (outputs[j], inputs[j]) of all_gather_into_tensor or reduce_scatter_tensor
// (and their coalesced forms): CPU, one dtype, and one side world_size times the other
// (the output when `outputLarger`).
void checkScaledPairs(c10::ArrayRef<at::Tensor> outputs, c10::ArrayRef<at::Tensor> inputs,
                      bool outputLarger, int size, const char* what, int rank);
void checkRootTensor(int64_t rootTensor, size_t count, const char* what, int rank);

// A reduction as collie runs it.
struct Reduction {
  collie::DataType dtype;
  collie::ReduceOp op;
  std::optional<double> premul;  // PREMUL_SUM's double factor
  at::Tensor premulTensor;       // or its one-element tensor factor
  // PREMUL_SUM (op kPreMulSum): the factor converted once to dtype, which collie's
  // engine applies to this rank's input (absent for every other op).
  collie::ReduceScalar scalar;
};
// Maps (dtype, op) for a reduction; raises for what collie cannot reduce. `t` is
// the tensor as handed to collie (complex already viewed as real: see asReal).
Reduction reduction(const at::Tensor& t, const c10d::ReduceOp& op, const char* what, int rank);
// Complex tensors as their real view (SUM, AVG, PREMUL_SUM only); others unchanged.
at::Tensor asReal(const at::Tensor& t, const c10d::ReduceOp& op, const char* what, int rank);
// A contiguous tensor holding t's values (t itself when it already is contiguous). The
// PREMUL_SUM factor is collie's to apply (Reduction::scalar), not this copy's.
at::Tensor prepared(const at::Tensor& t, const Reduction& r);
// Combines several local tensors of one rank elementwise with `op` (sum for AVG and
// PREMUL_SUM, each tensor times the factor first: reduce the result with SUM), into a
// fresh contiguous tensor.
at::Tensor combineLocal(c10::ArrayRef<at::Tensor> tensors, const c10d::ReduceOp& op,
                        const Reduction& r);

// The Work of an issued collie operation; raises DistBackendError when issuing failed.
collie::Work orFail(collie::Result<collie::Work> result, const char* what, int rank);

// A contiguous tensor with t's values: t itself when it already is contiguous.
inline at::Tensor dense(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }
// Copies `from` back into `to` after the operation unless they share storage.
std::function<void()> copyBack(const at::Tensor& to, const at::Tensor& from);
// One function running `steps` in order (empty when there are none).
std::function<void()> inOrder(std::vector<std::function<void()>> steps);
// Copies `from` into every tensor of `to` that is not `from` itself (empty when none is).
std::function<void()> copyToAll(c10::ArrayRef<at::Tensor> to, const at::Tensor& from);
// t's values as a flat uint8 tensor (a view when t is contiguous): data movement of any
// dtype, several dtypes in one buffer.
at::Tensor bytesOf(const at::Tensor& t);
// Writes `bytes` (t.nbytes() of them, as bytesOf gives) into t, whatever its strides.
void copyBytesInto(at::Tensor& t, const at::Tensor& bytes);

}  // namespace torch_collie
