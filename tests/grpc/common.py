"""Helpers of the grpc tier: the Python stubs generated at run time from proto/, a real sbxd
per test class or per run (on the host, or inside gVisor when $SBXD_WRAP names runsc), what
a test needs to look at it from outside (its processes, its RSS, its REST front), and a
minimal HTTP/2 client over a raw socket for the frames no gRPC library sends.

Standard library plus Debian's python3-grpcio, python3-protobuf and python3-h2 (whose
hpack and hyperframe modules decode the server's frames), and the protoc and
grpc_python_plugin of protobuf-compiler and protobuf-compiler-grpc.
"""

import http.client
import json
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import types
import unittest

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import sbxd_daemon  # noqa: E402 (tests/sbxd_daemon.py)

# Every RPC and HTTP call of the tier gives up after this many seconds (a call that expects
# to wait for a command passes its own).
CALL_TIMEOUT = 10.0
# sbxd must log "listening" within this many seconds, and exit within this many after
# SIGTERM (tests/sbxd_daemon.py).
START_TIMEOUT = sbxd_daemon.START_TIMEOUT
STOP_TIMEOUT = sbxd_daemon.STOP_TIMEOUT
# The token of the daemons started with SBXD_TOKEN.
TOKEN = "secret"
PROCESS_SERVICE = "process.v1.ProcessService"


def sbxd_bin():
    """The sbxd under test: SBXD_BIN, else the Release build's."""
    p = os.environ.get("SBXD_BIN") or os.path.join(ROOT, "build", "sbxd")
    return os.path.abspath(p)


def sanitized():
    """Whether the sbxd under test is an ASan build: its allocator keeps freed memory in a
    quarantine (256 MiB by default), so its RSS grows with what it allocates and frees."""
    try:
        # (gcc links the runtime, libasan.so, which holds the name; the binary has its hooks)
        with open(sbxd_bin(), "rb") as f:
            return b"__asan_init" in f.read()
    except OSError:
        return False


def probe_bin():
    """sbxd-probe (tests/integration/probe.c), which looks at processes from inside a gVisor
    sandbox: SBXD_PROBE, else the one built beside sbxd."""
    p = os.environ.get("SBXD_PROBE") or os.path.join(os.path.dirname(sbxd_bin()), "tests",
                                                     "sbxd-probe")
    return os.path.abspath(p)


def reference_proto():
    """The reference copy of the process contract (shared/reference beside the checkout)."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import reference  # noqa: E402 (tests/reference.py: beside the checkout or its origin)
    return os.path.join(reference.reference_dir(), "sandboxd-process-v1.proto")


# ---------------------------------------------------------------------------------------
# gVisor: SBXD_WRAP, as tests/integration/harness.c reads it (the words of a command that
# runs sbxd inside something, split on spaces).


def wrap_words():
    return os.environ.get("SBXD_WRAP", "").split()


def _runsc_index():
    for i, w in enumerate(wrap_words()):
        if os.path.basename(w) == "runsc":
            return i
    return -1


def under_gvisor():
    return _runsc_index() >= 0


def gvisor_skip(test, why):
    """Skip test under gVisor, saying so the way the integration suite does (tests/gvisor/run
    lists these lines)."""
    if under_gvisor():
        print("gvisor: skipped %s: %s" % (test.id().split(".", 1)[-1], why), file=sys.stderr)
        raise unittest.SkipTest("under gVisor: " + why)


# ---------------------------------------------------------------------------------------
# The stubs, generated once per run into a temporary directory that is removed as soon as
# they are imported (nothing generated lands in the source tree).

_STUBS = None


def stubs():
    """A namespace: pb and pbg (process.v1's messages and stub), hpb and hpbg (health)."""
    global _STUBS
    if _STUBS is not None:
        return _STUBS
    protoc = shutil.which("protoc")
    plugin = shutil.which("grpc_python_plugin") or "/usr/bin/grpc_python_plugin"
    if not protoc or not os.access(plugin, os.X_OK):
        raise RuntimeError("protoc and grpc_python_plugin are needed (Debian: protobuf-compiler,"
                           " protobuf-compiler-grpc)")
    proto = os.path.join(ROOT, "proto")
    tmp = tempfile.mkdtemp(prefix="sbxd-grpc-stubs-")
    try:
        # process/v1/process.proto keeps its path (its module is process.v1.process_pb2). The
        # health contract's path, grpc/health/v1/, would make a Python package "grpc" that
        # shadows grpcio's own, so it is compiled from a copy under a flat name; its proto
        # package (grpc.health.v1, hence the service's path) is the same.
        flat = os.path.join(tmp, "flat")
        os.mkdir(flat)
        shutil.copy(os.path.join(proto, "grpc", "health", "v1", "health.proto"),
                    os.path.join(flat, "sbxd_health.proto"))
        out = os.path.join(tmp, "py")
        os.mkdir(out)
        common = ["--python_out=" + out, "--grpc_python_out=" + out,
                  "--plugin=protoc-gen-grpc_python=" + plugin]
        for cmd in ([protoc, "-I", proto] + common + ["process/v1/process.proto"],
                    [protoc, "-I", flat] + common + ["sbxd_health.proto"]):
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                raise RuntimeError("%s failed (status %d):\n%s" % (" ".join(cmd), r.returncode,
                                                                   r.stderr))
        sys.path.insert(0, out)
        try:
            from process.v1 import process_pb2, process_pb2_grpc
            import sbxd_health_pb2
            import sbxd_health_pb2_grpc
        finally:
            sys.path.remove(out)
        _STUBS = types.SimpleNamespace(pb=process_pb2, pbg=process_pb2_grpc,
                                       hpb=sbxd_health_pb2, hpbg=sbxd_health_pb2_grpc)
        return _STUBS
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------
# Processes on the host


def host_procs_with(marker):
    """Live (not zombie) processes of this machine whose command line holds marker."""
    m = marker.encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                cmd = f.read()
            if m not in cmd:
                continue
            with open("/proc/%s/stat" % name, "rb") as f:
                st = f.read()
            if st[st.rindex(b")") + 2:][:1] == b"Z":
                continue
        except (OSError, ValueError):
            continue
        found.append(int(name))
    return found


def _parent_of(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            st = f.read()
        return int(st[st.rindex(b")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def rss_kb_of(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


# ---------------------------------------------------------------------------------------
# The daemon

_marker_seq = [0]


def marker():
    """A number unique to this run and call, as the fraction of a sleep's seconds: `sleep
    30.<marker>` sleeps 30 s and can be found in /proc by its argument."""
    _marker_seq[0] += 1
    return "%d%05d" % (os.getpid(), _marker_seq[0])


class Daemon(sbxd_daemon.Daemon):
    """A real sbxd (tests/sbxd_daemon.py) of the binary under test, with its gRPC channel and
    stubs, an HTTP client of its REST port, and a look at what it runs. Under SBXD_WRAP it
    runs inside that command (runsc do), and what the tests look at inside is seen through
    sbxd-probe run in its sandbox."""

    def __init__(self, env=None, args=None, name="sbxd"):
        self.sb_root = None
        self.sb_id = None
        self._channel = None
        self.token = (env or {}).get("SBXD_TOKEN")
        # A marker in the daemon's environment that commands must never see.
        super().__init__(sbxd_bin(), env=env, args=args, name=name, prefix="sbxd-grpc-",
                         wrap=wrap_words(),
                         base_env={"SBXD_TEST_DAEMON_SECRET": "do-not-leak"})

    def _listening(self, ev):
        if not isinstance(ev.get("grpc_port"), int):
            raise RuntimeError("%s logged no grpc_port: %r" % (self.name, ev))
        if under_gvisor():
            self._sandbox_locate()

    def _closing(self):
        self.close_channel()

    # -- gRPC -----------------------------------------------------------------------

    def target(self):
        return "127.0.0.1:%d" % self.grpc_port

    def new_channel(self):
        """A channel of its own (the caller closes it)."""
        return grpc.insecure_channel(self.target(), options=[
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ("grpc.enable_retries", 0),
        ])

    @property
    def channel(self):
        """The daemon's shared channel."""
        if self._channel is None:
            self._channel = self.new_channel()
        return self._channel

    def process(self, channel=None):
        return stubs().pbg.ProcessServiceStub(channel or self.channel)

    def health(self, channel=None):
        return stubs().hpbg.HealthStub(channel or self.channel)

    def metadata(self):
        return [("authorization", "Bearer " + self.token)] if self.token else None

    def check(self, service="", timeout=CALL_TIMEOUT):
        """Health Check: the status (an int of HealthCheckResponse.ServingStatus)."""
        r = self.health().Check(stubs().hpb.HealthCheckRequest(service=service),
                                timeout=timeout, metadata=self.metadata())
        return r.status

    def close_channel(self):
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    # -- REST -----------------------------------------------------------------------

    def request(self, method, target, body=None, timeout=CALL_TIMEOUT):
        """One HTTP request to the REST front: (status, parsed JSON or raw bytes)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            hdrs = {}
            if body is not None:
                hdrs["Content-Type"] = "application/json"
            if self.token:
                hdrs["Authorization"] = "Bearer " + self.token
            conn.request(method, target, body=body, headers=hdrs)
            r = conn.getresponse()
            data = r.read()
            try:
                return r.status, json.loads(data.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                return r.status, data
        finally:
            conn.close()

    # -- what runs inside -------------------------------------------------------------

    def _sandbox_locate(self):
        """Under gVisor: the `runsc boot` process below our runsc, its state root and
        container id (as tests/integration/harness.c's sandbox_locate)."""
        for _ in range(200):
            for name in os.listdir("/proc"):
                if not name.isdigit():
                    continue
                cmd = _cmdline(int(name))
                if " boot " not in cmd or " --root=" not in cmd:
                    continue
                up = int(name)
                for _depth in range(4):
                    if up <= 1 or up == self.proc.pid:
                        break
                    up = _parent_of(up)
                if up != self.proc.pid:
                    continue
                self.sb_root = cmd.split(" --root=", 1)[1].split(" ", 1)[0]
                self.sb_id = cmd.split()[-1]
                return
            time.sleep(0.01)
        raise RuntimeError("%s runs under gVisor, but its sandbox (runsc boot) was not found" %
                           self.name)

    def sandbox_exec(self, argv, timeout=30):
        """Run argv inside the daemon's sandbox with runsc exec: (status, stdout)."""
        words = wrap_words()
        r = _runsc_index()
        a = [words[r]]
        for w in words[r + 1:]:
            if not w.startswith("-"):
                break
            if not (w.startswith("--root") or w.startswith("-root")):
                a.append(w)
        a += ["--root=" + self.sb_root, "exec", self.sb_id] + list(argv)
        p = subprocess.run(a, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        return p.returncode, p.stdout.decode("utf-8", "replace")

    def have_probe(self):
        return not under_gvisor() or os.access(probe_bin(), os.X_OK)

    def procs_with(self, mark):
        """How many live processes of the daemon's world have mark in their command line."""
        if not under_gvisor():
            return len(host_procs_with(mark))
        st, out = self.sandbox_exec([probe_bin(), "procs", mark])
        if st != 0:
            raise RuntimeError("sbxd-probe procs failed in the sandbox (status %d)" % st)
        return len([ln for ln in out.splitlines() if ln.strip()])

    def wait_procs(self, mark, want, within):
        """Wait up to within seconds for procs_with(mark) to satisfy want(n); the last n."""
        end = time.monotonic() + within
        n = self.procs_with(mark)
        while not want(n) and time.monotonic() < end:
            time.sleep(0.05)
            n = self.procs_with(mark)
        return n

    def rss_kb(self):
        if not under_gvisor():
            return rss_kb_of(self.proc.pid)
        st, out = self.sandbox_exec([probe_bin(), "daemon", "1"])
        for line in out.splitlines():
            if line.startswith("rss_kb "):
                return int(line.split()[1])
        raise RuntimeError("sbxd-probe daemon 1 said nothing of rss_kb (status %d): %r" %
                           (st, out))

# The daemon shared by the test classes that need nothing special: started by ./run (or, when
# the module is run alone with unittest, by the first class that asks).
MAIN = None


def main_daemon():
    global MAIN
    if MAIN is None:
        MAIN = Daemon(name="sbxd(main)")
    return MAIN


# ---------------------------------------------------------------------------------------
# HTTP/2 by hand: frames for the tests of what no gRPC library sends (garbage, a lying
# length prefix, an oversize message, a connection dropped without a RST_STREAM).

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4


def frame(ftype, flags, stream, payload):
    """One frame: the 9-byte header (24-bit length, type, flags, 31-bit stream id) and
    payload."""
    return struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", ftype, flags,
                                                             stream & 0x7FFFFFFF) + payload


def _hpack_int(value, prefix_bits, first):
    """An HPACK integer (RFC 7541 5.1) with prefix_bits bits in the first byte, whose other
    bits are first."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_literal(headers):
    """A header block of literal fields without indexing, new names, no Huffman (0x00
    prefix, 7-bit lengths): the simplest HPACK there is."""
    out = bytearray()
    for name, value in headers:
        n = name.encode() if isinstance(name, str) else name
        v = value.encode() if isinstance(value, str) else value
        out += b"\x00" + _hpack_int(len(n), 7, 0) + n + _hpack_int(len(v), 7, 0) + v
    return bytes(out)


def grpc_request_headers(method, token=None, extra=()):
    h = [(":method", "POST"), (":scheme", "http"), (":path", method),
         (":authority", "127.0.0.1"), ("content-type", "application/grpc"), ("te", "trailers")]
    if token:
        h.append(("authorization", "Bearer " + token))
    return h + list(extra)


def grpc_message(payload, compressed=False, claimed=None):
    """A gRPC length-prefixed message: the flag byte, a 32-bit length (claimed when given:
    a length prefix that lies) and payload."""
    n = len(payload) if claimed is None else claimed
    return struct.pack(">BI", 1 if compressed else 0, n) + payload


class RawH2:
    """An HTTP/2 client connection made of frames built by hand. Sends what it is told;
    reads frames, answering SETTINGS and PING as any peer must, and decodes the server's
    header blocks (hpack, from python3-h2's dependencies)."""

    def __init__(self, port, timeout=CALL_TIMEOUT):
        import hpack
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        self.closed = False
        self.decoder = hpack.Decoder()
        self.decoder.max_allowed_table_size = 65536
        self.frames = []  # (type, flags, stream, payload) of every frame read
        self.headers = {}  # stream -> list of header lists (response headers, trailers)
        self.data = {}  # stream -> bytes of DATA
        self.resets = {}  # stream -> error code of its RST_STREAM
        self.goaway = None  # (last stream, error code)
        self.prefaced = False  # handshake() sent the client preface
        # Flow control of what we send (RFC 9113 6.9): the server's SETTINGS and
        # WINDOW_UPDATEs, so that a test never overruns a window (which would be our error).
        self.max_frame = 16384
        self.initial_window = 65535
        self.conn_window = 65535
        self.stream_windows = {}

    def send(self, raw):
        self.sock.sendall(raw)

    def _reply(self, raw):
        """What a peer must answer (ACKs, window updates): never an error of the test when
        the server has gone. Nothing before our preface (a client that has not sent it must
        not send anything else)."""
        if not self.prefaced:
            return
        try:
            self.sock.sendall(raw)
        except OSError:
            self.closed = True

    def handshake(self, settings=b""):
        """The client preface and our SETTINGS (no ACK awaited)."""
        self.send(PREFACE + frame(SETTINGS, 0, 0, settings))
        self.prefaced = True

    def request(self, stream, method, body=None, end=True, token=None, extra=()):
        """HEADERS (END_HEADERS) of a gRPC call, then DATA with body (END_STREAM if end),
        within the windows."""
        block = hpack_literal(grpc_request_headers(method, token, extra))
        self.send(frame(HEADERS, END_HEADERS | (END_STREAM if body is None and end else 0),
                        stream, block))
        if body is not None:
            self.send_data(stream, body, end)

    def messages(self, stream):
        """The complete gRPC messages the stream has carried so far (payloads)."""
        out, d = [], self.data.get(stream, b"")
        while len(d) >= 5:
            n = struct.unpack(">I", d[1:5])[0]
            if len(d) < 5 + n:
                break
            out.append(d[5:5 + n])
            d = d[5 + n:]
        return out

    def _read_more(self, timeout):
        if self.closed:
            return False
        r, _, _ = select.select([self.sock], [], [], timeout)
        if not r:
            return False
        try:
            d = self.sock.recv(65536)
        except (ConnectionResetError, socket.timeout):
            d = b""
        if not d:
            self.closed = True
            return False
        self.buf += d
        return True

    def _parse(self):
        while len(self.buf) >= 9:
            length = struct.unpack(">I", b"\0" + self.buf[:3])[0]
            if len(self.buf) < 9 + length:
                return
            ftype, flags, stream = struct.unpack(">BBI", self.buf[3:9])
            stream &= 0x7FFFFFFF
            payload = self.buf[9:9 + length]
            self.buf = self.buf[9 + length:]
            self.frames.append((ftype, flags, stream, payload))
            if ftype == SETTINGS and not flags & ACK:
                for i in range(0, len(payload) - 5, 6):
                    ident, value = struct.unpack(">HI", payload[i:i + 6])
                    if ident == 4:  # SETTINGS_INITIAL_WINDOW_SIZE
                        for sid in self.stream_windows:
                            self.stream_windows[sid] += value - self.initial_window
                        self.initial_window = value
                    elif ident == 5:  # SETTINGS_MAX_FRAME_SIZE
                        self.max_frame = value
                self._reply(frame(SETTINGS, ACK, 0, b""))
            elif ftype == WINDOW_UPDATE and len(payload) >= 4:
                inc = struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF
                if stream == 0:
                    self.conn_window += inc
                else:
                    self.stream_windows[stream] = self.stream_window(stream) + inc
            elif ftype == PING and not flags & ACK:
                self._reply(frame(PING, ACK, 0, payload))
            elif ftype == HEADERS:
                block = payload
                if flags & 0x8:  # PADDED
                    block = block[1:len(block) - block[0]]
                if flags & 0x20:  # PRIORITY
                    block = block[5:]
                hdrs = [(k.decode() if isinstance(k, bytes) else k,
                         v.decode() if isinstance(v, bytes) else v)
                        for k, v in self.decoder.decode(block, raw=True)]
                self.headers.setdefault(stream, []).append(hdrs)
            elif ftype == DATA:
                body = payload
                if flags & 0x8:
                    body = body[1:len(body) - body[0]]
                self.data[stream] = self.data.get(stream, b"") + body
                if body:  # give the window back, as a reading client does
                    self._reply(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", len(payload))) +
                                frame(WINDOW_UPDATE, 0, stream, struct.pack(">I", len(payload))))
            elif ftype == RST_STREAM:
                self.resets[stream] = struct.unpack(">I", payload[:4])[0]
            elif ftype == GOAWAY:
                self.goaway = struct.unpack(">II", payload[:8])

    def stream_window(self, stream):
        return self.stream_windows.get(stream, self.initial_window)

    def send_data(self, stream, data, end=False, timeout=CALL_TIMEOUT):
        """DATA frames of data within the server's windows, waiting (reading) for room.
        Stops early when the stream ended (answered or reset), the connection closed or
        timeout passed; returns how many bytes of data went out."""
        sent = 0
        deadline = time.monotonic() + timeout
        while sent < len(data) or (end and sent == len(data) == 0):
            if self.closed or self.stream_done(stream) or time.monotonic() > deadline:
                break
            room = min(self.conn_window, self.stream_window(stream), self.max_frame)
            if room <= 0 and len(data) > 0:
                self.pump(lambda s: s.closed or s.stream_done(stream) or
                          min(s.conn_window, s.stream_window(stream)) > 0,
                          max(0.0, deadline - time.monotonic()))
                continue
            chunk = data[sent:sent + room]
            last = end and sent + len(chunk) == len(data)
            self.send(frame(DATA, END_STREAM if last else 0, stream, chunk))
            self.conn_window -= len(chunk)
            self.stream_windows[stream] = self.stream_window(stream) - len(chunk)
            sent += len(chunk)
            if last or not data:
                break
        return sent

    def pump(self, until, timeout=CALL_TIMEOUT):
        """Read frames until until(self) holds, the connection closes or timeout passes.
        Returns until(self)."""
        end = time.monotonic() + timeout
        while not until(self):
            left = end - time.monotonic()
            if left <= 0:
                break
            try:
                more = self._read_more(min(left, 0.2))
            except OSError:
                self.closed = True
                more = False
            if more:
                self._parse()
            elif self.closed:
                break
        return until(self)

    def stream_done(self, stream):
        """The stream has ended: trailers (a header block with grpc-status) or a reset."""
        return stream in self.resets or self.status(stream) is not None

    def status(self, stream):
        """The grpc-status of the stream's last header block, or None."""
        for hdrs in reversed(self.headers.get(stream, [])):
            for k, v in hdrs:
                if k == "grpc-status":
                    return int(v)
        return None

    def header(self, stream, name):
        for hdrs in self.headers.get(stream, []):
            for k, v in hdrs:
                if k == name:
                    return v
        return None

    def wait_closed(self, timeout=CALL_TIMEOUT):
        """Read (answering what needs an answer) until the server closes the connection."""
        return self.pump(lambda s: s.closed, timeout)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
