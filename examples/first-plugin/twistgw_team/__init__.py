import twistgw


@twistgw.hookimpl
def twistgw_compile_options(options, scope):
    """At every load: check the route's options, return what requests get."""
    teams = options.get("teams")
    if not isinstance(teams, list) or not teams:
        raise twistgw.OptionsError("teams", "is required: a list of team names")
    return frozenset(teams)


@twistgw.hookimpl
def twistgw_authorize(ctx, options):
    """Per request: admit the listed teams, refuse the others."""
    team = ctx.header("X-Team")
    if team in options:
        return twistgw.Allow(f"team {team!r}")
    return twistgw.Deny(403, b"team not allowed\n", reason=f"X-Team {team!r}")
