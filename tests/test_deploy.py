#!/usr/bin/python3
# Checks deploy/: the systemd unit (systemd-analyze verify), the Kubernetes manifests (offline), the Slurm script on a real one-node Slurm.
"""Usage: test_deploy.py systemd|kubernetes|slurm-script|slurm|certs

Environment (set by tests/meson.build): RDMACHAOS_SOURCE_DIR, RDMACHAOS_AGENT (the built
agent), RDMACHAOS_CLI (the built controller). Exit 0 = pass, 1 = fail, 77 = skipped (with
the reason on stdout)."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SRC = os.environ.get("RDMACHAOS_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
AGENT = os.environ.get("RDMACHAOS_AGENT", "")
CLI = os.environ.get("RDMACHAOS_CLI", "")
NEEDED_CAPS = {"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK"}
failures = []
# Checks that could not run here (a tool missing): the part then exits 77 with these reasons,
# after every other check ran, unless one failed. A missing tool never reads as a pass.
not_run = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)
    return cond


def skip(reason):
    print("SKIP: " + reason)
    sys.exit(77)


def not_checked(reason):
    print("skip  " + reason)
    not_run.append(reason)


def parse_unit(text):
    """systemd unit -> {section: {key: [values in order]}} (keys repeat; '\\' continues a line)."""
    out, section, pending = {}, None, ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            out.setdefault(section, {})
            continue
        key, _, value = line.partition("=")
        out[section].setdefault(key.strip(), []).append(value.strip())
    return out


def seconds(value):
    """A systemd time span such as '90s', '1min 30s', '90' (seconds)."""
    units = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
    total = 0.0
    for num, unit in re.findall(r"(\d+)\s*([a-z]*)", value):
        total += int(num) * units.get(unit or "s", float("nan"))
    return total


def rewrite_toml(text, **keys):
    """Replaces the value of `key = ...` lines (one per key) in a TOML text."""
    for key, value in keys.items():
        text, n = re.subn(r'(?m)^(%s\s*=\s*)("[^"]*"|\[[^\]]*\])' % key, lambda m: m.group(1) + value, text)
        if n != 1:
            raise AssertionError("expected one '%s = ...' line in the agent config, found %d" % (key, n))
    return text


def run_agent_with(config_text, node, workdir):
    """Starts the built agent on CONFIG_TEXT with only paths and the listen address made
    local (certificates from `rdmachaos certs init`), waits for 'ready', then SIGTERM: the
    config the operator gets must be one the agent accepts and stops cleanly on."""
    pki = os.path.join(workdir, "pki")
    r = subprocess.run([CLI, "certs", "init", pki, "--agent", node], capture_output=True, text=True, timeout=60)
    if not check(r.returncode == 0, "rdmachaos certs init for node '%s' (%s)" % (node, r.stderr.strip())):
        return
    state = os.path.join(workdir, "state")
    local = rewrite_toml(config_text, state_dir='"%s"' % state, listen='"127.0.0.1:0"',
                         ca='"%s/ca.pem"' % pki, cert='"%s/agent-%s.pem"' % (pki, node),
                         key='"%s/agent-%s.key"' % (pki, node))
    path = os.path.join(workdir, "agent.toml")
    with open(path, "w") as f:
        f.write(local)
    log = open(os.path.join(workdir, "agent.log"), "w+")
    proc = subprocess.Popen([AGENT, "--config", path], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        ready = False
        while time.monotonic() < deadline and proc.poll() is None:
            log.seek(0)
            if " ready: node " + node in log.read():
                ready = True
                break
            time.sleep(0.1)
        log.seek(0)
        output = log.read()
        check(ready, "the agent starts on this config (node %s); its output:\n%s" % (node, output))
        check(os.path.isdir(os.path.join(state, "journal")), "the agent made its journal under state_dir")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        log.close()
    check(rc == 0, "SIGTERM stops the agent with exit 0 (got %s)" % rc)


def test_systemd():
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        skip("systemd-analyze is not installed (Debian package systemd; scripts/install-deps)")
    if not AGENT or not os.access(AGENT, os.X_OK):
        skip("RDMACHAOS_AGENT does not name the built agent (run through meson test)")
    d = os.path.join(SRC, "deploy", "systemd")
    unit_text = open(os.path.join(d, "rdmachaos-agent.service")).read()
    unit = parse_unit(unit_text)
    svc = unit.get("Service", {})
    one = lambda k: (svc.get(k) or [""])[-1]

    exec_start = one("ExecStart").split()
    check(exec_start[:1] == ["/usr/local/bin/rdmachaos-agent"], "ExecStart runs /usr/local/bin/rdmachaos-agent (meson install's path)")
    check(exec_start[1:] == ["--config", "/etc/rdmachaos/agent.toml"], "ExecStart passes --config /etc/rdmachaos/agent.toml")
    check(one("Restart") == "always", "Restart=always")
    check("RestartPreventExitStatus" not in svc,
          "no RestartPreventExitStatus: every exit is restarted, so every start replays the journal")
    bounding = set(" ".join(svc.get("CapabilityBoundingSet", [])).split())
    ambient = set(" ".join(svc.get("AmbientCapabilities", [])).split())
    check(bounding == NEEDED_CAPS, "CapabilityBoundingSet is exactly %s (got %s)" % (sorted(NEEDED_CAPS), sorted(bounding)))
    check(ambient == NEEDED_CAPS, "AmbientCapabilities is exactly %s (got %s)" % (sorted(NEEDED_CAPS), sorted(ambient)))
    check(one("NoNewPrivileges") == "yes", "NoNewPrivileges=yes")
    check(one("ProtectSystem") == "strict", "ProtectSystem=strict")
    check(one("StateDirectory") == "rdmachaos", "StateDirectory=rdmachaos (/var/lib/rdmachaos writable)")
    check(one("ProtectHome") == "yes", "ProtectHome=yes")
    check(one("PrivateTmp") == "yes", "PrivateTmp=yes")
    nofile = one("LimitNOFILE")
    check(nofile.isdigit() and int(nofile) >= 4096, "LimitNOFILE is a number >= 4096 (got '%s')" % nofile)
    check(one("KillSignal") == "SIGTERM", "KillSignal=SIGTERM (the agent reverts on it)")
    check(one("KillMode") == "mixed", "KillMode=mixed (a running revert command is not killed with the agent)")
    check(seconds(one("TimeoutStopSec")) >= 60,
          "TimeoutStopSec >= 60 s, longer than one ecn_shift revert command (30 s) (got '%s')" % one("TimeoutStopSec"))
    check(one("ExecReload") == "", "no ExecReload: SIGHUP reverts everything and exits")
    # Hardening: a closed device policy that still lets the verbs devices through, a system
    # call filter, other processes hidden, a memory bound.
    check("PrivateDevices" not in svc, "PrivateDevices is not set (it would hide /dev/infiniband)")
    check(one("DevicePolicy") == "closed", "DevicePolicy=closed")
    allowed = svc.get("DeviceAllow", [])
    check({"char-infiniband_verbs rw", "char-uverbs rw", "/dev/infiniband/rdma_cm rw"} <= set(allowed),
          "DeviceAllow lets the verbs devices (uverbs, rdma_cm) through, read-write (got %s)" % allowed)
    check(not any("misc" in a or "tun" in a or a.startswith("block-") for a in allowed),
          "DeviceAllow opens no other class (misc, tun, block)")
    check(one("SystemCallFilter") == "@system-service" and one("SystemCallErrorNumber") == "EPERM",
          "SystemCallFilter=@system-service, SystemCallErrorNumber=EPERM (a refused call is an error, not a kill)")
    check(one("ProtectProc") == "invisible", "ProtectProc=invisible")
    check(re.fullmatch(r"\d+[KMGT]?", one("MemoryMax")) is not None, "MemoryMax is a bound (got '%s')" % one("MemoryMax"))
    # What the agent calls must be in the filter (systemd-analyze lists the set).
    def expand(group, seen):
        """The system calls of GROUP, its @sub-groups expanded."""
        seen.add(group)
        r = subprocess.run([analyze, "syscall-filter", group], capture_output=True, text=True, timeout=60)
        out = set()
        for line in r.stdout.splitlines():
            name = line.strip()
            if not name or name.startswith("#") or name == group:
                continue
            if name.startswith("@"):
                if name not in seen:
                    out |= expand(name, seen)
            else:
                out.add(name)
        return out
    calls = expand("@system-service", set())
    needed = {"socket", "setsockopt", "sendmsg", "recvmsg", "bind", "ioctl", "mmap", "madvise", "mlock", "flock",
              "fsync", "renameat2", "linkat", "execve", "clone", "getxattr", "nanosleep", "epoll_wait"}
    check(needed <= calls, "@system-service holds the calls the agent makes (missing: %s)" % sorted(needed - calls))
    check("AF_PACKET" in one("RestrictAddressFamilies") and "AF_NETLINK" in one("RestrictAddressFamilies"),
          "RestrictAddressFamilies keeps AF_PACKET (pfc_storm) and AF_NETLINK (libnl)")

    # The example config agrees with the unit: its state_dir is the StateDirectory, and the
    # agent accepts it.
    example = open(os.path.join(d, "agent.toml")).read()
    m = re.search(r'(?m)^state_dir\s*=\s*"([^"]*)"', example)
    check(m and m.group(1) == "/var/lib/" + one("StateDirectory"),
          "example agent.toml state_dir is /var/lib/<StateDirectory> (got %s)" % (m and m.group(1)))
    node = re.search(r'(?m)^node\s*=\s*"([^"]*)"', example).group(1)

    with tempfile.TemporaryDirectory(prefix="rdmachaos-deploy-") as tmp:
        # systemd-analyze verify with the built agent in ExecStart. It exits 0 on many
        # problems (unknown keys, bad values are warnings), so any line naming the unit fails.
        path = os.path.join(tmp, "rdmachaos-agent.service")
        with open(path, "w") as f:
            f.write(unit_text.replace("/usr/local/bin/rdmachaos-agent", os.path.abspath(AGENT)))
        r = subprocess.run([analyze, "verify", "--man=no", path], capture_output=True, text=True, timeout=60)
        complaints = [l for l in (r.stdout + r.stderr).splitlines() if "rdmachaos-agent" in l]
        check(r.returncode == 0 and not complaints,
              "systemd-analyze verify: exit %d, %s" % (r.returncode, "\n".join(complaints) or "no complaints"))

        # The tmpfiles snippet creates the directories, private to root, under a scratch root.
        tmpfiles = shutil.which("systemd-tmpfiles")
        if check(tmpfiles is not None, "systemd-tmpfiles is installed"):
            root = os.path.join(tmp, "root")
            os.mkdir(root)
            r = subprocess.run([tmpfiles, "--create", "--root=" + root, os.path.join(d, "rdmachaos-tmpfiles.conf")],
                               capture_output=True, text=True, timeout=60)
            check(r.returncode == 0 and not r.stderr.strip(), "systemd-tmpfiles --create: exit %d %s" % (r.returncode, r.stderr.strip()))
            for sub, mode in (("var/lib/rdmachaos", 0o700), ("var/lib/rdmachaos/journal", 0o700), ("etc/rdmachaos", 0o750)):
                p = os.path.join(root, sub)
                got = os.stat(p).st_mode & 0o777 if os.path.isdir(p) else None
                check(got == mode, "tmpfiles makes /%s mode %o (got %s)" % (sub, mode, oct(got) if got is not None else "missing"))

        run_agent_with(example, node, tmp)


def load_manifests(d):
    import yaml
    docs = {}
    for name in sorted(os.listdir(d)):
        if name.endswith(".yaml"):
            for doc in yaml.safe_load_all(open(os.path.join(d, name))):
                if doc:
                    docs.setdefault(doc.get("kind"), []).append((name, doc))
    return docs


def mounts_of(container, volumes):
    """{mountPath: volume} for a container."""
    return {m["mountPath"]: volumes.get(m["name"]) for m in container.get("volumeMounts", [])}


def under(path, mounts):
    """The (mountPath, volume) whose mountPath contains PATH, or (None, None)."""
    best = (None, None)
    for mp, vol in mounts.items():
        if (path == mp or path.startswith(mp.rstrip("/") + "/")) and (best[0] is None or len(mp) > len(best[0])):
            best = (mp, vol)
    return best


def test_kubernetes():
    try:
        import yaml  # noqa: F401  (Debian python3-yaml)
    except ImportError:
        skip("python3-yaml is not installed (scripts/install-deps)")
    if not AGENT or not os.access(AGENT, os.X_OK):
        skip("RDMACHAOS_AGENT does not name the built agent (run through meson test)")
    d = os.path.join(SRC, "deploy", "kubernetes")
    docs = load_manifests(d)
    one = lambda kind: docs.get(kind, [(None, {})])[0][1]
    check(len(docs.get("Namespace", [])) == 1, "one Namespace")
    ns = one("Namespace").get("metadata", {}).get("name")
    for kind, items in docs.items():
        for name, doc in items:
            if kind not in ("Namespace", "Kustomization"):
                check(doc["metadata"].get("namespace") == ns, "%s %s (%s) is in namespace '%s'" % (kind, doc["metadata"]["name"], name, ns))

    # ---- the agent DaemonSet
    ds = one("DaemonSet")
    spec = ds.get("spec", {})
    pod = spec.get("template", {}).get("spec", {})
    check(spec.get("selector", {}).get("matchLabels", {}).items() <= spec.get("template", {}).get("metadata", {}).get("labels", {}).items(),
          "the DaemonSet selector matches its pod labels")
    check(pod.get("hostNetwork") is True, "hostNetwork: true (faults act on the host's interfaces)")
    check(pod.get("dnsPolicy") == "ClusterFirstWithHostNet", "dnsPolicy ClusterFirstWithHostNet with hostNetwork")
    check(pod.get("terminationGracePeriodSeconds", 30) >= 60, "terminationGracePeriodSeconds >= 60 (time to revert on SIGTERM)")
    check(pod.get("priorityClassName") == "system-node-critical",
          "priorityClassName: system-node-critical (evicted last, preempts to be scheduled)")
    quotas = [doc for _, doc in docs.get("ResourceQuota", [])
              if any(e.get("scopeName") == "PriorityClass" and "system-node-critical" in e.get("values", [])
                     for e in doc.get("spec", {}).get("scopeSelector", {}).get("matchExpressions", []))]
    check(len(quotas) == 1, "a ResourceQuota admits system-node-critical pods in the namespace (where the class is limited)")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    agent = [c for c in pod.get("containers", []) if c["name"] == "agent"]
    if not check(len(agent) == 1, "a container named 'agent'"):
        return
    agent = agent[0]
    sc = agent.get("securityContext", {})
    caps = sc.get("capabilities", {})
    check(set(caps.get("add", [])) == {c[len("CAP_"):] for c in NEEDED_CAPS},
          "the agent adds exactly NET_ADMIN, NET_RAW, IPC_LOCK (got %s)" % caps.get("add"))
    check("ALL" in caps.get("drop", []), "the agent drops ALL other capabilities")
    check(not sc.get("privileged", False), "the agent is not privileged")
    check(sc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation: false")
    res = agent.get("resources", {})
    check({"cpu", "memory"} <= set(res.get("limits", {})), "the agent has cpu and memory limits")
    check({"cpu", "memory"} <= set(res.get("requests", {})), "the agent has cpu and memory requests")
    amounts = mounts_of(agent, volumes)
    ib = amounts.get("/dev/infiniband")
    check(ib is not None and ib.get("hostPath", {}).get("path") == "/dev/infiniband", "/dev/infiniband from the host at /dev/infiniband")

    cmd = agent.get("command", []) + agent.get("args", [])
    check(cmd[:1] == ["/usr/local/bin/rdmachaos-agent"] and "--config" in cmd, "the agent runs rdmachaos-agent --config")
    config_path = cmd[cmd.index("--config") + 1] if "--config" in cmd[:-1] else ""
    cfg_mount, cfg_vol = under(config_path, amounts)
    check(cfg_vol is not None, "the agent's --config '%s' is on a volume" % config_path)

    # The config template (ConfigMap) rendered by the init container: run its script for a
    # node, then the built agent on the result.
    inits = pod.get("initContainers", [])
    renders = [c for c in inits if any(m["name"] == (cfg_vol or {}).get("name") for m in c.get("volumeMounts", []))]
    if not check(len(renders) == 1, "one init container writes the agent's config volume"):
        return
    init = renders[0]
    env_names = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in init.get("env", [])}
    check(env_names.get("NODE_NAME") == "spec.nodeName", "NODE_NAME is the Kubernetes node name (spec.nodeName)")
    check(env_names.get("HOST_IP") == "status.hostIP", "HOST_IP is the node's address (status.hostIP)")
    script = init.get("command", [])
    check(script[:1] == ["/bin/sh"], "the init container runs a /bin/sh script")
    node, host_ip = "gpu-node-007", "127.0.0.1"
    with tempfile.TemporaryDirectory(prefix="rdmachaos-k8s-") as tmp:
        local = {}
        text = script[-1]
        for m in init.get("volumeMounts", []):
            vol = volumes.get(m["name"], {})
            path = os.path.join(tmp, "vol-" + m["name"])
            os.makedirs(path, exist_ok=True)
            local[m["name"]] = path
            if "configMap" in vol:
                cms = [doc for _, doc in docs.get("ConfigMap", []) if doc["metadata"]["name"] == vol["configMap"]["name"]]
                if check(len(cms) == 1, "ConfigMap '%s' is in the manifests" % vol["configMap"]["name"]):
                    for key, value in cms[0].get("data", {}).items():
                        with open(os.path.join(path, key), "w") as f:
                            f.write(value)
            text = text.replace(m["mountPath"].rstrip("/") + "/", path + "/")
        r = subprocess.run(["/bin/sh", "-ec", text], env={"NODE_NAME": node, "HOST_IP": host_ip, "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                           capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, "the init container's script renders the config (%s)" % r.stderr.strip())
        rendered_path = os.path.join(local.get(cfg_vol["name"], tmp), os.path.relpath(config_path, cfg_mount))
        if not check(os.path.isfile(rendered_path), "the script writes %s" % config_path):
            return
        rendered = open(rendered_path).read()
        check("@" not in rendered, "no @PLACEHOLDER@ is left in the rendered config")
        get = lambda key: (re.search(r'(?m)^%s\s*=\s*"([^"]*)"' % key, rendered) or [None, None])[1]
        check(get("node") == node, "rendered node = the node name (got %s)" % get("node"))
        listen = get("listen") or ""
        check(listen.startswith(host_ip + ":"), "rendered listen is on the node address (got %s)" % listen)
        port = int(listen.rsplit(":", 1)[1]) if listen.rsplit(":", 1)[-1].isdigit() else None
        probe = agent.get("livenessProbe", {})
        probe_port = probe.get("tcpSocket", {}).get("port")
        check(probe_port is not None and probe_port == port, "the liveness probe connects to the agent port %s (got %s)" % (port, probe_port))
        state_mount, state_vol = under(get("state_dir") or "", amounts)
        check(state_vol is not None and state_vol.get("hostPath", {}).get("path") is not None,
              "state_dir '%s' is a hostPath: the journal survives a pod restart" % get("state_dir"))
        for key in ("ca", "cert", "key"):
            _, vol = under(get(key) or "", amounts)
            check(vol is not None and "secret" in vol, "tls.%s '%s' comes from a Secret" % (key, get(key)))
        check(get("cert") == "/etc/rdmachaos/tls/agent-%s.pem" % node and get("key") == "/etc/rdmachaos/tls/agent-%s.key" % node,
              "each node uses its own agent-NODE.pem/.key, the names `rdmachaos certs init` writes")
        run_agent_with(rendered, node, tmp)

    # ---- per-node-agents.sh: one Secret and one DaemonSet per node, each key on its node only
    script = os.path.join(d, "per-node-agents.sh")
    if shutil.which("shellcheck"):
        r = subprocess.run(["shellcheck", "-S", "warning", script], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "shellcheck -S warning per-node-agents.sh: %s" % (r.stdout.strip() or "clean"))
    with tempfile.TemporaryDirectory(prefix="rdmachaos-k8s-pernode-") as tmp:
        pki = os.path.join(tmp, "pki")
        nodes = ["gpu-node-001", "gpu-node-002"]
        r = subprocess.run([CLI, "certs", "init", pki] + sum([["--agent", n] for n in nodes], []),
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "certs init for the per-node Secrets (%s)" % r.stderr.strip())
        r = subprocess.run([script, pki] + nodes, capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "per-node-agents.sh runs (%s)" % r.stderr.strip())
        import yaml
        out = [x for x in yaml.safe_load_all(r.stdout) if x] if r.returncode == 0 else []
        secrets = {x["metadata"]["name"]: x for x in out if x.get("kind") == "Secret"}
        daemonsets = {x["metadata"]["name"]: x for x in out if x.get("kind") == "DaemonSet"}
        selectors = []
        for n in nodes:
            sec = secrets.get("rdmachaos-agent-tls-" + n, {})
            check(sorted(sec.get("data", {})) == sorted(["ca.pem", "agent-%s.pem" % n, "agent-%s.key" % n]),
                  "the Secret of %s holds the CA and its own pair only (%s)" % (n, sorted(sec.get("data", {}))))
            one_ds = daemonsets.get("rdmachaos-agent-" + n)
            if not check(one_ds is not None, "a DaemonSet rdmachaos-agent-%s" % n):
                continue
            p2 = one_ds["spec"]["template"]["spec"]
            terms = p2.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
            check(terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]}] and "nodeSelector" not in p2,
                  "it runs on %s only (node affinity on metadata.name)" % n)
            check([v["secret"]["secretName"] for v in p2["volumes"] if "secret" in v] == ["rdmachaos-agent-tls-" + n],
                  "it mounts only the Secret of %s" % n)
            selectors.append(json.dumps(one_ds["spec"]["selector"], sort_keys=True))
            check(one_ds["spec"]["selector"]["matchLabels"].items() <= one_ds["spec"]["template"]["metadata"]["labels"].items(),
                  "its selector matches its pod labels")
            # Everything else is the shared DaemonSet's (the copy cannot drift from it).
            strip = lambda x: {k: v for k, v in x.items() if k not in ("volumes", "nodeSelector", "affinity")}
            check(strip(p2) == strip(pod), "the rest of its pod spec is the shared DaemonSet's")
        check(len(set(selectors)) == len(nodes), "the per-node DaemonSets' selectors do not overlap")

    # ---- the controller Job
    job = one("Job")
    jspec = job.get("spec", {})
    jpod = jspec.get("template", {}).get("spec", {})
    check(jspec.get("backoffLimit") == 0, "the Job never retries a run (backoffLimit: 0)")
    check(jpod.get("restartPolicy") == "Never", "restartPolicy: Never")
    ctl = (jpod.get("containers") or [{}])[0]
    jvols = {v["name"]: v for v in jpod.get("volumes", [])}
    jmounts = mounts_of(ctl, jvols)
    jcmd = ctl.get("command", []) + ctl.get("args", [])
    check(jcmd[:2] == ["/usr/local/bin/rdmachaos", "run"], "the Job runs `rdmachaos run`")
    inv = jcmd[jcmd.index("--inventory") + 1] if "--inventory" in jcmd[:-1] else ""
    _, inv_vol = under(inv, jmounts)
    check(inv_vol is not None and "configMap" in inv_vol, "the inventory '%s' comes from a ConfigMap" % inv)
    playbook = jcmd[2] if len(jcmd) > 2 else ""
    _, pb_vol = under(playbook, jmounts)
    check(pb_vol is not None and "configMap" in pb_vol, "the playbook '%s' comes from a ConfigMap" % playbook)
    tls = [v for v in jmounts.values() if v and "secret" in v]
    check(len(tls) == 1, "the controller's TLS material comes from a Secret")
    user = jpod.get("securityContext", {}).get("runAsUser", 0)
    if tls and user != 0:
        mode = tls[0]["secret"].get("defaultMode", 0o644)
        check(jpod.get("securityContext", {}).get("fsGroup") is not None and mode & 0o040,
              "a non-root controller can read its key (fsGroup and group-readable defaultMode %o)" % mode)
    check({"cpu", "memory"} <= set(ctl.get("resources", {}).get("limits", {})), "the controller has cpu and memory limits")

    # ---- kustomization: every resource exists; kubectl (if present) builds it offline
    kus = one("Kustomization")
    for res_name in kus.get("resources", []):
        check(os.path.isfile(os.path.join(d, res_name)), "kustomization resource %s exists" % res_name)
    kubectl = shutil.which("kubectl")
    if kubectl:
        r = subprocess.run([kubectl, "kustomize", d], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0 and "kind: DaemonSet" in r.stdout, "kubectl kustomize builds it (%s)" % r.stderr.strip())
    else:
        not_checked("kubectl is not installed: `kubectl kustomize` not tried (Debian's kubernetes-client; scripts/install-deps)")


def test_slurm_script():
    """The batch script without Slurm: bash parses it, shellcheck finds no warning, and it
    stops the agents through their step, never by signalling srun."""
    script = os.path.join(SRC, "deploy", "slurm", "rdmachaos.sbatch")
    r = subprocess.run(["bash", "-n", script], capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, "bash -n %s (%s)" % (script, r.stderr.strip()))
    check(os.access(script, os.X_OK), "the script is executable")
    text = open(script).read()
    check(re.search(r"(?m)^#SBATCH --ntasks-per-node=1$", text) is not None, "#SBATCH --ntasks-per-node=1: one agent per node")
    check("scontrol show hostnames" in text, "the node list comes from scontrol show hostnames")
    check('scancel --signal=TERM "$step"' in text and not re.search(r'kill -TERM "\$agents_pid"', text),
          "agents are stopped with scancel --signal=TERM on their step, not by SIGTERM to srun")
    check(re.search(r"(?m)^trap .*stop_agents.* EXIT$", text) is not None, "an EXIT trap stops the agents")
    epilog = os.path.join(SRC, "deploy", "slurm", "rdmachaos-epilog")
    r = subprocess.run(["bash", "-n", epilog], capture_output=True, text=True, timeout=30)
    check(r.returncode == 0 and os.access(epilog, os.X_OK), "the epilog parses (bash -n) and is executable (%s)" % r.stderr.strip())
    etext = open(epilog).read()
    check("--replay-only" in etext and "state=drain" in etext,
          "the epilog replays with rdmachaos-agent --replay-only and drains the node when something is left")
    shellcheck = shutil.which("shellcheck")
    if shellcheck:
        for path in (script, epilog):
            r = subprocess.run([shellcheck, "-S", "warning", path], capture_output=True, text=True, timeout=60)
            check(r.returncode == 0, "shellcheck -S warning %s: %s" % (os.path.basename(path), r.stdout.strip() or "clean"))
    else:
        not_checked("shellcheck is not installed: the Slurm script is not linted (scripts/install-deps)")


def free_ports(n):
    import socket
    socks = [socket.socket() for _ in range(n)]
    for so in socks:
        so.bind(("127.0.0.1", 0))
    ports = [so.getsockname()[1] for so in socks]
    for so in socks:
        so.close()
    return ports


def free_consecutive_ports(n):
    """A port P with P..P+N-1 all free on 127.0.0.1 now (the kernel picks P, the rest are tried)."""
    import socket
    for _ in range(50):
        socks = []
        try:
            first = socket.socket()
            first.bind(("127.0.0.1", 0))
            socks.append(first)
            p = first.getsockname()[1]
            for k in range(1, n):
                so = socket.socket()
                socks.append(so)
                so.bind(("127.0.0.1", p + k))
            return p
        except OSError:
            continue
        finally:
            for so in socks:
                so.close()
    raise RuntimeError("no %d consecutive free ports on 127.0.0.1" % n)


def stop(proc, name):
    """Stops a daemon this test started, by its own Popen handle (never by name)."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        print("note  %s did not stop on SIGTERM; killing it" % name)
        proc.kill()
        proc.wait()


def wait_for(what, cond, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return False


CLONE_NEWNET = 0x40000000
# The agents' fault targets in the test's network namespace, one per agent: veths (the
# kernel may have no dummy driver) with their peers, up.
FAULT_IFACES = ("rcflt0", "rcflt1")


def setns(fd):
    """setns(2) into the network namespace open as FD (Python 3.11's os has no setns)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "setns: " + os.strerror(err))


def link_up(name):
    """Admin state of NAME in this process's network namespace, as ip(8) reads it."""
    r = subprocess.run(["ip", "-j", "link", "show", "dev", name], capture_output=True, text=True)
    try:
        return "UP" in json.loads(r.stdout)[0]["flags"]
    except (ValueError, IndexError, KeyError):
        return None


def test_slurm():
    """The Slurm of test_slurm_in_netns runs in a network namespace of its own (lo and two
    veth interfaces the agents' link faults take down): this process enters it, so that
    the daemons, the jobs and every ip(8) check are there, and nothing touches the machine's
    own interfaces. The namespace is deleted at the end."""
    if os.geteuid() != 0:
        skip("a test Slurm runs its daemons as root (SlurmUser=root), in a network namespace; run as root")
    if not shutil.which("ip"):
        skip("iproute2 (ip) is not installed")
    ns = "rcslurm-%d" % os.getpid()
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    r = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True)
    if r.returncode != 0:
        skip("cannot create a network namespace: " + r.stderr.strip())
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        # And an address that is not loopback on a third veth: with only lo, getaddrinfo's
        # AI_ADDRCONFIG finds no IPv4 address configured and slurmctld resolves nothing.
        cmds = [["ip", "-n", ns, "link", "set", "lo", "up"],
                ["ip", "-n", ns, "link", "add", "rcaddr0", "type", "veth", "peer", "name", "rcaddr0p"],
                ["ip", "-n", ns, "addr", "add", "192.0.2.1/24", "dev", "rcaddr0"],
                ["ip", "-n", ns, "link", "set", "rcaddr0p", "up"], ["ip", "-n", ns, "link", "set", "rcaddr0", "up"]]
        for name in FAULT_IFACES:
            cmds += [["ip", "-n", ns, "link", "add", name, "type", "veth", "peer", "name", name + "p"],
                     ["ip", "-n", ns, "link", "set", name + "p", "up"], ["ip", "-n", ns, "link", "set", name, "up"]]
        for c in cmds:
            subprocess.run(c, check=True)
        there = os.open("/run/netns/" + ns, os.O_RDONLY)
        try:
            setns(there)
        finally:
            os.close(there)
        test_slurm_in_netns()
    finally:
        setns(home)
        os.close(home)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_slurm_in_netns():
    tools = {t: shutil.which(t) for t in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "sinfo", "srun")}
    missing = [t for t, p in tools.items() if not p]
    if missing:
        skip("Slurm is not installed (%s missing): RDMACHAOS_SLURM=1 scripts/install-deps" % ", ".join(missing))
    if os.geteuid() != 0:
        skip("a test Slurm runs its daemons as root (SlurmUser=root); run as root")
    if not AGENT or not CLI:
        skip("RDMACHAOS_AGENT/RDMACHAOS_CLI do not name the built binaries (run through meson test)")
    tmp = tempfile.mkdtemp(prefix="rdmachaos-slurm-")
    os.chmod(tmp, 0o700)
    daemons = {}
    logs = lambda: "\n".join("--- %s\n%s" % (f, open(os.path.join(tmp, f), errors="replace").read()[-2000:])
                              for f in sorted(os.listdir(tmp)) if f.endswith((".log", ".out")))
    try:
        # munge, with its own key and socket in the scratch directory.
        os.mkdir(os.path.join(tmp, "munge"), 0o700)
        key = os.path.join(tmp, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o600)
        sock = os.path.join(tmp, "munge", "munge.sock")
        daemons["munged"] = subprocess.Popen(
            [tools["munged"], "-F", "--force", "--socket=" + sock, "--key-file=" + key,
             "--pid-file=" + os.path.join(tmp, "munge", "munged.pid"), "--seed-file=" + os.path.join(tmp, "munge", "seed")],
            stdout=open(os.path.join(tmp, "munged.log"), "w"), stderr=subprocess.STDOUT)
        if not wait_for("munge", lambda: os.path.exists(sock) or daemons["munged"].poll() is not None, 15) or not os.path.exists(sock):
            skip("munged did not start:\n" + logs())

        ctld_port, slurmd_port, agent_port = free_ports(3)
        host = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()
        for d in ("state", "spool"):
            os.mkdir(os.path.join(tmp, d))
        conf = os.path.join(tmp, "slurm.conf")
        # The shipped epilog, with its settings for this Slurm in a file of its own (an
        # operator's /etc/rdmachaos/epilog.conf, named by RDMACHAOS_EPILOG_CONF here and in
        # the jobs' environment); its output goes to epilog.log.
        epilog_conf = os.path.join(tmp, "epilog.conf")
        with open(epilog_conf, "w") as f:
            f.write('RDMACHAOS_BIN_DIR="%s"\nRDMACHAOS_STATE_DIR="%s"\nRDMACHAOS_EPILOG_RETRY=2s\n'
                    % (os.path.join(tmp, "bin"), os.path.join(tmp, "agent-state")))
        epilog = os.path.join(tmp, "epilog")
        with open(epilog, "w") as f:
            f.write('#!/bin/sh\nexport SLURM_CONF="%s" RDMACHAOS_EPILOG_CONF="%s"\n'
                    'exec /bin/bash "%s" 2>>"%s"\n'
                    % (conf, epilog_conf, os.path.join(SRC, "deploy", "slurm", "rdmachaos-epilog"),
                       os.path.join(tmp, "epilog.log")))
        os.chmod(epilog, 0o755)
        with open(conf, "w") as f:
            f.write("""# generated by tests/test_deploy.py slurm: one node, daemons as root, no cgroups
ClusterName=rdmachaostest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
StateSaveLocation={tmp}/state
SlurmdSpoolDir={tmp}/spool
SlurmctldPidFile={tmp}/slurmctld.pid
SlurmdPidFile={tmp}/slurmd.pid
SlurmctldLogFile={tmp}/slurmctld.log
SlurmdLogFile={tmp}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
KillWait=60
Epilog={tmp}/epilog
NodeName=rcnode1 NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=rdmachaos Nodes=rcnode1 Default=YES MaxTime=INFINITE State=UP
""".format(host=host, ctld_port=ctld_port, slurmd_port=slurmd_port, sock=sock, tmp=tmp, cpus=os.cpu_count()))
        env = dict(os.environ, SLURM_CONF=conf)
        daemons["slurmctld"] = subprocess.Popen([tools["slurmctld"], "-D", "-i", "-f", conf], env=env,
                                                stdout=open(os.path.join(tmp, "slurmctld.out"), "w"), stderr=subprocess.STDOUT)
        daemons["slurmd"] = subprocess.Popen([tools["slurmd"], "-D", "-N", "rcnode1", "-f", conf], env=env,
                                             stdout=open(os.path.join(tmp, "slurmd.out"), "w"), stderr=subprocess.STDOUT)
        idle = lambda: subprocess.run([tools["sinfo"], "-h", "-o", "%t"], env=env, capture_output=True, text=True).stdout.strip() == "idle"
        if not wait_for("slurm", idle, 30):
            skip("Slurm did not come up (node not idle within 30 s):\n" + logs())
        print("ok    a one-node Slurm (munged, slurmctld, slurmd) is up")

        # The batch script, as an operator submits it, with the built binaries. One Slurm node
        # runs two agents (RDMACHAOS_AGENTS_PER_NODE=2: rcnode1-0 and rcnode1-1, each its own
        # port, journal and loopback data address), so a quickstart-like playbook runs for
        # real: an all-reduce between them, a noop fault on both, scores and reports. No
        # RDMACHAOS_STATE_DIR: the agents journal in the epilog's (its settings file).
        bindir = os.path.join(tmp, "bin")
        os.mkdir(bindir)
        os.symlink(os.path.abspath(CLI), os.path.join(bindir, "rdmachaos"))
        os.symlink(os.path.abspath(AGENT), os.path.join(bindir, "rdmachaos-agent"))
        playbook = os.path.join(tmp, "slurm-quickstart.toml")
        with open(playbook, "w") as f:
            f.write('name = "slurm-quickstart"\nseed = 1\n[workload]\nkind = "allreduce"\nsize = "1MiB"\nnodes = "all"\n'
                    '[scoring]\nwarmup = "1s"\n'
                    '[[phase]]\nname = "baseline"\nduration = "3s"\n[[phase]]\nname = "fault"\nduration = "2s"\n'
                    '[[phase]]\nname = "recovery"\nduration = "2s"\n'
                    '[[step]]\nname = "nothing"\nkind = "noop"\ntarget = "all"\nphase = "fault"\nat = "0s"\nfor = "1s"\n'
                    # A noop must not stall the job: judged like the quickstart's stall bound.
                    '[[expect]]\nmetric = "longest_stall"\nop = "<="\nbound = "3s"\n')
        run_dir = os.path.join(tmp, "run")
        # The second agent listens on agent_port + 1: make sure nobody else does.
        agent_port = free_consecutive_ports(2)
        job_env = dict(env, RDMACHAOS_BIN_DIR=bindir, RDMACHAOS_PKI=os.path.join(tmp, "pki"), RDMACHAOS_RUN_DIR=run_dir,
                       RDMACHAOS_MGMT_IFACE="lo", RDMACHAOS_DATA_IFACES="lo", RDMACHAOS_PORT=str(agent_port),
                       RDMACHAOS_EPILOG_CONF=epilog_conf, RDMACHAOS_AGENTS_PER_NODE="2",
                       RDMACHAOS_READY_TIMEOUT="30", RDMACHAOS_ALLOW_IFACES=",".join(FAULT_IFACES))
        out = os.path.join(tmp, "job.out")
        r = subprocess.run([tools["sbatch"], "--parsable", "--wait", "-N", "1", "-o", out,
                            os.path.join(SRC, "deploy", "slurm", "rdmachaos.sbatch"), playbook],
                           env=job_env, capture_output=True, text=True, timeout=200)
        job = r.stdout.strip().split(";")[0]
        text = open(out).read() if os.path.exists(out) else ""
        print("--- job %s output\n%s---" % (job, text))
        check(r.returncode == 0, "the job ends with exit 0: rdmachaos run passed (sbatch --wait: %d %s)" % (r.returncode, r.stderr.strip()))
        inv = open(os.path.join(run_dir, "inventory.toml")).read() if os.path.exists(os.path.join(run_dir, "inventory.toml")) else ""
        check('name = "rcnode1-0"' in inv and 'name = "rcnode1-1"' in inv and 'address = "127.0.0.1"' in inv
              and "port = %d" % agent_port in inv and "port = %d" % (agent_port + 1) in inv
              and 'data_addresses = ["127.0.0.1"]' in inv and 'data_addresses = ["127.0.0.2"]' in inv,
              "the inventory names both agents of the allocated node with their addresses and ports")
        for n in ("rcnode1-0", "rcnode1-1"):
            check(os.path.isfile(os.path.join(tmp, "pki", "agent-%s.pem" % n)), "certs init issued agent-%s.pem" % n)
            check("ready: node %s" % n in text, "agent %s ran as a Slurm task" % n)
        check("2 of 2 agents reachable" in text, "`rdmachaos agents` reached both agents started by srun")
        result_path = os.path.join(run_dir, "report", "result.json")
        result = json.load(open(result_path)) if os.path.exists(result_path) else {}
        faults = result.get("faults", [])
        check(sorted(f.get("node") for f in faults) == ["rcnode1-0", "rcnode1-1"]
              and all(f.get("applied_ns") is not None and f.get("reverted_ns") is not None for f in faults),
              "the run applied and reverted the noop on both agents (result.json: %s)" % [(f.get("node"), f.get("applied_ns"), f.get("reverted_ns")) for f in faults])
        check(os.path.isfile(os.path.join(run_dir, "report", "report.html")), "the run wrote report.html")
        check("playbook slurm-quickstart: passed (1 expectations met)" in text, "the run judged its expectation and passed")
        check(text.count("signal 15: reverting every fault") >= 2 and text.count("stopped; no fault left applied") >= 2,
              "on exit the script SIGTERMs both agents (through scancel on their step) and they revert")
        check("agents stopped (srun exit 0)" in text, "srun ends with exit 0: no agent was SIGKILLed")
        for n in ("0", "1"):
            journal = os.path.join(tmp, "agent-state", "agent-" + n, "journal")
            check(os.path.isdir(journal) and not os.listdir(journal),
                  "agent %s's journal is there, in the epilog's state directory, and empty" % n)
        steps = subprocess.run([tools["squeue"], "--steps", "-h"], env=env, capture_output=True, text=True).stdout.strip()
        check(steps == "", "no job step is left running (%s)" % steps)

        # Stopped early while a link fault is held (docs/deploy.md): each agent holds its own
        # veth down. First the agents alone (`scancel --signal=TERM JOBID`).
        stop_early(tools, env, job_env, tmp, "job")
        # The batch shell alone signalled: by hand, then by Slurm's timer near the time limit.
        stop_early(tools, env, job_env, tmp, "batch")
        stop_early(tools, env, job_env, tmp, "timelimit")
        # Killed: a plain `scancel JOBID` (srun may SIGKILL the agents), and the agents
        # SIGKILLed outright (the OOM killer, KillWait running out): the epilog reverts.
        stop_early(tools, env, job_env, tmp, "plain")
        stop_early(tools, env, job_env, tmp, "kill")
        epilog_drains(tools, env, tmp)
        # A state directory the epilog does not replay is refused; a journal held by a live
        # agent (the systemd unit's) is left to it, and does not hide a leftover.
        custom_state_dir(tools, env, job_env, tmp)
        live_agent_journal(tools, env, tmp)
    finally:
        for name in ("slurmd", "slurmctld", "munged"):
            stop(daemons.get(name), name)
        if failures:
            print(logs())
        shutil.rmtree(tmp, ignore_errors=True)


def slurm_job_state(tools, env, job):
    """JobState and ExitCode of JOB from slurmctld's memory (no accounting here; a finished job
    stays there MinJobAge, 300 s by default)."""
    r = subprocess.run([tools["scontrol"], "show", "job", "-o", job], env=env, capture_output=True, text=True)
    state = re.search(r"\bJobState=(\S+)", r.stdout)
    code = re.search(r"\bExitCode=(\S+)", r.stdout)
    return (state.group(1) if state else "?"), (code.group(1) if code else "?")


def job_active(tools, env, job):
    """True while JOB is pending, running or completing (squeue's default states)."""
    r = subprocess.run([tools["squeue"], "-h", "-o", "%i"], env=env, capture_output=True, text=True)
    return job in r.stdout.split()


def write_hold_playbook(tmp):
    """The playbook of the hold jobs: agent i (rcnode1-i) holds FAULT_IFACES[i] down for 100 s."""
    playbook = os.path.join(tmp, "slurm-hold.toml")
    with open(playbook, "w") as f:
        f.write('name = "slurm-hold"\nseed = 1\n[workload]\nkind = "allreduce"\nsize = "1MiB"\nnodes = "all"\n'
                '[scoring]\nwarmup = "1s"\n'
                '[[phase]]\nname = "baseline"\nduration = "3s"\n[[phase]]\nname = "fault"\nduration = "110s"\n'
                '[[phase]]\nname = "recovery"\nduration = "2s"\n')
        for i, name in enumerate(FAULT_IFACES):
            f.write('[[step]]\nname = "hold%d"\nkind = "link_flap"\ntarget = "rcnode1-%d"\nphase = "fault"\nat = "0s"\n'
                    'for = "100s"\nparams = { interface = "%s", down = "100s" }\n' % (i, i, name))
    return playbook


def applied_in(journal):
    """An entry of JOURNAL whose start_ns is 1 s past: the fault is applied (a fault is
    journaled when scheduled, applied at start_ns, and its entry goes when reverted or
    when it could not be applied)."""
    try:
        for name in (n for n in os.listdir(journal) if n.endswith(".json")):
            with open(os.path.join(journal, name)) as f:
                if json.load(f)["record"]["start_ns"] + 1_000_000_000 <= time.time_ns():
                    return True
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return False


def kill_agents(tools, env, job):
    """SIGKILLs JOB's agents by PID (`scontrol listpids`, those running the built agent), as
    the OOM killer or KillWait running out would. Returns their PIDs and listpids' output."""
    r = subprocess.run([tools["scontrol"], "listpids", job], env=env, capture_output=True, text=True, timeout=30)
    agents = []
    for line in r.stdout.splitlines()[1:]:
        pid = line.split()[0] if line.split() else ""
        try:
            if pid.isdigit() and os.path.realpath("/proc/%s/exe" % pid) == os.path.realpath(AGENT):
                agents.append(int(pid))
        except OSError:
            pass
    for pid in agents:
        os.kill(pid, signal.SIGKILL)
    return agents, r.stdout.strip()


def stop_early(tools, env, job_env, tmp, mode):
    """A job of test_slurm that holds a link fault (agent i keeps its veth FAULT_IFACES[i]
    down, journaled), then is stopped before its end. MODE:
    "job": `scancel --signal=TERM JOBID`. Slurm signals the job's steps but not the batch
      step: the agents get SIGTERM (not the batch shell, not srun), revert and exit; the
      controller loses them, aborts and exits 2, and the script ends with that.
    "batch": `scancel --batch --signal=TERM JOBID` signals the batch shell alone: its trap
      SIGTERMs `rdmachaos run` (which reverts what it scheduled, writes its reports and exits
      2), then the agents' step.
    "timelimit": no scancel: submitted with --time=2 --signal=B:TERM@45, Slurm's timer sends
      the batch shell SIGTERM 45 s before the limit or up to a minute earlier (its
      resolution): 15-75 s into the job (with @60, 33 and 62 s after sbatch were seen; the
      fault is held 7-10 s after sbatch). The same path as "batch"; the script's own line
      is --signal=B:TERM@120.
    "plain": a plain `scancel JOBID`: every process of the job is signalled at once, srun
      may SIGKILL an agent before it reverts. Whatever the agents did, the epilog leaves the
      links up and the journals empty.
    "kill": both agents SIGKILLed (as by the OOM killer or KillWait running out; `scancel
      --signal=KILL` is not that: Slurm turns it into a cancel, SIGTERM first): this test
      kills them by PID (`scontrol listpids`, those running the built agent). They die with
      their faults applied, the controller loses them and aborts, and only the epilog
      reverts.
    Every mode ends with both dummies up (ip(8)) and both journals empty."""
    how = {"job": "scancel --signal=TERM", "batch": "scancel --batch --signal=TERM",
           "timelimit": "--time=2 --signal=B:TERM@45", "plain": "scancel", "kill": "SIGKILL of the agents"}[mode]
    playbook = write_hold_playbook(tmp)
    run_dir = os.path.join(tmp, "run-" + mode)
    port = free_consecutive_ports(2)
    # The epilog's state directory named outright (the trailing slash: the same directory).
    job_env = dict(job_env, RDMACHAOS_RUN_DIR=run_dir, RDMACHAOS_PORT=str(port),
                   RDMACHAOS_STATE_DIR=os.path.join(tmp, "agent-state") + "/")
    out = os.path.join(tmp, "job-%s.out" % mode)
    journals = [os.path.join(tmp, "agent-state", "agent-%d" % i, "journal") for i in (0, 1)]
    extra = ["--time=2", "--signal=B:TERM@45"] if mode == "timelimit" else []
    check(all(link_up(n) for n in FAULT_IFACES), "[%s] %s are up before the job" % (how, ", ".join(FAULT_IFACES)))
    r = subprocess.run([tools["sbatch"], "--parsable", "-N", "1", "-o", out] + extra +
                       [os.path.join(SRC, "deploy", "slurm", "rdmachaos.sbatch"), playbook],
                       env=job_env, capture_output=True, text=True, timeout=60)
    job = r.stdout.strip().split(";")[0]
    if not check(r.returncode == 0 and job.isdigit(), "[%s] the hold job is submitted (%s %s)" % (how, job, r.stderr.strip())):
        return
    submitted = time.monotonic()
    held = lambda: all(applied_in(j) for j in journals) and not any(link_up(n) for n in FAULT_IFACES)
    wait_for("the held fault", lambda: held() or not job_active(tools, env, job), 90)
    check(held(), "[%s] both agents hold their link down: journaled, its start 1 s past, ip shows %s down (%.1f s after sbatch)"
          % (how, " and ".join(FAULT_IFACES), time.monotonic() - submitted))
    epilog_log = os.path.join(tmp, "epilog.log")
    epilog_before = os.path.getsize(epilog_log) if os.path.exists(epilog_log) else 0
    started = time.monotonic()
    if mode == "kill":
        agents, listed = kill_agents(tools, env, job)
        # Looked at at once: the controller sees its agents gone, aborts, the job ends and the
        # epilog reverts, all within about half a second (a fresh-clone CI run looked 0.5 s
        # later and found the epilog done). The epilog's own log says it reverted both below.
        down_after_kill = not any(link_up(n) for n in FAULT_IFACES)
        check(len(agents) == 2, "[%s] both agents SIGKILLed by PID (%s; scontrol listpids: %s)" % (how, agents, listed))
    elif mode != "timelimit":
        cmd = [tools["scancel"]] + {"job": ["--signal=TERM"], "batch": ["--batch", "--signal=TERM"], "plain": []}[mode] + [job]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, "[%s] %s %s (%s)" % (how, how, job, r.stderr.strip()))
    # A job is in squeue until its epilog has run (state CG).
    ended = wait_for("the job's end", lambda: not job_active(tools, env, job), 150)
    took = time.monotonic() - started
    text = open(out).read() if os.path.exists(out) else ""
    print("--- job %s output (%s)\n%s---" % (job, how, text))
    epilog_text = open(epilog_log).read()[epilog_before:] if os.path.exists(epilog_log) else ""
    print("--- epilog after job %s\n%s---" % (job, epilog_text))
    since = {"timelimit": "the fault held", "kill": "the kill"}.get(mode, "scancel")
    check(ended, "[%s] the job leaves squeue within 150 s (%.1f s after %s)" % (how, took, since))
    print("note  [%s] from %s to the job gone from squeue: %.1f s (%.1f s after sbatch)"
          % (how, since, took, time.monotonic() - submitted))
    for n in FAULT_IFACES:
        check(link_up(n), "[%s] ip(8): %s is up after the job" % (how, n))
    for j in journals:
        check(os.path.isdir(j) and not [e for e in os.listdir(j) if e.endswith(".json")],
              "[%s] %s is empty afterwards" % (how, os.path.relpath(j, tmp)))
    steps = subprocess.run([tools["squeue"], "--steps", "-h"], env=env, capture_output=True, text=True).stdout.strip()
    check(steps == "", "[%s] no job step is left running (%s)" % (how, steps))
    state, code = slurm_job_state(tools, env, job)
    node_state = subprocess.run([tools["sinfo"], "-h", "-o", "%t"], env=env, capture_output=True, text=True).stdout.strip()
    check(node_state == "idle", "[%s] the node is idle again, not drained (%s)" % (how, node_state))
    if mode == "kill":
        epilog_reverted = epilog_text.count("reverted journaled fault") == 2 and epilog_text.count("no fault left applied") == 2
        # The SIGKILLed agents reverted nothing: their links were still down right after the
        # kill, or (the epilog having been quicker than the look) the epilog found both faults
        # journaled and reverted them, which it does only for faults left applied.
        check(down_after_kill or epilog_reverted,
              "[%s] the killed agents left both links down (%s)"
              % (how, "seen down right after the kill" if down_after_kill else "the epilog reverted both"))
        check(epilog_reverted, "[%s] the epilog reverted both killed agents' faults (its log above)" % how)
        check("aborting: lost agent" in text and "rdmachaos run exit 2" in text,
              "[%s] the controller loses the killed agents, aborts and exits 2" % how)
        check(state == "FAILED" and code == "2:0", "[%s] the job ends FAILED with exit 2 (JobState=%s ExitCode=%s)"
              % (how, state, code))
        return
    if mode == "plain":
        # Who reverted (the agents on SIGTERM, or the epilog after srun's SIGKILL) varies
        # with the race; the links and journals above are the promise.
        print("note  [%s] agents that reverted on SIGTERM: %d; epilog reverts: %d; job state %s %s"
              % (how, text.count("stopped; no fault left applied"), epilog_text.count("reverted journaled fault"), state, code))
        return
    check(text.count("signal 15: reverting every fault") >= 2 and text.count("stopped; no fault left applied") >= 2,
          "[%s] both agents got SIGTERM, reverted and stopped with no fault left applied" % how)
    check("agents stopped (srun exit 0)" in text, "[%s] srun ends with exit 0: no agent was SIGKILLed" % how)
    if mode == "job":
        check("aborting: lost agent" in text and "rdmachaos run exit 2" in text and "cancelled or out of time" not in text,
              "[%s] only the agents are signalled: the controller loses them, aborts and exits 2" % how)
    else:
        check("cancelled or out of time" in text and "aborting: interrupted by the operator" in text,
              "[%s] the batch shell's trap stops `rdmachaos run`, which aborts" % how)
    check(state == "FAILED" and code == "2:0", "[%s] the job ends FAILED with exit 2, not success (JobState=%s ExitCode=%s)"
          % (how, state, code))
    result_path = os.path.join(run_dir, "report", "result.json")
    result = json.load(open(result_path)) if os.path.exists(result_path) else {}
    reason = result.get("run", {}).get("abort_reason", "")
    want = "lost agent" if mode == "job" else "interrupted by the operator"
    check(want in reason, "[%s] result.json records the abort (%r)" % (how, reason))
    faults = [(f.get("node"), f.get("applied_ns"), f.get("reverted_ns")) for f in result.get("faults", [])]
    if mode == "job":
        # The agents exit before their faults' end reports reach the controller, which learns
        # a fault's applied and reverted times from that report: the report shows neither
        # ("no fault was applied"). The journals and links above are the evidence of the revert.
        print("note  [%s] result.json's faults without the agents' end reports: %s" % (how, faults))
    else:
        check(len(faults) == 2 and all(f[1] is not None and f[2] is not None for f in faults),
              "[%s] result.json: the controller reverted the link faults on both agents, with its times (%s)" % (how, faults))


def write_stuck_entry(journal):
    """A journaled link_flap the epilog cannot revert (its interface renamed since: the revert
    refuses to touch it) in JOURNAL; returns its path."""
    os.makedirs(journal, exist_ok=True)
    index = json.loads(subprocess.run(["ip", "-j", "link", "show", "dev", FAULT_IFACES[0]], capture_output=True,
                                      text=True).stdout)[0]["ifindex"]
    entry = os.path.join(journal, "stuck.json")
    with open(entry, "w") as f:
        json.dump({"fault": "stuck", "record": {"kind": "link_flap", "params": {"interface": "rcgone"},
                                                "targets": ["rcgone"], "start_ns": 0, "lifetime_ms": 1000,
                                                "snapshot": {"interface": "rcgone", "ifindex": index, "admin_up": True}}}, f)
    return entry


def trivial_job(tools, env, tmp, tag):
    """Submits `true` and waits for it and its epilog to end. Returns the job id, or None."""
    r = subprocess.run([tools["sbatch"], "--parsable", "-N", "1", "-o", os.path.join(tmp, "job-%s.out" % tag),
                        "--wrap", "true"], env=env, capture_output=True, text=True, timeout=60)
    job = r.stdout.strip().split(";")[0]
    if not check(r.returncode == 0 and job.isdigit(), "[%s] a job is submitted (%s)" % (tag, r.stderr.strip())):
        return None
    check(wait_for("the job's end", lambda: not job_active(tools, env, job), 60), "[%s] the job and its epilog end" % tag)
    return job


def node_state(tools, env):
    """rcnode1's State and Reason, as scontrol shows them."""
    node = subprocess.run([tools["scontrol"], "show", "node", "rcnode1", "-o"], env=env, capture_output=True, text=True).stdout
    state = re.search(r"\bState=(\S+)", node)
    reason = re.search(r"\bReason=(.*?)(?: \[|$)", node)
    return (state.group(1) if state else ""), (reason.group(1) if reason else "")


def epilog_log_since(tmp, offset):
    path = os.path.join(tmp, "epilog.log")
    return open(path).read()[offset:] if os.path.exists(path) else ""


def epilog_log_size(tmp):
    path = os.path.join(tmp, "epilog.log")
    return os.path.getsize(path) if os.path.exists(path) else 0


def epilog_drains(tools, env, tmp):
    """A fault the epilog cannot revert drains the node with a reason naming it; the node is
    resumed and the entry removed afterwards."""
    entry = write_stuck_entry(os.path.join(tmp, "agent-state", "agent-0", "journal"))
    try:
        if trivial_job(tools, env, tmp, "drain") is None:
            return
        state, reason = node_state(tools, env)
        check("DRAIN" in state, "[drain] the node is drained (%s)" % state)
        check("rdmachaos" in reason and "'stuck' (link_flap) NOT reverted" in reason,
              "[drain] the reason names the fault left applied (%s)" % reason)
        check(os.path.exists(entry), "[drain] the entry stays in the journal for the operator")
    finally:
        if os.path.exists(entry):
            os.remove(entry)
        subprocess.run([tools["scontrol"], "update", "nodename=rcnode1", "state=resume"], env=env, capture_output=True)


def custom_state_dir(tools, env, job_env, tmp):
    """The hold job submitted with a RDMACHAOS_STATE_DIR the epilog does not replay (its
    settings file names agent-state). Left to run, its agents would journal there, and once
    SIGKILLed with their links down the epilog would find no journal, exit 0 and leave the
    node idle with the faults applied. The batch script refuses it before any agent starts,
    naming both directories. Should agents start and hold their faults all the same (the
    scripts before the refusal), they are SIGKILLed as in stop_early's "kill", so that the
    checks below see what that leaves; the links are put back up at the end either way."""
    tag = "custom state dir"
    other = os.path.join(tmp, "job-state")
    epilog_state = os.path.join(tmp, "agent-state")
    out = os.path.join(tmp, "job-custom.out")
    job_env = dict(job_env, RDMACHAOS_RUN_DIR=os.path.join(tmp, "run-custom"),
                   RDMACHAOS_PORT=str(free_consecutive_ports(2)), RDMACHAOS_STATE_DIR=other)
    journals = [os.path.join(other, "agent-%d" % i, "journal") for i in (0, 1)]
    seen_down = []
    try:
        r = subprocess.run([tools["sbatch"], "--parsable", "-N", "1", "-o", out,
                            os.path.join(SRC, "deploy", "slurm", "rdmachaos.sbatch"), write_hold_playbook(tmp)],
                           env=job_env, capture_output=True, text=True, timeout=60)
        job = r.stdout.strip().split(";")[0]
        if not check(r.returncode == 0 and job.isdigit(), "[%s] the hold job is submitted (%s %s)" % (tag, job, r.stderr.strip())):
            return
        epilog_before = epilog_log_size(tmp)

        def settled():
            seen_down.extend(n for n in FAULT_IFACES if link_up(n) is False and n not in seen_down)
            return not job_active(tools, env, job) or (all(applied_in(j) for j in journals) and len(seen_down) == 2)
        wait_for("the job's end or its faults", settled, 90)
        if job_active(tools, env, job):
            agents, listed = kill_agents(tools, env, job)
            print("note  [%s] the job's agents hold their faults in %s: SIGKILLed %s (%s)" % (tag, other, agents, listed))
        ended = wait_for("the job's end", lambda: settled() and not job_active(tools, env, job), 150)
        text = open(out).read() if os.path.exists(out) else ""
        print("--- job %s output (%s)\n%s---" % (job, tag, text))
        print("--- epilog after job %s\n%s---" % (job, epilog_log_since(tmp, epilog_before)))
        check(ended, "[%s] the job and its epilog end" % tag)
        check("refused, no agent started" in text and "'%s'" % other in text and "'%s'" % epilog_state in text
              and os.path.join(tmp, "epilog.conf") in text,
              "[%s] the batch script refuses RDMACHAOS_STATE_DIR, naming it, the epilog's state directory and its settings file" % tag)
        check("ready: node" not in text and not os.path.exists(other),
              "[%s] no agent started: none got ready, nothing was made in %s" % (tag, os.path.relpath(other, tmp)))
        check(not seen_down, "[%s] no link went down during the job (seen down: %s)" % (tag, seen_down or "none"))
        state, reason = node_state(tools, env)
        left_down = [n for n in FAULT_IFACES if not link_up(n)]
        check(not left_down or "DRAIN" in state,
              "[%s] after the job and its epilog no fault is left applied on an undrained node (down: %s; node %s %s)"
              % (tag, left_down or "none", state, reason))
        check(state == "IDLE", "[%s] the node is idle (%s %s)" % (tag, state, reason))
        job_state, code = slurm_job_state(tools, env, job)
        check(job_state == "FAILED" and code == "2:0", "[%s] the job ends FAILED with exit 2 (JobState=%s ExitCode=%s)"
              % (tag, job_state, code))
    finally:
        for n in FAULT_IFACES:
            if not link_up(n):
                subprocess.run(["ip", "link", "set", n, "up"], capture_output=True)
        shutil.rmtree(other, ignore_errors=True)
        subprocess.run([tools["scontrol"], "update", "nodename=rcnode1", "state=resume"], env=env, capture_output=True)


def live_agent_journal(tools, env, tmp):
    """A node that also runs the systemd unit's agent: a real agent whose state_dir is the
    epilog's own (agent-state), holding a real fault (`rdmachaos inject link_flap`,
    FAULT_IFACES[0] down). The epilog after a job finds that journal locked (--replay-only
    exit 3): it belongs to the live agent, which reverts its own faults, so the epilog logs
    its PID and leaves it, and the node stays idle with the fault still held. A leftover the
    epilog cannot revert in another journal (agent-0) still drains the node, naming only it.
    Then the inject ends and the agent reverts its fault itself."""
    tag = "live agent"
    pki = os.path.join(tmp, "svc-pki")
    r = subprocess.run([CLI, "certs", "init", pki, "--agent", "rcsvc"], capture_output=True, text=True, timeout=60)
    if not check(r.returncode == 0, "[%s] certs init for the unit's agent (%s)" % (tag, r.stderr.strip())):
        return
    state = os.path.join(tmp, "agent-state")
    journal = os.path.join(state, "journal")
    iface = FAULT_IFACES[0]
    port = free_ports(1)[0]
    config = os.path.join(tmp, "svc-agent.toml")
    with open(config, "w") as f:
        f.write('[agent]\nnode = "rcsvc"\nlisten = "127.0.0.1:%d"\nstate_dir = "%s"\n'
                '[tls]\nca = "%s/ca.pem"\ncert = "%s/agent-rcsvc.pem"\nkey = "%s/agent-rcsvc.key"\n'
                '[interfaces]\ndata = ["lo"]\nallow = ["lo", "%s"]\nprotected = []\n'
                % (port, state, pki, pki, pki, iface))
    inventory = os.path.join(tmp, "svc-inventory.toml")
    with open(inventory, "w") as f:
        f.write('[tls]\nca = "%s/ca.pem"\ncert = "%s/controller.pem"\nkey = "%s/controller.key"\n'
                '[[node]]\nname = "rcsvc"\naddress = "127.0.0.1"\nport = %d\ndata_interfaces = ["lo"]\n'
                'data_addresses = ["127.0.0.1"]\n' % (pki, pki, pki, port))
    agent_log = open(os.path.join(tmp, "svc-agent.log"), "w+")
    inject_log = open(os.path.join(tmp, "svc-inject.log"), "w+")
    agent = inject = None
    entry = None
    try:
        agent = subprocess.Popen([AGENT, "--config", config], stdout=agent_log, stderr=subprocess.STDOUT)

        def ready():
            agent_log.seek(0)
            return " ready: node rcsvc" in agent_log.read() or agent.poll() is not None
        wait_for("the unit's agent", ready, 20)
        if not check(agent.poll() is None, "[%s] the unit's agent runs on the epilog's state directory" % tag):
            return
        inject = subprocess.Popen([CLI, "inject", "link_flap", "--inventory", inventory, "--node", "rcsvc",
                                   "--set", "interface=" + iface, "--set", "down=120s", "--for", "120s"],
                                  stdout=inject_log, stderr=subprocess.STDOUT)
        held = lambda: applied_in(journal) and link_up(iface) is False
        wait_for("the injected fault", lambda: held() or inject.poll() is not None, 30)
        if not check(held(), "[%s] the unit's agent holds %s down, journaled in %s" % (tag, iface, os.path.relpath(journal, tmp))):
            return
        before = epilog_log_size(tmp)
        job = trivial_job(tools, env, tmp, "live-agent")
        text = epilog_log_since(tmp, before)
        print("--- epilog after job %s\n%s---" % (job, text))
        node, reason = node_state(tools, env)
        check(node == "IDLE", "[%s] the node is not drained for the live agent's journal (%s %s)" % (tag, node, reason))
        check("held by a running agent (PID %d:" % agent.pid in text,
              "[%s] the epilog logs the journal as the live agent's, with its PID %d" % (tag, agent.pid))
        check(agent.poll() is None and applied_in(journal) and link_up(iface) is False,
              "[%s] the epilog left the agent's fault to it: the agent runs, %s is still down and journaled" % (tag, iface))

        if "DRAIN" in node:  # so that the next job runs
            subprocess.run([tools["scontrol"], "update", "nodename=rcnode1", "state=resume"], env=env, capture_output=True)

        # A leftover in a journal no agent holds still drains, and only it is named.
        entry = write_stuck_entry(os.path.join(state, "agent-0", "journal"))
        if trivial_job(tools, env, tmp, "live-agent-drain") is None:
            return
        node, reason = node_state(tools, env)
        check("DRAIN" in node and "'stuck' (link_flap) NOT reverted" in reason and "holds" not in reason,
              "[%s] a leftover the epilog cannot revert still drains the node, the reason naming it alone (%s %s)"
              % (tag, node, reason))
    finally:
        if inject is not None:
            inject.send_signal(signal.SIGINT)
            try:
                inject.wait(timeout=30)
            except subprocess.TimeoutExpired:
                inject.kill()
                inject.wait()
        if agent is not None and agent.poll() is None:
            # The agent, not this test, reverts its fault: the inject ended (or its lease runs out).
            reverted = wait_for("the agent's revert", lambda: link_up(iface) and not [n for n in os.listdir(journal) if n.endswith(".json")], 30)
            check(reverted, "[%s] the unit's agent reverted its own fault: %s up, its journal empty" % (tag, iface))
        stop(agent, "the unit's agent")
        for log in (agent_log, inject_log):
            log.seek(0)
            if failures:
                print("--- %s\n%s" % (log.name, log.read()[-3000:]))
            log.close()
        if not link_up(iface):
            subprocess.run(["ip", "link", "set", iface, "up"], capture_output=True)
        if entry and os.path.exists(entry):
            os.remove(entry)
        subprocess.run([tools["scontrol"], "update", "nodename=rcnode1", "state=resume"], env=env, capture_output=True)


def test_certs():
    """docs/deploy.md step 3: `certs init DIR --inventory FILE` issues one certificate per node
    of the inventory (plus any --agent), reuses the CA when run again after a node was added, and
    refuses a bad inventory before writing anything."""
    tmp = tempfile.mkdtemp(prefix="rc-certs-")
    try:
        inv = os.path.join(tmp, "inventory.toml")
        def write_inventory(names):
            with open(inv, "w") as f:
                f.write('[tls]\nca = "pki/ca.pem"\ncert = "pki/controller.pem"\nkey = "pki/controller.key"\n')
                for i, n in enumerate(names):
                    f.write('[[node]]\nname = "%s"\naddress = "10.0.0.%d"\n' % (n, i + 1))
        pki = os.path.join(tmp, "pki")
        write_inventory(["gpu-node-001", "gpu-node-002"])
        r = subprocess.run([CLI, "certs", "init", pki, "--inventory", inv, "--agent", "spare"],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "certs init --inventory exits 0 (%s)" % r.stderr.strip())
        for n in ("gpu-node-001", "gpu-node-002", "spare"):
            check(os.path.isfile(os.path.join(pki, "agent-%s.pem" % n)), "agent-%s.pem issued" % n)
            key = os.path.join(pki, "agent-%s.key" % n)
            check(os.path.isfile(key) and (os.stat(key).st_mode & 0o077) == 0, "agent-%s.key is private (0600)" % n)
        with open(os.path.join(pki, "ca.pem")) as f:
            ca = f.read()
        write_inventory(["gpu-node-001", "gpu-node-002", "gpu-node-003"])
        r = subprocess.run([CLI, "certs", "init", pki, "--inventory", inv], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "run again after adding a node: exit 0 (%s)" % r.stderr.strip())
        check(os.path.isfile(os.path.join(pki, "agent-gpu-node-003.pem")), "the added node gets its certificate")
        with open(os.path.join(pki, "ca.pem")) as f:
            check(f.read() == ca, "the CA is reused, not replaced")
        with open(inv, "a") as f:
            f.write('[[node]]\nname = "bad name"\naddress = "10.0.0.9"\n')
        before = sorted(os.listdir(pki))
        r = subprocess.run([CLI, "certs", "init", pki, "--inventory", inv], capture_output=True, text=True, timeout=60)
        check(r.returncode != 0 and "inventory.toml" in r.stderr, "a bad inventory is refused, naming it (%s)" % r.stderr.strip())
        check(sorted(os.listdir(pki)) == before, "and nothing is written")
        r = subprocess.run([CLI, "certs", "init", pki, "--inventory", os.path.join(tmp, "missing.toml")],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode != 0 and "missing.toml" in r.stderr, "a missing inventory is named (%s)" % r.stderr.strip())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    parts = {"systemd": test_systemd, "kubernetes": test_kubernetes, "slurm-script": test_slurm_script,
             "slurm": test_slurm, "certs": test_certs}
    if len(sys.argv) != 2 or sys.argv[1] not in parts:
        print(__doc__)
        return 2
    parts[sys.argv[1]]()
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    if not_run:
        for reason in not_run:
            print("SKIP: " + reason)
        return 77
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
