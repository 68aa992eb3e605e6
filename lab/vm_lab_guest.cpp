// The files a soft-RoCE lab guest boots from: the initramfs (a cpio archive written here,
// without a cpio binary) and the guest's init script. vm_lab.cpp writes them into the lab's
// directory.
#include <sys/stat.h>

#include <cstdio>
#include <sstream>
#include <string>

#include "lab/lab_util.hpp"
#include "lab/vm_lab_internal.hpp"

namespace rc::lab::vm {
namespace {

const char* kBusybox = "/bin/busybox";
// The initramfs needs these (in load order) to mount the host's root over 9p.
const char* kInitrdModules[] = {"virtio_ring",
                                "virtio",
                                "virtio_pci_modern_dev",
                                "virtio_pci_legacy_dev",
                                "virtio_pci",
                                "netfs",
                                "fscache",
                                "9pnet",
                                "9pnet_virtio",
                                "9p"};

// ---- initramfs -------------------------------------------------------------------------

// A newc cpio archive (the kernel's initramfs format), written without a cpio binary.
class Cpio {
 public:
  void dir(const std::string& name) { add(name, S_IFDIR | 0755, {}, 0, 0); }
  void file(const std::string& name, mode_t perm, const std::string& data) {
    add(name, S_IFREG | perm, data, 0, 0);
  }
  void charDevice(const std::string& name, int major, int minor) {
    add(name, S_IFCHR | 0600, {}, major, minor);
  }
  std::string finish() {
    add("TRAILER!!!", 0, {}, 0, 0);
    return std::move(out_);
  }

 private:
  void add(const std::string& name, mode_t mode, const std::string& data, int rmaj, int rmin) {
    char hdr[111];
    std::snprintf(hdr, sizeof hdr, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
                  ++ino_, unsigned(mode), 0u, 0u, S_ISDIR(mode) ? 2u : 1u, 0u,
                  unsigned(data.size()), 0u, 0u, unsigned(rmaj), unsigned(rmin),
                  unsigned(name.size() + 1), 0u);
    out_.append(hdr, 110);
    out_ += name;
    out_ += '\0';
    pad();
    out_ += data;
    pad();
  }
  void pad() { out_.append((4 - out_.size() % 4) % 4, '\0'); }
  std::string out_;
  unsigned ino_ = 0;
};

// modules.dep maps "kernel/.../NAME.ko" to its dependencies; we need only the paths.
Result<std::string> modulePath(const Kernel& k, const std::string& name) {
  std::istringstream dep(readText(k.modules + "/modules.dep"));
  std::string line, want = "/" + name + ".ko:";
  while (std::getline(dep, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string path = line.substr(0, colon + 1);
    if (path.size() >= want.size() &&
        path.compare(path.size() - want.size(), want.size(), want) == 0)
      return k.modules + "/" + line.substr(0, colon);
  }
  return makeError("module " + name + " is not in " + k.modules + "/modules.dep" + kInstallHint);
}

// /init of the initramfs: load virtio and 9p, mount the host's root read-only and
// switch_root into the lab's guest init script (on the host's file system).
const char* kInitrdInit = R"SH(#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /newroot
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
for m in $(/bin/busybox cat /modules.order); do
  /bin/busybox insmod /modules/$m.ko || echo "initramfs: cannot load $m"
done
rcinit=
for a in $(/bin/busybox cat /proc/cmdline); do
  case "$a" in rc_init=*) rcinit=${a#rc_init=} ;; esac
done
if ! /bin/busybox mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,ro hostroot /newroot; then
  echo "initramfs: cannot mount the host's root over 9p"; /bin/busybox poweroff -f
fi
/bin/busybox umount /proc /sys
/bin/busybox mount --move /dev /newroot/dev || /bin/busybox umount /dev
exec /bin/busybox switch_root /newroot /bin/sh "$rcinit"
)SH";

}  // namespace

Result<std::string> initramfs(const Kernel& k) {
  Cpio c;
  for (const char* d : {"bin", "dev", "proc", "sys", "newroot", "modules"}) c.dir(d);
  c.charDevice("dev/console", 5, 1);
  std::string busybox = readText(kBusybox);
  if (busybox.size() < 100'000)
    return makeError(std::string("static busybox (") + kBusybox + ") is missing" + kInstallHint);
  c.file("bin/busybox", 0755, busybox);
  std::string order;
  for (const char* m : kInitrdModules) {
    auto path = modulePath(k, m);
    if (!path) return path.error();
    std::string ko = readText(*path);
    if (ko.empty()) return makeError("cannot read " + *path);
    c.file(std::string("modules/") + m + ".ko", 0644, ko);
    order += std::string(m) + "\n";
  }
  c.file("modules.order", 0644, order);
  c.file("init", 0755, kInitrdInit);
  return c.finish();
}

// ---- the guest's init (PID 1 after switch_root) --------------------------------------------

// Written into DIR; parameters come from the kernel command line (rc_*=).
std::string guestInit(const std::string& agentBinary) {
  std::string s = R"SH(#!/bin/sh
# rdmachaos soft-RoCE lab: PID 1 of a guest (written by `rdmachaos lab up --soft-roce`).
# Mounts the guest's own state, brings up rxe0 on the data NIC and keeps the agent running.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
[ -e /dev/null ] || mount -t devtmpfs devtmpfs /dev
# Pseudo-terminals: the agent runs perftest on one (line-buffered reports).
mkdir -p /dev/pts && mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
[ -e /dev/ptmx ] || ln -s pts/ptmx /dev/ptmx
mount -t tmpfs -o mode=0755 tmpfs /run
# The host's /tmp stays visible (read-only, through the root): a build or a clone under /tmp
# holds the agent binary the guest runs. The guest's own scratch space is /run/tmp.
mkdir -p /run/tmp && chmod 1777 /run/tmp
export TMPDIR=/run/tmp
for a in $(cat /proc/cmdline); do
  case "$a" in rc_*=*) k=${a%%=*}; eval "$k=\${a#*=}" ;; esac
done
# The lab directory (certificates, agent config) is shared read-only at its host path, so the
# guest sees it as the host wrote it, whatever the root share shows there.
mkdir -p "$rc_dir" 2>/dev/null
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,ro labdir "$rc_dir"
out=/run/lab
mkdir -p $out /run/rdmachaos/state
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 labnode $out
log=$out/init.log
exec >>$log 2>&1
echo "guest init: node $rc_node, uptime $(cut -d' ' -f1 /proc/uptime) s"
hostname "$rc_node"
ip link set lo up
# No udev: the NIC driver is loaded by hand.
modprobe virtio_net
nic_of() { for d in /sys/class/net/*; do [ "$(cat $d/address)" = "$1" ] && echo ${d##*/}; done; }
m=$(nic_of "$rc_mgmt_mac"); d=$(nic_of "$rc_data_mac")
[ -n "$m" ] && ip link set "$m" name mgmt0
[ -n "$d" ] && ip link set "$d" name data0
ip addr add )SH" + std::string(kGuestMgmtAddress) +
                  R"SH(/24 dev mgmt0
ip link set mgmt0 up
ip link set data0 mtu 1500
ip addr add "$rc_data_addr" dev data0
ip link set data0 up
# rxe needs the crc32 hash; crc32_pclmul refuses to load under TCG, so the generic one.
modprobe crc32_generic
modprobe rdma_rxe
rdma link add rxe0 type rxe netdev data0 && echo "guest init: rxe0 on data0"
# Shared memory for the jobs the mpi kind starts (Open MPI and UCX open files in /dev/shm).
mkdir -p /dev/shm && mount -t tmpfs -o mode=1777 tmpfs /dev/shm
# ssh between the guests for mpirun (the mpi kind): dropbear on the data address only, keys
# only, no forwarding, root's authorised key from the lab (`lab up` made it; root's home is a
# tmpfs here, the host's /root stays out of reach). TMPDIR and PATH pass on to what it runs.
hostkey="$rc_dir/pki/guest_ssh_host_key"
if [ -r "$hostkey" ] && [ -r "$rc_dir/pki/mpi_ssh_key.pub" ] && [ -x /usr/sbin/dropbear ]; then
  mount -t tmpfs -o mode=0700 tmpfs /root
  mkdir -m 0700 /root/.ssh
  cp "$rc_dir/pki/mpi_ssh_key.pub" /root/.ssh/authorized_keys && chmod 0600 /root/.ssh/authorized_keys
  /usr/sbin/dropbear -F -E -e -s -j -k -r "$hostkey" -p "${rc_data_addr%/*}:22" -P /run/dropbear.pid \
    >> $out/dropbear.log 2>&1 &
  echo "guest init: dropbear (ssh for mpirun) on ${rc_data_addr%/*}:22"
fi
# What `lab status` and `lab up` read: written atomically every 2 s. Under TCG every exec of a
# dynamically linked tool (cat, grep, rdma) costs the guest tens of milliseconds of emulated CPU,
# so the loop reads files with the shell's own `read` and asks `rdma` for the device's resources
# every pass only while they are held beyond the kernel's own QP (every third pass, 6 s, while
# idle): an idle guest then costs the host 16 % of a core instead of 42 % (two guests measured
# over 60 s, the qemu processes' CPU time).
val() { v=; [ -r "$1" ] && read -r v < "$1"; }
pass=0
res=
report() {
  p=/sys/class/infiniband/rxe0/ports/1
  # The restart count and the agent's pid first, the listening socket after: init bumps the
  # count only once the agent it waited for is gone (its sockets closed), so "restarts N,
  # listening" always means the Nth agent listens. Read the other way round, a pass right after
  # a kill saw the dying agent's socket and the new count, and a test trusted an agent that
  # was not there yet.
  val /run/rdmachaos/restarts; restarts_now=$v
  val /run/rdmachaos/agent.pid; pid_now=$v
  listening=no
  while read -r _ l r st _; do
    case "$l $r $st" in *:1D2E\ 00000000:0000\ 0A) listening=yes; break ;; esac
  done < /proc/net/tcp
  # RDMA resources held on the device (pd, cq, qp, mr...): what a test reads to see that a
  # fault or workload left none behind.
  busy=yes
  case "$res" in *" qp 1 cm_id 0 mr 0 "*) busy=no ;; esac
  if [ -d $p ] && { [ $busy = yes ] || [ $((pass % 3)) -eq 0 ]; }; then
    res=$(rdma resource show rxe0 2>/dev/null)
  fi
  pass=$((pass + 1))
  read -r up _ < /proc/uptime
  {
    echo "node=$rc_node"
    echo "uptime=$up"
    if [ -d $p ]; then
      echo "rdma=rxe0"
      val $p/state; echo "port_state=$v"
      val $p/phys_state; echo "phys_state=$v"
      val $p/hw_counters/link_downed; echo "link_downed=$v"
      echo "rdma_res=$res"
    fi
    val /sys/class/net/data0/operstate; echo "data0=$v"
    echo "agent_listening=$listening"
    echo "agent_restarts=$restarts_now"
    echo "agent_pid=$pid_now"
  } > $out/status.tmp && mv $out/status.tmp $out/status
}
# A signal for the agent from the host (a crash on purpose, for tests and drills): the host
# writes its name (KILL, TERM...) into the node's share as signal-agent; looked at every 2 s.
signal_agent() {
  [ -f $out/signal-agent ] || return 0
  val $out/signal-agent; sig=$v; rm -f $out/signal-agent
  val /run/rdmachaos/agent.pid; pid=$v
  case "$sig" in
    KILL|TERM|HUP|INT|QUIT) [ -n "$pid" ] && kill -s "$sig" "$pid" &&
      echo "guest init: sent SIG$sig to the agent (pid $pid), as the host asked" ;;
    *) echo "guest init: ignored signal-agent '$sig' (KILL, TERM, HUP, INT or QUIT)" ;;
  esac
}
# A shell script for the guest from the host (tests and drills that must read or set what only
# the guest sees, e.g. its qdiscs): the host writes it into the node's share as guest-run; the
# guest runs it once and leaves its output and status in guest-run.out. Only root on the host
# can write the share, and root on the host owns the guest anyway.
guest_run() {
  [ -f $out/guest-run ] || return 0
  mv -f $out/guest-run /run/guest-run
  sh /run/guest-run > /run/guest-run.out 2>&1
  echo "status=$?" >> /run/guest-run.out
  cp /run/guest-run.out $out/guest-run.out.tmp && mv $out/guest-run.out.tmp $out/guest-run.out
}
restarts=0
echo 0 > /run/rdmachaos/restarts
(while :; do signal_agent; guest_run; report; sleep 2; done) &
# The agent's journal lives in the guest's tmpfs: it survives the agent, not the guest.
while :; do
  echo "guest init: starting rdmachaos-agent (restart $restarts)"
  ")SH" + agentBinary +
                  R"SH(" --config "$rc_config" >>$out/agent.log 2>&1 &
  echo $! > /run/rdmachaos/agent.pid
  wait $!
  echo "guest init: agent exited with status $?"
  rm -f /run/rdmachaos/agent.pid
  restarts=$((restarts + 1))
  echo $restarts > /run/rdmachaos/restarts
  sleep 1
done
)SH";
  return s;
}

}  // namespace rc::lab::vm
