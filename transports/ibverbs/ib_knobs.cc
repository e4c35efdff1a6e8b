// The ibverbs transport's knobs, registered with the transport
// (transports/ibverbs/CMakeLists.txt).
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
      }});
}

}  // namespace collie
