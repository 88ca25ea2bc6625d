"""DefaultModelConfig: RLlib's settings of the default modules, in the part cairn's default modules implement.

RLlib's ``ray.rllib.core.rl_module.default_model_config.DefaultModelConfig`` is a
dataclass of every knob of its default networks. cairn's default modules (PPO's
actor-critic, DQN's Q-network, SAC's networks) are MLPs with separate policy and
value networks; PPO's has a recurrent variant. This class takes:

- ``fcnet_hiddens`` (cairn's ``hidden_sizes``) and ``fcnet_activation``
  (cairn's ``activation``: ``"tanh"`` or ``"relu"``);
- ``use_lstm=True`` (PPO's default module only), with ``lstm_cell_size`` (RLlib's
  default 256) and ``max_seq_len`` (RLlib's default 20, the length of the sequences
  PPO trains on; a module of your own reads it from its ``model_config`` too):
  encoder (the ``fcnet_hiddens`` MLP) -> LSTM -> policy and value heads;
- ``lstm_use_prev_action``, ``lstm_use_prev_reward``, ``vf_share_layers``,
  ``use_attention`` at ``False`` only;
- every other RLlib field (``conv_filters``, ``head_fcnet_hiddens``,
  ``free_log_std``, ...) at ``None`` only: set, it is refused with the reason,
  never ignored.

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
_FALSE_ONLY = ("vf_share_layers", "use_attention", "lstm_use_prev_action", "lstm_use_prev_reward")
_LSTM_KEYS = ("use_lstm", "lstm_cell_size", "max_seq_len")
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
    max_seq_len: int | None = None
    lstm_cell_size: int | None = None
    lstm_use_prev_action: bool = False
    lstm_use_prev_reward: bool = False
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

    def __post_init__(self) -> None:
        for name in _FALSE_ONLY:
            if getattr(self, name) is None:  # RLlib's older None defaults mean False
                setattr(self, name, False)
            if getattr(self, name) is not False:
                raise ValueError(f"DefaultModelConfig({name}={getattr(self, name)!r}) is refused: {_why_false(name)}")
        self._check_lstm()
        unsupported = [
            field.name
            for field in dataclasses.fields(self)
            if field.name not in _RLLIB_TO_CAIRN
            and field.name not in _FALSE_ONLY
            and field.name not in _LSTM_KEYS
            and getattr(self, field.name) is not None
        ]
        if unsupported:
            raise ValueError(
                f"DefaultModelConfig sets {unsupported}, which cairn's default modules (MLPs) do not implement; "
                "cairn takes fcnet_hiddens, fcnet_activation, use_lstm, lstm_cell_size and max_seq_len. Leave the "
                "others None, or write your own TorchRLModule (RLModuleSpec(module_class=...))."
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

    def _check_lstm(self) -> None:
        if not isinstance(self.use_lstm, bool):
            raise ValueError(f"DefaultModelConfig(use_lstm={self.use_lstm!r:.60}) must be True or False.")
        for name in ("lstm_cell_size", "max_seq_len"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 1):
                raise ValueError(f"DefaultModelConfig({name}={value!r:.60}) must be an int >= 1.")
        if self.lstm_cell_size is not None and not self.use_lstm:
            raise ValueError(
                f"DefaultModelConfig(lstm_cell_size={self.lstm_cell_size}) without use_lstm=True has no effect, "
                "and cairn does not ignore settings: set use_lstm=True, or leave lstm_cell_size None."
            )

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set, by RLlib's key names (a plain dict: what a checkpoint records)."""
        out: dict[str, Any] = {}
        if self.fcnet_hiddens is not None:
            out["fcnet_hiddens"] = list(self.fcnet_hiddens)
        if self.fcnet_activation is not None:
            out["fcnet_activation"] = self.fcnet_activation
        if self.use_lstm:
            out["use_lstm"] = True
        for name in ("lstm_cell_size", "max_seq_len"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


def _why_false(name: str) -> str:
    if name.startswith("lstm_use_prev"):
        return (
            "cairn's default LSTM reads the observations only (no previous action or reward). Leave it False, or "
            "write your own TorchRLModule (RLModuleSpec(module_class=...))."
        )
    return (
        "cairn's default modules have separate policy and value networks, without attention. Leave it False, or "
        "write your own TorchRLModule (RLModuleSpec(module_class=...))."
    )


def default_module_model_config(
    model_config: Mapping[str, Any] | DefaultModelConfig | None, *, recurrent: bool = False
) -> dict[str, Any]:
    """A default module's ``model_config`` in cairn's key names: RLlib's names translated.

    ``fcnet_hiddens`` -> ``hidden_sizes``, ``fcnet_activation`` -> ``activation``;
    ``vf_share_layers``/``use_attention``/``lstm_use_prev_action``/``lstm_use_prev_reward``
    and ``use_lstm`` dropped when ``False``. ``use_lstm=True`` is kept for a module with a
    recurrent variant (``recurrent``, PPO's) and refused by any other. Other keys are kept,
    for the module to judge (it refuses keys it does not know).

    Raises:
        ValueError: Both an RLlib name and its cairn name are given, a
            ``vf_share_layers``/``use_attention``/``lstm_use_prev_*`` that is not ``False``,
            or ``use_lstm=True`` for a module without a recurrent variant.
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
        if key in _FALSE_ONLY or key == "use_lstm":
            if key == "use_lstm" and value is True and recurrent:
                out[key] = True
            elif value is not False:
                why = (
                    "only PPO's default module (DefaultPPORLModule) has a recurrent variant; write your own "
                    "RLModule (RLModuleSpec(module_class=...)) for the others"
                    if key == "use_lstm"
                    else _why_false(str(key))
                )
                raise ValueError(f"model_config[{key!r}]={value!r:.60} is refused: {why}")
            continue
        name = _RLLIB_TO_CAIRN.get(str(key), str(key))
        if name != key and name in model_config:
            raise ValueError(
                f"model_config gives both {key!r} (RLlib's name) and {name!r} (cairn's): give one of them."
            )
        out[name] = value
    return out
