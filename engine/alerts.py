"""Alerts: webhooks told when a run fails or completes, a retraining is
triggered, an agent's version is promoted or rolled back, or ``act`` fell
back (stdlib only).

The webhook URLs are the project setting :data:`SETTING_KEY` (``{"webhooks":
[...]}``, ``PUT /alerts`` of ``serve-http``) and the environment variable
:data:`WEBHOOKS_ENV` (``serve-http --webhook URL`` sets it, so that the job
processes it starts inherit it). Each alert is posted as Slack-compatible
JSON: ``text`` (one line), ``event``, ``fields`` (the structured facts) and
the same facts as a Slack attachment's ``fields``.

Posting never blocks the caller (a run's end, a request): :func:`post` puts
the alert on a bounded queue that one background thread of the process
sends from, each webhook tried :attr:`Sender.tries` times with a growing
pause and a timeout per try. A webhook that still fails is one sentence in
the log; a full queue drops the alert with one sentence. A process that
exits waits at most :data:`FLUSH_AT_EXIT_S` for the alerts still queued (a
headless run records its own end, then exits).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.errors import ConfigError, quoted

log = logging.getLogger("engine.alerts")

SETTING_KEY = "alerts"
"""The project setting (``meta`` table) holding ``{"webhooks": [URL, ...]}``."""
WEBHOOKS_ENV = "RL_STUDIO_WEBHOOKS"
"""Webhook URLs (separated by spaces or commas) told besides the project's."""
EVENTS = (
    "run.failed",
    "run.completed",
    "retrain.triggered",
    "version.promoted",
    "version.rolled_back",
    "fallback.used",
)
"""Every event an alert is sent for."""
RUN_EVENTS = {"failed": "run.failed", "completed": "run.completed"}
"""A run's final status that is told, and its event (a run stopped by the
user is not news to them)."""
QUEUE_MAX = 256
"""Alerts waiting to be sent at most; more are dropped (a webhook down for
long under a burst of fallbacks must not grow the process)."""
FLUSH_AT_EXIT_S = 3.0
"""How long an exiting process waits for its queued alerts."""
MAX_URLS = 20
COLORS = {
    "run.failed": "danger",
    "fallback.used": "warning",
    "version.rolled_back": "warning",
}


@dataclass(frozen=True)
class Alert:
    """One thing that happened, told to every webhook."""

    event: str
    """One of :data:`EVENTS`."""
    text: str
    """One line for a person."""
    fields: dict[str, Any] = field(default_factory=dict)
    """The structured facts (run id and name, status, agent, version...)."""

    def payload(self) -> dict[str, Any]:
        """The Slack-compatible JSON body."""
        shown = [
            {"title": k, "value": str(v), "short": len(str(v)) < 40}
            for k, v in self.fields.items()
            if v not in (None, "")
        ]
        attachment = {"color": COLORS.get(self.event, "good"), "fields": shown}
        return {
            "text": self.text,
            "event": self.event,
            "fields": self.fields,
            "attachments": [attachment],
        }


def check_urls(urls: object, where: str = "webhooks") -> list[str]:
    """``urls`` as a list of http(s) URLs; a ConfigError in one sentence
    naming ``where`` otherwise."""
    if isinstance(urls, str):
        urls = [u for u in urls.replace(",", " ").split() if u]
    if not isinstance(urls, list | tuple) or not all(isinstance(u, str) for u in urls):
        raise ConfigError(where, f"{where} must be a list of URLs.")
    if len(urls) > MAX_URLS:
        raise ConfigError(where, f"{where} may name at most {MAX_URLS} URLs.")
    for url in urls:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(
                where, f"{where}: {quoted(url)} is not an http:// or https:// URL."
            )
    return list(dict.fromkeys(urls))


def webhook_urls(stored: Mapping[str, Any]) -> list[str]:
    """The webhooks to tell: the project setting's (``stored``, as
    ``project.setting(SETTING_KEY)`` gives it) and the environment's. A
    malformed value is logged and left out: an alert never fails its
    caller."""
    found: list[str] = []
    for where, value in (
        (SETTING_KEY, stored.get("webhooks", [])),
        (WEBHOOKS_ENV, os.environ.get(WEBHOOKS_ENV, "")),
    ):
        try:
            found += check_urls(value, where)
        except ConfigError as exc:
            log.warning("%s", exc)
    return list(dict.fromkeys(found))


def host_of(url: str) -> str:
    """What the log names of a webhook: its host (a Slack webhook's path is
    its secret)."""
    return urllib.parse.urlsplit(url).netloc or "?"


class Sender:
    """The process's background sender: a bounded queue and one daemon
    thread, started on the first alert."""

    def __init__(
        self, *, tries: int = 3, timeout_s: float = 5.0, backoff_s: float = 1.0
    ) -> None:
        self.tries = tries
        self.timeout_s = timeout_s
        """Per try: a webhook that hangs is given up after this."""
        self.backoff_s = backoff_s
        """The pause before the second try; it doubles before each next."""
        self._queue: queue.Queue[tuple[str, Alert]] = queue.Queue(QUEUE_MAX)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._idle = threading.Condition()
        self._pending = 0
        self._dropped = False

    def post(self, urls: Iterable[str], alert: Alert) -> None:
        """Queue ``alert`` for each URL; never blocks, never raises."""
        for url in urls:
            try:
                self._queue.put_nowait((url, alert))
            except queue.Full:
                if not self._dropped:  # one sentence per burst, not per alert
                    log.warning(
                        "The alert queue is full (%d waiting): the %s alert to "
                        "%s was dropped.",
                        QUEUE_MAX,
                        alert.event,
                        host_of(url),
                    )
                self._dropped = True
                continue
            with self._idle:
                self._pending += 1
            self._start()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="alerts", daemon=True
                )
                self._thread.start()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every queued alert was sent or given up (at most
        ``timeout_s``); whether it was."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def _loop(self) -> None:
        while True:
            url, alert = self._queue.get()
            try:
                self._send(url, alert)
            except Exception:  # the thread must outlive one bad alert
                log.exception("The %s alert to %s failed.", alert.event, host_of(url))
            finally:
                self._dropped = False
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _send(self, url: str, alert: Alert) -> None:
        body = json.dumps(alert.payload()).encode("utf-8")
        problem = ""
        for attempt in range(self.tries):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            request = urllib.request.Request(
                url,
                data=body,
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                    reply.read(64 * 1024)
                return
            except urllib.error.HTTPError as exc:
                problem = f"HTTP {exc.code}"
                if 400 <= exc.code < 500 and exc.code not in (408, 429):
                    break  # the hook refuses this body: trying again won't help
            except (OSError, ValueError) as exc:  # refused, timed out, bad reply
                reason = getattr(exc, "reason", None) or exc
                problem = str(reason) or type(exc).__name__
        log.warning(
            "The webhook at %s did not take the %s alert after %d tries (%s).",
            host_of(url),
            alert.event,
            attempt + 1,
            problem,
        )


SENDER = Sender()
"""The process's sender (tests shorten its timeout and pauses)."""
atexit.register(lambda: SENDER.wait_idle(FLUSH_AT_EXIT_S))


def post(stored: Mapping[str, Any], alert: Alert) -> None:
    """Tell every webhook (the project setting ``stored`` and the
    environment's) about ``alert``, in the background."""
    SENDER.post(webhook_urls(stored), alert)


def run_ended(
    run_id: str, name: str, kind: str, status: str, reason: str = ""
) -> Alert | None:
    """The alert of a run that ended with ``status``; None for a status
    not told (:data:`RUN_EVENTS`)."""
    event = RUN_EVENTS.get(status)
    if event is None:
        return None
    shown = f"{name} ({run_id})" if name and name != run_id else run_id
    text = f"Run {shown} {status}" + (f": {reason}" if reason else ".")
    return Alert(
        event,
        text,
        {
            "run_id": run_id,
            "run_name": name,
            "kind": kind,
            "status": status,
            "reason": reason,
        },
    )
