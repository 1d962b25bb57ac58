"""An independent GPT-2 in plain PyTorch (1.13), written from the architecture description
(docs/design.md §2), used as the numerical reference for lattice.

GPT-2: token embedding [v, h] + learned position embedding [s, h]; L pre-LayerNorm blocks
    x = x + proj(attn(ln_1(x)))          attention: qkv = x·W_qkv + b, causal softmax(QKᵀ/√dh)·V
    x = x + fc2(gelu_tanh(fc1(ln_2(x)))) fc1: h→4h, fc2: 4h→h
final LayerNorm, logits = x·wteᵀ (tied), cross-entropy in the model's dtype (fp32 or fp64).
Dropout is left out: the parity tests run with dropout 0.

Weights use Hugging Face GPT-2 names and its Conv1D layout ([in, out]: y = x·W + b), which is
what lattice's model.safetensors holds. safetensors files are parsed here with json + numpy
(no safetensors or transformers package needed).
"""
import json
import math
import struct

import numpy as np
import torch

LN_EPS = 1e-5

_ST_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I32": np.int32, "I64": np.int64}


def read_safetensors(path):
    """Returns {name: numpy array} from a .safetensors file (8-byte LE header length, JSON header, data)."""
    with open(path, "rb") as f:
        blob = f.read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_len].decode("utf-8"))
    data = memoryview(blob)[8 + header_len:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _ST_DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        arr = np.frombuffer(data[begin:end], dtype=dtype).reshape(info["shape"])
        out[name] = arr.copy()
    return out


def new_gelu(x):
    """GeLU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


class Conv1D(torch.nn.Module):
    """y = x·W + b with W stored [in, out] (GPT-2's layout)."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(n_in, n_out))
        self.bias = torch.nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).reshape(*x.shape[:-1], -1)


class LayerNorm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))
        self.bias = torch.nn.Parameter(torch.zeros(n))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased variance, as GPT-2
        return (x - mean) / torch.sqrt(var + LN_EPS) * self.weight + self.bias


class Attention(torch.nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        assert hidden % heads == 0
        self.hidden, self.heads = hidden, heads
        self.c_attn = Conv1D(hidden, 3 * hidden)
        self.c_proj = Conv1D(hidden, hidden)

    def forward(self, x):
        b, s, h = x.shape
        a, dh = self.heads, h // self.heads
        q, k, v = self.c_attn(x).split(h, dim=-1)
        q = q.reshape(b, s, a, dh).transpose(1, 2)  # [b, a, s, dh]
        k = k.reshape(b, s, a, dh).transpose(1, 2)
        v = v.reshape(b, s, a, dh).transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
        future = torch.triu(torch.ones(s, s, dtype=torch.bool, device=x.device), diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        ctx = (probs @ v).transpose(1, 2).reshape(b, s, h)
        return self.c_proj(ctx)


class MLP(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.c_fc = Conv1D(hidden, 4 * hidden)
        self.c_proj = Conv1D(4 * hidden, hidden)

    def forward(self, x):
        return self.c_proj(new_gelu(self.c_fc(x)))


class Block(torch.nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.ln_1 = LayerNorm(hidden)
        self.attn = Attention(hidden, heads)
        self.ln_2 = LayerNorm(hidden)
        self.mlp = MLP(hidden)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(torch.nn.Module):
    def __init__(self, layers, hidden, heads, seq_len, vocab):
        super().__init__()
        self.vocab, self.seq_len = vocab, seq_len
        self.wte = torch.nn.Embedding(vocab, hidden)
        self.wpe = torch.nn.Embedding(seq_len, hidden)
        self.h = torch.nn.ModuleList([Block(hidden, heads) for _ in range(layers)])
        self.ln_f = LayerNorm(hidden)

    def init_gpt2(self, seed=0):
        """GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/√(2L)), LN 1/0, biases 0."""
        g = torch.Generator().manual_seed(seed)
        resid_std = 0.02 / math.sqrt(2 * len(self.h))
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith(".bias"):
                    p.zero_()
                elif ".ln_" in name or name.startswith("ln_f"):
                    p.fill_(1.0)
                else:
                    std = resid_std if name.endswith("c_proj.weight") else 0.02
                    p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * std)
        return self

    def forward(self, idx, targets=None):
        b, s = idx.shape
        pos = torch.arange(s, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)[None]
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied output projection
        if targets is None:
            return logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, self.vocab), targets.reshape(-1))
        return logits, loss

    def decay_groups(self, weight_decay):
        """AdamW parameter groups: decay on wte, wpe and the four matrices; none on LayerNorm or biases."""
        decay, no_decay = [], []
        for name, p in self.named_parameters():
            (decay if p.dim() >= 2 else no_decay).append(p)
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]

    def load_state(self, tensors):
        """Copies HF-named arrays (Conv1D layout, unpadded vocab) into the model; every name must match."""
        own = dict(self.named_parameters())
        missing = sorted(set(own) - set(tensors))
        extra = sorted(set(tensors) - set(own))
        if missing or extra:
            raise ValueError(f"checkpoint names differ: missing {missing[:5]}, unexpected {extra[:5]}")
        with torch.no_grad():
            for name, p in own.items():
                src = torch.from_numpy(np.ascontiguousarray(tensors[name]))
                if tuple(src.shape) != tuple(p.shape):
                    raise ValueError(f"{name}: checkpoint shape {tuple(src.shape)} != model {tuple(p.shape)}")
                p.copy_(src.to(p.dtype))
        return self


def from_checkpoint(path, layers, hidden, heads, seq_len, vocab, dtype=torch.float32):
    """A GPT2 with the weights of lattice's model.safetensors at `path`."""
    model = GPT2(layers, hidden, heads, seq_len, vocab).to(dtype)
    return model.load_state(read_safetensors(path))


def read_llmc_tokens(path):
    """Tokens of an llm.c token file: 256 int32 header (20240520, 1, count), then uint16 tokens."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        if header[0] != 20240520 or header[1] != 1:
            raise ValueError(f"{path}: not an llm.c token file (header {header[:3]})")
        tokens = np.frombuffer(f.read(), dtype="<u2")
    if len(tokens) != header[2]:
        raise ValueError(f"{path}: header says {header[2]} tokens, file has {len(tokens)}")
    return tokens


def write_llmc_tokens(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def unshuffled_batch(tokens, step, global_batch, seq_len):
    """lattice's `--shuffle off` order: row r of step k starts at ((k·B + r) mod W)·s, W = (n−1)//s."""
    windows = (len(tokens) - 1) // seq_len
    rows = []
    for r in range(global_batch):
        start = ((step * global_batch + r) % windows) * seq_len
        rows.append(tokens[start:start + seq_len + 1].astype(np.int64))
    w = torch.from_numpy(np.stack(rows))
    return w[:, :-1], w[:, 1:]
