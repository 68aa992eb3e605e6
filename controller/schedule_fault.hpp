// One way to schedule a fault on an agent, shared by `inject` and `run`.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <memory>
#include <string>

#include "common/result.hpp"
#include "controller/fleet.hpp"

namespace rc::controller {

// Sends CLIENT's agent a `schedule` request: KIND with its normalised PARAMS written for the
// wire (faults::wireParams), starting at START_NS on the controller's clock (sent with the
// offset measured for that agent), for a lifetime of FOR_NS (proto::lifetimeMsFor: whole
// milliseconds, rounded up). Returns the agent's reply (its fault record) or why it refused.
boost::asio::awaitable<Result<json>> scheduleFault(std::shared_ptr<AgentClient> client, std::string faultId,
                                                   std::string kind, json params, int64_t startNs, int64_t forNs,
                                                   Duration timeout);

}  // namespace rc::controller
