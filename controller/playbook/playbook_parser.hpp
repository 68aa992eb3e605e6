// The playbook parser's class (playbook_parser.cpp: the playbook and its scenarios;
// playbook_parser_steps.cpp: steps, expectations, sweeps, detects; playbook_search.cpp: [search]).
// Internal to the parser.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>
#include <toml++/toml.h>

#include "common/protocol.hpp"
#include "common/toml_text.hpp"
#include "common/units.hpp"
#include "controller/playbook/playbook.hpp"
#include "controller/playbook/playbook_internal.hpp"
#include "faults/fault.hpp"
#include "workload/kinds.hpp"

namespace rc::controller::detail {

class Parser {
 public:
  explicit Parser(std::string path) : path_(std::move(path)) {}

  std::string at(const toml::source_region& r) const {
    return path_ + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
  }
  std::string at(const SourcePos& p) const {
    return path_ + ":" + std::to_string(p.line) + ":" + std::to_string(p.column);
  }
  [[noreturn]] void fail(const toml::node& n, const std::string& msg) const {
    throw Fail{at(n.source()) + ": " + msg};
  }
  [[noreturn]] void fail(const SourcePos& p, const std::string& msg) const {
    throw Fail{at(p) + ": " + msg};
  }
  static SourcePos pos(const toml::node& n) {
    return {int(n.source().begin.line), int(n.source().begin.column)};
  }

  // Runs one part of the playbook (a table, a step, an expectation...): its error is recorded
  // and parsing goes on with the next part, so that one pass reports every error of a file.
  // False when the part failed. An empty message is a part whose errors its own parts recorded.
  template <class F>
  bool part(F&& f) const {
    try {
      f();
      return true;
    } catch (const Fail& e) {
      if (!e.message.empty()) errors_.push_back(e.message);
      return false;
    }
  }
  // Every recorded error, sorted by position, one per line, then the notes of what was not
  // checked because of them; none: empty.
  std::string errors() const;
  // A note said after the errors (what a pass could not check), never an error by itself.
  void note(const SourcePos& p, const std::string& msg) const { notes_.push_back(at(p) + ": note: " + msg); }

  // Unknown keys are recorded (each of them) and otherwise ignored.
  void checkKeys(const toml::table& t, std::initializer_list<const char*> known,
                 const std::string& what) const {
    for (auto&& [k, v] : t) {
      // A copy: clang 14 cannot capture a structured binding.
      const std::string_view key = k.str();
      bool ok = std::any_of(known.begin(), known.end(), [&](const char* n) { return key == n; });
      if (!ok) {
        std::vector<std::string> names(known.begin(), known.end());
        errors_.push_back(at(v.source()) + ": unknown key '" + std::string(k.str()) + "' in " + what + " (known: " +
                          joinNames(names) + ")");
      }
    }
  }

  const toml::table& table(const toml::node& n, const std::string& what) const {
    if (!n.is_table()) fail(n, what + " must be a table");
    return *n.as_table();
  }

  std::string str(const toml::node& n, const std::string& what, size_t maxLen = 128) const {
    if (!n.is_string()) fail(n, what + " must be a string");
    const std::string& s = n.as_string()->get();
    if (s.size() > maxLen)
      fail(n, what + " is longer than " + std::to_string(maxLen) + " characters");
    return s;
  }

  std::string name(const toml::node& n, const std::string& what) const {
    std::string s = str(n, what, 64);
    bool ok = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    });
    if (!ok) fail(n, what + " '" + s + "' must be 1-64 characters of A-Z a-z 0-9 - _ .");
    return s;
  }

  int64_t integer(const toml::node& n, const std::string& what, int64_t lo, int64_t hi) const {
    auto v = n.value_exact<int64_t>();
    if (!v) fail(n, what + " must be an integer");
    if (*v < lo || *v > hi)
      fail(n, what + " = " + std::to_string(*v) + " is out of range [" + std::to_string(lo) +
                  ", " + std::to_string(hi) + "]");
    return *v;
  }

  double number(const toml::node& n, const std::string& what, double lo, double hi) const {
    std::optional<double> v;
    if (n.is_integer()) v = double(n.as_integer()->get());
    if (n.is_floating_point()) v = n.as_floating_point()->get();
    if (!v) fail(n, what + " must be a number");
    if (!std::isfinite(*v) || *v < lo || *v > hi) {
      char buf[160];
      std::snprintf(buf, sizeof buf, " = %g is out of range [%g, %g]", *v, lo, hi);
      fail(n, what + buf);
    }
    return *v;
  }

  bool boolean(const toml::node& n, const std::string& what) const {
    if (!n.is_boolean()) fail(n, what + " must be true or false");
    return n.as_boolean()->get();
  }

  int64_t duration(const toml::node& n, const std::string& what, int64_t lo, int64_t hi) const {
    if (n.is_integer() || n.is_floating_point())
      fail(n, what + " must be a duration with a unit in quotes, e.g. \"500ms\" or \"10s\"");
    if (!n.is_string()) fail(n, what + " must be a duration string, e.g. \"500ms\"");
    auto d = parseDuration(n.as_string()->get());
    if (!d) fail(n, what + ": " + d.error().message);
    int64_t v = d->count();
    if (v < lo || v > hi)
      fail(n, what + " = " + fmtDur(v) + " is out of range [" + fmtDur(lo) + ", " + fmtDur(hi) + "]");
    return v;
  }

  uint64_t size(const toml::node& n, const std::string& what, uint64_t lo, uint64_t hi) const {
    uint64_t v = 0;
    if (auto i = n.value_exact<int64_t>()) {
      if (*i < 0) fail(n, what + " must not be negative");
      v = uint64_t(*i);
    } else if (n.is_string()) {
      auto s = parseSize(n.as_string()->get());
      if (!s) fail(n, what + ": " + s.error().message);
      v = *s;
    } else {
      fail(n, what + " must be a size, e.g. \"4MiB\"");
    }
    if (v < lo || v > hi)
      fail(n, what + " = " + formatSize(v) + " is out of range [" + formatSize(lo) + ", " +
                  formatSize(hi) + "]");
    return v;
  }

  // Bit rates are written as on a datasheet ("1Gbps"); scoring works in bytes per second.
  double bitRateAsBytes(const toml::node& n, const std::string& what) const {
    if (!n.is_string()) fail(n, what + " must be a bit rate in quotes, e.g. \"10Gbps\"");
    auto r = parseBitRate(n.as_string()->get());
    if (!r) fail(n, what + ": " + r.error().message);
    if (*r > 100'000'000'000'000ull) fail(n, what + " is above 100Tbps");
    return double(*r) / 8.0;
  }

  json value(const toml::node& n, const std::string& what) const {
    if (n.is_string()) return n.as_string()->get();
    if (n.is_integer()) return n.as_integer()->get();
    if (n.is_floating_point()) return n.as_floating_point()->get();
    if (n.is_boolean()) return n.as_boolean()->get();
    if (n.is_array()) {
      const auto& a = *n.as_array();
      if (a.size() > 64) fail(n, what + " has more than 64 elements");
      json out = json::array();
      for (const auto& e : a) {
        if (e.is_array() || e.is_table()) fail(e, what + " must be a flat list");
        out.push_back(value(e, what));
      }
      return out;
    }
    fail(n, what + " must be a string, number, boolean or list");
  }

  Selector selector(const toml::node& n, const std::string& what) const {
    Selector s;
    s.pos = pos(n);
    auto addNames = [&](const toml::node& v) {
      if (v.is_string()) {
        s.names.push_back(name(v, what));
      } else if (v.is_array()) {
        const auto& a = *v.as_array();
        if (a.empty()) fail(v, what + " must name at least one node, role or 'all'");
        if (a.size() > kMaxSelectorNames) fail(v, what + " lists more than 1024 names");
        for (const auto& e : a) s.names.push_back(name(e, what));
      } else {
        fail(v, what + " must be a node name, a role, \"all\", a list of them, or "
                       "{ random = K, from = \"role\" }");
      }
    };
    if (n.is_table()) {
      const auto& t = *n.as_table();
      checkKeys(t, {"random", "from"}, what);
      auto* k = t.get("random");
      if (!k) fail(n, what + " table needs random = K (how many nodes to pick)");
      s.random = int(integer(*k, what + " random", 1, 100000));
      if (auto* from = t.get("from"))
        addNames(*from);
      else
        s.names = {"all"};
    } else {
      addNames(n);
    }
    return s;
  }

  Playbook parse(const std::string& text);

 private:
  Scenario scenario(const toml::table& t, const std::string& name, const SourcePos& p,
                    const Playbook& pb) const;
  Phase phase(const toml::node& n) const;
  Step step(const toml::node& n, size_t index, const Scenario& sc) const;
  // What a step says of itself, whatever the timeline: its keys, name, kind, parameters, target
  // and capture. step() starts with it; with the phases in error it is all that is checked.
  Step stepOwn(const toml::node& n, size_t index) const;
  // The kind's checks across parameters, pointing at the value the message names.
  void stepKindCheck(const toml::node& n, const Step& s) const;
  Expectation expectation(const toml::node& n, const std::string& what = "expect") const;
  Sweep sweep(const toml::node& n, const Scenario& sc) const;
  DetectExpectation detect(const toml::node& n, const Scenario& sc) const;
  void detectionSettings(const toml::node& n, DetectionSettings& d) const;
  void workload(const toml::node& wl, Workload& w) const;
  void guardrails(const toml::node& g, Guardrails& gr) const;
  void scoring(const toml::node& s, ScoringSettings& sc) const;
  void cost(const toml::node& c, CostSettings& co) const;
  void labSettings(const toml::node& n, LabSettings& l) const;
  void scenarios(const toml::node& scs, bool inlineForm, Playbook& pb);
  // [search] (playbook_search.cpp): checked once the rest of the playbook has no error.
  void searchTable(const toml::node& n, const toml::table& root, Playbook& pb);
  SearchSpec search(const toml::node& n, const toml::table& root, const Playbook& pb) const;
  SearchParam searchParam(const toml::node& n, const Playbook& pb, SearchKind kind) const;
  size_t searchExpectation(const toml::node& n, const Scenario& sc) const;
  void checkTimeline(const Playbook& pb);
  json normalise(const toml::node& where, const std::string& kind, const json& raw,
                 const toml::table* rawTable) const;

  std::string path_;
  mutable std::vector<std::string> errors_;
  mutable std::vector<std::string> notes_;
};

// N as an array of tables, or the error "WHAT must be written as [[WHAT]] tables".
const toml::array& arrayOfTables(const Parser& p, const toml::node& n, const std::string& what);

// The capture-only packet step beside a step with `capture = true` (Step::capture).
Step captureStep(const Step& s);

}  // namespace rc::controller::detail
