// The ibverbs transport's knobs, registered with the transport
// (transports/ibverbs/CMakeLists.txt).
#include "transports/ibverbs/ib_knobs.h"

#include <algorithm>

#include "core/config/knob_reader.h"
#include "core/config/knob_registry.h"

namespace collie {

void registerIbverbsKnobs(KnobRegistry& registry) {
  (void)registry.add(KnobTable{
      "ibverbs",
      "the InfiniBand/RoCE transport",
      {
          knobs::text("COLLIE_IB_HCA", "",
                      "InfiniBand/RoCE ports for ibverbs: mlx5_0:1,mlx5_1 (prefix), '=' exact, "
                      "'^' exclude",
                      "NCCL_IB_HCA"),
          Knob{"COLLIE_IB_GID_INDEX", "auto",
               "GID table index for RoCE; auto picks the highest IPv4-mapped GID (RoCE v2)",
               "NCCL_IB_GID_INDEX", KnobKind::kAutoOrInteger, 0, 255},
          knobs::integer("COLLIE_IB_MR_CACHE", "256", 1, 1 << 20,
                         "idle memory registrations the ibverbs transport keeps"),
      },
      [](const Config& config) { return IbKnobs::parse(config).status(); }});
}

Result<IbKnobs> IbKnobs::parse(const Config& config) {
  KnobReader read(config);
  IbKnobs knobs;
  knobs.ports = read.text("COLLIE_IB_HCA");
  const std::string gid = read.text("COLLIE_IB_GID_INDEX");
  if (gid != "auto") {
    Result<int64_t> index = parseSize(gid);
    if (!index.isOk() || *index < 0 || *index > 255) {
      return invalidArgument("COLLIE_IB_GID_INDEX='" + gid + "' is not auto or 0..255");
    }
    knobs.gidIndex = static_cast<int>(*index);
  }
  knobs.mrCacheSize = static_cast<size_t>(std::max<int64_t>(1, read.integer("COLLIE_IB_MR_CACHE")));
  return read.finish(knobs);
}

}  // namespace collie
