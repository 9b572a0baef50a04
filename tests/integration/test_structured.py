#!/usr/bin/env python3
"""test_structured.py - structured outputs end to end: a real nginx in
front of `hyserve serve` with the default model (SmolLM2).  Every schema
of tests/data/schemas/ (the corpus scripts/make-schema-corpus writes) is
sent as response_format json_schema at temperature 1 (llama.cpp's default
top-k/top-p/min-p), 16 streamed requests at a time: every answer that ends
with finish_reason "stop" must parse as JSON and validate with Python's
jsonschema (formats checked too); answers the token budget closed at
max_tokens (finish_reason "length") must parse and validate as well, and
at least 85% must end by the model's choice.  Then the openai client's
chat.completions.parse with Pydantic models, a streamed answer,
json_object, llama-server's grammar and json_schema fields, an answer the
budget closes (finish "length", valid) and one whose budget is too small
to close (finish "length", visibly incomplete), the 400s for
what is refused, the grammar counters of /metrics, and nothing held
afterwards.  Prints TAP; needs nginx, jsonschema and openai (scripts/
install-deps --test) and the default model (scripts/fetch-default-model).

Environment: HY_SRCDIR (source tree), HYSERVE (the binary); HY_SCHEMAS
limits the corpus to the first N schemas (a quick local run).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import taplib as t  # noqa: E402

try:
    import openai
    import pydantic
    import structlib as sl  # needs jsonschema
except ImportError:
    sl = None

if t.NGINX is None or sl is None:
    t.skip_all("needs nginx and the python jsonschema, openai and pydantic packages "
               "(scripts/install-deps --test)")

MODEL = t.DEFAULT_MODEL
t.require_models([(MODEL, "scripts/fetch-default-model")])  # the corpus needs its chat template
MODEL_ID = os.path.basename(MODEL)[:-5]
CONCURRENCY = 16
MAX_TOKENS = 512
ok = t.ok
validate = None if sl is None else sl.validate


def ask(body, path="/v1/chat/completions", timeout=600):
    return sl.post("127.0.0.1", STACK.port, path, body, timeout)


def run_corpus():
    """Every answer must parse and validate: the grammar's guarantee.  An
    answer the 135M model at temperature 1 would not end by itself within
    max_tokens (nested recursion, a free-form string or open array it
    loops in) is closed by the token budget: finish "length", so the
    client knows the model did not choose that end, and still valid."""
    schemas = sl.load_corpus()
    ok(len(schemas) >= 200, "the corpus holds %d schemas (>= 200)" % len(schemas))
    schemas = sl.load_corpus(int(os.environ.get("HY_SCHEMAS", "0") or 0))
    results, wall = sl.run("127.0.0.1", STACK.port, MODEL_ID, schemas, CONCURRENCY, MAX_TOKENS)
    done = [r for r in results if r[1] in ("valid", "invalid", "error")]
    bad = [(nm, why) for nm, outcome, why, _, _ in done if outcome != "valid"]
    closed = [r for r in results if r[1] == "closed"]
    cut = [r for r in results if r[1] == "length"]
    tokens = sum(n for _, _, _, n, _ in results)
    for nm, why in bad[:20]:
        t.diag("%s: %s" % (nm, why))
    ok(not bad, "%d schemas, temperature 1, %d at a time: all %d answers the model ended parse "
                "and validate (%d do not)" % (len(schemas), CONCURRENCY, len(done) - len(bad),
                                              len(bad)))
    for nm, _, why, n, _ in cut:
        t.diag("cut and not valid: %s: %s" % (nm, why))
    over = [nm for nm, _, _, n, _ in closed if n > MAX_TOKENS]
    ok(not cut and not over,
       "the %d answers the token budget closed (finish 'length') parse and validate within %d "
       "tokens: every answer is valid JSON of its schema (%d cut%s)"
       % (len(closed), MAX_TOKENS, len(cut), (", over budget: " + ", ".join(over)) if over else ""))
    ok(len(closed) <= 0.15 * len(schemas),
       "%d of %d answers ended by the model's own choice (%.1f%%; at least 85%% must, so that "
       "a grammar that never lets the model finish cannot pass)"
       % (len(schemas) - len(closed), len(schemas),
          100.0 * (len(schemas) - len(closed)) / max(len(schemas), 1)))
    t.diag("corpus: %d completion tokens in %.1f s (%.1f tok/s through nginx), longest answer "
           "the model ended %d tokens" % (tokens, wall, tokens / wall if wall else 0,
                                          max((n for _, o, _, n, _ in results if o == "valid"),
                                              default=0)))
    return schemas, results


# ---- the openai client ----------------------------------------------------------------

def run_client():
    client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % STACK.port, api_key="none",
                           timeout=300)

    # bounded like a careful application's models: a 135M model sampled at
    # temperature 1 may otherwise go on with an open array until max_tokens
    Short = pydantic.constr(max_length=60)

    class Step(pydantic.BaseModel):
        explanation: Short
        output: Short

    class MathReasoning(pydantic.BaseModel):
        steps: pydantic.conlist(Step, min_length=1, max_length=3)
        final_answer: Short

    class Weekday(str, __import__("enum").Enum):
        mon = "monday"
        fri = "friday"

    class Meeting(pydantic.BaseModel):
        title: Short
        day: Weekday
        attendees: pydantic.conlist(Short, max_length=3)
        room: pydantic.conint(ge=1, le=999) | None
        online: bool

    parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
    for model_cls, prompt in ((MathReasoning, "Solve 8x + 7 = -23 step by step."),
                              (Meeting, "Plan a short team meeting.")):
        try:
            c = parse(model=MODEL_ID, temperature=1.0, seed=5, max_tokens=MAX_TOKENS,
                      messages=[{"role": "user", "content": prompt}], response_format=model_cls)
            m = c.choices[0].message
            good = isinstance(m.parsed, model_cls) and c.choices[0].finish_reason == "stop"
            why = "%s" % (m.content or "")[:150]
        except Exception as e:  # the client raises on invalid JSON or a 4xx
            good, why = False, "%s: %s" % (type(e).__name__, str(e)[:200])
        ok(good, "openai chat.completions.parse with Pydantic %s gives a parsed instance (%s)"
           % (model_cls.__name__, why))

    # streamed: the deltas joined are the same kind of valid answer
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                               "population": {"type": "integer", "minimum": 0}},
              "required": ["city", "population"], "additionalProperties": False}
    try:
        stream = client.chat.completions.create(
            model=MODEL_ID, temperature=1.0, seed=9, max_tokens=MAX_TOKENS, stream=True,
            messages=[{"role": "user", "content": "Name a city and its population."}],
            response_format={"type": "json_schema",
                             "json_schema": {"name": "city", "schema": schema, "strict": True}})
        text, finish = "", None
        for ev in stream:
            if ev.choices:
                text += ev.choices[0].delta.content or ""
                finish = ev.choices[0].finish_reason or finish
        why = validate(schema, text)
        good = finish == "stop" and why is None
    except Exception as e:
        good, why, text = False, str(e)[:200], ""
    ok(good, "streamed json_schema answer: deltas join to valid JSON, finish 'stop' (%s %r)"
       % (why, text[:80]))


# ---- the other fields, cuts and refusals ---------------------------------------------------

def run_fields():
    # json_object leaves the object's shape to the model: a sampled answer
    # may nest on past the budget (which seed does depends on the kernels'
    # bits, so on the CPU's ISA level), and then the budget closes it.
    # Every answer must be one JSON object, ended by the model ("stop") or
    # closed by the budget ("length"), and of four seeds at least one must
    # end by the model's choice.
    stops, bad = 0, []
    for seed in (3, 4, 5, 6):
        status, r = ask({"model": MODEL_ID, "temperature": 1.0, "seed": seed,
                         "max_tokens": MAX_TOKENS,
                         "messages": [{"role": "user", "content": "Describe a dog in JSON."}],
                         "response_format": {"type": "json_object"}})
        if status != 200:
            bad.append((seed, status, r))
            continue
        text, finish = r["choices"][0]["message"]["content"], r["choices"][0]["finish_reason"]
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if not isinstance(obj, dict) or finish not in ("stop", "length"):
            bad.append((seed, finish, text[:80]))
        stops += finish == "stop"
    ok(not bad and stops >= 1, "response_format json_object: every answer is a JSON object, "
       "the model's end or the budget's; %d of 4 seeds end by the model (%r)" % (stops, bad))

    status, r = ask({"model": MODEL_ID, "prompt": "Is the sky blue? Answer:", "max_tokens": 8,
                     "temperature": 1.0, "grammar": "root ::= \" \" (\"yes\" | \"no\")"},
                    path="/v1/completions")
    ok(status == 200 and r["choices"][0]["text"] in (" yes", " no") and
       r["choices"][0]["finish_reason"] == "stop",
       "llama-server 'grammar' (GBNF) on /v1/completions (%r)" %
       (r["choices"][0]["text"] if status == 200 else r))

    schema = {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 6},
              "minItems": 3, "maxItems": 3}
    status, r = ask({"model": MODEL_ID, "prompt": "Three dice rolls:", "max_tokens": 40,
                     "temperature": 1.0, "json_schema": schema}, path="/v1/completions")
    text = r["choices"][0]["text"] if status == 200 else ""
    ok(status == 200 and validate(schema, text) is None,
       "llama-server 'json_schema' on /v1/completions (%r)" % text)

    big = {"type": "object", "properties": {"story": {"type": "string", "minLength": 200}},
           "required": ["story"], "additionalProperties": False}
    status, r = ask({"model": MODEL_ID, "temperature": 1.0, "max_tokens": 6,
                     "messages": [{"role": "user", "content": "Tell a story."}],
                     "response_format": {"type": "json_schema",
                                         "json_schema": {"name": "story", "schema": big}}})
    text = r["choices"][0]["message"]["content"] if status == 200 else ""
    try:
        json.loads(text)
        parses = True
    except ValueError:
        parses = False
    ok(status == 200 and r["choices"][0]["finish_reason"] == "length" and not parses and
       text.startswith('{'), "a budget too small to close (6 tokens for 200 characters): "
       "finish 'length' and visibly incomplete JSON (%r)" % text)

    # a list the model goes on with far past 24 tokens: closed within them
    tags = {"type": "object", "properties": {"fruits": {"type": "array",
                                                        "items": {"type": "string"}}},
            "required": ["fruits"], "additionalProperties": False}
    closed = 0
    for seed in range(4):
        status, r = ask({"model": MODEL_ID, "temperature": 1.0, "max_tokens": 24, "seed": seed,
                         "messages": [{"role": "user",
                                       "content": "List one hundred fruits, with a long "
                                                  "description of each."}],
                         "response_format": {"type": "json_schema",
                                             "json_schema": {"name": "fruits", "schema": tags}}})
        text = r["choices"][0]["message"]["content"] if status == 200 else ""
        finish = r["choices"][0]["finish_reason"] if status == 200 else None
        why = validate(tags, text) if status == 200 else "HTTP %d" % status
        good = why is None and r["usage"]["completion_tokens"] <= 24 and finish in ("stop", "length")
        closed += good and finish == "length"
        ok(good, "seed %d, max_tokens 24: the answer parses and validates within the budget "
                 "(finish %s, %d tokens: %r%s)" % (seed, finish, r.get("usage", {}).get(
                     "completion_tokens", -1), text[-60:], "" if why is None else "; " + why))
    ok(closed > 0, "%d of 4 of those were closed by the budget (finish 'length')" % closed)

    for body, param, want in [
            ({"response_format": {"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"type": "array", "uniqueItems": True}}}},
             "response_format", "'uniqueItems': true is not supported"),
            ({"response_format": {"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"type": "string", "pattern": "a(?=b)"}}}},
             "response_format", "lookahead '(?=' at offset 1 is not supported"),
            ({"grammar": "root ::= \"a\" | b"}, "grammar", "rule 'b' is used but never defined"),
            ({"response_format": {"type": "json_object"}, "grammar": "root ::= \"a\""}, "grammar",
             "give at most one of")]:
        body.update({"model": MODEL_ID, "messages": [{"role": "user", "content": "x"}]})
        status, r = ask(body)
        err = r.get("error", {})
        ok(status == 400 and err.get("param") == param and want in err.get("message", "") and
           err.get("type") == "invalid_request_error",
           "400 through nginx, param %s: %s (%s)" % (param, want, err.get("message")))


def metrics():
    _, _, b = STACK.http("GET", "/metrics")
    m = {}
    for line in b.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            m[k] = float(v)
    return m


def main():
    global STACK
    STACK = t.Stack(model=MODEL, workers=2,
                    ini={"engine": {"max_seqs": CONCURRENCY, "max_context": 4096},
                         "cache": {"hot_mb": 256}})
    keep = False
    try:
        if not STACK.start(timeout=120):
            ok(False, "stack starts (%s)" % t.tail(STACK.serve_log_path))
            return
        schemas, _ = run_corpus()
        run_client()
        run_fields()
        m = metrics()
        ok(m.get("hyserve_grammar_requests_total", 0) >= len(schemas) and
           m.get("hyserve_grammar_compiles_total", 0) >= 1 and
           m.get("hyserve_grammar_masks_total", 0) > 0 and
           m.get("hyserve_grammar_mask_seconds_total", 0) > 0 and
           m.get("hyserve_grammar_closed_total", 0) >= 1,
           "/metrics: grammar requests %d, compiles %d, cache hits %d, masks %d, mask seconds "
           "%.3f, closed by the budget %d" % (m.get("hyserve_grammar_requests_total", 0),
                                               m.get("hyserve_grammar_compiles_total", 0),
                                               m.get("hyserve_grammar_cache_hits_total", 0),
                                               m.get("hyserve_grammar_masks_total", 0),
                                               m.get("hyserve_grammar_mask_seconds_total", 0),
                                               m.get("hyserve_grammar_closed_total", 0)))
        idle = t.wait_for(lambda: (lambda mm: mm["hyserve_request_slots_used"] == 0 and
                                   mm['hyserve_kv_pages{state="used"}'] == 0)(metrics()), 20)
        ok(idle, "afterwards no request slot or KV page is held")
        keep = t.failed()
    finally:
        STACK.cleanup(keep=keep)


STACK = None
main()
t.done()
