#!/usr/bin/env python3
"""Recompiles the grouped expert GEMM kernels with ptxas' resource report and fails on what costs them silently.

The kernels keep their accumulators in registers (up to 144 per consumer thread, with setmaxnreg moving registers
from the producer warpgroup to the consumers). A change elsewhere in a kernel (a call in the consumer's code, an
inlined trap) can make ptxas ignore setmaxnreg (C7507), serialize the wgmma pipeline (C7512) or spill, which the
build accepts and only a device benchmark notices: wide288's gate-up kernel once ran that way from one commit to the
next. This check reruns each translation unit's own compile command from compile_commands.json with `-Xptxas -v` and
fails when any kernel reports C7507, C7512 or spill bytes.

    check_ptxas.py BUILD_DIR [--pattern moe_gemm_]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

from compile_commands import CompileCommandsError, cuda_entries, entry_args

FLAGGED = re.compile(r"\((C7507|C7512)\)")
SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
# The entry function or device function the following report lines describe.
FUNCTION = re.compile(r"(?:Compiling entry function|Function properties for) '?([^'\s]+)'?")


def check(entry, workdir):
    """Problems ptxas reports for one compile command, as text lines naming the function."""
    args = entry_args(entry)
    out = os.path.join(workdir, "check.o")
    if "-o" in args:
        args[args.index("-o") + 1] = out
    else:
        args += ["-o", out]  # never the build's own object file
    args += ["-Xptxas", "-v"]
    run = subprocess.run(args, cwd=entry["directory"], capture_output=True, text=True)
    if run.returncode != 0:
        return [f"compile failed ({run.returncode}): {run.stderr.strip()[-400:]}"]
    problems = []
    function = "?"
    for line in run.stderr.splitlines():
        m = FUNCTION.search(line)
        if m:
            function = m.group(1)
        m = FLAGGED.search(line)
        if m:
            problems.append(f"{m.group(1)}: {line.split(':', 1)[-1].strip()}")
        m = SPILL.search(line)
        if m and (int(m.group(1)) or int(m.group(2))):
            problems.append(f"spills in {function}: {m.group(0)}")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build_dir")
    parser.add_argument("--pattern", default="moe_gemm_", help="compile units whose file name contains this")
    args = parser.parse_args()
    try:
        entries = [e for e in cuda_entries(args.build_dir) if args.pattern in os.path.basename(e["file"])]
    except CompileCommandsError as e:
        print(f"check_ptxas: {e}")
        return 2
    if not entries:
        print(f"check_ptxas: no .cu compile units matching '{args.pattern}' in "
              f"{os.path.join(args.build_dir, 'compile_commands.json')}")
        return 2
    failed = 0
    with tempfile.TemporaryDirectory() as workdir:
        for entry in sorted(entries, key=lambda e: e["file"]):
            problems = check(entry, workdir)
            name = os.path.basename(entry["file"])
            print(f"{name}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
            for p in problems:
                print(f"  {p}")
            failed += bool(problems)
    if failed:
        print(f"check_ptxas: {failed} of {len(entries)} compile units report C7507, C7512 or spills")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
