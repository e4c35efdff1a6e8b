// The knob tables, the Config snapshot and its validation. Most cases build snapshots
// from explicit variables (Config::fromVariables); the cases marked "environment" test
// the reading of the process environment itself and are the only ones that setenv.
#include "core/config/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <set>
#include <string>
#include <vector>

#include "collie/communicator.h"
#include "collie/store.h"
#include "core/comm/comm_knobs.h"
#include "core/comm/options_config.h"
#include "core/config/knob_reader.h"
#include "core/log/log_knobs.h"
#include "transports/shm/shm_knobs.h"

namespace collie {
namespace {

std::vector<const Knob*> allKnobs() { return KnobRegistry::instance().knobs(); }

// A snapshot's values as Config holds them (a refused value reads as the default),
// through the reader the components' typed parses use.
std::string textOf(const Config& config, const char* name) {
  return KnobReader(config, KnobReader::RefusedValue::kReadDefault).text(name);
}
int64_t integerOf(const Config& config, const char* name) {
  return KnobReader(config, KnobReader::RefusedValue::kReadDefault).integer(name);
}
std::chrono::microseconds durationOf(const Config& config, const char* name) {
  return KnobReader(config, KnobReader::RefusedValue::kReadDefault).duration(name);
}
bool isSetOf(const Config& config, const char* name) {
  return KnobReader(config, KnobReader::RefusedValue::kReadDefault).isSet(name);
}

TEST(KnobTables, EveryKnobIsDeclaredOnceWithAMeaningAndAnAcceptedDefault) {
  EXPECT_TRUE(KnobRegistry::instance().status().isOk())
      << KnobRegistry::instance().status().toString();
  std::set<std::string> names;
  for (const Knob* knob : allKnobs()) {
    EXPECT_TRUE(std::string(knob->name).rfind("COLLIE_", 0) == 0) << knob->name;
    EXPECT_TRUE(names.insert(knob->name).second) << knob->name << " declared twice";
    EXPECT_NE(std::string(knob->meaning), "") << knob->name;
    EXPECT_TRUE(checkKnobValue(*knob, knob->defaultValue).isOk())
        << knob->name << ": " << checkKnobValue(*knob, knob->defaultValue).toString();
    EXPECT_NE(knobRange(*knob), "") << knob->name;
    EXPECT_NE(KnobRegistry::instance().componentOf(*knob), "") << knob->name;
  }
  EXPECT_GT(names.size(), 40u);
}

// Core declares its own knobs; each transport's table comes with the transport.
TEST(KnobTables, ComponentsOwnTheirKnobs) {
  auto componentOf = [](const char* name) {
    const Knob* knob = KnobRegistry::instance().find(name);
    return knob == nullptr ? std::string("(none)") : KnobRegistry::instance().componentOf(*knob);
  };
  EXPECT_EQ(componentOf("COLLIE_TIMEOUT"), "communicator");
  EXPECT_EQ(componentOf("COLLIE_DEBUG"), "log");
  EXPECT_EQ(componentOf("COLLIE_BUSY_POLL"), "engine");
  EXPECT_EQ(componentOf("COLLIE_TUNE_CACHE"), "tune");
  EXPECT_EQ(componentOf("COLLIE_KEEP_GOING"), "launch");
  EXPECT_EQ(componentOf("COLLIE_TMPDIR"), "launch");
  EXPECT_EQ(componentOf("COLLIE_BUFFSIZE"), "shm");
  EXPECT_EQ(componentOf("COLLIE_NSOCKS_PERPEER"), "tcp");
}

TEST(KnobTables, ARepeatedNameOrARefusedDefaultIsRefused) {
  KnobRegistry registry;
  ASSERT_TRUE(registry.add({"a", "", {knobs::text("COLLIE_X", "", "x")}}).isOk());
  Status twice = registry.add({"b", "", {knobs::text("COLLIE_X", "", "x again")}});
  EXPECT_EQ(twice.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(twice.message().find("COLLIE_X is already declared"), std::string::npos)
      << twice.toString();
  Status bad = registry.add({"c", "", {knobs::integer("COLLIE_Y", "lots", 0, 10, "y")}});
  EXPECT_NE(bad.message().find("the default of COLLIE_Y"), std::string::npos) << bad.toString();
  EXPECT_EQ(registry.knobs().size(), 1u);
  EXPECT_EQ(registry.status().message(), twice.message());
}

TEST(Config, DefaultsThenEnvironmentThenNcclAlias) {
  Config none = Config::fromVariables({});
  EXPECT_EQ(integerOf(none, "COLLIE_BUFFSIZE"), 4 << 20);
  EXPECT_EQ(none.sourceName("COLLIE_BUFFSIZE"), "default");
  EXPECT_FALSE(isSetOf(none, "COLLIE_BUFFSIZE"));
  Config alias = Config::fromVariables({{"NCCL_BUFFSIZE", "1M"}});
  EXPECT_EQ(integerOf(alias, "COLLIE_BUFFSIZE"), 1 << 20);
  EXPECT_EQ(alias.sourceName("COLLIE_BUFFSIZE"), "NCCL_BUFFSIZE");
  Config both = Config::fromVariables({{"NCCL_BUFFSIZE", "1M"}, {"COLLIE_BUFFSIZE", "65536"}});
  EXPECT_EQ(integerOf(both, "COLLIE_BUFFSIZE"), 65536);
  EXPECT_EQ(both.sourceName("COLLIE_BUFFSIZE"), "env");
  Config empty = Config::fromVariables({{"COLLIE_BUFFSIZE", ""}});  // empty is unset
  EXPECT_EQ(empty.sourceName("COLLIE_BUFFSIZE"), "default");
  Config bad = Config::fromVariables({{"COLLIE_BUFFSIZE", "lots"}});
  EXPECT_EQ(integerOf(bad, "COLLIE_BUFFSIZE"), 4 << 20);  // malformed: the default
  EXPECT_EQ(bad.validate().code(), StatusCode::kInvalidArgument);
}

// environment: the process environment is read when the snapshot is taken, and only then.
TEST(Config, EnvironmentIsReadOnceWhenTheSnapshotIsTaken) {
  setenv("COLLIE_SHM_SPIN", "7us", 1);
  const Config taken = Config::fromEnvironment();
  setenv("COLLIE_SHM_SPIN", "9us", 1);
  EXPECT_EQ(durationOf(taken, "COLLIE_SHM_SPIN").count(), 7);
  EXPECT_EQ(taken.sourceName("COLLIE_SHM_SPIN"), "env");
  EXPECT_EQ(durationOf(Config::fromEnvironment(), "COLLIE_SHM_SPIN").count(), 9);
  unsetenv("COLLIE_SHM_SPIN");
  EXPECT_EQ(durationOf(Config::fromEnvironment(), "COLLIE_SHM_SPIN").count(), 50);
}

TEST(Config, ValuesOutsideAKnobsRangeReadAsTheDefault) {
  EXPECT_EQ(durationOf(Config::fromVariables({{"COLLIE_STORE_HANDSHAKE_TIMEOUT", "2s"}}),
                       "COLLIE_STORE_HANDSHAKE_TIMEOUT")
                .count(),
            2'000'000);
  for (const char* value : {"1ms", "1h"}) {  // below 100ms, above 120s
    EXPECT_EQ(durationOf(Config::fromVariables({{"COLLIE_STORE_HANDSHAKE_TIMEOUT", value}}),
                         "COLLIE_STORE_HANDSHAKE_TIMEOUT")
                  .count(),
              5'000'000)
        << value;
  }
  EXPECT_EQ(integerOf(Config::fromVariables({{"COLLIE_STORE_MAX_PENDING_PER_HOST", "0"}}),
                      "COLLIE_STORE_MAX_PENDING_PER_HOST"),
            32);
}

TEST(Config, ParsesSizesAndDurations) {
  EXPECT_EQ(*parseSize("512K"), 512 * 1024);
  EXPECT_EQ(*parseSize("3G"), int64_t{3} << 30);
  EXPECT_FALSE(parseSize("-1").isOk());
  EXPECT_FALSE(parseSize("12Q").isOk());
  EXPECT_EQ(parseDuration("50us")->count(), 50);
  EXPECT_EQ(parseDuration("2s")->count(), 2'000'000);
  EXPECT_EQ(parseDuration("30")->count(), 30'000'000);
  EXPECT_EQ(parseDuration("1.5ms")->count(), 1500);
  EXPECT_FALSE(parseDuration("soon").isOk());
}

// Values a knob of each kind must refuse: out of range, overflowing, non-numeric, unknown.
std::vector<std::string> badValues(const Knob& knob) {
  switch (knob.kind) {
    case KnobKind::kInteger:
    case KnobKind::kAutoOrInteger: {
      std::vector<std::string> bad = {std::to_string(knob.max + 1), "99999999999999999999999",
                                      "abc", "12Q", "-1"};
      if (knob.min > 0) bad.push_back(std::to_string(knob.min - 1));
      return bad;
    }
    case KnobKind::kDecimal:
      return {"0", std::to_string(knob.max * 2), "abc", "1e400", "-3"};
    case KnobKind::kDuration:
      return {std::to_string(knob.max + 1) + "us", "9999999999", "1e30", "soon", "-1", "5parsecs"};
    case KnobKind::kChoice:
      return {"LOUD", "0x1"};
    case KnobKind::kSubsystems:
      return {"LOUD", "INIT,NOPE", "^"};
    case KnobKind::kOutputPath:
      return {"/nonexistent-collie-dir/out.json", "/tmp/"};
    case KnobKind::kSecret:
      return {"nothex", "0x0123456789abcdef0123456789abcdef", std::string(31, 'a')};
    case KnobKind::kText:
    case KnobKind::kHiddenText:
      return {};
  }
  return {};
}

// fault: every knob of every table set out of range, overflowing, non-numeric or unknown,
// in the environment or as an override in code | InvalidArgument naming the knob, the
// value and the accepted range; readers return the default | config_test
TEST(Config, EveryKnobRefusesBadValuesNamingKnobValueAndRange) {
  int checked = 0;
  for (const Knob* knob : allKnobs()) {
    const bool secret = knob->kind == KnobKind::kSecret;
    for (const std::string& value : badValues(*knob)) {
      Status st = Config::fromVariables({{knob->name, value}}).validate();
      ++checked;
      ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << knob->name << "='" << value << "'";
      EXPECT_NE(st.message().find(knob->name), std::string::npos) << st.toString();
      EXPECT_NE(st.message().find("accepted: " + knobRange(*knob)), std::string::npos)
          << st.toString();
      if (secret) {
        EXPECT_EQ(st.message().find(value), std::string::npos)
            << "secret echoed: " << st.toString();
      } else {
        EXPECT_NE(st.message().find("'" + value + "'"), std::string::npos) << st.toString();
      }
      if (!knob->processWide) {
        Result<Config> overridden = Config().withOverrides({{knob->name, value}});
        ASSERT_FALSE(overridden.isOk()) << knob->name << "='" << value << "'";
        EXPECT_NE(overridden.status().message().find(knob->name), std::string::npos)
            << overridden.status().toString();
      }
    }
  }
  EXPECT_GT(checked, 100);
}

// fault: a knob given a 128 KiB value (COLLIE_TIMEOUT, COLLIE_DEBUG, every knob that refuses
// it) | InvalidArgument naming the knob with the value's first 64 characters and its length,
// under 1 KB (before: the whole value echoed on every rank) | config_test
TEST(Config, OverlongValuesAreEchoedShortened) {
  const std::string huge = "1" + std::string(128 * 1024 - 1, 'x');
  int refused = 0;
  for (const Knob* knob : allKnobs()) {
    Status st = Config::fromVariables({{knob->name, huge}}).validate();
    if (st.isOk()) continue;  // free text accepts it
    ++refused;
    EXPECT_LT(st.message().size(), 1024u) << knob->name << ": " << st.message().size() << " bytes";
    EXPECT_NE(st.message().find(knob->name), std::string::npos) << st.message().substr(0, 300);
    if (!isSecretKnob(*knob)) {
      EXPECT_NE(st.message().find("'" + huge.substr(0, kEchoedValueChars) +
                                  "...' (131072 "
                                  "characters)"),
                std::string::npos)
          << st.message().substr(0, 300);
    }
  }
  EXPECT_GT(refused, 30);  // the knobs that take no free text
  for (const char* name : {"COLLIE_TIMEOUT", "COLLIE_DEBUG"}) {
    Status st = Config::fromVariables({{name, huge}}).validate();
    ASSERT_FALSE(st.isOk()) << name;
    EXPECT_LT(st.message().size(), 1024u) << name;
  }
}

TEST(Config, ReadersNeverOverflow) {
  Config config = Config::fromVariables({{"COLLIE_TIMEOUT", "9999999999"}});
  Status st = config.validate();
  EXPECT_NE(st.message().find("COLLIE_TIMEOUT='9999999999'"), std::string::npos) << st.toString();
  EXPECT_EQ(durationOf(config, "COLLIE_TIMEOUT"), std::chrono::seconds(300));
  config = Config::fromVariables({{"COLLIE_TRACE_DEPTH", "1000000000000"}});
  EXPECT_FALSE(config.validate().isOk());
  EXPECT_EQ(integerOf(config, "COLLIE_TRACE_DEPTH"), 64);
}

TEST(Config, NcclAliasValuesCollieDoesNotKnowFallBackToTheDefault) {
  Config config = Config::fromVariables({{"NCCL_DEBUG", "VERSION"}, {"NCCL_ALGO", "^nvls"}});
  EXPECT_TRUE(config.validate().isOk());  // meant for NCCL: a warning, not an error
  EXPECT_EQ(textOf(config, "COLLIE_DEBUG"), "WARN");
  EXPECT_EQ(config.sourceName("COLLIE_DEBUG"), "default");
  EXPECT_EQ(textOf(config, "COLLIE_ALGO"), "auto");
  Config tree = Config::fromVariables({{"NCCL_ALGO", "Tree"}});
  EXPECT_EQ(textOf(tree, "COLLIE_ALGO"), "Tree");
  EXPECT_EQ(tree.sourceName("COLLIE_ALGO"), "NCCL_ALGO");
}

TEST(Config, SecretsAreNeverDisplayed) {
  Config config = Config::fromVariables(
      {{"COLLIE_JOB_SECRET", "0123456789abcdef0123456789abcdef"},
       {"COLLIE_UNIQUE_ID", "collie1:127.0.0.1:1234:0123456789abcdef0123456789abcdef"}});
  for (const char* name : {"COLLIE_JOB_SECRET", "COLLIE_UNIQUE_ID"}) {
    EXPECT_EQ(config.display(name), "(set, hidden)") << name;
  }
  EXPECT_EQ(Config().display("COLLIE_JOB_SECRET"), "");
}

// --- Overrides given in code --------------------------------------------------------

TEST(ConfigOverrides, BeatTheEnvironmentAndAnEmptyOneRestoresTheDefault) {
  Config env = Config::fromVariables({{"COLLIE_SHM_CMA_MAX", "1M"}, {"COLLIE_NCHANNELS", "4"}});
  Result<Config> over = env.withOverrides({{"COLLIE_SHM_CMA_MAX", "0"}, {"COLLIE_NCHANNELS", ""}});
  ASSERT_TRUE(over.isOk()) << over.status().toString();
  EXPECT_EQ(integerOf(*over, "COLLIE_SHM_CMA_MAX"), 0);
  EXPECT_EQ(over->sourceName("COLLIE_SHM_CMA_MAX"), "option");
  EXPECT_EQ(integerOf(*over, "COLLIE_NCHANNELS"), 2);
  EXPECT_FALSE(isSetOf(*over, "COLLIE_NCHANNELS"));
  // The snapshot overridden is unchanged.
  EXPECT_EQ(integerOf(env, "COLLIE_SHM_CMA_MAX"), 1 << 20);
}

TEST(ConfigOverrides, UnknownNamesProcessWideKnobsAndBadEnvironmentAreErrors) {
  Result<Config> unknown = Config().withOverrides({{"COLLIE_SHM_CMA_MAXX", "0"}});
  ASSERT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("unknown knob 'COLLIE_SHM_CMA_MAXX'"),
            std::string::npos)
      << unknown.status().toString();
  Result<Config> alias = Config().withOverrides({{"NCCL_BUFFSIZE", "1M"}});
  ASSERT_FALSE(alias.isOk());
  EXPECT_NE(alias.status().message().find("use COLLIE_BUFFSIZE"), std::string::npos)
      << alias.status().toString();
  Result<Config> wide = Config().withOverrides({{"COLLIE_DEBUG", "INFO"}});
  ASSERT_FALSE(wide.isOk());
  EXPECT_NE(wide.status().message().find("COLLIE_DEBUG is process-wide"), std::string::npos)
      << wide.status().toString();
  // A refused environment value fails the snapshot even when an override is fine.
  Result<Config> env = Config::fromVariables({{"COLLIE_SHM_SPIN", "soon"}})
                           .withOverrides({{"COLLIE_BUFFSIZE", "1M"}});
  ASSERT_FALSE(env.isOk());
  EXPECT_NE(env.status().message().find("COLLIE_SHM_SPIN='soon'"), std::string::npos)
      << env.status().toString();
}

TEST(ConfigOverrides, TypedOptionsAreOverridesAndMustAgreeWithTheMap) {
  Options options;
  options.timeout = std::chrono::milliseconds(1500);
  options.transport = "tcp";
  options.algorithm = Algorithm::kTree;
  options.nchannels = 3;
  options.chunkBytes = 4096;
  options.hostId = "h1";
  options.config = {{"COLLIE_NCHANNELS", "3"}, {"COLLIE_BUFFSIZE", "64K"}};
  Result<Config> config = configWithOptions(Config(), options);
  ASSERT_TRUE(config.isOk()) << config.status().toString();
  EXPECT_EQ(durationOf(*config, "COLLIE_TIMEOUT").count(), 1'500'000);
  EXPECT_EQ(textOf(*config, "COLLIE_TRANSPORT"), "tcp");
  EXPECT_EQ(textOf(*config, "COLLIE_ALGO"), "tree");
  EXPECT_EQ(integerOf(*config, "COLLIE_NCHANNELS"), 3);
  EXPECT_EQ(integerOf(*config, "COLLIE_CHUNKSIZE"), 4096);
  EXPECT_EQ(textOf(*config, "COLLIE_HOST_ID"), "h1");
  EXPECT_EQ(integerOf(*config, "COLLIE_BUFFSIZE"), 64 << 10);
  for (const auto& [name, entry] : std::vector<std::pair<const char*, const char*>>{
           {"COLLIE_TIMEOUT", "option"}, {"COLLIE_SHM_SPIN", "default"}}) {
    EXPECT_EQ(config->sourceName(name), entry) << name;
  }

  options.config["COLLIE_NCHANNELS"] = "4";
  Result<Config> disagree = configWithOptions(Config(), options);
  ASSERT_FALSE(disagree.isOk());
  EXPECT_NE(disagree.status().message().find("Options::nchannels (3) and "
                                             "Options::config[\"COLLIE_NCHANNELS\"] ('4')"),
            std::string::npos)
      << disagree.status().toString();
  Options negative;
  negative.nchannels = -1;
  EXPECT_EQ(configWithOptions(Config(), negative).status().code(), StatusCode::kInvalidArgument);
  Options tooMany;
  tooMany.nchannels = 17;  // was clamped to 16 before: now refused like COLLIE_NCHANNELS=17
  EXPECT_NE(configWithOptions(Config(), tooMany).status().message().find("COLLIE_NCHANNELS='17'"),
            std::string::npos);
}

// Communicator creation refuses to start on a bad knob (it crashed with bad_alloc on
// COLLIE_TRACE_DEPTH=1000000000000), from the environment (environment: the one way a
// user outside the code sets it) or from Options::config, and on an all-zero secret.
TEST(Config, CommunicatorRefusesBadKnobsAndZeroSecrets) {
  Options options;
  options.store = makeInMemoryStore();
  UniqueId id;
  id.host = "127.0.0.1";
  id.secret.fill(7);
  setenv("COLLIE_TRACE_DEPTH", "1000000000000", 1);
  Result<std::unique_ptr<Communicator>> comm = Communicator::create(id, 0, 1, options);
  unsetenv("COLLIE_TRACE_DEPTH");
  ASSERT_FALSE(comm.isOk());
  EXPECT_EQ(comm.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(comm.status().message().find("COLLIE_TRACE_DEPTH"), std::string::npos);
  Options inCode = options;
  inCode.config = {{"COLLIE_TRACE_DEPTH", "1000000000000"}};
  comm = Communicator::create(id, 0, 1, inCode);
  ASSERT_FALSE(comm.isOk());
  EXPECT_NE(comm.status().message().find("COLLIE_TRACE_DEPTH='1000000000000'"), std::string::npos)
      << comm.status().toString();
  inCode.config = {{"COLLIE_NO_SUCH_KNOB", "1"}};
  comm = Communicator::create(id, 0, 1, inCode);
  ASSERT_FALSE(comm.isOk());
  EXPECT_NE(comm.status().message().find("COLLIE_NO_SUCH_KNOB"), std::string::npos);
  comm = Communicator::create(id, 0, 1, options);
  ASSERT_TRUE(comm.isOk()) << comm.status().toString();
  comm->reset();
  id.secret.fill(0);
  comm = Communicator::create(id, 0, 1, options);
  ASSERT_FALSE(comm.isOk());
  EXPECT_NE(comm.status().message().find("all zeros"), std::string::npos)
      << comm.status().toString();
}

// Knobs are read by name only in the components' typed parses, through KnobReader: a
// name no table declares is a failure of the parse, never a silent 0.
TEST(TypedKnobs, AMisspeltNameFailsTheParseNamingIt) {
  KnobReader read(Config{});
  EXPECT_EQ(read.duration("COLLIE_TIMEOTU").count(), 0);
  EXPECT_EQ(read.text("COLLIE_TIMEOUT"), "300s");  // later reads still work
  Result<int> finished = read.finish(1);
  ASSERT_FALSE(finished.isOk());
  EXPECT_EQ(finished.status().code(), StatusCode::kInternal);
  EXPECT_NE(finished.status().message().find("COLLIE_TIMEOTU"), std::string::npos)
      << finished.status().toString();
}

TEST(TypedKnobs, EveryTableHasATypedParseThatReadsOnlyDeclaredKnobs) {
  for (const KnobTable* table : KnobRegistry::instance().tables()) {
    ASSERT_NE(table->parse, nullptr) << table->component << " has no typed parse";
    EXPECT_TRUE(table->parse(Config{}).isOk())
        << table->component << ": " << table->parse(Config{}).toString();
  }
  EXPECT_TRUE(parseEveryKnobTable(Config{}).isOk());
}

// A process-wide knob read from the environment is not validated by a communicator: its
// typed parse refuses the value (never fail open), naming it; the log filter alone reads
// the default (it exists before any validation).
TEST(TypedKnobs, ARefusedValueOfAnUnvalidatedSnapshotFailsTheParse) {
  const Config environment =
      Config::fromVariables({{"COLLIE_RANK", "three"}, {"COLLIE_DEBUG", "LOUD"}});
  Result<LaunchKnobs> launch = LaunchKnobs::parse(environment);
  ASSERT_FALSE(launch.isOk());
  EXPECT_NE(launch.status().message().find("COLLIE_RANK='three'"), std::string::npos)
      << launch.status().toString();
  Result<LogKnobs> log = LogKnobs::parse(environment);
  ASSERT_TRUE(log.isOk()) << log.status().toString();
  EXPECT_EQ(log->level, "WARN");
}

TEST(TypedKnobs, TheCommunicatorsKnobsReadAsTheyMean) {
  Result<CommunicatorKnobs> knobs =
      CommunicatorKnobs::parse(Config::fromVariables({{"NCCL_ALGO", "Tree"},
                                                      {"COLLIE_HIER_HOSTS", "ring"},
                                                      {"COLLIE_NCHANNELS", "3"},
                                                      {"COLLIE_CHUNKSIZE", "64K"},
                                                      {"COLLIE_TIMEOUT", "2s"}}));
  ASSERT_TRUE(knobs.isOk()) << knobs.status().toString();
  EXPECT_EQ(knobs->algorithm, Algorithm::kTree);
  EXPECT_EQ(knobs->hostStage, HostStage::kRing);
  EXPECT_EQ(knobs->nchannels, 3);
  EXPECT_TRUE(knobs->channelsFixed);
  EXPECT_EQ(knobs->chunkBytes, 64u << 10);
  EXPECT_EQ(knobs->timeout.count(), 2'000'000);
  Result<CommunicatorKnobs> defaults = CommunicatorKnobs::parse(Config{});
  ASSERT_TRUE(defaults.isOk());
  EXPECT_EQ(defaults->algorithm, Algorithm::kAuto);
  EXPECT_EQ(defaults->nchannels, 2);
  EXPECT_FALSE(defaults->channelsFixed);
  EXPECT_EQ(defaults->chunkBytes, 0u);  // the tuner picks
  Result<ShmKnobs> shm = ShmKnobs::parse(Config::fromVariables({{"NCCL_BUFFSIZE", "1M"}}));
  ASSERT_TRUE(shm.isOk());
  EXPECT_EQ(shm->fifoBytes, 1 << 20);
  EXPECT_EQ(shm->spin.count(), 50);
}

// A component whose typed parse reads a name its table does not declare (as a typo in
// the source would): communicator creation fails naming the name, whichever components
// the communicator uses (this one is never created), instead of running with a 0.
std::atomic<bool> gReadMisspeltKnob{false};

TEST(TypedKnobs, AMisspeltKnobNameInAnyComponentFailsCommunicatorCreation) {
  ASSERT_TRUE(KnobRegistry::instance()
                  .add(KnobTable{"typo-test",
                                 "a component of this test",
                                 {knobs::integer("COLLIE_TYPO_TEST_LIMIT", "4", 0, 8, "a limit")},
                                 [](const Config& config) {
                                   KnobReader read(config);
                                   read.integer(gReadMisspeltKnob ? "COLLIE_TYPO_TEST_LIMTI"
                                                                  : "COLLIE_TYPO_TEST_LIMIT");
                                   return read.status();
                                 }})
                  .isOk());
  Options options;
  options.store = makeInMemoryStore();
  UniqueId id;
  id.host = "127.0.0.1";
  id.secret.fill(9);
  gReadMisspeltKnob = true;
  Result<std::unique_ptr<Communicator>> comm = Communicator::create(id, 0, 1, options);
  gReadMisspeltKnob = false;
  ASSERT_FALSE(comm.isOk());
  EXPECT_NE(comm.status().message().find("COLLIE_TYPO_TEST_LIMTI"), std::string::npos)
      << comm.status().toString();
  EXPECT_NE(comm.status().message().find("typo-test"), std::string::npos)
      << comm.status().toString();
  comm = Communicator::create(id, 0, 1, options);
  EXPECT_TRUE(comm.isOk()) << comm.status().toString();
}

}  // namespace
}  // namespace collie
