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

import struct

__all__ = ["LONGEST", "TRIED", "placement_name", "text_offset"]

LONGEST = 63
"""The most characters a placement adds to the name (a placement is that number)."""

TRIED = (0, 16, 32, 48, 8, 24, 4, 12, 2, 6, 10, 14)
"""The placements tried, in order, until four offsets of ``.text`` within 64 bytes are
found. How far a character moves the code depends on how often ``.rodata`` holds the name
(the source path, ``<stem>_linked``, ...): once (the dense layer of the tests: 16
characters are 16 bytes, fewer are padded away), twice (8 characters are 16 bytes) or four
times (dispatched attention modules: 4 characters are 16 bytes); 4, 6 or 8 compiles."""


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
