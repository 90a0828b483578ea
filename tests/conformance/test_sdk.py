"""Every call of the agent-sandbox Python SDK (k8s_agent_sandbox) that the issue's table and
list name, sent to a real sbxd with exactly the requests the unmodified SDK makes, and its
answers read as the SDK reads them:

- legacy, sync (Sandbox with SandboxDirectConnectionConfig: connector.py's send_request
  through requests): the requests headers, then the router headers X-Sandbox-ID,
  -Namespace, -Port (server_port, 8888), -Timeout (the call's timeout) and -Pod-IP;
  execute as json={"command": ...}; upload as files={"file": (path, content)} (a multipart
  part with a filename and no Content-Type); download/list/exists with the path quoted
  with safe="" (and "." removed from the URL as requests removes dot segments).
- legacy, async (AsyncSandbox: async_connector.py through httpx): the same routes, httpx's
  headers (in its order), and a multipart part with a Content-Type guessed from the
  filename (text/plain for .txt, application/octet-stream when nothing is guessed).
- sandboxd, sync (SandboxdPodTunnelConnectionConfig): no router headers; files over REST
  v1/files/<quote(path, safe="")>: PUT of the raw bytes as application/octet-stream, GET,
  HEAD for exists (404 is False), DELETE with ?recursive=true; commands.run over gRPC as
  Execute(config.command=["/bin/sh", "-c", cmd]) with the call's timeout as deadline on a
  plaintext channel with grpcio's defaults.

The SDK sends nothing for files.delete in legacy mode (it raises NotImplementedError
before any request) and has no async sandboxd client (AsyncSandboxConnector refuses the
config): there is nothing of those to send. files.write and files.read normalise the path
first (no control characters, posixpath.normpath, leading "/" stripped, no ".."); list,
exists and delete send it as given.

The header values are those of Debian's python3-requests and python3-httpx, which the SDK
was run with to record them; another version of either library differs in User-Agent
only. Cases marked "(being changed: ...)" assert what the issue asks sbxd to adopt."""

import datetime
import gzip
import json
import mimetypes
import os
import posixpath
import time
import unittest
import zlib

import common
from common import multipart, quote
from test_reference import RefCase

pb = common.grpc_stubs().pb

REQUESTS_HEADERS = (("User-Agent", "python-requests/2.28.1"),
                    ("Accept-Encoding", "gzip, deflate, br"),
                    ("Accept", "*/*"),
                    ("Connection", "keep-alive"))
HTTPX_HEADERS = (("Accept", "*/*"),
                 ("Accept-Encoding", "gzip, deflate, br"),
                 ("Connection", "keep-alive"),
                 ("User-Agent", "python-httpx/0.23.3"))
SANDBOX_ID, NAMESPACE, POD_IP = "sbx-1234", "team-a", "10.0.0.7"


class SdkError(Exception):
    """What the SDK raises (SandboxRequestError) for an HTTP status of 400 or more."""

    def __init__(self, response):
        super().__init__("HTTP %d: %r" % (response.status, response.body[:300]))
        self.status = response.status


def remove_dot_segments(path):
    """RFC 3986 5.2.4, as requests (urllib3) applies it to a URL's path."""
    out = []
    segs = path.split("/")
    for i, s in enumerate(segs):
        last = i == len(segs) - 1
        if s == ".":
            if last:
                out.append("")
        elif s == "..":
            if len(out) > 1:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(s)
    return "/".join(out)


def safe_upload_path(path):
    """Filesystem._safe_upload_path's rule: refuse control characters, an empty path, one
    that names no file, and any ".." once normalised; strip the leading "/"."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        raise ValueError("control characters")
    s = path.strip()
    if not s:
        raise ValueError("empty")
    n = posixpath.normpath(s).lstrip("/")
    if not n or n == "." or ".." in n.split("/"):
        raise ValueError("does not name a file inside")
    return n


class Sdk:
    """The SDK's calls for one mode: "legacy" (requests), "async" (httpx) or "sandboxd"."""

    def __init__(self, case, mode):
        self.case = case
        self.mode = mode

    @property
    def d(self):
        return self.case.daemon

    # -- send_request -----------------------------------------------------------------

    def headers(self, timeout, extra=()):
        h = dict(HTTPX_HEADERS if self.mode == "async" else REQUESTS_HEADERS)
        if self.mode != "sandboxd":  # should_inject_router_headers()
            h.update((("X-Sandbox-ID", SANDBOX_ID), ("X-Sandbox-Namespace", NAMESPACE),
                      ("X-Sandbox-Port", "8888"), ("X-Sandbox-Timeout", str(timeout)),
                      ("X-Sandbox-Pod-IP", POD_IP)))
        h.update(extra)
        return h

    def send(self, method, endpoint, body=None, extra=(), timeout=60, allowed=()):
        target = remove_dot_segments("/" + endpoint.lstrip("/"))
        h = self.headers(timeout, extra)
        r = self.d.request(method, target, body=body, headers=h, timeout=timeout + 5)
        self.case.assertNotIn(r.status, (301, 302, 303, 307, 308), r)  # refused by the SDK
        enc = (r.header("Content-Encoding") or "").lower()
        if enc == "gzip":
            r.body = gzip.decompress(r.body)
        elif enc == "deflate":
            r.body = zlib.decompress(r.body)
        else:
            self.case.assertIn(enc, ("", "identity"), r)
        if r.status >= 400 and r.status not in allowed:
            raise SdkError(r)
        return r

    # -- commands ---------------------------------------------------------------------

    def run(self, command, timeout=60):
        """commands.run: (stdout, stderr, exit_code) of the ExecutionResult."""
        if self.mode == "sandboxd":
            req = pb.ExecuteRequest(config=pb.ProcessConfig(command=["/bin/sh", "-c", command]))
            resp = self.d.process().Execute(req, timeout=timeout)
            return (resp.stdout.decode("utf-8", "replace"),
                    resp.stderr.decode("utf-8", "replace"), resp.exit_code)
        body = json.dumps({"command": command}).encode()
        r = self.send("POST", "execute", body, (("Content-Length", str(len(body))),
                                                ("Content-Type", "application/json")), timeout)
        data = r.json()
        res = (data.get("stdout", ""), data.get("stderr", ""), data.get("exit_code", -1))
        self.case.assertIsInstance(res[0], str, data)
        self.case.assertIsInstance(res[1], str, data)
        self.case.assertIsInstance(res[2], int, data)
        return res

    # -- files ------------------------------------------------------------------------

    def write(self, path, content, timeout=60):
        if isinstance(content, str):
            content = content.encode("utf-8")
        path = safe_upload_path(path)
        if self.mode == "sandboxd":
            self.send("PUT", "v1/files/" + quote(path), content,
                      (("Content-Type", "application/octet-stream"),
                       ("Content-Length", str(len(content)))), timeout)
            return
        if self.mode == "async":
            ctype = mimetypes.guess_type(path)[0] or "application/octet-stream"
            body, mtype = multipart([("file", path, content, ctype)])
        else:
            body, mtype = multipart([("file", path, content)])
        self.send("POST", "upload", body, (("Content-Length", str(len(body))),
                                           ("Content-Type", mtype)), timeout)

    def read(self, path, timeout=60):
        path = safe_upload_path(path)
        prefix = "v1/files/" if self.mode == "sandboxd" else "download/"
        return self.send("GET", prefix + quote(path), timeout=timeout).body

    def list(self, path, timeout=60):
        """files.list: [(name, size, type, modified datetime, mode)]."""
        c = self.case
        out = []
        if self.mode == "sandboxd":
            listing = self.send("GET", "v1/files/" + quote(path), timeout=timeout).json()
            c.assertIsInstance(listing, dict, listing)
            c.assertIn("entries", listing)
            for e in listing.get("entries") or []:
                if e.get("type") not in ("file", "directory"):
                    continue  # skipped by the SDK
                modified = datetime.datetime.fromisoformat(e["modified_at"].replace("Z", "+00:00"))
                out.append((e["name"], e["size"], e["type"], modified, e.get("mode")))
        else:
            entries = self.send("GET", "list/" + quote(path), timeout=timeout).json()
            for e in entries or []:
                c.assertIn(e["type"], ("file", "directory"), e)
                modified = datetime.datetime.fromtimestamp(e.get("mod_time", 0),
                                                           tz=datetime.timezone.utc)
                out.append((e["name"], e["size"], e["type"], modified, None))
        for name, size, _type, modified, _mode in out:
            c.assertIsInstance(name, str)
            c.assertIsInstance(size, int)
            c.assertIsNotNone(modified.tzinfo)
        return out

    def exists(self, path, timeout=60):
        if self.mode == "sandboxd":
            r = self.send("HEAD", "v1/files/" + quote(path), timeout=timeout, allowed=(404,))
            return r.status != 404
        return self.send("GET", "exists/" + quote(path), timeout=timeout).json().get("exists",
                                                                                    False)

    def delete(self, path, recursive=False, timeout=60):
        assert self.mode == "sandboxd", "the legacy SDK sends no delete"
        ep = "v1/files/" + quote(path) + ("?recursive=true" if recursive else "")
        self.send("DELETE", ep, extra=(("Content-Length", "0"),), timeout=timeout)


# ---------------------------------------------------------------------------------------


class SdkCase(RefCase):
    """A daemon of the class's own, its workspace emptied before every test."""

    MODE = None

    def setUp(self):
        super().setUp()
        self.sdk = Sdk(self, self.MODE)

    def names(self, entries):
        return sorted(e[0] for e in entries)


class LegacyCalls:
    """commands.run and files.write/read/list/exists in legacy mode, as the python-runtime
    answers them."""

    def test_run(self):
        """commands.run("echo hi"): the command's stdout, empty stderr, exit 0."""
        self.assertEqual(self.sdk.run("echo hi"), ("hi\n", "", 0))

    def test_run_timeout_120(self):
        """commands.run(cmd, timeout=120): X-Sandbox-Timeout 120 changes nothing of a
        command that ends well within it."""
        self.assertEqual(self.sdk.run("echo done", timeout=120), ("done\n", "", 0))

    def test_run_killed_exit_code_negative(self):
        """commands.run of a command killed by signal N: exit_code -N, as the
        python-runtime's subprocess reports it. (being changed: exit code -N legacy)"""
        self.assertEqual(self.sdk.run("sh -c 'kill -TERM $$'")[2], -15)

    def test_run_large_output_whole(self):
        """commands.run with 2 MiB and 5 MB of output: all of it, as the python-runtime
        returns everything. (being changed: output caps per face)"""
        for n in (2 * 1024 * 1024, 5000000):
            with self.subTest(bytes=n):
                out, _, code = self.sdk.run("sh -c 'yes x | head -c %d'" % n)
                self.assertEqual((len(out), code), (n, 0))

    def test_write_read(self):
        """files.write then files.read of a nested path with a space: the bytes round-trip,
        and land at that path under the workspace."""
        self.sdk.write("sub/dir/a b.txt", "hello")
        self.assertEqual(self.sdk.read("sub/dir/a b.txt"), b"hello")
        self.assertEqual(self.disk("sub/dir/a b.txt"), b"hello")

    def test_write_binary_and_unicode_name(self):
        """files.write of bytes under a non-ASCII name (raw UTF-8 in the part's header)."""
        data = bytes(range(256))
        self.sdk.write("d\u00e9j\u00e0 vu.bin", data)
        self.assertEqual(self.sdk.read("d\u00e9j\u00e0 vu.bin"), data)

    def test_write_absolute_path_relative(self):
        """files.write("/nested/out.csv"): the SDK strips the leading "/", so the file is
        nested/out.csv under the workspace."""
        self.sdk.write("/nested/out.csv", b"1,2\n")
        self.assertEqual(self.disk("nested/out.csv"), b"1,2\n")
        self.assertEqual(self.sdk.read("/nested/out.csv"), b"1,2\n")

    def test_list(self):
        """files.list of a directory, of "." and of "" (both the workspace): its entries
        with their types and sizes."""
        self.sdk.write("sub/dir/a b.txt", "hello")
        entries = self.sdk.list("sub/dir")
        self.assertEqual([(e[0], e[1], e[2]) for e in entries], [("a b.txt", 5, "file")])
        for path in (".", ""):
            with self.subTest(path=path):
                got = {e[0]: e[2] for e in self.sdk.list(path)}
                self.assertEqual(got, {"sub": "directory"})

    def test_list_missing_raises(self):
        """files.list of a directory that does not exist: the SDK raises (404)."""
        with self.assertRaises(SdkError) as cm:
            self.sdk.list("no-such-dir")
        self.assertEqual(cm.exception.status, 404)

    def test_list_symlinks(self):
        """files.list: a symlink to a directory inside is a directory; escaping and broken
        links are left out. (being changed: symlinks in listings)"""
        out = self.outside({"secret": b"s"})
        self.sdk.run("mkdir real")
        self.symlink("real", "to-real")
        self.symlink(out, "escaping")
        self.symlink("nowhere", "broken")
        got = {e[0]: e[2] for e in self.sdk.list(".")}
        self.assertEqual(got, {"real": "directory", "to-real": "directory"})

    def test_exists(self):
        """files.exists: True for a file and a directory, False for a missing path."""
        self.sdk.write("sub/f.txt", "x")
        self.assertTrue(self.sdk.exists("sub/f.txt"))
        self.assertTrue(self.sdk.exists("sub"))
        self.assertFalse(self.sdk.exists("sub/missing.txt"))

    def test_workspace_absolute_paths(self):
        """files.exists and files.list of absolute paths naming the workspace (what a
        command's output or pwd shows): that path inside it. (being changed: /workspace
        prefix stripping)"""
        self.sdk.run("sh -c 'echo 1,2 > out.csv; mkdir sub; echo x > sub/x'")
        self.assertTrue(self.sdk.exists(os.path.join(self.ws, "out.csv")))
        self.assertEqual(self.names(self.sdk.list(os.path.join(self.ws, "sub"))), ["x"])


class TestSdkLegacySync(LegacyCalls, SdkCase):
    MODE = "legacy"


class TestSdkLegacyAsync(LegacyCalls, SdkCase):
    MODE = "async"


class TestSdkLegacyTimeout(SdkCase):
    """commands.run(cmd, timeout=T) sends X-Sandbox-Timeout: T, and the command ends as T
    nears, a twentieth of T early, so that the answer arrives before the SDK stops reading
    (and sends the POST again); the timeout is told in stderr as the python-runtime tells
    it, exit code 1. Without the header, SANDBOX_EXEC_TIMEOUT_SECONDS bounds it (as in the
    python-runtime, which never sees the header: the router keeps it)."""

    DAEMON_ENV = {"SANDBOX_EXEC_TIMEOUT_SECONDS": "0.5"}

    def check_timeout(self, mode):
        sdk = Sdk(self, mode)
        t0 = time.monotonic()
        out, err, code = sdk.run("echo started; sleep 5", timeout=1)
        self.assertLess(time.monotonic() - t0, 1.0, "not answered before the SDK's timeout")
        self.assertEqual((out, code), ("started\n", 1))
        self.assertEqual(err, "Failed to execute command: Command 'echo started; sleep 5' "
                         "timed out after 0.95 seconds")

    def test_run_timeout_told_sync(self):
        """commands.run("...; sleep 5", timeout=1) (sync)."""
        self.check_timeout("legacy")

    def test_run_timeout_told_async(self):
        """commands.run("...; sleep 5", timeout=1) (async)."""
        self.check_timeout("async")

    def test_env_timeout_without_the_header(self):
        """A client that sends no X-Sandbox-Timeout (the router's path): the fractional
        SANDBOX_EXEC_TIMEOUT_SECONDS, 0.5 s, as the python-runtime reads it."""
        body = json.dumps({"command": "sleep 5"}).encode()
        t0 = time.monotonic()
        r = self.d.request("POST", "/execute", body, {"Content-Type": "application/json"})
        self.assertLess(time.monotonic() - t0, 3.0)
        data = r.json()
        self.assertEqual(data["exit_code"], 1, data)
        self.assertIn("timed out after 0.5 seconds", data["stderr"])


class TestSdkEnvironment(SdkCase):
    """commands.run finds the tools of the image's PATH (an image's ENV PATH=/opt/venv/bin:
    ...) and sees the pod's SANDBOX_* variables, in both modes, as the python-runtime and
    the reference pass the daemon's environment on. (being changed: environment
    passing)"""

    DAEMON_ENV = {"PATH": "{ws}/tools:/usr/local/bin:/usr/bin:/bin",
                  "SANDBOX_REGION": "europe-west4"}

    def setUp(self):
        super().setUp()
        self.make("tools/mytool", b"#!/bin/sh\necho mytool ran\n", 0o755)

    def check(self, mode):
        sdk = Sdk(self, mode)
        self.assertEqual(sdk.run("mytool"), ("mytool ran\n", "", 0))
        self.assertEqual(sdk.run("printenv SANDBOX_REGION")[0], "europe-west4\n")

    def test_run_environment_legacy(self):
        """commands.run("mytool") in legacy mode, sync."""
        self.check("legacy")

    def test_run_environment_async(self):
        """commands.run("mytool") in legacy mode, async."""
        self.check("async")

    def test_run_environment_sandboxd(self):
        """commands.run("mytool") in sandboxd mode (gRPC Execute without env_vars)."""
        self.check("sandboxd")


class TestSdkSandboxd(SdkCase):
    """commands.run and files.write/read/list/exists/delete in sandboxd mode, as the
    reference sandboxd answers them."""

    MODE = "sandboxd"

    def test_run(self):
        """commands.run("echo hi") over gRPC Execute."""
        self.assertEqual(self.sdk.run("echo hi"), ("hi\n", "", 0))

    def test_run_exit_code_and_stderr(self):
        """commands.run: stderr and the exit status come back apart from stdout."""
        self.assertEqual(self.sdk.run("echo oops >&2; exit 3"), ("", "oops\n", 3))

    def test_run_killed_exit_code_minus_one(self):
        """commands.run of a command killed by a signal: exit_code -1, as the reference's
        Execute reports it. (being changed: exit code -1 on gRPC)"""
        self.assertEqual(self.sdk.run("kill -TERM $$")[2], -1)

    def test_run_large_output_whole(self):
        """commands.run with 2 MiB and 3 MiB of output: all of it in the one response (the
        reference returns everything that fits grpcio's 4 MiB receive limit). (being
        changed: output caps per face)"""
        for n in (2 * 1024 * 1024, 3 * 1024 * 1024):
            with self.subTest(bytes=n):
                out, _, code = self.sdk.run("yes x | head -c %d" % n)
                self.assertEqual((len(out), code), (n, 0))

    def test_write_read(self):
        """files.write (PUT of the raw bytes) then files.read (GET): the bytes round-trip
        and land at that path under the workspace, parents made."""
        self.sdk.write("sub/dir/a b.txt", "hello")
        self.assertEqual(self.sdk.read("sub/dir/a b.txt"), b"hello")
        self.assertEqual(self.disk("sub/dir/a b.txt"), b"hello")

    def test_write_absolute_path_relative(self):
        """files.write("/nested/out.csv"): the SDK strips the leading "/" before the PUT."""
        self.sdk.write("/nested/out.csv", b"1,2\n")
        self.assertEqual(self.disk("nested/out.csv"), b"1,2\n")

    def test_list(self):
        """files.list: the DirectoryListing's entries as FileEntry.from_sandboxd reads them
        (RFC 3339 modified_at, octal mode), sorted by name. (being changed: sorted
        listings; modes 0644)"""
        self.sdk.write("d/b.txt", "bb")
        self.sdk.write("d/a/x", "x")
        entries = self.sdk.list("d")
        self.assertEqual([(e[0], e[2]) for e in entries], [("a", "directory"), ("b.txt", "file")])
        self.assertEqual(entries[1][1], 2)
        self.assertEqual(entries[1][4], "0644")

    def test_list_symlinks(self):
        """files.list: a symlink to a directory inside is a directory; escaping and broken
        links are left out. (being changed: symlinks in listings)"""
        out = self.outside({"secret": b"s"})
        self.mkdir("real")
        self.symlink("real", "to-real")
        self.symlink(out, "escaping")
        self.symlink("nowhere", "broken")
        got = {e[0]: e[2] for e in self.sdk.list("")}
        self.assertEqual(got, {"real": "directory", "to-real": "directory"})

    def test_exists(self):
        """files.exists: HEAD 200 is True, 404 is False."""
        self.sdk.write("sub/f.txt", "x")
        self.assertTrue(self.sdk.exists("sub/f.txt"))
        self.assertTrue(self.sdk.exists("sub"))
        self.assertFalse(self.sdk.exists("sub/missing.txt"))

    def test_delete(self):
        """files.delete of a file; of a non-empty directory (the SDK raises: 409) and with
        recursive=True (removed)."""
        self.sdk.write("d/sub/f.txt", "x")
        self.sdk.delete("d/sub/f.txt")
        self.assertFalse(self.sdk.exists("d/sub/f.txt"))
        self.sdk.write("d/sub/f.txt", "x")
        with self.assertRaises(SdkError) as cm:
            self.sdk.delete("d")
        self.assertEqual(cm.exception.status, 409)
        self.sdk.delete("d", recursive=True)
        self.assertFalse(self.sdk.exists("d"))

    def test_delete_root(self):
        """files.delete("/"): 409 without recursive; with recursive=True the workspace is
        emptied and kept. (being changed: delete root recursive)"""
        self.sdk.write("a.txt", "a")
        self.sdk.write("d/b.txt", "b")
        with self.assertRaises(SdkError) as cm:
            self.sdk.delete("/")
        self.assertEqual(cm.exception.status, 409)
        self.sdk.delete("/", recursive=True)
        self.assertEqual(os.listdir(self.ws), [])
        self.assertEqual(self.sdk.list("/"), [])

    def test_workspace_absolute_paths(self):
        """files.exists and files.list of absolute paths naming the workspace: that path
        inside it. (being changed: /workspace prefix stripping)"""
        self.sdk.run("echo 1,2 > out.csv; mkdir sub; echo x > sub/x")
        self.assertTrue(self.sdk.exists(os.path.join(self.ws, "out.csv")))
        self.assertEqual(self.names(self.sdk.list(os.path.join(self.ws, "sub"))), ["x"])


if __name__ == "__main__":
    unittest.main()
