"""Layer 1: reading the configuration directory into a validated, immutable model.

YAML reading and its limits, located errors, resource parsers, the model,
references between resources. Imports no Twisted. See ``docs/architecture.md``.
"""
