// A client of the lab switch's control socket (JSON lines), for faults that drive the lab
// switch: ecn_shift's labswitch backend and link_flap's switch_port.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/result.hpp"

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

}  // namespace rc::faults
