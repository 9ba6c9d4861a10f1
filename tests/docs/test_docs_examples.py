"""Docs examples are real: every ``<!-- file: PATH -->`` block in docs/ and the
README equals that file, and the files themselves are exercised here or by
the tests named in the docs."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
MARKER = re.compile(r"<!-- file: (?P<path>[^ ]+) -->\n```[a-z]*\n(?P<body>.*?)```", re.S)


def _blocks():
    for doc in DOCS:
        if not doc.exists():
            continue
        for m in MARKER.finditer(doc.read_text()):
            yield pytest.param(doc, m.group("path"), m.group("body"), id=f"{doc.name}:{m.group('path')}")


@pytest.mark.parametrize("doc,path,body", list(_blocks()))
def test_doc_block_matches_file(doc, path, body):
    target = ROOT / path
    assert target.exists(), f"{doc.name} shows {path}, which does not exist"
    assert body == target.read_text(), f"{doc.name}: the block for {path} differs from the file"


def test_there_are_doc_blocks():
    assert len(list(_blocks())) >= 1
