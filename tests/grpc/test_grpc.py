"""The gRPC front: agent-sandbox's sandboxd process.v1.ProcessService (the contract in
proto/process/v1/process.proto) and grpc.health.v1.Health, against a real sbxd, through
Debian's grpcio with stubs generated at run time, and through raw HTTP/2 frames for what no
gRPC library sends. After every test the daemon must still answer a health Check."""

import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc

import common
from common import CALL_TIMEOUT, PROCESS_SERVICE, Daemon, RawH2, gvisor_skip, marker

S = common.stubs()
pb, hpb = S.pb, S.hpb
SERVING = hpb.HealthCheckResponse.SERVING
NOT_SERVING = hpb.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = hpb.HealthCheckResponse.SERVICE_UNKNOWN
MiB = 1024 * 1024

EXECUTE = "/process.v1.ProcessService/Execute"
START = "/process.v1.ProcessService/Start"
CHECK = "/grpc.health.v1.Health/Check"
WATCH = "/grpc.health.v1.Health/Watch"


def sh(cmd):
    return ["/bin/sh", "-c", cmd]


def config(command, env=None, cwd=None):
    c = pb.ProcessConfig(command=command, env_vars=env or {})
    if cwd is not None:
        c.cwd = cwd
    return c


def sleeper(m, secs=30):
    """A shell whose sleep carries marker m (the `; :` keeps the shell from exec'ing it, so
    the tree is two processes)."""
    return sh("sleep %d.%s; :" % (secs, m))


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def pb_field(num, data):
    """A length-delimited protobuf field by hand (bytes that no Python message would let
    through, e.g. a string that is not UTF-8)."""
    return varint(num << 3 | 2) + varint(len(data)) + data


class GrpcCase(unittest.TestCase):
    """A test class on the shared daemon, or on one of its own when DAEMON_ENV or DAEMON_ARGS
    is set (started in setUpClass, stopped in tearDownClass, which fails unless it exits 0).
    After every test the daemon must answer a health Check with SERVING."""

    DAEMON_ENV = None
    DAEMON_ARGS = None
    daemon = None
    own = False

    @classmethod
    def setUpClass(cls):
        cls.own = bool(cls.DAEMON_ENV or cls.DAEMON_ARGS)
        if cls.own:
            cls.daemon = Daemon(env=cls.DAEMON_ENV, args=cls.DAEMON_ARGS,
                                name="sbxd(%s)" % cls.__name__)
        else:
            cls.daemon = common.main_daemon()

    @classmethod
    def tearDownClass(cls):
        d, cls.daemon = cls.daemon, None
        if cls.own and d is not None:
            problems = d.stop_checked()
            if problems:
                raise AssertionError("\n".join(problems))

    def tearDown(self):
        # On a connection of its own: whatever the test did to the shared one, a new client
        # must be served.
        if self.d is None or not self.d.alive():
            return
        ch = self.d.new_channel()
        try:
            status = self.d.health(ch).Check(hpb.HealthCheckRequest(service=""), timeout=5,
                                             metadata=self.d.metadata()).status
        except grpc.RpcError as e:
            self.fail("after the test sbxd does not answer a health Check: %s %s" %
                      (e.code(), e.details()))
        finally:
            ch.close()
        self.assertEqual(status, SERVING, "after the test sbxd's health is not SERVING")

    @property
    def d(self):
        return self.daemon

    # -- calls ----------------------------------------------------------------------

    def stub(self, channel=None):
        return self.d.process(channel)

    def execute(self, command, env=None, cwd=None, timeout=CALL_TIMEOUT, channel=None):
        """Execute: (ExecuteResponse, trailers as a dict)."""
        resp, call = self.stub(channel).Execute.with_call(
            pb.ExecuteRequest(config=config(command, env, cwd)), timeout=timeout,
            metadata=self.d.metadata())
        return resp, dict(call.trailing_metadata() or ())

    def assert_code(self, code, fn, *args, **kwargs):
        """fn(*args) fails with the gRPC status code; returns the RpcError."""
        with self.assertRaises(grpc.RpcError) as cm:
            r = fn(*args, **kwargs)
            if hasattr(r, "__next__"):  # a stream: its error comes with its first message
                for _ in r:
                    pass
        self.assertEqual(cm.exception.code(), code,
                         "expected %s, got %s: %s" % (code, cm.exception.code(),
                                                      cm.exception.details()))
        return cm.exception

    def execute_code(self, code, command, env=None, cwd=None, timeout=CALL_TIMEOUT):
        return self.assert_code(code, self.stub().Execute,
                                pb.ExecuteRequest(config=config(command, env, cwd)),
                                timeout=timeout, metadata=self.d.metadata())

    def start(self, command, pty=None, env=None, cwd=None, timeout=60.0, channel=None):
        """Start: (the call, its process_id), the InitEvent asserted first."""
        req = pb.StartRequest(config=config(command, env, cwd))
        if pty is not None:
            req.pty.cols, req.pty.rows = pty
        call = self.stub(channel).Start(req, timeout=timeout, metadata=self.d.metadata())
        first = next(call)
        self.assertEqual(first.WhichOneof("event"), "init", "the first event is not init: %r" %
                         first)
        pid = first.init.process_id
        self.assertGreater(pid, 0)
        self.assertLess(pid, 2 ** 31)
        return call, pid

    def start_events(self, command, cwd=None):
        """A Start that is expected to fail: (its events, its RpcError)."""
        call = self.stub().Start(pb.StartRequest(config=config(command, cwd=cwd)),
                                 timeout=CALL_TIMEOUT, metadata=self.d.metadata())
        events = []
        with self.assertRaises(grpc.RpcError) as cm:
            for ev in call:
                events.append(ev)
        return events, cm.exception

    def collect(self, call):
        """The rest of a Start stream: (stdout, stderr, exit_code); ExitEvent must be last
        and the call must end OK."""
        out, err, code = [], [], None
        for ev in call:
            kind = ev.WhichOneof("event")
            self.assertIsNone(code, "an event after the ExitEvent: %r" % ev)
            if kind == "stdout":
                out.append(ev.stdout)
            elif kind == "stderr":
                err.append(ev.stderr)
            elif kind == "exit":
                code = ev.exit.exit_code
            else:
                self.fail("unexpected event %r" % ev)
        self.assertEqual(call.code(), grpc.StatusCode.OK, call.details())
        self.assertIsNotNone(code, "the stream ended without an ExitEvent")
        return b"".join(out), b"".join(err), code

    def read_until(self, call, what, within=10.0):
        """Read stdout events of a Start stream until what (bytes) has appeared; returns
        everything read."""
        got = b""
        end = time.monotonic() + within
        while what not in got:
            self.assertLess(time.monotonic(), end, "%r did not appear; got %r" % (what, got))
            ev = next(call)
            if ev.WhichOneof("event") in ("stdout", "stderr"):
                got += getattr(ev, ev.WhichOneof("event"))
            elif ev.WhichOneof("event") == "exit":
                self.fail("the process exited (%d) before %r appeared; got %r" %
                          (ev.exit.exit_code, what, got))
        return got

    def write_stdin(self, pid, data=None, eof=False):
        req = pb.WriteStdinRequest(process_id=pid)
        if eof:
            req.eof.SetInParent()
        else:
            req.input = data
        return self.stub().WriteStdin(req, timeout=CALL_TIMEOUT, metadata=self.d.metadata())

    def signal(self, pid, sig):
        return self.stub().SendSignal(pb.SendSignalRequest(process_id=pid, signal=sig),
                                      timeout=CALL_TIMEOUT, metadata=self.d.metadata())

    def resize(self, pid, cols, rows):
        return self.stub().ResizeTTY(pb.ResizeTTYRequest(process_id=pid, cols=cols, rows=rows),
                                     timeout=CALL_TIMEOUT, metadata=self.d.metadata())

    # -- looking from outside ---------------------------------------------------------

    def need_probe(self):
        if not self.d.have_probe():
            gvisor_skip(self, "no sbxd-probe at %s to look inside the sandbox" %
                        common.probe_bin())

    def wait_running(self, m, within=10.0):
        n = self.d.wait_procs(m, lambda k: k > 0, within)
        self.assertGreater(n, 0, "no process with %s in its command line came up" % m)

    def assert_gone(self, m, within=3.0, what="the command's processes"):
        n = self.d.wait_procs(m, lambda k: k == 0, within)
        self.assertEqual(n, 0, "%s (%d with %s in the command line) are still there %.0f s "
                         "later" % (what, n, m, within))

    def rest_process(self, grpc_pid):
        """The REST object of GET /processes whose grpc_process_id is grpc_pid, or None."""
        status, body = self.d.request("GET", "/processes")
        self.assertEqual(status, 200, body)
        procs = body["processes"] if isinstance(body, dict) else body
        self.assertIsInstance(procs, list, body)
        for p in procs:
            if p.get("grpc_process_id") == grpc_pid:
                return p
        return None


# ---------------------------------------------------------------------------------------


class ContractTest(unittest.TestCase):
    def test_vendored_proto_is_the_reference(self):
        """proto/process/v1/process.proto is byte for byte the reference
        sandboxd-process-v1.proto (when that copy is there)."""
        ref = common.reference_proto()
        if not os.path.isfile(ref):
            self.skipTest("no reference copy at %s" % ref)
        with open(ref, "rb") as f:
            want = f.read()
        with open(os.path.join(common.ROOT, "proto", "process", "v1", "process.proto"),
                  "rb") as f:
            got = f.read()
        self.assertEqual(got, want, "proto/process/v1/process.proto differs from %s" % ref)

    def test_stubs_have_every_method(self):
        """The generated stubs carry the five methods of the contract and Health's two."""
        svc = pb.DESCRIPTOR.services_by_name["ProcessService"]
        self.assertEqual(sorted(m.name for m in svc.methods),
                         ["Execute", "ResizeTTY", "SendSignal", "Start", "WriteStdin"])
        self.assertEqual(sorted(m.name for m in hpb.DESCRIPTOR.services_by_name["Health"]
                                .methods), ["Check", "Watch"])


class ExecuteTest(GrpcCase):
    def test_sdk_call(self):
        """Exactly the call of agent-sandbox's SDK (command_executor.py, _run_sandboxd):
        /bin/sh -c, no metadata, an int timeout."""
        stub = S.pbg.ProcessServiceStub(self.d.channel)
        request = pb.ExecuteRequest(
            config=pb.ProcessConfig(command=["/bin/sh", "-c", "echo hello; echo warn >&2"]))
        response = stub.Execute(request, timeout=60)
        self.assertEqual(response.stdout.decode("utf-8", errors="replace"), "hello\n")
        self.assertEqual(response.stderr.decode("utf-8", errors="replace"), "warn\n")
        self.assertEqual(response.exit_code, 0)

    def test_metrics_and_audit_say_grpc(self):
        """A gRPC command is counted with front="grpc" in /metrics and its audit line says
        "front":"grpc" and the client's address, as REST's say theirs."""
        series = 'sbxd_executions_total{front="grpc",mode="sync",status="exited"}'

        def count():
            v = self.series(series)
            self.assertIsNotNone(v, "no %s in /metrics" % series)
            return v

        before = count()
        mark = marker()
        r, tr = self.execute(sh("echo audit-%s" % mark))
        self.assertEqual(r.exit_code, 0)
        self.assertEqual(count(), before + 1)
        lines = [ev for ev in self.d.log_events()
                 if ev.get("event") == "exec" and mark in ev.get("command", "")]
        self.assertEqual(len(lines), 1, lines)
        self.assertEqual(lines[0].get("front"), "grpc", lines[0])
        self.assertEqual(lines[0].get("id"), tr.get("sbxd-id"), (lines[0], tr))
        self.assertTrue(lines[0].get("client", "").startswith("127.0.0.1:"), lines[0])

    def series(self, series):
        """The value of one /metrics series (name{labels}), None when absent."""
        st, body = self.d.request("GET", "/metrics")
        self.assertEqual(st, 200)
        text = body.decode() if isinstance(body, bytes) else str(body)
        for line in text.splitlines():
            if line.startswith(series + " "):
                return float(line.split()[1])
        return None

    def audited_once(self, event, mark, series, before):
        """The one audit line of the command with mark (event "exec" or "process"), once it
        and its count in /metrics are there: exactly one of each."""
        end = time.monotonic() + 5.0
        while True:
            lines = [ev for ev in self.d.log_events()
                     if ev.get("event") == event and
                     mark in ev.get("argv", ev.get("command", ""))]
            if lines and (self.series(series) or 0) > before or time.monotonic() > end:
                break
            time.sleep(0.02)
        self.assertEqual(len(lines), 1, lines)
        self.assertEqual(lines[0].get("front"), "grpc", lines[0])
        self.assertEqual(self.series(series), before + 1, series)
        return lines[0]

    def abandon(self, mode, status, event, begin):
        """A call begun by begin(command) and cancelled by its client once its command runs:
        the command is stopped, and audited (status) and counted once."""
        self.need_probe()
        series = 'sbxd_executions_total{front="grpc",mode="%s",status="%s"}' % (mode, status)
        before = self.series(series)
        self.assertIsNotNone(before, series)
        m = marker()
        call = begin(sleeper(m))
        self.wait_running(m)
        call.cancel()
        self.assert_gone(m)
        line = self.audited_once(event, m, series, before)
        self.assertEqual(line.get("status"), status, line)

    def test_abandoned_execute_audited_and_counted_once(self):
        """An Execute whose client cancels it mid-run (canceled), as REST's abandoned
        stream."""
        self.abandon("sync", "canceled", "exec", lambda cmd: self.stub().Execute.future(
            pb.ExecuteRequest(config=config(cmd)), timeout=CALL_TIMEOUT,
            metadata=self.d.metadata()))

    def test_abandoned_start_audited_and_counted_once(self):
        """A Start whose client cancels it: its process is killed (as sandboxd's context kills
        it), audited and counted by its driver."""
        self.abandon("background", "signaled", "process",
                     lambda cmd: self.start(cmd, timeout=CALL_TIMEOUT)[0])

    def test_exit_code_streams_and_status_trailer(self):
        r, tr = self.execute(sh("echo out; echo err >&2; exit 7"))
        self.assertEqual((r.stdout, r.stderr, r.exit_code), (b"out\n", b"err\n", 7))
        self.assertEqual(tr.get("sbxd-status"), "exited", tr)
        self.assertNotEqual(tr.get("sbxd-stdout-truncated"), "true", tr)

    def test_signal_is_minus_1(self):
        """As sandboxd's Execute reports a command killed by a signal (Go's
        ExitError.ExitCode() is -1 then); the trailer says which."""
        for sig in ("KILL", "TERM", "INT"):
            r, tr = self.execute(sh("echo before; kill -%s $$" % sig))
            self.assertEqual((r.exit_code, r.stdout), (-1, b"before\n"), "kill -%s" % sig)
            self.assertEqual(tr.get("sbxd-status"), "signaled", tr)

    def test_sdk_timeout_is_the_deadline(self):
        """The SDK's stub.Execute(request, timeout=T): past T the call ends
        DEADLINE_EXCEEDED, as sandboxd's (exec.CommandContext on the call's context)."""
        stub = S.pbg.ProcessServiceStub(self.d.channel)
        request = pb.ExecuteRequest(config=pb.ProcessConfig(command=sh("sleep 5")))
        t0 = time.monotonic()
        with self.assertRaises(grpc.RpcError) as cm:
            stub.Execute(request, timeout=0.5)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertLess(time.monotonic() - t0, 3.0)

    def test_argv_without_shell(self):
        """A command is argv, executed directly; a name without '/' is found in PATH."""
        r, _ = self.execute(["printf", "%s|", "a b", "c$HOME", "'q'"])
        self.assertEqual(r.stdout, b"a b|c$HOME|'q'|")
        self.assertEqual(r.exit_code, 0)

    def test_binary_output_exact(self):
        r, _ = self.execute(sh(r"printf '\377\000\001\200'; printf '\376' >&2"))
        self.assertEqual(r.stdout, b"\xff\x00\x01\x80")
        self.assertEqual(r.stderr, b"\xfe")

    def test_stdin_is_empty(self):
        """Execute has no stdin: a reader sees end-of-file at once."""
        r, _ = self.execute(["cat"], timeout=10)
        self.assertEqual((r.stdout, r.exit_code), (b"", 0))

    def test_large_output(self):
        """~0.9 MB of stdout (under the 1 MiB default cap) arrives whole and in order."""
        r, tr = self.execute(["seq", "1", "150000"], timeout=30)
        want = "".join("%d\n" % i for i in range(1, 150001)).encode()
        self.assertEqual(len(r.stdout), len(want))
        self.assertEqual(r.stdout, want)
        self.assertNotEqual(tr.get("sbxd-stdout-truncated"), "true")

    def test_environment_merged_over_minimal_base(self):
        r, _ = self.execute(["env"], env={"FOO": "bar baz", "EMPTY": "", "LANG": "C"})
        env = dict(line.split("=", 1) for line in r.stdout.decode().splitlines())
        self.assertEqual(env.get("FOO"), "bar baz")
        self.assertEqual(env.get("EMPTY"), "")
        self.assertEqual(env.get("LANG"), "C", "env_vars must override the base")
        self.assertEqual(env.get("HOME"), self.d.ws)
        self.assertIn("/usr/bin", env.get("PATH", "").split(":"))
        self.assertNotIn("SBXD_TEST_DAEMON_SECRET", env, "the daemon's environment leaked")
        r, _ = self.execute(["env"])
        env = dict(line.split("=", 1) for line in r.stdout.decode().splitlines())
        self.assertEqual(sorted(env), ["HOME", "LANG", "PATH"], env)
        self.assertEqual(env["LANG"], "C.UTF-8")

    def test_cwd(self):
        sub = os.path.join(self.d.ws, "sub-%s" % marker())
        os.mkdir(sub)
        os.chmod(sub, 0o777)
        for cwd, want in ((None, self.d.ws), ("", self.d.ws), (os.path.basename(sub), sub),
                          (sub, sub), (os.path.basename(sub) + "/..", self.d.ws)):
            r, _ = self.execute(["pwd"], cwd=cwd)
            self.assertEqual(r.stdout.decode().strip(), want, "cwd %r" % cwd)

    def test_cwd_outside_workspace_permission_denied(self):
        for cwd in ("/etc", "../..", "..", "/"):
            self.execute_code(grpc.StatusCode.PERMISSION_DENIED, ["pwd"], cwd=cwd)

    def test_cwd_missing_not_found(self):
        """A cwd that does not exist (inside the workspace): NOT_FOUND, as sandboxd answers
        it, on Execute and on Start (before any event); nothing runs."""
        m = marker()
        for cwd in ("no-such-dir-%s" % m, os.path.join(self.d.ws, "no-such-dir-%s/sub" % m)):
            self.execute_code(grpc.StatusCode.NOT_FOUND, sh("touch ../ran-" + m), cwd=cwd)
            events, e = self.start_events(sh("touch ../ran-" + m), cwd=cwd)
            self.assertEqual((e.code(), events), (grpc.StatusCode.NOT_FOUND, []),
                             "Start in cwd %r: %s" % (cwd, e.details()))
        self.assertFalse(os.path.exists(os.path.join(self.d.ws, "ran-" + m)))

    def test_empty_command_invalid_argument(self):
        self.execute_code(grpc.StatusCode.INVALID_ARGUMENT, [])
        # No config at all.
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT, self.stub().Execute,
                         pb.ExecuteRequest(), timeout=CALL_TIMEOUT, metadata=self.d.metadata())

    def test_nul_invalid_argument(self):
        """A NUL inside a string (proto3 strings may hold one) would cut a C string: refused,
        in the command, an environment name or value, and the cwd."""
        m = marker()
        self.execute_code(grpc.StatusCode.INVALID_ARGUMENT,
                          ["/bin/sh", "-c", "touch ran-%s\x00; echo cut" % m])
        self.execute_code(grpc.StatusCode.INVALID_ARGUMENT, ["/bin/echo", "a\x00b"])
        self.execute_code(grpc.StatusCode.INVALID_ARGUMENT, ["env"], env={"A": "x\x00y"})
        self.execute_code(grpc.StatusCode.INVALID_ARGUMENT, ["env"], env={"A\x00B": "x"})
        self.execute_code(grpc.StatusCode.INVALID_ARGUMENT, ["pwd"], cwd=".\x00/etc")
        self.assertFalse(os.path.exists(os.path.join(self.d.ws, "ran-" + m)))

    def test_invalid_utf8_invalid_argument(self):
        """A string field that is not UTF-8 (sent as raw bytes: Python's string API cannot
        make one) is refused, not run."""
        m = marker()
        call = self.d.channel.unary_unary(EXECUTE)  # identity serializers: raw bytes
        for bad in (b"\xff", b"\xc0\xaf", b"\xed\xa0\x80"):  # a bad byte, overlong, surrogate
            bad = b"touch ran-" + m.encode() + bad
            cfg = pb_field(1, b"/bin/sh") + pb_field(1, b"-c") + pb_field(1, bad)
            with self.assertRaises(grpc.RpcError) as cm:
                call(pb_field(1, cfg), timeout=CALL_TIMEOUT, metadata=self.d.metadata())
            self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT,
                             cm.exception.details())
        self.assertFalse(os.path.exists(os.path.join(self.d.ws, "ran-" + m)))
        # In an environment name and value, and in the cwd.
        for cfg in (pb_field(1, b"env") + pb_field(2, pb_field(1, b"A\xffB") + pb_field(2, b"x")),
                    pb_field(1, b"env") + pb_field(2, pb_field(1, b"A") + pb_field(2, b"x\xff")),
                    pb_field(1, b"pwd") + pb_field(3, b"\xff")):
            with self.assertRaises(grpc.RpcError) as cm:
                call(pb_field(1, cfg), timeout=CALL_TIMEOUT, metadata=self.d.metadata())
            self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT,
                             cm.exception.details())

    def test_program_not_found(self):
        """A program that does not exist: NOT_FOUND (as sandboxd answers it), not an exit
        code."""
        self.execute_code(grpc.StatusCode.NOT_FOUND, ["/no/such/program"])
        self.execute_code(grpc.StatusCode.NOT_FOUND, ["no-such-program-%s" % marker()])

    def test_undecodable_message_invalid_argument(self):
        """Bytes that are no ExecuteRequest at all (a truncated varint) are refused."""
        call = self.d.channel.unary_unary(EXECUTE)
        with self.assertRaises(grpc.RpcError) as cm:
            call(b"\x0a\xff\xff\xff\xff\xff", timeout=CALL_TIMEOUT, metadata=self.d.metadata())
        self.assertIn(cm.exception.code(), (grpc.StatusCode.INVALID_ARGUMENT,
                                            grpc.StatusCode.INTERNAL))

    def test_deadline_exceeded_leaves_no_process(self):
        self.need_probe()
        m = marker()
        t0 = time.monotonic()
        self.execute_code(grpc.StatusCode.DEADLINE_EXCEEDED, sleeper(m), timeout=1)
        self.assertLess(time.monotonic() - t0, 5.0)
        self.assert_gone(m, 2.0)

    def test_unimplemented_method(self):
        for path in ("/process.v1.ProcessService/Nope", "/nope.v1.Nope/Execute",
                     "/grpc.health.v1.Health/List"):
            call = self.d.channel.unary_unary(path)
            with self.assertRaises(grpc.RpcError) as cm:
                call(b"", timeout=CALL_TIMEOUT, metadata=self.d.metadata())
            self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED, path)

    def test_16_concurrent_on_one_channel(self):
        results, errors = {}, []

        def one(i):
            try:
                r, _ = self.execute(sh("sleep 0.3; echo %d; echo e%d >&2" % (i, i)), timeout=60)
                results[i] = r
            except Exception as e:  # reported below
                errors.append((i, e))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        self.assertEqual(errors, [])
        self.assertEqual(sorted(results), list(range(16)))
        for i, r in results.items():
            self.assertEqual((r.stdout, r.stderr, r.exit_code),
                             (b"%d\n" % i, b"e%d\n" % i, 0))
        if not common.under_gvisor():
            # They ran side by side: 16 x 0.3 s one after the other would be 4.8 s.
            self.assertLess(time.monotonic() - t0, 4.0)

    def test_oversize_request_resource_exhausted(self):
        """A request message over the 4 MiB limit: RESOURCE_EXHAUSTED, nothing run."""
        m = marker()
        big = "touch ran-%s #" % m + "x" * (5 * MiB)
        self.execute_code(grpc.StatusCode.RESOURCE_EXHAUSTED, sh(big), timeout=30)
        self.assertFalse(os.path.exists(os.path.join(self.d.ws, "ran-" + m)))


def sdk_execute(d, command, timeout=CALL_TIMEOUT):
    """Execute as the agent-sandbox SDK calls it: a channel with grpcio's default options
    (a response over 4 MiB is refused), /bin/sh -c, no metadata but the token's."""
    ch = grpc.insecure_channel(d.target())
    try:
        return S.pbg.ProcessServiceStub(ch).Execute(
            pb.ExecuteRequest(config=pb.ProcessConfig(command=["/bin/sh", "-c", command])),
            timeout=timeout, metadata=d.metadata())
    finally:
        ch.close()


class ExecuteLargeOutputTest(GrpcCase):
    """The SDK reads stdout, stderr and exit_code, never a trailer: Execute gives it all of
    the output that fits the 4 MiB message a default grpcio client takes, as sandboxd does,
    and a last line of stderr when some had to be left out."""

    def test_sdk_3mb_output_whole(self):
        r = sdk_execute(self.d, "seq 1 450000; seq 1 20000 >&2; exit 4", timeout=30)
        want = "".join("%d\n" % i for i in range(1, 450001)).encode()
        self.assertGreater(len(want), 3 * 1000 * 1000)
        self.assertEqual(len(r.stdout), len(want))
        self.assertTrue(r.stdout == want, "stdout differs")
        self.assertEqual(r.stderr, "".join("%d\n" % i for i in range(1, 20001)).encode())
        self.assertEqual(r.exit_code, 4)

    def test_sdk_over_4mib_told_in_stderr(self):
        """5 MB: the answer still fits a default client, and stderr says what was left out."""
        r = sdk_execute(self.d, "head -c 5000000 /dev/zero | tr '\\0' a; echo warn >&2",
                        timeout=30)
        self.assertGreater(len(r.stdout), 4 * MiB - 4096)
        self.assertEqual(r.stdout, b"a" * len(r.stdout))
        lines = r.stderr.decode().split("\n")
        self.assertEqual(lines[0], "warn")
        self.assertEqual(lines[2:], [""], lines)
        self.assertIn("[sbxd] stdout cut: %d of 5000000 bytes left out" %
                      (5000000 - len(r.stdout)), lines[1])
        self.assertIn("Start", lines[1])
        self.assertEqual(r.exit_code, 0)


class OutputCapTest(GrpcCase):
    """--max-output-bytes is the native faces' cap; Execute keeps --sdk-output-bytes (within
    its message) and says a cut in stderr as well as in its trailers."""

    DAEMON_ARGS = ["--max-output-bytes", "1000", "--sdk-output-bytes", "4000"]

    def test_truncated_at_sdk_output_bytes(self):
        r, tr = self.execute(sh("head -c 5000 /dev/zero | tr '\\0' a; "
                                "head -c 3000 /dev/zero | tr '\\0' b >&2; exit 3"))
        self.assertEqual(r.stdout, b"a" * 4000)
        notice = b"\n[sbxd] stdout cut: 1000 of 5000 bytes left out"
        self.assertTrue(r.stderr.startswith(b"b" * 3000 + notice), r.stderr[2990:])
        self.assertIn(b"--sdk-output-bytes", r.stderr[3000:])
        self.assertTrue(r.stderr.endswith(b"\n"))
        self.assertEqual(r.exit_code, 3)
        self.assertEqual(tr.get("sbxd-stdout-truncated"), "true", tr)
        self.assertNotEqual(tr.get("sbxd-stderr-truncated"), "true", tr)
        self.assertEqual(tr.get("sbxd-status"), "exited", tr)

    def test_not_truncated_under_the_cap(self):
        r, tr = self.execute(sh("head -c 4000 /dev/zero | tr '\\0' a"))
        self.assertEqual(r.stdout, b"a" * 4000)
        self.assertEqual(r.stderr, b"")
        self.assertNotEqual(tr.get("sbxd-stdout-truncated"), "true", tr)
        self.assertNotEqual(tr.get("sbxd-stderr-truncated"), "true", tr)


class OutputMemoryTest(GrpcCase):
    """No memory to share beyond --max-output-bytes (--output-memory-bytes 0): Execute keeps
    its usual head, and stderr says why the rest is missing."""

    DAEMON_ARGS = ["--max-output-bytes", "1000", "--output-memory-bytes", "0"]

    def test_pool_dry_told_in_stderr(self):
        r, tr = self.execute(sh("head -c 3000 /dev/zero | tr '\\0' a"))
        self.assertEqual(r.stdout, b"a" * 1000)
        self.assertIn(b"[sbxd] stdout cut: 2000 of 3000 bytes left out", r.stderr)
        self.assertIn(b"--output-memory-bytes", r.stderr)
        self.assertEqual(tr.get("sbxd-stdout-truncated"), "true", tr)


class ServerTimeoutTest(GrpcCase):
    """sbxd's own timeout (here 0.5 s, the most a call may have) ends a call as a deadline
    does: DEADLINE_EXCEEDED, its message saying the command timed out."""

    DAEMON_ARGS = ["--timeout-ms", "500", "--max-timeout-ms", "500"]

    def test_execute_timed_out(self):
        t0 = time.monotonic()
        e = self.execute_code(grpc.StatusCode.DEADLINE_EXCEEDED, sh("sleep 5"), timeout=30)
        self.assertLess(time.monotonic() - t0, 4.0)
        self.assertIn("timed out after 0.5 seconds", e.details())

    def test_start_timed_out(self):
        """The stream carries the output up to the timeout, then ends DEADLINE_EXCEEDED
        without an ExitEvent (as a Start whose deadline passed)."""
        call, _ = self.start(sh("echo before; sleep 5"), timeout=30)
        t0 = time.monotonic()
        got = []
        with self.assertRaises(grpc.RpcError) as cm:
            for ev in call:
                got.append(ev.WhichOneof("event"))
                self.assertNotEqual(got[-1], "exit", "an ExitEvent after the timeout: %r" % ev)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED,
                         cm.exception.details())
        self.assertIn("timed out after 0.5 seconds", cm.exception.details())
        self.assertEqual(got, ["stdout"])
        self.assertLess(time.monotonic() - t0, 4.0)


class EnvironmentTest(GrpcCase):
    """What a command inherits of sbxd's environment (--pass-env, by default): the image's
    PATH (a tool directory first: `mytool` there runs, where it was 127) and the allowed
    variables; never an SBXD_ setting nor an API key nobody named. Execute and Start alike;
    env_vars still win."""

    TOOLS = None

    @classmethod
    def setUpClass(cls):
        cls.TOOLS = tempfile.mkdtemp(prefix="sbxd-grpc-tools-")
        os.chmod(cls.TOOLS, 0o755)
        tool = os.path.join(cls.TOOLS, "mytool")
        with open(tool, "w") as f:
            f.write("#!/bin/sh\necho mytool-ran\n")
        os.chmod(tool, 0o755)
        cls.DAEMON_ENV = {"PATH": cls.TOOLS + ":/usr/bin:/bin", "JAVA_HOME": "/opt/jdk-g",
                          "SANDBOX_FOO": "foo-g", "MY_API_KEY": "key-g", "SBXD_X": "x-g"}
        try:
            super().setUpClass()
        except BaseException:
            shutil.rmtree(cls.TOOLS, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls.TOOLS, ignore_errors=True)

    def check_env(self, text):
        env = dict(line.split("=", 1) for line in text.splitlines())
        self.assertEqual(sorted(env), ["HOME", "JAVA_HOME", "LANG", "PATH", "SANDBOX_FOO"], env)
        self.assertEqual(env["PATH"], self.TOOLS + ":/usr/bin:/bin")
        self.assertEqual(env["JAVA_HOME"], "/opt/jdk-g")
        self.assertEqual(env["HOME"], self.d.ws)

    def test_execute_inherits_the_allow_list(self):
        r, _ = self.execute(["env"])
        self.check_env(r.stdout.decode())
        r, _ = self.execute(["mytool"])
        self.assertEqual((r.exit_code, r.stdout), (0, b"mytool-ran\n"))
        r, _ = self.execute(["env"], env={"JAVA_HOME": "/req"})
        self.assertIn("JAVA_HOME=/req\n", r.stdout.decode())
        self.assertEqual(r.stdout.decode().count("JAVA_HOME="), 1)

    def test_start_inherits_the_allow_list(self):
        call, _ = self.start(["env"])
        out, _, code = self.collect(call)
        self.assertEqual(code, 0)
        self.check_env(out.decode())
        call, _ = self.start(sh("mytool"))
        out, _, code = self.collect(call)
        self.assertEqual((code, out), (0, b"mytool-ran\n"))


class StartTest(GrpcCase):
    def test_events_init_output_exit(self):
        call, pid = self.start(sh("echo out; sleep 0.1; echo err >&2; exit 3"))
        out, err, code = self.collect(call)
        self.assertEqual((out, err, code), (b"out\n", b"err\n", 3))

    def test_exit_code_of_a_signal(self):
        """ExitEvent{exit_code: -1} for a process killed by a signal, as sandboxd's Start."""
        call, _ = self.start(sh("kill -TERM $$"))
        self.assertEqual(self.collect(call)[2], -1)

    def test_large_output_in_order(self):
        call, _ = self.start(["seq", "1", "200000"])
        out, err, code = self.collect(call)
        want = "".join("%d\n" % i for i in range(1, 200001)).encode()
        self.assertEqual(len(out), len(want))
        self.assertEqual(out, want)
        self.assertEqual((err, code), (b"", 0))

    def test_process_ids_unique(self):
        ids = []
        for _ in range(5):
            call, pid = self.start(["true"])
            self.collect(call)
            ids.append(pid)
        self.assertEqual(len(set(ids)), 5, ids)

    def test_pty_size_and_output_as_stdout(self):
        call, _ = self.start(sh("stty size; echo to-stderr >&2"), pty=(100, 30))
        out, err, code = self.collect(call)
        self.assertIn(b"30 100", out)
        self.assertIn(b"to-stderr", out, "a pty's output comes as stdout")
        self.assertEqual(err, b"")
        self.assertEqual(code, 0)

    def test_resize_tty(self):
        call, pid = self.start(sh("read x; stty size"), pty=(80, 24))
        self.resize(pid, 120, 40)
        self.write_stdin(pid, b"\n")
        out, _, code = self.collect(call)
        self.assertIn(b"40 120", out)
        self.assertEqual(code, 0)

    def test_resize_tty_zero_accepted(self):
        """0x0 (a terminal of unknown size) is a size like any other, as sandboxd takes it;
        so is a 0 on one side."""
        call, pid = self.start(sh("read x; stty size; read x; stty size"), pty=(80, 24))
        self.resize(pid, 0, 0)
        self.write_stdin(pid, b"\n")
        self.assertIn(b"0 0", self.read_until(call, b"0 0"))
        self.resize(pid, 90, 0)
        self.write_stdin(pid, b"\n")
        out, _, code = self.collect(call)
        self.assertIn(b"0 90", out)
        self.assertEqual(code, 0)

    def test_resize_without_pty_failed_precondition(self):
        m = marker()
        call, pid = self.start(sleeper(m))
        try:
            self.assert_code(grpc.StatusCode.FAILED_PRECONDITION, self.resize, pid, 100, 30)
        finally:
            self.signal(pid, pb.SIGNAL_SIGKILL)
        self.assertEqual(self.collect(call)[2], -1)

    def test_write_stdin_then_eof(self):
        call, pid = self.start(sh("while read l; do echo \"got $l\"; done; echo done"))
        self.write_stdin(pid, b"hello\n")
        self.assertEqual(self.read_until(call, b"got hello\n"), b"got hello\n")
        self.write_stdin(pid, b"a\nb\n")
        self.write_stdin(pid, eof=True)
        out, err, code = self.collect(call)
        self.assertEqual((out, err, code), (b"got a\ngot b\ndone\n", b"", 0))
        # After the exit the process is gone, as sandboxd forgets it.
        self.assert_code(grpc.StatusCode.NOT_FOUND, self.write_stdin, pid, b"x")

    def test_write_stdin_after_eof_failed_precondition(self):
        """stdin closed by an eof while the process still runs: a later write is refused."""
        m = marker()
        call, pid = self.start(sh("cat >/dev/null; sleep 30.%s; :" % m))
        self.write_stdin(pid, eof=True)
        if self.d.have_probe():
            self.wait_running(m)
        else:
            time.sleep(0.5)
        self.assert_code(grpc.StatusCode.FAILED_PRECONDITION, self.write_stdin, pid, b"late")
        self.assert_code(grpc.StatusCode.FAILED_PRECONDITION, self.write_stdin, pid, eof=True)
        self.signal(pid, pb.SIGNAL_SIGKILL)
        self.assertEqual(self.collect(call)[2], -1)

    def test_send_signal_reaches_the_tree(self):
        self.need_probe()
        m1, m2 = marker(), marker()
        call, pid = self.start(sh("sleep 30.%s & sleep 30.%s; wait" % (m1, m2)))
        self.wait_running(m1)
        self.wait_running(m2)
        self.signal(pid, pb.SIGNAL_SIGTERM)
        self.assertEqual(self.collect(call)[2], -1)
        self.assert_gone(m1, 3.0, "the background sleep")
        self.assert_gone(m2, 3.0)

    def test_sigint_and_sigkill(self):
        for sig, code in ((pb.SIGNAL_SIGINT, -1), (pb.SIGNAL_SIGKILL, -1),
                          (pb.SIGNAL_SIGTERM, -1)):
            call, pid = self.start(["sleep", "30.%s" % marker()])
            self.signal(pid, sig)
            self.assertEqual(self.collect(call)[2], code, pb.Signal.Name(sig))

    def test_signal_unspecified_invalid_argument(self):
        m = marker()
        call, pid = self.start(sleeper(m))
        try:
            self.assert_code(grpc.StatusCode.INVALID_ARGUMENT, self.signal, pid,
                             pb.SIGNAL_UNSPECIFIED)
            # A number outside the enum (SIGHUP: proto3 enums are open).
            self.assert_code(grpc.StatusCode.INVALID_ARGUMENT, self.signal, pid, 1)
        finally:
            self.signal(pid, pb.SIGNAL_SIGKILL)
        self.assertEqual(self.collect(call)[2], -1)

    def test_after_exit_not_found(self):
        """Once its Start has ended, a process is unknown to WriteStdin, SendSignal and
        ResizeTTY: NOT_FOUND, as sandboxd answers (its registry forgets it)."""
        for pty in (None, (80, 24)):
            call, pid = self.start(["true"], pty=pty)
            self.assertEqual(self.collect(call)[2], 0)
            self.assert_code(grpc.StatusCode.NOT_FOUND, self.signal, pid, pb.SIGNAL_SIGTERM)
            self.assert_code(grpc.StatusCode.NOT_FOUND, self.write_stdin, pid, b"x")
            self.assert_code(grpc.StatusCode.NOT_FOUND, self.write_stdin, pid, eof=True)
            self.assert_code(grpc.StatusCode.NOT_FOUND, self.resize, pid, 100, 30)

    def test_unknown_process_id_not_found(self):
        for pid in (0, -1, 2 ** 31 - 1, 987654):
            self.assert_code(grpc.StatusCode.NOT_FOUND, self.write_stdin, pid, b"x")
            self.assert_code(grpc.StatusCode.NOT_FOUND, self.write_stdin, pid, eof=True)
            self.assert_code(grpc.StatusCode.NOT_FOUND, self.signal, pid, pb.SIGNAL_SIGTERM)
            self.assert_code(grpc.StatusCode.NOT_FOUND, self.resize, pid, 80, 24)

    def test_resize_out_of_range_invalid_argument(self):
        call, pid = self.start(sh("read x"), pty=(80, 24))
        try:
            for cols, rows in ((1001, 24), (80, 100000), (0, 1001)):
                self.assert_code(grpc.StatusCode.INVALID_ARGUMENT, self.resize, pid, cols, rows)
        finally:
            self.signal(pid, pb.SIGNAL_SIGKILL)
        self.assertEqual(self.collect(call)[2], -1)

    def test_start_pty_out_of_range_invalid_argument(self):
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT, self.stub().Start,
                         pb.StartRequest(config=config(["true"]), pty=pb.PTY(cols=5000, rows=24)),
                         timeout=CALL_TIMEOUT, metadata=self.d.metadata())

    def test_start_program_not_found(self):
        """A program that does not exist: the call fails NOT_FOUND with no event at all (no
        InitEvent first), as sandboxd's Start, whose exec fails before it sends any."""
        for prog in ("/no/such/program", "no-such-program-%s" % marker(),
                     "/no/such/program"):
            events, e = self.start_events([prog])
            self.assertEqual((e.code(), events), (grpc.StatusCode.NOT_FOUND, []),
                             "%s: %s" % (prog, e.details()))

    def test_start_errors_before_init(self):
        self.assert_code(grpc.StatusCode.PERMISSION_DENIED, self.stub().Start,
                         pb.StartRequest(config=config(["pwd"], cwd="/etc")),
                         timeout=CALL_TIMEOUT, metadata=self.d.metadata())
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT, self.stub().Start,
                         pb.StartRequest(config=config([])), timeout=CALL_TIMEOUT,
                         metadata=self.d.metadata())

    def test_listed_in_rest_processes(self):
        m = marker()
        call, pid = self.start(sleeper(m))
        try:
            p = self.rest_process(pid)
            self.assertIsNotNone(p, "GET /processes does not list grpc_process_id %d" % pid)
            self.assertEqual(p.get("front"), "grpc", p)
            self.assertEqual(p.get("status"), "running", p)
        finally:
            call.cancel()

    def test_cancel_kills_the_tree(self):
        self.need_probe()
        m1, m2 = marker(), marker()
        call, pid = self.start(sh("sleep 30.%s & sleep 30.%s; wait" % (m1, m2)))
        self.wait_running(m1)
        self.wait_running(m2)
        call.cancel()
        self.assert_gone(m1, 3.0, "the background sleep of a cancelled Start")
        self.assert_gone(m2, 3.0, "the sleep of a cancelled Start")
        # Ended (or forgotten): no signal reaches it any more.
        with self.assertRaises(grpc.RpcError) as cm:
            self.signal(pid, pb.SIGNAL_SIGTERM)
        self.assertIn(cm.exception.code(), (grpc.StatusCode.FAILED_PRECONDITION,
                                            grpc.StatusCode.NOT_FOUND))

    def test_deadline_kills_the_tree(self):
        self.need_probe()
        m = marker()
        call, _ = self.start(sleeper(m), timeout=1.5)
        self.wait_running(m)
        with self.assertRaises(grpc.RpcError) as cm:
            for _ in call:
                pass
        self.assertEqual(cm.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assert_gone(m, 2.0)

    def _assert_survives_then_delete(self, m, pid):
        time.sleep(1.0)
        self.assertGreater(self.d.procs_with(m), 0,
                           "a Start whose connection was lost (not cancelled) was killed")
        p = self.rest_process(pid)
        self.assertIsNotNone(p, "the orphaned Start is not in GET /processes")
        self.assertEqual(p.get("front"), "grpc", p)
        self.assertEqual(p.get("status"), "running", p)
        status, body = self.d.request("DELETE", "/processes/%s" % p["id"])
        self.assertEqual(status, 200, body)
        self.assert_gone(m, 3.0, "the processes of the DELETEd orphan")
        self.assertIsNone(self.rest_process(pid), "DELETE did not forget it")

    def test_lost_connection_keeps_running(self):
        """The socket closes under a Start (no RST_STREAM: the agent's pod restarted, a
        tunnel broke): the process keeps running, REST lists it and can DELETE it."""
        self.need_probe()
        m = marker()
        h = RawH2(self.d.grpc_port)
        try:
            h.handshake()
            h.request(1, START, common.grpc_message(
                pb.StartRequest(config=config(sleeper(m))).SerializeToString()),
                token=self.d.token)
            self.assertTrue(h.pump(lambda s: s.messages(1) or s.stream_done(1)),
                            "no InitEvent came")
            self.assertFalse(h.stream_done(1), "the Start ended: %r %r" %
                             (h.headers.get(1), h.resets.get(1)))
            ev = pb.StartResponse.FromString(h.messages(1)[0])
            self.assertEqual(ev.WhichOneof("event"), "init")
            pid = ev.init.process_id
            self.wait_running(m)
        finally:
            h.close()
        self._assert_survives_then_delete(m, pid)

    def test_channel_close_is_a_cancel(self):
        """grpcio's channel.close() sends RST_STREAM(CANCEL) for each open call before it
        closes the socket: on the wire that is a cancelled call, and its tree is killed (the
        lost-connection case is the socket closing without one: the tests above)."""
        self.need_probe()
        m = marker()
        ch = self.d.new_channel()
        call, _ = self.start(sleeper(m), channel=ch)
        self.wait_running(m)
        ch.close()
        self.assert_gone(m, 3.0, "the processes of a Start whose channel was closed")

    def test_killed_client_keeps_running(self):
        """A client process SIGKILLed in the middle of a Start (grpcio's own connection,
        which ends without a RST_STREAM)."""
        self.need_probe()
        m = marker()
        req = pb.StartRequest(config=config(sleeper(m))).SerializeToString()
        code = ("import grpc, sys, time\n"
                "ch = grpc.insecure_channel(%r)\n"
                "call = ch.unary_stream(%r)(bytes.fromhex(%r), timeout=600, metadata=%r)\n"
                "print(next(call).hex(), flush=True)\n"
                "time.sleep(600)\n" % (self.d.target(), START, req.hex(), self.d.metadata()))
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                 stdin=subprocess.DEVNULL)
        try:
            line = child.stdout.readline()
            self.assertTrue(line, "the client child printed no InitEvent")
            ev = pb.StartResponse.FromString(bytes.fromhex(line.decode().strip()))
            pid = ev.init.process_id
            self.wait_running(m)
        finally:
            child.kill()
            child.wait()
            child.stdout.close()
        self._assert_survives_then_delete(m, pid)

    def test_slow_reader_flat_rss_then_cancel(self):
        """A client that reads nothing for 3 s while its command floods: flow control holds
        the command back, sbxd's RSS stays flat, other calls are served; a cancel then kills
        the command."""
        self.need_probe()
        m = marker()
        ch = self.d.new_channel()
        try:
            base = self.d.rss_kb()
            call, _ = self.start(sh("yes %s; :" % m), channel=ch)
            next(call)  # the first output chunk: the flood has begun
            peak = self.d.rss_kb()
            for _ in range(6):
                time.sleep(0.5)
                peak = max(peak, self.d.rss_kb())
            # The daemon still serves others meanwhile.
            r, _ = self.execute(["echo", "alive"], timeout=10)
            self.assertEqual(r.stdout, b"alive\n")
            # Without flow control `yes` would grow it by gigabytes in 3 s; an ASan build's
            # quarantine holds what the answers allocated and freed meanwhile.
            bound = 64 * 1024 if common.sanitized() else 16 * 1024
            self.assertLess(peak - base, bound,
                            "sbxd's RSS grew from %d to %d kB under a client that reads "
                            "nothing" % (base, peak))
            self.assertGreater(self.d.procs_with(m), 0, "the flood ended by itself")
            call.cancel()
            self.assert_gone(m, 3.0, "the flood of a cancelled slow reader")
            self.assertFalse(call.is_active())
        finally:
            ch.close()


    def test_slow_reader_loses_no_output(self):
        """Flow control is backpressure: a Start client that stops reading for 3 s holds its
        command back (its pipe fills) and, reading again, gets every byte in order: no gap
        in seq's numbers."""
        ch = self.d.new_channel()
        try:
            call, _ = self.start(["seq", "1", "400000000"], channel=ch)
            got = bytearray(next(call).stdout)
            time.sleep(3)
            while len(got) < 8 * MiB:
                ev = next(call)
                self.assertNotEqual(ev.WhichOneof("event"), "exit")
                got += ev.stdout
            call.cancel()
            lines = bytes(got).split(b"\n")[:-1]
            for i, line in enumerate(lines):
                if line != b"%d" % (i + 1):
                    self.fail("output was lost while the client did not read: after %d whole "
                              "lines (%d bytes) came %r, not %d" %
                              (i, sum(len(x) + 1 for x in lines[:i]), line[:40], i + 1))
        finally:
            ch.close()


class HealthTest(GrpcCase):
    def test_check(self):
        self.assertEqual(self.d.check(""), SERVING)
        self.assertEqual(self.d.check(PROCESS_SERVICE), SERVING)

    def test_check_unknown_service_not_found(self):
        for svc in ("nope.v1.Nope", "process.v1.ProcessServic", "grpc.health.v1.Healthz"):
            self.assert_code(grpc.StatusCode.NOT_FOUND, self.d.health().Check,
                             hpb.HealthCheckRequest(service=svc), timeout=CALL_TIMEOUT,
                             metadata=self.d.metadata())

    def test_watch_serving(self):
        for svc in ("", PROCESS_SERVICE):
            call = self.d.health().Watch(hpb.HealthCheckRequest(service=svc), timeout=30,
                                         metadata=self.d.metadata())
            self.assertEqual(next(call).status, SERVING)
            call.cancel()

    def test_watch_unknown_service(self):
        """grpc.health.v1: Watch of an unknown service sends SERVICE_UNKNOWN and stays open."""
        call = self.d.health().Watch(hpb.HealthCheckRequest(service="nope.v1.Nope"), timeout=30,
                                     metadata=self.d.metadata())
        self.assertEqual(next(call).status, SERVICE_UNKNOWN)
        self.assertTrue(call.is_active())
        call.cancel()


class AdmissionTest(GrpcCase):
    DAEMON_ARGS = ["--max-running", "1", "--max-queued", "0"]

    def test_past_the_queue_resource_exhausted(self):
        self.need_probe()
        m = marker()
        held = self.stub().Execute.future(pb.ExecuteRequest(config=config(sleeper(m))),
                                          timeout=60, metadata=self.d.metadata())
        try:
            self.wait_running(m)
            e = self.execute_code(grpc.StatusCode.RESOURCE_EXHAUSTED, ["true"])
            self.assertIn("max-queued", e.details() or "")
            self.assert_code(grpc.StatusCode.RESOURCE_EXHAUSTED, self.stub().Start,
                             pb.StartRequest(config=config(["true"])), timeout=CALL_TIMEOUT,
                             metadata=self.d.metadata())
        finally:
            held.cancel()
        self.assert_gone(m, 3.0, "the held Execute, cancelled")
        # The slot is free again.
        deadline = time.monotonic() + 5
        while True:
            try:
                r, _ = self.execute(["echo", "again"])
                break
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.assertEqual(r.stdout, b"again\n")


class QueueTest(GrpcCase):
    """--max-running 1 with room to wait: a call past the limit waits its turn, and one
    cancelled while it waits never runs."""

    DAEMON_ARGS = ["--max-running", "1", "--max-queued", "4"]

    def hold(self, m):
        held = self.stub().Execute.future(pb.ExecuteRequest(config=config(sleeper(m))),
                                          timeout=60, metadata=self.d.metadata())
        self.addCleanup(held.cancel)
        self.wait_running(m)
        return held

    def test_queued_call_runs_when_the_slot_frees(self):
        self.need_probe()
        m = marker()
        held = self.hold(m)
        waiting = self.stub().Execute.future(pb.ExecuteRequest(config=config(["echo", "next"])),
                                             timeout=30, metadata=self.d.metadata())
        time.sleep(0.5)
        self.assertFalse(waiting.done(), "a call past --max-running did not wait")
        held.cancel()
        self.assertEqual(waiting.result(timeout=20).stdout, b"next\n")
        self.assert_gone(m)

    def test_cancelled_while_queued_never_runs(self):
        """Execute and Start, each reset (a raw RST_STREAM) and cancelled (grpcio) while it
        waits for the slot: when the slot frees, none of them runs."""
        self.need_probe()
        m = marker()
        held = self.hold(m)
        files = []
        h = RawH2(self.d.grpc_port)
        self.addCleanup(h.close)
        h.handshake()
        for sid, method, cls in ((1, EXECUTE, pb.ExecuteRequest), (3, START, pb.StartRequest)):
            f = "ran-%s-%d" % (marker(), sid)
            files.append(f)
            h.request(sid, method, common.grpc_message(
                cls(config=config(sh("touch " + f))).SerializeToString()), token=self.d.token)
        calls = []
        for method in ("Execute", "Start"):
            f = "ran-%s-%s" % (marker(), method)
            files.append(f)
            if method == "Execute":
                calls.append(self.stub().Execute.future(
                    pb.ExecuteRequest(config=config(sh("touch " + f))), timeout=30,
                    metadata=self.d.metadata()))
            else:
                calls.append(self.stub().Start(pb.StartRequest(config=config(sh("touch " + f))),
                                               timeout=30, metadata=self.d.metadata()))
        time.sleep(0.5)
        h.send(common.frame(common.RST_STREAM, 0, 1, struct.pack(">I", 8)) +
               common.frame(common.RST_STREAM, 0, 3, struct.pack(">I", 8)))
        for c in calls:
            c.cancel()
        time.sleep(0.3)
        held.cancel()
        self.assert_gone(m)
        r, _ = self.execute(["echo", "free"])  # the slot is free, and the queue empty
        self.assertEqual(r.stdout, b"free\n")
        time.sleep(0.5)
        ran = [f for f in files if os.path.exists(os.path.join(self.d.ws, f))]
        self.assertEqual(ran, [], "calls cancelled while they waited ran when the slot freed")


class AuthTest(GrpcCase):
    DAEMON_ENV = {"SBXD_TOKEN": common.TOKEN}

    def calls(self, metadata):
        """Each ProcessService method once, with metadata."""
        st = self.stub()
        kw = {"timeout": CALL_TIMEOUT, "metadata": metadata}
        return [
            lambda: st.Execute(pb.ExecuteRequest(config=config(["true"])), **kw),
            lambda: st.Start(pb.StartRequest(config=config(["true"])), **kw),
            lambda: st.WriteStdin(pb.WriteStdinRequest(process_id=1, input=b"x"), **kw),
            lambda: st.SendSignal(pb.SendSignalRequest(process_id=1, signal=pb.SIGNAL_SIGTERM),
                                  **kw),
            lambda: st.ResizeTTY(pb.ResizeTTYRequest(process_id=1, cols=80, rows=24), **kw),
            lambda: self.d.channel.unary_unary("/process.v1.ProcessService/Nope")(b"", **kw),
        ]

    def test_no_token_unauthenticated(self):
        m = marker()
        for fn in self.calls(None):
            self.assert_code(grpc.StatusCode.UNAUTHENTICATED, fn)
        self.assert_code(grpc.StatusCode.UNAUTHENTICATED, self.stub().Execute,
                         pb.ExecuteRequest(config=config(sh("touch ran-" + m))),
                         timeout=CALL_TIMEOUT)
        self.assertFalse(os.path.exists(os.path.join(self.d.ws, "ran-" + m)))

    def test_wrong_token_unauthenticated(self):
        for md in ([("authorization", "Bearer wrong")], [("authorization", "Bearer secre")],
                   [("authorization", "Bearer secrett")], [("authorization", "secret")],
                   [("authorization", "Basic c2VjcmV0")], [("x-token", "secret")]):
            for fn in self.calls(md):
                self.assert_code(grpc.StatusCode.UNAUTHENTICATED, fn)

    def test_right_token(self):
        r, _ = self.execute(["echo", "in"])
        self.assertEqual(r.stdout, b"in\n")

    def test_token_not_echoed(self):
        e = self.assert_code(grpc.StatusCode.UNAUTHENTICATED, self.stub().Execute,
                             pb.ExecuteRequest(config=config(["true"])), timeout=CALL_TIMEOUT,
                             metadata=[("authorization", "Bearer secreX")])
        self.assertNotIn("secre", (e.details() or "") + repr(e.trailing_metadata()))

    def test_health_needs_no_token(self):
        """Health stays open, as GET /healthz is: a kubelet gRPC probe sends no metadata."""
        r = self.d.health().Check(hpb.HealthCheckRequest(service=""), timeout=CALL_TIMEOUT)
        self.assertEqual(r.status, SERVING)


class GuestHealthTest(GrpcCase):
    """Health needs no token (a kubelet probe carries none), so anyone who reaches the port can
    make health calls. 7 connections of 100 Watch streams each once took every handler of the
    front, and a connection per Watch every connection: token holders got RESOURCE_EXHAUSTED,
    or were refused at accept. Health calls without the token have a budget of their own, and
    at --max-connections a connection that carried nothing else makes room."""

    DAEMON_ENV = {"SBXD_TOKEN": common.TOKEN}
    # 8 connections and 8 + 2 + 0 + 2 = 12 handlers for the front: the attack at the scale of
    # a test (the defaults are 256 connections and 608 handlers).
    DAEMON_ARGS = ["--max-connections", "8", "--max-running", "2", "--max-queued", "0",
                   "--max-processes", "2"]

    def flood(self, conns, per_conn):
        """conns raw connections, each with per_conn health Watch streams without the token,
        until every stream is answered (its first message, or its trailers). Returns the
        connections and the (served, refused) counts."""
        req = common.grpc_message(hpb.HealthCheckRequest(service="").SerializeToString())
        hs = []
        for _ in range(conns):
            h = RawH2(self.d.grpc_port)
            self.addCleanup(h.close)
            h.handshake()
            for i in range(per_conn):
                h.request(1 + 2 * i, WATCH, req)
            hs.append(h)
        served = refused = 0
        for h in hs:
            sids = [1 + 2 * i for i in range(per_conn)]
            h.pump(lambda x: x.closed or all(x.messages(s) or x.stream_done(s) for s in sids),
                   CALL_TIMEOUT)
            for sid in sids:
                if h.status(sid) == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]:
                    refused += 1
                elif h.messages(sid) and h.status(sid) is None:
                    served += 1
        return hs, served, refused

    def token_holder_served(self):
        """A token holder's Execute on a connection of its own is served."""
        ch = self.d.new_channel()
        try:
            r, _ = self.execute(["echo", "in"], channel=ch)
        except grpc.RpcError as e:
            self.fail("a token holder's Execute failed: %s %s" % (e.code(), e.details()))
        finally:
            ch.close()
        self.assertEqual(r.stdout, b"in\n")

    def test_watch_streams_leave_token_holders_their_calls(self):
        t0 = time.monotonic()
        hs, served, refused = self.flood(7, 100)
        print("\n    7 x 100 Watch without the token: %d served, %d refused (%.2f s)" %
              (served, refused, time.monotonic() - t0), file=sys.stderr)
        self.assertEqual(served + refused, 700, "not every Watch stream was answered")
        self.assertLessEqual(served, 16, "more Watch streams without the token than their share")
        self.token_holder_served()
        # A probe's Check, without the token, still finds room beside the Watches.
        ch = self.d.new_channel()
        try:
            st = self.d.health(ch).Check(hpb.HealthCheckRequest(service=""), timeout=5).status
        finally:
            ch.close()
        self.assertEqual(st, SERVING)
        # The Watches that were served are still open: the budget is theirs, not closed.
        self.assertFalse(any(h.closed for h in hs))

    def test_guest_connections_make_room(self):
        # A connection that made a call with the token is trusted: never closed for room.
        trusted = RawH2(self.d.grpc_port)
        self.addCleanup(trusted.close)
        trusted.handshake()
        check = common.grpc_message(hpb.HealthCheckRequest(service="").SerializeToString())
        trusted.request(1, CHECK, check, token=self.d.token)
        self.assertTrue(trusted.pump(lambda x: x.stream_done(1), CALL_TIMEOUT))
        self.assertEqual(trusted.status(1), 0)
        before = self.metrics()
        t0 = time.monotonic()
        hs, served, refused = self.flood(8, 1)  # with the trusted one, one more than the cap
        self.token_holder_served()
        print("\n    8 connections of 1 Watch without the token, then a token holder: "
              "%.2f s" % (time.monotonic() - t0), file=sys.stderr)
        closed = [i for i, h in enumerate(hs) if h.wait_closed(0.5 if i < 2 else 0)]
        self.assertGreaterEqual(len(closed), 2, "no connection of guests made room")
        self.assertIn(0, closed, "the oldest connection of guests was not the one closed")
        # The trusted connection is still there, and still served.
        trusted.request(3, CHECK, check, token=self.d.token)
        self.assertTrue(trusted.pump(lambda x: x.stream_done(3) or x.closed, CALL_TIMEOUT))
        self.assertFalse(trusted.closed, "a trusted connection was closed to make room")
        self.assertEqual(trusted.status(3), 0)
        after = self.metrics()
        self.assertGreaterEqual(after.get("sbxd_grpc_connections_evicted_total", 0) -
                                before.get("sbxd_grpc_connections_evicted_total", 0), 2)

    def metrics(self):
        status, body = self.d.request("GET", "/metrics")
        self.assertEqual(status, 200)
        text = body.decode() if isinstance(body, bytes) else str(body)
        return {k: float(v) for k, v in (ln.rsplit(" ", 1) for ln in text.splitlines()
                                         if ln.startswith("sbxd_grpc_"))}


class DrainTest(unittest.TestCase):
    """SIGTERM with a command running: health turns NOT_SERVING (Watch sees it), new calls
    are UNAVAILABLE, the running command finishes, sbxd exits 0."""

    def test_drain(self):
        d = Daemon(name="sbxd(drain)")
        ch2 = None
        try:
            hs = d.health()
            watch = hs.Watch(hpb.HealthCheckRequest(service=""), timeout=60)
            self.assertEqual(next(watch).status, SERVING)
            watch_svc = hs.Watch(hpb.HealthCheckRequest(service=PROCESS_SERVICE), timeout=60)
            self.assertEqual(next(watch_svc).status, SERVING)
            m = marker()
            held = d.process().Execute.future(
                pb.ExecuteRequest(config=config(sh("sleep 4.%s; echo held" % m))), timeout=60)
            if d.have_probe():
                n = d.wait_procs(m, lambda k: k > 0, 10)
                self.assertGreater(n, 0)
            else:
                time.sleep(1)
            d.proc.send_signal(15)

            # Watch streams NOT_SERVING.
            got = []
            end = time.monotonic() + 5
            for ev in watch:
                got.append(ev.status)
                if ev.status == NOT_SERVING or time.monotonic() > end:
                    break
            self.assertEqual(got[-1:], [NOT_SERVING], got)
            self.assertEqual(next(watch_svc).status, NOT_SERVING)

            # A new call, on the open connection and on a new one (the listener stays open
            # through the drain, so that clients are told rather than refused): UNAVAILABLE,
            # saying why; a Check answers NOT_SERVING.
            ch2 = d.new_channel()
            for ch in (d.channel, ch2):
                with self.assertRaises(grpc.RpcError) as cm:
                    d.process(ch).Execute(pb.ExecuteRequest(config=config(["true"])), timeout=5)
                self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE,
                                 cm.exception.details())
                self.assertIn("shutting down", cm.exception.details() or "")
                with self.assertRaises(grpc.RpcError) as cm:
                    for _ in d.process(ch).Start(pb.StartRequest(config=config(["true"])),
                                                 timeout=5):
                        pass
                self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE,
                                 cm.exception.details())
                self.assertEqual(d.health(ch).Check(hpb.HealthCheckRequest(service=""),
                                                    timeout=5).status, NOT_SERVING)

            # The command that held the drain finishes and is answered.
            r = held.result(timeout=30)
            self.assertEqual((r.stdout, r.exit_code), (b"held\n", 0))
            watch.cancel()
            watch_svc.cancel()
            try:
                d.proc.wait(timeout=common.STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.fail("sbxd did not exit within %.0f s of the SIGTERM" % common.STOP_TIMEOUT)
        finally:
            if ch2 is not None:
                ch2.close()
            problems = d.stop_checked(already_stopping=True)
        self.assertEqual(problems, [])

    def test_drain_with_an_orphaned_start(self):
        """SIGTERM with only an orphaned Start (its connection lost): sbxd ends it and exits
        0 without waiting for its 30 s sleep."""
        d = Daemon(name="sbxd(drain-orphan)")
        try:
            m = marker()
            h = RawH2(d.grpc_port)
            try:
                h.handshake()
                h.request(1, START, common.grpc_message(
                    pb.StartRequest(config=config(sleeper(m))).SerializeToString()))
                self.assertTrue(h.pump(lambda s: s.messages(1) or s.stream_done(1)))
            finally:
                h.close()
            t0 = time.monotonic()
            d.proc.send_signal(15)
            try:
                d.proc.wait(timeout=common.STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.fail("sbxd did not exit within %.0f s of the SIGTERM" % common.STOP_TIMEOUT)
            self.assertLess(time.monotonic() - t0, 15.0)
            if not common.under_gvisor():
                self.assertEqual(common.host_procs_with(m), [])
        finally:
            problems = d.stop_checked(already_stopping=True)
        self.assertEqual(problems, [])


class RawFrameTest(GrpcCase):
    """HTTP/2 by hand: what a broken or hostile client sends."""

    def raw(self):
        h = RawH2(self.d.grpc_port)
        self.addCleanup(h.close)
        return h

    def assert_closed(self, h, what):
        self.assertTrue(h.wait_closed(10), "sbxd did not close the connection after %s" % what)

    def test_http1_request_closed(self):
        h = self.raw()
        h.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assert_closed(h, "an HTTP/1.1 request")

    def test_random_bytes_closed(self):
        h = self.raw()
        h.send(random.Random(7).randbytes(4096))
        self.assert_closed(h, "4 KiB of random bytes")

    def test_random_frames_after_preface_closed(self):
        rnd = random.Random(11)
        for _ in range(5):
            h = self.raw()
            h.handshake()
            try:
                h.send(rnd.randbytes(rnd.randrange(9, 2048)))
                h.send(common.frame(common.GOAWAY, 0, 0, b"\0" * 8))
            except OSError:
                pass
            self.assert_closed(h, "random bytes after the preface")

    def test_frame_over_max_size_closed(self):
        h = self.raw()
        h.handshake()
        h.send(struct.pack(">I", 0xFFFFFF)[1:] + struct.pack(">BBI", common.DATA, 0, 1))
        self.assert_closed(h, "a frame header over SETTINGS_MAX_FRAME_SIZE")

    def test_bad_hpack_closed(self):
        h = self.raw()
        h.handshake()
        h.send(common.frame(common.HEADERS, common.END_HEADERS | common.END_STREAM, 1,
                            b"\x80\xff\xff\xff\xff\x0f"))
        self.assert_closed(h, "a header block HPACK cannot decode")
        self.assertIsNotNone(h.goaway, "no GOAWAY before the close")

    def test_truncated_message_error_status(self):
        """A DATA frame whose gRPC length prefix claims 100 bytes, 10 sent, END_STREAM."""
        m = marker()
        h = self.raw()
        h.handshake()
        body = pb.ExecuteRequest(config=config(sh("touch ran-" + m))).SerializeToString()
        h.request(1, EXECUTE, common.grpc_message(body[:10], claimed=100))
        self.assertTrue(h.pump(lambda s: s.stream_done(1) or s.closed),
                        "no answer to a truncated message")
        self.assertTrue(1 in h.resets or (h.status(1) or 0) != 0,
                        "a truncated message got grpc-status %r" % h.status(1))
        self.assertFalse(os.path.exists(os.path.join(self.d.ws, "ran-" + m)))

    def test_two_messages_on_a_unary_call(self):
        m = marker()
        h = self.raw()
        h.handshake()
        one = common.grpc_message(
            pb.ExecuteRequest(config=config(sh("touch ran-" + m))).SerializeToString())
        h.request(1, EXECUTE, one + one)
        self.assertTrue(h.pump(lambda s: s.stream_done(1) or s.closed))
        self.assertTrue(1 in h.resets or (h.status(1) or 0) != 0,
                        "two request messages on a unary call got grpc-status %r" % h.status(1))

    def test_compressed_without_encoding_error(self):
        h = self.raw()
        h.handshake()
        body = pb.ExecuteRequest(config=config(["true"])).SerializeToString()
        h.request(1, EXECUTE, common.grpc_message(body, compressed=True))
        self.assertTrue(h.pump(lambda s: s.stream_done(1) or s.closed))
        self.assertTrue(1 in h.resets or (h.status(1) or 0) != 0,
                        "a compressed message without grpc-encoding got grpc-status %r" %
                        h.status(1))

    def test_oversize_length_prefix(self):
        """A length prefix of 64 MiB: RESOURCE_EXHAUSTED or a reset, as soon as it is seen or
        once 4 MiB are in; sbxd's RSS does not follow the claim."""
        self.need_probe()
        base = self.d.rss_kb()
        h = self.raw()
        h.handshake()
        h.request(1, EXECUTE, common.grpc_message(b"\x0a" * 16000, claimed=64 * MiB), end=False)
        if not h.pump(lambda s: s.stream_done(1) or s.closed, 2.0):
            h.send_data(1, b"\x0a" * (8 * MiB), timeout=10)
            h.pump(lambda s: s.stream_done(1) or s.closed, 10.0)
        if h.stream_done(1):
            self.assertTrue(1 in h.resets or h.status(1) == 8,
                            "a 64 MiB message got grpc-status %r" % h.status(1))
        else:
            self.assertTrue(h.closed and h.goaway is not None,
                            "no answer to a 64 MiB length prefix (neither trailers, a reset "
                            "nor a GOAWAY)")
        grew = self.d.rss_kb() - base
        self.assertLess(grew, 16 * 1024, "sbxd's RSS grew by %d kB" % grew)

    def test_rapid_reset(self):
        """200 Starts, each reset at once (CVE-2023-44487's pattern): nothing is left running
        and sbxd serves on."""
        self.need_probe()
        m = marker()
        h = self.raw()
        h.handshake()
        body = common.grpc_message(
            pb.StartRequest(config=config(sleeper(m))).SerializeToString())
        block = common.hpack_literal(common.grpc_request_headers(START, self.d.token))
        out = bytearray()
        for i in range(200):
            sid = 1 + 2 * i
            out += common.frame(common.HEADERS, common.END_HEADERS, sid, block)
            out += common.frame(common.DATA, common.END_STREAM, sid, body)
            out += common.frame(common.RST_STREAM, 0, sid, struct.pack(">I", 8))
        try:
            h.send(bytes(out))
        except OSError:
            pass  # closed on us: allowed
        h.pump(lambda s: s.closed, 3.0)
        # Reset calls may still be starting (and being killed) for a while: nothing may be
        # left once none has been seen for a second. (Under gVisor each start takes tens of
        # milliseconds, and sbxd starts many of the reset Starts before it kills them.)
        within = 30.0 if common.under_gvisor() else 10.0
        end, quiet = time.monotonic() + within, 0
        while quiet < 4 and time.monotonic() < end:
            quiet = quiet + 1 if self.d.procs_with(m) == 0 else 0
            time.sleep(0.25)
        self.assertEqual(quiet, 4, "processes of reset Starts (%d with %s in the command line) "
                         "are still there %.0f s later" % (self.d.procs_with(m), m, within))
        status, body = self.d.request("GET", "/processes")
        running = [p for p in body["processes"] if p.get("status") == "running" and
                   m in (p.get("command") or "")]
        self.assertEqual(running, [], "reset Starts still listed as running")

    def test_connection_refusal_is_per_connection(self):
        """Between the bad connections above, a good one on the side is served at once."""
        bad = self.raw()
        bad.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a TLS ClientHello's start
        r, _ = self.execute(["echo", "fine"])
        self.assertEqual(r.stdout, b"fine\n")
        self.assert_closed(bad, "a TLS ClientHello")

    def test_idle_connection_with_preface_only(self):
        """A client that sends the preface and nothing else does not hold sbxd up."""
        hs = [self.raw() for _ in range(32)]
        for h in hs:
            h.handshake()
        r, _ = self.execute(["echo", "fine"])
        self.assertEqual(r.stdout, b"fine\n")


class LimitsTest(GrpcCase):
    """The front's bounds on a client that holds resources without using them, and its
    metrics."""

    DAEMON_ARGS = ["--request-timeout-ms", "1000", "--idle-timeout-ms", "2500",
                   "--max-connections", "4"]

    def raw(self):
        h = RawH2(self.d.grpc_port)
        self.addCleanup(h.close)
        return h

    def test_silent_connection_closed(self):
        """A connection that never sends its preface is closed after --request-timeout-ms."""
        h = self.raw()
        t0 = time.monotonic()
        self.assertTrue(h.wait_closed(6), "a silent connection was not closed")
        self.assertGreater(time.monotonic() - t0, 0.8)

    def test_idle_connection_closed(self):
        """A connection with no stream is closed after --idle-timeout-ms (with a GOAWAY)."""
        h = self.raw()
        h.handshake()
        t0 = time.monotonic()
        self.assertTrue(h.wait_closed(8), "an idle connection was not closed")
        self.assertGreater(time.monotonic() - t0, 2.0)
        self.assertIsNotNone(h.goaway, "an idle connection was closed without a GOAWAY")

    def test_incomplete_request_ends(self):
        """A request whose message never arrives whole (half of it, no END_STREAM) ends
        within --request-timeout-ms, and nothing runs."""
        m = marker()
        h = self.raw()
        h.handshake()
        msg = common.grpc_message(
            pb.ExecuteRequest(config=config(sh("touch ran-" + m))).SerializeToString())
        h.request(1, EXECUTE, msg[:len(msg) // 2], end=False)
        self.assertTrue(h.pump(lambda s: s.stream_done(1) or s.closed, 6),
                        "an incomplete request was held on to")
        self.assertTrue(1 in h.resets or h.closed or (h.status(1) or 0) != 0)
        self.assertFalse(os.path.exists(os.path.join(self.d.ws, "ran-" + m)))

    def test_max_connections(self):
        """Past --max-connections, a connection that carried no call (nor only health calls)
        makes room for a new one, the oldest first; when every one has carried a call, a new
        connection is closed at once. Once they go, a new client is served."""
        before = self.metrics()
        conns = []
        for _ in range(6):
            h = self.raw()
            h.handshake()
            conns.append(h)
        made_room = [i for i, h in enumerate(conns) if h.wait_closed(0.5 if i < 2 else 0)]
        self.assertEqual(made_room, [0, 1], "6 idle connections over a limit of 4")
        after = self.metrics()
        self.assertEqual(after.get("sbxd_grpc_connections_evicted_total", 0) -
                         before.get("sbxd_grpc_connections_evicted_total", 0), 2)
        for h in conns:
            h.close()
        # Connections that made a call (no token here: any but health) are kept; one more is
        # refused at accept.
        signal = common.grpc_message(pb.SendSignalRequest(process_id=987654,
                                                          signal=pb.SIGNAL_SIGTERM)
                                     .SerializeToString())
        busy = []
        for _ in range(4):
            h = self.raw()
            h.handshake()
            end = time.monotonic() + 5
            while True:  # (until the closed ones above have gone)
                h.request(1, "/process.v1.ProcessService/SendSignal", signal)
                if h.pump(lambda x: x.stream_done(1) or x.closed, CALL_TIMEOUT) and not h.closed:
                    break
                self.assertLess(time.monotonic(), end, "no room for a connection")
                time.sleep(0.05)
                h = self.raw()
                h.handshake()
            self.assertEqual(h.status(1), grpc.StatusCode.NOT_FOUND.value[0])
            busy.append(h)
        before = self.metrics()
        extra = self.raw()
        extra.handshake()
        self.assertTrue(extra.wait_closed(2), "a connection over the limit was kept")
        after = self.metrics()
        self.assertGreaterEqual(after.get("sbxd_grpc_connections_refused_total", 0) -
                                before.get("sbxd_grpc_connections_refused_total", 0), 1)
        self.assertFalse(any(h.wait_closed(0) for h in busy))
        for h in busy:
            h.close()
        time.sleep(0.2)

    def metrics(self):
        """GET /metrics: {series with labels: value}."""
        status, body = self.d.request("GET", "/metrics")
        self.assertEqual(status, 200)
        text = body.decode() if isinstance(body, bytes) else str(body)
        out = {}
        for line in text.splitlines():
            if line.startswith("sbxd_grpc_"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def test_metrics_count_calls(self):
        before = self.metrics()
        self.execute(["true"])
        self.assert_code(grpc.StatusCode.NOT_FOUND, self.signal, 987654, pb.SIGNAL_SIGTERM)
        after = self.metrics()
        for key in ('sbxd_grpc_calls_total{method="Execute",code="OK"}',
                    'sbxd_grpc_calls_total{method="SendSignal",code="NOT_FOUND"}'):
            self.assertEqual(after.get(key, 0) - before.get(key, 0), 1, key)
        self.assertEqual(after.get("sbxd_grpc_calls_in_progress"), 0)
        self.assertGreaterEqual(after.get("sbxd_grpc_connections_open", 0), 1)


class ListenerTest(unittest.TestCase):
    def test_grpc_listen_off(self):
        """--grpc-listen off: no gRPC port, REST serves."""
        # Daemon insists on a grpc_port; this one is started by hand.
        import json
        import shutil
        import tempfile
        tmp = os.path.realpath(tempfile.mkdtemp(prefix="sbxd-grpc-off-"))
        try:
            os.chmod(tmp, 0o755)
            os.mkdir(os.path.join(tmp, "ws"))
            with open(os.path.join(tmp, "log"), "wb") as logf:
                p = subprocess.Popen(common.wrap_words() + [
                    common.sbxd_bin(), "--listen", "127.0.0.1:0", "--grpc-listen", "off",
                    "--workspace", os.path.join(tmp, "ws"), "--log-format", "json"],
                    stderr=logf, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                    cwd="/", env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                  **{k: v for k, v in os.environ.items()
                                     if k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS")}})
            try:
                ev = None
                end = time.monotonic() + common.START_TIMEOUT
                while ev is None and time.monotonic() < end and p.poll() is None:
                    with open(os.path.join(tmp, "log"), "rb") as f:
                        for line in f.read().decode("utf-8", "replace").splitlines():
                            if line.startswith("{") and '"listening"' in line:
                                ev = json.loads(line)
                    time.sleep(0.02)
                self.assertIsNotNone(ev, "no listening line")
                self.assertIsNone(ev.get("grpc_port"), ev)
            finally:
                p.terminate()
                self.assertEqual(p.wait(timeout=common.STOP_TIMEOUT), 0)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_port_in_use_refuses_to_start(self):
        """--grpc-listen on a port already taken: sbxd says so and exits non-zero."""
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        try:
            import tempfile
            import shutil
            tmp = os.path.realpath(tempfile.mkdtemp(prefix="sbxd-grpc-busy-"))
            try:
                os.mkdir(os.path.join(tmp, "ws"))
                r = subprocess.run(common.wrap_words() + [
                    common.sbxd_bin(), "--listen", "127.0.0.1:0", "--grpc-listen",
                    "127.0.0.1:%d" % s.getsockname()[1], "--workspace",
                    os.path.join(tmp, "ws"), "--log-format", "json"],
                    capture_output=True, timeout=30, cwd="/", stdin=subprocess.DEVNULL,
                    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
                self.assertNotEqual(r.returncode, 0)
                self.assertIn(b"grpc", r.stderr.lower())
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        finally:
            s.close()
