#!/usr/bin/env python3
"""test_bench_url.py - `hyserve bench --url` against a real stack: nginx
(plain HTTP on a loopback port) in front of `hyserve serve` with the default
model, set up as tests/integration/test_server.py does.  Checks that 8
streamed requests at concurrency 4 all succeed, that the human report and the
`json:` line parse and agree, and that a dead port is reported as failures
with exit status 1.  Prints TAP; skips without nginx or the default model.

Environment: HY_SRCDIR (source tree), HYSERVE (the binary).
"""
import http.client as httpc
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SRC = os.environ.get("HY_SRCDIR", os.path.join(os.path.dirname(__file__), "..", ".."))
HYSERVE = os.environ.get("HYSERVE", "./hyserve")
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
MODEL = os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

if NGINX is None:
    print("1..0 # SKIP needs nginx (scripts/install-deps --test)")
    sys.exit(0)
if not os.path.exists(MODEL):
    print("1..0 # SKIP needs the default model (scripts/fetch-default-model)")
    sys.exit(0)

n_test = 0
n_fail = 0


def ok(cond, what):
    global n_test, n_fail
    n_test += 1
    if not cond:
        n_fail += 1
    print("%s %d - %s" % ("ok" if cond else "not ok", n_test, what), flush=True)
    return cond


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def health():
    c = httpc.HTTPConnection("127.0.0.1", PORT, timeout=5)
    c.request("GET", "/health")
    st = c.getresponse().status
    c.close()
    return st == 200


def wait_for(pred, timeout):
    end = time.time() + timeout
    while time.time() < end:
        try:
            if pred():
                return True
        except Exception:
            pass
        time.sleep(0.1)
    return False


def bench(url, *args):
    p = subprocess.run([HYSERVE, "bench", "--url", url] + list(args), capture_output=True,
                       text=True, timeout=120)
    js = None
    for line in p.stdout.splitlines():
        if line.startswith("json: "):
            js = json.loads(line[6:])
    return p, js


TMP = tempfile.mkdtemp(prefix="hyserve-bu-")
PORT = free_port()
INSTANCE = "bu%d" % os.getpid()
SOCK = os.path.join(TMP, "fcgi.sock")
with open(os.path.join(TMP, "hyserve.ini"), "w") as f:
    f.write("""[model]
path = %s
threads = 2
[engine]
max_seqs = 8
max_context = 1024
[cache]
memory_mb = 128
[server]
socket = %s
workers = 4
instance = %s
drain_seconds = 10
[log]
stderr = true
""" % (MODEL, SOCK, INSTANCE))
with open(os.path.join(SRC, "nginx", "hyserve-test.conf.in")) as f:
    conf = f.read().replace("@PREFIX@", TMP).replace("@PORT@", str(PORT)).replace("@SOCKET@", SOCK)
with open(os.path.join(TMP, "nginx.conf"), "w") as f:
    f.write(conf)

serve_log = open(os.path.join(TMP, "serve.log"), "w")
SERVE = subprocess.Popen([HYSERVE, "serve", "-c", os.path.join(TMP, "hyserve.ini")],
                         stdout=serve_log, stderr=subprocess.STDOUT)
NGX = subprocess.Popen([NGINX, "-p", TMP, "-c", os.path.join(TMP, "nginx.conf"), "-e",
                        os.path.join(TMP, "error.log")],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

try:
    up = wait_for(lambda: os.path.exists(SOCK) and health(), 30)
    ok(up, "hyserve serve + nginx come up")
    if not up:
        raise RuntimeError("not up")
    url = "http://127.0.0.1:%d" % PORT

    p, js = bench(url, "--concurrency", "4", "--requests", "8", "--max-tokens", "16",
                  "--prompt-tokens", "40")
    if not ok(p.returncode == 0, "bench --url exits 0 (rc=%d %s)" % (p.returncode, p.stderr.strip())):
        sys.stdout.write("".join("# " + l + "\n" for l in p.stdout.splitlines()))
    ok(js is not None, "the json: line parses")
    js = js or {}
    ok(js.get("ok") == 8 and js.get("failed") == 0, "8 of 8 requests ok (%s)" %
       {k: js.get(k) for k in ("ok", "failed")})
    # ignore_eos: every request generates exactly max_tokens
    ok(js.get("output_tokens") == 8 * 16, "128 output tokens (%s)" % js.get("output_tokens"))
    t, f, e = js.get("ttft_ms", {}), js.get("tpot_ms", {}), js.get("e2e_ms", {})
    ok(js.get("tok_per_s", 0) > 0 and 0 < t.get("p50", 0) <= t.get("p90", 0) <= t.get("p99", 0)
       and 0 < f.get("p50", 0) <= f.get("p99", 0) and
       t.get("p99", 0) < e.get("p50", 0) <= e.get("p99", 0) <= js.get("wall_s", 0) * 1e3,
       "percentiles are positive, ordered and consistent (TTFT < E2E <= wall)")
    m = re.search(r"throughput ([0-9.]+) tok/s", p.stdout)
    ok(m is not None and abs(float(m.group(1)) - js.get("tok_per_s", -1)) < 0.1,
       "the human report agrees with the json line")
    m = re.search(r"\| TTFT +\| +([0-9.]+) \|", p.stdout)
    ok(m is not None and abs(float(m.group(1)) - t.get("p50", -1)) < 0.1,
       "the TTFT row agrees with the json line")

    # the chat route through the model's template, and a /v1 base URL
    p, js = bench(url + "/v1", "--chat", "--concurrency", "2", "--requests", "2",
                  "--max-tokens", "8", "--prompt-tokens", "20")
    ok(p.returncode == 0 and js and js["ok"] == 2 and js["output_tokens"] == 16,
       "--chat with a /v1 base URL (%s)" % (js or p.stderr.strip()))

    # server errors count as failures: a model name the server does not have
    p, js = bench(url, "--requests", "2", "--max-tokens", "4", "--model", "no-such-model")
    ok(p.returncode == 1 and js and js["failed"] == 2 and "HTTP 404" in p.stdout,
       "HTTP 404 answers count as failed requests, rc 1")
except Exception as ex:  # noqa
    ok(False, "unexpected exception: %r" % ex)
finally:
    for proc in (NGX, SERVE):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in (NGX, SERVE):
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    serve_log.close()

# a port nobody listens on: every request fails, exit status 1
p, js = bench("http://127.0.0.1:%d" % free_port(), "--requests", "3")
ok(p.returncode == 1 and js and js["failed"] == 3 and "Connection refused" in p.stdout,
   "a dead port: 3 failed, rc 1")
p = subprocess.run([HYSERVE, "bench", "--url", "https://127.0.0.1:1"], capture_output=True,
                   text=True)
ok(p.returncode == 2 and "TLS is not supported" in p.stderr, "https:// is refused precisely")

if n_fail:
    with open(os.path.join(TMP, "serve.log")) as f:
        sys.stdout.write("".join("# " + l for l in f.readlines()[-30:]))
else:
    shutil.rmtree(TMP, ignore_errors=True)
print("1..%d" % n_test)
sys.exit(1 if n_fail else 0)
