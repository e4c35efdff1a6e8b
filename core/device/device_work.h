// How the device path hands back a Work without depending on the engine: core/comm gives
// it a function that wraps a completion poller in the Work every caller waits on (the
// engine's WorkState), and, for the staging path, a function that runs a collective on
// the host engine.
//
// Thread safety: plain types.
#pragma once

#include <functional>
#include <optional>

#include "collie/communicator.h"
#include "core/plan/schedule.h"

namespace collie {

// Polled by whoever waits on the Work: nullopt while the device work is in flight, then
// its outcome.
using CompletionPoller = std::function<std::optional<Status>()>;
// Wraps a poller in a Work (core/comm binds it to the engine's WorkState).
using WorkFromPoller = Work (*)(CompletionPoller poller);
// Runs a collective over host memory (core/comm binds it to its engine's submit).
using HostSubmit =
    std::function<Result<Work>(const CollectiveArgs& args, const void* input, void* output)>;

}  // namespace collie
