"""Name, address and file-name rules shared by the configuration readers (pure)."""

from __future__ import annotations


def host_without_port(host: str) -> str:
    """A Host value or configured domain, lower-cased, without its port
    (an IPv6 literal keeps its brackets) and without a trailing dot."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end != -1 else host
    colon = host.rfind(":")
    if colon != -1 and host.count(":") == 1:
        return host[:colon]
    return host.rstrip(".")


def is_loopback_endpoint(description: str) -> bool:
    """Whether a Twisted server endpoint string listens on loopback only
    (``tcp:PORT:interface=127.0.0.1`` or ``::1``)."""
    parts = description.split(":")
    if not parts or parts[0] not in ("tcp", "tcp6"):
        return False
    for part in parts[1:]:
        if part.startswith("interface="):
            iface = part.split("=", 1)[1].replace("\\", "")
            return iface.startswith("127.") or iface in ("::1", "localhost")
    return False


def is_yaml_file(name: str) -> bool:
    """Whether a directory entry is read as configuration: ``*.yaml`` or
    ``*.yml``, not hidden (editors' and ConfigMaps' ``.name`` files)."""
    return name.endswith((".yaml", ".yml")) and not name.startswith(".")
