"""A ``twisted.trial.unittest.TestCase`` for the in-memory suite: the same
module runs under ``trial`` and under ``pytest``, with the same tests.

Test methods may use what pytest users write, expressed so that both runners
see the same methods:

* ``@pytest.mark.parametrize(...)`` (stacked, ``pytest.param(..., id=...)``
  included) is expanded when the class is created into one method per case
  (``test_name__0``, ``test_name__1``, ... with the case's id when it has
  one), so trial and pytest count each case once.
* Arguments named ``tmp_path`` (a fresh ``pathlib.Path``, removed after the
  test), ``monkeypatch`` (``pytest.MonkeyPatch``, undone after the test) and
  ``capsys`` (``readouterr()`` of what the test printed) are filled in, as
  is any argument named after a function of the module (or a method of the
  class) decorated with :func:`fixture`, itself given its arguments the same
  way (called once per test; a generator fixture's code after ``yield``
  runs as a cleanup).
* ``async def`` tests return a coroutine, which trial waits for.

Plain ``assert`` statements and ``pytest.raises`` work under both runners.
"""

from __future__ import annotations

import functools
import inspect
import io
import itertools
import pathlib
import re
import shutil
import sys
import tempfile
from typing import Any, Callable, Iterator

import pytest
from twisted.trial import unittest

__all__ = ["TestCase", "fixture"]

_FIXTURE = "_twistgw_trial_fixture"


def fixture(method: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a function (or a method) as the value of test arguments of the
    same name; a generator: what follows its ``yield`` is the cleanup."""
    setattr(method, _FIXTURE, True)
    return method


class _Captured:
    def __init__(self, out: str, err: str) -> None:
        self.out, self.err = out, err


class _Capsys:
    """pytest's ``capsys``, for what a test prints itself."""

    def __init__(self, case: unittest.TestCase) -> None:
        self._saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
        case.addCleanup(self._restore)

    def _restore(self) -> None:
        sys.stdout, sys.stderr = self._saved

    def readouterr(self) -> _Captured:
        out, err = sys.stdout.getvalue(), sys.stderr.getvalue()
        sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
        return _Captured(out, err)


def _cases(function: Callable[..., Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(suffix, arguments)`` for every combination of the function's
    ``@pytest.mark.parametrize`` marks (one ``("", {})`` when it has none)."""
    marks = [m for m in getattr(function, "pytestmark", []) if m.name == "parametrize"]
    if not marks:
        return [("", {})]
    per_mark = []
    for mark in reversed(marks):  # pytest applies the innermost decorator first
        names = mark.args[0]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        ids = mark.kwargs.get("ids")
        options = []
        for i, value in enumerate(mark.args[1]):
            case_id = None
            if hasattr(value, "values") and hasattr(value, "marks"):  # pytest.param(...)
                case_id, value = value.id, value.values
            elif len(names) == 1:
                value = (value,)
            if case_id is None and ids is not None and not callable(ids):
                case_id = ids[i]
            options.append((str(i) if case_id is None else f"{i}_{case_id}", dict(zip(names, value, strict=True))))
        per_mark.append(options)
    out = []
    for combination in itertools.product(*per_mark):
        suffix = "_".join(s for s, _ in combination)
        arguments: dict[str, Any] = {}
        for _, values in combination:
            arguments.update(values)
        out.append((re.sub(r"\W", "_", suffix), arguments))
    return out


def _method(function: Callable[..., Any], given: dict[str, Any], wanted: list[str]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(function):
        @functools.wraps(function)
        async def run_async(self: "TestCase") -> Any:
            return await function(self, **given, **self._fill(wanted))

        method = run_async
    else:
        @functools.wraps(function)
        def run(self: "TestCase") -> Any:
            return function(self, **given, **self._fill(wanted))

        method = run
    method.pytestmark = [m for m in getattr(function, "pytestmark", []) if m.name != "parametrize"]
    del method.__wrapped__  # runners must see a method taking only self
    return method


class TestCase(unittest.TestCase):
    """See the module docstring."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, function in list(vars(cls).items()):
            if not name.startswith("test") or not callable(function):
                continue
            parameters = list(inspect.signature(function).parameters)[1:]
            cases = _cases(function)
            if cases == [("", {})] and not parameters:
                continue
            delattr(cls, name)
            for suffix, given in cases:
                wanted = [p for p in parameters if p not in given]
                method_name = f"{name}__{suffix}" if suffix else name
                assert method_name not in vars(cls), f"{cls.__name__}.{method_name} twice"
                setattr(cls, method_name, _method(function, given, wanted))

    def temp_path(self) -> pathlib.Path:
        """This test's ``tmp_path`` (for ``setUp``): removed after the test.
        Not trial's ``mktemp()``, which is relative to the working directory
        (under pytest, the checkout)."""
        return self._fixture("tmp_path")

    def _fill(self, names: list[str]) -> dict[str, Any]:
        return {name: self._fixture(name) for name in names}

    def _fixture(self, name: str) -> Any:
        """One value per test and name, as pytest shares a fixture."""
        cache = self.__dict__.setdefault("_fixture_values", {})
        if name not in cache:
            cache[name] = self._make_fixture(name)
        return cache[name]

    def _make_fixture(self, name: str) -> Any:
        if name == "tmp_path":
            directory = tempfile.mkdtemp(prefix="twistgw-test-")
            self.addCleanup(shutil.rmtree, directory, True)
            return pathlib.Path(directory)
        if name == "monkeypatch":
            patcher = pytest.MonkeyPatch()
            self.addCleanup(patcher.undo)
            return patcher
        if name == "capsys":
            return _Capsys(self)
        method = getattr(type(self), name, None)
        if method is not None and getattr(method, _FIXTURE, False):
            value = method(self, **self._fill(list(inspect.signature(method).parameters)[1:]))
        else:
            function = getattr(sys.modules[type(self).__module__], name, None)
            if function is None or not getattr(function, _FIXTURE, False):
                raise TypeError(f"{type(self).__name__}: no fixture for the test argument {name!r}")
            value = function(**self._fill(list(inspect.signature(function).parameters)))
        if inspect.isgenerator(value):
            generator: Iterator[Any] = value
            value = next(generator)
            self.addCleanup(lambda: next(generator, None))
        return value
