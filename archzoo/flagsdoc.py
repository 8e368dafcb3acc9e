"""docs/flags.md, every flag of every built-in architecture, from their config classes:
``python -m archzoo.flagsdoc > docs/flags.md`` (tests/test_config.py keeps the page equal to
the code). It lives above both archzoo/config.py and the architecture registry, which it
reads for the names and config classes."""

from __future__ import annotations

from archzoo.architectures import ARCHITECTURES
from archzoo.config import RunConfig, flag_fields, flag_name


def flags_markdown(configs: dict[str, type[RunConfig]]) -> str:
    """docs/flags.md: the common flags, then each architecture's own, with help and default."""
    lines = ["# Flags", "",
             "Generated from the config dataclasses in `archzoo/config.py` by "
             "`python -m archzoo.flagsdoc > docs/flags.md`; `archzoo run ARCH --help` shows the "
             "same text, and a test keeps this page equal to the code. The papers behind the "
             "hyper-parameters are in [references.md](references.md). Every switch (a default "
             "of `False` or `True`) also has a form with no- before its name, such as "
             "`--no-prioritized`, which turns off what a preset (`--config`) turned on.", ""]
    common = {f.name for f in flag_fields(RunConfig)}

    def table(title: str, cls: type[RunConfig], names: set[str] | None) -> None:
        lines.extend([f"## {title}", "", f"`{cls.__name__}`: {(cls.__doc__ or '').strip()}",
                      "", "| flag | default | meaning |", "| --- | --- | --- |"])
        for f in flag_fields(cls):
            if names is None or f.name not in names:
                choices = f.metadata["choices"]
                meaning = f.metadata["help"] + (f" ({'/'.join(choices)})" if choices else "")
                lines.append(f"| `{flag_name(f.name)}` | `{f.default!r}` | {meaning} |")
        lines.append("")

    table("every architecture", RunConfig, None)
    for name, cls in configs.items():
        table(f"archzoo run {name}", cls, common)
    return "\n".join(lines)


def main() -> None:
    print(flags_markdown({a.name: a.config for a in ARCHITECTURES.values()}))


if __name__ == "__main__":
    main()
