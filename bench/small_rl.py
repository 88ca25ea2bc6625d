"""A small RL checkpoint (PPO on CartPole-v1): save and fresh-process restore against their baselines.

Issue 34's figures for small checkpoints, measured in one run on the same state:

* save: ``algo.save_to_path`` (every file durable, committed atomically) against
  ``torch.save`` of the same tensors into one file + ``fsync`` of that file, interleaved
  round by round, each into a fresh path;
* restore: ``PPO.from_checkpoint`` in a fresh process, the imports included, against
  stable-baselines3's ``PPO.load`` in a fresh process when stable_baselines3 is installed,
  else against ``torch.load`` of the same tensors in a fresh process (the report says which).
  Each restore is timed from the child's own start (``python -c`` wall time, interpreter
  start-up included, the same for both), with bytecode cached (as an installed package has it).

Run alone: ``PYTHONPATH=src:. python -m bench.small_rl [--reps N]``; in the suite:
``python -m bench --only smallrl``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_RESTORE_CAIRN = "from cairn.rl import PPO\nPPO.from_checkpoint({path!r})\n"
_RESTORE_TORCH = "import torch\ntorch.load({path!r}, weights_only=True)\n"
_RESTORE_SB3 = "from stable_baselines3 import PPO\nPPO.load({path!r}, device='cpu')\n"


def tensors_of(state: Any, prefix: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every torch tensor and numpy array of a nested state, by its ``/``-joined path (numpy as torch)."""
    import numpy as np
    import torch

    out = {} if out is None else out
    if isinstance(state, dict):
        for k, v in state.items():
            tensors_of(v, f"{prefix}{k}/", out)
    elif isinstance(state, list | tuple):
        for i, v in enumerate(state):
            tensors_of(v, f"{prefix}{i}/", out)
    elif isinstance(state, torch.Tensor):
        out[prefix.rstrip("/")] = state.detach().cpu().contiguous()
    elif isinstance(state, np.ndarray) and state.dtype != object:
        out[prefix.rstrip("/")] = torch.from_numpy(np.ascontiguousarray(state))
    return out


def build_algo() -> Any:
    """PPO on CartPole-v1 (the default config) after one training iteration."""
    import torch

    from cairn.rl import PPO, PPOConfig

    torch.manual_seed(0)
    algo = PPO(PPOConfig(env="CartPole-v1", seed=0))
    algo.train()
    return algo


def _torch_save(tensors: dict[str, Any], path: str) -> None:
    import torch

    with open(path, "wb") as f:
        torch.save(tensors, f)
        f.flush()
        os.fsync(f.fileno())


def _files(path: str) -> int:
    return sum(len(files) for _r, _d, files in os.walk(path))


def _child_seconds(code: str, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=REPO, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def measure(reps: int, tmp: str, log: Any = None) -> dict[str, Any]:
    """Time save and fresh-process restore of a PPO CartPole checkpoint and of its baselines; return the figures."""
    algo = build_algo()
    tensors = tensors_of(algo.get_state())
    nbytes = sum(int(t.numel() * t.element_size()) for t in tensors.values())
    save_cairn: list[float] = []
    save_torch: list[float] = []
    cpu: dict[str, list[float]] = {"cairn": [], "torch": []}  # this process's CPU time: the save less its waits
    warmup = 2
    for r in range(warmup + reps):
        order = [("cairn", save_cairn), ("torch", save_torch)]
        if r % 2:
            order.reverse()  # neither always runs first
        for kind, times in order:
            p = os.path.join(tmp, f"{kind}_{r}")
            c0, t0 = time.process_time(), time.perf_counter()
            if kind == "cairn":
                algo.save_to_path(p)
            else:
                _torch_save(tensors, p)
            dt = time.perf_counter() - t0
            if r >= warmup:
                times.append(dt)
                cpu[kind].append(time.process_time() - c0)
            if log:
                log(f"    save round {r}: {kind} {dt * 1000:.1f} ms")
    ckpt, tfile = os.path.join(tmp, f"cairn_{warmup}"), os.path.join(tmp, f"torch_{warmup}")
    files = _files(ckpt)
    paths = [os.path.join(REPO, "src"), REPO, os.environ.get("PYTHONPATH", "")]
    # Bytecode cached as an installed package has it (pip compiles on install): a child that
    # compiled cairn's sources on every start (PYTHONDONTWRITEBYTECODE, set on some machines)
    # would time the compiler. The untimed first round fills the cache, in the run's temp dir.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), PYTHONPYCACHEPREFIX=os.path.join(tmp, "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    have_sb3 = importlib.util.find_spec("stable_baselines3") is not None
    baseline_name = "SB3 PPO.load" if have_sb3 else "torch.load of the same tensors"
    if have_sb3:
        base_path = _sb3_checkpoint(tmp)
        base_code = _RESTORE_SB3.format(path=base_path)
    else:
        base_code = _RESTORE_TORCH.format(path=tfile)
    cairn_code = _RESTORE_CAIRN.format(path=ckpt)
    restore_cairn: list[float] = []
    restore_base: list[float] = []
    for r in range(1 + reps):  # one untimed round warms the page cache of both
        pair = [(cairn_code, restore_cairn), (base_code, restore_base)]
        if r % 2:
            pair.reverse()
        for code, times in pair:
            dt = _child_seconds(code, env)
            if r >= 1:
                times.append(dt)
            if log:
                log(f"    restore round {r}: {'cairn' if code is cairn_code else 'baseline'} {dt:.3f} s")
    med = statistics.median
    return {
        "tensor_bytes": nbytes,
        "tensors": len(tensors),
        "files": files,
        "save_cairn": save_cairn,
        "save_torch": save_torch,
        "save_ratio": med(save_cairn) / med(save_torch),
        "save_cpu_cairn": cpu["cairn"],
        "save_cpu_torch": cpu["torch"],
        "restore_cairn": restore_cairn,
        "restore_baseline": restore_base,
        "restore_baseline_name": baseline_name,
        "restore_ratio": med(restore_cairn) / med(restore_base),
    }


def _sb3_checkpoint(tmp: str) -> str:
    """A CartPole SB3 PPO saved to ``tmp`` (only when stable_baselines3 is installed)."""
    from stable_baselines3 import PPO as SB3PPO

    path = os.path.join(tmp, "sb3_ppo.zip")
    SB3PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64, device="cpu").save(path)
    return path


def main() -> None:
    """Print the figures of :func:`measure` with their ratios and the load average."""
    ap = argparse.ArgumentParser(prog="python -m bench.small_rl", description=__doc__)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    base = "/work/tmp" if os.path.isdir("/work/tmp") else tempfile.gettempdir()
    tmp = tempfile.mkdtemp(prefix="cairn-smallrl-", dir=base)
    try:
        out = measure(args.reps, tmp, log=(lambda m: print(m, file=sys.stderr)) if args.verbose else None)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = statistics.median
    kb = out["tensor_bytes"] / 1e3
    print(f"PPO CartPole checkpoint: {out['files']} files, {out['tensors']} tensors, {kb:.0f} kB")
    print(
        f"save: cairn {med(out['save_cairn']) * 1000:.1f} ms, torch.save+fsync {med(out['save_torch']) * 1000:.1f} ms, "
        f"ratio {out['save_ratio']:.2f} (target <= 1.5)"
    )
    print(
        f"save CPU time (the rest is waiting for the disk): cairn {med(out['save_cpu_cairn']) * 1000:.1f} ms, "
        f"torch.save+fsync {med(out['save_cpu_torch']) * 1000:.1f} ms"
    )
    print(
        f"restore in a fresh process: cairn PPO.from_checkpoint {med(out['restore_cairn']):.3f} s, "
        f"{out['restore_baseline_name']} {med(out['restore_baseline']):.3f} s, ratio {out['restore_ratio']:.2f} "
        "(target <= 1)"
    )
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
