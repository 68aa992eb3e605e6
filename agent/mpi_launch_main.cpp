// rdmachaos-mpi-launch: the remote-shell program mpirun runs for each host of an `mpi` workload
// ("HOST COMMAND..."): the agent's launcher template for HOST, then mpirun's command split into
// argv as a login shell would, exec'd without a shell.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "workload/mpi_launch.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: rdmachaos-mpi-launch HOST COMMAND... (run by mpirun for the mpi workload kind)\n");
    return 2;
  }
  const char* text = std::getenv(rc::workload::kLauncherEnv);
  if (!text) {
    std::fprintf(stderr, "rdmachaos-mpi-launch: %s is not set: the agent sets it for the mpirun it starts\n",
                 rc::workload::kLauncherEnv);
    return 2;
  }
  auto tmpl = rc::workload::decodeLauncher(text);
  if (!tmpl) {
    std::fprintf(stderr, "rdmachaos-mpi-launch: %s\n", tmpl.error().message.c_str());
    return 2;
  }
  auto all = rc::workload::launchArgv(*tmpl, argv[1], std::vector<std::string>(argv + 2, argv + argc));
  if (!all) {
    std::fprintf(stderr, "rdmachaos-mpi-launch: %s\n", all.error().message.c_str());
    return 2;
  }
  std::vector<char*> args;
  for (auto& a : *all) args.push_back(a.data());
  args.push_back(nullptr);
  ::unsetenv(rc::workload::kLauncherEnv);
  ::execv(args[0], args.data());
  std::fprintf(stderr, "rdmachaos-mpi-launch: cannot run '%s': %s\n", args[0], std::strerror(errno));
  return 127;
}
