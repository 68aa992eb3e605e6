// The playbook parser: TOML to a Playbook; every error says file:line:col and what to write instead.
#include "controller/playbook/playbook.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "common/protocol.hpp"
#include "common/toml_text.hpp"
#include "common/units.hpp"
#include "controller/playbook/playbook_internal.hpp"
#include "faults/fault.hpp"
#include "workload/kinds.hpp"

#include "controller/playbook/playbook_parser.hpp"

namespace rc::controller::detail {

std::string Parser::errors() const {
  // "PATH:LINE:COL: message": by line, then column; the same message once.
  auto key = [&](const std::string& m) {
    int line = 0, col = 0;
    if (m.compare(0, path_.size() + 1, path_ + ":") == 0)
      std::sscanf(m.c_str() + path_.size() + 1, "%d:%d", &line, &col);
    return std::pair{line, col};
  };
  std::vector<std::string> sorted = errors_;
  std::stable_sort(sorted.begin(), sorted.end(), [&](const auto& a, const auto& b) { return key(a) < key(b); });
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string out;
  for (const auto& m : sorted) out += (out.empty() ? "" : "\n") + m;
  if (!out.empty())
    for (const auto& n : notes_) out += "\n" + n;
  return out;
}

const toml::array& arrayOfTables(const Parser& p, const toml::node& n, const std::string& what) {
  if (!n.is_array_of_tables()) p.fail(n, what + " must be written as [[" + what + "]] tables");
  return *n.as_array();
}

Phase Parser::phase(const toml::node& n) const {
  const auto& t = table(n, "phase");
  checkKeys(t, {"name", "duration"}, "[[phase]]");
  Phase ph;
  ph.pos = pos(n);
  auto* nm = t.get("name");
  if (!nm) fail(n, "[[phase]] needs a name, e.g. name = \"baseline\"");
  ph.name = name(*nm, "phase name");
  auto* d = t.get("duration");
  if (!d) fail(n, "phase '" + ph.name + "' needs a duration, e.g. duration = \"10s\"");
  ph.durationNs = duration(*d, "phase '" + ph.name + "' duration", 100 * kMs, kDay);
  return ph;
}


void Parser::detectionSettings(const toml::node& n, DetectionSettings& d) const {
  const auto& t = table(n, "detection");
  checkKeys(t, {"scrape_interval", "evaluation_interval", "clock_skew", "false_alarms", "false_alarm_margin", "watch"},
            "[detection]");
  d.pos = pos(n);
  if (auto* v = t.get("scrape_interval")) d.scrapeIntervalNs = duration(*v, "scrape_interval", kMs, kHour);
  if (auto* v = t.get("evaluation_interval")) d.evaluationIntervalNs = duration(*v, "evaluation_interval", kMs, kHour);
  if (auto* v = t.get("clock_skew")) d.clockSkewNs = duration(*v, "clock_skew", 0, kHour);
  if (auto* v = t.get("false_alarms")) d.falseAlarms = boolean(*v, "false_alarms");
  if (auto* v = t.get("false_alarm_margin")) d.falseAlarmMarginNs = duration(*v, "false_alarm_margin", 0, kDay);
  if (auto* v = t.get("watch")) {
    if (!v->is_array()) fail(*v, "watch must be a list of alert names, e.g. watch = [\"RdmaLinkDown\"]");
    if (v->as_array()->size() > 256) fail(*v, "watch lists more than 256 alert names");
    for (const auto& e : *v->as_array()) d.watch.push_back(str(e, "watch alert name", 256));
  }
}

Scenario Parser::scenario(const toml::table& t, const std::string& nm, const SourcePos& p,
                          const Playbook&) const {
  Scenario sc;
  sc.name = nm;
  sc.pos = p;
  // Each phase, step, expectation and the sweep is a part of its own (Parser::part). Steps and
  // the sweep are placed on the phases' timeline: with a phase in error they are not checked
  // (their errors would be the phase's, said again).
  bool timeline = part([&] {
    auto* phases = t.get("phase");
    if (!phases)
      fail(p, (nm.empty() ? std::string("the playbook") : "scenario '" + nm + "'") +
                  " has no [[phase]]: the first phase is the baseline, e.g. [[phase]] name = \"baseline\" duration = \"10s\"");
    const auto& pa = arrayOfTables(*this, *phases, "phase");
    if (pa.size() > kMaxPhases) fail(*phases, "more than 32 phases");
  });
  if (timeline) {
    const auto& pa = *t.get("phase")->as_array();
    std::set<std::string> seen;
    for (const auto& ph : pa)
      timeline = part([&] {
                   Phase x = phase(ph);
                   if (!seen.insert(x.name).second) fail(ph, "phase '" + x.name + "' appears twice");
                   sc.phases.push_back(std::move(x));
                 }) &&
                 timeline;
  }
  if (sc.phases.empty()) timeline = false;
  // With the phases in error, each step is still checked for what it says of itself (its kind,
  // parameters, keys, target), and only its place on the timeline is left for the next pass.
  if (auto* steps = t.get("step"); steps && !timeline) {
    bool any = false;
    if (steps->is_array_of_tables())
      for (size_t i = 0; i < steps->as_array()->size(); i++) {
        any = true;
        const toml::node& st = *steps->as_array()->get(i);
        part([&] { stepKindCheck(st, stepOwn(st, i)); });
      }
    if (any) note(p, std::string("the steps' times") + (t.get("sweep") ? ", the sweep" : "") +
                         (t.get("detect") ? ", the detections" : "") +
                         " were not checked: they are placed on the phases, which have errors");
  }
  if (auto* steps = t.get("step"); steps && timeline) {
    const toml::array* sa = nullptr;
    if (part([&] {
          sa = &arrayOfTables(*this, *steps, "step");
          if (sa->size() > kMaxSteps) fail(*steps, "more than 256 steps");
        })) {
      std::set<std::string> names;
      for (size_t i = 0; i < sa->size(); i++)
        part([&] {
          Step x = step(*sa->get(i), i, sc);
          if (!names.insert(x.name).second) fail(*sa->get(i), "step name '" + x.name + "' appears twice");
          std::optional<Step> cap;
          if (x.capture) {
            cap = captureStep(x);
            if (!names.insert(cap->name).second)
              fail(*sa->get(i), "step name '" + cap->name + "' (its capture) appears twice");
          }
          sc.steps.push_back(std::move(x));
          if (cap) sc.steps.push_back(std::move(*cap));
        });
    }
  }
  auto expectations = [&](const char* key, const char* what, const char* plural, std::vector<Expectation>& out) {
    auto* ex = t.get(key);
    if (!ex) return;
    const toml::array* ea = nullptr;
    if (!part([&] {
          ea = &arrayOfTables(*this, *ex, what);
          if (ea->size() > kMaxExpectations) fail(*ex, std::string("more than 256 ") + plural);
        }))
      return;
    for (const auto& e : *ea) part([&] { out.push_back(expectation(e, what)); });
  };
  expectations("expect", "expect", "expectations", sc.expectations);
  expectations("require", "require", "requirements", sc.requirements);
  if (auto* sw = t.get("sweep"); sw && timeline) part([&] { sc.sweep = sweep(*sw, sc); });
  // After the steps: a [[detect]] names them.
  if (auto* de = t.get("detect"); de && timeline) {
    const toml::array* da = nullptr;
    if (part([&] {
          da = &arrayOfTables(*this, *de, "detect");
          if (da->size() > kMaxExpectations) fail(*de, "more than 256 [[detect]] tables");
        }))
      for (const auto& e : *da) part([&] { sc.detections.push_back(detect(e, sc)); });
  }
  return sc;
}

// "\"allreduce\" (or allgather, ...)": the kinds, for the message of a [workload] without one.
static std::string kindChoices() {
  const auto& all = workload::kinds();
  std::string out = "\"" + std::string(all.front()->name) + "\" (or ";
  for (size_t i = 1; i < all.size(); i++) out += (i > 1 ? ", " : "") + std::string(all[i]->name);
  return out + ")";
}

void Parser::workload(const toml::node& wlNode, Workload& w) const {
  const toml::node* wl = &wlNode;
  const auto& t = table(*wl, "workload");
  checkKeys(t, {"kind", "size", "streams", "nodes", "transport", "dscp", "qp_timeout", "qp_retry_cnt", "qp_rnr_retry",
                "test", "launch"},
            "[workload]");
  auto* k = t.get("kind");
  if (!k) fail(*wl, "[workload] needs kind = " + kindChoices());
  const workload::Kind* kind = workload::findKind(str(*k, "workload kind", 32));
  if (!kind) fail(*k, "workload kind '" + k->as_string()->get() + "' is unknown (known: " + workload::kindNames() + ")");
  w.kind = kind;
  const workload::External* ext = kind->external;
  if (auto* la = t.get("launch")) {
    if (!ext || !ext->launches)
      fail(*la, "[workload] launch is the launch time of a job rdmachaos starts (kind = \"mpi\"); kind \"" +
                    std::string(kind->name) + "\" starts at once: remove it");
    w.launchNs = duration(*la, "[workload] launch", kMs * 100, 5 * 60 * kSec);
  }
  // An external kind: which program of the agents' fixed list (they run nothing else).
  if (ext) w.test = ext->defaultProgram;
  if (auto* te = t.get("test")) {
    if (!ext) {
      const std::string names = workload::externalKindNames();
      fail(*te, "test names a " + names + " program: it needs kind = \"" + names + "\"");
    }
    w.test = str(*te, "workload test", 32);
    if (!ext->knowsProgram(w.test) && ext->programIs == "program")
      fail(*te, std::string(kind->name) + " test '" + w.test + "' is unknown (known: " + ext->programs() + ")");
    if (!ext->knowsProgram(w.test))
      fail(*te, std::string(kind->name) + " test (its " + std::string(ext->programIs) + ") '" + w.test +
                    "' is not one it takes (" + ext->programs() + ")");
  }
  // Parsed wider than an agent accepts, so that the message can say what an agent accepts.
  if (auto* s = t.get("size")) {
    w.sizeBytes = size(*s, "workload size", 1, uint64_t(16) << 30);
    if (w.sizeBytes > uint64_t(proto::kMaxWorkloadSize))
      fail(*s, "workload size " + formatSize(w.sizeBytes) + " is more than an agent accepts (" +
                   formatSize(uint64_t(proto::kMaxWorkloadSize)) +
                   " per rank's message): lower size, e.g. size = \"256MiB\"");
  }
  if (auto* s = t.get("streams")) {
    w.streams = int(integer(*s, "workload streams", 1, 1024));
    if (w.streams > proto::kMaxWorkloadStreams)
      fail(*s, "workload streams = " + std::to_string(w.streams) + " is more than an agent opens (" +
                   std::to_string(proto::kMaxWorkloadStreams) + " connections per peer): lower streams");
  }
  if (auto* tr = t.get("transport")) {
    w.transport = str(*tr, "workload transport", 16);
    if (w.transport != "tcp" && w.transport != "verbs" && !(ext && ext->checkTransport))
      fail(*tr, "workload transport '" + w.transport + "' is unknown (known: tcp, verbs)");
    if (w.transport == "verbs" && w.streams > 16)
      fail(*tr, "workload streams must be 1 to 16 with transport = \"verbs\" (QPs per peer)");
  }
  // The traffic class of both transports, and the verbs QPs' attributes (NCCL's defaults).
  if (auto* d = t.get("dscp")) w.qp.dscp = int(integer(*d, "workload dscp", 0, 63));
  if (auto* q = t.get("qp_timeout")) w.qp.timeout = int(integer(*q, "workload qp_timeout", 0, 31));
  if (auto* q = t.get("qp_retry_cnt")) w.qp.retryCount = int(integer(*q, "workload qp_retry_cnt", 0, 7));
  if (auto* q = t.get("qp_rnr_retry")) w.qp.rnrRetry = int(integer(*q, "workload qp_rnr_retry", 0, 7));
  if (ext) {
    const std::string name(kind->name);
    if (w.streams > ext->maxStreams)
      fail(*wl, "workload streams must be 1 to " + std::to_string(ext->maxStreams) + " with kind = \"" + name + "\" (" +
                    std::string(ext->streamsAre) + ")");
    if (auto* tr = t.get("transport")) {
      if (!ext->checkTransport)
        fail(*tr, "kind = \"" + name + "\" " + (ext->rdma ? "always runs over RDMA" : "runs over the job's own transport") +
                      ": leave transport out");
      else if (auto c = ext->checkTransport(w.transport); !c)
        fail(*tr, c.error().message);
    }
    for (const char* key : {"qp_retry_cnt", "qp_rnr_retry"})
      if (auto* q = t.get(key))
        fail(*q, std::string(key) + " is not a " + name + " option (" + name + " sets its own; qp_timeout is its " +
                     std::string(ext->qpTimeoutIs) + ")");
  }
  for (const char* key : {"qp_timeout", "qp_retry_cnt", "qp_rnr_retry"})
    if (auto* q = t.get(key); q && w.transport != "verbs" && !ext)
      fail(*q, std::string(key) + " sets a verbs QP attribute: it needs transport = \"verbs\"");
  w.nodes.names = {"all"};
  w.nodes.pos = pos(*wl);
  if (auto* n = t.get("nodes")) {
    w.nodes = selector(*n, "workload nodes");
    if (w.nodes.random) fail(*n, "workload nodes cannot be a random pick");
  }
}

void Parser::guardrails(const toml::node& gNode, Guardrails& gr) const {
  const toml::node* g = &gNode;
  const auto& t = table(*g, "guardrails");
  checkKeys(t, {"min_baseline", "abort_on_agent_loss", "max_stall"}, "[guardrails]");
  if (auto* v = t.get("min_baseline")) gr.minBaselineBytesPerSec = bitRateAsBytes(*v, "min_baseline");
  if (auto* v = t.get("abort_on_agent_loss")) gr.abortOnAgentLoss = boolean(*v, "abort_on_agent_loss");
  if (auto* v = t.get("max_stall")) gr.maxStallNs = duration(*v, "max_stall", 10 * kMs, kHour);
}

void Parser::scoring(const toml::node& sNode, ScoringSettings& sc) const {
  const toml::node* s = &sNode;
  const auto& t = table(*s, "scoring");
  checkKeys(t, {"bin", "warmup", "epsilon", "hold", "smooth", "stall_fraction"}, "[scoring]");
  if (auto* v = t.get("bin")) sc.binNs = duration(*v, "bin", kMs, 10 * kSec);
  if (auto* v = t.get("warmup")) sc.warmupNs = duration(*v, "warmup", 0, kHour);
  if (auto* v = t.get("epsilon")) sc.epsilon = number(*v, "epsilon", 0.001, 0.5);
  if (auto* v = t.get("hold")) sc.holdNs = duration(*v, "hold", kMs, kHour);
  if (auto* v = t.get("smooth")) sc.smoothNs = duration(*v, "smooth", 0, 10 * kSec);
  if (auto* v = t.get("stall_fraction")) sc.stallFraction = number(*v, "stall_fraction", 0.001, 0.9);
  if (sc.holdNs < sc.binNs)
    fail(*s, "hold (" + fmtDur(sc.holdNs) + ") must be at least one bin (" + fmtDur(sc.binNs) + ")");
  if (sc.stallFraction >= 1 - sc.epsilon)
    fail(*s, "stall_fraction must be below the recovery threshold 1 - epsilon");
}

void Parser::cost(const toml::node& cNode, CostSettings& co) const {
  const toml::node* c = &cNode;
  const auto& t = table(*c, "cost");
  checkKeys(t, {"gpus", "price_per_gpu_hour", "currency", "incidents_per_day", "days"}, "[cost]");
  if (auto* v = t.get("gpus")) co.gpus = integer(*v, "gpus", 0, 10'000'000);
  if (auto* v = t.get("price_per_gpu_hour")) co.pricePerGpuHour = number(*v, "price_per_gpu_hour", 0, 10000);
  if (auto* v = t.get("currency")) co.currency = str(*v, "currency", 8);
  if (auto* v = t.get("incidents_per_day")) co.incidentsPerDay = number(*v, "incidents_per_day", 0, 100000);
  if (auto* v = t.get("days")) co.days = number(*v, "days", 0, 3650);
}

void Parser::labSettings(const toml::node& n, LabSettings& l) const {
  const auto& t = table(n, "lab");
  checkKeys(t, {"rate", "nodes", "ports"}, "[lab]");
  l.present = true;
  l.pos = pos(n);
  if (auto* v = t.get("rate")) {
    // As `lab up --rate` takes it ("600M", "1G") or as a datasheet writes it ("600Mbps").
    const std::string text = str(*v, "[lab] rate", 32);
    const char last = text.empty() ? '\0' : text.back();
    auto r = parseBitRate(last == 'K' || last == 'M' || last == 'G' ? text + "bps" : text);
    if (!r || *r < 1'000'000 || *r > 400'000'000'000ull)
      fail(*v, "[lab] rate must be a port rate like \"600M\" or \"1G\" (1M..400G), as given to `lab up --rate`");
    l.rateBps = double(*r);
  }
  if (auto* v = t.get("nodes")) l.nodes = int(integer(*v, "[lab] nodes", 1, 32));
  if (auto* v = t.get("ports")) {
    l.ports = str(*v, "[lab] ports", 8);
    if (l.ports != "tap" && l.ports != "veth") fail(*v, "[lab] ports must be \"tap\" or \"veth\" (lab up --ports)");
  }
}

// [[scenario]] tables: each with its own phases, steps, expectations, sweep and detects.
void Parser::scenarios(const toml::node& scsNode, bool inlineForm, Playbook& pb) {
  const toml::node* scs = &scsNode;
  const toml::array* sa = nullptr;
  bool ok = part([&] {
    if (inlineForm)
      fail(*scs, "use either [[scenario]] tables or top-level [[phase]]/[[step]]/[[expect]]/[[require]]/[[detect]], not both");
    sa = &arrayOfTables(*this, *scs, "scenario");
    if (sa->size() > kMaxScenarios) fail(*scs, "more than 64 scenarios");
  });
  std::set<std::string> names;
  for (size_t i = 0; ok && i < sa->size(); i++) {
    const toml::node& s = *sa->get(i);
    const auto& t = *s.as_table();
    checkKeys(t, {"name", "phase", "step", "expect", "require", "sweep", "detect"}, "[[scenario]]");
    std::string scName;
    if (!part([&] {
          auto* n = t.get("name");
          if (!n) fail(s, "[[scenario]] needs a name");
          scName = name(*n, "scenario name");
          if (!names.insert(scName).second) fail(*n, "scenario '" + scName + "' appears twice");
        }))
      scName = "#" + std::to_string(i + 1);  // its other parts are still checked
    pb.scenarios.push_back(scenario(t, scName, pos(s), pb));
  }
}

// The whole timeline: cv needs repeats, warm-up inside the baseline phase, trials and run time bounded.
void Parser::checkTimeline(const Playbook& pb) {
  size_t trials = 0;
  int64_t total = 0;
  for (const auto& sc : pb.scenarios) {
    for (const auto& e : sc.expectations)
      if (!e.stat.empty() && pb.repeat < (e.stat == "median" ? 3 : 2))
        part([&] {
          fail(e.pos, "stat = \"" + e.stat + "\" on " + e.metric +
                          " needs repeated trials: set repeat = 3 (or more) at the top");
        });
    if (sc.phases.empty()) continue;  // its error is recorded
    part([&] {
      if (pb.scoring.warmupNs >= sc.phases.front().durationNs)
        fail(sc.phases.front().pos, "warm-up (" + fmtDur(pb.scoring.warmupNs) +
                                        ") leaves nothing of the baseline phase '" + sc.phases.front().name + "' (" +
                                        fmtDur(sc.phases.front().durationNs) +
                                        "): lengthen it or lower [scoring] warmup");
    });
    // A target sweep's size is known once bound to an inventory: resolvePlan checks it again.
    size_t n = std::max<size_t>(1, sc.sweep ? sc.sweep->values.size() : 1) * size_t(pb.repeat);
    trials += n;
    total += int64_t(n) * sc.durationNs();
    if (!part([&] {
          if (trials > kMaxTrials) fail(sc.pos, "the playbook expands to more than 1000 trials");
          if (total > kMaxRunNs) fail(sc.pos, "the playbook runs for more than 7 days (" + fmtDur(total) + "); split it");
          if (auto why = runTooLong(total, trials); !why.empty()) fail(sc.pos, why);
        }))
      break;  // said once
  }
}

Playbook Parser::parse(const std::string& text) {
  toml::table root;
  try {
    root = rc::parseToml(text, path_);
  } catch (const toml::parse_error& e) {
    throw Fail{at(e.source()) + ": " + std::string(e.description())};
  }
  checkKeys(root,
            {"name", "description", "seed", "repeat", "workload", "guardrails", "scoring", "cost", "lab",
             "phase", "step", "expect", "require", "sweep", "detect", "detection", "scenario", "search"},
            "the playbook");
  Playbook pb;
  pb.path = path_;
  pb.text = text;
  part([&] {
    auto* nm = root.get("name");
    if (!nm) throw Fail{path_ + ":1:1: the playbook needs a name, e.g. name = \"link-flap-recovery\""};
    pb.name = name(*nm, "name");
  });
  if (auto* d = root.get("description")) part([&] { pb.description = str(*d, "description", 4096); });
  if (auto* s = root.get("seed")) part([&] { pb.seed = uint64_t(integer(*s, "seed", 0, INT64_MAX)); });
  if (auto* r = root.get("repeat")) part([&] { pb.repeat = int(integer(*r, "repeat", 1, 100)); });

  part([&] {
    auto* wl = root.get("workload");
    if (!wl) throw Fail{path_ + ":1:1: the playbook needs a [workload] table (kind, size, streams, nodes)"};
    workload(*wl, pb.workload);
  });
  if (auto* g = root.get("guardrails")) part([&] {
    guardrails(*g, pb.guardrails);
  });
  if (auto* s = root.get("scoring")) part([&] {
    scoring(*s, pb.scoring);
  });
  if (auto* d = root.get("detection")) part([&] { detectionSettings(*d, pb.detection); });
  if (auto* c = root.get("cost")) part([&] {
    cost(*c, pb.cost);
  });
  if (auto* l = root.get("lab")) part([&] { labSettings(*l, pb.lab); });

  const bool inlineForm =
      root.get("phase") || root.get("step") || root.get("expect") || root.get("require") || root.get("sweep") ||
      root.get("detect");
  if (auto* scs = root.get("scenario"))
    scenarios(*scs, inlineForm, pb);
  else
    pb.scenarios.push_back(scenario(root, pb.name, SourcePos{1, 1}, pb));

  checkTimeline(pb);
  if (auto* s = root.get("search")) searchTable(*s, root, pb);
  if (auto all = errors(); !all.empty()) throw Fail{all};
  return pb;
}

}  // namespace rc::controller::detail

namespace rc::controller {
using namespace detail;

const char* toString(Comparison c) {
  switch (c) {
    case Comparison::less: return "<";
    case Comparison::lessEqual: return "<=";
    case Comparison::greater: return ">";
    case Comparison::greaterEqual: return ">=";
  }
  return "?";
}

std::string Selector::describe() const {
  std::string base = names.size() == 1 ? names.front() : "[" + joinNames(names) + "]";
  if (random) return "random " + std::to_string(random) + " of " + base;
  return base;
}

std::string Expectation::describe() const {
  return (stat.empty() ? metric : stat + "(" + metric + ") over repeats") + " " + toString(op) + " " + boundText +
         " (" + scope + ")";
}

int64_t Scenario::durationNs() const {
  int64_t d = 0;
  for (const auto& p : phases) d += p.durationNs;
  return d;
}

bool Playbook::hasDetections() const {
  return std::any_of(scenarios.begin(), scenarios.end(), [](const Scenario& s) { return !s.detections.empty(); });
}

std::string DetectExpectation::describe() const {
  std::string name, labels;
  for (const auto& [k, v] : match) {
    if (k == "alertname") name = v;
    else labels += (labels.empty() ? "" : ", ") + k + "=\"" + v + "\"";
  }
  std::string out = name + (labels.empty() ? "" : "{" + labels + "}") + " within " + fmtDur(withinNs);
  if (clearsWithinNs) out += ", clears within " + fmtDur(*clearsWithinNs);
  return out;
}

std::vector<std::string> Playbook::faultKinds() const {
  std::vector<std::string> out;
  for (const auto& sc : scenarios)
    for (const auto& s : sc.steps)
      if (std::find(out.begin(), out.end(), s.kind) == out.end()) out.push_back(s.kind);
  return out;
}

Result<Playbook> parsePlaybook(const std::string& text, const std::string& path) {
  if (text.size() > 1 << 20) return makeError(path + ": playbook is larger than 1 MiB");
  try {
    return Parser(path).parse(text);
  } catch (const Fail& f) {
    return makeError(f.message);
  }
}

Result<Playbook> loadPlaybook(const std::string& path) {
  std::ifstream in(path);
  if (!in) return makeError("cannot read playbook '" + path + "': check the path");
  std::stringstream ss;
  ss << in.rdbuf();
  return parsePlaybook(ss.str(), path);
}

}  // namespace rc::controller
