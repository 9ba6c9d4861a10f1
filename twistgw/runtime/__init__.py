"""Layer 4: the running process: the service (load, watch, swap), the admin
endpoint, worker processes, metrics and the development echo server.
See ``docs/architecture.md``.
"""
