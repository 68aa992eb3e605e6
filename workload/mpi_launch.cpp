// The `mpi` kind's launch settings, their checks, and mpirun's remote command without a shell.
#include "workload/mpi_launch.hpp"

#include <signal.h>
#include <string.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <regex>

namespace rc::workload {
namespace {

std::atomic<const MpiSettings*> gSettings{nullptr};

// A shell by its base name: the launcher and mpirun run their argv directly, and a shell there
// would parse words that come from the run (host names, mpirun's own arguments).
bool isShell(const std::string& path) {
  const std::string base = path.substr(path.rfind('/') + 1);
  for (const char* sh : {"sh", "bash", "dash", "zsh", "ksh", "mksh", "csh", "tcsh", "fish", "ash"})
    if (base == sh) return true;
  return false;
}

// A program that runs the next word as a command line or a shell of its choosing: as the
// program itself it hides which program runs.
bool runsAnything(const std::string& path) {
  const std::string base = path.substr(path.rfind('/') + 1);
  return isShell(path) || base == "busybox" || base == "env";
}

}  // namespace

Result<void> checkProgramPath(const std::string& path, const std::string& where) {
  if (path.empty() || path.front() != '/')
    return makeError(where + ": '" + path + "' is not an absolute path: write the program's full path, e.g. \"/usr/bin/mpirun\"");
  if (runsAnything(path))
    return makeError(where + ": '" + path + "' is a shell (or runs one): name the program itself, its arguments as "
                     "the list's other elements; rdmachaos never runs a shell");
  return {};
}

Result<void> checkLauncher(const std::vector<std::string>& argv, const std::string& where) {
  if (argv.empty() || argv.size() > 64)
    return makeError(where + " must be a list of 1-64 strings (argv; no shell runs it), e.g. [\"/usr/bin/ssh\", \"{host}\"]");
  if (argv.front().find('{') != std::string::npos)
    return makeError(where + ": the program '" + argv.front() + "' must be a fixed absolute path, not a placeholder");
  if (auto r = checkProgramPath(argv.front(), where); !r) return r;
  for (const auto& arg : argv) {
    if (arg.size() > 4096) return makeError(where + ": an element is longer than 4096 characters");
    if (&arg != &argv.front() && isShell(arg))
      return makeError(where + ": '" + arg + "' would run a shell on the node: the launcher's command must run "
                       "mpirun's daemon directly (rdmachaos splits its command line itself)");
    if (arg == "-c")
      return makeError(where + ": '-c' hands a command string to a shell: list the program and its arguments instead");
    for (size_t open = arg.find('{'); open != std::string::npos; open = arg.find('{', open + 1)) {
      const size_t close = arg.find('}', open);
      const std::string ph = close == std::string::npos ? arg.substr(open) : arg.substr(open, close - open + 1);
      if (ph != "{host}")
        return makeError(where + ": unknown placeholder '" + ph + "' in '" + arg + "' (known: " +
                         std::string(kLauncherPlaceholders) + ", the node's name as the playbook names it)");
    }
  }
  return {};
}

Result<std::vector<std::string>> expandLauncher(const std::vector<std::string>& tmpl, const std::string& host) {
  if (host.empty() || host.size() > 64 || host.front() == '-')
    return makeError("mpi launcher: host '" + host + "' is not a node name");
  for (char c : host)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      return makeError("mpi launcher: host '" + host + "' is not a node name (letters, digits, . _ -)");
  std::vector<std::string> out;
  for (std::string arg : tmpl) {
    for (size_t at = arg.find("{host}"); at != std::string::npos; at = arg.find("{host}", at + host.size()))
      arg.replace(at, 6, host);
    out.push_back(std::move(arg));
  }
  return out;
}

Result<std::vector<std::string>> splitRemoteCommand(const std::vector<std::string>& words) {
  std::string line;
  for (const auto& w : words) line += (line.empty() ? "" : " ") + w;
  std::vector<std::string> out;
  std::string cur;
  bool inWord = false;
  char quote = 0;
  for (size_t i = 0; i < line.size(); i++) {
    const char c = line[i];
    if (quote) {
      if (c == quote) {
        quote = 0;
      } else if (quote == '"' && (c == '$' || c == '`')) {
        return makeError("mpi launcher: the remote command has shell expansion ('" + std::string(1, c) +
                         "') inside quotes, which no shell here interprets: " + line.substr(0, 200));
      } else if (quote == '"' && c == '\\' && i + 1 < line.size()) {
        cur += line[++i];
      } else {
        cur += c;
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n') {
      if (inWord) out.push_back(std::move(cur)), cur.clear();
      inWord = false;
    } else if (c == '"' || c == '\'') {
      quote = c;
      inWord = true;
    } else if (c == '\\' && i + 1 < line.size()) {
      cur += line[++i];
      inWord = true;
    } else if (std::strchr(";|&$`<>(){}*?", c)) {
      return makeError("mpi launcher: the remote command uses shell syntax ('" + std::string(1, c) +
                       "') that no shell here interprets (mpirun --prefix, or a remote PATH set in the command?): " +
                       line.substr(0, 200));
    } else {
      cur += c;
      inWord = true;
    }
  }
  if (quote) return makeError("mpi launcher: unbalanced quote in the remote command: " + line.substr(0, 200));
  if (inWord) out.push_back(std::move(cur));
  if (out.empty()) return makeError("mpi launcher: no remote command to run");
  return out;
}

bool launcherIsRemoteShell(const std::vector<std::string>& tmpl) {
  if (tmpl.empty()) return false;
  const std::string base = tmpl.front().substr(tmpl.front().rfind('/') + 1);
  return base == "ssh" || base == "dbclient" || base == "rsh";
}

Result<std::vector<std::string>> launchArgv(const std::vector<std::string>& tmpl, const std::string& host,
                                            const std::vector<std::string>& words) {
  auto head = expandLauncher(tmpl, host);
  if (!head) return head.error();
  auto command = splitRemoteCommand(words);
  if (!command) return command.error();
  std::vector<std::string> all = std::move(*head);
  if (!launcherIsRemoteShell(tmpl)) {
    all.insert(all.end(), command->begin(), command->end());
    return all;
  }
  std::string line;
  for (const auto& w : *command) {
    std::string q = "'";
    for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += (line.empty() ? "" : " ") + q + "'";
  }
  all.push_back(std::move(line));
  return all;
}

namespace {
bool matches(const std::string& s, const char* pattern) { return std::regex_match(s, std::regex(pattern)); }
}  // namespace

Result<void> checkUcxSetting(const std::string& entry, const std::string& where) {
  if (!matches(entry, R"(UCX_[A-Z0-9_]{1,64}=[^\s'"\\]{0,256})"))
    return makeError(where + ": '" + entry + "' is not UCX_NAME=value (a UCX setting; the value without blanks or "
                     "quotes), e.g. \"UCX_UD_VERBS_ETH_DGID_CHECK=n\"");
  if (entry.rfind("UCX_NET_DEVICES=", 0) == 0 || entry.rfind("UCX_TLS=", 0) == 0)
    return makeError(where + ": '" + entry + "': set the devices and transports with ucx_devices and ucx_tls");
  return {};
}

Result<void> checkUcxDevice(const std::string& entry, const std::string& where) {
  if (!matches(entry, R"([A-Za-z0-9_.-]{1,64}:[0-9]{1,3})"))
    return makeError(where + ": '" + entry + "' is not an RDMA port as UCX names it, DEVICE:PORT (e.g. \"rxe0:1\", "
                     "\"mlx5_0:1\"; `ucx_info -d` lists them)");
  return {};
}

Result<void> checkUcxTls(const std::string& tls, const std::string& where) {
  if (!matches(tls, R"([a-z0-9_^]{1,32}(,[a-z0-9_]{1,32}){0,15})"))
    return makeError(where + ": '" + tls + "' is not a list of UCX transports separated by commas (e.g. "
                     "\"rc_verbs,ud_verbs,self\")");
  return {};
}

std::string encodeLauncher(const std::vector<std::string>& argv) { return nlohmann::json(argv).dump(); }

Result<std::vector<std::string>> decodeLauncher(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_array()) return makeError(std::string(kLauncherEnv) + " is not a JSON list of strings");
  std::vector<std::string> out;
  for (const auto& e : j) {
    if (!e.is_string()) return makeError(std::string(kLauncherEnv) + " is not a JSON list of strings");
    out.push_back(e.get<std::string>());
  }
  if (auto r = checkLauncher(out, kLauncherEnv); !r) return r.error();
  return out;
}

std::string mpiFailure(const std::string& output) {
  // Open MPI 4.1: "mpirun noticed that process rank 1 with PID 0 on node n2 exited on signal 9 (Killed)."
  static const std::regex signalled(R"(process rank (\d+) with PID (\d+) on node (\S+) exited on signal (\d+))");
  std::smatch m;
  if (std::regex_search(output, m, signalled)) {
    const int sig = std::stoi(m[4]);
    const char* abbrev = sigabbrev_np(sig);
    return "rank " + m[1].str() + " (on " + m[3].str() + ", pid " + m[2].str() + ") was killed by signal " +
           std::to_string(sig) + (abbrev ? " (SIG" + std::string(abbrev) + ")" : std::string());
  }
  // Otherwise the text of Open MPI's boxed messages ("----" lines around them), joined.
  std::string said;
  bool inBox = false;
  size_t start = 0;
  while (start < output.size()) {
    size_t end = output.find('\n', start);
    if (end == std::string::npos) end = output.size();
    std::string line = output.substr(start, end - start);
    start = end + 1;
    if (line.rfind("-----", 0) == 0) {
      inBox = !inBox;
      continue;
    }
    if (!inBox || line.find_first_not_of(" \t") == std::string::npos) continue;
    said += (said.empty() ? "" : " ") + line.substr(line.find_first_not_of(" \t"));
    if (said.size() > 600) break;
  }
  said = said.substr(0, 600);
  // UCX's own words (pml ucx): its ERROR and Fatal lines, the first two, without their prefix
  // of time, host and source line ("[1796684212.65] [n1:309 :0] select.c:549 UCX ERROR ...").
  std::string ucx;
  int taken = 0;
  static const std::regex ucxLine(R"((?:UCX\s+ERROR|Fatal:)\s*(.*))");
  for (size_t from = 0; from < output.size() && taken < 2;) {
    size_t end = output.find('\n', from);
    if (end == std::string::npos) end = output.size();
    const std::string line = output.substr(from, end - from);
    from = end + 1;
    std::smatch u;
    if (std::regex_search(line, u, ucxLine) && ucx.find(u[1].str()) == std::string::npos) {
      ucx += (ucx.empty() ? "" : "; ") + u[1].str().substr(0, 200);
      taken++;
    }
  }
  if (!ucx.empty()) said += (said.empty() ? "" : " ") + std::string("UCX: ") + ucx;
  return said;
}

void setMpiSettings(const MpiSettings* settings) { gSettings.store(settings); }
const MpiSettings* mpiSettings() { return gSettings.load(); }

}  // namespace rc::workload
