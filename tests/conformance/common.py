"""Helpers of the conformance tier: a real sbxd per test class or per run, an HTTP client
with a timeout on every call, multipart bodies as the agent-sandbox SDK (requests) builds
them, and validation of /v1 bodies against the OpenAPI contract.

Standard library plus Debian's python3-yaml and python3-jsonschema only.
"""

import datetime
import http.client
import json
import os
import re
import sys
import time
import unittest
import urllib.parse

import jsonschema
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import sbxd_daemon  # noqa: E402 (tests/sbxd_daemon.py)

# Every HTTP call of the tier gives up after this many seconds (a call that expects to wait
# for a command passes its own).
HTTP_TIMEOUT = 10.0
# After SIGTERM sbxd must have exited within this many seconds.
STOP_TIMEOUT = sbxd_daemon.STOP_TIMEOUT


def sbxd_bin():
    """The sbxd under test: SBXD_BIN, else the Release build's."""
    p = os.environ.get("SBXD_BIN") or os.path.join(ROOT, "build", "sbxd")
    return os.path.abspath(p)


def spec_path():
    """The /v1 OpenAPI contract (the steering repository's reference copy)."""
    p = os.environ.get("SBXD_OPENAPI")
    if p:
        return p
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import reference  # noqa: E402 (tests/reference.py: beside the checkout or its origin)
    return os.path.join(reference.reference_dir(), "sandboxd-filesystem-v1.openapi.yaml")


# ---------------------------------------------------------------------------------------
# HTTP


class Response:
    def __init__(self, status, reason, headers, body, elapsed):
        self.status = status
        self.reason = reason
        self.headers = headers  # http.client.HTTPMessage (case-insensitive get)
        self.body = body  # bytes
        self.elapsed = elapsed  # seconds

    def header(self, name):
        return self.headers.get(name)

    def content_type(self):
        """The media type without parameters, lower case ("" when absent)."""
        v = self.headers.get("Content-Type") or ""
        return v.split(";", 1)[0].strip().lower()

    def json(self):
        try:
            return json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise AssertionError("response body is not JSON (%s): %r" % (e, self.body[:500]))

    def __repr__(self):
        return "<HTTP %d %s, %s, %r>" % (self.status, self.reason, self.content_type(),
                                         self.body[:300])


def http_request(port, method, target, body=None, headers=None, timeout=HTTP_TIMEOUT,
                 host="127.0.0.1"):
    """One request on a fresh connection; target is sent exactly as given (no
    normalisation of "." or "%2F"). Raises on a transport error or timeout."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    t0 = time.monotonic()
    try:
        hdrs = dict(headers or {})
        # A Host of the caller's (a Service's name, a pod IP: as the router sends it) replaces
        # http.client's own.
        conn.putrequest(method, target, skip_accept_encoding=True,
                        skip_host=any(k.lower() == "host" for k in hdrs))
        if body is not None and not any(k.lower() == "content-length" for k in hdrs):
            hdrs["Content-Length"] = str(len(body))
        for k, v in hdrs.items():
            conn.putheader(k, v)
        conn.endheaders(body)
        r = conn.getresponse()
        data = r.read()
        return Response(r.status, r.reason, r.headers, data, time.monotonic() - t0)
    finally:
        conn.close()


def quote(path):
    """A path as the agent-sandbox SDK puts it into a URL: every '/' as %2F."""
    return urllib.parse.quote(path, safe="")


def multipart(fields):
    """A multipart/form-data body as requests (urllib3) builds it for files={...}.

    fields: list of (name, filename, data[, content_type]); filename None for a plain
    field. Returns (body, content_type_header)."""
    boundary = os.urandom(16).hex()
    out = []
    for f in fields:
        name, filename, data = f[0], f[1], f[2]
        ctype = f[3] if len(f) > 3 else None
        if isinstance(data, str):
            data = data.encode("utf-8")
        disp = 'form-data; name="%s"' % name
        if filename is not None:
            disp += '; filename="%s"' % filename
        out.append(b"--" + boundary.encode() + b"\r\n")
        out.append(("Content-Disposition: %s\r\n" % disp).encode("utf-8"))
        if ctype:
            out.append(("Content-Type: %s\r\n" % ctype).encode())
        out.append(b"\r\n")
        out.append(data)
        out.append(b"\r\n")
    out.append(b"--" + boundary.encode() + b"--\r\n")
    return b"".join(out), "multipart/form-data; boundary=" + boundary


def race_reader_writer(write, read, contents, rounds=16, within=60.0):
    """Replace a file rounds times (write(data), cycling through contents) while read()
    fetches it over and over; returns (reads, [unexpected bodies]). Every read must be
    one of contents whole: what an atomic replacement guarantees."""
    import threading
    state = {"error": None, "done": False}

    def writer():
        try:
            for i in range(rounds):
                write(contents[i % len(contents)])
        except Exception as e:
            state["error"] = e
        finally:
            state["done"] = True

    t = threading.Thread(target=writer, daemon=True)
    deadline = time.monotonic() + within
    t.start()
    reads, bad = 0, []
    while not state["done"] and time.monotonic() < deadline:
        body = read()
        reads += 1
        if body not in contents:
            bad.append(body[:64] + (b"..." if len(body) > 64 else b"") +
                       b" (%d bytes)" % len(body))
    t.join(max(0.0, deadline - time.monotonic()))
    if t.is_alive():
        raise AssertionError("the writer did not finish within %.0f s" % within)
    if state["error"]:
        raise state["error"]
    return reads, bad


# ---------------------------------------------------------------------------------------
# The daemon


class Daemon(sbxd_daemon.Daemon):
    """A real sbxd (tests/sbxd_daemon.py) of the binary under test, with an HTTP client of
    its REST port and a gRPC channel to its ProcessService (opened on first use)."""

    def __init__(self, env=None, args=None, workspace_flag=True, name="sbxd"):
        self._channel = None
        super().__init__(sbxd_bin(), env=env, args=args, workspace_flag=workspace_flag,
                         name=name, prefix="sbxd-conf-")

    def request(self, method, target, body=None, headers=None, timeout=HTTP_TIMEOUT):
        return http_request(self.port, method, target, body=body, headers=headers,
                            timeout=timeout)

    def process(self):
        """A ProcessService stub on the daemon's gRPC port, plaintext, as the SDK dials it
        (grpc.insecure_channel with grpcio's defaults: 4 MiB receive limit)."""
        import grpc
        if self._channel is None:
            self._channel = grpc.insecure_channel("127.0.0.1:%d" % self.grpc_port)
        return grpc_stubs().pbg.ProcessServiceStub(self._channel)

    def _closing(self):
        ch, self._channel = self._channel, None
        if ch is not None:
            ch.close()


_GRPC_STUBS = None


def grpc_stubs():
    """process.v1's messages (pb) and stub (pbg), generated at run time from proto/ by the
    grpc tier's helper (tests/grpc/common.py, loaded under a name of its own)."""
    global _GRPC_STUBS
    if _GRPC_STUBS is None:
        import importlib.util
        spec = importlib.util.spec_from_file_location(
            "sbxd_grpc_tier_common", os.path.join(ROOT, "tests", "grpc", "common.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _GRPC_STUBS = mod.stubs()
    return _GRPC_STUBS


class DaemonTestCase(unittest.TestCase):
    """A test class with a daemon of its own (DAEMON_ENV, DAEMON_ARGS, WORKSPACE_FLAG),
    started in setUpClass and stopped in tearDownClass, which fails unless it exits 0."""

    DAEMON_ENV = None
    DAEMON_ARGS = None
    WORKSPACE_FLAG = True
    daemon = None

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(env=cls.DAEMON_ENV, args=cls.DAEMON_ARGS,
                            workspace_flag=cls.WORKSPACE_FLAG, name="sbxd(%s)" % cls.__name__)

    @classmethod
    def tearDownClass(cls):
        d, cls.daemon = cls.daemon, None
        if d is not None:
            problems = d.stop_checked()
            if problems:
                raise AssertionError("\n".join(problems))


# The daemon shared by the test classes that need nothing special: started by ./run (or,
# when a module is run alone with unittest, by the first class that asks).
MAIN = None


def main_daemon():
    global MAIN
    if MAIN is None:
        MAIN = Daemon(name="sbxd(main)")
    return MAIN


class SharedDaemonCase(unittest.TestCase):
    """A test class on the shared daemon, unless a DaemonTestCase before it in the bases
    starts one of its own: d is the daemon, ws its workspace."""

    daemon = None

    @classmethod
    def setUpClass(cls):
        if cls.daemon is None:
            cls.daemon = main_daemon()

    @property
    def d(self):
        return self.daemon

    @property
    def ws(self):
        return self.d.ws


# ---------------------------------------------------------------------------------------
# The /v1 contract

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def is_rfc3339(s):
    """RFC 3339 date-time (section 5.6), checked for real: the shape by regex, the values
    (month 13, Feb 30, hour 25, ...) by datetime."""
    if not isinstance(s, str) or not _RFC3339.match(s):
        return False
    t = s.replace("z", "Z").replace("t", "T")
    if t.endswith("Z"):
        t = t[:-1] + "+00:00"
    # RFC 3339 allows a leap second (:60); datetime does not.
    t = re.sub(r"(T\d{2}:\d{2}):60", r"\1:59", t)
    try:
        dt = datetime.datetime.fromisoformat(normalise_fraction(t))
    except ValueError:
        return False
    return dt.tzinfo is not None


def normalise_fraction(t):
    """An ISO 8601 date-time with its second fraction padded or cut to 6 digits:
    datetime.fromisoformat before Python 3.11 takes only 3 or 6."""
    m = re.match(r"^(.*T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(.*)$", t)
    if not m:
        return t
    return m.group(1) + "." + ((m.group(2) or "") + "000000")[:6] + m.group(3)


FORMAT_CHECKER = jsonschema.FormatChecker(formats=())


@FORMAT_CHECKER.checks("date-time")
def _check_date_time(instance):
    if not isinstance(instance, str):
        return True  # format applies to strings only
    return is_rfc3339(instance)


def _describe(errs):
    return ["%s at %s" % (e.message, "/".join(str(p) for p in e.absolute_path) or "(root)")
            for e in errs]


class Contract:
    """sandboxd-filesystem-v1.openapi.yaml: component schemas with their $refs inlined,
    and the response schema each operation declares for a status."""

    def __init__(self, path=None):
        with open(path or spec_path(), "r", encoding="utf-8") as f:
            self.spec = yaml.safe_load(f)
        self.schemas = self.spec["components"]["schemas"]
        self._validators = {}

    def _deref(self, ref):
        if not ref.startswith("#/"):
            raise ValueError("only local $refs are supported: %s" % ref)
        node = self.spec
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def inline(self, node, seen=()):
        """node with every $ref replaced by what it names (recursively)."""
        if isinstance(node, dict):
            if "$ref" in node:
                ref = node["$ref"]
                if ref in seen:
                    raise ValueError("recursive $ref %s" % ref)
                return self.inline(self._deref(ref), seen + (ref,))
            return {k: self.inline(v, seen) for k, v in node.items()}
        if isinstance(node, list):
            return [self.inline(v, seen) for v in node]
        return node

    def validator(self, component):
        v = self._validators.get(component)
        if v is None:
            schema = self.inline(self.schemas[component])
            # OpenAPI 3.0 schema objects are close to draft 4 (whose integer is no float).
            jsonschema.Draft4Validator.check_schema(schema)
            v = jsonschema.Draft4Validator(schema, format_checker=FORMAT_CHECKER)
            self._validators[component] = v
        return v

    def errors(self, component, instance):
        """Why instance does not match the component schema ([] when it does)."""
        return _describe(self.validator(component).iter_errors(instance))

    def errors_for_schema(self, schema, instance):
        """Likewise for an already inlined schema (one an operation declares)."""
        jsonschema.Draft4Validator.check_schema(schema)
        v = jsonschema.Draft4Validator(schema, format_checker=FORMAT_CHECKER)
        return _describe(v.iter_errors(instance))

    def operation_responses(self, template, method):
        item = self.spec["paths"][template]
        op = item[method.lower()]
        return op.get("responses", {})

    def response_media(self, template, method, status):
        """{media type: inlined schema or None} the spec declares for that status of that
        operation, or None when the status is not declared. HEAD is GET's."""
        m = "get" if method.upper() == "HEAD" else method.lower()
        responses = self.operation_responses(template, m)
        resp = responses.get(str(status))
        if resp is None:
            return None
        resp = self.inline(resp)
        return {mt: (c or {}).get("schema") for mt, c in (resp.get("content") or {}).items()}


_contract = None


def contract():
    global _contract
    if _contract is None:
        _contract = Contract()
    return _contract
