"""A factory model's header: how ``run-model`` rebuilds ``package.module:factory``.

``dcmlir import-torch --model package.module:factory`` writes :func:`factory_header` as the
module's first line when the factory's inputs have one dynamic dim, one axis of each input.
``run-model`` reads it back (:func:`factory_fields`) and rebuilds the model as the import
did: the same ``torch.manual_seed``, the directory its module was found in first on the path.
The weights' digest is checked, so the reference, torch eager and onnxruntime run the
model that was imported, or the run says why not. Importing this module needs no torch.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dcmlir.models.torch_guards import TorchImportError

if TYPE_CHECKING:  # torch is optional: only rebuilding a model needs it
    from torch import nn

__all__ = ["FACTORY_KIND", "factory_fields", "factory_header", "rebuild", "weights_digest"]

FACTORY_KIND = "factory"
"""The header's kind: ``// dcmlir-model: factory {...}``."""


def weights_digest(module: nn.Module) -> str:
    """A digest of ``module``'s state (names and bytes, any dtype): same weights, same digest."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def factory_header(
    spec: str,
    directory: str,
    seed: int,
    seq: tuple[int, int],
    input_dims: Sequence[dict[int, str]],
    module: nn.Module,
) -> str | None:
    """The first line of a factory model's module, or None where run-model could not feed
    the rebuilt model (several dynamic dims, or an input without exactly one)."""
    names = {name for dims in input_dims for name in dims.values()}
    if len(names) != 1 or any(len(dims) != 1 for dims in input_dims):
        return None
    fields = {
        "spec": spec,
        "dir": directory,
        "seed": seed,
        "seq": list(seq),
        "axes": [next(iter(dims)) for dims in input_dims],
        "weights": weights_digest(module),
    }
    return f"// dcmlir-model: {FACTORY_KIND} {json.dumps(fields, sort_keys=True)}"


def factory_fields(fields: str) -> tuple[str, Callable[[], Any], tuple[int, ...], tuple[int, int]]:
    """What a factory header's JSON gives a :class:`~dcmlir.models.hf_models.TorchSource`:
    the name, the build, each input's ``T`` axis, ``T``'s range; a ValueError if malformed."""
    try:
        found = json.loads(fields)
        spec, directory, digest = str(found["spec"]), str(found["dir"]), str(found["weights"])
        seed, (lo, hi) = int(found["seed"]), (int(v) for v in found["seq"])
        axes = tuple(int(axis) for axis in found["axes"])
    except (TypeError, ValueError, KeyError) as err:
        raise ValueError(f"the module's factory header is not valid: {err}") from None
    return spec, functools.partial(rebuild, spec, directory, seed, digest), axes, (lo, hi)


def rebuild(spec: str, directory: str, seed: int, digest: str) -> Any:
    """The factory's module, built as ``import-torch`` built it; a ValueError when the
    factory cannot be imported any more or builds other weights."""
    import torch

    from dcmlir.models.torch_factory import model_from_factory

    torch.manual_seed(seed)
    try:
        made = model_from_factory(spec, directory)
    except TorchImportError as err:
        raise ValueError(f"rebuilding the imported model: {err}") from None
    built = weights_digest(made.module)
    if built != digest:
        raise ValueError(
            f"{spec}: the factory now builds other weights than at import (weights "
            f"{built}, imported {digest}): it must build the same model "
            "after torch.manual_seed; import it again, or use --reference default"
        )
    return made.module.eval()
