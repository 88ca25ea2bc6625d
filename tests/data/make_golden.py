"""Writes the golden checkpoints of the current format version.

Run once per format version (``python tests/data/make_golden.py``); never
regenerate an existing golden folder: the point is that later versions of
cairn keep reading exactly these bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

import cairn  # noqa: E402
from cairn_test_components import Leaf, Tree  # noqa: E402


def golden_tree() -> Tree:
    """The tree saved in the golden checkpoint, built deterministically."""
    t = Tree("golden", n=3)
    t.mutate()
    t.leaf.extra = {
        "bf16": torch.arange(6, dtype=torch.float32).reshape(2, 3).to(torch.bfloat16),
        "i64": np.arange(4, dtype=np.int64),
        "scalar": np.float32(2.5),
        "tuple": (1, "two", b"3", None, 2**70),
        7: [True, 1.25],
    }
    return t


def main() -> None:
    out = HERE / f"golden_format_v{cairn.FORMAT_VERSION}"
    packed = out.parent / f"{out.name}_packed"
    if out.exists() and not packed.exists() and cairn.FORMAT_VERSION == 3:
        # Format 3's addition of packed small files (issue 34): the tree again, in that layout.
        golden_tree().save_to_path(packed)
        print(f"wrote {packed}")
        return
    if out.exists():
        raise SystemExit(f"{out} exists; golden checkpoints are never regenerated.")
    golden_tree().save_to_path(out)
    Leaf().save_to_path(out.parent / f"golden_format_v{cairn.FORMAT_VERSION}_leaf")
    if cairn.FORMAT_VERSION >= 3:  # format 3 records its digest: the other one a save may choose, too
        golden_tree().save_to_path(out.parent / f"golden_format_v{cairn.FORMAT_VERSION}_sha256", digest="sha256")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
