"""Builders chosen by name, with keyword options: lookup, option checking, value checks.

A builder's keyword-only parameters are its options. Their defaults live in one
place (the builder's signature) and the valid option names are read from it, so
a misspelt key in a sweep file fails loudly instead of being silently ignored.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def call_builder(
    kind: str,
    name: str,
    builders: Mapping[str, Callable[..., Any]],
    args: Sequence[Any],
    options: Mapping[str, Any],
) -> Any:
    """Call ``builders[name](*args, **options)``, or raise ValueError naming the valid choices.

    Options whose value is None count as not given: the flat training config
    carries every key (``width: null`` for a convnet, for instance).
    """
    if name not in builders:
        raise ValueError(f"unknown {kind} {name!r}; valid choices: {', '.join(builders)}")
    builder = builders[name]
    valid = [
        p.name
        for p in inspect.signature(builder).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    given = {key: value for key, value in options.items() if value is not None}
    unknown = sorted(set(given) - set(valid))
    if unknown:
        hint = f"valid options: {', '.join(valid)}" if valid else f"{kind} {name!r} takes no options"
        raise ValueError(f"unknown option(s) {', '.join(unknown)} for {kind} {name!r}; {hint}")
    return builder(*args, **given)


def check_int(name: str, value: Any, minimum: int) -> int:
    """An int >= minimum (bools rejected: ``True`` as a width is a config mistake)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return value


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def check_shape(name: str, value: Any) -> tuple[int, ...]:
    """A non-empty sequence of positive ints (YAML gives lists, torch gives Size)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) == 0:
        raise ValueError(f"{name} must be a non-empty list of positive integers, got {value!r}")
    return tuple(check_int(f"{name}[{i}]", dim, 1) for i, dim in enumerate(value))


def image_channels(model: str, input_shape: tuple[int, ...]) -> int:
    """Channels of a [C, H, W] input shape; convnets need exactly three dimensions."""
    if len(input_shape) != 3:
        raise ValueError(
            f"model {model!r} needs an image input_shape [channels, height, width], got {list(input_shape)}"
        )
    return input_shape[0]
