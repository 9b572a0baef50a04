#!/usr/bin/env python3
"""test_bluegreen_models.py - the README's blue/green flow with two different
models: SmolLM2-135M-Instruct (a dense llama, its own chat template) on
blue and Gemma 3 270M (sliding-window layers, no template in its GGUF, so
hyserve's built-in Gemma 3 template) on green, behind the production nginx
site (sitelib.py: TLS, API keys, the upstream switch).  Checks what a
client sees through nginx on each colour - /v1/models (architecture, layer
kinds, model version) and a chat answer - across `hyserve-ctl switch
green` and back to blue, and that an assistant turn with content null
(with or without tool_calls) renders as empty content on both templates.

Both models come from outside the repository: scripts/fetch-default-model
and scripts/fetch-model gemma3-270m (scripts/run-tests runs both); a
missing one is a failed check naming the command.  TAP.

Environment: HY_SRCDIR (source tree), HYSERVE (the binary).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sitelib  # noqa: E402
import taplib as t  # noqa: E402

ok, diag = t.ok, t.diag
t.require(sitelib.missing_tools())
GEMMA = os.path.join(t.SRC, "models", "gemma-3-270m-q4_k_m.gguf")
t.require_models([(t.DEFAULT_MODEL, "scripts/fetch-default-model"),
                  (GEMMA, "scripts/fetch-model gemma3-270m")])

# What each colour serves, as /v1/models reports it.
WANT = {"blue": {"architecture": "llama", "layer_kinds": {"attention": 30},
                 "sha8": "b179c952", "template": "source=gguf"},
        "green": {"architecture": "gemma3",
                  "layer_kinds": {"attention": 3, "sliding_attention": 15},
                  "sha8": "a5fd3b62", "template": "source=builtin:gemma3"}}
# A question each model answers with "Paris" under greedy decoding.  The
# Gemma file is the pretrained 270M (not the -it model): it has not learnt
# to answer a lone turn, but it continues a dialogue in its chat format, so
# its conversation shows two answered questions first.
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
FEW_SHOT = [{"role": "user", "content": "What is the capital of Germany?"},
            {"role": "assistant", "content": "Berlin."},
            {"role": "user", "content": "What is the capital of Italy?"},
            {"role": "assistant", "content": "Rome."}] + QUESTION
CHAT = {"blue": (QUESTION, 16), "green": (FEW_SHOT, 4)}
NULL_TURNS = [
    [{"role": "user", "content": "Call the weather tool for Oslo."},
     {"role": "assistant", "content": None, "tool_calls": [
         {"id": "c1", "type": "function",
          "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
     {"role": "user", "content": "Thanks. What is the capital of France?"}],
    [{"role": "user", "content": "Say nothing."},
     {"role": "assistant", "content": None},
     {"role": "user", "content": "What is the capital of France?"}],
]

SITE = sitelib.Site({"blue": {}, "green": {}}, models={"blue": t.DEFAULT_MODEL, "green": GEMMA},
                    prefix="hybg-")


def models_info(key):
    st, h, b = SITE.https("GET", "/v1/models", key=key)
    try:
        return st, h.get("x-hyserve-colour"), json.loads(b)["data"][0]
    except (ValueError, KeyError, IndexError):
        return st, h.get("x-hyserve-colour"), {"raw": b[:200]}


def chat(key, messages, max_tokens):
    st, h, b = SITE.https("POST", "/v1/chat/completions", key=key, timeout=300, body={
        "model": sitelib.MODEL_ID, "messages": messages, "max_tokens": max_tokens,
        "temperature": 0})
    try:
        text = json.loads(b)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        text = None
    return st, h.get("x-hyserve-colour"), text, b[:300]


def check_colour(key, c):
    """What a client sees through nginx while colour c is live."""
    w = WANT[c]

    def hashed():
        return not models_info(key)[2].get("model_version", "@hashing").endswith("@hashing")

    t.wait_for(hashed, 120, 0.5)
    st, colour, m = models_info(key)
    ok(st == 200 and colour == c and m.get("architecture") == w["architecture"] and
       m.get("layer_kinds") == w["layer_kinds"] and m.get("id") == sitelib.MODEL_ID and
       m.get("model_version", "").endswith("@" + w["sha8"]),
       "%s live: /v1/models shows %s %s, version @%s" % (c, w["architecture"],
                                                          w["layer_kinds"], w["sha8"]))
    if st != 200 or colour != c:
        diag("got %d from %s: %s" % (st, colour, m))
    msgs, n = CHAT[c]
    st, colour, text, raw = chat(key, msgs, n)
    ok(st == 200 and colour == c and text is not None and "Paris" in text,
       "%s live: chat 'What is the capital of France?' answers %r" % (c, text))
    if st != 200:
        diag(raw)


class Stop(Exception):
    """A step the rest depends on failed (already reported)."""


def must(cond, what):
    ok(cond, what)
    if not cond:
        raise Stop()


try:
    rc, out, err = SITE.ctl("key", "add", "alice", reload=False)
    key = out.strip()
    must(rc == 0 and key.startswith("hy-"), "API key added (%s)" % err.strip())
    must(SITE.start_colour("blue", timeout=180), "blue (SmolLM2) healthy")
    must(SITE.start_colour("green", timeout=180), "green (Gemma 3) healthy")
    must(SITE.start_nginx(), "nginx up, blue live")

    for c in ("blue", "green"):
        with open(os.path.join(SITE.tmp, "serve-%s.log" % c)) as f:
            log = [l for l in f if "chat_template" in l]
        ok(len(log) == 1 and WANT[c]["template"] in log[0],
           "%s logs which chat template it uses: %s" % (c, log[0].strip() if log else "nothing"))

    check_colour(key, "blue")
    for i, msgs in enumerate(NULL_TURNS):
        st, colour, text, raw = chat(key, msgs, 2)
        ok(st == 200 and colour == "blue" and text is not None,
           "blue: assistant content null (%s) renders as empty content" %
           ("with tool_calls" if i == 0 else "without tool_calls"))
        if st != 200:
            diag(raw)

    rc, out, err = SITE.ctl("switch", "green")
    ok(rc == 0 and "live: green (was blue)" in out,
       "hyserve-ctl switch green: %s" % (out + err).strip())
    check_colour(key, "green")
    for i, msgs in enumerate(NULL_TURNS):
        st, colour, text, raw = chat(key, msgs, 2)
        ok(st == 200 and colour == "green" and text is not None,
           "green: assistant content null (%s) renders as empty content" %
           ("with tool_calls" if i == 0 else "without tool_calls"))
        if st != 200:
            diag(raw)

    rc, out, err = SITE.ctl("switch", "blue")
    ok(rc == 0 and "live: blue (was green)" in out,
       "hyserve-ctl switch blue: %s" % (out + err).strip())
    check_colour(key, "blue")
    rc, out, _ = SITE.ctl("status")
    ok(rc == 0 and [l.split()[1] for l in out.splitlines() if l.startswith("blue")] == ["*"] and
       out.count("@" + WANT["blue"]["sha8"]) == 1 and out.count("@" + WANT["green"]["sha8"]) == 1,
       "status: blue live, each colour with its own model version")
    diag(out)
except Stop:
    pass
except Exception as e:  # a crash is one failed check, then the plan
    ok(False, "unexpected %s: %s" % (type(e).__name__, e))
finally:
    rcs = SITE.stop()
    ok(all(rc == 0 for rc in rcs.values()), "both colours stop cleanly on SIGTERM: %s" % rcs)
    SITE.cleanup(keep=t.n_fail > 0)
sys.exit(t.done())
