"""Where a module's code lands: the placements ``dcmlir tune`` chooses among (issue 14).

IREE links every executable of a module into one shared object, its functions one after
another from the start of ``.text``, and ``.text`` starts after ``.rodata``, which holds
the linked library's name and the source file's name. So the length of the name the module
is compiled under moves every function by 16 bytes at a time, and a function's speed
depends on where its loops fall against the 32- and 64-byte windows the CPU fetches
(measured on the Zen 5 EPYC, identical code side by side: IREE's own data-tiling build of
one file ran 0.875-1.0x as fast under the names ``a.mlir``, ``abcdefghi.mlir`` and
``<stdin>``; design.md section 8). A placement is the number of characters added to the
name; the build cache keys it, and the plan records the one chosen
(:mod:`dcmlir.driver.placing`).
"""

from __future__ import annotations

import platform
import struct

from dcmlir.target import CpuTarget

__all__ = ["LONGEST", "TRIED", "code_flags", "placement_name", "text_offset"]

LONGEST = 63
"""The most characters a placement adds to the name (a placement is that number)."""

TRIED = (0, 16, 32, 48, 8, 24, 4, 12, 2, 6, 10, 14)
"""The placements tried, in order, until four offsets of ``.text`` within 64 bytes are
found. How far a character moves the code depends on how often ``.rodata`` holds the name
(the source path, ``<stem>_linked``, ...): once (the dense layer of the tests: 16
characters are 16 bytes, fewer are padded away), twice (8 characters are 16 bytes) or four
times (dispatched attention modules: 4 characters are 16 bytes); 4, 6 or 8 compiles."""

_LOOP_ALIGNMENT_FLAG = "--x86-experimental-pref-innermost-loop-alignment"
_X86_64 = ("x86_64", "amd64")


def code_flags(target: object) -> tuple[str, ...]:
    """The flags dcmlir's own CPU builds add (the kernels timed in tuning, the dispatched
    module; not IREE's builds it is compared with): LLVM's x86 backend starts every
    innermost loop at a ``CpuTarget.loop_alignment``-byte boundary (LLVM's default is 16
    bytes; ``llvm-cpu`` by name is the default target), which aligns ``.text`` as much, so
    no file name moves a loop against the fetch windows and a kernel's loops sit in its
    dispatch as they sat in the build it was timed in. None off x86-64 (``target-cpu=host``:
    the host's architecture is the code's) or with ``loop_alignment=0``.

    Measured on the Xeon (Rocket Lake), `fresh_scores_h96`'s budget-240 plan: its
    data-tiling branch ran 1.015-1.062x IREE's data-tiling build under three of four
    placements and 0.985-0.999x under the fourth; with 64-byte loops 0.984-0.997x under
    all four (docs/design.md section 8, "Aligned loops instead of placements")."""
    if target == "llvm-cpu":
        target = CpuTarget()
    if not isinstance(target, CpuTarget) or not target.loop_alignment:
        return ()
    if platform.machine().lower() not in _X86_64:
        return ()
    return (f"{_LOOP_ALIGNMENT_FLAG}={target.loop_alignment.bit_length() - 1}",)


def placement_name(placement: int) -> str:
    """The file name a module is compiled under for ``placement`` (0 .. LONGEST)."""
    if not 0 <= placement <= LONGEST:
        raise ValueError(f"placement {placement} is not in 0..{LONGEST}")
    return "dcmlir" + "_" * placement + ".mlir"


def text_offset(vmfb: bytes) -> int | None:
    """The address of ``.text`` in the first ELF shared object the module embeds (its
    CPU executables), or None where there is none (a GPU module)."""
    start = vmfb.find(b"\x7fELF\x02\x01")  # 64-bit, little-endian
    if start < 0:
        return None
    elf = vmfb[start:]
    try:
        (shoff,) = struct.unpack_from("<Q", elf, 0x28)
        entsize, count, names = struct.unpack_from("<HHH", elf, 0x3A)
        name_base = struct.unpack_from("<Q", elf, shoff + names * entsize + 0x18)[0]
        for index in range(count):
            header = shoff + index * entsize
            name = struct.unpack_from("<I", elf, header)[0]
            end = elf.index(b"\0", name_base + name)
            if elf[name_base + name : end] == b".text":
                return int(struct.unpack_from("<Q", elf, header + 0x10)[0])
    except (struct.error, ValueError):
        return None
    return None
