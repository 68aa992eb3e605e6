// scheduleFault: the schedule request `inject` and `run` both send (see schedule_fault.hpp).
#include "controller/schedule_fault.hpp"

#include "common/protocol.hpp"
#include "faults/fault.hpp"

namespace rc::controller {

boost::asio::awaitable<Result<json>> scheduleFault(std::shared_ptr<AgentClient> client, std::string faultId,
                                                   std::string kind, json params, int64_t startNs, int64_t forNs,
                                                   Duration timeout) {
  const faults::FaultKind* k = faults::findKind(kind);
  json wire = k ? faults::wireParams(k->params, params) : std::move(params);
  // (Built outside co_await: GCC 12 miscompiles braced initialisers there.)
  json body = proto::toJson(proto::Schedule{std::move(faultId), std::move(kind), std::move(wire), startNs,
                                            client->clock().offsetNs, proto::lifetimeMsFor(forNs)});
  co_return co_await client->request("schedule", std::move(body), timeout);
}

bool hasActiveRdmaPort(const json& hello) {
  const json& caps = hello.value("capabilities", json::object());
  for (const auto& d : caps.value("rdma_devices", json::array()))
    for (const auto& p : d.value("ports", json::array()))
      if (p.value("state", "").find("ACTIVE") != std::string::npos) return true;
  return false;
}

std::string incastTransport(const std::vector<std::shared_ptr<AgentClient>>& nodes) {
  if (nodes.empty()) return "tcp";
  for (const auto& c : nodes)
    if (!c || !hasActiveRdmaPort(c->hello())) return "tcp";
  return "verbs";
}

}  // namespace rc::controller
