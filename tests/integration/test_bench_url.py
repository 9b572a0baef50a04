#!/usr/bin/env python3
"""test_bench_url.py - `hyserve bench --url` against a real stack: nginx
(plain HTTP on a loopback port) in front of `hyserve serve` with the default
model, started with taplib.Stack like the other integration tests.  Checks that 8
streamed requests at concurrency 4 all succeed, that the human report and the
`json:` line parse and agree, and that a dead port is reported as failures
with exit status 1.  Prints TAP; skips without nginx or the default model.

Environment: HY_SRCDIR (source tree), HYSERVE (the binary).
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import taplib as t  # noqa: E402

HYSERVE = t.HYSERVE
MODEL = t.DEFAULT_MODEL

t.require(["nginx"] if t.NGINX is None else [])
if not os.path.exists(MODEL):
    t.ok(False, "the default model %s is missing (scripts/fetch-default-model)" % MODEL)
    sys.exit(t.done())
ok = t.ok


def bench(url, *args):
    p = subprocess.run([HYSERVE, "bench", "--url", url] + list(args), capture_output=True,
                       text=True, timeout=120)
    js = None
    for line in p.stdout.splitlines():
        if line.startswith("json: "):
            js = json.loads(line[6:])
    return p, js


STACK = t.Stack(MODEL, workers=4, prefix="hyserve-bu-")
try:
    up = STACK.start(60)
    ok(up, "hyserve serve + nginx come up")
    if not up:
        raise RuntimeError("not up")
    url = "http://127.0.0.1:%d" % STACK.port

    p, js = bench(url, "--concurrency", "4", "--requests", "8", "--max-tokens", "16",
                  "--prompt-tokens", "40")
    if not ok(p.returncode == 0,
              "bench --url exits 0 (rc=%d %s)" % (p.returncode, p.stderr.strip())):
        sys.stdout.write("".join("# " + l + "\n" for l in p.stdout.splitlines()))
    ok(js is not None, "the json: line parses")
    js = js or {}
    ok(js.get("ok") == 8 and js.get("failed") == 0, "8 of 8 requests ok (%s)" %
       {k: js.get(k) for k in ("ok", "failed")})
    # ignore_eos: every request generates exactly max_tokens
    ok(js.get("output_tokens") == 8 * 16, "128 output tokens (%s)" % js.get("output_tokens"))
    ttft, f, e = js.get("ttft_ms", {}), js.get("tpot_ms", {}), js.get("e2e_ms", {})
    # Each request's first token comes before its end, so each percentile of
    # TTFT is below the same percentile of E2E.  (TTFT's p99 below E2E's p50
    # is no such consequence: a request admitted late on a loaded machine
    # waited 427 ms for its first token while others ended in 374-430 ms.)
    ok(js.get("tok_per_s", 0) > 0 and
       0 < ttft.get("p50", 0) <= ttft.get("p90", 0) <= ttft.get("p99", 0) and
       0 < f.get("p50", 0) <= f.get("p99", 0) and
       all(ttft.get(q, 0) < e.get(q, 0) for q in ("p50", "p90", "p99")) and
       0 < e.get("p50", 0) <= e.get("p90", 0) <= e.get("p99", 0) <= js.get("wall_s", 0) * 1e3,
       "percentiles are positive, ordered and consistent (TTFT < E2E <= wall at p50, p90, "
       "p99: %s / %s, wall %s s)" % (ttft, e, js.get("wall_s")))
    m = re.search(r"throughput ([0-9.]+) tok/s", p.stdout)
    ok(m is not None and abs(float(m.group(1)) - js.get("tok_per_s", -1)) < 0.1,
       "the human report agrees with the json line")
    m = re.search(r"\| TTFT +\| +([0-9.]+) \|", p.stdout)
    ok(m is not None and abs(float(m.group(1)) - ttft.get("p50", -1)) < 0.1,
       "the TTFT row agrees with the json line")

    # the chat route through the model's template, and a /v1 base URL
    p, js = bench(url + "/v1", "--chat", "--concurrency", "2", "--requests", "2",
                  "--max-tokens", "8", "--prompt-tokens", "20")
    ok(p.returncode == 0 and js and js["ok"] == 2 and js["output_tokens"] == 16,
       "--chat with a /v1 base URL (%s)" % (js or p.stderr.strip()))

    # --sessions: an X-Session-Id per request (a pool spreads them over its
    # hosts: test_pool.py --bench); one host just answers them
    p, js = bench(url, "--sessions", "--concurrency", "2", "--requests", "2",
                  "--max-tokens", "4", "--prompt-tokens", "20")
    ok(p.returncode == 0 and js and js["ok"] == 2, "--sessions (%s)" % (js or p.stderr.strip()))

    # server errors count as failures: a model name the server does not have
    p, js = bench(url, "--requests", "2", "--max-tokens", "4", "--model", "no-such-model")
    ok(p.returncode == 1 and js and js["failed"] == 2 and "HTTP 404" in p.stdout,
       "HTTP 404 answers count as failed requests, rc 1")
except Exception as ex:  # noqa
    ok(False, "unexpected exception: %r" % ex)
finally:
    STACK.stop()

# a port nobody listens on: every request fails, exit status 1
p, js = bench("http://127.0.0.1:%d" % t.free_port(), "--requests", "3")
ok(p.returncode == 1 and js and js["failed"] == 3 and "Connection refused" in p.stdout,
   "a dead port: 3 failed, rc 1")
p = subprocess.run([HYSERVE, "bench", "--url", "https://127.0.0.1:1"], capture_output=True,
                   text=True)
ok(p.returncode == 2 and "TLS is not supported" in p.stderr, "https:// is refused precisely")

if t.failed():
    t.diag(t.tail(STACK.serve_log_path, 30))
STACK.cleanup(keep=t.failed())
sys.exit(t.done())
