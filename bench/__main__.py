"""``python -m bench``: run the benchmark suite."""

import sys

from bench.suite import main

sys.exit(main())
