"""A small typed client of ``rl-studio-engine serve-http`` (standard library
only), for scripts and tests.

>>> client = StudioClient("http://127.0.0.1:8765")
>>> job = client.train("CartPole-v1", algo="PPO", steps=20_000)
>>> client.wait(job)["status"]
'completed'

Every error answer becomes an :class:`ApiError` carrying the HTTP status,
the server's one-sentence ``error`` and the ``field`` it names; a server
that cannot be reached or dies mid-answer is an ``OSError``
(``ConnectionError``).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

FINAL_STATUSES = ("completed", "stopped", "failed", "interrupted")


class ApiError(Exception):
    """An error answer: ``status`` (HTTP), ``message`` (one sentence),
    ``field`` (the request field to blame, or empty)."""

    def __init__(self, status: int, message: str, field: str = "") -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.field = field


@dataclass(frozen=True)
class Event:
    """One Server-Sent Event: its name and its JSON data."""

    event: str
    data: Any


IDLE_REUSE_S = 4.0
"""A kept-alive connection idle longer than this is not reused: uvicorn
closes idle connections after 5 s, and a request sent on a connection the
server is closing fails."""


class StudioClient:
    """Keeps one connection alive per thread (a step acknowledged in about a
    millisecond instead of a fresh connection's two). A GET that meets a
    connection the server closed is sent again once on a new one; a POST is
    never sent twice."""

    def __init__(
        self, base_url: str, token: str | None = None, timeout: float = 30.0
    ) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{base_url!r} is not an http(s) URL.")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._local = threading.local()

    def close(self) -> None:
        """Close this thread's kept-alive connection."""
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    # ------------------------------------------------------------ plumbing
    def _pooled(self) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection and whether it served a request before."""
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        last = getattr(self._local, "last_used", 0.0)
        if conn is not None and time.monotonic() - last > IDLE_REUSE_S:
            self.close()
            conn = None
        if conn is None:
            conn = self._local.conn = self._connection(self.timeout)
            return conn, False
        return conn, True

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=timeout)

    def _headers(self, body: bytes | None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw_body: bytes | None = None,
        query: dict[str, Any] | None = None,
    ) -> Any:
        """``method path`` with ``body`` as JSON (or ``raw_body`` as is);
        the decoded JSON answer, or ApiError."""
        data = raw_body if raw_body is not None else None
        if body is not None:
            data = json.dumps(body).encode()
        url = self._prefix + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        while True:
            conn, reused = self._pooled()
            try:
                conn.request(method, url, body=data, headers=self._headers(data))
                response = conn.getresponse()
                payload = response.read()
            except (ConnectionResetError, BrokenPipeError):
                self.close()
                if reused and method == "GET":
                    continue  # closed by the server meanwhile: once more, fresh
                raise
            except http.client.HTTPException as exc:
                # A torn answer (the server died mid-response): a connection
                # failure like the others, one exception type for callers.
                self.close()
                raise ConnectionError(
                    f"The server's answer to {method} {path} was cut short ({exc!r})."
                ) from exc
            except BaseException:
                self.close()
                raise
            self._local.last_used = time.monotonic()
            if response.will_close:
                self.close()
            break
        try:
            decoded = json.loads(payload) if payload else None
        except json.JSONDecodeError:
            decoded = None
        if response.status >= 400:
            if isinstance(decoded, dict) and "error" in decoded:
                raise ApiError(
                    response.status,
                    str(decoded["error"]),
                    str(decoded.get("field", "")),
                )
            raise ApiError(response.status, payload.decode("utf-8", "replace")[:200])
        return decoded

    # -------------------------------------------------------------- routes
    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/health")
        return result

    def train(
        self,
        env: str,
        *,
        algo: str = "auto",
        steps: int | None = None,
        settings: dict[str, Any] | None = None,
        name: str = "",
    ) -> str:
        """Start training; returns the job id."""
        body: dict[str, Any] = {"algo": algo, "settings": settings or {}}
        if steps is not None:
            body["steps"] = steps
        if name:
            body["name"] = name
        path = "/train/" + urllib.parse.quote(env, safe="/")
        return str(self.request("POST", path, body)["job_id"])

    def training(self, job_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"/training/{_q(job_id)}")
        return result

    def stop(self, job_id: str) -> None:
        self.request("POST", f"/training/{_q(job_id)}/stop")

    def wait(
        self, job_id: str, timeout: float = 300.0, poll_s: float = 0.25
    ) -> dict[str, Any]:
        """Poll until the job ended; its last status (TimeoutError after
        ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.training(job_id)
            if status["status"] in FINAL_STATUSES:
                return status
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"job {job_id} still {status['status']} after {timeout:.0f} s"
                )
            time.sleep(poll_s)

    def runs(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", "/runs")["runs"]
        return result

    def run(self, run_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"/runs/{_q(run_id)}")
        return result

    def metrics(self, run_id: str, since: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Metric rows from index ``since``, and the index to ask next."""
        answer = self.request(
            "GET", f"/runs/{_q(run_id)}/metrics", query={"since": since}
        )
        return list(answer["rows"]), int(answer["next"])

    def events(
        self, run_id: str, since: int = 0, timeout: float | None = 60.0
    ) -> Iterator[Event]:
        """The run's Server-Sent Events as they come; ends after ``end``.
        Closing the iterator closes the connection."""
        url = f"{self._prefix}/runs/{_q(run_id)}/events?since={since}"
        conn = self._connection(timeout)
        try:
            headers = self._headers(None)
            headers["Accept"] = "text/event-stream"
            conn.request("GET", url, headers=headers)
            response = conn.getresponse()
            if response.status >= 400:
                payload = json.loads(response.read() or b"{}")
                raise ApiError(
                    response.status,
                    str(payload.get("error", "")),
                    str(payload.get("field", "")),
                )
            name, data = "message", list[str]()
            for raw in response:
                line = raw.decode("utf-8").rstrip("\r\n")
                if not line:
                    if data:
                        yield Event(name, json.loads("\n".join(data)))
                        if name == "end":
                            return
                    name, data = "message", list[str]()
                elif line.startswith("event:"):
                    name = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].strip())
        finally:
            conn.close()

    def run_flow(
        self,
        name: str,
        *,
        overrides: dict[str, Any] | None = None,
        only_stale: bool = True,
    ) -> str:
        """Run the project's flow ``name``; returns the job id."""
        body = {"overrides": overrides or {}, "only_stale": only_stale}
        return str(self.request("POST", f"/flows/{_q(name)}/run", body)["job_id"])

    def flows(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", "/flows")["flows"]
        return result

    def models(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", "/models")["models"]
        return result

    def envs(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", "/envs")["envs"]
        return result

    # ------------------------------------------------------- trajectories
    def start_trajectory(
        self,
        agent: str,
        *,
        scenario: str = "",
        window: str = "",
        env: str = "",
        meta: dict[str, Any] | None = None,
    ) -> str:
        """Start recording; returns the trajectory id."""
        body: dict[str, Any] = {
            "agent": agent,
            "scenario": scenario,
            "window": window,
            "env": env,
        }
        if meta:
            body["meta"] = meta
        return str(self.request("POST", "/trajectories", body)["trajectory_id"])

    def add_step(
        self,
        trajectory_id: str,
        *,
        action: Any,
        reward: float,
        state: Any = None,
        prompt: str | list[dict[str, str]] | None = None,
        completion: str | None = None,
        valid: bool = True,
    ) -> int:
        """Record a step; returns its index once the server stored it."""
        body: dict[str, Any] = {"state": state, "action": action, "reward": reward}
        if prompt is not None:
            body["prompt"] = prompt
        if completion is not None:
            body["completion"] = completion
        if not valid:
            body["valid"] = False
        path = f"/trajectories/{_q(trajectory_id)}/steps"
        return int(self.request("POST", path, body)["t"])

    def add_steps(self, trajectory_id: str, steps: list[dict[str, Any]]) -> int:
        """Record several steps (each a dict of :meth:`add_step`'s keywords,
        at most 1,000) in one request, all or none; returns the first's
        index once the server stored them."""
        path = f"/trajectories/{_q(trajectory_id)}/steps"
        return int(self.request("POST", path, {"steps": steps})["t"])

    def end_trajectory(
        self, trajectory_id: str, status: str, total_reward: float | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"status": status}
        if total_reward is not None:
            body["total_reward"] = total_reward
        path = f"/trajectories/{_q(trajectory_id)}/end"
        result: dict[str, Any] = self.request("POST", path, body)
        return result

    def trajectories(self, agent: str = "", status: str = "") -> list[dict[str, Any]]:
        query = {k: v for k, v in (("agent", agent), ("status", status)) if v}
        answer = self.request("GET", "/trajectories", query=query or None)
        result: list[dict[str, Any]] = answer["trajectories"]
        return result

    def trajectory(self, trajectory_id: str) -> dict[str, Any]:
        """The trajectory as a trace episode, steps included."""
        result: dict[str, Any] = self.request(
            "GET", f"/trajectories/{_q(trajectory_id)}"
        )
        return result

    # ------------------------------------------------------------- agents
    def agent(self, name: str) -> dict[str, Any]:
        """Versions, routing and per-version outcomes."""
        result: dict[str, Any] = self.request("GET", f"/agents/{_q(name)}")
        return result

    def configure_agent(self, name: str, **changes: Any) -> dict[str, Any]:
        """``pin``, ``candidate`` (``"v2"``, 2 or None) and ``rollout``
        (0-100); what is not given is kept."""
        result: dict[str, Any] = self.request("PUT", f"/agents/{_q(name)}", changes)
        return result

    def act(
        self,
        name: str,
        *,
        observation: Any = None,
        messages: list[dict[str, str]] | None = None,
        state: dict[str, Any] | None = None,
        key: str = "",
    ) -> dict[str, Any]:
        """The agent's answer: ``action`` (a policy) or ``reply`` (a
        language model), with the ``version`` (or ``base``, ``rule``) that
        gave it."""
        body: dict[str, Any] = {"key": key}
        for field, value in (
            ("observation", observation),
            ("messages", messages),
            ("state", state),
        ):
            if value is not None:
                body[field] = value
        result: dict[str, Any] = self.request("POST", f"/agents/{_q(name)}/act", body)
        return result

    def promote(
        self, name: str, version: int | str, why: str, by: str = "api"
    ) -> dict[str, Any]:
        """Make ``version`` current by hand; the agent after."""
        body = {"version": version, "by": by, "why": why}
        result: dict[str, Any] = self.request(
            "POST", f"/agents/{_q(name)}/promote", body
        )
        return result

    def rollback(self, name: str, why: str, by: str = "api") -> dict[str, Any]:
        """Back to the version promoted before the current one."""
        body = {"by": by, "why": why}
        result: dict[str, Any] = self.request(
            "POST", f"/agents/{_q(name)}/rollback", body
        )
        return result

    def configure_agent_settings(self, name: str, **changes: Any) -> dict[str, Any]:
        """``tolerance``, ``gate_metric``, ``rl_enabled``, ``base_model``,
        ``rule_env``...; the agent after."""
        result: dict[str, Any] = self.request(
            "PUT", f"/agents/{_q(name)}/settings", changes
        )
        return result

    def configure_serving(self, **changes: Any) -> dict[str, Any]:
        """The project's ``rl_enabled``, ``fallback_to_base`` and
        ``base_model``."""
        result: dict[str, Any] = self.request("PUT", "/serving", changes)
        return result


def _q(part: str) -> str:
    return urllib.parse.quote(part, safe="")
