#!/usr/bin/env python3
"""check-golden.py - compare hyserve's forward pass with a golden reference
made from transformers: tests/golden/smollm2/ (make-golden.py, the default)
or another directory given by --golden (tests/golden/gemma3/, made by
make-golden-gemma3.py).  For each prompt it runs `hyserve eval -m MODEL
--ids FILE --out FILE --rows P,... --argmax FILE` on the teacher-forced token
sequence and checks argmax agreement, the relative RMS error of the stored
full logit rows, and the greedy continuation; prints TAP.

Needs only Python 3 and numpy.  A missing model file (the manifest's
"fetch" command, else scripts/fetch-default-model), hyserve binary or numpy
(scripts/install-deps --test) is a failed check that says so, never a skip:
scripts/run-tests provides all three.

Usage: check-golden.py [--golden DIR] [--hyserve BIN] [--model GGUF] [--rel-rms X] ...
  BIN:  --hyserve, else $HYSERVE, else ./hyserve (the build directory)
  GGUF: --model, else $HY_MODEL, else <srcdir>/models/<manifest model_file>
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("HY_SRCDIR") or os.path.dirname(os.path.dirname(HERE))


class Tap:
    """Minimal TAP producer: the plan is printed first, so it must be known."""

    def __init__(self, plan):
        self.n = 0
        self.failed = 0
        print("1..%d" % plan, flush=True)

    def ok(self, cond, what, diag=()):
        self.n += 1
        if not cond:
            self.failed += 1
        print("%s %d - %s" % ("ok" if cond else "not ok", self.n, what))
        for line in diag:
            print("# " + line)
        sys.stdout.flush()


def fail_all(reason):
    """What the check needs is missing: one failed check and the plan."""
    print("not ok 1 - %s" % reason)
    print("1..1")
    sys.exit(1)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_ids(path):
    """NAME.ids: line 1 the full token sequence, line 2 the prompt length."""
    with open(path) as f:
        lines = f.read().split("\n")
    ids = [int(x) for x in lines[0].split()]
    prompt_len = int(lines[1])
    if not ids or not 1 <= prompt_len <= len(ids):
        raise ValueError("%s: bad prompt length %d for %d ids" % (path, prompt_len, len(ids)))
    return ids, prompt_len


def read_top(path, n_tokens):
    """NAME.top.txt -> (argmax[pos], margin[pos]) for every position."""
    argmax, margin = [], []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            fields = line.split()
            if int(fields[0]) != len(argmax):
                raise ValueError("%s: positions out of order at %s" % (path, fields[0]))
            argmax.append(int(fields[1]))
            margin.append(float(fields[2]))
    if len(argmax) != n_tokens:
        raise ValueError("%s: %d rows, expected %d" % (path, len(argmax), n_tokens))
    return argmax, margin


def run_eval(np, hyserve, model, ids, rows, n_vocab, workdir, name, timeout):
    """Run hyserve eval; return (argmax per position, logits [len(rows)][n_vocab])
    or (None, None), and diagnostics.  Only the stored rows are written: a
    262K vocabulary makes every full row 1 MiB."""
    ids_path = os.path.join(workdir, name + ".in.ids")
    out_path = os.path.join(workdir, name + ".out.f32")
    arg_path = os.path.join(workdir, name + ".argmax.i32")
    with open(ids_path, "w") as f:
        f.write(" ".join(str(i) for i in ids) + "\n")
    cmd = [hyserve, "eval", "-m", model, "--ids", ids_path, "--out", out_path,
           "--rows", ",".join(str(r) for r in rows), "--argmax", arg_path]
    try:
        res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, None, ["%s timed out after %d s" % (" ".join(cmd), timeout)]
    except OSError as e:
        return None, None, ["cannot run %s: %s" % (hyserve, e)]
    tail = res.stderr.decode("utf-8", "replace").strip().splitlines()[-5:]
    if res.returncode != 0:
        return None, None, ["%s exited with status %d" % (" ".join(cmd[:8]), res.returncode)] + tail
    for path, want, what in ((out_path, len(rows) * n_vocab * 4,
                              "%d rows x %d vocab x 4" % (len(rows), n_vocab)),
                             (arg_path, len(ids) * 4, "%d tokens x 4" % len(ids))):
        if not os.path.isfile(path):
            return None, None, ["hyserve eval wrote no %s" % path] + tail
        if os.path.getsize(path) != want:
            return None, None, ["%s is %d bytes, expected %d = %s"
                                % (path, os.path.getsize(path), want, what)]
    logits = np.fromfile(out_path, dtype="<f4").reshape(len(rows), n_vocab)
    bad = int((~np.isfinite(logits)).sum())
    if bad:
        return None, None, ["%d non-finite logits" % bad]
    argmax = np.fromfile(arg_path, dtype="<i4")
    if argmax.min() < 0 or argmax.max() >= n_vocab:
        return None, None, ["argmax outside the vocabulary"]
    return argmax, logits, []


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hyserve", help="hyserve binary (default $HYSERVE or ./hyserve)")
    ap.add_argument("--model", help="GGUF file (default $HY_MODEL or <srcdir>/models/...)")
    ap.add_argument("--golden", default=os.path.join(HERE, "smollm2"),
                    help="reference directory (default: %(default)s)")
    ap.add_argument("--rel-rms", type=float, default=None,
                    help="max relative RMS error of a full logit row (default: the "
                         "manifest's rel_rms, else 0.05)")
    ap.add_argument("--argmax-min", type=float, default=0.99,
                    help="min argmax agreement over all positions (default 0.99)")
    ap.add_argument("--margin", type=float, default=None,
                    help="top-2 margin above which a greedy token must match "
                         "(default: the manifest's, 0.5)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per hyserve run")
    ap.add_argument("--prompt", action="append", help="check only this prompt (repeatable)")
    args = ap.parse_args()

    try:
        import numpy as np
    except ImportError:
        fail_all("numpy is not installed (scripts/install-deps --test)")

    with open(os.path.join(args.golden, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    if manifest.get("format") != 1:
        print("Bail out! %s: unknown manifest format %r" % (args.golden, manifest.get("format")))
        sys.exit(1)
    n_vocab = int(manifest["n_vocab"])
    # A stored row may hold only every row_stride-th vocabulary entry: a
    # sample of a 262K row estimates its relative RMS error at 1/16 the bytes.
    stride = int(manifest.get("row_stride", 1))
    if stride < 1:
        print("Bail out! %s: row_stride %d" % (args.golden, stride))
        sys.exit(1)
    n_cols = len(range(0, n_vocab, stride))
    margin_min = manifest["margin"] if args.margin is None else args.margin
    rel_max = manifest.get("rel_rms", 0.05) if args.rel_rms is None else args.rel_rms

    model = (args.model or os.environ.get("HY_MODEL")
             or os.path.join(SRCDIR, "models", manifest["model_file"]))
    hyserve = args.hyserve or os.environ.get("HYSERVE") or "./hyserve"
    if os.sep not in hyserve:
        hyserve = shutil.which(hyserve) or hyserve
    if not os.path.isfile(model):
        fail_all("model %s absent (run %s)"
                 % (model, manifest.get("fetch", "scripts/fetch-default-model")))
    if not (os.path.isfile(hyserve) and os.access(hyserve, os.X_OK)):
        fail_all("hyserve binary %s absent (set HYSERVE)" % hyserve)

    prompts = manifest["prompts"]
    if args.prompt:
        unknown = set(args.prompt) - {p["name"] for p in prompts}
        if unknown:
            print("Bail out! unknown prompt(s): %s" % ", ".join(sorted(unknown)))
            sys.exit(1)
        prompts = [p for p in prompts if p["name"] in args.prompt]

    # Plan: model hash, then 3 per prompt, then the overall argmax figure.
    tap = Tap(1 + 3 * len(prompts) + 1)
    digest = sha256_file(model)
    tap.ok(digest == manifest["gguf_sha256"], "model %s matches the golden's sha256"
           % os.path.basename(model),
           [] if digest == manifest["gguf_sha256"] else
           ["sha256 %s, expected %s" % (digest, manifest["gguf_sha256"])])

    agree = total = 0
    all_rel = []
    workdir = tempfile.mkdtemp(prefix="hyserve-golden.")
    try:
        for p in prompts:
            name = p["name"]
            ids, plen = read_ids(os.path.join(args.golden, name + ".ids"))
            ref_arg, ref_margin = read_top(os.path.join(args.golden, name + ".top.txt"),
                                           len(ids))
            positions = p["full_logits_positions"]
            # float32 rows where float16 rounding would hide the errors the
            # tolerance is meant to catch
            f32 = p.get("full_logits_dtype", manifest.get("full_logits_dtype")) == "float32-le"
            ref_rows = np.fromfile(os.path.join(args.golden, name + (".logits.f32" if f32 else
                                                                      ".logits.f16")),
                                   dtype="<f4" if f32 else "<f2").astype(np.float32)
            ref_rows = ref_rows.reshape(len(positions), n_cols)
            tol = p.get("rel_rms", rel_max) if args.rel_rms is None else args.rel_rms

            ours_arg, ours, diag = run_eval(np, hyserve, model, ids, positions, n_vocab,
                                            workdir, name, args.timeout)
            tap.ok(ours is not None, "%s: hyserve eval gives %d argmax and [%d][%d] finite logits"
                   % (name, len(ids), len(positions), n_vocab), diag)
            if ours is None:
                tap.ok(False, "%s: relative RMS error (not run)" % name)
                tap.ok(False, "%s: greedy continuation (not run)" % name)
                total += len(ids)          # counts as disagreement
                continue

            agree += int((ours_arg == np.array(ref_arg)).sum())
            total += len(ids)

            # Rows are mean-centred first: softmax ignores a per-row shift,
            # and the raw rows carry a common offset (up to 4x the spread at
            # position 0) that would dilute the error.
            ours = ours[:, ::stride]
            ours = ours - ours.mean(axis=1, keepdims=True)
            ref = ref_rows - ref_rows.mean(axis=1, keepdims=True)
            rel = np.linalg.norm(ours - ref, axis=1) / np.linalg.norm(ref, axis=1)
            all_rel.extend(rel.tolist())
            worst = int(rel.argmax())
            tap.ok(rel.max() <= tol,
                   "%s: relative RMS error max %.3g (pos %d) median %.3g over %d rows%s <= %g"
                   % (name, rel.max(), positions[worst], float(np.median(rel)),
                      len(positions), " (every %dth entry)" % stride if stride > 1 else "",
                      tol))

            # The greedy continuation: where the reference's choice is clear,
            # ours must be the very token the reference generated.
            checked, wrong = 0, []
            for pos in range(plen - 1, len(ids) - 1):
                if ref_margin[pos] > margin_min:
                    checked += 1
                    if int(ours_arg[pos]) != ids[pos + 1]:
                        wrong.append("pos %d: ours %d, reference %d (margin %.3f)"
                                     % (pos, ours_arg[pos], ids[pos + 1], ref_margin[pos]))
            tap.ok(not wrong, "%s: greedy continuation matches at %d/%d clear positions "
                   "(margin > %g)" % (name, checked - len(wrong), checked, margin_min),
                   wrong[:8] + (["... and %d more" % (len(wrong) - 8)]
                                if len(wrong) > 8 else []))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    frac = agree / total if total else 0.0
    summary = []
    if all_rel:
        summary.append("relative RMS over all %d rows: max %.3g median %.3g"
                       % (len(all_rel), max(all_rel), float(np.median(all_rel))))
    tap.ok(frac >= args.argmax_min, "argmax agreement %d/%d = %.4f >= %g"
           % (agree, total, frac, args.argmax_min), summary)
    sys.exit(1 if tap.failed else 0)


if __name__ == "__main__":
    main()
