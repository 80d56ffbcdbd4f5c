#!/usr/bin/python3
# make_fixtures.py: regenerates the golden fixtures in tests/fixtures/golden/.
#
# What it is: for each case below it asks `inflight make-model` for a random GPT-2 (the weights
# come from inflight's own seeded generator; the sha256 of model.safetensors is recorded so a
# test can tell when that generator changed), then computes with the independent float64
# reference gpt2_ref.py the last-position logits of each prompt (stored as raw little-endian
# float32, V values) and a 32-token greedy continuation, and writes manifest.json.
# What it is not: a test. It checks nothing about inflight's forward pass; tests read the
# fixtures it writes. Rerun it only when a case is added or make-model's weights change, and
# commit the result.
#
# Usage: /usr/bin/python3 tests/reference/make_fixtures.py [--inflight PATH] [--out DIR]

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
sys.path.insert(0, HERE)
import gpt2_ref  # noqa: E402

N_GREEDY = 32
MIN_MARGIN = 1e-3
N_VOCAB = 50257

# Each case: model flags for make-model, prompt lengths, and the first prompt seed tried. The
# prompt ids are np.random.default_rng(prompt_seed).integers(0, n_vocab, size=len), drawn in
# order of the prompt lengths from one generator per case. Fixed forever: changing any of this
# changes the fixtures.
CASES = [
    {"name": "tiny-f32",
     "model": dict(seed=11, n_layer=2, n_head=4, n_embd=64, n_ctx=128, dtype="f32", scale=0.1),
     "lengths": [1, 7, 60], "prompt_seed": 1011},
    {"name": "odd-f16",
     "model": dict(seed=12, n_layer=3, n_head=3, n_embd=96, n_ctx=128, dtype="f16", scale=0.15),
     "lengths": [5, 40], "prompt_seed": 1012},
    {"name": "bf16-h6",
     "model": dict(seed=13, n_layer=2, n_head=6, n_embd=120, n_ctx=96, dtype="bf16", scale=0.2),
     "lengths": [3, 50], "prompt_seed": 1013},
    {"name": "ctx1024",
     "model": dict(seed=14, n_layer=2, n_head=2, n_embd=48, n_ctx=1024, dtype="f32", scale=0.1),
     "lengths": [990], "prompt_seed": 1014},
    {"name": "prefix-mask-f16",
     "model": dict(seed=15, n_layer=2, n_head=4, n_embd=64, n_ctx=64, dtype="f16", scale=0.1,
                   prefix=True, mask_buffers=True),
     "lengths": [4, 20], "prompt_seed": 1015},
    {"name": "one-head-bf16",
     "model": dict(seed=16, n_layer=1, n_head=1, n_embd=32, n_ctx=64, dtype="bf16", scale=0.3),
     "lengths": [2, 25], "prompt_seed": 1016},
    {"name": "options-f32",
     "model": dict(seed=17, n_layer=3, n_head=4, n_embd=64, n_ctx=64, dtype="f32", scale=0.15,
                   n_inner=100, activation="gelu", layer_norm_epsilon=1e-3,
                   scale_attn_by_inverse_layer_idx=True),
     "lengths": [6, 30], "prompt_seed": 1017},
]


def model_spec(m):
    spec = {"seed": m["seed"], "n_layer": m["n_layer"], "n_head": m["n_head"],
            "n_embd": m["n_embd"], "n_ctx": m["n_ctx"], "n_vocab": m.get("n_vocab", N_VOCAB),
            "dtype": m["dtype"], "scale": m["scale"], "prefix": bool(m.get("prefix", False)),
            "mask_buffers": bool(m.get("mask_buffers", False))}
    for opt in ("n_inner", "activation", "layer_norm_epsilon", "scale_attn_by_inverse_layer_idx"):
        if opt in m:
            spec[opt] = m[opt]
    return spec


def make_model_args(spec):
    args = ["--seed", str(spec["seed"]), "--n-layer", str(spec["n_layer"]),
            "--n-head", str(spec["n_head"]), "--n-embd", str(spec["n_embd"]),
            "--n-ctx", str(spec["n_ctx"]), "--n-vocab", str(spec["n_vocab"]),
            "--dtype", spec["dtype"], "--scale", repr(float(spec["scale"]))]
    if spec["prefix"]:
        args.append("--prefix")
    if spec["mask_buffers"]:
        args.append("--mask-buffers")
    if "n_inner" in spec:
        args += ["--n-inner", str(spec["n_inner"])]
    if "activation" in spec:
        args += ["--activation", spec["activation"]]
    if "layer_norm_epsilon" in spec:
        args += ["--layer-norm-eps", repr(float(spec["layer_norm_epsilon"]))]
    if spec.get("scale_attn_by_inverse_layer_idx"):
        args.append("--scale-attn-by-inverse-layer-idx")
    return args


def make_model(inflight, spec, out_dir):
    cmd = [inflight, "make-model", "--out", out_dir, "--no-vocab"] + make_model_args(spec)
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise SystemExit("%s failed (%d): %s"
                         % (" ".join(cmd), r.returncode, r.stderr.decode(errors="replace")))


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def prompts_for(prompt_seed, lengths, n_vocab):
    rng = np.random.default_rng(prompt_seed)
    return [[int(t) for t in rng.integers(0, n_vocab, size=n)] for n in lengths]


def run_case(model, case, spec):
    """Return (prompt_seed, prompt records, table rows); retries prompt seeds on thin margins."""
    seed = case["prompt_seed"]
    for attempt in range(50):
        prompts = prompts_for(seed, case["lengths"], spec["n_vocab"])
        records, rows, worst = [], [], float("inf")
        for i, ids in enumerate(prompts):
            last = model.last_logits(ids)
            greedy, margins = model.greedy(ids, N_GREEDY, return_margins=True)
            # The first greedy decision is made on exactly these logits.
            assert greedy[0] == int(np.argmax(last))
            m = min(margins)  # last prompt position + 31 continuation positions
            worst = min(worst, m)
            records.append({"ids": ids, "greedy": greedy, "min_top2_margin": m,
                            "_logits": last})
            rows.append((case["name"], len(ids), float(np.linalg.norm(last)), m))
        if worst >= MIN_MARGIN:
            return seed, records, rows
        print("!" * 78, file=sys.stderr)
        print("!!! WARNING: case %s, prompt seed %d: min top-2 margin %.3g < %g; the greedy "
              "comparison would be fragile. Trying prompt seed %d."
              % (case["name"], seed, worst, MIN_MARGIN, seed + 1), file=sys.stderr)
        print("!" * 78, file=sys.stderr)
        seed += 1
    raise SystemExit("case %s: no prompt seed with margins >= %g" % (case["name"], MIN_MARGIN))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__ or "regenerate golden fixtures")
    ap.add_argument("--inflight", default=os.environ.get(
        "INFLIGHT", os.path.join(REPO, "build", "inflight")))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "golden"))
    args = ap.parse_args(argv)

    os.makedirs(args.out, exist_ok=True)
    manifest = {"generator": "tests/reference/make_fixtures.py",
                "reference": "tests/reference/gpt2_ref.py (numpy float64)",
                "cases": []}
    table = []
    written = set()
    tmp_root = tempfile.mkdtemp(prefix="inflight-fixtures-")
    try:
        for case in CASES:
            spec = model_spec(case["model"])
            mdir = os.path.join(tmp_root, case["name"])
            make_model(args.inflight, spec, mdir)
            sha = sha256_file(os.path.join(mdir, "model.safetensors"))
            model = gpt2_ref.GPT2Ref.load(mdir)
            seed, records, rows = run_case(model, case, spec)
            prompts = []
            for i, rec in enumerate(records):
                fname = "%s.p%d.logits.f32" % (case["name"], i)
                data = np.asarray(rec.pop("_logits"), dtype=np.float64).astype("<f4")
                assert data.shape == (spec["n_vocab"],)
                with open(os.path.join(args.out, fname), "wb") as f:
                    f.write(data.tobytes())
                written.add(fname)
                prompts.append({"ids": rec["ids"], "logits": fname, "greedy": rec["greedy"],
                                "min_top2_margin": rec["min_top2_margin"]})
            manifest["cases"].append({"name": case["name"], "model": spec,
                                      "safetensors_sha256": sha, "prompt_seed": seed,
                                      "prompts": prompts})
            table.extend(rows)
            shutil.rmtree(mdir)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)

    for name in os.listdir(args.out):  # drop logits files of cases that no longer exist
        if name.endswith(".logits.f32") and name not in written:
            os.remove(os.path.join(args.out, name))
    with open(os.path.join(args.out, "manifest.json"), "w", encoding="utf-8") as f:
        text = json.dumps(manifest, indent=1)
        # Keep lists of token ids on one line each.
        text = re.sub(r"\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]",
                      lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]",
                      text)
        f.write(text + "\n")

    total = sum(os.path.getsize(os.path.join(args.out, n)) for n in os.listdir(args.out))
    print("%-18s %7s %14s %14s" % ("case", "prompt", "|logits|_2", "min margin"))
    for name, n, norm, m in table:
        print("%-18s %7d %14.6f %14.6g" % (name, n, norm, m))
    print("wrote %s: %d files, %d bytes" % (args.out, len(os.listdir(args.out)), total))
    if total >= 3 * 1024 * 1024:
        print("WARNING: fixtures exceed 3 MB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
