"""DefaultModelConfig: RLlib's settings of the default modules, in the part cairn's default modules implement.

RLlib's ``ray.rllib.core.rl_module.default_model_config.DefaultModelConfig`` is a
dataclass of every knob of its default networks. cairn's default modules (PPO's
actor-critic, DQN's Q-network, SAC's networks) are MLPs with separate policy and
value networks and no memory, so this class takes:

- ``fcnet_hiddens`` (cairn's ``hidden_sizes``) and ``fcnet_activation``
  (cairn's ``activation``: ``"tanh"`` or ``"relu"``);
- ``vf_share_layers``, ``use_lstm``, ``use_attention`` at ``False`` only;
- every other RLlib field (``conv_filters``, ``head_fcnet_hiddens``,
  ``free_log_std``, ``lstm_cell_size``, ...) at ``None`` only: set, it is
  refused with the reason, never ignored.

A field left ``None`` keeps the module's own default (PPO: ``[64, 64]``, tanh;
RLlib's defaults are ``[256, 256]``, tanh and a shared value trunk). It is
accepted by ``config.rl_module(model_config=DefaultModelConfig(...))`` and by
``RLModuleSpec(model_config=DefaultModelConfig(...))``, which record it as a plain
dict of the fields that are set (RLlib's key names); the default modules read
RLlib's key names as well as cairn's (:func:`default_module_model_config`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["DefaultModelConfig", "default_module_model_config"]

_RLLIB_TO_CAIRN = {"fcnet_hiddens": "hidden_sizes", "fcnet_activation": "activation"}
_FALSE_ONLY = ("vf_share_layers", "use_lstm", "use_attention")
_ACTIVATIONS = ("tanh", "relu")


@dataclasses.dataclass
class DefaultModelConfig:
    """RLlib's ``DefaultModelConfig``, limited to what cairn's default modules build (see the module doc).

    Raises:
        ValueError: A field cairn's default modules do not implement is set, or
            ``fcnet_activation`` is not ``"tanh"``/``"relu"``; the message names the field.
    """

    fcnet_hiddens: list[int] | None = None
    fcnet_activation: str | None = None
    vf_share_layers: bool = False
    use_lstm: bool = False
    use_attention: bool = False
    # RLlib fields cairn's default modules do not implement: None only.
    fcnet_kernel_initializer: Any = None
    fcnet_kernel_initializer_kwargs: Any = None
    fcnet_bias_initializer: Any = None
    fcnet_bias_initializer_kwargs: Any = None
    conv_filters: Any = None
    conv_activation: Any = None
    head_fcnet_hiddens: Any = None
    head_fcnet_activation: Any = None
    free_log_std: Any = None
    log_std_clip_param: Any = None
    max_seq_len: Any = None
    lstm_cell_size: Any = None
    lstm_use_prev_action: Any = None
    lstm_use_prev_reward: Any = None

    def __post_init__(self) -> None:
        for name in _FALSE_ONLY:
            if getattr(self, name) is not False:
                raise ValueError(
                    f"DefaultModelConfig({name}={getattr(self, name)!r}) is refused: cairn's default modules have "
                    "separate policy and value networks without memory. Leave it False, or write your own "
                    "TorchRLModule (RLModuleSpec(module_class=...))."
                )
        unsupported = [
            field.name
            for field in dataclasses.fields(self)
            if field.name not in _RLLIB_TO_CAIRN
            and field.name not in _FALSE_ONLY
            and getattr(self, field.name) is not None
        ]
        if unsupported:
            raise ValueError(
                f"DefaultModelConfig sets {unsupported}, which cairn's default modules (MLPs) do not implement; "
                "cairn takes fcnet_hiddens and fcnet_activation. Leave the others None, or write your own "
                "TorchRLModule (RLModuleSpec(module_class=...))."
            )
        if self.fcnet_hiddens is not None:
            if isinstance(self.fcnet_hiddens, str | bytes) or not all(
                isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in self.fcnet_hiddens
            ):
                raise ValueError(
                    f"DefaultModelConfig(fcnet_hiddens={self.fcnet_hiddens!r:.80}) must be a list of positive ints."
                )
            self.fcnet_hiddens = list(self.fcnet_hiddens)
        if self.fcnet_activation is not None and self.fcnet_activation not in _ACTIVATIONS:
            raise ValueError(
                f"DefaultModelConfig(fcnet_activation={self.fcnet_activation!r}) is refused: cairn's default "
                f"modules have {list(_ACTIVATIONS)}."
            )

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set, by RLlib's key names (a plain dict: what a checkpoint records)."""
        out: dict[str, Any] = {}
        if self.fcnet_hiddens is not None:
            out["fcnet_hiddens"] = list(self.fcnet_hiddens)
        if self.fcnet_activation is not None:
            out["fcnet_activation"] = self.fcnet_activation
        return out


def default_module_model_config(model_config: Mapping[str, Any] | DefaultModelConfig | None) -> dict[str, Any]:
    """A default module's ``model_config`` in cairn's key names: RLlib's names translated.

    ``fcnet_hiddens`` -> ``hidden_sizes``, ``fcnet_activation`` -> ``activation``;
    ``vf_share_layers``/``use_lstm``/``use_attention`` dropped when ``False``. Other
    keys are kept, for the module to judge (it refuses keys it does not know).

    Raises:
        ValueError: Both an RLlib name and its cairn name are given, or a
            ``vf_share_layers``/``use_lstm``/``use_attention`` that is not ``False``.
        TypeError: ``model_config`` is not a mapping.
    """
    if isinstance(model_config, DefaultModelConfig):
        model_config = model_config.to_dict()
    if model_config is None:
        return {}
    if not isinstance(model_config, Mapping):
        raise TypeError(f"model_config must be a dict or a DefaultModelConfig, got {type(model_config).__name__}.")
    out: dict[str, Any] = {}
    for key, value in model_config.items():
        if key in _FALSE_ONLY:
            if value is not False:
                raise ValueError(
                    f"model_config[{key!r}]={value!r} is refused: cairn's default modules have separate policy "
                    "and value networks without memory. Write your own RLModule (RLModuleSpec(module_class=...))."
                )
            continue
        name = _RLLIB_TO_CAIRN.get(str(key), str(key))
        if name != key and name in model_config:
            raise ValueError(
                f"model_config gives both {key!r} (RLlib's name) and {name!r} (cairn's): give one of them."
            )
        out[name] = value
    return out
