"""Where an ONNX-imported module came from: the ``.onnx`` file, its hash and the ranges given.

``dcmlir import-onnx`` writes it as the module's first line (:meth:`OnnxSource.header`),
as the torch importer writes a GPT-2's config; ``dcmlir run-model`` reads it back
(:func:`onnx_source_from_text`) to check the outputs against onnxruntime running that
very file and to time onnxruntime on it. Needs neither onnx nor onnxruntime.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["OnnxSource", "file_sha256", "onnx_source_from_text"]

_HEADER = re.compile(r"^// dcmlir-model: onnx (\{.*\})$")


def file_sha256(path: str | Path) -> str:
    """The file's SHA-256, read in 1 MiB blocks (an exported model may be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while block := stream.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class OnnxSource:
    """An ONNX file (absolute path and SHA-256), the range each dynamic axis was given and
    the vocabulary its integer inputs index (token ids in [0, vocab)), if any."""

    path: str
    sha256: str
    dims: dict[str, tuple[int, int]] = field(default_factory=dict)
    vocab: int | None = None

    def header(self) -> str:
        """The module's first line: ``// dcmlir-model: onnx {...}``."""
        fields = {"path": self.path, "sha256": self.sha256, "dims": self.dims, "vocab": self.vocab}
        return f"// dcmlir-model: onnx {json.dumps(fields, sort_keys=True)}"

    def check(self) -> None:
        """A ValueError naming the file when it is gone or no longer the file imported."""
        if not Path(self.path).is_file():
            raise ValueError(f"the module was imported from '{self.path}', which is gone")
        if file_sha256(self.path) != self.sha256:
            raise ValueError(
                f"'{self.path}' changed since the module was imported from it (import it again)"
            )


def onnx_source_from_text(text: str) -> OnnxSource | None:
    """The :class:`OnnxSource` of a module ``dcmlir import-onnx`` wrote, else None.

    A header that does not parse is a ValueError.
    """
    match = _HEADER.match(text.split("\n", 1)[0])
    if match is None:
        return None
    try:
        fields = json.loads(match.group(1))
        dims = {str(k): (int(lo), int(hi)) for k, (lo, hi) in fields["dims"].items()}
        vocab = fields.get("vocab")
        return OnnxSource(
            str(fields["path"]), str(fields["sha256"]), dims, None if vocab is None else int(vocab)
        )
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"the module's onnx header is not valid: {err}") from None
