"""A small RL checkpoint (PPO on CartPole-v1): save and fresh-process restore against their baselines.

Issue 34's figures for small checkpoints, measured in one run on the same state:

* save: ``algo.save_to_path`` (every file durable, committed atomically) against two
  baselines of the same tensors, interleaved round by round, each into a fresh path:
  ``torch.save`` into one file + ``fsync`` of that file (issue 34's target), and an atomic
  ``torch.save`` (written under a temporary name, fsynced, renamed into place, the folder
  fsynced: what a save that a power cut leaves complete or absent, and that is durable
  when it returns, must do; the two syncs cairn's commit does too);
* the syncs themselves on this filesystem, in turn: an ``fsync`` of a file just written,
  a ``syncfs`` after such a file, an ``fsync`` of the folder after a rename;
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


def _torch_save_atomic(tensors: dict[str, Any], path: str) -> None:
    """``torch.save`` that a power cut leaves complete or absent, durable when it returns (two syncs)."""
    import torch

    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        torch.save(tensors, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)
    _fsync_path(os.path.dirname(path))


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _libc_syncfs() -> Any:
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
    return fn


def sync_costs(tmp: str, nbytes: int, reps: int) -> dict[str, list[float]]:
    """Seconds of each kind of sync here, in turn: a file's ``fsync``, ``syncfs``, a folder's ``fsync`` after a rename.

    Each sync follows a fresh write of ``nbytes`` (or a rename), so that it has something to
    make durable, as in a save; the write itself is not timed.
    """
    syncfs = _libc_syncfs()
    data = os.urandom(nbytes)
    out: dict[str, list[float]] = {"fsync of a file": [], "syncfs": [], "fsync of the folder after a rename": []}
    folder = os.path.join(tmp, "syncs")
    os.makedirs(folder, exist_ok=True)
    for r in range(reps + 1):  # the first round is untimed
        for kind in out:
            if kind == "syncfs" and syncfs is None:
                continue
            path = os.path.join(folder, f"{kind[:5]}_{r}")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, data)
                if kind == "fsync of the folder after a rename":
                    os.fsync(fd)  # the file's own sync is not what is timed here
                    os.rename(path, path + ".renamed")
                    t0 = time.perf_counter()
                    _fsync_path(folder)
                elif kind == "syncfs":
                    t0 = time.perf_counter()
                    if syncfs(fd) != 0:
                        raise OSError("syncfs failed")
                else:
                    t0 = time.perf_counter()
                    os.fsync(fd)
                dt = time.perf_counter() - t0
            finally:
                os.close(fd)
            if r:
                out[kind].append(dt)
    return {k: v for k, v in out.items() if v}


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
    save_atomic: list[float] = []
    cpu: dict[str, list[float]] = {"cairn": [], "torch": [], "atomic": []}  # CPU time: the save less its waits
    warmup = 2
    for r in range(warmup + reps):
        order = [("cairn", save_cairn), ("torch", save_torch), ("atomic", save_atomic)]
        order = order[r % 3 :] + order[: r % 3]  # none always runs first
        for kind, times in order:
            p = os.path.join(tmp, f"{kind}_{r}")
            c0, t0 = time.process_time(), time.perf_counter()
            if kind == "cairn":
                algo.save_to_path(p)
            elif kind == "torch":
                _torch_save(tensors, p)
            else:
                _torch_save_atomic(tensors, p)
            dt = time.perf_counter() - t0
            if r >= warmup:
                times.append(dt)
                cpu[kind].append(time.process_time() - c0)
            if log:
                log(f"    save round {r}: {kind} {dt * 1000:.1f} ms")
    ckpt, tfile = os.path.join(tmp, f"cairn_{warmup}"), os.path.join(tmp, f"torch_{warmup}")
    files = _files(ckpt)
    syncs = sync_costs(tmp, os.path.getsize(tfile), reps)
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
        "save_torch_atomic": save_atomic,
        "save_ratio_atomic": med(save_cairn) / med(save_atomic),
        "save_cpu_cairn": cpu["cairn"],
        "save_cpu_torch": cpu["torch"],
        "save_cpu_torch_atomic": cpu["atomic"],
        "syncs": syncs,
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
        f"ratio {out['save_ratio']:.2f} (target <= 1.5); atomic torch.save (temporary name+fsync+rename+fsync of "
        f"the folder) {med(out['save_torch_atomic']) * 1000:.1f} ms, ratio {out['save_ratio_atomic']:.2f}"
    )
    print(
        f"save CPU time (the rest is waiting for the disk): cairn {med(out['save_cpu_cairn']) * 1000:.1f} ms, "
        f"torch.save+fsync {med(out['save_cpu_torch']) * 1000:.1f} ms, "
        f"atomic torch.save {med(out['save_cpu_torch_atomic']) * 1000:.1f} ms"
    )
    print("syncs here, medians: " + ", ".join(f"{k} {med(v) * 1000:.2f} ms" for k, v in out["syncs"].items()))
    print(
        f"restore in a fresh process: cairn PPO.from_checkpoint {med(out['restore_cairn']):.3f} s, "
        f"{out['restore_baseline_name']} {med(out['restore_baseline']):.3f} s, ratio {out['restore_ratio']:.2f} "
        "(target <= 1)"
    )
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
