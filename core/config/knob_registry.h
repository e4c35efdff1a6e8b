// The knob tables: every component declares its own knobs (name, kind, range, default,
// meaning, must-match) in a table it registers, UCX-style; the registry holds their
// union, which `collie info` prints grouped by component and which every Config
// (core/config/config.h) snapshots.
//
// Registration: the tables of the components built into libcollie (core's, and each
// configured transport's) are registered on first use by registerBuiltinKnobs(), a
// function generated at build time from the registrars the components' CMakeLists
// append to COLLIE_KNOB_REGISTRARS, as transports are (core/transport/transport.h), so
// core never names a transport and a static link keeps every table. Code outside the
// library (the `collie` tool) adds its table with add() at the start of main, before
// it builds a Config; a Config built earlier does not know that table's knobs.
//
// Names are unique across all tables: add() refuses a table that repeats a name (or
// whose default its own check refuses) and remembers the first refusal in status().
//
// Thread safety: all methods may be called from any thread. Tables are never removed,
// so Knob pointers stay valid for the life of the process.
#pragma once

#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/knob.h"

namespace collie {

class Config;

struct KnobTable {
  std::string component;  // "shm", "engine": `collie info` groups knobs under it
  std::string about;      // one line: what the component is
  std::vector<Knob> knobs;
  // The component's typed parse of this table (`ShmKnobs::parse`, ...; its status only),
  // the one place the table's knobs are read by name (core/config/knob_reader.h). Every
  // communicator runs every table's at creation (parseEveryKnobTable), so a name a parse
  // reads that no table declares fails creation, whichever components it then uses.
  Status (*parse)(const Config& config) = nullptr;
};

class KnobRegistry {
 public:
  // The process's registry, with the built-in tables.
  static KnobRegistry& instance();

  // Adds `table`. InvalidArgument (and nothing added) when a knob's name is already
  // registered or appears twice, or a default is not accepted by its own knob.
  Status add(KnobTable table);
  // OK, or the first refusal of add() (a bug in a table; config_test checks it).
  Status status() const;

  // The tables in registration order (pointers stay valid).
  std::vector<const KnobTable*> tables() const;
  // Every knob of every table, in table order.
  std::vector<const Knob*> knobs() const;
  // The knob named `name`, or null.
  const Knob* find(std::string_view name) const;
  // The component whose table declares `knob` ("" when none does).
  std::string componentOf(const Knob& knob) const;

 private:
  mutable std::mutex mutex_;
  std::deque<KnobTable> tables_;
  Status status_;
};

// Defined by the generated file builtin_knobs.cc.
void registerBuiltinKnobs(KnobRegistry& registry);

}  // namespace collie
