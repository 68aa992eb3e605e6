// One way to schedule a fault on an agent, shared by `inject` and `run`.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <memory>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "controller/fleet/fleet.hpp"

namespace rc::controller {

// Sends CLIENT's agent a `schedule` request: KIND with its normalised PARAMS (the one form
// faults::normaliseParams gives and the agent reads back unchanged), starting at START_NS on the controller's clock (sent with the
// offset measured for that agent), for a lifetime of FOR_NS (proto::lifetimeMsFor: whole
// milliseconds, rounded up). Returns the agent's reply (its fault record) or why it refused.
boost::asio::awaitable<Result<json>> scheduleFault(std::shared_ptr<AgentClient> client, std::string faultId,
                                                   std::string kind, json params, int64_t startNs, int64_t forNs,
                                                   Duration timeout);

// Settles one step's parameters that depend on its agents (FaultKind::settle, e.g. incast's
// transport = "auto"), once for the whole step: each node deciding alone could differ from its
// peers. PARAMS[i] is NODES[i]'s; a kind without the hook is left as it is.
void settleStep(const std::string& kind, const std::vector<json*>& params,
                const std::vector<std::shared_ptr<AgentClient>>& nodes);

}  // namespace rc::controller
