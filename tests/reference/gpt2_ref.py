#!/usr/bin/python3
# gpt2_ref.py: an independent float64 GPT-2 reference (Python standard library + numpy only).
#
# What it is: a slow, plain, obviously-correct forward pass used to make and check golden
# fixtures for inflight. It reads a Hugging Face GPT-2 directory (config.json +
# model.safetensors, parsed here by hand), widens every weight to float64 and recomputes the
# whole sequence for every call.
# What it is not: a server, a tokenizer, a sampler or a fast implementation. It has no KV cache,
# no batching and no float32 path, and it was written without looking at inflight's C sources
# (engine/, cli/), so that agreement between the two means something.
#
# Usage (always with Debian's python, which has numpy):
#   /usr/bin/python3 tests/reference/gpt2_ref.py MODEL_DIR --ids "1 2 3" [--greedy N]
"""Independent float64 GPT-2 reference: forward(ids), last_logits(ids), greedy(ids, n)."""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np

# ---------------------------------------------------------------------------------------------
# safetensors

_DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}


def decode_raw(dtype, raw, shape=None):
    """Decode little-endian bytes of a safetensors dtype into a float64 array."""
    if dtype not in _DTYPE_BYTES:
        raise ValueError("unsupported safetensors dtype %r" % (dtype,))
    size = _DTYPE_BYTES[dtype]
    if len(raw) % size:
        raise ValueError("%d bytes is not a whole number of %s values" % (len(raw), dtype))
    if dtype == "F32":
        a = np.frombuffer(raw, dtype="<f4").astype(np.float64)
    elif dtype == "F64":
        a = np.frombuffer(raw, dtype="<f8").astype(np.float64)
    elif dtype == "F16":
        a = np.frombuffer(raw, dtype="<f2").astype(np.float64)
    else:  # BF16: the top 16 bits of a float32
        u16 = np.frombuffer(raw, dtype="<u2").astype(np.uint32)
        a = (u16 << np.uint32(16)).view(np.float32).astype(np.float64)
    if shape is not None:
        a = a.reshape(shape)
    return a


def load_safetensors(path):
    """Return ({name: float64 ndarray}, metadata dict) for a .safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("%s: too short for a safetensors header" % path)
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError("%s: header length %d runs past the end of the file" % (path, n))
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = memoryview(blob)[8 + n:]
    tensors = {}
    meta = header.pop("__metadata__", {}) or {}
    for name, info in header.items():
        dtype = info["dtype"]
        shape = tuple(int(d) for d in info["shape"])
        begin, end = (int(x) for x in info["data_offsets"])
        if not (0 <= begin <= end <= len(data)):
            raise ValueError("%s: tensor %s has offsets [%d, %d] outside the data section (%d)"
                             % (path, name, begin, end, len(data)))
        count = int(np.prod(shape)) if shape else 1
        if dtype in _DTYPE_BYTES and end - begin != count * _DTYPE_BYTES[dtype]:
            raise ValueError("%s: tensor %s: %d bytes for shape %s of %s"
                             % (path, name, end - begin, list(shape), dtype))
        if dtype not in _DTYPE_BYTES:
            # Only tolerable for buffers we ignore anyway; fail later if it is ever used.
            tensors[name] = (dtype, shape)
            continue
        tensors[name] = decode_raw(dtype, bytes(data[begin:end]), shape)
    return tensors, meta


# ---------------------------------------------------------------------------------------------
# config and weights

_TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu_erf(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def layer_norm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)  # biased variance
    return (x - mu) / np.sqrt(var + eps) * w + b


class GPT2Ref:
    """A GPT-2 held entirely in float64."""

    def __init__(self, config, tensors):
        c = config
        self.n_layer = int(c["n_layer"])
        self.n_head = int(c["n_head"])
        self.n_embd = int(c["n_embd"])
        n_inner = c.get("n_inner")
        self.n_inner = int(n_inner) if n_inner is not None else 4 * self.n_embd
        npos = c.get("n_positions")
        if npos is None:
            npos = c.get("n_ctx")
        self.n_positions = int(npos)
        self.vocab_size = int(c["vocab_size"])
        eps = c.get("layer_norm_epsilon")
        self.eps = float(eps) if eps is not None else 1e-5
        act = c.get("activation_function") or "gelu_new"
        if act in _TANH_GELUS:
            self.act = gelu_tanh
        elif act == "gelu":
            self.act = gelu_erf
        else:
            raise ValueError("unsupported activation_function %r" % (act,))
        saw = c.get("scale_attn_weights")
        self.scale_attn_weights = True if saw is None else bool(saw)
        inv = c.get("scale_attn_by_inverse_layer_idx")
        self.scale_by_inv_layer = False if inv is None else bool(inv)
        tie = c.get("tie_word_embeddings")
        self.tie = True if tie is None else bool(tie)
        if self.n_embd % self.n_head:
            raise ValueError("n_embd %d is not a multiple of n_head %d" % (self.n_embd, self.n_head))
        self.head_dim = self.n_embd // self.n_head

        # Normalise names: drop "transformer.", drop the attention mask buffers.
        w = {}
        for name, t in tensors.items():
            key = name[len("transformer."):] if name.startswith("transformer.") else name
            if key.endswith(".attn.bias") or key.endswith(".attn.masked_bias"):
                continue
            if isinstance(t, tuple):
                raise ValueError("tensor %s has unsupported dtype %s" % (name, t[0]))
            if key in w:
                raise ValueError("tensor %s appears twice (with and without prefix)" % key)
            w[key] = t
        C, F, V, P = self.n_embd, self.n_inner, self.vocab_size, self.n_positions

        def get(key, shape):
            if key not in w:
                raise KeyError("missing tensor %s" % key)
            a = w[key]
            if tuple(a.shape) != tuple(shape):
                raise ValueError("tensor %s has shape %s, expected %s"
                                 % (key, list(a.shape), list(shape)))
            return a

        self.wte = get("wte.weight", (V, C))
        self.wpe = get("wpe.weight", (P, C))
        self.layers = []
        for i in range(self.n_layer):
            p = "h.%d." % i
            self.layers.append({
                "ln_1.w": get(p + "ln_1.weight", (C,)), "ln_1.b": get(p + "ln_1.bias", (C,)),
                "attn.w": get(p + "attn.c_attn.weight", (C, 3 * C)),
                "attn.b": get(p + "attn.c_attn.bias", (3 * C,)),
                "proj.w": get(p + "attn.c_proj.weight", (C, C)),
                "proj.b": get(p + "attn.c_proj.bias", (C,)),
                "ln_2.w": get(p + "ln_2.weight", (C,)), "ln_2.b": get(p + "ln_2.bias", (C,)),
                "fc.w": get(p + "mlp.c_fc.weight", (C, F)), "fc.b": get(p + "mlp.c_fc.bias", (F,)),
                "mlp_proj.w": get(p + "mlp.c_proj.weight", (F, C)),
                "mlp_proj.b": get(p + "mlp.c_proj.bias", (C,)),
            })
        self.ln_f_w = get("ln_f.weight", (C,))
        self.ln_f_b = get("ln_f.bias", (C,))
        if not self.tie and "lm_head.weight" in w:
            self.lm_head = get("lm_head.weight", (V, C))
        else:
            self.lm_head = self.wte

    # -- loading -------------------------------------------------------------------------------

    @classmethod
    def load(cls, model_dir):
        with open(os.path.join(model_dir, "config.json"), "r", encoding="utf-8") as f:
            config = json.load(f)
        tensors, _ = load_safetensors(os.path.join(model_dir, "model.safetensors"))
        return cls(config, tensors)

    # -- forward -------------------------------------------------------------------------------

    def _check_ids(self, ids):
        ids = [int(i) for i in ids]
        if not ids:
            raise ValueError("empty token sequence")
        if len(ids) > self.n_positions:
            raise ValueError("%d tokens exceed n_positions %d" % (len(ids), self.n_positions))
        for i in ids:
            if not 0 <= i < self.vocab_size:
                raise ValueError("token id %d outside [0, %d)" % (i, self.vocab_size))
        return ids

    def _attention(self, x, L, layer_idx):
        T, C = x.shape
        H, D = self.n_head, self.head_dim
        qkv = x @ L["attn.w"] + L["attn.b"]  # (T, 3C): q | k | v
        q = qkv[:, 0:C].reshape(T, H, D).transpose(1, 0, 2)  # (H, T, D)
        k = qkv[:, C:2 * C].reshape(T, H, D).transpose(1, 0, 2)
        v = qkv[:, 2 * C:3 * C].reshape(T, H, D).transpose(1, 0, 2)
        scores = q @ k.transpose(0, 2, 1)  # (H, T, T)
        if self.scale_attn_weights:
            scores = scores / math.sqrt(D)
        if self.scale_by_inv_layer:
            scores = scores / float(layer_idx + 1)
        future = np.triu(np.ones((T, T), dtype=bool), k=1)
        scores = np.where(future[None, :, :], -np.inf, scores)
        scores = scores - scores.max(axis=-1, keepdims=True)
        p = np.exp(scores)
        p = p / p.sum(axis=-1, keepdims=True)
        y = p @ v  # (H, T, D)
        y = y.transpose(1, 0, 2).reshape(T, C)
        return y @ L["proj.w"] + L["proj.b"]

    def _mlp(self, x, L):
        h = self.act(x @ L["fc.w"] + L["fc.b"])
        return h @ L["mlp_proj.w"] + L["mlp_proj.b"]

    def hidden(self, ids):
        """Final hidden states after ln_f, shape (T, C), float64."""
        ids = self._check_ids(ids)
        T = len(ids)
        x = self.wte[ids] + self.wpe[:T]
        for i, L in enumerate(self.layers):
            x = x + self._attention(layer_norm(x, L["ln_1.w"], L["ln_1.b"], self.eps), L, i)
            x = x + self._mlp(layer_norm(x, L["ln_2.w"], L["ln_2.b"], self.eps), L)
        return layer_norm(x, self.ln_f_w, self.ln_f_b, self.eps)

    def forward(self, ids):
        """Logits at every position, shape (T, V), float64."""
        return self.hidden(ids) @ self.lm_head.T

    def last_logits(self, ids):
        """Logits at the last position, shape (V,), float64."""
        h = self.hidden(ids)[-1]
        return self.lm_head @ h

    def greedy(self, ids, n, return_margins=False):
        """n next tokens by repeated argmax (ties: lowest id, as np.argmax does).

        With return_margins, also the best-minus-second-best logit gap of each decision."""
        seq = list(int(i) for i in ids)
        out, margins = [], []
        for _ in range(int(n)):
            logits = self.last_logits(seq)
            t = int(np.argmax(logits))
            if return_margins:
                margins.append(top2_margin(logits))
            out.append(t)
            seq.append(t)
        return (out, margins) if return_margins else out


def top2_margin(logits):
    """Best logit minus second-best logit (0 on a tie)."""
    two = np.partition(np.asarray(logits), -2)[-2:]
    return float(two[1] - two[0])


def load(model_dir):
    return GPT2Ref.load(model_dir)


# ---------------------------------------------------------------------------------------------
# CLI

def main(argv=None):
    ap = argparse.ArgumentParser(description="float64 GPT-2 reference forward pass")
    ap.add_argument("model_dir")
    ap.add_argument("--ids", required=True, help='prompt token ids, e.g. "1 2 3"')
    ap.add_argument("--greedy", type=int, default=0, metavar="N",
                    help="also print N greedy continuation ids")
    args = ap.parse_args(argv)
    ids = [int(s) for s in args.ids.replace(",", " ").split()]
    m = GPT2Ref.load(args.model_dir)
    logits = m.last_logits(ids)
    top = sorted(range(len(logits)), key=lambda i: (-logits[i], i))[:5]
    print("top-5 last-position logits (of %d prompt tokens):" % len(ids))
    for r, i in enumerate(top):
        print("  %d  id %6d  %.10f" % (r + 1, i, logits[i]))
    if args.greedy > 0:
        cont = m.greedy(ids, args.greedy)
        print("greedy:", " ".join(str(t) for t in cont))
    return 0


if __name__ == "__main__":
    sys.exit(main())
