"""Map CUDA kernel names to a small set of categories (gemm, attention, softmax, ...).

A *rule* is ``(category, pattern)``: ``pattern`` is a Python regular expression searched
(``re.search``, case-insensitive) in the full, demangled kernel name. Rules are tried in
order and the **first match wins**; a name no rule matches is ``other``.

Categories (``CATEGORIES``)::

    gemm           matrix multiply and convolution: cuBLAS/cuBLASLt (sgemm, xmma, nvjet,
                   gemv, split-K reduce), CUTLASS, cuDNN convolutions (implicit GEMM,
                   Winograd, FFT, im2col), Triton matmul templates
    attention      fused attention: flash-attn, PyTorch SDPA (flash / mem-efficient / cuDNN),
                   xFormers/CUTLASS fmha, FlashInfer, kernels named after attention ops
    softmax        softmax / log-softmax (incl. the log-softmax of cross entropy), fused
                   softmax-cross-entropy kernels
    reduction      sums, means, min/max, arg-reductions, scans (cumsum), NLL loss, pooling
    normalization  layer/RMS/group/batch norm forward and backward
    elementwise    pointwise math, activations, fills, random, dropout, indexing/gather
    optimizer      multi_tensor_apply (foreach and fused optimizers), Adam/SGD/LAMB kernels,
                   AMP grad-scaler kernels
    copy           memcpy/memset, dtype casts and contiguous() copies, cat, transposes
    communication  NCCL and other collective/peer-to-peer kernels
    other          everything else (user kernels, sorting, OpenMP/OpenACC offload, ...)
    cuda graph     a whole CUDA graph launch (``CUDA graph 4``) of a graph-level trace, whose
                   kernels nsys did not record (``nsys_parsers.graphs``)

User rules come from a TOML file and are tried **before** the built-in rules, so they can
override any built-in decision::

    # my_rules.toml: one [[rule]] table per rule, tried top to bottom
    [[rule]]
    category = "attention"
    pattern = "my_custom_attn"        # regex, case-insensitive, searched anywhere in the name

    [[rule]]
    category = "other"                # "other" is allowed: takes a name out of a category
    pattern = '^void my_ns::debug_'   # single quotes = TOML literal string: no \\ escaping

Errors in the file (missing file, invalid TOML, unknown key or category, invalid regex)
raise :class:`nsys_parsers.errors.BadOption` naming the file, the rule and what to fix.

Design notes on the built-in table (the rationale of each rule is a comment beside it):

* Kernel names are long templated strings: the *outer* kernel says what a kernel is,
  the template arguments say what it computes. ``elementwise_kernel<..direct_copy..>``
  is a copy and ``multi_tensor_apply_kernel<..FusedAdamMathFunctor..>`` is the optimizer,
  so the specific families come first and the generic ones (``elementwise``) last.
* Rules matching "reduce", "scan" or "cutlass" look only at the outer function name
  (``_outer()``), because template arguments are full of words like
  ``cudnn::reduced_divisor`` or types like ``cutlass::half_t``.
* Compiled (generated) kernels are classified by their kind prefix: Triton/Inductor
  (``triton_poi_`` pointwise, ``triton_red_``/``triton_per_`` reduction, ``triton_tem_``
  template = matmul, ``triton_for_`` foreach = optimizer), nvFuser, Thrust, CuPy.
* Demangled names work best; short names (no template arguments) and mangled ``_Z...``
  names work too, with less detail (a short ``elementwise_kernel`` cannot be a copy).
* Speed: built-in patterns are lower case and searched in the lower-cased name without
  ``re.IGNORECASE`` (same answer, several times faster; a user pattern without upper-case
  letters gets the same treatment), every alternative starts with a literal, and runs of
  same-category rules are one regex: tens of thousands of distinct names, or names of
  hundreds of KiB, are categorized in one pass each.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from nsys_parsers.errors import BadOption
from reports.render import View

__all__ = [
    "CATEGORIES",
    "CATEGORY_DESCRIPTIONS",
    "BUILTIN_SOURCE",
    "CategoryRule",
    "builtin_rules",
    "load_rules",
    "categorize",
    "categorize_many",
    "rules_table",
    "CATEGORY_VIEW",
]

CATEGORIES: tuple[str, ...] = (
    "gemm",
    "attention",
    "softmax",
    "reduction",
    "normalization",
    "elementwise",
    "optimizer",
    "copy",
    "communication",
    "other",
    "cuda graph",
)

CATEGORY_DESCRIPTIONS: dict[str, str] = {
    "gemm": "matrix multiply and convolution (cuBLAS, cuBLASLt, CUTLASS, cuDNN conv, Triton mm)",
    "attention": "fused attention (flash-attn, SDPA, fmha, cuDNN sdpa, FlashInfer)",
    "softmax": "softmax and log-softmax (incl. cross entropy)",
    "reduction": "sum/mean/max/arg reductions, scans, NLL loss, pooling",
    "normalization": "layer/RMS/group/batch norm",
    "elementwise": "pointwise ops, activations, fill, random, dropout, indexing",
    "optimizer": "multi_tensor_apply/foreach and fused optimizer kernels, AMP grad scaling",
    "copy": "memcpy/memset, dtype casts, contiguous copies, cat, transposes",
    "communication": "NCCL and other collectives",
    "other": "no rule matched",
    "cuda graph": "a whole CUDA graph launch: its kernels were not recorded "
                  "(nsys --cuda-graph-trace=graph)",
}

BUILTIN_SOURCE = "builtin"
CATEGORY_VIEW = View(columns=["order", "category", "pattern", "source"], noun="rules",
                     drop=("source",))
_FLAGS = re.IGNORECASE


@dataclass(frozen=True)
class CategoryRule:
    """One rule: kernels whose name matches ``pattern`` belong to ``category``.

    ``source`` is ``"builtin"`` or the path of the TOML file the rule came from.
    """

    category: str
    pattern: str
    source: str = BUILTIN_SOURCE


# Built-in patterns are written in lower case and matched against the lower-cased name
# (same result as re.IGNORECASE, several times faster), and every alternative starts with a
# literal so that the regex engine can skip ahead quickly in names of hundreds of KiB.


def _nl(*words: str) -> str:
    """``words`` not preceded by a letter (``copy`` in ``direct_copy_kernel`` but not in
    ``batchedcopy``). Written as a trailing look-behind to keep the literal first."""
    return "|".join(f"{w}(?<![a-z]{w})" for w in words)


def _word(*words: str) -> str:
    """``words`` neither preceded nor followed by a letter (``sgd`` in ``sgd_kernel`` but not
    in ``sgdr``); digits and underscores count as separators."""
    return "|".join(f"{w}(?<![a-z]{w})(?![a-z])" for w in words)


# The outer kernel identity: an optional "void ", then namespaces (incl. the anonymous
# namespace as spelled by old and new demanglers), then the function name. Anchored at the
# start, so searching it in a 300 KiB name costs one linear pass. Mangled names (_Z...) have
# no separators a regex can trust; there the outer name is taken as the first 64 characters.
_OUTER = r"^(?:void\s+)?(?:(?:\w+|\(anonymous namespace\)|<unnamed>)::)*\w*?"
_OUTER_MANGLED = r"^_z\w{0,64}?"


def _outer(core: str) -> str:
    """Pattern matching ``core`` (a regex) inside the outer function name."""
    return f"{_OUTER}(?:{core})|{_OUTER_MANGLED}(?:{core})"


# Ops that only move data; a Triton pointwise kernel fused from these alone is a copy
# (``_to_copy`` = dtype cast, ``clone`` = contiguous(), ...), like eager's direct_copy_kernel.
_COPY_OPS = r"(?:_to_copy|_unsafe_view|clone|cat|copy|permute|transpose|view|expand|slice|select|squeeze|unsqueeze|t)"

# (category, pattern). Order matters: first match wins. Rationale in the comments.
_BUILTIN: list[tuple[str, str]] = [
    # ---- a whole-graph launch row (nsys_parsers.graphs names it): its own category, since
    # its kernels, of every kind, were not recorded --------------------------------------
    ("cuda graph", r"^cuda graph \d+$"),
    # ---- communication: first, NCCL kernel names contain Sum/Reduce/Copy/float... --------
    ("communication", r"nccl|rccl|msccl|nvshmem"),
    # Custom collectives: PyTorch symmetric memory (one_shot_all_reduce), vLLM custom
    # all-reduce (cross_device_reduce), TransformerEngine userbuffers, DeepEP.
    ("communication", _word("all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter",
                            "reducescatter", "all_to_all", "alltoall")
                      + r"|cross_device_reduce|userbuffers|deep_ep::"),
    # ---- optimizer: before everything that looks inside template arguments -------------
    # multi_tensor_apply_kernel is the engine of torch._foreach_* and of the fused
    # optimizers: all of it is optimizer time. Model code rarely calls torch._foreach_*;
    # foreach AdamW/SGD (the default since PyTorch 2.0), clip_grad_norm_ (LpNormFunctor,
    # lpnorm_cleanup) and the AMP GradScaler do.
    ("optimizer", r"multi_tensor_apply|optimizer|fused_?adam|fused_?sgd|fused_?lamb|fused_?adagrad"
                  r"|adam\w{0,64}?functor|sgd\w{0,64}?functor|lamb(?!da)\w{0,64}?functor|lambstage"
                  r"|lpnorm_cleanup|amp_update_scale|non_finite_check_and_unscale"),
    ("optimizer", _word("adam", "adamw", "adagrad", "adadelta", "adamax", "rmsprop", "sgd", "lamb",
                        "lars", "lion", "adafactor")),
    # ---- attention: before gemm (fmha/flash kernels are CUTLASS/cute templates full of
    # gemm/copy words) and before softmax (they compute a softmax inside). Kernels named
    # after an attention op (triton_*_fused__scaled_dot_product_*) count as attention too.
    ("attention", r"attention|attn|flash_?fwd|flash_?bwd|flash::|pytorch_flash|flashinfer|fmha"
                  r"|fused_mha|sdpa|scaled_dot_product|xformers|" + _nl("mha_fwd", "mha_bwd")),
    # ---- generated kernels, classified by their kind prefix ----------------------------
    # Triton / TorchInductor: triton_<kind>_fused_<sorted aten ops>_<n>. The op list
    # decides softmax/norm (attention ops were caught above); otherwise the kind does.
    ("softmax", r"^triton_\w*?softmax"),
    ("normalization", r"^triton_\w*?(?:layer_?norm|rms_?norm|group_?norm|batch_?norm|instance_?norm)"),
    # RMSNorm/LayerNorm written from primitives (x * rsqrt(mean(x**2) + eps)) fuses into one
    # kernel whose op list has both a mean (or var_mean) and rsqrt: a normalization.
    ("normalization", r"^triton_[a-z]+_fused(?=\w*_(?:var_)?mean)(?=\w*_rsqrt)"),
    ("gemm", r"^triton_tem_"),  # templates: mm/bmm/addmm/conv (flex attention caught above)
    ("reduction", r"^triton_(?:per|red|spl)_"),  # persistent / looped reduction, split scan
    ("optimizer", r"^triton_for_"),  # foreach kernels: compiled optimizer steps
    ("copy", r"^triton_poi_fused_" + _COPY_OPS + r"(?:_" + _COPY_OPS + r")*_\d+$"),
    ("elementwise", r"^triton_poi_"),
    # nvFuser: nvfuser_<scheduler>_f0_c0_r0_g0 ("none" stays other: no scheduler info).
    ("elementwise", r"nvfuser_pointwise"),
    ("reduction", r"nvfuser_reduction|nvfuser_\w{0,32}?persistent"),
    ("gemm", r"nvfuser_matmul"),
    ("copy", r"nvfuser_transpose"),
    # Thrust agents and CUB algorithms: the agent / algorithm name is the identity; the
    # user functors inside say nothing reliable.
    ("reduction", r"_kernel_agent<thrust::(?:\w{1,64}::){0,8}__(?:reduce|scan)"),
    ("elementwise", r"_kernel_agent<thrust::(?:\w{1,64}::){0,8}__(?:parallel_for|transform|fill"
                    r"|uninitialized_fill|for_each|tabulate)"
                    r"|cub::(?:\w{1,64}::){0,8}(?:for_each|transform)::\w{0,64}kernel"),
    # CuPy: cupy_<ufunc>__<dtypes>; reductions and scans have their own names.
    ("copy", r"^cupy_copy_"),
    ("reduction", r"^cupy_(?:\w*scan|(?:sum|prod|max|min|amax|amin|argmax|argmin|all|any"
                  r"|count_nonzero|mean|var|std|nan\w+?)(?:_core)?(?:_|$))"),
    ("elementwise", r"^cupy_"),
    # cuBLAS level 1: their parameter types are named cublasGemvTensor*, so before gemm.
    ("reduction", _nl("dot_kernel", "asum_kernel", "nrm2_kernel", "amax_kernel", "amin_kernel",
                      "iamax_kernel", "iamin_kernel") + r"|reduce_1block_kernel"),
    ("elementwise", _nl("axpy_kernel", "scal_kernel")),
    # ---- gemm ----------------------------------------------------------------------------
    # cuBLAS: ampere_sgemm_*, sm90_xmma_gemm_*, gemmSN_*, gemv2T_*, gemmk1_*, nvjet_* (cuBLASLt
    # Hopper+), splitKreduce_kernel (second pass of a split-K GEMM: part of the GEMM),
    # cublasLt epilogues; CUTLASS (cutlass_80_tensorop_s1688gemm_*, cutlass::Kernel2<...>).
    ("gemm", r"gemm|gemv|nvjet|xmma|splitkreduce|split_k_reduce|reducesplitk"
             r"|cublaslt::epilogue|matmul|marlin|fused_moe_kernel|"
             + _word("bmm", "addmm", "baddbmm", "scaled_mm", "grouped_mm", "mm_kernel",
                     "trsm", "trmm", "syrk", "herk", "syr2k", "her2k", "symm", "hemm")),
    # A CUTLASS kernel (cutlass::Kernel2<...>, cutlass::device_kernel<...>, cutlass_80_*):
    # only in the outer name, since other libraries use cutlass::half_t as a plain type.
    ("gemm", _outer("cutlass")),
    # Convolutions are GEMM work (implicit GEMM, im2col + GEMM, Winograd and FFT are
    # alternative algorithms for the same matrix product); there is no conv category.
    # cuDNN: *_scudnn_*, *_s1688cudnn_*, implicit/explicit_convolve_sgemm, winograd*,
    # dgrad/wgrad engines, fft2d_r2c/c2r (FFT convolution) and flip_filter (its helper).
    ("gemm", r"convolve|convolution|winograd|s\d*cudnn|h\d*cudnn|i\d*cudnn"
             r"|dgrad(?:2d|_alg|\w{0,32}?_engine)|wgrad(?:2d|_alg|\w{0,32}?_engine)"
             r"|im2col|col2im|vol2col|col2vol|fft\dd_[rc]2[rc]|flip_filter|depthwise"
             r"|conv(?<![a-z]conv)(?:\dd)?_(?:fprop|dgrad|wgrad|fwd|bwd|forward|backward|kernel)"),
    # ---- softmax: cunn_SoftMaxForward (also log-softmax of cross entropy),
    # softmax_warp_forward, SpatialSoftMax, Megatron scaled_masked_softmax, fused
    # softmax-cross-entropy kernels (apex xentropy, Liger cross_entropy) --------------------
    ("softmax", r"softmax|cross_?entropy|xentropy"),
    # ---- normalization: before reduction (batch_norm_backward_reduce_kernel) -------------
    # PyTorch LayerNorm/GroupNorm internals: RowwiseMoments, Compute*FusedParams,
    # ComputeInternalGradients, GammaBetaBackward; apex cuApplyLayerNorm/cuComputeGradInput;
    # cuDNN bn_fw_tr_*/bn_bw_*; TransformerEngine ln_fwd/ln_bwd/rmsnorm_*.
    ("normalization", r"layer_?norm|rms_?norm|group_?norm|batch_?norm|instance_?norm|weight_norm"
                      r"|rowwisemoments|gammabeta|compute\w{0,32}?fusedparams|computeinternalgradients"
                      r"|cucomputegradinput|cuwelford|"
                      + _nl("bn_fw", "bn_bw", "ln_fwd", "ln_bwd", "norm_fwd", "norm_bwd")),
    # ---- reduction -----------------------------------------------------------------------
    # Only the outer name: reduce_kernel, cub::DeviceReduceKernel, DeviceSegmentedReduce,
    # nll_loss_forward_reduce_cuda_kernel_2d, kernelReduceAll, par_reduce_kernel; scans
    # (cumsum, cub::DeviceScanKernel) are reductions along a dimension.
    ("reduction", _outer("reduc|scan")),
    # NLL loss (forward and backward), pooling (a windowed reduction), embedding backward
    # (a segmented sum of gradients).
    ("reduction", r"nll_?loss|nllcriterion|max_?pool|avg_?pool|lp_?pool|pooling_fw|pooling_bw"
                  r"|embedding\w{0,32}?backward|compute_grad_weight|sum_and_scatter|krn_partial"),
    # ---- copy: before elementwise (elementwise_kernel<..direct_copy_kernel_cuda..>) -------
    # memcpy/memset (also nsys' "[CUDA memcpy ...]" / "[CUDA memset]" rows), cat
    # (CatArrayBatchedCopy), dtype casts, layout changes (transpose, NCHW<->NHWC).
    # fill_ kernels are NOT copies: FillFunctor is elementwise.
    ("copy", r"catarray|batchedcopy|memcpy|memset|nchw_?to_?nhwc|nhwc_?to_?nchw|chunk_cat|split_with_sizes|"
             + _nl("copy", "transpose", "permute")),
    # ---- elementwise: generic, last ------------------------------------------------------
    # PyTorch's TensorIterator kernels: (vectorized_|unrolled_|index_)elementwise_kernel,
    # distribution_elementwise_grid_stride_kernel; old THC kernelPointwiseApply*.
    ("elementwise", r"elementwise|pointwise"),
    # Activations, dropout, random, rotary embeddings, fill, indexing (gather/scatter/
    # index_select/embedding lookup move one element per thread like index_elementwise).
    ("elementwise", _nl("silu", "gelu", "relu", "swiglu", "geglu", "sigmoid", "tanh", "dropout",
                        "rotary", "act_and_mul", "fill") + "|" + _word("rope")
                    + r"|curand|philox|gather|scatter|index_?select|index_?put|index_?add|indexfunc|embedding"),
]


@functools.lru_cache(maxsize=1)
def _builtin_rules() -> tuple[CategoryRule, ...]:
    return tuple(CategoryRule(c, p, BUILTIN_SOURCE) for c, p in _BUILTIN)


def builtin_rules() -> list[CategoryRule]:
    """The built-in rules, in order."""
    return list(_builtin_rules())


# ------------------------------------------------------------------------------------------
# Loading user rules
# ------------------------------------------------------------------------------------------

_HOW_TO = (
    'each rule is a [[rule]] table with two strings: category = "<one of '
    + ", ".join(CATEGORIES)
    + '>" and pattern = \'<Python regex>\' (see docs/CATEGORIES.md)'
)


def _short(value: object, width: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _check_category(category: object, where: str) -> str:
    if not isinstance(category, str):
        raise BadOption(f"{where}: category must be a string, got {_short(category)}; {_HOW_TO}")
    if category in CATEGORIES:
        return category
    hint = ""
    close = difflib.get_close_matches(category.strip().lower(), CATEGORIES, n=1)
    if close:
        hint = f' (did you mean "{close[0]}"?)'
    raise BadOption(
        f"{where}: unknown category {_short(category)}{hint}; "
        f"use one of: {', '.join(CATEGORIES)}"
    )


def _check_pattern(pattern: object, where: str) -> str:
    if not isinstance(pattern, str):
        raise BadOption(f"{where}: pattern must be a string, got {_short(pattern)}; {_HOW_TO}")
    if pattern == "":
        raise BadOption(
            f"{where}: pattern is empty, which would match every kernel; "
            "write a regex that matches part of the kernel names (use '.' to match all on purpose)"
        )
    try:
        re.compile(pattern, _FLAGS)
    except re.error as exc:
        raise BadOption(
            f"{where}: pattern {_short(pattern)} is not a valid regular expression ({exc}); "
            "fix the regex (Python re syntax, matched case-insensitively; escape literal "
            "( ) [ ] . * + ? with a backslash, and write it as a single-quoted TOML string "
            "so backslashes are kept)"
        ) from None
    return pattern


def _read_rules_file(path: str | os.PathLike) -> list[CategoryRule]:
    name = os.fspath(path)
    label = f"rules file {name!r}"
    if not os.path.exists(name):
        raise BadOption(f"{label} does not exist; give the path of a TOML file of [[rule]] tables")
    if not os.path.isfile(name):
        raise BadOption(f"{label} is not a regular file; give the path of a TOML file of [[rule]] tables")
    try:  # Python >= 3.11 (tomli is a dependency on 3.10); imported only to read a file
        import tomllib as _toml
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as _toml  # type: ignore[no-redef]
    try:
        with open(name, "rb") as fh:
            data = _toml.load(fh)
    except _toml.TOMLDecodeError as exc:
        raise BadOption(f"{label} is not valid TOML: {exc}; fix the syntax ({_HOW_TO})") from None
    except UnicodeDecodeError as exc:
        raise BadOption(f"{label} is not UTF-8 text ({exc}); save it as UTF-8") from None
    except OSError as exc:
        raise BadOption(f"{label} cannot be read: {exc.strerror or exc}") from None

    unknown = sorted(k for k in data if k != "rule")
    if unknown:
        raise BadOption(
            f"{label}: unknown top-level key(s) {', '.join(map(repr, unknown))}; "
            f"only [[rule]] tables are allowed ({_HOW_TO})"
        )
    entries = data.get("rule", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise BadOption(f"{label}: 'rule' must be an array of tables written [[rule]]; {_HOW_TO}")

    rules: list[CategoryRule] = []
    for index, entry in enumerate(entries, start=1):
        desc = ", ".join(f"{k} = {_short(v, 60)}" for k, v in entry.items())
        where = f"{label}, [[rule]] #{index} ({desc or 'empty'})"
        extra = sorted(k for k in entry if k not in ("category", "pattern"))
        if extra:
            raise BadOption(
                f"{where}: unknown key(s) {', '.join(map(repr, extra))}; {_HOW_TO}"
            )
        missing = [k for k in ("category", "pattern") if k not in entry]
        if missing:
            raise BadOption(f"{where}: missing {' and '.join(missing)}; {_HOW_TO}")
        category = _check_category(entry["category"], where)
        pattern = _check_pattern(entry["pattern"], where)
        rules.append(CategoryRule(category, pattern, name))
    return rules


def load_rules(path: str | os.PathLike | None = None) -> list[CategoryRule]:
    """Rules to use: the user's rules from the TOML file at ``path`` first, then the built-ins.

    ``path=None`` gives the built-in rules alone. Raises ``BadOption`` for a missing or
    unreadable file, invalid TOML, an unknown key or category, or an invalid regex.
    """
    user = _read_rules_file(path) if path is not None else []
    return user + builtin_rules()


# ------------------------------------------------------------------------------------------
# Matching
# ------------------------------------------------------------------------------------------

_GLOBAL_FLAGS = re.compile(r"\(\?[aiLmsux]+\)")
# A pattern starting with a plain character (not ^ ( [ \ . or a quantified one): the regex
# engine can then look for that first character quickly, also in an alternation of them.
_LITERAL_START = re.compile(r"[\w<>:,;=!@%&'\"~ -](?![*?{+])")


def _compile(pattern: str) -> tuple[re.Pattern[str], bool]:
    """Compile ``pattern`` case-insensitively. Returns (regex, lowered): when the pattern
    has no upper-case character it is compiled case-sensitively and must be searched in the
    lower-cased name, which gives the same answer and is several times faster."""
    if pattern == pattern.lower():
        return re.compile(pattern), True
    return re.compile(pattern, _FLAGS), False


# A numbered or named back reference: joining patterns with | would renumber its groups.
_BACKREF = re.compile(r"\\[1-9]|\(\?P=")


def _mergeable(pattern: str) -> bool:
    """Can ``pattern`` be joined with ``|`` to its neighbours, keeping its meaning and speed?
    Decided on the text (rather than by compiling each rule once more, at every run):
    no back reference (which group numbers would shift), no global inline flag (which must
    start the whole expression), and a literal first character. A pattern that is not a
    valid regex fails when its run is compiled."""
    return (
        not _BACKREF.search(pattern)
        and not _GLOBAL_FLAGS.search(pattern)
        and _LITERAL_START.match(pattern) is not None
    )


class _Matcher:
    """Rules compiled for speed. Consecutive rules of one category whose patterns start with
    a literal are joined into one alternation (same answer, one regex call)."""

    __slots__ = ("steps", "needs_lower")

    def __init__(self, rules: Sequence[CategoryRule]) -> None:
        runs: list[tuple[str, list[str], bool]] = []  # (category, patterns, mergeable)
        for rule in rules:
            ok = _mergeable(rule.pattern)
            last = runs[-1] if runs else None
            if (
                last is not None
                and last[0] == rule.category
                and last[2]
                and ok
                and (last[1][0] == last[1][0].lower()) == (rule.pattern == rule.pattern.lower())
            ):
                last[1].append(rule.pattern)
            else:
                runs.append((rule.category, [rule.pattern], ok))
        steps: list[tuple[str, re.Pattern[str], bool]] = []
        for category, patterns, _ in runs:
            try:
                regex, lowered = _compile("|".join(patterns))
            except re.error:  # a CategoryRule built by hand, not through load_rules: which one?
                for pattern in patterns:
                    try:
                        _compile(pattern)
                    except re.error as exc:
                        raise BadOption(
                            f"rule pattern {_short(pattern)} ({category}) is not a valid "
                            f"regular expression ({exc}); fix the regex") from None
                raise
            steps.append((category, regex, lowered))
        self.steps = tuple(steps)
        self.needs_lower = any(lowered for _, _, lowered in steps)

    def __call__(self, name: str) -> str:
        lower = name.lower() if self.needs_lower else name
        for category, regex, lowered in self.steps:
            if regex.search(lower if lowered else name) is not None:
                return category
        return "other"


@functools.lru_cache(maxsize=64)
def _matcher(rules: tuple[CategoryRule, ...]) -> _Matcher:
    return _Matcher(rules)


def _get_matcher(rules: Iterable[CategoryRule] | None) -> _Matcher:
    if rules is None:
        return _matcher(_builtin_rules())
    rules = tuple(rules)
    for rule in rules:
        if rule.category not in CATEGORIES:
            raise BadOption(
                f"rule {rule.pattern!r} from {rule.source}: unknown category {rule.category!r}; "
                f"use one of: {', '.join(CATEGORIES)}"
            )
    return _matcher(rules)


def _as_text(name: object) -> str:
    if isinstance(name, str):
        return name
    if name is None:
        return ""
    if isinstance(name, (bytes, bytearray)):
        return bytes(name).decode("utf-8", "replace")
    return str(name)


def categorize(name: str, rules: list[CategoryRule] | None = None) -> str:
    """The category of the kernel called ``name`` (first matching rule; ``other`` if none).

    ``rules=None`` uses the built-in rules; pass ``load_rules(path)`` to add user rules.
    """
    return _get_matcher(rules)(_as_text(name))


def categorize_many(names: Iterable[str], rules: list[CategoryRule] | None = None) -> list[str]:
    """``[categorize(n, rules) for n in names]``, matching each distinct name once."""
    match = _get_matcher(rules)
    seen: dict[object, str] = {}
    out: list[str] = []
    for name in names:
        try:
            category = seen[name]
        except KeyError:
            category = seen[name] = match(_as_text(name))
        except TypeError:  # unhashable: categorize without memoizing
            category = match(_as_text(name))
        out.append(category)
    return out


def rules_table(rules: list[CategoryRule]) -> list[dict]:
    """Rows ``{"order", "category", "pattern", "source"}`` (order is 1-based) for display."""
    return [
        {"order": i, "category": r.category, "pattern": r.pattern, "source": r.source}
        for i, r in enumerate(rules, start=1)
    ]
