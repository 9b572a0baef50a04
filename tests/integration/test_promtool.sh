#!/bin/sh
# test_promtool.sh - the monitoring files packaging/monitoring/ ships, with
# Prometheus's own checker: `promtool check rules` on the alert rules,
# `promtool test rules` (each alert fires on series past its threshold with
# the exact labels and annotations, and stays quiet below it), `promtool
# check config` on the scrape config (pointed at the rules in the tree), and
# every PromQL expression of the Grafana dashboard and of the rules parsed
# by promtool as a recording rule.  That the metric names they read exist
# in a running server's /metrics is test_metrics.py's part.
# Skips without promtool (Debian package prometheus) or python3.
set -u
top=${HY_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
mon=$top/packaging/monitoring
command -v promtool >/dev/null 2>&1 || { echo "1..0 # SKIP needs promtool (Debian package prometheus)"; exit 0; }
command -v python3 >/dev/null 2>&1 || { echo "1..0 # SKIP needs python3"; exit 0; }
. "$top/tests/integration/taplib.sh"
T=$(mktemp -d /tmp/hyserve-promtool.XXXXXX) || { echo "1..0 # SKIP mktemp failed"; exit 0; }
trap 'rm -rf "$T"' EXIT

out=$(promtool check rules "$mon/hyserve-rules.yml" 2>&1)
rc=$?
ok $rc "promtool check rules hyserve-rules.yml ($(echo "$out" | sed -n 's/.*SUCCESS: \([0-9]*\) rules found.*/\1/p') rules)"
[ $rc = 0 ] || echo "$out" | diag

out=$(cd "$mon" && promtool test rules hyserve-rules.test.yml 2>&1)
rc=$?
ok $rc "promtool test rules: every alert fires past its threshold and only there"
[ $rc = 0 ] || echo "$out" | diag

# every alert of the rules file has a test that expects it to fire
missing=""
for a in $(sed -n 's/^ *- alert: *//p' "$mon/hyserve-rules.yml"); do
    awk -v a="$a" '$1 == "alertname:" && $2 == a { f = 1 } /exp_labels:/ && f { found = 1 }
        $1 == "alertname:" && $2 != a { f = 0 } END { exit !found }' "$mon/hyserve-rules.test.yml" ||
        missing="$missing $a"
done
[ -z "$missing" ]
ok $? "each alert has a firing case in hyserve-rules.test.yml${missing:+ (missing:$missing)}"

sed "s#/usr/share/hyserve/monitoring/hyserve-rules.yml#$mon/hyserve-rules.yml#" \
    "$mon/prometheus.yml" >"$T/prometheus.yml"
out=$(promtool check config "$T/prometheus.yml" 2>&1)
rc=$?
ok $rc "promtool check config prometheus.yml (scrape config with the rules)"
[ $rc = 0 ] || echo "$out" | diag
grep -q '__metrics_path__: /metrics/blue' "$mon/prometheus.yml" &&
    grep -q '__metrics_path__: /metrics/green' "$mon/prometheus.yml"
ok $? "the scrape config scrapes both colours"

n_expr=$(HY_SRCDIR=$top python3 "$top/tests/integration/promql.py" recording-rules "$T/exprs.yml" 2>"$T/py.err")
rc=$?
[ $rc = 0 ] && out=$(promtool check rules "$T/exprs.yml" 2>&1) || rc=1
ok $rc "promtool parses all ${n_expr:-?} PromQL expressions of the dashboard and the rules"
[ $rc = 0 ] || { cat "$T/py.err"; echo "$out"; } | diag

python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
assert d["uid"] and d["title"] and d["panels"]
assert any(v["name"] == "colour" for v in d["templating"]["list"])' "$mon/grafana-hyserve.json" 2>"$T/py.err"
rc=$?
ok $rc "grafana-hyserve.json parses, has panels and the colour variable"
[ $rc = 0 ] || diag <"$T/py.err"
finish
