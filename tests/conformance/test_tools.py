"""sbxd's own agent tools, as docs/api.md promises them: content and name search (?grep=,
?glob=), line ranges (?lines=), exact edits (?edit) and GET /usage. Every answer is checked
against a schema written from the documentation (the fields, their types, none missing),
every refusal against sbxd's error body ({"code","message"}, application/json) with the
documented status, and the headers the routes promise (ETag, X-First-Line, the media types).
"""

import json
import unittest

import common
import jsonschema

TOKEN = "conformance-tools-token"

ERROR = {
    "type": "object",
    "required": ["code", "message"],
    "properties": {"code": {"type": "string", "pattern": "^[A-Z_]+$"},
                   "message": {"type": "string", "minLength": 1}},
}
NULLABLE_STR = {"type": ["string", "null"]}
UINT = {"type": "integer", "minimum": 0}
SUMMARY = {
    "type": "object",
    "required": ["type", "files_scanned", "bytes_read", "truncated", "max_matches",
                 "skipped_binary", "skipped_unreadable", "skipped_match_limit", "lines_cut",
                 "walk_cut", "duration_ms"],
    "properties": {
        "type": {"const": "summary"}, "files_scanned": UINT, "bytes_read": UINT,
        "matches": UINT, "entries": UINT, "truncated": {"type": "boolean"},
        "max_matches": UINT, "skipped_binary": UINT, "skipped_unreadable": UINT,
        "skipped_match_limit": UINT, "lines_cut": UINT,
        "walk_cut": {"enum": [None, "entries", "depth"]}, "duration_ms": {"type": "number"},
    },
}
LINES = {"type": "array", "items": {"type": "string"}}
MATCH = {
    "type": "object",
    "required": ["type", "path", "line", "column", "text", "before", "after"],
    "properties": {"type": {"const": "match"}, "path": {"type": "string"},
                   "line": {"type": "integer", "minimum": 1},
                   "column": {"type": "integer", "minimum": 1}, "text": {"type": "string"},
                   "text_cut": {"const": True}, "before": LINES, "after": LINES},
    "additionalProperties": False,
}
ENTRY = {
    "type": "object",
    "required": ["path", "type", "size"],
    "properties": {"path": {"type": "string"},
                   "type": {"enum": ["file", "directory", "symlink", "other"]}, "size": UINT},
    "additionalProperties": False,
}
EDIT = {
    "type": "object",
    "required": ["path", "etag", "size", "replacements", "lines", "lines_cut"],
    "properties": {
        "path": {"type": "string"}, "etag": {"type": "string", "pattern": '^".+"$'},
        "size": UINT, "replacements": {"type": "integer", "minimum": 1},
        "lines": {"type": "array", "items": {
            "type": "object", "required": ["start", "end"],
            "properties": {"start": {"type": "integer", "minimum": 1},
                           "end": {"type": "integer", "minimum": 1}}}},
        "lines_cut": {"type": "boolean"},
    },
}
DISK = {
    "type": "object",
    "required": ["name", "path", "used", "total", "free"],
    "properties": {"name": {"type": "string"}, "path": {"type": "string"},
                   "used": {"type": ["integer", "null"]}, "total": {"type": ["integer", "null"]},
                   "free": {"type": ["integer", "null"]}},
}
USAGE = {
    "type": "object",
    # E2B's Metrics names first: a tool written for E2B reads them.
    "required": ["ts", "cpu_count", "cpu_used_pct", "mem_used", "mem_total", "disk_used",
                 "disk_total", "cpu_limit", "cpu_interval_ms", "cpu_source", "memory_source",
                 "disks", "commands_running", "processes_running", "contexts"],
    "properties": {
        "ts": UINT, "cpu_count": {"type": "integer", "minimum": 1},
        "cpu_used_pct": {"type": "number", "minimum": 0, "maximum": 100},
        "mem_used": UINT, "mem_total": {"type": "integer", "minimum": 1},
        "disk_used": UINT, "disk_total": {"type": "integer", "minimum": 1},
        "cpu_limit": {"type": ["number", "null"]}, "cpu_interval_ms": UINT,
        "cpu_source": {"enum": ["cgroup", "proc", "rusage"]},
        "memory_source": {"enum": ["cgroup", "cgroup+meminfo", "meminfo"]},
        "disks": {"type": "array", "items": DISK, "minItems": 2},
        "commands_running": UINT, "processes_running": UINT, "contexts": UINT,
    },
}


def valid(case, schema, doc, what):
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc), key=str)
    case.assertEqual([e.message for e in errors], [], "%s: %r" % (what, doc))


class ToolsCase(common.SharedDaemonCase):

    def req(self, method, target, body=None, headers=None):
        return self.d.request(method, target, body=body, headers=headers)

    def put(self, path, data):
        r = self.req("PUT", "/files/" + path, data, {"Content-Type": "application/octet-stream"})
        self.assertIn(r.status, (200, 201, 204), r)

    def refused(self, r, status, code):
        self.assertEqual(r.status, status, r)
        self.assertEqual(r.content_type(), "application/json", r)
        body = r.json()
        valid(self, ERROR, body, "error")
        self.assertEqual(body["code"], code, body)

    def ndjson(self, target, accept=None):
        r = self.req("GET", target, headers={"Accept": accept} if accept else None)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.content_type(), "application/x-ndjson", r)
        return [json.loads(line) for line in r.body.decode().splitlines() if line]

    # -- search --------------------------------------------------------------------

    def test_grep_events_and_summary(self):
        self.put("ct/a.py", b"one\nx = f(a.b) $HOME\nthree\n")
        self.put("ct/b.c", b"f(a.b) $HOME\n")
        evs = self.ndjson("/files/ct?grep=f(a.b)%20%24HOME&context=1")
        self.assertEqual(evs[-1]["type"], "summary")
        valid(self, SUMMARY, evs[-1], "summary")
        self.assertEqual(evs[-1]["matches"], 2)
        for m in evs[:-1]:
            valid(self, MATCH, m, "match")
        byp = {m["path"]: m for m in evs[:-1]}
        self.assertEqual((byp["ct/a.py"]["line"], byp["ct/a.py"]["column"]), (2, 5))
        self.assertEqual(byp["ct/a.py"]["before"], ["one"])
        self.assertEqual(byp["ct/a.py"]["after"], ["three"])

    def test_grep_as_server_sent_events(self):
        self.put("cs/a.txt", b"needle\n")
        r = self.req("GET", "/files/cs?grep=needle", headers={"Accept": "text/event-stream"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.content_type(), "text/event-stream", r)
        events = [b for b in r.body.decode().split("\n\n") if b]
        self.assertEqual([e.split("\n")[0] for e in events], ["event: match", "event: summary"])
        valid(self, MATCH, json.loads(events[0].split("data: ", 1)[1]), "match")
        valid(self, SUMMARY, json.loads(events[1].split("data: ", 1)[1]), "summary")

    def test_glob_entries_and_summary(self):
        self.put("cg/x/m.py", b"1")
        self.put("cg/n.py", b"22")
        self.put("cg/o.txt", b"3")
        evs = self.ndjson("/files/cg?glob=**/*.py")
        valid(self, SUMMARY, evs[-1], "summary")
        self.assertEqual(evs[-1]["entries"], 2)
        for e in evs[:-1]:
            valid(self, ENTRY, e, "entry")
        self.assertEqual(sorted(e["path"] for e in evs[:-1]), ["cg/n.py", "cg/x/m.py"])

    def test_search_refusals(self):
        self.put("cr/f", b"x\n")
        for target, status, code in [
                ("/files/cr?grep=(&regex=true", 400, "INVALID_ARGUMENT"),
                ("/files/cr?grep=x&context=21", 400, "INVALID_ARGUMENT"),
                ("/files/cr?grep=x&max_matches=0", 400, "INVALID_ARGUMENT"),
                ("/files/cr?grep=x&type=cobol", 400, "INVALID_ARGUMENT"),
                ("/files/cr?glob=%5B", 400, "INVALID_ARGUMENT"),
                ("/files/cr/f?grep=x", 400, "INVALID_ARGUMENT"),
                ("/files/cr/none?grep=x", 404, "NOT_FOUND"),
                ("/files/../etc?grep=root", 403, "PERMISSION_DENIED")]:
            with self.subTest(target=target):
                self.refused(self.req("GET", target), status, code)

    # -- line ranges ---------------------------------------------------------------

    def test_lines_headers_and_body(self):
        self.put("cl.txt", b"a\nb\nc\nd\n")
        whole = self.req("GET", "/files/cl.txt")
        r = self.req("GET", "/files/cl.txt?lines=-2:&numbers=true")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("Content-Type"), "text/plain; charset=utf-8")
        self.assertEqual(r.header("ETag"), whole.header("ETag"))
        self.assertEqual(r.header("X-First-Line"), "3")
        self.assertEqual(r.body, b"     3\tc\n     4\td\n")
        self.refused(self.req("GET", "/files/cl.txt?lines=9:"), 416, "RANGE_NOT_SATISFIABLE")
        self.refused(self.req("GET", "/files/cl.txt?lines=3:1"), 400, "INVALID_ARGUMENT")
        self.refused(self.req("GET", "/files/nothing.txt?lines=1:"), 404, "NOT_FOUND")

    # -- edits ---------------------------------------------------------------------

    def edit(self, path, body, headers=None):
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        return self.req("POST", "/files/%s?edit" % path, json.dumps(body).encode(), h)

    def test_edit_answer_and_refusals(self):
        self.put("ce.py", b"DEBUG = True\nx = 1\nx = 1\n")
        etag = self.req("GET", "/files/ce.py").header("ETag")
        r = self.edit("ce.py", {"old": "DEBUG = True", "new": "DEBUG = False"},
                      {"If-Match": etag})
        self.assertEqual(r.status, 200, r)
        body = r.json()
        valid(self, EDIT, body, "edit")
        self.assertEqual(r.header("ETag"), body["etag"])
        self.assertEqual(body["lines"], [{"start": 1, "end": 1}])
        self.assertEqual(self.req("GET", "/files/ce.py").body, b"DEBUG = False\nx = 1\nx = 1\n")
        self.refused(self.edit("ce.py", {"old": "x = 1", "new": "x = 2"}), 409, "CONFLICT")
        self.refused(self.edit("ce.py", {"old": "nope", "new": "x"}), 404, "NOT_FOUND")
        self.refused(self.edit("ce.py", {"old": "", "new": "x"}), 400, "INVALID_ARGUMENT")
        self.refused(self.edit("ce.py", {"old": "x", "new": "y", "other": 1}), 400,
                     "INVALID_ARGUMENT")
        self.refused(self.edit("ce.py", {"old": "DEBUG", "new": "D"}, {"If-Match": etag}), 412,
                     "FAILED_PRECONDITION")
        r = self.edit("ce.py", {"edits": [{"old": "x = 1", "new": "y", "replace_all": True},
                                          {"old": "absent", "new": "z"}]})
        self.refused(r, 404, "NOT_FOUND")
        self.assertIn("edit 2 of 2", r.json()["message"])
        self.assertEqual(self.req("GET", "/files/ce.py").body, b"DEBUG = False\nx = 1\nx = 1\n",
                         "all or nothing")

    # -- usage ---------------------------------------------------------------------

    def test_usage_fields(self):
        r = self.req("GET", "/usage")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.content_type(), "application/json", r)
        valid(self, USAGE, r.json(), "usage")
        self.assertEqual([d["name"] for d in r.json()["disks"]], ["workspace", "tmp"])


class ToolsWithTokenCase(common.DaemonTestCase, common.SharedDaemonCase):
    """With a token, every one of these routes refuses a request without it."""

    DAEMON_ENV = {"SBXD_TOKEN": TOKEN}

    def test_each_route_wants_the_token(self):
        for method, target in [("GET", "/files/?grep=x"), ("GET", "/files/?glob=*"),
                               ("GET", "/files/f?lines=1:"), ("POST", "/files/f?edit"),
                               ("GET", "/usage")]:
            with self.subTest(target=target):
                r = self.d.request(method, target, body=b"{}" if method == "POST" else None,
                                   headers={"Content-Type": "application/json"})
                self.assertEqual(r.status, 401, r)
                self.assertEqual(r.content_type(), "application/json", r)
                valid(self, ERROR, r.json(), "error")
        r = self.d.request("GET", "/usage", headers={"Authorization": "Bearer " + TOKEN})
        self.assertEqual(r.status, 200, r)


if __name__ == "__main__":
    unittest.main()
