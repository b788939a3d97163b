"""The NVTX range trees the model's contract (``nvtx_model.nvtx_ranges``) promises per
level, mode and attention: what the NVTX tests and the GPU suite compare with."""

from __future__ import annotations

STEP_PHASES = {"forward": ["forward"], "forward-backward": ["forward", "loss", "backward"],
               "train": ["forward", "loss", "backward", "optimizer"]}


def fine_forward(layers: int, attention: str = "naive") -> list:
    inner = ([("computing attention scores", []), ("computing softmax", []),
              ("final matmul", [])] if attention == "naive" else [])
    block = [("attention", [("scaled dot product attention", inner)]), ("ffn", [])]
    return block * layers


def expected_tree(mode: str, level: str, warmup: int, steps: int, layers: int = 2,
                  attention: str = "naive") -> list:
    if level == "off":
        return []
    step = ("step", [(phase, fine_forward(layers, attention) if phase == "forward"
                      and level == "fine" else []) for phase in STEP_PHASES[mode]])
    tree = [("warmup", [step] * warmup)] if warmup else []
    return tree + [("measure", [step] * steps)]
