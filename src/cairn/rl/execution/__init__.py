"""RLlib's ``ray.rllib.execution`` path in cairn: only its segment trees (:mod:`.segment_tree`)."""
