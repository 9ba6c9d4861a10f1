"""Layer 0: the types plugins and the gateway share (re-exported by :mod:`twistgw`).

Imports nothing else from twistgw. See ``docs/architecture.md``.
"""
