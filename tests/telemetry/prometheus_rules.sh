#!/usr/bin/env bash
# The sample Prometheus configuration and alert rules of docs/prometheus: the config and rules as
# promtool reads them, and the rules' unit tests (alerts_test.yml). Skips (exit 77, ctest's
# SKIP_RETURN_CODE) where promtool is absent: it comes with Debian's prometheus package, which
# scripts/setup.sh installs when it can.
#   tests/telemetry/prometheus_rules.sh SOURCE_DIR
set -euo pipefail
dir="${1:?usage: prometheus_rules.sh SOURCE_DIR}/docs/prometheus"
if ! command -v promtool >/dev/null; then
  echo "SKIPPED: promtool not found (apt install prometheus): docs/prometheus is not checked"
  exit 77
fi
promtool check config "$dir/prometheus.yml"
promtool check rules "$dir/alerts.yml"
promtool test rules "$dir/alerts_test.yml"
