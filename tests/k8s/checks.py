#!/usr/bin/python3
"""The k8s tier's checks: k8s/ against the agent-sandbox CRDs and sbxd's defaults.

    tests/k8s/checks.py          (tests/k8s/run installs python3-yaml and python3-jsonschema)

$SBXD_CRDS names the directory of CRDs (default ../shared/reference/agent-sandbox-crds),
$SBXD_BIN an sbxd whose --help to compare with src/config.c (default build/sbxd, if any).
Prints PASS/FAIL per check and exits 1 on any failure.
"""

import copy
import glob
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import jsonschema
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K8S = os.path.join(ROOT, "k8s")
sys.path.insert(0, os.path.join(ROOT, "tests"))
import reference  # noqa: E402 (tests/reference.py: beside the checkout or its origin)

CRDS = os.environ.get("SBXD_CRDS") or os.path.join(reference.reference_dir(),
                                                   "agent-sandbox-crds")
FLAVOURS = ("agent-sandbox", "sandbox", "standalone")  # components: exactly one of these
# What the pod needs (tests/container/run measures each; docs/kubernetes.md explains them).
CAPABILITIES = {"CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETPCAP", "SETUID"}
KINDS = {
    "agent-sandbox": {"RuntimeClass", "NetworkPolicy", "SandboxTemplate", "SandboxWarmPool"},
    "sandbox": {"RuntimeClass", "NetworkPolicy", "Sandbox"},
    "standalone": {"RuntimeClass", "NetworkPolicy", "Deployment", "Service"},
}

passed = 0
failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("PASS %s" % name)
    else:
        failed += 1
        print("FAIL %s%s" % (name, ": " + str(detail) if detail else ""))
    return ok


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def ident(o):
    return "%s/%s" % (o.get("kind"), o.get("metadata", {}).get("name"))


# ---- the CRDs ----------------------------------------------------------------------------

def strict(schema):
    """Unknown fields are errors, as kubectl's strict field validation makes them."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    s = {k: strict(v) for k, v in schema.items()}
    if (s.get("type") == "object" and "properties" in s and "additionalProperties" not in s
            and not s.get("x-kubernetes-preserve-unknown-fields")):
        s["additionalProperties"] = False
    return s


def load_crds():
    crds = {}  # (group, version, kind) -> (schema, served, storage)
    for path in sorted(glob.glob(os.path.join(CRDS, "*.yaml"))):
        for d in load_all(path):
            if d.get("kind") != "CustomResourceDefinition":
                continue
            g, kind = d["spec"]["group"], d["spec"]["names"]["kind"]
            for v in d["spec"]["versions"]:
                crds[(g, v["name"], kind)] = (strict(v["schema"]["openAPIV3Schema"]),
                                              v.get("served", False), v.get("storage", False))
    return crds


def gvk(o):
    api = o.get("apiVersion", "")
    g, _, v = api.rpartition("/")
    return g, v, o.get("kind")


def errors(schema, doc):
    v = jsonschema.Draft7Validator(schema)
    return ["%s: %s" % ("/".join(str(p) for p in e.absolute_path) or "(root)", e.message)
            for e in sorted(v.iter_errors(doc), key=lambda e: list(e.absolute_path))]


def validate(crds, o, where):
    key = gvk(o)
    if key not in crds:
        return check("%s: %s is an agent-sandbox kind the CRDs define" % (where, ident(o)),
                     False, "%s/%s %s is not in %s" % key + (CRDS,))
    schema, served, storage = crds[key]
    check("%s: %s: %s/%s is served%s" % (where, ident(o), key[0], key[1],
                                         " (the storage version)" if storage else ""), served)
    errs = errors(schema, o)
    if not o.get("metadata", {}).get("name"):
        errs.append("metadata.name missing")
    return check("%s: %s matches the CRD's openAPIV3Schema" % (where, ident(o)), not errs,
                 "; ".join(errs[:8]))


# ---- kustomize, in Python (where kubectl is missing, and to check kubectl against) ---------

def pointer(path):
    return [t.replace("~1", "/").replace("~0", "~") for t in path.lstrip("/").split("/")]


def json_patch(doc, ops):
    for op in ops:
        toks = pointer(op["path"])
        parent = doc
        for t in toks[:-1]:
            parent = parent[int(t)] if isinstance(parent, list) else parent[t]
        last = toks[-1]
        if op["op"] == "add":
            if isinstance(parent, list):
                if last == "-":
                    parent.append(copy.deepcopy(op["value"]))
                else:
                    parent.insert(int(last), copy.deepcopy(op["value"]))
            else:
                parent[last] = copy.deepcopy(op["value"])
        elif op["op"] == "replace":
            if isinstance(parent, list):
                parent[int(last)] = copy.deepcopy(op["value"])
            else:
                if last not in parent:
                    raise ValueError("replace of a missing %s" % op["path"])
                parent[last] = copy.deepcopy(op["value"])
        else:
            raise ValueError("unsupported JSON patch op %s" % op["op"])


def matches(o, target):
    g, v, kind = gvk(o)
    return all([target.get("kind") in (None, kind),
                target.get("name") in (None, o.get("metadata", {}).get("name")),
                target.get("group") in (None, g),
                target.get("version") in (None, v)])


def apply_patch(objs, p, base):
    body = p.get("patch")
    if body is None:
        with open(os.path.join(base, p["path"])) as f:
            body = f.read()
    patch = yaml.safe_load(body)
    if isinstance(patch, list):  # JSON 6902, on every target
        for o in objs:
            if matches(o, p.get("target", {})):
                json_patch(o, patch)
        return objs
    if patch.get("$patch") == "delete":
        want = (patch.get("apiVersion"), patch.get("kind"), patch["metadata"]["name"])
        return [o for o in objs if (o.get("apiVersion"), o.get("kind"),
                                    o.get("metadata", {}).get("name")) != want]
    raise ValueError("strategic merge patches other than $patch: delete are not rendered here")


def set_images(node, images):
    if isinstance(node, list):
        for x in node:
            set_images(x, images)
    elif isinstance(node, dict):
        for key, val in node.items():
            if key in ("containers", "initContainers") and isinstance(val, list):
                for c in val:
                    m = re.match(r"^([^@:]+(?::\d+/[^@:]+)?)(?::([^@]+))?(@.+)?$", c.get("image", ""))
                    for im in images:
                        if m and m.group(1) == im["name"]:
                            c["image"] = "%s:%s" % (im.get("newName", m.group(1)),
                                                    im.get("newTag", m.group(2) or "latest"))
            set_images(val, images)


def render_py(kdir):
    with open(os.path.join(kdir, "kustomization.yaml")) as f:
        k = yaml.safe_load(f)
    objs = []
    for r in k.get("resources", []):
        objs += load_all(os.path.join(kdir, r))
    for c in k.get("components", []):
        cdir = os.path.join(kdir, c)
        with open(os.path.join(cdir, "kustomization.yaml")) as f:
            ck = yaml.safe_load(f)
        if ck.get("kind") != "Component":
            raise ValueError("%s is not a Component" % c)
        for r in ck.get("resources", []):
            objs += load_all(os.path.join(cdir, r))
        for p in ck.get("patches", []):
            objs = apply_patch(objs, p, cdir)
    for p in k.get("patches", []):
        objs = apply_patch(objs, p, kdir)
    set_images(objs, k.get("images", []))
    return objs


def render_kubectl(kdir):
    p = subprocess.run(["kubectl", "kustomize", kdir], capture_output=True, text=True)
    if p.returncode != 0:
        raise ValueError(p.stderr.strip()[-500:])
    return [d for d in yaml.safe_load_all(p.stdout) if d is not None]


def by_id(objs):
    return sorted(objs, key=lambda o: (o.get("apiVersion", ""), o.get("kind", ""),
                                       o.get("metadata", {}).get("name", "")))


# ---- sbxd's defaults ---------------------------------------------------------------------

def sbxd_defaults():
    with open(os.path.join(ROOT, "src", "config.c")) as f:
        src = f.read()
    d = {}
    for m in re.finditer(r'\{"([a-z-]+)",\s*"[^"]*",\s*"(SBXD_[A-Z_]+)",\s*(?:NULL|"[^"]*"),'
                         r'\s*\w+,\s*"([^"]*)"', src):
        d[m.group(1)] = (m.group(2), m.group(3))
    d["_healthz"] = "GET /healthz" in src
    d["_v1_health"] = "GET /v1/health" in src
    d["_grpc_health"] = "grpc.health.v1" in src
    return d


def help_defaults(binary):
    p = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10)
    d = dict(re.findall(r"env (SBXD_[A-Z_]+)[^\n]*?, default ([^\s]*)", p.stdout))
    d["_healthz"] = "GET /healthz" in p.stdout
    return d


# ---- invariants --------------------------------------------------------------------------

def pod_specs(objs):
    """(object, pod metadata, pod spec) of every workload."""
    out = []
    for o in objs:
        spec = o.get("spec", {})
        if o.get("kind") in ("SandboxTemplate", "Sandbox"):
            pt = spec.get("podTemplate", {})
            out.append((o, pt.get("metadata", {}), pt.get("spec", {})))
        elif o.get("kind") == "Deployment":
            t = spec.get("template", {})
            out.append((o, t.get("metadata", {}), t.get("spec", {})))
    return out


def probe_port(probe, container):
    port = probe.get("httpGet", {}).get("port")
    if isinstance(port, str):
        named = {p.get("name"): p.get("containerPort") for p in container.get("ports", [])}
        port = named.get(port)
    return port


def check_pod(o, meta, spec, defaults, runtimeclasses, where):
    n = "%s: %s" % (where, ident(o))
    check("%s: runtimeClassName is a gVisor RuntimeClass (%s)" % (n, spec.get("runtimeClassName")),
          runtimeclasses.get(spec.get("runtimeClassName")) == "runsc",
          "RuntimeClasses: %s" % runtimeclasses)
    cs = spec.get("containers", [])
    if not check("%s: one container, sbxd" % n, len(cs) == 1 and cs[0].get("name") == "sbxd"):
        return
    c = cs[0]
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    listen = env.get("SBXD_LISTEN", defaults["listen"][1])
    port = int(listen.rsplit(":", 1)[1])
    check("%s: containerPort %d is sbxd's listening port (%s)" % (n, port, listen),
          [p.get("containerPort") for p in c.get("ports", [])] == [port] and
          c["ports"][0].get("protocol", "TCP") == "TCP")
    for kind in ("readinessProbe", "livenessProbe"):
        pr = c.get(kind, {})
        check("%s: %s is GET /healthz on port %d" % (n, kind, port),
              pr.get("httpGet", {}).get("path") == "/healthz" and probe_port(pr, c) == port and
              defaults["_healthz"], json.dumps(pr))
    sc = c.get("securityContext", {})
    caps = sc.get("capabilities", {})
    check("%s: securityContext: root without privilege escalation, read-only root" % n,
          sc.get("runAsUser") == 0 and sc.get("allowPrivilegeEscalation") is False and
          sc.get("readOnlyRootFilesystem") is True and sc.get("privileged") in (None, False),
          json.dumps(sc))
    add = set(caps.get("add", []))
    extra = add - CAPABILITIES - {"SYS_ADMIN"}
    check("%s: capabilities: drop ALL, add %s" % (n, ",".join(sorted(add))),
          caps.get("drop") == ["ALL"] and CAPABILITIES <= add and not extra and
          ("SYS_ADMIN" not in add or env.get("SBXD_ISOLATION") == "pidns"),
          "expected %s (+SYS_ADMIN with SBXD_ISOLATION=pidns only)" % sorted(CAPABILITIES))
    seccomp = (sc.get("seccompProfile") or spec.get("securityContext", {}).get("seccompProfile")
               or {}).get("type")
    check("%s: seccompProfile RuntimeDefault" % n, seccomp == "RuntimeDefault")
    check("%s: no host namespaces, no service account token" % n,
          not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")) and
          spec.get("automountServiceAccountToken") is False)
    ws = env.get("SBXD_WORKSPACE", defaults["workspace"][1])
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    check("%s: %s and /tmp, and nothing else, are writable: emptyDir volumes" % (n, ws),
          set(mounts) == {ws, "/tmp"} and all("emptyDir" in vols.get(v, {}) for v in mounts.values())
          and not any(m.get("readOnly") for m in c.get("volumeMounts", [])), json.dumps(mounts))
    res = c.get("resources", {})
    check("%s: resource requests and limits for cpu and memory" % n,
          all(k in res.get("requests", {}) and k in res.get("limits", {})
              for k in ("cpu", "memory")), json.dumps(res))
    grace_ms = int(env.get("SBXD_SHUTDOWN_GRACE_MS", defaults["shutdown-grace-ms"][1]))
    tgp = spec.get("terminationGracePeriodSeconds", 30)
    check("%s: terminationGracePeriodSeconds %d outlasts sbxd's drain (%d ms)" % (n, tgp, grace_ms),
          tgp * 1000 >= grace_ms + 5000)
    req = [r.strip() for r in env.get("SBXD_REQUIRE_ISOLATION", "").split(",")]
    check("%s: SBXD_REQUIRE_ISOLATION holds seccomp, tree_kill, capabilities" % n,
          {"seccomp", "tree_kill", "capabilities"} <= set(req), env.get("SBXD_REQUIRE_ISOLATION"))
    timeout = env.get("SBXD_TIMEOUT_MS") or (env.get("SANDBOX_EXEC_TIMEOUT_SECONDS") and
                                              float(env["SANDBOX_EXEC_TIMEOUT_SECONDS"]) * 1000)
    check("%s: a command's default timeout is set, to the python runtime's 300 s" % n,
          timeout is not None and float(timeout) == 300000, env)
    check("%s: the image is the kustomization's name 'sbxd'" % n, c.get("image") == "sbxd")
    check("%s: pod labelled app.kubernetes.io/name=sbxd" % n,
          meta.get("labels", {}).get("app.kubernetes.io/name") == "sbxd")


def port_of(addr):
    """The port of HOST:PORT, [IPV6]:PORT or :PORT, or None."""
    m = re.match(r"^(?:\[[^\]]*\]|[^:\[\]]*):(\d+)$", addr or "")
    return int(m.group(1)) if m else None


# Where agent-sandbox's sandboxd listens, and so where its SDKs dial it (REST, gRPC).
SANDBOXD_REST, SANDBOXD_GRPC = 8080, 9090


def check_sandboxd(o, spec, defaults, where):
    """components/sandboxd: both of sbxd's listeners declared, named in the KEP-539.2
    discovery variables, and probed: readiness over REST (/v1/health), startup and liveness
    over gRPC (the kubelet's grpc.health.v1 probe)."""
    n = "%s: %s" % (where, ident(o))
    c = spec["containers"][0]
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    # The HTTP API on sbxd's own port (the router's, the legacy SDK's) and on sandboxd's REST
    # port 8080, where the SDK's sandboxd mode dials it; the gRPC API on sandboxd's 9090.
    listen = [a.strip() for a in env.get("SBXD_LISTEN", defaults["listen"][1]).split(",")]
    http = port_of(defaults["listen"][1])
    rest = SANDBOXD_REST
    grpc_listen = env.get("SBXD_GRPC_LISTEN", defaults.get("grpc-listen", ("", ""))[1])
    grpc = port_of(grpc_listen)
    check("%s: SBXD_LISTEN %s: the HTTP API on %s and on sandboxd's REST port %s, every "
          "address" % (n, env.get("SBXD_LISTEN"), http, rest),
          sorted(port_of(a) or 0 for a in listen) == sorted([http, rest]) and
          all(a.startswith(("0.0.0.0:", "[::]:", ":")) for a in listen), json.dumps(env))
    check("%s: SBXD_GRPC_LISTEN %s listens on every address (kubelet probes the pod IP)" %
          (n, grpc_listen), "SBXD_GRPC_LISTEN" in env and grpc == SANDBOXD_GRPC and
          grpc_listen.startswith(("0.0.0.0:", "[::]:", ":")), json.dumps(env))
    check("%s: containerPorts %s http, %s rest, %s grpc, and no other" % (n, http, rest, grpc),
          sorted((p.get("containerPort"), p.get("name"), p.get("protocol", "TCP"))
                 for p in c.get("ports", [])) == sorted([(http, "http", "TCP"),
                                                        (rest, "rest", "TCP"),
                                                        (grpc, "grpc", "TCP")]),
          json.dumps(c.get("ports")))
    for var, port in (("SANDBOXD_GRPC_ADDR", grpc), ("SANDBOXD_REST_ADDR", rest)):
        check("%s: %s is localhost:%s" % (n, var, port),
              env.get(var) == "localhost:%s" % port, env.get(var))
    rp = c.get("readinessProbe", {})
    check("%s: readinessProbe is GET /v1/health on port %s" % (n, rest),
          rp.get("httpGet", {}).get("path") == "/v1/health" and probe_port(rp, c) == rest and
          defaults["_v1_health"], json.dumps(rp))
    for kind in ("startupProbe", "livenessProbe"):
        pr = c.get(kind, {})
        check("%s: %s is the kubelet's gRPC probe on port %s (grpc.health.v1, service \"\")"
              % (n, kind, grpc),
              set(pr) & {"grpc", "httpGet", "tcpSocket", "exec"} == {"grpc"} and
              pr["grpc"].get("port") == grpc and not pr["grpc"].get("service") and
              defaults["_grpc_health"], json.dumps(pr))
    sp = c.get("startupProbe", {})
    check("%s: startupProbe allows %ss before liveness takes over" %
          (n, sp.get("periodSeconds", 10) * sp.get("failureThreshold", 3)),
          sp.get("periodSeconds", 10) * sp.get("failureThreshold", 3) >= 10)


def check_secrets(o, spec, token, where):
    """Every Secret volume is root's alone (0400): commands run as another user and must not
    read it (sbxd refuses a --token-file they could read). With components/token,
    SBXD_TOKEN_FILE names a file of such a volume, mounted read-only."""
    n = "%s: %s" % (where, ident(o))
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    for v in vols.values():
        if "secret" in v:
            sec = v["secret"]
            check("%s: Secret volume %s has defaultMode 0400" % (n, v["name"]),
                  sec.get("defaultMode") == 0o400 and
                  all(i.get("mode", 0o400) == 0o400 for i in sec.get("items", [])),
                  json.dumps(sec))
    c = spec["containers"][0]
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    tf = env.get("SBXD_TOKEN_FILE")
    if not token:
        check("%s: no token file without components/token" % n, tf is None, tf)
        return
    mounts = [m for m in c.get("volumeMounts", []) if tf and tf.startswith(m["mountPath"] + "/")]
    check("%s: SBXD_TOKEN_FILE %s is in a read-only Secret volume of mode 0400" % (n, tf),
          len(mounts) == 1 and mounts[0].get("readOnly") is True and
          vols.get(mounts[0]["name"], {}).get("secret", {}).get("defaultMode") == 0o400,
          json.dumps(mounts))


def normalised_pod(meta, spec):
    return json.dumps(spec, sort_keys=True)


def check_network(objs, crds, where, sandboxd=False, egress_open=False):
    """The legacy flavour: ingress only from the router on 8888. With components/sandboxd,
    besides that rule one more: in-cluster clients (pods of any namespace, no address
    block) on sandboxd's REST and gRPC ports, which the SDK dials on the pod IP or the
    headless Service. Egress denied unless components/egress-internet opens it."""
    tmpl = [o for o in objs if o.get("kind") == "SandboxTemplate"]
    nps = [o for o in objs if o.get("kind") == "NetworkPolicy"]
    pods = pod_specs(objs)
    router = {"app": "sandbox-router"}

    def ports(r):
        return sorted((p.get("protocol", "TCP"), p.get("port")) for p in r.get("ports", []))

    def router_rule(r):
        return bool(r.get("from")) and ports(r) == [("TCP", 8888)] and all(
            peer.get("podSelector", {}).get("matchLabels") == router and "ipBlock" not in peer
            for peer in r["from"])

    def in_cluster_rule(r):
        return bool(r.get("from")) and \
            ports(r) == [("TCP", SANDBOXD_REST), ("TCP", SANDBOXD_GRPC)] and \
            all(set(peer) <= {"podSelector", "namespaceSelector"} and "namespaceSelector" in peer
                for peer in r["from"])

    def router_only(rules):
        if sandboxd:
            return len(rules) == 2 and sum(map(router_rule, rules)) == 1 and \
                sum(map(in_cluster_rule, rules)) == 1
        return bool(rules) and all(router_rule(r) for r in rules)

    what = ("ingress from the router on 8888 and from in-cluster clients on %d and %d" %
            (SANDBOXD_REST, SANDBOXD_GRPC) if sandboxd else "ingress only from the router on 8888")

    for t in tmpl:
        npol = t["spec"].get("networkPolicy")
        check("%s: %s: a managed NetworkPolicy: %s, %s" %
              (where, ident(t), what, "egress opened" if egress_open else "no egress"),
              t["spec"].get("networkPolicyManagement", "Managed") == "Managed" and npol is not None
              and router_only(npol.get("ingress", [])) and
              (egress_open or not npol.get("egress")), json.dumps(npol))
        check("%s: %s: a Service per sandbox (the router's way in)" % (where, ident(t)),
              t["spec"].get("service") is True)
    ing_schema = eg_schema = None
    for key, (schema, _, _) in crds.items():
        if key[2] == "SandboxTemplate" and key[1] == "v1beta1":
            npp = schema["properties"]["spec"]["properties"]["networkPolicy"]["properties"]
            ing_schema, eg_schema = npp["ingress"], npp["egress"]
    for np in nps:
        s = np.get("spec", {})
        sel = s.get("podSelector", {}).get("matchLabels", {})
        covered = all(all(meta.get("labels", {}).get(k) == v for k, v in sel.items())
                      for _, meta, _ in pods)
        check("%s: %s selects every sbxd pod" % (where, ident(np)), bool(sel) and covered,
              json.dumps(sel))
        check("%s: %s: %s, egress %s" % (where, ident(np), what,
                                          "opened" if egress_open else "denied"),
              sorted(s.get("policyTypes", [])) == ["Egress", "Ingress"] and
              router_only(s.get("ingress", [])) and (egress_open or s.get("egress") == []),
              json.dumps(s)[:400])
        if ing_schema:
            errs = errors(ing_schema, s.get("ingress", [])) + errors(eg_schema, s.get("egress", []))
            check("%s: %s: rules match the NetworkPolicy rule schema (from the CRD)" %
                  (where, ident(np)), not errs, "; ".join(errs[:5]))


def check_objects(objs, crds, defaults, where, rendered):
    for o in objs:
        if gvk(o)[0].endswith("agents.x-k8s.io"):
            validate(crds, o, where)
    rcs = {o["metadata"]["name"]: o.get("handler") for o in objs if o.get("kind") == "RuntimeClass"}
    pods = pod_specs(objs)
    pod_schema = None
    for key, (schema, _, _) in crds.items():
        if key[2] == "SandboxTemplate" and key[1] == "v1beta1":
            pod_schema = schema["properties"]["spec"]["properties"]["podTemplate"]
    for o, meta, spec in pods:
        if o.get("kind") == "Deployment" and pod_schema:
            errs = errors(pod_schema, {"metadata": {"labels": meta.get("labels", {})},
                                       "spec": spec})
            check("%s: %s: the pod spec matches the core Pod schema (from the CRD)" %
                  (where, ident(o)), not errs, "; ".join(errs[:8]))
        if not rendered:
            check_pod(o, meta, spec, defaults, rcs, where)
    specs = {ident(o): normalised_pod(meta, spec) for o, meta, spec in pods}
    if len(specs) > 1:
        first = next(iter(specs.values()))
        check("%s: the same pod spec in %s" % (where, ", ".join(specs)),
              all(s == first for s in specs.values()))
    check_network(objs, crds, where)


def main():
    print("k8s: manifests in %s, CRDs in %s" % (os.path.relpath(K8S, ROOT), CRDS))
    crds = load_crds()
    if not check("the agent-sandbox CRDs are there (%d kind versions)" % len(crds), crds, CRDS):
        return 1
    defaults = sbxd_defaults()
    check("sbxd's defaults from src/config.c: listen %s, grpc-listen %s, workspace %s, grace %s "
          "ms, GET /healthz, GET /v1/health, grpc.health.v1"
          % (defaults.get("listen", ("", "?"))[1], defaults.get("grpc-listen", ("", "?"))[1],
             defaults.get("workspace", ("", "?"))[1],
             defaults.get("shutdown-grace-ms", ("", "?"))[1]),
          all(k in defaults for k in ("listen", "grpc-listen", "workspace", "shutdown-grace-ms"))
          and defaults["_healthz"] and defaults["_v1_health"] and defaults["_grpc_health"])
    binary = os.environ.get("SBXD_BIN") or os.path.join(ROOT, "build", "sbxd")
    if os.access(binary, os.X_OK):
        h = help_defaults(binary)
        check("%s --help agrees with src/config.c" % os.path.relpath(binary, ROOT),
              all(h.get(defaults[k][0]) == defaults[k][1]
                  for k in ("listen", "workspace", "shutdown-grace-ms")) and h["_healthz"],
              json.dumps({k: h.get(defaults[k][0]) for k in ("listen", "workspace")}))

    # As written: every file, every document.
    files = sorted(set(glob.glob(os.path.join(K8S, "*.yaml"))) -
                   {os.path.join(K8S, "kustomization.yaml")})
    written = []
    for f in files:
        docs = load_all(f)
        check("%s parses (%d objects)" % (os.path.relpath(f, ROOT), len(docs)), docs)
        written += docs
    check_objects(written, crds, defaults, "as written", rendered=False)
    pools = [o for o in written if o.get("kind") == "SandboxWarmPool"]
    names = {o["metadata"]["name"] for o in written if o.get("kind") == "SandboxTemplate"}
    for p in pools:
        check("as written: %s names the template %s" % (ident(p), p["spec"]["sandboxTemplateRef"]["name"]),
              p["spec"]["sandboxTemplateRef"]["name"] in names)
    pool_names = {p["metadata"]["name"] for p in pools}
    for cl in [o for o in written if o.get("kind") == "SandboxClaim"]:
        check("as written: %s claims from the pool %s" % (ident(cl), cl["spec"]["warmPoolRef"]["name"]),
              cl["spec"]["warmPoolRef"]["name"] in pool_names)
    svc = [o for o in written if o.get("kind") == "Service"]
    deps = [o for o in written if o.get("kind") == "Deployment"]
    for s in svc:
        sel = s["spec"].get("selector", {})
        ok = any(all(d["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in sel.items())
                 for d in deps)
        check("as written: %s selects the Deployment's pods, port 8888 -> http" % ident(s),
              ok and [(p.get("port"), p.get("targetPort")) for p in s["spec"]["ports"]] ==
              [(8888, "http")])

    # The kustomization: the image named once, the tag the project's version.
    with open(os.path.join(K8S, "kustomization.yaml")) as f:
        kz = yaml.safe_load(f)
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        version = re.search(r"project\(sbxd VERSION ([0-9.]+)", f.read()).group(1)
    imgs = kz.get("images", [])
    check("kustomization: the image is named in one place (%s)" % imgs,
          len(imgs) == 1 and imgs[0].get("name") == "sbxd" and imgs[0].get("newName"))
    check("kustomization: its tag is the project's version %s" % version,
          imgs and str(imgs[0].get("newTag")) == version)
    listed = {os.path.join(K8S, r) for r in kz.get("resources", [])}
    check("kustomization: lists every manifest but the per-session claim",
          listed == set(files) - {os.path.join(K8S, "sandboxclaim.yaml")},
          "missing %s" % sorted(os.path.basename(f) for f in set(files) - listed))
    comps = kz.get("components", [])
    check("kustomization: one way to run sbxd is chosen (%s)" % (comps[:1]),
          len([c for c in comps if os.path.basename(c) in FLAVOURS]) == 1 and
          os.path.basename(comps[0]) in FLAVOURS)

    # Rendered: every way to run sbxd with every set of opt-ins.
    kubectl = shutil.which("kubectl")
    if not kubectl:
        print("k8s: kubectl not found: rendering with the Python equivalent only")
    optins = sorted(d for d in os.listdir(os.path.join(K8S, "components"))
                    if d not in FLAVOURS and os.path.isdir(os.path.join(K8S, "components", d)))
    image = "%s:%s" % (imgs[0]["newName"], imgs[0]["newTag"]) if imgs else "?"
    tmp = tempfile.mkdtemp(prefix="sbxd-k8s-")
    try:
        # Every set of opt-ins; components/token (which touches nothing the others do) alone
        # and with all of them, to keep the renderings few.
        others = [o for o in optins if o != "token"]
        sets = [c for n in range(len(others) + 1) for c in itertools.combinations(others, n)]
        if "token" in optins:
            sets += [("token",), tuple(others) + ("token",)]
        for flavour in FLAVOURS:
            for opts in sets:
                kdir = os.path.join(tmp, "k8s")
                shutil.rmtree(kdir, ignore_errors=True)
                shutil.copytree(K8S, kdir)
                k = copy.deepcopy(kz)
                k["components"] = ["components/" + c for c in (flavour,) + opts]
                with open(os.path.join(kdir, "kustomization.yaml"), "w") as f:
                    yaml.safe_dump(k, f)
                where = "+".join((flavour,) + opts)
                try:
                    py = render_py(kdir)
                except Exception as e:
                    check("%s: rendered in Python" % where, False, e)
                    continue
                objs = py
                if kubectl:
                    try:
                        objs = render_kubectl(kdir)
                    except ValueError as e:
                        check("%s: kubectl kustomize succeeds" % where, False, e)
                        continue
                    check("%s: kubectl kustomize succeeds, and agrees with the Python "
                          "rendering" % where, by_id(objs) == by_id(py),
                          "they differ: see render_py")
                kinds = {o["kind"] for o in objs}
                check("%s: renders %s" % (where, ", ".join(sorted(kinds))),
                      kinds == KINDS[flavour], "expected %s" % sorted(KINDS[flavour]))
                imgs_seen = {c["image"] for _, _, s in pod_specs(objs) for c in s["containers"]}
                check("%s: every pod runs %s" % (where, image), imgs_seen == {image},
                      imgs_seen)
                for o in objs:
                    if gvk(o)[0].endswith("agents.x-k8s.io"):
                        validate(crds, o, where)
                for o, meta, spec in pod_specs(objs):
                    add = set(spec["containers"][0]["securityContext"]["capabilities"]["add"])
                    want = CAPABILITIES | ({"SYS_ADMIN"} if "pidns" in opts else set())
                    check("%s: %s capabilities %s" % (where, ident(o), ",".join(sorted(add))),
                          add == want)
                for o, meta, spec in pod_specs(objs):
                    check_secrets(o, spec, "token" in opts, where)
                for o, meta, spec in pod_specs(objs):
                    if "sandboxd" in opts:
                        check_sandboxd(o, spec, defaults, where)
                    else:
                        c = spec["containers"][0]
                        check("%s: %s: no gRPC port or probe without components/sandboxd"
                              % (where, ident(o)),
                              [p.get("containerPort") for p in c.get("ports", [])] == [8888]
                              and "startupProbe" not in c and
                              "grpc" not in c.get("livenessProbe", {}))
                check_network(objs, crds, where, sandboxd="sandboxd" in opts,
                              egress_open="egress-internet" in opts)
                if "sandboxd" in opts:
                    svcs = [o for o in objs if o["kind"] == "Service"]
                    check("%s: the Service forwards 8888 http, 8080 rest and 9090 grpc" % where,
                          all([(p.get("port"), p.get("targetPort")) for p in s["spec"]["ports"]]
                              == [(8888, "http"), (8080, "rest"), (9090, "grpc")]
                              for s in svcs))
                if "egress-internet" in opts:
                    eg = [o["spec"].get("egress") for o in objs if o["kind"] == "NetworkPolicy"]
                    eg += [o["spec"]["networkPolicy"].get("egress") for o in objs
                           if o["kind"] == "SandboxTemplate"]
                    check("%s: egress opened to DNS and public addresses only" % where,
                          all(e and len(e) == 2 for e in eg) and
                          all("10.0.0.0/8" in json.dumps(e) and "169.254.0.0/16" in
                              json.dumps(e) for e in eg))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    # The documentation names what the manifests grant.
    doc = os.path.join(ROOT, "docs", "kubernetes.md")
    if check("docs/kubernetes.md exists", os.path.exists(doc)):
        with open(doc) as f:
            text = f.read()
        missing = [c for c in sorted(CAPABILITIES | {"SYS_ADMIN"}) if c not in text]
        check("docs/kubernetes.md explains every capability", not missing, missing)
        missing = [w for w in ("sandboxd mode (gRPC)", "components/sandboxd", "SANDBOXD_GRPC_ADDR",
                               "SANDBOXD_REST_ADDR", "SandboxdPodTunnelConnectionConfig")
                   if w not in text]
        check("docs/kubernetes.md explains the sandboxd mode", not missing, missing)
        missing = [w for w in ("8080", "9090", "pod IP", "headless Service", "in-cluster",
                               "pod name", "runtime selection", "--listen")
                   if w not in text]
        check("docs/kubernetes.md explains the sandboxd ports, the direct connectivity modes "
              "and the policy that admits them", not missing, missing)
        missing = [w for w in ("components/token", "defaultMode: 0400") if w not in text]
        check("docs/kubernetes.md explains the token component", not missing, missing)

    print("\nk8s: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
