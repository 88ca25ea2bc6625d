"""A trained policy in one file: TorchScript or ONNX, with its connectors baked in.

::

    from cairn.rl.inference import Policy
    from cairn.rl.export import export_policy

    export_policy(Policy.from_checkpoint(ckpt), "policy.onnx", format="onnx")

(``cairn export CKPT --format onnx -o policy.onnx``). The file's input is the raw
observation, named ``obs``, float32 ``[B, obs_dim]``; its outputs are
``action_dist_inputs`` (the module's, as ``forward_inference`` returns them) and
``actions``: the greedy action as the environment takes it (int64 ``[B]`` for
Discrete, float32 ``[B, act_dim]`` clipped to a Box's bounds). The connectors run
inside: a ``MeanStdFilter`` with the checkpoint's statistics as constants (computed in
float64 as the Python filter does), ``ClipActions``, and a frame stack whose history is
explicit (input ``frames`` ``[B, num_frames - 1, *obs_shape]``, zeros at an episode's
start; output ``frames_out``). A recurrent module's state is explicit too: inputs
``state_in_<name>`` and outputs ``state_out_<name>`` (an LSTM's ``c`` and ``h``, float32
``[B, cell]``). Feed each step's outputs to the next step's inputs, and the initial
values at an episode's start (:meth:`ExportedPolicy.example_inputs`). Dict (Tuple,
Discrete) observations go through the flattening connector: with ``FlattenObservations``
first in the pipeline, ``obs`` is its output, ``gymnasium.spaces.flatten(space, o)`` per row
(:attr:`ExportedPolicy.flattened_space`). Other pieces are refused with what to do instead
(the RLlib idiom in Python).

ONNX needs cairn's ``[export]`` extra (onnx, onnxscript; onnxruntime to run the file).
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cairn.rl.connectors.connectors import ClipActions, MeanStdFilter
from cairn.rl.connectors.env_to_module.flatten_observations import FlattenObservations
from cairn.rl.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
from cairn.rl.core.columns import Columns
from cairn.rl.inference import Policy

__all__ = ["EXPORT_FORMATS", "ExportedPolicy", "export_policy", "load_exported"]

EXPORT_FORMATS = ("onnx", "torchscript")
"""What :func:`export_policy` writes."""

OUTPUT_NAMES = (Columns.ACTION_DIST_INPUTS, Columns.ACTIONS)
"""The exported file's outputs, in order."""


class ExportedPolicy(nn.Module):
    """``obs -> (action_dist_inputs, actions)``: a policy's filter, module and action clipping as one torch module.

    Args:
        policy: The policy (its module and connectors).

    Raises:
        ValueError: A connector or module this exporter cannot bake in (the message says which, and what to do).
    """

    mean: torch.Tensor
    std: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        module = policy.module
        initial = module.get_initial_state()
        self.state_names = tuple(sorted(initial))
        """A recurrent module's state names: one extra input ``state_in_<name>`` and output
        ``state_out_<name>`` each, ``[B, *shape]`` float32 (start an episode from ``initial_state``)."""
        self.initial_state = {name: np.asarray(initial[name], dtype=np.float32) for name in self.state_names}
        if not isinstance(module.observation_space, gym.spaces.Box):
            raise ValueError(
                f"The module takes {module.observation_space} observations; the exported file takes one float32 "
                "array [B, obs_dim]. Export a module that reads Box observations (after FlattenObservations)."
            )
        self.module = module
        self.obs_shape = tuple(int(d) for d in (module.observation_space.shape or ()))
        pieces = list(policy.env_to_module.connectors)
        flattener = pieces[0] if pieces and isinstance(pieces[0], FlattenObservations) else None
        pieces = pieces[1:] if flattener is not None else pieces
        self.flattened_space = flattener.input_observation_space if flattener is not None else None
        """With a ``FlattenObservations`` first, the space whose observations the file takes flattened:
        ``gymnasium.spaces.flatten(flattened_space, obs)`` per row (one-hot Discrete, Dict keys in order)."""
        stacker = pieces[0] if pieces and isinstance(pieces[0], FrameStackingEnvToModule) else None
        pieces = pieces[1:] if stacker is not None else pieces
        filters = [piece for piece in pieces if isinstance(piece, MeanStdFilter)]
        others = [piece.name for piece in pieces if not isinstance(piece, MeanStdFilter)]
        clips = [piece for piece in policy.module_to_env.connectors if isinstance(piece, ClipActions)]
        others += [piece.name for piece in policy.module_to_env.connectors if not isinstance(piece, ClipActions)]
        if others or len(filters) > 1 or len(clips) > 1:
            raise ValueError(
                f"The policy's connectors {others or [p.name for p in filters + clips]} cannot be baked into a "
                "file yet (cairn export takes FlattenObservations's output and bakes in a FrameStackingEnvToModule, "
                "then a MeanStdFilter, and ClipActions). Run it in Python (cairn.rl.inference.Policy, docs/deploy.md)."
            )
        self.history = 0
        """Frames a baked-in frame stack keeps (``num_frames - 1``): the extra input ``frames``
        float32 ``[B, history, *obs_shape]`` (zeros at an episode's start) and output ``frames_out``."""
        if stacker is not None and stacker.num_frames > 1:
            self.history = stacker.num_frames - 1
            raw = stacker.input_observation_space
            self.obs_shape = tuple(int(d) for d in (raw.shape if raw is not None else None) or ())  # one frame
        self.filtered = bool(filters)
        if filters:
            f = filters[0]
            self.register_buffer("mean", torch.as_tensor(np.asarray(f.mean, dtype=np.float64)))
            self.register_buffer("std", torch.as_tensor(np.sqrt(f.var) + f.epsilon, dtype=torch.float64))
            self.clip = float(f.clip)
        self.clipped = bool(clips)
        if clips:
            self.register_buffer("low", torch.as_tensor(clips[0].low, dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(clips[0].high, dtype=torch.float32))

    def forward(self, obs: torch.Tensor, *state: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``obs`` float32 ``[B, *obs_shape]``, a frame stack's ``frames`` and a recurrent module's state (one
        tensor per name of :attr:`state_names`) -> ``(action_dist_inputs, actions, frames_out, *state_out)``."""
        x: torch.Tensor = obs
        frames_out: tuple[torch.Tensor, ...] = ()
        if self.history:  # RLlib's FrameStackingEnvToModule: oldest first, concatenated along the last axis
            stack = torch.cat([state[0].to(obs.dtype), obs.unsqueeze(1)], dim=1)
            x, frames_out, state = torch.cat(torch.unbind(stack, dim=1), dim=-1), (stack[:, 1:],), state[1:]
        if self.filtered:
            # The Python filter computes in float64 and returns float32: the same here, so that the file
            # and the pipeline agree to float32 rounding.
            x = ((x.to(torch.float64) - self.mean) / self.std).clamp(-self.clip, self.clip).to(torch.float32)
        batch: dict[str, Any] = {Columns.OBS: x}
        if self.state_names:  # one time step, as the env-to-module pipeline gives a recurrent module
            batch = {Columns.OBS: x.unsqueeze(1), Columns.STATE_IN: dict(zip(self.state_names, state, strict=True))}
        out = self.module.forward_inference(batch)
        if Columns.ACTION_DIST_INPUTS not in out:
            raise ValueError(
                f"{type(self.module).__qualname__}.forward_inference returns {sorted(out)}, without "
                f"{Columns.ACTION_DIST_INPUTS!r}; the exported file returns it (RLlib's modules do)."
            )
        inputs, actions = out[Columns.ACTION_DIST_INPUTS], out[Columns.ACTIONS]
        if self.state_names:  # drop the time step again (RLlib's RemoveSingleTsTimeRankFromBatch)
            inputs, actions = inputs.squeeze(1), actions.squeeze(1)
        if self.clipped:
            actions = torch.minimum(torch.maximum(actions, self.low), self.high)
        state_out: Any = out.get(Columns.STATE_OUT, {})
        states = tuple(state_out[name] for name in self.state_names)
        return (inputs, actions, *frames_out, *states)

    def example_inputs(self, rows: int = 2) -> tuple[torch.Tensor, ...]:
        """The file's inputs at an episode's start: zero ``obs``, empty ``frames``, the initial state; ``rows`` each."""
        obs = torch.zeros((rows, *self.obs_shape), dtype=torch.float32)
        frames = [torch.zeros((rows, self.history, *self.obs_shape), dtype=torch.float32)] if self.history else []
        states = (torch.as_tensor(self.initial_state[n]).expand(rows, -1).clone() for n in self.state_names)
        return (obs, *frames, *states)

    @property
    def input_names(self) -> list[str]:
        """``["obs", "frames" (a frame stack), "state_in_<name>" (a recurrent module), ...]``."""
        return ["obs", *(["frames"] if self.history else []), *(f"state_in_{name}" for name in self.state_names)]

    @property
    def output_names(self) -> list[str]:
        """``["action_dist_inputs", "actions", "frames_out", "state_out_<name>", ...]``."""
        frames = ["frames_out"] if self.history else []
        return [*OUTPUT_NAMES, *frames, *(f"state_out_{name}" for name in self.state_names)]


def export_policy(
    policy: Policy, path: str | os.PathLike[str], *, format: Literal["onnx", "torchscript"]
) -> ExportedPolicy:
    """Write ``policy`` to ``path`` as one file (see the module doc); returns the module that was exported.

    Raises:
        ValueError: An unknown format, or a policy :class:`ExportedPolicy` refuses.
        ImportError: ONNX without the ``[export]`` extra (``pip install 'cairn-rl[export]'``).
    """
    if format not in EXPORT_FORMATS:
        raise ValueError(f"format={format!r:.40}: cairn exports {' or '.join(EXPORT_FORMATS)}.")
    exported = ExportedPolicy(policy).eval().to("cpu").requires_grad_(False)
    example = exported.example_inputs()
    if format == "torchscript":
        # torch.as_tensor of a tensor input is the identity, not the constant the TracerWarning fears.
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit._trace.TracerWarning)
            traced = torch.jit.trace(exported, example, check_trace=False)  # type: ignore[no-untyped-call]
        traced.save(os.fspath(path))
        return exported
    missing = [name for name in ("onnx", "onnxscript") if importlib.util.find_spec(name) is None]
    if missing:  # said before torch's exporter fails deep inside
        raise ImportError(f"cairn export --format onnx needs {missing}: pip install 'cairn-rl[export]'.")
    batch = torch.export.Dim("batch", min=1)
    with torch.no_grad():
        torch.onnx.export(
            exported,
            example,
            os.fspath(path),
            input_names=exported.input_names,
            output_names=exported.output_names,
            # forward(obs, *state): torch.export sees the varargs as one tuple (none when empty).
            dynamic_shapes=({0: batch}, tuple({0: batch} for _ in example[1:])) if example[1:] else ({0: batch},),
            dynamo=True,
            external_data=False,
            verbose=False,
        )
    return exported


def load_exported(path: str | os.PathLike[str]) -> Any:
    """A TorchScript file written by :func:`export_policy`, ready to call: ``file(obs) -> (inputs, actions)``."""
    return torch.jit.load(os.fspath(path), map_location="cpu")  # type: ignore[no-untyped-call]
