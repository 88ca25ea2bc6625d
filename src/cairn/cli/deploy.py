"""``cairn export`` and ``cairn pack``: a trained policy out of the training stack (docs/deploy.md).

``cairn export CKPT --format onnx|torchscript -o FILE [--module ID]`` writes the module of
an algorithm checkpoint with its connectors baked in (:mod:`cairn.rl.export`);
``cairn pack CKPT -o FILE.zip`` writes a checkpoint into one verified zip
(:func:`cairn.tools.pack_checkpoint`), which every loader reads as it reads a folder.
"""

from __future__ import annotations

import argparse
import sys

from cairn._display import safe_text
from cairn.cli.command import Command

__all__ = ["COMMANDS", "cmd_export", "cmd_pack"]


def cmd_export(args: argparse.Namespace) -> int:
    """Handler of ``cairn export``; returns the exit status."""
    from cairn.rl.export import export_policy
    from cairn.rl.inference import Policy

    policy = Policy.from_checkpoint(args.checkpoint, module_id=args.module)
    exported = export_policy(policy, args.output, format=args.format)
    baked = [p.name for p in (*policy.env_to_module.connectors, *policy.module_to_env.connectors)]
    print(
        f"cairn export: {safe_text(args.output)} ({args.format}): input obs float32 [B, "
        f"{', '.join(str(d) for d in exported.obs_shape)}], outputs action_dist_inputs, actions"
        + (f"; connectors baked in: {', '.join(baked)}" if baked else "; no connectors"),
        file=sys.stderr,
    )
    return 0


def _export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="an algorithm checkpoint (folder, fsspec URL, or a cairn pack .zip)")
    p.add_argument("--format", required=True, choices=["onnx", "torchscript"], help="the file's format")
    p.add_argument("-o", "--output", required=True, help="the file to write")
    p.add_argument("--module", default=None, help="the module id (default: the only one, else default_policy)")


def cmd_pack(args: argparse.Namespace) -> int:
    """Handler of ``cairn pack``; returns the exit status."""
    from cairn.tools import pack_checkpoint

    url = pack_checkpoint(args.checkpoint, args.output)
    print(f"Packed {safe_text(args.checkpoint)} into {safe_text(args.output)} (verified; load it as {safe_text(url)})")
    return 0


def _pack_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="the checkpoint to pack (a folder or fsspec URL)")
    p.add_argument("-o", "--output", required=True, help="the .zip file to write (must not exist)")


COMMANDS = (
    Command(
        "export",
        "write a policy (module + connectors) as one ONNX or TorchScript file",
        _export_arguments,
        cmd_export,
        examples=(
            "cairn export runs/cartpole/step_000000040 --format onnx -o policy.onnx",
            "cairn export runs/cartpole/step_000000040 --format torchscript -o policy.pt",
            "cairn export policy.zip --format onnx -o p0.onnx --module p0",
        ),
    ),
    Command(
        "pack",
        "write a checkpoint into one verified zip file",
        _pack_arguments,
        cmd_pack,
        examples=("cairn pack runs/cartpole/step_000000040 -o policy.zip",),
    ),
)
"""``cairn export`` and ``cairn pack``."""
