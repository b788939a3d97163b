"""`profile`/`sweep` without real nsys: argv, discovery order, timeouts and cleanup (with a fake
nsys that hangs), outcome classification, sweep planning and the index."""

from __future__ import annotations

import json
import stat
import sys
import time
from pathlib import Path

import pytest

from nsys_parsers import nsys_tool
from nsys_parsers.errors import BadOption, NsysNotFound
from nsys_parsers.nsys_tool import locate_nsys
from nvtx_model.workload import WorkloadSpec
from profile_cli.runs import mining
from profile_cli.runs import nsys_run as profiler
from profile_cli.runs.nsys_run import NsysSpec, classify, default_trace, nsys_argv
from profile_cli.runs.process import ProcessOutcome, marked_pids, run_with_timeout


def tiny_cfg(**kw):
    spec = WorkloadSpec(size="tiny", context="32", mode="train", nvtx="fine", warmup=1, steps=2,
                        **kw)
    return spec.configs()[0]


def fake_nsys(path: Path, body: str) -> Path:
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def test_argv_for_gpu_and_cpu(tmp_path):
    child = ["python", "-m", "profile_cli.run_workload", "--size", "tiny"]
    gpu = nsys_argv("/opt/nsys", tmp_path / "run", trace=default_trace("cuda"),
                    quiet_sampling=True, extra_args=["--cuda-memory-usage=true"], child=child)
    assert gpu == ["/opt/nsys", "profile", "--trace=cuda,nvtx,osrt", "--sample=none",
                   "--cpuctxsw=none", "--export=sqlite", "--force-overwrite=true", "--output",
                   str(tmp_path / "run"), "--cuda-memory-usage=true", *child]
    cpu = nsys_argv("nsys", tmp_path / "run", trace=default_trace("cpu"), quiet_sampling=False,
                    extra_args=[], child=child)
    assert cpu[:3] == ["nsys", "profile", "--trace=nvtx,osrt"] and "--sample=none" not in cpu


def test_workload_argv_round_trips_the_config():
    cfg = tiny_cfg(precision="bf16", attention="sdpa")
    argv = profiler.workload_argv(cfg)
    assert argv[:3] == [sys.executable, "-m", "profile_cli.run_workload"]
    from typer.testing import CliRunner

    from profile_cli.run_workload import app

    res = CliRunner().invoke(app, argv[3:] + ["--dry-run"])
    row = json.loads(res.stdout.strip().splitlines()[0])
    assert (row["size"], row["precision"], row["attention"], row["warmup"], row["steps"]) == (
        "tiny", "bf16", "sdpa", 1, 2)


def test_run_name_encodes_config():
    assert tiny_cfg().name == "tiny_ctx32_b4_train_fp32_naive_nvtx-fine_w1s2"


def test_discovery_order(tmp_path, monkeypatch):
    import nsys_parsers.nsys_tool as tool

    (tmp_path / "bin").mkdir()
    on_path = fake_nsys(tmp_path / "bin" / "nsys", "echo path\n")
    env_one = fake_nsys(tmp_path / "env-nsys", "echo env\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.setenv("NSYS", str(env_one))
    assert tool.find_nsys() == env_one
    explicit = fake_nsys(tmp_path / "explicit", "echo x\n")
    assert tool.find_nsys(explicit) == explicit
    monkeypatch.delenv("NSYS")
    assert tool.find_nsys() == on_path
    paths = tool.candidate_paths()
    assert paths.index(on_path) < paths.index(tool.PROJECT_ROOT / ".cache/nsys/usr/bin/nsys") < \
        paths.index(tool.user_cache_dir() / "nsys/usr/bin/nsys")
    with pytest.raises(NsysNotFound, match="not an executable nsys"):
        tool.find_nsys(tmp_path / "nope")


def test_missing_nsys_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(nsys_tool, "find_nsys", lambda explicit=None: None)
    with pytest.raises(NsysNotFound, match="--install-nsys") as exc:
        locate_nsys(None)
    assert "install_nsys.sh" in str(exc.value) and "NSYS=" in str(exc.value)


def test_timeout_ends_nsys_and_its_detached_agent(tmp_path):
    """A fake nsys that hangs and leaves a daemon (like the real agent, re-parented to PID 1):
    both are ended by PID after the timeout."""
    pidfile = tmp_path / "agent.pid"
    nsys = fake_nsys(tmp_path / "nsys", f"""
setsid bash -c 'echo $$ > {pidfile}; exec sleep 300' </dev/null >/dev/null 2>&1 &
sleep 300
""")
    t0 = time.monotonic()
    out = run_with_timeout([str(nsys)], timeout_s=1.5)
    assert out.timed_out and time.monotonic() - t0 < 20
    agent = int(pidfile.read_text())
    assert agent in out.killed_pids
    time.sleep(0.2)
    assert not Path(f"/proc/{agent}").exists() or "zombie" in Path(
        f"/proc/{agent}/status").read_text().lower()


def test_leftover_processes_ended_after_normal_exit(tmp_path):
    pidfile = tmp_path / "agent.pid"
    nsys = fake_nsys(tmp_path / "nsys", f"""
setsid bash -c 'echo $$ > {pidfile}; exec sleep 300' </dev/null >/dev/null 2>&1 &
sleep 0.3; echo done
""")
    out = run_with_timeout([str(nsys)], timeout_s=30)
    assert not out.timed_out and out.returncode == 0 and "done" in out.stdout
    assert int(pidfile.read_text()) in out.killed_pids
    assert marked_pids("no-such-marker") == []


def test_a_signal_while_the_child_starts_still_ends_it(tmp_path, monkeypatch):
    """Ctrl-C, or Slurm's SIGTERM to a job (scancel, time limit), can arrive while Popen
    starts the child. Its handler's exception used to come out of Popen after the child was
    started, before Popen returned it: a scancel'ed job's nsys stand-in ran on that way, in
    its own session, out of reach. Here a real SIGINT arrives as the child has started: the
    run still ends with KeyboardInterrupt, and the child and its own child are gone."""
    import os
    import signal

    from profile_cli.runs import process

    started: dict = {}
    real_popen = process.subprocess.Popen

    def popen_then_signal(*args, **kwargs):
        child = real_popen(*args, **kwargs)
        started.update(pid=child.pid, marker=kwargs["env"][process.MARKER_ENV])
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, before Popen returns the child
        for _ in range(1000):  # Python runs the handler between two of these
            pass
        return child

    monkeypatch.setattr(process.subprocess, "Popen", popen_then_signal)
    nsys = fake_nsys(tmp_path / "nsys", "sleep 300 &\nwait\n")
    try:
        with pytest.raises(KeyboardInterrupt):
            run_with_timeout([str(nsys)], timeout_s=30)
        assert marked_pids(started["marker"]) == []
        assert not Path(f"/proc/{started['pid']}").exists()  # ended and reaped
    finally:
        try:  # if the test failed: no leftover (the child leads its own process group)
            os.killpg(started["pid"], signal.SIGKILL)
        except (KeyError, ProcessLookupError):
            pass


def test_held_signals_act_after_the_block_through_their_handlers():
    """signals_held (a run's Popen, the Slurm driver's sbatch): SIGINT and a handled SIGTERM
    sent inside the block act when it is done, through the handlers they had (the driver's
    SIGTERM raises DriverTerminated), and the handlers are back."""
    import os
    import signal

    from profile_cli.runs.process import signals_held
    from profile_cli.runs.slurm import DriverTerminated

    def terminated(num, frame):
        raise DriverTerminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        for sig, raised in ((signal.SIGINT, KeyboardInterrupt),
                            (signal.SIGTERM, DriverTerminated)):
            done = False
            with pytest.raises(raised):
                with signals_held():
                    os.kill(os.getpid(), sig)
                    for _ in range(1000):  # a handler would run between two of these
                        pass
                    done = True
            assert done  # the block ran to its end first
        assert signal.getsignal(signal.SIGTERM) is terminated
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, previous)


def _outcome(code=0, out="", err="", timed_out=False):
    return ProcessOutcome(returncode=code, stdout=out, stderr=err, timed_out=timed_out,
                          wall_s=1.0, killed_pids=[])


def test_classify_outcomes():
    cfg = tiny_cfg()
    ok_row = json.dumps({"status": "ok", "mean_s": 0.1})
    assert classify(_outcome(out="Generating...\n" + ok_row), cfg,
                    json.loads(ok_row)) == ("ok", None)
    status, why = classify(_outcome(code=1, err="Traceback ...\ntorch.OutOfMemoryError: CUDA out "
                                    "of memory. Tried to allocate 2 GiB"), cfg, None)
    assert status == "oom" and why == "out of memory at size tiny context 32"
    status, why = classify(_outcome(out=json.dumps({"status": "oom", "note": "CUDA OOM"})), cfg,
                           {"status": "oom", "note": "CUDA OOM"})
    assert status == "oom" and "size tiny context 32" in why
    status, why = classify(_outcome(code=1, err="\n".join(f"line {i}" for i in range(30))), cfg,
                           None)
    assert status == "failed" and "line 29" in why and "line 5" not in why
    assert classify(_outcome(timed_out=True), cfg, None)[0] == "timeout"


def test_profile_config_with_crashing_workload(tmp_path, monkeypatch, cli):
    nsys = fake_nsys(tmp_path / "nsys", "echo 'RuntimeError: boom in forward' >&2; exit 3\n")
    pytest.importorskip("torch")
    res = cli("profile", "--size", "tiny", "--context", "32", "--device", "cpu",
              "--out-dir", tmp_path / "out", "--nsys", nsys)
    assert res.exit_code == 1 and res.stderr.startswith("Error: failed: the workload exited")
    assert "boom in forward" in res.stderr and "Traceback" not in res.stderr
    side = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    assert side["status"] == "failed" and side["command"][0] == str(nsys)



def _profile_under_racing_nsys(tmp_path, monkeypatch, cli, then: str):
    """``profile`` of the tiny model under a stand-in nsys that counts its tries in
    ``tmp_path/calls`` and then runs the shell lines ``then``, with no pause between tries:
    (the CLI result, how many tries, the sidecar)."""
    from profile_cli.runs import nsys_run

    monkeypatch.setattr(nsys_run.time, "sleep", lambda s: None)
    calls = tmp_path / "calls"
    nsys = fake_nsys(tmp_path / "nsys", f"""[ "$1" = profile ] || exit 0
echo x >> {calls}
{then}""")
    pytest.importorskip("torch")
    res = cli("profile", "--size", "tiny", "--context", "32", "--device", "cpu",
              "--out-dir", tmp_path / "out", "--nsys", nsys)
    side = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    return res, calls.read_text().count("x"), side


@pytest.mark.parametrize("said, why", [
    ("[QuadDCommon::tag_message*] = Local Endpoint is not available.",
     "could not start its session"),
    # the CI run of 2026-11-29: four Slurm array tasks on one node, beside another test's nsys
    ("/build/agent/work/323cb361ab84164c/QuadD/Common/ProcessWaiter/...e or directory\n"
     '[boost::errinfo_errno_*] = 2, "No such file or directory"\n'
     "[boost::errinfo_api_function_*] = sem_open",
     "lost track of the workload's process"),
    ("Connection to the Agent lost.", "lost its connection to its agent"),
])
def test_nsys_that_fails_for_a_race_of_its_own_is_run_again(tmp_path, monkeypatch, cli,
                                                             said, why):
    """nsys 2022.4 fails now and then when other nsys runs start or end at the same moment
    (four Slurm array tasks on one node): its session does not start, or its processes lose
    track of each other. The run is made again; what the next try says is the answer, and
    the note says why."""
    (tmp_path / "said").write_text(said + "\n")
    res, tries, side = _profile_under_racing_nsys(tmp_path, monkeypatch, cli, f"""\
if [ "$(wc -l < {tmp_path / "calls"})" = 1 ]; then cat {tmp_path / "said"} >&2; exit 1; fi
echo 'RuntimeError: boom in forward' >&2; exit 3
""")
    assert res.exit_code == 1 and "boom in forward" in res.stderr
    assert tries == 2
    assert side["status"] == "failed" and "boom in forward" in side["reason"]
    (again,) = [n for n in side["notes"] if "made again" in n]
    assert again.startswith(f"nsys {why}") and again.endswith("; the run was made again.")


def test_an_nsys_race_is_run_again_at_most_twice(tmp_path, monkeypatch, cli):
    """A race that comes back every time is the answer after three tries: failed, with
    nsys's own words in the reason and two notes."""
    res, tries, side = _profile_under_racing_nsys(
        tmp_path, monkeypatch, cli, "echo 'Connection to the Agent lost.' >&2; exit 1\n")
    assert res.exit_code == 1 and "Connection to the Agent lost." in res.stderr
    assert tries == 3
    assert len([n for n in side["notes"] if "made again" in n]) == 2


def test_profile_refuses_to_overwrite_and_many_configs(tmp_path, cli):
    pytest.importorskip("torch")
    out = tmp_path / "out"
    out.mkdir()
    (out / "tiny_ctx32_b4_train_fp32_naive_nvtx-fine_w2s3.sqlite").write_bytes(b"x")
    res = cli("profile", "--size", "tiny", "--context", "32", "--out-dir", out,
              "--nsys", "/bin/true")
    assert res.exit_code == 1 and "--force" in res.stderr
    res = cli("profile", "--size", "tiny", "--context", "32,64", "--out-dir", out)
    assert res.exit_code == 1 and "nsys-mine sweep" in res.stderr


def test_sweep_plan_marks_impossible_shapes_failed():
    from profile_cli.runs.sweep import plan_sweep

    plan = plan_sweep(WorkloadSpec(size="tiny,custom:d30-f64-L1-h4", context="32",
                                   mode="forward", nvtx="fine", warmup=1, steps=1))
    assert [p.cfg is not None for p in plan] == [True, False]
    assert "not divisible by 4 heads" in plan[1].error
    with pytest.raises(BadOption, match="unknown preset"):
        plan_sweep(WorkloadSpec(size="tiny,smal", context="32"))


def test_sweep_index_resume_and_report_with_fake_profiles(tmp_path, monkeypatch, cli):
    """The sweep loop without nsys: profile_config is replaced by a stub that writes rows."""
    from profile_cli.runs import sweep as sweeper

    calls = []

    def fake_profile(cfg, out_dir, spec, force=False, nsys=None):
        calls.append(cfg.context)
        return profiler.ProfileResult(
            name=cfg.name, config=cfg.to_dict(), status="ok", reason=None,
            sqlite=None, nsys_rep=None, sidecar=str(out_dir / "x.json"), wall_s=1.5,
            command=["nsys"], nsys_version="2022.4", trace="nvtx,osrt", window="measure")

    def fake_mine(result, top=15):
        dom = {"range": "forward", "kernel": "gemm_k", "category": "gemm", "share_pct": 80.0,
               "per_range_instance": 3.0, "range_kernel_ns": 100,
               "category_shares": {"gemm": 80.0, "softmax": 20.0}}
        return mining.ProfileReport(
            export=None, config=result.config,
            ranges=[{"range": "forward", "instances": 2, "avg_ns": 10.0, "gpu_inclusive_ns": 5}],
            dominant=[dom], kernels=[], notes=[], sentences=[], status="ok", reason=None)

    monkeypatch.setattr(sweeper, "profile_config", fake_profile)
    monkeypatch.setattr(sweeper, "mine_profile", fake_mine)
    monkeypatch.setattr(sweeper, "locate_nsys", lambda *a, **k: ("nsys", "2022.4"))
    spec = WorkloadSpec(size="tiny,custom:d30-f64-L1-h4", context="32,64", mode="train",
                        nvtx="fine", warmup=1, steps=1)
    first = sweeper.run_sweep(spec, tmp_path, NsysSpec())
    assert (first.planned, len(first.ran), first.resumed) == (4, 4, []) and calls == [32, 64]
    again = sweeper.run_sweep(spec, tmp_path, NsysSpec())
    assert (len(again.ran), len(again.resumed)) == (0, 4) and calls == [32, 64]
    tables = sweeper.sweep_tables(tmp_path)
    assert [r["status"] for r in tables.runs] == ["ok", "ok", "failed", "failed"]
    assert tables.runs[0]["forward_kernel"] == "gemm_k"
    assert tables.mix[0]["gemm_pct"] == 80.0 and tables.mix[0]["softmax_pct"] == 20.0
    res = cli("sweep", "--report", tmp_path, "--format", "json")
    data = json.loads(res.stdout)
    assert set(data) == {"runs", "dominant", "mix", "ranges", "notes"}
    assert data["dominant"][0]["kernel"] == "gemm_k"
    for fmt in ("md", "latex", "csv", "table"):
        assert cli("sweep", "--report", tmp_path, "--format", fmt).exit_code == 0
    assert cli("sweep", "--report", tmp_path / "nothing").exit_code == 1


def test_mine_profile_with_gpu_kernels(tmp_path):
    """The GPU side of the profile report, on an export with kernels (the demo export has the
    model's range names, one warmup and two measured steps)."""
    from profile_cli.commands.output import OutputSpec
    from profile_cli.commands.profile import render_profile
    from tests.synth import demo

    export = demo(tmp_path / "demo.sqlite")
    result = profiler.ProfileResult(
        name="demo", config=tiny_cfg().to_dict("cuda"), status="ok", reason=None,
        sqlite=str(export), nsys_rep=None, sidecar=str(tmp_path / "demo.json"), wall_s=1.0,
        command=["nsys"], nsys_version="2024.6", trace="cuda,nvtx,osrt", window="measure")
    report = mining.mine_profile(result)
    ranges = {r["range"]: r for r in report.ranges}
    assert ranges["step"]["instances"] == 2 and "warmup" not in ranges
    dom = {d["range"]: d for d in report.dominant}
    assert dom["backward"]["kernel"] == "ampere_sgemm_128x64_nt"
    assert dom["backward"]["per_range_instance"] == 6.0
    assert dom["optimizer"]["category"] == "optimizer"
    assert dom["computing softmax"]["category"] == "softmax"
    assert dom[None]["instances"] == 12  # the measured steps' backward gemms only
    assert report.kernels[0]["name"] == "ampere_sgemm_128x64_nt"
    assert [r["range"] for r in report.ranges][:5] == ["step", "forward", "backward",
                                                      "optimizer", "scaled dot product attention"]
    data = json.loads(render_profile(report, OutputSpec(format="json")).text)
    assert set(data) == {"export", "config", "ranges", "dominant", "kernels", "notes"}
    for fmt in ("md", "csv"):
        assert "ampere_sgemm_128x64_nt" in render_profile(report, OutputSpec(format=fmt)).text
    assert r"ampere\_sgemm\_128x64\_nt" in render_profile(report, OutputSpec(format="latex")).text


def test_sweep_ctrl_c_keeps_the_index_consistent(tmp_path, monkeypatch):
    from profile_cli.runs import sweep as sweeper

    seen = []

    def fake_profile(cfg, out_dir, spec, force=False, nsys=None):
        seen.append(cfg.context)
        if seen == [32, 64]:
            raise KeyboardInterrupt
        return profiler.ProfileResult(
            name=cfg.name, config=cfg.to_dict(), status="oom",
            reason="out of memory at size tiny context 32", sqlite=None, nsys_rep=None,
            sidecar=str(out_dir / "x.json"), wall_s=0.5, command=["nsys"],
            nsys_version="2022.4", trace="nvtx,osrt", window="measure")

    monkeypatch.setattr(sweeper, "profile_config", fake_profile)
    monkeypatch.setattr(sweeper, "locate_nsys", lambda *a, **k: ("nsys", "2022.4"))
    spec = WorkloadSpec(size="tiny", context="32,64,128", mode="forward", nvtx="fine",
                        warmup=1, steps=1)
    out = sweeper.run_sweep(spec, tmp_path, NsysSpec())
    assert out.interrupted and len(out.ran) == 1
    runs = sweeper.sweep_tables(tmp_path).runs
    assert [(r["context"], r["status"]) for r in runs] == [(32, "oom")]
    seen.clear()
    seen.append("already-interrupted")  # later calls no longer raise
    resumed = sweeper.run_sweep(spec, tmp_path, NsysSpec())
    assert resumed.resumed == [runs[0]["name"]] and len(resumed.ran) == 2
    assert seen == ["already-interrupted", 64, 128]


def test_mine_profile_of_an_inference_run_reports_kernels_per_phase(tmp_path):
    """What `profile --workload infer` shows on a GPU: the dominant kernel of prefill, decode
    and decode step (a synthetic export shaped like two measured generate calls)."""
    from nvtx_model.infer_config import InferSpec
    from profile_cli.commands.output import OutputSpec
    from profile_cli.commands.profile import render_profile
    from tests.synth import Synth

    s = Synth()
    t = 1_000_000
    s.range("warmup", 0, t - 100)
    s.kernel("warmup_gemm", 10, 500, launch=(5, 8))
    s.range("measure", t, t + 2_000_000)
    for call in range(2):
        base = t + call * 1_000_000
        s.range("prefill", base, base + 400_000)
        for k in range(3):  # prefill: big GEMMs dominate
            s.kernel("ampere_sgemm_128x128_tn", base + 100_000 + k * 50_000,
                     base + 140_000 + k * 50_000, launch=(base + 1_000 + k * 10,
                                                          base + 1_005 + k * 10))
        s.kernel("cunn_SoftMaxForward", base + 300_000, base + 305_000,
                 launch=(base + 2_000, base + 2_005))
        s.range("decode", base + 400_000, base + 900_000)
        for step in range(3):
            sb = base + 400_000 + step * 150_000
            s.range("decode step", sb, sb + 140_000)
            s.kernel("gemv2T_kernel", sb + 10_000, sb + 30_000, launch=(sb + 100, sb + 105))
            s.kernel("elementwise_kernel", sb + 30_000, sb + 32_000,
                     launch=(sb + 200, sb + 205))
    export = s.write(tmp_path / "infer.sqlite")
    (cfg,) = InferSpec(size="tiny", batch_sizes="2", input_lengths="16", output_length=4,
                       runs=2, nvtx="fine").configs()
    result = profiler.ProfileResult(
        name=cfg.name, config=cfg.to_dict("cuda"), status="ok", reason=None,
        sqlite=str(export), nsys_rep=None, sidecar=str(tmp_path / "x.json"), wall_s=1.0,
        command=["nsys"], nsys_version="2024.6", trace="cuda,nvtx,osrt", window="measure")
    report = mining.mine_profile(result)
    assert [r["range"] for r in report.ranges][:3] == ["prefill", "decode", "decode step"]
    dom = {d["range"]: d for d in report.dominant}
    assert dom["prefill"]["kernel"] == "ampere_sgemm_128x128_tn"
    assert dom["prefill"]["per_range_instance"] == 3.0
    assert dom["decode"]["kernel"] == "gemv2T_kernel"
    assert dom["decode"]["per_range_instance"] == 3.0  # one per decode step, 3 steps
    assert dom["decode step"]["kernel"] == "gemv2T_kernel"
    assert "warmup_gemm" not in {k["name"] for k in report.kernels}
    text = render_profile(report, OutputSpec(format="md")).text
    assert "generating 4 tokens after 2 prompts of 16 tokens" in text
    assert "NVTX ranges (measured generate calls)" in text


def test_workload_argv_round_trips_an_inference_config():
    from nvtx_model.infer_config import InferSpec

    (cfg,) = InferSpec(size="tiny", batch_sizes="3", input_lengths="20", output_length=6,
                       runs=2, warmup=1, precision="bf16", attention="sdpa", nvtx="fine",
                       device="cpu").configs()
    argv = profiler.workload_argv(cfg)
    assert argv[:3] == [sys.executable, "-m", "profile_cli.run_workload"]
    from typer.testing import CliRunner

    from profile_cli.run_workload import app

    res = CliRunner().invoke(app, argv[3:] + ["--dry-run"])
    assert res.exit_code == 0, res.output
    row = json.loads(res.stdout.strip().splitlines()[0])
    assert (row["batch"], row["input_length"], row["output_length"], row["runs"],
            row["warmup"], row["precision"], row["attention"], row["nvtx"]) == (
        3, 20, 6, 2, 1, "bf16", "sdpa", "fine")


def test_compiled_models_get_node_level_graph_traces(tmp_path, nsys_bin):
    """A compiled model on a GPU asks nsys for node-level graph traces (the graphs'
    kernels recorded) when the nsys takes --cuda-graph-trace, and says so; an nsys without
    the option, a CPU run, an eager run and a user's own choice get no option."""
    from profile_cli.runs.nsys_run import compile_trace_args

    (eager, compiled) = WorkloadSpec(size="tiny", context="16", mode="forward",
                                     compile="none,reduce-overhead").configs()
    args, notes = compile_trace_args(compiled, nsys_bin, "2022.4", "cuda,nvtx,osrt", "cuda", [])
    assert args == ["--cuda-graph-trace=node"] and "recorded one by one" in notes[0]
    assert compile_trace_args(eager, nsys_bin, "2022.4", "cuda,nvtx,osrt", "cuda", []) == (
        [], [])
    assert compile_trace_args(compiled, nsys_bin, "2022.4", "cuda,nvtx", "cuda",
                              ["--cuda-graph-trace=graph"]) == ([], [])
    args, notes = compile_trace_args(compiled, nsys_bin, "2022.4", "nvtx,osrt", "cpu", [])
    assert args == [] and notes == ["--compile reduce-overhead on cpu: no CUDA graphs there "
                                    "(torch compiles as in mode default)."]
    old = fake_nsys(tmp_path / "old-nsys", "echo 'usage: nsys profile [--trace=...]'\n")
    args, notes = compile_trace_args(compiled, old, "2020.3", "cuda,nvtx,osrt", "cuda", [])
    assert args == [] and notes == [
        "nsys 2020.3 has no --cuda-graph-trace option: CUDA graphs are traced as whole "
        "launches (`CUDA graph <id>` rows; their kernels are not recorded)."]
