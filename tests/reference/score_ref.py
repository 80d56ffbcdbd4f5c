#!/usr/bin/python3
# score_ref.py: prompt scoring with the independent float64 reference (gpt2_ref.py), as the
# lm-evaluation-harness replay test (tests/integration/lm_eval_replay.test.js) needs it.
#
# What it is: reads one JSON object on stdin, {"model": DIR, "score": [[ids...], ...],
# "greedy": [{"ids": [...], "n": N}, ...]}, and writes one JSON object on stdout:
#   "score":  per prompt, per position j >= 1: {"lp": log-softmax of row j-1 at ids[j],
#             "best": argmax of row j-1 (ties: lowest id), "best_lp": its log-softmax,
#             "margin": best minus second-best logit}, all in float64;
#   "greedy": per item, N greedy continuation ids and each decision's top-2 margin.
# What it is not: a server client or a test; the test compares. Loads the model once.
#
# Usage (Debian's python, which has numpy): /usr/bin/python3 tests/reference/score_ref.py < in.json

import json
import os
import sys

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_ref  # noqa: E402


def log_softmax(rows):
    m = rows.max(axis=-1, keepdims=True)
    return rows - (m + np.log(np.exp(rows - m).sum(axis=-1, keepdims=True)))


def score(model, ids):
    logits = model.forward(ids)  # (T, V) float64
    lsm = log_softmax(logits)
    out = []
    for j in range(1, len(ids)):
        row = logits[j - 1]
        best = int(np.argmax(row))
        out.append({"lp": float(lsm[j - 1][ids[j]]), "best": best,
                    "best_lp": float(lsm[j - 1][best]), "margin": gpt2_ref.top2_margin(row)})
    return out


def main():
    req = json.load(sys.stdin)
    model = gpt2_ref.load(req["model"])
    res = {"score": [score(model, [int(t) for t in ids]) for ids in req.get("score", [])],
           "greedy": []}
    for g in req.get("greedy", []):
        ids, margins = model.greedy(g["ids"], g["n"], return_margins=True)
        res["greedy"].append({"ids": ids, "margins": margins})
    json.dump(res, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
