// Lab switch control-socket client (see labswitch_client.hpp).
#include "faults/labswitch_client.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/clock.hpp"
#include "common/unique_fd.hpp"
#include "faults/fault.hpp"

namespace rc::faults {

Result<std::string> labswitchSocket(const std::string& given, const Policy& policy) {
  if (policy.labswitchSocket.empty())
    return makeError(
        "this agent has no lab switch: its configuration names none ([lab] switch_socket; "
        "`rdmachaos lab up` writes it for the lab's agents)",
        EPERM);
  if (!given.empty() && given != policy.labswitchSocket)
    return makeError("socket '" + given +
                         "' is not the lab switch socket of this agent's configuration; omit "
                         "'socket' (the agent uses its own [lab] switch_socket)",
                     EPERM);
  return policy.labswitchSocket;
}

std::string labswitchHostPort(const std::string& given, const Policy& policy) {
  return given.empty() ? policy.labswitchPort : given;
}

Result<nlohmann::json> labswitchRequest(const std::string& path, const nlohmann::json& request) {
  std::string where = "lab switch at '" + path + "'";
  UniqueFD fd;
  if (path.rfind("tcp:", 0) == 0) {
    // tcp:ADDRESS:PORT — how a soft-RoCE lab guest reaches the switch (QEMU forwards it to
    // the host's unix socket; docs/soft-roce.md).
    auto colon = path.rfind(':');
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    int port = colon > 4 ? std::atoi(path.c_str() + colon + 1) : 0;
    std::string host = colon > 4 ? path.substr(4, colon - 4) : "";
    if (port < 1 || port > 65535 || ::inet_pton(AF_INET, host.c_str(), &sin.sin_addr) != 1)
      return makeError(where + ": not tcp:IPV4:PORT");
    sin.sin_port = htons(uint16_t(port));
    fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.isValid() || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin) != 0)
      return makeError("cannot reach the " + where + ": " + std::strerror(errno), errno);
  } else {
    fd.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (path.size() >= sizeof sa.sun_path) return makeError(where + ": path too long");
    std::strcpy(sa.sun_path, path.c_str());
    if (!fd.isValid() || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
      return makeError("cannot reach the " + where + ": " + std::strerror(errno) +
                           " (is the lab up? `rdmachaos lab status`)",
                       errno);
  }
  std::string line = request.dump() + "\n";
  if (::send(fd.get(), line.data(), line.size(), MSG_NOSIGNAL) != ssize_t(line.size()))
    return makeError("cannot send to the " + where + ": " + std::strerror(errno), errno);
  std::string in;
  int64_t deadline = monoNs() + 2'000'000'000;
  while (in.find('\n') == std::string::npos) {
    int left = int((deadline - monoNs()) / 1'000'000);
    pollfd p{fd.get(), POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, left) <= 0)
      return makeError("the " + where + " did not answer within 2 s", ETIMEDOUT);
    char buf[8192];
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n <= 0) return makeError("the " + where + " closed the connection", EPIPE);
    in.append(buf, size_t(n));
    if (in.size() > (16u << 20)) return makeError("the " + where + " sent an oversized response");
  }
  auto j = nlohmann::json::parse(in.substr(0, in.find('\n')), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return makeError("the " + where + " sent a response that is not JSON");
  if (j.value("ok", false) != true)
    return makeError("the " + where + " refused '" + request.value("cmd", "") + "': " + j.value("error", "?"));
  return j;
}

}  // namespace rc::faults
