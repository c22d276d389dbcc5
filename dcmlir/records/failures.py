"""What kind of failure a failed record holds, so readers ask the record, not its error text.

The builder and the runner report a failure as one line of text with a prefix
saying where it happened (``build:`` from :mod:`dcmlir.build.batch`; ``load:``,
``setup:``, ``check:``, ``warmup:``, ``sample:`` from :mod:`dcmlir.measure.runner`).
:func:`failure_of` turns that text into one of :data:`FAILURES` once, where the
record is made; records written before the field existed get the same answer
when they are read (``docs/records.md``).
"""

from __future__ import annotations

import re

__all__ = ["FAILURES", "failure_of"]

FAILURES = ("build", "timeout", "load", "check", "run", "worker")
"""Why a record failed; the search and the cost model treat each kind differently.

- ``build``: the variant did not compile (an iree-compile error, a candidate the
  route cannot express, a module that fails the route's verification);
- ``timeout``: a time limit ran out, iree-compile's (a build record) or the
  measuring process's for one request (the variant hangs);
- ``load``: the runtime could not load the compiled module or its function;
- ``check``: the variant computed wrong numbers (the output check's ``MismatchError``);
  it is trusted on no shape;
- ``run``: the variant raised an error while checked, warmed up or timed, or gave no sample;
- ``worker``: the measuring process died (a crash, a signal) and was restarted.
"""

_MISMATCH = "MismatchError"  # dcmlir.measure.timing.MismatchError, named in the check's error
_TIMEOUT = re.compile(r"^(\w+: )?(timed out after |iree-compile ran past the )")
_WORKER = re.compile(r"^(\w+: )?the measuring process died")


def failure_of(error: str, kind: str = "measure") -> str:
    """The :data:`FAILURES` entry of a failed record's ``error`` text (``kind``: the record's).

    A wrong result wins wherever its name appears (as the search always matched
    it); then time limits and worker deaths, which any step can meet; then the
    step the text names.
    """
    if _MISMATCH in error:
        return "check"
    if _TIMEOUT.match(error):
        return "timeout"
    if _WORKER.match(error):
        return "worker"
    if kind == "build" or error.startswith("build:"):
        return "build"
    if error.startswith("load:"):
        return "load"
    return "run"
