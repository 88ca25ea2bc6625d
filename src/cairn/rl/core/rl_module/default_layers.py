"""The layers of cairn's default modules, built one way from ``DefaultModelConfig``'s settings.

PPO's and DQN's default modules read ``activation`` / ``head_fcnet_activation`` and
the widths here, and PPO's its initializers: the names are checked against the
fixed lists of :mod:`~cairn.rl.core.rl_module.default_model_config` (a recorded
``model_config`` is a checkpoint's text, and a name in it only ever picks an entry of
those lists, never code).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from cairn.rl.core.rl_module.default_model_config import (
    RANDOM_INITIALIZER_NAMES,
    check_activation,
    check_initializer,
    initializer_name,
)

__all__ = ["Initializer", "activation_layer", "init_linear", "linear_layers", "read_initializer"]

_ACTIVATION_CLASSES: dict[str | None, type[nn.Module]] = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "linear": nn.Identity,
    None: nn.Identity,
    "swish": nn.SiLU,
    "silu": nn.SiLU,
    "elu": nn.ELU,
}

Initializer = tuple[str, dict[str, Any]]
"""An initializer read from a ``model_config``: a name of ``INITIALIZER_NAMES`` and its keyword arguments."""


def activation_layer(name: Any, where: str) -> nn.Module:
    """A fresh activation layer of ``name`` (``nn.Identity`` for ``"linear"``/``None``).

    Raises:
        ValueError: ``name`` is not one of ``ACTIVATION_NAMES``; the message names ``where``.
    """
    check_activation(name, where)
    return _ACTIVATION_CLASSES[name]()


def linear_layers(in_dim: int, widths: list[int], activation: Any, where: str) -> tuple[list[nn.Module], int]:
    """``Linear`` + activation per width (RLlib's hidden layers); the layers and the last width."""
    layers: list[nn.Module] = []
    for width in widths:
        layers += [nn.Linear(in_dim, width), activation_layer(activation, where)]
        in_dim = width
    return layers, in_dim


def read_initializer(model_config: Mapping[str, Any], key: str) -> Initializer | None:
    """``model_config[key]`` and ``model_config[key + "_kwargs"]`` as an :data:`Initializer`, or ``None``.

    Raises:
        ValueError: A name outside ``INITIALIZER_NAMES`` (a path, a callable) or kwargs cairn does not take.
    """
    value, kwargs = model_config.get(key), model_config.get(f"{key}_kwargs")
    check_initializer(value, kwargs, f"model_config[{key!r}]")
    name = initializer_name(value, f"model_config[{key!r}]")
    return None if name is None else (name, dict(kwargs or {}))


def init_linear(
    layer: nn.Linear,
    *,
    gain: float,
    kernel: Initializer | None,
    bias: Initializer | None,
    generator: torch.Generator | None,
) -> None:
    """Initialize ``layer``: ``kernel``/``bias`` when given, else cairn's (orthogonal with ``gain``, zero bias).

    Raises:
        ValueError: torch refuses the keyword arguments (e.g. ``gain`` for ``kaiming_uniform_``), or a
            kernel initializer that needs two dimensions is given for a bias.
    """
    with torch.no_grad():
        if kernel is None:
            nn.init.orthogonal_(layer.weight, gain=gain, generator=generator)
        else:
            _apply(layer.weight, kernel, generator, "fcnet_kernel_initializer")
        if bias is None:
            layer.bias.zero_()
        else:
            _apply(layer.bias, bias, generator, "fcnet_bias_initializer")


def _apply(tensor: torch.Tensor, init: Initializer, generator: torch.Generator | None, key: str) -> None:
    name, kwargs = init
    function = getattr(nn.init, name)  # name is one of INITIALIZER_NAMES (read_initializer checked it)
    if name in RANDOM_INITIALIZER_NAMES:  # they take the module's generator (seeded builds)
        kwargs = {**kwargs, "generator": generator}
    try:
        function(tensor, **kwargs)
    except (TypeError, ValueError, RuntimeError) as err:  # torch's refusals (a negative std is a RuntimeError)
        raise ValueError(
            f"model_config[{key!r}]={name!r} with kwargs {init[1]!r:.120} cannot initialize a tensor of shape "
            f"{tuple(tensor.shape)}: {err}. Fix the kwargs (torch.nn.init.{name}'s), or pick another initializer."
        ) from err
    if not bool(torch.isfinite(tensor).all()):
        raise ValueError(
            f"model_config[{key!r}]={name!r} with kwargs {init[1]!r:.120} gave non-finite values: fix the kwargs."
        )
