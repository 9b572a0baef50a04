#!/usr/bin/env python3
"""test_ops.py - the production nginx site (nginx/hyserve.conf) and
hyserve-ctl end to end: a private nginx (temp prefix, loopback port, TLS with
a throwaway certificate) in front of two `hyserve serve` coordinators, blue
and green.  Checks API keys (401 JSON, key add/revoke), 413/429 JSON, TLS
versions and HTTP/2, streaming through TLS, that the secret never reaches a
worker (a fake FastCGI peer records the params), a blue/green switch under
concurrent streaming clients with zero failed responses, and canaries: the
exact set of API keys split_clients sends to the canary colour (nginx's
MurmurHash2 recomputed here), promote, abort, refusals that leave traffic
unchanged, and the model/hyserve versions in /v1/models, /health and
`hyserve-ctl status`.  TAP; skips (1..0 # SKIP) without nginx, openssl or
cgi-fcgi.

Environment: HY_SRCDIR (source tree), HYSERVE (the binary).
"""
import hashlib
import http.client as httpc
import json
import os
import re
import shutil
import signal
import socket
import ssl
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time

SRC = os.path.abspath(os.environ.get("HY_SRCDIR", os.path.join(os.path.dirname(__file__), "..", "..")))
HYSERVE = os.path.abspath(os.environ.get("HYSERVE", "./hyserve"))
CTL = os.path.join(SRC, "scripts", "hyserve-ctl")
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
missing = [n for n, p in (("nginx", NGINX), ("openssl", shutil.which("openssl")),
                          ("cgi-fcgi (libfcgi-bin)", shutil.which("cgi-fcgi"))) if p is None]
if not os.path.exists("/etc/nginx/fastcgi_params"):
    missing.append("/etc/nginx/fastcgi_params (nginx-common)")
N_WORKERS = 6

# TAP and polling helpers shared by the integration scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import taplib  # noqa: E402
from taplib import diag, free_port, ok, wait_for  # noqa: E402

taplib.require(missing)  # installed by scripts/install-deps --test: a failure if not
MODEL = taplib.default_model()[0]


# ---- layout under a temp prefix -------------------------------------------
TMP = tempfile.mkdtemp(prefix="hyops-")
os.chmod(TMP, 0o755)  # nginx workers run as nobody when the test is root
ETC = os.path.join(TMP, "etc")
NGX_DIR = os.path.join(ETC, "nginx")
for d in (NGX_DIR, os.path.join(ETC, "tls"), os.path.join(TMP, "run", "blue"),
          os.path.join(TMP, "run", "green"), os.path.join(TMP, "models")):
    os.makedirs(d, mode=0o755)
    os.chmod(d, 0o755)
PORT = free_port()
TAG = "ops%d" % os.getpid()
SOCK = {c: os.path.join(TMP, "run", c, "fcgi.sock") for c in ("blue", "green")}
ECHO_SOCK = os.path.join(TMP, "run", "echo.sock")


def rewrite(text):
    return (text.replace("/etc/hyserve/", ETC + "/").replace("/run/hyserve/", TMP + "/run/")
            .replace("max_conns=64", "max_conns=%d" % N_WORKERS))


with open(os.path.join(SRC, "nginx", "hyserve.conf")) as f:
    site = f.read()
site = rewrite(site).replace("listen 8443 ssl http2 ", "listen 127.0.0.1:%d ssl http2 " % PORT)
site = "\n".join(l for l in site.splitlines() if "listen [::]" not in l) + "\n"
with open(os.path.join(TMP, "site.conf"), "w") as f:
    f.write(site)
for c in ("blue", "green"):
    with open(os.path.join(SRC, "nginx", "upstream-%s.conf" % c)) as f:
        up = rewrite(f.read())
    with open(os.path.join(NGX_DIR, "upstream-%s.conf" % c), "w") as f:
        f.write(up)
with open(os.path.join(NGX_DIR, "upstream-echo.conf"), "w") as f:
    f.write("upstream hyserve_backend { zone hyserve_backend 64k; server unix:%s max_conns=1; }\n"
            "map $host $hyserve_colour { default \"echo\"; }\n" % ECHO_SOCK)
os.symlink("upstream-blue.conf", os.path.join(NGX_DIR, "upstream-active.conf"))
with open(os.path.join(TMP, "nginx.conf"), "w") as f:
    f.write("""daemon off;
master_process on;
worker_processes 2;
worker_shutdown_timeout 30s;
pid %(p)s/nginx.pid;
error_log %(p)s/error.log info;
events { worker_connections 512; }
http {
    access_log %(p)s/access.log;
    client_body_temp_path %(p)s/body;
    fastcgi_temp_path %(p)s/fastcgi;
    proxy_temp_path %(p)s/proxy;
    uwsgi_temp_path %(p)s/uwsgi;
    scgi_temp_path %(p)s/scgi;
    include %(p)s/site.conf;
}
""" % {"p": TMP})
NGINX_CMD = "%s -p %s/ -c %s/nginx.conf -e %s/error.log" % (NGINX, TMP, TMP, TMP)
ENV = dict(os.environ, HYSERVE_NGINX_DIR=NGX_DIR, HYSERVE_NGINX=NGINX_CMD,
           HYSERVE_NGINX_PID=os.path.join(TMP, "nginx.pid"))

# The same model file under the same name for both colours (clients name
# the model, so a switch must not rename it); the colours differ in
# max_context, which /v1/models reports as max_model_len.
MODEL_ID = "hyserve-test"
MAX_LEN = {"blue": 384, "green": 448}  # both within the tiny model's 512
for c in ("blue", "green"):
    os.makedirs(os.path.join(TMP, "models", c))
    os.symlink(MODEL, os.path.join(TMP, "models", c, MODEL_ID + ".gguf"))
    with open(os.path.join(TMP, "%s.ini" % c), "w") as f:
        f.write("""[model]
path = %s/models/%s/%s.gguf
threads = 1
[engine]
max_seqs = 8
max_context = %d
[cache]
hot_mb = 64
[server]
socket = %s
control_socket = %s
socket_mode = 0666
workers = %d
instance = %s-%s
max_body_bytes = 1M
drain_seconds = 10
""" % (TMP, c, MODEL_ID, MAX_LEN[c], SOCK[c], os.path.join(TMP, "run", c, "ctl.sock"),
       N_WORKERS, TAG, c))

procs = {}
logs = []


def ctl(*args):
    r = subprocess.run([CTL] + list(args), env=ENV, capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def start_serve(c):
    log = open(os.path.join(TMP, "serve-%s.log" % c), "w")
    logs.append(log)
    procs[c] = subprocess.Popen([HYSERVE, "serve", "-c", os.path.join(TMP, "%s.ini" % c)],
                                stdout=log, stderr=subprocess.STDOUT)
    return wait_for(lambda: ctl_health(c), 30)


def ctl_health(c):
    return "ok" in subprocess.run(["sh", "-c", "REQUEST_METHOD=GET DOCUMENT_URI=/health "
                                   "cgi-fcgi -bind -connect %s" % SOCK[c]],
                                  capture_output=True, text=True, timeout=10).stdout


SSL_CTX = ssl.create_default_context()
SSL_CTX.check_hostname = False
SSL_CTX.verify_mode = ssl.CERT_NONE


def https(method, path, body=None, key=None, headers=None, timeout=60):
    c = httpc.HTTPSConnection("127.0.0.1", PORT, timeout=timeout, context=SSL_CTX)
    h = {"Content-Type": "application/json"}
    if key is not None:
        h["Authorization"] = "Bearer " + key
    h.update(headers or {})
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    try:
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        out = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, out
    finally:
        c.close()


def err_code(body):
    try:
        return json.loads(body)["error"]["code"]
    except Exception:
        return None


def stream(key, max_tokens=12):
    """A streamed completion; returns (status, n_chunks, done, colour, error)."""
    c = httpc.HTTPSConnection("127.0.0.1", PORT, timeout=60, context=SSL_CTX)
    try:
        c.request("POST", "/v1/completions",
                  body=json.dumps({"model": MODEL_ID, "prompt": "The capital of France is",
                                   "max_tokens": max_tokens, "temperature": 0,
                                   "stream": True}).encode(),
                  headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
        r = c.getresponse()
        if r.status != 200:
            return r.status, 0, False, None, r.read()[:200]
        n, done, model, finish = 0, False, r.getheader("X-Hyserve-Colour"), None
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            if line == b"data: [DONE]":
                done = True
                break
            ev = json.loads(line[6:])
            for ch in ev.get("choices", []):
                finish = ch.get("finish_reason") or finish
            n += 1
        return 200, n, done and finish is not None, model, None
    except Exception as e:  # a truncated or reset stream
        return -1, 0, False, None, repr(e)
    finally:
        c.close()


# ---- canary helpers ----------------------------------------------------------
def murmur2(data):
    """nginx's ngx_murmur_hash2 (src/core/ngx_murmurhash.c), which
    split_clients applies to its key string."""
    m, h, i, n = 0x5bd1e995, len(data) & 0xffffffff, 0, len(data)
    while n >= 4:
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * m) & 0xffffffff
        k ^= k >> 24
        k = (k * m) & 0xffffffff
        h = ((h * m) & 0xffffffff) ^ k
        i, n = i + 4, n - 4
    if n == 3:
        h ^= data[i + 2] << 16
    if n >= 2:
        h ^= data[i + 1] << 8
    if n >= 1:
        h = ((h ^ data[i]) * m) & 0xffffffff
    h ^= h >> 13
    h = (h * m) & 0xffffffff
    return h ^ (h >> 15)


def split_share(name, percent):
    """True when `split_clients "${key}" { P% canary; * live; }` picks the
    first part for this key: hash < P*100 * 0xffffffff / 10000."""
    return murmur2(name.encode()) < int(round(percent * 100)) * 0xffffffff // 10000


def colour_of(key, tries=20):
    """The colour (instance suffix) /v1/models reports for this key; waits
    out the per-address rate limit (429) instead of failing on it."""
    for _ in range(tries):
        st, h, b = https("GET", "/v1/models", key=key)
        time.sleep(0.025)  # stay under the 50 r/s per address the streams share
        if st == 429:
            time.sleep(0.5)
            continue
        if st != 200:
            return "http-%d" % st
        m = json.loads(b)["data"][0]
        colour = m.get("instance", "").rsplit("-", 1)[-1]
        return colour if h.get("x-hyserve-colour") == colour else "header-%s" % h.get("x-hyserve-colour")
    return "rate-limited"


def expected_model_version():
    real = os.path.realpath(MODEL)
    name = os.path.basename(real)
    name = name[:-5] if name.endswith(".gguf") else name
    with open(real, "rb") as f:
        return "%s@%s" % (name, hashlib.sha256(f.read()).hexdigest()[:8])


# ---- a fake FastCGI peer that answers with the params it received -----------
SLOW_SEEN = threading.Event()  # set when /slow holds the peer's one connection


def fcgi_echo_server(path, stop):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o666)
    srv.listen(8)
    srv.settimeout(0.2)

    def recv_n(s, n):
        b = b""
        while len(b) < n:
            x = s.recv(n - len(b))
            if not x:
                raise EOFError
            b += x
        return b

    def rec(s, typ, rid, content):
        return struct.pack(">BBHHBx", 1, typ, rid, len(content), 0) + content

    while not stop.is_set():
        try:
            s, _ = srv.accept()
        except socket.timeout:
            continue
        try:
            params, rid = b"", 1
            while True:
                _, typ, rid, clen, plen = struct.unpack(">BBHHBx", recv_n(s, 8))
                content = recv_n(s, clen)
                recv_n(s, plen)
                if typ == 4:
                    params += content
                elif typ == 5 and clen == 0:
                    break
            env, i = {}, 0
            while i < len(params):
                lens = []
                for _ in range(2):
                    n = params[i]
                    if n >> 7:
                        n = struct.unpack(">I", params[i:i + 4])[0] & 0x7FFFFFFF
                        i += 4
                    else:
                        i += 1
                    lens.append(n)
                k = params[i:i + lens[0]].decode()
                v = params[i + lens[0]:i + lens[0] + lens[1]].decode(errors="replace")
                i += lens[0] + lens[1]
                env[k] = v
            if env.get("DOCUMENT_URI") == "/slow":
                SLOW_SEEN.set()
                time.sleep(1.5)
            body = json.dumps(env).encode()
            out = b"Status: 200 OK\r\nContent-Type: application/json\r\n\r\n" + body
            s.sendall(rec(s, 6, rid, out) + rec(s, 6, rid, b"") +
                      rec(s, 3, rid, struct.pack(">IB3x", 0, 0)))
        except Exception:
            pass
        finally:
            s.close()
    srv.close()


# ---- run ---------------------------------------------------------------------
NGX = None
echo_stop = threading.Event()
try:
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                        "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                        "-keyout", os.path.join(ETC, "tls", "key.pem"),
                        "-out", os.path.join(ETC, "tls", "cert.pem")], capture_output=True)
    ok(r.returncode == 0, "self-signed certificate")

    # keys before nginx runs: nothing to reload yet
    r = subprocess.run([CTL, "key", "add", "alice"], capture_output=True, text=True,
                       env=dict(ENV, HYSERVE_NO_RELOAD="1"))
    rc, alice = r.returncode, r.stdout.strip()
    keyfile = os.path.join(NGX_DIR, "api-keys.map")
    ok(rc == 0 and stat.S_IMODE(os.stat(keyfile).st_mode) == 0o640, "key add (no reload): keys file mode 0640")

    r = subprocess.run(NGINX_CMD.split() + ["-t", "-q"], capture_output=True, text=True)
    ok(r.returncode == 0, "nginx -t accepts the site with nginx 1.22 syntax")
    diag(r.stderr)

    ok(start_serve("blue"), "blue coordinator healthy on its own socket")
    NGX = subprocess.Popen(NGINX_CMD.split(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ok(wait_for(lambda: https("GET", "/health")[0] == 200, 15), "nginx serves /health over TLS without a key")

    # -- API keys
    rc, out, err = ctl("key", "add", "bob")
    bob = out.strip()
    ok(rc == 0 and bob.startswith("hy-") and len(bob) == 46, "key add bob prints a 32-byte key once")
    # hyserve-ctl returns once only new nginx workers accept: no waiting here
    rc, out, _ = ctl("key", "add", "bob")
    ok(rc != 0, "key add refuses a duplicate name")
    rc, out, _ = ctl("key", "list")
    ok(rc == 0 and out.split() == ["alice", "bob"] and "hy-" not in out, "key list shows names, never secrets")
    st, h, b = https("GET", "/v1/models")
    ok(st == 401 and err_code(b) == "invalid_api_key" and "json" in h.get("content-type", ""),
       "no key: 401 OpenAI-shaped JSON")
    st, _, b = https("GET", "/v1/models", key="hy-" + "A" * 43)
    ok(st == 401 and err_code(b) == "invalid_api_key", "wrong key: 401 JSON")
    st, _, b = https("GET", "/v1/models", headers={"Authorization": "Basic Ym9iOmJvYg=="})
    ok(st == 401 and err_code(b) == "invalid_api_key", "malformed Authorization: 401 JSON")
    st, h, b = https("GET", "/v1/models", key=bob)
    if not ok(st == 200 and json.loads(b)["data"][0]["max_model_len"] == MAX_LEN["blue"] and
              h.get("x-hyserve-colour") == "blue", "bob's key: 200 from blue"):
        diag("%d %s %s" % (st, h, b[:300]))
    st, _, b = https("POST", "/v1/completions", key=bob,
                     body={"model": MODEL_ID, "prompt": "Hello", "max_tokens": 4, "temperature": 0})
    ok(st == 200 and json.loads(b)["choices"][0]["text"] is not None, "non-streamed completion through TLS")
    st, n, done, model, e = stream(bob, 8)
    ok(st == 200 and n >= 2 and done, "streamed completion through TLS: %d chunks, [DONE]" % n)
    st, _, b = https("POST", "/v1/completions", key=bob, body=b"x" * (1536 * 1024))
    ok(st == 413 and err_code(b) == "request_too_large", "1.5 MB body: 413 JSON")
    st, _, _ = https("GET", "/metrics", key=bob)
    ok(st == 200, "/metrics from loopback")

    # -- TLS: versions and HTTP/2
    r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % PORT, "-tls1_1"],
                       input="", capture_output=True, text=True, timeout=10)
    ok(r.returncode != 0, "TLS 1.1 refused")
    r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % PORT, "-tls1_2"],
                       input="", capture_output=True, text=True, timeout=10)
    ok(r.returncode == 0 and "ECDHE" in r.stdout, "TLS 1.2 with an ECDHE cipher")
    if shutil.which("curl"):
        r = subprocess.run(["curl", "-sk", "--http2", "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
                            "-H", "Authorization: Bearer " + bob,
                            "https://127.0.0.1:%d/v1/models" % PORT], capture_output=True, text=True,
                           timeout=20)
        ok(r.stdout == "2 200", "HTTP/2 via ALPN (curl: %s)" % r.stdout)
    else:
        ok(False, "HTTP/2: curl is missing (scripts/install-deps --test)")

    # -- blue/green
    rc, _, err = ctl("switch", "green")
    live = os.readlink(os.path.join(NGX_DIR, "upstream-active.conf"))
    ok(rc != 0 and "blue stays live" in err and live == "upstream-blue.conf",
       "switch to a down colour refused, blue stays live")
    diag(err.strip())
    rc, _, err = ctl("canary", "green", "10")
    live = os.readlink(os.path.join(NGX_DIR, "upstream-active.conf"))
    ok(rc != 0 and "not starting a canary on green" in err and "blue stays live" in err and
       live == "upstream-blue.conf" and not os.path.exists(os.path.join(NGX_DIR, "upstream-canary.conf")) and
       colour_of(bob) == "blue", "canary on a down colour refused, blue stays live")
    diag(err.strip())
    ok(start_serve("green"), "green coordinator healthy")
    rc, out, _ = ctl("status")
    ok(rc == 0 and out.count(MODEL_ID) == 2 and
       [l.split()[1] for l in out.splitlines() if l.startswith("blue")] == ["*"], "status shows both, blue live")
    diag(out)

    green_conf = os.path.join(NGX_DIR, "upstream-green.conf")
    with open(green_conf) as f:
        good = f.read()
    with open(green_conf, "a") as f:
        f.write("bogus_directive on;\n")
    rc, _, err = ctl("switch", "green")
    ok(rc != 0 and "nginx rejected" in err and
       os.readlink(os.path.join(NGX_DIR, "upstream-active.conf")) == "upstream-blue.conf" and
       https("GET", "/health")[1].get("x-hyserve-colour") == "blue",
       "switch with a broken green config: link restored, blue stays live")
    with open(green_conf, "w") as f:
        f.write(good)

    results, stop_load = [], threading.Event()

    def client():
        # paced to stay under bob's 10 r/s when the model is tiny and fast
        while not stop_load.is_set():
            t0 = time.time()
            results.append(stream(bob, 12))
            time.sleep(max(0.0, 0.5 - (time.time() - t0)))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    seen = []
    for c in ("green", "blue", "green"):
        rc, out, err = ctl("switch", c)
        seen.append(rc == 0 and ("live: " + c) in out)
        # let new streams finish on this colour, however slow the machine
        # (sanitizer builds): at least 1 s and one stream served by it
        n0 = len(results)
        time.sleep(1.0)
        wait_for(lambda: any(r[3] == c for r in results[n0:]), 60)
    stop_load.set()
    for t in threads:
        t.join(60)
    ok(all(seen), "switch green -> blue -> green under load")
    bad = [r for r in results if not (r[0] == 200 and r[2] and r[1] >= 1)]
    models = set(r[3] for r in results if r[0] == 200)
    ok(len(results) >= 8 and not bad, "%d streams during the switches, %d failed or truncated %s" %
       (len(results), len(bad), bad[:2]))
    ok(models == {"blue", "green"}, "streams were served by both colours: %s" % sorted(models))
    ok(all(json.loads(https("GET", "/v1/models", key=bob)[2])["data"][0]["max_model_len"] ==
           MAX_LEN["green"] for _ in range(5)), "/v1/models shows green afterwards")
    rc, out, _ = ctl("status")
    ok(rc == 0 and [l.split()[1] for l in out.splitlines() if l.startswith("green")] == ["*"],
       "status: green live")

    # -- versions: the model file (name + sha256 prefix) and hyserve's own
    want_mv = expected_model_version()
    hv = subprocess.run([HYSERVE, "--version"], capture_output=True, text=True).stdout.split()[-1]
    got = {}

    def versions_ready():
        got["m"] = json.loads(https("GET", "/v1/models", key=bob)[2])["data"][0]
        return not got["m"]["model_version"].endswith("@hashing")

    ok(wait_for(versions_ready, 30) and got["m"]["model_version"] == want_mv and
       got["m"]["model_sha256"].startswith(want_mv.rsplit("@", 1)[1]) and
       got["m"]["hyserve_version"] == hv and got["m"]["instance"] == TAG + "-green",
       "/v1/models: instance, model_version %s, hyserve_version %s" % (want_mv, hv))
    st, h, b = https("GET", "/health")
    hb = json.loads(b) if st == 200 else {}
    ok(hb.get("status") == "ok" and hb.get("model_version") == want_mv and hb.get("model") == MODEL_ID and
       hb.get("hyserve_version") == hv, "/health shows model and hyserve versions")
    status_out = [""]

    def status_versions():  # blue hashes at low priority: allow it time on a busy machine
        status_out[0] = ctl("status")[1]
        return status_out[0].count(want_mv) == 2 and status_out[0].count(" " + hv + " ") == 2

    ok(wait_for(status_versions, 60), "status prints both colours' model and hyserve versions")
    diag(status_out[0])

    # -- canary: 40 API keys, 10% of them (by key id) on green
    rc, out, err = ctl("switch", "blue")
    ok(rc == 0, "back to blue before the canary")
    names = ["ck%02d" % i for i in range(40)]
    keys = {}
    for n in names[:-1]:  # one reload for all of them
        r = subprocess.run([CTL, "key", "add", n], capture_output=True, text=True,
                           env=dict(ENV, HYSERVE_NO_RELOAD="1"))
        keys[n] = r.stdout.strip()
    rc, out, _ = ctl("key", "add", names[-1])
    keys[names[-1]] = out.strip()
    ok(rc == 0 and all(k.startswith("hy-") for k in keys.values()), "40 canary keys added")
    want_green = sorted(n for n in names if split_share(n, 10))
    diag("keys split_clients sends to green at 10%%: %s" % want_green)

    rc, out, err = ctl("canary", "green", "150")
    ok(rc != 0 and "0.01 to 99.99" in err, "canary refuses a percent outside 0.01..99.99")
    rc, out, err = ctl("promote")
    ok(rc != 0 and "no canary is running" in err, "promote without a canary refused")
    rc, out, err = ctl("canary", "blue", "10")
    ok(rc != 0 and "already live" in err, "canary on the live colour refused")

    # streams that run through every canary change below
    cresults, stop_c = [], threading.Event()

    def canary_client(k):
        while not stop_c.is_set():
            t0 = time.time()
            cresults.append(stream(k, 24))
            time.sleep(max(0.0, 0.6 - (time.time() - t0)))

    stream_keys = [keys[want_green[0]] if want_green else keys[names[0]], keys[names[0]],
                   keys[names[1]]]
    cthreads = [threading.Thread(target=canary_client, args=(k,), daemon=True)
                for k in stream_keys]
    for t in cthreads:
        t.start()
    time.sleep(0.5)

    rc, out, err = ctl("canary", "green", "10")
    ok(rc == 0 and "green gets 10% of API keys" in out and
       os.readlink(os.path.join(NGX_DIR, "upstream-active.conf")) == "upstream-canary.conf",
       "canary green 10: %s" % (out.strip() or err.strip()))
    seen = {n: [colour_of(keys[n]) for _ in range(3)] for n in names}
    on_green = sorted(n for n, c in seen.items() if c[0] == "green")
    sticky = all(len(set(c)) == 1 and c[0] in ("blue", "green") for c in seen.values())
    ok(sticky, "each key gets the same colour on every request")
    if not sticky:
        diag({n: c for n, c in seen.items() if len(set(c)) != 1 or c[0] not in ("blue", "green")})
    ok(1 <= len(on_green) <= 12 and on_green == want_green,
       "canary 10%%: %d of 40 keys on green, exactly the ones MurmurHash2 predicts (%s)" %
       (len(on_green), on_green))
    st, h, b = https("GET", "/health")
    ok(st == 200 and h.get("x-hyserve-colour") == "blue" and json.loads(b)["instance"] == TAG + "-blue",
       "keyless /health stays on the live colour")
    rc, out, _ = ctl("status")
    rows = {l.split()[0]: l.split() for l in out.splitlines() if l.split() and l.split()[0] in ("blue", "green")}
    ok(rc == 0 and "canary: green gets 10% of API keys" in out and rows.get("blue", [""])[1:2] == ["*"] and
       rows.get("green", [""])[1:2] == ["10%"], "status shows blue live and the green canary at 10%")
    diag(out)

    # -- hyserve-ctl top: both colours while the canary streams run
    rc, out, err = ctl("top", "--once")
    rows = {l.split()[0]: l.split() for l in out.splitlines()
            if l.split() and l.split()[0] in ("blue", "green")}

    def top_row_ok(c, live):
        r = rows.get(c, [])
        if len(r) != 14 or r[1] != live or r[2] != "ok" or r[3] != "hot":
            return False
        metrics = subprocess.run(["sh", "-c", "REQUEST_METHOD=GET DOCUMENT_URI=/metrics cgi-fcgi "
                                  "-bind -connect %s" % os.path.join(TMP, "run", c, "ctl.sock")],
                                 capture_output=True, text=True, timeout=10).stdout
        total = re.search(r"^hyserve_kv_pages_total (\d+)", metrics, re.M)
        return (all(x.isdigit() for x in r[4:8]) and int(r[6]) >= 1 and
                all(float(x) >= 0 for x in r[8:10]) and re.fullmatch(r"\d+/\d+/\d+", r[10]) and
                total is not None and r[11].split("/")[1] == total.group(1) and
                re.fullmatch(r"\d+/\d+", r[12]) and re.fullmatch(r"\d+/\d+", r[13]))

    ok(rc == 0 and "live: blue; canary: green at 10%" in out and top_row_ok("blue", "*") and
       top_row_ok("green", "10%"),
       "top --once: both colours with requests, tokens/s, TTFT P50/P95/P99, hot-tier pages and slots")
    diag(out)
    # the live view redraws every second: wait for two frames, then Ctrl-C
    top = subprocess.Popen([CTL, "top"], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    frames, buf, t_end = 0, b"", time.time() + 60
    os.set_blocking(top.stdout.fileno(), False)
    while frames < 2 and time.time() < t_end and top.poll() is None:
        buf += top.stdout.read() or b""
        frames = buf.count(b"\033[H\033[2J")
        time.sleep(0.1)
    # SIGTERM, which top traps like Ctrl-C: a shell started from a
    # background job ignores SIGINT and cannot trap it (POSIX), so SIGINT
    # would hang this test wherever make runs in the background
    top.send_signal(signal.SIGTERM)
    os.set_blocking(top.stdout.fileno(), True)
    try:
        top.communicate(timeout=10)  # drains what it writes while it exits
        rc = top.returncode
    except subprocess.TimeoutExpired:
        top.kill()
        top.wait()
        rc = "timeout"
    ok(frames >= 2 and rc == 0 and buf.count(b"\ngreen ") >= 2,
       "top redraws both colours every second until interrupted (%d frames, exit %s)" % (frames, rc))

    # nginx refuses the canary include: the running canary stays as it was
    green_conf = os.path.join(NGX_DIR, "upstream-green.conf")
    with open(green_conf) as f:
        good = f.read()
    with open(green_conf, "w") as f:
        f.write(good.replace("max_conns=", "max_conns=x"))
    rc, _, err = ctl("canary", "green", "50")
    with open(green_conf, "w") as f:
        f.write(good)
    with open(os.path.join(NGX_DIR, "upstream-canary.conf")) as f:
        state = f.read()
    ok(rc != 0 and "nginx rejected" in err and "canary green at 10%" in err and
       "percent=10\n" in state and [colour_of(keys[n]) for n in names[:8]] ==
       ["green" if n in want_green else "blue" for n in names[:8]],
       "a canary change nginx rejects leaves the 10% canary serving")
    diag(err.strip().splitlines()[-1] if err.strip() else "")

    rc, out, err = ctl("canary", "green", "25")
    want25 = [n for n in names if split_share(n, 25)]
    got25 = [n for n in names if colour_of(keys[n]) == "green"]
    ok(rc == 0 and got25 == want25 and set(want_green) <= set(got25),
       "canary raised to 25%%: %d keys on green, a superset of the 10%% ones" % len(got25))

    rc, out, err = ctl("promote")
    ok(rc == 0 and "live: green" in out and
       os.readlink(os.path.join(NGX_DIR, "upstream-active.conf")) == "upstream-green.conf" and
       not os.path.exists(os.path.join(NGX_DIR, "upstream-canary.conf")), "promote: green live")
    after = [colour_of(keys[n]) for n in names]
    ok(after == ["green"] * 40, "after promote all 40 keys on green (%d)" % after.count("green"))

    rc, out, err = ctl("switch", "blue")
    rc2, out2, err2 = ctl("canary", "green", "10")
    ok(rc == 0 and rc2 == 0 and [colour_of(keys[n]) for n in want_green] == ["green"] * len(want_green),
       "switch blue, canary green 10 again")
    rc, out, err = ctl("abort")
    after = [colour_of(keys[n]) for n in names]
    ok(rc == 0 and "live: blue" in out and after == ["blue"] * 40 and
       os.readlink(os.path.join(NGX_DIR, "upstream-active.conf")) == "upstream-blue.conf",
       "abort: all 40 keys back on blue (%d)" % after.count("blue"))

    time.sleep(1.0)
    stop_c.set()
    for t in cthreads:
        t.join(60)
    bad = [r for r in cresults if not (r[0] == 200 and r[2] and r[1] >= 1)]
    ok(len(cresults) >= 6 and not bad, "%d streams across canary/promote/switch/abort, %d failed or truncated %s"
       % (len(cresults), len(bad), bad[:2]))
    ok(set(r[3] for r in cresults if r[0] == 200) == {"blue", "green"},
       "canary streams were served by both colours")
    for n in names:  # bob's revoke below reloads nginx for all of them
        subprocess.run([CTL, "key", "revoke", n], capture_output=True, env=dict(ENV, HYSERVE_NO_RELOAD="1"))

    # -- revoke
    rc, out, _ = ctl("key", "revoke", "bob")
    ok(rc == 0 and all(err_code(https("GET", "/v1/models", key=bob)[2]) == "invalid_api_key"
                       for _ in range(5)), "revoked key: 401 as soon as key revoke returns")
    rc, out, _ = ctl("key", "list")
    ok(out.split() == ["alice"], "key list after revoke")

    # -- rate limit per key (burst 20 at 10 r/s)
    rc, carol, _ = ctl("key", "add", "carol")
    carol = carol.strip()
    time.sleep(2.5)  # let the key's bucket refill
    codes, lock = [], threading.Lock()

    def hammer():
        for _ in range(10):
            st, _, b = https("GET", "/v1/models", key=carol)
            with lock:
                codes.append((st, err_code(b) if st == 429 else None))

    hs = [threading.Thread(target=hammer, daemon=True) for _ in range(6)]
    for t in hs:
        t.start()
    for t in hs:
        t.join(60)
    n429 = [c for c in codes if c[0] == 429]
    ok(n429 and all(c[1] == "rate_limit_exceeded" for c in n429) and
       all(c[0] in (200, 429) for c in codes),
       "60 fast requests on one key: %d x 429 JSON, rest 200" % len(n429))

    # -- the secret never reaches the backend; the key id does
    threading.Thread(target=fcgi_echo_server, args=(ECHO_SOCK, echo_stop), daemon=True).start()
    wait_for(lambda: os.path.exists(ECHO_SOCK), 5)
    os.symlink("upstream-echo.conf", os.path.join(NGX_DIR, "upstream-active.conf.new"))
    os.replace(os.path.join(NGX_DIR, "upstream-active.conf.new"), os.path.join(NGX_DIR, "upstream-active.conf"))
    subprocess.run(NGINX_CMD.split() + ["-s", "reload"], check=True, capture_output=True)

    def echoed():
        st, h, b = https("POST", "/v1/completions", key=alice, body={"prompt": "x"})
        return json.loads(b) if h.get("x-hyserve-colour") == "echo" else None

    got = [None]  # the first answer from a new worker (the reload is asynchronous here)
    wait_for(lambda: got.append(echoed()) or got[-1] is not None, 10)
    env = got[-1] or {}
    ok(env.get("HTTP_AUTHORIZATION", "") == "" and alice not in json.dumps(env) and
       env.get("HYSERVE_KEY_ID") == "alice", "backend sees HYSERVE_KEY_ID=alice and no Authorization")

    # -- overload: max_conns reached -> 503 JSON with Retry-After, at once
    slow_st = []
    slow = threading.Thread(target=lambda: slow_st.append(https("GET", "/slow", key=alice)[0]))
    slow.start()
    # on a loaded machine the TLS handshake alone can take longer than any
    # fixed sleep: wait until the peer really holds the slow request
    SLOW_SEEN.wait(10)
    t0 = time.time()
    st, h, b = https("GET", "/v1/models", key=alice)
    dt = time.time() - t0
    slow.join(10)
    ok(st == 503 and err_code(b) == "backend_unavailable" and h.get("retry-after") == "5" and dt < 1.0
       and slow_st == [200],
       "upstream at max_conns: 503 JSON + Retry-After in %.2f s (got %d; slow request %s)" % (dt, st, slow_st))
    os.remove(ECHO_SOCK)
    st, h, b = https("GET", "/v1/models", key=alice)
    ok(st == 503 and err_code(b) == "backend_unavailable", "backend down: 503 JSON")
except Exception as e:  # report, then still tear down and check the teardown
    ok(False, "aborted: %r" % e)
finally:
    # ---- teardown: nothing may be left behind
    echo_stop.set()
    if NGX is not None:
        NGX.send_signal(signal.SIGQUIT)
        try:
            NGX.wait(timeout=15)
        except subprocess.TimeoutExpired:
            NGX.kill()
            NGX.wait()
    for c, p in procs.items():
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    for l in logs:
        l.close()

ngx_left = subprocess.run(["pgrep", "-f", TMP + "/nginx.conf"], capture_output=True, text=True).stdout.split()
ok(not ngx_left, "nginx master and workers gone")
ok(all(p.returncode == 0 for p in procs.values()) and len(procs) == 2, "both coordinators exited 0 on SIGTERM")
left = subprocess.run(["pgrep", "-f", TMP], capture_output=True, text=True).stdout.split()
ok(not left, "no stray processes")
ok(not any(os.path.exists("/dev/shm/hyserve-%s-%s" % (TAG, c)) for c in ("blue", "green")),
   "/dev/shm segments removed")
if taplib.failed():
    for name in ("error.log", "serve-blue.log", "serve-green.log"):
        try:
            with open(os.path.join(TMP, name)) as f:
                diag("---- %s (tail)\n%s" % (name, "".join(f.readlines()[-15:])))
        except OSError:
            pass
else:
    shutil.rmtree(TMP, ignore_errors=True)
sys.exit(taplib.done())
