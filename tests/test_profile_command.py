"""`nsys-mine profile -- COMMAND` and `sweep --command` without real nsys: taking a Python
command apart, the name made from a command, the launcher inserted, the environment kept,
the errors people meet (no `--`, a missing program, options of the model), a fake nsys that
runs the program, and a command sweep's index, tables and report with stub runs."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from nsys_parsers.errors import BadOption
from profile_cli.runs import command as cmd
from profile_cli.runs.command import (
    CommandConfig,
    CommandSweep,
    command_name,
    launched_argv,
    plan_command_sweep,
    program_env,
    python_command,
)
from profile_cli.runs.nsys_spec import NsysSpec, ProfileResult

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs"
TINY = str(PROGRAMS / "tiny_train.py")


@pytest.mark.parametrize("argv, kind, target, flags, args", [
    (["python", "train.py", "--bs", "8"], "script", "train.py", [], ["--bs", "8"]),
    (["python3.11", "-u", "-W", "ignore", "-m", "pkg.train", "x"], "module", "pkg.train",
     ["-u", "-W", "ignore"], ["x"]),
    (["python", "-uBm", "pkg"], "module", "pkg", ["-uB"], []),
    (["python", "-Xdev", "-c", "print(1)", "a"], "code", "print(1)", ["-X", "dev"], ["a"]),
    ([sys.executable, "-O", "t.py"], "script", "t.py", ["-O"], []),
])
def test_python_commands_are_taken_apart(argv, kind, target, flags, args):
    py = python_command(argv)
    assert py is not None
    assert (py.kind, py.target, py.flags, py.args) == (kind, target, flags, args)


def test_other_commands_and_pythons_that_run_nothing():
    assert python_command(["bash", "run.sh"]) is None
    assert python_command(["torchrun", "train.py"]) is None
    for argv in (["python"], ["python", "-V"], ["python", "-"], ["python", "--version"],
                 ["python", "-m"]):
        with pytest.raises(BadOption):
            python_command(argv)


def test_the_launcher_goes_between_python_and_the_program(tmp_path):
    report = tmp_path / "r.json"
    argv = launched_argv(["python", "-u", "train.py", "--bs", "8"], "modules:2,steps", report)
    assert argv == ["python", "-u", str(cmd.LAUNCHER), "--nvtx", "modules:2,steps", "--report",
                    str(report), "--", "train.py", "--bs", "8"]
    assert launched_argv(["python", "-m", "pkg", "a"], "steps", report)[-3:] == ["-m", "pkg", "a"]
    assert launched_argv(["bash", "x.sh"], "off", report) == ["bash", "x.sh"]
    with pytest.raises(BadOption, match="adds ranges to Python programs"):
        launched_argv(["bash", "x.sh"], "modules", report)
    assert cmd.LAUNCHER.is_file()


@pytest.mark.parametrize("argv, nvtx, name", [
    (["python", "train.py", "--bs", "8", "--seq", "512"], "modules:2,steps",
     "train_bs-8_seq-512_nvtx-modules2+steps"),
    (["python", "tests/programs/tiny_train.py", "--steps", "3", "--exit-code", "0"], "off",
     "tiny_train_steps-3_exit-code-0"),
    (["python", "train.py", "--lr=-1e-3", "--data", "/x/y/data.txt", "--fast"], "off",
     "train_lr--1e-3_data-data.txt_fast"),
    (["python", "-m", "pkg.train", "x"], "ops", "pkg.train_x_nvtx-ops"),
    (["./run.sh", "a b"], "off", "run_a-b"),
])
def test_names_are_made_from_the_command(argv, nvtx, name):
    assert command_name(argv, nvtx) == name


def test_long_commands_end_in_a_hash():
    long = ["python", "train.py", *[f"--opt{i}" for i in range(40)]]
    name = command_name(long)
    assert len(name) <= cmd.NAME_MAX and name != command_name(long[:-1])


def test_the_environment_that_matters_and_no_secret():
    env = {"CUDA_VISIBLE_DEVICES": "1", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
           "NCCL_DEBUG": "INFO", "TORCH_HUB_TOKEN": "s3cret", "NCCL_IB_PASSWORD": "x",
           "HF_TOKEN": "hf_x", "AWS_SECRET_ACCESS_KEY": "k", "HOME": "/root",
           "OMP_NUM_THREADS": "4"}
    assert program_env(env) == {"CUDA_VISIBLE_DEVICES": "1", "NCCL_DEBUG": "INFO",
                                "OMP_NUM_THREADS": "4",
                                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


# ---- the command line ---------------------------------------------------------------------
def fake_nsys(path: Path, body: str) -> Path:
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize("args, says", [
    (["python", "x.py"], "put `--` before the command to profile: nsys-mine profile [OPTIONS] "
                         "-- python x.py"),
    (["python", "train.py", "--bs", "8"], "-- python train.py --bs 8"),
    (["--"], "no command after `--`"),
    (["--", "no-such-program-xyz", "a"], "command not found: no-such-program-xyz"),
    (["--", sys.executable, "no_such_script.py"], "no_such_script.py: no such file"),
    (["--size", "small", "--", "python", "x.py"], "--size sets the built-in model, not your "
                                                  "command"),
    (["--workload", "infer", "--steps", "2", "--", "python", "x.py"],
     "--steps, --workload set the built-in model"),
    (["--nvtx", "fine", "--", "python", "x.py"], "--nvtx fine is a level of the built-in model"),
    (["--nvtx", "modules"], "--nvtx modules adds ranges to your own program: give the program "
                            "after `--`"),
    (["--nvtx", "modulez", "--", sys.executable, "-c", "pass"], "did you mean modules"),
    (["--nvtx", "modules", "--", "bash", "-c", "true"], "adds ranges to Python programs"),
])
def test_errors_people_meet(args, says, cli, tmp_path):
    res = cli("profile", "--out-dir", tmp_path / "out", "--nsys", "/bin/false", *args)
    assert res.exit_code == 1, (res.stdout, res.stderr)
    assert res.stderr.startswith("Error: ") and says in " ".join(res.stderr.split()), res.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_program_whose_nsys_writes_no_export(cli, tmp_path):
    """A fake nsys that runs the program (its last arguments) and writes nothing: the error
    says why, with the program's last lines, and the sidecar and log are kept."""
    nsys = fake_nsys(tmp_path / "nsys", 'if [ "$1" = --version ]; then echo "NVIDIA Nsight '
                     'Systems version 2022.4.2.1"; exit 0; fi\n'
                     'while [ "$1" != "--output" ]; do shift; done; shift 2\n"$@"\n')
    res = cli("profile", "--out-dir", tmp_path / "out", "--nsys", nsys, "--",
              sys.executable, str(PROGRAMS / "no_torch.py"), "--raise")
    assert res.exit_code == 1
    assert "nsys wrote no SQLite export" in res.stderr
    assert "the program exited with status 1" in res.stderr
    assert "no_torch failed on purpose" in res.stderr
    side = json.loads((tmp_path / "out" / "no_torch_raise.json").read_text())
    assert side["kind"] == "command" and side["exit_code"] == 1 and side["status"] == "failed"
    assert "config" not in side  # reports read `config` as a run of the built-in model
    assert side["program"]["argv"][-1] == "--raise" and side["program"]["cwd"]
    assert side["nsys_command"][0] == str(nsys)
    assert "no torch here" in (tmp_path / "out" / "no_torch_raise.log").read_text()


def test_profile_refuses_to_overwrite_a_command_export(cli, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "no_torch.sqlite").write_bytes(b"x")
    res = cli("profile", "--out-dir", out, "--nsys", "/bin/false", "--", sys.executable,
              str(PROGRAMS / "no_torch.py"))
    assert res.exit_code == 1 and "--force" in res.stderr


def test_the_model_is_still_profiled_without_a_command(cli, tmp_path):
    """No `--`: profile runs the built-in model as before (here up to the nsys it cannot
    find), with --nvtx fine as its default."""
    pytest.importorskip("torch")
    res = cli("profile", "--size", "tiny", "--context", "32", "--out-dir", tmp_path,
              "--nsys", tmp_path / "no-nsys")
    assert res.exit_code == 1 and "not an executable nsys" in res.stderr


# ---- sweeps over a command ----------------------------------------------------------------
def test_a_command_sweep_plans_every_combination(tmp_path):
    configs = plan_command_sweep("python train.py --bs {bs} --seq {seq} --tag '{{x}}'",
                                 ["bs=8,16", "seq=512,1024"], "modules:2", cwd=str(tmp_path))
    assert [c.grid for c in configs] == [
        {"bs": "8", "seq": "512"}, {"bs": "8", "seq": "1024"}, {"bs": "16", "seq": "512"},
        {"bs": "16", "seq": "1024"}]
    assert configs[1].argv == ["python", "train.py", "--bs", "8", "--seq", "1024", "--tag",
                               "{x}"]
    assert configs[0].name == "train_bs-8_seq-512_tag-x_nvtx-modules2"
    assert len({c.name for c in configs}) == 4 and configs[0].cwd == str(tmp_path)
    assert configs[0].label() == "bs=8 seq=512"


@pytest.mark.parametrize("template, grid, says", [
    ("python t.py --bs {bs}", [], "uses {bs} but no --grid bs="),
    ("python t.py", ["bs=8"], "--grid bs is not used in --command"),
    ("python t.py --bs {bs}", ["bs"], "give NAME=V1,V2"),
    ("python t.py --bs {bs}", ["bs="], "no values after bs="),
    ("python t.py --bs {bs}", ["bs=1", "bs=2"], "--grid bs is given twice"),
    ("python 't.py", [], "No closing quotation"),
])
def test_bad_command_sweeps(template, grid, says):
    with pytest.raises(BadOption, match=re_escape(says)):
        plan_command_sweep(template, grid, "off")


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def test_same_names_get_a_number():
    configs = plan_command_sweep("python t.py --x {x}", ["x=a/b,c/b"], "off")
    assert [c.name for c in configs] == ["t_x-b", "t_x-b_2"]


def test_sweep_cli_errors(cli, tmp_path):
    res = cli("sweep", "--grid", "bs=8", "--out-dir", tmp_path)
    assert res.exit_code == 1 and "--grid gives the values of --command" in res.stderr
    res = cli("sweep", "--command", "python t.py", "--size", "small", "--out-dir", tmp_path)
    assert res.exit_code == 1 and "--size sets the built-in model, not --command" in res.stderr
    res = cli("sweep", "--command", "no-such-program-xyz {a}", "--grid", "a=1",
              "--out-dir", tmp_path / "x", "--nsys", "/bin/false")
    assert res.exit_code == 1 and "command not found" in res.stderr


def fake_run(cfg: CommandConfig, out_dir: Path, status="ok", code=0) -> ProfileResult:
    return ProfileResult(
        name=cfg.name, config=cfg.to_dict("cpu"), status=status,
        reason=None if status == "ok" else f"the program exited with status {code}",
        sqlite=None, nsys_rep=None, sidecar=str(out_dir / f"{cfg.name}.json"), wall_s=1.25,
        command=["nsys"], nsys_version="2022.4", trace="nvtx,osrt", window="the whole run",
        kind="command", exit_code=code, log=str(out_dir / f"{cfg.name}.log"))


def test_a_command_sweep_resumes_and_renders(tmp_path, monkeypatch, cli):
    """The sweep loop with stub runs: the index records the command, grid and exit code,
    resumes, refuses a model sweep in the same folder, and every table and the report
    page render."""
    from profile_cli.runs import mining
    from profile_cli.runs import sweep as sweeper

    ran = []

    def fake_profile(cfg, out_dir, spec, force=False, nsys=None):
        ran.append(cfg.grid["bs"])
        return fake_run(cfg, out_dir, *(("failed", 3) if cfg.grid["bs"] == "16" else ()))

    def fake_mine(result, top=15):
        dom = {"range": None, "kernel": "gemm_k", "category": "gemm", "share_pct": 90.0,
               "per_range_instance": None, "range_kernel_ns": 100, "category_shares": {}}
        return mining.ProfileReport(
            export=None, config=result.config, dominant=[dom], kernels=[], notes=[],
            ranges=[{"range": "encoder.0 (Block)", "instances": 2, "avg_ns": 10.0,
                     "gpu_inclusive_ns": 5}], sentences=[], status=result.status,
            reason=result.reason)

    monkeypatch.setattr(sweeper, "profile_config", fake_profile)
    monkeypatch.setattr(sweeper, "mine_profile", fake_mine)
    monkeypatch.setattr(sweeper, "locate_nsys", lambda *a, **k: ("nsys", "2022.4"))
    monkeypatch.setattr(ProfileResult, "minable", property(lambda self: True))
    spec = CommandSweep(template=f"{sys.executable} {TINY} --steps {{bs}}",
                        grid=("bs=8,16",), nvtx="modules")
    first = sweeper.run_sweep(spec, tmp_path, NsysSpec())
    assert (first.planned, len(first.ran)) == (2, 2) and ran == ["8", "16"]
    again = sweeper.run_sweep(spec, tmp_path, NsysSpec())
    assert (len(again.ran), len(again.resumed)) == (0, 2) and ran == ["8", "16"]
    tables = sweeper.sweep_tables(tmp_path)
    assert tables.kind == "command"
    assert [(r["config"], r["status"], r["exit_code"]) for r in tables.runs] == [
        ("bs=8", "ok", 0), ("bs=16", "failed", 3)]
    assert tables.runs[0]["grid"] == {"bs": "8"} and TINY in tables.runs[0]["command"]
    assert tables.runs[0]["dominant_kernel"] == "gemm_k"
    assert tables.range_times[0]["config"] == "bs=8"
    from nvtx_model.workload import WorkloadSpec

    with pytest.raises(BadOption, match="holds a sweep of a command"):
        sweeper.run_sweep(WorkloadSpec(size="tiny", context="32"), tmp_path, NsysSpec())
    data = json.loads(cli("sweep", "--report", tmp_path, "-f", "json").stdout)
    assert data["runs"][1]["exit_code"] == 3 and data["runs"][1]["grid"] == {"bs": "16"}
    for fmt in ("table", "md", "csv", "latex"):
        res = cli("sweep", "--report", tmp_path, "-f", fmt)
        assert res.exit_code == 0 and "bs=16" in res.stdout, (fmt, res.stderr)
    page = cli("report", tmp_path, "--format", "md", "-o", tmp_path / "page.md")
    assert page.exit_code == 0, page.stderr
    text = (tmp_path / "page.md").read_text()
    assert "bs=16: failed (exit code 3)" in text and r"gemm\_k (90%)" in text
    html = cli("report", tmp_path, "-o", tmp_path / "page.html")
    assert html.exit_code == 0 and "bs=8" in (tmp_path / "page.html").read_text()


def test_a_gpu_run_with_module_ranges_is_shown_as_a_tree(tmp_path, monkeypatch):
    """What `profile -- COMMAND` prints for a GPU run with module ranges (a synthetic
    export mined as profile mines it): ranges and dominant kernels as the module tree,
    depth and parent in its JSON."""
    from profile_cli.commands.output import OutputSpec
    from profile_cli.commands.profile import render_command
    from profile_cli.runs.mining import mine_profile
    from reports.render import plain_text
    from tests.synth import module_run

    cfg = CommandConfig(argv=["python", "train.py"], cwd=str(tmp_path), nvtx="modules,steps")
    result = fake_run(cfg, tmp_path)
    result.sqlite = str(module_run(tmp_path / f"{cfg.name}.sqlite"))
    report = mine_profile(result)
    data = json.loads(render_command(report, result, OutputSpec(format="json"), None).text)
    assert [(r["range"], r["depth"], r["parent"]) for r in data["dominant"][:4]] == [
        (None, None, None), ("TinyLM", 1, None), ("TinyLM backward", 1, None),
        ("layers.0 (Block)", 3, "TinyLM")]
    assert [(r["range"], r["depth"]) for r in data["ranges"][:3]] == [
        ("TinyLM", 1), ("TinyLM backward", 1), ("layers.0 (Block)", 3)]
    monkeypatch.setenv("COLUMNS", "120")
    shown = render_command(report, result, OutputSpec(top=5), None)
    text = plain_text(shown.rich, shown.width)
    assert "PushPop       layers.0 (Block)" in text  # the ranges
    assert "\n    layers.0 (Block)  " in text and "(the whole run)" in text  # dominant
