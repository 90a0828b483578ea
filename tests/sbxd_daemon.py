"""A real sbxd for the Python tiers (tests/conformance, tests/grpc): started on 127.0.0.1
with ephemeral REST and gRPC ports, a fresh workspace and a clean environment, found ready
by its JSON "listening" log line, stopped with SIGTERM and checked to exit 0 with no
sanitizer report. Every daemon still running when the tests end is stopped (atexit), and
one whose test runner dies goes with it (PR_SET_PDEATHSIG).

Standard library only.
"""

import atexit
import ctypes
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

# sbxd must log "listening" within this many seconds (sanitizer builds and gVisor start
# slowly), and exit within this many after SIGTERM.
START_TIMEOUT = 20.0
STOP_TIMEOUT = 20.0

_PR_SET_PDEATHSIG = 1
_live = []  # every Daemon started and not yet stopped, for the atexit sweep


def _child_setup():
    # If the test runner dies half-way, its daemons go with it (and drain first).
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except Exception:
        pass


class Daemon:
    """A real sbxd (the binary at `binary`, run inside the command `wrap` when given, e.g.
    runsc do) with a fresh workspace: <tmp>/ws, <tmp> a fresh mkdtemp directory that also
    holds the log, so a path that climbs one level out of the workspace lands in <tmp>/,
    which the tests own and can inspect. workspace_flag=False gives no --workspace: the
    caller then says where it is through env (SANDBOX_BASE_DIR). In env values, "{ws}"
    stands for the workspace. port and grpc_port are the listeners' ports once started."""

    def __init__(self, binary, env=None, args=None, workspace_flag=True, name="sbxd",
                 prefix="sbxd-test-", wrap=(), base_env=None):
        self.name = name
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix=prefix))
        # The command user (uid 1000) must be able to reach the workspace below it.
        os.chmod(self.tmp, 0o755)
        self.ws = os.path.join(self.tmp, "ws")
        os.mkdir(self.ws, 0o755)
        self.log_path = os.path.join(self.tmp, "sbxd.log")
        self.binary = binary
        self.proc = None
        self.port = None
        self.grpc_port = None
        self.exit_status = None
        self.final_log = ""
        argv = list(wrap) + [binary, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
                             "--log-format", "json"]
        if workspace_flag:
            argv += ["--workspace", self.ws]
        argv += list(args or [])
        # A clean environment: only what the test says (and the sanitizer options of an
        # ASan build), so that what sbxd and its commands see is what the test set.
        denv = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
        denv.update(base_env or {})
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):
            if k in os.environ:
                denv[k] = os.environ[k]
        for k, v in (env or {}).items():
            denv[k] = v.replace("{ws}", self.ws) if isinstance(v, str) else v
        self.env = denv
        self.argv = argv
        try:
            self._start()
        except BaseException:
            self.kill()
            raise

    def _start(self):
        if not os.access(self.binary, os.X_OK):
            raise RuntimeError("no sbxd binary at %s (build it, or set SBXD_BIN)" % self.binary)
        logf = open(self.log_path, "wb")
        try:
            self.proc = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=logf,
                                         close_fds=True, preexec_fn=_child_setup, cwd="/")
        finally:
            logf.close()
        _live.append(self)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            for ev in self.log_events():
                if ev.get("event") == "listening" and isinstance(ev.get("port"), int):
                    self.port = ev["port"]
                    if isinstance(ev.get("grpc_port"), int):
                        self.grpc_port = ev["grpc_port"]
                    self._listening(ev)
                    return
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited during start-up (status %s):\n%s" %
                                   (self.name, self.proc.returncode, self.log_text()))
            time.sleep(0.01)
        raise RuntimeError("%s did not log \"listening\" within %.0f s:\n%s" %
                           (self.name, START_TIMEOUT, self.log_text()))

    def _listening(self, ev):
        """Called once sbxd has logged "listening" (ev): a subclass's own checks."""

    def _closing(self):
        """Called before the SIGTERM of stop() and kill(): a subclass lets go of its
        connections."""

    # -- the log --------------------------------------------------------------------

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except (OSError, TypeError):
            return ""

    def log_events(self):
        evs = []
        for line in self.log_text().splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    evs.append(json.loads(line))
                except ValueError:
                    pass
        return evs

    @staticmethod
    def sanitizer_report_in(log):
        return any(s in log for s in ("AddressSanitizer", "LeakSanitizer", "runtime error:"))

    def sanitizer_report(self):
        return self.sanitizer_report_in(self.log_text())

    # -- stopping -------------------------------------------------------------------

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def _terminate(self):
        """SIGTERM and wait; SIGKILL after STOP_TIMEOUT. The exit status (None: killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def stop(self):
        """SIGTERM, wait, remove the temporary directory. Returns the exit status
        (negative: killed by that signal; None: had to be SIGKILLed after STOP_TIMEOUT).
        final_log keeps the log, with what sbxd wrote at its exit (LeakSanitizer's)."""
        self._closing()
        self.exit_status = self._terminate()
        self.final_log = self.log_text()
        self._cleanup()
        return self.exit_status

    def kill(self):
        try:
            self._closing()
        except Exception:
            pass
        self._terminate()
        self._cleanup()

    def _cleanup(self):
        if self in _live:
            _live.remove(self)
        if self.tmp and os.path.isdir(self.tmp):
            shutil.rmtree(self.tmp, ignore_errors=True)
            if os.path.exists(self.tmp):  # a read-only directory a command made
                subprocess.call(["chmod", "-R", "u+rwx", self.tmp])
                shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp = None

    def stop_checked(self, already_stopping=False):
        """stop(), then the reasons it did not stop cleanly ([] when it did).
        already_stopping: the test sent the SIGTERM itself (it may have exited)."""
        problems = []
        if not already_stopping and self.proc is not None and self.proc.poll() is not None:
            problems.append("%s had exited before the SIGTERM (status %s)" %
                            (self.name, self.proc.returncode))
        status = self.stop()
        log = self.final_log
        if status != 0 and not problems:
            problems.append("%s did not exit 0 after SIGTERM (status %s)" % (self.name, status))
        if self.sanitizer_report_in(log):
            problems.append("%s logged a sanitizer report:\n%s" % (self.name, log))
        elif problems:
            problems.append("its log:\n" + log[-4000:])
        return problems


def _sweep():
    for d in list(_live):
        d.kill()


atexit.register(_sweep)
