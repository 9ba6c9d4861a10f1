"""What is wrong with a configuration: located problems, and the exception
that rejects a configuration with every one of them."""

from __future__ import annotations

import attrs

__all__ = ["ConfigError", "ConfigIssue"]


@attrs.frozen
class ConfigIssue:
    """One thing wrong with a configuration, located as precisely as known."""

    reason: str
    file: str = ""
    document: int | None = None
    line: int | None = None
    resource: str = ""
    field: str = ""

    def __str__(self) -> str:
        parts = []
        if self.file:
            where = self.file
            if self.document is not None:
                where += f": document {self.document + 1}"
            if self.line is not None:
                where += f", line {self.line}"
            parts.append(where)
        if self.resource:
            parts.append(self.resource)
        if self.field:
            parts.append(self.field)
        parts.append(self.reason)
        return ": ".join(parts)


class ConfigError(Exception):
    """The configuration was rejected; ``issues`` says every reason found."""

    def __init__(self, issues: list[ConfigIssue] | tuple[ConfigIssue, ...]) -> None:
        # Each problem once, in file and line order (a problem without a
        # file, such as a plugin's settings, first).
        unique = list(dict.fromkeys(issues))
        unique.sort(key=lambda i: (i.file, -1 if i.document is None else i.document, i.line or 0))
        self.issues = unique
        super().__init__("\n".join(str(i) for i in unique))
