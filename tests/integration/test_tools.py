#!/usr/bin/env python3
"""test_tools.py - tool calling end to end: a real nginx in front of
`hyserve serve` with the default model (SmolLM2, whose template renders
no tools: the generic syntax, tools in the system message and calls as
<tool_call> JSON), driven by the openai client.  tool_choice "required"
and a named function are grammar-constrained, so every call's arguments
must validate against the function's schema (Python jsonschema), streamed
(the first delta of a call carries id and name, then argument fragments)
and not; parallel_tool_calls false gives exactly one call; "none" gives
plain content; "auto" gives content or valid calls, and with a
response_format calls or content of that format; a conversation that
sends a tool result back; the legacy functions/function_call; the 400s
naming the field; and nothing held afterwards.  Prints TAP; needs nginx,
jsonschema and openai (scripts/install-deps --test) and the default model.

Environment: HY_SRCDIR (source tree), HYSERVE (the binary).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import taplib as t  # noqa: E402

try:
    import jsonschema
    import openai
except ImportError:
    jsonschema = None

if t.NGINX is None or jsonschema is None:
    t.skip_all("needs nginx and the python jsonschema and openai packages "
               "(scripts/install-deps --test)")

MODEL = t.DEFAULT_MODEL
t.require_models([(MODEL, "scripts/fetch-default-model")])
ok = t.ok
MODEL_ID = os.path.basename(MODEL)[:-5]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 40},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
CONVERT = {
    "type": "function",
    "function": {
        "name": "convert_currency",
        "description": "Convert an amount between currencies",
        "parameters": {
            "type": "object",
            "properties": {
                "amount": {"type": "number", "minimum": 0, "maximum": 1000000},
                "from": {"type": "string", "pattern": "^[A-Z]{3}$"},
                "to": {"type": "string", "pattern": "^[A-Z]{3}$"},
            },
            "required": ["amount", "from", "to"],
        },
    },
}
TOOLS = [WEATHER, CONVERT]
SCHEMAS = {x["function"]["name"]: x["function"]["parameters"] for x in TOOLS}
USER = [{"role": "user", "content": "What is the weather like in Paris today?"}]


def valid_call(name, args):
    """The call names an offered function and its arguments (a JSON
    string) validate against that function's schema."""
    if name not in SCHEMAS:
        return "unknown function %r" % name
    try:
        jsonschema.validate(json.loads(args), SCHEMAS[name])
    except Exception as e:  # noqa: BLE001 - the reason is the diagnostic
        return "%s: %s" % (type(e).__name__, str(e).splitlines()[0])
    return None


def check_calls(calls, what):
    bad = [valid_call(c.function.name, c.function.arguments) for c in calls]
    ids = [c.id for c in calls]
    ok(len(calls) >= 1 and not any(bad) and all(c.type == "function" for c in calls) and
       all(i and i.startswith("call_") for i in ids) and len(set(ids)) == len(ids),
       "%s: %d call(s), arguments validate against the schema (%s)" %
       (what, len(calls), [(c.function.name, c.function.arguments) for c in calls] + bad))


def stream_calls(client, **kw):
    """Runs a streamed request; returns (content, calls as
    [{"id","name","arguments"}], finish_reason, whether every call's first
    delta had id and name and no later one did)."""
    calls, content, finish, shape_ok = {}, "", None, True
    for chunk in client.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        if ch.finish_reason:
            finish = ch.finish_reason
        d = ch.delta
        if d.content:
            content += d.content
        for tc in d.tool_calls or []:
            if tc.index not in calls:
                shape_ok &= bool(tc.id) and bool(tc.function and tc.function.name) and \
                    tc.type == "function"
                calls[tc.index] = {"id": tc.id, "name": tc.function.name,
                                   "arguments": tc.function.arguments or ""}
            else:
                shape_ok &= tc.id is None and (tc.function.name is None)
                calls[tc.index]["arguments"] += tc.function.arguments or ""
    return content, [calls[k] for k in sorted(calls)], finish, shape_ok


def run(client):
    base = dict(model=MODEL_ID, max_tokens=200, temperature=0.8, seed=7)

    # required, not streamed: parallel calls allowed (at most 8)
    r = client.chat.completions.create(messages=USER, tools=TOOLS, tool_choice="required",
                                       **dict(base, max_tokens=600))
    m = r.choices[0]
    ok(m.finish_reason == "tool_calls" and m.message.tool_calls,
       "required: finish_reason tool_calls (%s, content %r)" % (m.finish_reason,
                                                                 m.message.content))
    check_calls(m.message.tool_calls or [], "required")

    # several seeds at temperature 1: always valid
    bad = []
    for seed in range(8):
        r = client.chat.completions.create(messages=USER, tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=False,
                                           **dict(base, seed=100 + seed, temperature=1.0))
        c = r.choices[0]
        if c.finish_reason != "tool_calls" or not c.message.tool_calls:
            bad.append((seed, c.finish_reason, c.message.content))
            continue
        for tc in c.message.tool_calls:
            why = valid_call(tc.function.name, tc.function.arguments)
            if why:
                bad.append((seed, why))
    ok(not bad, "required at temperature 1, 8 seeds: every call validates %s" % bad)

    # required, streamed
    content, calls, finish, shape = stream_calls(client, messages=USER, tools=TOOLS,
                                                 tool_choice="required",
                                                 **dict(base, max_tokens=600))
    errs = [valid_call(c["name"], c["arguments"]) for c in calls]
    ok(finish == "tool_calls" and calls and not any(errs) and shape and not content.strip(),
       "required, streamed: id and name first, then argument fragments that validate "
       "(%s %s %s content %r)" % (finish, calls, errs, content))

    # a named function, one call
    r = client.chat.completions.create(
        messages=[{"role": "user", "content": "How many euros are 100 dollars?"}], tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "convert_currency"}}, **base)
    tc = r.choices[0].message.tool_calls or []
    ok(len(tc) == 1 and tc[0].function.name == "convert_currency" and
       r.choices[0].finish_reason == "tool_calls",
       "named function: exactly one call of it (%s)" % [(x.function.name) for x in tc])
    check_calls(tc, "named")

    # parallel_tool_calls false: one call
    r = client.chat.completions.create(messages=USER, tools=TOOLS, tool_choice="required",
                                       parallel_tool_calls=False, **base)
    ok(len(r.choices[0].message.tool_calls or []) == 1,
       "parallel_tool_calls false: one call")

    # none: plain content, no calls
    r = client.chat.completions.create(messages=USER, tools=TOOLS, tool_choice="none", **base)
    ok(not r.choices[0].message.tool_calls and isinstance(r.choices[0].message.content, str) and
       r.choices[0].finish_reason in ("stop", "length"),
       "tool_choice none: content, no tool_calls")

    # auto: content or valid calls
    r = client.chat.completions.create(messages=USER, tools=TOOLS, **base)
    c = r.choices[0]
    if c.message.tool_calls:
        ok(c.finish_reason == "tool_calls", "auto: called tools")
        check_calls(c.message.tool_calls, "auto")
    else:
        ok(c.finish_reason in ("stop", "length") and c.message.content is not None,
           "auto: answered in text (%s)" % c.finish_reason)

    # auto after an example call (SmolLM2 then calls by itself): the lazy
    # grammar takes over at <tool_call>; streamed and not
    shots = [{"role": "user", "content": "What is the weather in Rome?"},
             {"role": "assistant", "content": None,
              "tool_calls": [{"id": "call_1", "type": "function",
                              "function": {"name": "get_weather",
                                           "arguments": '{"city": "Rome", "unit": "celsius"}'}}]},
             {"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(messages=shots, tools=TOOLS, **base)
    c = r.choices[0]
    ok(c.finish_reason == "tool_calls" and c.message.tool_calls and not c.message.content,
       "auto after an example: the model calls (%s, %r)" % (c.finish_reason, c.message.content))
    check_calls(c.message.tool_calls or [], "auto after an example")
    content, calls, finish, shape = stream_calls(client, messages=shots, tools=TOOLS, **base)
    errs = [valid_call(x["name"], x["arguments"]) for x in calls]
    ok(finish == "tool_calls" and calls and shape and not any(errs) and
       [x["arguments"] for x in calls] == [x.function.arguments for x in c.message.tool_calls],
       "auto after an example, streamed: the same call in deltas (%s %s %s)" %
       (finish, calls, errs))

    # a conversation that sends the tool result back
    first = client.chat.completions.create(messages=USER, tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=False, **base)
    call = first.choices[0].message.tool_calls[0]
    history = USER + [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": call.id, "type": "function",
                         "function": {"name": call.function.name,
                                      "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id,
         "content": json.dumps({"temperature": 18, "sky": "sunny"})},
    ]
    r = client.chat.completions.create(messages=history, tools=TOOLS, tool_choice="none",
                                       **base)
    short = client.chat.completions.create(messages=history[:2], tools=TOOLS,
                                           tool_choice="none", **dict(base, max_tokens=1))
    ok(r.choices[0].message.content and not r.choices[0].message.tool_calls and
       r.usage.prompt_tokens > short.usage.prompt_tokens + 10,
       "multi-turn: the call and its result are rendered (%d > %d prompt tokens without the "
       "result), the answer is text: %r" %
       (r.usage.prompt_tokens, short.usage.prompt_tokens, r.choices[0].message.content[:80]))
    r = client.chat.completions.create(messages=history, tools=TOOLS, tool_choice="required",
                                       **base)
    check_calls(r.choices[0].message.tool_calls or [], "multi-turn, a second round of calls")

    # auto with a response_format: the answer is either calls or content of
    # the format, never free text; both ways must occur
    answer = {"type": "object", "properties": {"summary": {"type": "string", "maxLength": 80},
                                               "sunny": {"type": "boolean"}},
              "required": ["summary", "sunny"], "additionalProperties": False}
    rf = {"type": "json_schema", "json_schema": {"name": "answer", "schema": answer}}
    seen = {"calls": 0, "content": 0}
    # an example answer in the format (SmolLM2 then answers in content)
    other = [{"role": "user", "content": "Summarise: it rained all day in Oslo."},
             {"role": "assistant", "content": '{"summary": "Rain all day in Oslo.", '
                                              '"sunny": false}'},
             {"role": "user", "content": "Summarise: the cat slept in the sun all afternoon."}]
    for seed, msgs in [(1, USER), (2, other), (3, shots), (4, other), (5, shots), (6, other)]:
        r = client.chat.completions.create(messages=msgs, tools=TOOLS, response_format=rf,
                                           parallel_tool_calls=seed % 2 == 1,
                                           **dict(base, seed=seed, max_tokens=600))
        c = r.choices[0]
        if c.message.tool_calls:
            seen["calls"] += 1
            ok(c.finish_reason == "tool_calls" and not c.message.content,
               "auto + response_format, seed %d: calls and no content (%s)" %
               (seed, c.finish_reason))
            check_calls(c.message.tool_calls, "auto + response_format, seed %d" % seed)
        else:
            seen["content"] += 1
            try:
                jsonschema.validate(json.loads(c.message.content), answer)
                why = None
            except Exception as e:  # noqa: BLE001 - the reason is the diagnostic
                why = "%s: %s" % (type(e).__name__, str(e).splitlines()[0])
            ok(why is None and c.finish_reason in ("stop", "length"),
               "auto + response_format, seed %d: the content validates against the format "
               "(%s, %r%s)" % (seed, c.finish_reason, c.message.content,
                               "" if why is None else "; " + why))
    ok(seen["calls"] > 0 and seen["content"] > 0,
       "auto + response_format: %d answered with calls, %d with content" %
       (seen["calls"], seen["content"]))
    content, calls, finish, shape = stream_calls(client, messages=USER, tools=TOOLS,
                                                 tool_choice="required", response_format=rf,
                                                 **dict(base, max_tokens=600))
    errs = [valid_call(x["name"], x["arguments"]) for x in calls]
    ok(finish == "tool_calls" and calls and shape and not any(errs) and not content.strip(),
       "required + response_format, streamed: calls only (%s %s %s)" % (finish, calls, errs))

    # legacy functions / function_call
    r = client.chat.completions.create(messages=USER, functions=[WEATHER["function"]],
                                       function_call={"name": "get_weather"}, **base)
    fc = r.choices[0].message.function_call
    ok(r.choices[0].finish_reason == "function_call" and fc is not None and
       fc.name == "get_weather" and valid_call(fc.name, fc.arguments) is None,
       "legacy functions: function_call that validates (%s)" % fc)


def run_errors():
    def err(body, param, msg):
        st, _, b = STACK.http("POST", "/v1/chat/completions",
                              dict({"model": MODEL_ID, "messages": USER}, **body))
        e = json.loads(b).get("error", {}) if b else {}
        ok(st == 400 and e.get("param") == param and msg in e.get("message", ""),
           "400 %s: %s (%d %s)" % (param, msg, st, e))

    err({"tools": [{"type": "function", "function": {"description": "x"}}]}, "tools",
        "tools[0].function.name: expected a string, got nothing")
    err({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
        "tools", "tools[0].function.parameters: must be a JSON Schema of type \"object\"")
    err({"tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object",
                                    "properties": {"a": {"type": "string", "not": {}}}}}}]},
        "tools", "Invalid schema for tools[0].function.parameters: /properties/a")
    err({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
        "tool_choice", "tool_choice: no function named 'nope' in tools")
    err({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice",
        "tool_choice = 'sometimes': must be none, auto, required or a function object")
    err({"tools": TOOLS, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "array", "uniqueItems": True}}}}, "response_format",
        "'uniqueItems': true is not supported")
    err({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls",
        "parallel_tool_calls: expected a boolean, got a string")


def main():
    global STACK
    STACK = t.Stack(model=MODEL, workers=2, ini={"engine": {"max_context": 2048}})
    keep = False
    try:
        if not STACK.start(timeout=120):
            ok(False, "stack starts (%s)" % t.tail(STACK.serve_log_path))
            return
        client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % STACK.port, api_key="x",
                               max_retries=0, timeout=300)
        run(client)
        run_errors()
        idle = t.wait_for(lambda: "hyserve_request_slots_used 0" in
                          STACK.http("GET", "/metrics")[2].decode(), 20)
        ok(idle, "afterwards no request slot is held")
        keep = t.failed()
    finally:
        STACK.cleanup(keep=keep)


STACK = None
main()
t.done()
