#!/usr/bin/env python3
"""test_failures.py - what a failure costs a client, end to end behind the
production nginx site (sitelib.py: nginx/hyserve.conf, TLS, HTTP/2, the key
map), as docs/failures.md tells it:
* a worker killed (kill -9) while it streams: every client it served sees an
  aborted response, never a clean end: curl over HTTP/1.1 exits 18 (no last
  chunk), over HTTP/2 exits 92 (RST_STREAM), the openai client raises; no
  [DONE], no finish_reason; nginx's error log names the signal; the
  supervisor reaps each request once (hyserve_reaped_requests_total), frees
  its slot and pages and forks a new worker, whose streams end cleanly.
TAP; skips (1..0 # SKIP) without nginx, openssl, cgi-fcgi, curl or the
python openai package (scripts/install-deps --test).

Environment: HY_SRCDIR (source tree), HYSERVE (the binary).
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sitelib  # noqa: E402
import taplib as t  # noqa: E402

ok, diag = t.ok, t.diag

missing = sitelib.missing_tools()
CURL = t.which("curl")
if CURL is None:
    missing.append("curl")
try:
    import openai
except ImportError:
    openai = None
    missing.append("the python openai package")
if missing:
    t.skip_all("needs " + ", ".join(missing))

MODEL, HAS_CHAT = t.default_model()
THREADS = 6
# one worker process, so that one kill -9 hits every stream at once
SITE = sitelib.Site({"blue": {"engine": {"max_seqs": 4, "max_context": 1024},
                              "server": {"workers": 1, "threads_per_worker": THREADS}}},
                    model=MODEL, prefix="hyfail-")
KEY = None


def metrics():
    return t.metric_samples(SITE.https("GET", "/metrics")[2])


def idle(m):
    return (m["hyserve_request_slots_used"] == 0 and m['hyserve_kv_pages{state="used"}'] == 0
            and m["hyserve_state_slots_used"] == 0)


def workers(colour="blue"):
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(SITE.procs[colour].pid)],
                         capture_output=True, text=True).stdout
    return sorted(int(x) for x in out.split())


def stream_body(prompt, max_tokens=400):
    return {"model": sitelib.MODEL_ID, "prompt": prompt, "max_tokens": max_tokens,
            "stream": True, "ignore_eos": True, "temperature": 0}


class Curl:
    """A streamed completion through curl (HTTP/1.1 or HTTP/2 over TLS);
    its output file fills as tokens arrive."""

    def __init__(self, proto, prompt, max_tokens=400):
        self.out = os.path.join(SITE.tmp, "curl-%s-%d.out" % (proto, time.monotonic_ns()))
        self.p = subprocess.Popen(
            [CURL, "-sSkN", "--" + proto, "-o", self.out, "-H", "Authorization: Bearer " + KEY,
             "-H", "Content-Type: application/json", "--data-binary",
             json.dumps(stream_body(prompt, max_tokens)),
             "https://127.0.0.1:%d/v1/completions" % SITE.port],
            stderr=subprocess.PIPE, text=True)

    def text(self):
        try:
            with open(self.out, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def started(self):
        return "data: {" in self.text()

    def wait(self):
        try:
            rc = self.p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        return rc, self.p.stderr.read().strip()


class OpenAIStream(threading.Thread):
    """A streamed completion through the openai client (httpx, HTTP/1.1)."""

    def __init__(self, prompt, max_tokens=400):
        super().__init__()
        self.prompt, self.max_tokens = prompt, max_tokens
        self.chunks, self.finish, self.error = 0, None, None

    def run(self):
        client = openai.OpenAI(base_url="https://127.0.0.1:%d/v1" % SITE.port, api_key=KEY,
                               max_retries=0, timeout=120,
                               http_client=openai.DefaultHttpxClient(verify=False))
        try:
            for c in client.completions.create(model=sitelib.MODEL_ID, prompt=self.prompt,
                                               max_tokens=self.max_tokens, stream=True,
                                               temperature=0, extra_body={"ignore_eos": True}):
                self.chunks += 1
                if c.choices and c.choices[0].finish_reason:
                    self.finish = c.choices[0].finish_reason
        except Exception as e:  # noqa - what the client raises is the point
            self.error = e


def error_log():
    return t.tail(os.path.join(SITE.tmp, "error.log"), 200)


# ---- run ----------------------------------------------------------------------
try:
    rc, out, e = SITE.ctl("key", "add", "alice", reload=False)
    KEY = out.strip()
    ok(rc == 0 and KEY.startswith("hy-"), "an API key")
    up = SITE.start_colour("blue") and SITE.start_nginx()
    ok(up, "one instance (1 worker x %d threads) behind the TLS site" % THREADS)
    if not up:
        raise RuntimeError("not up")

    # ---- a worker killed mid-stream -------------------------------------------
    before = metrics()
    c1 = Curl("http1.1", "Story one:")
    c2 = Curl("http2", "Story two:")
    oa = OpenAIStream("Story three:")
    oa.start()
    started = t.wait_for(lambda: c1.started() and c2.started() and oa.chunks > 0, 60, 0.02)
    m = metrics()
    ok(started and m["hyserve_num_requests_running"] + m["hyserve_num_requests_waiting"] == 3,
       "three streams under way on the one worker (curl HTTP/1.1, curl HTTP/2, openai)")
    victim = workers()
    ok(len(victim) == 1, "the worker: %s" % victim)
    os.kill(victim[0], signal.SIGKILL)
    rc1, err1 = c1.wait()
    rc2, err2 = c2.wait()
    oa.join(120)
    ok(rc1 == 18 and "[DONE]" not in c1.text() and '"finish_reason":"length"' not in c1.text(),
       "HTTP/1.1: curl exits 18, the response ended without its last chunk (rc %d: %s)"
       % (rc1, err1))
    ok(rc2 == 92 and "[DONE]" not in c2.text() and '"finish_reason":"length"' not in c2.text(),
       "HTTP/2: curl exits 92, the stream was reset (rc %d: %s)" % (rc2, err2))
    ok(oa.error is not None and oa.finish is None and oa.chunks > 0,
       "the openai client raises after %d chunk(s): %r" % (oa.chunks, oa.error))
    log = error_log()
    ok("was killed by signal 9" in log and "while answering" in log,
       "nginx's error log says the worker was killed by signal 9")
    after = {}
    ok(t.wait_for(lambda: idle(after.update(metrics()) or after), 15) and
       after["hyserve_reaped_requests_total"] - before["hyserve_reaped_requests_total"] == 3,
       "each of the 3 requests reaped once, slots, pages and state slots free (reaped %s)"
       % (after.get("hyserve_reaped_requests_total", 0) -
          before["hyserve_reaped_requests_total"]))
    ok(t.wait_for(lambda: len(workers()) == 1 and workers() != victim, 15) and
       after["hyserve_worker_restarts_total"] >= 1, "a new worker replaces it")
    # the new worker's streams end as streams do
    c3 = Curl("http2", "Story four:", max_tokens=8)
    rc3, err3 = c3.wait()
    ok(rc3 == 0 and c3.text().rstrip().endswith("data: [DONE]"),
       "afterwards a stream over HTTP/2 ends with [DONE], curl exits 0 (%d %s)" % (rc3, err3))
except Exception as ex:  # noqa
    ok(False, "unexpected exception: %r" % ex)
finally:
    if t.failed():
        diag(t.tail(os.path.join(SITE.tmp, "serve-blue.log"), 30))
        diag(error_log()[-3000:])
    SITE.cleanup(keep=t.failed())
sys.exit(t.done())
