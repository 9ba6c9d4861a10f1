"""The tests' own helper library (a normal package: ``tests/`` is on
``sys.path`` because ``tests/conftest.py`` lives there).

:mod:`support.http`      loopback backends, raw servers, HTTP and raw clients
:mod:`support.fixtures`  the shared pytest fixtures (``backend``, ``gateway``, ...)
"""
