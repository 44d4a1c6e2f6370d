"""Let mypy see kafka-python's message classes: kafka-python ships a `.pyi` stub beside each
of its protocol modules (generated from Kafka's JSON message schemas, one class per API with
every field typed) but no `py.typed` marker, so type checkers ignore them. This writes a
partial stub-only package (PEP 561), `kafka-stubs`, into the virtualenv's site-packages:
those stubs, and for each of their packages an `__init__.pyi` re-exporting as the package's
`__init__.py` does. Modules without a stub stay as they are (untyped). Run by the Makefile
after every install of the environment; it writes only inside the virtualenv."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import kafka


def build(package: Path) -> Path:
    stubs = package.with_name(package.name + "-stubs")
    shutil.rmtree(stubs, ignore_errors=True)
    found = sorted(package.rglob("*.pyi"))
    if not found:
        raise SystemExit(f"kafka_stubs: no .pyi files in {package} (kafka-python>=3.0.12 ships them)")
    for stub in found:
        target = stubs / stub.relative_to(package)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(stub, target)
    for folder in sorted(p for p in stubs.rglob("*") if p.is_dir()):
        init = folder / "__init__.pyi"
        runtime = package / folder.relative_to(stubs) / "__init__.py"
        if not init.exists():  # the top-level package has none: the rest of kafka-python stays as it is
            init.write_text(runtime.read_text() if runtime.exists() else "")
    (stubs / "py.typed").write_text("partial\n")
    return stubs


if __name__ == "__main__":
    where = build(Path(kafka.__file__).parent)
    print(f"kafka_stubs: {where}", file=sys.stderr)
