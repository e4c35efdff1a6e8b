// Starting the TCP store server with an explicit configuration.
//
// StoreServer::start (include/collie/store.h) reads the store's knobs
// (COLLIE_STORE_HANDSHAKE_TIMEOUT, COLLIE_STORE_MAX_PENDING[_PER_HOST], core/bootstrap/
// store_knobs.cc) from the environment: it is public and may run before any
// communicator exists. Code that has a configuration snapshot (createFromEnvironment,
// tests) passes it here instead, so the store follows the same settings as the
// communicator it serves.
//
// Thread safety: as StoreServer::start.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "collie/store.h"
#include "core/config/config.h"

namespace collie {

Result<std::unique_ptr<StoreServer>> startStoreServer(const std::string& bindHost, uint16_t port,
                                                      const JobSecret& secret,
                                                      const Config& config);

}  // namespace collie
