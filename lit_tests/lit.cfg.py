"""lit configuration: run dcmlir-opt through its installed entry point, check with
the Python port of FileCheck (no LLVM build needed)."""

import os
import shutil
import sys

import lit.formats

config.name = "dcmlir"  # noqa: F821 (lit injects `config`)
config.test_format = lit.formats.ShTest(execute_external=False)  # noqa: F821
config.suffixes = [".mlir"]  # noqa: F821
config.test_source_root = os.path.dirname(__file__)  # noqa: F821
config.excludes = ["Inputs"]  # noqa: F821

# The tools come from the environment dcmlir is installed in: the directory of the
# Python running lit first, then PATH.
bin_dirs = [os.path.dirname(sys.executable), os.environ.get("PATH", "")]
config.environment["PATH"] = os.pathsep.join(bin_dirs)  # noqa: F821
# A PYTHONPATH given (a checkout run without installing it) is what the tools import.
if os.environ.get("PYTHONPATH"):
    config.environment["PYTHONPATH"] = os.environ["PYTHONPATH"]  # noqa: F821


def _require(tool: str) -> str:
    found = shutil.which(tool, path=config.environment["PATH"])  # noqa: F821
    if found is None:
        lit_config.fatal(  # noqa: F821
            f"'{tool}' not found; install the project first: pip install -e '.[dev]'"
        )
    return found


config.substitutions.append(("dcmlir-opt", _require("dcmlir-opt")))  # noqa: F821
config.substitutions.append(("FileCheck", _require("filecheck")))  # noqa: F821
