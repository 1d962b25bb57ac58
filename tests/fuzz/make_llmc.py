#!/usr/bin/env python3
"""Writes a small llm.c GPT-2 checkpoint (version 3, fp32) the way src/checkpoint/llmc_import.cpp
reads it: 256 int32 header (magic 20240326, version 3, maxT, V, L, NH, C, Vp), then every
parameter in llm.c's order. Values are i * 0.001 (deterministic), or none with --no-params.

  make_llmc.py OUT maxT V L NH C Vp [--params N]   (N: write N floats instead of the header's count)
"""
import struct
import sys


def param_count(maxT, V, L, NH, C, Vp):
    return (Vp * C + maxT * C + L * C + L * C + L * 3 * C * C + L * 3 * C + L * C * C + L * C + L * C +
            L * C + L * 4 * C * C + L * 4 * C + L * C * 4 * C + L * C + C + C)


def main():
    args = sys.argv[1:]
    count = None
    if "--params" in args:
        i = args.index("--params")
        count = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 7:
        sys.exit(__doc__)
    out = args[0]
    maxT, V, L, NH, C, Vp = (int(a) for a in args[1:])
    if count is None:
        count = param_count(maxT, V, L, NH, C, Vp)
    header = [20240326, 3, maxT, V, L, NH, C, Vp] + [0] * 248
    with open(out, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%df" % count, *(i * 0.001 for i in range(count))))


if __name__ == "__main__":
    main()
