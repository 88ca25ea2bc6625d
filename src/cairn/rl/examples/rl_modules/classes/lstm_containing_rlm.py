"""RLlib's ``rllib/examples/rl_modules/classes/lstm_containing_rlm.py``: ``LSTMContainingRLModule`` (and
``LSTMContainingRLModuleWithTargetNetwork``, the same with RLlib's ``TargetNetworkAPI``).

Written as RLlib's: a :class:`~cairn.rl.core.rl_module.torch.TorchRLModule` with
:class:`~cairn.rl.core.rl_module.apis.ValueFunctionAPI` whose ``setup()`` builds an LSTM
(batch first), a stack of ReLU layers (``dense_layers``) and a policy and a value head;
``get_initial_state()`` is ``{"h", "c"}`` zeros of ``lstm_cell_size``; ``_forward`` reads
``Columns.OBS`` ``[B, T, ...]`` and ``Columns.STATE_IN`` and returns
``Columns.ACTION_DIST_INPUTS`` and ``Columns.STATE_OUT``. cairn's env runner feeds it one
time step at a time with the state of each env slot, and PPO trains it on sequences of
``max_seq_len`` (its ``model_config``, default 20) steps.

What differs from RLlib's: nothing in the network. The module's constructor arguments are
bounded before a checkpoint builds it (:meth:`LSTMContainingRLModule.ctor_args_problem`), so
that a checkpoint cannot make it allocate more than its folder holds.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from cairn._ctor_bounds import FolderSizes, alloc_limit
from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.apis.target_network_api import (
    TARGET_NETWORK_ACTION_DIST_INPUTS,
    TargetNetworkAPI,
    make_target_network,
)
from cairn.rl.core.rl_module.apis.value_function_api import ValueFunctionAPI
from cairn.rl.core.rl_module.torch.torch_rl_module import TorchRLModule

__all__ = ["LSTMContainingRLModule", "LSTMContainingRLModuleWithTargetNetwork"]


class LSTMContainingRLModule(TorchRLModule, ValueFunctionAPI):
    """An example TorchRLModule that contains an LSTM layer (RLlib's).

    ``model_config``: ``lstm_cell_size`` (default 256), ``dense_layers`` (default
    ``[128, 128]``), ``max_seq_len`` (read by PPO, default 20).
    """

    def setup(self) -> None:
        """Build the LSTM, the dense stack, the policy head and the value head."""
        # Assume a simple Box(1D) tensor as input shape.
        assert self.observation_space.shape is not None
        in_size = int(self.observation_space.shape[0])

        # Get the LSTM cell size from the `model_config` attribute:
        self._lstm_cell_size = int(self.model_config.get("lstm_cell_size", 256))
        self._lstm = nn.LSTM(in_size, self._lstm_cell_size, batch_first=True)
        in_size = self._lstm_cell_size

        # Build a sequential stack.
        layers: list[nn.Module] = []
        # Get the dense layer pre-stack configuration from the same config dict.
        dense_layers = self.model_config.get("dense_layers", [128, 128])
        for out_size in dense_layers:
            # Dense layer.
            layers.append(nn.Linear(in_size, int(out_size)))
            # ReLU activation.
            layers.append(nn.ReLU())
            in_size = int(out_size)

        self._fc_net = nn.Sequential(*layers)

        # Logits layer (no bias, no activation).
        self._pi_head = nn.Linear(in_size, int(self.action_space.n))  # type: ignore[attr-defined]
        # Single-node value layer.
        self._values = nn.Linear(in_size, 1)

    def get_initial_state(self) -> dict[str, Any]:
        """``{"h", "c"}``: zeros of ``lstm_cell_size``."""
        return {
            "h": np.zeros(shape=(self._lstm_cell_size,), dtype=np.float32),
            "c": np.zeros(shape=(self._lstm_cell_size,), dtype=np.float32),
        }

    def _forward(self, batch: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        # Compute the basic 1D embedding tensor (inputs to policy- and value-heads).
        embeddings, state_outs = self._compute_embeddings_and_state_outs(batch)
        logits = self._pi_head(embeddings)

        # Return logits as ACTION_DIST_INPUTS (categorical distribution): the env runner samples
        # (or, for inference, takes the argmax) from them.
        return {
            Columns.ACTION_DIST_INPUTS: logits,
            Columns.STATE_OUT: state_outs,
        }

    def _forward_train(self, batch: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        # Same logic as _forward, but also return embeddings to be used by value
        # function branch during training.
        embeddings, state_outs = self._compute_embeddings_and_state_outs(batch)
        logits = self._pi_head(embeddings)
        return {
            Columns.ACTION_DIST_INPUTS: logits,
            Columns.STATE_OUT: state_outs,
            Columns.EMBEDDINGS: embeddings,
        }

    # We implement this RLModule as a ValueFunctionAPI RLModule, so it can be used
    # by value-based methods like PPO.
    def compute_values(self, batch: Mapping[str, Any], embeddings: Any | None = None) -> torch.Tensor:
        """The value head on the LSTM's embeddings (computed from ``batch`` when not given)."""
        if embeddings is None:
            embeddings, _ = self._compute_embeddings_and_state_outs(batch)
        values: torch.Tensor = self._values(embeddings).squeeze(-1)
        return values

    def _compute_embeddings_and_state_outs(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
        obs = batch[Columns.OBS]
        state_in = batch[Columns.STATE_IN]
        h, c = state_in["h"], state_in["c"]
        # Unsqueeze the layer dim (we only have 1 LSTM layer).
        embeddings, (h, c) = self._lstm(obs, (h.unsqueeze(0), c.unsqueeze(0)))
        # Push through our FC net.
        embeddings = self._fc_net(embeddings)
        # Squeeze the layer dim (we only have 1 LSTM layer).
        return embeddings, {"h": h.squeeze(0), "c": c.squeeze(0)}

    @classmethod
    def ctor_args_problem(cls, args: tuple[Any, ...], kwargs: dict[str, Any], folder: FolderSizes) -> str | None:
        """Refuse a recorded ``lstm_cell_size``/``dense_layers`` whose weights alone exceed the folder."""
        model_config = kwargs.get("model_config", args[2] if len(args) > 2 else None)
        if not isinstance(model_config, Mapping):
            return None
        cell = model_config.get("lstm_cell_size", 256)
        dense = model_config.get("dense_layers", [128, 128])
        if type(cell) is not int or cell < 1:
            return f"model_config lstm_cell_size={cell!r:.40} is not an int >= 1"
        if not isinstance(dense, list | tuple) or not all(type(w) is int and w >= 1 for w in dense):
            return f"model_config dense_layers={str(dense)[:60]} is not a list of ints >= 1"
        widths = [cell, *dense]
        lower = 4 * (4 * cell * cell + sum(a * b for a, b in itertools.pairwise(widths)))
        if lower > alloc_limit(folder.tree_bytes):
            return f"lstm_cell_size={cell} and dense_layers={str(dense)[:60]} make at least {lower} bytes of weights"
        return None


class LSTMContainingRLModuleWithTargetNetwork(LSTMContainingRLModule, TargetNetworkAPI):
    """:class:`LSTMContainingRLModule` with RLlib's :class:`~cairn.rl.core.rl_module.apis.TargetNetworkAPI`.

    :meth:`make_target_networks` copies the LSTM, the dense stack and the policy head
    (``_old_lstm``, ``_old_fc_net``, ``_old_pi_head``, without gradients);
    :meth:`forward_target` runs ``Columns.OBS`` and ``Columns.STATE_IN`` through the copies.
    """

    def make_target_networks(self) -> None:
        """Create the target copies of the LSTM, the dense stack and the policy head."""
        self._old_lstm = make_target_network(self._lstm)
        self._old_fc_net = make_target_network(self._fc_net)
        self._old_pi_head = make_target_network(self._pi_head)

    def get_target_network_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        """``(main, target)`` of the LSTM, the dense stack and the policy head."""
        return [(self._lstm, self._old_lstm), (self._fc_net, self._old_fc_net), (self._pi_head, self._old_pi_head)]

    def forward_target(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """The target networks' logits, ``{TARGET_NETWORK_ACTION_DIST_INPUTS: [B, T, num_actions]}``."""
        state_in = batch[Columns.STATE_IN]
        h, c = state_in["h"], state_in["c"]
        # One LSTM layer: its layer axis is added for torch and the output used as the embedding.
        embeddings, _ = self._old_lstm(batch[Columns.OBS], (h.unsqueeze(0), c.unsqueeze(0)))
        return {TARGET_NETWORK_ACTION_DIST_INPUTS: self._old_pi_head(self._old_fc_net(embeddings))}
