"""DefaultPPORLModule: PPO's default module, an MLP actor-critic (CleanRL style).

Two MLPs (policy and value), tanh hidden layers, orthogonal initialisation
(policy head gain 0.01, value head gain 1). Discrete actions use a
categorical distribution over logits; ``Box`` actions a diagonal Gaussian
whose log standard deviation is a learned, state-independent parameter.
This was cairn 0.1's only ``RLModule``; its checkpoints (class
``cairn.rl.rl_module:RLModule``) build this class.

With ``use_lstm=True`` (``DefaultModelConfig(use_lstm=True, lstm_cell_size=...,
max_seq_len=...)``) it is recurrent, in RLlib's layout: an encoder (the
``hidden_sizes`` MLP) -> one LSTM layer -> a policy head and a value head, the
encoder and the LSTM shared by both heads (RLlib's ``vf_share_layers=False`` gives
the value function an encoder and LSTM of its own). Its state is
``{"h": [lstm_cell_size], "c": [lstm_cell_size]}``.

With ``vf_share_layers=True`` (RLlib's layout) the MLP variant is one encoder (the
``hidden_sizes`` layers) with a policy head and a value head on it (``encoder``,
``pi_head``, ``vf_head``); the recurrent variant is the same with or without it (its
encoder and LSTM are always shared). ``head_fcnet_hiddens`` / ``head_fcnet_activation``
add hidden layers to each head; ``fcnet_kernel_initializer`` / ``fcnet_bias_initializer``
(+ ``_kwargs``) initialize the encoder's layers (the heads keep cairn's orthogonal
initialization). A ``model_config`` that sets none of them builds, records and
initializes the module exactly as before they existed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cairn.rl._aliases import register_old_paths
from cairn.rl.algorithms.ppo.ppo_catalog import PPOCatalog
from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.default_layers import init_linear, linear_layers, read_initializer
from cairn.rl.core.rl_module.default_model_config import check_activation, check_widths, default_module_model_config
from cairn.rl.core.rl_module.rl_module import RLModule, RLModuleSpec, box_observation_size

__all__ = ["DEFAULT_MODEL_CONFIG", "LAYER_MODEL_CONFIG", "LSTM_MODEL_CONFIG", "DefaultPPORLModule"]

DEFAULT_MODEL_CONFIG: dict[str, Any] = {
    "hidden_sizes": [64, 64],
    "activation": "tanh",
    "log_std_init": 0.0,
}
"""Keys a ``model_config`` of :class:`DefaultPPORLModule` may set, with their defaults.

``hidden_sizes``: widths of the hidden layers of both MLPs. ``activation``:
one of ``ACTIVATION_NAMES`` (``"tanh"``, ``"relu"``, ``"linear"``/``None``, ``"swish"``/``"silu"``,
``"elu"``). ``log_std_init``: initial log standard deviation of the Gaussian for ``Box`` action spaces.
"""

LAYER_MODEL_CONFIG: dict[str, Any] = {
    "vf_share_layers": False,
    "head_fcnet_hiddens": [],
    "head_fcnet_activation": "relu",
    "fcnet_kernel_initializer": None,
    "fcnet_kernel_initializer_kwargs": None,
    "fcnet_bias_initializer": None,
    "fcnet_bias_initializer_kwargs": None,
    "initializer": "orthogonal",
    "free_log_std": True,
    "log_std_clip_param": None,
}
"""Optional keys (RLlib's names, and cairn's ``initializer``) with what leaving them out means;
recorded only when given, so that a module built without them records what it always did.
``free_log_std`` (``Box`` actions): ``True``, cairn's, a log standard deviation per action dimension
that is a parameter of its own (``log_std``, starting at ``log_std_init``), or ``False``, RLlib's
default: the policy network outputs the means and the log standard deviations (twice the action
size), so the spread depends on the observation. ``log_std_clip_param``: the log standard deviations
are clamped to ``+-`` it (RLlib's 20.0, applied by RLlib in both layouts); left out, cairn's free
``log_std`` is not clamped and the state-dependent one is clamped at 20.0. On ``Discrete`` actions
``free_log_std=True`` is refused, as RLlib refuses it.
``initializer``: how the layers that no ``fcnet_*_initializer`` sets start: ``"orthogonal"``
(cairn's, CleanRL's: gain sqrt 2 in hidden layers, 0.01 at the policy output, 1 at the value output,
zero biases) or ``"torch"`` (torch's own ``nn.Linear`` initialization in every layer, RLlib 2.60's
default PPO module: its catalog passes no initializer to the heads, and ``fcnet_*_initializer`` is
``None`` by default), drawn from the module's seeded generator. ``vf_share_layers``: one encoder for the
policy and value heads (the recurrent variant always shares). ``head_fcnet_hiddens`` /
``head_fcnet_activation`` (RLlib's default ``"relu"``): hidden layers of each head.
``fcnet_kernel_initializer`` / ``fcnet_bias_initializer`` (+ ``_kwargs``): names of
``INITIALIZER_NAMES`` for the encoder's layers; ``None`` is cairn's orthogonal (gain sqrt 2) and zero
biases."""

LSTM_MODEL_CONFIG: dict[str, Any] = {"use_lstm": True, "lstm_cell_size": 256, "max_seq_len": 20}
"""The keys (and RLlib's defaults) of :class:`DefaultPPORLModule`'s recurrent variant, recorded when
``use_lstm`` is true: ``lstm_cell_size`` (the LSTM's hidden size), ``max_seq_len`` (the length of
the sequences PPO trains on)."""

_LOG_2PI = math.log(2.0 * math.pi)


def _untimed(value: torch.Tensor, timed: bool) -> torch.Tensor:
    """``value`` ``[B, T, ...]`` as given: with its time dim when the observations had one, else ``[B, ...]``."""
    return value if timed else value.squeeze(1)


def _full_config(model_config: Mapping[str, Any]) -> dict[str, Any]:
    """:data:`DEFAULT_MODEL_CONFIG` (and :data:`LSTM_MODEL_CONFIG` with ``use_lstm``) updated by ``model_config``.

    Raises:
        ValueError: An unknown key, or an LSTM key without ``use_lstm``.
    """
    given = dict(model_config or {})
    known = set(DEFAULT_MODEL_CONFIG) | set(LSTM_MODEL_CONFIG) | set(LAYER_MODEL_CONFIG)
    unknown = sorted(set(given) - known)
    if unknown:
        raise ValueError(
            f"Unknown model_config keys {unknown} for DefaultPPORLModule; the known keys are "
            f"{sorted(known)}. A module of your own reads its own keys: "
            "RLModuleSpec(module_class=YourModule, model_config=...)."
        )
    if not given.get("use_lstm", False):
        if "lstm_cell_size" in given:
            raise ValueError("model_config['lstm_cell_size'] of DefaultPPORLModule needs use_lstm=True.")
        return {**DEFAULT_MODEL_CONFIG, **given}
    config = {**DEFAULT_MODEL_CONFIG, **LSTM_MODEL_CONFIG, **given}
    for name in ("lstm_cell_size", "max_seq_len"):
        if type(config[name]) is not int or config[name] < 1:
            raise ValueError(f"model_config[{name!r}]={config[name]!r:.60} of DefaultPPORLModule must be an int >= 1.")
    return config


class _Layout:
    """What a ``model_config`` asks of the layers: widths, activations, initializers (checked)."""

    def __init__(self, config: Mapping[str, Any], generator: torch.Generator | None) -> None:
        self.hidden = check_widths(config["hidden_sizes"], "DefaultPPORLModule: model_config['hidden_sizes']")
        self.head_hidden = check_widths(
            config.get("head_fcnet_hiddens", []), "DefaultPPORLModule: model_config['head_fcnet_hiddens']"
        )
        self.activation = config["activation"]
        self.head_activation = config.get("head_fcnet_activation", "relu")
        check_activation(self.activation, "DefaultPPORLModule: model_config['activation']")
        check_activation(self.head_activation, "DefaultPPORLModule: model_config['head_fcnet_activation']")
        self.kernel = read_initializer(config, "fcnet_kernel_initializer")
        self.bias = read_initializer(config, "fcnet_bias_initializer")
        self.torch_init = config.get("initializer", "orthogonal") == "torch"
        if config.get("initializer", "orthogonal") not in ("orthogonal", "torch"):
            raise ValueError(
                f"DefaultPPORLModule: model_config['initializer']={config['initializer']!r:.60} is refused: give "
                "'orthogonal' (cairn's default) or 'torch' (torch's nn.Linear initialization, RLlib's)."
            )
        self.generator = generator

    def encoder(self, in_dim: int) -> tuple[list[nn.Module], int]:
        """The ``hidden_sizes`` layers (RLlib's encoder), not initialized yet; and their last width."""
        return linear_layers(in_dim, self.hidden, self.activation, "model_config['activation']")

    def head(self, in_dim: int, out_dim: int) -> list[nn.Module]:
        """The ``head_fcnet_hiddens`` layers and the output layer, not initialized yet."""
        layers, last = linear_layers(in_dim, self.head_hidden, self.head_activation, "head_fcnet_activation")
        return [*layers, nn.Linear(last, out_dim)]

    def init_encoder(self, layers: list[nn.Module]) -> None:
        """The encoder's initializers (``None``: cairn's orthogonal, gain sqrt 2, zero biases; or torch's)."""
        for layer in layers:
            if isinstance(layer, nn.Linear):
                if self.torch_init:
                    _torch_linear_init(layer, self.generator)
                    if self.kernel is None and self.bias is None:
                        continue
                    # What fcnet_*_initializer names replaces torch's; the other tensor keeps torch's.
                    weight, bias = layer.weight.detach().clone(), layer.bias.detach().clone()
                    init_linear(layer, gain=1.0, kernel=self.kernel, bias=self.bias, generator=self.generator)
                    with torch.no_grad():
                        if self.kernel is None:
                            layer.weight.copy_(weight)
                        if self.bias is None:
                            layer.bias.copy_(bias)
                    continue
                init_linear(layer, gain=math.sqrt(2.0), kernel=self.kernel, bias=self.bias, generator=self.generator)

    def init_head(self, layers: list[nn.Module], out_gain: float) -> None:
        """cairn's orthogonal initialization (gain sqrt 2 for hidden layers, ``out_gain`` for the output),
        or torch's with ``initializer="torch"``."""
        linears = [layer for layer in layers if isinstance(layer, nn.Linear)]
        for i, layer in enumerate(linears):
            if self.torch_init:
                _torch_linear_init(layer, self.generator)
                continue
            gain = out_gain if i == len(linears) - 1 else math.sqrt(2.0)
            init_linear(layer, gain=gain, kernel=None, bias=None, generator=self.generator)


def _torch_linear_init(layer: nn.Linear, generator: torch.Generator | None) -> None:
    """``nn.Linear.reset_parameters`` (kaiming-uniform weights with ``a=sqrt 5``, biases uniform in
    ``+-1/sqrt(fan_in)``), drawn from ``generator`` (torch's global RNG when ``None``)."""
    with torch.no_grad():
        nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5.0), generator=generator)
        bound = 1.0 / math.sqrt(layer.in_features) if layer.in_features > 0 else 0.0
        nn.init.uniform_(layer.bias, -bound, bound, generator=generator)


def _log_std_layout(config: Mapping[str, Any], discrete: bool) -> tuple[bool, float | None]:
    """``(free_log_std, log std clamp or None)`` of a ``model_config`` (see :data:`LAYER_MODEL_CONFIG`).

    Raises:
        ValueError: ``free_log_std`` not a bool, or ``True`` given for ``Discrete`` actions; a
            ``log_std_clip_param`` that is no finite number > 0; a ``log_std_init`` other than 0
            with ``free_log_std=False`` (the network's outputs set the log stds then).
    """
    free = config.get("free_log_std", True)
    if not isinstance(free, bool):
        raise ValueError(
            f"DefaultPPORLModule: model_config['free_log_std']={free!r:.60} is refused: give True or False."
        )
    if discrete and "free_log_std" in config and free:
        raise ValueError(
            "DefaultPPORLModule: model_config['free_log_std']=True is refused for Discrete actions: a free log std "
            "is the Gaussian's (Box actions), as in RLlib. Leave it out or give False."
        )
    clip = config.get("log_std_clip_param")
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, int | float) or not 0.0 < clip < math.inf):
        raise ValueError(
            f"DefaultPPORLModule: model_config['log_std_clip_param']={clip!r:.60} is refused: give a finite number "
            "> 0 (RLlib's 20.0) or leave it out."
        )
    if not free and float(config.get("log_std_init", 0.0)) != 0.0:
        raise ValueError(
            "DefaultPPORLModule: model_config['log_std_init'] is refused with free_log_std=False: the policy network "
            "outputs the log standard deviations then. Leave log_std_init out, or give free_log_std=True."
        )
    if discrete:
        return free, None
    return free, (float(clip) if clip is not None else None if free else 20.0)


def _one(layers: list[nn.Module]) -> nn.Module:
    """A head as one module: a bare ``Linear`` without hidden layers (the names of earlier checkpoints)."""
    return layers[0] if len(layers) == 1 else nn.Sequential(*layers)


class DefaultPPORLModule(RLModule):
    """A torch actor-critic for one policy: PPO's default module.

    Args:
        observation_space: A ``Box`` space; observations are flattened.
        action_space: ``Discrete`` or a one-dimensional ``Box``.
        model_config: Overrides of :data:`DEFAULT_MODEL_CONFIG`; unknown keys
            raise ``ValueError``.
        seed: Seed of the weight initialisation (a private ``torch.Generator``,
            as in cairn 0.1, so weights are bit for bit those of 0.1); ``None``
            uses torch's global RNG.

    Raises:
        ValueError: A space this module cannot handle, or an unknown model_config key.
    """

    default_catalog_class: ClassVar[type | None] = PPOCatalog
    """RLlib's catalog of these networks: ``RLModuleSpec(catalog_class=PPOCatalog)`` is taken."""

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        model_config: Mapping[str, Any] | None = None,
        *,
        seed: int | None = None,
    ) -> None:
        obs_dim = box_observation_size(observation_space, module_class=type(self))
        model_config = default_module_model_config(model_config, recurrent=True)  # RLlib's names too
        if isinstance(action_space, gym.spaces.Discrete):
            discrete = True
            out_dim = int(action_space.n)
        elif isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
            discrete = False
            out_dim = int(action_space.shape[0])
        else:
            raise ValueError(
                f"DefaultPPORLModule supports Discrete and one-dimensional Box action spaces, got {action_space!r}."
            )
        config = _full_config(model_config)
        generator = None if seed is None else torch.Generator().manual_seed(int(seed))
        layout = _Layout(config, generator)  # checks widths, activations and initializers before anything is built
        config["hidden_sizes"] = layout.hidden
        config["log_std_init"] = float(config["log_std_init"])
        free_log_std, log_std_clip = _log_std_layout(config, discrete)
        super().__init__(observation_space, action_space, config, seed=seed)
        self.discrete = discrete
        self.free_log_std = free_log_std
        self.log_std_clip = log_std_clip
        # The policy's outputs: logits, the means (free log std), or the means and the log stds (RLlib's default).
        pi_dim = out_dim if discrete or self.free_log_std else 2 * out_dim
        self.obs_dim = obs_dim
        self.use_lstm = bool(config.get("use_lstm", False))
        self.vf_share_layers = self.use_lstm or config.get("vf_share_layers", False) is True
        if self.use_lstm:
            self._build_lstm(layout, pi_dim)
        elif self.vf_share_layers:
            self._build_shared(layout, pi_dim)
        else:
            # Built in the order of earlier versions (policy, then value), which seed=None's global RNG sees.
            pi_encoder, last = layout.encoder(self.obs_dim)
            pi_head = layout.head(last, pi_dim)
            vf_encoder, _ = layout.encoder(self.obs_dim)
            vf_head = layout.head(last, 1)
            # One Sequential per network: the parameter names (pi.0.weight, ...) of every earlier checkpoint.
            self.pi = nn.Sequential(*pi_encoder, *pi_head)
            self.vf = nn.Sequential(*vf_encoder, *vf_head)
            layout.init_encoder(pi_encoder)
            layout.init_head(pi_head, 0.01)
            layout.init_encoder(vf_encoder)
            layout.init_head(vf_head, 1.0)
        if not self.discrete and self.free_log_std:
            self.log_std = nn.Parameter(torch.full((out_dim,), config["log_std_init"]))

    def _build_shared(self, layout: _Layout, out_dim: int) -> None:
        """RLlib's ``vf_share_layers=True``: one encoder, a policy head and a value head on it."""
        encoder, last = layout.encoder(self.obs_dim)
        pi_head, vf_head = layout.head(last, out_dim), layout.head(last, 1)
        self.encoder = nn.Sequential(*encoder)
        self.pi_head, self.vf_head = _one(pi_head), _one(vf_head)
        layout.init_encoder(encoder)
        layout.init_head(pi_head, 0.01)
        layout.init_head(vf_head, 1.0)

    def _build_lstm(self, layout: _Layout, out_dim: int) -> None:
        """Encoder (the hidden layers) -> LSTM -> policy and value heads."""
        cell = int(self.model_config["lstm_cell_size"])
        encoder, last = layout.encoder(self.obs_dim)
        self.encoder = nn.Sequential(*encoder)
        self.lstm = nn.LSTM(last, cell, batch_first=True)
        pi_head, vf_head = layout.head(cell, out_dim), layout.head(cell, 1)
        self.pi_head, self.vf_head = _one(pi_head), _one(vf_head)
        layout.init_encoder(encoder)
        with torch.no_grad():
            bound = 1.0 / math.sqrt(cell)  # torch's own LSTM init, drawn from the module's generator
            for param in self.lstm.parameters():
                nn.init.uniform_(param, -bound, bound, generator=layout.generator)
        layout.init_head(pi_head, 0.01)
        layout.init_head(vf_head, 1.0)

    def get_initial_state(self) -> dict[str, Any]:
        """``{"h", "c"}`` zeros of ``lstm_cell_size`` with ``use_lstm``; ``{}`` (stateless) without."""
        if not self.use_lstm:
            return {}
        cell = int(self.model_config["lstm_cell_size"])
        return {"h": np.zeros(cell, dtype=np.float32), "c": np.zeros(cell, dtype=np.float32)}

    def _recurrent(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor], bool]:
        """``(dist_inputs, values, state_out, timed)`` of the LSTM variant, outputs ``[B, T, ...]``.

        Observations ``[B, T, *obs_shape]`` (or ``[B, *obs_shape]``: one step, and ``timed`` is false);
        ``batch["state_in"]`` the state at the sequences' start (the initial state when absent).
        """
        obs = torch.as_tensor(batch["obs"]).to(torch.float32)
        obs_rank = len(self.observation_space.shape or ())
        timed = obs.dim() == obs_rank + 2
        if not timed:
            obs = obs.unsqueeze(1)
        state = batch.get(Columns.STATE_IN)
        if state is None:
            rows = int(obs.shape[0])  # only here: an int of a size would fix the batch size of an export
            state = {k: torch.as_tensor(v).unsqueeze(0).repeat(rows, 1) for k, v in self.get_initial_state().items()}
        features, (h, c) = self.lstm(
            # Sizes from the tensor, not ints: a traced export (cairn export) keeps the batch size free.
            self.encoder(obs.reshape(obs.shape[0], obs.shape[1], self.obs_dim)),
            (torch.as_tensor(state["h"]).unsqueeze(0), torch.as_tensor(state["c"]).unsqueeze(0)),
        )
        values = self.vf_head(features).squeeze(-1)
        return self.pi_head(features), values, {"h": h.squeeze(0), "c": c.squeeze(0)}, timed

    def _obs(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        obs = torch.as_tensor(batch["obs"])
        return obs.reshape(obs.shape[0], self.obs_dim).to(torch.float32)

    def _policy(self, obs: torch.Tensor) -> torch.Tensor:
        """The action distribution's inputs of the MLP variant (shared encoder or the policy network)."""
        if self.vf_share_layers:
            return self.pi_head(self.encoder(obs))  # type: ignore[no-any-return]
        return self.pi(obs)  # type: ignore[no-any-return]

    def _policy_and_values(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(dist_inputs, values [B])`` of the MLP variant; the shared encoder runs once."""
        if self.vf_share_layers:
            features = self.encoder(obs)
            return self.pi_head(features), self.vf_head(features).squeeze(-1)
        return self.pi(obs), self.vf(obs).squeeze(-1)

    def _logp_entropy(self, dist_inputs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.discrete:
            logp_all = torch.log_softmax(dist_inputs, dim=-1)
            logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
            return logp, entropy
        mean, log_std = self._mean_log_std(dist_inputs)
        z = (actions - mean) / log_std.exp()
        logp = (-0.5 * z.pow(2) - log_std - 0.5 * _LOG_2PI).sum(-1)
        entropy = (0.5 + 0.5 * _LOG_2PI + log_std).sum(-1)
        return logp, entropy

    def _mean_log_std(self, dist_inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The Gaussian's means and log standard deviations (clamped at ``log_std_clip_param``) of a
        ``Box`` policy's outputs: the free ``log_std`` parameter, or the second half of the outputs."""
        if self.free_log_std:
            mean, log_std = dist_inputs, self.log_std.expand_as(dist_inputs)
        else:
            mean, log_std = dist_inputs.chunk(2, dim=-1)
        if self.log_std_clip is not None:
            log_std = log_std.clamp(-self.log_std_clip, self.log_std_clip)
        return mean, log_std

    def forward_inference(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Greedy actions: the most likely action (Discrete) or the mean (Box), and the distribution's inputs.

        Returns:
            ``{"actions", "action_dist_inputs"}`` (and ``STATE_OUT`` with ``use_lstm``): actions
            ``Tensor[B]`` (int64) or ``Tensor[B, act_dim]`` (float32); the inputs as RLlib's
            (:meth:`dist_inputs_for_output`).
        """
        with torch.no_grad():
            if self.use_lstm:
                dist_inputs, _, state, timed = self._recurrent(batch)
                actions = dist_inputs.argmax(-1) if self.discrete else self._mean_log_std(dist_inputs)[0]
                greedy: dict[str, Any] = {
                    "actions": _untimed(actions, timed),
                    Columns.ACTION_DIST_INPUTS: _untimed(self.dist_inputs_for_output(dist_inputs), timed),
                    Columns.STATE_OUT: state,
                }
                return greedy
            dist_inputs = self._policy(self._obs(batch))
            actions = dist_inputs.argmax(-1) if self.discrete else self._mean_log_std(dist_inputs)[0]
        return {"actions": actions, Columns.ACTION_DIST_INPUTS: self.dist_inputs_for_output(dist_inputs)}

    def dist_inputs_for_output(self, dist_inputs: torch.Tensor) -> torch.Tensor:
        """``action_dist_inputs`` as RLlib's modules return them: logits (Discrete), or the mean and the
        log standard deviations concatenated (Box, whether ``log_std`` is free or the network's)."""
        if self.discrete:
            return dist_inputs
        return torch.cat(self._mean_log_std(dist_inputs), dim=-1)

    def forward_exploration(
        self, batch: Mapping[str, torch.Tensor], *, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """Sampled actions, their log-probabilities and the value estimates.

        Returns:
            ``{"actions", "action_logp", "vf_preds", "action_dist_inputs"}``.
        """
        if self.use_lstm:
            return self._explore_recurrent(batch, generator)
        with torch.no_grad():
            dist_inputs, values = self._policy_and_values(self._obs(batch))
            if self.discrete:
                probs = torch.softmax(dist_inputs, dim=-1)
                actions = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
            else:
                mean, log_std = self._mean_log_std(dist_inputs)
                noise = torch.randn(mean.shape, generator=generator)
                actions = mean + log_std.exp() * noise
            logp, _ = self._logp_entropy(dist_inputs, actions)
        return {
            "actions": actions,
            "action_logp": logp,
            "vf_preds": values,
            "action_dist_inputs": self.dist_inputs_for_output(dist_inputs),
        }

    def _explore_recurrent(self, batch: Mapping[str, Any], generator: torch.Generator | None) -> dict[str, Any]:
        """:meth:`forward_exploration` of the LSTM variant (outputs ``[B, T]``, or ``[B]`` for untimed obs)."""
        with torch.no_grad():
            dist_inputs, values, state, timed = self._recurrent(batch)
            if self.discrete:
                probs = torch.softmax(dist_inputs.reshape(-1, dist_inputs.shape[-1]), dim=-1)
                actions = torch.multinomial(probs, 1, generator=generator).reshape(dist_inputs.shape[:-1])
            else:
                mean, log_std = self._mean_log_std(dist_inputs)
                noise = torch.randn(mean.shape, generator=generator)
                actions = mean + log_std.exp() * noise
            logp, _ = self._logp_entropy(dist_inputs, actions)
        return {
            "actions": _untimed(actions, timed),
            "action_logp": _untimed(logp, timed),
            "vf_preds": _untimed(values, timed),
            "action_dist_inputs": _untimed(self.dist_inputs_for_output(dist_inputs), timed),
            Columns.STATE_OUT: state,
        }

    def forward_train(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``{"action_logp", "entropy", "vf_preds"}`` of ``batch["obs"]``, ``batch["actions"]``, with gradients.

        The LSTM variant reads sequences (``obs`` and ``actions`` ``[B, T, ...]``, ``state_in``
        at their start) and returns ``[B, T]`` outputs and ``state_out``.
        """
        if self.use_lstm:
            dist_inputs, values, state, _ = self._recurrent(batch)
            logp, entropy = self._logp_entropy(dist_inputs, torch.as_tensor(batch["actions"]))
            train: dict[str, Any] = {"action_logp": logp, "entropy": entropy, "vf_preds": values}
            train[Columns.STATE_OUT] = state
            return train
        dist_inputs, values = self._policy_and_values(self._obs(batch))
        logp, entropy = self._logp_entropy(dist_inputs, torch.as_tensor(batch["actions"]))
        return {"action_logp": logp, "entropy": entropy, "vf_preds": values}

    def compute_values(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Value estimates ``Tensor[B]`` (``[B, T]`` for sequences) without gradients."""
        with torch.no_grad():
            if self.use_lstm:
                _, lstm_values, _, timed = self._recurrent(batch)
                return _untimed(lstm_values, timed)
            obs = self._obs(batch)
            values: torch.Tensor = (self.vf_head(self.encoder(obs)) if self.vf_share_layers else self.vf(obs)).squeeze(
                -1
            )
        return values


register_old_paths(DefaultPPORLModule)
# A spec without a class (0.1's RLModuleSpec(obs, act), or one written by hand) builds this module.
RLModuleSpec.default_module_class = DefaultPPORLModule
