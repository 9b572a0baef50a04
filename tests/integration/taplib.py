"""taplib.py - shared helpers for the Python integration tests: TAP output
(ok/skip/diag and the plan, and the rule for what the suite requires),
polling, a plain HTTP client, and a
"stack" that starts `hyserve serve` behind a private nginx (plain HTTP on a
loopback port, nginx/hyserve-test.conf.in) in a temporary directory and tears
it down again.  Tests import it from their own directory:

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import taplib as t

Environment: HY_SRCDIR (source tree), HYSERVE (the binary), as set by
`make check` (AM_TESTS_ENVIRONMENT).
"""
import http.client as httpc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SRC = os.path.abspath(os.environ.get("HY_SRCDIR",
                                     os.path.join(os.path.dirname(__file__), "..", "..")))
HYSERVE = os.path.abspath(os.environ.get("HYSERVE", "./hyserve"))


def which(name, *fallbacks):
    """Path of a program on PATH or at one of the fallbacks; None if absent.
    /usr/sbin is often missing from a non-root PATH, hence the fallbacks."""
    p = shutil.which(name)
    if p:
        return p
    for f in fallbacks:
        if os.path.exists(f) and os.access(f, os.X_OK):
            return f
    return None


NGINX = which("nginx", "/usr/sbin/nginx")
FASTCGI_PARAMS = "/etc/nginx/fastcgi_params"
DEFAULT_MODEL = os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
TINY_MODEL = os.path.join(SRC, "tests", "golden", "tiny", "llama.gguf")


# What the suite needs and is not in the repository - the programs that
# scripts/install-deps --test installs and the default model that
# scripts/fetch-default-model fetches (scripts/run-tests runs both) - is
# required: missing, it is a failed check naming the command that provides
# it, never a skip.  Skips are left for what no script can provide: a GPU,
# a CPU feature, root.


def default_model():
    """(path, has_chat_template): the default model; when it was not fetched,
    a failed check, then the tiny golden llama (no chat template) so that
    the rest of the test still runs."""
    if os.path.exists(DEFAULT_MODEL):
        return DEFAULT_MODEL, True
    ok(False, "the default model %s is missing (scripts/fetch-default-model)" % DEFAULT_MODEL)
    return TINY_MODEL, False


def require(missing):
    """missing: descriptions of absent programs or files (empty: all there).
    Otherwise one failed check naming them, the plan, and exit."""
    if missing:
        ok(False, "needs %s (scripts/install-deps --test)" % ", ".join(missing))
        sys.exit(done())


# ---- TAP ---------------------------------------------------------------------
# The plan goes last ("1..N" after the results), which TAP allows and which
# lets a test decide its checks as it goes.
n_test = 0
n_fail = 0


def ok(cond, what):
    global n_test, n_fail
    n_test += 1
    cond = bool(cond)
    if not cond:
        n_fail += 1
    print("%s %d - %s" % ("ok" if cond else "not ok", n_test, _one_line(what)), flush=True)
    return cond


def skip(what, why):
    global n_test
    n_test += 1
    print("ok %d - %s # SKIP %s" % (n_test, _one_line(what), _one_line(why)), flush=True)


def diag(msg):
    for line in str(msg).splitlines() or [""]:
        print("# " + line, flush=True)


def skip_all(why):
    print("1..0 # SKIP %s" % _one_line(why), flush=True)
    sys.exit(0)


def require_models(models):
    """models: [(path, the command that fetches it)].  Model files come from
    outside the repository; a missing one is a failed check naming that
    command, never a skip, and ends the test."""
    missing = [(p, how) for p, how in models if not os.path.exists(p)]
    for p, how in missing:
        ok(False, "the model %s (%s)" % (p, how))
    if missing:
        sys.exit(done())


def done():
    """Prints the plan; returns the exit status (1 if any check failed)."""
    print("1..%d" % n_test, flush=True)
    return 1 if n_fail else 0


def failed():
    return n_fail > 0


def _one_line(s):
    # a newline inside a description would end the TAP line early
    return str(s).replace("\n", " ").replace("#", "\\#")


# ---- small helpers -------------------------------------------------------------
def free_port():
    """A loopback TCP port that was free a moment ago (nginx binds it next)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_for(pred, timeout=20.0, interval=0.05):
    """Polls pred() until it returns true or timeout seconds pass; exceptions
    count as false (the thing polled may not exist yet)."""
    end = time.time() + timeout
    while True:
        try:
            if pred():
                return True
        except Exception:
            pass
        if time.time() >= end:
            return False
        time.sleep(interval)


def http(port, method, path, body=None, headers=None, timeout=60, host="127.0.0.1"):
    """One request on a fresh connection; body is bytes, None, or a value
    sent as JSON.  Returns (status, {header: value}, body bytes)."""
    c = httpc.HTTPConnection(host, port, timeout=timeout)
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    try:
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        out = r.read()
        return r.status, dict(r.getheaders()), out
    finally:
        c.close()


def sse_events(raw):
    """The JSON payloads of a text/event-stream body, without [DONE]."""
    out = []
    for line in raw.decode(errors="replace").splitlines():
        if line.startswith("data: ") and line[6:].strip() != "[DONE]":
            out.append(json.loads(line[6:]))
    return out


def metric_samples(body):
    """The Prometheus text body as {sample name with labels: value}."""
    m = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            m[k] = float(v)
    return m


def tail(path, n=40):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError as e:
        return "(%s)" % e


def children(master, engine=False):
    """Pids of a hyserve master's live FastCGI workers, sorted; with
    engine=True its engine process's instead (prctl name hyserve-engine)."""
    out = subprocess.run(["ps", "-o", "pid=,stat=,comm=", "--ppid", str(master)],
                         capture_output=True, text=True).stdout
    pids = []
    for line in out.splitlines():
        f = line.split()
        if len(f) == 3 and not f[1].startswith("Z") and (f[2] == "hyserve-engine") == engine:
            pids.append(int(f[0]))
    return sorted(pids)


# ---- the coordinator + nginx stack -------------------------------------------------
class Stack:
    """`hyserve serve` on a private FastCGI socket, a private nginx in front
    of it on a loopback port, both rooted in a temporary directory.

    ini:        {"section": {"key": value}} merged over a small test config
                (2 threads, 1024 context, 128 MiB cache, 64K bodies).
    wrap:       argv prefix for the serve command (e.g. a namespace helper);
                it must exec hyserve so that the pid stays the coordinator's.
    nginx_http / nginx_location: extra nginx directives for the http{} block
                and the location (e.g. a key map and fastcgi_param lines).
    """

    def __init__(self, model=None, workers=2, ini=None, wrap=None, nginx_http="",
                 nginx_location="", tmp=None, prefix="hyserve-it-"):
        self.model = model or default_model()[0]
        self.n_workers = workers
        self.tmp = tmp or tempfile.mkdtemp(prefix=prefix)
        os.makedirs(self.tmp, exist_ok=True)
        self.port = free_port()
        self.instance = "it%d_%d" % (os.getpid(), self.port)
        self.sock = os.path.join(self.tmp, "fcgi.sock")
        self.serve_log_path = os.path.join(self.tmp, "serve.log")
        self.wrap = list(wrap or [])
        self.serve = None
        self.nginx = None
        self._serve_log = None
        conf = {
            "model": {"path": self.model, "threads": 2},
            "engine": {"max_seqs": 8, "max_context": 1024},
            "cache": {"hot_mb": 128},
            "server": {"socket": self.sock, "workers": workers, "instance": self.instance,
                       "max_body_bytes": "64K", "drain_seconds": 10},
            "log": {"stderr": "true"},
        }
        for sec, kv in (ini or {}).items():
            conf.setdefault(sec, {}).update(kv)
        self.ini_path = os.path.join(self.tmp, "hyserve.ini")
        with open(self.ini_path, "w") as f:
            for sec, kv in conf.items():
                f.write("[%s]\n" % sec)
                for k, v in kv.items():
                    f.write("%s = %s\n" % (k, v))
        self.nginx_conf_path = os.path.join(self.tmp, "nginx.conf")
        with open(self.nginx_conf_path, "w") as f:
            f.write(self._nginx_conf(nginx_http, nginx_location))

    def _nginx_conf(self, http_extra, location_extra):
        with open(os.path.join(SRC, "nginx", "hyserve-test.conf.in")) as f:
            conf = f.read()
        conf = conf.replace("@PREFIX@", self.tmp).replace("@PORT@", str(self.port))
        conf = conf.replace("@SOCKET@", self.sock)
        # Extras go next to fixed anchors of the template; a template that
        # lost them must fail loudly, not silently drop the extras.
        for extra, anchor in ((http_extra, "    server {"),
                              (location_extra, "            fastcgi_pass ")):
            if extra:
                if conf.count(anchor) != 1:
                    raise RuntimeError("hyserve-test.conf.in: anchor %r not found once" % anchor)
                conf = conf.replace(anchor, extra.rstrip("\n") + "\n" + anchor)
        return conf

    def start(self, timeout=60):
        """Starts both; returns True once /health answers 200 through nginx."""
        self._serve_log = open(self.serve_log_path, "w")
        self.serve = subprocess.Popen(self.wrap + [HYSERVE, "serve", "-c", self.ini_path],
                                      stdout=self._serve_log, stderr=subprocess.STDOUT)
        self.nginx = subprocess.Popen([NGINX, "-p", self.tmp, "-c", self.nginx_conf_path,
                                       "-e", os.path.join(self.tmp, "error.log")],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return wait_for(lambda: self.serve.poll() is None and os.path.exists(self.sock) and
                        self.http("GET", "/health", timeout=5)[0] == 200, timeout, 0.2)

    def http(self, method, path, body=None, headers=None, timeout=60):
        return http(self.port, method, path, body, headers, timeout)

    def workers(self):
        """Pids of the master's live worker processes, sorted (not its
        engine process, which names itself hyserve-engine)."""
        return children(self.serve.pid)

    def stop_serve(self, timeout=30):
        """SIGTERM to the coordinator (a drain); returns its exit status."""
        if self.serve is None:
            return None
        if self.serve.poll() is None:
            self.serve.send_signal(signal.SIGTERM)
        try:
            return self.serve.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.serve.kill()
            return self.serve.wait()

    def stop(self):
        """Stops nginx and the coordinator (idempotent); returns hyserve's
        exit status."""
        if self.nginx is not None and self.nginx.poll() is None:
            self.nginx.send_signal(signal.SIGQUIT)
            try:
                self.nginx.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.nginx.kill()
                self.nginx.wait()
        rc = self.stop_serve()
        if self._serve_log is not None:
            self._serve_log.close()
            self._serve_log = None
        return rc

    def cleanup(self, keep=False):
        """Removes the temporary directory unless keep (kept for a post-mortem
        when a check failed)."""
        self.stop()
        if keep:
            diag("kept %s" % self.tmp)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
