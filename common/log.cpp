// Logging implementation: a mutex keeps lines whole across threads.
#include "common/log.hpp"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

#include "common/clock.hpp"

namespace rc::log {
namespace {
std::atomic<Level> g_level{Level::info};
std::mutex g_mutex;
std::string g_component = "rdmachaos";
}  // namespace

void setLevel(Level l) { g_level = l; }
Level level() { return g_level; }
void setComponent(std::string_view name) {
  std::lock_guard lock(g_mutex);
  g_component = name;
}

void write(Level l, std::string_view message) {
  static const char* names[] = {"debug", "info", "warn", "error"};
  int64_t now = wallNs();
  time_t secs = now / 1'000'000'000;
  tm t{};
  localtime_r(&secs, &t);
  std::lock_guard lock(g_mutex);
  std::fprintf(stderr, "%02d:%02d:%02d.%03d %s %s: %.*s\n", t.tm_hour, t.tm_min, t.tm_sec,
               int((now / 1'000'000) % 1000), g_component.c_str(), names[int(l)],
               int(message.size()), message.data());
}

}  // namespace rc::log
