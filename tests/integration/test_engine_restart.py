#!/usr/bin/env python3
"""test_engine_restart.py - the master/engine split (docs/failures.md), end
to end behind the production nginx site (sitelib.py):
* soak: 16 streaming clients (half greedy, half temperature 0.9 with a
  seed) while the engine process is killed with kill -9 five times at
  random moments (one of them while the engine before it had only just
  come up and was recomputing the streams' context): every stream completes ([DONE], finish_reason, no error
  event) with exactly the text the same request got undisturbed; afterwards
  no request slot, KV page or state slot is held and used + free + cached
  = total; engine.pid names each new engine; the time from each kill to
  the first resumed token is reported;
* the master killed with kill -9: its engine and workers are gone within
  2 s (PR_SET_PDEATHSIG), a stream in flight is aborted (never a clean
  end), nginx answers 503 JSON with Retry-After (its 502);
* a restart storm ([server] engine_restart_max = 2): the second death
  ends the stream in flight with an SSE error event and the request that
  had not answered yet with 503 JSON + Retry-After; /health says failed,
  new requests get 503 + Retry-After; nothing is left held.
TAP; skips (1..0 # SKIP) without nginx, openssl or cgi-fcgi
(scripts/install-deps --test).

Environment: HY_SRCDIR (source tree), HYSERVE (the binary).
"""
import json
import os
import random
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sitelib  # noqa: E402
import taplib as t  # noqa: E402

ok, diag = t.ok, t.diag

missing = sitelib.missing_tools()
if missing:
    t.skip_all("needs " + ", ".join(missing))

MODEL, _ = t.default_model()
N_CLIENTS = 16
N_KILLS = 5
MAX_TOKENS = 64
SOAK = {"model": {"threads": 2},
        "engine": {"max_seqs": N_CLIENTS, "max_context": 512},
        "cache": {"hot_mb": 64},
        "server": {"workers": 2, "threads_per_worker": N_CLIENTS // 2 + 2,
                   "engine_restart_max": 20, "engine_restart_window_s": 60}}
SITE = sitelib.Site({"blue": SOAK}, model=MODEL, prefix="hyengine-")
KEY = None
rng = random.Random(int(os.environ.get("HY_TEST_SEED", "15")))
diag("HY_TEST_SEED=%s" % os.environ.get("HY_TEST_SEED", "15"))


def metrics():
    """{} while nginx holds the control socket's 502s (master_kill) against it."""
    st, _, b = SITE.https("GET", "/metrics")
    return t.metric_samples(b) if st == 200 else {}


def engine_pid():
    try:
        with open(os.path.join(SITE.tmp, "run", "blue", "engine.pid")) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def alive(pid):
    """A process that runs (a zombie waiting for its reaper does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def held(m):
    """What is still held (all zero when idle) and whether the pages add up."""
    pages = [m.get('hyserve_kv_pages{state="%s"}' % s, -1) for s in ("used", "free", "cached")]
    return (m.get("hyserve_request_slots_used", -1), pages[0],
            m.get("hyserve_state_slots_used", -1),
            sum(pages) == m.get("hyserve_kv_pages_total", -2))


class Stream(threading.Thread):
    """One streamed completion: its text, each event's arrival time, how it
    ended (finish_reason, [DONE], an error event, or an abort)."""

    def __init__(self, i, prompt, temperature, seed, max_tokens=MAX_TOKENS):
        super().__init__(daemon=True)
        self.body = {"model": sitelib.MODEL_ID, "prompt": prompt, "max_tokens": max_tokens,
                     "stream": True, "ignore_eos": True, "temperature": temperature}
        if seed is not None:
            self.body["seed"] = seed
        self.i, self.text, self.times = i, "", []
        self.status, self.finish, self.done, self.error, self.exc = None, None, False, None, None

    def run(self):
        c = SITE.connection(timeout=120)
        try:
            c.request("POST", "/v1/completions", body=json.dumps(self.body).encode(),
                      headers={"Content-Type": "application/json",
                               "Authorization": "Bearer " + KEY})
            r = c.getresponse()
            self.status = r.status
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.decode(errors="replace").strip()
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    self.done = True
                    continue
                ev = json.loads(line[6:])
                if "error" in ev:
                    self.error = ev["error"]
                    continue
                self.times.append(time.monotonic())
                ch = ev["choices"][0]
                self.text += ch.get("text") or ""
                if ch.get("finish_reason"):
                    self.finish = ch["finish_reason"]
        except Exception as e:  # noqa - an abort is what some checks expect
            self.exc = e
        finally:
            c.close()


def clients():
    topics = ["the sea", "a clock", "a red fox", "winter", "a lighthouse", "bread", "a robot",
              "the moon", "a violin", "a garden", "rain", "a train", "an owl", "mountains",
              "a library", "fire"]
    return [Stream(i, "Tell a short story about %s." % topics[i % len(topics)],
                   0 if i % 2 == 0 else 0.9, None if i % 2 == 0 else 1000 + i)
            for i in range(N_CLIENTS)]


def run_all(ss):
    for s in ss:
        s.start()
    return ss


def join_all(ss, timeout=300):
    end = time.monotonic() + timeout
    for s in ss:
        s.join(max(0.1, end - time.monotonic()))
    return not any(s.is_alive() for s in ss)


def events_after(ss, when):
    """The first event any stream got after `when` (monotonic), or None."""
    firsts = [next((x for x in s.times if x > when), None) for s in ss]
    firsts = [x for x in firsts if x is not None]
    return min(firsts) if firsts else None


def soak():
    ref = run_all(clients())
    ok(join_all(ref) and all(s.done and s.finish == "length" and not s.error for s in ref),
       "%d streams undisturbed (the reference)" % N_CLIENTS)
    before = metrics()
    ss = run_all(clients())
    restarts, pids = [], []
    # one kill hits an engine that has just come up and is still
    # recomputing what the one before had streamed (a second death of the
    # same requests before they produced anything more)
    early = rng.randint(1, N_KILLS - 1)
    for k in range(N_KILLS):
        if k == early:
            time.sleep(rng.uniform(0, 0.2))
        else:
            # a random moment while every stream is under way: after a
            # random number of tokens (so that a fast machine cannot
            # finish the streams before the last kill), plus a fraction
            # of one
            if not t.wait_for(lambda: all(s.times for s in ss), 60, 0.01):
                break
            seen = sum(len(s.times) for s in ss)
            more = rng.randint(8, 40)
            t.wait_for(lambda: sum(len(s.times) for s in ss) >= seen + more, 60, 0.002)
            time.sleep(rng.uniform(0, 0.05))
        victim = engine_pid()
        if not victim or not alive(victim) or all(not s.is_alive() for s in ss):
            break
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        pids.append(victim)
        if not t.wait_for(lambda: engine_pid() not in (0, victim), 30, 0.005):
            break
        # tokens the dead engine pushed may still be on their way (ring,
        # worker, nginx): count from when the new engine is seen serving,
        # which takes a model load, far longer than they take to arrive
        new = engine_pid()
        if not t.wait_for(lambda: (lambda m: m.get("hyserve_engine_pid") == new and m.get(
                'hyserve_engine_state{state="running"}') == 1)(metrics()), 60, 0.01):
            break
        if k + 1 == early:
            continue
        since = max(killed + 0.05, time.monotonic() - 0.05)
        if not t.wait_for(lambda: events_after(ss, since) is not None or
                          not any(s.is_alive() for s in ss), 60, 0.005):
            break
        first = events_after(ss, since)
        if first is None:
            break
        restarts.append((first - killed) * 1000)
        # the next kill waits for the streams to flow again
        mark = time.monotonic()
        t.wait_for(lambda: events_after(ss, mark) is not None, 30, 0.005)
    ok(len(pids) == N_KILLS and len(restarts) == N_KILLS - 1,
       "the engine killed %d times while the streams ran, kill %d as soon as the engine before "
       "was up (pids %s)" % (len(pids), early + 1, pids))
    diag("restart time, kill -9 -> first resumed token (ms): %s; median %.0f" %
         (", ".join("%.0f" % x for x in restarts),
          sorted(restarts)[len(restarts) // 2] if restarts else -1))
    ok(join_all(ss), "every stream ended")
    bad = [s.i for s in ss if not (s.status == 200 and s.done and s.finish == "length" and
                                  s.error is None and s.exc is None)]
    ok(not bad, "every stream completed: 200, finish_reason length, [DONE], no error event "
       "(bad: %s)" % [(ss[i].status, ss[i].finish, ss[i].error, repr(ss[i].exc)) for i in bad])
    same = [s.i for s in ss if s.text == ref[s.i].text]
    ok(len(same) == N_CLIENTS,
       "each text equals the undisturbed one (%d/%d; greedy and seeded temperature 0.9)"
       % (len(same), N_CLIENTS))
    for s in ss:
        if s.text != ref[s.i].text:
            n = next((j for j, (a, b) in enumerate(zip(s.text, ref[s.i].text)) if a != b),
                     min(len(s.text), len(ref[s.i].text)))
            diag("client %d differs at char %d: %r vs %r" % (s.i, n, s.text[n:n + 40],
                                                             ref[s.i].text[n:n + 40]))
    after = {}
    ok(t.wait_for(lambda: held(after.update(metrics()) or after) == (0, 0, 0, True), 15),
       "afterwards 0 slots, 0 pages, 0 state slots held; used + free + cached = total (%s)"
       % (held(after),))
    ok(after.get("hyserve_engine_restarts_total", 0) - before.get(
        "hyserve_engine_restarts_total", 0) == N_KILLS and
       after.get('hyserve_engine_state{state="running"}') == 1 and
       after.get("hyserve_engine_pid") == engine_pid() and alive(engine_pid()),
       "hyserve_engine_restarts_total +%d, the engine running, its pid in engine.pid and "
       "/metrics" % N_KILLS)
    log = t.tail(os.path.join(SITE.tmp, "serve-blue.log"), 400)
    ok(log.count("event=engine_died") == N_KILLS and "signal=9" in log and
       log.count("event=engine_ready") == N_KILLS + 1,
       "the master logged each death (signal 9) and each new engine ready")

    def field(event, key):
        return [w.split("=", 1)[1] for l in log.splitlines() if "event=%s " % event in l
                for w in l.split() if w.startswith(key + "=")]
    # what the time to the first resumed token is made of: the backoff, the
    # death -> engine serving time (load), the rest recomputing the context
    diag("master: backoff_ms %s; death -> new engine serving, restart_ms %s; load_ms %s"
         % (field("engine_restarting", "backoff_ms"), field("engine_ready", "restart_ms")[1:],
            field("engine_ready", "load_ms")[1:]))
    # the new engine: from taking the resumed requests to the first stream's
    # next token and to the last one's, wall and the process's CPU time (on
    # a loaded machine the wall time is mostly waiting for a core)
    diag("engine: first resumed token ms %s (cpu_ms %s, its context_tokens %s); all resumed "
         "ms %s (cpu_ms %s, context_tokens %s)"
         % (field("resume_first_token", "ms"), field("resume_first_token", "cpu_ms"),
            field("resume_first_token", "context_tokens"), field("resume_done", "ms"),
            field("resume_done", "cpu_ms"), field("resume_done", "context_tokens")))


def master_kill():
    master = SITE.procs["blue"].pid
    kids = t.children(master) + t.children(master, engine=True)
    s = Stream(99, "Tell a long story.", 0, None, max_tokens=400)
    s.start()
    t.wait_for(lambda: len(s.times) > 0, 60, 0.01)
    os.kill(master, signal.SIGKILL)
    SITE.procs["blue"].wait()
    ok(len(kids) == 3 and t.wait_for(lambda: not any(alive(p) for p in kids), 2.0, 0.01),
       "master killed: its engine and %d workers are gone within 2 s" % (len(kids) - 1))
    s.join(30)
    ok(not s.is_alive() and not s.done and s.finish is None,
       "the stream in flight is aborted, not ended (%r)" % (s.exc,))
    st, h, b = SITE.https("POST", "/v1/completions", key=KEY, body={
        "model": sitelib.MODEL_ID, "prompt": "Hello", "max_tokens": 4})
    try:
        e = json.loads(b)["error"]
    except (ValueError, KeyError, TypeError):
        e = {}
    ok(st in (502, 503) and e.get("message") and h.get("retry-after"),
       "nginx answers %s JSON with Retry-After: %s" % (st, b[:120]))


def storm():
    # the same colour again, with a storm after 2 deaths
    with open(SITE.ini["blue"]) as f:
        ini = f.read()
    with open(SITE.ini["blue"], "w") as f:
        f.write(ini.replace("engine_restart_max = 20", "engine_restart_max = 2"))
    up = SITE.start_colour("blue")
    ok(up, "restarted with [server] engine_restart_max = 2")
    if not up:
        return
    s = Stream(100, "Tell a long story.", 0, None, max_tokens=400)
    s.start()
    res = {}

    def blocking():
        res["r"] = SITE.https("POST", "/v1/completions", key=KEY, timeout=120, body={
            "model": sitelib.MODEL_ID, "prompt": "Tell another long story.", "max_tokens": 400,
            "ignore_eos": True, "temperature": 0})
    th = threading.Thread(target=blocking, daemon=True)
    th.start()
    busy = t.wait_for(lambda: len(s.times) > 0 and
                      metrics().get("hyserve_num_requests_running") == 2, 60, 0.02)
    first = engine_pid()
    os.kill(first, signal.SIGKILL)
    killed = time.monotonic()
    again = t.wait_for(lambda: engine_pid() not in (0, first) and
                       events_after([s], killed + 0.05) is not None, 60, 0.005)
    ok(busy and again, "one death: the stream resumes on a new engine")
    os.kill(engine_pid(), signal.SIGKILL)
    s.join(60)
    th.join(60)
    ok(not s.is_alive() and s.status == 200 and s.error is not None and
       s.error.get("code") == "service_unavailable" and s.finish is None,
       "the second death within the window: the stream ends with an SSE error event (%s)"
       % (s.error,))
    st, h, b = res.get("r", (None, {}, b""))
    try:
        e = json.loads(b)["error"]
    except (ValueError, KeyError, TypeError):
        e = {}
    ok(st == 503 and e.get("code") == "service_unavailable" and h.get("retry-after"),
       "the request that had not answered: 503 JSON with Retry-After (%s %s)" % (st, b[:160]))
    # (nginx may still count the control socket's 502s of master_kill
    # against the upstream for a few seconds and answer its own 503 JSON,
    # "overloaded or unavailable", before the master's: hence the wait)
    hl = [None, {}, b""]
    ok(t.wait_for(lambda: (hl.__setitem__(slice(0, 3), SITE.https("GET", "/health")) or
                           (hl[0] == 503 and b"failed" in hl[2])), 15, 0.2),
       "/health: 503, failed (%s %s)" % (hl[0], hl[2][:120]))
    st, h, b = SITE.https("POST", "/v1/completions", key=KEY, body={
        "model": sitelib.MODEL_ID, "prompt": "Hello", "max_tokens": 4})
    ok(st == 503 and int(h.get("retry-after", "0")) > 1,
       "a new request: 503 with Retry-After %s s (%s)" % (h.get("retry-after"), b[:120]))
    m = {}
    ok(t.wait_for(lambda: held(m.update(metrics()) or m) == (0, 0, 0, True), 15, 0.2) and
       m.get('hyserve_engine_state{state="failed"}') == 1,
       "nothing held (%s), the engine state failed" % (held(m),))


try:
    rc, out, e = SITE.ctl("key", "add", "alice", reload=False)
    KEY = out.strip()
    up = rc == 0 and SITE.start_colour("blue") and SITE.start_nginx()
    ok(up, "one instance (2 workers, max_seqs %d) behind the TLS site" % N_CLIENTS)
    if not up:
        raise RuntimeError("not up")
    pid = engine_pid()
    ok(pid > 0 and t.children(SITE.procs["blue"].pid, engine=True) == [pid],
       "engine.pid (%d) names the master's engine process" % pid)
    # HY_TEST_PHASES=storm (say) runs only those phases, when working on one
    phases = os.environ.get("HY_TEST_PHASES", "soak,master_kill,storm").split(",")
    for name, fn in (("soak", soak), ("master_kill", master_kill), ("storm", storm)):
        if name in phases:
            t0 = time.monotonic()
            fn()
            diag("%s: %.1f s" % (name, time.monotonic() - t0))
except Exception as e:  # noqa
    ok(False, "unexpected %r" % e)
finally:
    keep = t.failed()
    if keep:
        diag(t.tail(os.path.join(SITE.tmp, "serve-blue.log"), 60))
    SITE.cleanup(keep=keep)
    for inst in SITE.instance.values():
        try:
            os.unlink("/dev/shm/hyserve-" + inst)
        except OSError:
            pass
    t.done()
