"""Deeply nested flow collections are refused before PyYAML parses them
(its parser slows down quadratically with nesting)."""

from __future__ import annotations

import time

from twistgw.config.loader import MAX_FLOW_NESTING, parse_yaml_text


def test_deep_flow_nesting_refused_fast() -> None:
    text = "k: " + "[" * 5000 + "]" * 5000
    start = time.perf_counter()
    docs, issues = parse_yaml_text(text, "deep.yaml")
    assert docs == []
    assert [str(i) for i in issues] == [
        f"deep.yaml: invalid YAML: brackets nested deeper than {MAX_FLOW_NESTING} levels"]
    assert time.perf_counter() - start < 1.0


def test_brackets_in_quotes_and_comments_do_not_count() -> None:
    text = "a: '" + "[" * 500 + "'\nb: \"" + "{" * 500 + "\"  # " + "[" * 500 + "\n"
    docs, issues = parse_yaml_text(text)
    assert issues == []
    assert docs[0].data == {"a": "[" * 500, "b": "{" * 500}


def test_ordinary_nesting_is_fine() -> None:
    text = "k: " + "[" * MAX_FLOW_NESTING + "1" + "]" * MAX_FLOW_NESTING
    docs, issues = parse_yaml_text(text)
    assert issues == [] and docs
