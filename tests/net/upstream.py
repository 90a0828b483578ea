"""A command's web app for the net tier, run by sbxd as the command user:

    python3 upstream.py PORT [ADDRESS] [--defer-accept]

GET /headers answers the request's path, headers and the port it came from as JSON; GET /redirect a 302 to /login
with a cookie whose Path is /app; GET or HEAD of a file serves it from the working directory;
POST or PUT /upload reads the body (Content-Length or chunked) and answers "BYTES SHA256".
--defer-accept: the listener has TCP_DEFER_ACCEPT (nginx's `listen ... deferred`): a connection
is accepted only once its first bytes arrive, half-open and nobody's until then.
"""
import hashlib
import http.server
import json
import socket
import sys


class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.startswith("/headers"):
            body = json.dumps({"path": self.path, "headers": dict(self.headers.items()),
                               "peer_port": self.client_address[1]})
            return self.answer(200, body.encode(), "application/json")
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/login")
            self.send_header("Set-Cookie", "s=1; Path=/app; HttpOnly")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        return super().do_GET()

    def answer(self, status, body, ctype="text/plain"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        h = hashlib.sha256()
        n = 0
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                left = size
                while left:
                    b = self.rfile.read(min(left, 1 << 16))
                    h.update(b)
                    n += len(b)
                    left -= len(b)
                self.rfile.readline()
        else:
            left = int(self.headers.get("Content-Length", "0"))
            while left:
                b = self.rfile.read(min(left, 1 << 16))
                h.update(b)
                n += len(b)
                left -= len(b)
        self.answer(200, ("%d %s" % (n, h.hexdigest())).encode())

    do_PUT = do_POST


class Server(http.server.ThreadingHTTPServer):
    allow_reuse_address = True

    def server_bind(self):
        if "--defer-accept" in sys.argv:
            self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, 30)
        super().server_bind()


args = [a for a in sys.argv[1:] if not a.startswith("--")]
addr = args[1] if len(args) > 1 else "127.0.0.1"
Server((addr, int(args[0])), Handler).serve_forever()
