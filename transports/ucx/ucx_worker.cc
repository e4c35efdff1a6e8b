#include "transports/ucx/ucx_worker.h"

#include <poll.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/log/log.h"
#include "core/net/process_sockets.h"
#include "transports/ucx/ucx_tcp_sockets.h"
#include "transports/ucx/ucx_wires.h"

namespace collie::ucx {
namespace {

// Over tcp only, UCX's rendezvous costs a handshake per message that needs the sender's
// progress (RTS, RTR, then the data through UCX's bounce buffers anyway), while the
// engine keeps one message per channel in flight: the wire idled between messages
// (issue 6). Eager messages avoid it (bench/ucx_vs_perftest.sh: 1.96 -> 2.75 GB/s busbw,
// docs/multihost.md; that gain came from the threshold, the segment sizes then did not
// apply). 256 KiB segments cut the socket calls per all-reduce by 3.4x, with busbw the
// same within noise. Variables the user set win: each entry names the environment
// variable that sets it, since ucp_config_modify() of UCX 1.13 takes the tcp ones
// without their TCP_ prefix (it rejects the prefixed names).
void tuneForTcp(ucp_config_t* config, const UcxSelection& selection) {
  if (!tcpOnly(selection)) return;
  struct Setting {
    const char* key;  // for ucp_config_modify()
    const char* env;  // what a user sets
    const char* value;
  };
  for (const Setting& setting : {Setting{"RNDV_THRESH", "UCX_RNDV_THRESH", "inf"},
                                 Setting{"TX_SEG_SIZE", "UCX_TCP_TX_SEG_SIZE", "256k"},
                                 Setting{"RX_SEG_SIZE", "UCX_TCP_RX_SEG_SIZE", "256k"}}) {
    if (std::getenv(setting.env) != nullptr) continue;
    ucs_status_t st = ucp_config_modify(config, setting.key, setting.value);
    if (st != UCS_OK) {
      COLLIE_LOG(INFO, NET) << "ucx: cannot set " << setting.key << "=" << setting.value << ": "
                            << ucs_status_string(st);
    }
  }
}

// Sets the communicator's own UCX transports and devices on its context: they beat
// UCX_TLS / UCX_NET_DEVICES of the environment, for this context only.
Status applySelection(ucp_config_t* config, const UcxSelection& selection) {
  struct Setting {
    const char* key;   // for ucp_config_modify()
    const char* knob;  // what set it
    const std::string& value;
  };
  for (const Setting& setting :
       {Setting{"TLS", "COLLIE_UCX_TLS", selection.tls},
        Setting{"NET_DEVICES", "COLLIE_UCX_NET_DEVICES", selection.netDevices}}) {
    if (setting.value.empty()) continue;
    ucs_status_t st = ucp_config_modify(config, setting.key, setting.value.c_str());
    if (st != UCS_OK) {
      return invalidArgument(std::string("ucx: ") + setting.knob + "='" + setting.value +
                             "' is refused by UCX: " + ucs_status_string(st));
    }
  }
  return Status();
}

}  // namespace

Result<std::shared_ptr<UcxWorker>> UcxWorker::create(int rank, int nranks,
                                                     const std::string& congestion,
                                                     const UcxSelection& selection) {
  if (nranks > kMaxRanks) {
    return unsupported("ucx: " + std::to_string(nranks) + " ranks exceed the tag layout's " +
                       std::to_string(kMaxRanks));
  }
  std::shared_ptr<UcxWorker> self(new UcxWorker(rank, nranks));
  const Result<std::set<uint64_t>> socketsBefore = tcpSocketInodes();
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) {
    return unsupported(std::string("ucx: reading the UCX configuration failed: ") +
                       ucs_status_string(st));
  }
  Status applied = applySelection(config, selection);
  if (!applied.isOk()) {
    ucp_config_release(config);
    return applied;
  }
  tuneForTcp(config, selection);
  self->networkAllowed_ = networkTransportAllowed(selection);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  st = ucp_init(&params, config, &self->context_);
  ucp_config_release(config);
  if (st != UCS_OK) {
    return unsupported(std::string("ucx: ucp_init failed (check UCX_TLS): ") +
                       ucs_status_string(st));
  }
  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  st = ucp_worker_create(self->context_, &wparams, &self->worker_);
  if (st != UCS_OK) {
    return unsupported(std::string("ucx: ucp_worker_create failed: ") + ucs_status_string(st));
  }
  Result<std::vector<std::string>> listeners =
      socketsBefore.isOk() ? tuneNewTcpListeners(*socketsBefore, congestion)
                           : Result<std::vector<std::string>>(socketsBefore.status());
  if (listeners.isOk()) {
    self->tcpListeners_ = std::move(*listeners);
  } else if (net::setsCongestionControl(congestion)) {
    COLLIE_LOG(INFO, NET) << "ucx: rank " << rank << ": " << listeners.status().message()
                          << "; UCX's TCP sockets keep the system congestion control";
  }
  st = ucp_worker_get_efd(self->worker_, &self->eventFd_);
  if (st != UCS_OK) self->eventFd_ = -1;  // waitForActivity then sleeps briefly instead
  ucp_address_t* address = nullptr;
  size_t length = 0;
  st = ucp_worker_get_address(self->worker_, &address, &length);
  if (st != UCS_OK) {
    return unsupported(std::string("ucx: ucp_worker_get_address failed: ") + ucs_status_string(st));
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(address);
  self->address_.assign(bytes, bytes + length);
  ucp_worker_release_address(self->worker_, address);
  return self;
}

UcxWorker::~UcxWorker() {
  closeEndpoints();
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  orphans_.clear();  // no request can complete into them any more
  if (context_ != nullptr) ucp_cleanup(context_);
}

void UcxWorker::closeEndpoints() {
  // Sends that completed locally (eager data copied into UCX's buffers) may not have
  // left yet: flush the worker first (bounded; skipped when a peer's operations were
  // abandoned, they would never complete), then force-close, which needs no answer
  // from the peers (they may be gone or closing themselves). The peers see the
  // connection reset, which fails only operations they still have pending with us.
  bool abandoned = false;
  for (const Peer& p : peers_) abandoned = abandoned || (!p.eps.empty() && p.abandoned);
  if (!abandoned && worker_ != nullptr) {
    ucp_request_param_t param{};
    void* flush = ucp_worker_flush_nbx(worker_, &param);
    if (UCS_PTR_IS_PTR(flush)) {
      auto until = Clock::now() + std::chrono::seconds(2);
      while (ucp_request_check_status(flush) == UCS_INPROGRESS && Clock::now() < until) {
        ucp_worker_progress(worker_);
      }
      ucp_request_free(flush);
    }
  }
  std::vector<void*> closing;
  for (Peer& p : peers_) {
    for (ucp_ep_h ep : p.eps) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      void* request = ucp_ep_close_nbx(ep, &param);
      if (UCS_PTR_IS_PTR(request)) closing.push_back(request);
    }
    p.eps.clear();
  }
  auto until = Clock::now() + std::chrono::seconds(2);
  for (void* request : closing) {
    while (ucp_request_check_status(request) == UCS_INPROGRESS && Clock::now() < until) {
      ucp_worker_progress(worker_);
    }
    ucp_request_free(request);
  }
}

void UcxWorker::onEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* peer = static_cast<Peer*>(arg);
  if (!peer->failure.isOk()) return;
  peer->failure =
      remoteError("ucx: connection to rank " + std::to_string(peer->rank) + " failed (" +
                      ucs_status_string(status) + "): the peer exited or the network failed",
                  peer->rank);
  COLLIE_LOG(WARN, NET) << "ucx: rank " << peer->owner->rank_ << ": " << peer->failure.message();
}

Status UcxWorker::connect(int peer, const uint8_t* address, size_t length, int lanes) {
  if (peer < 0 || peer >= static_cast<int>(peers_.size()) || length == 0 || lanes < 1) {
    return invalidArgument("ucx: bad peer " + std::to_string(peer) + ", empty address or no lane");
  }
  for (int lane = 0; lane < lanes; ++lane) {
    COLLIE_RETURN_IF_ERROR(connectLane(peer, address, lane == 0));
  }
  return Status();
}

Status UcxWorker::connectLane(int peer, const uint8_t* address, bool first) {
  Peer& p = peers_[peer];
  p.owner = this;
  p.rank = peer;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address);
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &UcxWorker::onEndpointError;
  params.err_handler.arg = &p;
  ucs_status_t st = UCS_ERR_UNREACHABLE;
  ucp_ep_h ep = nullptr;
  if (networkAllowed_) st = ucp_ep_create(worker_, &params, &ep);
  if (st == UCS_ERR_UNREACHABLE) {
    // UCX's shared-memory transports cannot report peer failures; without a network
    // transport in UCX_TLS connect without it (a dead peer is then caught by the
    // engine's deadline, COLLIE_TIMEOUT, instead of at once).
    params.field_mask &= ~(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER);
    st = ucp_ep_create(worker_, &params, &ep);
    if (st == UCS_OK && first) {
      COLLIE_LOG(INFO, NET) << "ucx: endpoint to rank " << peer
                            << " has no peer-failure detection (UCX_TLS lacks a network "
                               "transport); a dead peer is detected by COLLIE_TIMEOUT";
    }
  }
  if (st != UCS_OK) {
    return remoteError("ucx: cannot create an endpoint to rank " + std::to_string(peer) + ": " +
                           ucs_status_string(st),
                       peer);
  }
  p.eps.push_back(ep);
  return Status();
}

void UcxWorker::waitForActivity(std::chrono::microseconds maxWait) {
  auto ms =
      std::clamp<int64_t>(std::chrono::ceil<std::chrono::milliseconds>(maxWait).count(), 0, 1000);
  if (eventFd_ < 0) {
    if (ms > 0) ::poll(nullptr, 0, 1);
    return;
  }
  // Arm fails with BUSY when events are pending: then there is work right away.
  if (ucp_worker_arm(worker_) != UCS_OK) return;
  pollfd fd{eventFd_, POLLIN, 0};
  ::poll(&fd, 1, static_cast<int>(ms));
}

std::string UcxWorker::describe(int peer) const {
  if (peers_[peer].eps.empty()) return "?";
  ucp_ep_h ep = peers_[peer].eps[0];
  char* text = nullptr;
  size_t size = 0;
  FILE* stream = open_memstream(&text, &size);
  if (stream == nullptr) return "?";
  ucp_ep_print_info(ep, stream);
  std::fclose(stream);
  std::string out(text, size);
  std::free(text);
  return out;
}

Status waitRequest(UcxWorker& worker, void* request, Deadline deadline, const std::string& what) {
  if (request == nullptr) return Status();
  if (UCS_PTR_IS_ERR(request)) {
    return remoteError("ucx: " + what + " failed: " + ucs_status_string(UCS_PTR_STATUS(request)));
  }
  ucs_status_t st;
  while ((st = ucp_request_check_status(request)) == UCS_INPROGRESS) {
    if (!worker.progress()) {
      if (Clock::now() > deadline) {
        ucp_request_cancel(worker.worker(), request);
        auto grace = Clock::now() + std::chrono::seconds(1);
        while (ucp_request_check_status(request) == UCS_INPROGRESS && Clock::now() < grace) {
          worker.progress();
        }
        ucp_request_free(request);  // released by UCX on completion if still pending
        return timeoutError("ucx: " + what + " did not complete before the deadline");
      }
      worker.waitForActivity(std::chrono::milliseconds(10));
    }
  }
  ucp_request_free(request);
  if (st != UCS_OK) return remoteError("ucx: " + what + " failed: " + ucs_status_string(st));
  return Status();
}

}  // namespace collie::ucx
