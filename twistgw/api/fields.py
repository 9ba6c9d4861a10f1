"""The located field reader: the one way the configuration loader and every
plugin read a configuration shape and report what is wrong with it.

A :class:`FieldReader` checks one value at a time (``mapping``, ``string``,
``integer``, ``duration``, ``sequence``...) at a **field path** (``("spec",
"routes", 0, "matchers")``), records each problem it finds with that path,
and goes on, so ``twistgw check`` lists every problem of a configuration at
once. Where a problem goes is the reader's *sink*:

* the configuration loader (``twistgw.config``) turns each problem into a
  ``ConfigIssue`` with file, line, resource and field;
* a plugin uses :class:`Problems` (a ``FieldReader`` whose sink collects
  :class:`~twistgw.api.types.OptionsError` s); the core then locates them
  below the plugin's options key, in the same format.

Two ways to read, one set of checks and wordings:

* **A value at a path** (``r.string(value, path)``): the value, typed, or
  the problem recorded and the part given up (the exception :meth:`fail`
  makes ends the innermost ``with r.part():``)::

      with r.part():
          m = r.mapping(raw, ("ldap",), {"address", "userDnTemplate"}, required=("address",))
          address = r.string(m["address"], ("ldap", "address"))

* **A mapping's fields by name** (``f = r.fields(raw, path, allowed)``, a
  :class:`Fields`): ``f.string("address")``, ``f.duration("timeout", 5.0)``,
  ``f.fields("tls", {...})``. A field's problem is recorded and its default
  returned, so the next field is read too; ``r.raise_if_any()`` (plugins)
  or the loader then reports them all.

**Field names.** Gloo reads its resources with protobuf's JSON mapping,
which takes a field's proto name (``retriable_status_codes``) as well as its
lowerCamelCase JSON name (``retriableStatusCodes``). :meth:`FieldReader.mapping`
does the same for the fields it is given: the mapping it returns has the
camelCase names, and a field written both ways is a problem naming both.
Free-form mappings (header names, labels: ``allowed=None``) and Kubernetes'
own objects (``proto_names=False``) keep their keys as written. Problems name
the camelCase field; where the spelling written differs, the loader adds it
(:func:`written_path`).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Collection, Iterable, Iterator, Mapping, NamedTuple, TypeVar

from twistgw.api.durations import DURATION_UNITS, duration_problem, parse_duration
from twistgw.api.fieldnames import named, proto_name, refused_removed, unknown_field, written_field, written_path
from twistgw.api.headers import is_token
from twistgw.api.types import OptionsError, recorded_error

__all__ = ["DURATION_UNITS", "FieldReader", "Fields", "Invalid", "Path", "Problems", "REQUIRED", "Ref",
           "parse_duration", "proto_name", "type_name", "unknown_field", "written_field", "written_path"]

#: A field path: mapping keys and list indexes from the top of a resource
#: (or of a plugin's options), e.g. ``("spec", "virtualHost", "routes", 0)``.
Path = tuple[str | int, ...]

_D = TypeVar("_D")


def type_name(value: object) -> str:
    """``a string``, ``an integer``, ``a list``, ``null``... for error messages."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a mapping"}.get(type(value), type(value).__name__)


class Invalid(Exception):
    """Give up on the current part: its problems are already recorded."""


class _Recorded(OptionsError, Invalid):
    """A plugin reader's problems so far (every one recorded), raised to give
    up on a part; when nothing catches it, the core reports them."""


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: The default of a :class:`Fields` read whose field must be written.
REQUIRED: Any = _Required()


class Ref(NamedTuple):
    """A reference to a resource: Gloo's ``ResourceRef`` ``{name, namespace}``."""

    name: str
    namespace: str


class FieldReader:
    """Typed checks of configuration values that record located problems.

    :param report: ``report(path, reason)`` receives each problem.

    Every check takes the value and its path; it returns the value (typed)
    or records the problem and raises the exception :meth:`fail` makes.
    Values from YAML are ``Any`` by nature: the checks are what narrows them.
    """

    def __init__(self, report: Callable[[Path, str], None]) -> None:
        self._report = report
        self._count = 0
        #: whether fields may be written with their proto names (the
        #: default of :meth:`mapping`'s ``proto_names``; the loader turns it
        #: off for Kubernetes' own kinds)
        self.proto_names = True

    # -- recording ----------------------------------------------------------

    def issue(self, path: Path, reason: str) -> None:
        """Record a problem at ``path`` and go on."""
        self._count += 1
        self._report(tuple(path), reason)

    def fail(self, path: Path, reason: str) -> Exception:
        """Record a problem and return the exception that gives up on the
        current part: ``raise r.fail(path, "must start with '/'")``."""
        self.issue(path, reason)
        return self.invalid()

    def invalid(self) -> Exception:
        """The exception that gives up on the current part, whose problems
        are recorded already."""
        return Invalid()

    def count(self) -> int:
        """Problems recorded so far (compare before and after a part)."""
        return self._count

    @contextlib.contextmanager
    def part(self) -> Iterator[None]:
        """Check one independent part: a problem in it is recorded and
        checking goes on after the block, so every problem is reported."""
        try:
            yield
        except Invalid:
            pass

    # -- checks -------------------------------------------------------------

    def mapping(self, value: Any, path: Path, allowed: Iterable[str] | None = None,
                required: tuple[str, ...] = (), *, optional: bool = False,
                proto_names: bool | None = None, names: Collection[str] = (),
                refused: Mapping[str, str] | None = None, what: str | None = None) -> dict[str, Any]:
        """A mapping with string keys; records every unknown and every
        missing field, and gives up only when it is not a mapping or misses
        a required field.

        :param allowed: its fields (None: any key, a free-form mapping). A
            field may be written with its proto name too (``num_retries`` for
            ``numRetries``) unless ``proto_names`` is false (Kubernetes'
            own objects; None: the reader's :attr:`proto_names`); the mapping
            returned has the names of ``allowed``.
        :param names: with ``allowed=None``, the names some of its keys have
            (a route's ``options``: the core's and Gloo's keys beside the
            plugins'): their proto spellings are read as these, other keys
            kept as written.
        :param optional: null reads as an empty mapping.
        :param what: names the value where its path does not (an item of a
            list, a value of a free-form mapping): ``policies.p: a policy
            must be a mapping, got a string``.
        :param refused: fields Gloo has that twistgw refuses, each with the
            reason: one written (not null) is recorded as ``is not supported by
            twistgw: REASON``; the mapping returned leaves them out.
        """
        if value is None and optional:
            value = {}
        if proto_names is None:
            proto_names = self.proto_names
        if not isinstance(value, Mapping):
            named_as = f"{what} " if what is not None and path and what != str(path[-1]) else ""
            raise self.fail(path, f"{named_as}must be a mapping, got {type_name(value)}")
        for key in value:
            if not isinstance(key, str):
                raise self.fail(path, f"keys must be strings, got {key!r}")
        out: Mapping[str, Any] = value
        if refused:
            out = refused_removed(value, path, refused, proto_names, self.issue)
        if allowed is not None:
            known = allowed if isinstance(allowed, (set, frozenset, dict, tuple, list)) else tuple(allowed)
            if any(key not in known for key in out):
                out = named(out, path, known, proto_names, self.issue, strict=True)
        elif names and proto_names and any("_" in key for key in out):
            out = named(out, path, names, True, self.issue, strict=False)
        missing = [key for key in required if key not in out]
        for key in missing:
            self.issue(path + (key,), "is required")
        if missing:
            raise self.invalid()
        return out if isinstance(out, dict) else dict(out)

    def boolean(self, value: Any, path: Path) -> bool:
        if not isinstance(value, bool):
            raise self.fail(path, f"must be true or false, got {type_name(value)}")
        return value

    def string(self, value: Any, path: Path, nonempty: bool = True) -> str:
        """A string; with ``nonempty``, one that is not empty or blank."""
        if not isinstance(value, str):
            raise self.fail(path, f"must be a string, got {type_name(value)}")
        if nonempty and not value.strip():
            raise self.fail(path, "must not be empty")
        return value

    def integer(self, value: Any, path: Path, lo: int | None = None, hi: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"must be an integer, got {type_name(value)}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise self.fail(path, _range(lo, hi, value))
        return value

    def number(self, value: Any, path: Path, lo: float | None = None, hi: float | None = None) -> float:
        """An integer or a decimal number (``12.5``)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.fail(path, f"must be a number, got {type_name(value)}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise self.fail(path, _range(lo, hi, value))
        return float(value)

    def port(self, value: Any, path: Path) -> int:
        """A TCP port, 1 to 65535."""
        return self.integer(value, path, 1, 65535)

    def sequence(self, value: Any, path: Path, nonempty: bool = False, *, optional: bool = False) -> list[Any]:
        """A list; with ``optional``, null reads as an empty one."""
        if value is None and optional:
            return []
        if not isinstance(value, list):
            raise self.fail(path, f"must be a list, got {type_name(value)}")
        if nonempty and not value:
            raise self.fail(path, "must not be empty")
        return value

    def strings(self, value: Any, path: Path, nonempty: bool = False, *, optional: bool = True) -> list[str]:
        """A list of non-empty strings (null: none)."""
        items = self.sequence(value, path, nonempty, optional=optional)
        return [self.string(v, path + (i,)) for i, v in enumerate(items)]

    def header_name(self, value: Any, path: Path) -> str:
        """An HTTP header name (an RFC 9110 token), as written."""
        name = self.string(value, path)
        if not is_token(name):
            raise self.fail(path, f"{name!r} is not a valid HTTP header name")
        return name

    def choice(self, value: Any, path: Path, choices: Iterable[str], what: str = "value") -> str:
        """A string that is one of ``choices``."""
        text = self.string(value, path)
        options = tuple(choices)
        if text not in options:
            raise self.fail(path, f"unknown {what} {text!r} (expected one of: {', '.join(options)})")
        return text

    def labels(self, value: Any, path: Path) -> dict[str, str]:
        """A string → string mapping (Kubernetes labels, a subset's
        values); null reads as empty."""
        m = self.mapping(value, path, optional=True)
        for key, v in m.items():
            self.string(v, path + (key,), nonempty=False)
        return dict(m)

    def duration(self, value: Any, path: Path, lo: float | None = None, hi: float | None = None) -> float:
        """Seconds of a duration (:func:`parse_duration`: ``15s``, ``1.5s``,
        ``250ms``, ``1h30m``, a number of seconds).

        :param lo: the least accepted (None: anything above zero; 0: zero too).
        :param hi: the most accepted (None: no limit).
        """
        seconds = parse_duration(value)
        if seconds is None or (seconds <= 0 if lo is None else seconds < lo) or (hi is not None and seconds > hi):
            raise self.fail(path, duration_problem(value, lo, hi))
        return seconds

    def reference(self, value: Any, path: Path, namespace: str) -> Ref:
        """Gloo's ``ResourceRef``, ``{name, namespace}``; the namespace
        defaults to ``namespace`` (the referring resource's)."""
        m = self.mapping(value, path, ("name", "namespace"), required=("name",))
        name = self.string(m["name"], path + ("name",))
        ns = self.string(m["namespace"], path + ("namespace",)) if m.get("namespace") is not None else namespace
        return Ref(name, ns)

    def fields(self, value: Any, path: Path, allowed: Iterable[str] | None = None,
               required: tuple[str, ...] = (), *, proto_names: bool | None = None,
               refused: Mapping[str, str] | None = None, what: str | None = None) -> "Fields":
        """``value``'s fields, read by name (:class:`Fields`); null reads as
        no field. A value that is not a mapping is recorded, and every read
        of the result gives its default. The arguments are :meth:`mapping`'s."""
        try:
            m = self.mapping(value, path, allowed, optional=True, proto_names=proto_names, refused=refused, what=what)
        except Invalid:
            return Fields(self, path, {}, ok=False)
        for key in required:
            if m.get(key) is None:
                self.issue(path + (key,), "is required")
        return Fields(self, path, m)


def _range(lo: float | None, hi: float | None, value: float) -> str:
    def text(n: float | None) -> str:
        return str(n) if isinstance(n, int) else f"{n:g}"

    if lo is not None and hi is not None:
        return f"must be between {text(lo)} and {text(hi)}, got {text(value)}"
    if lo is not None:
        return f"must be {text(lo)} or more, got {text(value)}"
    return f"must be at most {text(hi)}, got {text(value)}"


class Fields(Mapping[str, Any]):
    """A mapping a :class:`FieldReader` checked, read field by field.

    It is the mapping itself (camelCase names, ``f["name"]``, ``"name" in
    f``), and reads each field at its path: ``f.string("issuer")``,
    ``f.duration("timeout", 5.0)``. A read's **default** is what an absent
    (or null) field reads as; without one (:data:`REQUIRED`) an absent field
    is a problem ("is required") and the read gives None. A field with a
    problem is recorded and reads as its default, so the next field is read
    too.
    """

    def __init__(self, reader: FieldReader, path: Path, values: Mapping[str, Any], ok: bool = True) -> None:
        self.reader = reader
        self.path = path
        self.data = values
        #: False when the value was not a mapping (recorded): every read gives its default
        self.ok = ok

    def __getitem__(self, name: str) -> Any:
        return self.data[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def at(self, *names: str | int) -> Path:
        """The path of a field (or of something inside it)."""
        return self.path + names

    def issue(self, name: str | Path, reason: str) -> None:
        """Record a problem of a field (a name, a path below this mapping,
        or ``()`` for the mapping itself)."""
        self.reader.issue(self.at(name) if isinstance(name, str) else self.path + tuple(name), reason)

    def _read(self, name: str, default: Any, check: Callable[..., Any], *args: Any) -> Any:
        value = self.data.get(name)
        if value is None:
            if default is REQUIRED:
                if self.ok:
                    self.reader.issue(self.at(name), "is required")
                return None
            return default
        try:
            return check(value, self.at(name), *args)
        except Invalid:
            return None if default is REQUIRED else default

    def string(self, name: str, default: _D = REQUIRED, nonempty: bool = True) -> str | _D:
        return self._read(name, default, self.reader.string, nonempty)  # type: ignore[no-any-return]

    def boolean(self, name: str, default: _D = REQUIRED) -> bool | _D:
        return self._read(name, default, self.reader.boolean)  # type: ignore[no-any-return]

    def integer(self, name: str, default: _D = REQUIRED, lo: int | None = None, hi: int | None = None) -> int | _D:
        return self._read(name, default, self.reader.integer, lo, hi)  # type: ignore[no-any-return]

    def number(self, name: str, default: _D = REQUIRED, lo: float | None = None,
               hi: float | None = None) -> float | _D:
        return self._read(name, default, self.reader.number, lo, hi)  # type: ignore[no-any-return]

    def duration(self, name: str, default: _D = REQUIRED, lo: float | None = None,
                 hi: float | None = None) -> float | _D:
        return self._read(name, default, self.reader.duration, lo, hi)  # type: ignore[no-any-return]

    def header_name(self, name: str, default: _D = REQUIRED) -> str | _D:
        return self._read(name, default, self.reader.header_name)  # type: ignore[no-any-return]

    def choice(self, name: str, choices: Iterable[str], default: _D = REQUIRED, what: str = "value") -> str | _D:
        return self._read(name, default, self.reader.choice, tuple(choices), what)  # type: ignore[no-any-return]

    def sequence(self, name: str, nonempty: bool = False) -> list[Any]:
        """A list field (absent: an empty one)."""
        found = self._read(name, [], self.reader.sequence, nonempty)
        return found if isinstance(found, list) else []

    def strings(self, name: str, nonempty: bool = False) -> list[str]:
        """A list of non-empty strings (absent: an empty one)."""
        found = self._read(name, [], self.reader.strings, nonempty)
        return found if isinstance(found, list) else []

    def labels(self, name: str) -> dict[str, str]:
        """A string → string mapping (absent: an empty one)."""
        found = self._read(name, {}, self.reader.labels)
        return found if isinstance(found, dict) else {}

    def reference(self, name: str, namespace: str) -> Ref | None:
        """A ``{name, namespace}`` field (absent: "is required", None)."""
        return self._read(name, REQUIRED, self.reader.reference, namespace)  # type: ignore[no-any-return]

    def fields(self, name: str, allowed: Iterable[str] | None = None, required: tuple[str, ...] = (), *,
               proto_names: bool | None = None) -> "Fields":
        """A nested mapping's fields (absent: none)."""
        if not self.ok:
            return Fields(self.reader, self.at(name), {}, ok=False)
        return self.reader.fields(self.data.get(name), self.at(name), allowed, required, proto_names=proto_names)

    def items_of(self, name: str, allowed: Iterable[str] | None = None,
                 required: tuple[str, ...] = ()) -> list["Fields"]:
        """A list of mappings, each one's fields (absent: none)."""
        return [self.reader.fields(item, self.at(name, i), allowed, required)
                for i, item in enumerate(self.sequence(name))]


class Problems(FieldReader):
    """The plugins' field reader: a :class:`FieldReader` whose problems
    become :class:`~twistgw.api.types.OptionsError` s (paths relative to the
    plugin's options key), which the core locates like its own::

        problems = Problems()
        f = problems.fields(options, (), {"mode", "providers", "timeout"})
        timeout = f.duration("timeout", 5.0)
        mode = f.choice("mode", ("strict", "lenient"), "strict")
        for name, raw in f.fields("providers").items():
            with problems.part():       # a problem inside is kept, and checking goes on
                compile_provider(problems, raw, ("providers", name))
        problems.raise_if_any()         # one OptionsError carrying them all

    ``raise problems.fail(path, reason)`` outside any ``part`` raises an
    OptionsError carrying every problem recorded so far. An OptionsError a
    helper raises inside ``part()`` (or ``check()``, the same) is kept too.
    """

    def __init__(self) -> None:
        self.errors: list[OptionsError] = []
        super().__init__(self._record)

    def _record(self, path: Path, reason: str) -> None:
        self.errors.append(recorded_error(path, reason, None))

    def add(self, path: Path | str, reason: str, resource: tuple[str, str, str] | None = None) -> None:
        """Record a problem; ``resource`` for one inside another resource
        the options refer to (see :class:`~twistgw.api.types.OptionsError`)."""
        self._count += 1
        self.errors.append(recorded_error(path, reason, resource))

    def fail(self, path: Path, reason: str, resource: tuple[str, str, str] | None = None) -> Exception:
        """:meth:`FieldReader.fail`, and ``resource`` as :meth:`add`'s."""
        if resource is None:
            return super().fail(path, reason)
        self.add(path, reason, resource)
        return self.invalid()

    def invalid(self) -> Exception:
        # An OptionsError carrying the problems so far: caught by part()
        # (which keeps each problem once), or reported by the core when a
        # plugin lets it escape.
        if not self.errors:
            return Invalid()
        return _Recorded.several(self.errors)

    @contextlib.contextmanager
    def check(self) -> Iterator[None]:
        """Keep the problems of an OptionsError raised inside, and go on."""
        try:
            yield
        except OptionsError as exc:
            self.keep(exc)
        except Invalid:
            pass

    part = check

    def keep(self, exc: OptionsError) -> None:
        """Record the problems of ``exc`` (one another reader or a helper
        raised) that are not recorded already."""
        kept = {id(e) for e in self.errors}
        for p in exc.problems:
            if id(p) not in kept:
                self._count += 1
                self.errors.append(p)

    def __bool__(self) -> bool:
        return bool(self.errors)

    def raise_if_any(self) -> None:
        if self.errors:
            raise OptionsError.several(self.errors)

