"""One measured operation in a fresh process: ``python -m bench.child OP --params N --path P``.

Prints one JSON line: the RSS before, the peak RSS during the operation
(VmHWM after resetting it), the extra memory and the time. A fresh process per
operation keeps allocator caches of earlier work out of the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from bench import util
from bench.workload import ModelAdamState, PlainModelAdamState, model_spec

OPS = (
    "cairn_save",
    "cairn_restore",
    "cairn_restore_plain",
    "cairn_from_checkpoint",
    "torch_save",
    "torch_load",
    "safetensors_save",
    "safetensors_load",
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("op", choices=OPS)
    ap.add_argument("--params", type=int, required=True)
    ap.add_argument("--path", required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    spec = model_spec(args.params)
    obj = None
    if args.op in ("cairn_save", "torch_save", "safetensors_save"):
        obj = ModelAdamState(spec, fill="fast")
    elif args.op == "cairn_restore":
        obj = ModelAdamState(spec, fill="fast")  # existing, touched tensors to restore onto
    elif args.op == "cairn_restore_plain":
        obj = PlainModelAdamState(spec, fill="fast")  # no buffers: read into fresh arrays, then copied
    state_bytes = ModelAdamState(spec, fill=False).nbytes if obj is None else obj.nbytes
    import safetensors.torch

    import cairn  # noqa: F401  (imported before the measurement)

    util.malloc_trim()
    if not util.reset_peak_rss():
        print(json.dumps({"error": "cannot reset VmHWM"}))
        return 1
    rss0 = util.rss_bytes()
    t0 = time.perf_counter()
    result = None
    if args.op == "cairn_save":
        obj.save_to_path(args.path)
    elif args.op in ("cairn_restore", "cairn_restore_plain"):
        obj.restore_from_path(args.path)
    elif args.op == "cairn_from_checkpoint":
        result = ModelAdamState.from_checkpoint(args.path)
    elif args.op == "torch_save":
        with open(args.path, "wb") as f:
            torch.save(obj.torch_state(), f)
            f.flush()
            os.fsync(f.fileno())
    elif args.op == "torch_load":
        result = torch.load(args.path, weights_only=True)
    elif args.op == "safetensors_save":
        safetensors.torch.save_file(obj.flat_tensors(), args.path)
        util.fsync_path(args.path)
    elif args.op == "safetensors_load":
        result = safetensors.torch.load_file(args.path)
    dt = time.perf_counter() - t0
    peak = util.peak_rss_bytes()
    # Operations that build a new state necessarily hold one copy of it: count only the rest.
    owns_result = args.op in ("cairn_from_checkpoint", "torch_load", "safetensors_load")
    extra = peak - rss0 - (state_bytes if owns_result else 0)
    print(
        json.dumps(
            {
                "op": args.op,
                "state_bytes": state_bytes,
                "rss_before": rss0,
                "peak": peak,
                "extra": extra,
                "result_counted": owns_result,
                "time": dt,
            }
        )
    )
    del result
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
