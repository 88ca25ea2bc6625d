"""``batch_mode="complete_episodes"`` for the single-agent batch sampler (:mod:`~cairn.rl.env.batch_modes`).

:func:`sample_whole_episodes` steps the runner's sub-environments (together, as its vector env
does) until the episodes that ended hold at least ``rollout_length`` steps per slot, stopping at
the step where the count is reached; it drops the other slots' unfinished episodes (their steps
are sampled, not trained), resets every slot for the next call, and returns the finished
episodes one after the other as ``[T, 1, ...]`` columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from cairn.rl.env.batch_modes import COMPLETE_EPISODES_MAX_STEPS, too_long
from cairn.rl.env.episodes import slot_info, slot_value
from cairn.rl.utils.nested import concat_rows, index_rows, map_leaves

if TYPE_CHECKING:
    from cairn.rl.env.env_runner import EnvRunner, SampleBatch

__all__ = ["sample_whole_episodes"]


def sample_whole_episodes(runner: EnvRunner) -> tuple[dict[str, SampleBatch], int]:
    """Each module's finished episodes of at least ``rollout_length`` steps per slot, and the env
    steps each slot took (finished or dropped).

    Every slot starts the call at the start of an episode (a new runner's, or the reset that
    ends the previous call).

    Raises:
        IncompleteEpisodesError: The count was not reached within ``rollout_length`` +
            :data:`~cairn.rl.env.batch_modes.COMPLETE_EPISODES_MAX_STEPS` steps.
    """
    horizon = int(runner.config.rollout_length)
    wanted = horizon * runner.num_slots
    ends = np.full(runner.num_slots, -1, dtype=np.int64)
    """Per slot: the row (from the call's first step) that ended its last finished episode."""
    taken = 0

    def until(done: npt.NDArray[np.bool_]) -> bool:
        nonlocal taken
        ends[done] = taken
        taken += 1
        return int((ends + 1).sum()) >= wanted

    chunks: list[dict[str, SampleBatch]] = []
    while int((ends + 1).sum()) < wanted:
        if taken >= horizon + COMPLETE_EPISODES_MAX_STEPS:
            raise too_long(runner.config.env, taken)
        batches, _ = runner._rollout(horizon, until=until)
        chunks.append(batches)
    _restart_episodes(runner)
    out: dict[str, SampleBatch] = {}
    for module_id, slots in runner._module_slots.items():
        kept = ends[slots] + 1  # each of the module's slots: its rows in finished episodes
        if int(kept.sum()) > 0:
            out[module_id] = _whole_episodes([chunk[module_id] for chunk in chunks], kept)
    return out, taken


def _whole_episodes(chunks: Sequence[SampleBatch], kept: npt.NDArray[np.int64]) -> SampleBatch:
    """One module's ``[T, slots, ...]`` chunks as one ``[N, 1, ...]`` column: slot by slot, its first
    ``kept[slot]`` rows (its finished episodes), then the next slot's."""
    out: dict[str, Any] = {}
    for key in chunks[0]:
        if key == "bootstrap_vf":  # every episode ends in the batch: nothing to bootstrap from at its end
            out[key] = np.zeros(1, dtype=np.float32)
            continue
        column = concat_rows([chunk[key] for chunk in chunks])
        pieces = [index_rows(column, (slice(0, int(rows)), j)) for j, rows in enumerate(kept) if rows > 0]
        out[key] = map_leaves(lambda leaf: leaf[:, None], concat_rows(pieces))
    return out


def _restart_episodes(runner: EnvRunner) -> None:
    """Reset every sub-environment: unfinished episodes are dropped, the next call starts new ones (their
    ``on_episode_start`` fires then, as the first episodes' do)."""
    obs, infos = runner.env.reset()
    runner._obs = obs
    runner._episode_starts = np.ones(runner.num_slots, dtype=np.bool_)
    runner._episode_returns[:] = 0.0
    runner._episode_lengths[:] = 0
    if runner.episode_tracker is not None:
        for slot in range(runner.num_slots):
            runner.episode_tracker.restart(slot, slot_value(obs, slot), slot_info(infos, slot))
    runner._episodes_started = False
