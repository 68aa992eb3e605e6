// One agent configuration that parses, for the unit tests that read an agent's config
// (test_agent_config checks it field by field and edits it line by line; test_mpi_launch adds
// its [mpi] section). Its line numbers are part of test_agent_config's expected messages.
#pragma once

namespace rctest {

inline constexpr const char* kAgentConfig = R"(
[agent]
node = "n1"
listen = "198.18.1.11:7470"
state_dir = "/tmp/state"
lease_timeout = "3s"
max_fault_lifetime = "10m"
[tls]
ca = "/p/ca.pem"
cert = "/p/agent-n1.pem"
key = "/p/agent-n1.key"
[interfaces]
data = ["data0"]
allow = ["data0"]
protected = ["mgmt0"]
allow_default_route = false
)";

}  // namespace rctest
