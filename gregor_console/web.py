"""The console's pages (server-rendered with Jinja2) and the JSON behind each, on aiohttp.

Every page reads the collector's last snapshot, so it answers without waiting for the
cluster; a transaction's own page and the abort pages also ask the cluster now. `/X` is
the page, `/api/X` the same answer as JSON. The abort action is there only with
`--allow-abort`: a confirmation page naming the transaction, then a POST carrying the
page's CSRF token; each abort is one line in the console's log."""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import jinja2
from aiohttp import web
from kafka.structs import TopicPartition

from coordinator.transaction.hanging import OpenTransaction
from gregor_console import collect, login, render
from gregor_console.collector import ClusterError, Collector, now_ms
from gregor_console.metrics import BrokerMetrics
from gregor_console.model import (
    STATES,
    Group,
    GroupQuery,
    PartitionQuery,
    PartitionRow,
    Snapshot,
    Transaction,
    TransactionQuery,
    oldest_first,
    paginate,
    sparkline_points,
)

log = logging.getLogger("gregor.console")
PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
SPARK_WIDTH, SPARK_HEIGHT = 120, 20


@dataclass(frozen=True)
class View:
    """A page's answer: its template and context, and the JSON of the same facts."""

    template: str
    context: dict[str, Any]
    data: dict[str, Any]
    status: int = 200


@dataclass
class Console:
    collector: Collector
    allow_abort: bool
    token: str | None = None  # --token-file: every request logs in (login.py)
    templates: jinja2.Environment = field(default_factory=render.environment)
    csrf_token: str = field(default_factory=lambda: secrets.token_urlsafe(32))


class BadRequest(Exception):
    """A query parameter the page cannot take; a 400 naming it."""


ViewFn = Callable[[Console, web.Request], Awaitable[View]]


# -- query parameters ---------------------------------------------------------------------


def _int(query: Mapping[str, str], name: str, default: int | None, minimum: int = 0) -> int | None:
    text = query.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, got {text!r}") from None
    if value < minimum:
        raise BadRequest(f"{name} must be at least {minimum}, got {value}")
    return value


def _required_int(query: Mapping[str, str], name: str) -> int:
    value = _int(query, name, None)
    if value is None:
        raise BadRequest(f"{name} is required")
    return value


def _flag(query: Mapping[str, str], name: str) -> bool:
    return query.get(name, "") not in ("", "0", "false", "no")


def _sort(query: Mapping[str, str]) -> bool:
    """Whether the transactions go oldest first (`sort=age`) rather than by id (`sort=id`)."""
    sort = query.get("sort", "id")
    if sort not in ("id", "age"):
        raise BadRequest(f"sort must be id or age, got {sort!r}")
    return sort == "age"


def _paging(query: Mapping[str, str]) -> tuple[int, int]:
    number = _int(query, "page", 1, 1) or 1
    size = min(_int(query, "per_page", PAGE_SIZE, 1) or PAGE_SIZE, MAX_PAGE_SIZE)
    return number, size


# -- the snapshot's frame of every page -------------------------------------------------


def _frame(console: Console, request: web.Request, title: str) -> dict[str, Any]:
    collector = console.collector
    snapshot = collector.snapshot
    return {
        "title": title,
        "bootstrap": collector.cluster.bootstrap,
        "error": collector.error,
        "snapshot": snapshot,
        "problems": snapshot.problems if snapshot else (),
        "now_ms": now_ms(),
        "allow_abort": console.allow_abort,
        "page_url": lambda n: str(request.rel_url.update_query(page=n)),
        "refresh_s": collector.interval_s,
        "notice": None,
        "metrics": bool(collector.metrics_urls),
    }


def _meta(console: Console) -> dict[str, Any]:
    snapshot = console.collector.snapshot
    return {
        "taken_ms": snapshot.taken_ms if snapshot else None,
        "error": console.collector.error,
        "problems": list(snapshot.problems) if snapshot else [],
    }


def _snapshot(console: Console) -> Snapshot:
    snapshot = console.collector.snapshot
    if snapshot is None:
        raise ClusterError(console.collector.error or "the first read of the cluster has not ended yet")
    return snapshot


# -- transactions -----------------------------------------------------------------------


def transaction_json(t: Transaction, now: int) -> dict[str, Any]:
    return {
        "transactional_id": t.transactional_id, "state": t.state, "coordinator_id": t.coordinator_id,
        "producer_id": t.producer_id, "producer_epoch": t.producer_epoch,
        "transaction_timeout_ms": t.timeout_ms, "transaction_start_time_ms": t.start_ms,
        "age_ms": t.age_ms(now), "partitions": [_tp_json(tp) for tp in t.partitions],
        "described": t.described,
    }


def _tp_json(tp: TopicPartition) -> dict[str, Any]:
    return {"topic": tp.topic, "partition": tp.partition}


async def transactions_view(console: Console, request: web.Request) -> View:
    q = request.query
    query = TransactionQuery(q.get("q", "").strip(), q.get("state", "").strip(), q.get("topic", "").strip(),
                             _int(q, "min_age_ms", None))
    paging, by_age = _paging(q), _sort(q)  # a bad parameter is a 400 before any 503
    snapshot, now = _snapshot(console), now_ms()
    listed = oldest_first(snapshot.transactions) if by_age else snapshot.transactions
    page = paginate(listed, lambda t: query.matches(t, now), *paging)
    data = {**_meta(console), "total": page.total, "page": page.number, "pages": page.count,
            "transactions": [transaction_json(t, now) for t in page.items]}
    context = {**_frame(console, request, "Transactions"), "page": page, "query": query, "states": STATES,
               "by_age": by_age}
    return View("transactions.html", context, data)


async def transaction_view(console: Console, request: web.Request) -> View:
    txn_id = request.match_info["transactional_id"]
    snapshot = _snapshot(console)
    if console.collector.error is None:
        txn, offsets = await _described(console, txn_id)
    else:  # the cluster cannot be read now: what the last snapshot says, without waiting
        txn, offsets = snapshot.transaction(txn_id), {}
    if txn is None:
        raise web.HTTPNotFound(text=f"no transactional id {txn_id!r} is known to its coordinator")
    rows = [_open_partition(snapshot, tp, offsets.get(tp)) for tp in txn.partitions]
    now = now_ms()
    data = {**_meta(console), "transaction": transaction_json(txn, now), "partitions": rows}
    context = {**_frame(console, request, f"Transaction {txn_id}"), "txn": txn, "rows": rows}
    return View("transaction.html", context, data)


async def _described(console: Console, txn_id: str) -> tuple[Transaction | None, dict[TopicPartition, int]]:
    """The transactional id described now, and its open transaction's first offsets."""
    cluster = console.collector.cluster
    txn = await cluster.run(f"cannot describe transactional id {txn_id!r}",
                            lambda admin: collect.describe_one(admin, txn_id))
    if txn is None:
        return None, {}
    found = txn
    offsets = await cluster.run(f"cannot describe the producers of {txn_id!r}'s partitions",
                                lambda admin: collect.open_offsets(admin, found))
    return txn, offsets


def _open_partition(snapshot: Snapshot, tp: TopicPartition, start: int | None) -> dict[str, Any]:
    row = snapshot.partition(tp)
    return {
        **_tp_json(tp), "open_offset": start,
        "high_watermark": row.high_watermark if row else None,
        "last_stable_offset": row.last_stable_offset if row else None,
        "lso_lag": row.lso_lag if row else None,
    }


# -- partitions ---------------------------------------------------------------------------


def open_json(o: OpenTransaction, snapshot: Snapshot) -> dict[str, Any]:
    return {
        "producer_id": o.producer_id, "producer_epoch": o.producer_epoch,
        "coordinator_epoch": o.coordinator_epoch, "start_offset": o.start_offset,
        "last_timestamp": o.last_timestamp, "transactional_id": snapshot.owner(o.producer_id),
    }


def partition_json(p: PartitionRow, snapshot: Snapshot, history: list[int]) -> dict[str, Any]:
    holder = p.holder
    return {
        "topic": p.topic, "partition": p.partition, "leader": p.leader,
        "high_watermark": p.high_watermark, "last_stable_offset": p.last_stable_offset,
        "lso_lag": p.lso_lag, "holder": open_json(holder, snapshot) if holder else None,
        "open_transactions": [open_json(o, snapshot) for o in p.open_transactions],
        "hanging": [open_json(o, snapshot) for o in p.hanging],
        "lso_lag_history": history,
    }


async def partitions_view(console: Console, request: web.Request) -> View:
    q = request.query
    query = PartitionQuery(q.get("q", "").strip(), _flag(q, "lagging"), _flag(q, "hanging"))
    paging = _paging(q)
    snapshot = _snapshot(console)
    page = paginate(snapshot.partitions, query.matches, *paging)
    history = console.collector.history
    series = {p.topic_partition: history.series(p.topic_partition) for p in page.items}
    data = {**_meta(console), "total": page.total, "page": page.number, "pages": page.count,
            "max_transaction_timeout_ms": snapshot.max_transaction_timeout_ms,
            "hanging_total": len(snapshot.hanging()),
            "partitions": [partition_json(p, snapshot, series[p.topic_partition]) for p in page.items]}
    sparks = {tp: sparkline_points(s, SPARK_WIDTH, SPARK_HEIGHT) for tp, s in series.items()}
    aborted = q.get("aborted")
    context = {**_frame(console, request, "Partitions"), "page": page, "query": query, "sparks": sparks,
               "notice": f"aborted the transaction at {aborted}" if aborted else None,
               "series": series, "spark_width": SPARK_WIDTH, "spark_height": SPARK_HEIGHT}
    return View("partitions.html", context, data)


# -- groups -------------------------------------------------------------------------------


def group_json(g: Group, history: list[int]) -> dict[str, Any]:
    return {
        "group_id": g.group_id, "state": g.state, "protocol_type": g.protocol_type, "members": g.members,
        "lag_to_lso": g.lag_to_lso, "lag_to_hw": g.lag_to_hw, "lag_to_lso_history": history,
        "partitions": [
            {"topic": o.topic, "partition": o.partition, "committed": o.committed,
             "high_watermark": o.high_watermark, "last_stable_offset": o.last_stable_offset,
             "lag_to_lso": o.lag_to_lso, "lag_to_hw": o.lag_to_hw}
            for o in g.offsets
        ],
    }


async def groups_view(console: Console, request: web.Request) -> View:
    q = request.query
    query = GroupQuery(q.get("q", "").strip(), _flag(q, "lagging"))
    paging = _paging(q)
    page = paginate(_snapshot(console).groups, query.matches, *paging)
    series = {g.group_id: console.collector.history.group_series(g.group_id) for g in page.items}
    data = {**_meta(console), "total": page.total, "page": page.number, "pages": page.count,
            "groups": [group_json(g, series[g.group_id]) for g in page.items]}
    sparks = {group: sparkline_points(s, SPARK_WIDTH, SPARK_HEIGHT) for group, s in series.items()}
    context = {**_frame(console, request, "Consumer groups"), "page": page, "query": query, "series": series,
               "sparks": sparks, "spark_width": SPARK_WIDTH, "spark_height": SPARK_HEIGHT}
    return View("groups.html", context, data)


# -- brokers (Gregor's metrics endpoints) ----------------------------------------------------


def metrics_json(m: BrokerMetrics) -> dict[str, Any]:
    return {"url": m.url, "error": m.error,
            "samples": [{"name": s.name, "labels": dict(s.labels), "value": s.value} for s in m.samples]}


async def brokers_view(console: Console, request: web.Request) -> View:
    found = console.collector.metrics
    data = {**_meta(console), "brokers": [metrics_json(m) for m in found]}
    context = {**_frame(console, request, "Brokers"), "brokers": found}
    return View("brokers.html", context, data)


# -- the abort action ---------------------------------------------------------------------


def _target(query: Mapping[str, str]) -> tuple[TopicPartition, int]:
    topic = query.get("topic", "").strip()
    if not topic:
        raise BadRequest("topic is required")
    return TopicPartition(topic, _required_int(query, "partition")), _required_int(query, "start_offset")


def _is_hanging(snapshot: Snapshot, txn: OpenTransaction) -> bool:
    row = snapshot.partition(txn.topic_partition)
    return row is not None and any(
        (h.producer_id, h.start_offset) == (txn.producer_id, txn.start_offset) for h in row.hanging
    )


async def _abort_target(console: Console, query: Mapping[str, str]) -> tuple[OpenTransaction, dict[str, Any]]:
    """The open transaction the abort names, read now, and why it may not be aborted (a 403
    without --allow-abort, a 404 when none starts there, a 409 when it is not hanging)."""
    tp, start = _target(query)
    where = f"{tp.topic}-{tp.partition}"
    if not console.allow_abort:
        raise web.HTTPForbidden(text="aborting is disabled: start the console with --allow-abort")
    snapshot = _snapshot(console)
    txn = await console.collector.cluster.run(
        f"cannot describe the producers of {tp.topic}-{tp.partition}",
        lambda admin: collect.find_open(admin, tp, start))
    if txn is None:
        raise web.HTTPNotFound(text=f"no open transaction starts at offset {start} of {where}")
    if not _is_hanging(snapshot, txn):
        raise web.HTTPConflict(text=f"the transaction at offset {start} of {where} is not hanging: its "
                                    "coordinator will still end it, so the console does not abort it")
    return txn, open_json(txn, snapshot)


async def abort_view(console: Console, request: web.Request) -> View:
    txn, described = await _abort_target(console, request.query)
    data = {**_meta(console), "topic": txn.topic, "partition": txn.partition, "transaction": described}
    context = {**_frame(console, request, "Abort a hanging transaction"), "txn": txn, "described": described,
               "csrf_token": console.csrf_token}
    return View("abort.html", context, data)


async def abort_post(console: Console, request: web.Request) -> web.StreamResponse:
    form = await request.post()
    fields = {k: str(v) for k, v in form.items()}
    if not console.allow_abort:
        raise web.HTTPForbidden(text="aborting is disabled: start the console with --allow-abort")
    if not hmac.compare_digest(fields.get("csrf_token", ""), console.csrf_token):
        raise web.HTTPForbidden(text="the form's CSRF token is missing or stale: "
                                     "open the confirmation page again")
    txn, _ = await _abort_target(console, fields)
    spec = await console.collector.cluster.run(
        f"cannot abort the transaction at offset {txn.start_offset} of {txn.topic}-{txn.partition}",
        lambda admin: collect.abort(admin, TopicPartition(txn.topic, txn.partition), txn.start_offset))
    log.info("abort: %s aborted the transaction of producer %d (epoch %d) on %s-%d from offset %d",
             request.remote, spec.producer_id, spec.producer_epoch, txn.topic, txn.partition,
             txn.start_offset)
    await console.collector.refresh()
    location = f"/partitions?q={quote(txn.topic)}&aborted={txn.topic}-{txn.partition}@{txn.start_offset}"
    raise web.HTTPSeeOther(location)


# -- wiring -------------------------------------------------------------------------------


def _html(console: Console, fn: ViewFn) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            view = await fn(console, request)
        except (BadRequest, ClusterError) as exc:
            return _message(console, request, exc)
        except web.HTTPError as exc:
            return _message(console, request, exc)
        body = render.page(console.templates, view.template, view.context)
        return web.Response(text=body, status=view.status, content_type="text/html")
    return handle


def _json(console: Console, fn: ViewFn) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            view = await fn(console, request)
        except (BadRequest, ClusterError, web.HTTPError) as exc:
            status, text = _status(exc)
            return web.json_response({**_meta(console), "error": text}, status=status)
        return web.json_response(view.data, status=view.status)
    return handle


def _status(exc: Exception) -> tuple[int, str]:
    if isinstance(exc, web.HTTPError):
        return exc.status, exc.text or exc.reason
    if isinstance(exc, BadRequest):
        return 400, str(exc)
    return 503, str(exc)


def _message(console: Console, request: web.Request, exc: Exception) -> web.Response:
    status, text = _status(exc)
    context = {**_frame(console, request, "Gregor console"), "message": text, "status": status}
    if context["error"] == text:  # said once, as the message
        context["error"] = None
    body = render.page(console.templates, "message.html", context)
    return web.Response(text=body, status=status, content_type="text/html")


def _abort_post(console: Console) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            return await abort_post(console, request)
        except (BadRequest, ClusterError, web.HTTPForbidden, web.HTTPNotFound, web.HTTPConflict) as exc:
            log.warning("abort: refused to %s: %s", request.remote, _status(exc)[1])
            return _message(console, request, exc)
    return handle


PAGES: dict[str, ViewFn] = {
    "/transactions": transactions_view,
    "/transactions/{transactional_id:.+}": transaction_view,
    "/partitions": partitions_view,
    "/groups": groups_view,
    "/brokers": brokers_view,
    "/abort": abort_view,
}


async def _home(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/transactions")


def build_app(console: Console) -> web.Application:
    if console.token is None:
        app = web.Application()
    else:
        app = web.Application(middlewares=[login.middleware(console.token)])
        app.router.add_routes(login.routes(console.token))
    app.router.add_get("/", _home)
    for path, fn in PAGES.items():
        app.router.add_get(path, _html(console, fn))
        app.router.add_get("/api" + path, _json(console, fn))
    app.router.add_post("/abort", _abort_post(console))
    app.router.add_static("/static", render.STATIC)
    return app
