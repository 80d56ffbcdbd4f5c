#!/usr/bin/env python3
"""hf_generate_bench.py: Hugging Face transformers' throughput on the same checkpoint, the
tutorial's way: GPT2LMHeadModel.generate on a batch of 8 copies of the seed's prompt
("Hello, how are you?"), 32 new tokens, greedy, pad_token_id = eos; one warm-up, then N timed
repeats with torch.cuda.synchronize; tokens/s = batch x new tokens / time (median repeat).
min_new_tokens = 32 plays the part of the seed's ignore_eos (a random model may draw <|endoftext|>);
the new tokens are counted from the output all the same.

Also, in bf16: batch 1 (single stream), and the seed's profile served Triton-"simple" style: 10
requests arriving 50 ms apart, each generate() call taking every request queued when it starts (at
most --max-batch), 32 tokens each; throughput = tokens / (last response - first arrival), the same
definition as `inflight bench`.

Exit status: 0 measured, 2 could not run. Writes a JSON summary with --json.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_parity import SEED_PROMPT, inflight_ids, json_dumper, load_hf, offline_env  # noqa: E402


def log(msg):
    print(msg, flush=True)


def gen(model, ids, batch, new_tokens, eos):
    import torch
    x = torch.tensor([ids] * batch, dtype=torch.long, device=model.device)
    out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=new_tokens,
                         min_new_tokens=new_tokens, do_sample=False, pad_token_id=eos)
    return int(out.shape[1] - x.shape[1])


def timed_generate(model, ids, batch, new_tokens, eos, repeats):
    import torch
    gen(model, ids, batch, new_tokens, eos)  # warm-up
    torch.cuda.synchronize()
    times, n_new = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        n_new = gen(model, ids, batch, new_tokens, eos)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return {"batch": batch, "new_tokens": n_new, "repeats": repeats, "median_s": med,
            "best_s": min(times), "tok_s": batch * n_new / med,
            "ms_per_step": med / max(n_new, 1) * 1e3}


def seed_profile(model, ids, eos, n_req=10, interval_s=0.05, new_tokens=32, max_batch=8):
    """Requests arrive interval_s apart; each generate() call serves all that have arrived."""
    import torch
    t0 = time.perf_counter()
    arrival = [t0 + i * interval_s for i in range(n_req)]
    done = [None] * n_req
    tokens = 0
    nxt, batches = 0, []
    while nxt < n_req:
        now = time.perf_counter()
        if arrival[nxt] > now:
            time.sleep(arrival[nxt] - now)
            now = time.perf_counter()
        take = [i for i in range(nxt, n_req) if arrival[i] <= now][:max_batch]
        n_new = gen(model, ids, len(take), new_tokens, eos)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for i in take:
            done[i] = t
        tokens += n_new * len(take)
        batches.append(len(take))
        nxt = take[-1] + 1
    wall = max(done) - t0
    return {"requests": n_req, "interval_ms": interval_s * 1e3, "tokens": tokens, "wall_s": wall,
            "tok_s": tokens / wall, "batches": batches,
            "last_mean_s": sum(d - a for d, a in zip(done, arrival)) / n_req}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--inflight", required=True, help="inflight binary (its tokenizer gives the ids)")
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-batch", type=int, default=8, help="seed's profile: most requests per generate()")
    ap.add_argument("--no-seed-profile", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    offline_env()
    res = {"generate": [], "seed_profile": None}
    t_start = time.time()
    dump = json_dumper(res, args.json, t_start)

    try:
        import torch
        import transformers
        res["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        log("hf_generate: torch %s, transformers %s, %s (imports %.1f s)"
            % (torch.__version__, transformers.__version__, torch.cuda.get_device_name(0),
               time.time() - t_start))
        with open(os.path.join(args.model, "config.json")) as f:
            eos = int(json.load(f).get("eos_token_id", 50256))
        ids = inflight_ids(args.inflight, args.model, SEED_PROMPT)
        dtypes = {"bf16": torch.bfloat16, "f32": torch.float32, "f16": torch.float16}
        for name in [d for d in args.dtypes.split(",") if d]:
            model, _ = load_hf(args.model, dtypes[name], "cuda")
            batches = [args.batch] + ([1] if name == "bf16" and args.batch != 1 else [])
            for b in batches:
                r = timed_generate(model, ids, b, args.new_tokens, eos, args.repeats)
                r["dtype"] = name
                res["generate"].append(r)
                dump()
                log("hf_generate %-4s batch %3d: %8.1f tok/s  %7.2f ms/step  (%d new tokens, median of %d: %.3f s)"
                    % (name, b, r["tok_s"], r["ms_per_step"], r["new_tokens"], r["repeats"], r["median_s"]))
            if name == "bf16" and not args.no_seed_profile:
                sp = seed_profile(model, ids, eos, new_tokens=args.new_tokens, max_batch=args.max_batch)
                sp["dtype"] = name
                res["seed_profile"] = sp
                dump()
                log("hf_generate bf16 seed's profile (simple: generate() per arrived batch %s): %.1f tok/s "
                    "(%d tokens in %.3f s), mean time to last response %.3f s"
                    % (sp["batches"], sp["tok_s"], sp["tokens"], sp["wall_s"], sp["last_mean_s"]))
            del model
            torch.cuda.empty_cache()
        dump()
        return 0
    except Exception as e:
        res["error"] = "%s: %s" % (type(e).__name__, e)
        dump()
        log("hf_generate: ERROR %s" % res["error"])
        return 2


if __name__ == "__main__":
    sys.exit(main())
