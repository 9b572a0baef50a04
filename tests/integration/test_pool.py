#!/usr/bin/env python3
"""test_pool.py - several hosts behind one nginx: three `hyserve serve`
instances, each in its own network namespace (ip netns, a veth pair, its
own 10.x address) with [server] listen on that address, the blue secret and
an allow-list naming nginx's side of its veth, behind the production site
(sitelib) in the root namespace.  host0 is also the local socket of the
upstream (`server unix:`), host1 and host2 join with `hyserve-ctl pool add`.

Checks: the pool's address validation and list; a peer outside the
allow-list is closed unanswered and logged with its address and the key; a
request without the secret gets 403 and is logged; API keys spread over the
hosts and every request of a key lands on one host (nginx hash on the key
id); two requests with one X-Session-Id and a shared long prefix hit the
prefix cache (cached_tokens > 0) on one host; a canary keeps working with a
pool; host2 removed and added back with `hyserve-ctl pool` while 8 streams
run: 0 failed; kill -9 of host2's master: its in-flight streams end with a
visible error (no last chunk), new requests for its keys succeed on the
others.  Namespaces and veths are removed in a finally block.

Needs root (ip netns) like CI: a failure naming the reason otherwise.
`test_pool.py --bench`: instead of the checks, aggregate tokens/s at 32
streams through nginx with 1, 2 and 3 hosts (`hyserve bench --url
--sessions`, docs/PERFORMANCE.md).

Environment: HY_SRCDIR (source tree), HYSERVE (the binary).
"""
import configparser
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sitelib  # noqa: E402
import taplib  # noqa: E402
from taplib import diag, ok, wait_for  # noqa: E402

BENCH = "--bench" in sys.argv[1:]
taplib.require(sitelib.missing_tools() + ([] if taplib.which("ip") else ["ip (iproute2)"]))
MODEL = taplib.default_model()[0]
PID = os.getpid()
NET = 100 + PID % 100          # hosts on 10.NET.i.0/24
N_HOSTS = 3
PORT = 9000                    # every host's [server] listen port (own namespace each)
NS = ["hyp%d_%d" % (PID, i) for i in range(N_HOSTS)]
VETH = ["hp%dr%d" % (PID, i) for i in range(N_HOSTS)]   # root side; <= 15 chars
VETH_NS = ["hp%dn%d" % (PID, i) for i in range(N_HOSTS)]
NGINX_SIDE = ["10.%d.%d.1" % (NET, i) for i in range(N_HOSTS)]
OUTSIDER = ["10.%d.%d.3" % (NET, i) for i in range(N_HOSTS)]
HOST = ["10.%d.%d.2" % (NET, i) for i in range(N_HOSTS)]
HP = ["%s:%d" % (h, PORT) for h in HOST]


def sh(*argv):
    r = subprocess.run(list(argv), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(argv), (r.stderr or r.stdout).strip()))


def net_up():
    """The namespaces and veths; a RuntimeError naming the command that failed."""
    for i in range(N_HOSTS):
        sh("ip", "netns", "add", NS[i])
        sh("ip", "link", "add", VETH[i], "type", "veth", "peer", "name", VETH_NS[i])
        sh("ip", "link", "set", VETH_NS[i], "netns", NS[i])
        # nginx's address first (the primary: its connections come from it),
        # then an outsider on the same link that the allow-list leaves out
        sh("ip", "addr", "add", NGINX_SIDE[i] + "/24", "dev", VETH[i])
        sh("ip", "addr", "add", OUTSIDER[i] + "/24", "dev", VETH[i])
        sh("ip", "link", "set", VETH[i], "up")
        sh("ip", "-n", NS[i], "addr", "add", HOST[i] + "/24", "dev", VETH_NS[i])
        sh("ip", "-n", NS[i], "link", "set", VETH_NS[i], "up")
        sh("ip", "-n", NS[i], "link", "set", "lo", "up")


def net_down():
    for i in range(N_HOSTS):
        subprocess.run(["ip", "link", "del", VETH[i]], capture_output=True)
        subprocess.run(["ip", "netns", "del", NS[i]], capture_output=True)


# ---- a FastCGI client that can choose its source address ---------------------
def _fcgi_record(typ, content):
    return struct.pack(">BBHHBx", 1, typ, 1, len(content), 0) + content


def _fcgi_pairs(params):
    out = b""
    for k, v in params.items():
        k, v = k.encode(), v.encode()
        out += bytes([len(k)]) + (bytes([len(v)]) if len(v) < 128
                                  else struct.pack(">I", len(v) | 0x80000000)) + k + v
    return out


def fcgi_get(host, path, secret, source=None, timeout=10):
    """GET path over FastCGI/TCP; (stdout bytes, error string or None).  A
    connection closed without any record gives (b"", "closed unanswered")."""
    params = {"REQUEST_METHOD": "GET", "DOCUMENT_URI": path, "SCRIPT_NAME": path,
              "REQUEST_URI": path, "SERVER_PROTOCOL": "HTTP/1.1"}
    if secret is not None:
        params["HYSERVE_SECRET"] = secret
    req = (_fcgi_record(1, struct.pack(">HB5x", 1, 0)) + _fcgi_record(4, _fcgi_pairs(params)) +
           _fcgi_record(4, b"") + _fcgi_record(5, b""))
    s = socket.socket()
    s.settimeout(timeout)
    data = b""
    try:
        if source:
            s.bind((source, 0))
        s.connect((host, PORT))
        s.sendall(req)
        while True:
            x = s.recv(65536)
            if not x:
                break
            data += x
    except (ConnectionError, socket.timeout, OSError) as e:
        if not data:
            return b"", "%s" % e
    finally:
        s.close()
    if not data:
        return b"", "closed unanswered"
    out = b""
    while len(data) >= 8:
        _, typ, _, n, pad = struct.unpack(">BBHHB", data[:7])
        if typ == 6:
            out += data[8:8 + n]
        data = data[8 + n + pad:]
    return out, None


# ---- the hosts ----------------------------------------------------------------
class Hosts:
    def __init__(self, site, extra):
        self.site, self.procs, self.logs, self.ini = site, [None] * N_HOSTS, [None] * N_HOSTS, []
        base = configparser.ConfigParser()
        base.read(site.ini["blue"])
        for i in range(N_HOSTS):
            cp = configparser.ConfigParser()
            cp.read_dict(base)
            run = os.path.join(site.tmp, "run", "blue" if i == 0 else "h%d" % i)
            os.makedirs(run, exist_ok=True)
            cp["server"]["socket"] = os.path.join(run, "fcgi.sock")
            cp["server"]["control_socket"] = os.path.join(run, "ctl.sock")
            cp["server"]["instance"] = "%s-h%d" % (site.instance["blue"], i)
            cp["server"]["listen"] = HP[i]
            cp["server"]["allow"] = NGINX_SIDE[i] + "/32"
            for sec, kv in extra.items():
                for k, v in kv.items():
                    cp[sec][k] = str(v)
            path = os.path.join(site.tmp, "host%d.ini" % i)
            with open(path, "w") as f:
                cp.write(f)
            self.ini.append(path)

    def start(self, i):
        self.logs[i] = os.path.join(self.site.tmp, "host%d.log" % i)
        with open(self.logs[i], "a") as log:
            # ip netns exec execs hyserve: the pid is the master's
            self.procs[i] = subprocess.Popen(["ip", "netns", "exec", NS[i], sitelib.HYSERVE,
                                              "serve", "-c", self.ini[i]],
                                             stdout=log, stderr=subprocess.STDOUT)

    def healthy(self, i):
        out, _ = fcgi_get(HOST[i], "/health", self.site.secret("blue"), NGINX_SIDE[i])
        return self.procs[i].poll() is None and b'"ok"' in out

    def log(self, i):
        with open(self.logs[i], errors="replace") as f:
            return f.read()

    def stop(self):
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            if p is not None:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def keys_by_host(hosts):
    """{key id: set of host indexes that logged a request of it}"""
    seen = {}
    for i in range(N_HOSTS):
        for m in re.finditer(r"event=request req=\S+ key_id=(\S+) route=/v1/completions", hosts.log(i)):
            seen.setdefault(m.group(1), set()).add(i)
    return seen


def complete(site, key, prompt, max_tokens=2, session=None, timeout=60):
    h = {"X-Session-Id": session} if session else {}
    st, _, body = site.https("POST", "/v1/completions", key=key, headers=h, timeout=timeout,
                             body={"model": sitelib.MODEL_ID, "prompt": prompt,
                                   "max_tokens": max_tokens, "temperature": 0})
    try:
        return st, json.loads(body)
    except ValueError:
        return st, {"raw": body[:200].decode(errors="replace")}


def stream(site, key, max_tokens, result, started=None, session=None):
    """One streamed completion; result gets status, events, done ([DONE]
    seen), error (the exception that ended the read, if any)."""
    c = site.connection(timeout=120)
    h = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
    if session:
        h["X-Session-Id"] = session
    try:
        c.request("POST", "/v1/completions", headers=h,
                  body=json.dumps({"model": sitelib.MODEL_ID, "prompt": "Count: one, two,",
                                   "max_tokens": max_tokens, "stream": True,
                                   "ignore_eos": True}))
        r = c.getresponse()
        result["status"] = r.status
        buf = b""
        # read1, not readline: readline takes a chunked body cut short (no
        # last chunk: nginx's abort) for a clean end
        while True:
            x = r.read1(65536)
            if not x:
                break
            buf += x
            if b"data: " in buf and started is not None:
                started.set()
        result["done"] = b"data: [DONE]" in buf
        result["events"] = buf.count(b"data: ")
    except Exception as e:  # the visible error a dead host must give
        result["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        c.close()


# ---- the checks -----------------------------------------------------------------
def check_pool_ctl(site, hosts):
    """pool add/list/remove and their refusals, building the 3-host pool."""
    rc, _, err = site.ctl("pool", "add", "10.0.0.300:9000")
    ok(rc != 0 and "'10.0.0.300:9000' is not ADDRESS:PORT" in err,
       "pool add refuses a bad address, naming it (%s)" % err.strip())
    rc, _, err = site.ctl("pool", "add", HP[1], "--max-fails", "x")
    ok(rc != 0 and "--max-fails 'x' must be a whole number" in err,
       "pool add refuses a bad --max-fails (%s)" % err.strip())
    rc, _, err = site.ctl("pool", "add", "10.%d.9.2:%d" % (NET, PORT))
    ok(rc != 0 and "not adding 10.%d.9.2:%d" % (NET, PORT) in err and "blue stays live" in err,
       "pool add refuses a host that does not answer /health (%s)" % err.strip())
    before = open(os.path.join(site.ngx_dir, "upstream-blue.conf")).read()
    for i in (1, 2):
        rc, out, err = site.ctl("pool", "add", HP[i], "blue", "--fail-timeout", "5s")
        ok(rc == 0 and "pool blue: added %s" % HP[i] in out,
           "pool add %s (%s)" % (HP[i], (out + err).strip()))
    rc, out, _ = site.ctl("pool", "list")
    lines = out.strip().splitlines()
    ok(len(lines) == 3 and lines[0].startswith("unix:") and
       lines[1] == "%s max_conns=%d max_fails=1 fail_timeout=5s" % (HP[1], 40 if BENCH else 8) and
       lines[2].startswith(HP[2] + " "),
       "pool list: the local socket, then the two hosts with max_conns of the local line (%s)"
       % lines)
    rc, _, err = site.ctl("pool", "add", HP[1])
    ok(rc != 0 and "%s is already in the blue pool" % HP[1] in err, "a second add is refused")
    rc, _, err = site.ctl("pool", "remove", "10.%d.9.2:%d" % (NET, PORT))
    ok(rc != 0 and "is not in the blue pool" in err, "removing a non-member is refused")
    ok(sum(1 for l in before.splitlines() if l.strip().startswith("server ")) == 1 and
       open(os.path.join(site.ngx_dir, "upstream-blue.conf")).read().count("  # pool") == 2,
       "the upstream file holds the two pool lines besides the local one")


def check_access(site, hosts):
    """The allow-list and the secret on TCP."""
    sec = site.secret("blue")
    out, e = fcgi_get(HOST[1], "/health", sec, source=OUTSIDER[1])
    ok(out == b"" and e is not None, "a peer outside [server] allow gets no answer (%s)" % e)
    ok(wait_for(lambda: re.search(r"event=peer_refused peer=%s:\d+ key=\"\[server\] allow\""
                                  % re.escape(OUTSIDER[1]), hosts.log(1)), 5),
       "... and is logged with its address and the key")
    out, e = fcgi_get(HOST[1], "/health", None, source=NGINX_SIDE[1])
    ok(out.startswith(b"Status: 403") and b"instance secret" in out,
       "an allowed peer without the secret gets 403 (%s)" % out[:60])
    out, e = fcgi_get(HOST[1], "/health", "hys-" + "x" * 43, source=NGINX_SIDE[1])
    ok(out.startswith(b"Status: 403"), "... and with a wrong one (%s)" % out[:30])
    ok(wait_for(lambda: "reason=\"no instance secret\"" in hosts.log(1) and
                "reason=\"wrong instance secret\"" in hosts.log(1), 5),
       "both are logged as forbidden with the reason")
    out, e = fcgi_get(HOST[1], "/metrics", sec, source=NGINX_SIDE[1])
    ok(b"hyserve_requests_total" in out, "the secret opens /metrics over TCP (%s)" % e)


def check_spread(site, hosts, keys):
    """Each key's two requests on one host; the keys over several hosts."""
    bad = []
    for rnd in range(2):
        for name, k in keys.items():
            st, js = complete(site, k, "Key %s says hello %d." % (name, rnd))
            if st != 200:
                bad.append((name, st, js))
    ok(not bad, "%d requests through the pool answered 200 (%s)" % (2 * len(keys), bad[:2]))
    seen = keys_by_host(hosts)
    split = [n for n in keys if len(seen.get(n, ())) != 1]
    per = [sum(1 for n in keys if seen.get(n) == {i}) for i in range(N_HOSTS)]
    diag("keys per host: %s" % per)
    ok(not split, "every key's requests landed on one host (split: %s)" % split)
    ok(sum(1 for n in per if n > 0) >= 2, "the keys spread over the hosts (%s)" % per)
    return {n: next(iter(seen[n])) for n in keys if len(seen.get(n, ())) == 1}


def check_affinity(site, hosts, keys):
    """Same X-Session-Id, shared long prefix: the second hits the cache."""
    k = next(iter(keys.values()))
    prefix = "Session notes. " + " ".join("item %d is %s;" % (i, "abcdefgh"[i % 8])
                                          for i in range(60))
    sid = "sess-%d" % PID
    st1, js1 = complete(site, k, prefix + " First question?", session=sid)
    st2, js2 = complete(site, k, prefix + " Second question?", session=sid)
    cached = (js2.get("usage", {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    ok(st1 == 200 and st2 == 200 and cached > 0,
       "the second request of a session hit the prefix cache: cached_tokens=%s of %s" %
       (cached, js2.get("usage", {}).get("prompt_tokens")))
    # the hit's log line may reach the host's log file after its answer
    # reached the client (the worker's stderr goes through the master)
    n = []

    def hits():
        n[:] = [len(re.findall(r"event=request .*cached_tokens=[1-9]", hosts.log(i)))
                for i in range(N_HOSTS)]
        return sum(1 for x in n if x) >= 1
    wait_for(hits, 10, 0.1)
    ok(sum(1 for x in n if x) == 1, "... on one host (hits per host: %s)" % n)


def check_canary(site, hosts, keys):
    """A canary green with a pooled blue live: the canary file carries the
    pool, and pool add/remove rewrites it; abort brings back blue alone."""
    rc, out, err = site.ctl("canary", "green", "50")
    ok(rc == 0, "a canary on green with the blue pool live (%s)" % (out + err).strip())
    cf = os.path.join(site.ngx_dir, "upstream-canary.conf")
    text = open(cf).read() if os.path.exists(cf) else ""
    ok(all(hp in text for hp in HP[1:]) and "hash $hyserve_affinity consistent;" in text,
       "the canary file's live upstream has the pool and the hash")
    rc, out, err = site.ctl("pool", "remove", HP[2])
    text = open(cf).read() if os.path.exists(cf) else ""
    ok(rc == 0 and HP[2] not in text and HP[1] in text and "pool blue: removed" in out,
       "pool remove during a canary (blue, the live colour) rewrites the canary file (%s)" % (out + err).strip())
    st, _ = complete(site, next(iter(keys.values())), "During the canary.")
    ok(st == 200, "requests are served during the canary (%d)" % st)
    rc, out, err = site.ctl("abort")
    ok(rc == 0 and os.readlink(os.path.join(site.ngx_dir, "upstream-active.conf")) ==
       "upstream-blue.conf", "abort: blue live again (%s)" % (out + err).strip())
    rc, out, err = site.ctl("pool", "add", HP[2])
    ok(rc == 0, "host2 back in the pool (%s)" % (out + err).strip())
    rc, out, err = site.ctl("switch", "green")
    st, h, _ = site.https("POST", "/v1/completions", key=next(iter(keys.values())),
                          body={"model": sitelib.MODEL_ID, "prompt": "Hi", "max_tokens": 1})
    ok(rc == 0 and st == 200 and h.get("x-hyserve-colour") == "green",
       "switch green with a blue pool: green serves (%s %d)" % ((out + err).strip(), st))
    rc, out, err = site.ctl("switch", "blue")
    rc2, lst, _ = site.ctl("pool", "list")
    ok(rc == 0 and rc2 == 0 and len(lst.strip().splitlines()) == 3,
       "switch back to blue: its pool is intact (%s)" % lst.strip().replace("\n", "; "))


def check_under_load(site, hosts, keys):
    """8 streams keep running while host2 leaves and comes back: 0 failed."""
    stop, results, lock = threading.Event(), [], threading.Lock()
    names = list(keys)

    def client(j):
        n = 0
        while not stop.is_set():
            res = {}
            stream(site, keys[names[(j + n) % len(names)]], 24, res)
            n += 1
            with lock:
                results.append(res)

    ts = [threading.Thread(target=client, args=(j,)) for j in range(8)]
    for t in ts:
        t.start()
    wait_for(lambda: len(results) >= 8, 60, 0.1)
    rc1, o1, e1 = site.ctl("pool", "remove", HP[2])
    wait_for(lambda: len(results) >= 16, 60, 0.1)
    rc2, o2, e2 = site.ctl("pool", "add", HP[2])
    mark = len(results)
    wait_for(lambda: len(results) >= mark + 8, 60, 0.1)
    stop.set()
    for t in ts:
        t.join(120)
    failed = [r for r in results if r.get("status") != 200 or not r.get("done") or r.get("error")]
    ok(rc1 == 0 and rc2 == 0, "pool remove and add under load (%s %s)" %
       ((o1 + e1).strip(), (o2 + e2).strip()))
    ok(len(results) >= 24 and not failed, "%d streams across the changes, %d failed %s" %
       (len(results), len(failed), failed[:2]))


def session_on(site, hosts, key, target, tries=40):
    """An X-Session-Id the pool sends to host `target` (probed with one-token
    requests: the ring depends on this run's addresses); None if none."""
    for n in range(tries):
        sid = "fo-%d-%d" % (PID, n)
        before = hosts.log(target).count("event=request ")
        st, _ = complete(site, key, "Probe %d." % n, max_tokens=1, session=sid)
        if st == 200 and wait_for(lambda: hosts.log(target).count("event=request ") > before,
                                  2, 0.05):
            return sid
    return None


def check_failover(site, hosts, keys, home):
    """kill -9 host2's master mid-stream: two streams on it (by session),
    two on the others (by key)."""
    k = next(iter(keys.values()))
    sid = session_on(site, hosts, k, 2)
    others = [n for n, h in home.items() if h != 2]
    if not ok(sid is not None and len(others) >= 2,
              "a session that lands on host2 (%s) and two keys that do not (%s)" % (sid, others)):
        return
    started = [threading.Event() for _ in range(4)]
    res = [{} for _ in range(4)]
    args = [(k, sid), (k, sid), (keys[others[0]], None), (keys[others[-1]], None)]
    ts = [threading.Thread(target=stream, args=(site, args[j][0], 400, res[j], started[j],
                                                args[j][1]))
          for j in range(4)]
    for t in ts:
        t.start()
    ok(all(e.wait(60) for e in started), "4 streams running, 2 on host2")
    hosts.procs[2].send_signal(signal.SIGKILL)
    hosts.procs[2].wait()
    for t in ts:
        t.join(180)
    ok(all(r.get("error") and not r.get("done") for r in res[:2]),
       "host2's streams end with a visible error, not a clean finish (%s)" % res[:2])
    ok(all(r.get("status") == 200 and r.get("done") and not r.get("error") for r in res[2:]),
       "the other hosts' streams finish ([DONE]) (%s)" % res[2:])
    on2 = [n for n, h in home.items() if h == 2]
    bad = []
    for n in on2 + others[:2]:
        st, js = complete(site, keys[n], "After the failure, %s." % n)
        if st != 200:
            bad.append((n, st, js))
    st, js = complete(site, k, "After the failure, the session.", session=sid)
    if st != 200:
        bad.append((sid, st, js))
    ok(not bad, "new requests of host2's keys (%d) and session, and others', succeed (%s)" %
       (len(on2), bad))


def _cpu_s(pids):
    """user + system CPU seconds of live processes (their own, not children's)"""
    t = 0
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            t += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return t / os.sysconf("SC_CLK_TCK")


def _stack_pids(site, hosts):
    pids = []
    for p in hosts.procs:
        if p is not None and p.poll() is None:
            pids += [p.pid] + taplib.children(p.pid) + taplib.children(p.pid, engine=True)
    ngx = site.nginx.pid if site.nginx is not None else None
    if ngx:
        pids += [ngx] + [int(x) for x in subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(ngx)], capture_output=True, text=True).stdout.split()]
    return pids


def bench(site, hosts, keys):
    """Tokens/s at 32 streams with 1, 2 and 3 hosts in the pool, and the
    CPU seconds the whole stack (hosts + nginx) spent per 1000 tokens."""
    url = "http://127.0.0.1:%d" % site.http_port
    k = next(iter(keys.values()))
    site.ctl("pool", "remove", HP[1])
    site.ctl("pool", "remove", HP[2])
    for n in (1, 2, 3):
        if n > 1:
            rc, out, err = site.ctl("pool", "add", HP[n - 1])
            if rc != 0:
                ok(False, "pool add %s: %s" % (HP[n - 1], err))
                return
        before = [len(re.findall(r"event=request .*route=/v1/completions", hosts.log(i)))
                  for i in range(N_HOSTS)]
        args = [sitelib.HYSERVE, "bench", "--url", url, "--api-key", k, "--sessions",
                "--concurrency", "32", "--requests", "128", "--max-tokens", "32",
                "--prompt-tokens", "64", "--prompt-seed", str(n)]
        pids = _stack_pids(site, hosts)
        c0 = _cpu_s(pids)
        p = subprocess.run(args, capture_output=True, text=True, timeout=900)
        c1 = _cpu_s(pids)
        js = {}
        for line in p.stdout.splitlines():
            if line.startswith("json: "):
                js = json.loads(line[6:])
        per = [len(re.findall(r"event=request .*route=/v1/completions", hosts.log(i))) - before[i]
               for i in range(N_HOSTS)]
        ok(p.returncode == 0 and js.get("failed") == 0,
           "%d host(s): %s tok/s, %s ok, %s failed, requests per host %s" %
           (n, js.get("tok_per_s"), js.get("ok"), js.get("failed"), per))
        if js.get("failed"):
            diag("  failures: %s" % [l for l in p.stdout.splitlines() if "fail" in l.lower()][:5])
            st = [re.findall(r"event=request .*route=/v1/completions .*status=(\d+)", hosts.log(i))
                  for i in range(N_HOSTS)]
            diag("  statuses per host: %s" % [sorted(set(x)) for x in st])
        tokens = js.get("output_tokens") or 0
        diag("hosts=%d tok_per_s=%s wall_s=%s output_tokens=%s ttft_p50_ms=%s e2e_p50_ms=%s "
             "stack_cpu_s=%.1f cpu_s_per_1k_tokens=%.2f" %
             (n, js.get("tok_per_s"), js.get("wall_s"), tokens,
              (js.get("ttft_ms") or {}).get("p50"), (js.get("e2e_ms") or {}).get("p50"),
              c1 - c0, 1000 * (c1 - c0) / tokens if tokens else 0))
        diag("  command: hyserve %s" % " ".join(a for a in args[1:] if a != k))


def main():
    # --bench: 40 threads and max_conns 40 per host, so the 32 streams never
    # meet nginx's max_conns while a finished request's slot is released
    extra = ({"server": {"threads_per_worker": 20}, "engine": {"max_seqs": 32}} if BENCH
             else {})
    site = sitelib.Site({"blue": extra, "green": {}}, max_conns=40 if BENCH else 8,
                        prefix="hypool-", site_edit=_plain_http if BENCH else None)
    site.http_port = getattr(_plain_http, "port", None)
    hosts = None
    try:
        try:
            net_up()
        except RuntimeError as e:
            ok(False, "network namespaces (root needed, as in CI): %s" % e)
            return
        hosts = Hosts(site, extra)
        for i in range(N_HOSTS):
            hosts.start(i)
        green = site.start_colour("green") if not BENCH else True
        up = all(wait_for(lambda i=i: hosts.healthy(i), 120, 0.3) for i in range(N_HOSTS))
        ok(up and green, "3 hosts in their namespaces answer /health on their listen address"
                         " (and the green colour)")
        keys = {}
        for j in range(12):
            rc, out, _ = site.ctl("key", "add", "pk%02d" % j, reload=False)
            keys["pk%02d" % j] = out.strip()
        if not up or not ok(site.start_nginx(), "nginx up"):
            return
        check_pool_ctl(site, hosts)
        if BENCH:
            bench(site, hosts, keys)
            return
        check_access(site, hosts)
        home = check_spread(site, hosts, keys)
        check_affinity(site, hosts, keys)
        check_canary(site, hosts, keys)
        check_under_load(site, hosts, keys)
        check_failover(site, hosts, keys, home)
    finally:
        if taplib.failed():
            for i in range(N_HOSTS):
                if hosts is not None and hosts.logs[i]:
                    diag("host%d log tail:\n%s" % (i, taplib.tail(hosts.logs[i], 6)))
            diag("nginx error.log:\n%s" % taplib.tail(os.path.join(site.tmp, "error.log"), 10))
        if hosts is not None:
            hosts.stop()
            # check_failover's kill -9 leaves host2's segment behind (a
            # restarted master would reclaim it): removed here, so that
            # runs do not pile them up; every other host's stop must have
            # removed its own
            segs = ["/dev/shm/hyserve-%s-h%d" % (site.instance["blue"], i)
                    for i in range(N_HOSTS)]
            p2 = hosts.procs[2]
            if p2 is not None and p2.returncode == -signal.SIGKILL and os.path.exists(segs[2]):
                os.unlink(segs[2])
            left = [s for s in segs if os.path.exists(s)]
            ok(not left, "no host's shared memory segment left behind (%s)" % left)
        site.cleanup()
        net_down()
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        ok(not any(n in left for n in NS), "namespaces removed")


def _plain_http(text):
    """--bench: a plain HTTP listener beside TLS for `hyserve bench --url`,
    and the per-key limits (16 streams, 10 requests/s) raised: the bench
    sends everything with one key, 32 requests at once."""
    port = taplib.free_port()
    _plain_http.port = port
    for a, b in (("    server_name _;", "    listen 127.0.0.1:%d;\n    server_name _;" % port),
                 ("limit_conn hyserve_key_conn 16;", "limit_conn hyserve_key_conn 256;"),
                 ("zone=hyserve_key_rps burst=20 nodelay;", "zone=hyserve_key_rps burst=1000 nodelay;"),
                 ("zone=hyserve_key_rps:10m rate=10r/s", "zone=hyserve_key_rps:10m rate=1000r/s")):
        if a not in text:
            raise RuntimeError("nginx/hyserve.conf has no '%s' to change for --bench" % a)
        text = text.replace(a, b, 1)
    return text


if __name__ == "__main__":
    main()
    sys.exit(taplib.done())
