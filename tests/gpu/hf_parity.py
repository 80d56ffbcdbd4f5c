#!/usr/bin/env python3
"""hf_parity.py: last-position logits of inflight (CUDA and CPU engines) against Hugging Face
transformers' GPT2LMHeadModel on the same checkpoint directory (the one `inflight make-model
--prefix` writes), offline.

For each prompt: the token ids come from `inflight tokenize`; `inflight generate -n 0 --logits-out F
--device D` writes the last prompt token's logits (V little-endian float32); transformers runs the
same ids in float32 on the GPU (TF32 off) and, for scale, in bfloat16; tests/reference/gpt2_ref.py
(float64 numpy, independent of both) gives a third reference, which also checks that transformers
loaded the directory as meant. One line per comparison: max |a - b|, relative L2
||a - b|| / ||b||, argmax agreement, top-5 overlap.

Pass criteria (and why):
  HF f32 vs f64 ref    : rel L2 < 1e-4 (transformers read every tensor as meant).
  CPU engine vs HF f32 : rel L2 < 1e-4. Both compute in f32 on the same bf16-representable weights;
                         only the order of sums and exp/tanh implementations differ (the golden
                         test holds the CPU engine to 1e-4 against a float64 reference).
  CUDA engine vs HF f32: rel L2 < 2e-2. The CUDA backend holds weights, GEMM inputs and the KV
                         cache in bf16 (8 significant bits: unit roundoff 2^-9 ~ 2e-3); with ~50
                         roundings of the residual stream's inputs on the way through 12 layers and
                         the lm_head, independent errors grow to ~sqrt(50) x 2e-3 ~ 1.4e-2. The
                         line "HF bf16 vs HF f32" measures what transformers itself loses in bf16.
  CUDA vs CPU engine, CUDA vs f64 ref: the same 2e-2.
  argmax               : must agree unless the reference's top-2 margin is within 2 x max|a - b|
                         (random weights can make near-ties; then either answer is right).

Exit status: 0 all comparisons pass, 1 one fails, 2 could not run (inflight failed, or transformers
could not be imported or load the directory: the comparisons that could run are still made).
Writes a JSON summary with --json.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

TOL = {"cpu": 1e-4, "cuda": 2e-2}
SEED_PROMPT = "Hello, how are you?"
LONG_PROMPT = (
    "The quick brown fox jumps over the lazy dog. In the beginning the Universe was created. "
    "This has made a lot of people very angry and been widely regarded as a bad move. It was a "
    "bright cold day in April, and the clocks were striking thirteen. Call me Ishmael. Some years "
    "ago, never mind how long precisely, having little or no money in my purse, and nothing "
    "particular to interest me on shore, I thought I would sail about a little and see the watery "
    "part of the world. It is a truth universally acknowledged, that a single man in possession of "
    "a good fortune, must be in want of a wife. 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233."
)



def offline_env():
    """No network on the GPU machine: Hugging Face must not try to reach the hub."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def json_dumper(res, path, t_start):
    """A function that writes res (with the seconds since t_start) to path, when path is set."""
    def dump():
        res["seconds"] = round(time.time() - t_start, 1)
        if path:
            with open(path, "w") as f:
                json.dump(res, f, indent=1)
    return dump

def log(msg):
    print(msg, flush=True)


def inflight_ids(inflight, model, text, timeout=60):
    """Token ids of text by `inflight tokenize` (prints them space-separated on one line)."""
    r = subprocess.run([inflight, "tokenize", "--model", model], input=text.encode(),
                       capture_output=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError("inflight tokenize failed (%d): %s" % (r.returncode, r.stderr.decode(errors="replace").strip()))
    ids = [int(t) for t in r.stdout.decode().split()]
    if not ids:
        raise RuntimeError("inflight tokenize printed no ids")
    return ids


def inflight_logits(inflight, model, device, prompt, n_vocab, timeout=120):
    """Last prompt token's logits from `inflight generate -n 0 --logits-out` on device."""
    import numpy as np
    with tempfile.TemporaryDirectory() as td:
        path = os.path.join(td, "logits.f32")
        cmd = [inflight, "generate", "--model", model, "--device", device, "--prompt", prompt,
               "-n", "0", "--temperature", "0", "--seed", "1", "--logits-out", path]
        t0 = time.time()
        r = subprocess.run(cmd, capture_output=True, timeout=timeout)
        dt = time.time() - t0
        err = r.stderr.decode(errors="replace").strip()
        if r.returncode != 0:
            raise RuntimeError("%s -> exit %d: %s" % (" ".join(cmd[1:]), r.returncode, err[-800:]))
        if not os.path.exists(path):
            raise RuntimeError("%s wrote no %s: %s" % (" ".join(cmd[1:]), path, err[-800:]))
        x = np.fromfile(path, dtype="<f4")
    if x.size != n_vocab:
        raise RuntimeError("--logits-out wrote %d values, expected vocab_size %d" % (x.size, n_vocab))
    first = err.splitlines()[0] if err else ""
    return x.astype(np.float64), dt, first


def _from_pretrained(model_dir, dtype):
    """(model, loading info or None), across transformers versions: 5.x and >= 4.56 take dtype=,
    older ones torch_dtype=; output_loading_info is tried first and dropped if refused."""
    from transformers import GPT2LMHeadModel
    last = None
    for kw in ({"dtype": dtype, "output_loading_info": True},
               {"torch_dtype": dtype, "output_loading_info": True},
               {"dtype": dtype}, {"torch_dtype": dtype}):
        try:
            r = GPT2LMHeadModel.from_pretrained(model_dir, local_files_only=True, **kw)
        except TypeError as e:
            last = e
            continue
        return r if isinstance(r, tuple) else (r, None)
    raise last


def load_hf(model_dir, dtype, device):
    """GPT2LMHeadModel.from_pretrained, offline, moved to (device, dtype), checked against the
    safetensors file: every tensor taken, lm_head tied to wte, two tensors equal to the file's."""
    import torch
    model, info = _from_pretrained(model_dir, dtype)
    model = model.to(device=device, dtype=dtype).eval()
    info = {k: sorted(str(x) for x in v) for k, v in (info or {}).items()
            if isinstance(v, (list, set, tuple)) and v}
    tied = model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    info["lm_head_tied"] = tied
    # What the checkpoint may leave out: the tied lm_head and the causal-mask buffers.
    missing = [k for k in info.get("missing_keys", [])
               if not (k == "lm_head.weight" or k.endswith(".attn.bias") or k.endswith(".attn.masked_bias"))]
    if missing or info.get("unexpected_keys") or info.get("mismatched_keys"):
        raise RuntimeError("from_pretrained did not take every tensor: %s" % json.dumps(info))
    if not tied:
        raise RuntimeError("lm_head is not tied to wte after loading")
    from safetensors import safe_open
    with safe_open(os.path.join(model_dir, "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
        for name, param in (("wte.weight", model.transformer.wte.weight),
                            ("h.0.attn.c_attn.weight", model.transformer.h[0].attn.c_attn.weight),
                            ("ln_f.weight", model.transformer.ln_f.weight)):
            key = "transformer." + name if "transformer." + name in keys else name
            want = f.get_tensor(key).to(device=param.device, dtype=param.dtype)
            if want.shape != param.shape or not torch.equal(want, param.detach()):
                raise RuntimeError("the loaded %s differs from the file's %s" % (name, key))
    info["checked_against_file"] = True
    return model, info


def hf_logits(model, ids):
    import torch
    with torch.no_grad():
        x = torch.tensor([ids], dtype=torch.long, device=model.device)
        out = model(input_ids=x, use_cache=False)
        return out.logits[0, -1].float().cpu().double().numpy()


def compare(a, ref):
    """a against the reference ref (numpy float64 vectors)."""
    import numpy as np
    d = a - ref
    max_abs = float(np.max(np.abs(d)))
    rel_l2 = float(np.linalg.norm(d) / max(np.linalg.norm(ref), 1e-30))
    order = np.argsort(-ref)
    margin = float(ref[order[0]] - ref[order[1]])
    top5 = len(set(np.argsort(-a)[:5].tolist()) & set(order[:5].tolist()))
    return {"max_abs": max_abs, "rel_l2": rel_l2, "argmax": int(np.argmax(a)),
            "argmax_ref": int(order[0]), "argmax_same": bool(np.argmax(a) == order[0]),
            "ref_margin": margin, "top5_overlap": top5,
            "finite": bool(np.all(np.isfinite(a)))}


def verdict(c, tol):
    if not c["finite"]:
        return False, "non-finite logits"
    if not c["rel_l2"] < tol:
        return False, "rel L2 %.2e >= %.0e" % (c["rel_l2"], tol)
    if not c["argmax_same"] and c["ref_margin"] > 2 * c["max_abs"]:
        return False, "argmax %d vs %d (margin %.3g > 2 x max abs diff)" % (c["argmax"], c["argmax_ref"], c["ref_margin"])
    return True, "ok" if c["argmax_same"] else "ok (argmax differs inside a near-tie)"


def line(name, prompt_name, n_tok, c, tol):
    ok, why = verdict(c, tol) if tol else (True, "reference")
    log("parity %-22s %-6s %4d tokens: max|diff| %.3e  rel L2 %.3e  argmax %s  top5 %d/5  (tol %s) %s"
        % (name, prompt_name, n_tok, c["max_abs"], c["rel_l2"],
           "same" if c["argmax_same"] else "%d vs %d" % (c["argmax"], c["argmax_ref"]),
           c["top5_overlap"], "%.0e" % tol if tol else "-",
           "info" if not tol else "PASS" if ok else "FAIL: " + why))
    return ok


def f64_reference(model_dir, ids_by_prompt):
    """Last-position logits from tests/reference/gpt2_ref.py (float64 numpy, written apart from
    both inflight and transformers): a third opinion that needs neither torch nor the GPU."""
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
    import gpt2_ref
    ref = gpt2_ref.load(model_dir)
    return {name: ref.last_logits(ids) for name, ids in ids_by_prompt.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inflight", required=True, help="path of the inflight binary")
    ap.add_argument("--model", required=True, help="model directory (config.json, model.safetensors, vocab)")
    ap.add_argument("--devices", default="cuda,cpu", help="inflight devices to compare (default cuda,cpu)")
    ap.add_argument("--no-f64", action="store_true", help="skip the float64 numpy reference")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--timeout", type=float, default=120, help="per inflight run, seconds")
    args = ap.parse_args()

    offline_env()
    devices = [d for d in args.devices.split(",") if d]
    res = {"comparisons": [], "ok": False, "errors": []}
    t_start = time.time()
    dump = json_dumper(res, args.json, t_start)

    try:
        import numpy as np  # noqa: F401
        with open(os.path.join(args.model, "config.json")) as f:
            n_vocab = int(json.load(f)["vocab_size"])
        prompts = [("seed", SEED_PROMPT), ("long", LONG_PROMPT)]
        ids = {name: inflight_ids(args.inflight, args.model, text) for name, text in prompts}
        log("hf_parity: prompts (inflight tokenize): %s"
            % ", ".join("%s %d tokens" % (name, len(ids[name])) for name, _ in prompts))
        # inflight first: its runs need nothing of Python's
        got = {}
        for dev in devices:
            for name, text in prompts:
                x, dt, first = inflight_logits(args.inflight, args.model, dev, text, n_vocab, args.timeout)
                got[(dev, name)] = x
                log("hf_parity: inflight --device %s, prompt %s: %.1f s (%s)" % (dev, name, dt, first[:160]))
    except Exception as e:
        res["error"] = "%s: %s" % (type(e).__name__, e)
        dump()
        log("hf_parity: ERROR %s" % res["error"])
        return 2

    ref64 = {}
    if not args.no_f64:
        try:
            t0 = time.time()
            ref64 = f64_reference(args.model, ids)
            log("hf_parity: float64 reference (tests/reference/gpt2_ref.py) in %.1f s" % (time.time() - t0))
        except Exception as e:
            res["errors"].append("f64 reference: %s: %s" % (type(e).__name__, e))
            log("hf_parity: float64 reference not run: %s" % res["errors"][-1])

    ref, ref16 = {}, {}
    try:
        t0 = time.time()
        import torch
        import transformers
        res["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                           "cuda": torch.version.cuda,
                           "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
        log("hf_parity: torch %s (CUDA %s), transformers %s, GPU %s (imports %.1f s)"
            % (torch.__version__, torch.version.cuda, transformers.__version__,
               res["versions"]["gpu"], time.time() - t0))
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        # A true f32 reference: no TF32 in matmuls.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        # Cross-check the tokenizer too, where transformers can load it from the directory.
        try:
            from transformers import AutoTokenizer
            tk = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
            same = all(list(tk(text)["input_ids"]) == ids[name] for name, text in prompts)
            res["tokenizer_same"] = same
            log("hf_parity: transformers' tokenizer gives %s ids" % ("the same" if same else "DIFFERENT"))
        except Exception as e:  # informational only
            log("hf_parity: transformers' tokenizer not compared (%s)" % str(e).splitlines()[0][:120])
        t0 = time.time()
        model, info = load_hf(args.model, torch.float32, "cuda")
        log("hf_parity: GPT2LMHeadModel.from_pretrained(%s, float32) on cuda in %.1f s; %s"
            % (args.model, time.time() - t0, json.dumps(info)))
        for name, _ in prompts:
            ref[name] = hf_logits(model, ids[name])
        model = model.to(torch.bfloat16)
        for name, _ in prompts:
            ref16[name] = hf_logits(model, ids[name])
        del model
        torch.cuda.empty_cache()
    except Exception as e:
        res["error"] = "transformers: %s: %s" % (type(e).__name__, e)
        log("hf_parity: ERROR %s" % res["error"])

    all_ok = True

    def cmp(what, name, a, b, tol):
        nonlocal all_ok
        c = compare(a, b)
        ok = line(what, name, len(ids[name]), c, tol)
        if tol:
            all_ok &= ok
        res["comparisons"].append(dict(c, what=what, prompt=name, tokens=len(ids[name]), tol=tol,
                                       ok=ok if tol else None))

    for name, _ in prompts:
        if name in ref and name in ref64:
            cmp("HF f32 vs f64 ref", name, ref[name], ref64[name], TOL["cpu"])
        if name in ref16 and name in ref:
            cmp("HF bf16 vs HF f32", name, ref16[name], ref[name], None)
        for dev in devices:
            tol = TOL.get(dev, TOL["cuda"])
            label = "CPU engine" if dev == "cpu" else "%s engine" % dev.upper()
            if name in ref:
                cmp("%s vs HF f32" % label, name, got[(dev, name)], ref[name], tol)
            if dev != "cpu" and name in ref64:
                cmp("%s vs f64 ref" % label, name, got[(dev, name)], ref64[name], tol)
            if dev == "cpu" and name not in ref and name in ref64:
                cmp("CPU engine vs f64 ref", name, got[(dev, name)], ref64[name], tol)
        if ("cuda", name) in got and ("cpu", name) in got:
            cmp("CUDA vs CPU engine", name, got[("cuda", name)], got[("cpu", name)], TOL["cuda"])
    res["ok"] = bool(all_ok) and "error" not in res
    dump()
    verdict_txt = "PASS" if res["ok"] else ("FAIL" if not all_ok else "INCOMPLETE (transformers did not run)")
    log("hf_parity: %s (%.1f s)" % (verdict_txt, time.time() - t_start))
    return 0 if res["ok"] else 1 if not all_ok else 2


if __name__ == "__main__":
    sys.exit(main())
