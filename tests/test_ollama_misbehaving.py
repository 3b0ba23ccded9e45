"""The Ollama client against a misbehaving server: every transport and format
failure is one sentence naming the step that failed (connect, upload, create,
show), replies are bounded, the whole exchange has a deadline, and "No Ollama
server answers" is said only when nothing answers.

The server is a raw TCP socket in a thread that answers each request path
with a scripted byte string (so it can break HTTP in ways a real HTTP server
library would not).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine import ollama
from engine.errors import EngineError
from engine.export.ollama import deploy_gguf
from engine.ollama import OllamaClient, OllamaUnreachable

REPO = Path(__file__).resolve().parents[1]

Answer = Callable[[socket.socket, "Scripted"], None]


def http(status: int, body: bytes, length: int | None = None) -> bytes:
    """A plain HTTP/1.1 reply; ``length`` may lie about the body's size."""
    n = len(body) if length is None else length
    head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
    return (head + f"Content-Length: {n}\r\nConnection: close\r\n\r\n").encode() + body


def send(data: bytes) -> Answer:
    def answer(conn: socket.socket, server: Scripted) -> None:
        conn.sendall(data)

    return answer


def send_and_hold(data: bytes) -> Answer:
    """Send ``data``, then keep the connection open without a word."""

    def answer(conn: socket.socket, server: Scripted) -> None:
        conn.sendall(data)
        server.release.wait(30)

    return answer


def lines(*objs: object) -> bytes:
    return b"".join(json.dumps(o).encode() + b"\n" for o in objs)


VERSION = send(http(200, b'{"version": "0.6.2"}'))


class Scripted:
    """Answers each request by its path with a scripted ``Answer``; paths
    it does not know get a 404. Records the paths asked."""

    def __init__(self, answers: dict[str, Answer]) -> None:
        self.answers = answers
        self.asked: list[str] = []
        self.release = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> Scripted:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.stop_listening()

    def stop_listening(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self.sock.close()
        self._thread.join(5)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                block = conn.recv(65536)
                if not block:
                    return
                data += block
            head, _, body = data.partition(b"\r\n\r\n")
            request_line, *headers = head.decode("latin-1").split("\r\n")
            length = 0
            for h in headers:
                key, _, value = h.partition(":")
                if key.strip().lower() == "content-length":
                    length = int(value)
            while len(body) < length:
                block = conn.recv(65536)
                if not block:
                    return
                body += block
            method, path, _ = request_line.split(" ", 2)
            self.asked.append(f"{method} {path}")
            route = path if path in self.answers else f"{method} {path}"
            answer = self.answers.get(route) or send(
                http(404, b'{"error": "not found"}')
            )
            with contextlib.suppress(OSError):
                answer(conn, self)


@pytest.fixture
def gguf_file(tmp_path: Path) -> Path:
    import gguf
    import numpy as np

    out = tmp_path / "t.gguf"
    w = gguf.GGUFWriter(str(out), "qwen2")
    w.add_file_type(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def one_sentence(exc: pytest.ExceptionInfo[EngineError]) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and "Traceback" not in msg and msg.endswith((".", "?"))
    return msg


@pytest.fixture
def serve() -> Iterator[Callable[[dict[str, Answer]], Scripted]]:
    servers: list[Scripted] = []

    def start(answers: dict[str, Answer]) -> Scripted:
        servers.append(Scripted(answers).__enter__())
        return servers[-1]

    yield start
    for s in servers:
        s.__exit__()


# ------------------------------------------------------------------ connect
def test_nothing_listening_is_no_server(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(OllamaUnreachable) as exc:
        OllamaClient(url, timeout=2).version()
    assert one_sentence(exc).startswith(f"No Ollama server answers at {url} (")


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            send(b"SSH-2.0-OpenSSH_9.6\r\n"),
            "The server at {url} did not answer connect in HTTP; is it an Ollama "
            "server?",
        ),
        (
            send(b""),
            "The server at {url} closed the connection during connect without "
            "answering.",
        ),
        (
            send(http(200, b"<html>hello</html>")),
            "Ollama at {url} answered connect with something that is not JSON.",
        ),
        (
            send(http(200, b"\xff\xfe{")),
            "Ollama at {url} answered connect with something that is not JSON.",
        ),
        (
            send(http(200, b"[1, 2]")),
            "Ollama at {url} answered connect with JSON that is not an object.",
        ),
        (
            send(http(200, b'{"name": "not ollama"}')),
            "The server at {url} answered connect without an Ollama version; is "
            "it an Ollama server?",
        ),
        (
            send(http(200, b'{"version": "0.6', length=100)),
            "The reply of Ollama at {url} to connect broke off after 16 bytes, 84 "
            "short.",
        ),
        (
            send_and_hold(http(200, b'{"vers', length=100)),
            "Ollama at {url} went silent during connect (nothing for 0.5 s or more).",
        ),
        (
            send_and_hold(b""),
            "Ollama at {url} went silent during connect (nothing for 0.5 s or more).",
        ),
        (
            send(http(200, b"x", length=10**9)),
            "Ollama at {url} answered connect with 1000000000 bytes, more than the "
            "8388608 a reply may have.",
        ),
    ],
    ids=[
        "not-http",
        "closed",
        "html",
        "bad-utf8",
        "json-array",
        "no-version",
        "short-body",
        "stalled-body",
        "stalled-head",
        "huge-length",
    ],
)
def test_a_server_that_answers_badly_is_named_not_missing(
    serve, gguf_file: Path, tmp_path: Path, answer: Answer, expected: str
) -> None:
    server = serve({"/api/version": answer})
    with pytest.raises(EngineError) as exc:
        OllamaClient(server.url, timeout=0.5).version()
    assert not isinstance(exc.value, OllamaUnreachable)
    assert one_sentence(exc) == expected.format(url=server.url)
    # A deployment says the same, and writes no bundle: something answered.
    with pytest.raises(EngineError) as exc:
        deploy_gguf(
            gguf_file, "x", host=server.url, timeout=0.5, bundle_dir=tmp_path / "b"
        )
    assert one_sentence(exc) == expected.format(url=server.url)
    assert not (tmp_path / "b").exists()


def test_a_reply_without_a_length_is_bounded_too(serve, monkeypatch) -> None:
    """HTTP/1.0 style: no Content-Length, the body ends when the server
    closes; reading stops at the bound."""
    monkeypatch.setattr(ollama, "MAX_REPLY_BYTES", 1000)
    head = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n"
    server = serve({"/api/tags": send(head + b'{"models": [' + b" " * 5000 + b"]}")})
    with pytest.raises(EngineError) as exc:
        OllamaClient(server.url, timeout=2).list_models()
    assert one_sentence(exc) == (
        f"Ollama at {server.url} answered list with more than the 1000 bytes a "
        "reply may have."
    )


def test_the_deadline_bounds_a_server_that_keeps_the_line_open(serve) -> None:
    server = serve({"/api/version": send_and_hold(b"HTTP/1.1 200 OK\r\n")})
    with pytest.raises(EngineError) as exc:
        OllamaClient(server.url, timeout=30, deadline_s=0.5).version()
    assert one_sentence(exc) == (
        f"Ollama at {server.url} did not finish connect within the 0.5 s deadline."
    )


# ------------------------------------------------------- upload and create
def test_upload_refused_or_cut_names_the_upload(serve, gguf_file: Path) -> None:
    server = serve(
        {
            "/api/version": VERSION,
            "HEAD": send(b"garbage\r\n"),
        }
    )
    digest = ollama.sha256_file(gguf_file)
    server.answers[f"HEAD /api/blobs/{digest}"] = send(b"garbage\r\n")
    with pytest.raises(EngineError) as exc:
        deploy_gguf(gguf_file, "x", host=server.url, timeout=2)
    assert one_sentence(exc) == (
        f"The server at {server.url} did not answer upload in HTTP; is it an "
        "Ollama server?"
    )
    server.answers[f"HEAD /api/blobs/{digest}"] = send(http(404, b""))
    server.answers[f"POST /api/blobs/{digest}"] = send(b"")
    with pytest.raises(EngineError) as exc:
        deploy_gguf(gguf_file, "x", host=server.url, timeout=2)
    assert one_sentence(exc) == (
        f"The server at {server.url} closed the connection during upload without "
        "answering."
    )


@pytest.mark.parametrize(
    ("stream", "expected"),
    [
        (
            lines({"status": "parsing"}) + b"}{ not json\n",
            "Ollama could not create x: the server sent a status line that is not "
            "JSON.",
        ),
        (
            lines({"status": "parsing"}, ["success"]),
            "Ollama could not create x: the server sent a status line that is not a "
            "JSON object.",
        ),
        (
            lines({"status": "parsing"}, {"status": "writing"}),
            "Ollama could not create x: the status stream ended without success.",
        ),
        (
            b'{"status": "' + b"p" * 3000 + b'"}\n',
            "Ollama could not create x: the server sent a status line of more than "
            "1000 bytes.",
        ),
    ],
    ids=["garbage-line", "array-line", "no-success", "long-line"],
)
def test_a_broken_create_stream_names_the_create(
    serve, gguf_file: Path, monkeypatch, stream: bytes, expected: str
) -> None:
    monkeypatch.setattr(ollama, "MAX_LINE_BYTES", 1000)
    digest = ollama.sha256_file(gguf_file)
    server = serve(
        {
            "/api/version": VERSION,
            f"HEAD /api/blobs/{digest}": send(http(200, b"")),
            "/api/create": send(http(200, stream)),
        }
    )
    with pytest.raises(EngineError) as exc:
        deploy_gguf(gguf_file, "x", host=server.url, timeout=2)
    assert one_sentence(exc) == expected


# ---------------------------------------------------- after a good create
def test_a_failure_after_a_successful_create_says_the_model_exists(
    serve, gguf_file: Path
) -> None:
    digest = ollama.sha256_file(gguf_file)
    answers = {
        "/api/version": VERSION,
        f"HEAD /api/blobs/{digest}": send(http(200, b"")),
        "/api/create": send(http(200, lines({"status": "success"}))),
        "/api/show": send(b""),
    }
    server = serve(answers)
    with pytest.raises(EngineError) as exc:
        deploy_gguf(gguf_file, "x", host=server.url, timeout=2)
    assert one_sentence(exc) == (
        f"Ollama created x at {server.url}, but checking it failed: the server at "
        f"{server.url} closed the connection during show without answering."
    )
    assert "No Ollama server answers" not in str(exc.value)

    answers["/api/show"] = send(http(200, b"{}"))
    answers["/api/generate"] = send(http(200, b'{"response": "hi', length=50))
    with pytest.raises(EngineError) as exc:
        deploy_gguf(gguf_file, "x", host=server.url, timeout=2)
    assert one_sentence(exc) == (
        f"Ollama created x at {server.url}, but checking it failed: the reply of "
        f"Ollama at {server.url} to generate broke off after 16 bytes, 34 short."
    )


def test_a_server_gone_after_answering_is_not_called_missing(serve) -> None:
    server = serve({"/api/version": VERSION})
    client = OllamaClient(server.url, timeout=2)
    assert client.version() == "0.6.2"
    server.stop_listening()
    with pytest.raises(EngineError) as exc:
        client.show("x")
    assert not isinstance(exc.value, OllamaUnreachable)
    assert one_sentence(exc).startswith(
        f"The Ollama server at {server.url} stopped answering during show ("
    )


def test_cli_says_one_line_and_exits_2_on_a_bad_server(serve, gguf_file: Path) -> None:
    server = serve({"/api/version": send(b"SSH-2.0-OpenSSH_9.6\r\n")})
    r = subprocess.run(
        [
            *(sys.executable, "-m", "engine", "deploy-ollama", str(gguf_file)),
            *("--name", "x", "--host", server.url, "--quiet"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"rl-studio-engine deploy-ollama: The server at {server.url} did not answer "
        "connect in HTTP; is it an Ollama server?"
    )


@pytest.mark.parametrize("host", ["ftp://h", "http://h:port", "a b", "http://", ""])
def test_an_address_that_cannot_be_ollamas_is_one_sentence(host: str) -> None:
    with pytest.raises(EngineError) as exc:
        ollama.check_host(host)
    assert one_sentence(exc) == (
        f"The Ollama address {host!r} is not an http:// or https:// URL."
    )
    assert ollama.check_host("127.0.0.1:11434") == "127.0.0.1:11434"


@pytest.mark.parametrize("host", ["http://" + "a" * 64 + ".local", "http://a..b:1"])
def test_a_host_name_no_lookup_can_encode_is_one_sentence(host: str) -> None:
    """The fuzz found these: the name lookup's IDNA encoding raised a raw
    UnicodeError from deep inside http.client."""
    with pytest.raises(EngineError) as exc:
        ollama.check_host(host)
    assert "has a host name that cannot be looked up" in one_sentence(exc)
