#!/usr/bin/env python3
"""make-gguf-seeds.py - writes the seed corpus of tests/fuzz/fuzz_gguf.c into
tests/fuzz/corpus/gguf/: small GGUF files that open, and truncated copies of
them that must not.  The golden tiny models are float32 and up to 1.2 MB, far
past a fuzzer's useful input size, so the seeds are made here instead:

  valid-kv-all-types.gguf  one key of every metadata type, arrays of numbers,
                           of strings and an empty one, v3, alignment 32
  valid-tensors.gguf       tensors of several types (F32, F16, Q8_0, Q4_0,
                           Q4_K, Q6_K), 1..4 dimensions, alignment 64
  valid-v2.gguf            a version-2 file
  valid-no-tensors.gguf    metadata only
  valid-llama-vocab.gguf   the tiny golden llama's metadata (its 264-token
                           vocabulary and merges included) with two small
                           tensors in place of its weights
  trunc-*.gguf             prefixes of the valid files ending inside the
                           header, a key, a string, an array, the tensor
                           infos and the data: each must be refused

Written with gguf-py (the `gguf` package, as scripts/make-tiny-models uses);
run again only to change the corpus, then commit what it writes.  The file
names say what the replay expects: valid-* open, trunc-* are refused.

Usage: tests/fuzz/make-gguf-seeds.py [OUTDIR]
"""
import os
import struct
import sys

import numpy as np
import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "corpus", "gguf")
TINY = os.path.join(HERE, "..", "golden", "tiny", "llama.gguf")


def write(name, fill, arch="fuzz", alignment=None):
    path = os.path.join(OUT, name)
    w = gguf.GGUFWriter(path, arch)
    if alignment is not None:
        w.add_custom_alignment(alignment)
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def kv_all_types(w):
    w.add_uint8("fuzz.u8", 200)
    w.add_int8("fuzz.i8", -100)
    w.add_uint16("fuzz.u16", 60000)
    w.add_int16("fuzz.i16", -30000)
    w.add_uint32("fuzz.u32", 4000000000)
    w.add_int32("fuzz.i32", -2000000000)
    w.add_float32("fuzz.f32", 3.25)
    w.add_bool("fuzz.bool", True)
    w.add_string("fuzz.str", "h\u00e9llo \U0001f999")
    w.add_string("fuzz.empty_str", "")
    w.add_uint64("fuzz.u64", 2**63 + 5)
    w.add_int64("fuzz.i64", -(2**62))
    w.add_float64("fuzz.f64", -1.5e300)
    w.add_array("fuzz.arr_u32", [1, 2, 3, 4])
    w.add_array("fuzz.arr_i32", [-1, 0, 7])
    w.add_array("fuzz.arr_f32", [0.5, -0.25])
    w.add_array("fuzz.arr_str", ["a", "", "bc", "\u00e9"])
    w.add_array("fuzz.arr_bool", [True, False, True])
    w.add_array("fuzz.arr_empty", [])
    w.add_uint32("fuzz.block_count", 4)
    w.add_array("fuzz.layers_u32", [8, 0, 8, 16])
    w.add_tensor("t.f32", np.arange(8, dtype=np.float32))


def tensors(w):
    rng = np.random.default_rng(7)
    w.add_uint32("fuzz.n", 6)
    w.add_tensor("a.f32", rng.standard_normal(12, dtype=np.float32))
    w.add_tensor("b.f16", rng.standard_normal((2, 16)).astype(np.float16))
    for qname, qtype, rows in (("c.q8_0", gguf.GGMLQuantizationType.Q8_0, 2),
                               ("d.q4_0", gguf.GGMLQuantizationType.Q4_0, 1),
                               ("e.q4_k", gguf.GGMLQuantizationType.Q4_K, 1),
                               ("f.q6_k", gguf.GGMLQuantizationType.Q6_K, 1)):
        block, tsize = gguf.GGML_QUANT_SIZES[qtype]
        n = 256 if block == 256 else 32
        raw = rng.integers(0, 256, size=rows * (n // block) * tsize, dtype=np.uint8)
        if qtype in (gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0):
            raw = raw.reshape(-1, tsize)
            raw[:, 0:2] = np.frombuffer(np.float16(0.01).tobytes(), dtype=np.uint8)
        w.add_tensor(qname, raw.reshape(rows, -1), raw_dtype=qtype)
    w.add_tensor("g.4d", np.ones((2, 1, 3, 2), dtype=np.float32))


def no_tensors(w):
    w.add_string("general.name", "metadata only")
    w.add_uint32("fuzz.context_length", 128)


def llama_vocab(w):
    r = gguf.GGUFReader(TINY)
    skip = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture",
            "general.alignment"}
    for name, field in r.fields.items():
        if name in skip:
            continue
        t = field.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            et = field.types[1]
            if et == gguf.GGUFValueType.STRING:
                vals = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
            else:
                vals = [field.parts[i].tolist()[0] for i in field.data]
            w.add_key_value(name, vals, t, sub_type=et)
        elif t == gguf.GGUFValueType.STRING:
            w.add_key_value(name, bytes(field.parts[field.data[0]]).decode("utf-8"), t)
        else:
            w.add_key_value(name, field.parts[field.data[0]].tolist()[0], t)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.add_tensor("output_norm.weight", np.ones(8, dtype=np.float32))


def v2(path_v3, path_v2):
    # same layout with 32-bit counts is not v2 (v2 has 64-bit counts like v3,
    # only the version differs for our reader): patch the version field
    data = bytearray(open(path_v3, "rb").read())
    data[4:8] = struct.pack("<I", 2)
    open(path_v2, "wb").write(bytes(data))


def truncations(path):
    """Prefixes ending in each region of the file, named by the region."""
    data = open(path, "rb").read()
    r = gguf.GGUFReader(path)
    base = os.path.basename(path)[len("valid-"):-len(".gguf")]
    cuts = {"magic": 3, "header": 20}
    fields = [f for n, f in r.fields.items() if not n.startswith("GGUF.")]
    if fields:
        f = fields[len(fields) // 2]
        cuts["key"] = int(f.offset) + 10
        cuts["value"] = int(f.offset) + sum(p.nbytes for p in f.parts) - 1
    if r.tensors:
        t = r.tensors[-1]
        cuts["data"] = int(t.data_offset) + max(1, int(t.n_bytes) // 2)
        cuts["tensor-info"] = int(t.field.offset) + 6  # inside the last tensor's name
    for what, n in cuts.items():
        if 0 < n < len(data):
            with open(os.path.join(OUT, "trunc-%s-%s.gguf" % (base, what)), "wb") as f:
                f.write(data[:n])


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if f.endswith(".gguf"):
            os.remove(os.path.join(OUT, f))
    a = write("valid-kv-all-types.gguf", kv_all_types)
    b = write("valid-tensors.gguf", tensors, alignment=64)
    v2(a, os.path.join(OUT, "valid-v2.gguf"))
    write("valid-no-tensors.gguf", no_tensors)
    c = write("valid-llama-vocab.gguf", llama_vocab, arch="llama")
    for p in (a, b, c):
        truncations(p)
    for f in sorted(os.listdir(OUT)):
        print("%7d %s" % (os.path.getsize(os.path.join(OUT, f)), f))


if __name__ == "__main__":
    main()
