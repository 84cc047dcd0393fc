"""TEMPORARY placeholder until the licences branch merges (not to be committed)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class LicenceText:
    id: str
    title: str
    commercial_use: bool
    source: str
    text: str


def licence_texts(licence: str) -> list[LicenceText]:
    return []
