"""NVTX ranges added to an unmodified program (``nvtx_model.program_nvtx``) and the launcher
that runs it as Python would (``nvtx_model.launch``): range names, nesting, backward and step
ranges with a recording backend; argv, sys.path[0], __main__, exit codes and tracebacks of
scripts, ``-m`` modules and ``-c`` code through the launcher. No nsys here
(tests/test_profile_command_real.py profiles under the real one)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nsys_parsers.errors import BadOption
from nvtx_model import nvtx_ranges as nv
from nvtx_model.program_nvtx import ProgramHooks, ProgramNvtx

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs"
LAUNCHER = ROOT / "nvtx_model" / "launch.py"


# ---- the option ---------------------------------------------------------------------------
@pytest.mark.parametrize("text, spec, canonical", [
    ("modules", ProgramNvtx(modules=True), "modules"),
    ("modules:2,steps", ProgramNvtx(modules=True, depth=2, steps=True), "modules:2,steps"),
    ("steps, ops ,modules:0", ProgramNvtx(modules=True, depth=0, ops=True, steps=True),
     "modules:0,ops,steps"),
    ("off", ProgramNvtx(), "off"),
    ("", ProgramNvtx(), "off"),
    (None, ProgramNvtx(), "off"),
])
def test_the_option_parses_and_prints_canonically(text, spec, canonical):
    assert ProgramNvtx.parse(text) == spec
    assert str(spec) == canonical and ProgramNvtx.parse(str(spec)) == spec


@pytest.mark.parametrize("text, says", [
    ("module", "did you mean modules"), ("modules:x", "modules[:DEPTH]"),
    ("steps:2", "modules[:DEPTH]"), ("modules:-1", "0 (the model only) or more"),
    ("fine", "modules[:DEPTH], ops, steps"),
])
def test_bad_option_values_say_what_to_write(text, says):
    with pytest.raises(BadOption, match=re.escape(says)):
        ProgramNvtx.parse(text)


# ---- the hooks ----------------------------------------------------------------------------
torch = pytest.importorskip("torch")
nn = torch.nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.act = nn.ReLU(inplace=True)  # in place on proj's output: no tensor is wrapped

    def forward(self, x):
        return self.act(self.proj(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(Block(), Block())
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        return self.head(self.encoder(x))


FORWARD = ["Net", "encoder (Sequential)", "encoder.0 (Block)", "encoder.0.proj (Linear)",
           "encoder.0.act (ReLU)", "encoder.1 (Block)", "encoder.1.proj (Linear)",
           "encoder.1.act (ReLU)", "head (Linear)"]


@pytest.fixture
def hooked():
    """hooked(text) -> (hooks, recording backend), installed on torch; removed afterwards."""
    made = []

    def make(text: str):
        rec = nv.RecordingBackend()
        hooks = ProgramHooks(ProgramNvtx.parse(text), backend=rec)
        hooks.install(torch)
        made.append(hooks)
        return hooks, rec

    original = nn.Module.__call__
    yield make
    for hooks in reversed(made):
        hooks.remove()
    assert nn.Module.__call__ is original


def train(model, steps=2, optimizer=None):
    opt = optimizer or torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
    return opt


def test_forward_ranges_are_named_by_qualified_name_and_class(hooked):
    hooks, rec = hooked("modules")
    model = Net()
    with torch.no_grad():
        model(torch.randn(2, 4))
    assert rec.names() == FORWARD
    assert rec.tree()[0][0] == "Net" and [c[0] for c in rec.tree()[0][1]] == [
        "encoder (Sequential)", "head (Linear)"]
    assert rec.open_ranges == [] and rec.started == []  # no backward under no_grad


def test_depth_limits_the_levels(hooked):
    hooks, rec = hooked("modules:1")
    with torch.no_grad():
        Net()(torch.randn(2, 4))
    assert rec.names() == ["Net", "encoder (Sequential)", "head (Linear)"]
    hooks.remove()
    hooks2, rec2 = hooked("modules:0")
    with torch.no_grad():
        Net()(torch.randn(2, 4))
    assert rec2.names() == ["Net"]


def test_backward_ranges_open_and_close_for_every_module(hooked):
    hooks, rec = hooked("modules")
    model = Net()
    model(torch.randn(3, 4)).sum().backward()  # in-place ReLU: works as without hooks
    started = [n for kind, n in rec.events if kind == "start"]
    ended = [n for kind, n in rec.events if kind == "end"]
    assert sorted(started) == sorted(n + " backward" for n in FORWARD)
    assert sorted(ended) == sorted(started) and rec.started == []
    # a module's backward ends once autograd reaches the node that made its input: the
    # second block's backward is over before the first one's proj starts
    at = {(kind, n): i for i, (kind, n) in enumerate(rec.events)}
    assert at[("end", "encoder.1 (Block) backward")] < at[
        ("start", "encoder.0.proj (Linear) backward")]
    assert at[("start", "head (Linear) backward")] < at[("start", "encoder.1.act (ReLU) "
                                                                  "backward")]
    # the same gradients as without the hooks: nothing in the program changes
    x = torch.randn(3, 4)
    model.zero_grad()
    model(x).sum().backward()
    hooked_grads = [p.grad.clone() for p in model.parameters()]
    hooks.remove()
    model.zero_grad()
    model(x).sum().backward()
    assert all(torch.equal(a, p.grad) for a, p in zip(hooked_grads, model.parameters()))


def test_steps_mark_each_optimizer_step_and_leave_evaluation_out(hooked):
    hooks, rec = hooked("steps")
    model = Net()
    train(model, steps=3)
    with torch.no_grad():
        model(torch.randn(2, 4))  # evaluation after training: no step range opens
    hooks.finish()
    starts = [n for kind, n in rec.events if kind == "start"]
    assert starts == ["step", "optimizer (SGD)"] * 3
    assert rec.started == [] and rec.names() == []  # no module ranges without `modules`
    assert hooks.report["step_ranges"] == 3 and hooks.report["optimizer_steps"] == 3


def test_the_first_optimizer_that_steps_marks_the_steps(hooked):
    hooks, rec = hooked("steps")
    a, b = Net(), Net()
    opt_a = torch.optim.SGD(a.parameters(), lr=0.1)
    opt_b = torch.optim.Adam(b.parameters())
    for _ in range(2):
        (a(torch.randn(2, 4)).sum() + b(torch.randn(2, 4)).sum()).backward()
        opt_a.step()
        opt_b.step()
    starts = [n for kind, n in rec.events if kind == "start"]
    assert starts.count("step") == 2 and "optimizer (Adam)" in starts


def test_a_forward_that_raises_still_pops_its_ranges(hooked):
    hooks, rec = hooked("modules")

    class Boom(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(2, 2)

        def forward(self, x):
            self.inner(x)
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        Boom()(torch.randn(1, 2))
    assert rec.open_ranges == [] and rec.names() == ["Boom", "inner (Linear)"]
    assert hooks._local.stack == []


def test_a_model_keeps_its_names_and_a_submodule_called_alone_too(hooked):
    hooks, rec = hooked("modules")
    model = Net()
    with torch.no_grad():
        model.encoder[1](torch.randn(1, 4))  # a part called first: named from its own tree
        model(torch.randn(1, 4))             # the whole model: names from the model
        model.encoder[1](torch.randn(1, 4))  # the part again: its name in the model
        model(torch.randn(1, 4))
    names = rec.names()
    assert names[:3] == ["Block", "proj (Linear)", "act (ReLU)"]
    assert names[3:12] == FORWARD and names[15:] == FORWARD
    assert names[12:15] == ["encoder.1 (Block)", "encoder.1.proj (Linear)",
                            "encoder.1.act (ReLU)"]


def test_unregistered_and_shared_modules(hooked):
    hooks, rec = hooked("modules")

    class Odd(nn.Module):
        def __init__(self, shared):
            super().__init__()
            self.shared = shared
            self.listed = [nn.Linear(2, 2)]  # a plain list: not a registered submodule

        def forward(self, x):
            return self.listed[0](self.shared(x))

    shared = nn.Linear(2, 2)
    first, second = Odd(shared), Odd(shared)
    with torch.no_grad():
        first(torch.randn(1, 2))
        second(torch.randn(1, 2))
    assert rec.names() == ["Odd", "shared (Linear)", "Linear (Linear)"] * 2


def test_a_program_without_torch_compile_tracing_is_untouched(hooked, monkeypatch):
    hooks, rec = hooked("modules")
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    # the wrapper reads is_compiling when installed; a new install sees the patched one
    hooks.remove()
    hooks2, rec2 = hooked("modules")
    with torch.no_grad():
        Net()(torch.randn(1, 4))
    assert rec2.names() == []


def test_ops_need_a_cuda_build(hooked):
    hooks, rec = hooked("ops")
    with torch.no_grad():
        Net()(torch.randn(1, 4))
    if torch.version.cuda is None:
        assert hooks.report["ops"] == "unavailable"
        assert any("needs a CUDA build of torch" in n for n in hooks.report["notes"])


# ---- the launcher -------------------------------------------------------------------------
def run(args, cwd=PROGRAMS, launcher=True, nvtx="modules,steps", report=None):
    pre = [str(LAUNCHER), "--nvtx", nvtx] + (["--report", str(report)] if report else [])
    argv = [sys.executable, *(pre if launcher else []), *args]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)


SHOW = ("import json, sys; print(json.dumps({'argv': sys.argv, 'path0': sys.path[0], "
        "'name': __name__, 'file': globals().get('__file__'), "
        "'spec': getattr(__spec__, 'name', None), 'package': __package__}))")


@pytest.mark.parametrize("args", [
    ["show_main.py", "a", "--b", "c"],
    ["-m", "showpkg.show", "x"],
    ["-m", "showpkg", "y"],
    ["-c", SHOW, "q", "-r"],
])
def test_the_launcher_runs_a_program_as_python_does(args, tmp_path):
    (tmp_path / "showpkg").mkdir()
    (tmp_path / "showpkg" / "__init__.py").write_text("")
    for path in ("show_main.py", "showpkg/show.py", "showpkg/__main__.py"):
        (tmp_path / path).write_text(SHOW + "\n")
    plain = run(args, cwd=tmp_path, launcher=False)
    launched = run(args, cwd=tmp_path)
    assert plain.returncode == launched.returncode == 0, launched.stderr
    assert json.loads(launched.stdout) == json.loads(plain.stdout)


def test_the_launcher_under_python_dash_m(tmp_path):
    (tmp_path / "show_main.py").write_text(SHOW + "\n")
    plain = subprocess.run([sys.executable, "show_main.py", "z"], cwd=tmp_path,
                           capture_output=True, text=True)
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    launched = subprocess.run([sys.executable, "-m", "nvtx_model.launch", "--nvtx", "modules",
                               "show_main.py", "z"], cwd=tmp_path, capture_output=True,
                              text=True, env=env)
    assert json.loads(launched.stdout) == json.loads(plain.stdout), launched.stderr


@pytest.mark.parametrize("args, code", [
    (["no_torch.py"], 0),
    (["no_torch.py", "--raise"], 1),
    (["-c", "import sys; sys.exit(7)"], 7),
    (["-c", "raise SystemExit('bye')"], 1),
    (["missing.py"], 2),
])
def test_exit_codes_and_tracebacks_are_the_programs(args, code, tmp_path):
    plain = run(args, launcher=False)
    report = tmp_path / "launch.json"
    launched = run(args, nvtx="modules", report=report)
    assert plain.returncode == launched.returncode == code
    assert launched.stdout == plain.stdout
    assert launched.stderr == plain.stderr  # no frame of the launcher in a traceback
    data = json.loads(report.read_text())
    assert data["exit_code"] == code and data["torch_imported"] is False
    if code != 2:
        assert any("never imported torch" in n for n in data["notes"])


def test_the_hooks_install_when_the_program_imports_torch(tmp_path):
    report = tmp_path / "launch.json"
    res = run(["-m", "tinypkg", "--steps", "2"], nvtx="modules:1,steps", report=report)
    assert res.returncode == 0, res.stderr
    assert "tinypkg: 2 steps, package tinypkg, argv ['--steps', '2']" in res.stdout
    data = json.loads(report.read_text())
    assert data["torch_imported"] and data["roots"] == ["Mlp"]
    assert data["modules_named"] == 5 and data["forward_ranges"] == 4  # Mlp, layers x 2
    assert data["step_ranges"] == 0 and data["nvtx"] == "modules:1,steps"


def test_launcher_usage_errors():
    res = subprocess.run([sys.executable, str(LAUNCHER), "--nvtx", "modulez", "x.py"],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "did you mean modules" in res.stderr
    res = subprocess.run([sys.executable, str(LAUNCHER)], capture_output=True, text=True)
    assert res.returncode == 2 and "no program to run" in res.stderr
