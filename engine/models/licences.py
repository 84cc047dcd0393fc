"""The licence and terms texts behind a model's `licence` string, shown before anything is downloaded.

The texts live in `licences/` beside this module, each copied byte for byte from the source its index entry names
(`licences/index.toml`, which also says which words select it). The lookup reads the wording of the licence string
(licence identifiers and names such as "Apache-2.0", "CC BY-NC 4.0", "S-Lab License", "InsightFace", "iBUG 300-W"),
never model ids, so a new model needs no code here: its licence string names its terms.

- Words compare case-blind, punctuation counting as space, whole words only: "CC BY-NC 4.0" selects the
  NonCommercial licence and not "CC BY 4.0"; "GPL-3.0" does not select inside "AGPL-3.0".
- Where the index holds a project's own copy of a licence (its copyright line), the copy replaces the generic text
  when the licence string or the model's homepage names that project: "BSD-3-Clause" with homepage
  github.com/xinntao/Real-ESRGAN gives Real-ESRGAN's LICENSE, "BSD-3-Clause" alone the BSD template.
- Terms without a published text (ResearchRAIL-MS, OpenRAIL-MS, OpenRAIL-M, "no licence", "unknown", a bare
  "non-commercial") give no text; `summary` states them in one line and says where they live upstream.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, model_validator

LICENCES_DIR = Path(__file__).with_name("licences")
INDEX_PATH = LICENCES_DIR / "index.toml"


@dataclass(frozen=True)
class LicenceText:
    """One bundled text: `text` is the full licence (or the upstream statement of terms, for projects that publish
    no licence file), line endings as "\\n"; `source` is where it was copied from (repo@commit:path, or a Debian
    path); `terms` is the same in one line."""

    id: str
    title: str
    commercial_use: bool
    source: str
    text: str
    terms: str = ""


class Terms(BaseModel):
    """One entry of `licences/index.toml` (its header comment describes the fields)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    title: str
    commercial_use: bool
    terms: str
    source: str
    match: tuple[str, ...] = ()
    variant_of: str | None = None
    project: tuple[str, ...] = ()
    fallback: bool = False
    file: str | None = None
    sha256: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Terms:
        if (self.file is None) != (self.sha256 is None):
            raise ValueError(f"{self.id}: `file` and `sha256` go together")
        if self.variant_of is None and (not self.match or self.project):
            raise ValueError(f"{self.id}: an entry needs `match` words; `project` words are for a variant")
        if self.variant_of is not None and (self.match or not self.project or self.fallback):
            raise ValueError(f"{self.id}: a variant has `project` words and takes its base's `match` words")
        return self


def _words(text: str) -> str:
    """Lower-case words separated by single spaces, padded with one space each side for whole-word search."""
    return " " + " ".join(re.findall(r"[0-9a-z]+", text.casefold())) + " "


def _position(phrases: tuple[str, ...], words: str) -> int | None:
    """Where the first of `phrases` occurs in `words` (from `_words`), or None."""
    found = [words.find(_words(phrase)) for phrase in phrases]
    hits = [at for at in found if at >= 0]
    return min(hits) if hits else None


@lru_cache(maxsize=1)
def index() -> tuple[Terms, ...]:
    """All entries of `licences/index.toml`, in its order (read once; the file ships with the code)."""
    with INDEX_PATH.open("rb") as handle:
        entries = tuple(Terms.model_validate(raw) for raw in tomllib.load(handle)["terms"])
    ids = {entry.id for entry in entries}
    if len(ids) != len(entries):
        raise ValueError(f"{INDEX_PATH.name}: an id is used twice")
    for entry in entries:
        if entry.variant_of is not None and entry.variant_of not in ids:
            raise ValueError(f"{entry.id}: variant of unknown entry {entry.variant_of!r}")
    return entries


def licence_terms(licence: str, homepage: str = "") -> list[Terms]:
    """The index entries a licence string selects, in the order the string names them.

    An entry is selected when one of its `match` words is in `licence`; a project's own copy then replaces it when
    one of the copy's `project` words is in `licence` or `homepage` (the model's homepage URL). Fallback entries
    count only when nothing else is selected. Empty when the string names no known terms."""
    words, project_words = _words(licence), _words(f"{licence} {homepage}")
    entries = index()
    found: list[tuple[int, Terms]] = []
    for base in (entry for entry in entries if entry.variant_of is None):
        at = _position(base.match, words)
        if at is None:
            continue
        copies = [e for e in entries if e.variant_of == base.id and _position(e.project, project_words) is not None]
        found.append((at, copies[0] if copies else base))
    chosen = [(at, entry) for at, entry in found if not entry.fallback] or found
    return [entry for _, entry in sorted(chosen, key=lambda pair: pair[0])]


def licence_texts(licence: str, homepage: str = "") -> list[LicenceText]:
    """The full texts bundled for a licence string (see `licence_terms` for what selects what); terms that have no
    published text are left out, so the list may be shorter than the terms named, or empty."""
    return [
        LicenceText(entry.id, entry.title, entry.commercial_use, entry.source, _read(entry.file), entry.terms)
        for entry in licence_terms(licence, homepage)
        if entry.file is not None
    ]


def summary(licence: str, homepage: str = "") -> str:
    """One line per terms the licence string names: title, the terms in brief, and either that the full text is
    bundled or, when it is not, where the terms live upstream. A string that names no known terms says so."""
    entries = licence_terms(licence, homepage)
    if not entries:
        where = homepage or "the model's homepage"
        return f'No licence text is bundled for "{licence}": facestudio does not know its terms; read them at {where}.'
    lines = []
    for entry in entries:
        use = "commercial use allowed" if entry.commercial_use else "NO commercial use"
        if entry.file is not None:
            lines.append(f"{entry.title}: {entry.terms} ({use}; full text bundled)")
        else:
            lines.append(f"{entry.title}: {entry.terms} ({use}; no full text is bundled; upstream: {entry.source})")
    return "\n".join(lines)


def _read(filename: str) -> str:
    return (LICENCES_DIR / filename).read_bytes().decode("utf-8").replace("\r\n", "\n")
