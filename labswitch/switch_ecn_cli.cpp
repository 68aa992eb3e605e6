// `rdmachaos-labswitch --ecn-profile SOCKET show|set|restore PORT QUEUE ...`: the lab switch's
// ECN profile of one queue from the command line, in the shape an operator's site script for a
// real switch has (show prints a profile, set changes it, restore puts a shown one back). The
// lab's agents name it in their [ecn_commands.labswitch] template, so the command backend of
// ecn_shift runs end to end on the lab (docs/faults/ecn_shift.md).
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "common/unique_fd.hpp"
#include "labswitch/switch.hpp"

namespace rc::labswitch {
namespace {

constexpr const char* kUsage =
    "usage: rdmachaos-labswitch --ecn-profile SOCKET show PORT QUEUE\n"
    "       rdmachaos-labswitch --ecn-profile SOCKET set PORT QUEUE KMIN_BYTES KMAX_BYTES PMAX\n"
    "       rdmachaos-labswitch --ecn-profile SOCKET restore PORT QUEUE PROFILE_JSON\n"
    "(PROFILE_JSON: what show printed)\n";

bool number(const char* s, uint64_t& out) {
  if (!*s) return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno || *end || s[0] == '-') return false;
  out = v;
  return true;
}

}  // namespace

Result<json> controlRequest(const std::string& socketPath, const json& request) {
  auto connected = connectControl(socketPath);
  if (!connected) return connected.error();
  UniqueFD sock = std::move(*connected);
  const std::string line = request.dump() + "\n";
  for (size_t off = 0; off < line.size();) {
    ssize_t w = ::write(sock.get(), line.data() + off, line.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return makeError(std::string("writing to the lab switch: ") + std::strerror(errno), errno);
    off += size_t(w);
  }
  // One answer line, within 5 s.
  std::string in;
  const int64_t deadline = monoNs() + 5'000'000'000;
  while (in.find('\n') == std::string::npos) {
    const int64_t left = deadline - monoNs();
    if (left <= 0) return makeError("the lab switch at '" + socketPath + "' did not answer within 5 s", ETIMEDOUT);
    pollfd p{sock.get(), POLLIN, 0};
    if (::poll(&p, 1, int(left / 1'000'000) + 1) < 0 && errno != EINTR)
      return makeError(std::string("poll: ") + std::strerror(errno), errno);
    char buf[65536];
    ssize_t n = ::read(sock.get(), buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return makeError("the lab switch at '" + socketPath + "' closed without an answer");
    in.append(buf, size_t(n));
  }
  json answer = json::parse(in.substr(0, in.find('\n')), nullptr, false);
  if (answer.is_discarded() || !answer.is_object())
    return makeError("the lab switch at '" + socketPath + "' answered something that is not a JSON object");
  if (!answer.value("ok", false))
    return makeError("the lab switch refused " + request.value("cmd", std::string("the request")) + ": " +
                     answer.value("error", std::string("no reason given")));
  return answer;
}

int ecnProfileMain(const std::vector<std::string>& args) {
  // SOCKET VERB PORT QUEUE ...
  if (args.size() < 4) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string& socket = args[0];
  const std::string& verb = args[1];
  const std::string& port = args[2];
  uint64_t queue = 0;
  if (!number(args[3].c_str(), queue) || queue > 7) {
    std::fprintf(stderr, "rdmachaos-labswitch --ecn-profile: QUEUE '%s' must be a priority 0-7\n", args[3].c_str());
    return 2;
  }
  if (verb == "show" && args.size() == 4) {
    auto r = controlCall(socket, swproto::GetEcnRequest{.port = port, .queue = int(queue)});
    if (!r) {
      std::fprintf(stderr, "rdmachaos-labswitch --ecn-profile show: %s\n", r.error().message.c_str());
      return 1;
    }
    if (r->profiles.size() != 1) {
      std::fprintf(stderr, "rdmachaos-labswitch --ecn-profile show: port '%s' queue %llu names %zu queues, not one\n",
                   port.c_str(), static_cast<unsigned long long>(queue), r->profiles.size());
      return 1;
    }
    std::printf("%s\n", swproto::toJson(r->profiles[0].profile).dump().c_str());
    return 0;
  }
  swproto::EcnSettings profile;
  if (verb == "set" && args.size() == 7) {
    uint64_t kmin = 0, kmax = 0;
    char* end = nullptr;
    double pmax = std::strtod(args[6].c_str(), &end);
    if (!number(args[4].c_str(), kmin) || !number(args[5].c_str(), kmax) || args[6].empty() || *end ||
        !(pmax >= 0 && pmax <= 1)) {
      std::fprintf(stderr, "rdmachaos-labswitch --ecn-profile set: KMIN_BYTES and KMAX_BYTES are whole numbers of "
                           "bytes and PMAX a number in [0, 1] (got '%s' '%s' '%s')\n",
                   args[4].c_str(), args[5].c_str(), args[6].c_str());
      return 2;
    }
    profile = {.enabled = true, .kmin = kmin, .kmax = kmax, .pmax = pmax};
  } else if (verb == "restore" && args.size() == 5) {
    json prof = json::parse(args[4], nullptr, false);
    auto shown = prof.is_discarded() ? Result<swproto::EcnSettings>(makeError("not JSON"))
                                     : swproto::parse<swproto::EcnSettings>(prof);
    if (!shown) {
      std::fprintf(stderr, "rdmachaos-labswitch --ecn-profile restore: PROFILE_JSON must be what show printed "
                           "({\"enabled\":..,\"kmin\":..,\"kmax\":..,\"pmax\":..}), not '%s' (%s)\n",
                   args[4].substr(0, 200).c_str(), shown.error().message.c_str());
      return 2;
    }
    profile = *shown;
  } else {
    std::fputs(kUsage, stderr);
    return 2;
  }
  swproto::SetEcnRequest set{.port = port, .queue = int(queue), .enabled = profile.enabled, .kmin = profile.kmin,
                             .kmax = profile.kmax, .pmax = profile.pmax};
  if (auto r = controlCall(socket, set); !r) {
    std::fprintf(stderr, "rdmachaos-labswitch --ecn-profile %s: %s\n", verb.c_str(), r.error().message.c_str());
    return 1;
  }
  return 0;
}

}  // namespace rc::labswitch
