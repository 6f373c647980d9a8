"""Builders chosen by name, each declaring its keyword options as ``Param``s.

A builder's options are declared once, next to it in its registry
(``models.MODELS``, ``datasets.DATASETS``), with their type, valid range and
doc; ``call_builder`` checks the given options against them, so a misspelt or
foreign option (``width`` for lenet5) fails loudly instead of being ignored, and
the orchestrator's settings schema reads the same declarations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compressors.core.params import Param, resolve


@dataclass(frozen=True)
class Builder:
    """A model or dataset constructor and the options it takes."""

    fn: Callable[..., Any]
    options: tuple[Param, ...] = ()
    # Why it cannot build anything on this machine (a package it needs is missing), checked before anything
    # runs; None: nothing is missing.
    requires: Callable[[], str | None] | None = None

    def missing(self) -> str | None:
        return self.requires() if self.requires is not None else None


def call_builder(kind: str, name: str, builders: Mapping[str, Builder], args: Sequence[Any],
                 options: Mapping[str, Any]) -> Any:
    """Call ``builders[name].fn(*args, **options)`` after checking ``options`` against its declaration.

    Options whose value is None count as not given (the builder's own default):
    the flat training config carries every key (``width: null`` for a convnet).
    """
    if name not in builders:
        raise ValueError(f"unknown {kind} {name!r}; valid choices: {', '.join(builders)}")
    builder = builders[name]
    given = {key: value for key, value in options.items() if value is not None}
    unknown = sorted(set(given) - {p.name for p in builder.options})
    if unknown:
        valid = [p.name for p in builder.options]
        hint = f"valid options: {', '.join(valid)}" if valid else f"{kind} {name!r} takes no options"
        raise ValueError(f"unknown option(s) {', '.join(unknown)} for {kind} {name!r}; {hint}")
    checked = resolve(f"{kind} {name!r}", builder.options, given)
    return builder.fn(*args, **{k: v for k, v in checked.items() if v is not None})


def distinct_options(builders: Mapping[str, Builder]) -> tuple[Param, ...]:
    """Every option any builder takes, once (a name means the same thing for every builder)."""
    seen: dict[str, Param] = {}
    for builder in builders.values():
        for param in builder.options:
            if seen.setdefault(param.name, param) != param:
                raise AssertionError(f"option {param.name!r} is declared differently by two builders")
    return tuple(seen.values())


def image_channels(model: str, input_shape: tuple[int, ...]) -> int:
    """Channels of a [C, H, W] input shape; convnets need exactly three dimensions."""
    if len(input_shape) != 3:
        raise ValueError(
            f"model {model!r} needs an image input_shape [channels, height, width], got {list(input_shape)}"
        )
    return input_shape[0]
