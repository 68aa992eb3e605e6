#!/bin/sh
# Checks deploy/prometheus/: the alert rules load (promtool check rules), each alert fires on its
# symptom and stays quiet without it (promtool test rules on rdmachaos-rules.test.yml), and the
# example Prometheus and Alertmanager configurations load. Exit 77 (skip) without promtool.
set -u
src=${RDMACHAOS_SOURCE_DIR:-$(dirname "$0")/..}
dir=$src/deploy/prometheus
if ! command -v promtool >/dev/null 2>&1; then
  echo "SKIP: promtool is not installed (Debian's prometheus; scripts/install-deps)"
  exit 77
fi
failed=0
run() {
  echo "+ $*"
  if ! "$@"; then
    echo "FAIL: $*"
    failed=1
  fi
}
run promtool check rules "$dir/rdmachaos-rules.yml"
# promtool resolves rule_files relative to the test file's directory.
run sh -c 'cd "$1" && promtool test rules rdmachaos-rules.test.yml' sh "$dir"
# Every alert of the rule file has a firing case in the test file (a new alert without one fails).
# shellcheck disable=SC2013  # alert names are single words
for name in $(sed -n 's/^ *- alert: *\([A-Za-z0-9_]*\).*/\1/p' "$dir/rdmachaos-rules.yml" | sort -u); do
  if ! grep -q "alertname: $name\$" "$dir/rdmachaos-rules.test.yml"; then
    echo "FAIL: alert $name has no case in rdmachaos-rules.test.yml"
    failed=1
  fi
done
run promtool check config "$dir/prometheus.yml"
# A check that could not run is a skip (after the others ran), never a pass; a failure wins.
if command -v amtool >/dev/null 2>&1; then
  run amtool check-config "$dir/alertmanager.yml"
elif [ $failed = 0 ]; then
  echo "SKIP: amtool is not installed (Debian's prometheus-alertmanager; scripts/install-deps):" \
    "alertmanager.yml not checked"
  exit 77
fi
exit $failed
