// The monitoring a test starts for itself: a real Prometheus and a real Alertmanager (Debian's
// packages) on loopback, each with its own directory and a free port, stopped by its PID when
// the object goes (and killed by the kernel if the test dies first).
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "http_get.hpp"

namespace rctest {

inline const char* kPrometheusBin = "/usr/bin/prometheus";
inline const char* kAlertmanagerBin = "/usr/bin/prometheus-alertmanager";

inline int freeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
  ::close(fd);
  return ntohs(sa.sin_port);
}

// A server process with its output in LOG, stopped with SIGTERM (then SIGKILL) by its PID.
class ServerProcess {
 public:
  ServerProcess(const std::string& log, const std::vector<std::string>& argv) : log_(log) {
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
  }
  ~ServerProcess() {
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 100; i++) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  const std::string& log() const { return log_; }
  std::string logText() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  pid_t pid_ = -1;
  std::string log_;
};

inline std::string urlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-') {
      out += char(c);
    } else {
      char b[4];
      std::snprintf(b, sizeof b, "%%%02X", c);
      out += b;
    }
  }
  return out;
}

class Prometheus {
 public:
  // CONFIG: a prometheus.yml; the TSDB goes under DIR.
  Prometheus(const std::string& dir, const std::string& config, int port)
      : port_(port),
        proc_(dir + "/prometheus.log",
              {kPrometheusBin, "--config.file=" + config, "--storage.tsdb.path=" + dir + "/prometheus-data",
               "--web.listen-address=127.0.0.1:" + std::to_string(port), "--log.level=warn"}) {}

  bool ready() const { return httpGet("127.0.0.1", port_, "/-/ready").status == 200; }
  const std::string& log() const { return proc_.log(); }
  std::string logText() const { return proc_.logText(); }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // An instant query's result vector.
  nlohmann::json query(const std::string& expr) const {
    auto r = httpGet("127.0.0.1", port_, "/api/v1/query?query=" + urlEncode(expr));
    if (r.status != 200) return nlohmann::json::array();
    return nlohmann::json::parse(r.body)["data"]["result"];
  }
  // A range query's result matrix: [{metric: {...}, values: [[t, "v"], ...]}, ...].
  nlohmann::json range(const std::string& expr, double from, double to, double step) const {
    char q[128];
    std::snprintf(q, sizeof q, "&start=%.3f&end=%.3f&step=%.3f", from, to, step);
    auto r = httpGet("127.0.0.1", port_, "/api/v1/query_range?query=" + urlEncode(expr) + q);
    INFO("query_range " << expr << ": HTTP " << r.status << " " << r.body);
    REQUIRE(r.status == 200);
    return nlohmann::json::parse(r.body)["data"]["result"];
  }

 private:
  int port_;
  ServerProcess proc_;
};

// An Alertmanager configuration for a game day: every alert to one webhook at ENDPOINT
// (ADDR:PORT) at once (group_wait 0, group_interval 1 s) and again when it resolves. With
// GROUP_BY "..." every alert is its own group.
inline void writeAlertmanagerConfig(const std::string& path, const std::string& endpoint,
                                    const std::string& groupBy = "...") {
  std::ofstream(path) << "route:\n"
                      << "  receiver: rdmachaos\n"
                      << "  group_by: ['" << groupBy << "']\n"
                      << "  group_wait: 0s\n"
                      << "  group_interval: 1s\n"
                      << "  repeat_interval: 1h\n"
                      << "receivers:\n"
                      << "  - name: rdmachaos\n"
                      << "    webhook_configs:\n"
                      << "      - url: 'http://" << endpoint << "/alerts'\n"
                      << "        send_resolved: true\n";
}

// Alertmanager without clustering (no gossip port), its data under DIR.
class Alertmanager {
 public:
  Alertmanager(const std::string& dir, const std::string& config, int port)
      : port_(port),
        proc_(dir + "/alertmanager.log",
              {kAlertmanagerBin, "--config.file=" + config, "--storage.path=" + dir + "/alertmanager-data",
               "--web.listen-address=127.0.0.1:" + std::to_string(port), "--cluster.listen-address=",
               "--log.level=warn"}) {}

  bool ready() const { return httpGet("127.0.0.1", port_, "/-/ready").status == 200; }
  const std::string& log() const { return proc_.log(); }
  std::string logText() const { return proc_.logText(); }
  int port() const { return port_; }

 private:
  int port_;
  ServerProcess proc_;
};

// Waits up to LIMIT for READY(); false when it never was.
template <class F>
bool waitReady(F ready, std::chrono::seconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (!ready()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return true;
}

}  // namespace rctest
