// A client of the lab switch's control socket (JSON lines, labswitch/switch_protocol.hpp), for
// faults that drive the lab switch (ecn_shift's labswitch backend, link_flap's switch_port,
// packet) and the controller's fabric sampler.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/result.hpp"
#include "labswitch/switch_protocol.hpp"

namespace rc::faults {

struct Policy;

// The lab switch socket of the agent's own configuration ([lab] switch_socket). A `given`
// socket (a fault's parameter, chosen by a controller) must be exactly that one: a controller
// never makes the agent connect to a socket of its choosing. An error when none is configured.
Result<std::string> labswitchSocket(const std::string& given, const Policy& policy);

// The switch port `given`, else the agent's configured [lab] switch_port: the port that faces
// this agent's host (the lab sets it to the node's name). Empty when neither is set.
std::string labswitchHostPort(const std::string& given, const Policy& policy);

// Sends one request and returns the response; a response with ok=false becomes an error
// quoting the switch. Bounded by a 2 s timeout.
Result<nlohmann::json> labswitchRequest(const std::string& socketPath, const nlohmann::json& request);

// The same with a typed request (labswitch/switch_protocol.hpp), its reply read as its type:
// every client of the switch builds and reads its messages this way.
template <typename Request>
Result<typename Request::Reply> labswitchCall(const std::string& socketPath, const Request& request) {
  auto reply = labswitchRequest(socketPath, swproto::toJson(request));
  if (!reply) return reply.error();
  auto typed = swproto::parse<typename Request::Reply>(*reply);
  if (!typed) return makeError("the lab switch at '" + socketPath + "' answered oddly: " + typed.error().message);
  return typed;
}

}  // namespace rc::faults
