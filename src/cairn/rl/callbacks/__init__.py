"""Callbacks: :class:`~cairn.rl.callbacks.callbacks.RLlibCallback` (RLlib's home for it)."""
