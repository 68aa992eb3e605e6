#!/usr/bin/env bash
# The crash matrix (issue 10) with its table: every agent/controller crash and management cut
# times every fault kind on one namespace lab, time to restore and result per cell. Root.
# Usage: bench/crash_matrix.sh [CELL-SUBSTRING,...]   (default: all 42 cells)
# The same cases are the netns test test_crash_matrix (the netns program, its source's cases);
# this only runs them and keeps the table.
set -euo pipefail
cd "$(dirname "$0")/.."
builddir=${BUILD_DIR:-build}
bin=$builddir/tests/test_netns
for b in "$bin" "$builddir/agent/rdmachaos-agent" "$builddir/controller/rdmachaos" \
  "$builddir/labswitch/rdmachaos-labswitch"; do
  [ -x "$b" ] || { echo "bench: $b is missing; build first (scripts/build)" >&2; exit 2; }
done
export RDMACHAOS_AGENT=$PWD/$builddir/agent/rdmachaos-agent
export RDMACHAOS_CLI=$PWD/$builddir/controller/rdmachaos
export RDMACHAOS_LABSWITCH=$PWD/$builddir/labswitch/rdmachaos-labswitch
export RDMACHAOS_CRASH_CELLS=${1:-all}
# Exit 77 (skip) and 1 (a failed cell) still print the table.
"$bin" '-#' '[#test_crash_matrix]'
