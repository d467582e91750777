"""ConsoleService: the admin console as a Twisted service, alone or inside a broker.

Alone (``twistd -n webui``) it owns its ZooKeeper session: created and started in
``startService`` (never before twistd forks, see NOTES), closed in ``stopService``. Embedded
(``twistd -n broker --webui ENDPOINT``) it shares the broker's session, which the broker
opens and closes; or, without ZooKeeper, it shows the broker alone (LocalCluster).

Start: listen in ``privilegedStartService`` (a port in use fails the start, as the broker's
does), then, with the reactor running, copy the registry (ZkMirror) and sample the groups'
lag every ``lag_sample_interval_s``. Stop: close the listening port first, then the
sampler, the broker connections and, if ours, the ZooKeeper session.

Bound beyond loopback, or with ``require_login``, every request but the login's passes the
LoginGate (webui/login.py) over the users in ZooKeeper (a watched cache of its own); with an
``authorizer``, what a logged-in user sees follows the ACLs (webui/access.py). A console
that owns its ZooKeeper session also keeps the authorizer's ACLs current (AclCache); an
embedded one shares the broker's authorizer, which the broker keeps current.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass

from twisted.application.service import Service
from twisted.internet.defer import ensureDeferred, inlineCallbacks
from twisted.internet.task import LoopingCall
from twisted.web.pages import errorPage
from twisted.web.server import Site

from twisted_broker.registry.acl_watch import AclCache
from twisted_broker.registry.user_credentials import UserCredentials
from twisted_broker.registry.zookeeper import ZooKeeper
from webui.access import ConsoleAccess
from webui.app import AdminSite, template_environment
from webui.broker_offsets import BrokerClients, OffsetBook
from webui.cluster_cache import ClusterCache, LocalCluster
from webui.lag_history import LagHistory, sample_all
from webui.modern_groups import ModernGroups
from webui.model import ConsoleModel, LocalBroker
from webui.login import LoginGate
from webui.security import CsrfTokens, SecuredResource
from webui.sessions import DEFAULT_SESSION_HOURS, SessionSigner

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoginSettings:
    """``require_login`` also on loopback; a session's lifetime; the key sessions are signed
    with (None: a random one per process)."""

    require_login: bool = False
    session_max_age_s: float = DEFAULT_SESSION_HOURS * 3600
    session_secret: bytes | None = None


class ConsoleService(Service):
    """The console on ``endpoint``. Give ``zk_connect`` (its own session), or ``zk`` (a
    shared, already managed session), or ``cluster`` (a LocalCluster)."""

    name = "webui"

    def __init__(self, endpoint, *, reactor, zk_connect: str | None = None, zk: ZooKeeper | None = None,
                 cluster=None, local_broker: LocalBroker | None = None, allow_admin_actions: bool = False,
                 lag_sample_interval_s: float = 30.0, refresh_s: float = 5.0,
                 zk_session_timeout_ms: int = 6000, port_file: str | None = None,
                 login: LoginSettings = LoginSettings(), authorizer=None) -> None:
        self._endpoint = endpoint
        self._reactor = reactor
        self._zk_connect = zk_connect
        self._zk = zk
        self._owns_zk = zk is None and cluster is None
        self._cluster = cluster
        self._local_broker = local_broker
        self._allow_admin_actions = allow_admin_actions
        self._lag_sample_interval_s = lag_sample_interval_s
        self._refresh_s = refresh_s
        self._zk_session_timeout_ms = zk_session_timeout_ms
        self._port_file = port_file
        self._login = login
        self._authorizer = authorizer  # security/authorizer.py's AclAuthorizer, or None: no ACLs
        self.login_required = login.require_login
        self.users: UserCredentials | None = None
        self._port = None
        self._site = _LazySite()
        self._sampler = LoopingCall(self._sample)
        self._sampler.clock = reactor
        self.model: ConsoleModel | None = None

    @property
    def port(self) -> int:
        return self._port.getHost().port

    def privilegedStartService(self) -> None:
        super().privilegedStartService()
        ports, failures = [], []
        self._endpoint.listen(self._site).addCallbacks(ports.append, failures.append)
        if failures:
            failures[0].raiseException()
        self._port = ports[0]
        host = self._port.getHost()
        self._site.loopback_only = _is_loopback_address(getattr(host, "host", ""))
        self.login_required = self._login.require_login or not self._site.loopback_only
        if self.login_required and self._zk is None and not self._owns_zk:
            raise RuntimeError("the console asks for a login (bound beyond loopback, or --require-login), and "
                               "its users live in ZooKeeper: this one has none (enable.zookeeper=false)")
        log.info("admin console listening on http://%s:%d/", getattr(host, "host", "?"), host.port)

    def startService(self) -> None:
        super().startService()
        if self._owns_zk:
            self._zk = ZooKeeper(self._zk_connect, reactor=self._reactor,
                                 session_timeout_ms=self._zk_session_timeout_ms)
        cluster = self._cluster or ClusterCache.over(self._zk, zk_connect=self._zk_connect or "")
        clients = BrokerClients(self._reactor, lambda broker_id: _address(cluster, broker_id))
        self.model = ConsoleModel(cluster, clients, OffsetBook(clients, self._reactor), LagHistory(),
                                  zk=self._zk if self._cluster is None else None,
                                  local_broker=self._local_broker,
                                  modern=ModernGroups(self._reactor, cluster.modern_listeners))
        csrf = CsrfTokens()
        site = AdminSite(self.model, clock=self._reactor, allow_admin_actions=self._allow_admin_actions,
                         refresh_s=self._refresh_s, csrf=csrf, access=self._access)
        resource = site.resource()
        if self._authorizer is not None and self._owns_zk:
            AclCache(self._zk, self._authorizer, clock=self._reactor).start()
        if self.login_required:
            self.users = UserCredentials(self._zk)  # started below, once the session is
            sessions = SessionSigner(clock=self._reactor, max_age_s=self._login.session_max_age_s,
                                     secret=self._login.session_secret)
            resource = LoginGate(resource, sessions=sessions, lookup=self.users.lookup, csrf=csrf,
                                 clock=self._reactor, templates=template_environment())
        self._site.serve(SecuredResource(resource, loopback_only=self._site.loopback_only))
        cluster.start()
        if self._owns_zk:
            self._zk.start_in_background()
        if self.users is not None:
            self.users.startService()
        if cluster.has_registry:
            self._sampler.start(self._lag_sample_interval_s, now=False)
        if self._port_file:
            with open(self._port_file, "w") as file:
                file.write(f"{self.port}\n")

    def _access(self, request) -> ConsoleAccess:
        user = getattr(request, "console_user", None)
        return ConsoleAccess(self._authorizer, None if user is None else f"User:{user}",
                             getattr(request.getClientAddress(), "host", ""))

    def _sample(self):
        model = self.model
        d = ensureDeferred(sample_all(model.cluster, model.offsets, model.history, self._reactor.seconds,
                                       modern=model.modern))
        d.addCallback(lambda _: model.offsets.forget_before(self._reactor.seconds() - 600))
        return d.addErrback(lambda failure: log.error("lag sampling failed: %s", failure.getTraceback()))

    @inlineCallbacks
    def stopService(self):
        super().stopService()
        if self._port is not None:
            yield self._port.stopListening()
        if self._sampler.running:
            self._sampler.stop()
        if self.model is not None:
            self.model.cluster.stop()
            self.model.clients.close()
        if self._owns_zk and self._zk is not None:
            yield self._zk.stop()


class _LazySite(Site):
    """A Site that listens before its resource exists (the port is bound in the privileged
    start, the model is built once the reactor runs); until then it answers 503."""

    displayTracebacks = False

    def __init__(self) -> None:
        super().__init__(SecuredResource(errorPage(503, "Starting", "The console is starting."), loopback_only=False))
        self.loopback_only = True

    def serve(self, resource) -> None:
        self.resource = resource


def _address(cluster, broker_id: int) -> tuple[str, int] | None:
    entry = cluster.brokers().get(broker_id)
    return None if entry is None else (entry.host, entry.port)


def _is_loopback_address(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def embedded_console(endpoint, *, reactor, broker_id: int, snapshot, zk: ZooKeeper | None, zk_connect: str | None,
                     host: str, port, topics, partitions_for, allow_admin_actions: bool = False,
                     port_file: str | None = None, replication=None, login: LoginSettings = LoginSettings(),
                     authorizer=None) -> ConsoleService:
    """The console of a broker (``--webui``): the broker's ZooKeeper session when it has one,
    else the broker alone (``host``, ``port()``, ``topics()``, ``partitions_for``), and its
    statistics (``snapshot()``: server.stats.broker_snapshot) either way; with ZooKeeper, its
    replication figures (``replication()``: server.stats.replication_snapshot). ``authorizer``:
    the broker's own (kept current by the broker), or None."""
    cluster = None if zk is not None else LocalCluster(
        broker_id=broker_id, host=host, port=port, topics=topics, partitions_for=partitions_for,
        started_ms=int(reactor.seconds() * 1000))
    return ConsoleService(endpoint, reactor=reactor, zk=zk, zk_connect=zk_connect, cluster=cluster,
                          local_broker=LocalBroker(broker_id, snapshot, replication),
                          allow_admin_actions=allow_admin_actions, port_file=port_file, login=login,
                          authorizer=authorizer)
