#!/usr/bin/env python3
"""test_metrics.py - what an operator watches, end to end behind the
production nginx site (sitelib.py: nginx/hyserve.conf, TLS, the key map):

* nginx's own refusals (401 no key, 413 body too large, 429 rate limit,
  400 conflicting lengths / bad chunking / bad request line / a path above
  the root / %00 / Content-Length with Transfer-Encoding / no Host, 405
  TRACE, 414, 431, 403, 501 unknown Transfer-Encoding, 505 HTTP/3.7, and
  503 when the pool is at max_conns) reach a worker through
  the control socket, come back as OpenAI-shaped JSON and are counted in
  hyserve_http_requests_total{origin="nginx"} under the endpoint asked for,
  exactly once each; the static JSON nginx falls back to when no instance
  answers is the same JSON, byte for byte after parsing;
* hyserve's own refusals (400 parser, 404, 503 no free request slot, 403
  priority) are counted with origin="hyserve";
* /health and /metrics answer while every generation worker is busy;
* the exposition parses with prometheus_client's parser (the one
  Prometheus's Python ecosystem uses), summaries P50/P95/P99 of TTFT, TPOT
  and end-to-end latency, tokens/s over 10 s and 60 s, memory by kind and
  tier with exact page accounting;
* every metric the alert rules and the Grafana dashboard read exists;
* priority: with max_seqs = 1 and a queue of requests, a key with priority
  -5 (hyserve-ctl key add --priority) and a body "priority" overtake the
  queue in order; a key cannot ask for more than its priority (403).

TAP; skips (1..0 # SKIP) without nginx, openssl, cgi-fcgi or the python
prometheus_client package (scripts/install-deps --test).
Environment: HY_SRCDIR (source tree), HYSERVE (the binary).
"""
import json
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promql  # noqa: E402
import sitelib  # noqa: E402
import taplib as t  # noqa: E402

ok, diag = t.ok, t.diag
missing = sitelib.missing_tools()
try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    missing.append("python prometheus_client (scripts/install-deps --test)")
if missing:
    t.skip_all("needs " + ", ".join(missing))

SLOTS = 8  # max_queue 7 + max_seqs 1: request slots, worker threads and max_conns alike
MAX_TOKENS_LONG = 400
SITE = sitelib.Site({"blue": {"engine": {"max_seqs": 1, "max_context": 512},
                              "server": {"max_queue": SLOTS - 1, "workers": 2,
                                         "threads_per_worker": SLOTS // 2}}},
                    max_conns=SLOTS, prefix="hymetrics-")
KEYS = {}


def err(body):
    try:
        e = json.loads(body)["error"]
        return e["code"], e["type"]
    except Exception:
        return None, None


def scrape(source=None):
    """(families by name, {sample name + labels: value}) of /metrics through
    the site (the live colour's control socket)."""
    st, _, b = SITE.https("GET", "/metrics", source=source)
    if st != 200:
        raise RuntimeError("/metrics: %d %s" % (st, b[:200]))
    fams = {f.name: f for f in text_string_to_metric_families(b.decode())}
    return fams, b.decode()


def sample(text, name, **labels):
    """The value of one sample of the exposition text, None if absent."""
    for f in text_string_to_metric_families(text):
        for s in f.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None


def http_count(text, origin, endpoint, code):
    v = sample(text, "hyserve_http_requests_total", origin=origin, endpoint=endpoint,
               code=str(code))
    return int(v) if v is not None else 0


def counted(before, origin, endpoint, code, want=1):
    """The counter moved by exactly want since the text before."""
    after = scrape()[1]
    got = http_count(after, origin, endpoint, code) - http_count(before, origin, endpoint, code)
    return got == want, got


def completion(key, prompt="The capital of France is", max_tokens=4, stream=False, **extra):
    body = {"model": sitelib.MODEL_ID, "prompt": prompt, "max_tokens": max_tokens,
            "temperature": 0, "stream": stream}
    body.update(extra)
    return SITE.https("POST", "/v1/completions", body=body, key=key, timeout=300)


class Held:
    """A streamed completion whose connection stays open until close()."""

    def __init__(self, key, **extra):
        self.conn = SITE.connection(timeout=300)
        body = {"model": sitelib.MODEL_ID, "prompt": "Once upon a time", "stream": True,
                "max_tokens": MAX_TOKENS_LONG, "ignore_eos": True, "temperature": 0}
        body.update(extra)
        self.conn.request("POST", "/v1/completions", body=json.dumps(body).encode(),
                          headers={"Content-Type": "application/json",
                                   "Authorization": "Bearer " + key})
        self.resp = None

    def status(self):
        """Blocks until the first token: a stream's headers come with it."""
        self.resp = self.resp or self.conn.getresponse()
        return self.resp.status

    def close(self):
        self.conn.close()


def gauge(name, **labels):
    return sample(scrape()[1], name, **labels)


def wait_gauge(name, want, timeout=60, **labels):
    return t.wait_for(lambda: gauge(name, **labels) == want, timeout, 0.1)


def direct_refusal(status):
    """The worker's answer to HYSERVE_NGINX_STATUS=status, straight from its
    control socket: the JSON body."""
    env = {"REQUEST_METHOD": "GET", "DOCUMENT_URI": "/_hyserve/nginx-error",
           "REQUEST_URI": "/v1/models", "HYSERVE_NGINX_STATUS": str(status),
           "HYSERVE_SECRET": SITE.secret("blue"), "PATH": os.environ["PATH"]}
    out = subprocess.run(["cgi-fcgi", "-bind", "-connect", SITE.ctl_sock["blue"]], env=env,
                         capture_output=True, timeout=10).stdout
    return out.partition(b"\r\n\r\n")[2]


def static_fallbacks():
    """{status: JSON} of the site's @hyserve_static_<status> locations."""
    with open(os.path.join(t.SRC, "nginx", "hyserve.conf")) as f:
        conf = f.read()
    out = {}
    for m in re.finditer(r"location @hyserve_static_(\d+) \{[^}]*?return (\d+) '([^']*)';", conf):
        text = m.group(3).replace("\\\\", "\\").replace("\\n", "\n")
        out[int(m.group(1))] = (int(m.group(2)), json.loads(text))
    return out


# ---- run ----------------------------------------------------------------------
try:
    # -- keys, with priorities, before nginx runs
    for name, prio in (("alice", None), ("vip", "-5"), ("batch", "10"), ("hammer", None)):
        args = ["key", "add", name] + (["--priority", prio] if prio else [])
        rc, out, e = SITE.ctl(*args, reload=False)
        KEYS[name] = out.strip()
    ok(all(k.startswith("hy-") for k in KEYS.values()), "keys added, two with a priority")
    rc1, _, e1 = SITE.ctl("key", "add", "x1", "--priority", "5000", reload=False)
    rc2, _, e2 = SITE.ctl("key", "add", "x2", "--priority", "high", reload=False)
    rc3, _, e3 = SITE.ctl("key", "add", "x3", "--priority", "007", reload=False)
    ok(rc1 != 0 and rc2 != 0 and rc3 != 0 and "-1000..1000" in e1 + e2 + e3,
       "key add refuses a priority outside -1000..1000 or not a plain integer")
    rc, out, _ = SITE.ctl("key", "list", reload=False)
    ok(rc == 0 and out.splitlines() == ["alice", "vip priority=-5", "batch priority=10", "hammer"],
       "key list shows each key's priority, never a secret: %s" % out.splitlines())
    rc, e = SITE.nginx_test()
    ok(rc == 0, "nginx -t accepts the site (error pages, control upstreams, key priorities)")
    if rc:
        diag(e)
    ok(SITE.start_colour("blue"), "blue serves, with its control socket")
    ok(SITE.start_nginx(), "nginx serves /health over TLS")

    # -- the exposition before any request
    fams, text = scrape()
    ok(fams["hyserve_time_to_first_token_window_seconds"].type == "summary" and
       all(s.value != s.value for s in fams["hyserve_time_to_first_token_window_seconds"].samples
           if "quantile" in s.labels),
       "before any request: the TTFT summary parses, its quantiles are NaN")
    info = [s for s in fams["hyserve_info"].samples][0].labels
    ok(info.get("model") == sitelib.MODEL_ID and info.get("hyserve_instance", "").endswith("-blue")
       and info.get("version") and "@" in info.get("model_version", ""),
       "hyserve_info names instance, model, model version and hyserve version: %s" % info)

    # -- hyserve's own answers, counted with origin="hyserve"
    _, before = scrape()
    st, _, b = completion(KEYS["alice"])
    st2, _, b2 = completion(KEYS["alice"], stream=True, max_tokens=6)
    st3, _, b3 = SITE.https("POST", "/v1/completions", body=b'{"model": "x",', key=KEYS["alice"])
    st4, _, b4 = SITE.https("GET", "/v1/nowhere", key=KEYS["alice"])
    ok(st == 200 and st2 == 200 and st3 == 400 and st4 == 404,
       "a completion, a stream, a malformed body (400), an unknown path (404)")
    after = scrape()[1]
    d = [http_count(after, "hyserve", ep, c) - http_count(before, "hyserve", ep, c)
         for ep, c in (("/v1/completions", 200), ("/v1/completions", 400), ("other", 404))]
    ok(d == [2, 1, 1], "counted by endpoint and status with origin=hyserve: %s" % d)

    # -- nginx's own refusals: JSON from a worker, counted once with origin="nginx"
    def refusal(what, call, code, endpoint, want_code, header=None):
        _, before = scrape()
        st, h, b = call()
        c, _ = err(b)
        good_count, n = counted(before, "nginx", endpoint, code)
        answered = h.get("x-hyserve-colour") == "blue"
        good = st == code and c == want_code and answered and good_count
        if header:
            good = good and h.get(header[0]) == header[1]
        ok(good, "%s: %d %s answered by a worker (X-Hyserve-Colour %s), counted %d time(s) as "
           "{origin=nginx,endpoint=%s,code=%d}" % (what, st, c, h.get("x-hyserve-colour"), n,
                                                  endpoint, code))
        if not good:
            diag("%d %s %s" % (st, h, b[:300]))
        return b

    body401 = refusal("no API key", lambda: SITE.https("GET", "/v1/models"), 401, "/v1/models",
                      "invalid_api_key")
    refusal("1.5 MB body", lambda: SITE.https("POST", "/v1/completions", body=b"x" * (1536 * 1024),
                                              key=KEYS["alice"]),
            413, "/v1/completions", "request_too_large")
    refusal("conflicting Content-Length headers",
            lambda: SITE.raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                             b"Content-Length: 6\r\n\r\nhello"), 400, "/v1/completions", "bad_request")
    refusal("a malformed chunked body",
            lambda: SITE.raw(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                             + KEYS["alice"].encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
                             b"zz\r\nhello\r\n0\r\n\r\n"), 400, "/v1/chat/completions", "bad_request")
    refusal("a bad request line", lambda: SITE.raw(b"BLAH\r\n\r\n"), 400, "other", "bad_request")
    refusal("a path above the root", lambda: SITE.raw(b"GET /v1/../../etc/passwd HTTP/1.1\r\n"
                                                      b"Host: x\r\n\r\n"), 400, "other",
            "bad_request")
    refusal("%00 in the path", lambda: SITE.raw(b"GET /v1/models%00 HTTP/1.1\r\nHost: x\r\n\r\n"),
            400, "other", "bad_request")
    refusal("Content-Length and Transfer-Encoding together",
            lambda: SITE.raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
            400, "/v1/completions", "bad_request")
    refusal("HTTP/1.1 without Host", lambda: SITE.raw(b"GET /v1/models HTTP/1.1\r\n\r\n"), 400,
            "/v1/models", "bad_request")
    refusal("Transfer-Encoding: gzip (501)",
            lambda: SITE.raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                             b"Transfer-Encoding: gzip\r\n\r\n"), 501, "/v1/completions",
            "not_implemented")
    # nginx stops at the version: no request URI to count it under
    refusal("HTTP/3.7 (505)", lambda: SITE.raw(b"GET /v1/models HTTP/3.7\r\nHost: x\r\n\r\n"),
            505, "other", "http_version_not_supported")
    refusal("TRACE", lambda: SITE.raw(b"TRACE /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n"), 405,
            "/v1/completions", "method_not_allowed", header=("allow", "GET, HEAD, POST"))
    refusal("a 10 KB URI", lambda: SITE.https("GET", "/v1/" + "a" * 10000, key=KEYS["alice"]), 414,
            "other", "uri_too_long")
    refusal("a 10 KB header", lambda: SITE.https("GET", "/v1/models", key=KEYS["alice"],
                                                  headers={"X-Big": "b" * 10000}),
            431, "/v1/models", "headers_too_large")
    refusal("/metrics from 127.0.0.2 (not allowed)",
            lambda: SITE.https("GET", "/metrics", source="127.0.0.2"), 403, "/metrics", "forbidden")
    st, h, b = SITE.https("GET", "/_hyserve/nginx-error")
    ok(st == 404 and err(b)[0] == "not_found", "the internal error location is not reachable from outside (404 JSON)")

    # 429: one key far over its 10 r/s (burst 20); every 429 counted
    _, before = scrape()
    codes, lock = [], threading.Lock()

    def hammer():
        for _ in range(10):
            st, h, b = SITE.https("GET", "/v1/models", key=KEYS["hammer"])
            with lock:
                codes.append((st, err(b)[0], h.get("retry-after"), h.get("x-hyserve-colour")))

    hs = [threading.Thread(target=hammer) for _ in range(5)]
    for th in hs:
        th.start()
    for th in hs:
        th.join(120)
    n429 = [c for c in codes if c[0] == 429]
    good_count, n = counted(before, "nginx", "/v1/models", 429, len(n429))
    ok(n429 and all(c[1:] == ("rate_limit_exceeded", "1", "blue") for c in n429) and good_count and
       all(c[0] in (200, 429) for c in codes),
       "50 fast requests on one key: %d x 429 JSON with Retry-After, %d counted" % (len(n429), n))
    time.sleep(2.5)  # let the per-address bucket refill before the rest

    # -- saturation: every slot and worker thread held
    # (a queued stream's headers reach the client with its first token, so
    # the server's gauges, not the responses, say that they are held)
    held = [Held(KEYS["alice"]) for _ in range(SLOTS - 1)]
    ok(wait_gauge("hyserve_num_requests_waiting", SLOTS - 2) and
       gauge("hyserve_num_requests_running") == 1,
       "%d streams held: 1 running, %d waiting (max_seqs 1)" % (SLOTS - 1, SLOTS - 2))
    _, before = scrape()
    st, h, b = completion(KEYS["alice"], n=2)
    good_count, n = counted(before, "hyserve", "/v1/completions", 503)
    ok(st == 503 and err(b)[0] == "service_unavailable" and h.get("retry-after") and good_count,
       "n = 2 with one request slot left: hyserve's own 503, counted with origin=hyserve (%d)" % n)
    held.append(Held(KEYS["alice"]))
    ok(wait_gauge("hyserve_request_slots_used", SLOTS),
       "the last slot and the last of %d worker threads held" % SLOTS)
    _, before = scrape()
    t0 = time.time()
    st, h, b = completion(KEYS["alice"])
    dt = time.time() - t0
    good_count, n = counted(before, "nginx", "/v1/completions", 503)
    ok(st == 503 and err(b)[0] == "backend_unavailable" and h.get("retry-after") == "5" and
       h.get("x-hyserve-colour") == "blue" and good_count and dt < 5,
       "pool at max_conns: nginx's 503 answered by the control socket in %.2f s, counted (%d)"
       % (dt, n))
    st_h, _, b_h = SITE.https("GET", "/health", timeout=10)
    m_ok = scrape()[0]["hyserve_request_slots_used"].samples[0].value == SLOTS
    rc, out, _ = SITE.ctl("status")
    ok(st_h == 200 and m_ok and rc == 0 and " ok " in out,
       "with every worker thread streaming, /health, /metrics and hyserve-ctl status still answer")
    for h in held:
        h.close()
    ok(wait_gauge("hyserve_request_slots_used", 0, 120), "closing the streams frees every slot")

    # -- priority: a queue of low-priority requests overtaken in priority order
    st, _, b = completion(KEYS["alice"], priority=-1)
    st2, _, b2 = completion(KEYS["vip"], priority=-10)
    ok(st == 403 and err(b) == ("priority_not_allowed", "permission_error") and st2 == 403,
       "a key may not ask for a priority below its own (alice 0, vip -5): 403")
    blocker = Held(KEYS["alice"])
    ok(blocker.status() == 200 and wait_gauge("hyserve_num_requests_running", 1),
       "a long stream runs (max_seqs 1)")
    order, olock = [], threading.Lock()

    # order is the order the answers arrive in; 12 tokens each keep one
    # answer's run longer than a client thread's wake-up on a loaded machine
    # (with 2, vip's thread once recorded its answer after alice's)
    def run(tag, key, **extra):
        st, _, b = completion(key, max_tokens=12, ignore_eos=True, **extra)
        with olock:
            order.append((tag, st))

    workers = []
    for i, (tag, key, extra, waiting) in enumerate((
            ("batch1", "batch", {}, 1), ("batch2", "batch", {}, 2), ("batch3", "batch", {}, 3),
            ("alice+5", "alice", {"priority": 5}, 4), ("vip", "vip", {}, 5))):
        th = threading.Thread(target=run, args=(tag, KEYS[key]), kwargs=extra)
        th.start()
        workers.append(th)
        # each request is queued before the next is sent: arrival order is known
        wait_gauge("hyserve_num_requests_waiting", waiting)
    queued = gauge("hyserve_num_requests_waiting")
    blocker.close()
    for th in workers:
        th.join(300)
    # the blocker's tokens count in the tokens/s windows as they are pushed but
    # in the totals only when its cancellation is finished, before its slot
    # is released: wait for that
    wait_gauge("hyserve_request_slots_used", 0, 120)
    tags = [o[0] for o in order]
    ok(queued == 5 and all(o[1] == 200 for o in order) and
       tags == ["vip", "alice+5", "batch1", "batch2", "batch3"],
       "queued batch x3 (key priority 10), alice (body priority 5), vip (key priority -5): "
       "finished in the order %s" % tags)

    # -- the exposition after traffic
    fams, text = scrape()
    for name in ("hyserve_time_to_first_token_window_seconds", "hyserve_time_per_output_token_window_seconds",
                 "hyserve_e2e_request_latency_window_seconds"):
        q = {s.labels["quantile"]: s.value for s in fams[name].samples if "quantile" in s.labels}
        cnt = sample(text, name + "_count")
        hist = name.replace("_window", "")
        ok(fams[name].type == "summary" and sorted(q) == ["0.5", "0.95", "0.99"] and
           0 < q["0.5"] <= q["0.95"] <= q["0.99"] and cnt == sample(text, hist + "_count") and
           fams[hist].type == "histogram",
           "%s: summary P50 %.4f <= P95 %.4f <= P99 %.4f s, count %d as the histogram's"
           % (name, q.get("0.5", -1), q.get("0.95", -1), q.get("0.99", -1), cnt or -1))
    r10 = sample(text, "hyserve_generation_tokens_per_second", window="10s")
    r60 = sample(text, "hyserve_generation_tokens_per_second", window="60s")
    gen = sample(text, "hyserve_generation_tokens_total")
    p60 = sample(text, "hyserve_prompt_tokens_per_second", window="60s")
    # the gauges are printed with 9 significant digits: 55/60 comes back as
    # 0.916666667, whose 60 s sum is 55.00000002; the counts are integers
    ok(fams["hyserve_generation_tokens_per_second"].type == "gauge" and 0 < r60 and
       round(r10 * 10) <= round(r60 * 60) <= gen and
       0 < p60 and round(p60 * 60) <= sample(text, "hyserve_prompt_tokens_total"),
       "tokens/s: %.1f over 10 s, %.1f over 60 s (at most the %d generated), prompt %.1f over 60 s"
       % (r10, r60, gen, p60))
    pages = {s.labels["state"]: s.value for s in fams["hyserve_kv_pages"].samples}
    total = sample(text, "hyserve_kv_pages_total")
    mem = {(s.labels["kind"], s.labels["tier"]): s.value for s in fams["hyserve_memory_bytes"].samples}
    used = {(s.labels["kind"], s.labels["tier"]): s.value
            for s in fams["hyserve_memory_used_bytes"].samples}
    cached = {(s.labels["kind"], s.labels["tier"]): s.value
              for s in fams["hyserve_memory_cached_bytes"].samples}
    page_bytes = mem[("kv_pages", "hot")] / total if total else 0
    model_bytes = os.path.getsize(os.path.realpath(SITE.model))
    ok(pages["used"] + pages["free"] + pages["cached"] == total and page_bytes > 0 and
       page_bytes == int(page_bytes) and used[("kv_pages", "hot")] == pages["used"] * page_bytes and
       cached[("kv_pages", "hot")] == pages["cached"] * page_bytes and
       0.8 * model_bytes < mem[("weights", "hot")] <= model_bytes and
       set(k for k, _ in mem) == {"weights", "kv_pages", "kv_swa_pages", "state_slots", "checkpoints"},
       "memory by kind (hot tier): weights %d of a %d-byte file, %d KV pages of %d bytes, "
       "used + free + cached = total" % (mem[("weights", "hot")], model_bytes, total, page_bytes))
    # the sliding-window page group: none for this model (no sliding layers),
    # shown as an empty pool whose counts still add up
    swa = {s.labels["state"]: s.value for s in fams["hyserve_kv_swa_pages"].samples}
    swa_total = sample(text, "hyserve_kv_swa_pages_total")
    ok(swa_total == 0 and swa == {"used": 0, "free": 0, "cached": 0} and
       mem[("kv_swa_pages", "hot")] == 0 and used[("kv_swa_pages", "hot")] == 0 and
       cached[("kv_swa_pages", "hot")] == 0,
       "sliding-window KV pages: %d in the pool, used %d + free %d + cached %d, %d bytes"
       % (swa_total, swa.get("used", -1), swa.get("free", -1), swa.get("cached", -1),
          mem[("kv_swa_pages", "hot")]))
    host = {s.labels["state"]: s.value for s in fams["hyserve_host_memory_bytes"].samples}
    ok(0 < host["available"] <= host["total"], "host memory: %d of %d bytes available"
       % (host["available"], host["total"]))
    ok(sample(text, "hyserve_engine_restarts_total") == 0 and sample(text, "hyserve_disk_errors_total") == 0
       and fams["hyserve_engine_restarts"].type == "counter",
       "engine restarts and disk-tier errors are exported counters (0 here)")
    names = set(s.name for f in fams.values() for s in f.samples)
    bad = sorted("%s: %s" % (where, n) for where, e in promql.dashboard_exprs() + promql.rule_exprs()
                 for n in promql.metric_names(e) if n not in names and n not in promql.BUILTIN)
    n_expr = len(promql.dashboard_exprs()) + len(promql.rule_exprs())
    ok(not bad, "every metric the %d dashboard and alert expressions read is in /metrics%s"
       % (n_expr, ": missing " + "; ".join(bad) if bad else ""))

    # -- the static JSON nginx falls back to is what a worker answers
    statics = static_fallbacks()
    diffs = [s for s in (400, 401, 403, 404, 405, 413, 414, 429, 431, 500, 501, 503, 504, 505)
             if s not in statics or statics[s][0] != s or
             statics[s][1] != json.loads(direct_refusal(s) or b"null")]
    ok(len(statics) == 14 and not diffs,
       "each of nginx's %d static fallbacks is the JSON a worker answers for that status%s"
       % (len(statics), " (differ: %s)" % diffs if diffs else ""))
    rc = SITE.stop_colour("blue")
    st, h, b = SITE.https("GET", "/v1/models")
    st2, h2, b2 = SITE.https("POST", "/v1/completions", body=b"x" * (1536 * 1024), key=KEYS["alice"])
    st3, h3, b3 = SITE.https("POST", "/v1/completions", body={"prompt": "x"}, key=KEYS["alice"])
    ok(rc == 0 and st == 401 and json.loads(b) == json.loads(body401) and
       "x-hyserve-colour" not in h and st2 == 413 and err(b2)[0] == "request_too_large" and
       st3 == 503 and err(b3)[0] == "backend_unavailable" and h3.get("retry-after") == "5",
       "no instance running: nginx answers 401, 413 and 503 with the same JSON by itself")
except Exception as e:  # report, then still tear down
    import traceback
    ok(False, "aborted: %r" % e)
    diag(traceback.format_exc())
finally:
    SITE.cleanup(keep=t.failed())
    if t.failed():
        for c in ("blue",):
            diag(t.tail(os.path.join(SITE.tmp, "serve-%s.log" % c), 30))
sys.exit(t.done())
