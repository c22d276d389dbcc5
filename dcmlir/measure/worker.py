"""The measuring process: loads variants, keeps inputs on the device, takes one sample per request.

:class:`dcmlir.measure.runner.Runner` starts it as ``python -m dcmlir.measure.worker DRIVER
THREADS`` and supervises it (a time limit per request; a hung or dead worker is replaced). The
protocol is frames on stdin/stdout: an 8-byte little-endian length, then a pickle.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import sys
import time
from collections.abc import Hashable
from typing import IO, Any

import numpy as np

from dcmlir.ir.iree import set_task_threads
from dcmlir.layouts import fixed_weight
from dcmlir.measure.timing import Timer, check_outputs, random_inputs
from dcmlir.measure.variants import Callee, load_group
from dcmlir.reference import contract

__all__ = ["read_frame", "read_message", "serve", "write_frame"]


def write_frame(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _read_exact(stream: IO[bytes], size: int, deadline: float | None) -> bytes:
    chunks: list[bytes] = []
    remaining = size
    fd = stream.fileno()
    while remaining:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
        chunk = os.read(fd, remaining)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_message(stream: IO[bytes], timeout: float | None = None) -> bytes:
    deadline = None if timeout is None else time.monotonic() + timeout
    (size,) = struct.unpack("<Q", _read_exact(stream, 8, deadline))
    return _read_exact(stream, size, deadline)


def read_frame(stream: IO[bytes], timeout: float | None = None) -> Any:
    return pickle.loads(read_message(stream, timeout))


def serve(driver: str, threads: int | None = None) -> None:
    """Serve requests on stdin/stdout until told to exit.

    ``threads``: the workers of a ``local-task`` device and of the host libraries.

    Every reply is ("ok", payload) or ("error", text). Anything else the process
    prints goes to stderr, so stdout carries only frames. A request that cannot
    be unpickled (a :class:`~dcmlir.measure.variants.HostModel` whose factory does
    not import here) is an error reply, not a dead worker.
    """
    if driver == "local-task" and threads is not None:
        set_task_threads(threads)
    requests, replies = sys.stdin.buffer, os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not corrupt frames
    callees: dict[Hashable, Callee] = {}
    prepared: dict[Hashable, list[Any]] = {}
    inputs: list[list[np.ndarray]] = []
    expected: list[list[np.ndarray]] = []

    def handle(request: tuple[Any, ...]) -> Any:
        nonlocal inputs, expected
        command = request[0]
        if command == "load":  # keys: the parent's names of the group's variants
            _, group, keys = request
            loaded, failed = load_group(group, driver, threads)
            callees.update((keys[index], callee) for index, callee in loaded.items())
            return {keys[index]: error for index, error in failed.items()}
        if command == "inputs":
            _, shapes, dtypes, spec, sets, seed, fixed = request
            prepared.clear()
            inputs = [
                [array.astype(dtype) for array, dtype in zip(arrays, dtypes, strict=True)]
                for arrays in random_inputs(shapes, sets=sets, seed=seed)
            ]
            for index, weight_seed in fixed:  # the same weight in every set, as in a model
                weight = fixed_weight(tuple(shapes[index]), dtypes[index], weight_seed)
                for arrays in inputs:
                    arrays[index] = weight
            expected = [
                [contract(spec, *(a.astype(np.float64) for a in arrays))] for arrays in inputs
            ]
            return None
        if command == "arrays":
            _, inputs, expected = request
            prepared.clear()
            return None
        _, key, argument = request
        callee = callees[key]
        if key not in prepared:
            prepared[key] = [callee.prepare(arrays) for arrays in inputs]
        sets = prepared[key]
        if command == "check":
            return max(
                check_outputs(callee.to_host(callee.invoke(args)), wanted, argument)
                for args, wanted in zip(sets, expected, strict=True)
            )
        if command == "warmup":  # (seconds per call, calls), as a sample
            return Timer(argument).sample(callee.invoke, sets)
        if command == "sample":
            min_time, warm_calls = argument
            return Timer(min_time, warm_calls=warm_calls).sample(callee.invoke, sets)
        raise ValueError(f"unknown request {command!r}")

    while True:
        try:
            frame = read_message(requests)
        except EOFError:
            return
        try:
            request = pickle.loads(frame)
            if request[0] == "exit":
                return
            reply = ("ok", handle(request))
        except Exception as err:  # reported to the parent as this variant's error
            reply = ("error", f"{type(err).__name__}: {err}")
        write_frame(replies, reply)


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
