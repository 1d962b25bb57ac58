#!/usr/bin/env python3
"""The tensor-core attention kernels' instruction census, read from their machine code.

Reads `cuobjdump -sass` and `cuobjdump -res-usage` output of a binary holding the kernels (the text
files given, or runs cuobjdump on BINARY) and prints, for each tc kernel, its registers and its main
loop (the longest backward branch's body holding mma instructions: one key or query tile of the walk)
counted by kind: every instruction, the tensor-core products (HMMA), the branches, the shared-memory
fragment loads (LDSM), the exponentials (MUFU), the compares (ISETP) and the predicate spills (P2R).
Instructions a product is the figure to watch: the products are fixed by the tile, everything else
is issue time the tensor cores wait through. It is a static count, not a measurement of time: it
says what the compiler emitted, on any machine with a cuobjdump that reads the binary.

  scripts/sass-census.py BINARY [--all]          (runs cuobjdump from PATH or $CUOBJDUMP)
  scripts/sass-census.py --sass F --res F [--all] (saved outputs)
Without --all, the kernels the GPT-2 and Table 4 runs launch (bf16 kept inputs, copies ahead, the
token-row outputs; without and with the dropout); --all prints every tc kernel.
"""
import argparse
import collections
import os
import re
import subprocess
import sys

KERNEL = re.compile(r"tc_(forward|dq|dkdv)_kernelI(.*?)EEvP")


def describe(kind, args):
    """Template arguments (mangled) in words: NC, [MT,] DROP, AHEAD, TIn, then TOut (forward) or ROWS.
    Returns the words and whether the training runs launch it (bf16 kept inputs, copies ahead, the
    token-row outputs)."""
    toks = [int(t[2:-1]) if t.startswith("Li") else (t[2] == "1" if t.startswith("Lb") else t == "t")
            for t in re.findall(r"Li\d+E|Lb[01]E|[tf]", args)]
    bf16 = {True: "bf16", False: "fp32"}
    if kind == "forward" and len(toks) == 6:
        nc, mt, drop, ahead, tin, tout = toks
        return (f"forward dh {16 * nc} slabs {mt} drop {int(drop)} ahead {int(ahead)} in {bf16[tin]} "
                f"out {'rows' if tout else 'fp32'}"), ahead and tin and tout
    if kind != "forward" and len(toks) == 5:
        nc, drop, ahead, tin, rows = toks
        return (f"{kind} dh {16 * nc} drop {int(drop)} ahead {int(ahead)} in {bf16[tin]} "
                f"out {'rows' if rows else 'fp32'}"), ahead and tin and rows
    return f"{kind} {args}", False


def functions(sass):
    for chunk in re.split(r"(?:^|\n)\s*Function : ", sass)[1:]:
        name = chunk.split("\n", 1)[0].strip()
        ins = []
        for line in chunk.split("\n"):
            m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
            if m:
                ins.append((int(m.group(1), 16), m.group(2).strip()))
        yield name, ins


def main_loop(ins):
    at = {a: i for i, (a, _) in enumerate(ins)}
    best = None
    for i, (a, text) in enumerate(ins):
        m = re.search(r"BRA\s+.*?0x([0-9a-f]+)", text)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target < a and target in at:
            body = ins[at[target]:i + 1]
            if any("HMMA" in t for _, t in body) and (best is None or len(body) > len(best)):
                best = body
    return best


def opcode(text):
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0]


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary", nargs="?")
    ap.add_argument("--sass")
    ap.add_argument("--res")
    ap.add_argument("--all", action="store_true")
    a = ap.parse_args()
    if a.sass:
        sass = open(a.sass).read()
        res = open(a.res).read() if a.res else ""
    elif a.binary:
        if not os.path.isfile(a.binary):
            print(f"sass-census: {a.binary}: no such file", file=sys.stderr)
            return 1
        tool = os.environ.get("CUOBJDUMP", "cuobjdump")
        try:
            res = run(tool, "-res-usage", a.binary)
            # Only the kernels to report: the whole binary's SASS takes cuobjdump a minute.
            names = [n for n in re.findall(r"Function (\S+?):", res)
                     if KERNEL.search(n) and (a.all or describe(*KERNEL.search(n).groups())[1])]
            sass = run(tool, "-sass", "-fun", ",".join(names), a.binary) if names else ""
        except (OSError, subprocess.CalledProcessError) as e:
            err = (getattr(e, "stderr", "") or "").strip()
            print(f"sass-census: {tool} could not read {a.binary}: {err.splitlines()[-1] if err else e}", file=sys.stderr)
            return 1
    else:
        ap.print_usage(sys.stderr)
        return 2
    regs = {}
    for m in re.finditer(r"Function (\S+):\s*\n?\s*REG:(\d+)\s+STACK:(\d+)", res):
        regs[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    rows = []
    for name, ins in functions(sass):
        k = KERNEL.search(name)
        if not k:
            continue
        words, training = describe(k.group(1), k.group(2))
        if not a.all and not training:
            continue
        body = main_loop(ins)
        if not body:
            continue
        c = collections.Counter(opcode(t) for _, t in body)
        r, stack = regs.get(name, (None, None))
        reg = f"{r} registers{f', {stack} B stack' if stack else ''}" if r is not None else "registers ?"
        rows.append(f"census {words}: {reg}; main loop {len(body)} instructions, HMMA {c['HMMA']} "
                    f"({len(body) / c['HMMA']:.2f} an HMMA), BRA {c['BRA']}, LDSM {c['LDSM']}, MUFU {c['MUFU']}, "
                    f"ISETP {c['ISETP']}, P2R {c['P2R']}")
    if not rows:
        print("sass-census: no tensor-core attention kernel in the input", file=sys.stderr)
        return 1
    print("\n".join(sorted(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
