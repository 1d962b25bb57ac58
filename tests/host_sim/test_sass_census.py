"""scripts/sass-census.py on machine code written here, whose census is known: the main loop is the
longest backward branch's body holding HMMA (an inner copy loop without one, and a shorter loop with
one, are not it), instructions are counted by opcode whatever their predicate, the registers come from
-res-usage, the kernel's template arguments are read into words, and a kernel the training runs do not
launch is left out unless --all. Bad input: one line and exit 1, no arguments exit 2.

Usage: python3 test_sass_census.py
"""
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "sass-census.py")
NS = "_ZN7lattice4cuda54_GLOBAL__N__7a54c8d3_21_flash_attention_tc_cu_d3ee0249"
FWD = NS + "17tc_forward_kernelILi4ELi2ELb0ELb1EttEEvPT4_PfPKT3_S8_S8_NS0_5flash9FlashArgsEb"
DQ_FP32 = NS + "12tc_dq_kernelILi8ELb1ELb0EfLb0EEEvPfNS1_7QkvRowsEPKtPKT2_S9_S9_PKfSB_NS0_5flash9FlashArgsEb"


def sass(name, body):
    lines = [f"\t\tFunction : {name}"]
    lines += [f"        /*{16 * i:04x}*/                   {t} ;   /* 0x0 */" for i, t in enumerate(body)]
    return "\n".join(lines) + "\n"


# 0x00..: setup; 0x20: the main loop from 0x20 to the BRA at 0xb0 (10 instructions), holding an inner
# copy loop (0x30..0x50, no HMMA) and two HMMA; then a short loop with one HMMA (0xd0..0xe0).
FWD_BODY = ["S2R R0, SR_TID.X", "MOV R1, R0",
            "BAR.SYNC 0x0", "LDGSTS.E.BYPASS.128 [R1], [R2.64], P0", "IADD3 R1, R1, 0x1, RZ", "@P1 BRA 0x30",
            "LDSM.16.M88.4 R4, [R1]", "HMMA.16816.F32.BF16 R8, R4, R6, R8", "@!P2 HMMA.16816.F32.BF16 R12, R4, R6, R12",
            "MUFU.EX2 R3, R3", "ISETP.GE.U32.AND P0, PT, R1, R2, PT", "@P0 BRA 0x20",
            "NOP", "HMMA.16816.F32.BF16 R8, R4, R6, R8", "@P3 BRA 0xd0", "EXIT"]
RES = (f" Function {FWD}:\n  REG:230 STACK:0 SHARED:0 LOCAL:0\n"
       f" Function {DQ_FP32}:\n  REG:255 STACK:16 SHARED:0 LOCAL:0\n")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def main():
    fails = []
    with tempfile.TemporaryDirectory() as d:
        s, r = os.path.join(d, "k.sass"), os.path.join(d, "k.res")
        open(s, "w").write(sass(FWD, FWD_BODY) + sass(DQ_FP32, FWD_BODY))
        open(r, "w").write(RES)
        out = run("--sass", s, "--res", r)
        want = ("census forward dh 64 slabs 2 drop 0 ahead 1 in bf16 out rows: 230 registers; main loop 10 "
                "instructions, HMMA 2 (5.00 an HMMA), BRA 2, LDSM 1, MUFU 1, ISETP 1, P2R 0")
        if out.returncode != 0 or out.stdout.strip() != want:
            fails.append(f"training kernel: rc {out.returncode}, got {out.stdout.strip()!r}, want {want!r}")
        out = run("--sass", s, "--res", r, "--all")
        lines = out.stdout.strip().splitlines()
        if len(lines) != 2 or not lines[0].startswith("census dq dh 128 drop 1 ahead 0 in fp32 out fp32: 255 registers, 16 B stack;"):
            fails.append(f"--all: got {out.stdout.strip()!r}")
        open(s, "w").write(sass("_Z3fooPf", FWD_BODY))
        out = run("--sass", s)
        if out.returncode != 1 or len(out.stderr.strip().splitlines()) != 1:
            fails.append(f"no tc kernel: rc {out.returncode}, stderr {out.stderr!r}")
        out = run(os.path.join(d, "missing"))
        if out.returncode != 1 or "no such file" not in out.stderr:
            fails.append(f"missing binary: rc {out.returncode}, stderr {out.stderr!r}")
        if run().returncode != 2:
            fails.append("no arguments: exit status not 2")
    for f in fails:
        print("FAIL:", f)
    print("sass-census: ok" if not fails else f"sass-census: {len(fails)} FAIL")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
