#!/usr/bin/env python3
"""make-golden-gemma3.py - regenerate tests/golden/gemma3/, the reference for
hyserve's Gemma 3 forward pass (sliding-window attention, window 512, in 15 of
18 layers), from the pinned Gemma 3 270M Q4_K_M GGUF (scripts/fetch-model
gemma3-270m), using Hugging Face transformers (float32, CPU): it dequantizes
the very same file through gguf-py, so an exact engine differs from it only
by float32 rounding and summation order.

The format is make-golden.py's (tests/golden/README.md) with changes that a
262,144-token vocabulary forces: a full logit row is 1 MiB in float32, so
for a few positions per prompt only every ROW_STRIDE-th vocabulary entry is
stored (float32, 16,384 of them: 64 KiB a row), plus the top-5 and argmax
of every position in NAME.top.txt.  The relative RMS error of the sample
estimates the whole row's (the "sensitivity" entry records both for a
sliding window off by one, where the error is spread over the vocabulary).
One prompt is longer than 1,500 tokens, so that the sliding layers see only
the last 512 of them; its end asks for a fact stated at its start, which
only the 3 global layers can still read.  A sliding window off by one moves
its rows by only 5e-4 to 1.5e-3 (relative RMS), so rows are float32 (float16
storage alone would add 2e-4) and the tolerance sits between the engine's
rounding and that bug.  The manifest records those figures and the
tolerance per prompt.

Developer-only: needs torch, transformers, gguf, numpy, jinja2.  CI runs
check-golden.py --golden tests/golden/gemma3 (numpy only).

Usage: tests/golden/make-golden-gemma3.py [--model PATH] [--out DIR] [--threads N]
"""

import importlib.util
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.path.dirname(os.path.dirname(HERE))
DEFAULT_MODEL = os.path.join(SRCDIR, "models", "gemma-3-270m-q4_k_m.gguf")
DEFAULT_OUT = os.path.join(HERE, "gemma3")
# Pinned in scripts/fetch-model too.
PINNED_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
FETCH = "scripts/fetch-model gemma3-270m"
N_CONTINUE = 32
MARGIN = 0.5
# The tolerances check-golden.py applies (manifest "rel_rms", per prompt);
# tests/golden/README.md says why these values: the long prompt's sits
# below what a window off by one does, the short prompts (never past the
# window) get about twice the largest error measured on them.
REL_RMS_LONG = 3e-4
REL_RMS_SHORT = 6e-4
# Every ROW_STRIDE-th vocabulary entry of a stored row (manifest "row_stride").
ROW_STRIDE = 16
CHUNK = 64               # positions per output-matrix product (64 x 262144 floats)


def load_sibling(path, name):
    """The helpers of make-golden.py and tests/unit/chat/make-expected.py
    (file names with dashes, so not importable by name)."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GOLD = load_sibling(os.path.join(HERE, "make-golden.py"), "make_golden")
CHAT = load_sibling(os.path.join(SRCDIR, "tests", "unit", "chat", "make-expected.py"),
                    "make_expected")

CHAT_MESSAGES = [
    {"role": "system", "content": "You are a concise assistant."},
    {"role": "user", "content": "Name three primary colours."},
    {"role": "assistant", "content": "Red, yellow and blue."},
    {"role": "user", "content": "And what do you get by mixing the first two?"},
]

# The long prompt: a register whose first lines state two facts, then enough
# entries to push them more than a window behind, then a question about them.
TOWNS = ["Aberdeen", "Bergen", "Cadiz", "Dubrovnik", "Esbjerg", "Faro", "Genoa",
         "Hamburg", "Izmir", "Jaffa", "Kiel", "Lisbon", "Malmo", "Naples", "Oporto",
         "Piraeus", "Quimper", "Riga", "Split", "Tallinn", "Valletta", "Wismar"]
CARGO = ["salted cod", "oak barrels", "copper wire", "wool bales", "olive oil",
         "roof slates", "coffee sacks", "glass bottles", "rope coils", "tin plate",
         "dried figs", "linen cloth", "pine resin", "iron nails"]
WEATHER = ["a calm sea", "a north-westerly gale", "thick fog", "light rain",
           "a clear sky", "a heavy swell", "sleet at dawn"]


def long_prompt():
    lines = ["Harbour register of the port of Ardmore, kept by the harbour master.",
             "",
             "Before the entries: the harbour master is Marguerite Olsen, and the code "
             "of the strong room where the register is locked each night is 4417. "
             "Only she and her deputy know it.",
             ""]
    for i in range(44):
        town = TOWNS[(i * 7) % len(TOWNS)]
        cargo = CARGO[(i * 5 + 3) % len(CARGO)]
        weather = WEATHER[(i * 3 + 1) % len(WEATHER)]
        tons = 40 + (i * 37) % 260
        day = 1 + i % 28
        lines.append("Entry %d, day %d: the %s arrived from %s with %d tons of %s, "
                     "berthed at quay %d under %s." %
                     (i + 1, day, "schooner" if i % 3 else "steamer", town, tons, cargo,
                      1 + i % 6, weather))
    lines += ["",
              "Question: who is the harbour master, and what is the code of the strong room?",
              "Answer: The harbour master is"]
    return "\n".join(lines)


def render_prompts():
    src = open(os.path.join(SRCDIR, "tests", "unit", "chat", "gemma3.jinja"),
               encoding="utf-8").read()
    chat = CHAT.compile_like_transformers(src).render(
        messages=CHAT_MESSAGES, add_generation_prompt=True, bos_token="<bos>",
        eos_token="<eos>", tools=None, documents=None)
    plain = {n: t for n, t in GOLD.PLAIN_PROMPTS}
    return [("prose", plain["prose"]), ("code", plain["code"]), ("chat", chat),
            ("unicode", plain["unicode"]), ("long", long_prompt())]


def tokenize(tok, name, text, bos_id):
    # add_bos_token is true: plain prompts get BOS from the tokenizer; the
    # chat text starts with "<bos>" from the template and must not get a
    # second one (vLLM tokenizes rendered chats without special tokens).
    ids = tok(text, add_special_tokens=(name != "chat"))["input_ids"]
    if not ids or ids[0] != bos_id or (len(ids) > 1 and ids[1] == bos_id):
        sys.exit("make-golden: %s does not start with exactly one BOS" % name)
    return ids


def forward(model, torch, ids, keep, rows_only=False):
    """Teacher-forced pass; (top lines for every position, {pos: row},
    top-2 margins, argmax), or only the rows of keep when rows_only.
    The output product runs CHUNK positions at a time: the whole
    [n][262144] float32 matrix of the long prompt would be 2 GB."""
    with torch.no_grad():
        hidden = model.model(torch.tensor([ids])).last_hidden_state[0]
        lines, rows, margins, argmax = [], {}, [], []
        if rows_only:
            for p in keep:
                rows[p] = model.lm_head(hidden[p:p + 1]).float().numpy()[0]
            return None, rows, None, None
        for c0 in range(0, len(ids), CHUNK):
            logits = model.lm_head(hidden[c0:c0 + CHUNK]).float().numpy()
            if not np.isfinite(logits).all():
                sys.exit("make-golden: non-finite logits")
            for line in GOLD.top_lines(logits):
                pos, rest = line.split(" ", 1)
                lines.append("%d %s" % (int(pos) + c0, rest))
            srt = np.sort(logits, axis=1)
            margins.extend((srt[:, -1] - srt[:, -2]).tolist())
            argmax.extend(logits.argmax(axis=1).tolist())
            for p in keep:
                if c0 <= p < c0 + CHUNK:
                    rows[p] = logits[p - c0].copy()
    return lines, rows, np.array(margins), np.array(argmax)


def rel_rms(a, b):
    a = a - a.mean()
    b = b - b.mean()
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def sensitivity(model, torch, ids, positions, rows):
    """How far the long prompt's stored rows move when the window is wrong:
    off by one either way, or no window at all; measured on the stored
    sample (what check-golden.py compares) and, for the off-by-one cases,
    on the whole row, to show that the sample stands for it."""
    out = {}
    base = model.config.sliding_window
    for label, w in (("window 511", base - 1), ("window 513", base + 1),
                     ("no window", 1 << 20)):
        set_window(model, w)
        _, moved, _, _ = forward(model, torch, ids, positions, rows_only=True)
        out[label] = {str(p): float("%.3g" % rel_rms(moved[p][::ROW_STRIDE],
                                                     rows[p][::ROW_STRIDE]))
                      for p in positions}
        if w != 1 << 20:
            out[label + ", whole row"] = {str(p): float("%.3g" % rel_rms(moved[p], rows[p]))
                                          for p in positions}
    out["float16 storage"] = {
        str(p): float("%.3g" % rel_rms((rows[p] - rows[p].mean()).astype(np.float16)
                                       .astype(np.float32), rows[p])) for p in positions}
    set_window(model, base)
    return out


def set_window(model, w):
    model.config.sliding_window = w
    for layer in model.model.layers:
        if getattr(layer.self_attn, "sliding_window", None):
            layer.self_attn.sliding_window = w


def main():
    args = GOLD.parse_args(__doc__, DEFAULT_MODEL, DEFAULT_OUT)

    t0 = time.time()
    digest, torch, tok, model = GOLD.load_pinned(args.model, PINNED_SHA256, FETCH, args.threads)
    import jinja2

    cfg = model.config
    if getattr(cfg, "final_logit_softcapping", None):
        sys.exit("make-golden: forward() applies no soft-capping, but the config has it")
    n_vocab = int(cfg.vocab_size)

    os.makedirs(args.out, exist_ok=True)
    manifest = {
        "format": 1,
        "model_file": os.path.basename(args.model),
        "gguf_sha256": digest,
        "fetch": FETCH,
        "n_vocab": n_vocab,
        "n_continue": N_CONTINUE,
        "full_logits_centred": True,
        "row_stride": ROW_STRIDE,
        "margin": MARGIN,
        "sliding_window": int(cfg.sliding_window),
        "generator": GOLD.generator_info(torch, cfg, jinja2=jinja2.__version__),
        "prompts": [],
    }

    total_bytes = 0
    for name, text in render_prompts():
        t_prompt = time.time()
        prompt_ids = tokenize(tok, name, text, tok.bos_token_id)
        cont = GOLD.greedy(model, torch, prompt_ids, N_CONTINUE)
        ids = prompt_ids + cont
        p, n = len(prompt_ids), len(ids)
        if name == "long":
            if p <= 1500:
                sys.exit("make-golden: the long prompt has only %d tokens" % p)
            # inside the first window, well past it, the prompt's end, the last
            positions = [300, 1024, p - 1, n - 1]
        else:
            positions = [p - 1, n - 1]
        lines, rows, margins, tf_arg = forward(model, torch, ids, positions)
        for i, tokid in enumerate(cont):
            pos = p - 1 + i
            if tf_arg[pos] != tokid and margins[pos] > MARGIN:
                sys.exit("make-golden: %s: cached and teacher-forced argmax differ at %d"
                         % (name, pos))
        GOLD.write_prompt_files(args.out, name, text, ids, p, lines)
        stack = np.stack([(rows[q] - rows[q].mean())[::ROW_STRIDE] for q in positions])
        ext = ".logits.f32"
        stack.astype("<f4").tofile(os.path.join(args.out, name + ext))
        for suffix in (".prompt.txt", ".ids", ".top.txt", ext):
            total_bytes += os.path.getsize(os.path.join(args.out, name + suffix))
        entry = {"name": name, "n_tokens": n, "prompt_len": p,
                 "full_logits_positions": positions, "full_logits_dtype": "float32-le",
                 "rel_rms": REL_RMS_LONG if name == "long" else REL_RMS_SHORT,
                 "continuation_text": tok.decode(cont, skip_special_tokens=False)}
        if name == "long":
            entry["sensitivity"] = sensitivity(model, torch, ids, positions, rows)
        manifest["prompts"].append(entry)
        print("make-golden: %-8s %4d tokens (prompt %4d), %d sampled rows, %.1f s" %
              (name, n, p, len(positions), time.time() - t_prompt))

    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        f.write(GOLD.manifest_json(manifest))
    total_bytes += os.path.getsize(os.path.join(args.out, "manifest.json"))
    print("make-golden: wrote %s (%.2f MB) in %.1f s" % (args.out, total_bytes / 1e6,
                                                        time.time() - t0))


if __name__ == "__main__":
    main()
