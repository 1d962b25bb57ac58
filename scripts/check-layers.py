#!/usr/bin/env python3
"""Checks that every source file under SRC includes only its own folder and the folders
SRC/layers.txt allows it, and that layers.txt itself only points downwards.
Usage: check-layers.py [SRC]   (default: src beside this script). Exit 1 on any violation."""
import os, re, sys

src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
order, allowed, errors = [], {}, []
for n, line in enumerate(open(os.path.join(src, "layers.txt")), 1):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    name, _, deps = line.partition(":")
    name = name.strip()
    for d in deps.split():
        if d not in allowed:
            errors.append(f"layers.txt:{n}: {name} may use {d}, which is not a layer listed above it")
    order.append(name)
    allowed[name] = set(deps.split())

include = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
for root, _, files in os.walk(src):
    for f in sorted(files):
        if not f.endswith((".hpp", ".cpp", ".h", ".cc", ".cu", ".cuh")):
            continue
        path = os.path.join(root, f)
        rel = os.path.relpath(path, src)
        layer = rel.split(os.sep)[0]
        if layer not in allowed:
            errors.append(f"{rel}: folder {layer} is not a layer in layers.txt")
            continue
        for n, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
            m = include.match(line)
            if not m:
                continue
            target = m.group(1).split("/")[0]
            if "/" not in m.group(1) or target == layer:
                continue
            if target not in allowed:  # a header outside src (e.g. oneapi/dnnl)
                continue
            if target not in allowed[layer]:
                where = "above" if order.index(target) > order.index(layer) else "beside"
                errors.append(f"{rel}:{n}: includes {m.group(1)}, but {layer} may not use {target} ({where} it)")

# The backend seam (docs/design.md §18): the model and the tensor-parallel pieces call kernels only as
# dev::name(...), so the run's device serves every one. A kernel's name called bare there is an error
# (names the folder declares itself, such as the model's own split_heads(…, context), are its own).
SEAM_FOLDERS = ("model", "tensor_parallel")
declared = re.compile(r"^[A-Za-z_][\w:<>,\s\*&]*?[\s\*&]([a-z_][a-z0-9_]*)\(", re.M)
def names_in(folder, suffix=".hpp"):
    out = set()
    for f in os.listdir(os.path.join(src, folder)):
        if f.endswith(suffix):
            out |= set(declared.findall(open(os.path.join(src, folder, f), encoding="utf-8").read()))
    return out
# Index rules the kernels' headers declare beside the kernels, which run on the host and touch no
# tensor's memory: callable bare (kernels/flash_attention.hpp's for_each_ring_block says which blocks
# the CP ring computes, for the ring and for the planner's timing of it alike).
NOT_KERNELS = {"for_each_ring_block"}
kernel_names = names_in("kernels") - NOT_KERNELS
for folder in SEAM_FOLDERS:
    own = names_in(folder)
    bare = [n for n in sorted(kernel_names - own)]
    call = re.compile(r"(?<![\w:.>])(" + "|".join(map(re.escape, bare)) + r")\(")
    for f in sorted(os.listdir(os.path.join(src, folder))):
        if not f.endswith(".cpp"):
            continue
        for n, line in enumerate(open(os.path.join(src, folder, f), encoding="utf-8"), 1):
            code = line.split("//", 1)[0]
            m = call.search(code)
            if m and not re.match(r"^\s*#", code):
                errors.append(f"{folder}/{f}:{n}: calls the kernel {m.group(1)} directly; the seam's dev::{m.group(1)} "
                              "serves it on the run's device (backend/device_ops.hpp)")

for e in errors:
    print(e, file=sys.stderr)
if errors:
    print(f"check-layers: {len(errors)} violation(s) of the layering in layers.txt or of the backend seam", file=sys.stderr)
    sys.exit(1)
print(f"check-layers: {len(order)} layers, every include points down")
