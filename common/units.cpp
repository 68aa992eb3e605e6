// Unit parsing: every value is checked for sign, overflow and a known suffix.
#include "common/units.hpp"

#include <cmath>
#include <cstdio>
#include <utility>

namespace rc {
namespace {

struct Split {
  double number;
  std::string_view suffix;
};

Result<Split> splitNumber(std::string_view text, std::string_view what) {
  std::string s(text);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  size_t start = 0;
  while (start < s.size() && s[start] == ' ') start++;
  s = s.substr(start);
  if (s.empty()) return makeError("empty " + std::string(what));
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) i++;
  if (i == 0)
    return makeError("'" + s + "' is not a " + std::string(what) + ": it must start with a number");
  double n = 0;
  try {
    size_t used = 0;
    n = std::stod(s.substr(0, i), &used);
    if (used != i) throw std::invalid_argument("junk");
  } catch (...) {
    return makeError("'" + s + "' is not a " + std::string(what));
  }
  if (!std::isfinite(n) || n < 0) return makeError("'" + s + "' is out of range");
  return Split{n, std::string_view(text).substr(text.find(s) + i, s.size() - i)};
}

}  // namespace

Result<Nanos> parseDuration(std::string_view text) {
  auto sp = splitNumber(text, "duration");
  if (!sp) return sp.error();
  static const std::pair<std::string_view, double> units[] = {
      {"ns", 1},         {"us", 1e3},        {"ms", 1e6},           {"s", 1e9},
      {"m", 60e9},       {"min", 60e9},      {"h", 3600e9},
  };
  std::string_view suf = sp->suffix;
  if (suf.empty()) {
    if (sp->number == 0) return Nanos(0);
    return makeError("duration '" + std::string(text) +
                     "' needs a unit: write it as e.g. \"500ms\", \"2s\" or \"1m\"");
  }
  for (auto& [name, mult] : units) {
    if (suf == name) {
      double ns = sp->number * mult;
      if (ns > 9.2e18) return makeError("duration '" + std::string(text) + "' is too large");
      return Nanos(int64_t(std::llround(ns)));
    }
  }
  return makeError("duration '" + std::string(text) + "' has unknown unit '" + std::string(suf) +
                   "': use ns, us, ms, s, m or h");
}

Result<uint64_t> parseSize(std::string_view text) {
  auto sp = splitNumber(text, "size");
  if (!sp) return sp.error();
  static const std::pair<std::string_view, double> units[] = {
      {"", 1},          {"B", 1},         {"KiB", 1024.0},        {"MiB", 1048576.0},
      {"GiB", 1073741824.0}, {"kB", 1e3}, {"KB", 1e3},            {"MB", 1e6},
      {"GB", 1e9},      {"K", 1024.0},    {"M", 1048576.0},       {"G", 1073741824.0},
  };
  for (auto& [name, mult] : units) {
    if (sp->suffix == name) {
      double b = sp->number * mult;
      if (b > 1.8e19) return makeError("size '" + std::string(text) + "' is too large");
      if (b != std::floor(b))
        return makeError("size '" + std::string(text) + "' is not a whole number of bytes");
      return uint64_t(b);
    }
  }
  return makeError("size '" + std::string(text) + "' has unknown unit '" +
                   std::string(sp->suffix) + "': use B, KiB, MiB, GiB, kB, MB or GB");
}

Result<uint64_t> parseBitRate(std::string_view text) {
  auto sp = splitNumber(text, "bit rate");
  if (!sp) return sp.error();
  static const std::pair<std::string_view, double> units[] = {
      {"bps", 1}, {"Kbps", 1e3}, {"kbps", 1e3}, {"Mbps", 1e6}, {"Gbps", 1e9}, {"Tbps", 1e12},
      // The short forms `lab up --rate` and switch vendors write ("500M", "25G").
      {"K", 1e3}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
  };
  for (auto& [name, mult] : units) {
    if (sp->suffix == name) {
      double b = sp->number * mult;
      if (b > 1.8e19) return makeError("bit rate '" + std::string(text) + "' is too large");
      return uint64_t(std::llround(b));
    }
  }
  return makeError("bit rate '" + std::string(text) + "' has unknown unit '" +
                   std::string(sp->suffix) + "': use bps, Kbps, Mbps, Gbps or Tbps (or K, M, G, T)");
}

Result<double> parsePerSecond(std::string_view text) {
  auto sp = splitNumber(text, "rate");
  if (!sp) return sp.error();
  if (sp->suffix.empty() || sp->suffix == "/s") return sp->number;
  return makeError("rate '" + std::string(text) + "' must be written as \"5000/s\"");
}

std::string formatDuration(Nanos d) {
  char buf[64];
  double ns = double(d.count());
  double a = std::fabs(ns);
  if (a >= 1e9)
    std::snprintf(buf, sizeof buf, "%.3fs", ns / 1e9);
  else if (a >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3gms", ns / 1e6);
  else if (a >= 1e3)
    std::snprintf(buf, sizeof buf, "%.3gus", ns / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0fns", ns);
  return buf;
}

std::string formatSize(uint64_t bytes) {
  char buf[64];
  double b = double(bytes);
  if (b >= 1073741824.0)
    std::snprintf(buf, sizeof buf, "%.1fGiB", b / 1073741824.0);
  else if (b >= 1048576.0)
    std::snprintf(buf, sizeof buf, "%.1fMiB", b / 1048576.0);
  else if (b >= 1024.0)
    std::snprintf(buf, sizeof buf, "%.1fKiB", b / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%lluB", static_cast<unsigned long long>(bytes));
  return buf;
}

std::string formatBitRate(double bps) {
  char buf[64];
  if (bps >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fGb/s", bps / 1e9);
  else if (bps >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fMb/s", bps / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.0fb/s", bps);
  return buf;
}

}  // namespace rc
