"""``opaAuth``: a Rego policy from ConfigMaps decides.

::

    - opaAuth:
        modules: [{name: allow-get-users, namespace: gloo-system}]   # ConfigMaps
        query: "data.test.allow == true"

Every ``data`` entry of each ConfigMap is one Rego module. The policy is
compiled when the configuration loads (a module that does not parse, a
query that does not compile, or a call to a function the engine lacks
refuses the configuration) and evaluated on each request with Gloo's
``input`` document:

* ``input.check_request.attributes.request.http`` and ``input.http_request``:
  ``method``, ``path`` (with ``?query``), ``host``, ``scheme``, ``protocol``
  and ``headers``: names lower-case, repeated headers (in any case
  spelling) joined with ``,`` as Envoy does, plus ``:authority``,
  ``:method`` and ``:path``;
* ``input.check_request.attributes.source.address.socketAddress.address``:
  the client's IP;
* ``input.state``: Gloo's shared ext-auth state, what the configs before
  this one left: ``jwt``, the raw ID token of an ``oidcAuthorizationCode``
  session (Gloo's OPA guide decodes it with ``io.jwt.decode``);
  ``jwtAccessToken``, the claims of an ``accessTokenValidation.jwt`` token;
  ``claims``, the verified claims of the OIDC session or access token, or,
  when no earlier config gave any, of a token the ``jwt`` plugin verified
  before extauth ran (``jwtStaged: beforeExtAuth``).

The result admits when its first expression is ``true`` (or an array whose
first element is ``true``); anything else, and any evaluation error, is 403.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import attrs

from twistgw import AuthAllow, AuthDeny, ConfigScope, ExtAuthConfigType, RequestContext
from twistgw.api.fields import Problems

from twistgw_authtypes import _common as c
from twistgw_authtypes._rego import Policy, PolicyError, code_only as _code

_FIELDS = ("modules", "query", "options")
_OPTIONS = ("fastInputConversion", "returnDecisionReason")


def http_attributes(ctx: RequestContext) -> dict[str, Any]:
    """Envoy's ``AttributeContext.HttpRequest`` of the request, as Gloo gives
    it to OPA: one entry per header name in lower case, repeated headers
    joined with ``,`` (so ``X-Role: a`` and ``x-role: b`` read ``"a,b"``: a
    policy cannot be fooled by a second copy in another case)."""
    headers: dict[str, str] = {}
    for name, values in ctx.headers.getAllRawHeaders():
        key = name.decode("latin-1").lower()
        joined = ",".join(v.decode("latin-1") for v in values)
        headers[key] = f"{headers[key]},{joined}" if key in headers else joined
    path = ctx.path + ("?" + ctx.query.decode("latin-1") if ctx.query else "")
    headers[":authority"] = ctx.host
    headers[":method"] = ctx.method
    headers[":path"] = path
    return {"method": ctx.method, "path": path, "host": ctx.host, "scheme": ctx.scheme,
            "protocol": "HTTP/1.1", "headers": headers}


#: The parts of ``input`` a policy may read (all of them unless the policy
#: shows it reads fewer).
ALL_PARTS = frozenset({"check_request", "http_request", "state", "headers"})

_INPUT_REF = re.compile(r"\binput\b(\s*\.\s*(\w+))?")


def parts_read(modules: Sequence[tuple[str, str]]) -> frozenset[str]:
    """Which parts of ``input`` the modules can observe: the top-level keys
    they name (``input.http_request``), plus ``headers`` if the word appears
    at all. ``input`` used any other way (``x := input``, ``walk(input)``,
    ``input[k]``, ``input["state"]``) reads everything. Building and converting
    the document is most of a call's cost (regopy converts it value by
    value), and a policy cannot tell a part it never names is absent."""
    parts: set[str] = set()
    for _, text in modules:
        code = _code(text)
        for m in _INPUT_REF.finditer(code):
            key = m.group(2)
            if key is None:
                return ALL_PARTS
            parts.add(key)
        if re.search(r"\bheaders\b", code):
            parts.add("headers")
    return frozenset(parts & ALL_PARTS)


def input_document(ctx: RequestContext, config_id: str, parts: frozenset[str] = ALL_PARTS) -> dict[str, Any]:
    http = http_attributes(ctx)
    if "headers" not in parts:
        del http["headers"]
    doc: dict[str, Any] = {}
    if "state" in parts:
        state = c.shared_state(ctx)
        if ctx.claims is not None:
            # the verified claims of a token the jwt plugin admitted before extauth: never
            # input.state.jwt, which is the raw ID token of an OIDC login (Gloo)
            state.setdefault("claims", ctx.claims)
        doc["state"] = state
    if "http_request" in parts:
        doc["http_request"] = http
    if "check_request" in parts:
        doc["check_request"] = {"attributes": {
            "request": {"http": http},
            "source": {"address": {"socketAddress": {"address": ctx.client_address}}},
            "contextExtensions": {"config_id": config_id},
        }}
    return doc


@attrs.frozen
class OpaChecker:
    policy: Policy
    config_id: str
    description: str
    parts: frozenset[str] = ALL_PARTS

    def check(self, ctx: RequestContext) -> AuthAllow | AuthDeny:
        outcome = self.policy.evaluate(input_document(ctx, self.config_id, self.parts))
        if outcome.allowed:
            return AuthAllow(reason=outcome.reason)
        return AuthDeny(403, reason=outcome.reason)

    def dry_run(self, ctx: RequestContext) -> AuthAllow | AuthDeny:
        return self.check(ctx)  # the policy runs in process: nothing is contacted


def _modules(raw: Any, scope: ConfigScope, problems: Problems) -> list[tuple[str, str]]:
    modules: list[tuple[str, str]] = []
    for i, ref in enumerate(problems.sequence(raw, ("modules",), optional=True)):
        p = ("modules", i)
        with problems.part():
            name, ns = problems.reference(ref, p, scope.namespace)
            try:
                cm = scope.config_map(name, ns)
            except KeyError as exc:
                raise problems.fail(p, f"dangling reference: {exc.args[0]}") from None
            data: Mapping[str, Any] = getattr(cm, "data", None) or {}
            if not data:
                raise problems.fail(p, f"ConfigMap {ns}/{name} has no data: each entry is a Rego module")
            for key in sorted(data):
                modules.append((f"{ns}/{name}/{key}", str(data[key])))
    return modules


class OpaAuth(ExtAuthConfigType):
    name = "opaAuth"
    description = "a Rego policy (ConfigMap modules, a query) evaluated in process by regopy"

    def compile(self, raw: Any, scope: ConfigScope) -> OpaChecker:
        problems = Problems()
        cfg = problems.fields(raw, (), _FIELDS)
        opts = cfg.fields("options", _OPTIONS)
        for key in _OPTIONS:
            if opts.get(key):
                problems.add(("options", key), "is not supported by twistgw (the input already holds only"
                                               " strings and objects; no decision reason is exported)")
        query = cfg.string("query", "")
        if cfg.get("query") is None and cfg.ok:
            problems.add(("query",), "is required, e.g. \"data.test.allow == true\"")
        modules = _modules(cfg.get("modules"), scope, problems)
        problems.raise_if_any()
        try:
            policy = Policy.compile(modules, query)
        except PolicyError as exc:
            raise problems.fail((exc.field,), str(exc)) from None
        config_id = f"{scope.namespace}.{scope.auth_config.name}" if scope.auth_config else scope.source
        parts = parts_read(modules + [("query", query)])
        return OpaChecker(policy, config_id, f"OPA {query} over {len(modules)} modules", parts)
