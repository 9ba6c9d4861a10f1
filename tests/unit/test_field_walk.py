"""The field walk: every field the loader accepts — the core's and the
shipped plugins' (jwt, rbac, extauth with ldap, the AuthConfig types
passThroughAuth, apiKeyAuth, basicAuth and opaAuth, oauth2, the rate-limit
plugins) — either changes behaviour (a named test file
exercises it) or is documented as informational. Nothing is accepted and
ignored.

How: a configuration that sets every field is loaded and compiled while the
validators are watched; each mapping they check records the fields it
accepts there. Every recorded field must have an entry in :data:`FIELDS`,
and every entry must have been recorded (no stale entries). An entry is
either ``("test", "tests/<file>.py")`` — that test file sets the field and
asserts what it does — or ``("info", "<docs file>")`` — the docs say it is
informational. A new field without an entry fails this test.

What is watched: the one field reader, :meth:`FieldReader.mapping` (the
loader's reader and every plugin's ``Problems``): each mapping it checks
records the fields it accepts there. A plugin's reading is placed by the
plugin package reading (:data:`PLUGIN_SCOPES`: jwt, rbac, the ldap and
extauth entries as ``extauth``, the AuthConfig types' as ``authtypes``,
oauth2's), or where it was marked (:func:`walk`'s ``reading``: the
rate-limit plugins' options keys, ``RateLimitConfig`` and Settings
sections); the JWT stages through the core's ``stages.check``. A plugin that
reads a mapping some other way is not seen: read it with the reader.
"""

from __future__ import annotations

import base64
import pathlib
import re
import sys
import textwrap
from typing import Any

import pytest

import twistgw_jwt
import twistgw_jwt._options as jwt_options
import twistgw_ldap._devdir as ldap_devdir
import twistgw_ratelimit
import twistgw_ratelimit._options as rl_options
import twistgw_ratelimit._settings as rl_settings
import twistgw_rbac
import twistgw_rbac._policy as rbac_policy
from twistgw.api.fields import FieldReader
from twistgw.config.gloo import CORE_OPTION_KEYS
from twistgw.config.traffic import CORE_ROUTE_ONLY, CORE_TRAFFIC_KEYS
from twistgw.config.loader import load_directory
from twistgw.core import stages
from twistgw.core.plugins import PluginHost
from twistgw.core.snapshot import build_snapshot

from support.pki import TestCA
from support.trial import TestCase

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _public_pem() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()


WALK = """\
apiVersion: gateway.vendor.io/v1
kind: Settings
metadata: {{name: settings}}
spec:
  gateway: {{echoServer: {{listen: "tcp:0:interface=127.0.0.1"}}}}
  rbac: {{requireRbac: false}}
  jwt: {{verifiedTokenCacheSize: 10}}
  extauth: {{devDirectory: {{ldif: users.ldif, listen: "tcp:0:interface=127.0.0.1"}}}}
{ratelimit_settings}---
apiVersion: v1
kind: Service
metadata: {{name: svc, labels: {{a: b}}, annotations: {{x: y}}}}
spec:
  selector: {{app: svc}}
  type: ClusterIP
  clusterIP: 10.0.0.1
  ports: [{{name: http, port: 80, targetPort: 8080, protocol: TCP, nodePort: 30080, appProtocol: http}}]
status: {{loadBalancer: {{}}}}
---
apiVersion: v1
kind: Endpoints
metadata: {{name: svc}}
subsets:
- addresses: [{{ip: 127.0.0.1, hostname: a, nodeName: n, targetRef: {{kind: Pod, name: p}}}}]
  notReadyAddresses: [{{ip: 127.0.0.2}}]
  ports: [{{name: http, port: 8080, protocol: TCP, appProtocol: http}}]
---
apiVersion: v1
kind: Secret
metadata: {{name: sa}}
type: extauth.vendor.io/accountcredentials
immutable: true
data: {{username: Y249YWRtaW4sZGM9ZXhhbXBsZSxkYz1vcmc=}}
stringData: {{password: pw}}
---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: static}}
spec:
  static: {{hosts: [{{addr: 127.0.0.1, port: 9000}}], useTls: false, autoSniRewrite: false}}
---
apiVersion: v1
kind: Secret
metadata: {{name: upstream-tls}}
type: kubernetes.io/tls
data: {{ca.crt: {ca_b64}}}
---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: tls-secret}}
spec:
  static: {{hosts: [{{addr: 127.0.0.1, port: 9443, sniAddr: backend.test}}], useTls: true, autoSniRewrite: true}}
  sslConfig:
    secretRef: {{name: upstream-tls, namespace: default}}
    sni: backend.test
    verifySubjectAltName: [backend.test]
    parameters: {{minimumProtocolVersion: TLSv1_2, maximumProtocolVersion: TLSv1_3, cipherSuites: [ECDHE-ECDSA-AES128-GCM-SHA256]}}
---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: tls-files}}
spec:
  static: {{hosts: [{{addr: 127.0.0.1, port: 9444}}]}}
  sslConfig: {{sslFiles: {{tlsCert: client.crt, tlsKey: client.key, rootCa: ca.crt}}}}
  circuitBreakers: {{maxConnections: 10, maxPendingRequests: 5, maxRequests: 20, maxRetries: 2}}
---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: kube}}
spec:
  kube:
    serviceName: svc
    serviceNamespace: default
    servicePort: 80
    selector: {{app: svc}}
    subsetSpec:
      selectors: [{{keys: [stage], singleHostPerSubset: false}}]
      fallbackPolicy: DEFAULT_SUBSET
      defaultSubset: {{values: {{stage: primary}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: p, labels: {{app: svc, stage: primary}}}}
spec: {{containers: [{{name: c, image: i}}]}}
status: {{podIP: 127.0.0.1}}
---
apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {{name: by-template}}
spec:
  configs:
  - ldap:
      address: ldap://127.0.0.1:389
      startTLS: true
      tls: {{serverName: ldap.example.org}}
      userDnTemplate: uid=%s,ou=people,dc=example,dc=org
      membershipAttributeName: memberOf
      allowedGroups: ["cn=a,ou=groups,dc=example,dc=org"]
      searchFilter: (objectClass=*)
      disableGroupChecking: false
      groupLookupSettings:
        checkGroupsWithServiceAccount: true
        credentialsSecretRef: {{name: sa, namespace: default}}
      pool: {{maxSize: 4, initialSize: 1}}
      connectTimeout: 1s
      requestTimeout: 1s
      cacheTtl: 5s
      realm: r
      keepCredentials: false
---
apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {{name: by-search}}
spec:
  configs:
  - ldap:
      address: ldap://127.0.0.1:389
      userSearch:
        baseDn: ou=people,dc=example,dc=org
        filter: (uid=%s)
        scope: sub
        credentialsSecretRef: {{name: sa}}
      groupSearch:
        baseDn: ou=groups,dc=example,dc=org
        filter: (member=%s)
        nameAttribute: cn
        nested: true
        maxDepth: 2
      allowedGroups: ["cn=a,ou=groups,dc=example,dc=org"]
      groupsHeader: x-groups
      userHeader: x-user
  - passThroughAuth:
      http:
        url: https://auth.walk.example.com/check
        connectionTimeout: 1s
        responseHeaderTimeout: 500ms
        tlsConfig:
          secretRef: {{name: upstream-tls, namespace: default}}
          sslParams: {{minimumProtocolVersion: TLSv1_2, maximumProtocolVersion: TLSv1_3}}
        connectionPool: {{maxConns: 4, idleTimeout: 30s}}
        request:
          allowedHeaders: [authorization]
          headersToAdd: {{x-walk: a}}
          passThroughState: true
          passThroughFilterMetadata: true
          passThroughBody: false
        response:
          allowedUpstreamHeaders: [x-user-id]
          allowedUpstreamHeadersToOverwrite: [x-tenant]
          allowedClientHeadersOnDenied: [www-authenticate]
          allowedClientHeadersOnSuccess: [x-left]
          readStateFromResponse: true
      config: {{tier: gold}}
      failureModeAllow: false
  - passThroughAuth:
      grpc:
        address: grpc-auth.walk.example.com:9001
        connectionTimeout: 1s
        tlsConfig:
          secretRef: {{name: upstream-tls, namespace: default}}
        retryPolicy:
          numRetries: 2
          retryBackOff: {{baseInterval: 100ms, maxInterval: 1s}}
---
apiVersion: v1
kind: Secret
metadata: {{name: walk-headers}}
type: gloo.solo.io/header
stringData: {{x-walk-token: t}}
---
apiVersion: v1
kind: Secret
metadata: {{name: walk-apikey, labels: {{walk: keys}}}}
type: extauth.solo.io/apikey
stringData: {{api-key: walk-key-1, user: alice, user-email: alice@example.com}}
---
apiVersion: v1
kind: Secret
metadata: {{name: walk-apikey-2}}
type: extauth.solo.io/apikey
stringData: {{api-key: walk-key-2, user-email: bob@example.com}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: walk-policy}}
data:
  policy.rego: |
    package test
    default allow = false
    allow if input.http_request.method == "GET"
---
apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {{name: walk-authtypes}}
spec:
  configs:
  - apiKeyAuth:
      headerName: x-walk-key
      labelSelector: {{walk: keys}}
      apiKeySecretRefs: [{{name: walk-apikey-2, namespace: default}}]
      headersFromMetadataEntry: {{x-user-email: {{name: user-email, required: true}}}}
      skipMetadataValidation: false
  - apiKeyAuth:
      k8sSecretApikeyStorage:
        labelSelector: {{walk: keys}}
        apiKeySecretRefs: [{{name: walk-apikey-2}}]
  - basicAuth:
      realm: walk
      keepCredentials: false
      apr: {{users: {{user: {{salt: TYiryv0/, hashedPassword: 8BvzLUO9IfGPGGsPnAgSu1}}}}}}
  - basicAuth:
      encryption: {{sha1: {{}}}}
      userList: {{users: {{user: {{salt: TYiryv0/, hashedPassword: 010EB058A59F4AC5BA05639B0263CF91B4345FD6}}}}}}
  - opaAuth:
      modules: [{{name: walk-policy, namespace: default}}]
      query: data.test.allow == true
      options: {{fastInputConversion: false, returnDecisionReason: false}}
---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: discovered, resourceVersion: "1"}}
spec:
  discoveryMetadata: {{labels: {{app: svc}}}}
  static: {{hosts: [{{addr: 127.0.0.1, port: 9001}}]}}
  loadBalancerConfig:
    ringHash:
      ringHashConfig: {{minimumRingSize: 64, maximumRingSize: 1024}}
      useHostnameForHashing: false
---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: hashed}}
spec:
  static: {{hosts: [{{addr: 127.0.0.1, port: 9002}}]}}
  loadBalancerConfig: {{maglev: {{useHostnameForHashing: true}}}}
  healthChecks:
  - timeout: 1s
    interval: 10s
    noTrafficInterval: 30s
    unhealthyThreshold: 2
    healthyThreshold: 2
    httpHealthCheck: {{path: /healthz, host: h.internal, expectedStatuses: [{{start: 200, end: 300}}]}}
---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: shuffled}}
spec:
  static: {{hosts: [{{addr: 127.0.0.1, port: 9003}}]}}
  loadBalancerConfig: {{random: {{}}}}
---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: circular}}
spec:
  static: {{hosts: [{{addr: 127.0.0.1, port: 9004}}]}}
  loadBalancerConfig: {{roundRobin: {{}}}}
---
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {{name: guarded}}
spec:
  static: {{hosts: [{{addr: 127.0.0.1, port: 9005}}]}}
  loadBalancerConfig: {{leastRequest: {{choiceCount: 3}}, healthyPanicThreshold: 30}}
  outlierDetection:
    consecutive5xx: 3
    enforcingConsecutive5xx: 100
    consecutiveGatewayFailure: 2
    enforcingConsecutiveGatewayFailure: 50
    interval: 5s
    baseEjectionTime: 10s
    maxEjectionTime: 60s
    maxEjectionPercent: 50
  connectionConfig:
    maxRequestsPerConnection: 100
    connectTimeout: 2s
    tcpKeepalive: {{keepaliveProbes: 3, keepaliveTime: 60s, keepaliveInterval: 10s}}
    commonHttpProtocolOptions: {{idleTimeout: 30s, maxHeadersCount: 50, headersWithUnderscoresAction: ALLOW}}
---
apiVersion: gloo.solo.io/v1
kind: UpstreamGroup
metadata: {{name: group}}
spec:
  destinations:
  - destination: {{upstream: {{name: static}}}}
    weight: 1
---
apiVersion: gateway.solo.io/v1
kind: VirtualHostOption
metadata: {{name: vho}}
spec:
  options: {{bufferPerRoute: {{buffer: {{maxRequestBytes: 1024}}}}}}
---
apiVersion: gateway.solo.io/v1
kind: RouteOption
metadata: {{name: ro}}
spec:
  options: {{hostRewrite: walk.internal}}
---
apiVersion: gateway.solo.io/v1
kind: RouteTable
metadata: {{name: table, labels: {{team: a}}}}
spec:
  weight: 1
  routes:
  - matchers: [{{prefix: /t/a}}]
    directResponseAction: {{status: 200}}
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: walk}}
spec:
  displayName: The walk
  virtualHost:
    domains: [walk.example.com]
    optionsConfigRefs: {{delegateOptions: [{{name: vho, namespace: default}}]}}
    options:
      retries: {{retryOn: gateway-error, numRetries: 1, perTryTimeout: 2s, retriableStatusCodes: [],
                retryBackOff: {{baseInterval: 10ms, maxInterval: 100ms}}}}
      cors:
        allowOrigin: [https://app.example.com]
        allowOriginRegex: ['https://.*\\.example\\.org']
        allowMethods: [GET]
        allowHeaders: [authorization]
        exposeHeaders: [x-request-id]
        maxAge: "600"
        allowCredentials: true
        disableForRoute: false
      csrf:
        filterEnabled: {{defaultValue: {{numerator: 100, denominator: HUNDRED}}, runtimeKey: csrf.enabled}}
        shadowEnabled: {{defaultValue: {{numerator: 100}}}}
        additionalOrigins: [{{exact: a.example}}, {{prefix: b.}}, {{suffix: .c.example, ignoreCase: true}},
                            {{safeRegex: {{regex: "d[0-9]+"}}}}]
      headerManipulation:
        requestHeadersToAdd:
        - header: {{key: x-walk, value: "1"}}
          append: false
        - headerSecretRef: {{name: walk-headers, namespace: default}}
        requestHeadersToRemove: [x-debug]
        responseHeadersToAdd: [{{header: {{key: x-walked, value: "yes"}}}}]
        responseHeadersToRemove: [server]
      pluginOrder: [extauth, jwt, rbac]
      extauth: {{configRef: {{name: by-template, namespace: default}}}}
      jwt:
        validationPolicy: REQUIRE_VALID
        providers:
          local:
            issuer: https://issuer.example.com
            audiences: [api]
            keepToken: false
            clockSkewSeconds: 60
            tokenSource: {{headers: [{{header: x-token, prefix: "Bearer "}}], queryParams: [token]}}
            claimsToHeaders: [{{claim: sub, header: x-sub, append: false}}]
            jwks:
              local:
                key: |
{key}
          remote:
            issuer: https://other.example.com
            jwks:
              remote:
                upstreamRef: {{name: static, namespace: default}}
                url: http://keys.example.com/jwks.json
                cacheDuration: 5m
                timeout: 2s
                refetchInterval: 10s
                asyncFetch: {{}}
      rbac:
        shadow: false
        policies:
          p:
            nestedClaimDelimiter: "."
            permissions: {{methods: [GET], pathPrefix: /}}
            principals: [{{jwtPrincipal: {{claims: {{sub: a}}, provider: local, matcher: EXACT_STRING}}}}]
    routes:
    - name: all-matchers
      matchers:
      - prefix: /a
        caseSensitive: false
        methods: [GET]
        headers: [{{name: x-a, value: "1", regex: false, invertMatch: false}}]
        queryParameters: [{{name: q, value: v, regex: false}}]
      - exact: /b
      - regex: /c[0-9]+
      options:
        timeout: 5s
        upgrades: [{{websocket: {{enabled: true}}}}]
        tracing:
          routeDescriptor: all-matchers
          propagate: true
          tracePercentages: {{clientSamplePercentage: 100, randomSamplePercentage: 50, overallSamplePercentage: 100}}
        extauth: {{configRef: {{name: by-search}}}}
      routeAction: {{single: {{kube: {{ref: {{name: svc, namespace: default, port: 80}}, port: 80}}}}}}
    - matchers: [{{prefix: /u}}]
      options:
        prefixRewrite: /
        jwtStaged:
          afterExtAuth:
            providers:
              s:
                issuer: x
                jwks:
                  local:
                    key: |
{key2}
      routeAction: {{single: {{upstream: {{name: static, namespace: default}}}}}}
    - matchers: [{{prefix: /subset}}]
      routeAction: {{single: {{upstream: {{name: kube}}, subset: {{values: {{stage: canary}}}}}}}}
    - matchers: [{{prefix: /t}}]
      delegateAction: {{ref: {{name: table, namespace: default}}}}
    - matchers: [{{prefix: /t}}]
      delegateAction:
        selector:
          labels: {{team: a}}
          namespaces: [default]
    - matchers: [{{prefix: /t}}]
      delegateAction:
        selector:
          expressions: [{{key: team, operator: In, values: [a]}}]
    - matchers: [{{prefix: /t}}]
      delegateAction: {{name: table, namespace: default}}
    - matchers: [{{prefix: /traffic}}]
      optionsConfigRefs: {{delegateOptions: [{{name: ro}}]}}
      options:
        faults:
          abort: {{percentage: 0, httpStatus: 503}}
          delay: {{percentage: 0, fixedDelay: 1s}}
        regexRewrite: {{pattern: {{regex: "^/traffic/(.*)"}}, substitution: '/\\1'}}
        bufferPerRoute: {{disabled: true}}
      routeAction:
        multi:
          destinations:
          - destination: {{upstream: {{name: static}}}}
            weight: 9
            options: {{headerManipulation: {{requestHeadersToAdd: [{{header: {{key: x-dest, value: a}}}}]}}}}
          - destination: {{upstream: {{name: discovered}}}}
            weight: 1
    - matchers: [{{prefix: /hashed}}]
      options:
        lbHash:
          hashPolicies:
          - {{header: x-user, terminal: true}}
          - {{cookie: {{name: session}}}}
          - {{sourceIp: true}}
      routeAction: {{single: {{upstream: {{name: hashed}}}}}}
    - matchers: [{{prefix: /group}}]
      options:
        autoHostRewrite: true
        shadowing: {{upstream: {{name: static, namespace: default}}, percentage: 10}}
        retries:
          retryOn: "5xx,retriable-status-codes"
          numRetries: 2
          perTryTimeout: 1s
          retriableStatusCodes: [418]
          retryBackOff: {{baseInterval: 25ms, maxInterval: 250ms}}
      routeAction: {{upstreamGroup: {{name: group, namespace: default}}}}
    - matchers: [{{prefix: /moved}}]
      redirectAction: {{hostRedirect: new.example.com, portRedirect: 8443, httpsRedirect: true, stripQuery: true,
                        responseCode: PERMANENT_REDIRECT, prefixRewrite: /new}}
    - matchers: [{{prefix: /gone}}]
      redirectAction: {{pathRedirect: /elsewhere}}
    - directResponseAction: {{status: 200, body: ok}}
---
apiVersion: v1
kind: Secret
metadata: {{name: vs-tls, namespace: default}}
type: kubernetes.io/tls
data: {{tls.crt: {srv_crt}, tls.key: {srv_key}, ca.crt: {ca_b64}}}
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: walk-tls}}
spec:
  sslConfig:
    secretRef: {{name: vs-tls, namespace: default}}
    sniDomains: [tls.walk.example.com]
    verifySubjectAltName: [client.walk.example.com]
    parameters: {{minimumProtocolVersion: TLSv1_2, maximumProtocolVersion: TLSv1_3,
                  cipherSuites: [ECDHE-ECDSA-AES128-GCM-SHA256]}}
    alpnProtocols: [http/1.1]
    oneWayTls: false
    disableTlsSessionResumption: true
  virtualHost:
    domains: [tls.walk.example.com]
    routes: [{{matchers: [{{prefix: /}}], directResponseAction: {{status: 200, body: tls}}}}]
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: walk-tls-files}}
spec:
  sslConfig: {{sslFiles: {{tlsCert: client.crt, tlsKey: client.key, rootCa: ca.crt}}, sniDomains: [files.walk.test]}}
  virtualHost:
    domains: [files.walk.test]
    routes: [{{matchers: [{{prefix: /}}], directResponseAction: {{status: 200, body: files}}}}]
---
apiVersion: gateway.solo.io/v1
kind: Gateway
metadata: {{name: walk-gateway}}
spec:
  bindAddress: 127.0.0.1
  bindPort: 18080
  ssl: false
  useProxyProto: true
  proxyNames: [gateway-proxy]
  httpGateway:
    virtualServiceSelector: {{team: walk}}
    virtualServiceNamespaces: [default]
    options:
      httpConnectionManagerSettings:
        xffNumTrustedHops: 1
        useRemoteAddress: true
        skipXffAppend: false
        serverName: walk
        idleTimeout: 30s
        requestHeadersTimeout: 5s
        generateRequestId: true
        preserveExternalRequestId: false
        tracing:
          requestHeadersForTags: [x-tenant]
          verbose: false
          spawnUpstreamSpan: true
          tracePercentages: {{clientSamplePercentage: 100, randomSamplePercentage: 100, overallSamplePercentage: 100}}
          environmentVariablesForTags: [{{tag: pod, name: HOSTNAME, defaultValue: unknown}}]
          literalsForTags: [{{tag: zone, value: walk}}]
          openTelemetryConfig:
            collectorUpstreamRef: {{name: static, namespace: default}}
            serviceName: walk
            grpcService: {{authority: otel.example}}
            maxCacheSize: 100
        codecType: AUTO
        http2ProtocolOptions:
          maxConcurrentStreams: 50
          initialStreamWindowSize: 131072
          initialConnectionWindowSize: 2097152
          overrideStreamErrorOnInvalidHttpMessage: false
      healthCheck: {{path: /healthz}}
      grpcWeb: {{disable: false}}
      gzip:
        memoryLevel: 5
        compressionLevel: SPEED
        compressionStrategy: DEFAULT
        windowBits: 12
        contentLength: 30
        contentType: [application/json]
        disableOnEtagHeader: false
        removeAcceptEncodingHeader: false
      brotli:
        quality: 3
        windowBits: 18
        encoderMode: TEXT
        contentLength: 30
        contentType: [text/html]
        disableOnEtagHeader: false
        removeAcceptEncodingHeader: false
      httpLocalRatelimit:
        defaultLimit: {{maxTokens: 10, tokensPerFill: 1, fillInterval: 1s}}
        enableXRatelimitHeaders: true
        localRateLimitPerDownstreamConnection: false
---
apiVersion: gateway.solo.io/v1
kind: Gateway
metadata: {{name: walk-by-ref}}
spec:
  bindPort: 18081
  httpGateway:
    virtualServices: [{{name: walk, namespace: default}}]
  options:
    accessLoggingService:
      accessLog:
      - fileSink:
          path: /var/log/walk.log
          stringFormat: "%RESPONSE_CODE%\\n"
        filter:
          andFilter:
            filters:
            - statusCodeFilter: {{comparison: {{op: GE, value: {{defaultValue: 400, runtimeKey: k}}}}}}
            - durationFilter: {{comparison: {{op: LE, value: {{defaultValue: 1000}}}}}}
            - notHealthCheckFilter: {{}}
            - orFilter:
                filters:
                - headerFilter: {{header: {{name: x-a, exactMatch: a, invertMatch: true}}}}
                - headerFilter: {{header: {{name: x-b, prefixMatch: b}}}}
                - headerFilter: {{header: {{name: x-c, suffixMatch: c}}}}
                - headerFilter: {{header: {{name: x-d, containsMatch: d}}}}
                - headerFilter: {{header: {{name: x-e, presentMatch: true}}}}
                - headerFilter: {{header: {{name: x-f, safeRegexMatch: {{regex: 'f+'}}}}}}
      - fileSink:
          path: /var/log/walk.json
          jsonFormat: {{code: '%RESPONSE_CODE%'}}
"""

#: The ``oauth2`` config type (plugins/twistgw_oidc) and the rate-limit
#: plugins (plugins/twistgw_ratelimit): every variant of each, since a
#: variant's fields are only read when it is chosen.
WALK_OAUTH2_RATELIMIT = """\
---
apiVersion: v1
kind: Secret
metadata: {{name: walk-oauth}}
type: extauth.solo.io/oauth
stringData: {{client-secret: s3cret}}
---
apiVersion: v1
kind: Secret
metadata: {{name: walk-cipher}}
stringData: {{key: 0123456789abcdef0123456789abcdef}}
---
apiVersion: v1
kind: Secret
metadata: {{name: walk-redis-auth}}
stringData: {{username: walk, password: pw}}
---
apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {{name: walk-oidc-cookie}}
spec:
  configs:
  - oauth2:
      oidcAuthorizationCode:
        issuerUrl: https://idp.walk.example.com/
        clientId: walk
        clientSecretRef: {{name: walk-oauth, namespace: default}}
        appUrl: https://auth.walk.example.com
        callbackPath: /callback
        logoutPath: /logout
        afterLogoutUrl: https://auth.walk.example.com/bye
        scopes: [email]
        authEndpointQueryParams: {{prompt: login}}
        tokenEndpointQueryParams: {{audience: api}}
        discoveryOverride:
          authEndpoint: https://idp.walk.example.com/auth
          tokenEndpoint: https://idp.walk.example.com/token
          jwksUri: https://idp.walk.example.com/jwks
          endSessionEndpoint: https://idp.walk.example.com/end
          revocationEndpoint: https://idp.walk.example.com/revoke
          authMethods: [client_secret_basic]
        discoveryPollInterval: 30m
        jwksCacheRefreshPolicy: {{maxIdpReqPerPollingInterval: 2}}
        session:
          failOnFetchFailure: true
          cookieOptions: {{maxAge: 3600, notSecure: false, httpOnly: true, path: /, sameSite: LaxMode,
                          domain: auth.walk.example.com}}
          cookie: {{allowRefreshing: true, keyPrefix: walk}}
          cipherConfig: {{keyRef: {{name: walk-cipher, namespace: default}}}}
        headers: {{idTokenHeader: x-id-token, accessTokenHeader: x-access-token, useBearerSchemaForAuthorization: true}}
        identityToken: {{claimsToHeaders: [{{claim: email, header: x-email, append: false}}]}}
        dynamicMetadataFromClaims: {{x-subject: sub}}
        frontChannelLogout: {{path: /front-logout}}
        endSessionProperties: {{methodType: PostMethod}}
        default: {{}}
---
apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {{name: walk-oidc-redis}}
spec:
  configs:
  - oauth2:
      oidcAuthorizationCode:
        issuerUrl: https://idp.walk.example.com/
        clientId: walk-redis
        clientAuthentication: {{clientSecret: {{clientSecretRef: {{name: walk-oauth, namespace: default}}}}}}
        appUrl: https://auth.walk.example.com/r
        callbackPath: /callback
        session:
          redis:
            options: {{host: "127.0.0.1:6379", db: 1, poolSize: 2, socketType: TLS, tlsCertMountPath: {ca_path},
                      clustered: false}}
            keyPrefix: walk
            cookieName: walk-sid
            allowRefreshing: true
            preExpiryBuffer: 2s
---
apiVersion: enterprise.gloo.solo.io/v1
kind: AuthConfig
metadata: {{name: walk-access-tokens}}
spec:
  configs:
  - oauth2:
      accessTokenValidation:
        introspection:
          introspectionUrl: https://idp.walk.example.com/introspect
          clientId: walk-rs
          clientSecretRef: {{name: walk-oauth, namespace: default}}
          userIdAttributeName: sub
          disableClientSecret: false
        userinfoUrl: https://idp.walk.example.com/me
        cacheTimeout: 1m
        requiredScopes: {{scope: [read]}}
        claimsToHeaders: [{{claim: sub, header: x-token-sub, append: false}}]
        dynamicMetadataFromClaims: {{x-token-client: client_id}}
        default: {{}}
  - oauth2:
      accessTokenValidation:
        jwt:
          remoteJwks: {{url: https://idp.walk.example.com/jwks, refreshInterval: 5m}}
          issuer: https://idp.walk.example.com/
          audiences: [api]
  - oauth2:
      accessTokenValidation:
        jwt:
          localJwks:
            inlineString: |
{key3}
  - oauth2:
      accessTokenValidation: {{introspectionUrl: https://idp.walk.example.com/introspect}}
---
apiVersion: ratelimit.solo.io/v1alpha1
kind: RateLimitConfig
metadata: {{name: walk-rl}}
spec:
  raw:
    descriptors: [{{key: generic_key, value: config, rateLimit: {{requestsPerUnit: 1, unit: MINUTE}}}}]
    setDescriptors:
    - simpleDescriptors: [{{key: generic_key, value: config}}]
      rateLimit: {{requestsPerUnit: 2, unit: MINUTE}}
    rateLimits:
    - actions: [{{genericKey: {{descriptorValue: config}}}}]
    - setActions: [{{genericKey: {{descriptorValue: config}}}}]
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: walk-oauth2}}
spec:
  virtualHost:
    domains: [auth.walk.example.com]
    routes:
    - matchers: [{{prefix: /r}}]
      options: {{extauth: {{configRef: {{name: walk-oidc-redis}}}}}}
      directResponseAction: {{status: 200}}
    - matchers: [{{prefix: /api}}]
      options: {{extauth: {{configRef: {{name: walk-access-tokens}}}}}}
      directResponseAction: {{status: 200}}
    - matchers: [{{prefix: /}}]
      options: {{extauth: {{configRef: {{name: walk-oidc-cookie}}}}}}
      directResponseAction: {{status: 200}}
---
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {{name: walk-ratelimit}}
spec:
  virtualHost:
    domains: [rl.walk.example.com]
    options:
      ratelimitBasic:
        anonymousLimits: {{requestsPerUnit: 10, unit: MINUTE}}
        authorizedLimits: {{requestsPerUnit: 100, unit: MINUTE}}
      ratelimit:
        rateLimits:
        - actions:
          - genericKey: {{descriptorValue: walk}}
          - remoteAddress: {{}}
          - requestHeaders: {{headerName: x-plan, descriptorKey: plan}}
          - destinationCluster: {{}}
          - headerValueMatch:
              descriptorValue: matched
              expectMatch: true
              headers:
              - {{name: x-a, exactMatch: a, invertMatch: false}}
              - {{name: x-b, regexMatch: "b+"}}
              - {{name: x-c, rangeMatch: {{start: 1, end: 10}}}}
              - {{name: x-d, presentMatch: true}}
              - {{name: x-e, prefixMatch: e}}
              - {{name: x-f, suffixMatch: f}}
          - metadata:
              descriptorKey: sub
              metadataKey: {{key: envoy.filters.http.jwt_authn, path: [{{key: principal}}, {{key: sub}}]}}
              defaultValue: anonymous
              source: DYNAMIC
        - setActions: [{{genericKey: {{descriptorValue: walk}}}}]
      ratelimitEarly: {{rateLimits: [{{actions: [{{genericKey: {{descriptorValue: early}}}}]}}]}}
      ratelimitRegular: {{rateLimits: [{{actions: [{{genericKey: {{descriptorValue: regular}}}}]}}]}}
      rateLimitConfigs: {{refs: [{{name: walk-rl, namespace: default}}]}}
      localRatelimit: {{maxTokens: 10, tokensPerFill: 1, fillInterval: 1s}}
    routes:
    - matchers: [{{prefix: /route}}]
      options:
        ratelimit: {{includeVhRateLimits: true, rateLimits: [{{actions: [{{genericKey: {{descriptorValue: route}}}}]}}]}}
        ratelimitEarly: {{includeVhRateLimits: true}}
        ratelimitRegular: {{includeVhRateLimits: false, rateLimits: [{{actions: [{{remoteAddress: {{}}}}]}}]}}
      directResponseAction: {{status: 200}}
    - matchers: [{{prefix: /}}]
      directResponseAction: {{status: 200}}
"""

#: the Settings sections of the rate-limit plugins (added to the walk's Settings)
WALK_RATELIMIT_SETTINGS = """\
  ratelimitServer:
    rateLimitBeforeAuth: false
    denyOnFail: false
    requestTimeout: 100ms
    enableXRatelimitHeaders: true
    shadowMode: false
    redis:
      address: "127.0.0.1:6379"
      db: 0
      authSecretRef: {{name: walk-redis-auth, namespace: default}}
      tls: {{caSecretRef: {{name: upstream-tls, namespace: default}}}}
      clustered: false
  ratelimit:
    descriptors:
    - key: generic_key
      value: walk
      rateLimit: {{requestsPerUnit: 10, unit: MINUTE}}
      weight: 1
      alwaysApply: true
      descriptors:
      - key: remote_address
        rateLimit: {{requestsPerUnit: 5, unit: SECOND}}
    setDescriptors:
    - simpleDescriptors: [{{key: generic_key, value: walk}}]
      rateLimit: {{requestsPerUnit: 1, unit: HOUR}}
      alwaysApply: true
"""

LDIF = "dn: dc=example,dc=org\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n"


#: the scope of a plugin's fields in FIELDS, by the package reading them
#: (paths relative to its options key, or to its AuthConfig config entry)
PLUGIN_SCOPES = {"twistgw_jwt": "jwt", "twistgw_rbac": "rbac", "twistgw_ldap": "extauth",
                 "twistgw_extauth": "extauth", "twistgw_authtypes": "authtypes", "twistgw_oidc": "oauth2"}


def _plugin_scope(where: list[tuple[str, tuple[str, ...]]]) -> tuple[str | None, tuple[str, ...]]:
    """The scope and path prefix of a plugin's reading: where it was marked
    (the rate-limit plugins, Settings sections), else the first plugin
    module up the stack; None for the core's own readers (stages: watched
    apart)."""
    if where:
        return where[-1]
    frame = sys._getframe(2)
    while frame is not None:
        package = frame.f_globals.get("__name__", "").split(".")[0]
        if package == "twistgw_ratelimit":
            return "unmarked-ratelimit-reading", ()
        if package in PLUGIN_SCOPES:
            return PLUGIN_SCOPES[package], ()
        frame = frame.f_back
    return None, ()


def _norm(path: Any) -> str:
    """A field path with list indices as ``[]`` and names the walk chose as ``*``."""
    parts = path.split(".") if isinstance(path, str) else list(path)
    out = []
    for part in parts:
        prev = out[-1] if out else ""
        if isinstance(part, int):
            out.append("[]")
        elif prev in ("providers", "policies", "claims", "labels", "selector", "users",
                      "headersFromMetadataEntry") and prev != part:
            out.append("*")
        else:
            out.append(re.sub(r"\[\d+\]", "[]", str(part)))
    return ".".join(p for p in out if p).replace(".[]", "[]")


def walk(tmp_path, monkeypatch) -> set[str]:
    """Load and compile the walk configuration; every accepted field, as
    ``<scope>:<path>.<field>``."""
    seen: set[str] = set()
    where: list[tuple[str, tuple[str, ...]]] = []

    real_mapping = FieldReader.mapping

    def mapping(self, value, path, allowed=None, required=(), **kwargs):
        if allowed is not None:
            if hasattr(self, "resource"):  # the loader's reader
                scope, prefix = self.resource.split(" ")[0] or "?", ()
            else:  # a plugin's (twistgw.api.fields.Problems): whose, from the module reading
                scope, prefix = _plugin_scope(where)
            if scope is not None:
                for key in allowed:
                    seen.add(f"{scope}:{_norm(prefix + tuple(path) + (key,))}")
        return real_mapping(self, value, path, allowed, required, **kwargs)

    real_staged = stages.check

    def staged_check(plugin, decl, options, path, on_route, issue):
        # a staged plugin's keys (jwt's jwtStaged...), checked by the core from its declaration
        kind = "RouteTable" if tuple(path[:2]) == ("spec", "routes") else "VirtualService"
        for key in decl.keys:
            if key in options:
                for stage in (decl.before, decl.after):
                    seen.add(f"{kind}:{_norm(tuple(path) + (key, stage))}")
        return real_staged(plugin, decl, options, path, on_route, issue)

    monkeypatch.setattr(FieldReader, "mapping", mapping)
    monkeypatch.setattr(stages, "check", staged_check)


    # The rate-limit plugins read on paths relative to what is being read: an
    # options key, a Settings section or a RateLimitConfig. Where each reading
    # starts is marked here.

    def reading(real, scope):
        def read(*args, **kwargs):
            where.append(scope(*args) if callable(scope) else scope)
            try:
                return real(*args, **kwargs)
            finally:
                where.pop()
        return read

    for module, name, scope in (
            (rl_options, "compile_basic", ("ratelimitBasic", ())),
            (rl_options, "compile_actions", lambda key, *_: (key, ())),
            (rl_options, "compile_configs", ("rateLimitConfigs", ())),
            (rl_options, "compile_config_spec", ("RateLimitConfig", ())),  # paths from spec.raw
            (rl_options, "compile_local", ("localRatelimit", ())),
            (rl_settings, "read_server_settings", ("Settings", ("spec", "ratelimitServer"))),
            *((m, "parse_service_settings", ("Settings", ("spec", "ratelimit")))
              for m in (twistgw_ratelimit, rl_settings)),
            (ldap_devdir, "read_settings", ("Settings", ("spec", "extauth"))),
            *((m, f, ("Settings", ("spec", "rbac"))) for m in (twistgw_rbac, rbac_policy)
              for f in ("settings_problem", "require_rbac")),
            *((m, "verified_cache_size", ("Settings", ("spec", "jwt"))) for m in (twistgw_jwt, jwt_options))):
        monkeypatch.setattr(module, name, reading(getattr(module, name), scope))

    write_walk(tmp_path)
    config = load_directory(str(tmp_path), keep_going=True)
    snapshot = build_snapshot(config, PluginHost.create())
    assert len(snapshot.routes) == 20  # the walk loaded whole, every route compiled
    return seen


def write_walk(tmp_path: pathlib.Path) -> None:
    """The walk configuration (walk.yaml) and the files it names, in ``tmp_path``."""
    pem = _public_pem()
    (tmp_path / "users.ldif").write_text(LDIF)
    ca = TestCA()
    (tmp_path / "ca.crt").write_bytes(ca.pem)
    ca.issue("gateway.test", dns=["gateway.test"], client=True).write(tmp_path, "client")
    server = ca.issue("tls.walk.example.com", dns=["tls.walk.example.com"])
    template = WALK.replace("{ratelimit_settings}", WALK_RATELIMIT_SETTINGS) + WALK_OAUTH2_RATELIMIT
    (tmp_path / "walk.yaml").write_text(template.format(key=textwrap.indent(pem, " " * 18),
                                                    key2=textwrap.indent(pem, " " * 22),
                                                    key3=textwrap.indent(pem, " " * 14),
                                                    ca_path=tmp_path / "ca.crt",
                                                    ca_b64=base64.b64encode(ca.pem).decode(),
                                                    srv_crt=base64.b64encode(server.cert_pem).decode(),
                                                    srv_key=base64.b64encode(server.key_pem).decode()))


#: where the rate-limit plugins read rules (rateLimits) and descriptors
_RATELIMIT_SCOPES = ("ratelimit:", "ratelimitEarly:", "ratelimitRegular:", "RateLimitConfig:spec.raw.",
                     "Settings:spec.ratelimit.")


def _scope(field: str) -> str:
    """Routes are read by one parser whether a VirtualService or a RouteTable
    holds them; so are a rate limit's ``rateLimits`` (its actions) wherever
    they are written, and ``descriptors`` (at every level of their tree) and
    ``setDescriptors`` in Settings or a RateLimitConfig."""
    for prefix in ("VirtualService:spec.virtualHost.routes[]", "RouteTable:spec.routes[]"):
        if field.startswith(prefix):
            return "Route:" + field[len(prefix):].lstrip(".")
    if field.startswith(_RATELIMIT_SCOPES):
        for marker in ("rateLimits[]", "setDescriptors[]", "descriptors[]"):
            if marker in field:
                return marker[:-2] + ":" + field.rsplit(marker, 1)[1].lstrip(".").replace("setActions[]", "actions[]")
    return field


T = "test"
INFO = "info"
CORE = "tests/unit/test_core_config.py"
GLOO = "tests/unit/test_gloo_loader.py"
MATCH = "tests/unit/test_route_matchers.py"
TABLES = "tests/unit/test_route_tables.py"
PROXY = "tests/integration/test_core_proxy.py"
PLUGINS = "tests/unit/test_core_plugins.py"
CONF_DOC = "docs/configuration.md"
JWT_OPT = "tests/jwt/test_jwt_options.py"
JWT_BEH = "tests/jwt/test_jwt_behaviour.py"
JWT_REM = "tests/jwt/test_jwt_remote.py"
RBAC = "tests/rbac/test_rbac_config.py"
RBAC_SEM = "tests/rbac/test_rbac_semantics.py"
LDAP = "tests/ldap/test_ldap_units.py"
PASS = "tests/authtypes/test_services_loopback.py"
PASS_CLIENT = "tests/authtypes/test_passthrough_http_client.py"
APIKEY_BASIC = "tests/authtypes/test_apikey_basic_units.py"
OPA = "tests/authtypes/test_opa_units.py"
LDAP_SLAPD = "tests/ldap/test_ldap_slapd.py"
LDAP_SEARCH = "tests/ldap/test_ldap_search_units.py"
SUBSETS = "tests/unit/test_subsets.py"
RETRIES = "tests/integration/test_retries_e2e.py"
BREAKERS = "tests/integration/test_breakers_e2e.py"
H2_CONFIG = "tests/unit/test_http2_config.py"
H2_CORE = "tests/unit/test_grpc_core.py"
H2_E2E = "tests/integration/test_grpc_upstream_e2e.py"
UPSTREAM_TLS = "tests/integration/test_upstream_tls_e2e.py"
POLICY_E2E = "tests/integration/test_upstream_policy_e2e.py"
POLICY = "tests/unit/test_upstream_policy.py"
VS_TLS = "tests/integration/test_vs_tls_sni.py"
VS_TLS_UNIT = "tests/unit/test_vs_tls_config.py"
SHADOWING = "tests/integration/test_shadowing_e2e.py"

#: field -> ("test", test file[, file that sets the field]) or ("info", doc saying so).
FIELDS: dict[str, tuple[str, ...]] = {
    # -- envelope and Kubernetes kinds (validated by hand, see MANUAL) ------------
    "*:apiVersion": (T, GLOO), "*:kind": (T, GLOO), "*:metadata.name": (T, CORE),
    "*:metadata.namespace": (T, CORE), "*:metadata.labels": (T, TABLES),
    "*:status": (INFO, CONF_DOC),
    "Secret:data": (T, CORE), "Secret:stringData": (T, CORE), "Secret:type": (INFO, CONF_DOC),
    "Secret:immutable": (INFO, CONF_DOC),
    "Service:spec.ports": (T, CORE), "Service:spec.ports[].name": (T, CORE),
    "Service:spec.ports[].port": (T, CORE), "Service:spec.ports[].targetPort": (T, CORE),
    "Service:spec.ports[].protocol": (T, GLOO), "Service:spec.ports[].appProtocol": (T, GLOO),
    "Service:spec.ports[].nodePort": (INFO, CONF_DOC),
    "Service:spec.selector": (T, GLOO), "Service:spec.type": (T, GLOO), "Service:spec.externalName": (T, GLOO),
    **{f"Service:spec.{k}": (INFO, CONF_DOC) for k in (
        "clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "sessionAffinity", "sessionAffinityConfig",
        "externalTrafficPolicy", "internalTrafficPolicy", "publishNotReadyAddresses",
        "allocateLoadBalancerNodePorts", "loadBalancerClass", "healthCheckNodePort", "externalIPs",
        "loadBalancerSourceRanges", "trafficDistribution")},
    "Endpoints:subsets": (T, CORE), "Endpoints:subsets[].addresses": (T, CORE),
    "Endpoints:subsets[].addresses[].ip": (T, CORE),
    "Endpoints:subsets[].addresses[].hostname": (INFO, CONF_DOC),
    "Endpoints:subsets[].addresses[].nodeName": (INFO, CONF_DOC),
    "Endpoints:subsets[].addresses[].targetRef": (T, SUBSETS),
    "Pod:spec": (INFO, CONF_DOC), "Pod:status.podIP": (T, SUBSETS),
    "Endpoints:subsets[].notReadyAddresses": (T, CORE),
    "Endpoints:subsets[].ports": (T, CORE), "Endpoints:subsets[].ports[].name": (T, CORE),
    "Endpoints:subsets[].ports[].port": (T, CORE), "Endpoints:subsets[].ports[].protocol": (T, GLOO, CONF_DOC),
    "Endpoints:subsets[].ports[].appProtocol": (T, GLOO),
    # -- Upstream, AuthConfig, Settings ------------------------------------------
    "Upstream:spec.static": (T, PROXY), "Upstream:spec.static.hosts": (T, PROXY),
    "Upstream:spec.static.hosts[].addr": (T, PROXY), "Upstream:spec.static.hosts[].port": (T, PROXY),
    "Upstream:spec.static.useTls": (T, GLOO), "Upstream:spec.static.autoSniRewrite": (T, GLOO, CONF_DOC),
    "Upstream:spec.static.hosts[].sniAddr": (T, UPSTREAM_TLS),
    **{f"Upstream:spec.{k}": (T, H2_CONFIG, H2_E2E) for k in (
        "useHttp2", "initialStreamWindowSize", "initialConnectionWindowSize", "maxConcurrentStreams")},
    **{f"Upstream:spec.{k}": (T, H2_CONFIG) for k in (
        "overrideStreamErrorOnInvalidHttpMessage", "protocolSelection", "kube.serviceSpec", "static.serviceSpec")},
    **{f"Upstream:spec.circuitBreakers{k}": (T, BREAKERS) for k in (
        "", ".maxConnections", ".maxPendingRequests", ".maxRequests", ".maxRetries")},
    **{f"Upstream:spec.sslConfig{k}": (T, UPSTREAM_TLS) for k in (
        "", ".secretRef", ".secretRef.name", ".secretRef.namespace", ".sni", ".verifySubjectAltName",
        ".sslFiles", ".sslFiles.tlsCert", ".sslFiles.tlsKey", ".sslFiles.rootCa", ".parameters",
        ".parameters.minimumProtocolVersion", ".parameters.maximumProtocolVersion", ".parameters.cipherSuites")},
    **{f"VirtualService:spec.sslConfig{k}": (T, VS_TLS) for k in (
        "", ".secretRef", ".secretRef.name", ".secretRef.namespace", ".sniDomains", ".verifySubjectAltName",
        ".sslFiles", ".sslFiles.tlsCert", ".sslFiles.tlsKey", ".sslFiles.rootCa", ".parameters",
        ".parameters.minimumProtocolVersion", ".parameters.maximumProtocolVersion", ".parameters.cipherSuites",
        ".oneWayTls")},
    "VirtualService:spec.sslConfig.alpnProtocols": (T, VS_TLS_UNIT),
    "VirtualService:spec.sslConfig.disableTlsSessionResumption": (T, VS_TLS_UNIT),
    "Upstream:spec.kube": (T, CORE), "Upstream:spec.kube.serviceName": (T, CORE),
    "Upstream:spec.kube.serviceNamespace": (T, CORE), "Upstream:spec.kube.servicePort": (T, CORE),
    "Upstream:spec.kube.selector": (T, GLOO),
    "Upstream:spec.kube.subsetSpec": (T, SUBSETS), "Upstream:spec.kube.subsetSpec.selectors": (T, SUBSETS),
    "Upstream:spec.kube.subsetSpec.selectors[].keys": (T, SUBSETS),
    "Upstream:spec.kube.subsetSpec.selectors[].singleHostPerSubset": (T, SUBSETS),
    "Upstream:spec.kube.subsetSpec.fallbackPolicy": (T, SUBSETS),
    "Upstream:spec.kube.subsetSpec.defaultSubset": (T, SUBSETS),
    "Upstream:spec.kube.subsetSpec.defaultSubset.values": (T, SUBSETS),
    "AuthConfig:spec.configs": (T, LDAP),
    "AuthConfig:spec.booleanExpr": (T, "tests/ldap/test_ldap_boolean_expr.py"),
    "AuthConfig:spec.failOnRedirect": (T, "tests/ldap/test_ldap_boolean_expr.py"),
    "Settings:spec.gateway.echoServer": (T, "tests/docs/test_readme_demo.py", "etc/settings.yaml"),
    "Settings:spec.gateway.echoServer.listen": (T, "tests/docs/test_readme_demo.py", "etc/settings.yaml"),
    "Settings:spec.gateway.regexMaxProgramSize": (T, "tests/unit/test_route_matchers.py"),
    "Settings:spec.gateway.discoveryNamespace": (T, "tests/unit/test_gloo_loader.py"),
    "Settings:spec.rbac.requireRbac": (T, RBAC), "Settings:spec.jwt.verifiedTokenCacheSize": (T, JWT_BEH),
    "Settings:spec.extauth.devDirectory.ldif": (T, "tests/ldap/test_ldap_memory.py"),
    "Settings:spec.extauth.devDirectory.listen": (T, "tests/ldap/test_ldap_memory.py"),
    # -- VirtualService, RouteTable, routes --------------------------------------
    "VirtualService:spec.displayName": (INFO, CONF_DOC),
    "VirtualService:spec.virtualHost": (T, CORE), "VirtualService:spec.virtualHost.domains": (T, CORE),
    "VirtualService:spec.virtualHost.options": (T, PLUGINS), "VirtualService:spec.virtualHost.routes": (T, CORE),
    "RouteTable:spec.routes": (T, TABLES), "RouteTable:spec.weight": (T, TABLES),
    "Route:name": (T, CORE), "Route:options": (T, PLUGINS),
    "Route:inheritableMatchers": (T, TABLES), "Route:inheritablePathMatchers": (T, TABLES),
    "Route:options.prefixRewrite": (T, MATCH), "Route:options.timeout": (T, PROXY),
    "Route:options.pluginOrder": (T, PLUGINS),
    "Route:options.upgrades": (T, "tests/unit/test_engine_upgrades_option.py"),
    "Route:options.upgrades[].websocket": (T, "tests/unit/test_engine_upgrades_option.py"),
    "Route:options.upgrades[].websocket.enabled": (T, "tests/unit/test_engine_upgrades_option.py"),
    "VirtualService:spec.virtualHost.options.pluginOrder": (T, PLUGINS),
    "Route:options.jwtStaged.beforeExtAuth": (T, PLUGINS), "Route:options.jwtStaged.afterExtAuth": (T, PLUGINS),
    "Route:matchers": (T, MATCH), "Route:matchers[].prefix": (T, MATCH), "Route:matchers[].exact": (T, MATCH),
    "Route:matchers[].regex": (T, MATCH), "Route:matchers[].caseSensitive": (T, MATCH),
    "Route:matchers[].methods": (T, MATCH), "Route:matchers[].headers": (T, MATCH),
    "Route:matchers[].headers[].name": (T, MATCH), "Route:matchers[].headers[].value": (T, MATCH),
    "Route:matchers[].headers[].regex": (T, MATCH), "Route:matchers[].headers[].invertMatch": (T, MATCH),
    "Route:matchers[].queryParameters": (T, MATCH), "Route:matchers[].queryParameters[].name": (T, MATCH),
    "Route:matchers[].queryParameters[].value": (T, MATCH),
    "Route:matchers[].queryParameters[].regex": (T, MATCH),
    "Route:directResponseAction": (T, PROXY), "Route:directResponseAction.status": (T, PROXY),
    "Route:directResponseAction.body": (T, PROXY),
    "Route:routeAction": (T, PROXY), "Route:routeAction.single": (T, PROXY),
    "Route:routeAction.single.upstream": (T, PROXY), "Route:routeAction.single.upstream.name": (T, PROXY),
    "Route:routeAction.single.upstream.namespace": (T, CORE),
    "Route:routeAction.single.kube": (T, GLOO), "Route:routeAction.single.kube.port": (T, GLOO),
    "Route:routeAction.single.kube.ref": (T, GLOO), "Route:routeAction.single.kube.ref.name": (T, GLOO),
    "Route:routeAction.single.kube.ref.namespace": (T, GLOO), "Route:routeAction.single.kube.ref.port": (T, GLOO),
    "Route:routeAction.single.subset": (T, SUBSETS), "Route:routeAction.single.subset.values": (T, SUBSETS),
    "Route:delegateAction": (T, TABLES), "Route:delegateAction.ref": (T, TABLES),
    "Route:delegateAction.ref.name": (T, TABLES), "Route:delegateAction.ref.namespace": (T, TABLES),
    "Route:delegateAction.name": (T, TABLES, CONF_DOC), "Route:delegateAction.namespace": (T, TABLES, CONF_DOC),
    "Route:delegateAction.selector": (T, TABLES), "Route:delegateAction.selector.*": (T, TABLES),
    "Route:delegateAction.selector.*[].key": (T, TABLES), "Route:delegateAction.selector.*[].operator": (T, TABLES),
    "Route:delegateAction.selector.*[].values": (T, TABLES),
    # -- jwt ---------------------------------------------------------------------
    "jwt:disable": (T, PLUGINS), "jwt:validationPolicy": (T, JWT_BEH), "jwt:providers": (T, JWT_OPT),
    "jwt:providers.*.issuer": (T, JWT_BEH), "jwt:providers.*.audiences": (T, JWT_BEH),
    "jwt:providers.*.keepToken": (T, "tests/jwt/test_jwt_security.py"),
    "jwt:providers.*.clockSkewSeconds": (T, "tests/jwt/test_jwt_security.py"),
    "jwt:providers.*.claimsToHeaders": (T, "tests/jwt/test_jwt_claim_routing.py", "tests/jwt/jwt_helpers.py"),
    "jwt:providers.*.claimsToHeaders[].claim": (T, JWT_BEH), "jwt:providers.*.claimsToHeaders[].header": (T, JWT_BEH),
    "jwt:providers.*.claimsToHeaders[].append": (T, JWT_BEH),
    "jwt:providers.*.tokenSource": (T, "tests/jwt/test_jwt_claim_routing.py", "tests/jwt/jwt_helpers.py"),
    "jwt:providers.*.tokenSource.headers": (T, JWT_BEH), "jwt:providers.*.tokenSource.headers[].header": (T, JWT_BEH),
    "jwt:providers.*.tokenSource.headers[].prefix": (T, JWT_BEH),
    "jwt:providers.*.tokenSource.queryParams": (T, JWT_BEH),
    "jwt:providers.*.jwks": (T, JWT_OPT), "jwt:providers.*.jwks.local": (T, JWT_OPT),
    "jwt:providers.*.jwks.local.key": (T, JWT_OPT), "jwt:providers.*.jwks.remote": (T, JWT_REM),
    "jwt:providers.*.jwks.local.keyFile": (T, "tests/unit/test_testing_api.py", "tests/docs/test_quickstart.py"),
    "jwt:providers.*.jwks.remote.upstreamRef": (T, JWT_REM),
    "jwt:providers.*.jwks.remote.upstreamRef.name": (T, JWT_REM, "tests/jwt/jwt_helpers.py"),
    "jwt:providers.*.jwks.remote.upstreamRef.namespace": (T, JWT_OPT),
    "jwt:providers.*.jwks.remote.url": (T, JWT_REM), "jwt:providers.*.jwks.remote.cacheDuration": (T, JWT_REM),
    "jwt:providers.*.jwks.remote.timeout": (T, "tests/reliability/test_faults_jwks.py",
                                            "tests/reliability/rel_helpers.py"),
    "jwt:providers.*.jwks.remote.refetchInterval": (T, JWT_REM),
    "jwt:providers.*.jwks.remote.asyncFetch": (INFO, "docs/jwt.md"),
    # -- rbac --------------------------------------------------------------------
    "rbac:disable": (T, PLUGINS), "rbac:shadow": (T, "tests/rbac/test_rbac_shadow_regex.py"),
    "rbac:policies": (T, RBAC_SEM), "rbac:policies.*.nestedClaimDelimiter": (T, RBAC),
    "rbac:policies.*.permissions": (T, RBAC_SEM), "rbac:policies.*.permissions.methods": (T, RBAC_SEM),
    "rbac:policies.*.permissions.pathPrefix": (T, RBAC_SEM), "rbac:policies.*.principals": (T, RBAC_SEM),
    "rbac:policies.*.principals[].jwtPrincipal": (T, RBAC_SEM),
    "rbac:policies.*.principals[].jwtPrincipal.claims": (T, RBAC_SEM),
    "rbac:policies.*.principals[].jwtPrincipal.matcher": (T, RBAC_SEM, "tests/rbac/rbac_helpers.py"),
    "rbac:policies.*.principals[].jwtPrincipal.provider": (T, RBAC_SEM),
    # -- extauth (LDAP) ------------------------------------------------------------
    "extauth:configRef": (T, LDAP), "extauth:configRef.name": (T, LDAP), "extauth:configRef.namespace": (T, LDAP),
    "extauth:customAuth": (T, "tests/authtypes/test_services_loopback.py"),
    "extauth:address": (T, LDAP), "extauth:startTLS": (T, LDAP_SLAPD), "extauth:tls": (T, LDAP_SLAPD),
    "extauth:tls.caFile": (T, LDAP_SLAPD), "extauth:tls.caPem": (T, LDAP), "extauth:tls.serverName": (T, LDAP_SLAPD),
    "extauth:userDnTemplate": (T, LDAP), "extauth:membershipAttributeName": (T, LDAP),
    "extauth:allowedGroups": (T, LDAP), "extauth:searchFilter": (T, LDAP),
    "extauth:disableGroupChecking": (T, LDAP), "extauth:groupLookupSettings": (T, LDAP),
    "extauth:groupLookupSettings.checkGroupsWithServiceAccount": (T, LDAP),
    "extauth:groupLookupSettings.credentialsSecretRef": (T, LDAP),
    "extauth:groupLookupSettings.credentialsSecretRef.name": (T, LDAP, "tests/ldap/ldap_helpers.py"),
    "extauth:groupLookupSettings.credentialsSecretRef.namespace": (T, LDAP, "tests/ldap/ldap_helpers.py"),
    "extauth:pool": (T, LDAP_SLAPD), "extauth:pool.maxSize": (T, LDAP_SLAPD),
    "extauth:pool.initialSize": (T, LDAP_SLAPD),
    "extauth:connectTimeout": (T, LDAP_SLAPD, "tests/ldap/ldap_helpers.py"), "extauth:requestTimeout": (T, LDAP),
    "extauth:cacheTtl": (T, LDAP_SLAPD), "extauth:realm": (T, LDAP),
    "extauth:keepCredentials": (T, LDAP_SEARCH), "extauth:groupsHeader": (T, LDAP_SEARCH),
    "extauth:userHeader": (T, LDAP_SEARCH), "extauth:userSearch": (T, LDAP_SEARCH),
    "extauth:userSearch.baseDn": (T, LDAP_SEARCH), "extauth:userSearch.filter": (T, LDAP_SEARCH),
    "extauth:userSearch.scope": (T, LDAP_SEARCH), "extauth:userSearch.credentialsSecretRef": (T, LDAP_SEARCH,
                                                                                            "tests/ldap/test_ldap_search.py"),
    "extauth:userSearch.usernameAttribute": (T, "tests/ldap/test_ldap_attacks.py"),
    "extauth:userSearch.credentialsSecretRef.name": (T, LDAP_SEARCH, "tests/ldap/ldap_helpers.py"),
    "extauth:userSearch.credentialsSecretRef.namespace": (T, LDAP_SEARCH, "tests/ldap/ldap_helpers.py"),
    "extauth:groupSearch": (T, LDAP_SEARCH), "extauth:groupSearch.baseDn": (T, LDAP_SEARCH),
    "extauth:groupSearch.filter": (T, LDAP_SEARCH), "extauth:groupSearch.nameAttribute": (T, LDAP_SEARCH),
    "extauth:groupSearch.nested": (T, LDAP_SEARCH), "extauth:groupSearch.maxDepth": (T, LDAP_SEARCH),
    # -- passThroughAuth (the twistgw_authtypes plugin) ------------------------------
    **{f"authtypes:{k}": (T, PASS) for k in (
        "http", "config", "failureModeAllow", "http.url", "http.request", "http.response", "http.connectionTimeout",
        *(f"http.request.{k}" for k in ("allowedHeaders", "headersToAdd", "passThroughState",
                                         "passThroughFilterMetadata")),
        *(f"http.response.{k}" for k in ("allowedUpstreamHeaders", "allowedUpstreamHeadersToOverwrite",
                                          "allowedClientHeadersOnDenied", "allowedClientHeadersOnSuccess",
                                          "readStateFromResponse")))},
    "authtypes:grpc": (T, "tests/authtypes/test_grpc_passthrough.py"),
    **{f"authtypes:grpc.{k}": (T, "tests/authtypes/test_grpc_passthrough.py") for k in (
        "address", "connectionTimeout", "tlsConfig", "tlsConfig.secretRef", "tlsConfig.secretRef.name",
        "tlsConfig.secretRef.namespace", "retryPolicy", "retryPolicy.numRetries", "retryPolicy.retryBackOff",
        "retryPolicy.retryBackOff.baseInterval", "retryPolicy.retryBackOff.maxInterval")},
    "authtypes:grpc.tlsConfig.sslParams": (T, PASS),  # refused by name (grpcio sets no TLS versions)
    "authtypes:http.request.passThroughBody": (T, "tests/authtypes/test_body_gateway.py"),
    **{f"authtypes:http.{k}": (T, PASS_CLIENT) for k in (
        "tlsConfig", "tlsConfig.secretRef", "tlsConfig.secretRef.name", "tlsConfig.secretRef.namespace",
        "tlsConfig.sslParams", "tlsConfig.sslParams.minimumProtocolVersion",
        "tlsConfig.sslParams.maximumProtocolVersion", "responseHeaderTimeout", "connectionPool",
        "connectionPool.maxConns", "connectionPool.idleTimeout")},
    # -- apiKeyAuth, basicAuth and opaAuth (the twistgw_authtypes plugin) -------------
    # skipMetadataValidation and opaAuth's options are refused unless false (what twistgw always does)
    **{f"authtypes:{k}": (T, APIKEY_BASIC) for k in (
        "headerName", "labelSelector", "apiKeySecretRefs", "apiKeySecretRefs[].name", "apiKeySecretRefs[].namespace",
        "headersFromMetadataEntry", "headersFromMetadataEntry.*.name", "headersFromMetadataEntry.*.required",
        "skipMetadataValidation", "k8sSecretApikeyStorage", "k8sSecretApikeyStorage.labelSelector",
        "k8sSecretApikeyStorage.apiKeySecretRefs", "k8sSecretApikeyStorage.apiKeySecretRefs[].name",
        "k8sSecretApikeyStorage.apiKeySecretRefs[].namespace",
        "realm", "keepCredentials", "apr", "apr.users", "apr.users.*.salt", "apr.users.*.hashedPassword",
        "encryption", "encryption.apr", "encryption.sha1", "userList", "userList.users",
        "userList.users.*.salt", "userList.users.*.hashedPassword")},
    **{f"authtypes:{k}": (T, OPA) for k in (
        "modules", "modules[].name", "modules[].namespace", "query", "options", "options.fastInputConversion",
        "options.returnDecisionReason")},
}

TRAFFIC = "tests/unit/test_traffic.py"

#: Gloo's traffic options, redirects, weighted destinations and the kinds
#: that carry them: each field's behaviour is asserted in tests/unit/test_traffic.py.
TRAFFIC_FIELDS = """
    Route:options.bufferPerRoute.buffer
    Route:options.bufferPerRoute.disabled
    Route:options.faults.abort
    Route:options.faults.abort.httpStatus
    Route:options.faults.abort.percentage
    Route:options.faults.delay
    Route:options.faults.delay.fixedDelay
    Route:options.faults.delay.percentage
    Route:options.regexRewrite.pattern
    Route:options.regexRewrite.pattern.regex
    Route:options.regexRewrite.substitution
    Route:optionsConfigRefs
    Route:optionsConfigRefs.delegateOptions
    Route:optionsConfigRefs.delegateOptions[].name
    Route:optionsConfigRefs.delegateOptions[].namespace
    Route:redirectAction
    Route:redirectAction.hostRedirect
    Route:redirectAction.httpsRedirect
    Route:redirectAction.pathRedirect
    Route:redirectAction.portRedirect
    Route:redirectAction.prefixRewrite
    Route:redirectAction.responseCode
    Route:redirectAction.stripQuery
    Route:routeAction.multi
    Route:routeAction.multi.destinations
    Route:routeAction.multi.destinations[].destination
    Route:routeAction.multi.destinations[].destination.upstream
    Route:routeAction.multi.destinations[].destination.upstream.name
    Route:routeAction.multi.destinations[].destination.upstream.namespace
    Route:routeAction.multi.destinations[].options
    Route:routeAction.multi.destinations[].options.headerManipulation.requestHeadersToAdd
    Route:routeAction.multi.destinations[].options.headerManipulation.requestHeadersToAdd[].append
    Route:routeAction.multi.destinations[].options.headerManipulation.requestHeadersToAdd[].header
    Route:routeAction.multi.destinations[].options.headerManipulation.requestHeadersToAdd[].header.key
    Route:routeAction.multi.destinations[].options.headerManipulation.requestHeadersToAdd[].header.value
    Route:routeAction.multi.destinations[].options.headerManipulation.requestHeadersToAdd[].headerSecretRef
    Route:routeAction.multi.destinations[].options.headerManipulation.requestHeadersToRemove
    Route:routeAction.multi.destinations[].options.headerManipulation.responseHeadersToAdd
    Route:routeAction.multi.destinations[].options.headerManipulation.responseHeadersToRemove
    Route:routeAction.multi.destinations[].weight
    Route:routeAction.upstreamGroup
    Route:routeAction.upstreamGroup.name
    Route:routeAction.upstreamGroup.namespace
    RouteOption:spec.options
    UpstreamGroup:spec.destinations
    UpstreamGroup:spec.destinations[].destination
    UpstreamGroup:spec.destinations[].destination.upstream
    UpstreamGroup:spec.destinations[].destination.upstream.name
    UpstreamGroup:spec.destinations[].destination.upstream.namespace
    UpstreamGroup:spec.destinations[].options
    UpstreamGroup:spec.destinations[].weight
    VirtualHostOption:spec.options
    VirtualHostOption:spec.options.bufferPerRoute.buffer
    VirtualHostOption:spec.options.bufferPerRoute.buffer.maxRequestBytes
    VirtualHostOption:spec.options.bufferPerRoute.disabled
    VirtualService:spec.virtualHost.options.cors.allowCredentials
    VirtualService:spec.virtualHost.options.cors.allowHeaders
    VirtualService:spec.virtualHost.options.cors.allowMethods
    VirtualService:spec.virtualHost.options.cors.allowOrigin
    VirtualService:spec.virtualHost.options.cors.allowOriginRegex
    VirtualService:spec.virtualHost.options.cors.disableForRoute
    VirtualService:spec.virtualHost.options.cors.exposeHeaders
    VirtualService:spec.virtualHost.options.cors.maxAge
    VirtualService:spec.virtualHost.options.csrf.additionalOrigins
    VirtualService:spec.virtualHost.options.csrf.additionalOrigins[].exact
    VirtualService:spec.virtualHost.options.csrf.additionalOrigins[].ignoreCase
    VirtualService:spec.virtualHost.options.csrf.additionalOrigins[].prefix
    VirtualService:spec.virtualHost.options.csrf.additionalOrigins[].safeRegex
    VirtualService:spec.virtualHost.options.csrf.additionalOrigins[].safeRegex.regex
    VirtualService:spec.virtualHost.options.csrf.additionalOrigins[].suffix
    VirtualService:spec.virtualHost.options.csrf.filterEnabled
    VirtualService:spec.virtualHost.options.csrf.filterEnabled.defaultValue
    VirtualService:spec.virtualHost.options.csrf.filterEnabled.defaultValue.denominator
    VirtualService:spec.virtualHost.options.csrf.filterEnabled.defaultValue.numerator
    VirtualService:spec.virtualHost.options.csrf.shadowEnabled
    VirtualService:spec.virtualHost.options.csrf.shadowEnabled.defaultValue
    VirtualService:spec.virtualHost.options.csrf.shadowEnabled.defaultValue.denominator
    VirtualService:spec.virtualHost.options.csrf.shadowEnabled.defaultValue.numerator
    VirtualService:spec.virtualHost.options.headerManipulation.requestHeadersToAdd
    VirtualService:spec.virtualHost.options.headerManipulation.requestHeadersToAdd[].append
    VirtualService:spec.virtualHost.options.headerManipulation.requestHeadersToAdd[].header
    VirtualService:spec.virtualHost.options.headerManipulation.requestHeadersToAdd[].header.key
    VirtualService:spec.virtualHost.options.headerManipulation.requestHeadersToAdd[].header.value
    VirtualService:spec.virtualHost.options.headerManipulation.requestHeadersToAdd[].headerSecretRef
    VirtualService:spec.virtualHost.options.headerManipulation.requestHeadersToAdd[].headerSecretRef.name
    VirtualService:spec.virtualHost.options.headerManipulation.requestHeadersToAdd[].headerSecretRef.namespace
    VirtualService:spec.virtualHost.options.headerManipulation.requestHeadersToRemove
    VirtualService:spec.virtualHost.options.headerManipulation.responseHeadersToAdd
    VirtualService:spec.virtualHost.options.headerManipulation.responseHeadersToAdd[].append
    VirtualService:spec.virtualHost.options.headerManipulation.responseHeadersToAdd[].header
    VirtualService:spec.virtualHost.options.headerManipulation.responseHeadersToAdd[].header.key
    VirtualService:spec.virtualHost.options.headerManipulation.responseHeadersToAdd[].header.value
    VirtualService:spec.virtualHost.options.headerManipulation.responseHeadersToRemove
    VirtualService:spec.virtualHost.optionsConfigRefs
    VirtualService:spec.virtualHost.optionsConfigRefs.delegateOptions
    VirtualService:spec.virtualHost.optionsConfigRefs.delegateOptions[].name
    VirtualService:spec.virtualHost.optionsConfigRefs.delegateOptions[].namespace
    Route:options.lbHash.hashPolicies
    Route:options.lbHash.hashPolicies[].cookie
    Route:options.lbHash.hashPolicies[].cookie.name
    Route:options.lbHash.hashPolicies[].header
    Route:options.lbHash.hashPolicies[].sourceIp
    Route:options.lbHash.hashPolicies[].terminal
    Upstream:spec.loadBalancerConfig
    Upstream:spec.loadBalancerConfig.maglev
    Upstream:spec.loadBalancerConfig.maglev.useHostnameForHashing
    Upstream:spec.loadBalancerConfig.random
    Upstream:spec.loadBalancerConfig.ringHash
    Upstream:spec.loadBalancerConfig.ringHash.ringHashConfig
    Upstream:spec.loadBalancerConfig.ringHash.ringHashConfig.maximumRingSize
    Upstream:spec.loadBalancerConfig.ringHash.ringHashConfig.minimumRingSize
    Upstream:spec.loadBalancerConfig.ringHash.useHostnameForHashing
    Upstream:spec.loadBalancerConfig.roundRobin
    Upstream:spec.healthChecks
    Upstream:spec.healthChecks[].timeout
    Upstream:spec.healthChecks[].interval
    Upstream:spec.healthChecks[].unhealthyThreshold
    Upstream:spec.healthChecks[].healthyThreshold
    Upstream:spec.healthChecks[].httpHealthCheck
    Upstream:spec.healthChecks[].httpHealthCheck.path
    Upstream:spec.healthChecks[].httpHealthCheck.host
    Upstream:spec.healthChecks[].httpHealthCheck.expectedStatuses
    Upstream:spec.healthChecks[].httpHealthCheck.expectedStatuses[].start
    Upstream:spec.healthChecks[].httpHealthCheck.expectedStatuses[].end
"""
FIELDS.update({field: (T, TRAFFIC) for field in TRAFFIC_FIELDS.split()})
FIELDS["Upstream:spec.healthChecks[].noTrafficInterval"] = (T, "tests/integration/test_health_traffic_e2e.py")
FIELDS.update({f"Upstream:spec.{k}": (T, POLICY_E2E) for k in (
    "outlierDetection", "outlierDetection.consecutive5xx", "outlierDetection.interval",
    "outlierDetection.baseEjectionTime", "outlierDetection.maxEjectionPercent", "loadBalancerConfig.leastRequest",
    "loadBalancerConfig.leastRequest.choiceCount", "loadBalancerConfig.healthyPanicThreshold", "connectionConfig",
    "connectionConfig.maxRequestsPerConnection", "connectionConfig.connectTimeout", "connectionConfig.tcpKeepalive",
    "connectionConfig.tcpKeepalive.keepaliveProbes", "connectionConfig.tcpKeepalive.keepaliveTime",
    "connectionConfig.tcpKeepalive.keepaliveInterval", "connectionConfig.commonHttpProtocolOptions",
    "connectionConfig.commonHttpProtocolOptions.idleTimeout",
    "connectionConfig.commonHttpProtocolOptions.maxHeadersCount")})
FIELDS.update({f"Upstream:spec.{k}": (T, POLICY) for k in (
    "outlierDetection.enforcingConsecutive5xx", "outlierDetection.consecutiveGatewayFailure",
    "outlierDetection.enforcingConsecutiveGatewayFailure", "outlierDetection.maxEjectionTime",
    "connectionConfig.commonHttpProtocolOptions.headersWithUnderscoresAction")})
FIELDS.update({f"Route:options.{k}": (T, TRAFFIC) for k in CORE_TRAFFIC_KEYS})
FIELDS.update({f"VirtualService:spec.virtualHost.options.{k}": (T, TRAFFIC)
               for k in CORE_TRAFFIC_KEYS - CORE_ROUTE_ONLY})
FIELDS.update({f"{scope}.retries{k}": (T, RETRIES) for scope in ("Route:options", "VirtualService:spec.virtualHost.options")
               for k in ("", ".retryOn", ".numRetries", ".perTryTimeout", ".retriableStatusCodes", ".retryBackOff",
                         ".retryBackOff.baseInterval", ".retryBackOff.maxInterval")})
FIELDS.update({f"Route:options.shadowing{k}": (T, SHADOWING)
               for k in ("", ".upstream", ".upstream.name", ".upstream.namespace", ".percentage")})
GW_UNIT = "tests/unit/test_gateway_kind.py"
GW_E2E = "tests/integration/test_gateway_kind_e2e.py"
TRACE_UNIT = "tests/unit/test_tracing.py"
TRACE_E2E = "tests/integration/test_tracing_e2e.py"
GW_SSL_E2E = "tests/integration/test_gateway_ssl_e2e.py"
GW_DOC = "docs/gateways.md"
H2_GATEWAY = "tests/http2/test_http2_gateway.py"
COMPRESS_E2E = "tests/integration/test_gateway_compression_e2e.py"
COMPRESS_UNIT = "tests/unit/test_compression_config.py"
_HTTP = "Gateway:spec.httpGateway"
_TRACING = f"{_HTTP}.options.httpConnectionManagerSettings.tracing"
FIELDS.update({
    "Gateway:spec.bindAddress": (T, GW_E2E), "Gateway:spec.bindPort": (T, GW_E2E),
    "Gateway:spec.ssl": (T, GW_SSL_E2E), "Gateway:spec.useProxyProto": (T, GW_E2E),
    "Gateway:spec.proxyNames": (T, GW_UNIT), "Gateway:spec.httpGateway": (T, GW_E2E),
    f"{_HTTP}.virtualServices": (T, GW_E2E), f"{_HTTP}.virtualServices[].name": (T, GW_E2E),
    f"{_HTTP}.virtualServices[].namespace": (T, GW_E2E),
    f"{_HTTP}.virtualServiceSelector": (T, GW_E2E), f"{_HTTP}.virtualServiceNamespaces": (T, GW_UNIT),
    f"{_HTTP}.options": (T, GW_E2E),
    f"{_HTTP}.options.httpConnectionManagerSettings": (T, GW_E2E),
    **{f"{_HTTP}.options.httpConnectionManagerSettings.{k}": (T, GW_E2E)
       for k in ("xffNumTrustedHops", "useRemoteAddress", "skipXffAppend")},
    **{f"{_HTTP}.options.httpConnectionManagerSettings.{k}": (T, GW_UNIT, GW_DOC)
       for k in ("serverName", "idleTimeout", "requestHeadersTimeout")},
    f"{_HTTP}.options.healthCheck.path": (T, GW_UNIT),
    **{f"{_HTTP}.options.httpConnectionManagerSettings.{k}": (T, COMPRESS_E2E, COMPRESS_UNIT)
       for k in ("generateRequestId", "preserveExternalRequestId")},
    **{f"{_HTTP}.options.gzip.{k}": (T, COMPRESS_E2E, COMPRESS_UNIT)
       for k in ("memoryLevel", "compressionLevel", "compressionStrategy", "windowBits", "contentLength",
                 "contentType", "disableOnEtagHeader", "removeAcceptEncodingHeader")},
    **{f"{_HTTP}.options.brotli.{k}": (T, COMPRESS_E2E, COMPRESS_UNIT)
       for k in ("quality", "windowBits", "encoderMode", "contentLength", "contentType", "disableOnEtagHeader",
                 "removeAcceptEncodingHeader")},
    f"{_HTTP}.options.httpConnectionManagerSettings.tracing": (T, TRACE_E2E),
    **{f"{_TRACING}.{k}": (T, TRACE_UNIT)
       for k in ("requestHeadersForTags", "verbose", "spawnUpstreamSpan", "tracePercentages",
                 "tracePercentages.clientSamplePercentage", "tracePercentages.randomSamplePercentage",
                 "tracePercentages.overallSamplePercentage", "environmentVariablesForTags",
                 "environmentVariablesForTags[].tag", "environmentVariablesForTags[].name",
                 "environmentVariablesForTags[].defaultValue", "literalsForTags", "literalsForTags[].tag",
                 "literalsForTags[].value", "openTelemetryConfig.serviceName", "openTelemetryConfig.grpcService",
                 "openTelemetryConfig.grpcService.authority", "openTelemetryConfig.maxCacheSize")},
    **{f"{_TRACING}.{k}": (T, TRACE_E2E)
       for k in ("openTelemetryConfig", "openTelemetryConfig.collectorUpstreamRef",
                 "openTelemetryConfig.collectorUpstreamRef.name", "openTelemetryConfig.collectorUpstreamRef.namespace")},
    "Route:options.tracing": (T, TRACE_E2E),
    **{f"Route:options.tracing.{k}": (T, TRACE_UNIT)
       for k in ("routeDescriptor", "propagate", "tracePercentages", "tracePercentages.clientSamplePercentage",
                 "tracePercentages.randomSamplePercentage", "tracePercentages.overallSamplePercentage")},
    f"{_HTTP}.options.httpConnectionManagerSettings.codecType": (T, H2_GATEWAY),
    f"{_HTTP}.options.httpConnectionManagerSettings.http2ProtocolOptions": (T, H2_GATEWAY),
    **{f"{_HTTP}.options.httpConnectionManagerSettings.http2ProtocolOptions.{k}": (T, H2_GATEWAY)
       for k in ("maxConcurrentStreams", "initialStreamWindowSize", "initialConnectionWindowSize",
                 "overrideStreamErrorOnInvalidHttpMessage")},
    f"{_HTTP}.options.grpcWeb": (T, H2_CONFIG), f"{_HTTP}.options.grpcWeb.disable": (T, H2_CONFIG, H2_CORE),
    f"{_HTTP}.options.httpLocalRatelimit": (T, GW_E2E),
    f"{_HTTP}.options.httpLocalRatelimit.defaultLimit": (T, GW_E2E),
    f"{_HTTP}.options.httpLocalRatelimit.enableXRatelimitHeaders": (T, GW_E2E),
    f"{_HTTP}.options.httpLocalRatelimit.localRateLimitPerDownstreamConnection": (T, GW_UNIT),
})
ACCESS_UNIT = "tests/unit/test_gateway_accesslog.py"
ACCESS_E2E = "tests/integration/test_gateway_accesslog_e2e.py"
_ALS = "Gateway:spec.options.accessLoggingService.accessLog[]"
FIELDS.update({
    "Gateway:spec.options": (T, ACCESS_E2E),
    # Envoy's runtime layer does not exist here: the key is only a name (the defaultValue applies)
    "Gateway:spec.options.accessLoggingService.accessLog": (T, ACCESS_E2E),
    f"{_ALS}.fileSink": (T, ACCESS_E2E, ACCESS_UNIT),
    f"{_ALS}.fileSink.jsonFormat": (T, ACCESS_E2E, ACCESS_UNIT),
    f"{_ALS}.fileSink.path": (T, ACCESS_E2E, ACCESS_UNIT),
    f"{_ALS}.fileSink.stringFormat": (T, ACCESS_E2E, ACCESS_UNIT),
    f"{_ALS}.filter": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].andFilter": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].durationFilter": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].durationFilter.comparison": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].durationFilter.comparison.op": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].durationFilter.comparison.value": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].durationFilter.comparison.value.defaultValue": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].durationFilter.comparison.value.runtimeKey": (INFO, GW_DOC),
    f"{_ALS}.filter.andFilter.filters[].headerFilter": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].notHealthCheckFilter": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].orFilter": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].orFilter.filters": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].orFilter.filters[].andFilter": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].orFilter.filters[].durationFilter": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].orFilter.filters[].headerFilter": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].orFilter.filters[].headerFilter.header": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].orFilter.filters[].headerFilter.header.containsMatch": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].orFilter.filters[].headerFilter.header.exactMatch": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].orFilter.filters[].headerFilter.header.invertMatch": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].orFilter.filters[].headerFilter.header.name": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].orFilter.filters[].headerFilter.header.prefixMatch": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].orFilter.filters[].headerFilter.header.presentMatch": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].orFilter.filters[].headerFilter.header.safeRegexMatch": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].orFilter.filters[].headerFilter.header.safeRegexMatch.regex": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].orFilter.filters[].headerFilter.header.suffixMatch": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].orFilter.filters[].notHealthCheckFilter": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].orFilter.filters[].orFilter": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].orFilter.filters[].statusCodeFilter": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].statusCodeFilter": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].statusCodeFilter.comparison": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].statusCodeFilter.comparison.op": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].statusCodeFilter.comparison.value": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].statusCodeFilter.comparison.value.defaultValue": (T, ACCESS_UNIT),
    f"{_ALS}.filter.andFilter.filters[].statusCodeFilter.comparison.value.runtimeKey": (INFO, GW_DOC),
    f"{_ALS}.filter.durationFilter": (T, ACCESS_UNIT),
    f"{_ALS}.filter.headerFilter": (T, ACCESS_UNIT),
    f"{_ALS}.filter.notHealthCheckFilter": (T, ACCESS_UNIT),
    f"{_ALS}.filter.orFilter": (T, ACCESS_UNIT),
    f"{_ALS}.filter.statusCodeFilter": (T, ACCESS_UNIT),
})
FIELDS.update({
    # the same destination parser as routeAction.single (kube ports and subsets tested there)
    "Route:routeAction.multi.destinations[].destination.kube": (T, TRAFFIC, GLOO),
    "Route:routeAction.multi.destinations[].destination.subset": (T, SUBSETS, TRAFFIC),
    "UpstreamGroup:spec.destinations[].destination.kube": (T, TRAFFIC, GLOO),
    "UpstreamGroup:spec.destinations[].destination.subset": (T, SUBSETS, TRAFFIC),
    # Envoy's runtime layer does not exist here: the key is only a name
    "VirtualService:spec.virtualHost.options.csrf.filterEnabled.runtimeKey": (INFO, CONF_DOC),
    "VirtualService:spec.virtualHost.options.csrf.shadowEnabled.runtimeKey": (INFO, CONF_DOC),
    # what Gloo's discovery wrote on an Upstream: metadata only
    "Upstream:spec.discoveryMetadata": (INFO, CONF_DOC), "Upstream:spec.discoveryMetadata.labels": (INFO, CONF_DOC),
})

# -- oauth2 (the twistgw_oidc plugin; paths relative to the config entry) ------------------
OIDC_UNITS = "tests/oidc/test_oidc_units.py"
OIDC_FLOW = "tests/oidc/test_oidc_flow.py"
OIDC_STACK = "tests/oidc/stack.py"  # the flow tests' configuration
OIDC_FIELDS = "tests/oidc/test_oidc_fields.py"
OIDC_DISCOVERY = "tests/oidc/test_oidc_discovery.py"
OIDC_WARM = "tests/oidc/test_oidc_warm_paths.py"
OAUTH2_AT = "tests/oidc/test_oauth2_access_tokens.py"
_OIDC = "oauth2:oidcAuthorizationCode"
_ATV = "oauth2:accessTokenValidation"
FIELDS.update({
    "oauth2:oidcAuthorizationCode": (T, OIDC_UNITS), "oauth2:accessTokenValidation": (T, OIDC_UNITS),
    **{f"{_OIDC}.{k}": (T, OIDC_FLOW, OIDC_STACK) for k in (
        "issuerUrl", "clientId", "appUrl", "callbackPath", "logoutPath", "afterLogoutUrl", "scopes",
        "authEndpointQueryParams", "tokenEndpointQueryParams", "frontChannelLogout", "frontChannelLogout.path",
        "headers", "headers.idTokenHeader", "headers.accessTokenHeader", "session.cookie",
        "session.cookie.keyPrefix", "session.cookie.allowRefreshing", "session.redis", "session.redis.options",
        "session.redis.options.host", "session.redis.options.db", "session.redis.options.poolSize",
        "session.redis.keyPrefix", "session.redis.cookieName", "session.redis.preExpiryBuffer")},
    **{f"{_OIDC}.{k}": (T, OIDC_UNITS) for k in (
        "clientSecretRef", "clientSecretRef.name", "disableClientSecret", "session", "session.cipherConfig",
        "session.cipherConfig.keyRef", "session.cipherConfig.keyRef.name", "session.failOnFetchFailure",
        "session.redis.options.tlsCertMountPath")},
    f"{_OIDC}.clientSecretRef.namespace": (T, OIDC_UNITS, OIDC_STACK),
    f"{_OIDC}.session.cipherConfig.keyRef.namespace": (T, OIDC_FIELDS),
    f"{_OIDC}.session.redis.options.socketType": (T, "tests/oidc/test_oidc_redis_store.py", OIDC_UNITS),
    # twistgw's: a Redis Cluster (sessions through a real login on a real cluster)
    f"{_OIDC}.session.redis.options.clustered": (T, "tests/oidc/test_oidc_cluster.py", OIDC_UNITS),
    **{f"{_OIDC}.{k}": (T, OIDC_FIELDS) for k in (
        "clientAuthentication", "clientAuthentication.clientSecret", "clientAuthentication.clientSecret.clientSecretRef",
        "clientAuthentication.clientSecret.clientSecretRef.name",
        "clientAuthentication.clientSecret.clientSecretRef.namespace",
        "clientAuthentication.clientSecret.disableClientSecret", "clientAuthentication.privateKeyJwt",
        "headers.useBearerSchemaForAuthorization", "endSessionProperties", "endSessionProperties.methodType",
        "jwksCacheRefreshPolicy", "jwksCacheRefreshPolicy.never", "jwksCacheRefreshPolicy.always",
        "jwksCacheRefreshPolicy.maxIdpReqPerPollingInterval", "dynamicMetadataFromClaims",
        "session.redis.allowRefreshing", "session.cookieOptions", "session.cookieOptions.maxAge",
        "session.cookieOptions.notSecure", "session.cookieOptions.httpOnly", "session.cookieOptions.path",
        "session.cookieOptions.domain", "session.cookieOptions.sameSite",
        # Gloo's discoveryOverride members twistgw never reads: refused by name
        "discoveryOverride.scopes", "discoveryOverride.responseTypes", "discoveryOverride.subjects",
        "discoveryOverride.idTokenAlgs", "discoveryOverride.claims",
        # refused by name, each with its reason
        "session.cookie.targetDomain", "session.redis.targetDomain", "session.redis.headerName")},
    **{f"{_OIDC}.{k}": (T, OIDC_DISCOVERY) for k in (
        "discoveryOverride", "discoveryOverride.authEndpoint", "discoveryOverride.tokenEndpoint",
        "discoveryOverride.jwksUri", "discoveryOverride.endSessionEndpoint", "discoveryOverride.authMethods")},
    f"{_OIDC}.discoveryPollInterval": (T, OIDC_DISCOVERY, OIDC_FIELDS),
    f"{_OIDC}.discoveryOverride.revocationEndpoint": (T, "tests/oidc/test_oidc_logout_revocation.py", OIDC_STACK),
    **{f"{_OIDC}.identityToken{k}": (T, OIDC_WARM) for k in (
        "", ".claimsToHeaders", ".claimsToHeaders[].claim", ".claimsToHeaders[].header", ".claimsToHeaders[].append")},
    # Gloo's marker of the default provider (the other is azure, refused): nothing else to do
    f"{_OIDC}.default": (INFO, "docs/oidc.md"), f"{_ATV}.default": (INFO, "docs/oidc.md"),
    **{f"{_ATV}.{k}": (T, OAUTH2_AT, OIDC_STACK) for k in (
        "introspection", "introspection.introspectionUrl", "introspection.clientId", "introspection.clientSecretRef",
        "introspection.clientSecretRef.name", "introspection.clientSecretRef.namespace",
        "introspection.userIdAttributeName", "userinfoUrl", "cacheTimeout", "requiredScopes", "requiredScopes.scope",
        "claimsToHeaders", "claimsToHeaders[].claim", "claimsToHeaders[].header", "dynamicMetadataFromClaims",
        "jwt", "jwt.remoteJwks", "jwt.remoteJwks.url", "jwt.issuer", "jwt.audiences")},
    f"{_ATV}.claimsToHeaders[].append": (T, OIDC_WARM),  # the same reader as identityToken's
    **{f"{_ATV}.{k}": (T, OIDC_FIELDS) for k in (
        "introspectionUrl", "introspection.disableClientSecret", "jwt.remoteJwks.refreshInterval")},
    f"{_ATV}.jwt.localJwks": (T, OIDC_WARM), f"{_ATV}.jwt.localJwks.inlineString": (T, OIDC_WARM, OIDC_UNITS),
})

# -- the rate-limit plugins (twistgw_ratelimit) ----------------------------------------------
RL_UNITS = "tests/ratelimit/test_ratelimit_units.py"
RL_REDIS = "tests/ratelimit/test_ratelimit_redis.py"
RL_AUTH = "tests/ratelimit/test_ratelimit_redis_auth.py"
RL_PROCESSES = "tests/ratelimit/test_ratelimit_processes.py"
RL_HELPERS = "tests/ratelimit/rl_helpers.py"  # per(n, unit), rate_limit_config(name, raw)
_SERVER = "Settings:spec.ratelimitServer"
FIELDS.update({
    **{f"{key}:{k}": (T, RL_UNITS) for key in ("ratelimit", "ratelimitEarly", "ratelimitRegular")
       for k in ("rateLimits", "includeVhRateLimits")},
    **{f"ratelimitBasic:{k}": (T, RL_REDIS) for k in (
        "anonymousLimits", "anonymousLimits.requestsPerUnit", "anonymousLimits.unit", "authorizedLimits",
        "authorizedLimits.requestsPerUnit", "authorizedLimits.unit")},
    **{f"localRatelimit:{k}": (T, RL_PROCESSES, RL_UNITS) for k in ("maxTokens", "tokensPerFill", "fillInterval")},
    **{f"rateLimitConfigs:{k}": (T, RL_REDIS) for k in ("refs", "refs[].name", "refs[].namespace")},
    **{f"RateLimitConfig:spec.raw{k}": (T, RL_REDIS, RL_HELPERS) for k in ("", ".descriptors", ".setDescriptors", ".rateLimits")},
    **{f"Settings:spec.ratelimit.{k}": (T, RL_REDIS) for k in ("descriptors", "setDescriptors")},
    # descriptors (every level of the tree) and setDescriptors, in Settings or a RateLimitConfig
    **{f"descriptors:{k}": (T, RL_REDIS) for k in (
        "key", "value", "rateLimit", "rateLimit.requestsPerUnit", "rateLimit.unit", "descriptors", "weight",
        "alwaysApply")},
    **{f"setDescriptors:{k}": (T, RL_REDIS) for k in (
        "simpleDescriptors", "simpleDescriptors[].key", "simpleDescriptors[].value", "rateLimit",
        "rateLimit.requestsPerUnit", "rateLimit.unit", "alwaysApply")},
    # rateLimits (actions and setActions: one reader), wherever they are written
    **{f"rateLimits:{k}": (T, RL_UNITS) for k in (
        "actions", "setActions", "actions[].genericKey", "actions[].genericKey.descriptorValue",
        "actions[].remoteAddress", "actions[].requestHeaders", "actions[].requestHeaders.headerName",
        "actions[].requestHeaders.descriptorKey", "actions[].destinationCluster", "actions[].headerValueMatch",
        "actions[].headerValueMatch.descriptorValue", "actions[].headerValueMatch.expectMatch",
        "actions[].headerValueMatch.headers", "actions[].metadata", "actions[].metadata.descriptorKey",
        "actions[].metadata.metadataKey", "actions[].metadata.metadataKey.key",
        "actions[].metadata.metadataKey.path", "actions[].metadata.metadataKey.path[].key",
        "actions[].metadata.defaultValue", "actions[].metadata.source",
        *(f"actions[].headerValueMatch.headers[].{m}" for m in (
            "name", "exactMatch", "regexMatch", "rangeMatch", "rangeMatch.start", "rangeMatch.end",
            "presentMatch", "prefixMatch", "suffixMatch", "invertMatch")))},
    **{f"{_SERVER}.{k}": (T, RL_REDIS) for k in (
        "rateLimitBeforeAuth", "denyOnFail", "requestTimeout", "enableXRatelimitHeaders", "shadowMode", "redis",
        "redis.address", "redis.db")},
    **{f"{_SERVER}.{k}": (T, RL_AUTH) for k in (
        "redis.authSecretRef", "redis.authSecretRef.name", "redis.authSecretRef.namespace", "redis.tls",
        "redis.tls.caSecretRef", "redis.tls.caSecretRef.name", "redis.tls.caSecretRef.namespace",
        "redis.tls.caFile")},
    f"{_SERVER}.redis.clustered": (T, "tests/ratelimit/test_ratelimit_cluster.py",
                                   "tests/ratelimit/test_ratelimit_cluster_tls.py"),
    f"{_SERVER}.ratelimitServerRef": (T, RL_UNITS),  # refused: twistgw is its own rate-limit server
    f"{_SERVER}.grpcService": (T, "tests/docs/test_coming_from_gloo_table.py"),  # refused, the same
})
FIELDS.update({f: (*FIELDS[f], RL_HELPERS) for f in FIELDS if f.endswith((".requestsPerUnit", ".unit"))})


#: Fields checked by hand-written code rather than a watched mapping (the
#: resource envelope, Settings sections, the extauth options key): listed
#: here so the comparison below knows they are accepted.
MANUAL = {
    "*:apiVersion", "*:kind", "*:metadata.name", "*:metadata.namespace", "*:metadata.labels", "*:status",
    "Secret:data", "Secret:stringData", "Secret:type", "Secret:immutable", "Endpoints:subsets",
    "Pod:spec", "Pod:status.podIP",
    # the core's own options keys (every other key names a plugin): loader.CORE_OPTION_KEYS
    "Route:options.prefixRewrite", "Route:options.timeout", "Route:options.pluginOrder", "Route:options.upgrades",
    "Route:options.tracing",
    "VirtualService:spec.virtualHost.options.pluginOrder",
    # a Gateway's spec.options keys (refused ones get their own message)
    "Gateway:spec.options",
    # a Gateway's httpGateway.options keys (refused ones get their own message)
    "Gateway:spec.httpGateway.options.httpConnectionManagerSettings",
    "Gateway:spec.httpGateway.options.httpLocalRatelimit",
    "Gateway:spec.httpGateway.options.grpcWeb",
    # the traffic options keys (the fields inside them are watched)
    *(f"Route:options.{k}" for k in CORE_TRAFFIC_KEYS),
    *(f"VirtualService:spec.virtualHost.options.{k}" for k in CORE_TRAFFIC_KEYS - CORE_ROUTE_ONLY),
}


def _key(field: str) -> str:
    last = field.split(":", 1)[1].split(".")[-1].replace("[]", "")
    return field.split(".")[-2].replace("[]", "") if last == "*" else last


class FieldWalkTests(TestCase):
    def test_manual_entries_cover_the_core_options_keys(self):
        """The core's options keys are checked by hand; each has its entries."""
        route_keys = {f.split(".", 1)[1] for f in MANUAL if f.startswith("Route:options.")}
        assert route_keys == set(CORE_OPTION_KEYS)
        host_keys = {f.rsplit(".", 1)[1] for f in MANUAL if f.startswith("VirtualService:spec.virtualHost.options.")}
        # prefixRewrite, timeout, tracing, upgrades and the route-only traffic options; a virtual host refuses them
        assert host_keys == set(CORE_OPTION_KEYS) - {"prefixRewrite", "timeout", "tracing", "upgrades"} - CORE_ROUTE_ONLY

    def test_every_accepted_field_changes_behaviour_or_is_informational(self, tmp_path, monkeypatch):
        accepted = {_scope(f) for f in walk(tmp_path, monkeypatch)} | MANUAL
        missing = sorted(accepted - FIELDS.keys())
        assert not missing, "accepted fields without an entry in FIELDS (test or informational?):\n" + "\n".join(missing)
        stale = sorted(FIELDS.keys() - accepted)
        assert not stale, "FIELDS lists fields the loader no longer accepts:\n" + "\n".join(stale)

    @pytest.mark.parametrize("field", sorted(FIELDS))
    def test_each_entry_points_at_real_evidence(self, field):
        kind, *where = FIELDS[field]
        key = _key(field)
        assert kind in (T, INFO), field
        for path in where:
            assert (ROOT / path).is_file(), f"{field}: {path} does not exist"
        text = "".join((ROOT / p).read_text() for p in where)
        assert re.search(rf"\b{re.escape(key)}\b", text), f"{field}: {key!r} appears nowhere in {where}"
        if kind == INFO:  # the documentation says what it does (or that it does nothing)
            assert where[0].startswith("docs/"), field
