"""An HTTP server on localhost serving archives shaped as the datasets' real releases (the
prepare step's download mode, offline), and the pieces to build them."""

import gzip
import http.server
import io
import os
import tarfile
import threading

import pytest

from support import REPO


MULTI30K = os.path.join(REPO, "deepnet_fairseq", "corpora", "multi30k")


def multi30k(stem, lang, count):
    with gzip.open(os.path.join(MULTI30K, f"{stem}.{lang}.gz"), "rb") as text:
        return text.read().split(b"\n")[:count]


class Server:
    """Files served from memory by http.server; ``ranges`` says whether byte ranges are
    honoured (a 206 from the Range header's offset) or ignored (a 200 with the whole file)."""

    def __init__(self, ranges=True):
        self.files, self.ranges, self.requests = {}, ranges, []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append((self.path, self.headers.get("Range")))
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                start = 0
                if server.ranges and self.headers.get("Range"):
                    start = int(self.headers["Range"].split("=")[1].rstrip("-"))
                    self.send_response(206)
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                self.wfile.write(body[start:])

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def url(self, path):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    running = Server()
    yield running
    running.close()


def tgz(members):
    """A .tgz in memory of {name: bytes}."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            archive.addfile(info, io.BytesIO(body))
    return buffer.getvalue()


def lines(*items):
    return b"".join(item + b"\n" for item in items)
