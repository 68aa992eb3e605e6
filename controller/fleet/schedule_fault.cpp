// scheduleFault: the schedule request `inject` and `run` both send (see schedule_fault.hpp).
#include "controller/fleet/schedule_fault.hpp"

#include "common/protocol.hpp"
#include "faults/fault.hpp"

namespace rc::controller {

boost::asio::awaitable<Result<json>> scheduleFault(std::shared_ptr<AgentClient> client, std::string faultId,
                                                   std::string kind, json params, int64_t startNs, int64_t forNs,
                                                   Duration timeout) {
  // PARAMS go as normalised (faults::normaliseParams): the agent reads that form back unchanged.
  // (Built outside co_await: GCC 12 miscompiles braced initialisers there.)
  json body = proto::toJson(proto::Schedule{std::move(faultId), std::move(kind), std::move(params), startNs,
                                            client->clock().offsetNs, proto::lifetimeMsFor(forNs)});
  co_return co_await client->request("schedule", std::move(body), timeout);
}

void settleStep(const std::string& kind, const std::vector<json*>& params,
                const std::vector<std::shared_ptr<AgentClient>>& nodes) {
  const faults::FaultKind* k = faults::findKind(kind);
  if (!k || !k->settle) return;
  std::vector<json> caps;
  for (const auto& c : nodes) caps.push_back(c ? c->hello().value("capabilities", json::object()) : json::object());
  k->settle(params, caps);
}

}  // namespace rc::controller
