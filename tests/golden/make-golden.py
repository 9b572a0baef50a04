#!/usr/bin/env python3
"""make-golden.py - regenerate the golden reference for hyserve's dense
forward pass (tests/golden/smollm2/) from the pinned SmolLM2-135M-Instruct
Q4_1 GGUF, using Hugging Face transformers (float32, CPU) as the independent
implementation.  transformers dequantizes the very same GGUF through gguf-py,
so the reference differs from an exact C engine only by float32 rounding.

Developer-only: needs torch, transformers, accelerate, gguf, numpy.  CI never
runs this; it runs check-golden.py (numpy only) against the committed files.
The output format is described in tests/golden/README.md.

Usage: tests/golden/make-golden.py [--model PATH] [--out DIR] [--threads N]
"""

import argparse
import hashlib
import json
import os
import platform
import sys
import time

import numpy as np

SRCDIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = os.path.join(SRCDIR, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_OUT = os.path.join(SRCDIR, "tests", "golden", "smollm2")
# Pinned in scripts/fetch-default-model too: the goldens are only meaningful
# for these exact bytes.
PINNED_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

N_CONTINUE = 32          # greedy tokens generated after each prompt
FULL_EVERY = 8           # full logits stored for every 8th position ...
TOP_K = 5                # ... and top-5 for every position
# A greedy token whose top-2 margin exceeds this must be reproduced by any
# correct engine; check-golden.py uses the same value by default.
MARGIN = 0.5

# Fixed prompts, chosen to exercise different tokenizer and model paths.
# "chat" is rendered by the model's own chat template (see render_prompts).
PLAIN_PROMPTS = [
    ("prose",
     "The history of the printing press begins in the fifteenth century, when "
     "Johannes Gutenberg combined movable metal type with an oil-based ink and "
     "a wooden screw press. Within fifty years"),
    ("code",
     "def fibonacci(n):\n"
     "    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
     "    if n < 2:\n"
     "        return n\n"
     "    a, b = 0, 1\n"
     "    for _ in range(n - 1):\n"),
    # Multi-byte UTF-8 (2, 3 and 4 bytes), digits, punctuation runs.
    ("unicode",
     "Prices: €12.50, ¥1,999 & £3.14 — 42% off!!! Naïve café in 東京 🙂. "
     "Check: 3*7=21, 2^10=1024; date 2024-02-29T23:59:59Z;"),
    # A one-token prompt: position 0 with nothing cached, RoPE at 0.
    ("short", "Once"),
]
CHAT_MESSAGES = [
    {"role": "system", "content": "You are a concise assistant."},
    {"role": "user", "content": "Name three primary colours."},
    {"role": "assistant", "content": "Red, yellow and blue."},
    {"role": "user", "content": "And what do you get by mixing the first two?"},
]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_prompt_files(out, name, text, ids, p, lines):
    """NAME.prompt.txt, NAME.ids and NAME.top.txt (lines: top_lines())."""
    with open(os.path.join(out, name + ".prompt.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(text)
    with open(os.path.join(out, name + ".ids"), "w") as f:
        f.write(" ".join(str(i) for i in ids) + "\n%d\n" % p)
    with open(os.path.join(out, name + ".top.txt"), "w") as f:
        f.write("# pos argmax margin id1 logit1 ... id%d logit%d  (%s, %d tokens, "
                "prompt %d)\n" % (TOP_K, TOP_K, name, len(ids), p))
        f.write("\n".join(lines) + "\n")


def parse_args(doc, default_model, default_out):
    """The generators' command line: --model, --out, --threads."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--model", default=default_model, help="the pinned GGUF file")
    ap.add_argument("--out", default=default_out, help="output directory")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads")
    return ap.parse_args()


def load_pinned(path, pinned_sha256, fetch, threads):
    """The pinned GGUF file, checked, and transformers' float32 model and
    tokenizer read from it: (sha256, torch, tokenizer, model)."""
    if not os.path.isfile(path):
        sys.exit("make-golden: %s not found (run %s)" % (path, fetch))
    digest = sha256_file(path)
    if digest != pinned_sha256:
        sys.exit("make-golden: %s has sha256 %s, expected the pinned %s"
                 % (path, digest, pinned_sha256))
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if threads > 0:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    mdir, mfile = os.path.split(os.path.abspath(path))
    tok = AutoTokenizer.from_pretrained(mdir, gguf_file=mfile)
    model = AutoModelForCausalLM.from_pretrained(mdir, gguf_file=mfile, dtype=torch.float32)
    model.eval()
    return digest, torch, tok, model


def generator_info(torch, cfg, **more):
    """What made a golden set (the manifest's "generator")."""
    import transformers
    import gguf

    info = {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__,
            "gguf_py": getattr(gguf, "__version__", None) or _dist_version("gguf")}
    info.update(more)
    info.update({"numpy": np.__version__, "dtype": "float32",
                 "attn_implementation": getattr(cfg, "_attn_implementation", None),
                 "torch_threads": torch.get_num_threads()})
    return info


def render_prompts(tok):
    prompts = list(PLAIN_PROMPTS)
    chat = tok.apply_chat_template(CHAT_MESSAGES, tokenize=False,
                                   add_generation_prompt=True)
    prompts.insert(2, ("chat", chat))
    return prompts


def tokenize(tok, name, text, bos_id):
    ids = tok(text, add_special_tokens=True)["input_ids"]
    if not ids:
        sys.exit("make-golden: prompt %s tokenized to nothing" % name)
    # add_bos_token is false for this model: a plain prompt must not start
    # with BOS.  The chat prompt starts with <|im_start|>, which *is* the BOS
    # id (1), but there it comes from the text, once.
    if name != "chat" and ids[0] == bos_id:
        sys.exit("make-golden: tokenizer prepended BOS to %s" % name)
    if name == "chat" and ids[:2] == [bos_id, bos_id]:
        sys.exit("make-golden: tokenizer prepended BOS to the chat prompt")
    back = tok.decode(ids, skip_special_tokens=False)
    if back != text:
        sys.exit("make-golden: %s does not round-trip through the tokenizer" % name)
    return ids


def greedy(model, torch, prompt_ids, n):
    """Greedy decoding with the KV cache, not stopping at EOS: the engine is
    compared on argmax only, and ignoring EOS keeps every sequence the same
    length and free of sampler policy."""
    import inspect
    # transformers renamed past_key_values to cache (5.x); accept both.
    kw = "cache" if "cache" in inspect.signature(model.forward).parameters \
        else "past_key_values"
    out = []
    with torch.no_grad():
        res = model(torch.tensor([prompt_ids]), use_cache=True)
        for _ in range(n):
            nxt = int(torch.argmax(res.logits[0, -1]))
            out.append(nxt)
            res = model(torch.tensor([[nxt]]), use_cache=True,
                        **{kw: getattr(res, kw)})
    return out


def top_lines(logits):
    """One text line per position: pos argmax margin (id logit) x TOP_K."""
    order = np.argsort(-logits, axis=1, kind="stable")[:, :TOP_K]
    lines = []
    for pos in range(logits.shape[0]):
        ids = order[pos]
        vals = logits[pos, ids]
        fields = ["%d" % pos, "%d" % ids[0], "%.6f" % (vals[0] - vals[1])]
        for i, v in zip(ids, vals):
            fields += ["%d" % i, "%.6f" % v]
        lines.append(" ".join(fields))
    return lines


def q4_1_decode(raw, n):
    """Independent Q4_1 decoder written from the ggml block layout (f16 d,
    f16 m, 16 bytes: low nibbles are elements 0-15, high nibbles 16-31),
    to cross-check gguf-py before its numbers become the reference."""
    blocks = np.frombuffer(raw.tobytes(), dtype=np.uint8).reshape(-1, 20)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    qs = blocks[:, 4:20]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
    return (d * q + m).reshape(-1)[:n]


def q8_0_decode(raw, n):
    """Independent Q8_0 decoder: f16 d, then 32 int8."""
    blocks = np.frombuffer(raw.tobytes(), dtype=np.uint8).reshape(-1, 34)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    q = blocks[:, 2:34].copy().view(np.int8).astype(np.float32)
    return (q * d).reshape(-1)[:n]


def dequant_check(model_path, model, n_head, n_head_kv):
    """Sample dequantized values of two tensors, in GGUF element order, and
    prove three implementations agree on them: gguf-py (what transformers
    uses), the decoders above, and the weights inside the loaded model."""
    import gguf
    reader = gguf.GGUFReader(model_path)
    tensors = {t.name: t for t in reader.tensors}
    sd = model.state_dict()
    hf_name = {"token_embd.weight": "model.embed_tokens.weight",
               "blk.0.attn_q.weight": "model.layers.0.self_attn.q_proj.weight"}
    own = {"Q4_1": q4_1_decode, "Q8_0": q8_0_decode}
    rng = np.random.default_rng(20240229)
    lines = ["# Dequantized weights of the pinned SmolLM2-135M-Instruct Q4_1 GGUF,",
             "# as gguf-py %s (used by transformers) computes them." % getattr(
                 gguf, "__version__", "?"),
             "# Columns: tensor_name ggml_type ne0 ne1 flat_index value",
             "# flat_index is in GGUF/ggml element order: row * ne0 + col, ne0 the",
             "# contiguous (input) dimension; blocks of 32 run along ne0.  attn_q is",
             "# as stored in the file (llama.cpp's row permutation for interleaved",
             "# RoPE), not transformers' un-permuted q_proj.  value is float32 printed",
             "# with %.9g (round-trips); Q4_1 is d*q+m, so an engine using fma may",
             "# differ by 1 ulp: compare with a relative tolerance of ~1e-6."]
    for name in ("blk.0.attn_q.weight", "token_embd.weight"):
        t = tensors[name]
        ne0, ne1 = int(t.shape[0]), int(t.shape[1])
        n = ne0 * ne1
        ref = gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1).astype(np.float32)
        mine = own[t.tensor_type.name](t.data, n)
        if ref.shape != (n,) or not np.array_equal(ref, mine):
            sys.exit("make-golden: gguf-py and the independent decoder disagree on %s" % name)
        w = sd[hf_name[name]].detach().cpu().numpy()      # [ne1][ne0]
        if name == "blk.0.attn_q.weight":
            # Undo transformers' reverse permutation (llama.cpp's permute).
            dim = w.shape[0] // n_head // 2
            w = w.reshape(n_head, 2, dim, ne0).swapaxes(1, 2).reshape(ne1, ne0)
        if not np.array_equal(w.reshape(-1), ref):
            sys.exit("make-golden: the model's %s differs from gguf-py's dequantization" % name)
        idx = {0, 1, 15, 16, 31, 32, 33, ne0 - 1, ne0, n // 2, n - 32, n - 1}
        idx |= set(int(i) for i in rng.integers(0, n, 12))
        for i in sorted(idx):
            lines.append("%s %s %d %d %d %.9g" % (name, t.tensor_type.name, ne0, ne1,
                                                  i, ref[i]))
    return lines


def main():
    args = parse_args(__doc__, DEFAULT_MODEL, DEFAULT_OUT)

    t0 = time.time()
    digest, torch, tok, model = load_pinned(args.model, PINNED_SHA256,
                                            "scripts/fetch-default-model", args.threads)
    cfg = model.config
    if getattr(tok, "add_bos_token", False):
        sys.exit("make-golden: tokenizer has add_bos_token set; this model's GGUF says false")
    n_vocab = int(cfg.vocab_size)
    t_load = time.time() - t0

    os.makedirs(args.out, exist_ok=True)
    manifest = {
        "format": 1,
        "model_file": os.path.basename(args.model),
        "gguf_sha256": digest,
        "n_vocab": n_vocab,
        "n_continue": N_CONTINUE,
        "full_logits_every": FULL_EVERY,
        "full_logits_dtype": "float16-le",
        "margin": MARGIN,
        "generator": generator_info(torch, cfg),
        "prompts": [],
    }

    total_bytes = 0
    for name, text in render_prompts(tok):
        t_prompt = time.time()
        prompt_ids = tokenize(tok, name, text, tok.bos_token_id)
        cont = greedy(model, torch, prompt_ids, N_CONTINUE)
        ids = prompt_ids + cont
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float().numpy()
        if logits.shape != (len(ids), n_vocab) or not np.isfinite(logits).all():
            sys.exit("make-golden: bad logits for %s" % name)
        p = len(prompt_ids)
        # The cached (greedy) and teacher-forced passes must agree wherever
        # the choice is clear, or the continuation check would contradict
        # the argmax check.
        srt = np.sort(logits, axis=1)
        margins = srt[:, -1] - srt[:, -2]
        tf_arg = logits.argmax(axis=1)
        for i, tokid in enumerate(cont):
            pos = p - 1 + i
            if tf_arg[pos] != tokid and margins[pos] > MARGIN:
                sys.exit("make-golden: %s: cached and teacher-forced argmax differ at %d"
                         % (name, pos))
        positions = sorted(set(range(0, len(ids), FULL_EVERY)) | {p - 1, len(ids) - 1})

        write_prompt_files(args.out, name, text, ids, p, top_lines(logits))
        logits[positions].astype("<f2").tofile(os.path.join(args.out, name + ".logits.f16"))
        for suffix in (".prompt.txt", ".ids", ".top.txt", ".logits.f16"):
            total_bytes += os.path.getsize(os.path.join(args.out, name + suffix))
        manifest["prompts"].append({
            "name": name, "n_tokens": len(ids), "prompt_len": p,
            "full_logits_positions": positions,
            "continuation_text": tok.decode(cont, skip_special_tokens=False),
        })
        print("make-golden: %-8s %3d tokens (prompt %3d), %2d full rows, %.1f s" %
              (name, len(ids), p, len(positions), time.time() - t_prompt))

    lines = dequant_check(args.model, model, int(cfg.num_attention_heads),
                          int(cfg.num_key_value_heads))
    with open(os.path.join(args.out, "dequant-check.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        f.write(manifest_json(manifest))
    for fn in ("dequant-check.txt", "manifest.json"):
        total_bytes += os.path.getsize(os.path.join(args.out, fn))
    print("make-golden: wrote %s (%.2f MB) in %.1f s (load %.1f s)"
          % (args.out, total_bytes / 1e6, time.time() - t0, t_load))


def manifest_json(manifest):
    """Indented JSON, but each prompt on one line so diffs stay readable."""
    prompts = manifest["prompts"]
    head = dict(manifest, prompts=[])
    text = json.dumps(head, indent=1, ensure_ascii=False)
    body = ",\n".join("  " + json.dumps(p, ensure_ascii=False) for p in prompts)
    return text.replace('"prompts": []', '"prompts": [\n' + body + "\n ]") + "\n"


def _dist_version(dist):
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return None


if __name__ == "__main__":
    main()
