// Call tracing for maintainers: records which functions one operation enters, so that
// the path of a collective through the source files can be read and counted
// (scripts/trace_allreduce.py; docs/architecture.md, "Following one all-reduce").
//
// Contract: with COLLIE_TRACE_CALLS=ON libcollie is compiled with -finstrument-functions,
// so every function of it (inlined or not, the C++ standard library excluded) calls
// this library's hooks on entry and exit. The hooks record nothing until arm(); between
// arm() and disarm() every thread of the process appends (enter or exit, function
// address) to a buffer of its own, in its own order. writeEvents() turns the addresses
// into (module path, offset in the module) pairs for addr2line and clears the buffers.
// A thread that was inside a function at arm() records that function's exit without its
// entry; readers must tolerate it.
//
// Thread safety: arm, disarm and the hooks may run on any thread at any time.
// writeEvents must not run while armed (it reads the other threads' buffers).
// Not for production builds: the hooks cost a call per function entry and exit.
#pragma once

#include <string>

namespace collie::trace {

void arm();
void disarm();
// Writes the events recorded so far as text, one per line: "<thread> <e|x> <module>
// <offset hex>", threads numbered from 0 in the order of their first event, and clears
// them. False (errno set) when the file cannot be written.
bool writeEvents(const std::string& path);

}  // namespace collie::trace
