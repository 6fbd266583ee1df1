"""`python -m hotpath ...`: the hotpath command (hotpath._cli)."""
import sys

from ._cli import main

sys.exit(main())
