#!/usr/bin/env python3
"""Condenses an Nsight Compute details report (ncu's default text output) into a few lines a kernel:
the kernel and its grid, then the figures that say what bounds it, the largest warp-stall reasons
where the report has the breakdown (device-check.sh asks for it), then the warp-stall sentence of
ncu's own rule, if any. scripts/device-check.sh's profile phase runs it; the whole report stays beside.
Usage: ncu-summary.py REPORT.txt"""
import re
import sys

HEADER = re.compile(r"^\s{0,4}(\S.*?)\s+\((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\)")
METRIC = re.compile(r"^\s+(.+?)\s{2,}(\S+)\s+([-\d.,]+)\s*$")
# The stall breakdown asked for by --metrics (device-check.sh): unit column present or not.
STALL = re.compile(r"^\s+smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio\s+(?:\S+\s+)?([-\d.,]+)\s*$")
KEEP = {  # ncu's metric name: the short label printed
    "Duration": "time",
    "Compute (SM) Throughput": "SM%",
    "Memory Throughput": "mem%",
    "DRAM Throughput": "dram%",
    "Registers Per Thread": "regs",
    "Achieved Occupancy": "occ%",
    "Theoretical Occupancy": "theo%",
    "Block Limit Registers": "blocks_by_regs",
    "Block Limit Shared Mem": "blocks_by_smem",
    "Warp Cycles Per Issued Instruction": "cyc/issue",
    "Issue Slots Busy": "issue%",
    "No Eligible": "noelig%",
}


def short_name(full):
    m = re.search(r"(\w+)(<[^()]*>)?\(", full)
    return (m.group(1) + (m.group(2) or "")) if m else full[:80]


def main(path):
    kernels, cur = [], None
    with open(path, errors="replace") as f:
        for line in f:
            h = HEADER.match(line)
            if h and "Section" not in line:
                cur = {"name": short_name(h.group(1)), "grid": f"{h.group(2)}x{h.group(3)}x{h.group(4)}",
                       "block": h.group(5), "m": {}, "stall": "", "stalls": {}}
                kernels.append(cur)
                continue
            if cur is None:
                continue
            st = STALL.match(line)
            if st:
                cur["stalls"][st.group(1)] = float(st.group(2).replace(",", ""))
                continue
            m = METRIC.match(line)
            if m and m.group(1).strip() in KEEP:
                unit = m.group(2)
                value = m.group(3).replace(",", "")
                label = KEEP[m.group(1).strip()]
                cur["m"][label] = value + (unit if label == "time" else "")
            elif cur.get("more"):  # the rule's sentence goes on over the next line
                cur["stall"] = (cur["stall"] + " " + " ".join(line.split()))[:240]
                cur["more"] = False
            elif "cycles being stalled" in line and not cur["stall"]:
                cur["stall"], cur["more"] = " ".join(line.split()), True
    if not kernels:
        print("ncu summary: no kernel found in the report")
        return
    for k in kernels:
        figures = " ".join(f"{label}={k['m'][label]}" for label in KEEP.values() if label in k["m"])
        print(f"ncu {k['name']} grid {k['grid']} block {k['block']}: {figures}")
        if k["stalls"]:  # the largest first: cycles stalled a warp for each instruction issued
            top = sorted(k["stalls"].items(), key=lambda kv: -kv[1])[:6]
            print("ncu   stalled cycles an issue: " + " ".join(f"{r}={v:.2f}" for r, v in top))
        if k["stall"]:
            print(f"ncu   {k['stall']}")


if __name__ == "__main__":
    main(sys.argv[1])
