"""A REPLAY of recorded HTTP responses, not a Grafana or Prometheus: serves the answers recorded from public sources
(tests/fixtures/grafana, sources in its README) on 127.0.0.1 at a free port, so a probe's HTTP client can be run end
to end where neither server can be installed.

The routes file (JSON list) names each recorded answer: {"method", "path", "query": {name: value} (exact, after URL
decoding), "auth": true where the real server answers only an authenticated request, "status", "file" (the body,
relative to the routes file)}. A request is matched on method + path + query; an `auth` route answered without the
expected Authorization header gets the 401 an unauthenticated API call gets; an unrecorded request gets 404 (the
test then shows the probe asked something nobody recorded). Every request is logged (method, path, query, whether it
carried an Authorization header -- never the header's value) for the tests to assert on.
"""

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

UNAUTHORIZED = {"message": "Unauthorized"}


def _key(method, path, query):
    return method.upper(), path, tuple(sorted(query.items()))


class Replay:
    """with Replay(routes_file, authorization="Bearer ...") as r: r.url, r.log"""

    def __init__(self, routes_file, authorization=None):
        base = os.path.dirname(os.path.abspath(routes_file))
        with open(routes_file) as fh:
            routes = json.load(fh)
        self.routes = {_key(r["method"], r["path"], r.get("query") or {}): dict(r, file=os.path.join(base, r["file"]))
                       for r in routes}
        self.authorization = authorization
        self.log = []
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet: the log list is the record
                pass

            def _answer(self):
                parts = urlsplit(self.path)
                query = dict(parse_qsl(parts.query, keep_blank_values=True))
                given = self.headers.get("Authorization")
                replay.log.append({"method": self.command, "path": parts.path, "query": query,
                                   "authorized": given is not None})
                route = replay.routes.get(_key(self.command, parts.path, query))
                if route is None:
                    return self._send(404, {"message": "not recorded"})
                if route.get("auth") and given != replay.authorization:
                    return self._send(401, UNAUTHORIZED)
                with open(route["file"], "rb") as fh:
                    return self._send(route.get("status", 200), fh.read())

            def _send(self, status, body):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
