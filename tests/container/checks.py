#!/usr/bin/python3
"""The container tier's checks: sbxd's image under podman + gVisor (runsc), over HTTP.

    tests/container/checks.py IMAGE      (tests/container/run builds IMAGE and calls this)

Runs, one after another, each as a podman container under runsc with host networking and
sbxd on an ephemeral loopback port (--listen 127.0.0.1:0, read back from its log):

  plain    the image as `podman run IMAGE` runs it (podman's default capabilities)
  pod      the pod of k8s/sandboxtemplate.yaml: read-only root, /workspace a root-owned
           0777 host directory (as an emptyDir is) and /tmp a tmpfs, only the template's
           capabilities, no_new_privs, podman's default seccomp profile enforced inside
           gVisor (--oci-seccomp, as RuntimeDefault), the template's environment
  pidns    the pod plus SYS_ADMIN and SBXD_ISOLATION=pidns (k8s/components/pidns)
  caps     the pod and pidns configurations each without one of the template's
           capabilities: every capability must be needed by at least one of them

plain, pod and pidns also run python contexts on the image's ipykernel: a cold one (state,
numpy, pandas, a matplotlib figure as a PNG result) and a warm one (--warm-contexts), each
DELETEd with no process of its kernel left.

Prints PASS/FAIL per check, the /healthz isolation blocks and the capability table; exits
1 on any failure. Containers carry a label of this run and are removed on every path;
afterwards no host process may still name one of them.
"""

import base64
import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zlib

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATE = os.path.join(ROOT, "k8s", "sandboxtemplate.yaml")
RUNSC = shutil.which("runsc") or "/usr/bin/runsc"
RUN_ID = "ctest-%d" % os.getpid()
LABEL = "sbxd-test=" + RUN_ID
# How runsc runs here (docs/testing-gvisor.md): the host's network stack, so that sbxd's
# 127.0.0.1 is the host's; the ptrace platform (kvm hangs on these machines).
RUNSC_ARGS = ["--runtime", RUNSC, "--runtime-flag", "network=host",
              "--runtime-flag", "platform=ptrace", "--network", "host"]
GRACE_MS = 3000  # SBXD_SHUTDOWN_GRACE_MS in the pod runs: the drain test waits it out
TREE_KILLS = ("cgroup", "pidns", "uid", "pgid")
# A kernel's start and its first imports (numpy, pandas, matplotlib and its font cache) under
# gVisor's ptrace platform: seconds where the host takes one; these are generous bounds.
KERNEL_START_S = 60
KERNEL_EXEC_S = 120
WARM_CONTEXTS = 1  # sbxd's default --warm-contexts: none of the runs here sets it
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"  # a PNG file's first 8 bytes (PNG specification, 5.2)

passed = 0
failed = 0
container_ids = []
tmpdirs = []


def say(msg):
    print(msg, flush=True)


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        say("PASS %s" % name)
    else:
        failed += 1
        say("FAIL %s%s" % (name, ": " + detail if detail else ""))
    return ok


def podman(*args, timeout=120, check_rc=True):
    p = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check_rc and p.returncode != 0:
        raise RuntimeError("podman %s: %s" % (" ".join(args[:3]), p.stderr.strip()[-400:]))
    return p


class Sbxd:
    """One sbxd container."""

    def __init__(self, image, name, args, env=None):
        self.name = "sbxd-%s-%s" % (RUN_ID, name)
        self.port = None
        self.error = None
        cmd = ["run", "-d", "--name", self.name, "--label", LABEL, *RUNSC_ARGS, *args]
        for k, v in (env or {}).items():
            cmd += ["-e", "%s=%s" % (k, v)]
        cmd += [image, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"]
        p = podman(*cmd, check_rc=False)
        if p.returncode != 0:
            self.error = "podman run failed: " + p.stderr.strip()[-300:]
            return
        self.id = p.stdout.strip()
        container_ids.append(self.id)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = re.search(r'"event":"listening".*?"port":(\d+)', self.logs())
            if m:
                self.port = int(m.group(1))
                return
            if not self.running():
                self.error = "exited at start: " + self.last_error()
                return
            time.sleep(0.1)
        self.error = "no 'listening' line within 30 s: " + self.logs()[-300:]

    def logs(self):
        p = podman("logs", self.name, check_rc=False)
        return p.stdout + p.stderr

    def last_error(self):
        for line in reversed(self.logs().splitlines()):
            try:
                ev = json.loads(line)
            except ValueError:
                if line.strip():
                    return line.strip()
                continue
            if ev.get("level") == "error":
                return "%s%s" % (ev.get("message"), ": " + ev["error"] if ev.get("error") else "")
        return self.logs().strip()[-200:]

    def running(self):
        p = podman("inspect", "-f", "{{.State.Running}}", self.name, check_rc=False)
        return p.stdout.strip() == "true"

    def exit_code(self):
        p = podman("inspect", "-f", "{{.State.ExitCode}}", self.name, check_rc=False)
        return int(p.stdout.strip() or -1)

    def http(self, method, path, body=None, headers=None, timeout=30):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), data=body,
                                     method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def json(self, method, path, body=None, timeout=30):
        status, data = self.http(method, path, body, {"Content-Type": "application/json"},
                                 timeout)
        try:
            return status, json.loads(data)
        except ValueError:
            return status, {"_raw": data.decode(errors="replace")}

    def execute(self, req, timeout=60):
        if isinstance(req, str):
            req = {"command": req}
        return self.json("POST", "/execute", req, timeout)[1]

    def healthz(self):
        return self.json("GET", "/healthz")

    def stop(self, timeout):
        """podman stop -t timeout: SIGTERM, SIGKILL after timeout. Returns (exit, seconds)."""
        t0 = time.monotonic()
        podman("stop", "-t", str(timeout), self.name, timeout=timeout + 60, check_rc=False)
        return self.exit_code(), time.monotonic() - t0

    def sandbox_rss_kib(self):
        """VmRSS of the host processes of this container's sandbox (sentry, gofer)."""
        total = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmd = f.read().split(b"\0")
                with open("/proc/%s/status" % pid) as f:
                    rss = [int(l.split()[1]) for l in f if l.startswith("VmRSS:")]
            except OSError:
                continue
            if rss and cmd and cmd[0].startswith(b"runsc-") and self.id.encode() in b" ".join(cmd):
                total[cmd[0].decode()] = total.get(cmd[0].decode(), 0) + rss[0]
        return total

    def ps(self):
        """Every process of the container as (pid, ppid, command line), read from /proc by
        podman exec: it sees the sandbox's root PID namespace, so also what runs in the PID
        namespaces sbxd makes (a command's /proc shows only its own). None if exec failed."""
        p = podman("exec", self.name, "python3", "-c", PS_PY, timeout=60, check_rc=False)
        try:
            return [tuple(x) for x in json.loads(p.stdout)]
        except ValueError:
            return None

    def remove(self):
        podman("rm", "-f", "-v", "-t", "0", self.name, check_rc=False)


PS_PY = ("import json, os\n"
         "ps = []\n"
         "for p in os.listdir('/proc'):\n"
         "    if not p.isdigit() or int(p) == os.getpid():\n"
         "        continue\n"
         "    try:\n"
         "        cmd = open('/proc/%s/cmdline' % p, 'rb').read()\n"
         "        st = open('/proc/%s/stat' % p).read()\n"
         "    except OSError:\n"
         "        continue\n"
         "    ppid = int(st.rsplit(')', 1)[1].split()[1])\n"
         "    ps.append((int(p), ppid, cmd.replace(b'\\0', b' ').decode(errors='replace')))\n"
         "print(json.dumps(ps))\n")


def cleanup():
    """Remove every container of this run, then look for sandbox processes left behind."""
    p = podman("ps", "-a", "-q", "--filter", "label=" + LABEL, check_rc=False)
    ids = p.stdout.split()
    if ids:
        podman("rm", "-f", "-v", "-t", "0", *ids, check_rc=False)
    for d in tmpdirs:
        shutil.rmtree(d, ignore_errors=True)
    tmpdirs.clear()
    time.sleep(0.5)
    strays = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if any(cid.encode() in cmd for cid in container_ids):
            strays.append((int(pid), cmd.replace(b"\0", b" ")[:120].decode(errors="replace")))
    for pid, _ in strays:  # processes of containers this run started, by their pid
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return strays


# ---- the pod's configuration, from the template -------------------------------------------

def pod_config():
    """podman arguments and environment equivalent to the template's pod."""
    with open(TEMPLATE) as f:
        t = yaml.safe_load(f)
    spec = t["spec"]["podTemplate"]["spec"]
    c = spec["containers"][0]
    sc = c["securityContext"]
    caps = list(sc["capabilities"]["add"])
    assert sc["capabilities"]["drop"] == ["ALL"], "the template must drop ALL"
    env = {e["name"]: e["value"] for e in c.get("env", [])}
    args = ["--user", "%d:%d" % (sc.get("runAsUser", 0), sc.get("runAsGroup", 0))]
    if sc.get("readOnlyRootFilesystem"):
        args += ["--read-only", "--read-only-tmpfs=false"]
    if sc.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    if (spec.get("securityContext", {}).get("seccompProfile", {}).get("type") ==
            "RuntimeDefault" or sc.get("seccompProfile", {}).get("type") == "RuntimeDefault"):
        args += ["--runtime-flag", "oci-seccomp"]  # podman's default profile, in gVisor
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    assert set(mounts) == {"/workspace", "/tmp"}, "volumes other than /workspace and /tmp"
    return args, caps, env


def pod_args(base_args, caps):
    a = list(base_args) + ["--cap-drop", "ALL"]
    for cap in caps:
        a += ["--cap-add", cap]
    ws = tempfile.mkdtemp(prefix="sbxd-ctest-ws-")
    os.chmod(ws, 0o777)  # an emptyDir: root's, world-writable
    tmpdirs.append(ws)
    a += ["-v", "%s:/workspace" % ws, "--tmpfs", "/tmp:rw,mode=1777,size=64m"]
    return a, ws


# ---- checks --------------------------------------------------------------------------------

def check_healthz(s, label):
    status, h = s.healthz()
    if not check("%s: GET /healthz answers 200 ok" % label, status == 200 and h.get("status") == "ok",
                 "%s %s" % (status, h)):
        return {}
    iso = h.get("isolation", {})
    fields = ["cgroup", "memory", "pids", "cpu", "tree_kill", "seccomp", "capabilities",
              "no_new_privs", "user", "groups", "fds", "environment", "core_dumps", "detected"]
    missing = [f for f in fields if f not in iso]
    check("%s: isolation reports every mechanism" % label, not missing, "missing %s" % missing)
    tk = iso.get("tree_kill")
    check("%s: tree_kill is a known mode (%s)" % (label, tk), tk in TREE_KILLS)
    det = iso.get("detected", {})
    # Honest: a cgroup is claimed only where one was found delegated, and with none nothing
    # is said to be enforced by one.
    if iso.get("cgroup") == "none":
        check("%s: cgroup none: nothing claims a cgroup" % label,
              tk != "cgroup" and iso.get("memory") in ("none", "rlimit-as") and
              iso.get("pids") == "none" and iso.get("cpu") == "rlimit-cpu",
              json.dumps(iso))
    else:
        check("%s: cgroup v2 only where delegated" % label,
              iso.get("cgroup") == "v2" and det.get("cgroup2") == "delegated", json.dumps(iso))
    if tk == "pidns":
        check("%s: pidns: detected by the probe" % label,
              det.get("pidns") in ("direct", "via user namespace") and "proc" in iso,
              json.dumps(det))
    if tk == "uid":
        check("%s: uid: the range is usable and commands get its uids" % label,
              det.get("uid_range") == "usable" and
              re.match(r"^\d+-\d+:\d+$", iso.get("user", "")) is not None, json.dumps(iso))
    passed = iso.get("environment_passed")
    check("%s: seccomp deny-list, no_new_privs, fds closed, allow-listed environment" % label,
          iso.get("seccomp") == "deny-list" and iso.get("no_new_privs") is True and
          iso.get("fds") == "closed" and iso.get("environment") == "allow-list" and
          isinstance(passed, list) and not any(n.upper().startswith("SBXD_") for n in passed)
          and iso.get("core_dumps") is False, json.dumps(iso))
    return iso


def expected_uids(iso):
    """The uids and gid /healthz says commands run as."""
    m = re.match(r"^(\d+)(?:-(\d+))?:(\d+)$", iso.get("user", ""))
    if not m:
        return None, None
    lo = int(m.group(1))
    hi = int(m.group(2) or lo)
    return range(lo, hi + 1), int(m.group(3))


def check_identity(s, iso, label):
    r = s.execute("id -u; id -g; id -G; grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status")
    out = r.get("stdout", "").split("\n")
    uids, gid = expected_uids(iso)
    ok = r.get("status") == "exited" and r.get("exit_code") == 0 and len(out) >= 3
    if not check("%s: a command runs (id)" % label, ok, json.dumps(r)[:300]):
        return
    uid, g, groups = int(out[0]), int(out[1]), out[2].split()
    check("%s: commands run as /healthz's user (%s): uid %d gid %d groups %s" %
          (label, iso.get("user"), uid, g, " ".join(groups)),
          uids is not None and uid in uids and g == gid and groups == [str(gid)])
    caps = dict(l.split(":\t") for l in out[3:] if ":\t" in l)
    zero = "0000000000000000"
    check("%s: no capabilities (CapEff %s)" % (label, caps.get("CapEff")),
          all(caps.get(k) == zero for k in ("CapInh", "CapPrm", "CapEff")) and
          caps.get("CapAmb", zero) == zero, json.dumps(caps))
    if iso.get("capabilities") == "none":
        check("%s: the bounding set is empty too" % label, caps.get("CapBnd") == zero,
              json.dumps(caps))
    return uid


def check_python(s, label):
    r = s.execute("python3 -c 'print(6*7)'")
    check("%s: python3 -c 'print(6*7)' prints 42" % label,
          r.get("status") == "exited" and r.get("exit_code") == 0 and r.get("stdout") == "42\n",
          json.dumps(r)[:300])
    r = s.execute({"argv": ["python3", "-c", "print(6*7)"]})
    check("%s: the same as argv, without a shell" % label, r.get("stdout") == "42\n",
          json.dumps(r)[:300])


def check_tools(s, label):
    tools = ["sh", "bash", "cat", "cp", "find", "xargs", "grep", "sed", "tar", "gzip", "ps",
             "python3", "sbx", "sbxd"]
    r = s.execute("for t in %s; do command -v $t >/dev/null || echo missing $t; done; "
                  "test -s /etc/ssl/certs/ca-certificates.crt || echo missing ca-certificates; "
                  "sbx --version >/dev/null || echo sbx fails" % " ".join(tools))
    check("%s: everyday tools, CA certificates and sbx are there" % label,
          r.get("exit_code") == 0 and r.get("stdout") == "", json.dumps(r)[:300])


def check_files(s, label):
    data = os.urandom(65536) + b"\x00\xff end"
    status, _ = s.http("PUT", "/files/rt/data.bin", data,
                       {"Content-Type": "application/octet-stream"})
    check("%s: PUT /files/rt/data.bin (%d bytes)" % (label, len(data)), status in (200, 201, 204),
          str(status))
    status, got = s.http("GET", "/files/rt/data.bin")
    check("%s: GET returns the same bytes" % label, status == 200 and got == data,
          "%s, %d bytes" % (status, len(got)))
    r = s.execute("sha256sum rt/data.bin")
    check("%s: a command reads the uploaded file" % label,
          r.get("stdout", "").split(" ")[0] == hashlib.sha256(data).hexdigest(),
          json.dumps(r)[:300])
    r = s.execute("printf 'made by a command\\n' > made.txt")
    status, got = s.http("GET", "/files/made.txt")
    check("%s: GET returns a file a command wrote" % label,
          r.get("exit_code") == 0 and status == 200 and got == b"made by a command\n",
          "%s %r %s" % (status, got[:80], json.dumps(r)[:200]))
    # PUT made rt/ for the command user; commands must be able to write in it (under uid
    # isolation they run as other uids of the command group).
    # (find -printf, not stat: this gVisor's statx refuses coreutils' flags.)
    r = s.execute("printf x > rt/made.txt")
    check("%s: a command writes into a directory PUT /files made" % label,
          r.get("exit_code") == 0, "%s (the directory: %s)" % (
              r.get("stderr", "").strip(),
              s.execute("find rt -maxdepth 0 -printf '%m %U:%G'").get("stdout", "").strip()))


def check_archive(s, label):
    """A tree out as tar (libarchive, which the image must carry for sbxd to load) and back
    in, whole."""
    r = s.execute("mkdir -p tree/sub && printf a > tree/a && printf b > tree/sub/b && "
                  "ln -s ../a tree/sub/l")
    status, tar = s.http("GET", "/files/tree?archive=tar")
    check("%s: GET ?archive=tar packs a tree" % label,
          r.get("exit_code") == 0 and status == 200 and len(tar) >= 2048,
          "%s, %d bytes, %s" % (status, len(tar), json.dumps(r)[:200]))
    status, got = s.http("PUT", "/files/tree2?archive=tar", tar,
                         {"Content-Type": "application/x-tar"})
    r = s.execute("cat tree2/a tree2/sub/b && readlink tree2/sub/l")
    check("%s: PUT ?archive=tar extracts it whole" % label,
          status == 201 and r.get("stdout") == "ab../a\n",
          "%s %r %s" % (status, got[:200], json.dumps(r)[:200]))


def check_mcp(s, label):
    """The MCP endpoint of the image's sbxd: a session, and a tool call that runs a command
    as /execute would."""
    url = "http://127.0.0.1:%d/mcp" % s.port
    hdrs = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}

    def post(msg, sid=None):
        h = dict(hdrs, **({"Mcp-Session-Id": sid} if sid else {}))
        req = urllib.request.Request(url, data=json.dumps(msg).encode(), method="POST",
                                     headers=h)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.headers.get("Mcp-Session-Id"), json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, None, {"_raw": e.read().decode(errors="replace")}

    status, sid, init = post({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                         "clientInfo": {"name": "checks", "version": "1"}}})
    status2, _, res = post({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                            "params": {"name": "run_command",
                                       "arguments": {"command": "echo mcp; id -u"}}}, sid)
    sc = res.get("result", {}).get("structuredContent", {})
    check("%s: MCP initialize and tools/call run_command" % label,
          status == 200 and sid and status2 == 200 and sc.get("exit_code") == 0 and
          sc.get("stdout", "").startswith("mcp\n"),
          "%s %s %s" % (status, json.dumps(init)[:200], json.dumps(res)[:300]))


def check_handover(s, label):
    """A file one command made private stays the next command's: under uid isolation sbxd
    hands what a command created back to the command user, group-writable."""
    a = s.execute("umask 077; mkdir -p hand/dir && echo a > hand/priv.txt && "
                  "echo a > hand/dir/f && id -u")
    b = s.execute("echo b >> hand/priv.txt && echo b >> hand/dir/f && touch hand/dir/g && "
                  "cat hand/priv.txt && id -u")
    return check("%s: the next command (uid %s, then %s) may write what the last one made "
                 "private" % (label, a.get("stdout", "").strip(),
                              b.get("stdout", "").strip().split("\n")[-1]),
                 a.get("exit_code") == 0 and b.get("exit_code") == 0 and
                 b.get("stdout", "").startswith("a\nb\n"),
                 "%s | %s" % (json.dumps(a)[:200], json.dumps(b)[:200]))


def count_zombies(s):
    r = s.execute({"argv": ["python3", "-c",
                            "import os\n"
                            "z = []\n"
                            "for p in os.listdir('/proc'):\n"
                            "    try:\n"
                            "        st = open('/proc/%s/stat' % p).read()\n"
                            "    except (OSError, ValueError):\n"
                            "        continue\n"
                            "    if st.rsplit(')', 1)[1].split()[0] == 'Z':\n"
                            "        z.append(st[:60])\n"
                            "print(len(z)); print(z)\n"]})
    try:
        return int(r["stdout"].split("\n")[0]), r["stdout"]
    except (KeyError, ValueError, IndexError):
        return -1, json.dumps(r)[:300]


def check_pid1(s, label):
    r = s.execute("tr '\\0' ' ' </proc/1/cmdline")
    check("%s: PID 1 is sbxd (%s)" % (label, r.get("stdout", "").strip()),
          r.get("stdout", "").startswith("/usr/local/bin/sbxd"), json.dumps(r)[:300])
    # A background process whose child is orphaned while it runs: the orphan is re-parented
    # to PID 1 (or to its namespace's init), exits, and must be reaped, not left a zombie.
    status, p = s.json("POST", "/processes",
                       {"command": "for i in 1 2 3 4 5; do (sleep 0.2 &); done; sleep 3"})
    for _ in range(3):
        s.execute("for i in 1 2 3; do (sleep 0.1 &); done; sh -c 'sleep 0.1 &'")
    time.sleep(1.0)
    n, detail = count_zombies(s)
    check("%s: orphans are reaped (zombies: %d)" % (label, n), n == 0, detail)
    if status in (200, 201) and "id" in p:
        s.http("DELETE", "/processes/" + p["id"])


def check_readonly(s, ws, label, command_uid):
    r = s.execute("echo w > /workspace/rw.txt && echo t > /tmp/rw.txt && "
                  "cat /workspace/rw.txt /tmp/rw.txt")
    check("%s: a command writes to /workspace and /tmp" % label,
          r.get("exit_code") == 0 and r.get("stdout") == "w\nt\n", json.dumps(r)[:300])
    r = s.execute("touch /var/tmp/x")
    check("%s: the root filesystem is read-only (/var/tmp: %s)" %
          (label, r.get("stderr", "").strip()),
          r.get("exit_code") != 0 and "Read-only file system" in r.get("stderr", ""),
          json.dumps(r)[:300])
    r = s.execute("touch /usr/x")
    check("%s: /usr cannot be written" % label, r.get("exit_code") != 0, json.dumps(r)[:300])
    try:
        st = os.stat(os.path.join(ws, "rw.txt"))
        check("%s: the file is the command user's on the volume (uid %d)" % (label, st.st_uid),
              st.st_uid == 1000 or st.st_uid == command_uid)
    except OSError as e:
        check("%s: the file is on the volume" % label, False, str(e))


def png_problem(data):
    """None if data is a whole PNG (its signature, IHDR first, every chunk's CRC right, IEND
    last and nothing after it, a non-empty image), else what is wrong with it."""
    if not data.startswith(PNG_SIGNATURE):
        return "no PNG signature: %r" % data[:8]
    off, kinds = len(PNG_SIGNATURE), []
    while off < len(data) and (not kinds or kinds[-1] != b"IEND"):
        if off + 12 > len(data):
            return "cut short after %s" % kinds
        n, kind = struct.unpack(">I4s", data[off:off + 8])
        body, crc = data[off + 8:off + 8 + n], data[off + 8 + n:off + 12 + n]
        if len(crc) != 4:
            return "chunk %r cut short" % kind
        if zlib.crc32(kind + body) != struct.unpack(">I", crc)[0]:
            return "chunk %r: wrong CRC" % kind
        kinds.append(kind)
        off += 12 + n
    if not kinds or kinds[0] != b"IHDR" or kinds[-1] != b"IEND" or off != len(data):
        return "chunks %s, %d of %d bytes" % (kinds, off, len(data))
    if 0 in struct.unpack(">II", data[16:24]) or b"IDAT" not in kinds:
        return "no image data"
    return None


def proc_tree(ps, root):
    """root and its descendants in a process table from Sbxd.ps: {pid: command line}."""
    tree = {root}
    while True:
        more = {pid for pid, ppid, _ in ps if ppid in tree} - tree
        if not more:
            return {pid: cmd for pid, _, cmd in ps if pid in tree}
        tree |= more


def kernels(procs):
    """The ipykernel processes among {pid: command line}."""
    return {pid: cmd for pid, cmd in procs.items() if "ipykernel" in cmd}


def run_code(s, ctx, code):
    status, r = s.json("POST", "/contexts/%s/execute" % ctx,
                       {"code": code, "timeout_ms": KERNEL_EXEC_S * 1000},
                       timeout=KERNEL_EXEC_S + 30)
    return r if status == 200 else dict(r, http_status=status)


def main_result(r):
    """The text/plain of an execution's main result (the last expression's value)."""
    return next((x.get("text/plain") for x in r.get("results", []) if x.get("is_main_result")),
                None)


def delete_kernel(s, ctx, tree, label, what):
    """DELETE a context; then none of its processes (tree, from Sbxd.ps) may remain."""
    status, d = s.json("DELETE", "/contexts/" + ctx)
    check("%s: DELETE /contexts/{id} of %s: 200, dead" % (label, what),
          status == 200 and d.get("state") == "dead", "%s %s" % (status, json.dumps(d)[:300]))
    deadline = time.monotonic() + 10
    while True:
        ps = s.ps()
        now = {pid: cmd for pid, _, cmd in ps or []}
        left = {pid: cmd for pid, cmd in tree.items() if ps is None or now.get(pid) == cmd}
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    check("%s: none of %s's %d processes outlives its DELETE" % (label, what, len(tree)),
          not left, "podman exec ps failed" if ps is None else "left: %s" % left)
    return now


def wait_warm(s):
    """Wait for sbxd's warm kernel (made after start-up); True once GET /kernels says it is
    ready."""
    deadline = time.monotonic() + KERNEL_START_S
    while s.json("GET", "/kernels")[1].get("warm_ready", 0) < 1:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)
    return True


def check_kernel(s, label):
    """A python context on the image's ipykernel: started cold, its state kept from one
    execution to the next, numpy and pandas, a matplotlib figure as a PNG result; a warm
    kernel taken; each DELETE leaves none of the kernel's processes."""
    status, k = s.json("GET", "/kernels")
    names = [x.get("name") for x in k.get("kernels", [])]
    if not check("%s: GET /kernels lists the image's python3 kernel (%s)" %
                 (label, ", ".join(map(str, names))),
                 status == 200 and "python3" in names, "%s %s" % (status, json.dumps(k)[:300])):
        return
    # Cold: a request with env is never given a warm kernel (those are made without any).
    t0 = time.monotonic()
    status, c = s.json("POST", "/contexts", {"language": "python", "env": {"CTEST": label}},
                       timeout=KERNEL_START_S)
    secs = time.monotonic() - t0
    if not check("%s: POST /contexts python starts a kernel (%.1f s)" % (label, secs),
                 status == 201 and c.get("kernel") == "python3" and c.get("state") == "idle"
                 and isinstance(c.get("pid"), int),
                 "%s %s; sbxd: %s" % (status, json.dumps(c)[:300], s.last_error())):
        return
    ctx = c["id"]
    t0 = time.monotonic()
    r = run_code(s, ctx, "import numpy as np\n"
                         "import pandas as pd\n"
                         "df = pd.DataFrame({'x': np.arange(1, 11)})\n"
                         "df['y'] = df.x ** 2\n"
                         "print(len(df))\n"
                         "int(df.y.sum())\n")
    check("%s: numpy and pandas: 10 rows, sum of squares 385 (%.1f s)" %
          (label, time.monotonic() - t0),
          r.get("status") == "ok" and r.get("stdout") == "10\n" and main_result(r) == "385",
          json.dumps(r)[:400])
    r = run_code(s, ctx, "df['z'] = np.sqrt(df.y)\nint(df.z.sum())\n")
    check("%s: the next execution sees the last one's variables (execution_count %s)" %
          (label, r.get("execution_count")),
          r.get("status") == "ok" and main_result(r) == "55" and r.get("execution_count") == 2,
          json.dumps(r)[:400])
    t0 = time.monotonic()
    r = run_code(s, ctx, "import matplotlib.pyplot as plt\n"
                         "fig, ax = plt.subplots(figsize=(4, 3))\n"
                         "ax.plot(df.x, df.y)\n"
                         "plt.show()\n")
    pngs = [x["image/png"] for x in r.get("results", []) if isinstance(x.get("image/png"), str)]
    try:
        # (As the kernel sent it: ipykernel's base64 ends with a newline, as MIME's may.)
        png = base64.b64decode("".join(pngs[0].split()), validate=True) if pngs else b""
        bad = png_problem(png) if pngs else "no image/png in %s" % json.dumps(r)[:400]
    except ValueError as e:
        png, bad = b"", "not base64: %s" % e
    size = "%dx%d, %d bytes" % (struct.unpack(">II", png[16:24]) + (len(png),)) if not bad else ""
    check("%s: a matplotlib figure comes back as a PNG result (%s, %.1f s)" %
          (label, size or "none", time.monotonic() - t0),
          r.get("status") == "ok" and len(pngs) == 1 and not bad,
          "%s; stderr %r" % (bad, r.get("stderr", "")[-300:]))
    # The context's pid is its kernel's, or under pidns the init of the kernel's namespace.
    ps = s.ps()
    tree = proc_tree(ps or [], c["pid"])
    if not check("%s: the kernel is a process of the container (%s)" %
                 (label, "; ".join("%d %s" % (p, cmd[:48]) for p, cmd in sorted(tree.items()))),
                 kernels(tree), "podman exec ps: %s" % ("failed" if ps is None else ps)):
        return
    delete_kernel(s, ctx, tree, label, "the cold kernel")

    # Warm: sbxd keeps one started (--warm-contexts); a plain request takes it at once.
    wait_warm(s)
    before = s.ps() or []
    t0 = time.monotonic()
    status, c = s.json("POST", "/contexts", {"language": "python"}, timeout=KERNEL_START_S)
    secs = time.monotonic() - t0
    if not check("%s: a plain POST /contexts python takes the warm kernel, started before "
                 "(%.2f s)" % (label, secs),
                 status == 201 and secs < 5 and kernels(proc_tree(before, c.get("pid"))),
                 "%s %s; processes before: %s" % (status, json.dumps(c)[:300], before)):
        return
    r = run_code(s, c["id"], "x = 6 * 7\nx\n")
    check("%s: the warm kernel runs code" % label,
          r.get("status") == "ok" and main_result(r) == "42", json.dumps(r)[:300])
    tree = proc_tree(s.ps() or [], c["pid"])
    rest = kernels(delete_kernel(s, c["id"], tree, label, "the warm kernel"))
    # What remains is the pool's next kernel, and no more.
    check("%s: no kernel is left but the warm pool's (%d, --warm-contexts %d)" %
          (label, len(rest), WARM_CONTEXTS), len(rest) <= WARM_CONTEXTS, "%s" % rest)


def start_escapee(s):
    """A command that leaves a setsid'ed child meant to write a file 2 s later."""
    r = s.execute("setsid sh -c 'sleep 2; echo alive > /workspace/escapee' "
                  "</dev/null >/dev/null 2>&1 & echo started")
    return r.get("stdout") == "started\n", time.monotonic()


def check_escapee(s, ws, started, label):
    ok, t0 = started
    time.sleep(max(0, 3.0 - (time.monotonic() - t0)))
    alive = os.path.exists(os.path.join(ws, "escapee"))
    return check("%s: a setsid escapee dies with its command" % label, ok and not alive,
                 "started=%s, escapee wrote its file: %s" % (ok, alive))


def check_timeout(s, label):
    r = s.execute({"command": "sleep 30", "timeout_ms": 1000})
    return check("%s: a timeout kills the command (%s ms)" % (label, r.get("duration_ms")),
                 r.get("status") == "timeout" and (r.get("duration_ms") or 1e9) < 5000,
                 json.dumps(r)[:300])


def check_signal(s, label):
    status, p = s.json("POST", "/processes", {
        "command": "trap 'echo got-term; exit 3' TERM; while :; do sleep 0.1; done"})
    if not check("%s: a background process starts" % label, status in (200, 201) and "id" in p,
                 json.dumps(p)[:300]):
        return False
    time.sleep(0.5)
    s.json("POST", "/processes/%s/signal" % p["id"], {"signal": "SIGTERM"})
    deadline = time.monotonic() + 5
    st = {}
    while time.monotonic() < deadline:
        st = s.json("GET", "/processes/" + p["id"])[1]
        if st.get("status") != "running":
            break
        time.sleep(0.1)
    ok = check("%s: SIGTERM reaches a background process (exit %s)" %
               (label, st.get("exit_code")),
               st.get("status") == "exited" and st.get("exit_code") == 3, json.dumps(st)[:300])
    s.http("DELETE", "/processes/" + p["id"])
    return ok


def check_drain(s, label):
    """SIGTERM with a background process that ignores it: sbxd waits out its grace period,
    kills it, and exits 0, well before podman's SIGKILL."""
    status, p = s.json("POST", "/processes", {
        "command": "trap '' TERM; while :; do sleep 0.2; done"})
    time.sleep(0.3)
    code, secs = s.stop(GRACE_MS // 1000 + 15)
    logs = s.logs()
    check("%s: SIGTERM: exit 0 in %.1f s (grace %d ms, podman's limit %d s)" %
          (label, secs, GRACE_MS, GRACE_MS // 1000 + 15),
          code == 0 and GRACE_MS / 1000 - 0.5 <= secs < GRACE_MS / 1000 + 10 and
          '"event":"killing"' in logs and '"event":"stopped"' in logs,
          "exit %s after %.1f s; %s" % (code, secs, logs[-300:]))


# ---- scenarios -----------------------------------------------------------------------------

def scenario_plain(image):
    say("\n== plain: podman run %s (podman's default capabilities, root filesystem writable)"
        % image)
    s = Sbxd(image, "plain", [])
    if not check("plain: sbxd starts under runsc", s.port is not None, s.error or ""):
        return
    iso = check_healthz(s, "plain")
    say("plain: isolation %s" % json.dumps(iso, sort_keys=True))
    check_pid1(s, "plain")
    check_python(s, "plain")
    check_tools(s, "plain")
    check_files(s, "plain")
    check_identity(s, iso, "plain")
    check_kernel(s, "plain")
    t0 = time.monotonic()
    podman("kill", "-s", "TERM", s.name, check_rc=False)
    podman("wait", s.name, timeout=30, check_rc=False)
    secs = time.monotonic() - t0
    code = s.exit_code()
    check("plain: podman kill -s TERM: exit %s in %.1f s" % (code, secs),
          code == 0 and secs < 10, s.logs()[-300:])
    s.remove()


def scenario_pod(image, base_args, caps, env, label, extra_caps=(), extra_env=None):
    e = dict(env, SBXD_SHUTDOWN_GRACE_MS=str(GRACE_MS), **(extra_env or {}))
    args, ws = pod_args(base_args, list(caps) + list(extra_caps))
    say("\n== %s: the template's pod: capabilities %s; env %s" %
        (label, " ".join(list(caps) + list(extra_caps)),
         " ".join("%s=%s" % kv for kv in sorted(e.items()))))
    s = Sbxd(image, label, args, e)
    if not check("%s: sbxd starts under runsc" % label, s.port is not None, s.error or ""):
        return None
    iso = check_healthz(s, label)
    say("%s: isolation %s" % (label, json.dumps(iso, sort_keys=True)))
    rss = s.sandbox_rss_kib()
    say("%s: gVisor sandbox, idle: %s" %
        (label, ", ".join("%s %.1f MiB RSS" % (k, v / 1024) for k, v in sorted(rss.items()))))
    if wait_warm(s):
        rss = s.sandbox_rss_kib()
        say("%s: gVisor sandbox, idle with its warm kernel: %s" %
            (label, ", ".join("%s %.1f MiB RSS" % (k, v / 1024) for k, v in sorted(rss.items()))))
    check("%s: the capability bounding set is emptied (capabilities: %s)" %
          (label, iso.get("capabilities")), iso.get("capabilities") == "none")
    check("%s: tree_kill contains setsid escapees (%s)" % (label, iso.get("tree_kill")),
          iso.get("tree_kill") in ("cgroup", "pidns", "uid"))
    esc = start_escapee(s)
    uid = check_identity(s, iso, label)
    check_readonly(s, ws, label, uid)
    check_python(s, label)
    check_files(s, label)
    check_archive(s, label)
    check_mcp(s, label)
    check_handover(s, label)
    check_timeout(s, label)
    check_signal(s, label)
    check_escapee(s, ws, esc, label)
    check_kernel(s, label)
    check_pid1(s, label)
    check_drain(s, label)
    s.remove()
    return iso


def probe(image, base_args, caps, env, label):
    """The capability matrix's run: which checks fail. Returns a list of failures."""
    args, ws = pod_args(base_args, caps)
    s = Sbxd(image, label, args, dict(env, SBXD_SHUTDOWN_GRACE_MS=str(GRACE_MS)))
    fails = []
    try:
        if s.port is None:
            return ["does not start (%s)" % s.error.replace("exited at start: ", "")]
        iso = s.healthz()[1].get("isolation", {})
        if iso.get("capabilities") != "none":
            fails.append("bounding set kept (capabilities: %s)" % iso.get("capabilities"))
        esc = start_escapee(s)
        if not esc[0]:
            fails.append("commands fail (%s)" % s.execute("true").get("error", "?"))
        status, _ = s.http("PUT", "/files/p.txt", b"p")
        if status not in (200, 201, 204):
            fails.append("PUT /files: %d" % status)
        a = s.execute("umask 077; mkdir -p hand && echo a > hand/priv.txt")
        b = s.execute("echo b >> hand/priv.txt")
        if a.get("exit_code") == 0 and b.get("exit_code") != 0:
            fails.append("a command's private file is not handed back (%s)" %
                         b.get("stderr", "").strip())
        r = s.execute({"command": "sleep 30", "timeout_ms": 1000})
        if r.get("status") != "timeout" or (r.get("duration_ms") or 1e9) >= 5000:
            fails.append("timeout: %s" % r.get("status"))
        status, p = s.json("POST", "/processes", {
            "command": "trap 'exit 3' TERM; while :; do sleep 0.1; done"})
        if "id" in p:
            time.sleep(0.3)
            s.json("POST", "/processes/%s/signal" % p["id"], {"signal": "SIGTERM"})
            time.sleep(1.5)
            if s.json("GET", "/processes/" + p["id"])[1].get("status") == "running":
                fails.append("SIGTERM does not reach a background process")
            s.http("DELETE", "/processes/" + p["id"])
        time.sleep(max(0, 3.0 - (time.monotonic() - esc[1])))
        if esc[0] and os.path.exists(os.path.join(ws, "escapee")):
            fails.append("a setsid escapee survives")
        code, secs = s.stop(GRACE_MS // 1000 + 15)
        if code != 0:
            fails.append("SIGTERM: exit %d" % code)
        return fails
    finally:
        s.remove()


def scenario_caps(image, base_args, caps, env):
    say("\n== caps: the pod without one capability at a time, without and with SYS_ADMIN")
    pidns_env = dict(env, SBXD_ISOLATION="pidns")
    rows = []
    for cap in caps:
        rest = [c for c in caps if c != cap]
        f_uid = probe(image, base_args, rest, env, "no-%s" % cap.lower())
        f_pid = probe(image, base_args, rest + ["SYS_ADMIN"], pidns_env,
                      "no-%s-pidns" % cap.lower())
        rows.append((cap, f_uid, f_pid))
        say("  without %-12s default: %s" % (cap, "; ".join(f_uid) or "all checks pass"))
        say("  %-20s +SYS_ADMIN: %s" % ("", "; ".join(f_pid) or "all checks pass"))
    for cap, f_uid, f_pid in rows:
        check("caps: %s is needed" % cap, f_uid or f_pid,
              "every check passes without it, with and without SYS_ADMIN: drop it from %s"
              % os.path.relpath(TEMPLATE, ROOT))


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    image = sys.argv[1]
    if os.geteuid() != 0:
        print("container: run as root", file=sys.stderr)
        return 2

    def on_signal(sig, _frame):
        raise KeyboardInterrupt("signal %d" % sig)
    signal.signal(signal.SIGTERM, on_signal)
    t0 = time.monotonic()
    strays = []
    try:
        base_args, caps, env = pod_config()
        scenario_plain(image)
        scenario_pod(image, base_args, caps, env, "pod")
        scenario_pod(image, base_args, caps, env, "pidns", extra_caps=["SYS_ADMIN"],
                     extra_env={"SBXD_ISOLATION": "pidns"})
        scenario_caps(image, base_args, caps, env)
    except KeyboardInterrupt as e:
        check("interrupted", False, str(e))
    except Exception as e:  # a broken harness is a failure, reported, with cleanup
        check("harness", False, "%s: %s" % (type(e).__name__, e))
    finally:
        strays = cleanup()
    check("no sandbox process outlives its container", not strays,
          "; ".join("%d %s" % s for s in strays))
    say("\ncontainer: %d passed, %d failed (%.0f s)" % (passed, failed, time.monotonic() - t0))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
