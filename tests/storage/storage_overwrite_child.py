"""The process the overwrite test kills: one save of a large agent over an existing checkpoint on S3.

Usage: ``python storage_overwrite_child.py ENDPOINT PATH N STEP``. Files over 5 MiB go up in
5 MiB parts (a multipart upload), so that a kill can land in the middle of one.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import s3fs
from storage_components import Agent


def main(endpoint: str, path: str, n: int, step: int) -> None:
    """Save ``Agent(n)`` at ``step`` to ``path`` (a path on the S3 server at ``endpoint``)."""
    fs = s3fs.S3FileSystem(
        client_kwargs={"endpoint_url": endpoint}, default_block_size=5 << 20, skip_instance_cache=True
    )
    agent = Agent(n)
    agent.set_step(step)
    agent.save_to_path(path, filesystem=fs)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
