"""Stateful (recurrent) modules: their state in batches, rollouts cut into sequences, the masked train pass.

A module is stateful when :meth:`RLModule.get_initial_state` returns a non-empty
dict (RLlib's rule): name -> array or tensor of one episode's state, without a batch
dimension (an LSTM's ``{"h": [cell], "c": [cell]}``). What cairn does with it follows
RLlib's layout:

- the env runner feeds ``batch[Columns.STATE_IN]``, a dict of tensors with the batch
  first (``{"h": Tensor[B, cell], ...}``), with observations given one time step
  (``Tensor[B, 1, *obs_shape]``), and takes ``out[Columns.STATE_OUT]`` back (same
  layout); outputs may carry that time step (``[B, 1, ...]``) or not (``[B, ...]``);
- in sample batches and train batches, the state is stored flat, one column per name
  (``"state_in/h"``), so batches stay dicts of arrays (concatenated, sliced, sent to
  Ray as they are); the module gets it nested again;
- PPO cuts each env slot's rollout into sequences of at most ``max_seq_len`` steps that
  never cross an episode boundary (:func:`to_sequences`), zero-pads them and marks the
  real steps in ``Columns.LOSS_MASK``; the state column then holds the state at each
  sequence's start;
- the learner feeds whole sequences (``obs`` ``[B, T, ...]`` and the state at their
  start) and keeps only the real steps of the outputs (:func:`sequence_train_outputs`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.apis.value_function_api import ValueFunctionAPI
from cairn.rl.core.rl_module.rl_module import RLModule
from cairn.rl.core.rl_module.torch.torch_rl_module import complete_train_outputs
from cairn.rl.utils.nested import map_leaves
from cairn.state_checks import Count

__all__ = [
    "DEFAULT_MAX_SEQ_LEN",
    "STATE_IN_PREFIX",
    "batched_state",
    "initial_state",
    "max_seq_len_of",
    "nest_state",
    "sequence_train_outputs",
    "state_columns",
    "state_out",
    "strip_time_dim",
    "to_sequences",
]

DEFAULT_MAX_SEQ_LEN = 20
"""RLlib's ``DefaultModelConfig.max_seq_len``: the sequence length of a module whose
``model_config`` does not set ``max_seq_len``."""

STATE_IN_PREFIX = Columns.STATE_IN + "/"
"""The prefix of the flat state columns of sample and train batches (``"state_in/h"``)."""


def initial_state(module: RLModule, module_id: str) -> dict[str, torch.Tensor]:
    """``module.get_initial_state()`` as tensors (copies), checked; ``{}`` for a stateless module.

    Raises:
        TypeError: It is not a dict.
        ValueError: A name that is not a non-empty string without ``"/"``, or a value that
            is not a numeric array; the message names the module.
    """
    state = module.get_initial_state()
    where = f"{type(module).__qualname__}.get_initial_state() of module {module_id!r}"
    if not isinstance(state, Mapping):
        raise TypeError(f"{where} returned {type(state).__name__}: return a dict of name -> array ({{}}: no state).")
    out: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"{where} has state name {name!r:.60}: names are non-empty strings without '/'.")
        try:
            tensor = torch.as_tensor(value.detach() if isinstance(value, torch.Tensor) else np.asarray(value))
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"{where}[{name!r}] is not a numeric array ({err}).") from err
        if tensor.dtype == torch.bool or tensor.is_complex():
            raise ValueError(f"{where}[{name!r}] has dtype {tensor.dtype}: give a real numeric array.")
        out[name] = tensor.clone()
    return out


def batched_state(initial: Mapping[str, torch.Tensor], rows: int) -> dict[str, torch.Tensor]:
    """The initial state repeated over ``rows`` (RLlib's layout: the batch first)."""
    return {name: value.unsqueeze(0).repeat(rows, *([1] * value.dim())) for name, value in initial.items()}


def max_seq_len_of(model_config: Mapping[str, Any], module_id: str) -> int:
    """The ``max_seq_len`` of a module's ``model_config`` (:data:`DEFAULT_MAX_SEQ_LEN` when unset).

    Raises:
        ValueError: It is not a positive int.
    """
    value = model_config.get("max_seq_len")
    if value is None:
        return DEFAULT_MAX_SEQ_LEN
    if not Count(1).fits(value):
        raise ValueError(f"model_config['max_seq_len']={value!r:.60} of module {module_id!r} must be an int >= 1.")
    return int(value)


def state_columns(state: Mapping[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    """A state's flat columns: ``{"state_in/h": ...}``."""
    return {STATE_IN_PREFIX + name: value for name, value in state.items()}


def nest_state(batch: Mapping[str, Any]) -> dict[str, Any]:
    """``batch`` with its flat state columns gathered under ``Columns.STATE_IN`` (RLlib's layout)."""
    out = {key: value for key, value in batch.items() if not key.startswith(STATE_IN_PREFIX)}
    nested = {key[len(STATE_IN_PREFIX) :]: value for key, value in batch.items() if key.startswith(STATE_IN_PREFIX)}
    if nested:
        out[Columns.STATE_IN] = nested
    return out


def strip_time_dim(value: torch.Tensor, rows: int, row_shape: tuple[int, ...], *, key: str, where: str) -> torch.Tensor:
    """An output of a one-step pass as ``[rows, *row_shape]``: its time step of 1 dropped if it has one.

    Raises:
        ValueError: Another shape; the message names ``where`` and ``key``.
    """
    tensor = torch.as_tensor(value)
    shape = tuple(tensor.shape)
    if shape == (rows, 1, *row_shape):
        return tensor.reshape(rows, *row_shape)
    if shape == (rows, *row_shape):
        return tensor
    raise ValueError(
        f"{where} returned {key!r} of shape {shape} for {rows} rows of one time step: expected "
        f"{(rows, 1, *row_shape)} (batch, time) or {(rows, *row_shape)}."
    )


def state_out(
    out: Mapping[str, Any], initial: Mapping[str, torch.Tensor], rows: int, *, where: str
) -> dict[str, torch.Tensor]:
    """The ``Columns.STATE_OUT`` of a one-step pass, checked against the initial state's names and shapes.

    Raises:
        ValueError: No state out, other names, or another shape; the message names ``where``.
    """
    given = out.get(Columns.STATE_OUT)
    if not isinstance(given, Mapping) or set(given) != set(initial):
        found = sorted(given) if isinstance(given, Mapping) else type(given).__name__
        raise ValueError(
            f"{where} returned Columns.STATE_OUT {found}; a stateful module returns a dict with the names of its "
            f"get_initial_state() {sorted(initial)}, each [batch, *shape]."
        )
    states: dict[str, torch.Tensor] = {}
    for name, value in initial.items():
        tensor = torch.as_tensor(given[name]).detach()
        if tuple(tensor.shape) != (rows, *value.shape):
            raise ValueError(
                f"{where} returned Columns.STATE_OUT[{name!r}] of shape {tuple(tensor.shape)}; expected "
                f"{(rows, *value.shape)} (batch, then the shape of get_initial_state()[{name!r}])."
            )
        states[name] = tensor.to(value.dtype).clone()
    return states


def to_sequences(
    columns: Mapping[str, npt.NDArray[Any]], dones: npt.NDArray[np.bool_], *, max_seq_len: int
) -> dict[str, npt.NDArray[Any]]:
    """Cut time-major columns ``[T, N, ...]`` into zero-padded sequences ``[S, max_seq_len, ...]``.

    Each env slot's rollout (column ``n``) is cut where an episode ended (``dones[t]``
    ends the step ``t``'s episode, so step ``t + 1`` starts a sequence) and every
    ``max_seq_len`` steps within an episode; sequences are ordered by slot, then time.
    State columns (:data:`STATE_IN_PREFIX`) keep the row of each sequence's first step
    only (``[S, ...]``); ``Columns.LOSS_MASK`` ``[S, max_seq_len]`` marks the real steps.
    """
    dones = np.asarray(dones, dtype=np.bool_)
    horizon, num_slots = dones.shape
    starts_t: list[int] = []
    slots: list[int] = []
    lengths: list[int] = []
    for n in range(num_slots):
        bounds = [0, *(np.flatnonzero(dones[:-1, n]) + 1).tolist(), horizon]
        for begin, end in itertools.pairwise(bounds):
            for chunk in range(begin, end, max_seq_len):
                starts_t.append(chunk)
                slots.append(n)
                lengths.append(min(max_seq_len, end - chunk))
    first = np.asarray(starts_t, dtype=np.int64)
    slot = np.asarray(slots, dtype=np.int64)
    offsets = np.arange(max_seq_len, dtype=np.int64)
    mask = offsets[None, :] < np.asarray(lengths, dtype=np.int64)[:, None]
    time_index = np.where(mask, first[:, None] + offsets[None, :], 0)  # padding reads row 0, then is zeroed
    out: dict[str, npt.NDArray[Any]] = {}
    for key, column in columns.items():
        if key.startswith(STATE_IN_PREFIX):
            out[key] = np.asarray(column)[first, slot]
            continue
        # A Dict/Tuple observation (a module that takes them as they are): each leaf is cut alike.
        out[key] = map_leaves(lambda leaf: _gather(np.asarray(leaf), time_index, slot, mask), column)
    out[Columns.LOSS_MASK] = mask
    return out


def _gather(
    column: npt.NDArray[Any], time_index: npt.NDArray[np.int64], slot: npt.NDArray[np.int64], mask: npt.NDArray[Any]
) -> npt.NDArray[Any]:
    """The steps ``time_index`` ``[S, T]`` of the slots ``slot`` ``[S]`` of ``column``, zero where not ``mask``."""
    gathered = column[time_index, slot[:, None]]
    gathered[~mask] = 0
    return gathered


def _flat_steps(value: Any, rows: int, steps: int, *, key: str, where: str) -> torch.Tensor:
    """A train output of ``rows`` sequences of ``steps`` as ``[rows * steps, ...]`` (it may already be flat)."""
    tensor = torch.as_tensor(value)
    if tensor.dim() >= 2 and tuple(tensor.shape[:2]) == (rows, steps):
        return tensor.reshape(rows * steps, *tensor.shape[2:])
    if tensor.dim() >= 1 and tensor.shape[0] == rows * steps:
        return tensor
    raise ValueError(
        f"{where} returned {key!r} of shape {tuple(tensor.shape)} for {rows} sequences of {steps} steps: "
        f"expected [{rows}, {steps}, ...] (batch, time) or [{rows * steps}, ...]."
    )


def sequence_train_outputs(
    module: RLModule, minibatch: Mapping[str, torch.Tensor]
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``forward_train`` of a minibatch of sequences, and the minibatch, both at its real steps only.

    The module gets ``obs`` and ``actions`` ``[B, T, ...]``, ``Columns.STATE_IN`` (the
    state at each sequence's start, ``[B, ...]`` per name) and ``Columns.LOSS_MASK``.
    Its outputs (``[B, T, ...]`` or ``[B * T, ...]``) are completed as
    :func:`complete_train_outputs` does (values from ``compute_values`` of the sequences),
    then every output and every step column of the minibatch keeps the rows of the mask:
    a loss computed on them as on stateless rows leaves the padding out of every term.
    """
    mask = minibatch[Columns.LOSS_MASK].to(torch.bool)
    rows, steps = int(mask.shape[0]), int(mask.shape[1])
    where = f"{type(module).__qualname__}.forward_train"
    train_batch = nest_state({k: v for k, v in minibatch.items() if k in (Columns.OBS, Columns.ACTIONS)})
    train_batch.update(nest_state({k: v for k, v in minibatch.items() if k.startswith(STATE_IN_PREFIX)}))
    train_batch[Columns.LOSS_MASK] = mask
    out = dict(module.forward_train(train_batch))
    if Columns.VF_PREDS not in out and isinstance(module, ValueFunctionAPI):
        out[Columns.VF_PREDS] = module.compute_values(train_batch, embeddings=out.get(Columns.EMBEDDINGS))
    flat_out = {
        key: _flat_steps(value, rows, steps, key=key, where=where)
        for key, value in out.items()
        if key not in (Columns.STATE_OUT, Columns.EMBEDDINGS) and isinstance(value, torch.Tensor)
    }
    flat_mb = {
        key: map_leaves(lambda leaf: leaf.reshape(rows * steps, *leaf.shape[2:]), value)
        for key, value in minibatch.items()
        if not key.startswith(STATE_IN_PREFIX) and key != Columns.LOSS_MASK
    }
    flat_out = complete_train_outputs(module, flat_mb, flat_out)
    valid = mask.reshape(-1)
    return (
        {key: value[valid] for key, value in flat_out.items()},
        {key: map_leaves(lambda leaf: leaf[valid], value) for key, value in flat_mb.items()},
    )
