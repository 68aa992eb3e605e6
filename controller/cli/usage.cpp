// The command line's own help beyond CLI11's: unknown commands and bash completion.
#include "controller/cli/usage.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>

#include "faults/fault.hpp"
#include "workload/kinds.hpp"

namespace rc::controller {

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); j++) row[j] = j;
  for (size_t i = 1; i <= a.size(); i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); j++) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

namespace {

std::vector<const CLI::App*> commandsOf(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App* c) { return !c->get_name().empty() && !c->get_group().empty(); });
}

// Whether option word W of APP takes the next word as its value.
bool takesValue(const CLI::App& app, const std::string& w) {
  if (w.size() < 2 || w[0] != '-' || w.find('=') != std::string::npos) return false;
  for (const CLI::Option* o : app.get_options())
    if (o->check_name(w)) return o->get_items_expected_max() > 0;
  return false;
}

}  // namespace

std::optional<std::string> unknownCommand(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* level = &app;
  std::string path = "rdmachaos";
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& w = args[i];
    if (w == "--") return std::nullopt;
    if (!w.empty() && w[0] == '-') {
      if (takesValue(*level, w)) i++;
      continue;
    }
    auto commands = commandsOf(*level);
    if (commands.empty()) return std::nullopt;
    const CLI::App* next = nullptr;
    for (const CLI::App* c : level->get_subcommands([](const CLI::App*) { return true; }))
      if (c->check_name(w)) next = c;  // hidden ones too (completion)
    if (!next) {
      // A positional argument of a command that takes one is not a command word.
      if (level != &app && level->get_require_subcommand_min() == 0) return std::nullopt;
      std::string list, nearest;
      size_t best = SIZE_MAX;
      for (const CLI::App* c : commands) {
        list += (list.empty() ? "" : ", ") + c->get_name();
        const size_t d = editDistance(w, c->get_name());
        if (d < best) best = d, nearest = c->get_name();
      }
      std::string msg = path + ": unknown command '" + w + "'";
      msg += "; did you mean '" + nearest + "'?";
      msg += " commands: " + list + " (" + path + " --help for more)";
      return msg;
    }
    level = next;
    path += " " + next->get_name();
    if (commandsOf(*level).empty()) return std::nullopt;
  }
  return std::nullopt;
}

std::string bashCompletion(const CLI::App& app) {
  std::string faultKinds, workloadKinds;
  for (const auto* k : faults::registry()) faultKinds += (faultKinds.empty() ? "" : " ") + k->name;
  for (const auto* k : workload::kinds()) workloadKinds += (workloadKinds.empty() ? "" : " ") + std::string(k->name);
  std::string cases;
  // One case per command path ("lab up"): its subcommands and options.
  auto walk = [&](auto&& self, const CLI::App& a, const std::string& path) -> void {
    std::string words;
    for (const CLI::App* c : commandsOf(a)) words += (words.empty() ? "" : " ") + c->get_name();
    for (const CLI::Option* o : a.get_options())
      for (const auto& l : o->get_lnames()) words += (words.empty() ? "" : " ") + std::string("--") + l;
    cases += "    \"" + path + "\") words=\"" + words + "\" ;;\n";
    for (const CLI::App* c : commandsOf(a)) self(self, *c, path.empty() ? c->get_name() : path + " " + c->get_name());
  };
  walk(walk, app, "");
  std::string s = R"(# bash completion for rdmachaos (written by `rdmachaos completion bash`; installed by the build)
_rdmachaos() {
  local cur prev path="" w i
  cur=${COMP_WORDS[COMP_CWORD]}
  prev=${COMP_WORDS[COMP_CWORD-1]}
  # The command path so far: the words that are commands, in order.
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=${COMP_WORDS[i]}
    [[ $w == -* ]] && continue
    case "${path:+$path }$w" in
)";
  // Every known command path, so that only command words extend the path.
  auto paths = [&](auto&& self, const CLI::App& a, const std::string& path) -> void {
    for (const CLI::App* c : commandsOf(a)) {
      const std::string p = path.empty() ? c->get_name() : path + " " + c->get_name();
      s += "      \"" + p + "\") path=\"" + p + "\" ;;\n";
      self(self, *c, p);
    }
  };
  paths(paths, app, "");
  s += R"(    esac
  done
  case $prev in
    --kind) mapfile -t COMPREPLY < <(compgen -W ")" + workloadKinds + R"(" -- "$cur"); return ;;
    --inventory|--baseline|--baseline-rules|--config|--html|--junit|--report-dir|--out|--dir|--alertmanager-token-file|--prometheus-token-file|--nccl-tests-output)
      mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
  esac
  if [[ $path == inject && $prev == inject ]]; then
    mapfile -t COMPREPLY < <(compgen -W ")" + faultKinds + R"(" -- "$cur"); return
  fi
  local words=""
  case $path in
)" + cases + R"(  esac
  if [[ $cur == -* || -n $words && ( $path == "" || $path == lab || $path == certs || $path == baseline ) ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
  elif [[ $path == validate || $path == run || $path == search ]]; then
    mapfile -t COMPREPLY < <(compgen -f -X '!*.toml' -- "$cur"; compgen -d -- "$cur")
  elif [[ $path == report || $path == compare || $path == "baseline merge" ]]; then
    mapfile -t COMPREPLY < <(compgen -f -X '!*.json' -- "$cur"; compgen -d -- "$cur")
  else
    mapfile -t COMPREPLY < <(compgen -f -- "$cur")
  fi
}
complete -F _rdmachaos rdmachaos
)";
  return s;
}

}  // namespace rc::controller
