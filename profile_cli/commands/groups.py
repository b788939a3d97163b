"""Options declared once and shared by commands (option groups), and commands whose options
come from declarations (``reports.pipeline.options.Param``: the analyses', the analysis
options, the output options), with Typer's public API only.

An ``OptionGroup`` is data: the value it builds (``OutputSpec``, ``WorkloadSpec``, ...), one
``Annotated[type, typer.Option(...)]`` per field in --help order, and the defaults. A command
takes groups through Typer's ``cls=`` argument::

    @app.command("bench", cls=grouped(WORKLOAD(), OUTPUT(top=0)))
    def bench(ctx: typer.Context, db: DbOpt = None) -> None:
        workload, out = WORKLOAD.of(ctx), OUTPUT.of(ctx)

``grouped`` gives Typer a ``GroupedCommand`` with those groups: its options are the groups'
(first, in the order given) and then the function's own; before the function runs, each
group's values are taken out of ``ctx.params`` and built into the group's value, kept in
``ctx.meta``. ``param_group`` makes a group of ``Param`` declarations (``param_type``: each
one's Typer declaration).

Each option is a parameter Typer itself builds (``typer_param``: Typer's parameter of a
one-parameter command), so ``--help``, type checks and usage errors are Typer's, whatever its
version. (Typer 0.26 and later vendor their own copy of click: a ``click.Option`` is neither
shown in Typer's help nor parsed by its commands; its own parameter classes take internal
arguments that change between versions.) No signature or annotation is rewritten.

This module has no ``from __future__ import annotations``: ``typer_param`` defines a function
whose annotation is a declaration made at run time, which Typer reads from the function.
"""

import functools
import inspect
import os
import typing
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, Callable, List, Optional

import typer
import typer.core
import typer.main

try:  # Typer 0.2x has its own path type (its vendored click); older ones use click's
    from typer.models import TyperPath
except ImportError:  # pragma: no cover
    from click import Path as TyperPath  # type: ignore[assignment]

from reports.pipeline.options import Param

REQUIRED = inspect.Parameter.empty  # the default of an option or argument that must be given


def typer_param(name: str, annotation: Any, default: Any = REQUIRED) -> Any:
    """Typer's parameter (its click option or argument) for one declaration: ``annotation``
    is ``Annotated[type, typer.Option(...)]`` (or ``typer.Argument``), ``default`` its default
    (``REQUIRED``: none). Out: the parameter Typer builds for a command function's parameter
    declared so, named ``name`` (the key of its value in ``ctx.params``)."""

    def command(value: annotation = default) -> None:
        """One parameter."""

    app = typer.Typer(add_completion=False)
    app.command()(command)
    (param,) = typer.main.get_command(app).params
    param.name = name
    return param


def _base_type(annotation: Any) -> tuple[Any, bool]:
    """(the value type of a declaration, whether it is a list): ``Annotated[Optional[List[Path]],
    ...]`` -> (Path, True)."""
    kind = typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated \
        else annotation
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if typing.get_origin(kind) is typing.Union and len(args) == 1:
        kind = args[0]
    if typing.get_origin(kind) is list:
        return typing.get_args(kind)[0], True
    return kind, False


def plain_value(param: Any, annotation: Any, value: Any) -> Any:
    """A parsed value as a command function receives it from Typer: a repeated option or an
    argument of several values as a list (None when none was given and its default is None),
    paths as ``Path`` (older Typer versions parse them as str)."""
    kind, is_list = _base_type(annotation)
    if value is None:
        return None
    if is_list:
        if param.default is None and len(value) == 0:
            return None
        return [Path(v) if kind is Path and isinstance(v, str) else v for v in value]
    return Path(value) if kind is Path and isinstance(value, str) else value


def dataclass_defaults(cls: Any) -> dict[str, Any]:
    """The default of each field of the dataclass ``cls``."""
    return {f.name: (f.default_factory() if f.default_factory is not MISSING else f.default)
            for f in fields(cls)}


@dataclass(frozen=True)
class OptionGroup:
    """Options declared once: ``options`` maps each field of the value the group builds to
    its declaration (``Annotated[type, typer.Option(...)]``), in --help order; ``build(**values)``
    makes the value (a dataclass, or ``dict``); ``defaults`` are each field's default
    (``REQUIRED``: none); ``convert`` maps a field's parsed value to the built value;
    ``hidden`` fields are no options (a command may fix them: ``WORKLOAD(default_size=...)``);
    ``annotate(field, defaults)`` may return a command's own declaration of a field, given
    that command's defaults (e.g. a help text that names them). The built value is kept in
    ``ctx.meta[key]``."""

    key: str
    build: Callable[..., Any]
    options: dict[str, Any]
    defaults: dict[str, Any]
    convert: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    hidden: tuple[str, ...] = ()
    annotate: Optional[Callable[[str, dict[str, Any]], Any]] = None

    def __call__(self, only: Optional[tuple[str, ...]] = None, *,
                 annotations: Optional[dict[str, Any]] = None, **defaults: Any) -> "GroupUse":
        """The group as one command takes it: ``only`` these options (the others keep their
        default, or the value ``defaults`` gives), ``defaults`` for this command,
        ``annotations`` its own declarations of some fields. TypeError for a name that is
        not a field."""
        unknown = (set(defaults) - set(self.hidden) | set(only or ())
                   | set(annotations or ())) - set(self.options)
        if unknown:
            what = self.build.__name__ if isinstance(self.build, type) else self.key
            raise TypeError(f"not {what} options: {', '.join(sorted(unknown))}")
        return GroupUse(self, tuple(n for n in self.options if only is None or n in only),
                        dict(defaults), dict(annotations or {}))

    def of(self, ctx: typer.Context) -> Any:
        """The value the group built for the command that runs in ``ctx``."""
        return built(ctx, self.key)


def built(ctx: typer.Context, key: str) -> Any:
    """The value the group of ``key`` built for the command that runs in ``ctx`` (for groups
    made per command, such as an analysis's own parameters)."""
    return ctx.meta[f"nsys_mine.{key}"]


@dataclass(frozen=True)
class GroupUse:
    """One command's use of an ``OptionGroup`` (made by calling the group)."""

    group: OptionGroup
    names: tuple[str, ...]  # the fields that are options of this command, in --help order
    defaults: dict[str, Any]
    annotations: dict[str, Any]

    def declaration(self, name: str) -> tuple[Any, Any]:
        """(declaration, default) of the option of field ``name`` in this command."""
        g = self.group
        given = {**g.defaults, **self.defaults}
        own = self.annotations.get(name)
        if own is None and g.annotate is not None:
            own = g.annotate(name, given)
        return own or g.options[name], given[name]

    def params(self) -> list[Any]:
        """Typer's parameters of this command's options of the group, in --help order."""
        return [typer_param(n, *self.declaration(n)) for n in self.names]

    def take(self, ctx: Any, params: list[Any]) -> None:
        """Take the group's values out of ``ctx.params`` (``params``: the command's
        parameters) and keep the built value in ``ctx.meta``."""
        g = self.group
        by_name = {p.name: p for p in params}
        values = {}
        for n in self.names:
            value = plain_value(by_name[n], self.declaration(n)[0], ctx.params.pop(n))
            values[n] = g.convert[n](value) if n in g.convert else value
        fixed = {n: v for n, v in self.defaults.items() if n not in self.names}
        ctx.meta[f"nsys_mine.{g.key}"] = g.build(**{**fixed, **values})


class GroupedCommand(typer.core.TyperCommand):
    """A Typer command with option groups (``groups``): their options come first, then the
    command function's own. ``invoke`` takes the groups' values out of ``ctx.params``, builds
    each group's value into ``ctx.meta`` (``GROUP.of(ctx)`` reads it), then runs the function
    with its own options."""

    def __init__(self, *args: Any, groups: tuple[GroupUse, ...] = (), **kwargs: Any) -> None:
        self.groups = groups
        self._params: Optional[list[Any]] = None
        self._own: list[Any] = []
        super().__init__(*args, **kwargs)

    @property
    def params(self) -> list[Any]:
        """The groups' parameters, then the function's own; the groups' are made when first
        asked for (when the command runs or shows its help), so that a start-up pays only for
        the command it runs."""
        if self._params is None:
            self._params = [*(p for use in self.groups for p in use.params()), *self._own]
        return self._params

    @params.setter
    def params(self, own: list[Any]) -> None:
        self._own, self._params = list(own), None

    def invoke(self, ctx: Any) -> Any:
        """Build the groups' values into ``ctx.meta`` (their options taken out of
        ``ctx.params``), then run the command function with its own options."""
        for use in self.groups:
            use.take(ctx, self.params)
        return super().invoke(ctx)


def grouped(*uses: GroupUse, base: type[GroupedCommand] = GroupedCommand,
            **attrs: Any) -> Any:
    """Typer's ``cls=`` for a command with the option groups ``uses``: ``base`` made with
    them (``attrs``: more keywords of ``base``, such as the analysis of its command)."""
    return functools.partial(base, groups=tuple(uses), **attrs)


def choice(values: tuple[str, ...] | list[str], metavar: str | None = None
           ) -> dict[str, Any]:
    """``typer.Option`` arguments for a choice among ``values`` (the library's own tuple, so
    a new value cannot be missing from the CLI): the metavar lists them (or is ``metavar``,
    where the list would narrow the help at 80 columns: the help then names them), and
    anything else is a usage error naming them."""
    allowed = tuple(values)

    def check(value: Any) -> Any:
        items = value if isinstance(value, (list, tuple)) else [value]
        for item in items:
            if item is not None and item not in allowed:
                raise typer.BadParameter(f"{item!r} is not one of {', '.join(allowed)}")
        return value

    return {"callback": check, "metavar": metavar or "|".join(allowed)}


class CheckedPath(TyperPath):
    """Typer's path type, after ``nsys_parsers.paths.check_path``: a path no file system can
    hold is one ``Error:`` line, not the ValueError or OSError of Typer's own ``stat``."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        from nsys_parsers.paths import check_path

        if isinstance(value, (str, os.PathLike)):
            flag = f"{param.opts[0]}" if param is not None and param.opts else "a path"
            check_path(value, flag)
        return super().convert(value, param, ctx)


def param_type(p: Param) -> Any:
    """The Typer declaration of a ``Param``: ``Annotated[type, typer.Option(...)]`` (or
    ``typer.Argument`` for an argument)."""
    base: Any = List[p.type] if p.multiple else p.type  # type: ignore[name-defined]
    if not p.required and p.default is None and p.type is not bool:
        base = Optional[base]
    if p.argument:
        return Annotated[base, typer.Argument(help=p.help, metavar=p.flags[0],
                                              show_default=False)]
    extra: dict[str, Any] = {}
    if p.choices:
        extra.update(choice(p.choices, p.metavar))
    elif p.metavar:
        extra["metavar"] = p.metavar
    if p.minimum is not None:
        extra["min"] = p.minimum
    if p.maximum is not None:
        extra["max"] = p.maximum
    if p.panel:
        extra["rich_help_panel"] = p.panel
    if p.type is Path:
        extra["click_type"] = CheckedPath(dir_okay=False, path_type=Path)
    if p.required or p.default is None:
        extra["show_default"] = False
    return Annotated[base, typer.Option(*p.flags, help=p.help, **extra)]


def param_group(key: str, params: tuple[Param, ...], build: Callable[..., Any] = dict,
                defaults: Optional[dict[str, Any]] = None) -> OptionGroup:
    """``params`` as one group that builds ``build(**values)`` (default: the dict of the
    values by name); ``defaults``: other defaults than the declarations'."""
    given = {p.name: REQUIRED if p.required else p.default for p in params}
    return OptionGroup(key, build, {p.name: param_type(p) for p in params},
                       {**given, **(defaults or {})})
