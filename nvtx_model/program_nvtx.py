"""NVTX ranges for other people's PyTorch programs, added without changing a line of them.

``nsys-mine profile --nvtx modules,steps -- python train.py`` runs ``train.py`` through
``nvtx_model.launch``, which installs ``ProgramHooks`` when the program imports torch:

``modules[:DEPTH]``
    a push/pop range around every ``nn.Module`` call (``torch.nn.Module.__call__`` is wrapped,
    so a forward that raises still pops its range), named by the module's qualified name in
    its model with its class beside it: ``encoder.0.proj (Linear)``. The model itself (the
    outermost module called) is named by its class alone (``TinyNet``). A start/end range
    ``encoder.0.proj (Linear) backward`` covers the module's backward pass, from when
    autograd starts on the module's outputs until it reaches the nodes that produced its
    inputs (or until the backward pass ends, for modules whose inputs need no gradient).
    Modules deeper than DEPTH levels (the model is level 0, its children level 1) get no
    range. The hooks only watch autograd's graph (node hooks), they never wrap a tensor, so
    in-place operations work as without them.
``steps``
    a start/end range ``step`` per training step: from the first module called with
    gradients enabled after an optimizer step (or after the start) to the end of the next
    step of the first optimizer that steps, so ``--within step`` leaves out start-up and
    everything after the last step; ``optimizer (AdamW)`` covers each ``optimizer.step()``
    (torch's global optimizer step hooks).
``ops``
    torch's per-operator ranges (``torch.autograd.profiler.emit_nvtx``), which need a CUDA
    build of torch; elsewhere the launch report says so and nothing is added.

Names of modules are found lazily: the first time a module without a name is called at the
top level (no module call in progress on its thread), it and every submodule are named from
``named_modules()``; a model called again keeps its names. Ranges go to ``torch.cuda.nvtx``
on CUDA builds of torch and to the PyPI ``nvtx`` package otherwise (``nvtx_ranges``'
backends). Inside ``torch.compile`` tracing the wrapper does nothing.

``ProgramNvtx`` (the option's value) needs no torch; the hooks import nothing until the
program has imported torch.
"""

from __future__ import annotations

import re
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable

from nsys_parsers.errors import BadOption, closest_names

MODULES, OPS, STEPS = "modules", "ops", "steps"
PARTS = (MODULES, OPS, STEPS)
OFF_WORDS = ("off", "none")
STEP_RANGE = "step"
BACKWARD_SUFFIX = " backward"
OPS_NEEDS_CUDA = ("torch.autograd.profiler.emit_nvtx needs a CUDA build of torch (and a GPU); "
                  "this torch is {version}")
_PART = re.compile(r"^(?P<part>[a-z]+)(?::(?P<depth>-?\d+))?$")


@dataclass(frozen=True)
class ProgramNvtx:
    """Which ranges to add to a program: ``modules`` (down to ``depth`` levels; None: all),
    ``ops``, ``steps``. ``str()`` gives the canonical option text."""

    modules: bool = False
    depth: int | None = None
    ops: bool = False
    steps: bool = False

    @classmethod
    def parse(cls, text: str | None, option: str = "--nvtx") -> ProgramNvtx:
        """``modules[:DEPTH]``, ``ops``, ``steps``, comma separated; ``off``/``none``/empty:
        nothing."""
        spec: dict[str, Any] = {"modules": False, "depth": None, "ops": False,
                                "steps": False}
        items = [t.strip() for t in (text or "").split(",") if t.strip()]
        if len(items) == 1 and items[0].lower() in OFF_WORDS:
            return cls()
        for item in items:
            m = _PART.match(item.lower())
            part = m.group("part") if m else item
            if m is None or part not in PARTS or (m.group("depth") and part != MODULES):
                close = closest_names(part, list(PARTS), n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise BadOption(f"{option}: {item!r} is not a range kind for a program{hint}; "
                                f"use modules[:DEPTH], ops, steps (comma list), or off")
            if part == MODULES:
                spec["modules"] = True
                if m.group("depth") is not None:
                    depth = int(m.group("depth"))
                    if depth < 0:
                        raise BadOption(f"{option}: {item!r}: DEPTH is 0 (the model only) or "
                                        f"more")
                    spec["depth"] = depth
            else:
                spec[part] = True
        return cls(**spec)

    @property
    def off(self) -> bool:
        return not (self.modules or self.ops or self.steps)

    def __str__(self) -> str:
        parts = []
        if self.modules:
            parts.append(MODULES if self.depth is None else f"{MODULES}:{self.depth}")
        parts += [p for p, on in ((OPS, self.ops), (STEPS, self.steps)) if on]
        return ",".join(parts) or "off"


# ---- the hooks (torch only from here on, passed in) --------------------------------------------
@dataclass
class ModuleName:
    """A module's range names: ``label`` (forward), ``backward`` and its depth (model: 0)."""

    label: str
    backward: str
    depth: int
    qualname: str
    root_id: int


class _Local(threading.local):
    def __init__(self) -> None:
        self.stack: list[Any] = []  # the modules being called on this thread, outermost first


class _Backward:
    """One module call's backward range: opened by the first output node autograd starts,
    closed when every node that produced an input has been reached (``pending``)."""

    __slots__ = ("label", "handle", "ends", "pending")

    def __init__(self, label: str, ends: int) -> None:
        self.label = label
        self.handle: Any = None
        self.ends = ends
        self.pending = ends


def _walk(obj: Any, tensor_type: type, out: list, depth: int = 0) -> list:
    """The tensors in a module's inputs or outputs (tuples, lists, dicts: three levels)."""
    if isinstance(obj, tensor_type):
        out.append(obj)
    elif depth < 3:
        if isinstance(obj, (tuple, list)):
            for x in obj:
                _walk(x, tensor_type, out, depth + 1)
        elif isinstance(obj, dict):
            for x in obj.values():
                _walk(x, tensor_type, out, depth + 1)
    return out


def program_backend(torch: Any) -> tuple[Any, str | None]:
    """The backend for a program's ranges: ``torch.cuda.nvtx`` on a CUDA build of torch (it
    needs no GPU check, which would initialize CUDA before the program chose its devices),
    else the PyPI ``nvtx`` package; (None, why) when there is neither."""
    from nvtx_model import nvtx_ranges as nv

    if getattr(torch.version, "cuda", None):
        try:
            backend: Any = nv.TorchCudaBackend()
            backend.push("nsys-mine")
            backend.pop()
            return backend, None
        except (RuntimeError, ImportError, AttributeError):
            pass
    try:
        return nv.PyNvtxBackend(), None
    except Exception:  # noqa: BLE001 - NvtxMissing, or a broken nvtx install
        return None, (f"no NVTX backend in the program's Python: torch {torch.__version__} has "
                      f"no CUDA and the PyPI nvtx package is not installed there (pip install "
                      f"'nvtx<=0.2.11'); no ranges were added")


class ProgramHooks:
    """The hooks of one program run. ``install(torch)`` once torch is imported; ``finish()``
    when the program ends (ends what is still open); ``remove()`` undoes ``install``.
    ``report`` (a dict) says what was done, for ``nsys-mine profile``'s notes."""

    def __init__(self, spec: ProgramNvtx, report: dict[str, Any] | None = None,
                 backend: Any = None) -> None:
        self.spec = spec
        self.report: dict[str, Any] = report if report is not None else {}
        self.report.setdefault("notes", [])
        self._backend = backend
        self._active = False
        self._torch: Any = None
        self._local = _Local()
        self._names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._open: set[_Backward] = set()
        self._cleanup_queued = False
        self._step_handle: Any = None
        self._step_pending = True
        self._step_owner: Any = None
        self._optimizer_handles: dict[int, Any] = {}
        self._emit_nvtx: Any = None
        self._removers: list[Callable[[], None]] = []
        self.calls = 0
        self.named = 0
        self.forward_ranges = 0
        self.backward_ranges = 0
        self.step_ranges = 0
        self.optimizer_steps = 0
        self.roots: list[str] = []

    # -- install / finish ----------------------------------------------------------------------
    def install(self, torch: Any) -> None:
        self._torch = torch
        self.report.update(torch_imported=True, torch_version=str(torch.__version__),
                           cuda_build=bool(getattr(torch.version, "cuda", None)))
        if not (self.spec.modules or self.spec.steps or self.spec.ops):
            return
        module_cls = torch.nn.Module
        original = module_cls.__call__
        compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (
            lambda: False)
        grad_enabled = torch.is_grad_enabled
        hooks = self

        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            if compiling():
                return original(module, *args, **kwargs)
            if not hooks._active:
                hooks._activate()
            return hooks._call(original, grad_enabled, module, args, kwargs)

        module_cls.__call__ = __call__
        self._removers.append(lambda: setattr(module_cls, "__call__", original))
        if self.spec.steps:
            import torch.optim.optimizer as optim

            pre = optim.register_optimizer_step_pre_hook(self._optimizer_pre)
            post = optim.register_optimizer_step_post_hook(self._optimizer_post)
            self._removers += [pre.remove, post.remove]

    def _activate(self) -> None:
        """At the first module call (not at ``import torch``: the program may still choose
        its devices): the backend, and emit_nvtx for ``ops``."""
        with self._lock:
            if self._active:
                return
            torch = self._torch
            if self._backend is None:
                self._backend, why = program_backend(torch)
                if why:
                    self.report["notes"].append(why)
            if self._backend is None:
                from nvtx_model.nvtx_ranges import NoopBackend

                self._backend = NoopBackend()
            self.report["backend"] = self._backend.name
            if self.spec.ops:
                self._start_ops(torch)
            self._active = True

    def _start_ops(self, torch: Any) -> None:
        why = None
        if not getattr(torch.version, "cuda", None) or not torch.cuda.is_available():
            why = OPS_NEEDS_CUDA.format(version=torch.__version__)
        else:
            try:
                ctx = torch.autograd.profiler.emit_nvtx()
                ctx.__enter__()
                self._emit_nvtx = ctx
            except Exception as exc:  # noqa: BLE001 - say why, keep the program running
                why = f"torch.autograd.profiler.emit_nvtx failed: {type(exc).__name__}: {exc}"
        self.report["ops"] = "on" if why is None else "unavailable"
        if why:
            self.report["notes"].append(f"--nvtx ops: no operator ranges: {why}")

    def finish(self) -> None:
        """The program ended: close the step range and backward ranges still open, leave
        emit_nvtx, and fill the report."""
        backend = self._backend
        if backend is not None:
            if self._step_handle is not None:
                backend.end(self._step_handle)
                self._step_handle = None
            self._end_open()
            for handle in self._optimizer_handles.values():
                backend.end(handle)
            self._optimizer_handles.clear()
        if self._emit_nvtx is not None:
            try:
                self._emit_nvtx.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - the program is over
                pass
            self._emit_nvtx = None
        self.report.update(module_calls=self.calls, modules_named=self.named,
                           roots=self.roots[:20], forward_ranges=self.forward_ranges,
                           backward_ranges=self.backward_ranges, step_ranges=self.step_ranges,
                           optimizer_steps=self.optimizer_steps)

    def remove(self) -> None:
        """Undo ``install`` (tests, benchmarks)."""
        self.finish()
        for undo in reversed(self._removers):
            undo()
        self._removers.clear()

    # -- module calls --------------------------------------------------------------------------
    def _call(self, original: Any, grad_enabled: Any, module: Any, args: tuple,
              kwargs: dict) -> Any:
        stack = self._local.stack
        if self._step_pending and not stack and self.spec.steps and grad_enabled():
            self._start_step()
        self.calls += 1
        spec = self.spec
        if not spec.modules:
            stack.append(module)
            try:
                return original(module, *args, **kwargs)
            finally:
                stack.pop()
        info = self._names.get(module)
        if info is None:
            info = self.name_of(module, stack[-1] if stack else None)
        if spec.depth is not None and info.depth > spec.depth:
            stack.append(module)
            try:
                return original(module, *args, **kwargs)
            finally:
                stack.pop()
        tensor = self._torch.Tensor
        inputs = None
        if grad_enabled():
            inputs = {id(n): n for t in _walk(kwargs, tensor, _walk(args, tensor, []))
                      if (n := t.grad_fn) is not None}
        backend = self._backend
        stack.append(module)
        backend.push(info.label)
        self.forward_ranges += 1
        try:
            out = original(module, *args, **kwargs)
        finally:
            backend.pop()
            stack.pop()
        if inputs is not None:
            self._mark_backward(info, out, inputs)
        return out

    def name_of(self, module: Any, parent: Any = None) -> ModuleName:
        """The names of a module seen for the first time: one called at the top level
        (``parent`` None) names its whole tree (``named_modules()``), with itself as the
        model; one called inside ``parent`` takes its attribute name there, or its parent's
        name and its class (a module created in forward or kept in a plain list)."""
        cls = type(module).__name__
        if parent is None:
            tree = list(module.named_modules())
            ids = {id(m) for _, m in tree}
            for qual, m in tree:
                known = self._names.get(m)
                self.named += known is None
                if known is not None and m is not module and known.root_id not in ids:
                    continue  # a module shared with another model keeps its first name
                if m is module:
                    self._names[m] = ModuleName(label=cls, backward=cls + BACKWARD_SUFFIX,
                                                depth=0, qualname="", root_id=id(module))
                else:
                    label = f"{qual} ({type(m).__name__})"
                    self._names[m] = ModuleName(label=label, backward=label + BACKWARD_SUFFIX,
                                                depth=qual.count(".") + 1, qualname=qual,
                                                root_id=id(module))
            if len(self.roots) < 100:
                self.roots.append(cls)
            return self._names[module]
        above = self._names.get(parent) or self.name_of(parent)
        attr = next((k for k, m in getattr(parent, "_modules", {}).items() if m is module),
                    None)
        part = attr if attr is not None else cls
        qual = f"{above.qualname}.{part}" if above.qualname else part
        label = f"{qual} ({cls})"
        info = ModuleName(label=label, backward=label + BACKWARD_SUFFIX, depth=above.depth + 1,
                          qualname=qual, root_id=above.root_id)
        self._names[module] = info
        self.named += 1
        return info

    # -- backward ------------------------------------------------------------------------------
    def _mark_backward(self, info: ModuleName, out: Any, inputs: dict[int, Any]) -> None:
        starts = {}
        for t in _walk(out, self._torch.Tensor, []):
            node = t.grad_fn
            if node is not None and id(node) not in inputs:
                starts[id(node)] = node
        if not starts:
            return  # no output with a graph of this module's own (e.g. it returned its input)
        bw = _Backward(info.backward, len(inputs))
        for node in starts.values():
            node.register_prehook(lambda grads, bw=bw: self._backward_start(bw))
        for node in inputs.values():
            node.register_prehook(lambda grads, bw=bw: self._backward_end(bw))

    def _backward_start(self, bw: _Backward) -> None:
        if bw.handle is not None:
            return
        bw.handle = self._backend.start(bw.label)
        bw.pending = bw.ends
        self.backward_ranges += 1
        with self._lock:
            self._open.add(bw)
            queue = not self._cleanup_queued
            self._cleanup_queued = True
        if queue:
            try:
                self._torch.autograd.Variable._execution_engine.queue_callback(self._end_open)
            except Exception:  # noqa: BLE001 - finish() ends them at the latest
                pass

    def _backward_end(self, bw: _Backward) -> None:
        if bw.handle is None:
            return
        bw.pending -= 1
        if bw.pending <= 0:
            handle, bw.handle = bw.handle, None
            with self._lock:
                self._open.discard(bw)
            self._backend.end(handle)

    def _end_open(self) -> None:
        """The end of a backward pass: end the module ranges still open (modules whose
        inputs need no gradient, e.g. the first layer)."""
        with self._lock:
            still, self._open = self._open, set()
            self._cleanup_queued = False
        for bw in still:
            handle, bw.handle = bw.handle, None
            if handle is not None:
                self._backend.end(handle)

    # -- steps ---------------------------------------------------------------------------------
    def _start_step(self) -> None:
        if not self._active:
            self._activate()
        with self._lock:
            if not self._step_pending:
                return
            self._step_pending = False
        self._step_handle = self._backend.start(STEP_RANGE)

    def _optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self._active:
            self._activate()
        handle = self._backend.start(f"optimizer ({type(optimizer).__name__})")
        self._optimizer_handles[id(optimizer)] = handle

    def _optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        handle = self._optimizer_handles.pop(id(optimizer), None)
        if handle is not None:
            self._backend.end(handle)
        self.optimizer_steps += 1
        if self._step_owner is None:
            self._step_owner = weakref.ref(optimizer)
        if self._step_owner() is not optimizer:
            return  # the first optimizer that steps marks the steps
        if self._step_handle is not None:
            handle, self._step_handle = self._step_handle, None
            self._backend.end(handle)
            self.step_ranges += 1
        self._step_pending = True
