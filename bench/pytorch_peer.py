"""PyTorch peer for the speed target: one fp32 training step of a GPT-2 (forward, backward, gradient
clipping, AdamW) timed on random tokens, with PyTorch's own fused CPU kernels (F.linear, F.layer_norm,
F.gelu(approximate="tanh"), F.cross_entropy) so the peer is as fast as stock PyTorch gets.

Prints one JSON line: {"peer":"pytorch","tokens_per_s":F,...}. Default shape = the GPT-2-small target:
12 layers, hidden 768, 12 heads, seq-len 256, batch 4, vocab 8192, dropout 0, 2 threads.
With --autocast bf16 the forward (and so the backward's matmuls) runs under
torch.autocast("cpu", dtype=torch.bfloat16): PyTorch's own bf16 path (oneDNN's AMX or AVX-512 BF16
kernels where the CPU has them), the fair peer of lattice --activation-dtype bf16.
On a GPU (--device cuda: scripts/device-check.sh's speed phase) the model, the tokens and the step
run there, autocast is torch.autocast("cuda", bf16), AdamW is PyTorch's fused CUDA one, each step is
timed between torch.cuda.synchronize() calls, and --mode compile runs the model through torch.compile.
Usage: python3 bench/pytorch_peer.py [--steps N] [--warmup N] [--threads T] [--autocast bf16]
                                     [--device cpu|cuda] [--mode eager|compile] [--attention manual|sdpa]
                                     [--peak-flops F] [shape flags]
"""
import argparse
import json
import math
import os
import sys
import time

try:
    import torch
except ImportError:  # pyenv or venv interpreters on PATH may lack Debian's python3-torch
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != "/usr/bin/python3":
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("python3-torch is not installed (apt-get install python3-torch)")
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, h, a, sdpa=False):
        super().__init__()
        self.a = a
        self.sdpa = sdpa  # attention through F.scaled_dot_product_attention (flash kernels on a GPU)
        self.ln_1 = torch.nn.LayerNorm(h, eps=1e-5)
        self.c_attn = torch.nn.Linear(h, 3 * h)
        self.c_proj = torch.nn.Linear(h, h)
        self.ln_2 = torch.nn.LayerNorm(h, eps=1e-5)
        self.c_fc = torch.nn.Linear(h, 4 * h)
        self.mlp_proj = torch.nn.Linear(4 * h, h)

    def forward(self, x, mask):
        b, s, h = x.shape
        dh = h // self.a
        q, k, v = self.c_attn(self.ln_1(x)).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.a, dh).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = torch.softmax((q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(dh)) + mask, dim=-1) @ v
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, s, h))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, L, h, a, s, v, sdpa=False):
        super().__init__()
        self.wte = torch.nn.Embedding(v, h)
        self.wpe = torch.nn.Embedding(s, h)
        self.blocks = torch.nn.ModuleList(Block(h, a, sdpa) for _ in range(L))
        self.ln_f = torch.nn.LayerNorm(h, eps=1e-5)
        self.register_buffer("mask", torch.full((s, s), float("-inf")).triu(1))
        for n, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith("c_proj.weight") or n.endswith("mlp_proj.weight") else 0.02
                torch.nn.init.normal_(p, 0.0, std)
            elif n.endswith("bias"):
                torch.nn.init.zeros_(p)

    def forward(self, idx, targets):
        s = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:s]
        for blk in self.blocks:
            x = blk(x, self.mask[:s, :s])
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied output projection, fp32 logits
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3, help="timed steps")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none",
                    help="bf16: the forward under torch.autocast('cpu', dtype=torch.bfloat16)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager", help="compile: torch.compile(model)")
    ap.add_argument("--attention", choices=["manual", "sdpa"], default="manual",
                    help="manual: softmax(QKᵀ)V with the s×s scores (lattice's unfused attention); sdpa: "
                         "F.scaled_dot_product_attention, causal (flash kernels on a GPU: the peer of --attention fused)")
    ap.add_argument("--peak-flops", type=float, default=0.0, help="for the MFU in the JSON line (6·N·tokens + attention)")
    args = ap.parse_args()
    if args.attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        sys.exit(f"--attention sdpa needs PyTorch 2.0 or later (F.scaled_dot_product_attention); this is {torch.__version__}")
    import contextlib
    dev = torch.device(args.device)
    cast = (lambda: torch.autocast(args.device, dtype=torch.bfloat16)) if args.autocast == "bf16" else contextlib.nullcontext
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = GPT(args.layers, args.hidden, args.heads, args.seq_len, args.vocab, args.attention == "sdpa").to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if args.device == "cuda" else {}))
    step_model = torch.compile(model) if args.mode == "compile" else model
    b, s = args.micro_batch, args.seq_len
    times, losses = [], []
    for step in range(args.warmup + args.steps):
        data = torch.randint(0, args.vocab, (b, s + 1), device=dev)
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with cast():
            loss = step_model(data[:, :-1], data[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        print(f"pytorch step {step + 1}: loss {losses[-1]:.4f} {dt:.3f} s{' (warm-up)' if step < args.warmup else ''}",
              file=sys.stderr, flush=True)
        if step >= args.warmup:
            times.append(dt)
    tokens_per_s = b * s * len(times) / sum(times)
    n_params = sum(p.numel() for p in model.parameters())
    # Model FLOPs a token (as lattice counts them): 6 per parameter, plus attention's 12·L·h·s (causal
    # half not subtracted), the tied output projection inside the parameters.
    flops_per_token = 6 * n_params + 12 * args.layers * args.hidden * s
    mfu = tokens_per_s * flops_per_token / args.peak_flops if args.peak_flops > 0 else None
    times_sorted = sorted(times)
    print(json.dumps({"peer": "pytorch", "device": args.device, "mode": args.mode, "autocast": args.autocast,
                      "attention": args.attention,
                      "micro_batch": b, "median_step_s": times_sorted[len(times) // 2], "mfu": mfu,
                      "tokens_per_s": tokens_per_s, "step_s": sum(times) / len(times),
                      "best_step_s": min(times), "step_times": times,
                      "torch": torch.__version__, "threads": torch.get_num_threads(), "steps": len(times)}))


if __name__ == "__main__":
    main()
