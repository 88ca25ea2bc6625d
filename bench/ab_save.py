"""A/B of the save path in one process: ``python -m bench.ab_save [SIZE_GB] [ROUNDS]``.

Raw write+fsync, HEAD's ``LocalStorage.write_file``, prototype P2 (CRC overlapped
with the writes + early write-back) and P2 without the early write-back; rounds
interleaved and rotated, files deleted together at the end of a round, then the
disk settles. Prints medians, best rounds and ratios to raw write.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

from bench import proto, util
from bench.workload import ModelAdamState, model_spec


def main() -> int:
    from cairn.storage.local import LocalStorage

    gb = float(sys.argv[1]) if len(sys.argv) > 1 else 1.2
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 11
    torch.set_num_threads(1)
    o = ModelAdamState(model_spec(int(gb * 1e9 / 12)), fill="fast")
    util.warm_memory(int(gb * 2e9))
    bufs = [memoryview(t.numpy()).cast("B") for t in o.flat_tensors().values()]
    head_write, sfr = LocalStorage.write_file, proto._SFR

    def head(p: str) -> None:
        LocalStorage.write_file = head_write  # type: ignore[method-assign]
        o.save_to_path(p)

    def p2(p: str) -> None:
        proto._SFR = sfr
        LocalStorage.write_file = proto.write_file  # type: ignore[method-assign]
        o.save_to_path(p)

    def p2_crc_only(p: str) -> None:
        proto._SFR = None
        LocalStorage.write_file = proto.write_file  # type: ignore[method-assign]
        o.save_to_path(p)

    methods = {"raw": lambda p: util.raw_write(p, bufs), "head": head, "p2": p2, "p2_crc_only": p2_crc_only}
    res: dict[str, list[float]] = {k: [] for k in methods}
    ks = list(methods)
    d = tempfile.mkdtemp(prefix="cairn-ab-", dir="/work/tmp" if os.path.isdir("/work/tmp") else None)
    try:
        for r in range(rounds + 1):
            k0 = r % len(ks)
            for k in ks[k0:] + ks[:k0]:
                t0 = time.perf_counter()
                methods[k](f"{d}/{k}{r}")
                if r:
                    res[k].append(time.perf_counter() - t0)
            for k in ks:
                p = f"{d}/{k}{r}"
                shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)
            os.sync()
            time.sleep(1)
    finally:
        LocalStorage.write_file = head_write  # type: ignore[method-assign]
        shutil.rmtree(d, ignore_errors=True)
    raw_med, raw_best = statistics.median(res["raw"]), min(res["raw"])
    for k in ks:
        med, best = statistics.median(res[k]), min(res[k])
        print(
            f"{k:<12} median {med:.3f} s  best {best:.3f} s  "
            f"raw/{k}: median {raw_med / med:.2f}  best {raw_best / best:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
