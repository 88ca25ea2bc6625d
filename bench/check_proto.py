"""Correctness checks of the prototypes in bench/proto.py: ``python -m bench.check_proto``.

Round trip, from_checkpoint, a corrupt file (raises, object untouched) and partial
restore with P1+P2; before that, P1 on the real PPO stack with the proposed
opt-ins (RLModule, Learner), compared bit for bit with HEAD's restore.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import Any

import torch


def _core(d: str) -> None:
    import cairn
    from bench.workload import EightModules, ModelAdamState, model_spec
    from cairn.tools import verify_checkpoint

    o = ModelAdamState(model_spec(3_000_000))
    o.save_to_path(d + "/a")
    print("verify:", verify_checkpoint(d + "/a"))
    c0 = o.checksum()
    print("from_checkpoint equal:", ModelAdamState.from_checkpoint(d + "/a").checksum() == c0)
    for t in o.flat_tensors().values():
        t.zero_()
    o.restore_from_path(d + "/a")
    print("restore equal:", o.checksum() == c0)
    for t in o.flat_tensors().values():
        t.zero_()
    z = o.checksum()
    p = d + "/a/tensors.safetensors"
    with open(p, "r+b") as f:
        f.seek(os.path.getsize(p) - 100)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 1]))
    try:
        o.restore_from_path(d + "/a")
        print("corrupt: NO ERROR (bad)")
    except cairn.CorruptCheckpointError as e:
        print("corrupt raised:", str(e)[:70], "... | object untouched:", o.checksum() == z)
    e = EightModules(400_000)
    c = {k: m.inner.checksum() for k, m in e.modules.items()}
    e.save_to_path(d + "/e")
    for m in e.modules.values():
        for t in m.inner.flat_tensors().values():
            t.zero_()
    e.restore_from_path(d + "/e/m3", component="m3")
    print("partial (only m3 restored):", {k: m.inner.checksum() == c[k] for k, m in e.modules.items()})


def _ppo(d: str) -> None:
    from bench import proto
    from cairn.rl import PPO, Learner, PPOConfig, RLModule

    def flat(algo: Any) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}

        def walk(v: Any, p: tuple[str, ...]) -> None:
            if isinstance(v, dict):
                for k, x in v.items():
                    walk(x, (*p, str(k)))
            elif isinstance(v, list | tuple):
                for i, x in enumerate(v):
                    walk(x, (*p, str(i)))
            elif isinstance(v, torch.Tensor):
                out["/".join(p)] = v.detach().clone()

        walk(algo.get_state(), ())
        return out

    a = PPO(PPOConfig(seed=1))
    a.train()
    a.train()
    a.save_to_path(d + "/ppo")
    ref = flat(a)
    b = PPO(PPOConfig(seed=2))
    b.restore_from_path(d + "/ppo")  # HEAD's restore
    RLModule.get_state_buffers = lambda self: self.state_dict()  # type: ignore[attr-defined]
    Learner.get_state_buffers = lambda self: {  # type: ignore[attr-defined]
        "optimizers": {m: o.state_dict() for m, o in self.optimizers.items()}
    }
    proto.apply("restore")
    c = PPO(PPOConfig(seed=3))
    c.train()
    c.restore_from_path(d + "/ppo")  # P1, in place where opted in
    got = flat(c)
    print(
        "PPO: P1 restore equals the saved state:",
        set(ref) == set(got) and all(torch.equal(ref[k], got[k]) for k in ref),
    )
    mb, mc = b.train(), c.train()
    same = all(torch.equal(x, y) for x, y in zip(flat(b).values(), flat(c).values(), strict=True))
    print(
        "PPO: next iteration identical after HEAD and P1 restores:",
        same and mb["episode_return_mean"] == mc["episode_return_mean"],
    )


def main() -> int:
    from bench import proto

    d = tempfile.mkdtemp(prefix="cairn-check-", dir="/work/tmp" if os.path.isdir("/work/tmp") else None)
    try:
        _ppo(d)  # first: it compares HEAD's restore with P1
        proto.apply("restore,save")
        _core(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
