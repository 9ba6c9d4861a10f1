"""The twistgw hook API: the reference for plugin authors.

A plugin is a module (or object) with functions marked ``@twistgw.hookimpl``
whose names are the hooks below, or a class whose methods are (each gateway
then makes an instance of its own, which holds the plugin's state),
registered under the entry point group ``twistgw.plugins``::

    # pyproject.toml of your distribution
    [project.entry-points."twistgw.plugins"]
    apikey = "my_package.apikey"

The entry point's *name* (``apikey``) is the plugin's name and also its
**options key**: a VirtualService enables the plugin by writing
``spec.virtualHost.options.apikey: {...}`` (or the same under a route's
``options``). The gateway hands that mapping to your
``twistgw_compile_options`` when the configuration loads, and the compiled
result back to ``twistgw_authenticate`` / ``twistgw_authorize`` on each
request.

How the gateway calls hooks:

* *Per-plugin hooks* (compile, authenticate, authorize, config_loaded) are
  called only for the plugin they concern, in the order of that virtual
  service's chain. pluggy's global order plays no part in them.
* *Broadcast hooks* (configure, unconfigure, route_match,
  request_finished) are ordinary pluggy calls to every plugin.
* *Hooks a plugin defines for others* (``twistgw_extauth_config_types``,
  which the ``extauth`` plugin calls): a plugin class whose constructor
  takes a ``hook`` argument is given the host's hook relay (pluggy's
  ``pm.hook``) and calls them through it.
* Any hook that does I/O may be ``async def`` or return a
  :class:`~twisted.internet.defer.Deferred`; the gateway awaits it. An
  exception (or failed Deferred) from a request hook fails the request
  **closed** with ``500`` and is logged with the plugin's name.

The chain for a route: each enabled plugin, in order, first authenticates
then authorizes; the first :class:`~twistgw.Deny` ends the request. Default
order: ``extauth`` (100) → ``jwt`` (200) → ``rbac`` (300) → third-party
plugins (1000, unless their ``twistgw_plugin_info`` says otherwise).
``options.pluginOrder: [name, ...]`` on a virtual host or route sets it
explicitly. See ``docs/plugins.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import pluggy

if TYPE_CHECKING:
    from twistgw.api.commands import Commands
    from twistgw.api.extauth import ExtAuthConfigType
    from twistgw.api.types import Decision, OptionsScope, RequestContext, ResourceView
    from twistgw.config.model import Route, VirtualService
    from twistgw.api.plugin import GatewayInfo, Placement, PluginInfo

hookspec = pluggy.HookspecMarker("twistgw")


# ---------------------------------------------------------------------------
# Describing a plugin
# ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def twistgw_plugin_info() -> PluginInfo | None:
    """Describe the plugin: its default position in the chain and a summary.

    Called once per plugin when it is registered (per-plugin).

    :return: a :class:`twistgw.PluginInfo`. Plugins without this hook get
        ``PluginInfo(order=1000)``.
    """


@hookspec
def twistgw_add_commands(commands: Commands) -> None:
    """Add the plugin's sub-commands to the ``twistgw`` command line
    (broadcast: every plugin is called when ``twistgw`` starts).

    :param commands: :class:`twistgw.Commands`; ``commands.add("token",
        help=...)`` returns an ``argparse`` parser: add arguments, then
        ``set_defaults(func=run)`` where ``run(args)`` returns the exit code.
        The shipped plugins add ``twistgw token`` and ``keys`` (jwt) and
        ``twistgw create secret authcredentials`` (extauth).
    """


# ---------------------------------------------------------------------------
# Lifecycle
# ---------------------------------------------------------------------------


@hookspec
def twistgw_configure(gateway: GatewayInfo) -> None:
    """Called once at start-up, before the first configuration is compiled.

    :param gateway: gives ``reactor``, ``log`` and ``metrics_registry`` (a
        prometheus-client ``CollectorRegistry`` for the plugin's own metrics),
        ``dry_run`` (``twistgw explain`` without ``--live``: contact nothing)
        and ``may_listen`` (``False`` under ``explain``: start no server).
    """


@hookspec
def twistgw_unconfigure() -> Any:
    """Called once at shutdown; release connections and timers. May return a
    Deferred, which the gateway waits for (bounded)."""


# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def twistgw_compile_options(options: Mapping[str, Any], scope: OptionsScope) -> object:
    """Validate and compile this plugin's options (per-plugin, synchronous).

    Called for every virtual host and route where the plugin's options key is
    set, each time the configuration loads. Return any object; it is passed
    back as ``options`` on each request. Keep it immutable: one compiled
    object may serve many concurrent requests.

    Request headers your plugin sets (the user, groups or claims it vouches
    for) must never come from the client: give the returned object an
    ``owned_request_headers`` attribute naming them
    (:class:`twistgw.OwnsRequestHeaders`), and the gateway removes the
    client's copies from every request, on every route and virtual service,
    before routing and before any plugin runs, even where your plugin is
    disabled.

    :param options: the raw mapping written under the plugin's key (a plain
        ``dict`` of YAML values). A route's options replace the virtual
        host's wholesale; ``{disable: true}`` never reaches you, the gateway
        turns the plugin off for that route itself.
    :param scope: where the options were written, and lookups of the other
        resources (upstreams, secrets, auth configs) in the same snapshot.
    :raise twistgw.OptionsError: with the field path (below your key) and a
        reason. The whole configuration is then rejected and the last good
        one keeps serving. Report every problem at once (``twistgw check``
        lists them all): collect them with :class:`twistgw.options.Problems`
        or raise ``OptionsError.several([...])``.
    """


@hookspec
def twistgw_check_resource(kind: str, resource: object, scope: OptionsScope) -> None:
    """Check one resource of the configuration, whether a route refers to it
    or not (per-plugin, synchronous), as Gloo's validation webhook checks
    every resource it is given: an ``AuthConfig`` the gateway could not serve
    fails ``twistgw check`` before any VirtualService names it.

    Called once per load for every resource the loader read without a
    problem of its own, of every kind (``AuthConfig``, ``Secret``...,
    including kinds added to the configuration's table of kinds); return
    None at once for kinds you do not own. Raise
    :class:`~twistgw.OptionsError` (several with
    :class:`twistgw.options.Problems`) with paths from the top of the
    resource (``("spec", "configs", 0, "ldap", "address")``); a problem
    without ``resource=`` is reported at this resource's file and line.
    The same problem found again when a route compiles options that refer
    to the resource is reported once.

    :param kind: the resource's kind.
    :param resource: what the loader read: :class:`~twistgw.AuthConfigInfo`
        for an ``AuthConfig``, :class:`~twistgw.SecretInfo` for a ``Secret``;
        for other kinds the object their reader returns.
    :param scope: ``scope.namespace`` is the resource's namespace,
        ``virtual_service`` is "" and ``route`` None; ``scope.resources``
        looks up the rest of the configuration.
    """


@hookspec(firstresult=True)
def twistgw_default_options(settings: Mapping[str, Any], config_dir: str) -> Mapping[str, Any] | None:
    """Options for routes that do not configure this plugin (per-plugin).

    Lets a gateway-wide setting put the plugin on every route, e.g. the rbac
    plugin's ``requireRbac`` denies routes that have no policy. A route's own
    options, or ``{disable: true}``, still win. Also the place to check the
    plugin's settings when the configuration loads (``twistgw check`` reports
    what is raised here), even for a plugin that returns None.

    :param settings: the ``Settings.spec.<plugin name>`` section ({} if none).
    :param config_dir: the configuration directory ("" when loaded from
        text), for resolving relative file names in settings.
    :return: a raw options mapping, compiled like any other, or None.
    :raise twistgw.OptionsError: for invalid settings (path below
        ``Settings.spec.<plugin name>``); the configuration is rejected.
    """


@hookspec(firstresult=True)
def twistgw_placement(resources: ResourceView) -> Placement | None:
    """Where the plugin runs in this configuration, when that depends on
    its settings (per-plugin, each time the configuration loads; optional).

    The returned :class:`twistgw.Placement` applies on top of
    ``PluginInfo.placement`` to every route that does not set
    ``pluginOrder``. The rate-limit plugins use it for Gloo's
    ``rateLimitBeforeAuth``: ``Placement(before=("extauth", "jwt", "rbac"))``.

    :param resources: the configuration's lookups
        (``resources.settings(name)`` reads any ``Settings`` section).
    :return: a Placement, or None for the plugin's usual place.
    """


@hookspec
def twistgw_config_loaded(compiled: Sequence[object], settings: Mapping[str, Any]) -> Any:
    """A new configuration is now serving (per-plugin; also called when the
    plugin has no options anywhere, with ``compiled=[]``).

    :param compiled: every object this plugin's ``twistgw_compile_options``
        returned for the new snapshot. Use it to warm caches (fetch key sets)
        or close resources no longer referenced.
    :param settings: the ``Settings.spec.<plugin name>`` section ({} if none).
    :return: may be a Deferred; the gateway does not wait for it before
        serving, but logs its failure.
    """


@hookspec
def twistgw_extauth_config_types() -> Sequence[ExtAuthConfigType]:
    """AuthConfig config types this plugin adds to the ``extauth`` plugin
    (broadcast: the ``extauth`` plugin collects every plugin's answer the
    first time it needs them, once per gateway).

    A config type is the YAML key of one entry of an AuthConfig's
    ``spec.configs`` (``ldap``, ``apiKeyAuth``, ``basicAuth``, ``opaAuth``,
    ``passThroughAuth``, ``oauth2``, or your own ``myAuth``), with its
    validation and its check. The shipped ``ldap`` type is provided through
    this hook by the ``twistgw_ldap`` plugin, exactly as yours would be::

        class MyAuthPlugin:                    # [project.entry-points."twistgw.plugins"]
            @twistgw.hookimpl                  # myauth = "my_pkg:MyAuthPlugin"
            def twistgw_extauth_config_types(self):
                return [MyAuth()]              # a twistgw.ExtAuthConfigType

    How the ``extauth`` plugin uses them, per AuthConfig entry
    ``spec.configs[i].<name>: raw``:

    * when the configuration loads: ``type.compile(raw, scope)`` with a
      :class:`twistgw.ConfigScope` (the AuthConfig's namespace, Secrets,
      ConfigMaps, ``Settings.spec.extauth``, the configuration directory).
      It returns a checker (:class:`twistgw.ExtAuthChecker`) or raises
      :class:`twistgw.OptionsError` with paths **relative to the entry**;
      the problem is reported at ``spec.configs[i].<name>.<path>`` with the
      AuthConfig's file and line. ``type.check_settings`` checks the type's
      ``settings_fields`` of ``Settings.spec.extauth`` at every load;
    * on each request: ``checker.check(ctx)`` returns (or resolves to)
      :class:`twistgw.AuthAllow` (principal, request headers to set) or
      :class:`twistgw.AuthDeny` (the answer; ``error=True`` for an outage or
      a misconfiguration, to which ``Settings.spec.extauth``'s
      ``failureModeAllow`` / ``statusOnError`` apply). The configs run in
      order and all must admit, or as the AuthConfig's ``booleanExpr``
      says; the first denial's answer is returned. Under ``twistgw
      explain`` without ``--live`` it calls ``checker.dry_run(ctx)``
      instead, which contacts nothing;
    * lifecycle: ``type.configure(gateway)`` at start-up,
      ``type.config_loaded(checkers, settings)`` when a configuration
      serves (each checker of this type in it: warm pools, drop stale
      state), ``type.unconfigure()`` at shutdown.

    A plugin that only provides config types needs no other hook; it never
    gets an options key of its own (``options.<its name>`` is refused with a
    pointer to ``options.extauth``) if it implements
    ``twistgw_compile_options`` to say so, as ``twistgw_ldap`` does.

    :return: a sequence of config type objects (:class:`twistgw.ExtAuthConfigType`
        instances). Two plugins providing the same ``name`` are a
        configuration error naming both.
    """
    return ()


# ---------------------------------------------------------------------------
# Request flow
# ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def twistgw_route_match(
    ctx: RequestContext, virtual_service: VirtualService
) -> Route | None:
    """Choose the route for a request (broadcast, first non-None wins).

    The gateway's own matcher (Gloo's matchers: path, headers, query
    parameters, methods) runs last, so a plugin implementing this hook takes
    precedence for the requests it answers. Must be synchronous.

    When a virtual service has routes matching headers or query parameters,
    the route is chosen a second time after the chain admitted the request
    (plugins may have written those headers, as the JWT plugin's
    ``claimsToHeaders`` does); this hook is called again then.

    :param ctx: the request (``ctx.path`` is already normalised).
    :param virtual_service: the virtual service chosen by Host.
    :return: one of ``virtual_service.routes``, or None to let others decide.
    """


@hookspec(firstresult=True)
def twistgw_authenticate(ctx: RequestContext, options: object) -> Decision | None:
    """Establish who sent the request (per-plugin, in chain order).

    Verify credentials; on success record the identity on ``ctx``
    (``ctx.authenticated(NAME, principal)``: ``ctx.identities[NAME]``, and
    ``ctx.principal`` if no earlier plugin set it; ``ctx.claims``,
    ``ctx.state[NAME]`` for anything else) and return
    :class:`twistgw.Allow` (or None). Return :class:`twistgw.Deny` to refuse
    the request with that response.

    In a dry run (``ctx.dry_run``), return :class:`twistgw.NotChecked`
    saying what would be done instead of contacting anything, with the
    header edits admitting would make (``NotChecked(reason,
    headers=((b"authorization", None),))`` for a credential you remove when
    you admit): explain then shows what the backend would get.

    **Response headers.** ``ctx.add_response_header(b"set-cookie",
    b"session=...")`` (here or in ``twistgw_authorize``) adds a header to
    the response the client gets, whoever answers it: the upstream (after
    the upstream's own headers, which stay) or the gateway (a later
    plugin's refusal, a direct response). One line per call, in call order.
    A name the engine writes itself (``Content-Length``,
    ``Transfer-Encoding``, ``Connection`` and the other hop-by-hop ones), a
    name that is not an HTTP token or a value with CR, LF or NUL raises
    ValueError at the call. A request no plugin adds a header to costs
    nothing more. For the headers of a refusal, use ``Deny(headers=...)``.

    :param ctx: the request.
    :param options: what this plugin's ``twistgw_compile_options`` returned
        for this route.
    """


@hookspec(firstresult=True)
def twistgw_authorize(ctx: RequestContext, options: object) -> Decision | None:
    """Decide whether the (authenticated) request may proceed (per-plugin).

    Called right after the same plugin's ``twistgw_authenticate`` admitted
    the request, so a plugin may implement either hook or both.

    :return: :class:`twistgw.Deny` to refuse, :class:`twistgw.Allow` or None
        to go on.
    """


@hookspec
def twistgw_request_finished(ctx: RequestContext, status: int) -> None:
    """A request was answered (broadcast). For accounting; must not block.

    :param ctx: the request; ``ctx.decided_by`` names the plugin that denied
        it, if one did.
    :param status: the status sent to the client (0 if the client went away
        before a status was sent).
    """
