"""Where plugins add subcommands to the ``twistgw`` command line
(hook ``twistgw_add_commands``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypeAlias

    # argparse's sub-parsers action (a private class of argparse).
    _SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

#: Help of the command groups plugins add to (``twistgw create secret TYPE``):
#: Secrets are resources the core reads, so the core names the group.
GROUP_HELP = {
    ("create",): "create resources",
    ("create", "secret"): "create a Secret",
}

#: Exit codes of every subcommand: success; the thing checked is invalid or
#: the request would be refused; usage error (bad flags, missing files).
EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


class Commands:
    """The ``twistgw`` sub-commands, for ``twistgw_add_commands``::

        @sdk.hookimpl
        def twistgw_add_commands(commands):
            p = commands.add("create", "secret", "mytype", help="...")
            p.add_argument("--name", required=True)
            p.set_defaults(func=run)      # run(args) -> exit code (int)
    """

    def __init__(self, subparsers: _SubParsers) -> None:
        self._groups: dict[tuple[str, ...], _SubParsers] = {(): subparsers}

    def add(self, *path: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
        """A new sub-command at ``path`` (``"token"``, or ``"create",
        "secret", "authcredentials"``: the groups are made as needed).
        Give it ``set_defaults(func=...)``: ``func(args)`` returns the exit
        code (:data:`EXIT_OK`, :data:`EXIT_INVALID` or :data:`EXIT_USAGE`)."""
        if not path:
            raise ValueError("a command needs a name")
        *group, name = path
        return self._group(tuple(group)).add_parser(name, help=help, description=description or help)

    def _group(self, path: tuple[str, ...]) -> _SubParsers:
        found = self._groups.get(path)
        if found is None:
            parent = self._group(path[:-1])
            text = GROUP_HELP.get(path, f"{' '.join(path)} commands")
            parser = parent.add_parser(path[-1], help=text, description=text)
            found = parser.add_subparsers(dest="_".join(path) + "_command", metavar="COMMAND")
            found.required = True
            self._groups[path] = found
        return found


def write_secret(name: str, namespace: str | None, secret_type: str, data: dict[str, str], *,
                 labels: dict[str, str] | None = None, output: str | None = None,
                 reference: str = "secretRef") -> int:
    """Write a ``v1`` Secret (``data`` base64-encoded) as YAML to ``output``
    (a file) or stdout, say on stderr where it went and how an AuthConfig
    names it (``reference: {name, namespace}``), and return the exit code.
    For ``twistgw create secret TYPE`` commands, as ``glooctl create secret``
    writes them; a bad name or namespace is a usage error (stderr, exit 2).
    ``namespace`` None is ``default`` (glooctl's is ``gloo-system``)."""
    import base64
    import sys

    import yaml

    from twistgw.api.options import is_kubernetes_name

    defaulted = namespace is None
    namespace = "default" if namespace is None else namespace
    for label, value in (("name", name), ("namespace", namespace)):
        if not is_kubernetes_name(value or ""):
            sys.stderr.write(f"twistgw: --{label} {value!r} is not a valid Kubernetes name"
                             " (lower-case letters, digits, '-', '.')\n")
            return EXIT_USAGE
    metadata: dict[str, object] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    doc = {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": secret_type,
           "data": {k: base64.b64encode(v.encode("utf-8")).decode("ascii") for k, v in data.items()}}
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
    if output:
        try:
            with open(output, "w") as f:
                f.write(text)
        except OSError as exc:
            sys.stderr.write(f"twistgw: cannot write {output}: {exc.strerror}\n")
            return EXIT_USAGE
    else:
        sys.stdout.write(text)
    note = " (the default; pass --namespace to change it)" if defaulted else ""
    print(f"wrote Secret {name} in namespace {namespace}{note} to {output or 'stdout'}; reference it from the"
          f" AuthConfig as {reference}: {{name: {name}, namespace: {namespace}}}", file=sys.stderr)
    return EXIT_OK
