// Reading NIC and RDMA counters from sysfs and the ethtool ioctl (see nic_counters.hpp).
#include "counters/nic_counters.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

namespace rc::counters {
namespace {

// Interface names go into sysfs paths and ioctl requests: what the kernel would accept, no
// path separators, no dot names.
bool validIfname(const std::string& n) {
  return !n.empty() && n.size() < IFNAMSIZ && n != "." && n != ".." &&
         n.find('/') == std::string::npos && n.find('\0') == std::string::npos;
}

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};
using UniqueDir = std::unique_ptr<DIR, DirCloser>;

std::vector<std::string> listDir(const std::string& path) {
  std::vector<std::string> out;
  UniqueDir d(::opendir(path.c_str()));
  if (!d) return out;
  while (dirent* e = ::readdir(d.get()))
    if (e->d_name[0] != '.') out.push_back(e->d_name);
  std::sort(out.begin(), out.end());
  return out;
}

// The first line of a small sysfs file; nullopt when it cannot be read (sysfs attributes the
// driver does not support fail with EINVAL or EOPNOTSUPP on read).
std::optional<std::string> readSmall(const std::string& path) {
  UniqueFD fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.isValid()) return std::nullopt;
  char buf[128];
  ssize_t n;
  do n = ::read(fd.get(), buf, sizeof buf);
  while (n < 0 && errno == EINTR);
  if (n < 0) return std::nullopt;
  std::string s(buf, size_t(n));
  if (auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  return s;
}

std::optional<uint64_t> parseDecimal(const std::string& s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    uint64_t d = uint64_t(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

bool isRegular(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// ioctl(SIOCETHTOOL) on IFNAME with DATA as the request; -errno on failure.
int ethtoolIoctl(int fd, const std::string& ifname, void* data) {
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, ifname.data(), ifname.size());
  ifr.ifr_data = static_cast<char*>(data);
  int r;
  do r = ::ioctl(fd, SIOCETHTOOL, &ifr);
  while (r < 0 && errno == EINTR);
  return r < 0 ? -errno : 0;
}

// The kernel answers GSTRINGS and GSTATS with however many entries the driver has *now*, not
// with the count we asked for: a buffer sized to the earlier count would overflow if the driver
// grew in between (mlx5 does when channels or private flags change). Slack absorbs that, and
// a changed count makes the caller ask again.
constexpr size_t kEthtoolSlack = 1024;

}  // namespace

bool readCounterDir(const std::string& dir, const std::string& prefix, Counters& out) {
  UniqueDir d(::opendir(dir.c_str()));
  if (!d) return false;
  size_t taken = 0;
  while (dirent* e = ::readdir(d.get())) {
    if (e->d_name[0] == '.') continue;
    std::string name = e->d_name;
    if (name.size() > kMaxNameLength) continue;
    if (taken >= kMaxCountersPerSource) break;
    std::string path = dir + "/" + name;
    if (e->d_type != DT_REG && !(e->d_type == DT_UNKNOWN && isRegular(path))) continue;
    auto text = readSmall(path);
    if (!text) continue;
    auto v = parseDecimal(*text);
    if (!v) continue;
    out[prefix + name] = *v;
    taken++;
  }
  return true;
}

Result<Counters> readNetStatistics(const std::string& sysRoot, const std::string& ifname) {
  if (!validIfname(ifname)) return makeError("'" + ifname + "' is not an interface name");
  const std::string dev = sysRoot + "/class/net/" + ifname;
  struct stat st;
  if (::stat(dev.c_str(), &st) != 0)
    return makeError("interface '" + ifname + "' is not in " + sysRoot +
                         "/class/net (not in this network namespace, or sysfs is not mounted for it)",
                     ENODEV);
  Counters out;
  readCounterDir(dev + "/statistics", "net.", out);
  return out;
}

std::optional<RdmaPort> rdmaPortOf(const std::string& sysRoot, const std::string& ifname) {
  if (!validIfname(ifname)) return std::nullopt;
  const std::string ib = sysRoot + "/class/infiniband";
  for (const auto& dev : listDir(ib)) {
    for (const auto& port : listDir(ib + "/" + dev + "/ports")) {
      auto n = parseDecimal(port);
      if (!n || *n == 0 || *n > 255) continue;
      const std::string ndevs = ib + "/" + dev + "/ports/" + port + "/gid_attrs/ndevs";
      // A GID table has up to a few hundred entries; unused ones fail to read.
      size_t looked = 0;
      for (const auto& idx : listDir(ndevs)) {
        if (++looked > kMaxCountersPerSource) break;
        if (readSmall(ndevs + "/" + idx) == ifname) return RdmaPort{dev, int(*n)};
      }
    }
  }
  // IPoIB (and RoCE without a populated GID table): the PCI device's RDMA device and the
  // interface's port index.
  const std::string viaPci = sysRoot + "/class/net/" + ifname + "/device/infiniband";
  auto devs = listDir(viaPci);
  if (devs.size() == 1) {
    uint64_t devPort = 0;
    if (auto s = readSmall(sysRoot + "/class/net/" + ifname + "/dev_port"))
      devPort = parseDecimal(*s).value_or(0);
    if (devPort < 255) return RdmaPort{devs.front(), int(devPort) + 1};
  }
  return std::nullopt;
}

Counters readRdmaPort(const std::string& sysRoot, const RdmaPort& port) {
  Counters out;
  const std::string base = sysRoot + "/class/infiniband/" + port.device + "/ports/" +
                           std::to_string(port.port);
  readCounterDir(base + "/counters", "rdma.", out);
  readCounterDir(base + "/hw_counters", "rdma.", out);
  // hw_counters/lifespan is the driver's cache period in ms, a setting and not a counter.
  out.erase("rdma.lifespan");
  return out;
}

Counters decodeEthtoolStats(const char* names, size_t n, const uint64_t* values) {
  Counters out;
  for (size_t i = 0; i < n && i < kMaxCountersPerSource; i++) {
    const char* s = names + i * ETH_GSTRING_LEN;
    std::string name(s, ::strnlen(s, ETH_GSTRING_LEN));
    // Drivers pad names with spaces now and then (older ones indent sub-counters).
    while (!name.empty() && name.front() == ' ') name.erase(name.begin());
    while (!name.empty() && name.back() == ' ') name.pop_back();
    if (name.empty()) continue;
    out[name] = values[i];
  }
  return out;
}

Result<EthtoolSocket> EthtoolSocket::open() {
  UniqueFD fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.isValid())
    return makeError(std::string("cannot open a socket for ethtool statistics: ") +
                         std::strerror(errno),
                     errno);
  return EthtoolSocket(std::move(fd));
}

Result<Counters> EthtoolSocket::stats(const std::string& ifname) const {
  if (!validIfname(ifname)) return makeError("'" + ifname + "' is not an interface name");
  for (int attempt = 0; attempt < 3; attempt++) {
    // How many statistics the driver has.
    // The header and one u32 after it: the count of the one set asked for.
    alignas(ethtool_sset_info) uint8_t ibuf[sizeof(ethtool_sset_info) + sizeof(uint32_t)] = {};
    auto* info = reinterpret_cast<ethtool_sset_info*>(ibuf);
    info->cmd = ETHTOOL_GSSET_INFO;
    info->sset_mask = 1ull << ETH_SS_STATS;
    if (int r = ethtoolIoctl(fd_.get(), ifname, info); r < 0) {
      if (r == -EOPNOTSUPP || r == -EINVAL) return Counters{};  // a driver without statistics
      return makeError("ethtool statistics of '" + ifname + "': " + std::strerror(-r), -r);
    }
    uint32_t count = 0;
    std::memcpy(&count, ibuf + sizeof(ethtool_sset_info), sizeof count);
    if (!(info->sset_mask & (1ull << ETH_SS_STATS)) || count == 0) return Counters{};
    const size_t n = std::min<size_t>(count, kMaxCountersPerSource);
    const size_t cap = n + kEthtoolSlack;

    std::vector<uint8_t> sbuf(sizeof(ethtool_gstrings) + cap * ETH_GSTRING_LEN);
    auto* gs = reinterpret_cast<ethtool_gstrings*>(sbuf.data());
    gs->cmd = ETHTOOL_GSTRINGS;
    gs->string_set = ETH_SS_STATS;
    gs->len = uint32_t(n);
    if (int r = ethtoolIoctl(fd_.get(), ifname, gs); r < 0)
      return makeError("ethtool statistic names of '" + ifname + "': " + std::strerror(-r), -r);

    std::vector<uint64_t> vbuf(1 + (sizeof(ethtool_stats) + cap * sizeof(uint64_t)) / sizeof(uint64_t));
    auto* st = reinterpret_cast<ethtool_stats*>(vbuf.data());
    st->cmd = ETHTOOL_GSTATS;
    st->n_stats = uint32_t(n);
    if (int r = ethtoolIoctl(fd_.get(), ifname, st); r < 0)
      return makeError("ethtool statistics of '" + ifname + "': " + std::strerror(-r), -r);

    if (gs->len != n || st->n_stats != n) continue;  // the driver changed between the calls
    std::vector<uint64_t> values(n);
    std::memcpy(values.data(), st->data, n * sizeof(uint64_t));
    return decodeEthtoolStats(reinterpret_cast<const char*>(gs->data), n, values.data());
  }
  return makeError("ethtool statistics of '" + ifname +
                   "' kept changing size between reads (the driver is reconfiguring); try again");
}

Result<NicSampler> NicSampler::create(std::string ifname, SamplerOptions options) {
  if (!validIfname(ifname)) return makeError("'" + ifname + "' is not an interface name");
  NicSampler s;
  s.ifname_ = std::move(ifname);
  s.options_ = std::move(options);
  s.rdma_ = rdmaPortOf(s.options_.sysRoot, s.ifname_);
  if (s.options_.ethtool) {
    auto sock = EthtoolSocket::open();
    if (!sock) return sock.error();
    s.ethtool_ = std::move(*sock);
  }
  // The interface must be there now; it may go later (a sample then says so).
  if (auto first = readNetStatistics(s.options_.sysRoot, s.ifname_); !first) return first.error();
  return s;
}

Result<Counters> NicSampler::sample() const {
  auto net = readNetStatistics(options_.sysRoot, ifname_);
  if (!net) return net.error();
  Counters out = std::move(*net);
  if (ethtool_) {
    auto e = ethtool_->stats(ifname_);
    if (!e) return e.error();
    out.merge(*e);
  }
  if (rdma_) out.merge(readRdmaPort(options_.sysRoot, *rdma_));
  return out;
}

}  // namespace rc::counters
