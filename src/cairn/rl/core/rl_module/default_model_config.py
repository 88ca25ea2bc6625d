"""DefaultModelConfig: RLlib's settings of the default modules, in the part cairn's default modules implement.

RLlib's ``ray.rllib.core.rl_module.default_model_config.DefaultModelConfig`` is a
dataclass of every knob of its default networks. cairn's default modules (PPO's
actor-critic, DQN's Q-network, SAC's networks) are MLPs with separate policy and
value networks; PPO's has a recurrent variant. This class takes:

- ``fcnet_hiddens`` (cairn's ``hidden_sizes``) and ``fcnet_activation``
  (cairn's ``activation``: ``"tanh"``, ``"relu"``, ``"linear"`` (no activation; ``None``
  too in a ``model_config`` dict, where the dataclass's ``None`` means "unset", the
  module's default), ``"swish"``/``"silu"``, ``"elu"``: :data:`ACTIVATION_NAMES`);
- ``head_fcnet_hiddens`` / ``head_fcnet_activation``: hidden layers of the heads (PPO's
  policy and value heads, DQN's Q head) before their output layer;
- ``fcnet_kernel_initializer`` / ``fcnet_bias_initializer`` (+ ``_kwargs``): the
  initializers of the encoder's (``fcnet_hiddens``) layers, by name from
  :data:`INITIALIZER_NAMES` (``torch.nn.init``'s, with or without the trailing ``_``);
  any other name, a dotted path or a callable is refused (a checkpoint records the
  name and must never make a restore resolve code);
- ``vf_share_layers`` (PPO's default module only): ``True`` builds RLlib's layout, one
  encoder shared by the policy and the value heads. cairn's default, the field left
  ``None``, is the layout cairn always built: separate policy and value MLPs, and for
  ``use_lstm=True`` the encoder and LSTM shared by both heads (the one recurrent layout
  cairn builds, so ``use_lstm=True`` with ``vf_share_layers=False`` is refused). RLlib's
  dataclass default is ``True``: a script ported from RLlib that relies on it writes
  ``vf_share_layers=True``;
- ``use_lstm=True`` (PPO's default module only), with ``lstm_cell_size`` (RLlib's
  default 256) and ``max_seq_len`` (RLlib's default 20, the length of the sequences
  PPO trains on; a module of your own reads it from its ``model_config`` too):
  encoder (the ``fcnet_hiddens`` MLP) -> LSTM -> policy and value heads.
  ``lstm_cell_size`` with ``use_lstm=False`` sizes nothing and is not recorded (RLlib's
  scripts write ``use_lstm=args.use_lstm, lstm_cell_size=256``);
- ``lstm_use_prev_action``, ``lstm_use_prev_reward``, ``use_attention`` at ``False`` only;
- ``free_log_std`` / ``log_std_clip_param`` (PPO's default module, ``Box`` actions):
  ``False`` is RLlib's default, the policy network outputs the log standard deviations
  too; left ``None`` keeps cairn's layout, a free ``log_std`` parameter (``True``);
- every other RLlib field (``conv_filters``, ...) at ``None``
  only: set, it is refused with the reason, never ignored.

A field left ``None`` keeps the module's own default (PPO: ``[64, 64]``, tanh,
separate policy and value networks, cairn's orthogonal initialisation; RLlib's
defaults are ``[256, 256]``, tanh and a shared value trunk). It is
accepted by ``config.rl_module(model_config=DefaultModelConfig(...))`` and by
``RLModuleSpec(model_config=DefaultModelConfig(...))``, which record it as a plain
dict of the fields that are set (RLlib's key names); the default modules read
RLlib's key names as well as cairn's (:func:`default_module_model_config`).
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ACTIVATION_NAMES",
    "INITIALIZER_KWARGS",
    "INITIALIZER_NAMES",
    "RANDOM_INITIALIZER_NAMES",
    "DefaultModelConfig",
    "check_activation",
    "check_initializer",
    "check_widths",
    "default_module_model_config",
    "initializer_name",
]

_RLLIB_TO_CAIRN = {"fcnet_hiddens": "hidden_sizes", "fcnet_activation": "activation"}
_FALSE_ONLY = ("use_attention", "lstm_use_prev_action", "lstm_use_prev_reward")
_LSTM_KEYS = ("use_lstm", "lstm_cell_size", "max_seq_len")
_LAYER_KEYS = (
    "vf_share_layers",
    "head_fcnet_hiddens",
    "head_fcnet_activation",
    "fcnet_kernel_initializer",
    "fcnet_kernel_initializer_kwargs",
    "fcnet_bias_initializer",
    "fcnet_bias_initializer_kwargs",
    "free_log_std",
    "log_std_clip_param",
)

ACTIVATION_NAMES: tuple[str | None, ...] = ("tanh", "relu", "linear", None, "swish", "silu", "elu")
"""The activations of cairn's default modules (RLlib's names; ``"linear"`` and ``None`` mean none)."""

RANDOM_INITIALIZER_NAMES: tuple[str, ...] = (
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
    "normal_",
    "uniform_",
    "trunc_normal_",
)
"""The initializers of :data:`INITIALIZER_NAMES` that draw random numbers (a seeded build gives them its generator)."""

INITIALIZER_NAMES: tuple[str, ...] = (*RANDOM_INITIALIZER_NAMES, "zeros_", "ones_", "constant_")
"""The ``torch.nn.init`` functions an initializer name may pick (RLlib's names, ``"xavier_uniform"`` or
``"xavier_uniform_"``). A fixed list: a recorded name is looked up here, never imported."""

INITIALIZER_KWARGS: tuple[str, ...] = ("gain", "a", "b", "mean", "std", "val", "mode", "nonlinearity")
"""The keyword arguments an initializer's ``_kwargs`` may give (numbers; ``mode``/``nonlinearity`` strings)."""


@dataclasses.dataclass
class DefaultModelConfig:
    """RLlib's ``DefaultModelConfig``, limited to what cairn's default modules build (see the module doc).

    Raises:
        ValueError: A field cairn's default modules do not implement is set, an activation
            outside :data:`ACTIVATION_NAMES`, an initializer outside :data:`INITIALIZER_NAMES` (or
            kwargs outside :data:`INITIALIZER_KWARGS`), widths that are not positive ints, or
            ``use_lstm=True`` with ``vf_share_layers=False``; the message names the field.
    """

    fcnet_hiddens: list[int] | None = None
    fcnet_activation: str | None = None
    vf_share_layers: bool | None = None
    use_lstm: bool = False
    use_attention: bool = False
    max_seq_len: int | None = None
    lstm_cell_size: int | None = None
    lstm_use_prev_action: bool = False
    lstm_use_prev_reward: bool = False
    head_fcnet_hiddens: list[int] | None = None
    head_fcnet_activation: str | None = None
    fcnet_kernel_initializer: str | None = None
    fcnet_kernel_initializer_kwargs: dict[str, Any] | None = None
    fcnet_bias_initializer: str | None = None
    fcnet_bias_initializer_kwargs: dict[str, Any] | None = None
    free_log_std: bool | None = None
    log_std_clip_param: float | None = None
    # RLlib fields cairn's default modules do not implement: None only.
    conv_filters: Any = None
    conv_activation: Any = None

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
            and field.name not in _LAYER_KEYS
            and getattr(self, field.name) is not None
        ]
        if unsupported:
            raise ValueError(
                f"DefaultModelConfig sets {unsupported}, which cairn's default modules (MLPs) do not implement; "
                f"cairn takes fcnet_hiddens, fcnet_activation, {', '.join(_LAYER_KEYS)}, use_lstm, lstm_cell_size "
                "and max_seq_len. Leave the others None, or write your own TorchRLModule "
                "(RLModuleSpec(module_class=...))."
            )
        for name in ("fcnet_hiddens", "head_fcnet_hiddens"):
            if getattr(self, name) is not None:
                setattr(self, name, check_widths(getattr(self, name), f"DefaultModelConfig({name}=...)"))
        for name in ("fcnet_activation", "head_fcnet_activation"):
            if getattr(self, name) is not None:
                check_activation(getattr(self, name), f"DefaultModelConfig({name}=...)")
        for name in ("fcnet_kernel_initializer", "fcnet_bias_initializer"):
            value = getattr(self, name)
            if callable(value) and getattr(value, "__module__", None) == "torch.nn.init":
                setattr(self, name, getattr(value, "__name__", value))  # RLlib takes the function: record its name
            check_initializer(getattr(self, name), getattr(self, f"{name}_kwargs"), f"DefaultModelConfig({name}=...)")
        if self.vf_share_layers is not None and not isinstance(self.vf_share_layers, bool):
            raise ValueError(f"DefaultModelConfig(vf_share_layers={self.vf_share_layers!r:.60}) must be True or False.")
        if self.use_lstm and self.vf_share_layers is False:
            raise ValueError(_LSTM_NOT_SHARED)

    def _check_lstm(self) -> None:
        if not isinstance(self.use_lstm, bool):
            raise ValueError(f"DefaultModelConfig(use_lstm={self.use_lstm!r:.60}) must be True or False.")
        for name in ("lstm_cell_size", "max_seq_len"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 1):
                raise ValueError(f"DefaultModelConfig({name}={value!r:.60}) must be an int >= 1.")
        # lstm_cell_size without use_lstm is RLlib's common ``use_lstm=args.use_lstm, lstm_cell_size=256``:
        # a setting of the LSTM, with nothing to size when there is none. It is kept on the dataclass and
        # not recorded (to_dict); a model_config dict still refuses it without use_lstm (the module).

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set, by RLlib's key names (a plain dict: what a checkpoint records)."""
        out: dict[str, Any] = {}
        if self.fcnet_hiddens is not None:
            out["fcnet_hiddens"] = list(self.fcnet_hiddens)
        if self.fcnet_activation is not None:
            out["fcnet_activation"] = self.fcnet_activation
        if self.use_lstm:
            out["use_lstm"] = True
        for name in ("lstm_cell_size", "max_seq_len", *_LAYER_KEYS):
            if name == "lstm_cell_size" and not self.use_lstm:
                continue  # the LSTM's size, without an LSTM (RLlib's scripts toggle use_lstm alone)
            if getattr(self, name) is not None:
                value = getattr(self, name)
                out[name] = (
                    dict(value) if isinstance(value, dict) else list(value) if isinstance(value, list) else value
                )
        return out


_LSTM_NOT_SHARED = (
    "use_lstm=True with vf_share_layers=False is refused: cairn's recurrent default module shares its encoder "
    "and LSTM between the policy and the value heads (RLlib's vf_share_layers=True layout) and builds no "
    "separate value LSTM. Leave vf_share_layers unset or True, or write your own TorchRLModule."
)


def _why_false(name: str) -> str:
    if name.startswith("lstm_use_prev"):
        return (
            "cairn's default LSTM reads the observations only (no previous action or reward). Leave it False, or "
            "write your own TorchRLModule (RLModuleSpec(module_class=...))."
        )
    return (
        "cairn's default modules have no attention. Leave it False, or write your own TorchRLModule "
        "(RLModuleSpec(module_class=...))."
    )


def check_widths(value: Any, where: str) -> list[int]:
    """``value`` as a list of layer widths (ints, numpy's too, in [1, 65536]; at most 64 layers).

    Raises:
        ValueError: Not such a list; the message names ``where``.
    """
    message = f"{where}: {value!r:.80} must be a list of at most 64 ints in [1, 65536]."
    if not isinstance(value, list | tuple) or len(value) > 64:
        raise ValueError(message)
    widths: list[int] = []
    for h in value:
        if isinstance(h, bool) or not hasattr(h, "__index__"):  # ints and numpy's, not bools or floats
            raise ValueError(message)
        widths.append(operator.index(h))
        if not 0 < widths[-1] <= 65536:
            raise ValueError(message)
    return widths


def check_activation(value: Any, where: str) -> None:
    """Refuse an activation name that is not in :data:`ACTIVATION_NAMES`.

    Raises:
        ValueError: Naming ``where`` and the names cairn has.
    """
    if not (value is None or isinstance(value, str)) or value not in ACTIVATION_NAMES:
        raise ValueError(
            f"{where}: activation {value!r:.60} is refused: cairn's default modules have {ACTIVATION_NAMES}."
        )


def initializer_name(value: Any, where: str) -> str | None:
    """The ``torch.nn.init`` function name of an initializer setting (``"xavier_uniform"`` -> ``"xavier_uniform_"``).

    Raises:
        ValueError: Not ``None`` and not a name in :data:`INITIALIZER_NAMES` (a callable, a dotted path, ...).
    """
    if value is None:
        return None
    name = value if isinstance(value, str) and value.endswith("_") else f"{value}_" if isinstance(value, str) else None
    if name not in INITIALIZER_NAMES:
        raise ValueError(
            f"{where}: initializer {value!r:.80} is refused: cairn looks initializers up by name in a fixed list "
            f"of torch.nn.init's ({', '.join(INITIALIZER_NAMES)}), never a callable or a path (a checkpoint "
            "records the name). Give one of those names, or write your own TorchRLModule."
        )
    return name


def check_initializer(value: Any, kwargs: Any, where: str) -> None:
    """Refuse an initializer outside :data:`INITIALIZER_NAMES`, or ``kwargs`` outside :data:`INITIALIZER_KWARGS`.

    Raises:
        ValueError: Naming ``where``, the value and what cairn takes.
    """
    name = initializer_name(value, where)
    if kwargs is None:
        return
    if name is None:
        raise ValueError(
            f"{where}: _kwargs {kwargs!r:.80} without an initializer have no effect: give both or neither."
        )
    if not isinstance(kwargs, Mapping) or len(kwargs) > len(INITIALIZER_KWARGS):
        raise ValueError(f"{where}: _kwargs must be a dict of {INITIALIZER_KWARGS}, got {kwargs!r:.80}.")
    for key, arg in kwargs.items():
        text = key in ("mode", "nonlinearity") and isinstance(arg, str) and len(arg) <= 32
        number = type(arg) in (int, float) and math.isfinite(arg)
        if key not in INITIALIZER_KWARGS or not (text or number):
            raise ValueError(
                f"{where}: _kwargs[{key!r:.40}]={arg!r:.40} is refused: cairn takes {INITIALIZER_KWARGS} "
                "(finite numbers; mode and nonlinearity as names)."
            )


def default_module_model_config(
    model_config: Mapping[str, Any] | DefaultModelConfig | None, *, recurrent: bool = False
) -> dict[str, Any]:
    """A default module's ``model_config`` in cairn's key names: RLlib's names translated.

    ``fcnet_hiddens`` -> ``hidden_sizes``, ``fcnet_activation`` -> ``activation``;
    ``vf_share_layers``/``use_attention``/``lstm_use_prev_action``/``lstm_use_prev_reward``
    and ``use_lstm`` dropped when ``False`` (so a config of cairn's defaults records as it
    always did). ``use_lstm=True`` and ``vf_share_layers=True`` are kept for a module with a
    recurrent variant and a value function (``recurrent``, PPO's) and refused by any other.
    Other keys are kept, for the module to judge (it refuses keys it does not know).

    Raises:
        ValueError: Both an RLlib name and its cairn name are given, a
            ``use_attention``/``lstm_use_prev_*`` that is not ``False``, ``use_lstm=True`` or
            ``vf_share_layers=True`` for a module without them, or ``use_lstm=True`` with
            ``vf_share_layers=False``.
        TypeError: ``model_config`` is not a mapping.
    """
    if isinstance(model_config, DefaultModelConfig):
        model_config = model_config.to_dict()
    if model_config is None:
        return {}
    if not isinstance(model_config, Mapping):
        raise TypeError(f"model_config must be a dict or a DefaultModelConfig, got {type(model_config).__name__}.")
    if model_config.get("use_lstm") is True and model_config.get("vf_share_layers", True) is False:
        raise ValueError(_LSTM_NOT_SHARED)
    out: dict[str, Any] = {}
    for key, value in model_config.items():
        if key in _FALSE_ONLY or key in ("use_lstm", "vf_share_layers"):
            if value is True and recurrent:
                out[key] = True
            elif value is not False:
                why = (
                    f"only PPO's default module (DefaultPPORLModule) has {key}; write your own "
                    "RLModule (RLModuleSpec(module_class=...)) for the others"
                    if key in ("use_lstm", "vf_share_layers")
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
