"""promql.py - the PromQL that packaging/monitoring/ ships, for the tests:
every expression of the alert rules and of the Grafana dashboard, those
expressions as a rule file promtool can check (the dashboard's Grafana
variables replaced by plain values), and the metric names an expression
reads.  No YAML or PromQL library: CI has neither, and the shipped files
keep to the simple shapes read here (a rule's `expr:` on one line or as a
`|` block).

    python3 promql.py recording-rules OUT   writes every dashboard and
                                            alert expression as recording
                                            rules (for promtool check rules)
"""
import json
import os
import re
import sys

SRC = os.path.abspath(os.environ.get("HY_SRCDIR",
                                     os.path.join(os.path.dirname(__file__), "..", "..")))
MONITORING = os.path.join(SRC, "packaging", "monitoring")
RULES = os.path.join(MONITORING, "hyserve-rules.yml")
DASHBOARD = os.path.join(MONITORING, "grafana-hyserve.json")

# words in an expression that are PromQL, not metric names
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
            "group_left", "group_right", "inf", "nan", "atan2"}
# metrics Prometheus makes itself for every target
BUILTIN = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
# the dashboard's Grafana variables, as promtool would see them after Grafana
GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "1m", "$colour": ".*"}


def rule_exprs(path=RULES):
    """[(alert name, expr)] of a rules file."""
    out, name, lines = [], None, open(path).read().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"\s*- (?:alert|record): *(\S+)", line)
        if m:
            name = m.group(1)
        m = re.match(r"(\s*)expr: *(.*)$", line)
        if m:
            indent, rest = len(m.group(1)), m.group(2).strip()
            if rest in ("|", ">", "|-", ">-"):
                body = []
                i += 1
                while i < len(lines) and (not lines[i].strip() or
                                          len(lines[i]) - len(lines[i].lstrip()) > indent):
                    body.append(lines[i].strip())
                    i += 1
                out.append((name, " ".join(b for b in body if b)))
                continue
            out.append((name, rest.strip("'\"")))
        i += 1
    return out


def dashboard_exprs(path=DASHBOARD):
    """[(panel title, expr)] of every target of every panel."""
    with open(path) as f:
        dash = json.load(f)
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                out.append((p.get("title", "?"), t["expr"]))
            walk(p.get("panels", []))
    walk(dash.get("panels", []))
    return out


def grafana_plain(expr):
    """The expression as Grafana sends it (variables replaced)."""
    for k, v in GRAFANA_VARS.items():
        expr = expr.replace(k, v)
    return expr


def metric_names(expr):
    """The metric names an expression reads (functions, keywords, label
    names, label values and durations left out)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    names = set()
    for m in re.finditer(r"(?<![\w.$])[A-Za-z_:][A-Za-z0-9_:]*", e):
        word, rest = m.group(0), e[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in KEYWORDS:
            continue
        names.add(word)
    return names


def write_recording_rules(out_path):
    """Every expression as a recording rule; returns how many."""
    exprs = [("dashboard: " + t, grafana_plain(e)) for t, e in dashboard_exprs()]
    exprs += [("rule: " + n, e) for n, e in rule_exprs()]
    with open(out_path, "w") as f:
        f.write("groups:\n  - name: shipped_promql\n    rules:\n")
        for i, (where, e) in enumerate(exprs):
            f.write("      # %s\n      - record: shipped:expr_%d\n        expr: %s\n"
                    % (where.replace("\n", " "), i, json.dumps(e)))
    return len(exprs)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "recording-rules":
        print(write_recording_rules(sys.argv[2]))
    else:
        sys.exit("usage: promql.py recording-rules OUT")
