"""``rl-studio-engine serve-http``: the project's engine as an HTTP service.

One process holds the project's supervisor (as ``rl-studio-engine serve``
does for the studio) and answers HTTP with uvicorn; runs are job processes
as everywhere else. The first line on stdout, printed once the socket is
bound, says where it listens (``--port 0`` takes a free port); the service
answers as soon as ``GET /health`` does. Ctrl-C or SIGTERM ends it (the
process then ends by that signal, as uvicorn re-raises it); its runs go on
headless and record their own end.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import socket
import sys
from pathlib import Path

from engine.errors import EngineError
from engine.store import database

DEFAULT_PORT = 8765
GRACEFUL_SHUTDOWN_S = 3.0
"""How long open requests (an event stream) get when the service stops."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", required=True, help="the project folder")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; any other than loopback "
        "needs --token-file)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port (default {DEFAULT_PORT}; 0: any free one)",
    )
    parser.add_argument(
        "--token-file",
        default=None,
        help="file holding the bearer token every request must send",
    )
    parser.add_argument(
        "--retrain-every",
        default=None,
        metavar="DURATION",
        help="run the project's training flow by itself this often when the "
        "data is ready (24h, 30m, 90s; see PUT /training/settings)",
    )
    parser.add_argument(
        "--webhook",
        action="append",
        default=[],
        metavar="URL",
        help="also tell this webhook when a run fails or completes, a retraining "
        "starts, a version is promoted or rolled back or act falls back "
        "(repeatable; as RL_STUDIO_WEBHOOKS; the project's are under PUT /alerts)",
    )
    parser.add_argument(
        "--database",
        default=None,
        metavar="URL",
        help="keep trajectories, decisions, promotions and labels in this "
        "PostgreSQL database (postgresql://user@host:5432/dbname), which several "
        "service processes may share; default: the project's setting "
        "(rl-studio-engine store use), else its SQLite files under data/",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=("debug", "info", "warning", "error"),
        help="uvicorn's log level (default info: one line per request)",
    )


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: may resolve to anything


def read_token(path: str | None, host: str) -> str | None:
    """The token of ``--token-file``; None on loopback without one. An
    EngineError (exit 2) for a missing or empty file, or no token off
    loopback."""
    if path is None:
        if not is_loopback(host):
            raise EngineError(
                f"Listening on {host} (not loopback) needs a token: "
                "give --token-file FILE."
            )
        return None
    from engine.store.atomic import read_small_text

    # Bounded: --token-file /dev/zero read 9 GB.
    token = read_small_text(
        Path(path).expanduser(), f"The token file {path}", 64 * 1024
    ).strip()
    if not token or any(c.isspace() for c in token):
        raise EngineError(
            f"The token file {path} must hold one token (no spaces), not "
            f"{'nothing' if not token else 'several words'}."
        )
    return token


def bind(host: str, port: int) -> socket.socket:
    if not 0 <= port <= 65535:
        raise EngineError(f"--port must be between 0 and 65535, not {port}.")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY on accepted sockets
    # only when their proto says TCP, and without it a kept-alive connection
    # waits 40 ms per request (Nagle's algorithm against delayed ACKs).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise EngineError(
            f"Cannot listen on {host}:{port} ({exc.strerror or exc})."
        ) from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from engine.service.app import create_app
    from engine.service.state import Service
    from resources import resource_path

    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="engine %(levelname)s: %(message)s",
    )
    from engine.service.retrain import parse_every

    token = read_token(args.token_file, args.host)
    if args.webhook:
        from engine import alerts

        urls = alerts.check_urls(args.webhook, "--webhook")
        # In the environment: the job processes this service starts (a run
        # that records its own end) tell them too.
        before = os.environ.get(alerts.WEBHOOKS_ENV, "")
        os.environ[alerts.WEBHOOKS_ENV] = " ".join([before, *urls]).strip()
    every = None if args.retrain_every is None else parse_every(args.retrain_every)
    if args.database is not None:
        # In the environment: every store this process opens, and the job
        # processes it starts (a dataset built from labels), use it.
        os.environ[database.ENV] = database.checked_url(args.database, "--database")
    sock = bind(args.host, args.port)
    try:
        service = Service(
            args.project, examples=resource_path("examples"), retrain_every_s=every
        )
    except database.DatabaseError as exc:
        sock.close()
        raise EngineError(str(exc)) from None
    except BaseException:
        sock.close()
        raise
    try:
        app = create_app(service, token)
        config = uvicorn.Config(
            app,
            log_level=args.log_level,
            timeout_graceful_shutdown=int(GRACEFUL_SHUTDOWN_S),
        )
        server = uvicorn.Server(config)
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        print(
            f"rl-studio-engine serve-http: http://{shown}:{port} "
            f"(project {service.project.path}, database {service.database})",
            flush=True,
        )
        server.run(sockets=[sock])
    finally:
        service.close()
        sock.close()
    return 0
