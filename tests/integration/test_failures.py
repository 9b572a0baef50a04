#!/usr/bin/env python3
"""test_failures.py - what a failure costs a client, end to end behind the
production nginx site (sitelib.py: nginx/hyserve.conf, TLS, HTTP/2, the key
map), as docs/failures.md tells it:
* a worker killed (kill -9) while it streams: every client it served sees an
  aborted response, never a clean end: curl over HTTP/1.1 exits 18 (no last
  chunk), over HTTP/2 exits 92 (RST_STREAM), the openai client raises; no
  [DONE], no finish_reason; nginx's error log names the signal; the
  supervisor reaps each request once (hyserve_reaped_requests_total), frees
  its slot and pages and forks a new worker, whose streams end cleanly;
* a worker killed before its first byte (a non-streamed request): 503
  backend_unavailable JSON with Retry-After (nginx's 502), never a 200;
* a hung instance (its worker stopped): nginx's 504 after the read timeout,
  as JSON (the static fallback: nothing answers the error page either);
* authentication cannot be gone around: cgi-fcgi as another local user
  (www-data, nginx's own group) on the FastCGI socket claiming
  HYSERVE_KEY_ID=admin gets 403 JSON and a log line naming the claim, with
  no secret or a wrong one; the Bearer scheme in any case is accepted;
* [server] user: an instance started as root runs as that user (the
  coordinator and every worker), serves, and removes its socket and segment
  when it stops.
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
# one worker process, so that one kill -9 hits every stream at once; the
# control locations (/health...) wait 2 s instead of 10 s for an answer, so
# that the hung-instance check is quick
SITE = sitelib.Site({"blue": {"engine": {"max_seqs": 4, "max_context": 1024},
                              "server": {"workers": 1, "threads_per_worker": THREADS}},
                     # started only as root (it drops to nobody)
                     "green": {"server": {"workers": 1, "threads_per_worker": 2,
                                          "user": "nobody"}}},
                    model=MODEL, prefix="hyfail-",
                    site_edit=lambda s: s.replace("fastcgi_read_timeout 10s;",
                                                  "fastcgi_read_timeout 2s;"))
KEY = None


def metrics():
    return t.metric_samples(SITE.https("GET", "/metrics")[2])


def idle(m):
    return (m["hyserve_request_slots_used"] == 0 and m['hyserve_kv_pages{state="used"}'] == 0
            and m["hyserve_state_slots_used"] == 0)


def workers(colour="blue"):
    return t.children(SITE.procs[colour].pid)


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

    # ---- a worker killed before its first byte ---------------------------------
    res = {}

    def blocking():
        res["r"] = SITE.https("POST", "/v1/completions", key=KEY, timeout=120, body={
            "model": sitelib.MODEL_ID, "prompt": "Story five:", "max_tokens": 400,
            "ignore_eos": True, "temperature": 0})
    th = threading.Thread(target=blocking)
    th.start()
    busy = t.wait_for(lambda: metrics()["hyserve_num_requests_running"] == 1, 60, 0.02)
    victim = workers()
    if busy and len(victim) == 1:
        os.kill(victim[0], signal.SIGKILL)
    th.join(120)
    st, h, b = res.get("r", (None, {}, b""))
    try:
        e = json.loads(b)["error"]
    except (ValueError, KeyError, TypeError):
        e = {}
    ok(busy and st == 503 and e.get("code") == "backend_unavailable" and h.get("retry-after"),
       "a non-streamed request whose worker dies before answering: 503 JSON with Retry-After, "
       "never a 200 (%s %s)" % (st, b[:120]))
    ok(t.wait_for(lambda: len(workers()) == 1 and workers() != victim and idle(metrics()), 15),
       "and again a new worker, nothing held")

    # ---- a hung instance -------------------------------------------------------
    hung = workers()

    def stopped(pid):
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    for p in hung:
        os.kill(p, signal.SIGSTOP)
    try:
        st, h, b = None, {}, b""
        if hung and t.wait_for(lambda: all(stopped(p) for p in hung), 10, 0.01):
            st, h, b = SITE.https("GET", "/health", timeout=30)
    finally:
        for p in hung:
            os.kill(p, signal.SIGCONT)
    try:
        e = json.loads(b)["error"]
    except (ValueError, KeyError, TypeError):
        e = {}
    ok(st == 504 and e.get("code") == "gateway_timeout",
       "an instance that does not answer (its worker %s stopped): nginx's 504 is JSON too (%s %s)"
       % (hung, st, b[:120]))

    # ---- nginx is the only way in -------------------------------------------------
    def fcgi_as(user, secret, key_id="admin"):
        """POST /v1/completions straight to the FastCGI socket, as user, with
        the given instance secret (None: none): (status, JSON body or {})."""
        body = json.dumps({"model": sitelib.MODEL_ID, "prompt": "hi", "max_tokens": 2}).encode()
        env = {"REQUEST_METHOD": "POST", "DOCUMENT_URI": "/v1/completions",
               "REQUEST_URI": "/v1/completions", "SERVER_PROTOCOL": "HTTP/1.1",
               "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body)),
               "HYSERVE_KEY_ID": key_id, "PATH": os.environ["PATH"]}
        if secret is not None:
            env["HYSERVE_SECRET"] = secret
        out = subprocess.run(["cgi-fcgi", "-bind", "-connect", SITE.sock["blue"]], input=body,
                             env=env, capture_output=True, timeout=60, user=user).stdout
        head, _, b = out.partition(b"\r\n\r\n")
        st = int(head.split(b"\r\n")[0].split()[1]) if head.startswith(b"Status:") else 200
        try:
            return st, json.loads(b)
        except ValueError:
            return st, {}
    if os.geteuid() != 0:
        for what in ("cgi-fcgi as www-data claiming admin: 403", "a wrong secret: 403",
                     "the log names the claim", "the secret is the check"):
            t.skip(what, "needs root (to run cgi-fcgi as another user)")
    else:
        other = "www-data" if t.wait_for(lambda: __import__("pwd").getpwnam("www-data"), 0) \
            else "nobody"
        st, j = fcgi_as(other, None)
        e = j.get("error", {})
        ok(st == 403 and e.get("type") == "permission_error" and e.get("code") == "forbidden",
           "cgi-fcgi as %s on the FastCGI socket, HYSERVE_KEY_ID=admin, no secret: 403 JSON (%s)"
           % (other, e.get("message")))
        st2, j2 = fcgi_as(other, "hys-" + "x" * 43)
        ok(st2 == 403 and j2.get("error", {}).get("code") == "forbidden",
           "with a wrong secret: 403 too")
        log = lambda: t.tail(os.path.join(SITE.tmp, "serve-blue.log"), 300)  # noqa
        ok(t.wait_for(lambda: 'reason="no instance secret" claimed_key_id=admin' in log() and
                      'reason="wrong instance secret" claimed_key_id=admin' in log() and
                      "key_id=- route=/v1/completions method=POST status=403" in log(), 10),
           "both logged as forbidden with the claimed key id, the request line says key_id=-")
        st3, j3 = fcgi_as("root", SITE.secret("blue"))
        ok(st3 == 200 and j3.get("choices"), "with the instance secret the same request is "
           "served: the secret, not the user, is the check")
    for scheme in ("bearer", "BEARER"):
        st, _, b = SITE.https("GET", "/v1/models", headers={"Authorization": "%s %s" % (scheme, KEY)})
        ok(st == 200, "Authorization: %s <key> is accepted (RFC 7235: case-insensitive)" % scheme)

    # ---- [server] user ---------------------------------------------------------------
    if os.geteuid() != 0:
        t.skip("an instance started as root runs as [server] user", "needs root")
    else:
        import pwd
        nobody = pwd.getpwnam("nobody")
        run = os.path.join(SITE.tmp, "run", "green")
        os.chown(run, nobody.pw_uid, nobody.pw_gid)  # it removes its sockets at the end

        def ids(pid):
            with open("/proc/%d/status" % pid) as f:
                st = dict(l.split(":", 1) for l in f)
            return [int(x) for x in st["Uid"].split()], [int(x) for x in st["Gid"].split()]
        # a segment a run as root left behind (0600 root, no live owner):
        # removed before privileges are dropped, or nobody could not start
        stale = "/dev/shm/hyserve-" + SITE.instance["green"]
        fd = os.open(stale, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        os.write(fd, b"\0" * 4096)
        os.close(fd)
        up = SITE.start_colour("green")
        ok(up, "a root-owned stale segment of the instance does not stop a start as nobody")
        pids = ([SITE.procs["green"].pid] + workers("green") +
                t.children(SITE.procs["green"].pid, engine=True)) if up else []
        who = [ids(p) for p in pids]
        ok(up and len(pids) == 3 and
           all(u == [nobody.pw_uid] * 4 and g == [nobody.pw_gid] * 4 for u, g in who),
           "started as root with [server] user = nobody: the master, its engine process and its "
           "worker run as nobody (real, effective, saved, fs uid and gid): %s" % who)
        st, _, b = SITE.https("GET", "/metrics/green")
        ok(st == 200 and b"hyserve_info" in b,
           "and serve (/metrics/green through the site, with green's secret)")
        rc = SITE.stop_colour("green")
        ok(rc == 0 and not os.path.exists(SITE.sock["green"]) and
           not os.path.exists("/dev/shm/hyserve-" + SITE.instance["green"]),
           "and exit 0 on SIGTERM, removing their sockets and segment (rc %s)" % rc)
except Exception as ex:  # noqa
    ok(False, "unexpected exception: %r" % ex)
finally:
    if t.failed():
        diag(t.tail(os.path.join(SITE.tmp, "serve-blue.log"), 30))
        diag(error_log()[-3000:])
    SITE.cleanup(keep=t.failed())
sys.exit(t.done())
