"""Module ranges read as a tree (``reports.module_tree``): which names are modules, their
levels and parents, the tree order, and the enclosing range of each push/pop range. The
analyses' answers on module exports are tested in tests/analyses/test_dominant.py and
test_ranges.py."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_parsers.nesting import enclosing
from nsys_parsers.ranges import Ranges
from reports.module_tree import module_tree, parse
from reports.pipeline.session import Session
from tests.conftest import ALL_SQLITE, fixture_path


def _ranges(rows: list[tuple[int, int, int, bool]]) -> Ranges:
    """Ranges from (start, end, tid, pushpop) rows."""
    a = np.array([r[:3] for r in rows], dtype=np.int64).reshape(-1, 3)
    n = len(rows)
    return Ranges(start=a[:, 0], end=a[:, 1], tid=a[:, 2],
                  pushpop=np.array([r[3] for r in rows], dtype=bool),
                  cross_thread=np.zeros(n, dtype=bool), unclosed=np.zeros(n, dtype=bool),
                  rowid=np.arange(n, dtype=np.int64), flags=np.zeros(n, dtype=np.int64),
                  domains=np.zeros((0, 4), dtype=np.int64))


def test_enclosing_push_pop_ranges_per_thread():
    r = _ranges([
        (0, 100, 1, True),    # 0: outermost
        (10, 20, 1, True),    # 1: in 0
        (30, 40, 1, True),    # 2: in 0
        (32, 38, 1, True),    # 3: in 2
        (50, 60, 1, True),    # 4: in 0, after a deeper one ended
        (5, 95, 1, False),    # 5: start/end: neither a child nor a parent
        (10, 20, 2, True),    # 6: another thread: top level
        (12, 18, 2, True),    # 7: in 6
        (0, 100, 1, True),    # 8: the same span as 0, later in the table: inside 0
    ])
    assert enclosing(r).tolist() == [-1, 8, 8, 2, 8, -1, -1, 6, 0]


def test_parse_names_the_launcher_gives():
    assert parse("encoder.0.proj (Linear)") == ("encoder.0.proj", "Linear", False)
    assert parse("encoder.0.proj (Linear) backward") == ("encoder.0.proj", "Linear", True)
    assert parse("head (Linear)") == ("head", "Linear", False)
    for other in ("TinyNet", "step", "aten::mm, seq = 7", "conv2d @ dummy_network.py:25",
                  "encoder (Linear", "a b (Linear)", "x (not a class)", "forward pass"):
        assert parse(other) is None, other


def _tree(names: list[str], pushpop: list[bool] | None = None,
          parents: list[int] | None = None):
    """A tree from names (one range each; push/pop unless said; enclosing ranges by
    index)."""
    code = np.arange(len(names), dtype=np.int64)
    pp = np.array(pushpop if pushpop is not None else [True] * len(names))
    up = np.array(parents if parents is not None else [-1] * len(names), dtype=np.int64)
    return module_tree(names, code, pp, lambda: up)


def test_levels_and_parents_from_qualified_names():
    names = ["TinyNet", "TinyNet backward", "encoder (Sequential)",
             "encoder (Sequential) backward", "encoder.0 (Block)", "encoder.0.proj (Linear)",
             "encoder.0.proj (Linear) backward", "layers.0 (Block)", "step",
             "optimizer (SGD)"]
    tree = _tree(names, pushpop=[True, False, True, False, True, True, False, True, False,
                                 False], parents=[-1, -1, 0, -1, 2, 4, -1, 0, -1, -1])
    assert tree is not None
    got = {n: (m.level, m.parent, m.backward) for n, m in tree.ranges.items()}
    assert got == {
        "TinyNet": (1, None, False),
        "TinyNet backward": (1, None, True),
        "encoder (Sequential)": (2, "TinyNet", False),
        "encoder (Sequential) backward": (2, "TinyNet backward", True),
        "encoder.0 (Block)": (3, "encoder (Sequential)", False),
        "encoder.0.proj (Linear)": (4, "encoder.0 (Block)", False),
        # the parent's backward range is missing: its forward range stands in
        "encoder.0.proj (Linear) backward": (4, "encoder.0 (Block)", True),
        # a never-called ModuleList (`layers`): the level counts it, the parent is the model
        "layers.0 (Block)": (3, "TinyNet", False),
    }
    # step and the optimizer's start/end range are not modules
    assert tree.levels(["step", "optimizer (SGD)", "encoder.0 (Block)"]).tolist() == [0, 0, 3, 0]


def test_a_model_is_found_by_what_it_encloses_without_a_backward():
    """Inference (no backward ranges): the model is the push/pop range around the modules
    that have no named ancestor; a user's own range around the model is no module."""
    names = ["run", "Net", "body (Linear)", "tail (ReLU)"]
    tree = _tree(names, parents=[-1, 0, 1, 1])
    assert tree is not None
    assert {n: (m.level, m.parent) for n, m in tree.ranges.items()} == {
        "Net": (1, None), "body (Linear)": (2, "Net"), "tail (ReLU)": (2, "Net")}


@pytest.mark.parametrize("names,pushpop,parents", [
    (["step", "optimizer (SGD)"], [False, False], [-1, -1]),  # the launcher's steps only
    (["outer", "x (Linear)"], [True, True], [-1, -1]),  # no model encloses the module
    (["forward pass", "a (B)"], [True, True], [-1, 0]),  # the encloser is no class name
    (["TinyNet", "TinyNet backward"], [True, False], [-1, -1]),  # --nvtx modules:0
])
def test_no_tree(names, pushpop, parents):
    assert _tree(names, pushpop, parents) is None


def test_tree_order_depth_first_siblings_by_weight():
    names = ["TinyNet", "TinyNet backward", "encoder (Sequential)",
             "encoder (Sequential) backward", "encoder.0 (Block)", "encoder.1 (Block)",
             "encoder.10 (Block)", "head (Linear)", "head (Linear) backward", "step"]
    tree = _tree(names, pushpop=[True, False, True, False, True, True, True, True, False,
                                 False], parents=[9, -1, 0, -1, 2, 2, 2, 0, -1, -1])
    assert tree is not None
    rows = ["step", "head (Linear) backward", "encoder.10 (Block)", "encoder.1 (Block)",
            "TinyNet backward", "encoder (Sequential)", "encoder.0 (Block)", "head (Linear)",
            "encoder (Sequential) backward", "TinyNet", "not a module"]
    weight = [50, 30, 1, 1, 60, 40, 9, 5, 20, 30, 70]
    order = [rows[i] for i in tree.order(rows, weight)]
    assert order == [
        "TinyNet", "TinyNet backward",  # 90: above "not a module" (70) and step (50)
        "encoder (Sequential)", "encoder (Sequential) backward",  # 60 before head's 35
        "encoder.0 (Block)", "encoder.1 (Block)", "encoder.10 (Block)",  # 9, then 1 and 1
        "head (Linear)", "head (Linear) backward",
        "not a module", "step"]
    # a module whose parent is not among the rows hangs from its nearest ancestor that is
    sub = ["encoder.0 (Block)", "TinyNet", "step"]
    assert [sub[i] for i in tree.order(sub, [1, 1, 5])] == ["step", "TinyNet",
                                                             "encoder.0 (Block)"]


@pytest.mark.parametrize("name", ALL_SQLITE)
def test_no_fixture_has_module_ranges(name):
    """The shared exports (none made with --nvtx modules) read as before: no tree."""
    with Session(fixture_path(name)) as s:
        if s.has_ranges:
            s.load("ranges", "names")
        assert s.module_tree() is None
