#!/usr/bin/env python3
"""test_syslog.py - the shipped syslog-ng snippet (etc/syslog-ng/hyserve.conf)
and logrotate file (etc/logrotate.d/hyserve) end to end: a real syslog-ng in
the foreground on a private socket runs the snippet unchanged except for its
source and the /var/log/hyserve prefix; `hyserve serve` behind a private
nginx logs to it; requests made through nginx must appear as hyserve's
key=value lines with the values the clients saw, lifecycle events too, and
no request line may be lost or doubled across a rename + `syslog-ng-ctl
reopen` made under load, nor across a real `logrotate -f` run.  TAP; skips
(1..0 # SKIP) only where a private /dev/log cannot be made (not root, no
`unshare -m`); a missing nginx, syslog-ng or logrotate is a failure
(scripts/install-deps --test installs them).

glibc's syslog() always writes to /dev/log.  Unless hyserve's config has a
[log] socket key, the coordinator runs in a private mount namespace whose
/dev/log is the test's socket (needs root and unshare), so the host's
logging is never touched.

Environment: HY_SRCDIR (source tree), HYSERVE (the binary).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import taplib as t  # noqa: E402

SYSLOG_NG = t.which("syslog-ng", "/usr/sbin/syslog-ng")
SYSLOG_NG_CTL = t.which("syslog-ng-ctl", "/usr/sbin/syslog-ng-ctl")
LOGROTATE = t.which("logrotate", "/usr/sbin/logrotate")
UNSHARE = t.which("unshare", "/usr/bin/unshare")
LOGGER = t.which("logger", "/usr/bin/logger")
SNIPPET = os.path.join(t.SRC, "etc", "syslog-ng", "hyserve.conf")
ROTATE = os.path.join(t.SRC, "etc", "logrotate.d", "hyserve")
PROD_DIR = "/var/log/hyserve"

missing = [n for n, p in (("nginx", t.NGINX), ("syslog-ng (syslog-ng-core)", SYSLOG_NG),
                          ("syslog-ng-ctl", SYSLOG_NG_CTL), ("logrotate", LOGROTATE),
                          ("logger (bsdutils)", LOGGER)) if p is None]
if not os.path.exists(t.FASTCGI_PARAMS):
    missing.append(t.FASTCGI_PARAMS + " (nginx-common)")
t.require(missing)


def ini_has_log_socket():
    """Whether the documented config (etc/hyserve.ini) has [log] socket."""
    sec = None
    with open(os.path.join(t.SRC, "etc", "hyserve.ini")) as f:
        for line in f:
            line = line.strip()
            if line.startswith("["):
                sec = line.strip("[]")
            elif sec == "log" and re.match(r"socket\s*=", line):
                return True
    return False


HAS_LOG_SOCKET = ini_has_log_socket()
if not HAS_LOG_SOCKET and (os.geteuid() != 0 or UNSHARE is None or
                           subprocess.run([UNSHARE, "-m", "true"]).returncode != 0):
    # e.g. a container without CAP_SYS_ADMIN
    t.skip_all("hyserve has no [log] socket and a private /dev/log needs root and "
               "a working `unshare -m`")

MODEL, HAS_CHAT = t.default_model()
MODEL_ID = os.path.basename(MODEL)[:-5]
KEYS = {"alpha": "sk-alpha-0123456789abcdefghij", "beta": "sk-beta-0123456789abcdefghijk"}

# A private /dev for the coordinator: a tmpfs holding bind mounts of every
# entry of the real /dev, plus "log" bound to the test's syslog-ng socket.
# Run by `unshare -m` (private propagation), so nothing leaks to the host;
# exec keeps the coordinator's pid that of the Popen.
PRIVATE_DEV_SH = r'''
set -e
d=$1; sock=$2; shift 2
mkdir "$d"
mount -t tmpfs -o mode=0755,size=64k hyserve-dev "$d"
for e in /dev/* /dev/.[!.]*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    n="$d/${e#/dev/}"
    if [ -L "$e" ]; then cp -P "$e" "$n"
    elif [ -d "$e" ]; then mkdir "$n"; mount --rbind "$e" "$n"
    else : > "$n"; mount --bind "$e" "$n"; fi
done
rm -f "$d/log"; : > "$d/log"; mount --bind "$sock" "$d/log"
mount --move "$d" /dev
exec "$@"
'''

# ISODATE HOST PROGRAM[PID]: LEVEL MSG - the snippet's template (hyserve
# always sends its pid; the logger probes below do not)
LINE_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d) (\S+) "
                     r"(hyserve[A-Za-z0-9_.-]*)(?:\[(\d+)\])?: ([a-z]+) (event=.*)$")
KV_RE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|\S*)')


def parse_kv(msg):
    out = {}
    for k, v in KV_RE.findall(msg):
        out[k] = json.loads(v) if v.startswith('"') else v
    return out


def read_lines(paths):
    """[(path, program, level, {k: v})] of every hyserve line in paths, and
    the lines that do not match the template."""
    rows, bad = [], []
    for p in paths:
        try:
            with open(p, errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        for line in text.splitlines():
            m = LINE_RE.match(line)
            if m is None:
                bad.append(line)
            else:
                rows.append((p, m.group(3), m.group(5), parse_kv(m.group(6))))
    return rows, bad


def main():
    d = tempfile.mkdtemp(prefix="hyserve-syslog-")
    logdir = d + PROD_DIR                 # the private /var/log/hyserve
    sock = os.path.join(d, "log")         # the private /dev/log
    ctl = os.path.join(d, "syslog-ng.ctl")
    conf = os.path.join(d, "syslog-ng.conf")
    sng = stack = sng_log = None
    keep = False

    def files(prog):
        return sorted(os.path.join(logdir, f) for f in os.listdir(logdir)
                      if f == prog + ".log" or f.startswith(prog + ".log."))

    def fcgi_rows():
        return [r for r in read_lines(files("hyserve-fcgi"))[0] if r[3].get("event") == "request"]

    def coord_rows():
        return read_lines(files("hyserve"))[0]

    try:
        # ---- the shipped snippet, its source and prefix substituted ----
        with open(SNIPPET) as f:
            snippet = f.read()
        t.ok("source(s_src)" in snippet and PROD_DIR + "/${PROGRAM}.log" in snippet,
             "the snippet routes s_src into %s/${PROGRAM}.log" % PROD_DIR)
        with open(conf, "w") as f:
            f.write("@version: 3.38\n"
                    "options { stats_freq(0); };\n"
                    "source s_src { unix-dgram(\"%s\"); };\n" % sock)
            f.write(snippet.replace(PROD_DIR, logdir))
        r = subprocess.run([SYSLOG_NG, "--syntax-only", "-f", conf], capture_output=True,
                           text=True)
        t.ok(r.returncode == 0, "syslog-ng --syntax-only accepts it %s" % r.stderr.strip()[-200:])
        sng_log = open(os.path.join(d, "syslog-ng.out"), "w")
        sng = subprocess.Popen([SYSLOG_NG, "-F", "-f", conf,
                                "--persist-file=" + os.path.join(d, "syslog-ng.persist"),
                                "--pidfile=" + os.path.join(d, "syslog-ng.pid"),
                                "--control=" + ctl], stdout=sng_log, stderr=subprocess.STDOUT)
        up = t.wait_for(lambda: os.path.exists(sock) and os.path.exists(ctl), 20)
        if not t.ok(up and sng.poll() is None, "syslog-ng runs in the foreground on %s" % sock):
            t.diag(t.tail(os.path.join(d, "syslog-ng.out")))
            return

        # ---- the filter: hyserve programs only, one file each ----
        for tag in ("cron", "hyservex", "hyserve-blue"):
            subprocess.run([LOGGER, "-u", sock, "-t", tag, "event=filter_probe tag=" + tag],
                           check=True)
        got = t.wait_for(lambda: "tag=hyserve-blue" in open(
            os.path.join(logdir, "hyserve-blue.log")).read(), 10)
        others = [f for f in os.listdir(logdir) if f != "hyserve-blue.log"] if got else None
        t.ok(got and others == [],
             "hyserve-blue lands in hyserve-blue.log; cron and hyservex go nowhere (%s)"
             % others)

        # ---- hyserve serve + nginx, logging to the private socket ----
        ini = {"log": {"stderr": "true", "level": "info", "ident": "hyserve"}}
        wrap = None
        if HAS_LOG_SOCKET:
            ini["log"]["socket"] = sock
        else:
            wrap = [UNSHARE, "-m", "sh", "-c", PRIVATE_DEV_SH, "sh", os.path.join(d, "dev"),
                    sock]
        keymap = "".join('        "%s" "%s";\n' % (v, k) for k, v in KEYS.items())
        stack = t.Stack(MODEL, workers=3, ini=ini, wrap=wrap, tmp=os.path.join(d, "stack"),
                        nginx_http=(
                            "    map $http_authorization $hyserve_bearer {\n"
                            "        default \"\";\n"
                            "        \"~^Bearer[ ]+(?<tok>[A-Za-z0-9_-]{20,128})$\" $tok;\n"
                            "    }\n"
                            "    map $hyserve_bearer $hyserve_key_id {\n"
                            "        default \"\";\n" + keymap + "    }\n"),
                        nginx_location=(
                            # as the production site: the key id, never the secret
                            "            fastcgi_param HYSERVE_KEY_ID $hyserve_key_id;\n"
                            "            fastcgi_param HTTP_AUTHORIZATION \"\";\n"))
        if not t.ok(stack.start(90), "hyserve serve + nginx come up (/health 200)"):
            t.diag(t.tail(stack.serve_log_path))
            keep = True
            return

        # ---- N requests of every shape ----
        expected = {}   # request id -> what its line must say
        seq = [0]

        def req(route, body, key="alpha", stream=False, method="POST", want=200):
            seq[0] += 1
            xid = "it-%d-%d" % (os.getpid(), seq[0])
            st, _, raw = stack.http(method, route, body, headers={
                "Authorization": "Bearer " + KEYS[key], "X-Request-Id": xid})
            e = {"route": route, "status": st, "key": key}
            if st == 200 and route.startswith("/v1/") and method == "POST":
                if stream:
                    ev = t.sse_events(raw)
                    rid, usage = ev[0]["id"], ev[-1].get("usage")
                else:
                    obj = json.loads(raw)
                    rid, usage = obj["id"], obj.get("usage")
                e.update(prompt=usage["prompt_tokens"], completion=usage["completion_tokens"],
                         cached=(usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
                         gen=True)
            else:
                rid = xid
                e.update(gen=False)
            expected[rid] = e
            if st != want:
                t.diag("%s %s: status %d, wanted %d: %s" % (method, route, st, want, raw[:200]))
            return st == want

        prompt = ("The quick brown fox jumps over the lazy dog while the farmer watches from "
                  "his old wooden porch and counts the")
        comp = {"model": MODEL_ID, "prompt": prompt, "max_tokens": 4, "temperature": 0}
        good = req("/v1/completions", comp)
        good &= req("/v1/completions", dict(comp, stream=True,
                                           stream_options={"include_usage": True}),
                    key="beta", stream=True)
        good &= req("/v1/completions", comp)   # the same prompt again: cached tokens
        if HAS_CHAT:
            chat = {"model": MODEL_ID, "messages": [{"role": "user", "content": "Say hi."}],
                    "max_tokens": 4, "temperature": 0}
            good &= req("/v1/chat/completions", chat)
            good &= req("/v1/chat/completions", dict(chat, stream=True,
                                                    stream_options={"include_usage": True}),
                        key="beta", stream=True)
        good &= req("/v1/completions", b"{\"model\": ", want=400)
        good &= req("/v1/nothing", None, method="GET", want=404)
        t.ok(good, "%d requests through nginx answer as expected" % len(expected))
        n_first = len(expected)

        arrived = t.wait_for(lambda: set(expected) <= {r[3].get("req") for r in fcgi_rows()}, 15)
        rows = fcgi_rows()
        t.ok(arrived, "all %d request ids reach %s/hyserve-fcgi.log (%d lines)"
             % (n_first, logdir, len(rows)))
        by_id = {r[3].get("req"): r for r in rows}
        bad = []
        for rid, e in expected.items():
            r = by_id.get(rid)
            if r is None:
                bad.append("%s: no line" % rid)
                continue
            kv, level = r[3], r[2]
            try:
                ttft, dur = float(kv["ttft_ms"]), float(kv["duration_ms"])
                cached = int(kv["cached_tokens"])
                fine = (kv["route"] == e["route"] and int(kv["status"]) == e["status"] and
                        level == "info" and cached >= 0 and 0 <= ttft <= dur and
                        re.fullmatch(r"\d+\.\d", kv["duration_ms"]) is not None)
                if e["gen"]:
                    fine = fine and (int(kv["prompt_tokens"]) == e["prompt"] and
                                     int(kv["completion_tokens"]) == e["completion"] and
                                     ttft > 0 and cached <= e["prompt"] and
                                     (e["cached"] is None or cached == e["cached"]))
                else:
                    fine = fine and int(kv["completion_tokens"]) == 0
            except (KeyError, ValueError) as ex:
                fine = False
                kv = dict(kv, error=repr(ex))
            if not fine:
                bad.append("%s: want %s, line %s" % (rid, e, kv))
        t.ok(not bad, "request lines: route, status, prompt/cached/completion tokens, "
                      "ttft_ms, duration_ms match what the clients got")
        for b in bad[:8]:
            t.diag(b)
        comp_rows = [by_id[i] for i, e in expected.items()
                     if e["route"] == "/v1/completions" and e["gen"] and i in by_id]
        # the first sight of the prompt caches nothing, its repeats hit the
        # prefix cache (the prompt spans more than one 16-token page)
        cached = [int(r[3].get("cached_tokens", -1)) for r in comp_rows]
        t.ok(len(cached) == 3 and cached[0] == 0 and min(cached[1:]) > 0,
             "the repeated prompt logs cached_tokens > 0 (%s)" % cached)
        with_key = [r for i, r in by_id.items() if i in expected and
                    r[3].get("key_id") == expected[i]["key"]]
        t.ok(len(with_key) == n_first,
             "request lines carry key_id=<nginx's key id> (%d of %d)" % (len(with_key), n_first))
        secret_seen = any(s in open(p).read() for p in files("hyserve-fcgi")
                          for s in KEYS.values())
        t.ok(not secret_seen, "no API key secret appears in the logs")

        # ---- lifecycle: start, model loaded, worker death and respawn ----
        crow = coord_rows()
        serving = [r for r in crow if r[3].get("event") == "serving"]
        t.ok(serving and all(k in serving[0][3] for k in ("model", "workers", "load_ms")) and
             serving[0][3]["workers"] == "3" and serving[0][1] == "hyserve",
             "hyserve.log has the start line: event=serving model= workers=3 load_ms=")
        # the weights are the engine process's, which logs as <ident>-engine
        loaded = [r[3] for r in read_lines(files("hyserve-engine"))[0]
                  if r[3].get("event") == "model_loaded" and r[1] == "hyserve-engine"]
        t.ok(loaded and any(re.search(r"bytes|size|_mb|_mib", k) for k in loaded[0]) and
             any("kernel" in k for k in loaded[0]),
             "hyserve-engine.log: an event=model_loaded line with its sizes and the kernel per "
             "layer kind (%s)" % (loaded[0] if loaded else "none"))
        # where the weights live: huge pages by default, and how much the
        # kernel placed on them (0 where THP is off: not asserted here)
        t.ok(loaded and loaded[0].get("weights_memory") == "huge_pages" and
             loaded[0].get("huge_page_bytes", "").isdigit(),
             "hyserve-engine.log: model_loaded says weights_memory=huge_pages and "
             "huge_page_bytes=%s" % (loaded[0].get("huge_page_bytes") if loaded else "none"))
        victim = stack.workers()[0]
        os.kill(victim, signal.SIGKILL)
        died = t.wait_for(lambda: any(r[3].get("event") == "worker_died" and
                                      r[3].get("pid") == str(victim) and r[2] == "err"
                                      for r in coord_rows()), 10)
        t.ok(died, "kill -9 of worker %d: event=worker_died pid=%d signal=9 at err" %
             (victim, victim))
        t.ok(t.wait_for(lambda: any(r[3].get("event") == "worker_respawned"
                                    for r in coord_rows()), 15),
             "event=worker_respawned follows")
        t.wait_for(lambda: len(stack.workers()) == 3 and victim not in stack.workers(), 10)

        # ---- rename + reopen while requests run ----
        small = {"model": MODEL_ID, "prompt": "Count: 1, 2,", "max_tokens": 2,
                 "temperature": 0}
        stop = threading.Event()
        errors = []

        def load():
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    if i % 2:
                        req("/v1/completions", small, key="beta")
                    else:
                        req("/v1/nothing", None, method="GET", want=404)
                except Exception as ex:  # noqa
                    errors.append(repr(ex))
        th = threading.Thread(target=load, daemon=True)
        before = len(expected)
        th.start()
        try:
            t.wait_for(lambda: len(expected) >= before + 4, 30)
            for prog in ("hyserve-fcgi", "hyserve"):
                src = os.path.join(logdir, prog + ".log")
                os.rename(src, src + ".renamed")
            r = subprocess.run([SYSLOG_NG_CTL, "reopen", "--control=" + ctl],
                               capture_output=True, text=True)
            t.ok(r.returncode == 0, "syslog-ng-ctl reopen: %s" % (r.stdout + r.stderr).strip())
            mid = len(expected)
            t.wait_for(lambda: len(expected) >= mid + 4, 30)
        finally:
            stop.set()
            th.join(60)
        t.ok(not errors and not th.is_alive(), "requests during the reopen all answered %s"
             % errors[:3])
        after_ids = []
        for i in range(4):
            n0 = set(expected)
            req("/v1/completions", small) if i % 2 == 0 else req("/v1/nothing", None,
                                                                  method="GET", want=404)
            after_ids += list(set(expected) - n0)
        new_file = os.path.join(logdir, "hyserve-fcgi.log")

        def count_ids():
            c = {}
            for row in fcgi_rows():
                c[row[3].get("req")] = c.get(row[3].get("req"), 0) + 1
            return c
        t.wait_for(lambda: set(expected) <= set(count_ids()), 15)
        c = count_ids()
        lost = [i for i in expected if c.get(i, 0) == 0]
        dup = [i for i in expected if c.get(i, 0) > 1]
        t.ok(not lost and not dup,
             "rename + reopen: each of %d request ids exactly once across old and new files "
             "(lost %s, doubled %s)" % (len(expected), lost[:5], dup[:5]))
        new_ids = {row[3].get("req") for row in read_lines([new_file])[0]}
        t.ok(set(after_ids) <= new_ids and len(after_ids) == 4,
             "requests after the reopen go to the new hyserve-fcgi.log")

        # ---- a real logrotate run of the shipped file ----
        with open(ROTATE) as f:
            rot = f.read()
        # The shipped file, with only the directory and the control
        # socket substituted: logrotate never looks at the machine's
        # /var/log/hyserve (a quick start or a deployment has files
        # there) and keeps its state in the test's directory.
        rconf = os.path.join(d, "logrotate.conf")
        with open(rconf, "w") as f:
            f.write(rot.replace(PROD_DIR, logdir).replace(
                "syslog-ng-ctl reopen", "%s reopen --control=%s" % (SYSLOG_NG_CTL, ctl)))
        os.chmod(rconf, 0o644)
        r = subprocess.run([LOGROTATE, "-d", "-s", os.path.join(d, "lr-debug.state"), rconf],
                           capture_output=True, text=True)
        out = r.stdout + r.stderr
        t.ok(r.returncode == 0 and "error" not in out.lower() and
             ("%s/*.log {" % PROD_DIR) in rot and "rotating pattern: %s/*.log" % logdir in out,
             "logrotate -d parses etc/logrotate.d/hyserve, which rotates %s/*.log (here "
             "the test's copy of it)" % PROD_DIR)
        if r.returncode != 0 or "error" in out.lower():
            t.diag(out[-600:])
        for i in range(2):
            req("/v1/nothing", None, method="GET", want=404)
        r = subprocess.run([LOGROTATE, "-f", "-s", os.path.join(d, "lr.state"), rconf],
                           capture_output=True, text=True)
        rotated = os.path.exists(os.path.join(logdir, "hyserve-fcgi.log.1"))
        t.ok(r.returncode == 0 and rotated,
             "logrotate -f with the shipped file rotates hyserve-fcgi.log to .1 %s"
             % (r.stdout + r.stderr).strip()[-300:])
        after_rot = []
        for i in range(3):
            n0 = set(expected)
            req("/v1/completions", small) if i == 0 else req("/v1/nothing", None,
                                                             method="GET", want=404)
            after_rot += list(set(expected) - n0)
        t.wait_for(lambda: set(expected) <= set(count_ids()), 15)
        c = count_ids()
        lost = [i for i in expected if c.get(i, 0) == 0]
        dup = [i for i in expected if c.get(i, 0) > 1]
        new_ids = {row[3].get("req") for row in read_lines([new_file])[0]}
        t.ok(not lost and not dup and set(after_rot) <= new_ids,
             "after logrotate: %d ids exactly once, new ones in the new file "
             "(lost %s, doubled %s)" % (len(expected), lost[:5], dup[:5]))

        # ---- drain on SIGTERM ----
        stack.nginx.send_signal(signal.SIGQUIT)
        rc = stack.stop_serve(60)
        t.ok(rc == 0, "hyserve serve exits 0 on SIGTERM (rc=%s)" % rc)
        t.ok(t.wait_for(lambda: {"draining", "stopped"} <= {r[3].get("event")
                                                          for r in coord_rows()}, 10),
             "hyserve.log: event=draining and event=stopped")
        t.ok(any(r[3].get("event") == "worker_exit" for r in read_lines(files("hyserve-fcgi"))[0]),
             "hyserve-fcgi.log: workers log event=worker_exit")

        # ---- every line of every file follows the template ----
        allfiles = [os.path.join(logdir, f) for f in sorted(os.listdir(logdir))]
        rows, bad = read_lines(allfiles)
        wrong_file = [r for r in rows if not os.path.basename(r[0]).startswith(r[1] + ".log")]
        t.ok(rows and not bad and not wrong_file and
             {os.path.basename(p).split(".log")[0] for p in allfiles} == {
                 "hyserve", "hyserve-fcgi", "hyserve-engine", "hyserve-blue"},
             "%d lines in %d files, all 'ISODATE HOST PROGRAM[PID]: LEVEL event=...' in "
             "<program>.log (%s)" % (len(rows), len(allfiles), (bad + wrong_file)[:2]))
    except Exception as ex:  # noqa
        import traceback
        t.ok(False, "unexpected exception: %r" % ex)
        t.diag(traceback.format_exc())
    finally:
        if stack is not None:
            stack.stop()
            t.ok(not os.path.exists("/dev/shm/hyserve-" + stack.instance),
                 "/dev/shm/hyserve-%s is gone" % stack.instance)
        if sng is not None and sng.poll() is None:
            sng.send_signal(signal.SIGTERM)
            try:
                sng.wait(timeout=10)
            except subprocess.TimeoutExpired:
                sng.kill()
                sng.wait()
        if sng_log is not None:
            sng_log.close()
        keep = keep or t.failed()
        if keep and stack is not None:
            t.diag(t.tail(stack.serve_log_path, 20))
        if keep:
            t.diag("kept %s" % d)
        else:
            shutil.rmtree(d, ignore_errors=True)


main()
sys.exit(t.done())
