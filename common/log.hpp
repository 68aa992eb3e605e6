// Minimal leveled logging to stderr: one line per event, timestamped, with the component.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace rc::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3 };

void setLevel(Level level);
Level level();
void setComponent(std::string_view name);  // e.g. "agent node1"
void write(Level level, std::string_view message);

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::debug) write(Level::debug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::info) write(Level::info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::error, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace rc::log
