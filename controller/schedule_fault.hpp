// One way to schedule a fault on an agent, shared by `inject` and `run`.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <memory>
#include <string>
#include <vector>

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

// Whether an agent's hello reports an RDMA device with an ACTIVE port.
bool hasActiveRdmaPort(const json& hello);

// What an incast step's transport = "auto" becomes, decided once for the receiver and every
// sender together (each node deciding alone could pick differently from its peers): "verbs"
// when every one of NODES reports an RDMA device with an ACTIVE port, else "tcp".
std::string incastTransport(const std::vector<std::shared_ptr<AgentClient>>& nodes);

}  // namespace rc::controller
