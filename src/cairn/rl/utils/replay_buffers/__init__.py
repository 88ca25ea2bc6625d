"""Replay buffers that checkpoint incrementally: chunked columns, seeded sampling, exact resume.

* :class:`ReplayBuffer`: a ring of transitions in declared columns, each chunk of
  rows its own checkpoint folder, so a save writes only the chunks that changed;
* :class:`MultiAgentReplayBuffer`: one such buffer per module id;
* :class:`PrioritizedReplayBuffer`, :class:`PrioritizedMultiAgentReplayBuffer`: prioritized
  replay (proportional), the priorities checkpointed in pages (:class:`PriorityPage`);
* :class:`ReplayBufferChunk`: one chunk (a complete checkpoint by itself).
"""

from cairn.rl.utils.replay_buffers.multi_agent_replay_buffer import MultiAgentReplayBuffer
from cairn.rl.utils.replay_buffers.prioritized_replay_buffer import (
    PrioritizedMultiAgentReplayBuffer,
    PrioritizedReplayBuffer,
    PriorityPage,
)
from cairn.rl.utils.replay_buffers.replay_buffer import (
    DEFAULT_CHUNK_BYTES,
    ColumnSpecs,
    ReplayBuffer,
    ReplayBufferChunk,
)

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "ColumnSpecs",
    "MultiAgentReplayBuffer",
    "PrioritizedMultiAgentReplayBuffer",
    "PrioritizedReplayBuffer",
    "PriorityPage",
    "ReplayBuffer",
    "ReplayBufferChunk",
]
