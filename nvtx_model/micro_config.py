"""What a micro-benchmark run means, without torch: ``MicroSpec`` (the shared options) and
the configs of ``nsys-mine micro matmul`` (``MatmulConfig``) and ``micro mlp`` (``MLPConfig``),
and ``fit_exponent`` (time ~ c * value^exponent by least squares on log-log).
``nvtx_model.micro`` runs them."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Iterable

from nsys_parsers.errors import BadOption
from nvtx_model.config import BF16, DEFAULT_SEED, DEVICES, FP32, PRECISIONS

DEFAULT_MICRO_WARMUP = 2
DEFAULT_MICRO_RUNS = 5
# "Sized to the device": CPUs reach their compute-bound regime (and their patience) earlier.
DEFAULT_DIMS = {"cpu": (128, 256, 512, 1024, 2048), "cuda": (1024, 2048, 4096, 8192, 16384)}
MLP_PARAMS = ("num_steps", "num_layers", "batch_size", "dim")
MLP_BASE = {"num_steps": 2, "num_layers": 4, "batch_size": 256, "dim": 256}
DEFAULT_SCALES = (1, 2, 3, 4, 5)


# ---- fitting (pure) -------------------------------------------------------------------------
def fit_exponent(xs: Iterable[float], ys: Iterable[float]) -> tuple[float, float] | None:
    """(exponent, coefficient) of the least-squares line log y = exponent log x + log c over
    the points with x, y > 0; None with fewer than two distinct x."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys)
           if x and y and x > 0 and y > 0 and math.isfinite(y)]
    if len({p[0] for p in pts}) < 2:
        return None
    mx = statistics.fmean(p[0] for p in pts)
    my = statistics.fmean(p[1] for p in pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    slope = sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx
    return slope, math.exp(my - slope * mx)


# ---- configs --------------------------------------------------------------------------------
@dataclass(frozen=True)
class MicroSpec:
    """The options both micro-benchmarks share (comma list of precisions unparsed)."""

    precision: str = "fp32"
    device: str = "auto"
    warmup: int = DEFAULT_MICRO_WARMUP
    runs: int = DEFAULT_MICRO_RUNS
    seed: int = DEFAULT_SEED
    threads: int | None = None

    def precisions(self) -> list[str]:
        from nvtx_model.workload import parse_choices

        return parse_choices(self.precision, PRECISIONS, "--precision")

    def common(self) -> dict[str, Any]:
        return {"device": self.device, "warmup": self.warmup, "runs": self.runs,
                "seed": self.seed, "threads": self.threads}

    def matmul_configs(self, dims: str | None) -> list[MatmulConfig]:
        """One config per precision x dimension; ``dims`` None: ``DEFAULT_DIMS`` of the
        device (this resolves the device, so torch must be there)."""
        from nvtx_model.workload import parse_ints

        values = (parse_ints(dims, "--dims") if dims is not None
                  else list(default_dims(self.device)))
        return matmul_configs(values, self.precisions(), **self.common())

    def mlp_configs(self, params: str, scales: str, base: dict[str, int]) -> list[MLPConfig]:
        from nvtx_model.workload import parse_choices, parse_ints

        return mlp_configs(parse_choices(params, MLP_PARAMS, "--params"),
                           parse_ints(scales, "--scales"), base, self.precisions(),
                           **self.common())


def _check_common(precision: str, device: str, warmup: int, runs: int,
                  threads: int | None) -> None:
    if precision not in PRECISIONS:
        raise BadOption(f"--precision {precision!r} is not one of: {', '.join(PRECISIONS)}")
    if device not in DEVICES:
        raise BadOption(f"--device {device!r} is not one of: {', '.join(DEVICES)}")
    if runs < 1 or warmup < 0:
        raise BadOption(f"--runs must be >= 1 and --warmup >= 0 (got {runs}, {warmup})")
    if threads is not None and threads < 1:
        raise BadOption(f"--threads must be >= 1, got {threads}")


@dataclass(frozen=True)
class MatmulConfig:
    """C = A B with A, B square (dim x dim) in ``precision``."""

    dim: int
    precision: str = "fp32"
    device: str = "auto"
    warmup: int = DEFAULT_MICRO_WARMUP
    runs: int = DEFAULT_MICRO_RUNS
    seed: int = DEFAULT_SEED
    threads: int | None = None
    nvtx: str = "off"

    def __post_init__(self) -> None:
        if self.dim < 1:
            raise BadOption(f"--dims: {self.dim} is not a positive integer")
        _check_common(self.precision, self.device, self.warmup, self.runs, self.threads)

    def label(self) -> str:
        return f"matmul {self.dim}x{self.dim} {self.precision}"

    @property
    def flops(self) -> int:
        return 2 * self.dim**3

    @property
    def bytes_needed(self) -> int:
        return 3 * self.dim * self.dim * (BF16 if self.precision == "bf16" else FP32)


@dataclass(frozen=True)
class MLPConfig:
    """``num_layers`` x (Linear(dim, dim) + GELU), forward + backward ``num_steps`` times on a
    (batch_size, dim) input; ``param`` is the parameter this point scales (``value``)."""

    param: str
    value: int
    num_steps: int
    num_layers: int
    batch_size: int
    dim: int
    precision: str = "fp32"
    device: str = "auto"
    warmup: int = DEFAULT_MICRO_WARMUP
    runs: int = DEFAULT_MICRO_RUNS
    seed: int = DEFAULT_SEED
    threads: int | None = None
    nvtx: str = "off"

    def __post_init__(self) -> None:
        if self.param not in MLP_PARAMS:
            raise BadOption(f"--params: unknown parameter {self.param!r}; use one or more of "
                            f"{', '.join(MLP_PARAMS)}")
        if min(self.num_steps, self.num_layers, self.batch_size, self.dim) < 1:
            raise BadOption("MLP steps, layers, batch size and dim must be >= 1")
        _check_common(self.precision, self.device, self.warmup, self.runs, self.threads)

    def label(self) -> str:
        return f"mlp {self.param} {self.value} {self.precision}"

    @property
    def flops(self) -> int:
        """Forward 2 B d^2 per layer, backward twice that, per step (GELU left out)."""
        return 3 * 2 * self.batch_size * self.dim**2 * self.num_layers * self.num_steps

    @property
    def bytes_needed(self) -> int:
        """Weights, their gradients, and per layer the saved input and GELU input."""
        b = BF16 if self.precision == "bf16" else FP32
        weights = self.num_layers * (self.dim * self.dim + self.dim) * b
        acts = self.num_layers * 3 * self.batch_size * self.dim * b
        return 2 * weights + acts


def matmul_configs(dims: Iterable[int], precisions: Iterable[str], **common: Any
                   ) -> list[MatmulConfig]:
    return [MatmulConfig(dim=d, precision=p, **common) for p in precisions for d in dims]


def mlp_configs(params: Iterable[str], scales: Iterable[int], base: dict[str, int],
                precisions: Iterable[str], **common: Any) -> list[MLPConfig]:
    """Per precision and parameter, the base config with that parameter times each scale."""
    scales = list(scales)
    if not scales or any(s < 1 for s in scales):
        raise BadOption("--scales must be positive integers, e.g. 1,2,3,4,5")
    out = []
    for precision in precisions:
        for param in params:
            for scale in scales:
                shape = {**base, param: base[param] * scale}
                out.append(MLPConfig(param=param, value=shape[param], precision=precision,
                                     num_steps=shape["num_steps"],
                                     num_layers=shape["num_layers"],
                                     batch_size=shape["batch_size"], dim=shape["dim"],
                                     **common))
    return out


def default_dims(device: str) -> tuple[int, ...]:
    from nvtx_model.runtime import resolve_runtime

    return DEFAULT_DIMS["cuda" if resolve_runtime(device).kind == "cuda" else "cpu"]
