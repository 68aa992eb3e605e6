#!/bin/bash
# Prints one Secret and one DaemonSet per node, so that each node's kubelet holds only its own agent key.
#
#   deploy/kubernetes/per-node-agents.sh pki gpu-node-001 gpu-node-002 | kubectl apply -f -
#
# The shipped agent-daemonset.yaml mounts one Secret with every node's key (a DaemonSet
# cannot mount a different Secret per node), so every node can read every key. This script
# writes, per NODE, a Secret rdmachaos-agent-tls-NODE with ca.pem, agent-NODE.pem and
# agent-NODE.key from PKI (`rdmachaos certs init`), and a copy of agent-daemonset.yaml named
# rdmachaos-agent-NODE that runs only on NODE (node affinity on metadata.name, as the
# DaemonSet controller itself pins pods; no label needed) and mounts only that
# Secret. The Node authorizer lets a kubelet read only the Secrets its own pods use. Apply it
# instead of agent-daemonset.yaml (kustomization.yaml lists the shared one), with
# namespace.yaml, critical-pods-quota.yaml and agent-config.yaml.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 PKI_DIR NODE..." >&2; exit 2; }
pki=$1
shift
here=$(dirname "$0")
template=$here/agent-daemonset.yaml
[ -r "$pki/ca.pem" ] || { echo "$0: no '$pki/ca.pem' (rdmachaos certs init $pki --agent NODE ...)" >&2; exit 2; }
b64() { base64 -w0 <"$1"; }
for node in "$@"; do
  # Kubernetes node names are DNS subdomains: nothing that could break the YAML below.
  [[ "$node" =~ ^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$ ]] || { echo "$0: '$node' is not a Kubernetes node name" >&2; exit 2; }
  for f in "agent-$node.pem" "agent-$node.key"; do
    [ -r "$pki/$f" ] || { echo "$0: no '$pki/$f' (rdmachaos certs init $pki --agent $node)" >&2; exit 2; }
  done
  cat <<YAML
---
apiVersion: v1
kind: Secret
metadata:
  name: rdmachaos-agent-tls-$node
  namespace: rdmachaos
  labels: {app.kubernetes.io/name: rdmachaos-agent, rdmachaos.io/node: $node}
type: Opaque
data:
  ca.pem: $(b64 "$pki/ca.pem")
  agent-$node.pem: $(b64 "$pki/agent-$node.pem")
  agent-$node.key: $(b64 "$pki/agent-$node.key")
---
YAML
  # The shared DaemonSet, renamed, pinned to NODE, with a selector of its own and its Secret.
  sed -e '/^#/d' \
    -e "s|^  name: rdmachaos-agent$|  name: rdmachaos-agent-$node|" \
    -e "s|{app.kubernetes.io/name: rdmachaos-agent}|{app.kubernetes.io/name: rdmachaos-agent, rdmachaos.io/node: $node}|" \
    -e "s|nodeSelector: {rdmachaos.io/agent: \"true\"}|affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [$node]}]}]}}}|" \
    -e "s|secretName: rdmachaos-agent-tls,|secretName: rdmachaos-agent-tls-$node,|" \
    "$template"
done
