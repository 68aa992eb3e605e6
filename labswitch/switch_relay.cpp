// `rdmachaos-labswitch --relay SOCKET`: joins stdin/stdout to the switch's control socket, so
// that QEMU's guestfwd can give a soft-RoCE guest's agent a TCP path to the host's switch.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/unique_fd.hpp"
#include "labswitch/switch.hpp"

namespace rc::labswitch {
namespace {

bool writeAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

}  // namespace

Result<UniqueFD> connectControl(const std::string& socketPath) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (socketPath.empty() || socketPath.size() >= sizeof sa.sun_path)
    return makeError("control socket path '" + socketPath + "' is empty or too long");
  std::strcpy(sa.sun_path, socketPath.c_str());
  UniqueFD sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.isValid() || ::connect(sock.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    return makeError("cannot connect to the lab switch at '" + socketPath +
                     "': " + std::strerror(errno), errno);
  return sock;
}

Result<void> relay(const std::string& socketPath, int in, int out) {
  auto connected = connectControl(socketPath);
  if (!connected) return connected.error();
  UniqueFD sock = std::move(*connected);
  // Until either side ends: one request/response connection at a time, small messages.
  char buf[65536];
  for (;;) {
    pollfd p[2] = {{in, POLLIN, 0}, {sock.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return makeError(std::string("poll: ") + std::strerror(errno), errno);
    }
    for (int i = 0; i < 2; i++) {
      if (!p[i].revents) continue;
      int from = i == 0 ? in : sock.get(), to = i == 0 ? sock.get() : out;
      ssize_t n = ::read(from, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || !writeAll(to, buf, size_t(n))) return {};
    }
  }
}

}  // namespace rc::labswitch
