// How the `mpi` workload kind starts Open MPI: the agent's [mpi] settings (mpirun, the benchmark,
// the launcher template that puts a process on another node), their checks, and the pieces of
// mpirun's remote-shell protocol that rdmachaos-mpi-launch speaks without a shell.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace rc::workload {

// [mpi] of the agent's configuration.
struct MpiSettings {
  std::string mpirun = "/usr/bin/mpirun";
  std::string program;                  // the MPI benchmark: SECONDS SIZE (an all-reduce loop)
  std::vector<std::string> preload;     // LD_PRELOAD of every rank, in order (the PMPI library)
  // How mpirun reaches node {host}: argv, the remote command appended after it. E.g. ssh
  // ["/usr/bin/ssh", "{host}"], or the namespace lab's ["/usr/bin/ip", "netns", "exec", "lab-{host}"].
  std::vector<std::string> launcher;
  std::string launchHelper;  // rdmachaos-mpi-launch, which mpirun runs as its rsh agent
  // The data interfaces' names ([interfaces] data of the agent that runs mpirun), which every
  // node's ranks use and mpirun's own connections avoid: Open MPI 4.1 matches an interface
  // list by name on every node, so the nodes name their data interfaces alike.
  std::vector<std::string> dataInterfaces;
  // Where mpirun's own connections (its daemons' out-of-band TCP) go, by interface name. Empty:
  // anywhere but loopback and the data interfaces, so a data-plane fault hits the job and not
  // its launch. A lab whose nodes reach each other only on the data plane (the soft-RoCE
  // guests) names the data interface here.
  std::vector<std::string> oobInterfaces;
  // The agent's own intake: the ranks mpirun starts on its own node report there (the
  // launcher template carries the other nodes' sockets).
  std::string observeSocket;
  std::string tmpdir;  // Open MPI's session directories on every node (orte_tmpdir_base), if set
  // transport = "ucx": Open MPI's pml ucx on these RDMA ports (UCX_NET_DEVICES, e.g. "rxe0:1"),
  // with these transports (UCX_TLS) and these further UCX_* settings of every rank.
  std::vector<std::string> ucxDevices;
  std::string ucxTls = "rc_verbs,ud_verbs,self";
  std::vector<std::string> ucxEnv;
};

// A [mpi] ucx_env entry: UCX_NAME=value, the value without blanks or quotes. WHERE names it.
Result<void> checkUcxSetting(const std::string& entry, const std::string& where);
// A [mpi] ucx_devices entry: DEVICE:PORT (e.g. "rxe0:1", "mlx5_0:1").
Result<void> checkUcxDevice(const std::string& entry, const std::string& where);
// [mpi] ucx_tls: UCX transport names separated by commas (e.g. "rc_verbs,ud_verbs,self").
Result<void> checkUcxTls(const std::string& tls, const std::string& where);

// The placeholders a launcher template may use.
inline constexpr std::string_view kLauncherPlaceholders = "{host}";

// Refuses a launcher template that would run through a shell or guess its program: an empty
// list, a program that is not an absolute path, a shell (sh, bash, dash, zsh, ksh, ...) or a
// `-c` argument anywhere, an unknown {placeholder}. WHERE names the setting in messages.
Result<void> checkLauncher(const std::vector<std::string>& argv, const std::string& where);
// An absolute path that is not a shell, for mpirun and the program.
Result<void> checkProgramPath(const std::string& path, const std::string& where);

// TEMPLATE with {host} replaced by HOST in each element (HOST checked: a node name).
Result<std::vector<std::string>> expandLauncher(const std::vector<std::string>& tmpl, const std::string& host);

// mpirun's remote command, which ssh would hand to a login shell ("orted -mca ess \"env\" ..."),
// split into argv as that shell would for the words Open MPI writes: blanks separate words,
// single and double quotes group and are removed, a backslash escapes the next character.
// Refuses shell syntax it does not interpret (; | & $ ` < > and unbalanced quotes) rather than
// running something else than was meant.
Result<std::vector<std::string>> splitRemoteCommand(const std::vector<std::string>& words);

// A template whose program hands the command to a shell on the other node (ssh, dbclient,
// rsh): the command's words must then reach that shell quoted, one word each.
bool launcherIsRemoteShell(const std::vector<std::string>& tmpl);

// The argv rdmachaos-mpi-launch execs for HOST and mpirun's remote command WORDS: the template
// expanded, then the command split as a login shell would (splitRemoteCommand) and appended as
// words, or, for a remote shell, as one line of single-quoted words, so that the other node's
// shell runs exactly those words and interprets nothing in them.
Result<std::vector<std::string>> launchArgv(const std::vector<std::string>& tmpl, const std::string& host,
                                            const std::vector<std::string>& words);

// The template as the environment carries it to rdmachaos-mpi-launch (JSON), and back.
inline constexpr const char* kLauncherEnv = "RDMACHAOS_MPI_LAUNCHER";
std::string encodeLauncher(const std::vector<std::string>& argv);
Result<std::vector<std::string>> decodeLauncher(const std::string& text);

// What Open MPI said about a job that failed, from mpirun's output: "rank 1 (on n2) was killed
// by signal 9 (SIGKILL)" for a rank that died of a signal, Open MPI's own error lines otherwise;
// empty when it said nothing recognisable.
std::string mpiFailure(const std::string& output);

// The process's settings (the agent's [mpi]), or null when it has none. Set once at start-up.
void setMpiSettings(const MpiSettings* settings);
const MpiSettings* mpiSettings();

}  // namespace rc::workload
