"""Layer 2: what the gateway decides, without doing any I/O.

Paths, routing, header policy, the plugin host, the serving snapshot, the
plugin chain and the request pipeline. No reactor and nothing from
``twisted.web``. See ``docs/architecture.md``.
"""
