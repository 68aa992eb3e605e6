// The pfc_storm fault: PFC pause frames from a node's data NIC, paced at a given rate and
// bounded by duration and frame count; revert sends one resume (quanta 0) frame.
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>

#include "common/clock.hpp"
#include "common/pfc.hpp"
#include "common/unique_fd.hpp"
#include "faults/fault.hpp"
#include "faults/netlink.hpp"

namespace rc::faults {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBatch = 64;  // frames per sendmmsg

struct StormParams {
  std::string interface;
  uint16_t enableVector = 0;
  uint16_t quanta = 0;
  double rate = 0;
  int64_t durationNs = 0;
  int64_t maxFrames = 0;
};

// A raw socket bound to the interface, and the PFC frame it sends (source = the NIC's MAC).
struct Sender {
  UniqueFD fd;
  sockaddr_ll to{};
  uint8_t mac[6]{};
};

Result<Sender> openSender(const std::string& name, int ifindex) {
  Sender s;
  s.fd.reset(::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0));
  if (!s.fd.isValid())
    return makeError("pfc_storm: cannot open an AF_PACKET socket: " + std::string(std::strerror(errno)) +
                         " (needs CAP_NET_RAW)",
                     errno);
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (::ioctl(s.fd.get(), SIOCGIFHWADDR, &ifr) != 0)
    return makeError("pfc_storm: cannot read the MAC address of '" + name + "': " + std::strerror(errno), errno);
  std::memcpy(s.mac, ifr.ifr_hwaddr.sa_data, 6);
  s.to.sll_family = AF_PACKET;
  s.to.sll_ifindex = ifindex;
  s.to.sll_halen = 6;
  std::memcpy(s.to.sll_addr, pfc::kDestination, 6);
  return s;
}

void buildFrame(uint8_t* out, const uint8_t mac[6], uint16_t vector, uint16_t quanta) {
  pfc::Frame f;
  f.enableVector = vector;
  for (int p = 0; p < pfc::kPriorities; p++)
    if (vector & (1u << p)) f.quanta[size_t(p)] = quanta;
  pfc::build(out, mac, f);
}

// Sends n copies of frame; returns how many the kernel took.
Result<size_t> sendBatch(Sender& s, const uint8_t* frame, size_t n) {
  iovec iov{const_cast<uint8_t*>(frame), pfc::kFrameSize};
  mmsghdr msgs[kBatch];
  for (size_t i = 0; i < n; i++) {
    msgs[i] = {};
    msgs[i].msg_hdr.msg_name = &s.to;
    msgs[i].msg_hdr.msg_namelen = sizeof s.to;
    msgs[i].msg_hdr.msg_iov = &iov;
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  int r = ::sendmmsg(s.fd.get(), msgs, unsigned(n), 0);
  if (r < 0) {
    // A full device queue is back-pressure, not failure: the pacing catches up.
    if (errno == ENOBUFS || errno == EAGAIN || errno == EINTR) return size_t(0);
    return makeError("pfc_storm: sending on the interface failed: " + std::string(std::strerror(errno)), errno);
  }
  return size_t(r);
}

Result<void> sendResume(const std::string& name, uint16_t vector) {
  auto link = nl::getLink(name);
  if (!link) return makeError("pfc_storm revert: " + link.error().message, link.error().code);
  auto s = openSender(name, link->ifindex);
  if (!s) return s.error();
  uint8_t frame[pfc::kFrameSize];
  buildFrame(frame, s->mac, vector, 0);
  auto sent = sendBatch(*s, frame, 1);
  if (!sent) return sent.error();
  if (*sent != 1) return makeError("pfc_storm revert: the resume frame on '" + name + "' was not sent (queue full); retry");
  return {};
}

class PfcStorm final : public Fault {
 public:
  PfcStorm(json params, StormParams p) : params_(std::move(params)), p_(std::move(p)) {}

  const json& params() const override { return params_; }

  Result<json> snapshot() override {
    // Nothing to restore but the peer's pause: revert sends a resume on this interface.
    return json{{"interface", p_.interface}, {"priorities_vector", p_.enableVector}};
  }

  Result<void> run(std::stop_token stop, EventLog& events) override {
    auto link = nl::getLink(p_.interface);
    if (!link) return makeError("pfc_storm: " + link.error().message, link.error().code);
    auto sender = openSender(p_.interface, link->ifindex);
    if (!sender) return sender.error();
    uint8_t frame[pfc::kFrameSize];
    buildFrame(frame, sender->mac, p_.enableVector, p_.quanta);
    {
      std::lock_guard lock(m_);
      started_ = true;
    }
    events.add(Event{wallNs(), "applied", p_.interface, false});
    // Frame i is due at start + i / rate: the schedule, not the send times, sets the pace, so
    // scheduling delays do not lower the rate (late frames go out in the next batch).
    auto start = Clock::now();
    auto end = start + std::chrono::nanoseconds(p_.durationNs);
    int64_t sent = 0;
    Result<void> result;
    while (sent < p_.maxFrames && !stop.stop_requested()) {
      auto now = Clock::now();
      if (now >= end) break;
      double elapsed = std::chrono::duration<double>(now - start).count();
      int64_t due = std::min<int64_t>(p_.maxFrames, int64_t(std::floor(elapsed * p_.rate)) + 1);
      while (sent < due) {
        auto n = sendBatch(*sender, frame, size_t(std::min<int64_t>(int64_t(kBatch), due - sent)));
        if (!n) {
          result = n.error();
          break;
        }
        if (*n == 0) break;  // device queue full: wait for the next slot
        sent += int64_t(*n);
      }
      if (!result) break;
      if (sent >= p_.maxFrames) break;
      // Sleep until the next frame is due (at least 50 us, so high rates send in batches).
      auto next = start + std::chrono::nanoseconds(int64_t(double(sent) / p_.rate * 1e9));
      next = std::max(next, Clock::now() + std::chrono::microseconds(50));
      if (sleepUntil(stop, std::min(next, end))) break;
    }
    {
      std::lock_guard lock(m_);
      framesSent_ = sent;
    }
    events.add(Event{wallNs(), "frames_sent", p_.interface + " " + std::to_string(sent), false});
    return result;
  }

  Result<void> revert(EventLog& events) override {
    {
      std::lock_guard lock(m_);
      if (!started_) return {};
    }
    auto r = sendResume(p_.interface, p_.enableVector);
    if (!r) return r;
    events.add(Event{wallNs(), "reverted", p_.interface + " (resume sent)", false});
    return {};
  }

  std::string describe() const override {
    char buf[160];
    std::snprintf(buf, sizeof buf, "pfc_storm %s: priorities 0x%02x, quanta %u, %.0f frames/s, at most %lld frames",
                  p_.interface.c_str(), p_.enableVector, p_.quanta, p_.rate, (long long)p_.maxFrames);
    return buf;
  }

  // A second storm's resume would end this one's pause early: one storm per interface.
  std::vector<std::string> targets() const override {
    return {"PFC pause frames from interface '" + p_.interface + "'"};
  }

  int64_t framesSent() const {
    std::lock_guard lock(m_);
    return framesSent_;
  }

 private:
  static bool sleepUntil(std::stop_token& stop, Clock::time_point until) {
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lock(m);
    cv.wait_until(lock, stop, until, [] { return false; });
    return stop.stop_requested();
  }

  json params_;
  StormParams p_;
  mutable std::mutex m_;
  bool started_ = false;
  int64_t framesSent_ = 0;
};

}  // namespace

extern const FaultKind kind_pfc_storm;
const FaultKind kind_pfc_storm{
    .name = "pfc_storm",
    .summary = "sends PFC pause frames from a data NIC at a paced rate (a stuck NIC pausing its switch)",
    .params = {
        {.name = "interface", .type = ParamType::string,
         .help = "interface to send from (default: the first data interface)", .optional = true},
        {.name = "priorities", .type = ParamType::intList, .help = "priorities to pause, e.g. [3]",
         .defaultValue = json::array({3}), .min = 0, .max = 7},
        {.name = "quanta", .type = ParamType::integer,
         .help = "pause time per frame in quanta of 512 bit times (0 = resume)", .defaultValue = 65535, .min = 0,
         .max = 65535},
        {.name = "rate", .type = ParamType::rate, .help = "frames per second", .defaultValue = 1000.0, .min = 1,
         .max = 2e6},
        {.name = "duration", .type = ParamType::duration, .help = "how long the storm lasts",
         .defaultValue = int64_t(10e9), .min = kParamMs, .max = kParamHour},
        {.name = "max_frames", .type = ParamType::integer, .help = "frames at most, whatever the duration",
         .defaultValue = int64_t(1'000'000), .min = 1, .max = 1e9},
    },
    .create = [](const json& params, const Policy& policy) -> Result<std::unique_ptr<Fault>> {
      if (!params.is_object()) return makeError("pfc_storm parameters must be a table");
      StormParams p;
      auto it = params.find("interface");
      p.interface = (it != params.end() && it->is_string()) ? it->get<std::string>() : policy.defaultInterface;
      if (auto ok = checkInterface(policy, p.interface); !ok)
        return makeError("pfc_storm: " + ok.error().message, EPERM);
      auto prios = params.find("priorities");
      if (prios == params.end() || !prios->is_array() || prios->empty())
        return makeError("pfc_storm parameter 'priorities' must be a non-empty list of 0..7");
      for (const auto& x : *prios) {
        if (!x.is_number_integer() || x.get<int>() < 0 || x.get<int>() > 7)
          return makeError("pfc_storm parameter 'priorities' must be a list of 0..7");
        p.enableVector = uint16_t(p.enableVector | (1u << x.get<int>()));
      }
      auto quanta = intParam("pfc_storm", params, "quanta");
      auto duration = intParam("pfc_storm", params, "duration");
      auto maxFrames = intParam("pfc_storm", params, "max_frames");
      if (!quanta) return quanta.error();
      if (!duration) return duration.error();
      if (!maxFrames) return maxFrames.error();
      auto rate = params.find("rate");
      if (rate == params.end() || !rate->is_number()) return makeError("pfc_storm parameter 'rate' must be a number");
      p.rate = rate->get<double>();
      if (*quanta < 0 || *quanta > 65535 || *duration < 1'000'000 || *duration > 3600'000'000'000 ||
          *maxFrames < 1 || *maxFrames > 1'000'000'000 || !(p.rate >= 1 && p.rate <= 2e6))
        return makeError("pfc_storm: a parameter is out of range (see `rdmachaos inject --help`)");
      p.quanta = uint16_t(*quanta);
      p.durationNs = *duration;
      p.maxFrames = *maxFrames;
      auto link = nl::getLink(p.interface);
      if (!link) return makeError("pfc_storm: " + link.error().message, link.error().code);
      json resolved = params;
      resolved["interface"] = p.interface;
      return std::unique_ptr<Fault>(std::make_unique<PfcStorm>(std::move(resolved), std::move(p)));
    },
    .revertRecord = [](const json& /*params*/, const json& snapshot, const Policy& /*policy*/) -> Result<void> {
      if (!snapshot.is_object() || !snapshot.contains("interface") || !snapshot["interface"].is_string())
        return makeError("pfc_storm journal snapshot lacks 'interface'");
      uint16_t vector = uint16_t(snapshot.value("priorities_vector", 0xff));
      return sendResume(snapshot["interface"].get<std::string>(), vector);
    },
    .planTarget = [](const json& params) { return "the PFC pause frames of " + planInterface(params); },
};

}  // namespace rc::faults
