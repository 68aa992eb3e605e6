// A client of the lab switch's control socket (JSON lines), for faults that drive the lab
// switch: ecn_shift's labswitch backend and link_flap's switch_port.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/result.hpp"

namespace rc::faults {

// The socket named by `given`, else $RDMACHAOS_LABSWITCH_SOCKET (set by the lab for its agents).
Result<std::string> labswitchSocket(const std::string& given);

// The switch port `given`, else $RDMACHAOS_LABSWITCH_PORT: the port that faces this agent's
// host (the lab sets it to the node's name). Empty when neither is set.
std::string labswitchHostPort(const std::string& given);

// Sends one request and returns the response; a response with ok=false becomes an error
// quoting the switch. Bounded by a 2 s timeout.
Result<nlohmann::json> labswitchRequest(const std::string& socketPath, const nlohmann::json& request);

}  // namespace rc::faults
