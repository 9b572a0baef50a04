"""structlib.py - what the structured-output test and benchmark share: the
schema corpus (tests/data/schemas/), a strict validator (Python's
jsonschema with format checks that do not depend on its optional
packages), and one corpus run against any OpenAI-compatible server
(hyserve or llama-server), 16 requests at a time, with per-schema results.
"""
import concurrent.futures as cf
import datetime
import glob
import http.client as httpc
import ipaddress
import json
import os
import re
import time
import uuid

import jsonschema

SRC = os.path.abspath(os.environ.get("HY_SRCDIR",
                                     os.path.join(os.path.dirname(__file__), "..", "..")))
SCHEMA_DIR = os.path.join(SRC, "tests", "data", "schemas")

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(r"^%s(?:\.%s)*$" % (_LABEL, _LABEL))
_DURATION = re.compile(r"^P(?:(?:\d+Y)?(?:\d+M)?(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+S)?)?|\d+W)$")


def _checker():
    """Format checks for every format the corpus uses, stdlib only."""
    fc = jsonschema.FormatChecker()

    def zoned(v):
        return v.endswith("Z") or re.search(r"[+-]\d\d:\d\d$", v)

    @fc.checks("date-time", raises=ValueError)
    def _dt(v):
        if isinstance(v, str):
            if "T" not in v or not zoned(v):
                raise ValueError("no T or no time zone")
            datetime.datetime.fromisoformat(v.replace("Z", "+00:00"))
        return True

    @fc.checks("time", raises=ValueError)
    def _t(v):
        if isinstance(v, str):
            if not zoned(v):
                raise ValueError("no time zone")
            datetime.time.fromisoformat(v.replace("Z", "+00:00"))
        return True

    @fc.checks("date", raises=ValueError)
    def _d(v):
        if isinstance(v, str):
            if not re.match(r"^\d{4}-\d{2}-\d{2}$", v):
                raise ValueError("not YYYY-MM-DD")
            datetime.date.fromisoformat(v)
        return True

    @fc.checks("duration")
    def _dur(v):
        return not isinstance(v, str) or (bool(_DURATION.match(v)) and v not in ("P", "PT")
                                          and not v.endswith("T"))

    @fc.checks("email")
    def _email(v):
        if not isinstance(v, str):
            return True
        local, _, domain = v.rpartition("@")
        return bool(local) and ".." not in local and bool(_HOST.match(domain)) and "." in domain

    @fc.checks("hostname")
    def _host(v):
        return not isinstance(v, str) or (len(v) <= 253 and bool(_HOST.match(v)))

    @fc.checks("ipv4", raises=ValueError)
    def _v4(v):
        if isinstance(v, str):
            ipaddress.IPv4Address(v)
        return True

    @fc.checks("ipv6", raises=ValueError)
    def _v6(v):
        if isinstance(v, str):
            ipaddress.IPv6Address(v)
        return True

    @fc.checks("uuid", raises=ValueError)
    def _uuid(v):
        if isinstance(v, str):
            uuid.UUID(v)
            if [v[k] for k in (8, 13, 18, 23)] != ["-"] * 4:
                raise ValueError("dashes")
        return True

    @fc.checks("uri")
    def _uri(v):
        return not isinstance(v, str) or bool(
            re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#]+[^\s]*$", v))

    return fc


FORMATS = _checker()


def validate(schema, text):
    """None when text is JSON valid against schema, else why not."""
    try:
        value = json.loads(text)
    except ValueError as e:
        return "not JSON (%s)" % e
    cls = jsonschema.validators.validator_for(schema)
    errors = sorted(cls(schema, format_checker=FORMATS).iter_errors(value), key=str)
    return None if not errors else "invalid: %s" % errors[0].message[:200]


def load_corpus(limit=0):
    """[(name, schema)] in file order; limit > 0 keeps the first ones."""
    out = []
    for f in sorted(glob.glob(os.path.join(SCHEMA_DIR, "*.json"))):
        with open(f) as fp:
            out.append((os.path.basename(f)[:-5], json.load(fp)))
    return out[:limit] if limit > 0 else out


# The sampling every corpus request uses: temperature 1 with llama.cpp's
# default truncation (what llama-server applies when a request names none),
# so that hyserve and llama-server sample alike.
SAMPLING = {"temperature": 1.0, "top_k": 40, "top_p": 0.95, "min_p": 0.05}


def request_body(k, name, schema, model, max_tokens, sampling=None):
    words = re.sub(r"^\d+-", "", name).replace("-", " ")
    body = {"model": model, "seed": 1000 + k, "max_tokens": max_tokens,
            "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "system",
                          "content": "You answer with one JSON value that follows this JSON "
                                     "schema: %s" % json.dumps(schema)},
                         {"role": "user", "content": "Give a short example %s." % words}],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "s%d" % k, "schema": schema,
                                                "strict": True}}}
    body.update(SAMPLING if sampling is None else sampling)
    return body


def post(host, port, path, body, timeout=900):
    c = httpc.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request("POST", path, body=json.dumps(body).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read()
        try:
            return r.status, json.loads(raw)
        except ValueError:
            return r.status, {"raw": raw[:300].decode(errors="replace")}
    finally:
        c.close()


def post_stream(host, port, path, body, timeout=900):
    """A streamed request: (status, content, finish_reason, usage or {}),
    or (status, error body, None, {}) when it is refused.  Streaming keeps
    a slow answer under the proxy's read timeout."""
    c = httpc.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request("POST", path, body=json.dumps(body).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return r.status, r.read()[:300].decode(errors="replace"), None, {}
        text, finish, usage = [], None, {}
        for raw in r:
            line = raw.decode("utf-8").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if "error" in ev:
                return 500, json.dumps(ev["error"])[:300], None, {}
            usage = ev.get("usage") or usage
            for ch in ev.get("choices") or []:
                text.append((ch.get("delta") or {}).get("content") or "")
                finish = ch.get("finish_reason") or finish
        return 200, "".join(text), finish, usage
    finally:
        c.close()


def one(host, port, k, name, schema, model, max_tokens, sampling=None):
    """(name, outcome, why, completion tokens, text); outcome is "valid"
    (finish "stop", parses and validates), "closed" (finish "length" but
    parses and validates: hyserve's token budget closed it within
    max_tokens), "length" (cut: finish "length" and not valid), "invalid"
    (finish "stop" but not valid) or "error" (an HTTP error: refused or
    failed)."""
    status, text, finish, usage = post_stream(
        host, port, "/v1/chat/completions",
        request_body(k, name, schema, model, max_tokens, sampling))
    if status != 200:
        return name, "error", "HTTP %d: %s" % (status, text), 0, None
    n = usage.get("completion_tokens", 0)
    why = validate(schema, text)
    if finish != "stop":
        return name, "closed" if why is None else "length", "finish_reason %s after %d tokens: %r" % (
            finish, n, text[-100:]), n, text
    return name, "valid" if why is None else "invalid", why, n, text


def run(host, port, model, schemas, concurrency=16, max_tokens=768, sampling=None):
    """Runs every schema; returns (results, wall seconds).  A schema's seed
    is its position in the whole corpus (the number its file name starts
    with), so a subset samples as the full run does."""
    t0 = time.time()
    with cf.ThreadPoolExecutor(concurrency) as ex:
        futs = [ex.submit(one, host, port, int(nm.split("-")[0]), nm, sc, model, max_tokens,
                          sampling)
                for nm, sc in schemas]
        results = [f.result() for f in futs]
    return results, time.time() - t0
