#!/usr/bin/env python3
"""facestudio entry point: `python launch.py [run|models|presets] …` from the checkout (see README.md)."""

import sys
from pathlib import Path

# Run from the checkout: the repo root holds the `engine` and `processors` packages.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
