"""AdminSite: the console's routes, a class-bound Klein app.

Each page has a JSON twin under ``/api/``: both render the same views.py dict, one through an
autoescaping Jinja2 template, one through ``json.dumps``. Routes only parse the request, ask
the model (which may await brokers) and render; the page data is built in views.py.

=============================================  ==============================================
``/``, ``/api/overview``                       brokers (replicas, leaderships, under-replicated
                                               leaderships), a page of topics (``page``, filter
                                               ``q``), groups, totals, the controller,
                                               under-replicated and offline counts
``/topics/<t>``, ``/api/topics/<t>``           the topic's broker-partitions: offsets, size, rate;
                                               of a replicated topic, partitions 0..N-1: leader,
                                               replicas, ISR, under-replicated/offline marks
``/topics/<t>/<b>-<p>/messages`` (+ api)       a page of messages (``offset``, ``before``, or
                                               the newest), ``format`` auto/text/hex, ``count``
``/groups``, ``/api/groups``                   a page of groups with health and last lag
``/groups/<g>``, ``/api/groups/<g>``           consumers, owners, offsets, lag, health, history
``POST /groups/<g>/reset-offsets``             the one write action (off by default)
``/brokers/<id>``, ``/api/brokers/<id>``       registration, topics, the replicated topics it
                                               holds (a page: ``replicas_page``), 0.7
                                               statistics if embedded
``/metrics``                                   Prometheus text format
``/static/...``                                the stylesheet and the live-refresh script
=============================================  ==============================================
"""

from __future__ import annotations

import functools
import json
import logging
from calendar import timegm
from contextlib import contextmanager
from datetime import datetime
from importlib import resources
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined
from klein import Klein
from werkzeug.exceptions import HTTPException

from twisted_broker.registry import paths
from webui import views
from webui.access import EVERYTHING, VisibleCluster, visible_replication, visible_snapshot
from webui.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from webui.metrics import ConsoleMetrics
from webui.model import ActionRefused, ConsoleModel
from webui.security import CSRF_FIELD, CsrfTokens

log = logging.getLogger(__name__)

# The static files, by name: a fixed table rather than a directory served, so no path a
# client sends can reach any other file.
STATIC_FILES = {"console.css": b"text/css; charset=utf-8", "live.js": b"text/javascript; charset=utf-8",
                "favicon.svg": b"image/svg+xml"}
MAX_MESSAGES_PER_PAGE = 500
TIME_CHOICES = {"earliest": -2, "latest": -1}


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def template_environment() -> Environment:
    env = Environment(loader=PackageLoader("webui", "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(bytes=views.human_bytes, num=views.thousands, utc=views.utc_time,
                       urlpart=lambda value: quote(str(value), safe=""))
    return env


def parse_reset_time(text: str) -> int:
    """``earliest``, ``latest``, ms since the epoch, or an ISO date-time taken as UTC (the
    form's datetime-local field). Raises ValueError."""
    text = text.strip()
    if text in TIME_CHOICES:
        return TIME_CHOICES[text]
    if text.isascii() and text.isdigit():
        return int(text)
    moment = datetime.fromisoformat(text)
    return timegm(moment.utctimetuple()) * 1000 + moment.microsecond // 1000


class AdminSite:
    """The console's pages over ``model``; ``allow_admin_actions`` enables the reset action."""

    app = Klein()

    def __init__(self, model: ConsoleModel, *, clock, metrics: ConsoleMetrics | None = None,
                 allow_admin_actions: bool = False, csrf: CsrfTokens | None = None,
                 refresh_s: float = 5.0, access=lambda request: EVERYTHING) -> None:
        """``access(request)``: the ConsoleAccess of the request's user (webui/access.py)."""
        self._model = model
        self._clock = clock
        self._metrics = metrics or ConsoleMetrics(model)
        self._allow_admin_actions = allow_admin_actions
        self._csrf = csrf or CsrfTokens()
        self._refresh_s = refresh_s
        self._templates = template_environment()
        self._access = access

    # -- overview ----------------------------------------------------------------------------

    @app.route("/", methods=["GET"])
    def overview(self, request):
        with self._timed("overview"):
            return self._html(request, "overview.html", "Overview", self._overview(request))

    @app.route("/api/overview", methods=["GET"])
    def api_overview(self, request):
        with self._timed("api_overview"):
            return self._json(request, self._overview(request))

    def _overview(self, request) -> dict[str, Any]:
        return views.overview_page(self._cluster(request), self._model.history,
                                   topic_page=_int_arg(request, "page", 1), topic_query=_arg(request, "q", ""))

    # -- topics ------------------------------------------------------------------------------

    @app.route("/topics/<topic>", methods=["GET"])
    async def topic(self, request, topic: str):
        with self._timed("topic"):
            data = await self._topic(request, topic)
            template = "replicated_topic.html" if data["replicated"] else "topic.html"
            return self._html(request, template, f"Topic {topic}", data)

    @app.route("/api/topics/<topic>", methods=["GET"])
    async def api_topic(self, request, topic: str):
        with self._timed("api_topic"):
            return self._json(request, await self._topic(request, topic))

    async def _topic(self, request, topic: str) -> dict[str, Any]:
        self._check(self._access(request).may_describe_topic(topic), f"you may not describe topic {topic}")
        groups = self._visible_groups(request, self._model.groups_of_topic(topic))
        replicated = self._model.cluster.replicated_topic(topic)
        if replicated is not None:
            return views.replicated_topic_page(replicated, brokers=self._model.cluster.brokers(),
                                               figures=await self._model.replicated_figures(replicated),
                                               groups=groups)
        counts = self._model.cluster.topic_brokers(topic)
        if not counts:
            raise HttpError(404, f"no broker has registered topic {topic}")
        figures = await self._model.topic_figures(topic)
        return views.topic_page(topic, counts=counts, brokers=self._model.cluster.brokers(), figures=figures,
                                groups=groups)

    @app.route("/topics/<topic>/<partition>/messages", methods=["GET"])
    async def messages(self, request, topic: str, partition: str):
        with self._timed("messages"):
            data = await self._messages(request, topic, partition)
            return self._html(request, "messages.html", f"{topic} {partition} messages", data, refresh=False)

    @app.route("/api/topics/<topic>/<partition>/messages", methods=["GET"])
    async def api_messages(self, request, topic: str, partition: str):
        with self._timed("api_messages"):
            return self._json(request, await self._messages(request, topic, partition))

    async def _messages(self, request, topic: str, name: str) -> dict[str, Any]:
        self._check(self._access(request).may_describe_topic(topic), f"you may not describe topic {topic}")
        try:
            broker_id, partition = paths.parse_partition_name(name)
        except ValueError:
            raise HttpError(404, f"{name} is not a partition name (<broker>-<partition>)") from None
        if not self._model.partition_exists(topic, broker_id, partition):
            raise HttpError(404, f"broker {broker_id} has registered no partition {partition} of topic {topic}")
        offset = _int_arg(request, "offset", None)
        before = _int_arg(request, "before", None) if offset is None else None
        count = min(max(_int_arg(request, "count", 20), 1), MAX_MESSAGES_PER_PAGE)
        fmt = _arg(request, "format", "auto")
        if fmt not in views.FORMATS:
            raise HttpError(400, f"format must be one of {', '.join(views.FORMATS)}")
        mode = "offset" if offset is not None else "before" if before is not None else "end"
        result, earliest, latest, problem = await self._model.browse(
            topic, broker_id, partition, offset=offset, before=before, count=count)
        return views.messages_page(topic, broker_id, partition, result, earliest=earliest, latest=latest,
                                   mode=mode, fmt=fmt, count=count, problem=problem)

    # -- consumer groups -------------------------------------------------------------------------

    @app.route("/groups", methods=["GET"])
    def groups(self, request):
        with self._timed("groups"):
            return self._html(request, "groups.html", "Consumer groups", self._groups(request))

    @app.route("/api/groups", methods=["GET"])
    def api_groups(self, request):
        with self._timed("api_groups"):
            return self._json(request, self._groups(request))

    def _groups(self, request) -> dict[str, Any]:
        return views.groups_page(self._cluster(request), self._model.history,
                                 page=_int_arg(request, "page", 1), query=_arg(request, "q", ""))

    @app.route("/groups/<group>", methods=["GET"])
    async def group(self, request, group: str):
        with self._timed("group"):
            data = await self._group(request, group)
            data["admin"] = (self._admin_form(request, data) if self._allow_admin_actions
                             and self._access(request).may_alter_group(group) else None)
            return self._html(request, "group.html", f"Group {group}", data)

    @app.route("/api/groups/<group>", methods=["GET"])
    async def api_group(self, request, group: str):
        with self._timed("api_group"):
            return self._json(request, await self._group(request, group))

    async def _group(self, request, group: str) -> dict[str, Any]:
        self._check(self._access(request).may_describe_group(group), f"you may not describe group {group}")
        cluster = self._cluster(request)
        state = cluster.group(group)
        if state is None:
            raise HttpError(404, f"there is no consumer group {group}")
        topics = cluster.topics()
        shown = sorted(set(state.topics) | {topic for entry in state.consumers.values()
                                            if entry.subscription is not None
                                            for topic in _safe_topic_counts(entry.subscription, topics)
                                            if self._access(request).may_describe_topic(topic)})
        latest = await self._model.group_latest(state, shown)
        members = await self._model.group_members(state)
        return views.group_page(state, topics=topics, topic_brokers=cluster.topic_brokers, latest=latest,
                                samples=self._model.history.samples(group), now_s=self._clock.seconds(),
                                partition_names=lambda topic: list(cluster.modern_partitions(topic)),
                                members=members)

    def _admin_form(self, request, data: dict[str, Any]) -> dict[str, Any]:
        return {"csrf_field": CSRF_FIELD, "csrf_token": self._csrf.token_for(request),
                "topics": data["topics"], "stopped": not data["consumers"] and data["kind"] == "0.7"}

    @app.route("/groups/<group>/reset-offsets", methods=["POST"])
    async def reset_offsets(self, request, group: str):
        with self._timed("reset_offsets"):
            if not self._allow_admin_actions:
                raise HttpError(403, "admin actions are off: start the console with --allow-admin-actions")
            problem = self._csrf.check(request, _arg(request, CSRF_FIELD, None))
            if problem is not None:
                log.warning("refused a reset of group %r: %s", group, problem)
                raise HttpError(403, f"refused: {problem}")
            topic = _arg(request, "topic", "")
            access = self._access(request)
            if not (access.may_alter_group(group) and access.may_describe_topic(topic)):
                log.warning("refused a reset of group %r by %s: no Alter on the group or no Describe on topic %r",
                            group, access.principal, topic)
                raise HttpError(403, f"you may not reset the offsets of group {group} on topic {topic}")
            to = _arg(request, "to", "")
            if to == "time":
                to = _arg(request, "time", "")
            try:
                time_ms = parse_reset_time(to)
            except ValueError:
                raise HttpError(400, "reset to: earliest, latest, ms since the epoch, "
                                     "or a date and time (UTC)") from None
            try:
                rows = await self._model.reset_offsets(group, topic, time_ms)
            except ActionRefused as exc:
                raise HttpError(exc.status, exc.reason) from None
            data = {"group": group, "topic": topic, "to": to,
                    "rows": [{"partition": name, "old": old, "new": new} for name, old, new in rows]}
            return self._html(request, "reset_done.html", f"Offsets of {group} reset", data, refresh=False)

    # -- brokers and metrics ---------------------------------------------------------------------

    @app.route("/brokers/<int:broker_id>", methods=["GET"])
    def broker(self, request, broker_id: int):
        with self._timed("broker"):
            return self._html(request, "broker.html", f"Broker {broker_id}", self._broker(request, broker_id))

    @app.route("/api/brokers/<int:broker_id>", methods=["GET"])
    def api_broker(self, request, broker_id: int):
        with self._timed("api_broker"):
            return self._json(request, self._broker(request, broker_id))

    def _broker(self, request, broker_id: int) -> dict[str, Any]:
        cluster, access = self._cluster(request), self._access(request)
        entry = cluster.brokers().get(broker_id)
        topics = cluster.broker_topics(broker_id)
        replicated = views.broker_replicated_topics(cluster, broker_id)
        snapshot = visible_snapshot(self._model.broker_snapshot(broker_id), access)
        if entry is None and not topics and not replicated and snapshot is None:
            raise HttpError(404, f"broker {broker_id} is not registered")
        data = views.broker_page(broker_id, entry, topics=topics, snapshot=snapshot,
                                 log_page=_int_arg(request, "page", 1),
                                 replication=visible_replication(self._model.broker_replication(broker_id), access),
                                 replicated=replicated, replicated_page=_int_arg(request, "replicas_page", 1))
        data["embedded_in"] = self._model.local_broker.broker_id if self._model.local_broker else None
        return data

    @app.route("/metrics", methods=["GET"])
    def metrics(self, request):
        self._check(self._access(request).may_describe_cluster(), "the metrics need Describe on the Cluster")
        request.setHeader(b"Content-Type", METRICS_CONTENT_TYPE.encode())
        return self._metrics.render()

    @app.route("/static/<name>", methods=["GET"])
    def static(self, request, name: str):
        content_type = STATIC_FILES.get(name)
        if content_type is None:
            raise HttpError(404, "no such file")
        request.setHeader(b"Content-Type", content_type)
        request.setHeader(b"Cache-Control", b"max-age=300")
        return _static_bytes(name)

    # -- errors ------------------------------------------------------------------------------------

    @app.handle_errors(HttpError, HTTPException)
    def http_error(self, request, failure):
        error = failure.value
        if isinstance(error, HTTPException):
            status, message = error.code or 500, error.description or error.name
        else:
            status, message = error.status, error.message
        return self._error(request, status, message)

    @app.handle_errors(Exception)
    def internal_error(self, request, failure):
        log.error("console page %s failed:\n%s", request.uri.decode("latin-1", "replace"), failure.getTraceback())
        return self._error(request, 500, "the console failed to build this page; see its log")

    def _error(self, request, status: int, message: str):
        request.setResponseCode(status)
        if request.path.startswith(b"/api/"):
            return self._json(request, {"error": message, "status": status})
        return self._html(request, "error.html", f"Error {status}", {"status": status, "message": message},
                          refresh=False)

    # -- who sees what (webui/access.py) ------------------------------------------------------------

    def _cluster(self, request):
        access = self._access(request)
        return self._model.cluster if access.everything else VisibleCluster(self._model.cluster, access)

    def _visible_groups(self, request, groups: list[str]) -> list[str]:
        return [group for group in groups if self._access(request).may_describe_group(group)]

    @staticmethod
    def _check(allowed: bool, reason: str) -> None:
        if not allowed:
            raise HttpError(403, reason)

    # -- rendering ---------------------------------------------------------------------------------

    @contextmanager
    def _timed(self, route: str):
        with self._metrics.page_seconds.labels(route).time():
            yield

    def _html(self, request, template: str, title: str, page: dict[str, Any], *, refresh: bool = True) -> bytes:
        request.setHeader(b"Content-Type", b"text/html; charset=utf-8")
        body = self._templates.get_template(template).render(
            page=page, title=title, refresh_s=self._refresh_s if refresh else 0,
            admin_actions=self._allow_admin_actions, now_ms=int(self._clock.seconds() * 1000),
            user=getattr(request, "console_user", None), csrf_field=CSRF_FIELD,
            logout_token=self._csrf.token_for(request) if getattr(request, "console_user", None) else None)
        return body.encode("utf-8")

    def _json(self, request, data: Any) -> bytes:
        request.setHeader(b"Content-Type", b"application/json; charset=utf-8")
        return json.dumps(data, ensure_ascii=True, separators=(",", ":")).encode("ascii")

    def resource(self):
        return self.app.resource()


@functools.cache
def _static_bytes(name: str) -> bytes:
    return resources.files("webui").joinpath("static", name).read_bytes()


def _safe_topic_counts(subscription, topics) -> dict[str, int]:
    try:
        return views.topic_counts(subscription, topics)
    except ValueError:
        return {}


def _arg(request, name: str, default):
    values = request.args.get(name.encode())
    if not values:
        return default
    return values[0].decode("utf-8", "replace")


def _int_arg(request, name: str, default):
    text = _arg(request, name, None)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise HttpError(400, f"{name} must be an integer") from None
