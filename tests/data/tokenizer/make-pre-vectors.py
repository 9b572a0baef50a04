#!/usr/bin/env python3
"""make-pre-vectors.py - expected token ids for every pre-tokenizer name,
from llama.cpp itself.  Run by hand (CI does not run it; its outputs are
committed):

    make-pre-vectors.py LLAMA_CPP_SRC TOKENIZE_BIN [--missing]

LLAMA_CPP_SRC is a llama.cpp checkout (34af94cd): the accepted
tokenizer.ggml.pre names are read from its src/llama-vocab.cpp, and its
gguf-py writes the test vocabularies.  TOKENIZE_BIN is a program that takes
VOCAB.gguf CORPUS.inp and prints, per text, the ids llama_tokenize() gives
(no BOS/EOS, special tokens not parsed), one line each, space separated:
llama.cpp's llama-tokenize run per text, or the small driver in README.md.

It writes
  ggml-vocab-utf8-bpe.gguf  a raw-UTF-8 BPE vocabulary (U+2581 for space,
                            <0xNN> byte tokens) derived from the GPT-2 one,
                            for the names whose BPE does not byte-encode;
  pre/NAME.out              the ids of pre-corpus.inp with NAME as
                            tokenizer.ggml.pre over the GPT-2 vocabulary
                            (or the UTF-8 one).  A text on which llama.cpp
                            aborts (an assertion; "whitespace" over a
                            gpt2-type vocabulary does on runs of spaces)
                            gets the line "# llama.cpp aborts" instead.
--missing only writes the pre/NAME.out files that do not exist yet.
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# Names whose words stay UTF-8 (llama.cpp's byte_encode = false).
RAW_UTF8 = {"gemma4", "granite-embed-multi-311m", "sarvam-moe", "whitespace"}


def accepted_names(src):
    text = open(os.path.join(src, "src", "llama-vocab.cpp"), encoding="utf-8").read()
    start = text.index('} else if (tokenizer_pre == "default") {')
    end = text.index('unknown pre-tokenizer type', start)
    names = ["default"]
    for m in re.finditer(r'tokenizer_pre == "([^"]+)"', text[start:end]):
        if m.group(1) not in names:
            names.append(m.group(1))
    return names


def gpt2_byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def copy_vocab(gguf, src_path, dst_path, overrides):
    """Writes src's metadata to dst with overrides {key: value} (strings)."""
    r = gguf.GGUFReader(src_path)
    w = gguf.GGUFWriter(dst_path, r.fields["general.architecture"].contents())
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        if key in overrides:
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_array(key, overrides.get(key, field.contents()))
        else:
            w.add_key_value(key, field.contents(), vtype)
    for key, value in overrides.items():
        if isinstance(value, list):
            w.add_array(key, value)
        else:
            w.add_key_value(key, value, gguf.GGUFValueType.STRING)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


def make_utf8_vocab(gguf, gpt2_path, out_path):
    r = gguf.GGUFReader(gpt2_path)
    dec = gpt2_byte_decoder()
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    merges = r.fields["tokenizer.ggml.merges"].contents()

    def to_utf8(t):
        try:
            return bytes(dec[c] for c in t).decode("utf-8").replace(" ", "\u2581")
        except (KeyError, UnicodeDecodeError):
            return None

    out_tokens, out_types = [], []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        u = t if ty == 3 else to_utf8(t)
        if u is None:  # a partial UTF-8 sequence: no such token in a UTF-8 vocabulary
            out_tokens.append("<unused%d>" % i)
            out_types.append(5)
        else:
            out_tokens.append(u)
            out_types.append(ty)
    for b in range(256):
        out_tokens.append("<0x%02X>" % b)
        out_types.append(6)
    out_merges = []
    for m in merges:
        a, b = m.split(" ", 1)
        ua, ub = to_utf8(a), to_utf8(b)
        if ua is not None and ub is not None:
            out_merges.append(ua + " " + ub)
    w = gguf.GGUFWriter(out_path, "gpt2")
    w.add_name("utf8-bpe (derived from the GPT-2 vocabulary)")
    w.add_block_count(1)
    w.add_context_length(1024)
    w.add_embedding_length(64)
    w.add_feed_forward_length(256)
    w.add_head_count(1)
    w.add_layer_norm_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gemma4")
    w.add_token_list(out_tokens)
    w.add_token_types(out_types)
    w.add_token_merges(out_merges)
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_eos_token_id(tokens.index("<|endoftext|>"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


SEP = b"\n__ggml_vocab_test__\n"


def tokenize_all(tokenize, vocab, corpus, tmp):
    """The ids of every text; one process per text if the whole run aborts."""
    run = subprocess.run([tokenize, vocab, corpus], capture_output=True)
    if run.returncode == 0:
        return run.stdout
    out = b""
    texts = open(corpus, "rb").read().split(SEP)[:-1]
    for t in texts:
        one = os.path.join(tmp, "one.inp")
        with open(one, "wb") as f:
            f.write(t + SEP)
        r = subprocess.run([tokenize, vocab, one], capture_output=True)
        out += r.stdout if r.returncode == 0 else b"# llama.cpp aborts\n"
    return out


def main():
    if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and sys.argv[3] != "--missing"):
        sys.exit(__doc__)
    src, tokenize = sys.argv[1], sys.argv[2]
    only_missing = len(sys.argv) == 4
    sys.path.insert(0, os.path.join(src, "gguf-py"))
    import gguf

    gpt2 = os.path.join(HERE, "ggml-vocab-gpt-2.gguf")
    utf8 = os.path.join(HERE, "ggml-vocab-utf8-bpe.gguf")
    corpus = os.path.join(HERE, "pre-corpus.inp")
    if not (only_missing and os.path.exists(utf8)):
        make_utf8_vocab(gguf, gpt2, utf8)
    os.makedirs(os.path.join(HERE, "pre"), exist_ok=True)
    names = accepted_names(src)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            path = os.path.join(HERE, "pre", name + ".out")
            if only_missing and os.path.exists(path):
                continue
            vocab = os.path.join(tmp, "v.gguf")
            copy_vocab(gguf, utf8 if name in RAW_UTF8 else gpt2, vocab, {"tokenizer.ggml.pre": name})
            out = tokenize_all(tokenize, vocab, corpus, tmp)
            with open(path, "wb") as f:
                f.write(out)
    print("%d names" % len(names))


if __name__ == "__main__":
    main()
