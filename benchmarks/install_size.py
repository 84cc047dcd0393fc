"""How much disk an install takes: the distributions an install profile brings, measured where they are.

Reads the profile's requirements — pyproject.toml's dependencies (the requirement files it names) and those of
the extras named, or a requirement file such as requirements/cpu.txt (`--requirements`) — follows each
distribution's own requirements
through the installed metadata of this environment (markers evaluated for this machine), and adds up the size on
disk of every file each distribution's RECORD lists, plus pip (a fresh venv has it). Run it with the venv the
install made (`.venv/bin/python benchmarks/install_size.py`); it prints one line per distribution, largest first,
and the total. A distribution the install needs that is not installed here is listed as missing (its size unknown).

    python benchmarks/install_size.py                # the default install: pip install .
    python benchmarks/install_size.py --extras test  # pip install ".[test]"
    python benchmarks/install_size.py --requirements requirements/cpu.txt   # the CPU profile
    python benchmarks/install_size.py --json sizes.json
"""

from __future__ import annotations

import argparse
import json
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent


def requirement_lines(path: Path) -> list[str]:
    """The requirements of a requirement file, those of the files it includes (`-r FILE`) first; comments and
    blank lines left out."""
    lines: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            lines += requirement_lines(path.parent / line[3:].strip())
        elif line:
            lines.append(line)
    return lines


def wanted(extras: list[str], requirements: Path | None = None) -> list[Requirement]:
    """The project's own requirements on this machine for `pip install ".[extras]"`, or for `pip install -r
    requirements` (the CPU profile)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    project = config["project"]
    if requirements is not None:
        lines = requirement_lines(requirements)
    else:
        files = config["tool"]["setuptools"]["dynamic"]["dependencies"]["file"]
        lines = [line for name in files for line in requirement_lines(ROOT / name)]
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    return [r for r in map(Requirement, lines) if r.marker is None or r.marker.evaluate()]


def closure(roots: list[Requirement]) -> tuple[dict[str, metadata.Distribution], list[str]]:
    """Every installed distribution the requirements pull in (by canonical name), and those not installed."""
    found: dict[str, metadata.Distribution] = {}
    missing: list[str] = []
    todo: list[tuple[Requirement, set[str]]] = [(r, set(r.extras)) for r in roots]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req, extras = todo.pop()
        name = canonicalize_name(req.name)
        if (name, frozenset(extras)) in seen:
            continue
        seen.add((name, frozenset(extras)))
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            missing.append(req.name)
            continue
        found[name] = dist
        for line in dist.requires or []:
            sub = Requirement(line)
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if sub.marker is None or any(sub.marker.evaluate(env) for env in envs):
                todo.append((sub, set(sub.extras)))
    return found, sorted(set(missing))


def size_on_disk(dist: metadata.Distribution) -> int:
    """Bytes of the files the distribution's RECORD lists (those present; each counted once)."""
    paths = {Path(dist.locate_file(f)).resolve() for f in dist.files or []}
    return sum(p.stat().st_size for p in paths if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extras", nargs="*", default=[], help="extras of pyproject.toml, as in .[EXTRA,…]")
    parser.add_argument("--requirements", type=Path, help="a requirement file instead of pyproject.toml's dependencies")
    parser.add_argument("--top", type=int, default=15, help="distributions listed one by one (default 15)")
    parser.add_argument("--json", type=Path, help="write {extras, total_bytes, distributions, missing} here")
    args = parser.parse_args()
    found, missing = closure([*wanted(args.extras, args.requirements), Requirement("pip")])
    sizes = sorted(((size_on_disk(d), d.metadata["Name"], d.version) for d in found.values()), reverse=True)
    total = sum(s for s, _, _ in sizes)
    install = f'pip install ".[{",".join(args.extras)}]"' if args.extras else "pip install ."
    if args.requirements is not None:
        install = f"pip install -r {args.requirements}" + (f' ".[{",".join(args.extras)}]"' if args.extras else "")
    for size, name, version in sizes[: args.top]:
        print(f"{size / 1e6:9.1f} MB  {name} {version}")
    rest = sizes[args.top :]
    if rest:
        print(f"{sum(s for s, _, _ in rest) / 1e6:9.1f} MB  {len(rest)} others")
    print(f"{install}: {len(sizes)} distributions, {total / 1e9:.2f} GB on disk")
    if missing:
        print(f"not installed here, so not counted: {', '.join(missing)}")
    if args.json:
        rows = [{"name": n, "version": v, "bytes": s} for s, n, v in sizes]
        args.json.write_text(
            json.dumps({"extras": args.extras, "total_bytes": total, "distributions": rows, "missing": missing})
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
