"""Comparisons for scripts/device-check.sh: one line each, "NAME: what=VALUE tol=T ok|FAIL", exit 1 on FAIL.

  device-compare.py losses NAME A.jsonl B.jsonl TOL      per-step losses, max |a−b|/|a| (TOL 0: the same bits)
  device-compare.py weights NAME A.safetensors B.safetensors TOL
                                                         every F32 tensor, max |a−b| / max |a| over the file
  device-compare.py layers NAME RUN.jsonl TOL            the summary's kept bytes per layer against the
                                                         formula: max |measured/formula − 1|
  device-compare.py device NAME RUN.jsonl TOL            the summary's device memory: |driver − context −
                                                         held| / driver
"""
import json
import struct
import sys


def losses(path):
    return [json.loads(x)["loss"] for x in open(path) if '"event":"step"' in x]


def summary(path):
    return [json.loads(x) for x in open(path) if '"event":"summary"' in x][-1]


def tensors(path):
    import numpy as np  # only the weights need it: the losses, layers and device checks run without numpy
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype=np.float32)
    return out


def report(name, what, value, tol, ok):
    print(f"{name}: {what}={value:.3g} tol={tol:g} {'ok' if ok else 'FAIL'}")
    return ok


def main():
    kind, name = sys.argv[1], sys.argv[2]
    if kind == "losses":
        a, b, tol = losses(sys.argv[3]), losses(sys.argv[4]), float(sys.argv[5])
        if not a or len(a) != len(b):
            return report(name, f"steps {len(a)} vs {len(b)}", float("nan"), tol, False)
        if tol == 0:
            differ = sum(x != y for x, y in zip(a, b))
            return report(name, f"steps_differing_of_{len(a)}", differ, 0, differ == 0)
        rel = max(abs(x - y) / abs(x) for x, y in zip(a, b))
        return report(name, f"max_rel_loss_diff_over_{len(a)}_steps", rel, tol, rel <= tol)
    if kind == "weights":
        a, b, tol = tensors(sys.argv[3]), tensors(sys.argv[4]), float(sys.argv[5])
        if set(a) != set(b) or not a:
            return report(name, "tensor names differ", float("nan"), tol, False)
        import numpy as np
        scale = max(float(np.abs(t).max()) for t in a.values())
        diff = max(float(np.abs(a[k].astype(np.float64) - b[k]).max()) for k in a)
        rel = diff / scale
        if tol == 0:
            return report(name, "max_abs_weight_diff", diff, 0, diff == 0)
        return report(name, "max_weight_diff_over_max_weight", rel, tol, rel <= tol)
    if kind == "layers":
        m, tol = summary(sys.argv[3])["memory"]["ranks"][0], float(sys.argv[4])
        meas, form = m["activation_bytes_per_layer"], m["activation_bytes_per_layer_formula"]
        worst = max(abs(x / f - 1) for x, f in zip(meas, form))
        return report(name, f"max_kept_over_formula_minus_1 (layer 0: {meas[0]} B, formula {form[0]} B)", worst, tol,
                      worst <= tol)
    if kind == "device":
        d, tol = summary(sys.argv[3]).get("device_memory"), float(sys.argv[4])
        if not d:
            return report(name, "no device_memory in the summary", float("nan"), tol, False)
        gap = abs(d["untracked_bytes"]) / d["driver_used_bytes"]
        return report(name, "untracked_over_driver_used (driver {driver_used_bytes} B, context {context_bytes} B, "
                      "held {held_bytes} B, cuBLASLt {cublaslt_workspace_bytes} B)".format(**d), gap, tol, gap <= tol)
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
