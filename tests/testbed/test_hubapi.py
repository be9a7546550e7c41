"""token_request: the token is sent, JSON is decoded, and an error answers (status, body) instead of raising."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fracnb_testbed.hubapi import token_request


class Answers(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        sent = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        routes = {
            "/json": (201, "application/json", json.dumps({"got": sent, "auth": self.headers["Authorization"]})),
            "/refused": (403, "application/json", json.dumps({"message": "not yours"})),
            "/broken": (500, "text/html", "<h1>500</h1>"),
        }
        status, kind, text = routes[self.path]
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.end_headers()
        self.wfile.write(text.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_json_in_and_out_with_the_token(url: str) -> None:
    assert token_request(f"{url}/json", "t0k", method="POST", body={"a": 1}) == (
        201,
        {"got": {"a": 1}, "auth": "token t0k"},
    )


def test_errors_are_answers_json_or_text(url: str) -> None:
    assert token_request(f"{url}/refused", "t", method="POST", body={}) == (403, {"message": "not yours"})
    assert token_request(f"{url}/broken", "t", method="POST", body={}) == (500, "<h1>500</h1>")
