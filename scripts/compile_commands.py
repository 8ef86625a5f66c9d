"""The CUDA compile units of a CMake build, read from its compile_commands.json, for the scripts that rerun their
compile commands with other outputs or flags (check_ptxas.py, same_machine_code.py)."""
import json
import os
import shlex


class CompileCommandsError(Exception):
    """compile_commands.json is missing or unreadable; the message names the file and says why."""


def cuda_entries(build_dir):
    """The build's .cu compile units (compile_commands.json entries)."""
    path = os.path.join(build_dir, "compile_commands.json")
    try:
        with open(path) as f:
            entries = json.load(f)
    except (OSError, ValueError) as e:
        raise CompileCommandsError(f"cannot read {path}: {e}") from e
    return [e for e in entries if e["file"].endswith(".cu")]


def entry_args(entry):
    """An entry's compile command as an argument list (either form CMake writes)."""
    return shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
