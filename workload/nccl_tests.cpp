#include "workload/nccl_tests.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace rc::workload {

namespace {

std::string_view ncTrim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::vector<std::string> ncWords(std::string_view s) {
  std::vector<std::string> out;
  std::istringstream in{std::string(s)};
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string ncJoined(const std::vector<std::string>& w) {
  std::string out;
  for (const auto& x : w) out += (out.empty() ? "" : " ") + x;
  return out;
}

bool ncStartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::optional<uint64_t> ncUnsigned(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0) return std::nullopt;
  return uint64_t(v);
}

std::optional<double> ncNumber(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !(v == v)) return std::nullopt;
  return v;
}

// Where each column of the table's header sits. The current layout is
//   size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
// (the first group out of place, the second in place); older releases print no root and
// "error" for "#wrong". Positions are found by name, so both read alike.
struct NcclLayout {
  std::vector<std::string> names;
  int size = -1, count = -1, type = -1, redop = -1, root = -1;
  std::vector<int> halves;  // the index of each group's "time"
  int line = 0;
};

std::optional<NcclLayout> ncclLayoutOf(const std::vector<std::string>& names, int line) {
  NcclLayout l;
  l.names = names;
  l.line = line;
  for (int i = 0; i < int(names.size()); i++) {
    const std::string& n = names[size_t(i)];
    if (n == "size") l.size = i;
    else if (n == "count") l.count = i;
    else if (n == "type") l.type = i;
    else if (n == "redop") l.redop = i;
    else if (n == "root") l.root = i;
    else if (n == "time") l.halves.push_back(i);
  }
  if (l.size < 0 || l.halves.empty()) return std::nullopt;
  for (int t : l.halves) {
    if (t + 3 >= int(names.size()) || names[size_t(t + 1)] != "algbw" || names[size_t(t + 2)] != "busbw" ||
        (names[size_t(t + 3)] != "#wrong" && names[size_t(t + 3)] != "error"))
      return std::nullopt;
  }
  return l;
}

std::string ncLine(int line) { return "line " + std::to_string(line); }

}  // namespace

uint64_t NcclTestsReport::wrongTotal() const {
  uint64_t n = 0;
  for (const auto& r : rows) n += r.outOfPlace.wrong.value_or(0) + r.inPlace.wrong.value_or(0);
  return n;
}

const NcclTestsRow* NcclTestsReport::largest() const {
  const NcclTestsRow* best = nullptr;
  for (const auto& r : rows)
    if (!best || r.bytes >= best->bytes) best = &r;
  return best;
}

std::vector<std::string> NcclTestsReport::problems() const {
  std::vector<std::string> out;
  for (const auto& f : failures) out.push_back("nccl-tests reported a failure: " + f);
  for (const auto& r : rows) {
    const uint64_t w = r.outOfPlace.wrong.value_or(0) + r.inPlace.wrong.value_or(0);
    if (w > 0)
      out.push_back("nccl-tests found " + std::to_string(w) + " wrong value(s) at " + std::to_string(r.bytes) +
                    " B (" + ncLine(r.line) + "): the collective's result was corrupt");
  }
  if (outOfBounds && *outOfBounds > 0)
    out.push_back("nccl-tests counted " + std::to_string(*outOfBounds) + " out-of-bounds value(s) (FAILED in its summary)");
  if (!complete())
    out.push_back(rows.empty() && failures.empty()
                      ? "nccl-tests printed no result row: the job ended before its first size"
                      : "nccl-tests ended before its summary (\"# Avg bus bandwidth\"): the job was killed or failed " +
                            std::string(rows.empty() ? "before its first size" : "after " + std::to_string(rows.size()) + " size(s)"));
  return out;
}

Result<NcclTestsReport> parseNcclTests(std::string_view text) {
  NcclTestsReport rep;
  std::optional<NcclLayout> layout;
  double timeScale = 1;  // to µs
  std::vector<std::string_view> lines;
  for (size_t at = 0; at <= text.size();) {
    size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) nl = text.size();
    lines.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  while (!lines.empty() && ncTrim(lines.back()).empty()) lines.pop_back();

  for (size_t i = 0; i < lines.size(); i++) {
    const int lineNo = int(i) + 1;
    const std::string_view line = ncTrim(lines[i]);
    if (line.empty()) continue;
    if (line.front() == '#') {
      const std::string_view body = ncTrim(line.substr(1));
      const auto w = ncWords(body);
      if (w.empty()) continue;
      if (w[0] == "nThread") {
        for (size_t k = 0; k + 1 < w.size(); k++) {
          auto v = ncUnsigned(w[k + 1]);
          if (!v) continue;
          if (w[k] == "nThread") rep.nThread = int(*v);
          else if (w[k] == "nGpus") rep.nGpus = int(*v);
          else if (w[k] == "validation:") rep.validation = *v != 0;
          else if (w[k] == "iters:") {
            const std::string before = k > 0 ? w[k - 1] : "";
            if (before == "warmup") rep.warmupIters = int(*v);
            else if (before != "agg") rep.iters = int(*v);
          }
        }
      } else if (w[0] == "Rank") {
        rep.devices.push_back(ncJoined(w));
      } else if (w[0] == "size" || (w.size() > 2 && std::find(w.begin(), w.end(), "busbw") != w.end())) {
        layout = ncclLayoutOf(w, lineNo);
        if (!layout)
          return makeError(ncLine(lineNo) + ": a table header nccl-tests does not print (\"" + ncJoined(w) +
                           "\"; expected size, count, type, redop, root, then time, algbw, busbw and #wrong out of "
                           "place and in place)");
      } else if (w[0] == "(B)") {
        if (std::find(w.begin(), w.end(), "(ms)") != w.end()) timeScale = 1000;
        else if (std::find(w.begin(), w.end(), "(s)") != w.end()) timeScale = 1e6;
      } else if (ncStartsWith(body, "Out of bounds values")) {
        size_t colon = body.find(':');
        if (colon != std::string_view::npos) {
          auto v = ncWords(body.substr(colon + 1));
          if (!v.empty()) rep.outOfBounds = ncUnsigned(v[0]);
        }
      } else if (ncStartsWith(body, "Avg bus bandwidth")) {
        size_t colon = body.find(':');
        auto v = colon == std::string_view::npos ? std::vector<std::string>{} : ncWords(body.substr(colon + 1));
        auto bw = v.empty() ? std::nullopt : ncNumber(v[0]);
        if (!bw)
          return makeError(ncLine(lineNo) + ": \"# Avg bus bandwidth\" without a number (\"" + std::string(body) + "\")");
        rep.avgBusbwGBps = bw;
      }
      continue;
    }
    if (line.find("NCCL failure") != std::string_view::npos || line.find("CUDA failure") != std::string_view::npos ||
        line.find("Test failure") != std::string_view::npos) {
      rep.failures.push_back(ncLine(lineNo) + ": " + std::string(line));
      continue;
    }
    const auto w = ncWords(line);
    if (!layout || w.empty() || !ncUnsigned(w[0])) continue;  // NCCL INFO, mpirun and other lines
    const bool last = i + 1 == lines.size();
    if (w.size() != layout->names.size()) {
      if (last) break;  // the run was cut off while printing its last row: complete() says so
      return makeError(ncLine(lineNo) + ": " + std::to_string(w.size()) + " fields where the header (" +
                       ncLine(layout->line) + ") names " + std::to_string(layout->names.size()) + " (" +
                       ncJoined(layout->names) + "): \"" + std::string(line) + "\"");
    }
    NcclTestsRow row;
    row.line = lineNo;
    auto bad = [&](const std::string& col, const std::string& v) {
      return makeError(ncLine(lineNo) + ": column " + col + " is \"" + v + "\", not a number");
    };
    row.bytes = *ncUnsigned(w[size_t(layout->size)]);
    if (layout->count >= 0) {
      auto c = ncUnsigned(w[size_t(layout->count)]);
      if (!c) return bad("count", w[size_t(layout->count)]);
      row.count = *c;
    }
    if (layout->type >= 0) row.type = w[size_t(layout->type)];
    if (layout->redop >= 0) row.redop = w[size_t(layout->redop)];
    if (layout->root >= 0) {
      auto r = ncNumber(w[size_t(layout->root)]);
      if (!r) return bad("root", w[size_t(layout->root)]);
      row.root = int(*r);
    }
    for (size_t h = 0; h < layout->halves.size() && h < 2; h++) {
      const size_t t = size_t(layout->halves[h]);
      NcclTestsHalf half;
      auto time = ncNumber(w[t]), alg = ncNumber(w[t + 1]), bus = ncNumber(w[t + 2]);
      if (!time) return bad("time", w[t]);
      if (!alg) return bad("algbw", w[t + 1]);
      if (!bus) return bad("busbw", w[t + 2]);
      half.timeUs = *time * timeScale;
      half.algbwGBps = *alg;
      half.busbwGBps = *bus;
      const std::string& check = w[t + 3];
      if (check != "N/A") {
        if (layout->names[t + 3] == "#wrong") {
          auto n = ncUnsigned(check);
          if (!n) return bad("#wrong", check);
          half.wrong = n;
        } else {
          auto e = ncNumber(check);
          if (!e) return bad("error", check);
          half.maxError = e;
        }
      }
      (h == 0 ? row.outOfPlace : row.inPlace) = half;
    }
    rep.rows.push_back(std::move(row));
  }
  if (!layout && rep.failures.empty())
    return makeError("no nccl-tests table in the output (a header line \"#  size  count  type  redop  root  time  algbw  "
                     "busbw  #wrong ...\"): is this the standard output of an nccl-tests program such as all_reduce_perf?");
  return rep;
}

}  // namespace rc::workload
