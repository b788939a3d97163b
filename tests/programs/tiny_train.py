"""A small, unmodified PyTorch training script that the tests profile under nsys: a model of
nested modules (an encoder of two blocks, each a Linear and an in-place ReLU, then a head),
SGD steps on random data. It knows nothing of nsys-mine.

    python tests/programs/tiny_train.py [--steps N] [--exit-code CODE] [--raise]
        [--sleep S] [--ready FILE] [--show-argv]

--exit-code ends it with that status after training, --raise with an exception; --ready
touches FILE when training starts and --sleep waits S seconds before each step (tests that
interrupt a run); --show-argv prints sys.argv, sys.path[0], __name__ and __file__ as JSON.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.proj(x))


class TinyNet(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.encoder = nn.Sequential(Block(width), Block(width))
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--raise", dest="fail", action="store_true")
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--ready", type=Path)
    parser.add_argument("--show-argv", action="store_true")
    args = parser.parse_args()
    if args.show_argv:
        print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "name": __name__,
                          "file": __file__}))
    torch.manual_seed(0)
    model = TinyNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data, target = torch.randn(8, 16), torch.randn(8, 1)
    if args.ready:
        args.ready.write_text("training\n")
    for step in range(args.steps):
        time.sleep(args.sleep)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(data), target)
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
    with torch.no_grad():  # evaluation after training: no step range
        model(data)
    if args.fail:
        raise RuntimeError("tiny_train failed on purpose (--raise)")
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
