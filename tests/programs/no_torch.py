"""A program that never imports torch: ``python no_torch.py [--raise]``."""

import sys

print("no torch here", sys.argv[1:])
if "--raise" in sys.argv:
    raise ValueError("no_torch failed on purpose (--raise)")
