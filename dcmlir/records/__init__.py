"""Tuning records: append-only JSON lines, safe against kill -9 and concurrent writers.

In data-flow order: :mod:`~dcmlir.records.failures` names why a run failed,
:mod:`~dcmlir.records.schema` is one record and its line,
:mod:`~dcmlir.records.database` the file of them, :mod:`~dcmlir.records.queries`
what tuning asks of it. Import from here: ``from dcmlir.records import Record``.
"""

from dcmlir.records.database import FULL_DISK_FIX, DatabaseError, RecordDatabase
from dcmlir.records.failures import FAILURES, failure_of
from dcmlir.records.queries import ALL_SHAPES, CandidateScore
from dcmlir.records.schema import FORMAT, KINDS, ROUTES, Record, current_iree_version

__all__ = [
    "ALL_SHAPES",
    "FAILURES",
    "FORMAT",
    "FULL_DISK_FIX",
    "KINDS",
    "ROUTES",
    "CandidateScore",
    "DatabaseError",
    "Record",
    "RecordDatabase",
    "current_iree_version",
    "failure_of",
]
