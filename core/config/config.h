// Config: one immutable snapshot of every registered knob's value (core/config/knob.h,
// core/config/knob_registry.h), with where each value came from.
//
// A communicator builds its snapshot once, at creation (core/comm/communicator_create.cc):
// defaults, then the environment (a COLLIE_* variable if set and non-empty, else its
// NCCL_* alias, for knobs that have one), then the overrides given in code
// (Options::config and the typed Options fields). It is validated then, once: a value
// the knob does not accept refuses the start, naming the knob, the value and what is
// accepted (never fail open). Creation then parses every table into its component's
// typed struct (core/config/knob_reader.h: the one way to read a value by name), core's
// into EngineConfig and the transport context, each transport's from
// TransportContext::config when it is created, so two communicators of one process can
// run with different settings, and nothing reads the environment after creation.
//
// Process-wide knobs (Knob::processWide: the log filter, read before any communicator
// exists; the launcher's variables) are parsed from Config::fromEnvironment() by the code
// that needs them; overrides cannot set them.
//
// An NCCL_* alias whose value collie does not accept (NCCL_DEBUG=VERSION,
// NCCL_ALGO=^nvls) was meant for NCCL: it is not an error; the knob keeps its default and
// validation logs a warning once per process. The readers never return a value outside
// the knob's range: an unvalidated bad value (fromEnvironment() of a process that will
// refuse to start) reads as the default, and KnobReader reports it.
//
// Thread safety: a Config is immutable; copies share one snapshot and may be read from
// any thread. Only validate() and withOverrides() log (the alias warnings).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collie/status.h"
#include "core/config/knob.h"
#include "core/config/knob_registry.h"

namespace collie {

enum class KnobSource { kDefault, kEnvironment, kAlias, kOption };

// Overrides given in code: knob name -> value as its variable would hold it.
using KnobOverrides = std::map<std::string, std::string>;

class Config {
 public:
  struct Entry {
    const Knob* knob = nullptr;
    std::string value;  // the text as given; "" for the default
    KnobSource source = KnobSource::kDefault;
    bool accepted = true;      // false: an environment value the knob refuses
    std::string refusedAlias;  // an alias value collie does not accept (then ignored)
  };

  // Every registered knob at its default (what a component made outside a communicator,
  // or by a test that sets nothing, sees).
  Config();

  // The process environment over the defaults. Never fails: validate() names a refused
  // value, which the typed readers read as the default meanwhile.
  static Config fromEnvironment();
  // As fromEnvironment(), as if the environment held exactly `variables` (tests, tools).
  static Config fromVariables(const std::map<std::string, std::string>& variables);

  // This snapshot with `overrides` on top (source kOption; an empty value puts the knob
  // back to its default, as if nothing had set it), then validated. InvalidArgument
  // naming the first unknown name, process-wide knob or refused value; a refused
  // environment value of this snapshot fails too.
  Result<Config> withOverrides(const KnobOverrides& overrides) const;
  // OK, or the first refused value, as checkKnobValue's error. Warns once per process
  // about refused NCCL_* alias values.
  Status validate() const;
  // Where `name`'s value came from: "default", "env", the alias's name, or "option".
  std::string sourceName(std::string_view name) const;
  // The value `collie info` shows: secrets are hidden.
  std::string display(std::string_view name) const;
  // `entry`'s value as what it means, for comparing ranks' values: integers in bytes and
  // durations in microseconds ("256K" and "262144" compare equal), text as it reads.
  std::string comparable(const Entry& entry) const;

  // Every knob, in registry order.
  const std::vector<Entry>& entries() const;
  // The entry of `name`, or null when no table declared it when this snapshot was taken.
  const Entry* find(std::string_view name) const;

 private:
  // Reading a value by name is for the components' typed parses only, through
  // KnobReader (core/config/knob_reader.h), which turns an unknown name into a failure.
  friend class KnobReader;

  explicit Config(std::shared_ptr<const std::vector<Entry>> entries);
  const Entry* entry(std::string_view name) const;
  // OK, or the refusal of `name`'s value (for a process-wide knob read from an
  // unvalidated fromEnvironment(), where a refused value must not pass as the default).
  Status check(std::string_view name) const;
  // The knob's value: as given when accepted, else its default. An unregistered name
  // logs a warning and reads as "" (0); KnobReader never asks for one.
  std::string text(std::string_view name) const;
  int64_t integer(std::string_view name) const;
  std::chrono::microseconds duration(std::string_view name) const;
  KnobSource source(std::string_view name) const;
  bool isSet(std::string_view name) const { return source(name) != KnobSource::kDefault; }
  std::shared_ptr<const std::vector<Entry>> entries_;
};

}  // namespace collie
