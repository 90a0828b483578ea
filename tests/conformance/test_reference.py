"""The reference sandboxd's contract, case by case: every test of its Go suite
(packages/sandboxd: pkg/server/filesystem_test.go, process_test.go, integration_test.go,
pkg/pathutil/sandbox_test.go, and the rules of metadata.go) restated from what it checks and
asserted over the wire against a real sbxd: the REST /v1 routes on its HTTP port and
process.v1.ProcessService on its gRPC port (grpcio, stubs generated at run time).

Each case's docstring names the Go test it covers and says the rule. The reference runs each
test on a fresh root directory; here one daemon serves the class and every test starts
with its workspace emptied. Files a test lays out beforehand are made from outside (as the
Go tests do with os.WriteFile), owned by the command user as sbxd's own would be.

Cases marked "(being changed: ...)" assert behaviour the issue asks sbxd to adopt; they
fail on a sbxd that predates that change."""

import os
import shutil
import signal
import stat
import subprocess
import time
import unittest

import grpc

import common
from common import DaemonTestCase, contract, multipart, quote

pb = common.grpc_stubs().pb
CODE = grpc.StatusCode
RPC_TIMEOUT = 30.0  # the Go tests' context deadline


def sh(cmd):
    return ["sh", "-c", cmd]


class RefCase(DaemonTestCase):
    """A daemon of the class's own; before every test its workspace is emptied (the
    reference's t.TempDir() root)."""

    _seq = 0

    def setUp(self):
        for name in os.listdir(self.ws):
            p = os.path.join(self.ws, name)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)

    @property
    def d(self):
        return self.daemon

    @property
    def ws(self):
        return self.daemon.ws

    # -- fixtures made from outside ---------------------------------------------------

    def owner(self):
        st = os.stat(self.ws)
        return st.st_uid, st.st_gid

    def make(self, rel, data=b"", mode=0o644):
        p = os.path.join(self.ws, rel)
        if os.path.dirname(rel):
            self.mkdir(os.path.dirname(rel))
        with open(p, "wb") as f:
            f.write(data)
        os.chmod(p, mode)
        os.chown(p, *self.owner())
        return p

    def mkdir(self, rel):
        """rel and its missing parents, each 0755 and the command user's."""
        p = os.path.join(self.ws, rel)
        if os.path.dirname(rel):
            self.mkdir(os.path.dirname(rel))
        if not os.path.isdir(p):
            os.mkdir(p)
            os.chmod(p, 0o755)
            os.chown(p, *self.owner())
        return p

    def symlink(self, target, rel):
        p = os.path.join(self.ws, rel)
        os.symlink(target, p)
        os.lchown(p, *self.owner())
        return p

    def outside(self, files=None):
        """A fresh directory beside the workspace (outside it) holding files."""
        RefCase._seq += 1
        p = os.path.join(self.d.tmp, "outside-%d" % RefCase._seq)
        os.mkdir(p, 0o777)
        os.chmod(p, 0o777)
        for name, data in (files or {}).items():
            with open(os.path.join(p, name), "wb") as f:
                f.write(data)
        return p

    def disk(self, rel):
        with open(os.path.join(self.ws, rel), "rb") as f:
            return f.read()

    # -- REST -------------------------------------------------------------------------

    def v1(self, method, encoded, body=None, headers=None, query=""):
        """METHOD /v1/files/<encoded>[?query], the target sent as given."""
        target = "/v1/files/" + encoded + (("?" + query) if query else "")
        return self.d.request(method, target, body=body, headers=headers)

    def assert_error(self, r, status, code=None):
        self.assertEqual(r.status, status, r)
        if r.body or code:
            self.assertEqual(r.content_type(), "application/json", r)
            err = r.json()
            self.assertEqual(contract().errors("Error", err), [], err)
            self.assertTrue(err["code"] and err["message"], err)
            if code:
                self.assertEqual(err["code"], code, err)
            return err
        return None

    def listing(self, encoded):
        r = self.v1("GET", encoded)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.content_type(), "application/json", r)
        body = r.json()
        self.assertEqual(contract().errors("DirectoryListing", body), [], body)
        return body

    # -- gRPC -------------------------------------------------------------------------

    def stub(self):
        return self.d.process()

    def execute(self, command, env=None, cwd=None):
        c = pb.ProcessConfig(command=command, env_vars=env or {})
        if cwd is not None:
            c.cwd = cwd
        return self.stub().Execute(pb.ExecuteRequest(config=c), timeout=RPC_TIMEOUT)

    def start(self, command, pty=None):
        req = pb.StartRequest(config=pb.ProcessConfig(command=command))
        if pty is not None:
            req.pty.cols, req.pty.rows = pty
        return self.stub().Start(req, timeout=RPC_TIMEOUT)

    def recv_init(self, call):
        """Events until the InitEvent: its process id."""
        for ev in call:
            if ev.WhichOneof("event") == "init":
                return ev.init.process_id
        self.fail("the stream ended without an InitEvent")

    def drain(self, call):
        """The rest of a Start stream: (stdout, stderr, exit code), an ExitEvent required
        and nothing after it."""
        out, err, code = b"", b"", None
        for ev in call:
            kind = ev.WhichOneof("event")
            self.assertIsNone(code, "an event after the ExitEvent: %r" % ev)
            if kind == "stdout":
                out += ev.stdout
            elif kind == "stderr":
                err += ev.stderr
            elif kind == "exit":
                code = ev.exit.exit_code
            else:
                self.assertNotEqual(kind, "init", "a second InitEvent")
        self.assertIsNotNone(code, "no ExitEvent received")
        return out, err, code

    def assert_rpc_code(self, code, fn, *args, **kwargs):
        with self.assertRaises(grpc.RpcError) as cm:
            fn(*args, **kwargs)
        self.assertEqual(cm.exception.code(), code, cm.exception.details())
        return cm.exception

    def write_stdin(self, pid, data=None, eof=False):
        req = pb.WriteStdinRequest(process_id=pid)
        if eof:
            req.eof.SetInParent()
        else:
            req.input = data
        return self.stub().WriteStdin(req, timeout=RPC_TIMEOUT)

    def signal(self, pid, sig):
        return self.stub().SendSignal(pb.SendSignalRequest(process_id=pid, signal=sig),
                                      timeout=RPC_TIMEOUT)

    def resize(self, pid, cols, rows):
        return self.stub().ResizeTTY(pb.ResizeTTYRequest(process_id=pid, cols=cols, rows=rows),
                                     timeout=RPC_TIMEOUT)


# ---------------------------------------------------------------------------------------
# pkg/server/filesystem_test.go


class TestReferenceFilesystem(RefCase):

    def test_put_then_get_round_trip(self):
        """TestPutThenGetFileRoundTrip: a PUT of raw bytes (no Content-Type) answers 204 and
        stores exactly those bytes; a GET gives them back as application/octet-stream."""
        r = self.v1("PUT", "hello.txt", b"payload")
        self.assertEqual(r.status, 204, r)
        self.assertEqual(self.disk("hello.txt"), b"payload")
        r = self.v1("GET", "hello.txt")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("Content-Type"), "application/octet-stream")
        self.assertEqual(r.body, b"payload")

    def test_put_creates_parent_directories(self):
        """TestPutCreatesParentDirectories: a PUT below directories that do not exist makes
        them."""
        r = self.v1("PUT", "a/b/c/deep.txt", b"x")
        self.assertEqual(r.status, 204, r)
        self.assertTrue(os.path.isfile(os.path.join(self.ws, "a/b/c/deep.txt")))

    def test_put_applies_mode(self):
        """TestPutAppliesMode: ?mode=0755 gives the file exactly those permission bits."""
        r = self.v1("PUT", "run.sh", b"#!/bin/sh", query="mode=0755")
        self.assertEqual(r.status, 204, r)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(self.ws, "run.sh")).st_mode), 0o755)

    def test_put_default_modes(self):
        """TestPutAppliesMode (its default): without ?mode a file is 0644 and the parents a
        PUT makes are 0755, whatever the isolation. (being changed: modes 0644/0755)"""
        r = self.v1("PUT", "newdir/sub/plain.txt", b"x")
        self.assertEqual(r.status, 204, r)
        for rel, want in (("newdir/sub/plain.txt", 0o644), ("newdir/sub", 0o755),
                          ("newdir", 0o755)):
            got = stat.S_IMODE(os.stat(os.path.join(self.ws, rel)).st_mode)
            self.assertEqual(got, want, "%s is %04o" % (rel, got))

    def test_put_invalid_mode_rejected(self):
        """TestPutInvalidModeRejected: a mode that is not 0 and three octal digits (0999,
        777, abcd, 01777) is 400 INVALID_ARGUMENT, and nothing is written."""
        for mode in ("0999", "777", "abcd", "01777"):
            with self.subTest(mode=mode):
                r = self.v1("PUT", "f.txt", b"x", query="mode=" + mode)
                self.assert_error(r, 400, "INVALID_ARGUMENT")
                self.assertFalse(os.path.exists(os.path.join(self.ws, "f.txt")))

    def test_put_overwrites_atomically(self):
        """TestPutOverwritesAtomically: a second PUT replaces the content, and no temporary
        file is left beside it."""
        self.assertEqual(self.v1("PUT", "f.txt", b"old").status, 204)
        self.assertEqual(self.v1("PUT", "f.txt", b"new").status, 204)
        self.assertEqual(self.disk("f.txt"), b"new")
        self.assertEqual(os.listdir(self.ws), ["f.txt"])

    def test_put_multipart_upload(self):
        """TestPutMultipartUpload: a multipart/form-data body stores its part "file" (here
        as Go's multipart writer makes it: a filename and application/octet-stream)."""
        body, ctype = multipart([("file", "upload.bin", b"multipart-payload",
                                  "application/octet-stream")])
        r = self.v1("PUT", "upload.bin", body, {"Content-Type": ctype})
        self.assertEqual(r.status, 204, r)
        self.assertEqual(self.disk("upload.bin"), b"multipart-payload")

    def test_put_multipart_missing_file_part(self):
        """TestPutMultipartMissingFilePart: a multipart body without a part "file" is 400
        INVALID_ARGUMENT, and nothing is written."""
        body, ctype = multipart([("notfile", None, b"x")])
        r = self.v1("PUT", "f.txt", body, {"Content-Type": ctype})
        self.assert_error(r, 400, "INVALID_ARGUMENT")
        self.assertFalse(os.path.exists(os.path.join(self.ws, "f.txt")))

    def test_put_to_directory_rejected(self):
        """TestPutToDirectoryRejected: a PUT onto an existing directory is 400, and the
        directory stays. (being changed: PUT onto a directory 400, one of the issue's
        smaller differences; sbxd answered 409)"""
        self.mkdir("d")
        r = self.v1("PUT", "d", b"x")
        self.assert_error(r, 400)
        self.assertTrue(os.path.isdir(os.path.join(self.ws, "d")))

    def test_put_below_a_file_conflict(self):
        """handlePutFile (filesystem.go) cannot make a parent where a file stands and
        answers 500 INTERNAL, which the SDK retries 5 times. sbxd keeps its 409 CONFLICT
        (docs/api.md): the request cannot succeed by being repeated. Nothing is written."""
        self.make("a.txt", b"a")
        self.assert_error(self.v1("PUT", quote("a.txt/b.txt"), b"x"), 409, "CONFLICT")
        self.assertEqual(self.disk("a.txt"), b"a")

    def test_put_encoded_slashes_create_nested_file(self):
        """TestPutEncodedSlashesCreateNestedFile: %2F inside one segment is a separator (the
        whole path is decoded before it is resolved)."""
        r = self.v1("PUT", "dir%2Fsub%2Ffile.txt", b"x")
        self.assertEqual(r.status, 204, r)
        self.assertTrue(os.path.isfile(os.path.join(self.ws, "dir", "sub", "file.txt")))

    def test_get_directory_listing(self):
        """TestGetDirectoryListing: GET of the root is a JSON DirectoryListing with a path
        and its entries sorted by name, each with its type, size, four-digit octal mode and
        an RFC 3339 modified_at. (being changed: sorted listings)"""
        self.make("b.txt", b"bb", 0o600)
        self.mkdir("adir")
        body = self.listing("")
        self.assertTrue(body["path"], body)
        entries = body["entries"]
        self.assertEqual([e["name"] for e in entries], ["adir", "b.txt"], entries)
        self.assertEqual(entries[0]["type"], "directory")
        self.assertEqual(entries[1]["type"], "file")
        self.assertEqual(entries[1]["size"], 2)
        self.assertEqual(entries[1]["mode"], "0600")
        self.assertTrue(common.is_rfc3339(entries[1]["modified_at"]), entries[1])

    def test_get_listing_path_spelling(self):
        """TestGetDirectoryListing (its path): the listing's path is the requested one with a
        leading slash: "/" for the root, "/sub" for sub. (being changed: path spelling)"""
        self.mkdir("sub")
        self.assertEqual(self.listing("")["path"], "/")
        self.assertEqual(self.listing("sub")["path"], "/sub")

    def test_get_empty_directory_lists_empty_entries(self):
        """TestGetEmptyDirectoryListsEmptyEntries: an empty directory's entries are an empty
        array, never null or absent."""
        r = self.v1("GET", "")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json().get("entries"), [], r)

    def test_get_missing_file_not_found(self):
        """TestGetMissingFileNotFound: GET of a path that does not exist is 404 NOT_FOUND."""
        self.assert_error(self.v1("GET", "nope.txt"), 404, "NOT_FOUND")

    def test_head_file_existence_probe(self):
        """TestHeadFileExistenceProbe: HEAD is the existence probe: 200 with no body for a
        file, 404 for an absent one."""
        self.make("f.txt", b"12345")
        r = self.v1("HEAD", "f.txt")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.body, b"")
        self.assertEqual(self.v1("HEAD", "absent.txt").status, 404)

    def test_traversal_rejected(self):
        """TestTraversalRejected: %2E%2E segments (which no client-side cleaning removes)
        climbing out of the root are 403 PERMISSION_DENIED for GET, PUT and DELETE."""
        for method in ("GET", "PUT", "DELETE"):
            with self.subTest(method=method):
                r = self.v1(method, "%2E%2E/%2E%2E/etc/passwd", b"x")
                self.assert_error(r, 403, "PERMISSION_DENIED")
        self.assertTrue(os.path.exists("/etc/passwd"))

    def test_symlink_escape_rejected(self):
        """TestSymlinkEscapeRejected: a file reached through a symlink to a directory
        outside the root is 403."""
        out = self.outside({"secret": b"s"})
        self.symlink(out, "link")
        self.assert_error(self.v1("GET", "link/secret"), 403)

    def test_delete_file(self):
        """TestDeleteFile: DELETE of a file is 204; once it is gone, 404."""
        self.make("f.txt", b"x")
        self.assertEqual(self.v1("DELETE", "f.txt").status, 204)
        self.assert_error(self.v1("DELETE", "f.txt"), 404)

    def test_delete_non_empty_directory_conflict(self):
        """TestDeleteNonEmptyDirectoryConflict: a non-empty directory is 409 CONFLICT
        without recursive, and removed whole with recursive=true."""
        self.make("d/f.txt", b"x")
        self.assert_error(self.v1("DELETE", "d"), 409, "CONFLICT")
        self.assertTrue(os.path.exists(os.path.join(self.ws, "d/f.txt")))
        self.assertEqual(self.v1("DELETE", "d", query="recursive=true").status, 204)
        self.assertFalse(os.path.lexists(os.path.join(self.ws, "d")))

    def test_delete_root_directory_empties_contents(self):
        """TestDeleteRootDirectoryEmptiesContents: DELETE of the root is 409 without
        recursive; with recursive=true it is 204, the root's contents are gone and the root
        itself stays. (being changed: delete root recursive)"""
        self.make("f.txt", b"x")
        self.make("sub/g.txt", b"y")
        self.assert_error(self.v1("DELETE", ""), 409)
        self.assertEqual(sorted(os.listdir(self.ws)), ["f.txt", "sub"])
        r = self.v1("DELETE", "", query="recursive=true")
        self.assertEqual(r.status, 204, r)
        self.assertTrue(os.path.isdir(self.ws))
        self.assertEqual(os.listdir(self.ws), [])

    def test_directory_listing_omits_escaping_symlinks(self):
        """TestDirectoryListingOmitsEscapingSymlinks: a symlink leading out of the root is
        left out of its directory's listing. (being changed: symlinks in listings)"""
        out = self.outside({"secret.txt": b"secret"})
        self.symlink(out, "escaping_link")
        self.make("normal.txt", b"normal")
        self.assertEqual([e["name"] for e in self.listing("")["entries"]], ["normal.txt"])

    def test_directory_listing_follows_inside_symlinks(self):
        """serveDirectoryListing (filesystem.go): a symlink inside the root is listed with
        its target's type and size; a broken one is left out. (being changed: symlinks in
        listings)"""
        self.make("data/f.txt", b"twelve bytes")
        self.symlink("data", "to-dir")
        self.symlink("data/f.txt", "to-file")
        self.symlink("nowhere", "broken")
        byname = {e["name"]: e for e in self.listing("")["entries"]}
        self.assertEqual(sorted(byname), ["data", "to-dir", "to-file"], byname)
        self.assertEqual(byname["to-dir"]["type"], "directory", byname["to-dir"])
        self.assertEqual(byname["to-file"]["type"], "file", byname["to-file"])
        self.assertEqual(byname["to-file"]["size"], 12, byname["to-file"])

    def test_absolute_symlinks_into_the_root_followed(self):
        """serveDirectoryListing and getFile (filesystem.go) evaluate links as the system
        does: a link whose absolute target lies inside the root ("ln -s /workspace/data x",
        as a command in the sandbox writes it) is listed as its target and read through; an
        absolute one elsewhere, or one that climbs out from the root's path, is left out
        and refused."""
        self.make("data/f.txt", b"twelve bytes")
        root = os.path.realpath(self.ws)
        self.symlink(root + "/data", "abs-dir")
        self.symlink(root + "/data/f.txt", "abs-file")
        self.symlink(root + "/../etc", "abs-out")
        self.symlink("/etc", "abs-etc")
        byname = {e["name"]: e for e in self.listing("")["entries"]}
        self.assertEqual(sorted(byname), ["abs-dir", "abs-file", "data"], byname)
        self.assertEqual(byname["abs-dir"]["type"], "directory", byname["abs-dir"])
        self.assertEqual(byname["abs-file"]["size"], 12, byname["abs-file"])
        r = self.v1("GET", "abs-file")
        self.assertEqual((r.status, r.body), (200, b"twelve bytes"), r)
        r = self.v1("GET", "abs-dir/f.txt")
        self.assertEqual((r.status, r.body), (200, b"twelve bytes"), r)
        self.assert_error(self.v1("GET", "abs-out/passwd"), 403, "PERMISSION_DENIED")
        self.assert_error(self.v1("GET", "abs-etc/passwd"), 403, "PERMISSION_DENIED")

    def test_delete_invalid_recursive_rejected(self):
        """TestDeleteInvalidRecursiveRejected: recursive=banana is 400, and the file stays."""
        self.make("f.txt", b"x")
        self.assert_error(self.v1("DELETE", "f.txt", query="recursive=banana"), 400)
        self.assertTrue(os.path.exists(os.path.join(self.ws, "f.txt")))

    def test_delete_recursive_parse_bool(self):
        """handleDeleteFile (filesystem.go): recursive is read as Go's strconv.ParseBool: 1,
        t, T, TRUE, true, True are true; 0, f, F, FALSE, false, False are false (a
        non-empty directory then stays, 409). (being changed: ParseBool)"""
        for word in ("0", "f", "F", "FALSE", "false", "False"):
            with self.subTest(recursive=word):
                self.make("keep/f.txt", b"x")
                self.assert_error(self.v1("DELETE", "keep", query="recursive=" + word), 409)
                self.assertTrue(os.path.exists(os.path.join(self.ws, "keep/f.txt")))
        for word in ("1", "t", "T", "TRUE", "true", "True"):
            with self.subTest(recursive=word):
                self.make("gone/f.txt", b"x")
                r = self.v1("DELETE", "gone", query="recursive=" + word)
                self.assertEqual(r.status, 204, r)
                self.assertFalse(os.path.lexists(os.path.join(self.ws, "gone")))

    def test_health_ready(self):
        """TestHealthReadyAndShutdown (ready): /v1/health is 200 {"status":"ok"} with a
        non-negative uptime_seconds."""
        r = self.d.request("GET", "/v1/health")
        self.assertEqual(r.status, 200, r)
        body = r.json()
        self.assertEqual(body["status"], "ok")
        self.assertIsInstance(body["uptime_seconds"], int)
        self.assertGreaterEqual(body["uptime_seconds"], 0)


class TestReferenceHealthShutdown(unittest.TestCase):
    """A daemon of the test's own, stopped by the test."""

    def setUp(self):
        self.d = common.Daemon(args=["--shutdown-grace-ms", "5000"], name="sbxd(ref-drain)")

    def tearDown(self):
        d, self.d = self.d, None
        d.kill()

    def start_sleeper(self):
        call = self.d.process().Start(
            pb.StartRequest(config=pb.ProcessConfig(command=["sleep", "300"])),
            timeout=RPC_TIMEOUT)
        first = next(call)
        self.assertEqual(first.WhichOneof("event"), "init", first)
        return call

    def test_health_unavailable_when_shutting_down(self):
        """TestHealthReadyAndShutdown (shutdown): once the daemon begins its graceful
        shutdown, /v1/health is 503 with the error code UNAVAILABLE."""
        r = self.d.request("GET", "/v1/health")
        self.assertEqual(r.status, 200, r)
        # A process that outlives the shutdown's SIGTERM keeps the daemon in its drain
        # (the grace period) while we look; cancelled at the end.
        call = self.d.process().Start(pb.StartRequest(config=pb.ProcessConfig(
            command=sh("trap '' TERM; echo ready; while :; do sleep 0.05; done"))),
            timeout=RPC_TIMEOUT)
        got = b""
        for ev in call:
            got += ev.stdout if ev.WhichOneof("event") == "stdout" else b""
            if b"ready" in got:
                break
        try:
            self.d.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 5.0
            r, last_error = None, None
            while time.monotonic() < deadline:
                try:
                    r = self.d.request("GET", "/v1/health")
                except OSError as e:  # say which, if no 503 ever comes
                    last_error = e
                    r = None
                if r is not None and r.status == 503:
                    break
                time.sleep(0.02)
            self.assertIsNotNone(r, "no answer from /v1/health: %r" % last_error)
            self.assertEqual(r.status, 503, r)
            err = r.json()
            self.assertEqual(contract().errors("Error", err), [], err)
            self.assertEqual(err["code"], "UNAVAILABLE", err)
        finally:
            call.cancel()

    def test_shutdown_processes_terminates_children(self):
        """TestShutdownProcessesTerminatesChildren (integration_test.go): at shutdown the
        daemon signals the processes it runs, so a Start stream still open ends with an
        ExitEvent whose code is not 0; the daemon then exits cleanly."""
        call = self.start_sleeper()
        t0 = time.monotonic()
        self.d.proc.send_signal(signal.SIGTERM)
        codes = []
        try:
            for ev in call:
                if ev.WhichOneof("event") == "exit":
                    codes.append(ev.exit.exit_code)
        except grpc.RpcError:
            pass  # the stream may end with a status once the ExitEvent is out
        self.assertEqual(len(codes), 1, "expected one ExitEvent after the shutdown")
        self.assertNotEqual(codes[0], 0)
        self.assertLess(time.monotonic() - t0, 4.0, "the sleeper outlived the grace period")
        self.assertEqual(self.d.proc.wait(timeout=common.STOP_TIMEOUT), 0, self.d.log_text())


class TestReferenceMetadata(DaemonTestCase):
    """metadata.go and TestMetadataFiltersEnv: GET /v1/metadata serves the daemon's
    environment variables whose names begin with SANDBOX_ (case-sensitive), except those
    whose name contains, in any case, TOKEN, SECRET, PASSWORD, PASSWD, CRED, KEY, AUTH,
    BEARER, PRIVATE or CERT."""

    DAEMON_ENV = {
        "SANDBOX_ID": "sbx-123",
        "SANDBOX_WORKSPACE": "/workspace",
        "SANDBOX_API_TOKEN": "super-secret",
        "SANDBOX_SSH_KEY": "super-secret",
        "SANDBOX_AUTH_HEADER": "super-secret",
        "SANDBOX_BEARER": "super-secret",
        "SANDBOX_CRED": "super-secret",
        "SANDBOX_PASSWD": "super-secret",
        "SANDBOX_TLS_CERT": "super-secret",
        "SANDBOX_PRIVATE_URL": "super-secret",
        "KUBERNETES_SERVICE_HOST": "1.2.3.4",
    }

    def metadata(self):
        r = self.daemon.request("GET", "/v1/metadata")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.content_type(), "application/json", r)
        body = r.json()
        self.assertEqual(contract().errors("MetadataResponse", body), [], body)
        return body["env"]

    def test_metadata_filters_env(self):
        """TestMetadataFiltersEnv: of the Go test's environment exactly SANDBOX_ID and
        SANDBOX_WORKSPACE are served, with their values; every credential-looking name and
        every name without the prefix is withheld."""
        self.assertEqual(self.metadata(), {"SANDBOX_ID": "sbx-123",
                                           "SANDBOX_WORKSPACE": "/workspace"})


class TestReferenceMetadataCase(DaemonTestCase):
    DAEMON_ENV = {
        "SANDBOX_REGION": "europe-west4=a",
        "SANDBOX_EMPTY": "",
        "SANDBOX_api_key": "lower-case marker",
        "SANDBOX_MonKey": "mixed-case marker",
        "sandbox_lower": "prefix in lower case",
        "MY_SANDBOX_ID": "prefix not at the start",
    }

    def test_metadata_prefix_and_markers_case(self):
        """buildMetadataEnv and isSensitiveEnvName (metadata.go): the prefix is matched as
        spelled (sandbox_lower, MY_SANDBOX_ID are not served), a marker in any case withholds
        the variable (SANDBOX_api_key, SANDBOX_MonKey), and a value is served whole, an
        empty one and one holding "=" included."""
        r = self.daemon.request("GET", "/v1/metadata")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["env"], {"SANDBOX_REGION": "europe-west4=a",
                                           "SANDBOX_EMPTY": ""})


# ---------------------------------------------------------------------------------------
# pkg/server/process_test.go (over gRPC)


class TestReferenceProcess(RefCase):

    def test_execute_echo(self):
        """TestExecuteEcho: Execute ["echo","hello"]: exit 0, stdout "hello\\n", no
        stderr."""
        r = self.execute(["echo", "hello"])
        self.assertEqual((r.exit_code, r.stdout, r.stderr), (0, b"hello\n", b""))

    def test_execute_exit_code(self):
        """TestExecuteExitCode: the command's exit status is the response's exit_code."""
        self.assertEqual(self.execute(sh("exit 3")).exit_code, 3)

    def test_execute_env_and_cwd(self):
        """TestExecuteEnvAndCwd: env_vars reach the command, and a relative cwd is taken
        under the root."""
        self.mkdir("sub")
        r = self.execute(sh("echo $SANDBOX_TEST_VAR; pwd"), env={"SANDBOX_TEST_VAR": "sentinel"},
                         cwd="sub")
        self.assertEqual(r.exit_code, 0, r)
        lines = r.stdout.decode().strip().split("\n")
        self.assertEqual(len(lines), 2, lines)
        self.assertEqual(lines[0], "sentinel")
        self.assertTrue(lines[1].endswith("/sub"), lines[1])

    def test_execute_missing_command(self):
        """TestExecuteMissingCommand: a config without a command is INVALID_ARGUMENT."""
        self.assert_rpc_code(CODE.INVALID_ARGUMENT, self.stub().Execute,
                             pb.ExecuteRequest(config=pb.ProcessConfig()), timeout=RPC_TIMEOUT)
        self.assert_rpc_code(CODE.INVALID_ARGUMENT, self.stub().Execute, pb.ExecuteRequest(),
                             timeout=RPC_TIMEOUT)

    def test_execute_cwd_escape_denied(self):
        """TestExecuteCwdEscapeDenied: a cwd that climbs out of the root ("../..") is
        PERMISSION_DENIED."""
        self.assert_rpc_code(CODE.PERMISSION_DENIED, self.execute, ["pwd"], cwd="../..")

    def test_execute_cwd_missing_not_found(self):
        """buildCommand and mapCommandError (process.go): a cwd inside the root that does
        not exist fails to start the command: NOT_FOUND. (being changed: gRPC codes on edge
        cases)"""
        self.assert_rpc_code(CODE.NOT_FOUND, self.execute, ["pwd"], cwd="no-such-dir")

    def test_execute_cwd_absolute_in_workspace(self):
        """buildCommand (process.go) confines cwd with SanitizePath: an absolute cwd naming
        a directory of the root is that directory."""
        self.mkdir("sub")
        r = self.execute(["pwd"], cwd=os.path.join(self.ws, "sub"))
        self.assertEqual(r.stdout.decode().strip(), os.path.join(os.path.realpath(self.ws), "sub"))

    def test_execute_program_not_found(self):
        """mapCommandError (process.go): a program that does not exist is NOT_FOUND."""
        self.assert_rpc_code(CODE.NOT_FOUND, self.execute, ["no-such-program-xyz"])

    def test_execute_signalled_exit_code(self):
        """Execute (process.go): a command ended by a signal reports exit_code -1 (Go's
        ExitCode() of a signalled process). (being changed: exit code -1 on gRPC)"""
        self.assertEqual(self.execute(sh("kill -TERM $$")).exit_code, -1)

    def test_start_streams_stdout_stderr_and_exit(self):
        """TestStartStreamsStdoutStderrAndExit: Start sends an InitEvent with a positive
        process id, then stdout and stderr as separate events, then an ExitEvent with the
        command's status."""
        call = self.start(sh("echo out; echo err 1>&2; exit 7"))
        pid = self.recv_init(call)
        self.assertGreater(pid, 0)
        self.assertEqual(self.drain(call), (b"out\n", b"err\n", 7))

    def test_start_missing_program_not_found_no_events(self):
        """Start (process.go): a program that cannot be started fails the call with
        NOT_FOUND before any event (no InitEvent). (being changed: gRPC codes on edge
        cases)"""
        call = self.start(["/no/such/program"])
        events = []
        with self.assertRaises(grpc.RpcError) as cm:
            for ev in call:
                events.append(ev.WhichOneof("event"))
        self.assertEqual(cm.exception.code(), CODE.NOT_FOUND, cm.exception.details())
        self.assertEqual(events, [])

    def test_write_stdin_and_eof(self):
        """TestWriteStdinAndEOF: WriteStdin input reaches the process, eof closes its stdin,
        and cat then ends 0 having echoed exactly the input."""
        call = self.start(["cat"])
        pid = self.recv_init(call)
        self.write_stdin(pid, b"piped-through")
        self.write_stdin(pid, eof=True)
        out, _, code = self.drain(call)
        self.assertEqual((out, code), (b"piped-through", 0))

    def test_write_stdin_not_found(self):
        """TestWriteStdinNotFound: WriteStdin to an unknown process id is NOT_FOUND."""
        self.assert_rpc_code(CODE.NOT_FOUND, self.write_stdin, 424242, b"x")

    def test_send_signal_not_found(self):
        """TestSendSignalNotFound: SendSignal to an unknown process id is NOT_FOUND."""
        self.assert_rpc_code(CODE.NOT_FOUND, self.signal, 424242, pb.SIGNAL_SIGTERM)

    def test_resize_tty_not_found(self):
        """ResizeTTY (process.go): an unknown process id is NOT_FOUND."""
        self.assert_rpc_code(CODE.NOT_FOUND, self.resize, 424242, 80, 24)

    def test_calls_after_exit_not_found(self):
        """Start (process.go) forgets a process once its stream has ended: WriteStdin,
        SendSignal and ResizeTTY to it are then NOT_FOUND. (being changed: gRPC codes on
        edge cases)"""
        call = self.start(["true"])
        pid = self.recv_init(call)
        self.assertEqual(self.drain(call)[2], 0)
        self.assert_rpc_code(CODE.NOT_FOUND, self.write_stdin, pid, b"x")
        self.assert_rpc_code(CODE.NOT_FOUND, self.signal, pid, pb.SIGNAL_SIGTERM)

    def test_send_signal_unspecified_rejected(self):
        """TestSendSignalUnspecifiedRejected: SIGNAL_UNSPECIFIED is INVALID_ARGUMENT; a
        SIGKILL then ends the process with a non-zero code."""
        call = self.start(["sleep", "30"])
        pid = self.recv_init(call)
        try:
            self.assert_rpc_code(CODE.INVALID_ARGUMENT, self.stub().SendSignal,
                                 pb.SendSignalRequest(process_id=pid), timeout=RPC_TIMEOUT)
        finally:
            self.signal(pid, pb.SIGNAL_SIGKILL)
        self.assertNotEqual(self.drain(call)[2], 0)

    def test_send_signal_terminates_process(self):
        """TestSendSignalTerminatesProcess: SIGTERM ends the process, and its ExitEvent does
        not say success."""
        call = self.start(["sleep", "30"])
        pid = self.recv_init(call)
        self.signal(pid, pb.SIGNAL_SIGTERM)
        self.assertNotEqual(self.drain(call)[2], 0)

    def test_send_signal_exit_code_minus_one(self):
        """Start (process.go): a process ended by a signal has exit_code -1 in its
        ExitEvent. (being changed: exit code -1 on gRPC)"""
        call = self.start(["sleep", "30"])
        pid = self.recv_init(call)
        self.signal(pid, pb.SIGNAL_SIGTERM)
        self.assertEqual(self.drain(call)[2], -1)

    def test_resize_tty_without_pty_fails(self):
        """TestResizeTTYWithoutPTYFails: ResizeTTY of a process without a terminal is
        FAILED_PRECONDITION."""
        call = self.start(["sleep", "30"])
        pid = self.recv_init(call)
        try:
            self.assert_rpc_code(CODE.FAILED_PRECONDITION, self.resize, pid, 80, 24)
        finally:
            self.signal(pid, pb.SIGNAL_SIGKILL)
        self.drain(call)

    def test_start_with_pty(self):
        """TestStartWithPTY: with pty {cols 80, rows 24} the command has a terminal of that
        size (stty size prints "24 80") and ends 0."""
        call = self.start(sh("stty size"), pty=(80, 24))
        self.recv_init(call)
        out, _, code = self.drain(call)
        self.assertEqual(code, 0)
        self.assertIn(b"24 80", out)

    def test_resize_tty_with_pty(self):
        """TestResizeTTYWithPTY: ResizeTTY of a process with a terminal succeeds."""
        call = self.start(["cat"], pty=(80, 24))
        pid = self.recv_init(call)
        try:
            self.resize(pid, 120, 40)
        finally:
            self.signal(pid, pb.SIGNAL_SIGKILL)
        self.drain(call)

    def test_resize_tty_zero_accepted(self):
        """ResizeTTY (process.go) passes the size to the terminal as it is: 0x0 is accepted.
        (being changed: gRPC codes on edge cases)"""
        call = self.start(["cat"], pty=(80, 24))
        pid = self.recv_init(call)
        try:
            self.resize(pid, 0, 0)
        finally:
            self.signal(pid, pb.SIGNAL_SIGKILL)
        self.drain(call)


class TestReferenceProcessEnvironment(RefCase):
    """buildCommand (process.go): a command inherits the daemon's environment, env_vars
    over it. sbxd passes the image's PATH and an allow-list of the rest (never its own
    SBXD_* settings). (being changed: environment passing)"""

    DAEMON_ENV = {
        "PATH": "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "JAVA_HOME": "/opt/java",
        "PYTHONPATH": "/opt/lib/python",
        "SANDBOX_BASE_DIR_HINT": "hint",
        "SBXD_TEST_MARKER": "never-for-commands",
    }

    def test_execute_inherits_daemon_environment(self):
        """buildCommand (process.go; TestExecuteEnvAndCwd sets env_vars over it): the
        command sees the daemon's PATH, PYTHONPATH and SANDBOX_* variables, a variable of
        env_vars replaces the daemon's, and sbxd's own SBXD_* never reach it."""
        r = self.execute(["env"], env={"JAVA_HOME": "/override"})
        env = dict(line.split("=", 1) for line in r.stdout.decode().splitlines() if "=" in line)
        self.assertEqual(env.get("PATH"), self.DAEMON_ENV["PATH"], env)
        self.assertEqual(env.get("PYTHONPATH"), "/opt/lib/python", env)
        self.assertEqual(env.get("SANDBOX_BASE_DIR_HINT"), "hint", env)
        self.assertEqual(env.get("JAVA_HOME"), "/override", "env_vars go over the daemon's")
        self.assertNotIn("SBXD_TEST_MARKER", env)


# ---------------------------------------------------------------------------------------
# pkg/server/integration_test.go


class TestReferenceIntegration(RefCase):

    def test_sandboxd_integration(self):
        """TestSandboxdIntegration: both protocols on one root: health 200; a file PUT over
        REST is read by a command over gRPC, read back over REST, listed alone in its
        directory, deleted (204), then 404."""
        self.assertEqual(self.d.request("GET", "/v1/health").status, 200)
        self.assertEqual(self.v1("PUT", "notes/hello.txt", b"hello from REST").status, 204)
        r = self.execute(["cat", "notes/hello.txt"])
        self.assertEqual((r.exit_code, r.stdout), (0, b"hello from REST"))
        r = self.v1("GET", "notes/hello.txt")
        self.assertEqual((r.status, r.body), (200, b"hello from REST"))
        self.assertEqual([e["name"] for e in self.listing("notes")["entries"]], ["hello.txt"])
        self.assertEqual(self.v1("DELETE", "notes/hello.txt").status, 204)
        self.assertEqual(self.v1("GET", "notes/hello.txt").status, 404)


class TestReferenceStartup(unittest.TestCase):

    def test_new_server_empty_root_dir_error(self):
        """TestNewServerEmptyRootDirError: a daemon given an empty root directory refuses to
        start (rather than serve "/") and exits non-zero without listening."""
        import tempfile
        tmp = tempfile.mkdtemp(prefix="sbxd-conf-")
        try:
            log = os.path.join(tmp, "log")
            with open(log, "wb") as f:
                p = subprocess.run([common.sbxd_bin(), "--listen", "127.0.0.1:0",
                                    "--grpc-listen", "off", "--log-format", "json",
                                    "--workspace", ""],
                                   env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=f, timeout=20, cwd=tmp)
            with open(log, "rb") as f:
                text = f.read().decode("utf-8", "replace")
            self.assertNotEqual(p.returncode, 0, text)
            self.assertNotIn('"listening"', text)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------
# pkg/pathutil/sandbox_test.go (SanitizePath, as the /v1 routes show it)


class TestReferencePaths(RefCase):

    def test_sanitize_path_inside_root(self):
        """TestSanitizePathInsideRoot: a relative path names that file under the root."""
        self.make("main.py", b"print()")
        self.assertEqual(self.v1("GET", "main.py").body, b"print()")

    def test_sanitize_path_root_itself(self):
        """TestSanitizePathRootItself: "." (and the empty path) is the root itself."""
        self.make("main.py", b"print()")
        for encoded in ("%2E", ""):
            with self.subTest(path=encoded):
                names = [e["name"] for e in self.listing(encoded)["entries"]]
                self.assertEqual(names, ["main.py"])

    def test_sanitize_path_traversal_rejected(self):
        """TestSanitizePathTraversalRejected: ../etc/passwd, ../../etc/passwd, .. and, where
        a exists, a/../../etc/passwd escape the root: 403 PERMISSION_DENIED."""
        self.mkdir("a")
        for p in ("../etc/passwd", "../../etc/passwd", "a/../../etc/passwd", ".."):
            with self.subTest(path=p):
                self.assert_error(self.v1("GET", quote(p)), 403, "PERMISSION_DENIED")

    def test_sanitize_path_traversal_through_missing_directory(self):
        """TestSanitizePathTraversalRejected (a/../../etc/passwd with no a): the path is
        cleaned before anything is looked up, so it escapes whether or not a exists: 403
        PERMISSION_DENIED (the python-runtime's get_safe_path agrees: 403 on /exists)."""
        self.assert_error(self.v1("GET", quote("a/../../etc/passwd")), 403, "PERMISSION_DENIED")
        r = self.d.request("GET", "/exists/" + quote("a/../../etc/passwd"))
        self.assertEqual(r.status, 403, r)

    def test_sanitize_path_absolute_path_confined(self):
        """TestSanitizePathAbsolutePathConfined: an absolute path is taken under the root
        ("/f.txt" is the root's f.txt), and one that spells the root's own path is that
        path inside it. (being changed: /workspace prefix stripping)"""
        self.make("f.txt", b"x")
        self.assertEqual(self.v1("GET", quote("/f.txt")).body, b"x")
        r = self.v1("GET", quote(os.path.join(self.ws, "f.txt")))
        self.assertEqual((r.status, r.body), (200, b"x"), r)
        self.assertEqual(self.v1("HEAD", quote(self.ws)).status, 200)

    def test_sanitize_path_sibling_prefix_absolute(self):
        """TestSanitizePathSiblingPrefixAbsolute: an absolute path that only shares a prefix
        with the root ("<root>-evil/f.txt", "/<name>-evil/f.txt") is not cut at the prefix:
        it is re-rooted whole under the root."""
        base = os.path.basename(self.ws)
        r = self.v1("PUT", quote("/%s-evil/f.txt" % base), b"1")
        self.assertEqual(r.status, 204, r)
        self.assertEqual(self.disk("%s-evil/f.txt" % base), b"1")
        r = self.v1("PUT", quote(self.ws + "-evil/f.txt"), b"2")
        self.assertEqual(r.status, 204, r)
        self.assertEqual(self.disk(self.ws.lstrip("/") + "-evil/f.txt"), b"2")
        self.assertFalse(os.path.exists(self.ws + "-evil"), "written beside the root")
        self.assertFalse(os.path.exists(os.path.join(self.ws, "-evil")), "cut at the prefix")

    def test_sanitize_path_symlink_escape_rejected(self):
        """TestSanitizePathSymlinkEscapeRejected: through a symlink to a directory outside
        the root, reading a file, writing a new one and writing one below a directory that
        does not exist yet are all 403, and nothing appears outside."""
        out = self.outside({"secret": b"s"})
        self.symlink(out, "link")
        self.assert_error(self.v1("GET", "link/secret"), 403)
        self.assert_error(self.v1("PUT", quote("link/newfile.txt"), b"x"), 403)
        self.assert_error(self.v1("PUT", quote("link/subdir/newfile.txt"), b"x"), 403)
        self.assertEqual(os.listdir(out), ["secret"])

    def test_sanitize_path_prefix_sibling_rejected(self):
        """TestSanitizePathPrefixSiblingRejected: ../<root's name>-evil/f.txt (a sibling
        whose name starts with the root's) is outside: 403."""
        sibling = self.ws + "-evil"
        os.mkdir(sibling)
        try:
            rel = "../%s-evil/f.txt" % os.path.basename(self.ws)
            self.assert_error(self.v1("GET", quote(rel)), 403)
            self.assert_error(self.v1("PUT", quote(rel), b"x"), 403)
            self.assertEqual(os.listdir(sibling), [])
        finally:
            shutil.rmtree(sibling)

    def test_sanitize_path_non_existent_write_target(self):
        """TestSanitizePathNonExistentWriteTarget: a write below directories that do not
        exist yet lands at that path under the root."""
        self.assertEqual(self.v1("PUT", quote("sub/dir/new.txt"), b"n").status, 204)
        self.assertEqual(self.disk("sub/dir/new.txt"), b"n")


if __name__ == "__main__":
    unittest.main()
