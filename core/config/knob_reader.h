// KnobReader: how a component's typed parse reads a configuration snapshot by name.
//
// Every component turns its knob table into a typed struct once, in one function next
// to the table (`ShmKnobs::parse` in transports/shm/shm_knobs.cc, `EngineKnobs::parse`
// in core/engine/engine_knobs.cc, ...). That function is the only code that names a
// knob as a string (scripts/check_knob_reads.py enforces it); everything else reads
// the struct's fields. The parse reads its own table's knobs through a KnobReader:
//
//   KnobReader read(config);
//   ShmKnobs knobs;
//   knobs.spin = read.duration("COLLIE_SHM_SPIN");
//   return read.finish(knobs);
//
// A name no registered table declares (a misspelling, or a table that was never
// registered) makes finish() fail naming it, so the communicator that parses it refuses
// to start instead of running with a silent 0; the read itself returns the empty text
// (0). A value the snapshot refused (possible only in an unvalidated
// Config::fromEnvironment(), which process-wide knobs are read from) fails finish() with
// the refusal, unless the reader was made with RefusedValue::kReadDefault (the log
// filter, which must exist before the validation that names the value); the read
// returns the knob's default either way.
//
// Thread safety: a KnobReader is used by one thread; the Config it reads is immutable.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "collie/status.h"
#include "core/config/config.h"

namespace collie {

class KnobReader {
 public:
  enum class RefusedValue { kFail, kReadDefault };

  // Keeps a copy of `config` (a Config shares its snapshot: the copy is cheap).
  explicit KnobReader(const Config& config, RefusedValue refused = RefusedValue::kFail)
      : config_(config), refused_(refused) {}

  std::string text(std::string_view name);
  int64_t integer(std::string_view name);
  std::chrono::microseconds duration(std::string_view name);
  // Set by the environment, an alias or an override (not the default).
  bool isSet(std::string_view name);

  // OK, or the first unknown name or refused value read so far.
  const Status& status() const { return status_; }
  // `parsed` when every read so far was of a declared knob with an accepted value,
  // else that first failure.
  template <typename T>
  Result<T> finish(T parsed) const {
    if (!status_.isOk()) return status_;
    return parsed;
  }

 private:
  // Records the failure of `name` (unknown or refused); true when it may be read.
  bool known(std::string_view name);

  const Config config_;
  const RefusedValue refused_;
  Status status_;
};

// Runs the typed parse of every registered table over `config`: OK, or the first failure
// with the table's component named. Communicator creation calls it, so a misspelt name
// in any component's parse fails creation, whichever components the communicator uses.
Status parseEveryKnobTable(const Config& config);

}  // namespace collie
