"""Options shared by every command, and the one output writer."""

from __future__ import annotations

import enum
import functools
import inspect
import sys
import typing
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from reports.render import FORMATS, Rendered


def choice_enum(name: str, values: "tuple[str, ...] | list[str]") -> Any:
    """A str Enum for a Typer choice option, built from the tuple of values it mirrors
    (so a new value in the library cannot be missing from the CLI)."""
    return enum.Enum(name, {v: v for v in values}, type=str)


Format = choice_enum("Format", FORMATS)


FormatOpt = Annotated[
    Format,
    typer.Option("--format", "-f", help="Output format: table (rich), md, csv, json or latex."),
]
OutputOpt = Annotated[
    Optional[Path],
    typer.Option("--output", "-o", help="Write the output to this file instead of stdout.",
                 dir_okay=False, writable=True, metavar="FILE"),
]
ExportArg = Annotated[
    Path,
    typer.Argument(help="An nsys export: .sqlite, or .nsys-rep/.qdrep (exported with nsys).",
                   show_default=False),
]


def emit(rendered: Rendered, output: Path | None, width: int | None = None) -> None:
    """Write rendered output to stdout or a file; the only place commands print results."""
    if rendered.text is not None:
        if output is not None:
            output.write_text(rendered.text, encoding="utf-8")
        else:
            sys.stdout.write(rendered.text)
        return
    from rich.console import Console

    if output is not None:
        with output.open("w", encoding="utf-8") as fh:
            console = Console(file=fh, width=width or 160, no_color=True, soft_wrap=False)
            for part in rendered.rich:
                console.print(part)
        return
    console = Console(width=width or (None if sys.stdout.isatty() else 200))
    for part in rendered.rich:
        console.print(part)


def option_group(cls: Any, option_types: dict[str, Any], param: str, *,
                 annotate: Callable[[str, Any], Any] | None = None,
                 convert: dict[str, Callable[[Any], Any]] | None = None,
                 ) -> Callable[..., Callable[[Callable[..., Any]], Callable[..., Any]]]:
    """A decorator factory that gives a Typer command one option per field of the dataclass
    ``cls`` (declared in ``option_types``, in --help order) and hands them to the command as
    one ``param: cls`` argument. ``@group(field=value)`` changes a default for one command;
    ``annotate(field, default)`` may return a per-command declaration (e.g. a help text that
    names that default); ``convert`` maps a field's CLI value to the dataclass value. Enum
    values become their ``.value``. Groups stack: outer groups' options come first."""
    names = list(option_types)
    field_defaults = {f.name: (f.default_factory() if f.default_factory is not MISSING  # type: ignore[misc]
                               else f.default) for f in fields(cls)}
    convert = convert or {}

    def factory(**defaults: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        unknown = set(defaults) - set(names)
        if unknown:
            raise TypeError(f"not {cls.__name__} options: {', '.join(sorted(unknown))}")

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
                   for p in inspect.signature(fn, eval_str=True).parameters.values()
                   if p.name != param]
            params = []
            for name in names:
                default = defaults.get(name, field_defaults[name])
                annotation = option_types[name]
                enum_type = _enum_of(annotation)
                if enum_type is not None and default is not None:
                    default = enum_type(default)
                if annotate is not None:
                    annotation = annotate(name, default) or annotation
                params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                                default=default, annotation=annotation))

            @functools.wraps(fn)
            def command(**kwargs: Any) -> Any:
                values = {n: kwargs.pop(n) for n in names}
                values = {k: convert[k](v) if k in convert else
                          (v.value if isinstance(v, enum.Enum) else v)
                          for k, v in values.items()}
                return fn(**{param: cls(**values)}, **kwargs)

            all_params = params + own
            del command.__wrapped__  # Typer must see the new signature, not fn's
            command.__signature__ = inspect.Signature(all_params)  # type: ignore[attr-defined]
            command.__annotations__ = {p.name: p.annotation for p in all_params}
            return command

        return decorate

    return factory


def _enum_of(annotation: Any) -> Any:
    """The Enum type of an ``Annotated[SomeEnum, typer.Option(...)]`` declaration, if any."""
    base = typing.get_args(annotation)[0] if typing.get_args(annotation) else annotation
    return base if isinstance(base, type) and issubclass(base, enum.Enum) else None
