#!/usr/bin/env python3
"""Does a change leave the GPU machine code alone? Compiles every CUDA source of the build to a cubin twice, from the
working tree and from a git revision (default HEAD), with the build's own nvcc flags minus line info, and compares the
two cubins byte for byte.

A refactor of kernel code (a helper factored out, lines moved) that gives byte-identical cubins needs no device run:
the kernels are the same. Any difference, however small, is a code-layout change that the device must time
(docs/cuda-moe-notes.md: 1 us at T = 1024 from a decode's runtime branch, 70 % from a call in a setmaxnreg region).

Usage: scripts/same_machine_code.py [--build build] [--rev HEAD] [FILE.cu ...]
Exit status 0 when every compared cubin is identical, 1 when one differs, 2 on a usage or compile error.
"""
import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

from compile_commands import CompileCommandsError, cuda_entries, entry_args


def fail(message):
    """A usage or compile error: the message on stderr, exit status 2 (1 means a cubin differs)."""
    sys.stderr.write(f"same_machine_code: {message}\n")
    sys.exit(2)


def cuda_commands(build_dir):
    try:
        return {e["file"]: e for e in cuda_entries(build_dir)}
    except CompileCommandsError as e:
        fail(f"{e}; configure the build first (scripts/dev.sh build)")


def cubin_command(entry, repo_root, tree_root, out):
    """The entry's nvcc command, reading sources and headers from tree_root, writing a cubin without line info."""
    args = entry_args(entry)
    result = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-lineinfo", "-g", "-c", "-G"):
            continue
        if a == "-o":
            skip = True
            continue
        if a.startswith("-Xcompiler") or a.startswith("-forward-unknown"):
            continue
        if a.startswith(repo_root):
            a = tree_root + a[len(repo_root):]
        elif a.startswith("-I" + repo_root):
            a = "-I" + tree_root + a[len("-I" + repo_root):]
        result.append(a)
    return result + ["-cubin", "-o", out]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", help="build folder with compile_commands.json (default: build)")
    parser.add_argument("--rev", default="HEAD", help="git revision to compare the working tree with (default: HEAD)")
    parser.add_argument("files", nargs="*", help="CUDA sources to compare (default: every one the build compiles)")
    opts = parser.parse_args()

    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if top.returncode != 0:
        fail(f"not inside a git checkout ({top.stderr.strip()})")
    repo_root = top.stdout.strip()
    commands = cuda_commands(os.path.join(repo_root, opts.build) if not os.path.isabs(opts.build) else opts.build)
    if opts.files:
        wanted = {os.path.realpath(f) for f in opts.files}
        commands = {f: e for f, e in commands.items() if os.path.realpath(f) in wanted}
        if len(commands) != len(wanted):
            fail("some files are not CUDA sources of this build")

    # Both trees are compiled from the same path: nvcc names anonymous-namespace kernels after the source's path, so
    # the same code from two folders gives cubins that differ in their symbol names.
    with tempfile.TemporaryDirectory(prefix="same_machine_code.") as tmp:
        tree = os.path.join(tmp, "tree")
        archive = subprocess.run(["git", "archive", opts.rev, "src"], cwd=repo_root, capture_output=True)
        if archive.returncode != 0:
            fail(f"git archive {opts.rev} failed: {archive.stderr.decode().strip()}")
        cubins = {}
        for label in ("work", "base"):
            shutil.rmtree(tree, ignore_errors=True)
            if label == "work":
                shutil.copytree(os.path.join(repo_root, "src"), os.path.join(tree, "src"))
            else:
                os.makedirs(tree)
                with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as t:
                    t.extractall(tree)
            for source, entry in sorted(commands.items()):
                name = os.path.relpath(source, repo_root)
                if not os.path.exists(os.path.join(tree, name)):
                    continue
                out = os.path.join(tmp, label + "_" + name.replace("/", "_") + ".cubin")
                run = subprocess.run(cubin_command(entry, repo_root, tree, out), cwd=entry["directory"],
                                     capture_output=True, text=True)
                if run.returncode != 0:
                    sys.stderr.write(run.stderr)
                    fail(f"{name} does not compile ({label})")
                with open(out, "rb") as f:
                    cubins[(label, name)] = f.read()

        compared = 0
        differ = 0
        for source in sorted(commands):
            name = os.path.relpath(source, repo_root)
            if ("base", name) not in cubins:
                print(f"{name}: new (not at {opts.rev})")
                continue
            compared += 1
            same = cubins[("work", name)] == cubins[("base", name)]
            differ += 0 if same else 1
            print(f"{name}: {'same' if same else 'DIFFERS'}")
        print(f"{compared - differ} of {compared} cubins identical to {opts.rev}")
        return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
