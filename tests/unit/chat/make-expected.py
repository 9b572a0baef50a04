#!/usr/bin/env python3
"""make-expected.py - renders every test template with every conversation in
inputs.json through real jinja2, configured exactly as Hugging Face
transformers does it (transformers' own _compile_jinja_template when it is
installed, else an identical replica), and writes expected/*.expected plus
cases.json, the manifest test_chat_template.c follows.  Run it after changing
a template or inputs.json; commit its outputs (CI does not run Python).

gemma3.jinja is Google's Gemma 3 instruct template (the chat_template of the
gemma-3 -it tokenizer_config.json): the Gemma 3 270M GGUF that CI fetches
(scripts/fetch-model gemma3-270m) embeds no tokenizer.chat_template, so
hyserve carries the published one (src/model/chat_template.c, checked equal
to this file by test_chat_template).  It folds a system message into the first user
turn, requires user/assistant alternation and renders "assistant" as
"model".

The conversations tool_call_empty and empty_reply hold an assistant turn
with content "": what the server passes a template for content null or
absent (src/server/api.c, as vLLM does), so every template is checked to
render it.
"""
import json
import os
import sys
from datetime import datetime, timezone

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))


def compile_like_transformers(src):
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
        return _compile_jinja_template(src)
    except ImportError:
        pass

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["namespace"] = jinja2.utils.Namespace
    return env.from_string(src)


# The C side builds each message dict with these keys, in this order, and
# leaves out optional ones that are null; Python must pass identical dicts.
MSG_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content")


def normalise(msg):
    out = {"role": msg["role"], "content": msg.get("content")}
    for k in MSG_KEYS[2:]:
        if msg.get(k) is not None:
            out[k] = msg[k]
    return out


def main():
    inputs = json.load(open(os.path.join(HERE, "inputs.json"), encoding="utf-8"))
    fixed_now = datetime.fromtimestamp(inputs["now"], timezone.utc)
    os.makedirs(os.path.join(HERE, "expected"), exist_ok=True)
    cases = []
    for tname, tinfo in inputs["templates"].items():
        src = open(os.path.join(HERE, tname + ".jinja"), encoding="utf-8").read()
        tmpl = compile_like_transformers(src)
        # strftime_now must be deterministic for the expected files: the C
        # test passes the same instant as opts.now (interpreted as UTC).
        tmpl.globals["strftime_now"] = lambda fmt: fixed_now.strftime(fmt)
        for cname, conv in inputs["conversations"].items():
            msgs = [normalise(m) for m in conv]
            variants = [(agp, False, -1) for agp in (False, True)]
            if tinfo["tools"]:
                variants.append((True, True, -1))
            if tinfo["thinking"]:
                variants += [(True, False, 0), (True, False, 1)]
            for agp, with_tools, think in variants:
                kw = {}
                if tinfo["bos_token"] is not None:
                    kw["bos_token"] = tinfo["bos_token"]
                if tinfo["eos_token"] is not None:
                    kw["eos_token"] = tinfo["eos_token"]
                if think >= 0:
                    kw["enable_thinking"] = bool(think)
                # mirrors transformers' render_jinja_template(): tools and
                # documents are always passed (None when absent)
                case = {"template": tname, "conversation": cname, "add_generation_prompt": agp,
                        "tools": with_tools, "enable_thinking": think}
                try:
                    out = tmpl.render(messages=msgs, tools=inputs["tools"] if with_tools else None,
                                      documents=None, add_generation_prompt=agp, **kw)
                except jinja2.exceptions.TemplateError as e:
                    case["error"] = str(e)
                except (TypeError, ValueError, AttributeError) as e:
                    case["error"] = str(e)
                else:
                    fname = "%s.%s.g%d.t%d.k%d.expected" % (tname, cname, agp, with_tools, think)
                    with open(os.path.join(HERE, "expected", fname), "w", encoding="utf-8", newline="") as f:
                        f.write(out)
                    case["expected"] = "expected/" + fname
                cases.append(case)
    with open(os.path.join(HERE, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"generator": "make-expected.py, jinja2 " + jinja2.__version__, "cases": cases}, f,
                  indent=1, ensure_ascii=False)
        f.write("\n")
    print("%d cases, %d errors" % (len(cases), sum("error" in c for c in cases)), file=sys.stderr)


if __name__ == "__main__":
    main()
