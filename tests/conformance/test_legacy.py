"""The legacy agent-sandbox python-runtime API (GET /, POST /execute, POST /upload,
GET /download|/list|/exists/{path}): exact statuses and bodies, as /tmp/pyrt/main.py
answers them and as docs/api.md's compatibility section promises."""

import json
import os
import re
import time
import unittest

import common
from common import DaemonTestCase, multipart, quote

ACCESS_DENIED = {"message": "Access denied"}
FILE_NOT_FOUND = {"message": "File not found"}
NOT_A_DIRECTORY = {"message": "Path is not a directory"}
FAILED_PREFIX = "Failed to execute command: "
ROUTER_HEADERS = {
    "X-Sandbox-ID": "sbx-1234",
    "X-Sandbox-Namespace": "team-a",
    "X-Sandbox-Port": "8888",
    "X-Sandbox-Whatever": "anything at all",
    "X-Sandbox-Timeout": "60",
    "X-Sandbox-Pod-IP": "10.0.0.7",
}


class LegacyCase(common.SharedDaemonCase):
    """Helpers over a daemon (the shared one unless the class starts its own)."""

    # -- calls ----------------------------------------------------------------------

    def get(self, target, headers=None):
        return self.d.request("GET", target, headers=headers)

    def execute_raw(self, body_bytes, headers=None, timeout=common.HTTP_TIMEOUT):
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        return self.d.request("POST", "/execute", body=body_bytes, headers=h, timeout=timeout)

    def execute(self, command, headers=None, timeout=common.HTTP_TIMEOUT):
        """POST /execute {"command": ...}: asserts 200 and the legacy result shape."""
        r = self.execute_raw(json.dumps({"command": command}).encode(), headers, timeout)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.content_type(), "application/json", r)
        res = r.json()
        self.assert_execute_shape(res)
        return res

    def assert_execute_shape(self, res):
        self.assertIsInstance(res, dict)
        for k in ("stdout", "stderr", "exit_code"):
            self.assertIn(k, res)
        self.assertIsInstance(res["stdout"], str)
        self.assertIsInstance(res["stderr"], str)
        self.assertIsInstance(res["exit_code"], int)
        self.assertNotIsInstance(res["exit_code"], bool)

    def upload_raw(self, filename, data, part_type=None, headers=None):
        body, ctype = multipart([("file", filename, data, part_type)])
        h = {"Content-Type": ctype}
        h.update(headers or {})
        return self.d.request("POST", "/upload", body=body, headers=h)

    def upload(self, filename, data, part_type=None):
        """An upload that must succeed with the python-runtime's exact answer."""
        r = self.upload_raw(filename, data, part_type)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.content_type(), "application/json", r)
        self.assertEqual(r.json(), {"message": "File '%s' uploaded successfully." % filename})
        return r

    def download(self, path_in_url):
        return self.get("/download/" + path_in_url)

    def assert_json(self, r, status, body):
        self.assertEqual(r.status, status, r)
        self.assertEqual(r.content_type(), "application/json", r)
        self.assertEqual(r.json(), body)

    def assert_download(self, path_in_url, data):
        r = self.download(path_in_url)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.content_type(), "application/octet-stream", r)
        self.assertEqual(r.body, data)
        return r

    def on_disk(self, rel):
        return os.path.join(self.ws, rel)

    def listable(self, directory):
        """The names a listing shows: all but symlinks that lead out of the workspace,
        are absolute, or lead to nothing."""
        ws = os.path.realpath(self.ws)
        out = set()
        for n in os.listdir(directory):
            p = os.path.join(directory, n)
            if os.path.islink(p):
                target = os.path.realpath(p)
                if (os.readlink(p).startswith("/") or not os.path.exists(target) or
                        os.path.commonpath([ws, target]) != ws):
                    continue
            out.add(n)
        return out

    def read_disk(self, rel):
        with open(self.on_disk(rel), "rb") as f:
            return f.read()


# ---------------------------------------------------------------------------------------


class TestRoot(LegacyCase):
    def test_root_is_ok(self):
        r = self.get("/")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.content_type(), "application/json", r)
        body = r.json()
        self.assertEqual(body.get("status"), "ok")
        self.assertIsInstance(body.get("message"), str)


class TestExecute(LegacyCase):
    def test_execute_echo_hello(self):
        res = self.execute("echo hello")
        self.assertEqual(res["stdout"], "hello\n")
        self.assertEqual(res["stderr"], "")
        self.assertEqual(res["exit_code"], 0)

    def test_execute_exit_code_3(self):
        # Works the same under shlex.split (python-runtime) and /bin/sh -c (sbxd).
        res = self.execute("sh -c 'exit 3'")
        self.assertEqual(res["exit_code"], 3)

    def test_execute_stderr_captured(self):
        res = self.execute("sh -c 'echo oops >&2; echo out'")
        self.assertEqual(res["stderr"], "oops\n")
        self.assertEqual(res["stdout"], "out\n")
        self.assertEqual(res["exit_code"], 0)

    def test_execute_shell_pipes_and_redirections(self):
        res = self.execute("echo a b c | wc -w > count.txt; cat count.txt; rm count.txt")
        self.assertEqual(res["stdout"].strip(), "3")
        self.assertEqual(res["exit_code"], 0)

    def test_execute_missing_program_is_nonzero(self):
        res = self.execute("no-such-program-xyz")
        self.assertNotEqual(res["exit_code"], 0)
        self.assertEqual(res["stdout"], "")

    def test_execute_command_over_arg_limit_is_failed_to_execute(self):
        # Over the kernel's 128 KiB single-argument limit: cannot be started at all.
        command = "echo " + "x" * 200000
        res = self.execute(command, timeout=30)
        self.assertEqual(res["exit_code"], 1, res)
        self.assertEqual(res["stdout"], "")
        self.assertTrue(res["stderr"].startswith(FAILED_PREFIX), res["stderr"][:200])
        self.assertGreater(len(res["stderr"]), len(FAILED_PREFIX), "no reason after the prefix")

    def test_execute_nul_in_command_is_failed_to_execute(self):
        body = json.dumps({"command": "echo\u0000x"}).encode()
        self.assertIn(b"\\u0000", body)
        r = self.execute_raw(body)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.content_type(), "application/json", r)
        res = r.json()
        self.assert_execute_shape(res)
        self.assertEqual(res["exit_code"], 1, res)
        self.assertEqual(res["stdout"], "")
        self.assertTrue(res["stderr"].startswith(FAILED_PREFIX), res["stderr"][:200])

    def test_execute_empty_command_is_failed_to_execute(self):
        # The python-runtime could not run "" either (shlex.split gives no program).
        res = self.execute("")
        self.assertEqual(res["exit_code"], 1, res)
        self.assertEqual(res["stdout"], "")
        self.assertTrue(res["stderr"].startswith(FAILED_PREFIX), res["stderr"][:200])

    def test_execute_with_other_fields_is_full_execute(self):
        # Any field besides command: the full /execute, whose bad requests are 4xx errors.
        body = json.dumps({"command": "echo\u0000x", "timeout_ms": 1000}).encode()
        r = self.execute_raw(body)
        self.assertEqual(r.status, 400, r)
        self.assertEqual(r.content_type(), "application/json", r)
        err = r.json()
        self.assertEqual(err.get("code"), "INVALID_ARGUMENT", err)
        self.assertIsInstance(err.get("message"), str)
        r = self.execute_raw(json.dumps({"command": "echo full", "timeout_ms": 5000}).encode())
        self.assertEqual(r.status, 200, r)
        res = r.json()
        self.assert_execute_shape(res)
        self.assertEqual(res["stdout"], "full\n")

    def test_execute_router_headers_ignored(self):
        plain = self.execute("echo same; sh -c 'exit 4'")
        routed = self.execute("echo same; sh -c 'exit 4'", headers=ROUTER_HEADERS)
        for k in ("stdout", "stderr", "exit_code"):
            self.assertEqual(plain[k], routed[k], k)
        self.assertEqual(routed["stdout"], "same\n")
        self.assertEqual(routed["exit_code"], 4)

    def test_execute_runs_in_workspace(self):
        res = self.execute("pwd")
        self.assertEqual(res["exit_code"], 0, res)
        self.assertEqual(res["stdout"], os.path.realpath(self.ws) + "\n")

    def test_execute_sees_uploaded_file(self):
        self.upload("exec-input.txt", b"from upload\n")
        res = self.execute("cat exec-input.txt")
        self.assertEqual(res["stdout"], "from upload\n")
        self.assertEqual(res["exit_code"], 0)


class TestExecuteTimeoutEnv(DaemonTestCase, LegacyCase):
    """A daemon whose default timeout is 1 s (the python-runtime's variable) and whose
    largest is 1 s too."""

    DAEMON_ENV = {"SANDBOX_EXEC_TIMEOUT_SECONDS": "1"}
    DAEMON_ARGS = ["--max-timeout-ms", "1000"]

    def test_execute_sandbox_exec_timeout_seconds(self):
        t0 = time.monotonic()
        res = self.execute("sleep 5", timeout=15)
        elapsed = time.monotonic() - t0
        self.assertLess(elapsed, 3.0, "sleep 5 was not stopped by the 1 s timeout")
        self.assertGreaterEqual(elapsed, 0.9, "answered before the 1 s timeout")
        self.assertNotEqual(res["exit_code"], 0, res)

    def test_execute_short_command_within_timeout(self):
        res = self.execute("echo quick")
        self.assertEqual(res["stdout"], "quick\n")
        self.assertEqual(res["exit_code"], 0)

    def test_execute_timeout_says_so_in_stderr(self):
        """As the python-runtime reports a subprocess.TimeoutExpired: exit_code 1 and
        stderr saying "Failed to execute command: Command '...' timed out after N seconds";
        sbxd keeps the output the command made before."""
        command = "echo partial; echo warn >&2; sleep 5"
        res = self.execute(command, timeout=15)
        self.assertEqual(res["exit_code"], 1, res)
        self.assertEqual(res["stdout"], "partial\n", res)
        self.assertEqual(res["stderr"], "warn\n" + FAILED_PREFIX +
                         "Command '%s' timed out after 1.0 seconds" % command, res)
        self.assertEqual((res.get("status"), res.get("timed_out")), ("timeout", True), res)

    def test_execute_x_sandbox_timeout_capped_at_max_timeout(self):
        """The SDK's X-Sandbox-Timeout never lifts a command past --max-timeout-ms."""
        t0 = time.monotonic()
        res = self.execute("sleep 5", headers=dict(ROUTER_HEADERS, **{"X-Sandbox-Timeout": "30"}),
                           timeout=15)
        self.assertLess(time.monotonic() - t0, 3.0, "sleep 5 outlived the 1 s maximum")
        self.assertEqual(res["exit_code"], 1, res)
        self.assertTrue(res["stderr"].endswith("timed out after 1.0 seconds"), res)


class TestExecuteSdkTimeout(LegacyCase):
    """The SDK's commands.run(command, timeout=T) sends X-Sandbox-Timeout: str(T) (connector.py,
    _router_timeout_header_value): the command's timeout is T seconds."""

    def sdk_headers(self, value):
        return dict(ROUTER_HEADERS, **{"X-Sandbox-Timeout": value})

    def test_execute_default_timeout_is_300_s(self):
        """The python-runtime's SANDBOX_EXEC_TIMEOUT_SECONDS default: 300 s."""
        import subprocess
        p = subprocess.run([common.sbxd_bin(), "--help"], capture_output=True, text=True,
                           timeout=10)
        self.assertEqual(p.returncode, 0, p.stderr)
        m = re.search(r"--timeout-ms MS .*?default (\d+)\n", p.stdout, re.S)
        self.assertIsNotNone(m, p.stdout[:2000])
        self.assertEqual(m.group(1), "300000")

    def test_execute_x_sandbox_timeout_ends_the_command(self):
        t0 = time.monotonic()
        res = self.execute("echo partial; sleep 5", headers=self.sdk_headers("0.5"), timeout=15)
        elapsed = time.monotonic() - t0
        self.assertLess(elapsed, 3.0, "sleep 5 was not stopped by X-Sandbox-Timeout: 0.5")
        # It ends a twentieth of T before T: the SDK reads for T seconds, then sends it again.
        self.assertGreaterEqual(elapsed, 0.45, "answered well before the 0.5 s timeout")
        self.assertEqual(res["exit_code"], 1, res)
        self.assertEqual(res["stdout"], "partial\n", res)
        self.assertEqual(res["stderr"], FAILED_PREFIX + "Command 'echo partial; sleep 5' timed out "
                         "after 0.475 seconds", res)

    def test_execute_x_sandbox_timeout_not_a_positive_number_ignored(self):
        """Values the SDK never sends (it drops bools, <= 0, nan and inf) leave the default."""
        for v in ("abc", "0", "-1", "-0.5", "nan", "inf", "1e999", "0x10", "1s", "", "1.5.2"):
            with self.subTest(value=v):
                res = self.execute("sleep 0.05; echo ok", headers=self.sdk_headers(v))
                self.assertEqual((res["stdout"], res["exit_code"]), ("ok\n", 0), res)

    def test_native_execute_takes_x_sandbox_timeout_without_timeout_ms(self):
        """The native /execute (any field besides command) keeps its own result: status
        timeout, 128+9, stderr as the command left it."""
        body = json.dumps({"command": "echo partial; sleep 5", "encoding": "utf8"}).encode()
        t0 = time.monotonic()
        r = self.execute_raw(body, headers=self.sdk_headers("0.5"), timeout=15)
        self.assertLess(time.monotonic() - t0, 3.0, "sleep 5 was not stopped by the header")
        self.assertEqual(r.status, 200, r)
        res = r.json()
        self.assertEqual((res["status"], res["timed_out"], res["exit_code"], res["signal"]),
                         ("timeout", True, 137, 9), res)
        self.assertEqual((res["stdout"], res["stderr"]), ("partial\n", ""), res)

    def test_native_execute_timeout_ms_wins_over_x_sandbox_timeout(self):
        body = json.dumps({"command": "sleep 0.3; echo ok", "timeout_ms": 10000}).encode()
        r = self.execute_raw(body, headers=self.sdk_headers("0.1"), timeout=15)
        self.assertEqual(r.status, 200, r)
        res = r.json()
        self.assertEqual((res["status"], res["stdout"], res["exit_code"]), ("exited", "ok\n", 0),
                         res)


class TestExecuteSignalExitCode(LegacyCase):
    def test_execute_killed_by_signal_is_minus_n(self):
        """subprocess's returncode, as the python-runtime answers it: -N after signal N."""
        for sig, n in (("KILL", 9), ("TERM", 15), ("INT", 2)):
            with self.subTest(signal=sig):
                res = self.execute("echo before; kill -%s $$" % sig)
                self.assertEqual((res["exit_code"], res["stdout"]), (-n, "before\n"), res)
                self.assertEqual((res.get("status"), res.get("signal")), ("signaled", n), res)

    def test_native_execute_killed_by_signal_is_128_plus_n(self):
        body = json.dumps({"command": "kill -TERM $$", "encoding": "utf8"}).encode()
        r = self.execute_raw(body)
        self.assertEqual(r.status, 200, r)
        res = r.json()
        self.assertEqual((res["exit_code"], res["signal"], res["status"]), (143, 15, "signaled"),
                         res)


class TestUpload(LegacyCase):
    def test_upload_simple_file(self):
        data = b"hello world\n"
        self.upload("hello.txt", data)
        self.assert_download("hello.txt", data)
        self.assertEqual(self.read_disk("hello.txt"), data)

    def test_upload_owned_by_command_user(self):
        if os.geteuid() != 0:
            self.skipTest("sbxd switches to the command user only when run as root")
        self.upload("owned.txt", b"mine\n")
        st = os.stat(self.on_disk("owned.txt"))
        self.assertEqual((st.st_uid, st.st_gid), (1000, 1000))
        res = self.execute("echo more >> owned.txt && cat owned.txt")
        self.assertEqual(res["stdout"], "mine\nmore\n", res)

    def test_upload_with_part_content_type(self):
        self.upload("typed.csv", b"a,b\n1,2\n", part_type="text/csv")
        self.assert_download("typed.csv", b"a,b\n1,2\n")

    def test_upload_creates_parent_directories(self):
        data = b"id,value\n1,42\n"
        self.upload("data/sub/input.csv", data)
        self.assertTrue(os.path.isdir(self.on_disk("data/sub")))
        self.assertEqual(self.read_disk("data/sub/input.csv"), data)
        self.assert_download(quote("data/sub/input.csv"), data)

    def test_upload_retried_identical(self):
        data = b"retry me\n"
        self.upload("retry/same.txt", data)
        self.upload("retry/same.txt", data)
        self.assert_download(quote("retry/same.txt"), data)
        self.assertEqual(sorted(os.listdir(self.on_disk("retry"))), ["same.txt"],
                         "a retried upload left a temporary file behind")

    def test_upload_overwrites(self):
        self.upload("over.txt", b"old content, longer than the new\n")
        self.upload("over.txt", b"new\n")
        self.assert_download("over.txt", b"new\n")

    def test_upload_replace_is_atomic(self):
        n = 512 * 1024
        contents = (b"a" * n, b"b" * (n - 1) + b"\n")
        self.upload("atomic/legacy.bin", contents[0])

        def write(data):
            r = self.upload_raw("atomic/legacy.bin", data)
            self.assertEqual(r.status, 200, r)

        def read():
            r = self.download(quote("atomic/legacy.bin"))
            self.assertEqual(r.status, 200, r)
            return r.body

        reads, bad = common.race_reader_writer(write, read, contents, rounds=40)
        self.assertEqual(bad, [], "a download saw a partly written file")
        self.assertGreater(reads, 0)
        self.assertEqual(os.listdir(self.on_disk("atomic")), ["legacy.bin"],
                         "a temporary file was left behind")

    def test_upload_dotdot_denied(self):
        outside = os.path.join(os.path.dirname(self.ws), "escape.txt")
        self.assertFalse(os.path.exists(outside))
        r = self.upload_raw("../escape.txt", b"escaped\n")
        self.assert_json(r, 403, ACCESS_DENIED)
        self.assertFalse(os.path.exists(outside), "written outside the workspace")

    def test_upload_nested_dotdot_denied(self):
        outside = os.path.join(os.path.dirname(self.ws), "escape2.txt")
        r = self.upload_raw("data/../../escape2.txt", b"escaped\n")
        self.assert_json(r, 403, ACCESS_DENIED)
        self.assertFalse(os.path.exists(outside), "written outside the workspace")
        self.assertFalse(os.path.exists(self.on_disk("escape2.txt")))

    def test_upload_through_symlink_out_denied(self):
        outside_dir = os.path.join(os.path.dirname(self.ws), "outdir-upload")
        os.mkdir(outside_dir)
        try:
            os.chmod(outside_dir, 0o777)
            res = self.execute("ln -sfn %s linkout-upload" % outside_dir)
            self.assertEqual(res["exit_code"], 0, res)
            r = self.upload_raw("linkout-upload/x.txt", b"escaped\n")
            self.assert_json(r, 403, ACCESS_DENIED)
            self.assertEqual(os.listdir(outside_dir), [], "written through the symlink")
        finally:
            for n in os.listdir(outside_dir):
                os.unlink(os.path.join(outside_dir, n))
            os.rmdir(outside_dir)

    def test_upload_absolute_filename_rerooted(self):
        existed = os.path.exists("/abs/x.txt")
        self.upload("/abs/x.txt", b"rerooted\n")
        self.assertEqual(self.read_disk("abs/x.txt"), b"rerooted\n")
        if not existed:
            self.assertFalse(os.path.exists("/abs/x.txt"), "written at the host's /abs")
        self.assert_download(quote("abs/x.txt"), b"rerooted\n")

    def test_upload_binary_roundtrip(self):
        data = bytes(range(256)) * 16 + b"\r\n--not-a-boundary\r\n" + bytes(range(255, -1, -1))
        self.upload("bin/all-bytes.bin", data)
        self.assertEqual(self.read_disk("bin/all-bytes.bin"), data)
        self.assert_download(quote("bin/all-bytes.bin"), data)

    def test_upload_unicode_filename(self):
        # requests puts a non-ASCII filename into the part header as raw UTF-8.
        name = "unicode/d\u00e9j\u00e0 vu \u00fc.txt"
        self.upload(name, b"accents\n")
        self.assertEqual(self.read_disk(name), b"accents\n")
        self.assert_download(quote(name), b"accents\n")
        self.assert_json(self.get("/exists/" + quote(name)), 200, {"path": name, "exists": True})

    def test_upload_empty_file(self):
        self.upload("empty.txt", b"")
        self.assert_download("empty.txt", b"")


class TestDownload(LegacyCase):
    def setUp(self):
        self.upload("hello.txt", b"hello world\n")
        self.upload("data/sub/input.csv", b"id,value\n1,42\n")

    def test_download_encoded_slashes(self):
        r = self.assert_download("data%2Fsub%2Finput.csv", b"id,value\n1,42\n")
        self.assertEqual(r.header("Content-Disposition"),
                         'attachment; filename="data/sub/input.csv"')
        self.assertEqual(r.header("Content-Length"), str(len(b"id,value\n1,42\n")))

    def test_download_missing_is_404(self):
        self.assert_json(self.download("no-such-file.txt"), 404, FILE_NOT_FOUND)
        self.assert_json(self.download(quote("data/sub/nothing.csv")), 404, FILE_NOT_FOUND)

    def test_download_directory_is_404(self):
        self.assert_json(self.download("data"), 404, FILE_NOT_FOUND)
        self.assert_json(self.download(quote("data/sub")), 404, FILE_NOT_FOUND)

    def test_download_root_is_404(self):
        self.assert_json(self.download(""), 404, FILE_NOT_FOUND)

    def test_download_traversal_is_403(self):
        self.assert_json(self.download("..%2F..%2Fetc%2Fpasswd"), 403, ACCESS_DENIED)
        self.assert_json(self.download("%2E%2E%2Fsbxd.log"), 403, ACCESS_DENIED)
        self.assert_json(self.download(quote("data/../../sbxd.log")), 403, ACCESS_DENIED)

    def test_download_leading_slash_rerooted(self):
        self.assert_download("%2Fhello.txt", b"hello world\n")

    def test_download_absolute_host_path_rerooted(self):
        # /etc/passwd is <workspace>/etc/passwd: absent there, so 404, never the host's.
        self.assert_json(self.download("%2Fetc%2Fpasswd"), 404, FILE_NOT_FOUND)

    def test_download_symlink_out_is_403(self):
        res = self.execute("ln -sf /etc/passwd leak-abs && ln -sf ../../../../etc/passwd leak-rel")
        self.assertEqual(res["exit_code"], 0, res)
        self.assert_json(self.download("leak-abs"), 403, ACCESS_DENIED)
        self.assert_json(self.download("leak-rel"), 403, ACCESS_DENIED)

    def test_download_content_disposition_no_header_injection(self):
        res = self.execute("printf hi > \"$(printf 'inj\\r\\nX-Injected: 1')\" && "
                           "printf q > 'q\"uote.txt'")
        self.assertEqual(res["exit_code"], 0, res)
        self.assertIn("inj\r\nX-Injected: 1", os.listdir(self.ws))
        r = self.assert_download(quote("inj\r\nX-Injected: 1"), b"hi")
        self.assertIsNone(r.header("X-Injected"), "a file name injected a response header")
        cd = r.header("Content-Disposition") or ""
        self.assertNotIn("\r", cd)
        self.assertNotIn("\n", cd)
        self.assertTrue(cd.startswith('attachment; filename="'), cd)
        r = self.assert_download(quote('q"uote.txt'), b"q")
        cd = r.header("Content-Disposition") or ""
        self.assertTrue(cd.startswith('attachment; filename="') and cd.endswith('"'), cd)
        self.assertEqual(cd.count('"') - cd.count('\\"'), 2, "unescaped quote: " + cd)

    def test_download_symlink_inside_followed(self):
        res = self.execute("ln -sf hello.txt hello-link")
        self.assertEqual(res["exit_code"], 0, res)
        self.assert_download("hello-link", b"hello world\n")


class TestList(LegacyCase):
    def setUp(self):
        self.upload("hello.txt", b"hello world\n")
        self.upload("data/sub/input.csv", b"id,value\n1,42\n")

    def assert_entries(self, r):
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.content_type(), "application/json", r)
        entries = r.json()
        self.assertIsInstance(entries, list)
        for e in entries:
            self.assertIsInstance(e, dict)
            self.assertEqual(set(e), {"name", "size", "type", "mod_time"}, e)
            self.assertIsInstance(e["name"], str)
            self.assertIsInstance(e["size"], int, e)
            self.assertNotIsInstance(e["size"], bool, e)
            self.assertIn(e["type"], ("file", "directory"), e)
            self.assertIsInstance(e["mod_time"], (int, float), e)
            self.assertNotIsInstance(e["mod_time"], bool, e)
        return {e["name"]: e for e in entries}

    def test_list_root_forms(self):
        for target in ("/list/", "/list/.", "/list/%2E"):
            with self.subTest(target=target):
                byname = self.assert_entries(self.get(target))
                self.assertIn("hello.txt", byname)
                self.assertEqual(byname["hello.txt"]["type"], "file")
                self.assertEqual(byname["hello.txt"]["size"], len(b"hello world\n"))
                self.assertIn("data", byname)
                self.assertEqual(byname["data"]["type"], "directory")
                # every entry but the links out of the workspace or to nothing (other
                # tests of the shared workspace make some), which listings leave out
                self.assertEqual(set(byname), self.listable(self.ws))

    def test_list_mod_time_is_epoch_seconds(self):
        byname = self.assert_entries(self.get("/list/"))
        st = os.stat(self.on_disk("hello.txt"))
        self.assertAlmostEqual(byname["hello.txt"]["mod_time"], st.st_mtime, delta=1.0)
        self.assertLess(abs(byname["hello.txt"]["mod_time"] - time.time()), 24 * 3600)

    def test_list_subdirectory(self):
        byname = self.assert_entries(self.get("/list/data%2Fsub"))
        self.assertEqual(list(byname), ["input.csv"])
        self.assertEqual(byname["input.csv"]["type"], "file")
        self.assertEqual(byname["input.csv"]["size"], len(b"id,value\n1,42\n"))

    def test_list_file_is_404(self):
        self.assert_json(self.get("/list/hello.txt"), 404, NOT_A_DIRECTORY)

    def test_list_missing_is_404(self):
        self.assert_json(self.get("/list/no-such-dir"), 404, NOT_A_DIRECTORY)

    def test_list_traversal_is_403(self):
        self.assert_json(self.get("/list/.."), 403, ACCESS_DENIED)
        self.assert_json(self.get("/list/..%2F.."), 403, ACCESS_DENIED)
        self.assert_json(self.get("/list/%2E%2E%2F%2E%2E%2Fetc"), 403, ACCESS_DENIED)

    def test_list_symlink_out_is_403(self):
        res = self.execute("ln -sfn /etc list-etc-link")
        self.assertEqual(res["exit_code"], 0, res)
        self.assert_json(self.get("/list/list-etc-link"), 403, ACCESS_DENIED)

    def test_list_symlink_entries_typed(self):
        res = self.execute("mkdir -p lnk && cd lnk && echo x > f && mkdir -p d && "
                           "ln -sf f to-file && ln -sfn d to-dir")
        self.assertEqual(res["exit_code"], 0, res)
        byname = self.assert_entries(self.get("/list/lnk"))
        self.assertEqual(set(byname), {"f", "d", "to-file", "to-dir"})
        self.assertEqual(byname["f"]["type"], "file")
        self.assertEqual(byname["d"]["type"], "directory")

    def test_list_symlink_inside_described_as_target(self):
        # The python-runtime lists with os.scandir: entry.is_dir() and entry.stat() follow
        # a symlink, so one to a directory is a "directory" and one to a file has the
        # file's size (a client then lists or downloads it accordingly).
        res = self.execute("mkdir -p lnk2 && cd lnk2 && printf 'twelve bytes' > f && "
                           "mkdir -p d && ln -sf f to-file && ln -sfn d to-dir")
        self.assertEqual(res["exit_code"], 0, res)
        byname = self.assert_entries(self.get("/list/lnk2"))
        self.assertEqual(byname["to-dir"]["type"], "directory", byname["to-dir"])
        self.assertEqual(byname["to-file"]["type"], "file", byname["to-file"])
        self.assertEqual(byname["to-file"]["size"], 12, byname["to-file"])


    def test_list_omits_links_out_and_broken(self):
        # One rule on every listing face (the reference's TestDirectoryListingOmitsEscaping
        # Symlinks): a link inside is its target; one out of the workspace, absolute, or to
        # nothing is left out (the python-runtime's os.scandir fails the whole listing on a
        # broken one, and describes what an escaping one points to).
        res = self.execute("mkdir -p lnk3 && cd lnk3 && echo x > f && ln -sf f in && "
                           "ln -sf nowhere broken && ln -sfn /etc abs && ln -sf ../../x out")
        self.assertEqual(res["exit_code"], 0, res)
        byname = self.assert_entries(self.get("/list/lnk3"))
        self.assertEqual(set(byname), {"f", "in"})
        self.assertEqual(byname["in"]["type"], "file")


class TestExists(LegacyCase):
    def setUp(self):
        self.upload("hello.txt", b"hello world\n")
        self.upload("data/sub/input.csv", b"id,value\n1,42\n")

    def test_exists_file(self):
        self.assert_json(self.get("/exists/hello.txt"), 200, {"path": "hello.txt", "exists": True})

    def test_exists_missing(self):
        self.assert_json(self.get("/exists/nope"), 200, {"path": "nope", "exists": False})

    def test_exists_root(self):
        self.assert_json(self.get("/exists/."), 200, {"path": ".", "exists": True})
        self.assert_json(self.get("/exists/"), 200, {"path": "", "exists": True})
        self.assert_json(self.get("/exists/%2E"), 200, {"path": ".", "exists": True})

    def test_exists_directory(self):
        self.assert_json(self.get("/exists/data"), 200, {"path": "data", "exists": True})

    def test_exists_decoded_path(self):
        self.assert_json(self.get("/exists/data%2Fsub%2Finput.csv"), 200,
                         {"path": "data/sub/input.csv", "exists": True})

    def test_exists_leading_slash(self):
        self.assert_json(self.get("/exists/%2Fhello.txt"), 200,
                         {"path": "/hello.txt", "exists": True})

    def test_exists_traversal_is_403(self):
        self.assert_json(self.get("/exists/..%2F..%2Fetc%2Fpasswd"), 403, ACCESS_DENIED)
        self.assert_json(self.get("/exists/%2E%2E"), 403, ACCESS_DENIED)

    def test_exists_symlink_out_is_403(self):
        res = self.execute("ln -sf /etc/passwd exists-leak")
        self.assertEqual(res["exit_code"], 0, res)
        self.assert_json(self.get("/exists/exists-leak"), 403, ACCESS_DENIED)


# A line of UTF-8 text of 18 bytes (three characters of two bytes, one of three): output
# made of it shows a character split at a piece's or a cap's edge.
TEXT_LINE = "h\u00e9llo w\u00f6rld \u2713\n"
TEXT_LINE_BYTES = 18


def text_output(nbytes):
    """(shell command printing about nbytes of TEXT_LINE lines, the text it prints)."""
    n = nbytes // TEXT_LINE_BYTES + 1
    return "yes '%s' | head -n %d" % (TEXT_LINE[:-1], n), TEXT_LINE * n


class TestExecuteLargeOutput(LegacyCase):
    """The SDK reads stdout, stderr and exit_code of the legacy shape and nothing else: it
    gets output well beyond --max-output-bytes (1 MiB) whole, as the python runtime gives it
    (up to --sdk-output-bytes, 16 MiB by default), and valid JSON whatever the size."""

    def test_execute_2mb_stdout_and_1500kb_stderr_whole(self):
        cmd_out, want_out = text_output(2 * 1000 * 1000)
        cmd_err, want_err = text_output(1500 * 1000)
        res = self.execute("%s; %s >&2" % (cmd_out, cmd_err), timeout=30)
        self.assertEqual(len(res["stdout"]), len(want_out))
        self.assertTrue(res["stdout"] == want_out, "stdout differs")
        self.assertTrue(res["stderr"] == want_err, "stderr differs: ...%r" % res["stderr"][-200:])
        self.assertEqual(res["exit_code"], 0)

    def test_execute_5mb_stdout_whole(self):
        cmd, want = text_output(5 * 1000 * 1000)
        res = self.execute(cmd + "; exit 3", timeout=30)
        self.assertEqual(len(res["stdout"]), len(want))
        self.assertTrue(res["stdout"] == want, "stdout differs")
        self.assertEqual(res["stderr"], "")
        self.assertEqual(res["exit_code"], 3)

    def test_native_execute_keeps_max_output_bytes_and_flags(self):
        """A body with more than "command" is sbxd's own /execute: its cap and its flags, no
        notice in stderr."""
        body = json.dumps({"command": "head -c 2000000 /dev/zero | tr '\\0' a",
                           "timeout_ms": 30000}).encode()
        r = self.execute_raw(body, timeout=30)
        self.assertEqual(r.status, 200, r)
        res = r.json()
        self.assertEqual(res["stdout"], "a" * (1 << 20))
        self.assertEqual(res["stderr"], "")
        self.assertTrue(res["stdout_truncated"])
        self.assertEqual(res["stdout_bytes"], 2000000)


class TestExecuteOutputCap(DaemonTestCase, LegacyCase):
    """Past --sdk-output-bytes the SDK user is told in stderr itself: a last line saying how
    many bytes of which stream were left out and which option raises the cap. The head kept
    ends on a whole character and the JSON stays valid."""

    CAP = 1500003  # 9 bytes into a line: inside its "\u00f6"
    DAEMON_ARGS = ["--sdk-output-bytes", str(CAP)]

    def test_execute_over_cap_told_in_stderr(self):
        cmd, want = text_output(2 * 1000 * 1000)
        total = len(want.encode())
        res = self.execute("%s; echo warn >&2; exit 5" % cmd, timeout=30)
        kept = want.encode()[:self.CAP - 1].decode()  # the cut character left out whole
        self.assertEqual(len(res["stdout"]), len(kept))
        self.assertTrue(res["stdout"] == kept, "stdout is not the head: ...%r" %
                        res["stdout"][-40:])
        self.assertEqual(res["exit_code"], 5)
        lines = res["stderr"].split("\n")
        self.assertEqual(lines[0], "warn", res["stderr"])
        self.assertEqual(lines[-1], "", res["stderr"])
        notice = lines[1]
        self.assertEqual(len(lines), 3, res["stderr"])
        self.assertIn("stdout cut: %d of %d bytes left out" % (total - (self.CAP - 1), total),
                      notice)
        self.assertIn("--sdk-output-bytes", notice)
        self.assertTrue(res["stdout_truncated"], res.get("stdout_truncated"))

    def test_execute_under_cap_no_notice(self):
        cmd, want = text_output(1400 * 1000)
        res = self.execute(cmd + " >&2", timeout=30)
        self.assertTrue(res["stderr"] == want, "stderr differs: ...%r" % res["stderr"][-200:])
        self.assertEqual(res["stdout"], "")


class TestExecuteOutputMemory(DaemonTestCase, LegacyCase):
    """The memory every running command shares for what it keeps beyond --max-output-bytes
    (--output-memory-bytes): none here, so a command keeps its usual head, and stderr says
    why the rest is missing."""

    DAEMON_ARGS = ["--output-memory-bytes", "0", "--max-output-bytes", "100000"]

    def test_execute_pool_dry_told_in_stderr(self):
        res = self.execute("head -c 300000 /dev/zero | tr '\\0' a; printf 'no newline' >&2",
                           timeout=30)
        self.assertEqual(res["stdout"], "a" * 100000)
        lines = res["stderr"].split("\n")
        self.assertEqual(lines[0], "no newline", res["stderr"])
        self.assertIn("stdout cut: 200000 of 300000 bytes left out", lines[1])
        self.assertIn("--output-memory-bytes", lines[1])
        self.assertEqual(lines[2:], [""], res["stderr"])


class TestSdkCalls(LegacyCase):
    """The calls exactly as the agent-sandbox Python SDK (k8s_agent_sandbox, legacy
    runtime) makes them through requests: the router headers on every call, quote(path,
    safe='') for download/list/exists, files={'file': (path, content)} for upload,
    json={'command': ...} for execute, and its parsing of the answers."""

    SDK_HEADERS = dict(ROUTER_HEADERS, **{
        "User-Agent": "python-requests/2.31.0",
        "Accept-Encoding": "gzip, deflate",
        "Accept": "*/*",
        "Connection": "keep-alive",
    })

    def send(self, method, endpoint, body=None, headers=None):
        h = dict(self.SDK_HEADERS)
        h.update(headers or {})
        r = self.d.request(method, "/" + endpoint.lstrip("/"), body=body, headers=h)
        self.assertLess(r.status, 400, r)  # the SDK raise_for_status()es
        self.assertFalse(300 <= r.status < 400, r)  # and refuses redirects
        return r

    def sdk_run(self, command):
        r = self.send("POST", "execute", json.dumps({"command": command}).encode(),
                      {"Content-Type": "application/json"})
        data = r.json()
        # ExecutionResult(**response_data): stdout str, stderr str, exit_code int.
        self.assertIsInstance(data.get("stdout", ""), str)
        self.assertIsInstance(data.get("stderr", ""), str)
        self.assertIsInstance(data.get("exit_code", -1), int)
        return data

    def sdk_write(self, path, content):
        if isinstance(content, str):
            content = content.encode("utf-8")
        body, ctype = multipart([("file", path, content)])
        self.send("POST", "upload", body, {"Content-Type": ctype})

    def sdk_read(self, path):
        return self.send("GET", "download/%s" % quote(path)).body

    def sdk_list(self, path):
        entries = self.send("GET", "list/%s" % quote(path)).json()
        import datetime
        out = []
        for e in entries or []:  # FileEntry.from_legacy
            self.assertIsInstance(e["name"], str)
            self.assertIsInstance(e["size"], int)
            self.assertIn(e["type"], ("file", "directory"))
            datetime.datetime.fromtimestamp(e.get("mod_time", 0), tz=datetime.timezone.utc)
            out.append(e)
        return out

    def sdk_exists(self, path):
        return self.send("GET", "exists/%s" % quote(path)).json().get("exists", False)

    def test_sdk_write_read_list_exists(self):
        self.sdk_write("sdk/project/main.py", "print('hello')\n")
        self.assertEqual(self.sdk_read("sdk/project/main.py"), b"print('hello')\n")
        names = {e["name"]: e for e in self.sdk_list("sdk/project")}
        self.assertEqual(set(names), {"main.py"})
        self.assertEqual(names["main.py"]["size"], len("print('hello')\n"))
        self.assertTrue(self.sdk_exists("sdk/project/main.py"))
        self.assertTrue(self.sdk_exists("sdk"))
        self.assertFalse(self.sdk_exists("sdk/project/missing.py"))

    def test_sdk_list_root(self):
        self.sdk_write("sdk-root.txt", "x")
        for path in (".", ""):
            with self.subTest(path=path):
                self.assertIn("sdk-root.txt", {e["name"] for e in self.sdk_list(path)})

    def sdk_write_unsafe(self, path, content):
        """write(path, allow_unsafe_paths=True): the filename goes as given."""
        body, ctype = multipart([("file", path, content)])
        self.send("POST", "upload", body, {"Content-Type": ctype})

    def test_sdk_absolute_workspace_paths(self):
        # An absolute path under the workspace's own path names that path inside it (the
        # reference sandboxd's SanitizePath; the python-runtime re-rooted it as
        # <base>/<base>/...): exists("/workspace/out.csv"), list("/workspace/sub").
        self.sdk_write("sdk-abs/sub/out.csv", "a,b\n")
        base = self.ws + "/sdk-abs"
        self.assertTrue(self.sdk_exists(base + "/sub/out.csv"))
        self.assertTrue(self.sdk_exists(self.ws))
        self.assertFalse(self.sdk_exists(base + "/sub/missing.csv"))
        r = self.send("GET", "exists/%s" % quote(base + "/sub/out.csv")).json()
        self.assertEqual(r, {"path": base + "/sub/out.csv", "exists": True})
        self.assertEqual([e["name"] for e in self.sdk_list(base + "/sub")], ["out.csv"])
        self.assertIn("sdk-abs", {e["name"] for e in self.sdk_list(self.ws)})
        r = self.send("GET", "download/%s" % quote(base + "/sub/out.csv"))
        self.assertEqual(r.body, b"a,b\n")
        self.sdk_write_unsafe(base + "/up.txt", b"unsafe\n")
        self.assertEqual(self.read_disk("sdk-abs/up.txt"), b"unsafe\n")
        self.assertFalse(os.path.exists(self.on_disk(self.ws.lstrip("/"))),
                         "the workspace's path was made inside the workspace")

    def test_sdk_absolute_paths_elsewhere_re_rooted(self):
        # Any other absolute path stays re-rooted under the workspace, as before.
        self.assertFalse(self.sdk_exists("/etc/passwd"))
        r = self.d.request("GET", "/download/%s" % quote("/etc/passwd"), headers=self.SDK_HEADERS)
        self.assert_json(r, 404, FILE_NOT_FOUND)
        self.sdk_write_unsafe("/etc/sdk-rerooted.txt", b"in\n")
        self.assertEqual(self.read_disk("etc/sdk-rerooted.txt"), b"in\n")
        self.assertFalse(os.path.exists("/etc/sdk-rerooted.txt"))
        self.assertFalse(self.sdk_exists(self.ws + "-evil/f"))

    def test_sdk_run(self):
        self.sdk_write("sdk-run/script.sh", "echo from \"$1\"; ls sdk-run\n")
        data = self.sdk_run("sh sdk-run/script.sh sdk")
        self.assertEqual(data["stdout"], "from sdk\nscript.sh\n", data)
        self.assertEqual(data["stderr"], "", data)
        self.assertEqual(data["exit_code"], 0, data)

    def test_sdk_binary_write_read(self):
        content = bytes(range(256))
        self.sdk_write("sdk/blob.bin", content)
        self.assertEqual(self.sdk_read("sdk/blob.bin"), content)


class TestSdkCallsThroughTheRouter(TestSdkCalls):
    """The same calls as the agent-sandbox router forwards them: every header but Host and
    Authorization passed on, and Host the sandbox's Service name (the router's
    {id}.{namespace}.svc.cluster.local:{port}). sbxd must serve them (its Host check refuses
    only names a web page could have)."""

    SDK_HEADERS = dict(TestSdkCalls.SDK_HEADERS,
                       Host="sbx-1234.team-a.svc.cluster.local:8888")


class TestSdkCallsByPodIp(TestSdkCalls):
    """The SDK's in-cluster connection by pod IP (SandboxInClusterConnectionConfig), or the
    router with X-Sandbox-Pod-IP: Host is the pod's address."""

    SDK_HEADERS = dict(TestSdkCalls.SDK_HEADERS, Host="10.0.0.7:8888")


class _Background:
    """A legacy POST /execute running in a thread (its result in .result)."""

    def __init__(self, case, command, timeout=20):
        import threading
        self.result = None
        self.error = None

        def run():
            try:
                self.result = case.d.request(
                    "POST", "/execute", json.dumps({"command": command}).encode(),
                    {"Content-Type": "application/json"}, timeout=timeout)
            except Exception as e:  # reported by join()
                self.error = e

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join(self, timeout=20):
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError("the background /execute did not answer")
        if self.error:
            raise self.error
        return self.result


def wait_running(case, n, within=5.0):
    """Until sbxd's /healthz counts n running commands."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        r = case.d.request("GET", "/healthz")
        if r.status == 200 and r.json().get("running") == n:
            return
        time.sleep(0.02)
    raise AssertionError("sbxd never had %d running command(s)" % n)


class TestExecuteBusy(DaemonTestCase, LegacyCase):
    """Busy stays an HTTP error (429) for the legacy shape: retried, not read as the
    command's failure. (Busy: past --max-running with --max-queued 0; by default a command
    waits its turn instead.)"""

    DAEMON_ARGS = ["--max-running", "1", "--max-queued", "0"]

    def test_execute_busy_is_429(self):
        bg = _Background(self, "sleep 1.5")
        try:
            wait_running(self, 1)
            r = self.execute_raw(json.dumps({"command": "echo hi"}).encode())
            self.assertEqual(r.status, 429, r)
            self.assertEqual(r.content_type(), "application/json", r)
            err = r.json()
            self.assertEqual(err.get("code"), "RESOURCE_EXHAUSTED", err)
            self.assertIsInstance(err.get("message"), str)
            self.assertNotIn("exit_code", err)
            self.assertIsNotNone(r.header("Retry-After"), "429 without Retry-After")
        finally:
            done = bg.join()
        self.assertEqual(done.status, 200, done)
        self.assertEqual(done.json()["exit_code"], 0)


class TestDraining(LegacyCase):
    """After SIGTERM, while a command finishes: GET / is 503 "draining", /v1/health 503
    UNAVAILABLE, and a legacy /execute an HTTP 503, not a 200 with exit_code 1."""

    def setUp(self):
        self.daemon = common.Daemon(args=["--shutdown-grace-ms", "8000"],
                                    name="sbxd(draining)")

    def tearDown(self):
        d, self.daemon = self.daemon, None
        d.kill()

    def test_draining_answers(self):
        import signal as _signal
        from common import contract
        bg = _Background(self, "sleep 2")
        try:
            wait_running(self, 1)
            self.d.proc.send_signal(_signal.SIGTERM)
            deadline = time.monotonic() + 1.5
            while True:
                r = self.get("/")
                if r.status == 503 or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            self.assertEqual(r.status, 503, r)
            self.assertEqual(r.content_type(), "application/json", r)
            self.assertEqual(r.json().get("status"), "draining", r)

            r = self.get("/v1/health")
            self.assertEqual(r.status, 503, r)
            self.assertEqual(r.content_type(), "application/json", r)
            body = r.json()
            self.assertEqual(contract().errors("Error", body), [], body)
            self.assertEqual(body["code"], "UNAVAILABLE", body)

            r = self.execute_raw(json.dumps({"command": "echo late"}).encode())
            self.assertEqual(r.status, 503, r)
            err = r.json()
            self.assertEqual(err.get("code"), "UNAVAILABLE", err)
            self.assertNotIn("exit_code", err)
        finally:
            done = bg.join()
        self.assertEqual(done.status, 200, done)
        self.assertEqual(done.json()["exit_code"], 0, done.json())
        status = self.d.proc.wait(timeout=common.STOP_TIMEOUT)
        self.assertEqual(status, 0, "sbxd did not exit 0 after draining:\n" + self.d.log_text())
        self.assertFalse(self.d.sanitizer_report(), self.d.log_text())


class TestSandboxBaseDir(DaemonTestCase, LegacyCase):
    """SANDBOX_BASE_DIR names the workspace when there is no --workspace."""

    WORKSPACE_FLAG = False
    DAEMON_ENV = {"SANDBOX_BASE_DIR": "{ws}"}

    def test_base_dir_upload_lands_there(self):
        self.upload("from-base-dir.txt", b"base dir\n")
        self.assertEqual(self.read_disk("from-base-dir.txt"), b"base dir\n")
        self.assert_download("from-base-dir.txt", b"base dir\n")

    def test_base_dir_is_cwd(self):
        res = self.execute("pwd")
        self.assertEqual(res["stdout"], os.path.realpath(self.ws) + "\n")

    def test_base_dir_in_listening_log(self):
        evs = [e for e in self.d.log_events() if e.get("event") == "listening"]
        self.assertEqual(len(evs), 1)
        if "workspace" in evs[0]:
            self.assertEqual(os.path.realpath(evs[0]["workspace"]), os.path.realpath(self.ws))


if __name__ == "__main__":
    unittest.main()
