#!/usr/bin/env python3
"""Does a change leave the GPU machine code alone? Compiles every CUDA source (src/ and bench/, *.cu) of two trees to
cubins with the build's own nvcc flags minus line info: the working tree and a git revision (default HEAD) or a saved
copy of a tree (--base-tree). It then compares the two builds kernel by kernel, whichever file a kernel lives in: its
machine code (.text), its relocations, its attributes (.nv.info: parameters, registers, stack) and the sizes of its
shared-memory and parameter banks.

A refactor of kernel code (a helper factored out, lines moved, a file split or renamed) whose kernels all compare the
same needs no device run: the kernels are the same. Any difference, however small, is a code-layout change that the
device must time (a decode's runtime branch measured 1 us at T = 1024; a call in a setmaxnreg region 70 %).

Kernels are matched by demangled name, anonymous namespaces ignored (nvcc names them after the source's path).
--rename PATTERN=REPLACEMENT (a Python regex, repeatable) rewrites the base's names first, for kernels whose name
changed on purpose (a template parameter removed, a namespace renamed).

Usage: scripts/same_machine_code.py [--build build] [--rev HEAD | --base-tree DIR] [--rename P=R ...] [-v] [GLOB ...]
GLOB (fnmatch patterns of paths below the tree, e.g. 'src/kernels/cuda/moe_*'): compile only the sources matching one.
Exit status 0 when every kernel of both builds compares the same, 1 when one differs (or exists in one build only,
unless --allow-removed / --allow-added), 2 on a usage or compile error.
"""
import argparse
import concurrent.futures
import fnmatch
import glob
import io
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile

from compile_commands import CompileCommandsError, cuda_entries, entry_args


def fail(message):
    """A usage or compile error: the message on stderr, exit status 2 (1 means a kernel differs)."""
    sys.stderr.write(f"same_machine_code: {message}\n")
    sys.exit(2)


def template_command(build_dir):
    """The build's nvcc command for one CUDA source, as an argument list without its source, output and line info."""
    try:
        entries = cuda_entries(build_dir)
    except CompileCommandsError as e:
        fail(f"{e}; configure the build first (scripts/dev.sh build)")
    if not entries:
        fail(f"no CUDA compile units in {build_dir}/compile_commands.json")
    entry = entries[0]
    args = entry_args(entry)
    result = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-lineinfo", "-g", "-c", "-G", entry["file"]):
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a.startswith("-Xcompiler") or a.startswith("-forward-unknown") or a in ("-MD", "-MMD"):
            continue
        result.append(a)
    return result, entry["directory"]


def tree_command(template, repo_root, tree_root, source, out):
    """The template reading sources and headers from tree_root (src/ and bench/ on the include path too)."""
    args = []
    for a in template:
        if a.startswith(repo_root):
            a = tree_root + a[len(repo_root):]
        elif a.startswith("-I" + repo_root):
            a = "-I" + tree_root + a[len("-I" + repo_root):]
        args.append(a)
    return args + ["-I" + os.path.join(tree_root, "src"), "-I" + os.path.join(tree_root, "bench"), "-cubin", "-o",
                   out, source]


# --- cubin (ELF64) reading -------------------------------------------------------------------------------------------

SHT_SYMTAB = 2
SHT_RELA = 4
SHT_NOBITS = 8
STT_FUNC = 2
# .nv.info entry formats and the attributes that hold symbol indices.
EIFMT_SVAL = 4
EIATTR_PARAM_CBANK = 0x0A
GLOBAL_FUNCTION_ATTRS = {0x11: "frame_size", 0x12: "min_stack_size", 0x23: "max_stack_size", 0x2F: "regcount"}


class Cubin:
    def __init__(self, data):
        self.data = data
        if data[:4] != b"\x7fELF" or data[4] != 2:
            raise ValueError("not an ELF64 cubin")
        (shoff,) = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        self.sections = []
        for i in range(shnum):
            name, type_, flags, addr, off, size, link, info, align, entsize = struct.unpack_from(
                "<IIQQQQIIQQ", data, shoff + i * shentsize)
            self.sections.append({"name_off": name, "type": type_, "off": off, "size": size, "link": link,
                                  "info": info, "entsize": entsize})
        strtab = self.sections[shstrndx]
        for s in self.sections:
            s["name"] = self._string(strtab, s["name_off"])
        self.by_name = {s["name"]: s for s in self.sections}
        self.symbols = []
        for s in self.sections:
            if s["type"] == SHT_SYMTAB:
                names = self.sections[s["link"]]
                for k in range(s["size"] // 24):
                    name, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", data, s["off"] + 24 * k)
                    self.symbols.append({"name": self._string(names, name), "type": info & 0xF, "shndx": shndx,
                                         "value": value, "size": size})

    def _string(self, strtab, offset):
        start = strtab["off"] + offset
        end = self.data.index(b"\0", start)
        return self.data[start:end].decode()

    def contents(self, section):
        if section["type"] == SHT_NOBITS:
            return b""
        return self.data[section["off"]:section["off"] + section["size"]]

    def symbol_label(self, index):
        """A symbol by what it names, not by its index: its name, or the name of the section it stands for."""
        if index >= len(self.symbols):
            return f"?{index}"
        sym = self.symbols[index]
        if sym["name"]:
            return sym["name"]
        if 0 < sym["shndx"] < len(self.sections):
            return self.sections[sym["shndx"]]["name"]
        return ""


def nv_info_entries(data):
    """(format, attribute, value bytes) of each entry of a .nv.info section."""
    pos = 0
    while pos + 4 <= len(data):
        fmt, attr = data[pos], data[pos + 1]
        if fmt == EIFMT_SVAL:
            (size,) = struct.unpack_from("<H", data, pos + 2)
            yield fmt, attr, data[pos + 4:pos + 4 + size]
            pos += 4 + size
        else:
            yield fmt, attr, data[pos + 2:pos + 4]
            pos += 4


def kernels_of(cubin, rename):
    """{normalized name: description} of every function in the cubin with its own .text section."""
    functions = {}
    for index, sym in enumerate(cubin.symbols):
        if sym["type"] == STT_FUNC and cubin.by_name.get(".text." + sym["name"]) is not None:
            functions[sym["name"]] = {"index": index}
    # Per-function attributes in the global .nv.info, keyed by symbol index there.
    global_attrs = {}
    if ".nv.info" in cubin.by_name:
        for fmt, attr, value in nv_info_entries(cubin.contents(cubin.by_name[".nv.info"])):
            if fmt == EIFMT_SVAL and attr in GLOBAL_FUNCTION_ATTRS and len(value) == 8:
                sym_index, amount = struct.unpack("<II", value)
                label = normalize(cubin.symbol_label(sym_index), rename)
                global_attrs.setdefault(label, []).append((GLOBAL_FUNCTION_ATTRS[attr], amount))
    result = {}
    for name, f in functions.items():
        text_section = cubin.by_name[".text." + name]
        text = cubin.contents(text_section)
        relocs = []
        for rela_name in (".rela.text." + name, ".rel.text." + name):
            rela = cubin.by_name.get(rela_name)
            if rela is None:
                continue
            raw = cubin.contents(rela)
            step = 24 if rela["type"] == SHT_RELA else 16
            for k in range(len(raw) // step):
                offset, info = struct.unpack_from("<QQ", raw, k * step)
                addend = struct.unpack_from("<q", raw, k * step + 16)[0] if step == 24 else 0
                relocs.append((offset, info & 0xFFFFFFFF, normalize(cubin.symbol_label(info >> 32), rename), addend))
        info = []
        info_section = cubin.by_name.get(".nv.info." + name)
        if info_section is not None:
            for fmt, attr, value in nv_info_entries(cubin.contents(info_section)):
                if fmt == EIFMT_SVAL and attr == EIATTR_PARAM_CBANK and len(value) >= 4:
                    (sym_index,) = struct.unpack_from("<I", value)
                    label = cubin.symbol_label(sym_index)
                    bank = ".nv.constant0."
                    label = bank + normalize(label[len(bank):], rename) if label.startswith(bank) else label
                    value = label.encode() + value[4:]
                info.append((fmt, attr, bytes(value)))
        # Local functions inside this text section (out-of-line helpers), by offset and size.
        locals_ = sorted((s["value"], s["size"], normalize(s["name"], rename)) for s in cubin.symbols
                         if s["shndx"] == cubin.sections.index(text_section) and s["type"] == STT_FUNC and
                         s["name"] != name)
        banks = {}
        for prefix in (".nv.shared.", ".nv.constant0.", ".nv.local."):
            s = cubin.by_name.get(prefix + name)
            if s is not None:
                banks[prefix.strip(".")] = (s["size"], cubin.contents(s))
        key = normalize(name, rename)
        result[key] = {"text": text, "relocs": relocs, "info": info, "locals": locals_, "banks": banks,
                       "attrs": sorted(global_attrs.get(key, [])) + sorted(
                           a for label, attrs in global_attrs.items() for a in attrs
                           if any(label == l[2] for l in locals_))}
    return result


DEMANGLED = {}


def demangle_all(names):
    """Fills DEMANGLED for every mangled name in `names` (one c++filt run)."""
    todo = sorted({n for n in names if n not in DEMANGLED})
    if not todo:
        return
    run = subprocess.run(["c++filt"], input="\n".join(todo) + "\n", capture_output=True, text=True)
    lines = run.stdout.splitlines() if run.returncode == 0 else todo
    for mangled, plain in zip(todo, lines):
        DEMANGLED[mangled] = plain


def normalize(name, rename):
    """The name kernels are matched by: demangled pieces, anonymous namespaces without their file-based tag, renames."""
    pieces = name.split("$")
    demangle_all(pieces)
    plain = "$".join(DEMANGLED.get(p, p) for p in pieces)
    plain = re.sub(r"_GLOBAL__N__[0-9A-Za-z_]+", "(anonymous namespace)", plain)
    for pattern, replacement in rename:
        plain = re.sub(pattern, replacement, plain)
    return plain


def differences(a, b):
    """What differs between two kernel descriptions, as short words."""
    words = []
    if a["text"] != b["text"]:
        words.append(f"machine code ({len(a['text'])} vs {len(b['text'])} bytes)")
    if a["relocs"] != b["relocs"]:
        words.append("relocations")
    if a["info"] != b["info"]:
        words.append("attributes")
    if a["attrs"] != b["attrs"]:
        words.append(f"resources ({a['attrs']} vs {b['attrs']})")
    if a["locals"] != b["locals"]:
        words.append("local functions")
    if a["banks"] != b["banks"]:
        words.append("banks (" + ", ".join(f"{k} {v[0]}" for k, v in sorted(a["banks"].items())) + " vs " +
                     ", ".join(f"{k} {v[0]}" for k, v in sorted(b["banks"].items())) + ")")
    return words


def compile_tree(label, tree, template, directory, repo_root, tmp, jobs, patterns):
    """{source: cubin} of every *.cu under tree/src and tree/bench (those matching one of `patterns`, if any)."""
    sources = sorted(glob.glob(os.path.join(tree, "src", "**", "*.cu"), recursive=True) +
                     glob.glob(os.path.join(tree, "bench", "**", "*.cu"), recursive=True))
    if patterns:
        sources = [s for s in sources if any(fnmatch.fnmatch(os.path.relpath(s, tree), p) for p in patterns)]

    def build(source):
        rel = os.path.relpath(source, tree)
        out = os.path.join(tmp, label + "_" + rel.replace("/", "_") + ".cubin")
        run = subprocess.run(tree_command(template, repo_root, tree, source, out), cwd=directory, capture_output=True,
                             text=True)
        if run.returncode != 0:
            return rel, None, run.stderr
        with open(out, "rb") as f:
            return rel, f.read(), ""

    cubins = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for rel, data, err in pool.map(build, sources):
            if data is None:
                sys.stderr.write(err)
                fail(f"{rel} does not compile ({label})")
            cubins[rel] = data
    return cubins


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", help="build folder with compile_commands.json (default: build)")
    parser.add_argument("--rev", default="HEAD", help="git revision to compare the working tree with (default: HEAD)")
    parser.add_argument("--base-tree", help="compare with this folder (holding src/ and bench/) instead of --rev")
    parser.add_argument("--rename", action="append", default=[], metavar="PATTERN=REPLACEMENT",
                        help="regex rewrite of the base's demangled kernel names (repeatable)")
    parser.add_argument("--allow-removed", action="store_true", help="kernels only in the base are not a failure")
    parser.add_argument("--allow-added", action="store_true", help="kernels only in the working tree are not a failure")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="parallel nvcc runs")
    parser.add_argument("-v", "--verbose", action="store_true", help="also list the kernels that compare the same")
    parser.add_argument("patterns", nargs="*", metavar="GLOB", help="compile only the sources matching these")
    opts = parser.parse_args()
    rename = []
    for r in opts.rename:
        if "=" not in r:
            fail(f"--rename {r}: expected PATTERN=REPLACEMENT")
        pattern, replacement = r.split("=", 1)
        rename.append((pattern, replacement))

    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if top.returncode != 0:
        fail(f"not inside a git checkout ({top.stderr.strip()})")
    repo_root = top.stdout.strip()
    build_dir = os.path.join(repo_root, opts.build) if not os.path.isabs(opts.build) else opts.build
    template, directory = template_command(build_dir)
    base_label = opts.base_tree or opts.rev

    # Both trees are compiled from the same path, so that the file-based names nvcc gives anonymous namespaces agree.
    with tempfile.TemporaryDirectory(prefix="same_machine_code.") as tmp:
        tree = os.path.join(tmp, "tree")
        kernels = {}
        for label in ("work", "base"):
            shutil.rmtree(tree, ignore_errors=True)
            os.makedirs(tree)
            if label == "work":
                root = repo_root
            elif opts.base_tree:
                root = opts.base_tree
            else:
                root = None
                archive = subprocess.run(["git", "archive", opts.rev, "src", "bench"], cwd=repo_root,
                                         capture_output=True)
                if archive.returncode != 0:
                    fail(f"git archive {opts.rev} failed: {archive.stderr.decode().strip()}")
                with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as t:
                    t.extractall(tree)
            if root is not None:
                for part in ("src", "bench"):
                    if os.path.isdir(os.path.join(root, part)):
                        shutil.copytree(os.path.join(root, part), os.path.join(tree, part))
            cubins = compile_tree(label, tree, template, directory, repo_root, tmp, opts.jobs, opts.patterns)
            found = {}
            for rel, data in sorted(cubins.items()):
                for name, desc in kernels_of(Cubin(data), rename if label == "base" else []).items():
                    found.setdefault(name, (desc, rel))
            kernels[label] = found

        work, base = kernels["work"], kernels["base"]
        same = differ = 0
        status = 0
        for name in sorted(set(work) | set(base)):
            if name not in base:
                print(f"new     {name}  ({work[name][1]})")
                status = status if opts.allow_added else 1
                continue
            if name not in work:
                print(f"removed {name}  ({base[name][1]})")
                status = status if opts.allow_removed else 1
                continue
            words = differences(work[name][0], base[name][0])
            if words:
                differ += 1
                status = 1
                print(f"DIFFERS {name}  ({base[name][1]} -> {work[name][1]}): {'; '.join(words)}")
            else:
                same += 1
                if opts.verbose:
                    print(f"same    {name}  ({base[name][1]} -> {work[name][1]})")
        print(f"{same} of {same + differ} kernels in both builds identical to {base_label}; "
              f"{len(set(base) - set(work))} removed, {len(set(work) - set(base))} new")
        return status


if __name__ == "__main__":
    sys.exit(main())
