// Catch2 main for the netns suite: exits 77 (meson's skip) with a reason when this process
// cannot create network namespaces, so unprivileged machines skip instead of failing; and
// also when a case skipped with RC_SKIP and nothing failed (skip.hpp). Catch2 itself is
// compiled once, in catch_session.cpp.
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "catch_session.hpp"

namespace {
// Tries to create a network namespace in a throwaway child, so this process is untouched.
bool canUseNetns() {
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) _exit(unshare(CLONE_NEWNET) == 0 ? 0 : 1);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}
}  // namespace

int main(int argc, char* argv[]) {
  if (geteuid() != 0) {
    std::printf("SKIP: netns tests need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)\n");
    return 77;
  }
  if (!canUseNetns()) {
    std::printf("SKIP: this kernel or sandbox does not allow new network namespaces\n");
    return 77;
  }
  if (system("ip -V >/dev/null 2>&1") != 0) {
    std::printf("SKIP: iproute2 ('ip') is not installed; run scripts/install-deps\n");
    return 77;
  }
  return rctest::runCatch(argc, argv);
}
