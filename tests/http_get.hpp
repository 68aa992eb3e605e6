// A minimal blocking HTTP/1.0 GET for tests that read what a server really serves on
// loopback (Prometheus's API, the exporters' /metrics): no client library in the loop.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>

namespace rctest {

struct HttpReply {
  int status = 0;  // 0: no connection or no reply
  std::string body;
};

// METHOD PATH on ADDR:PORT (IPv4) with BODY (JSON) when not empty; 5 s receive timeout.
inline HttpReply httpRequest(const std::string& method, const std::string& addr, int port, const std::string& path,
                             const std::string& body = "") {
  HttpReply out;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return out;
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(port));
  ::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return out;
  }
  std::string req = method + " " + path + " HTTP/1.0\r\nHost: " + addr + "\r\nConnection: close\r\n";
  if (!body.empty())
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  if (::write(fd, req.data(), req.size()) != ssize_t(req.size())) {
    ::close(fd);
    return out;
  }
  std::string raw;
  char buf[8192];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) raw.append(buf, size_t(n));
  ::close(fd);
  auto sp = raw.find(' ');
  auto head = raw.find("\r\n\r\n");
  if (sp == std::string::npos || head == std::string::npos) return out;
  out.status = std::atoi(raw.c_str() + sp + 1);
  out.body = raw.substr(head + 4);
  return out;
}

inline HttpReply httpGet(const std::string& addr, int port, const std::string& path) {
  return httpRequest("GET", addr, port, path);
}
inline HttpReply httpPost(const std::string& addr, int port, const std::string& path, const std::string& body) {
  return httpRequest("POST", addr, port, path, body);
}

}  // namespace rctest
