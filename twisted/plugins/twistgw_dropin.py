"""The `twist twistgw` dropin. Resolved lazily: importing it imports nothing heavy."""

from twisted.application.service import ServiceMaker

twistgw = ServiceMaker(
    "twistgw",
    "twistgw.tap",
    "A plugin-based HTTP gateway: routing, JWT, RBAC and LDAP auth",
    "twistgw",
)
