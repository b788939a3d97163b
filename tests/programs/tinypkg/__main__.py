"""``python -m tinypkg [--steps N]``: a forward and backward pass of a small model per step,
imported relatively (``python -m`` semantics: ``__package__``, ``sys.path[0]``)."""

import sys

import torch

from .model import Mlp


def main(argv: list[str]) -> int:
    steps = int(argv[argv.index("--steps") + 1]) if "--steps" in argv else 2
    model = Mlp()
    for _ in range(steps):
        model(torch.randn(4, 8)).sum().backward()
    print(f"tinypkg: {steps} steps, package {__package__}, argv {sys.argv[1:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
